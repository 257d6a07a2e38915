"""Goose spine trees: the budget policy, the tree's shape, the either-source guarantee, the honest
expected value against replay, the isotropic control; and the synthetic copy runs they rely on."""

from __future__ import annotations

from functools import cache

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope.errors import InputError
from specscope.optimizers.goose import (
    BRANCH_DEPTH,
    SCORE_FLOOR,
    GoosePolicy,
    Split,
    branch_paths,
    goose_acceptance,
    goose_tree,
    isotropic_tree,
    spine_allowances,
    spine_tree,
)
from specscope.trace import (
    AcceptanceModel,
    RankedBehaviour,
    SequenceBehaviour,
    Trace,
    accepted_lengths,
    replay,
    synth_trace,
)
from specscope.tree import Tree

FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])

behaviours = st.builds(
    lambda mean, none, top1, decay, depth_decay: {
        "ngram": SequenceBehaviour(mean_match=mean, no_match=none),
        "suffix": SequenceBehaviour(mean_match=mean + 1, no_match=min(none + 0.2, 1.0)),
        "recycle": RankedBehaviour(top1=top1 * (1 - decay), decay=decay, depth_decay=depth_decay),
    },
    st.floats(0.0, 6.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),  # top1 as a fraction of the most that keeps Σ p ≤ 1
    st.floats(0.2, 0.6),
    st.floats(0.8, 1.0),
)


@cache
def default_trace(seed: int) -> Trace:
    return synth_trace(16, seed, sources=("ngram", "suffix", "recycle"), length=256)


def spine_of(tree: Tree, source: str) -> list[int]:
    """The chain of `source` nodes from the root (root included)."""
    spine = [0]
    while nxt := [c for c in tree.children[spine[-1]] if tree.sources[c] == source]:
        spine.append(nxt[0])
    return spine


def without(tree: Tree, drop: set[int]) -> Tree:
    """`tree` without the nodes in `drop` and everything below them."""
    kept, index = [0], {0: 0}
    for v in range(1, tree.size):
        if v not in drop and int(tree.parents[v]) in index:
            index[v] = len(kept)
            kept.append(v)
    return Tree.from_parents(
        [-1] + [index[int(tree.parents[v])] for v in kept[1:]],
        [int(tree.ranks[v]) for v in kept],
        [tree.sources[v] for v in kept],
    )


# ---- synthetic copy runs ------------------------------------------------------------------------


@FAST
@given(seed=st.integers(0, 2**32 - 1), mean=st.floats(0.0, 8.0), none=st.floats(0.0, 1.0),
       max_len=st.integers(1, 12))
def test_synth_match_lengths_come_in_copy_runs(
    seed: int, mean: float, none: float, max_len: int
) -> None:
    b = SequenceBehaviour(mean_match=mean, no_match=none, max_len=max_len)
    trace = synth_trace(3, seed, sources=("ngram",), length=60, behaviour={"ngram": b})
    rows = trace.df.sort("request_id", "pos")
    m = rows.get_column("match_len").to_numpy().reshape(3, 60)
    proposals = rows.get_column("proposal").to_list()
    assert np.all(m[:, 1:] >= m[:, :-1] - 1)
    for r in range(3):
        for t in range(59):
            if m[r, t] >= 2:  # inside a run the next proposal is this one, one token on
                a, b_ = proposals[r * 60 + t], proposals[r * 60 + t + 1]
                assert a[1 : 1 + len(b_)] == b_[: len(a) - 1]


def test_synth_run_lengths_are_geometric_with_the_stationary_marginal() -> None:
    b = SequenceBehaviour(mean_match=2.0, no_match=0.4, max_len=400)
    trace = synth_trace(64, 8, sources=("ngram",), length=512, behaviour={"ngram": b})
    m = trace.df.sort("request_id", "pos").get_column("match_len").to_numpy().reshape(64, 512)
    start = (m >= 1) & np.c_[np.ones((64, 1), bool), m[:, :-1] <= 1]
    uncut = start & (m < 512 - np.arange(512))  # runs not cut by the request's end
    assert m[uncut].mean() == pytest.approx(1 + b.mean_match, rel=0.05)  # 1 + geometric(q)
    for j in (1, 2, 4):
        assert np.mean(m >= j) == pytest.approx((1 - b.no_match) * b.q**j, rel=0.08)


# ---- the budget policy --------------------------------------------------------------------------


def test_spine_share_follows_the_acceptance_tiers_and_the_ema() -> None:
    assert [GoosePolicy(a).spine_share for a in (0.0, 0.19, 0.2, 0.39, 0.4, 1.0)] == [
        0.15, 0.15, 0.30, 0.30, 0.50, 0.50
    ]
    policy = GoosePolicy()
    assert policy.acceptance == 0.3 and policy.spine_share == 0.30
    assert policy.update(0) == pytest.approx(0.21)
    assert policy.update(0) == pytest.approx(0.147) and policy.spine_share == 0.15
    assert policy.update(4) == pytest.approx(0.3 + 0.7 * 0.147) and policy.spine_share == 0.50
    with pytest.raises(InputError, match="spine acceptance"):
        GoosePolicy(1.5)


def test_budget_split_by_confidence_share_and_halves() -> None:
    assert [GoosePolicy.total_budget(c) for c in (-1, 0, 0.5, 1, 2)] == [60, 60, 80, 100, 100]
    policy = GoosePolicy(0.3)  # spine share 0.30
    assert policy.split(61) == Split(18, 21, 21)
    assert policy.split(61, spine_limit=10) == Split(10, 25, 25)
    assert policy.split(62, spine_limit=0) == Split(0, 0, 61)  # no proposal: all on the root
    assert GoosePolicy(0.5).split(101) == Split(50, 25, 25)
    assert GoosePolicy(0.0).split(81) == Split(12, 34, 34)
    assert sum(GoosePolicy(0.25).split(77)) == 76
    with pytest.raises(InputError, match="budget"):
        policy.split(0)


@given(spine=st.integers(0, 30), nodes=st.integers(0, 200))
def test_spine_branch_allowances_decay_as_one_over_i(spine: int, nodes: int) -> None:
    counts = spine_allowances(spine, nodes)
    assert len(counts) == spine and sum(counts) == (nodes if spine else 0)
    if spine:
        exact = nodes / np.arange(1, spine + 1) / np.sum(1 / np.arange(1, spine + 1))
        assert np.all(np.abs(np.array(counts) - exact) < 1)
        assert np.all(np.diff(counts) <= 0)


# ---- the tree ----------------------------------------------------------------------------------


@FAST
@given(seed=st.integers(0, 10**6), behaviour=behaviours, budget=st.none() | st.integers(1, 120),
       max_depth=st.none() | st.integers(1, 14), spine_source=st.sampled_from(["ngram", "suffix"]))
def test_goose_tree_shape(
    seed: int, behaviour: dict, budget: int | None, max_depth: int | None, spine_source: str
) -> None:
    trace = synth_trace(4, seed, sources=("ngram", "suffix", "recycle"), length=64,
                        behaviour=behaviour)
    tree = goose_tree(trace, spine_source, "recycle", budget, max_depth)
    longest = trace.df.filter(pl.col("source") == spine_source).get_column("proposal").list.len()
    rate = goose_acceptance(trace, spine_source).step_rate(int(longest.max()))
    n = GoosePolicy.total_budget(rate) if budget is None else budget
    assert tree.size <= n and tree.depth <= (n - 1 if max_depth is None else max_depth)
    spine = spine_of(tree, spine_source)
    cap = n - 1 if max_depth is None else max_depth
    split = GoosePolicy(rate).split(n, min(int(longest.max()), cap))
    assert len(spine) - 1 == split.spine
    table = AcceptanceModel.from_trace(trace, "recycle", depth_dependent=True, max_depth=6).p
    anchor = {s: s for s in spine}
    score = {s: 1.0 for s in spine}
    on_root = on_spine = 0
    for v in range(1, tree.size):
        kids = tree.children[v]
        if v in anchor:
            assert tree.ranks[v] == 0
            continue
        assert tree.sources[v] == "recycle"
        u = int(tree.parents[v])
        anchor[v] = anchor[u]
        below = int(tree.depths[v] - tree.depths[anchor[v]])
        assert 1 <= below <= BRANCH_DEPTH
        score[v] = score[u] * table[min(below, len(table)) - 1][tree.ranks[v]]
        assert score[v] >= SCORE_FLOOR
        on_root, on_spine = on_root + (anchor[v] == 0), on_spine + (anchor[v] != 0)
        assert all(tree.sources[c] == "recycle" for c in kids)
    assert on_root <= split.root_branches and on_spine <= split.spine_branches
    for s in spine[:-1]:  # the spine child comes first among its siblings
        assert tree.children[s][0] == spine[spine.index(s) + 1]


@FAST
@given(seed=st.integers(0, 10**6), behaviour=behaviours, budget=st.integers(2, 100),
       spine_source=st.sampled_from(["ngram", "suffix"]))
def test_goose_accepts_at_least_either_source_alone(
    seed: int, behaviour: dict, budget: int, spine_source: str
) -> None:
    trace = synth_trace(4, seed, sources=("ngram", "suffix", "recycle"), length=128,
                        behaviour=behaviour)
    tree = goose_tree(trace, spine_source, "recycle", budget)
    spine = spine_of(tree, spine_source)
    chain = Tree.chain(len(spine) - 1, spine_source)
    root_branches = without(tree, set(spine[1:]))
    goose = accepted_lengths(trace, tree)
    assert np.all(goose >= accepted_lengths(trace, chain))
    assert np.all(goose >= accepted_lengths(trace, root_branches))
    tokens = replay(trace, tree).tokens_per_step
    assert tokens >= replay(trace, chain).tokens_per_step
    assert tokens >= replay(trace, root_branches).tokens_per_step


def test_branch_paths_respect_floor_depth_and_count() -> None:
    p = [0.5, 0.25, 0.125, 0.0625]
    paths = branch_paths(p, 40, depth=3)
    assert len(paths) <= 40 and max(map(len, paths)) <= 3
    assert all(np.prod([p[r] for r in path]) >= SCORE_FLOOR for path in paths)
    assert (3,) in paths and (3, 3) not in paths  # 0.0625² < 0.01
    assert branch_paths(p, 0) == [] and branch_paths(p, 5, depth=0) == []
    with_floor = branch_paths(p, 200, depth=6)
    assert len(with_floor) < 200  # the floor, not the allowance, bounds it


def test_spine_tree_puts_the_spine_child_first_for_any_source_names() -> None:
    tree = spine_tree(2, [(0,), (1,), (0, 0)], [[(0,)], [(0,), (1,)]], "suffix", "recycle")
    assert tree.size == 1 + 2 + 3 + 1 + 2
    assert [tree.sources[c] for c in tree.children[0]] == ["suffix", "recycle", "recycle"]
    first = tree.children[0][0]
    assert [tree.sources[c] for c in tree.children[first]] == ["suffix", "recycle"]
    with pytest.raises(InputError, match="spine branches"):
        spine_tree(1, [], [[], []], "ngram", "recycle")


def test_bad_sources_are_input_errors() -> None:
    trace = default_trace(0)
    with pytest.raises(InputError, match="no proposals"):
        goose_tree(trace, "recycle", "ngram")
    with pytest.raises(InputError, match="ranked source"):
        goose_tree(trace, "ngram", "suffix")
    with pytest.raises(InputError, match="not in the trace"):
        goose_acceptance(trace, "ngram", "draft:x")


# ---- expected tokens ----------------------------------------------------------------------------

PREDICTION_CASES = {
    "defaults": {},
    "weak n-gram": {"ngram": SequenceBehaviour(1.5, 0.5)},
    "strong both": {"ngram": SequenceBehaviour(5.0, 0.3), "recycle": RankedBehaviour(0.4, 0.5)},
    "deep recycle runs": {"recycle": RankedBehaviour(0.5, 0.4, 0.95)},
    "rare n-gram": {"ngram": SequenceBehaviour(2.0, 0.6), "recycle": RankedBehaviour(0.2, 0.5)},
}


@pytest.mark.parametrize("spine_source", ["ngram", "suffix"])
@pytest.mark.parametrize("case", sorted(PREDICTION_CASES))
def test_predicted_tokens_match_replay(case: str, spine_source: str) -> None:
    trace = synth_trace(
        32, 7, sources=("ngram", "suffix", "recycle"), behaviour=PREDICTION_CASES[case]
    )
    tree = goose_tree(trace, spine_source)
    acc = goose_acceptance(trace, spine_source)
    predicted, replayed = acc.expected_tokens(tree), replay(trace, tree).tokens_per_step
    tables = {
        s: AcceptanceModel.from_trace(trace, s, depth_dependent=True).p
        for s in (spine_source, "recycle")
    }
    naive = tree.expected_tokens(tables)
    print(f"\n{case}, spine {spine_source}, n={tree.size}: predicted {predicted:.3f}, replayed "
          f"{replayed:.3f} ({100 * (predicted / replayed - 1):+.1f}%); per-source sum "
          f"{naive:.3f} ({100 * (naive / replayed - 1):+.0f}%)")
    assert predicted == pytest.approx(replayed, rel=0.04)
    assert naive > predicted  # the per-source sum double counts and ignores where steps start
    spine = Tree.chain(len(spine_of(tree, spine_source)) - 1, spine_source)
    assert acc.expected_tokens(spine) == pytest.approx(replay(trace, spine).tokens_per_step,
                                                       rel=0.01)


def test_node_scores_of_branches_alone_are_the_branch_statistics() -> None:
    trace = default_trace(1)
    acc = goose_acceptance(trace)
    tree = without(goose_tree(trace), set(spine_of(goose_tree(trace), "ngram")[1:]))
    table = AcceptanceModel.from_trace(trace, "recycle", depth_dependent=True, max_depth=6).p
    np.testing.assert_allclose(acc.node_scores(tree), tree.node_scores({"recycle": table}))
    f = acc.node_scores(goose_tree(trace))
    spine = spine_of(goose_tree(trace), "ngram")
    assert f[0] == 1 and np.all(np.diff(f[spine]) <= 0) and np.all(f >= 0)
    row = acc.first_level(len(spine) - 1)
    assert row.shape == (len(spine), 8) and np.all(row.sum(axis=1) <= 1)
    with pytest.raises(InputError, match="not a Goose tree"):
        acc.node_scores(isotropic_tree(trace, budget=20, k=3))


# ---- the isotropic control ----------------------------------------------------------------------


@pytest.mark.parametrize("k", [None, 2, 4])
def test_isotropic_control_is_a_balanced_tree_of_the_same_budget(k: int | None) -> None:
    trace = default_trace(2)
    goose = goose_tree(trace)
    iso = isotropic_tree(trace, budget=goose.size, k=k)
    assert iso.size == goose.size and set(iso.sources[1:]) == {"ngram", "recycle"}
    width = max(len(c) for c in iso.children)
    assert k is None or width == k
    for kids in iso.children:
        if kids:  # first child: the n-gram proposal; then recycle ranks 0, 1, ...
            assert iso.sources[kids[0]] == "ngram" and iso.ranks[kids[0]] == 0
            assert [iso.ranks[c] for c in kids[1:]] == list(range(len(kids) - 1))
            assert all(iso.sources[c] == "recycle" for c in kids[1:])
    internal = [v for v, kids in enumerate(iso.children) if kids]
    assert all(len(iso.children[v]) == width for v in internal[:-1])  # filled breadth-first
    assert isotropic_tree(trace, budget=40, max_depth=2).depth <= 2


def test_goose_beats_the_isotropic_control_on_the_synthetic_defaults() -> None:
    for seed in (0, 1, 2):
        trace = default_trace(seed)
        goose = goose_tree(trace)
        iso = isotropic_tree(trace, budget=goose.size)
        g, i = replay(trace, goose).tokens_per_step, replay(trace, iso).tokens_per_step
        print(f"\nseed {seed}, n={goose.size}: Goose {g:.3f} tokens/step, isotropic {i:.3f} "
              f"({100 * (g / i - 1):+.0f}%)")
        assert g > i


def test_step_rate_is_what_the_running_acceptance_converges_to() -> None:
    trace = default_trace(3)
    acc = goose_acceptance(trace)
    spine = Tree.chain(10, "ngram")
    lengths = accepted_lengths(trace, spine)
    policy, hits = GoosePolicy(), []
    for row in lengths:  # run the spine alone step by step, as an executor would
        pos = 0
        while pos < row.size and row[pos] >= 0:
            hits.append(row[pos] > 0)
            policy.update(int(row[pos]))
            pos += int(row[pos]) + 1
    assert acc.step_rate(10) == pytest.approx(np.mean(hits), abs=1e-12)
    assert abs(policy.acceptance - acc.step_rate(10)) < 0.25  # an EMA of the same events
    p0 = AcceptanceModel.from_trace(trace, "ngram").p[0]
    assert acc.step_rate(10) < 0.7 * p0  # steps consume copy runs: far below the position rate
