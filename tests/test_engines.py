"""Engines (hw_profiles/engine.py): the limit that keeps today's pricing, how an engine's loop is
carried to a box, host speed, chain-only engines, the files' checks and the `--engine` options."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from specscope.cli import app, main
from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.deployment import deployment
from specscope.hw_profiles.engine import ENGINE_NAMES, host_scale, load_engine
from specscope.hw_profiles.loop import SERVER_TERMS, LoopCosts
from specscope.hw_profiles.pricing import Pricing, deployed
from specscope.models import get_model
from specscope.simulator.policies.base import Speculation
from specscope.simulator.pricing import BatchPricer
from specscope.tree import Tree

TREES = [Tree.chain(5, "draft"), Tree(np.array([-1, 0, 0, 1, 1, 2]), np.array([0, 0, 1, 0, 1, 0]),
                                      ("root", *["draft"] * 5))]


def on_engine(engine: str | None, target: CostModel, draft: CostModel | None, context: int,
              batch: int = 1, **stated: str) -> Pricing:
    """`Pricing` of the models as the deployment of `engine` and the `stated` options runs
    them."""
    return deployed(deployment(target.hw.name, engine=engine, batch=batch, **stated), target,
                    draft, context)


def _engine_file(tmp_path: Path, body: str, sources: str = 'loop = "test"\n') -> str:
    path = tmp_path / "e.toml"
    path.write_text('name = "e"\ndescription = "test"\ntree_attention = "split"\n'
                    f'baseline = "e"\n{body}\n[sources]\n{sources}')
    load_engine.cache_clear()
    return str(path)


def _models(hw: str, runtime: str | None = None) -> tuple[CostModel, CostModel]:
    profile = load_profile(hw)
    return (CostModel(profile, get_model("llama-3.1-8b"), runtime=runtime),
            CostModel(profile, get_model("llama-68m"), runtime=runtime))


@pytest.mark.parametrize("hw, runtime", [("cpu-2core", "eager"), ("h100", "graph"),
                                         ("a100", "eager")])
def test_an_engine_with_the_boxs_own_loop_and_one_runtime_prices_as_before(
        tmp_path: Path, hw: str, runtime: str) -> None:
    path = _engine_file(tmp_path, f'target_runtime = "{runtime}"\ndraft_runtime = "{runtime}"\n'
                                  '[loop]\nfrom_profile = true')
    target, draft = _models(hw, runtime)
    before = Pricing(target, draft, 700)
    for engine in (path, "specscope"):
        after = on_engine(engine, target, draft, 700, runtime=runtime)
        for tree in TREES:
            assert after.tree_step_s(tree) == pytest.approx(before.tree_step_s(tree), rel=1e-9)
        assert after.autoregressive_s == pytest.approx(before.autoregressive_s, rel=1e-9)
        assert after.level_s("ngram") == pytest.approx(before.level_s("ngram"), rel=1e-9)


def test_an_engine_with_zero_bookkeeping_prices_a_gpu_as_before(tmp_path: Path) -> None:
    path = _engine_file(tmp_path, '[loop]\nstep_us = 0')
    target, draft = _models("h100")
    before, after = Pricing(target, draft, 512), on_engine(path, target, draft, 512)
    assert after.tree_step_s(TREES[1]) == pytest.approx(before.tree_step_s(TREES[1]), rel=1e-9)


def test_no_engine_is_todays_pricing() -> None:
    target, draft = _models("a100")
    assert on_engine(None, target, draft, 512).tree_step_s(TREES[1]) == \
        Pricing(target, draft, 512).tree_step_s(TREES[1])


def test_a_loop_measured_on_one_host_is_carried_by_the_eager_layer_ratio(tmp_path: Path
                                                                         ) -> None:
    cpu, gpu = load_profile("cpu-2core"), load_profile("h100")
    factor = host_scale(cpu, gpu)
    assert factor == pytest.approx(gpu.runtimes["eager"].host_layer_s
                                   / cpu.runtimes["eager"].host_layer_s)
    path = _engine_file(tmp_path, '[loop]\nfrom_profile = true\nmeasured_on = "cpu-2core"\n'
                        'uncarried = ["node"]')
    loop = load_engine(path).loop_costs(gpu)
    assert loop.step == pytest.approx(cpu.loop.step * factor)
    assert loop.level == pytest.approx(cpu.loop.level * factor)
    assert loop.draft_cold == 0.0 and loop.verify_cold == 0.0  # the CPU's cache effects stay
    assert loop.node == cpu.loop.node  # uncarried: CPU-tensor and Python work per node
    # on the host that measured it, the loop is that host's own
    own = load_engine(path).loop_costs(cpu)
    # specscope's own server (its terms, padding, per-row draft work) is not an engine's loop:
    # its terms stay unmeasured (their defaults)
    assert own == dataclasses.replace(cpu.loop, pads_context=False, level_per_row=False,
                                      **{t: getattr(LoopCosts(), t) for t in SERVER_TERMS})


def test_research_code_timed_beside_a_layer_is_carried_by_that_layers_issue_time() -> None:
    """research-hf states EAGLE-2's loop as benchmarks/research_loops.py timed it on cpu-2core
    beside specscope's layer (reference_layer_us); a box pays it × its own eager layer over that
    reference, and the model-free drafters' calls come from cpu-2core's profile."""
    cpu, gpu = load_profile("cpu-2core"), load_profile("h100")
    engine = load_engine("research-hf")
    factor = gpu.runtimes["eager"].host_layer_s / gpu.host_speed / engine.reference_layer_s
    loop = engine.loop_costs(gpu)
    assert loop.step == pytest.approx(369.4e-6 * factor)
    # its per-node Python and CPU-tensor work is taken as measured, on the box's host speed
    assert loop.tree_node == pytest.approx(7.1e-6 / gpu.host_speed)
    assert loop.node == pytest.approx(3.9e-6 / gpu.host_speed)
    assert loop.verify == 0.0 and loop.accepted == 0.0  # inside step; measured ≈ 0
    assert loop.drafter == {k: v * host_scale(cpu, gpu) for k, v in cpu.loop.drafter.items()}
    # what research_loops.py did not time is specscope's loop's, carried from cpu-2core
    assert loop.stop_rule == pytest.approx(cpu.loop.stop_rule * host_scale(cpu, gpu))
    assert loop.sampled_verify == pytest.approx(cpu.loop.sampled_verify * host_scale(cpu, gpu))


def test_an_engine_refuses_to_leave_uncarried_a_term_it_neither_states_nor_takes(
        tmp_path: Path) -> None:
    path = _engine_file(tmp_path, '[loop]\nstep_us = 10\nuncarried = ["level"]')
    with pytest.raises(InputError, match=r"uncarried names terms neither"):
        load_engine(path)


def test_a_verified_tree_pays_the_loops_work_per_node() -> None:
    target, draft = _models("a100")
    priced = on_engine("research-hf", target, draft, 512)
    per_node = priced.loop.tree_node
    assert per_node > 0
    wide, narrow = priced.verify_s(60, 6), priced.verify_s(20, 6)
    forward = (float(priced.target.verify_time(60, 512, depth=6))
               - float(priced.target.verify_time(20, 512, depth=6)))
    assert wide - narrow == pytest.approx(forward + 40 * per_node)
    table = priced.step_table(60, 6, "draft")
    assert table[60, 6] - table[20, 6] == pytest.approx(wide - narrow)


def test_a_faster_host_issues_eager_steps_faster() -> None:
    hw = load_profile("a100")
    fast = dataclasses.replace(hw, host_speed=2.0)
    spec = get_model("llama-2-7b")
    slow_host = CostModel(hw, spec, runtime="eager").host_time(512)
    assert CostModel(fast, spec, runtime="eager").host_time(512) == pytest.approx(slow_host / 2)
    # and the engines' host terms carried to it shrink with it
    engine = load_engine("research-hf")
    assert engine.loop_costs(fast).step == pytest.approx(engine.loop_costs(hw).step / 2)


def test_the_engines_runtimes_tree_attention_and_model_code_apply() -> None:
    target, draft = _models("a100")
    priced = on_engine("research-hf", target, draft, 512)
    assert priced.target.runtime.name == "eager" and priced.drafter.runtime.name == "eager"
    ratio = load_engine("research-hf").host_layer_ratio
    assert priced.target.runtime.host_layer_s == pytest.approx(
        target.hw.runtimes["eager"].host_layer_s * ratio)
    mixed = on_engine("research-hf", target, draft, 512, draft_runtime="graph")
    assert mixed.drafter.runtime.name == "graph" and mixed.target.runtime.name == "eager"
    # a Spec-Bench-style baseline: stock generate pays its own work per token
    stock = on_engine("research-hf", target, draft, 512, baseline_engine="hf-eager")
    own, hf = (load_engine(e).loop_costs(target.hw).baseline_token
               for e in ("research-hf", "hf-eager"))
    assert stock.autoregressive_s == pytest.approx(priced.autoregressive_s - own + hf)
    assert hf > own > 0  # generate's own work per token, and EAGLE's plain loop's


def test_a_serving_engine_computes_a_prompts_logits_at_its_last_position_only() -> None:
    """vLLM's prompt forward runs the lm_head on one token per sequence; decoding and
    verification keep every position's logits."""
    target, draft = _models("h100")
    priced = on_engine("vllm", target, draft, 512, batch=8)
    plain = priced.target.under(prompt_logits="all")
    assert priced.target.prompt_logits == "last" and priced.drafter.prompt_logits == "last"
    assert priced.baseline.prompt_logits == "last"

    def head(model, new: int, context: int) -> float:
        return next(op for op in model.ops(8, new, context) if op.op == "lm_head").tokens

    assert head(priced.target, 512, 0) == 8 and head(plain, 512, 0) == 8 * 512
    assert head(priced.target, 5, 512) == head(plain, 5, 512) == 8 * 5
    assert priced.target.forward_time(8, 512, 0) < plain.forward_time(8, 512, 0)
    assert priced.target.forward_time(8, 5, 512) == pytest.approx(plain.forward_time(8, 5, 512))
    assert on_engine("research-hf", target, draft, 512).target.prompt_logits == "all"


def test_a_chain_only_engine_refuses_a_branching_tree() -> None:
    target, draft = _models("a100")
    priced = on_engine("hf-eager", target, draft, 512)
    assert priced.tree_step_s(TREES[0]) > 0
    with pytest.raises(InputError, match="verifies chains only"):
        priced.tree_step_s(TREES[1])


@pytest.mark.parametrize("body, sources, message", [
    ('[loop]\nstep_us = -1', 'loop = "x"\n', "step_us must be a number"),
    ('[loop]\nwhatever_us = 1', 'loop = "x"\n', "unknown key 'whatever_us'"),
    ('target_runtime = "jit"', '', "target_runtime 'jit'"),
    ('[loop]\nstep_us = 3', '', "says nothing of 'step_us'"),
    ('host_layer_ratio = 0.5', '', "says nothing of 'host_layer_ratio'"),
    ('device_layer_ratio = 0.5', '', "says nothing of 'device_layer_ratio'"),
    ('device_layer_ratio = 0', 'device_layer_ratio = "x"\n', "device_layer_ratio must be"),
    ('[loop]\nfrom_profile = true', '', "says nothing of 'loop'"),
    ('[loop]\nfrom_profile = ["step", "speed"]', 'loop = "x"\n', "from_profile must be"),
    ('[loop]\nfrom_profile = ["step"]\nuncarried = ["node"]', 'loop = "x"\n', "uncarried names"),
    ('draft_cache = "yes"', 'loop = "x"\n', "draft_cache must be true or false"),
    ('draft_cache = true', '', "says nothing of 'draft_cache'"),
    ('[loop]\nbatched_step = 1', 'loop = "x"\n', "batched_step must be true or false"),
    ('[scheduler]\nmax_batch = 0', 'loop = "x"\nmax_batch = "x"\n', "max_batch must be a whole"),
    ('[scheduler]\nmax_batch = 64', '', "says nothing of 'max_batch'"),
    ('[scheduler]\nqueue = 3', 'loop = "x"\n', "takes max_batch and max_batch_speculative only"),
    ('prompt_logits = "first"', 'loop = "x"\n', "prompt_logits must be one of all, last"),
    ('prompt_logits = "last"', '', "says nothing of 'prompt_logits'"),
    ('draft_at_target_tp = 1', 'loop = "x"\n', "draft_at_target_tp must be true or false"),
    ('draft_at_target_tp = true', '', "says nothing of 'draft_at_target_tp'"),
    ('[scheduler]\nmax_batch_speculative = true', 'loop = "x"\nmax_batch_speculative = "x"\n',
     "max_batch_speculative must be a whole"),
    ('[scheduler]\nmax_batch_speculative = 48', '', "says nothing of 'max_batch_speculative'"),
])
def test_a_bad_engine_file_is_one_clear_error(tmp_path: Path, body: str, sources: str,
                                              message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_engine(_engine_file(tmp_path, body, sources))


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_every_shipped_engine_prices_a_step_on_every_gpu_profile(name: str) -> None:
    engine = load_engine(name)
    for hw in ("a100", "h100", "h200", "rtx-3090", "l40"):
        target, draft = _models(hw)
        priced = on_engine(name, target, draft, 512)
        assert priced.tree_step_s(TREES[0]) > priced.autoregressive_s > 0
    # Python loops pay host work per step on a GPU; the C++ runtimes state none
    step = engine.loop_costs(load_profile("h100")).step
    assert (step > 0) == (name not in ("specscope", "tensorrt-llm", "llama.cpp"))


@pytest.mark.parametrize("command", [
    ["cost", "--hw", "a100", "--target", "llama-2-7b"],
    ["optimize-tree", "--hw", "a100", "--acceptance", "0.5", "--budget", "4"],
    ["simulate", "--hw", "a100", "--target", "llama-2-7b", "--rate", "1", "--requests", "2",
     "--seed", "0"],
])
def test_an_unknown_engine_is_one_line_and_exit_2(command: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*command, "--engine", "turbo"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "turbo" in err and len(err.strip().splitlines()) == 1


def test_optimize_tree_on_a_chain_engine_skips_the_tree_methods() -> None:
    result = CliRunner().invoke(app, ["optimize-tree", "--hw", "a100", "--target", "llama-2-7b",
                                      "--acceptance",
                                      "0.5,0.2,0.1", "--budget", "8", "--engine", "gpt-fast",
                                      "--json"])
    assert result.exit_code == 0, result.output
    import json

    doc = json.loads(result.output)
    assert doc["engine"] == "gpt-fast"
    assert {r["algo"] for r in doc["results"]} <= {"chain", "any-size"}  # the best chain ≤ 8
    for r in doc["results"]:
        parents = r["tree"]["parents"][1:]
        assert len(set(parents)) == len(parents), f"{r['algo']} is not a chain"
    assert "verifies chains only" in doc["skipped"]["sequoia"]


def test_simulate_prices_the_engines_loop() -> None:
    from specscope.simulator.run import SimulateRequest, run_simulation

    def run(engine: str | None) -> dict:
        return run_simulation(SimulateRequest(
            deployment=deployment("a100", target="llama-2-7b", drafter="llama-68m", engine=engine),
            acceptance=(0.5, 0.2, 0.1), policy="dyspec", rate=1.0, requests=20, seed=0)).summary

    plain, research = run(None), run("research-hf")
    assert research["engine"] == "research-hf" and plain["engine"] == "specscope"
    assert research["mean_tpot_ms"] > plain["mean_tpot_ms"]  # eager, with the loop's host work


def _scenario(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "paper.toml"
    path.write_text('[[case]]\nname = "c"\nsystem = "head"\nhw = "a100"\ntarget = "llama-3-8b"\n'
                    f'tree = "4,4,4"\ntau = 3.0\npublished_speedup = 2.0\n{extra}\n')
    return path


def test_a_case_names_its_engine_and_its_terms_add_up(tmp_path: Path) -> None:
    from specscope.systems.reproduce import provenance, reproduce, summarise

    plain = reproduce(_scenario(tmp_path, ""))[0]
    row = reproduce(_scenario(tmp_path, 'engine = "research-hf"\nbaseline_engine = "hf-eager"'))[0]
    terms = row.terms_ms
    assert sum(v for k, v in terms.items() if k != "baseline") == pytest.approx(
        row.prediction.step_s * 1e3)
    assert terms["bookkeeping"] > plain.terms_ms["bookkeeping"]
    assert row.to_dict()["engine"] == "research-hf"
    lines = provenance([row])
    assert any(line.startswith("engine hf-eager: baseline_token_us") for line in lines)
    assert any(line.startswith("host of a100") for line in lines)
    assert summarise([row, plain])[-1].cases == 2


def test_a_case_with_an_unknown_engine_names_the_case(tmp_path: Path) -> None:
    from specscope.systems.reproduce import reproduce

    with pytest.raises(InputError, match=r"case 'c'.*turbo"):
        reproduce(_scenario(tmp_path, 'engine = "turbo"'))


def test_a_papers_tree_on_a_chain_only_engine_names_the_case(tmp_path: Path) -> None:
    from specscope.systems.reproduce import reproduce

    with pytest.raises(InputError, match=r"case 'c'.*hf-eager verifies chains only.*4,4,4"):
        reproduce(_scenario(tmp_path, 'engine = "hf-eager"'))


def test_an_engines_work_per_accepted_token_is_paid_per_token_the_step_yields(
        tmp_path: Path) -> None:
    from specscope.optimizers.scoring import score_tree

    path = _engine_file(tmp_path, '[loop]\naccepted_us = 100', 'loop = "test"\n')
    target, draft = _models("a100")
    plain, compacting = Pricing(target, draft, 512), on_engine(path, target, draft, 512)
    assert compacting.bookkeeping_for(3.0) - plain.bookkeeping_for(3.0) == pytest.approx(3e-4)
    extra = (score_tree("x", TREES[1], 2.5, compacting).step_time_s
             - score_tree("x", TREES[1], 2.5, plain).step_time_s)
    assert extra == pytest.approx(2.5e-4)


def test_an_engine_takes_only_the_measured_terms_it_names() -> None:
    cpu, gpu = load_profile("cpu-2core"), load_profile("h100")
    loop = load_engine("gpt-fast").loop_costs(gpu)  # from_profile = ["step", "verify"]
    factor = host_scale(cpu, gpu)
    assert loop.step == pytest.approx(cpu.loop.step * factor)
    assert loop.verify == pytest.approx(cpu.loop.verify * factor)
    assert loop.level == loop.node == 0.0 and loop.drafter == {}


def test_a_fused_engines_layers_cost_their_share_of_the_fixed_device_time(tmp_path: Path
                                                                          ) -> None:
    target, draft = _models("h100", "graph")
    one = on_engine(_engine_file(tmp_path, 'target_runtime = "graph"\ndevice_layer_ratio = 1'),
                     target, draft, 512)
    assert one.autoregressive_s == pytest.approx(Pricing(target, draft, 512).autoregressive_s)
    half = on_engine(_engine_file(tmp_path, 'target_runtime = "graph"\ndevice_layer_ratio = 0.5',
                                   'loop = "x"\ndevice_layer_ratio = "x"\n'),
                      target, draft, 512)
    saved = 0.5 * target.runtime.layer_s * target.model.n_layers
    assert one.autoregressive_s - half.autoregressive_s == pytest.approx(saved, rel=1e-6)
    assert half.level_s("draft") < one.level_s("draft")


def test_a_draft_that_caches_its_levels_forwards_only_the_nodes_it_expands(tmp_path: Path) -> None:
    target, draft = _models("h100")
    with_cache = on_engine(_engine_file(tmp_path, "draft_cache = true",
                                        'loop = "x"\ndraft_cache = "x"\n'), target, draft, 512, 8)
    without = on_engine(_engine_file(tmp_path, ""), target, draft, 512, 8)
    cached, plain = with_cache.engine, without.engine
    tree = TREES[1]  # levels of 2 and 3 nodes under 1 and 2 parents
    assert with_cache.draft_s(tree) == pytest.approx(
        with_cache.level_s("draft", 1, 1) + with_cache.level_s("draft", 2, 2), rel=1e-12)
    assert without.draft_s(tree) == pytest.approx(
        without.level_s("draft", 1, 1) + without.level_s("draft", 3, 2), rel=1e-12)
    for engine, priced in ((cached, with_cache), (plain, without)):
        pricer = BatchPricer(priced.target, priced.drafter, "draft", engine=engine)
        assert pricer.draft_s([512] * 8, [Speculation.of(tree)] * 8) == pytest.approx(
            priced.draft_s(tree), rel=1e-9)
