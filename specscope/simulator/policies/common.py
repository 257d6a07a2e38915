"""What the batch-level policies share: depth truncation of a tree shape, and SmartSpec's online
acceptance tracking (used by `smartspec` and `ets-batch`).

Tracking. SmartSpec estimates each request's acceptance from what it observed in earlier steps (a
moving average), not from a fixed model. Here the acceptance model gives the shape (how
acceptance falls with rank and depth) and each request carries one ratio r: its acceptance is
the model's with every edge scaled by r, so a node at depth d scores r^d · f(v). The ratio is a
moving estimate of observed over expected accepted drafts:

    r = EMA(accepted drafts) / EMA(drafts the model expects accepted on the same trials),

where a step that accepted a drafts of a tree of depth D tried the depths 1..min(a + 1, D), and
the model expects depth d accepted, once reached, with probability F[d] / F[d − 1] (F[d] the
summed score of the tree's depth-d nodes). For a chain this is the exact conditional, so under
the model E[numerator] = E[denominator] and r stays near 1; for a tree it averages over the
nodes of a depth (it does not know which node was accepted), an approximation. Both sums start
at 1 (one prior trial that matched the model) and decay by (1 − weight) per step. A step that
drafted nothing observes nothing, and counts as that prior trial instead: without it, a request
whose estimate dipped by chance below what pays for speculation would stop speculating and
never observe again (measured: at batch 1 that froze SmartSpec at no speculation in about half
the steps, 8.09 ms TPOT against 7.65 ms with the prior's pull). r is capped where a scaled row
of the table would sum past 1.
"""

from __future__ import annotations

import numpy as np

from specscope.errors import InputError
from specscope.trace import AcceptanceModel
from specscope.tree import Tree

DEFAULT_EMA = 0.1
"""Weight of the newest step in the tracked acceptance (about a 10-step memory)."""


def truncated(tree: Tree, depth: int) -> Tree:
    """`tree` without its nodes deeper than `depth` (a breadth-first prefix)."""
    if depth >= tree.depth:
        return tree
    keep = int(np.count_nonzero(tree.depths <= max(depth, 0)))
    return Tree(tree.parents[:keep], tree.ranks[:keep], tree.sources[:keep])


class AcceptanceTracker:
    """Per-request acceptance ratio to the model, followed online (module docstring)."""

    def __init__(self, acceptance: AcceptanceModel, weight: float = DEFAULT_EMA) -> None:
        if not 0 < weight <= 1:
            raise InputError(f"policy option ema must lie in (0, 1], got {weight}")
        self.table = acceptance.table
        widest = float(self.table.sum(axis=1).max())
        self.max_ratio = np.inf if widest == 0 else 1.0 / widest
        self.weight = weight
        self._sums: dict[int, tuple[float, float]] = {}
        self._masses: dict[Tree, np.ndarray] = {}

    def masses(self, tree: Tree) -> np.ndarray:
        """F[d], d = 0..depth: the model's summed node scores at each depth of `tree` (F[0] = 1)."""
        found = self._masses.get(tree)
        if found is None:
            found = np.bincount(tree.depths, weights=tree.node_scores(self.table))
            self._masses[tree] = found
        return found

    def ratio(self, request_id: int) -> float:
        """r of this request: 1 until it has been observed."""
        accepted, expected = self._sums.get(request_id, (1.0, 1.0))
        return min(accepted / expected, self.max_ratio) if expected > 0 else self.max_ratio

    def observe(self, request_id: int, tree: Tree, accepted: int) -> None:
        """Fold in one step of this request: `accepted` drafts of `tree` (no drafts: one trial
        that matched the model, the prior's pull)."""
        if tree.depth == 0:
            accepted, expected = 1, 1.0
        else:
            f = self.masses(tree)
            reached = min(accepted + 1, tree.depth)
            expected = float(np.sum(np.divide(f[1 : reached + 1], f[:reached],
                                              out=np.zeros(reached), where=f[:reached] > 0)))
        old_accepted, old_expected = self._sums.get(request_id, (1.0, 1.0))
        w = self.weight
        self._sums[request_id] = (
            (1 - w) * old_accepted + w * accepted,
            (1 - w) * old_expected + w * expected,
        )
