"""ETS integer program: equal to the DP without side terms, side terms act as documented."""

from __future__ import annotations

import numpy as np
import pulp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.errors import InputError
from specscope.optimizers.ets import (
    candidate_pool,
    dp_batch,
    dp_tree,
    equal_split,
    ets_batch,
    ets_gap,
    ets_tree,
)
from specscope.optimizers.sequoia import optimal_tree, value_table
from specscope.tree import Tree

FAST = settings(max_examples=25, deadline=None)


def keys(tree: Tree) -> set[tuple[str, tuple[int, ...]]]:
    """(source, rank path) of every non-root node."""
    paths = [()]
    for i in range(1, tree.size):
        paths.append((*paths[tree.parents[i]], int(tree.ranks[i])))
    return set(zip(tree.sources[1:], paths[1:], strict=True))


def check_tree(tree: Tree, budget: int, max_depth: int | None) -> None:
    """Valid and canonical, within budget and depth, ancestor- and sibling-closed."""
    assert Tree.from_dict(tree.to_dict()) == tree
    assert tree.size <= budget
    assert max_depth is None or tree.depth <= max_depth
    kept = keys(tree)
    for src, path in kept:
        assert len(path) == 1 or (src, path[:-1]) in kept
        assert path[-1] == 0 or (src, (*path[:-1], path[-1] - 1)) in kept


def dp_best(p, budget: int, max_depth: int | None) -> float:
    """Best G over trees of at most `budget` nodes, read from Sequoia's value table."""
    table = value_table(p, budget, max_depth)
    return float(table[1:, -1].max())


def total_g(trees: list[Tree], ps) -> float:
    return sum(t.expected_tokens(p) for t, p in zip(trees, ps, strict=True))


# Vectors with zeros and no monotonicity; scaled so that Σ p ≤ 1.
vectors = st.lists(st.sampled_from([0.0, 0.02, 0.1, 0.3, 0.5, 0.8, 1.0]), min_size=1,
                   max_size=5).map(lambda v: np.array(v) / max(1.0, sum(v)))
depth_caps = st.none() | st.integers(0, 6)


def test_hand_checked_case() -> None:
    p = [0.6, 0.2, 0.1, 0.05]
    assert ets_tree(p, 5).expected_tokens(p) == pytest.approx(2.376)
    assert ets_tree(p, 8, max_depth=4).expected_tokens(p) == pytest.approx(2.7456)


@FAST
@given(p=vectors, budget=st.integers(1, 24), max_depth=depth_caps)
def test_equals_dp_on_vectors(p: np.ndarray, budget: int, max_depth: int | None) -> None:
    tree = ets_tree(p, budget, max_depth)
    check_tree(tree, budget, max_depth)
    assert tree.expected_tokens(p) == pytest.approx(dp_best(p, budget, max_depth), abs=1e-6)
    assert abs(ets_gap(p, budget, max_depth)) < 1e-6


@FAST
@given(
    rows=st.lists(vectors.map(lambda v: np.resize(v, 4)), min_size=2, max_size=4),
    budget=st.integers(1, 14),
    max_depth=st.integers(0, 4),
)
def test_equals_dp_on_depth_tables(rows: list[np.ndarray], budget: int, max_depth: int) -> None:
    table = np.array(rows) / np.maximum(1.0, np.array(rows).sum(axis=1, keepdims=True))
    tree = ets_tree(table, budget, max_depth)
    check_tree(tree, budget, max_depth)
    assert tree.expected_tokens(table) == pytest.approx(dp_best(table, budget, max_depth),
                                                        abs=1e-6)


@FAST
@given(a=vectors, b=vectors, budget=st.integers(1, 16), max_depth=depth_caps)
def test_two_sources_equal_best_split(a, b, budget: int, max_depth: int | None) -> None:
    p = {"draft": a, "ngram": b}
    tree = ets_tree(p, budget, max_depth)
    check_tree(tree, budget, max_depth)
    # Best G with at most n nodes, per source; "draft" drafts k nodes, "ngram" the rest.
    ta, tb = (np.maximum.accumulate(value_table(v, budget, max_depth)[:, -1]) for v in (a, b))
    best = max(ta[1 + k] + tb[budget - k] - 1 for k in range(budget))
    assert tree.expected_tokens(p) == pytest.approx(best, abs=1e-6)
    assert dp_tree(p, budget, max_depth).expected_tokens(p) == pytest.approx(
        tree.expected_tokens(p), abs=1e-6
    )


def test_pool_contains_dp_optimum_and_every_source() -> None:
    p = np.array([0.1, 0.5, 0.0, 0.3])  # non-monotone: best-first alone misses the optimum
    pool = candidate_pool(p, 12, max_depth=3)
    assert keys(optimal_tree(p, 12, 3)) <= keys(pool)
    assert pool.size >= 4 * 12 and pool.depth <= 3
    two = candidate_pool({"draft": p, "ngram": [0.7]}, 12)
    assert set(two.sources[1:]) == {"draft", "ngram"}


@FAST
@given(p=vectors, budget=st.integers(2, 20), penalty=st.floats(0.1, 50.0))
def test_kv_penalty_never_keeps_more(p: np.ndarray, budget: int, penalty: float) -> None:
    plain = ets_tree(p, budget)
    charged = ets_tree(p, budget, kv_penalty=penalty)
    check_tree(charged, budget, None)
    assert charged.size <= plain.size


def test_large_kv_penalty_keeps_only_the_root() -> None:
    assert ets_tree([0.5, 0.2], 16, kv_penalty=1e6).size == 1


def test_coverage_keeps_both_sources() -> None:
    p = {"draft": [0.9, 0.05], "ngram": [0.1]}
    assert set(ets_tree(p, 4).sources[1:]) == {"draft"}
    covered = ets_tree(p, 4, coverage=2.0)
    assert set(covered.sources[1:]) == {"draft", "ngram"}
    check_tree(covered, 4, None)


def test_coverage_over_user_groups() -> None:
    p = [0.9, 0.05, 0.03]
    by_branch = ets_tree(p, 4, coverage=3.0, groups=lambda src, path: path[0])
    assert {path[0] for _, path in keys(by_branch)} == {0, 1, 2}
    by_mapping = ets_tree(p, 4, coverage=3.0, groups={("draft", (2,)): "rare"})
    assert ("draft", (2,)) in keys(by_mapping)
    assert ("draft", (2,)) not in keys(ets_tree(p, 4))


def test_kv_byte_budget_binds() -> None:
    p = [0.6, 0.2, 0.1]
    tree = ets_tree(p, 64, kv_budget_bytes=10 * 4096 + 100, kv_bytes_per_token=4096)
    assert tree.size == 10
    assert tree.expected_tokens(p) == pytest.approx(dp_best(p, 10, None))
    trees = ets_batch([p, p], 64, kv_budget_bytes=12.0, kv_bytes_per_token=1.0)
    assert sum(t.size for t in trees) == 12


@FAST
@given(ps=st.lists(vectors, min_size=1, max_size=3), extra=st.integers(0, 16),
       max_depth=depth_caps)
def test_batch_is_the_joint_optimum(ps, extra: int, max_depth: int | None) -> None:
    total = len(ps) + extra
    trees = ets_batch(ps, total, max_depth)
    assert len(trees) == len(ps) and sum(t.size for t in trees) <= total
    for tree in trees:
        check_tree(tree, total, max_depth)
    joint = total_g(trees, ps)
    assert joint == pytest.approx(total_g(dp_batch(ps, total, max_depth), ps), abs=1e-6)
    # within the program's solver tolerance, as above: with p = 0.02 a chain of 5 and one of 10
    # differ by 0.02**5 ≈ 3e-9 of expected tokens, which CBC does not distinguish
    assert joint >= total_g(equal_split(ps, total, max_depth), ps) - 1e-6


def test_batch_beats_equal_split_on_heterogeneous_requests() -> None:
    ps = [[0.9, 0.05], [0.2, 0.1]]
    joint, split = ets_batch(ps, 16), equal_split(ps, 16)
    assert [t.size for t in split] == [8, 8]
    assert joint[0].size > joint[1].size
    assert total_g(joint, ps) > total_g(split, ps) + 0.5


def test_deterministic() -> None:
    p = {"draft": [0.5, 0.25, 0.1], "ngram": [0.4, 0.1]}
    kwargs = {"kv_penalty": 0.5, "coverage": 0.3}
    assert ets_tree(p, 24, 5, **kwargs) == ets_tree(p, 24, 5, **kwargs)
    ps = [[0.7, 0.1], [0.3, 0.2, 0.1], [0.5]]
    assert ets_batch(ps, 20, **kwargs) == ets_batch(ps, 20, **kwargs)


@pytest.mark.parametrize(
    ("call", "option"),
    [
        (lambda: ets_tree([0.5], 0), "budget"),
        (lambda: ets_tree([0.5], 4, max_depth=-1), "max_depth"),
        (lambda: ets_tree([0.5], 4, kv_penalty=-1.0), "kv_penalty"),
        (lambda: ets_tree([0.5], 4, pool_factor=0), "pool_factor"),
        (lambda: ets_tree([0.5], 4, kv_budget_bytes=10.0), "kv_bytes_per_token"),
        (lambda: ets_tree([0.5], 4, kv_budget_bytes=0.5, kv_bytes_per_token=1.0),
         "kv_budget_bytes"),
        (lambda: ets_tree([0.5], 4, time_limit_s=0), "time_limit_s"),
        (lambda: ets_tree([0.7, 0.7], 4), "p"),
        (lambda: ets_tree({}, 4), "p"),
        (lambda: ets_batch([[0.5]] * 3, 2), "total_budget"),
        (lambda: ets_batch([], 2), "ps"),
        (lambda: equal_split([[0.5]] * 3, 2), "total_budget"),
    ],
)
def test_bad_input_is_one_line(call, option: str) -> None:
    with pytest.raises(InputError) as err:
        call()
    assert option in str(err.value) and "\n" not in str(err.value)


def test_solver_without_proven_optimum_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def stopped(self: pulp.LpProblem, solver: pulp.LpSolver) -> int:
        self.status, self.sol_status = pulp.LpStatusNotSolved, pulp.LpSolutionIntegerFeasible
        return self.status

    monkeypatch.setattr(pulp.LpProblem, "solve", stopped)
    with pytest.raises(InputError, match="time_limit_s=1"):
        ets_tree([0.5, 0.2], 8, time_limit_s=1)
