"""Delayed tree expansion: a single draft path, then several rollouts from its end.

Multi-path speculative decoding drafts i.i.d. rollouts (paths) from the root. Delayed tree
expansion (Thomas, Kitanovski, Goldblum, Pal 2026, "Dynamic Delayed Tree Expansion for Improved
Multi-Path Speculative Decoding"; the multi-draft analysis of Hu et al. 2025, "Towards Optimal
Multi-draft Speculative Decoding", motivates it) drafts a single path of k tokens first and
branches only at its end, where draft and target have diverged more and several candidates pay
off most. Drawing the branches from the draft keeps the target's distribution with any
sampled-draft rule.

`delayed_tree` searches the delay k and the branching below it for the most expected tokens per
step under a positional acceptance vector (or depth table) p: the path's k nodes are rank 0;
the branching node gets w children of ranks 0..w−1 (a prefix, as in Sequoia's tree space), and
each child continues by rank-0 nodes (a rollout). Rollouts may differ in length: the nodes left
after the path and the w first nodes go to the rollout nodes of largest value (rollout j's t-th
node below its first is worth f(k)·p(k+1, j)·Π p(·, 0), non-increasing along a rollout, so the
largest values form rollouts). k = 0 is root rollouts, w = 1 the chain; bushier trees (branching
at two levels, the best k-ary of depth ≥ 2) are outside this space, and the Sequoia DP, whose
space holds every tree built here, is never below it.
"""

from __future__ import annotations

import numpy as np

from specscope.errors import InputError
from specscope.optimizers.baselines import depth_cap
from specscope.tree import ROOT_SOURCE, Acceptance, Tree, acceptance_table


def delayed_tree(p: Acceptance, budget: int, max_depth: int | None = None,
                 source: str = "draft", delay: int | None = None) -> Tree:
    """The best delayed-expansion tree of at most `budget` nodes (root included) under p, with
    the delay searched (None) or fixed (capped by the budget and depth)."""
    return path_then_rollouts(*delayed_shape(p, budget, max_depth, delay), source)


def path_then_rollouts(delay: int, lengths: list[int], source: str = "draft") -> Tree:
    """A chain of `delay` rank-0 nodes below the root, then rollouts of `lengths` (by rank)
    from its end (from the root when `delay` is 0)."""
    parents, ranks = [-1, *range(delay)], [-1] + [0] * delay
    for rank, length in enumerate(lengths):
        parents.append(delay)
        ranks.append(rank)
        for _ in range(length - 1):
            parents.append(len(parents) - 1)
            ranks.append(0)
    return Tree.from_parents(parents, ranks, [ROOT_SOURCE] + [source] * (len(parents) - 1))


def delayed_shape(p: Acceptance, budget: int, max_depth: int | None = None,
                  delay: int | None = None) -> tuple[int, list[int]]:
    """(delay k, rollout lengths by rank) of `delayed_tree`: k path nodes below the root, then
    rollouts of these lengths from the k-th (none: the path alone)."""
    table = acceptance_table(p, "p")
    cap = depth_cap(budget, max_depth)
    if delay is not None and delay < 0:
        raise InputError(f"delay must be ≥ 0, got {delay}")
    delays = range(cap + 1) if delay is None else [min(delay, cap)]
    ranks = table.shape[1]
    # acc[d - 1]: the acceptance row of depth d
    acc = np.array([table[min(d, table.shape[0]) - 1] for d in range(1, cap + 1)]).reshape(
        cap, ranks)
    best = (-1.0, 0, [])
    for k in delays:
        path = np.cumprod(np.r_[1.0, acc[:k, 0]])  # f of the root and the path nodes
        left, below = budget - 1 - k, cap - k
        best = max(best, (float(path.sum()), k, []), key=lambda b: b[0])
        if left == 0 or below == 0:
            continue
        # tail[t]: worth of a rollout's t-th node below its first, relative to that first node
        tail = np.cumprod(np.r_[1.0, acc[k + 1 : k + below, 0]])
        for width in range(1, min(ranks, left) + 1):
            first = acc[k, :width]
            rest = np.outer(first, tail[1:])  # (width, below − 1)
            extra = min(left - width, rest.size)
            # within a rollout values never grow: among equal values prefer the shallower node,
            # so the chosen nodes form rollouts (each row a prefix)
            order = np.lexsort((np.tile(np.arange(rest.shape[1]), width), -rest.ravel()))
            chosen = order[:extra]
            value = path.sum() + path[-1] * (first.sum() + rest.ravel()[chosen].sum())
            lengths = (1 + np.bincount(chosen // max(rest.shape[1], 1), minlength=width)).tolist()
            best = max(best, (float(value), k, lengths), key=lambda b: b[0])
    return best[1], best[2]
