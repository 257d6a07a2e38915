"""Judge Decoding, Arbitrage, S2D and FastDraft: their limits (a judge that accepts nothing is
draft-model speculation, Arbitrage at RSD's regeneration rate is no gain, one whole sub-draft is
draft-model speculation, a catalogue FastDraft draft is draft-model speculation), their costs for
the simulator, bad options, and their shipped scenarios."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specscope.cli import main
from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.models import get_model
from specscope.models.ops import param_count
from specscope.systems import arbitrage, fastdraft, judge, s2d
from specscope.systems.case import Case
from specscope.systems.registry import SYSTEMS
from specscope.systems.reproduce import reproduce

PAPERS = Path(__file__).resolve().parents[1] / "examples" / "papers"
TARGET, DRAFT = "llama-3.1-8b", "llama-3.2-1b"


def _case(system: str, **fields: object) -> Case:
    base = {"name": "c", "system": system, "hw": "a100", "target": TARGET, "draft": DRAFT,
            "where": "t.toml", "tree": (1, 1, 1, 1), "tau": 3.0, "runtime": "graph",
            "published_speedup": 2.0}
    return Case(**(base | fields))


def _draft_model(**fields: object):
    return SYSTEMS["draft-model"].predict(_case("draft-model", **fields))


def test_every_system_is_registered_with_its_lossiness() -> None:
    for name, lossy in (("judge", True), ("arbitrage", True), ("s2d", False),
                        ("fastdraft", False)):
        assert SYSTEMS[name].lossy is lossy and "arXiv:" in SYSTEMS[name].paper


# ---- Judge Decoding -------------------------------------------------------------------------


def test_chain_tokens_and_its_inverse() -> None:
    assert judge.chain_tokens(0.0, 5) == 1.0
    assert judge.chain_tokens(1.0, 5) == 6.0
    assert judge.chain_tokens(0.5, 2) == pytest.approx(1.75, rel=1e-12)
    for a in (0.1, 0.5, 0.87, 0.99):
        assert judge.solve_alpha(judge.chain_tokens(a, 25), 25) == pytest.approx(a, rel=1e-9)


@pytest.mark.parametrize("options", [{"judge_rate": 0.0, "alpha": 0.7}, {"alpha": 0.7}])
def test_a_judge_that_accepts_nothing_prices_exactly_like_draft_model_speculation(
        options: dict) -> None:
    chain = (1,) * 6
    judged = judge.predict(_case("judge", tree=chain, options=options))
    plain = _draft_model(tree=chain, tau=judge.chain_tokens(0.7, 6))
    assert judged.tokens_per_step == pytest.approx(plain.tokens_per_step, rel=1e-9)
    assert judged.step_s == pytest.approx(plain.step_s, rel=1e-9)
    assert judged.baseline_s == pytest.approx(plain.baseline_s, rel=1e-9)
    assert judged.speedup == pytest.approx(plain.speedup, rel=1e-9)
    assert not judged.lossy and "judge" not in judged.parts
    c = judge.costs(_case("judge", tree=chain, options=options))
    assert c.acceptance_scale == 1.0 and not c.lossy


def test_the_judge_accepts_a_fraction_of_the_targets_rejections() -> None:
    case = _case("judge", tree=(1,) * 10, options={"alpha": 0.6, "judge_rate": 0.5})
    alpha, judged = judge.acceptance(case)
    assert (alpha, judged) == (0.6, pytest.approx(0.8, rel=1e-12))
    p = judge.predict(case)
    assert p.lossy and p.tokens_per_step == pytest.approx(judge.chain_tokens(0.8, 10), rel=1e-12)
    c = judge.costs(case)
    assert c.lossy and c.acceptance_scale == pytest.approx(0.8 / 0.6, rel=1e-12)
    assert isinstance(c.target, judge.JudgeTargetCost)
    # the head is one d_model → 1 linear per verified token: tiny but priced
    plain = judge.predict(dataclasses.replace(case, options={"alpha": 0.6}))
    assert 0.0 < p.parts["judge"] < 1e-4 * p.parts["verify"]
    assert p.step_s == pytest.approx(plain.step_s + p.parts["judge"], rel=1e-12)
    assert p.baseline_s == plain.baseline_s  # autoregressive decoding has no judge
    head = [op for op in c.target.ops(1, 11, 512) if op.op == "judge_head"]
    assert len(head) == 1 and head[0].weight_bytes == get_model(TARGET).d_model * 2
    everything = judge.predict(dataclasses.replace(case, options={"alpha": 0.6,
                                                                  "judge_rate": 1.0}))
    assert everything.tokens_per_step == 11.0


def test_the_judges_alpha_comes_from_the_standard_tau_of_the_chain() -> None:
    case = _case("judge", tree=(1,) * 25, tau=6.3, tau_includes_bonus=False,
                 options={"judge_rate": 0.3})
    alpha, judged = judge.acceptance(case)
    assert judge.chain_tokens(alpha, 25) == pytest.approx(7.3, rel=1e-9)
    assert judged == pytest.approx(alpha + 0.3 * (1 - alpha), rel=1e-12)


def test_a_sharded_draft_is_cheaper_per_level() -> None:
    base = _case("judge", hw="h100", target="llama-3.1-70b", draft=TARGET, tp=2,
                 runtime="compile", tree=(1,) * 5, options={"alpha": 0.8, "judge_rate": 0.5})
    sharded = dataclasses.replace(base, options={**base.options, "draft_tp": 2})
    assert judge.costs(sharded).drafter.tp == 2
    assert judge.predict(sharded).parts["draft"] < judge.predict(base).parts["draft"]


@pytest.mark.parametrize("fields, message", [
    ({"tree": (4, 4)}, "drafts a chain"),
    ({"tree": ()}, "needs a tree"),
    ({"options": {"alpha": 0.5, "judge_rate": 1.5}}, "judge_rate = 1.5"),
    ({"options": {"alpha": 0.0, "judge_rate": 0.5}}, "alpha = 0"),
    ({"draft": None, "options": {"alpha": 0.5}}, "needs a draft"),
    ({"tau": 9.0, "options": {"judge_rate": 0.5}}, "exceeds the chain"),
    ({"options": {"alpha": 0.5, "draft_tp": 0}}, "draft_tp = 0"),
])
def test_bad_judge_cases_name_the_case(fields: dict, message: str) -> None:
    with pytest.raises(InputError, match=message) as exc:
        judge.predict(_case("judge", **fields))
    assert "case 'c'" in str(exc.value)


# ---- Arbitrage ------------------------------------------------------------------------------

ARB = {"step_tokens": 50, "prm": "tinyllama-1.1b", "regenerate": 0.2,
       "baseline_regenerate": 0.6}


def test_arbitrage_prices_draft_score_and_regeneration_per_step() -> None:
    case = _case("arbitrage", options=ARB)
    p = arbitrage.predict(case)
    hw, context = load_profile("a100"), round(case.decode_context)
    draft = CostModel(hw, get_model(DRAFT), runtime="graph").forward_time(1, 1, context)
    target = CostModel(hw, get_model(TARGET), runtime="graph").forward_time(1, 1, context)
    scorer = CostModel(hw, get_model("tinyllama-1.1b"), runtime="graph").forward_time(
        1, 50, context)
    assert p.parts == {"draft": pytest.approx(50 * draft, rel=1e-12),
                       "score": pytest.approx(scorer, rel=1e-12),
                       "target": pytest.approx(0.2 * 50 * target, rel=1e-12)}
    rsd = 50 * draft + scorer + 0.6 * 50 * target
    assert p.speedup == pytest.approx(rsd / (50 * draft + scorer + 0.2 * 50 * target),
                                      rel=1e-9)
    assert p.lossy and p.tokens_per_step == 50.0


def test_arbitrage_at_rsds_regeneration_rate_gains_nothing() -> None:
    same = _case("arbitrage", options=ARB | {"regenerate": 0.6})
    assert arbitrage.predict(same).speedup == pytest.approx(1.0, rel=1e-12)
    rates = [arbitrage.predict(_case("arbitrage", options=ARB | {"regenerate": r})).speedup
             for r in (0.0, 0.2, 0.4, 0.6, 0.8)]
    assert rates == sorted(rates, reverse=True)


def test_arbitrage_without_a_baseline_rate_is_against_the_autoregressive_target() -> None:
    options = {k: v for k, v in ARB.items() if k != "baseline_regenerate"}
    always = arbitrage.predict(_case("arbitrage", options=options | {"regenerate": 1.0}))
    assert always.speedup < 1.0  # drafting and scoring every step, then regenerating it
    target = CostModel(load_profile("a100"), get_model(TARGET), runtime="graph")
    assert always.baseline_s == pytest.approx(
        target.forward_time(1, 1, round(_case("arbitrage").decode_context)), rel=1e-12)


def test_an_eager_scorer_costs_more_than_a_graphed_one() -> None:
    eager = arbitrage.predict(_case("arbitrage", options=ARB | {"prm_runtime": "eager"}))
    graph = arbitrage.predict(_case("arbitrage", options=ARB))
    assert eager.parts["score"] > graph.parts["score"]
    assert eager.parts["draft"] == graph.parts["draft"]


def test_arbitrage_costs_serve_the_draft_model_and_need_no_step_options() -> None:
    c = arbitrage.costs(_case("arbitrage"))
    assert c.lossy and c.drafter.model.name == DRAFT and c.source == f"draft:{DRAFT}"
    assert c.target.model.name == TARGET and c.acceptance_scale == 1.0


@pytest.mark.parametrize("options, message", [
    ({k: v for k, v in ARB.items() if k != "prm"}, "needs prm"),
    (ARB | {"regenerate": 1.2}, "regenerate = 1.2"),
    (ARB | {"baseline_regenerate": -0.1}, "baseline_regenerate = -0.1"),
    (ARB | {"step_tokens": 0}, "step_tokens = 0"),
    (ARB | {"prm": "prm-9b"}, "prm-9b"),
])
def test_bad_arbitrage_cases(options: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        arbitrage.predict(_case("arbitrage", options=options))


# ---- S2D ------------------------------------------------------------------------------------

S2D = {"target": "vicuna-13b", "draft": "vicuna-7b", "tree": (1, 1, 1, 1, 1),
       "runtime": "eager"}


def test_one_whole_sub_draft_prices_exactly_like_draft_model_speculation() -> None:
    plain = _draft_model(**S2D, tau=2.4)
    for options in ({}, {"sub_layers": "32", "sub_tau": "2.4"}):
        p = s2d.predict(_case("s2d", **S2D, tau=2.4, options=options))
        assert p.speedup == pytest.approx(plain.speedup, rel=1e-9)
        assert p.step_s == pytest.approx(plain.step_s, rel=1e-9)
        assert p.tokens_per_step == 2.4


def test_a_sub_draft_is_the_drafts_first_layers_with_its_lm_head() -> None:
    spec = get_model("vicuna-7b")
    sub = s2d.sub_draft_spec(spec, 6)
    assert (sub.n_layers, sub.d_model, sub.vocab_size, sub.tie_embeddings) == (
        6, spec.d_model, spec.vocab_size, spec.tie_embeddings)
    assert s2d.sub_draft_spec(spec, 32) is spec
    hw = load_profile("a100")
    times = [CostModel(hw, s2d.sub_draft_spec(spec, k), runtime="eager").forward_time(1, 1, 512)
             for k in (6, 9, 12)]
    assert times == sorted(times)


def test_s2d_chooses_the_sub_draft_with_the_best_predicted_speedup() -> None:
    case = _case("s2d", **S2D, options={"sub_layers": "6,9,12", "sub_tau": "2.0,2.2,2.4"})
    layers, best = s2d.choose(case)
    each = {k: s2d.predict(_case("s2d", **S2D, tau=t, options={"sub_layers": str(k),
                                                                "sub_tau": str(t)})).speedup
            for k, t in ((6, 2.0), (9, 2.2), (12, 2.4))}
    assert best.speedup == pytest.approx(max(each.values()), rel=1e-12)
    assert each[layers] == pytest.approx(best.speedup, rel=1e-12)
    assert s2d.costs(case).drafter.model.n_layers == layers
    # a far better deep sub-draft wins
    deep = dataclasses.replace(case, options={"sub_layers": "6,12", "sub_tau": "1.5,4.5"})
    assert s2d.choose(deep)[0] == 12


def test_s2d_costs_without_a_tree_need_a_single_sub_draft() -> None:
    generic = _case("s2d", **(S2D | {"tree": ()}))
    assert s2d.costs(generic).drafter.model.n_layers == 32
    one = dataclasses.replace(generic, options={"sub_layers": "9", "sub_tau": "2.0"})
    assert s2d.costs(one).drafter.model.n_layers == 9
    many = dataclasses.replace(generic, options={"sub_layers": "6,9", "sub_tau": "2,2.1"})
    with pytest.raises(InputError, match="needs a tree"):
        s2d.costs(many)


@pytest.mark.parametrize("options, message", [
    ({"sub_layers": "6,9"}, "both sub_layers and sub_tau"),
    ({"sub_layers": "6,9", "sub_tau": "2.0"}, "one τ per sub-draft"),
    ({"sub_layers": "6,x", "sub_tau": "2,2"}, "comma-separated numbers"),
    ({"sub_layers": "40", "sub_tau": "2"}, "has 1..32"),
    ({"sub_layers": "6", "sub_tau": "0.5"}, "below 1 token"),
])
def test_bad_s2d_cases(options: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        s2d.predict(_case("s2d", **S2D, options=options))


# ---- FastDraft ------------------------------------------------------------------------------


def test_a_catalogue_fastdraft_draft_prices_exactly_like_draft_model_speculation() -> None:
    p = fastdraft.predict(_case("fastdraft", options={"train_tokens": 1e10}))
    plain = _draft_model()
    assert p.speedup == pytest.approx(plain.speedup, rel=1e-9)
    assert p.step_s == pytest.approx(plain.step_s, rel=1e-9)
    assert any("trained on 1e+10 tokens" in a for a in p.assumptions)


def test_a_built_draft_takes_the_targets_family() -> None:
    target = get_model(TARGET)
    spec = fastdraft.draft_spec(target, 5, 512)
    assert (spec.n_layers, spec.d_model, spec.head_dim, spec.n_heads, spec.n_kv_heads) == (
        5, 512, 128, 4, 1)
    assert spec.d_ff == round(target.d_ff * 512 / target.d_model)
    assert (spec.vocab_size, spec.tie_embeddings) == (target.vocab_size, target.tie_embeddings)
    assert 140e6 < param_count(spec) < 155e6
    case = _case("fastdraft", draft=None, options={"draft_layers": 5, "draft_d_model": 512,
                                                   "draft_bits": 8, "train_tokens": 1e10})
    c = fastdraft.costs(case)
    assert c.drafter.weight_bits == 8 and c.drafter.model.n_layers == 5
    # a bigger draft of the same quality is slower
    small, big = (fastdraft.predict(dataclasses.replace(case, options=case.options | {
        "draft_layers": n})) for n in (2, 12))
    assert small.step_s < big.step_s and small.tokens_per_step == big.tokens_per_step


@pytest.mark.parametrize("fields, message", [
    ({"options": {"train_tokens": 0}}, "train_tokens = 0"),
    ({"draft": "vicuna-7b", "options": {"draft_layers": 4, "draft_d_model": 512}},
     "no shared vocabulary"),
    ({"draft": None, "options": {"draft_layers": 4}}, "both draft_layers and draft_d_model"),
    ({"draft": None, "options": {"draft_layers": 4, "draft_d_model": 500}}, "multiple"),
    ({"draft": None}, "needs a draft"),
    ({"tree": ()}, "needs a tree"),
])
def test_bad_fastdraft_cases(fields: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        fastdraft.predict(_case("fastdraft", **fields))


# ---- shipped scenarios ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["judge", "arbitrage", "s2d", "fastdraft"])
def test_the_shipped_scenarios_reproduce(name: str) -> None:
    rows = reproduce(PAPERS / f"{name}.toml")
    assert rows and all(r.case.system == name for r in rows)
    for r in rows:
        assert r.predicted_speedup > 0 and r.prediction.assumptions
        assert r.prediction.lossy is SYSTEMS[name].lossy
        assert r.case.setup == "partial"  # reported with their error, no tolerance (issue 15)


def test_reproduce_prints_json_for_a_lossy_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", str(PAPERS / "judge.toml"), "--json"])
    assert int(exc.value.code or 0) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 2
    for row in rows:
        assert row["lossy"] is True and row["compared"] == "tokens/s"
        assert row["parts_ms"]["judge"] > 0
