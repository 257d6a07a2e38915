"""Seed systems: scenario files read and checked, `specscope reproduce` on the command line, the
draft-model, head and hierspec mechanisms' limits, quantised verification, and every system
served by `simulate` and `sweep`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from specscope.cli import main
from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.deployment import Deployment, deployment
from specscope.models import get_model
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.systems.case import Case
from specscope.systems.registry import SYSTEMS
from specscope.systems.reproduce import read_cases, reproduce

PAPERS = Path(__file__).resolve().parents[1] / "examples" / "papers"
TARGET = "llama-3.1-8b"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def _case(**fields: object) -> Case:
    base = {"name": "c", "system": "head", "hw": "a100", "target": TARGET, "where": "t.toml",
            "tree": (4, 4, 4), "tau": 3.0, "runtime": "graph", "published_speedup": 2.0}
    return Case(**(base | fields))


# ---- scenario files -------------------------------------------------------------------------

CASE = '''[[case]]
name = "one"
system = "head"
hw = "a100"
target = "llama-3.1-8b"
tree = "4,4,4"
tau = 3.0
published_speedup = 2.0
'''


@pytest.mark.parametrize("edit, message", [
    (('system = "head"', 'system = "warp"'), "unknown system 'warp'"),
    (('tau = 3.0', 'tau = 3.0\nwarp = 1'), "unknown key 'warp'"),
    (('target = "llama-3.1-8b"', 'target = "llama-9b"'), "unknown model 'llama-9b'"),
    (('hw = "a100"', 'hw = "abacus"'), "abacus"),
    (('tau = 3.0', 'tau = 0.5'), "below 1"),
    (('tau = 3.0', 'tau = "three"'), "tau = 'three' is not a number"),
    (('tree = "4,4,4"', 'tree = "4,x"'), "comma-separated integers"),
    (('published_speedup = 2.0', ''), "published_speedup or published_tokens_per_s"),
    (('system = "head"', 'system = "hierspec"\ndraft = "llama-3.2-1b"\nchain = 0'), "chain ≥ 1"),
])
def test_bad_scenarios_exit_2_with_one_line_naming_the_case(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, edit: tuple[str, str],
        message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(CASE.replace(*edit))
    code, out, err = _cli(capsys, "reproduce", str(path), "--json")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err
    assert "case 'one'" in err or "'warp'" in err


def test_tau_below_one_is_fine_when_the_bonus_is_not_counted(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text(CASE.replace("tau = 3.0", "tau = 0.5\ntau_includes_bonus = false"))
    (case,) = read_cases(path)
    assert case.tokens_per_step == 1.5


def test_malformed_and_missing_scenario_files_exit_2(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    (tmp_path / "broken.toml").write_text("[[case]\nname = ")
    for path in (tmp_path / "broken.toml", tmp_path / "absent.toml", tmp_path / "empty"):
        code, out, err = _cli(capsys, "reproduce", str(path))
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    (tmp_path / "dupe.toml").write_text(CASE + CASE)
    code, _, err = _cli(capsys, "reproduce", str(tmp_path / "dupe.toml"))
    assert code == 2 and "used by another case" in err


# ---- reproduce ------------------------------------------------------------------------------


def test_reproduce_the_shipped_papers_with_every_json_key(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "reproduce", str(PAPERS), "--json")
    assert code == 0, err
    rows = json.loads(out)
    systems = {r["system"] for r in rows}
    assert systems <= set(SYSTEMS) and {"head", "hierspec"} <= systems
    for r in rows:
        assert {"name", "predicted_speedup", "published_speedup", "rel_err", "source",
                "assumptions", "lossy"} <= set(r)
        assert r["predicted_speedup"] > 0 and r["assumptions"]
    code, table, _ = _cli(capsys, "reproduce", str(PAPERS))
    assert code == 0 and "predicted against published" in table


def test_a_baseline_other_than_autoregressive_divides_by_its_seconds_per_token() -> None:
    from specscope.systems.reproduce import predict_case
    against = _case(weight_bits=4, baseline="head", baseline_tau=2.0)
    assert predict_case(against).speedup == pytest.approx(3.0 / 2.0)  # same tree, τ 3 vs 2


# ---- mechanisms -----------------------------------------------------------------------------


def test_a_head_is_one_target_layer_with_the_full_vocabulary() -> None:
    from specscope.systems.head import head_model, head_spec
    spec = get_model(TARGET)
    head = head_spec(spec)
    assert (head.n_layers, head.vocab_size, head.d_model) == (1, spec.vocab_size, spec.d_model)
    cost = head_model(_case(), spec)
    plain = CostModel(load_profile("a100"), head, runtime="graph")
    fc = 2 * spec.d_model * spec.d_model * 2  # bytes of the 2d → d projection at 16 bits
    assert cost.forward_time(1, 1, 512) > plain.forward_time(1, 1, 512)
    assert sum(op.weight_bytes for op in cost.ops(1, 1, 512)) == pytest.approx(
        sum(op.weight_bytes for op in plain.ops(1, 1, 512)) + fc)


def test_a_draft_model_case_prices_its_tree_level_by_level() -> None:
    case = _case(system="draft-model", draft="llama-3.2-1b", tree=(1, 1, 1))
    p = SYSTEMS["draft-model"].predict(case)
    target = CostModel(load_profile("a100"), get_model(TARGET), runtime="graph")
    draft = CostModel(load_profile("a100"), get_model("llama-3.2-1b"), runtime="graph")
    context = round(case.decode_context)
    assert p.parts["draft"] == pytest.approx(3 * draft.forward_time(1, 1, context))
    assert p.parts["verify"] == pytest.approx(target.verify_time(4, context))
    assert p.baseline_s == pytest.approx(target.forward_time(1, 1, context))


def test_a_hierarchy_whose_intermediate_is_the_target_is_plain_tree_speculation() -> None:
    head = _case(weight_bits=4, tau=3.5)
    hier = dataclasses.replace(head, system="hierspec", tau=2.0,
                               options={"inner_tau": 3.5, "chain": 6})
    assert SYSTEMS["hierspec"].predict(hier).speedup == pytest.approx(
        SYSTEMS["head"].predict(head).speedup, rel=1e-12)
    deeper = dataclasses.replace(hier, draft="llama-3.2-1b")
    p = SYSTEMS["hierspec"].predict(deeper)
    assert set(p.parts) == {"draft", "intermediate", "verify", "bookkeeping"}
    assert p.tokens_per_step == 2.0


def test_tree_verification_costs_a_4_bit_target_more_than_a_16_bit_one_relatively() -> None:
    """SpecMQuant's finding as the cost model prices it: verifying 64 tokens multiplies a W4A16
    target's step more than an fp16 target's (dequantisation per tile, earlier compute bound)."""
    hw, spec = load_profile("a100"), get_model("llama-3.1-70b")
    ratios = {}
    for bits in (16, 4):
        cm = CostModel(hw, spec, weight_bits=bits, runtime="graph", quant_lm_head=False)
        ratios[bits] = cm.verify_time(64, 512) / cm.forward_time(1, 1, 512)
    assert ratios[4] > 1.5 * ratios[16]


def test_8_bit_activations_use_the_integer_peak_and_skip_w8_dequantisation() -> None:
    hw, spec = load_profile("a100"), get_model(TARGET)
    a16 = CostModel(hw, spec, weight_bits=8, runtime="graph")
    a8 = CostModel(hw, spec, weight_bits=8, act_bits=8, runtime="graph")
    assert float(a8.extras(a8.ops(1, 64, 512))["dequant"]) == 0.0
    assert float(a16.extras(a16.ops(1, 64, 512))["dequant"]) > 0.0
    assert a8.forward_time(1, 256, 512) < a16.forward_time(1, 256, 512)
    with pytest.raises(InputError, match="activation bits"):
        CostModel(hw, spec, act_bits=4)


# ---- simulate and sweep serve every system ------------------------------------------------


def _options(system: str) -> dict:
    """Options that make `system` deployable without a published case."""
    return {"hierspec": {"inner_tau": 3.0, "chain": 4}}.get(system, {})


def _deployment(system: str) -> Deployment:
    """Where `system` is served: the MTP drafter needs a target that ships MTP layers."""
    if system == "mtp":
        return deployment("h200", target="deepseek-v3", tp=8, weight_bits=8)
    return deployment("a100", target=TARGET, drafter="llama-3.2-1b")


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_simulate_serves_every_system(system: str) -> None:
    req = SimulateRequest(
        deployment=_deployment(system),
        policy="dyspec", acceptance=(0.6, 0.2), rate=5.0, requests=8, output_len="32",
        prompt_len="64", seed=0, system=system, system_options=_options(system), budget=4)
    try:
        summary = run_simulation(req).summary
    except InputError as exc:  # a system that needs a case option the generic call lacks
        pytest.fail(f"{system}: {exc}")
    assert summary["system"] == system and summary["throughput_tok_s"] > 0


def test_simulate_rejects_an_unknown_system_and_bad_options(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--hw", "a100", "--target", TARGET, "--drafter", "llama-3.2-1b",
            "--acceptance", "0.6", "--rate", "1", "--requests", "2", "--seed", "0"]
    for extra, message in ((["--system", "warp"], "--system warp: not one of"),
                           (["--system", "hierspec", "--system-options", "depth=3"],
                            "is not KEY=VALUE with a key of system hierspec"),
                           (["--system-options", "chain=3"], "needs --system")):
        code, out, err = _cli(capsys, *base, *extra)
        assert code == 2 and out == "" and message in err


def _sweep_toml(options: str, systems: str) -> str:
    """A one-grid analytic sweep of llama-3.1-8b drafted by llama-3.2-1b over `systems`."""
    return (f"acceptance = [0.6, 0.2]\n{options}\n[[grid]]\nhardware = \"a100\"\n"
            "target = \"llama-3.1-8b\"\ndrafter = \"llama-3.2-1b\"\nmethod = \"chain\"\n"
            f"budget = 4\nsystem = {systems}\n")


def test_a_sweep_grid_takes_systems_as_an_axis(tmp_path: Path) -> None:
    from specscope.sweeps.run import run_sweep
    config = tmp_path / "sweep.toml"
    config.write_text(_sweep_toml("[system_options.hierspec]\ninner_tau = 3.0\nchain = 4",
                                  '["none", "head", "hierspec"]'))
    table = run_sweep(config, output=tmp_path / "out.parquet").table
    rows = {r["system"]: r for r in table.iter_rows(named=True)}
    assert set(rows) == {"none", "head", "hierspec"}
    assert all(r["status"] == "ok" for r in rows.values())
    assert rows["head"]["step_time_ms"] != rows["none"]["step_time_ms"]
    config.write_text(config.read_text().replace("chain = 4", "chain = 4\ndepth = 2"))
    with pytest.raises(InputError, match="unknown key 'depth' of system hierspec"):
        run_sweep(config, output=tmp_path / "bad.parquet")


def test_specmquant_headline_within_20_percent_and_its_ordering() -> None:
    rows = {r.case.name: r for r in reproduce(PAPERS / "specmquant.toml")}
    assert abs(rows["specmquant-hierspec-70b-w4a16-a100"].rel_err) <= 0.20
    gain = {k: rows[f"specmquant-eagle2-8b-{k}"].predicted_speedup
            for k in ("fp16-a100", "w4a16-a100", "w4a16-3090")}
    assert gain["fp16-a100"] > gain["w4a16-a100"] > gain["w4a16-3090"]
    assert 0.85 <= gain["w4a16-3090"] <= 1.15  # "nothing on an RTX 3090"
    hier = rows["specmquant-hierspec-70b-w4a16-a100"].predicted_speedup
    assert hier > rows["specmquant-eagle2-70b-w4a16-a100"].predicted_speedup


def test_simulated_images_join_every_prompt_of_a_vision_language_target() -> None:
    def run(images: int) -> dict:
        req = SimulateRequest(
            deployment=deployment("a100", target="llava-1.6-7b"),
            policy="dyspec", acceptance=(0.7, 0.1), rate=2.0, requests=6, output_len="16",
            prompt_len="32", seed=0, system="vispec", images=images)
        return run_simulation(req).summary
    plain, pictured = run(0), run(1)
    assert pictured["mean_ttft_ms"] > plain["mean_ttft_ms"]
    assert pictured["mean_tpot_ms"] > plain["mean_tpot_ms"]
    with pytest.raises(InputError, match="--images needs --system"):
        run_simulation(SimulateRequest(
            deployment=deployment("a100", target=TARGET),
            images=1))


# ---- SpecEE ---------------------------------------------------------------------------------


def _specee(**fields: object) -> Case:
    return _case(**({"system": "specee", "target": "llama-2-7b", "tree": (),
                     "runtime": "eager"} | fields))


@pytest.mark.parametrize("runtime", ["eager", "graph"])
def test_an_exit_fraction_of_one_prices_like_the_plain_target(runtime: str) -> None:
    from specscope.systems.specee import predictors_per_token
    case = _specee(options={"exit_layers": 32}, runtime=runtime)
    p = SYSTEMS["specee"].predict(case)
    plain = CostModel(load_profile("a100"), get_model("llama-2-7b"), runtime=runtime)
    assert predictors_per_token(32, 32) == 0.0
    assert set(p.parts) == {"verify"} and not p.lossy  # no predictor: no head, nothing lossy
    assert p.step_s == pytest.approx(plain.forward_time(1, 1, round(case.decode_context)),
                                     rel=1e-12)
    assert p.speedup == pytest.approx(1.0, rel=1e-12)


def test_early_exits_cut_the_layers_and_pay_the_predictors() -> None:
    from specscope.systems.specee import predictors_per_token
    assert predictors_per_token(32, 24) == pytest.approx(np.mean([*range(1, 17), 16]))
    few, many = (SYSTEMS["specee"].predict(_specee(options={"exit_layers": e}))
                 for e in (28, 20))
    assert 1.0 < few.speedup < many.speedup and few.lossy and many.lossy
    cost = SYSTEMS["specee"].costs(_specee(options={"exit_layers": 16}))
    names = [op.op for op in cost.target.ops(1, 1, 256)]
    assert {"predictor_logits", "predictor_mlp_in", "predictor_mlp_out"} <= set(names)
    with pytest.raises(InputError, match=r"exit_layers = 40 must lie in 1\.\.32"):
        SYSTEMS["specee"].predict(_specee(options={"exit_layers": 40}))


# ---- EasySpec -------------------------------------------------------------------------------


def _easyspec(**fields: object) -> Case:
    return _case(**({"system": "easyspec", "target": "llama-3.1-70b", "draft": "llama-3.1-8b",
                     "tp": 4, "tree": (1, 1, 1, 1), "tau": 3.5} | fields))


def test_tp_1_has_no_all_reduce_in_the_target_or_the_layer_parallel_draft() -> None:
    c = SYSTEMS["easyspec"].costs(_easyspec(tp=1, target="llama-3.1-8b", draft="llama-3.2-1b"))
    for model in (c.target, c.drafter):
        assert float(model.extras(model.ops(1, 8, 512))["comm"]) == 0.0
    wide = SYSTEMS["easyspec"].costs(_easyspec())
    assert float(wide.drafter.extras(wide.drafter.ops(1, 1, 512))["comm"]) > 0.0
    assert wide.drafter.attention_blocks == 10  # 2 + ⌈30 / 4⌉ attention groups


def test_sequential_easyspec_without_loss_is_draft_model_speculation() -> None:
    case = _easyspec(options={"layer_parallel": False})
    ours = SYSTEMS["easyspec"].predict(case)
    theirs = SYSTEMS["draft-model"].predict(dataclasses.replace(case, system="draft-model",
                                                                options={}))
    assert ours.speedup == pytest.approx(theirs.speedup, rel=1e-12)
    assert ours.parts == pytest.approx(theirs.parts, rel=1e-12)


def test_layer_parallel_drafting_is_faster_and_its_loss_costs_acceptance() -> None:
    lossless, lossy = (SYSTEMS["easyspec"].predict(_easyspec(options={"acceptance_loss": x}))
                       for x in (0.0, 0.1))
    assert lossy.tokens_per_step == pytest.approx(1 + 2.5 * 0.9)
    assert lossy.speedup < lossless.speedup
    drafting = SYSTEMS["easyspec"].predict(_easyspec(options={"report": "draft"}))
    assert drafting.speedup > 1.0
    assert SYSTEMS["easyspec"].costs(_easyspec(options={"acceptance_loss": 0.1})
                                     ).acceptance_scale == pytest.approx(0.9)


def test_the_dashboard_draws_the_reproduce_table_and_the_systems_per_hardware(
        tmp_path: Path) -> None:
    from specscope.dashboards import build_report
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "specmquant.toml").write_text((PAPERS / "specmquant.toml").read_text())
    report = build_report(folder, tmp_path / "report.html")
    drawn = {s.key: s for s in report.drawn}
    assert {"reproduce", "systems-hardware"} <= set(drawn)
    heat = drawn["systems-hardware"].figure.data[0]
    assert "a100" in heat.y and "rtx-3090" in heat.y
    assert len(heat.x) == len(read_cases(PAPERS / "specmquant.toml"))
    page = (tmp_path / "report.html").read_text()
    assert "specmquant-hierspec-70b-w4a16-a100" in page


def test_cost_prices_a_systems_target_and_drafter(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "cost", "--hw", "a100", "--target", "llama-2-7b", "--system",
                          "specee", "--system-options", "exit_layers=16", "--runtime", "eager",
                          "--json")
    assert code == 0, err
    report = json.loads(out)
    code, plain, _ = _cli(capsys, "cost", "--hw", "a100", "--target", "llama-2-7b",
                          "--runtime", "eager", "--json")
    assert report["step_time_ms"] < json.loads(plain)["step_time_ms"]
    assert report["system"] == "specee" and report["drafter"]["model"] == "llama-2-7b/head"
    code, out, err = _cli(capsys, "cost", "--hw", "a100", "--target", "llava-1.6-7b",
                          "--system", "vispec", "--images", "1", "--context", "64", "--json")
    assert code == 0 and json.loads(out)["context_len"] == 64 + 2880
    for extra, message in ((["--images", "1"], "--images needs --system"),
                           (["--system", "warp"], "--system warp: not one of"),
                           (["--system", "head", "--offload", "0.5"],
                            "a --system deploys its own")):
        code, out, err = _cli(capsys, "cost", "--hw", "a100", "--target", "llama-2-7b", *extra)
        assert code == 2 and out == "" and message in err


@pytest.mark.parametrize("extra", [(), ("--system", "head")])
def test_cost_prices_the_stated_tree_attention_under_an_engine(
        capsys: pytest.CaptureFixture[str], extra: tuple[str, ...]) -> None:
    """--tree-attention overrides the engine's (SGLang's split) rather than being dropped."""
    steps = {}
    for attention in ((), ("--tree-attention", "masked")):
        code, out, err = _cli(capsys, "cost", "--hw", "h100", "--target", "qwen3-8b", "--engine",
                              "sglang", "--batch", "64", "--new-tokens", "7", "--context",
                              "900", *extra, *attention, "--json")
        assert code == 0, err
        steps[attention] = json.loads(out)["step_time_ms"]
    assert steps[("--tree-attention", "masked")] > 1.05 * steps[()]


def test_a_list_of_system_option_values_is_a_sweep_dimension(tmp_path: Path) -> None:
    """FastDraft's draft size as a dimension: one cell per draft shape, larger drafts slower."""
    from specscope.sweeps.run import run_sweep
    config = tmp_path / "sizes.toml"
    config.write_text(_sweep_toml("[system_options.fastdraft]\ndraft_layers = [2, 8]\n"
                                  "draft_d_model = 512\ntrain_tokens = 1e10",
                                  '["none", "fastdraft"]'))
    table = run_sweep(config, output=tmp_path / "sizes.parquet").table
    assert table.height == 3 and set(table["status"]) == {"ok"}
    drafts = {json.loads(r["system_options"]).get("draft_layers"): r["step_time_ms"]
              for r in table.filter(pl.col("system") == "fastdraft").iter_rows(named=True)}
    assert set(drafts) == {2, 8} and drafts[2] < drafts[8]
    config.write_text(config.read_text().replace("draft_layers = [2, 8]",
                                                 'draft_layers = [2, "eight"]'))
    with pytest.raises(InputError, match="draft_layers = 'eight' is not a number"):
        run_sweep(config, output=tmp_path / "bad.parquet")
