"""Baseline trees every method is compared with: chain, k-ary, and Medusa-style best-first."""

from __future__ import annotations

import heapq

from specscope.errors import InputError
from specscope.tree import ROOT_SOURCE, Acceptance, Tree, acceptance_table


def depth_cap(budget: int, max_depth: int | None) -> int:
    """The deepest tree a budget of `budget` tokens allows under `max_depth` (checked)."""
    if budget < 1:
        raise InputError(f"budget must be ≥ 1 (tree size counts the root), got {budget}")
    if max_depth is not None and max_depth < 0:
        raise InputError(f"max depth must be ≥ 0, got {max_depth}")
    return budget - 1 if max_depth is None else min(max_depth, budget - 1)


def chain_tree(budget: int, max_depth: int | None = None, source: str = "draft") -> Tree:
    """The longest chain of top-1 drafts that fits the budget and depth cap."""
    return Tree.chain(depth_cap(budget, max_depth), source)


def kary_tree(k: int, budget: int, max_depth: int | None = None, source: str = "draft") -> Tree:
    """A k-ary tree filled breadth-first up to `budget` nodes (fewer if the depth cap binds)."""
    if k < 1:
        raise InputError(f"k-ary tree needs k ≥ 1, got {k}")
    cap = depth_cap(budget, max_depth)
    parents, ranks, depths = [-1], [-1], [0]
    node = 0
    while len(parents) < budget and node < len(parents):
        if depths[node] < cap:
            for r in range(min(k, budget - len(parents))):
                parents.append(node)
                ranks.append(r)
                depths.append(depths[node] + 1)
        node += 1
    return Tree(parents, ranks, (ROOT_SOURCE,) + (source,) * (len(parents) - 1))


def best_kary_tree(
    p: Acceptance, budget: int, max_depth: int | None = None, source: str = "draft"
) -> Tree:
    """The k-ary tree (k = 1..8) with the most expected tokens under p at this budget."""
    trees = [kary_tree(k, budget, max_depth, source) for k in range(1, 9)]
    return max(trees, key=lambda t: t.expected_tokens(p))


def best_first_tree(
    p: Acceptance, budget: int, max_depth: int | None = None, source: str = "draft"
) -> Tree:
    """Medusa-style greedy: repeatedly add the frontier node with the largest f(v).

    The frontier holds, for every node in the tree, its first missing child and its next
    sibling, so each node keeps its top-b candidates (Sequoia's tree space). Optimal when p is
    non-increasing and the depth cap does not bind; otherwise the DP can do better.
    """
    table = acceptance_table(p, "p")
    cap = depth_cap(budget, max_depth)

    def acc(depth: int, rank: int) -> float:
        row = table[min(depth, table.shape[0]) - 1]
        return float(row[rank]) if rank < row.size else 0.0

    parents, ranks, depths, scores = [-1], [-1], [0], [1.0]
    frontier: list[tuple[float, int, int, int]] = []  # (−f, tiebreak, parent, rank)
    counter = 0

    def push(parent: int, rank: int) -> None:
        nonlocal counter
        if depths[parent] < cap and rank < table.shape[1]:
            heapq.heappush(frontier, (-scores[parent] * acc(depths[parent] + 1, rank), counter,
                                      parent, rank))
            counter += 1

    push(0, 0)
    while len(parents) < budget and frontier:
        neg_f, _, parent, rank = heapq.heappop(frontier)
        parents.append(parent)
        ranks.append(rank)
        depths.append(depths[parent] + 1)
        scores.append(-neg_f)
        push(parent, rank + 1)
        push(len(parents) - 1, 0)
    return Tree.from_parents(parents, ranks, [ROOT_SOURCE] + [source] * (len(parents) - 1))
