"""Sequoia DP: exact against brute-force enumeration, the hand-checked case, and edge inputs."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specscope.errors import InputError
from specscope.optimizers.baselines import best_first_tree
from specscope.optimizers.sequoia import SequoiaDP, optimal_tree, value_table
from specscope.tree import Tree


@cache
def plane_trees(n: int) -> tuple[tuple, ...]:
    """Every ordered tree of n nodes, as nested tuples of child subtrees (rank order)."""
    if n == 1:
        return ((),)
    return tuple(forest for forest in forests(n - 1))


@cache
def forests(n: int) -> tuple[tuple, ...]:
    """Every ordered forest of n nodes."""
    if n == 0:
        return ((),)
    out = []
    for first in range(1, n + 1):
        for head in plane_trees(first):
            for rest in forests(n - first):
                out.append((head, *rest))
    return tuple(out)


def brute_value(table: np.ndarray, tree: tuple, depth: int = 0) -> float:
    """G of a nested-tuple tree, computed directly from the definition."""
    row = table[min(depth + 1, table.shape[0]) - 1]
    return 1.0 + sum(
        (row[b] if b < row.size else 0.0) * brute_value(table, child, depth + 1)
        for b, child in enumerate(tree)
    )


def height(tree: tuple) -> int:
    return 0 if not tree else 1 + max(height(c) for c in tree)


def brute_best(table: np.ndarray, n: int, cap: int) -> float:
    """Best G over all trees of n nodes, depth ≤ cap, at most K children per node."""
    k = table.shape[1]

    def ok(t: tuple) -> bool:
        return len(t) <= k and all(ok(c) for c in t)

    vals = [brute_value(table, t) for t in plane_trees(n) if height(t) <= cap and ok(t)]
    return max(vals, default=-np.inf)


probability = st.sampled_from([0.0, 0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9]) | st.floats(0, 1)


@st.composite
def acceptance(draw: st.DrawFn, depth_table: bool) -> np.ndarray:
    """Random vectors (zeros, non-monotone) or depth tables, each row summing to ≤ 1."""
    k = draw(st.integers(1, 4))
    rows = draw(st.integers(1, 4)) if depth_table else 1
    table = np.array([[draw(probability) for _ in range(k)] for _ in range(rows)])
    sums = table.sum(axis=1, keepdims=True)
    return np.where(sums > 1, table / np.maximum(sums, 1e-12), table)


@settings(max_examples=60, deadline=None)
@given(
    table=st.one_of(acceptance(False), acceptance(True)),
    cap=st.one_of(st.none(), st.integers(0, 7)),
)
def test_dp_equals_brute_force_for_small_trees(table: np.ndarray, cap: int | None) -> None:
    p = table[0] if table.shape[0] == 1 else table
    dp = SequoiaDP(p, 8, cap)
    for n in range(1, 9):
        for d in range(dp.table.shape[1]):
            expected = brute_best(table, n, d)
            assert dp.table[n, d] == pytest.approx(expected, abs=1e-12) or (
                expected == -np.inf and dp.table[n, d] == -np.inf
            )
            if np.isfinite(expected):
                tree = dp.tree(n, d)
                assert tree.size == n and tree.depth <= d
                assert tree.expected_tokens(p) == pytest.approx(dp.table[n, d], abs=1e-12)


def test_hand_checked_case() -> None:
    p = [0.6, 0.2, 0.1, 0.05]
    tree = optimal_tree(p, 5)
    assert tree.expected_tokens(p) == pytest.approx(2.376)
    assert sorted(tree.ranks[1:].tolist()) == [0, 0, 0, 1]  # ranks 1 and 2, chain under rank 1
    assert value_table(p, 8, 4)[8, 4] == pytest.approx(2.7456)
    assert optimal_tree(p, 8, 4).expected_tokens(p) == pytest.approx(2.7456)


def test_zero_times_minus_inf_is_minus_inf() -> None:
    """With p_2 = 0 a 3-node tree of depth 1 is a root with two children, worth 1 + p_1."""
    table = value_table([0.5, 0.0], 4, 1)
    assert table[3, 1] == pytest.approx(1.5)
    assert table[4, 1] == -np.inf  # three children need rank 3, which does not exist
    assert not np.isnan(value_table([0.0, 0.0], 6, 2)).any()


def test_greedy_matches_dp_for_monotone_uncapped() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = np.sort(rng.dirichlet(np.ones(6)) * 0.95)[::-1]
        for n in (4, 9, 17, 40):
            assert best_first_tree(p, n).expected_tokens(p) == pytest.approx(
                optimal_tree(p, n).expected_tokens(p)
            )


def test_dp_never_loses_to_greedy_and_beats_it_on_non_monotone_vectors() -> None:
    """Greedy is myopic when p rises with rank or the depth cap binds; the DP is exact."""
    rng = np.random.default_rng(1)
    gaps = []
    for _ in range(200):
        p = rng.dirichlet(np.ones(3)) * rng.uniform(0.5, 1.0)
        n, cap = int(rng.integers(3, 12)), int(rng.integers(1, 4))
        if n > sum(3**i for i in range(cap + 1)):  # no tree of n nodes with 3 ranks fits
            continue
        gaps.append(optimal_tree(p, n, cap).expected_tokens(p) - best_first_tree(p, n, cap)
                    .expected_tokens(p))
    assert min(gaps) > -1e-12
    assert max(gaps) > 1e-3


def test_depth_table_uses_the_row_of_each_depth() -> None:
    table = np.array([[0.9, 0.05], [0.2, 0.1]])
    tree = optimal_tree(table, 4)
    assert tree.expected_tokens(table) == pytest.approx(value_table(table, 4)[4].max())
    chain = Tree.chain(2)
    assert chain.expected_tokens(table) == pytest.approx(1 + 0.9 + 0.9 * 0.2)


@pytest.mark.parametrize(
    ("p", "budget", "depth", "match"),
    [
        ([0.6, 0.5], 4, None, "sum over 1"),
        ([0.6, np.nan], 4, None, r"\[0, 1\]"),
        ([1.2], 4, None, r"\[0, 1\]"),
        ([0.6], 0, None, "budget"),
        ([0.6], 4, -1, "depth"),
    ],
)
def test_bad_inputs_raise_input_error(p: list, budget: int, depth: int | None, match: str) -> None:
    with pytest.raises(InputError, match=match):
        optimal_tree(p, budget, depth)
