"""Hardware-aware choice of tree size and depth: minimise step time per expected token.

time per token = (d · t_draft + t_verify(n)) / G(n, d); speedup = t_autoregressive / that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from specscope.errors import InputError
from specscope.tree import Tree


def choose_size(
    values: np.ndarray, budgets: Iterable[int], step_time: Callable[[int, int], float]
) -> tuple[int, int]:
    """(n, d) minimising step_time(n, d) / values[n, d] over n in `budgets`, every depth d.

    `values` is a value table T[n][d] (best G for n nodes, depth ≤ d), e.g. Sequoia's.
    """
    best, best_cost = None, np.inf
    for n in budgets:
        if not 1 <= n < values.shape[0]:
            raise InputError(f"budget {n} outside the value table (1..{values.shape[0] - 1})")
        for d in range(values.shape[1]):
            g = values[n, d]
            if not np.isfinite(g) or (d > 0 and g == values[n, d - 1]):
                continue  # impossible, or a deeper cap that changes nothing (it costs more)
            cost = step_time(n, d) / g
            if cost < best_cost:
                best, best_cost = (n, d), cost
    if best is None:
        raise InputError("no feasible (budget, depth) pair")
    return best


def choose_tree(
    trees: Iterable[Tree], value: Callable[[Tree], float], step_time: Callable[[Tree], float]
) -> Tree:
    """The tree with the least step time per expected token among `trees`."""
    best, best_cost = None, np.inf
    for tree in trees:
        cost = step_time(tree) / value(tree)
        if cost < best_cost:
            best, best_cost = tree, cost
    if best is None:
        raise InputError("no candidate tree to choose from")
    return best
