"""DySpec greedy trees: optimal when its assumptions hold, the literal heap always, the gap to the
DP otherwise; the per-step policy (one draft forward per level) and EAGLE-2's beam variant."""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable, Sequence
from functools import cache

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope.draft import DraftNode
from specscope.errors import InputError
from specscope.optimizers.baselines import best_first_tree
from specscope.optimizers.dyspec import (
    DySpecPolicy,
    ScoreCalibration,
    dp_gap,
    draft_scores,
    dyspec_from_scores,
    dyspec_tree,
    eagle2_from_scores,
    eagle2_tree,
)
from specscope.optimizers.sequoia import optimal_tree
from specscope.trace import AcceptanceModel, RankedBehaviour, Trace, replay, synth_trace
from specscope.tree import Tree

DRAFT = "draft:llama-68m"
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TokenPath = tuple[int, ...]
LiveDraft = Callable[[TokenPath], tuple[list[int], list[float]]]


@cache
def trace_for(seed: int, top1: float = 0.6) -> Trace:
    behaviour = {DRAFT: RankedBehaviour(top1=top1, decay=0.35, depth_decay=0.97)}
    return synth_trace(6, seed, sources=(DRAFT,), length=96, k=6, behaviour=behaviour)


# ---- references written independently of the level-batched engine --------------------------


def heap_greedy(draft: LiveDraft, budget: int, cap: int | None = None) -> list[TokenPath]:
    """DySpec as published: pop the best frontier node, add it, push its first child and its next
    sibling (ties of f by the rank path). Returns the rank paths of the added nodes, in order."""
    cap = budget - 1 if cap is None else min(cap, budget - 1)
    proposals: dict[TokenPath, tuple[list[int], list[float]]] = {}
    score: dict[TokenPath, float] = {(): 1.0}
    heap: list[tuple[float, TokenPath, TokenPath]] = []  # (−f, rank path, token path)

    def push(ranks: TokenPath, tokens: TokenPath) -> None:
        if tokens not in proposals:
            proposals[tokens] = draft(tokens)
        toks, probs = proposals[tokens]
        r = ranks[-1]
        if r < len(toks):
            f = score[tokens] * probs[r]
            heapq.heappush(heap, (-f, ranks, (*tokens, toks[r])))

    added: list[TokenPath] = []
    if cap >= 1:
        push((0,), ())
    while heap and len(added) < budget - 1:
        neg_f, ranks, tokens = heapq.heappop(heap)
        score[tokens] = -neg_f
        added.append(ranks)
        push((*ranks[:-1], ranks[-1] + 1), tokens[:-1])
        if len(ranks) < cap:
            push((*ranks, 0), tokens)
    return added


def static_draft(q: Sequence[float]) -> LiveDraft:
    return lambda tokens: (list(range(len(q))), list(q))


def live_draft(seed: int, k: int) -> LiveDraft:
    """A deterministic stand-in for a draft model: top-k tokens and descending probabilities
    that depend on the whole token path (as a real draft's do)."""

    def draft(tokens: TokenPath) -> tuple[list[int], list[float]]:
        rng = np.random.default_rng([seed, zlib.crc32(repr(tokens).encode())])
        probs = np.sort(rng.dirichlet(np.full(k + 1, 0.5)))[::-1][:k]
        return rng.choice(1000, k, replace=False).tolist(), probs.tolist()

    return draft


def rank_paths(tree: Tree) -> list[TokenPath]:
    return [tuple(int(tree.ranks[u]) for u in tree.path(v)[1:]) for v in range(1, tree.size)]


class Recorder:
    """`propose` for the policy, backed by a LiveDraft; records every call."""

    def __init__(self, draft: LiveDraft) -> None:
        self.draft = draft
        self.paths: dict[int, TokenPath] = {0: ()}
        self.calls: list[list[DraftNode]] = []

    def __call__(self, nodes: list[DraftNode]) -> list[tuple[list[int], list[float]]]:
        self.calls.append(nodes)
        for node in nodes:
            if node.id:
                self.paths[node.id] = (*self.paths[node.parent], node.token)
        return [self.draft(self.paths[node.id]) for node in nodes]


vectors = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8).map(
    lambda xs: np.array(xs) / max(1.0, sum(xs))
)
tied = st.lists(st.sampled_from([0.0, 0.125, 0.25, 0.5]), min_size=1, max_size=4).map(
    lambda xs: np.array(xs) / max(1.0, sum(xs))
)


# ---- static: optimality, the literal heap, the gap ------------------------------------------


@FAST
@given(q=vectors, budget=st.integers(1, 64))
def test_static_equals_the_dp_for_a_monotone_vector_without_depth_cap(
    q: np.ndarray, budget: int
) -> None:
    q = np.sort(q)[::-1]
    tree = dyspec_from_scores(q, budget)
    gap = dp_gap(tree, q)
    assert tree.size <= budget
    assert abs(gap.absolute) <= 1e-9
    assert gap.dp == pytest.approx(optimal_tree(q, budget).expected_tokens(q), abs=1e-12)
    assert abs(tree.expected_tokens(q) - best_first_tree(q, budget).expected_tokens(q)) <= 1e-9


@FAST
@given(q=st.one_of(vectors, tied), budget=st.integers(1, 40), cap=st.none() | st.integers(0, 5))
def test_static_is_the_literal_heap_for_any_vector(
    q: np.ndarray, budget: int, cap: int | None
) -> None:
    tree = dyspec_from_scores(q, budget, cap)
    assert tree == Tree.from_rank_paths(heap_greedy(static_draft(q), budget, cap))
    assert dp_gap(tree, q, cap).absolute >= -1e-9  # the DP is never beaten


def test_gap_to_the_dp_when_the_assumptions_fail() -> None:
    # A strong rank-2 candidate hidden behind a weak rank-1 one: the greedy digs the rank-0 chain.
    q = [0.326, 0.023, 0.645]
    gap = dp_gap(dyspec_from_scores(q, 5), q)
    assert gap.dp == pytest.approx(1 + 0.326 + 0.023 + 0.645 + 0.645 * 0.326)  # ranks 0-2, (2, 0)
    assert gap.tree == pytest.approx(1 + 0.326 + 0.326**2 + 0.326**3 + 0.023)  # chain, then rank 1
    print(f"\nnon-monotone q={q}, n=5: DP {gap.dp:.4f}, DySpec {gap.tree:.4f}, "
          f"gap {100 * gap.relative:.1f}%")
    # Random non-monotone vectors, some depth-capped: the greedy never beats the DP, often ties.
    rng = np.random.default_rng(2)
    rel = []
    for i in range(200):
        v = rng.dirichlet(np.ones(int(rng.integers(2, 6)))) * rng.uniform(0.5, 1)
        cap = None if i % 2 else int(rng.integers(1, 5))
        rel.append(dp_gap(dyspec_from_scores(v, int(rng.integers(2, 33)), cap), v, cap).relative)
    rel = np.array(rel)
    assert rel.min() >= -1e-12 and 0 < rel.mean() < 0.05
    print(f"200 random non-monotone vectors: mean gap {100 * rel.mean():.2f}%, "
          f"max {100 * rel.max():.1f}%, {100 * np.mean(rel > 1e-9):.0f}% below the DP")
    # A monotone vector under a binding depth cap: the greedy still keeps the best n − 1 nodes.
    p = [0.6, 0.2, 0.1, 0.05]
    assert abs(dp_gap(dyspec_from_scores(p, 32, 3), p, 3).absolute) <= 1e-12


def test_dp_gap_on_the_hand_checked_case() -> None:
    p = [0.6, 0.2, 0.1, 0.05]
    gap = dp_gap(Tree.chain(4), p)
    assert gap.dp == pytest.approx(2.376)
    assert gap.tree == pytest.approx(1 + 0.6 + 0.36 + 0.216 + 0.1296)
    assert gap.relative == pytest.approx(gap.absolute / 2.376)
    assert dyspec_from_scores(p, 5).expected_tokens(p) == pytest.approx(2.376)


# ---- from traces --------------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 5),
    top1=st.sampled_from([0.2, 0.6, 0.64]),
    budget=st.integers(1, 48),
    cap=st.none() | st.integers(0, 6),
    calibrate=st.booleans(),
    beam=st.integers(1, 6),
)
def test_trace_trees_are_valid_within_budget_and_depth(
    seed: int, top1: float, budget: int, cap: int | None, calibrate: bool, beam: int
) -> None:
    trace = trace_for(seed, top1)
    for tree in (
        dyspec_tree(trace, DRAFT, budget, cap, calibrate),
        eagle2_tree(trace, None, budget, beam, cap, calibrate),
    ):
        assert tree.size <= budget and tree.depth <= (budget if cap is None else cap)
        assert set(tree.sources[1:]) <= {DRAFT} and tree.ranks[1:].max(initial=0) < 6
        assert replay(trace, tree).tokens_per_step >= 1
    q = draft_scores(trace, DRAFT, calibrate)
    assert q.shape == (6,) and np.all((q >= 0) & (q <= 1))
    assert dyspec_tree(trace, DRAFT, budget, cap, calibrate) == dyspec_from_scores(q, budget, cap,
                                                                                   DRAFT)


def test_calibration_is_monotone_and_learns_the_top1_signal() -> None:
    trace = synth_trace(16, seed=4, sources=(DRAFT,), length=128)
    cal = ScoreCalibration.fit(trace)
    assert np.all(np.diff(cal.x) > 0) and np.all(np.diff(cal.y) >= 0)
    assert cal([0.0])[0] < 0.1 and cal([0.9])[0] > 0.8
    # synth's top-1 score is informative: P(rank 0) rises across score quartiles.
    rows = trace.df.filter(pl.col("source") == DRAFT)
    top = rows.get_column("cand_scores").list.first().to_numpy()
    hit = rows.get_column("rank").to_numpy() == 0
    quartile = np.digitize(top, np.quantile(top, [0.25, 0.5, 0.75]))
    rate = [hit[quartile == i].mean() for i in range(4)]
    assert np.all(np.diff(rate) > 0.05) and rate[3] - rate[0] > 0.4
    # The calibrated per-rank scores track the trace's acceptance better than the raw ones.
    p = AcceptanceModel.from_trace(trace).p
    raw, calibrated = draft_scores(trace, calibrate=False), draft_scores(trace)
    assert np.abs(calibrated - p).sum() < np.abs(raw - p).sum()


def test_calibration_at_temperature_fits_target_probabilities() -> None:
    base = trace_for(1)
    hot = Trace(base.df, {**base.metadata, "temperature": 0.8})
    cal = ScoreCalibration.fit(hot)
    assert np.all(np.diff(cal.y) >= 0) and 0 < cal.y.max() <= 1
    assert not np.array_equal(cal.y, ScoreCalibration.fit(base).y)


# ---- the per-step policy ------------------------------------------------------------------------


@FAST
@given(q=vectors, budget=st.integers(1, 48), cap=st.none() | st.integers(0, 6))
def test_policy_with_a_fixed_drafter_reproduces_the_static_tree(
    q: np.ndarray, budget: int, cap: int | None
) -> None:
    recorder = Recorder(static_draft(q))
    drafted = DySpecPolicy(budget, cap).build(recorder, root_token=7)
    assert drafted.tree == dyspec_from_scores(q, budget, cap)
    assert drafted.forwards == len(recorder.calls) <= drafted.tree.depth + 1
    assert drafted.tokens[0] == 7 and np.array_equal(drafted.tokens[1:], drafted.tree.ranks[1:])
    np.testing.assert_allclose(drafted.scores, drafted.tree.node_scores(q), rtol=1e-12)


@FAST
@given(seed=st.integers(0, 10**6), k=st.integers(1, 6), budget=st.integers(1, 64),
       cap=st.none() | st.integers(1, 8))
def test_policy_on_live_probabilities_is_the_heap_with_one_forward_per_level(
    seed: int, k: int, budget: int, cap: int | None
) -> None:
    draft = live_draft(seed, k)
    recorder = Recorder(draft)
    drafted = DySpecPolicy(budget, cap).build(recorder)
    expected = heap_greedy(draft, budget, cap)
    assert sorted(rank_paths(drafted.tree)) == sorted(expected)
    # one batched forward per level, levels in order
    assert [{n.depth for n in call} for call in recorder.calls] == [
        {d} for d in range(len(recorder.calls))
    ]
    assert drafted.forwards == len(recorder.calls) <= drafted.tree.depth + 1
    # each forward runs the expanded nodes, their ancestors and the root
    parent_of = {n.id: n.parent for call in recorder.calls for n in call}
    for call, forwarded in zip(recorder.calls, drafted.forwarded, strict=True):
        above = {0}
        for n in call:
            v = n.id
            while v > 0:
                above.add(v)
                v = parent_of[v]
        assert forwarded == len(above)
    # tokens and scores belong to their nodes
    tree = drafted.tree
    for v in range(1, tree.size):
        u = int(tree.parents[v])
        path = tuple(int(drafted.tokens[w]) for w in tree.path(u)[1:])
        toks, probs = draft(path)
        assert drafted.tokens[v] == toks[tree.ranks[v]]
        assert drafted.scores[v] == pytest.approx(drafted.scores[u] * probs[tree.ranks[v]])


def test_policy_applies_the_calibration_to_live_probabilities() -> None:
    cal = ScoreCalibration(np.array([0.0, 1.0]), np.array([0.0, 0.5]))
    q = [0.8, 0.15]
    drafted = DySpecPolicy(6, calibration=cal).build(Recorder(static_draft(q)))
    assert drafted.tree == dyspec_from_scores([0.4, 0.075], 6)
    np.testing.assert_allclose(drafted.scores, drafted.tree.node_scores([0.4, 0.075]))


def test_policy_rejects_bad_settings_and_bad_proposals() -> None:
    with pytest.raises(InputError, match="budget"):
        DySpecPolicy(0)
    with pytest.raises(InputError, match="beam"):
        DySpecPolicy(8, beam=0)
    with pytest.raises(InputError, match="depth"):
        DySpecPolicy(8, max_depth=-1)
    with pytest.raises(InputError, match="2 proposals for 1 nodes"):
        DySpecPolicy(8).build(lambda nodes: [([1], [0.5])] * 2)
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        DySpecPolicy(8).build(lambda nodes: [([1, 2], [0.5, 1.5])] * len(nodes))
    with pytest.raises(InputError, match="as many tokens"):
        DySpecPolicy(8).build(lambda nodes: [([1, 2], [0.5])] * len(nodes))
    with pytest.raises(InputError, match="vector"):
        dyspec_from_scores([[0.5, 0.2]], 8)
    assert DySpecPolicy(1).build(lambda nodes: pytest.fail("no forward for n = 1")).forwards == 0


# ---- EAGLE-2 ------------------------------------------------------------------------------------


@FAST
@given(seed=st.integers(0, 10**6), k=st.integers(1, 6), budget=st.integers(1, 64),
       beam=st.integers(1, 4))
def test_eagle2_expands_at_most_beam_nodes_per_level_within_budget(
    seed: int, k: int, budget: int, beam: int
) -> None:
    recorder = Recorder(live_draft(seed, k))
    drafted = DySpecPolicy(budget, beam=beam).build(recorder)
    assert drafted.tree.size <= budget
    assert all(len(call) <= beam for call in recorder.calls)
    exact = DySpecPolicy(budget).build(Recorder(live_draft(seed, k)))
    assert drafted.scores.sum() <= exact.scores.sum() + 1e-12  # the exact greedy keeps the best
    wide = DySpecPolicy(budget, beam=budget).build(Recorder(live_draft(seed, k)))
    assert wide.tree == exact.tree


def test_eagle2_static_tree_keeps_the_global_top_nodes() -> None:
    q = [0.6, 0.2, 0.1, 0.05]
    tree = eagle2_from_scores(q, 16, beam=2)
    assert tree.size == 16
    expanded = {int(tree.parents[v]) for v in range(1, tree.size)}
    per_level = np.bincount(tree.depths[sorted(expanded)])
    assert per_level.max() <= 2
    assert tree.expected_tokens(q) <= dyspec_from_scores(q, 16).expected_tokens(q) + 1e-12
    assert eagle2_from_scores(q, 16, beam=16) == dyspec_from_scores(q, 16)
