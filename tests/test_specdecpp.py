"""SpecDec++: acceptance predictor, stop rule, policy replay and the hardware-aware threshold."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.pricing import Pricing
from specscope.models import get_model
from specscope.optimizers.specdecpp import (
    MAX_LEN,
    MIN_LEN,
    ThresholdPolicy,
    specdecpp,
)
from specscope.optimizers.specdecpp_predictor import (
    FEATURES,
    AcceptancePredictor,
    candidate_features,
)
from specscope.trace import RankedBehaviour, Trace, replay, synth_trace
from specscope.tree import Tree

DRAFT = "draft:llama-68m"
HARDWARE = ("h100", "cpu-2core")
CONFIDENT = {DRAFT: RankedBehaviour(top1=0.85, decay=0.1, depth_decay=1.0)}


@cache
def pricing(hw: str) -> Pricing:
    profile = load_profile(hw)
    return Pricing(
        CostModel(profile, get_model("llama-2-7b")),
        CostModel(profile, get_model("llama-68m")),
        context_len=512,
    )


@cache
def trace(seed: int = 0, confident: bool = False) -> Trace:
    return synth_trace(
        120, seed, sources=(DRAFT, "ngram"), behaviour=CONFIDENT if confident else None
    )


@cache
def predictor() -> AcceptancePredictor:
    return AcceptancePredictor.fit(trace(), DRAFT, seed=0)


# ---- features and predictor ----------------------------------------------------------------


def test_candidate_features_by_hand() -> None:
    q = np.array([0.5, 0.3, 0.2])
    feats = candidate_features([[0.25, 0.15, 0.1], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(feats[0], [0.25, -(q * np.log(q)).sum(), 0.1])
    np.testing.assert_array_equal(feats[1], [0.0, 0.0, 0.0])
    np.testing.assert_allclose(candidate_features([0.9]), [[0.9, 0.0, 0.9]])  # one candidate


def test_predictor_beats_base_rate_on_held_out_requests() -> None:
    p = predictor()
    assert p.source == DRAFT and p.train_requests + p.holdout_requests == 120
    assert p.log_loss < p.base_log_loss
    cal = p.calibration
    assert cal.get_column("rows").sum() == p.holdout_requests * 256
    assert 0 <= p.calibration_error < 0.05
    probs = p.predict(np.random.default_rng(0).random((50, len(FEATURES))))
    assert probs.shape == (50,) and np.all((probs > 0) & (probs < 1))
    np.testing.assert_allclose(np.exp(p.log_predict(np.zeros((2, 3)))), p.predict(np.zeros(6)))


def test_predictor_is_deterministic_per_seed() -> None:
    a, b = predictor(), AcceptancePredictor.fit(trace(), DRAFT, seed=0)
    np.testing.assert_array_equal(a.coef, b.coef)
    assert a.log_loss == b.log_loss
    assert AcceptancePredictor.fit(trace(), DRAFT, seed=1).log_loss != a.log_loss


def test_predictor_rejects_sequence_sources_and_single_requests() -> None:
    with pytest.raises(InputError, match="sequence source"):
        AcceptancePredictor.fit(trace(), "ngram")
    with pytest.raises(InputError, match="≥ 2 requests"):
        AcceptancePredictor.fit(synth_trace(1, 0, sources=(DRAFT,), length=16), DRAFT)


# ---- the stop rule ---------------------------------------------------------------------------


def stop_length(policy: ThresholdPolicy, features: np.ndarray) -> int:
    """Tokens drafted when the executor asks `should_stop` after every token."""
    for i in range(1, features.shape[0] + 1):
        if policy.should_stop(features[:i]):
            return i
    raise AssertionError("never stopped")


@pytest.mark.parametrize("h", [0.05, 0.5, 0.7, 0.95, 0.999])
@pytest.mark.parametrize("bounds", [(MIN_LEN, MAX_LEN), (2, 5), (3, 3)])
def test_stop_rule_respects_bounds_and_threshold(h: float, bounds: tuple[int, int]) -> None:
    lo, hi = bounds
    policy = ThresholdPolicy(predictor(), h, lo, hi)
    rng = np.random.default_rng(int(h * 1000) + hi)
    for _ in range(20):
        feats = candidate_features(-np.sort(-rng.dirichlet(np.ones(8) * 0.5, size=MAX_LEN + 3)))
        a = predictor().predict(feats)
        first = next((i for i in range(1, MAX_LEN + 1) if 1 - np.prod(a[:i]) >= h), MAX_LEN)
        assert stop_length(policy, feats) == min(max(first, lo), hi)
    assert not policy.should_stop(np.empty((0, 3)))


# ---- the replay ------------------------------------------------------------------------------


def reference_replay(tr: Trace, p: AcceptancePredictor, h: float, cap: int, hw: str) -> tuple:
    """Step-by-step replay of the policy, one request and one step at a time (module docstring:
    true-prefix features; past a request's end the mean predicted acceptance)."""
    rows = tr.df.filter(source=DRAFT).sort("request_id", "pos")
    feats = candidate_features(np.array(rows.get_column("cand_scores").to_list()))
    a_all = p.predict(feats)
    fill = a_all.mean()
    hist = np.zeros(cap + 1, dtype=np.int64)
    for rid in np.unique(rows.get_column("request_id").to_numpy()):
        mask = rows.get_column("request_id").to_numpy() == rid
        rank, a = rows.get_column("rank").to_numpy()[mask], a_all[mask]
        pos = 0
        while pos < rank.size:
            window = np.r_[a[pos : pos + cap], np.full(cap, fill)][:cap]
            length = next((i for i in range(MIN_LEN, cap + 1) if 1 - np.prod(window[:i]) >= h), cap)
            lead = rank[pos : pos + length]
            accepted = int(np.argmin(lead == 0)) if np.any(lead != 0) else lead.size
            hist[length] += 1
            pos += accepted + 1
    # a policy pays its stop check after every drafted token
    step_s = np.array([pricing(hw).tree_step_s(Tree.chain(n, DRAFT)) + n * pricing(hw).stop_rule_s
                       for n in range(cap + 1)])
    return hist, hist @ step_s / rows.height


@pytest.mark.parametrize("hw", HARDWARE)
def test_policy_replay_matches_step_by_step_reference(hw: str) -> None:
    tr = synth_trace(8, 3, sources=(DRAFT,), length=48)
    for h, cap in ((0.6, 20), (0.9, 4)):
        res = specdecpp(tr, DRAFT, pricing(hw), threshold=h, max_len=cap, seed=2)
        hist, time_s = reference_replay(tr, res.predictor, h, cap, hw)
        np.testing.assert_array_equal(res.length_hist, hist)
        assert res.time_per_token_s == pytest.approx(time_s, rel=1e-12)
        assert res.tokens_per_step == pytest.approx(8 * 48 / hist.sum())


def test_fixed_lengths_agree_with_exact_chain_replay() -> None:
    res = specdecpp(trace(), DRAFT, pricing("h100"), threshold=0.7)
    assert sorted(res.fixed_lengths) == list(range(MIN_LEN, MAX_LEN + 1))
    for n in (2, 5, 20):
        chain = Tree.chain(n, DRAFT)
        expected = pricing("h100").tree_step_s(chain) / replay(trace(), chain).tokens_per_step
        assert res.fixed_lengths[n] == pytest.approx(expected, rel=1e-12)


# ---- the hardware-aware threshold ------------------------------------------------------------


@pytest.mark.parametrize("hw", HARDWARE)
@pytest.mark.parametrize(("seed", "confident"), [(0, False), (1, False), (2, True)])
def test_chosen_threshold_beats_every_fixed_length(hw: str, seed: int, confident: bool) -> None:
    res = specdecpp(trace(seed, confident), DRAFT, pricing(hw), seed=seed)
    assert res.chosen and 0 < res.threshold < 1
    assert MIN_LEN <= res.max_len <= MAX_LEN
    for n, t in res.fixed_lengths.items():
        assert res.time_per_token_s <= t * (1 + 1e-12), (n, t, res.time_per_token_s)
    assert res.time_per_token_s <= res.authors_time_per_token_s * (1 + 1e-12)
    assert res.gain_over_best_fixed >= 1 - 1e-12
    drafted = np.flatnonzero(res.length_hist)
    assert drafted.min() >= MIN_LEN and drafted.max() <= res.max_len
    assert res.speedup > 1
    # The reported numbers are those of the policy replayed with the chosen setting.
    again = specdecpp(
        trace(seed, confident),
        DRAFT,
        pricing(hw),
        threshold=res.threshold,
        max_len=res.max_len,
        seed=seed,
    )
    assert again.time_per_token_s == res.time_per_token_s
    np.testing.assert_array_equal(again.length_hist, res.length_hist)


def test_result_summary_for_the_common_table() -> None:
    res = specdecpp(trace(), None, pricing("h100"), budget=6, threshold=0.5)
    assert not res.chosen and res.threshold == 0.5 and res.source == DRAFT
    assert max(res.fixed_lengths) == 5 and res.max_len <= 5
    assert res.length_hist.sum() == res.steps
    assert res.tokens_per_step * res.steps == pytest.approx(120 * 256)
    assert res.mean_verified == pytest.approx(res.mean_drafted + 1)
    assert res.length_hist[res.most_frequent_length] == res.length_hist.max()
    assert res.tree == Tree.chain(res.most_frequent_length, DRAFT)
    assert res.policy == ThresholdPolicy(res.predictor, 0.5, MIN_LEN, res.max_len)


def test_specdecpp_is_deterministic() -> None:
    a = specdecpp(trace(), DRAFT, pricing("cpu-2core"), seed=4)
    b = specdecpp(trace(), DRAFT, pricing("cpu-2core"), seed=4)
    assert (a.threshold, a.max_len, a.time_per_token_s) == (
        b.threshold,
        b.max_len,
        b.time_per_token_s,
    )
    np.testing.assert_array_equal(a.length_hist, b.length_hist)
    assert a.fixed_lengths == b.fixed_lengths


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.2, 1.5, math.nan])
def test_bad_threshold_is_an_input_error(bad: float) -> None:
    with pytest.raises(InputError, match="--specdecpp-threshold"):
        specdecpp(trace(), DRAFT, pricing("h100"), threshold=bad)
    with pytest.raises(InputError, match="--specdecpp-threshold"):
        ThresholdPolicy(predictor(), bad)


def test_bad_bounds_are_input_errors() -> None:
    with pytest.raises(InputError, match="--budget 2"):
        specdecpp(trace(), DRAFT, pricing("h100"), budget=2)
    with pytest.raises(InputError, match="max length"):
        specdecpp(trace(), DRAFT, pricing("h100"), budget=8, max_len=8)
    with pytest.raises(InputError, match="length bounds"):
        ThresholdPolicy(predictor(), 0.7, 3, 2)
    with pytest.raises(InputError, match="sequence source"):
        specdecpp(trace(), "ngram", pricing("h100"))
