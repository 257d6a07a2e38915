"""Delayed tree expansion: a valid path-then-rollouts tree within budget, the best of its space
(brute force), at least the chain and the root star it contains, never above the DP, and beaten by
bushier k-ary trees it does not contain; reachable by name from optimize-tree and generate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.executor.methods import MAX_DEPTH, STATIC_METHODS, resolve_method
from specscope.optimizers.baselines import best_kary_tree, chain_tree, kary_tree
from specscope.optimizers.compare import TREE_METHODS
from specscope.optimizers.delayed import delayed_shape, delayed_tree, path_then_rollouts
from specscope.optimizers.sequoia import SequoiaDP


def random_p(rng: np.random.Generator, depth_table: bool) -> np.ndarray:
    """A non-increasing positional vector (K = 4), or a 3-row depth table of such rows."""
    rows = [np.sort(rng.dirichlet(np.ones(5))[:4])[::-1] for _ in range(3 if depth_table else 1)]
    return np.array(rows) if depth_table else rows[0]


CASES = [(seed, table, budget, cap) for seed in range(6) for table in (False, True)
         for budget, cap in ((5, None), (8, 3), (9, None))]


def brute_force(p: np.ndarray, budget: int, cap: int | None) -> float:
    """Best value over every delay, rollout count and rollout lengths that fit."""
    cap = budget - 1 if cap is None else min(cap, budget - 1)
    best = chain_tree(budget, cap).expected_tokens(p)
    for delay in range(cap):
        left, below = budget - 1 - delay, cap - delay
        for width in range(1, min(4, left) + 1):
            for lengths in itertools.product(range(1, below + 1), repeat=width):
                if sum(lengths) <= left:
                    tree = path_then_rollouts(delay, list(lengths))
                    best = max(best, tree.expected_tokens(p))
    return best


@pytest.mark.parametrize(("seed", "table", "budget", "cap"), CASES)
def test_the_search_finds_the_best_tree_of_its_space(seed: int, table: bool, budget: int,
                                                     cap: int | None) -> None:
    p = random_p(np.random.default_rng(seed), table)
    tree = delayed_tree(p, budget, cap)
    assert tree.expected_tokens(p) == pytest.approx(brute_force(p, budget, cap), abs=1e-12)


@pytest.mark.parametrize(("seed", "table", "budget", "cap"), CASES)
def test_a_path_then_rollouts_within_budget_depth_and_the_dp(seed: int, table: bool, budget: int,
                                                             cap: int | None) -> None:
    p = random_p(np.random.default_rng(seed), table)
    tree = delayed_tree(p, budget, cap)
    delay, lengths = delayed_shape(p, budget, cap)
    # a path of `delay` rank-0 nodes, then rollouts of `lengths` from its end
    assert all(list(tree.children[d]) == [d + 1] for d in range(delay)) or not lengths
    assert len(tree.children[delay]) == len(lengths) and tree.size == 1 + delay + sum(lengths)
    rollouts = sorted(len(tree.path(leaf)) - 1 - delay for leaf in tree.leaves)
    assert rollouts == sorted(lengths) or not lengths
    assert tree.size <= budget and (cap is None or tree.depth <= cap)
    wide = [u for u, kids in enumerate(tree.children) if len(kids) > 1]
    assert wide in ([], [delay])  # only the path's end branches
    value = tree.expected_tokens(p)
    assert value >= chain_tree(budget, cap).expected_tokens(p) - 1e-12
    for k in range(1, 5):  # the root star (k-ary of depth 1) is a delay 0 with length-1 rollouts
        assert value >= kary_tree(k, budget, 1).expected_tokens(p) - 1e-12
    assert value <= SequoiaDP(p, budget, cap).tree(budget).expected_tokens(p) + 1e-12


def test_bushier_k_ary_trees_are_outside_its_space_and_can_beat_it() -> None:
    p = np.array([0.45, 0.35, 0.15])
    kary = best_kary_tree(p, 13)
    assert kary.depth >= 2 and kary.expected_tokens(p) > delayed_tree(p, 13).expected_tokens(p)


def test_it_delays_the_branching_when_the_first_draft_is_near_certain() -> None:
    near_certain = [[0.95, 0.02, 0.01], [0.4, 0.3, 0.2]]
    delay, lengths = delayed_shape(near_certain, 12)
    assert delay >= 1 and len(lengths) >= 2
    assert delayed_shape([0.4, 0.3, 0.2], 12)[0] == 0


def test_a_fixed_delay_branches_at_that_depth() -> None:
    p = [0.6, 0.2, 0.1]
    tree = delayed_tree(p, 16, delay=3)
    assert [len(k) for k in tree.children[:3]] == [1, 1, 1] and len(tree.children[3]) > 1
    assert delayed_shape(p, 4, delay=9)[0] == 3  # capped by the budget
    with pytest.raises(InputError, match="delay"):
        delayed_tree(p, 8, delay=-1)


def test_optimize_tree_and_generate_reach_it_by_name() -> None:
    assert "delayed" in TREE_METHODS and "delayed" in STATIC_METHODS
    p = np.array([0.6, 0.2, 0.1, 0.05])

    class Named:
        source = "draft:x"

    method = resolve_method("delayed", 16, Named(), calibrate=None, stored=p)
    assert method.static and method.name == "delayed"
    tree = delayed_tree(p, 16, MAX_DEPTH, "draft:x")
    assert method.max_size == tree.size
