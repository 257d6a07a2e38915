"""SpecEE (early exits priced on the target) and EasySpec (layer-parallel drafting at TP k): their
limits, exactly, and their scenario files."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from specscope.cli import main
from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.deployment import deployment
from specscope.hw_profiles.profile import MeasuredTable
from specscope.models import get_model
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.systems.case import Case
from specscope.systems.easyspec import LayerParallelDraftCost
from specscope.systems.registry import SYSTEMS
from specscope.systems.specee import (
    EarlyExitCost,
    exit_support,
    predictors_per_token,
)
from specscope.systems.step import cost_model, pricing

PAPERS = Path(__file__).resolve().parents[1] / "examples" / "papers"
EXACT = 1e-12


def _case(**fields: object) -> Case:
    base = {"name": "c", "system": "specee", "hw": "a100", "target": "llama-2-7b",
            "where": "t.toml", "runtime": "eager", "published_speedup": 1.0}
    return Case(**(base | fields))


def _specee(**options: object) -> Case:
    return _case(options=options)


def _easyspec(**fields: object) -> Case:
    base = {"system": "easyspec", "target": "llama-3-70b", "draft": "llama-3-8b", "tp": 8,
            "gpus": 8, "tree": (1, 1, 1, 1, 1), "tau": 4.0}
    return _case(**(base | fields))


# ---- SpecEE ---------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["eager", "graph"])
@pytest.mark.parametrize("speculator", ["head", "none"])
def test_an_exit_fraction_of_one_is_the_plain_target_exactly(runtime: str,
                                                              speculator: str) -> None:
    case = dataclasses.replace(_specee(exit_fraction=1.0, speculator=speculator),
                               runtime=runtime)
    p = SYSTEMS["specee"].predict(case)
    plain = CostModel(load_profile("a100"), get_model("llama-2-7b"), runtime=runtime)
    assert set(p.parts) == {"verify"} and not p.lossy  # no predictor, so no draft either
    assert p.step_s == pytest.approx(plain.forward_time(1, 1, round(case.decode_context)),
                                     rel=EXACT)
    assert p.speedup == pytest.approx(1.0, rel=EXACT)
    target = SYSTEMS["specee"].costs(case).target
    assert target.predictors == 0.0
    for n, context in ((1, 0), (1, 640), (26, 640), (64, 4096)):
        assert target.forward_time(1, n, context) == pytest.approx(
            plain.forward_time(1, n, context), rel=EXACT)


def test_a_full_depth_exit_under_tensor_parallelism_is_the_plain_target() -> None:
    plain = CostModel(load_profile("a100"), get_model("llama-2-13b"), tp=2, runtime="graph")
    full = plain.variant(EarlyExitCost, exit_layers=40, predictors=0.0,
                          candidates=4, hidden=512)
    assert full.forward_time(1, 26, 512) == pytest.approx(plain.forward_time(1, 26, 512),
                                                          rel=EXACT)
    half = plain.variant(EarlyExitCost, exit_layers=20, predictors=0.0,
                          candidates=4, hidden=512)
    comm = [float(m.extras(m.ops(1, 1, 512))["comm"]) for m in (plain, half)]
    assert comm[0] > 0 and comm[1] == pytest.approx(comm[0] / 2, rel=EXACT)  # lm_head unsharded


def test_a_tree_at_full_depth_is_eagle_exactly() -> None:
    case = _case(tree=(4, 7, 7, 5, 2), tau=3.79, options={"exit_layers": 32})
    ours = SYSTEMS["specee"].predict(case)
    eagle = SYSTEMS["head"].predict(dataclasses.replace(case, system="head", options={}))
    assert ours.parts == pytest.approx(eagle.parts, rel=EXACT)
    assert ours.speedup == pytest.approx(eagle.speedup, rel=EXACT)


def test_the_exit_support_ends_at_the_last_layer_and_the_last_layer_has_no_predictor() -> None:
    assert list(exit_support(32, 24)) == list(range(16, 33))
    assert predictors_per_token(32, 24) == pytest.approx(np.mean([*range(1, 17), 16]))
    assert predictors_per_token(32, 32) == 0.0
    assert predictors_per_token(32, 31.5) == 1.0  # exits at 31 or 32: one predictor, at 31
    # a mean below the middle layer: exits uniform over 1..19, every one behind a predictor
    assert list(exit_support(32, 10)) == list(range(1, 20))
    assert predictors_per_token(32, 10) == pytest.approx(10.0)


def test_layers_scale_with_the_exit_and_predictors_read_only_the_candidates_rows() -> None:
    target = SYSTEMS["specee"].costs(_specee(exit_layers=16, candidates=4)).target
    plain = target.plain
    ops = {op.op: op for op in target.ops(1, 1, 512)}
    for op in plain.ops(1, 1, 512):
        share = 1.0 if op.op in ("embedding", "final_norm", "lm_head") else 0.5
        assert float(ops[op.op].flops) == pytest.approx(float(op.flops) * share, rel=EXACT)
    runs, d = target.predictors, plain.model.d_model
    assert runs > 0
    logits = ops["predictor_logits"]
    assert float(logits.weight_bytes) == pytest.approx(runs * d * 4 * 2, rel=EXACT)
    assert float(ops["predictor_mlp_in"].weight_bytes) == pytest.approx(runs * 12 * 512 * 2,
                                                                         rel=EXACT)
    assert target.predictor_share == pytest.approx(1 / 7)  # one kernel of a layer's 7


def test_earlier_exits_are_faster_and_lossy() -> None:
    few, many = (SYSTEMS["specee"].predict(_specee(exit_layers=e)) for e in (28, 20))
    assert 1.0 < few.speedup < many.speedup and few.lossy and many.lossy
    assert SYSTEMS["specee"].lossy


def test_exit_fraction_is_exit_layers_over_the_layers() -> None:
    by_fraction = SYSTEMS["specee"].predict(_specee(exit_fraction=0.75))
    by_layers = SYSTEMS["specee"].predict(_specee(exit_layers=24))
    assert by_fraction.parts == pytest.approx(by_layers.parts, rel=EXACT)


def test_without_a_speculator_the_candidates_are_free() -> None:
    head = SYSTEMS["specee"].predict(_specee(exit_layers=23.1))
    free = SYSTEMS["specee"].predict(_specee(exit_layers=23.1, speculator="none"))
    assert "draft" in head.parts and "draft" not in free.parts
    assert free.parts["verify"] == pytest.approx(head.parts["verify"], rel=EXACT)
    assert free.speedup > head.speedup
    c = SYSTEMS["specee"].costs(_specee(speculator="none"))
    assert c.drafter is None and c.source == "none"


@pytest.mark.parametrize("options, message", [
    ({"exit_layers": 40}, r"exit_layers = 40 must lie in 1\.\.32"),
    ({"exit_fraction": 0.0}, r"exit_fraction = 0 must lie in \(0, 1\]"),
    ({"exit_fraction": 0.5, "exit_layers": 16}, "give one of exit_layers and exit_fraction"),
    ({"candidates": 0}, "at least 1"),
    ({"speculator": "medusa"}, "speculator = 'medusa'"),
])
def test_bad_specee_options_name_the_case(options: dict, message: str) -> None:
    with pytest.raises(InputError, match=message) as exc:
        SYSTEMS["specee"].predict(_specee(**options))
    assert "case 'c'" in str(exc.value)


def test_a_tree_needs_the_head() -> None:
    case = _case(tree=(4, 4), tau=2.5, options={"speculator": "none"})
    with pytest.raises(InputError, match="a tree needs speculator"):
        SYSTEMS["specee"].predict(case)


def test_measured_target_times_are_scaled_by_the_early_exit() -> None:
    hw = load_profile("a100")
    plain = CostModel(hw, get_model("llama-2-7b"), runtime="graph")
    n = np.array([1.0, 8.0, 32.0])
    roof = np.asarray(plain.forward_time(1, n, 512))
    table = MeasuredTable("llama-2-7b", 1, 512, n, 1.5 * roof, runtime="graph")
    measured = CostModel(dataclasses.replace(hw, measured=(table,)), plain.model,
                         runtime="graph")
    exiting = measured.variant(EarlyExitCost, exit_layers=20, predictors=5.0,
                          candidates=4, hidden=512)
    roofline = plain.variant(EarlyExitCost, exit_layers=20, predictors=5.0,
                          candidates=4, hidden=512)
    assert exiting.forward_time(1, 8, 512) == pytest.approx(
        1.5 * roofline.forward_time(1, 8, 512), rel=1e-9)
    full = measured.variant(EarlyExitCost, exit_layers=32, predictors=0.0,
                          candidates=4, hidden=512)
    assert full.forward_time(1, 8, 512) == pytest.approx(1.5 * float(roof[1]), rel=EXACT)


def test_simulate_serves_an_early_exiting_target_without_a_speculator() -> None:
    def tpot(options: dict) -> float:
        req = SimulateRequest(
            deployment=deployment("a100", target="llama-2-7b"),
            acceptance=(0.6, 0.2), rate=5.0, requests=4, output_len="16", prompt_len="32", seed=0,
            system="specee", system_options=options, policy="none")
        return run_simulation(req).summary["mean_tpot_ms"]
    assert tpot({"exit_fraction": 0.7, "speculator": "none"}) < tpot({})


# ---- EasySpec -------------------------------------------------------------------------------


def test_tp_1_has_no_all_reduce_and_no_layer_parallelism() -> None:
    case = _easyspec(tp=1, target="llama-3-8b", draft="llama-3.2-1b")
    c = SYSTEMS["easyspec"].costs(case)
    for model in (c.target, c.drafter):
        for n in (1, 5):
            assert float(model.extras(model.ops(1, n, 512))["comm"]) == 0.0
    plain = cost_model(case, "llama-3.2-1b")
    assert c.drafter.attention_blocks == plain.model.n_layers and c.drafter.groups == 0
    assert c.drafter.forward_time(1, 1, 512) == pytest.approx(plain.forward_time(1, 1, 512),
                                                              rel=EXACT)
    with pytest.raises(InputError, match=r"parallel_layers = 2 must lie in 1\.\.tp \(1\)"):
        SYSTEMS["easyspec"].predict(dataclasses.replace(case, options={"parallel_layers": 2}))


@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("loss", [0.0, 0.07])
def test_sequential_drafting_is_draft_model_speculation_exactly(tp: int, loss: float) -> None:
    case = _easyspec(tp=tp, target="llama-3-8b" if tp == 1 else "llama-3-70b",
                     draft="llama-3.2-1b", options={"layer_parallel": False,
                                                    "acceptance_loss": loss})
    ours = SYSTEMS["easyspec"].predict(case)
    theirs = SYSTEMS["draft-model"].predict(dataclasses.replace(case, system="draft-model",
                                                                options={}))
    assert ours.parts == pytest.approx(theirs.parts, rel=EXACT)  # sequential drafting is exact
    assert ours.tokens_per_step == pytest.approx(theirs.tokens_per_step, rel=EXACT)
    assert ours.speedup == pytest.approx(theirs.speedup, rel=EXACT)
    assert SYSTEMS["easyspec"].costs(case).acceptance_scale == 1.0


def test_attention_blocks_run_four_at_a_time_with_a_broadcast_and_a_gather() -> None:
    case = _easyspec()
    draft = SYSTEMS["easyspec"].costs(case).drafter
    assert isinstance(draft, LayerParallelDraftCost) and draft.ways == 4
    assert draft.groups == math.ceil(30 / 4) and draft.attention_blocks == 10
    hw = load_profile("a100")
    hidden = 3 * 4096 * 2  # three tokens of d_model at 16 bits
    transfer = hw.allreduce_latency_s + 3 * hidden / hw.link_bandwidth
    comm = float(draft.extras(draft.ops(1, 3, 512))["comm"])
    assert comm == pytest.approx(8 * 2 * transfer, rel=EXACT)
    plain = cost_model(case, "llama-3-8b")
    ops = {op.op: op for op in draft.ops(1, 1, 512)}
    for op in plain.ops(1, 1, 512):
        share = 10 / 32 if op.op in ("attn_norm", "qkv_proj", "attention", "o_proj") else 1.0
        assert float(ops[op.op].weight_bytes) == pytest.approx(float(op.weight_bytes) * share,
                                                               rel=EXACT)
    # eager: the host issues 10 attention blocks (4 of a layer's 7 operators) and 32 MLPs
    share = (4 / 7) * 10 / 32 + 3 / 7
    r = plain.runtime
    assert float(draft.host_time(512)) == pytest.approx(
        r.host_step_s + share * 32 * r.host_layer_s, rel=EXACT)
    assert draft.forward_time(1, 1, 512) < plain.forward_time(1, 1, 512)


def test_the_calibration_pass_opens_each_step_and_the_loss_costs_acceptance() -> None:
    case = _easyspec(options={"acceptance_loss": 0.07})
    p = SYSTEMS["easyspec"].predict(case)
    c = SYSTEMS["easyspec"].costs(case)
    tau = 1 + 3.0 * 0.93
    assert p.tokens_per_step == pytest.approx(tau, rel=EXACT)
    assert c.acceptance_scale == pytest.approx((tau - 1) / (4.0 - 1), rel=EXACT)
    price = pricing(case, c.target, c.drafter)
    sequential = cost_model(case, "llama-3-8b")
    assert p.parts["calibration"] == pytest.approx(
        float(sequential.forward_time(1, tau, price.context_len)) + price.level_host_s,
        rel=EXACT)
    assert p.parts["draft"] == pytest.approx(4 * price.level_s(c.source), rel=EXACT)
    lossless = SYSTEMS["easyspec"].predict(_easyspec())
    assert p.speedup < lossless.speedup


def test_report_draft_is_the_drafting_speedup() -> None:
    case = _easyspec(options={"report": "draft"})
    p = SYSTEMS["easyspec"].predict(case)
    full = SYSTEMS["easyspec"].predict(_easyspec())
    sequential = SYSTEMS["easyspec"].predict(_easyspec(options={"layer_parallel": False}))
    assert p.step_s == pytest.approx(full.parts["draft"] + full.parts["calibration"], rel=EXACT)
    assert p.baseline_s == pytest.approx(sequential.parts["draft"], rel=EXACT)
    assert p.speedup == pytest.approx(p.baseline_s / p.step_s, rel=EXACT) and p.speedup > 1.0


def test_baseline_tp_prices_vanilla_decoding_without_tensor_parallelism() -> None:
    case = _easyspec(options={"baseline_tp": 1})
    p = SYSTEMS["easyspec"].predict(case)
    vanilla = cost_model(case, "llama-3-70b").forward_time(1, 1, round(case.decode_context))
    assert p.baseline_s == pytest.approx(float(vanilla), rel=EXACT)
    assert p.speedup > SYSTEMS["easyspec"].predict(_easyspec()).speedup


@pytest.mark.parametrize("fields, message", [
    ({"options": {"acceptance_loss": 1.0}}, r"acceptance_loss = 1 must lie in \[0, 1\)"),
    ({"options": {"report": "tokens"}}, "report = 'tokens'"),
    ({"options": {"parallel_layers": 9}}, r"parallel_layers = 9 must lie in 1\.\.tp \(8\)"),
    ({"options": {"baseline_tp": 0}}, "baseline_tp = 0"),
    ({"tree": ()}, "needs a tree"),
    ({"draft": None}, "needs a draft"),
])
def test_bad_easyspec_cases_name_the_case(fields: dict, message: str) -> None:
    with pytest.raises(InputError, match=message) as exc:
        SYSTEMS["easyspec"].predict(_easyspec(**fields))
    assert "case 'c'" in str(exc.value)


# ---- scenario files -------------------------------------------------------------------------


def test_the_papers_scenarios_reproduce(capsys: pytest.CaptureFixture[str]) -> None:
    for system in ("specee", "easyspec"):
        with pytest.raises(SystemExit) as exc:
            main(["reproduce", str(PAPERS / f"{system}.toml"), "--json"])
        rows = json.loads(capsys.readouterr().out)
        assert exc.value.code in (0, None) and rows
        assert all(r["system"] == system and r["predicted_speedup"] > 0
                   and math.isfinite(r["rel_err"]) for r in rows)
        # EasySpec's models are substituted; SpecEE's own rows state their setup, its EAGLE and
        # PC rows borrow a tree and τ or a GPU
        assert {r["setup"] for r in rows} == ({"partial"} if system == "easyspec"
                                              else {"complete", "partial"})
    assert {r["name"] for r in rows} == {"easyspec-llama3-70b-8b-tp8-a100",
                                         "easyspec-drafting-llama3-8b-tp8-a100"}
