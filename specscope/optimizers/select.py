"""Hardware-aware choice of tree size and depth: minimise step time per expected token.

time per token = (d · t_draft + t_verify(n)) / G(n, d); speedup = t_autoregressive / that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from specscope.errors import InputError
from specscope.tree import Tree


def choose_size(
    values: np.ndarray, budgets: Iterable[int], step_times: np.ndarray
) -> tuple[int, int]:
    """(n, d) minimising step_times[n, d] / values[n, d] over n in `budgets`, every depth d.

    `values` is a value table T[n][d] (best G for n nodes, depth ≤ d), e.g. Sequoia's;
    `step_times` has the same shape (`Pricing.step_table`). Ties go to the smaller n, then d.
    """
    sizes = np.array(sorted(set(budgets)), dtype=np.int64)
    if sizes.size == 0 or sizes[0] < 1 or sizes[-1] >= values.shape[0]:
        raise InputError(f"budgets {sizes.tolist()} outside the value table "
                         f"(1..{values.shape[0] - 1})")
    g = values[sizes]
    # a deeper cap that changes nothing is the same tree, priced as deeper: skip it
    same = np.zeros_like(g, dtype=bool)
    same[:, 1:] = g[:, 1:] == g[:, :-1]
    usable = np.isfinite(g) & (g > 0) & ~same
    if not usable.any():
        raise InputError("no feasible (budget, depth) pair")
    cost = np.where(usable, step_times[sizes] / np.where(usable, g, 1.0), np.inf)
    row, d = np.unravel_index(np.argmin(cost), cost.shape)
    return int(sizes[row]), int(d)


def choose_trees(
    trees: Iterable[Tree],
    value: Callable[[Tree], float],
    step_time: Callable[[Tree], float],
    budgets: Sequence[int],
) -> list[Tree]:
    """For each budget, the tree of at most that many nodes with the least step time per
    expected token. Each tree is valued and priced once; ties go to the earlier tree."""
    trees = list(trees)
    sizes = np.array([t.size for t in trees])
    cost = np.array([step_time(t) / value(t) for t in trees])
    chosen = []
    for b in budgets:
        fits = np.flatnonzero(sizes <= b)
        if fits.size == 0:
            raise InputError(f"no candidate tree within budget {b}")
        chosen.append(trees[int(fits[np.argmin(cost[fits])])])
    return chosen
