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
nodes of a depth (it does not know which node was accepted), an approximation. r is capped
where a scaled row of the table would sum past 1.

Two levels. The same ratio pooled over every request's observations (weight `POOLED_EMA` each,
starting at the model's 1) is where a new request starts, and where a request that drafted
nothing in a step is pulled (as if that step had observed the pooled ratio; weight `weight`).
Without that pull a request whose estimate dipped by chance below what pays for speculation
would stop speculating and never observe again: at batch 1 that froze SmartSpec at no
speculation in about half the steps (h100, llama-3.1-8b, llama-3.2-1b draft of top-1
acceptance 0.54: 8.09 ms TPOT against 7.64 ms). The pooled ratio itself is pulled back to the
model by steps that drafted nothing, a hundred times more weakly (`IDLE_PULL`), so that it
cannot freeze either; where speculation really does not pay (acceptance drifted to 0.4 times
the model's) that exploration costs SmartSpec 1% of throughput at saturation.
"""

from __future__ import annotations

import numpy as np

from specscope.errors import InputError
from specscope.trace import AcceptanceModel
from specscope.tree import Tree

DEFAULT_EMA = 0.1
"""Weight of the newest step in the tracked acceptance (about a 10-step memory)."""
POOLED_EMA = 0.01
"""Weight of each observation in the ratio pooled over all requests (about 100 observations)."""
IDLE_PULL = 0.01
"""Fraction of `POOLED_EMA` with which a step that drafted nothing pulls the pooled ratio back
to the model."""


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
        self._pooled = (1.0, 1.0)
        self._sums: dict[int, tuple[float, float]] = {}
        self._masses: dict[Tree, np.ndarray] = {}

    def masses(self, tree: Tree) -> np.ndarray:
        """F[d], d = 0..depth: the model's summed node scores at each depth of `tree` (F[0] = 1)."""
        found = self._masses.get(tree)
        if found is None:
            found = np.bincount(tree.depths, weights=tree.node_scores(self.table))
            self._masses[tree] = found
        return found

    def _capped(self, sums: tuple[float, float]) -> float:
        accepted, expected = sums
        return min(accepted / expected, self.max_ratio) if expected > 0 else self.max_ratio

    @property
    def pooled(self) -> float:
        """The ratio pooled over every request's observations (1 before any)."""
        return self._capped(self._pooled)

    def ratio(self, request_id: int) -> float:
        """r of this request (the pooled ratio until it has been observed)."""
        sums = self._sums.get(request_id)
        return self.pooled if sums is None else self._capped(sums)

    def observe(self, request_id: int, tree: Tree, accepted: int) -> None:
        """Fold in one step of this request: `accepted` drafts of `tree`; a step that drafted
        nothing pulls the request toward the pooled ratio instead."""
        prior = (self.pooled, 1.0)
        old = self._sums.get(request_id, prior)
        if tree.depth == 0:
            observed = prior
            self._pooled = _ema(self._pooled, (1.0, 1.0), POOLED_EMA * IDLE_PULL)
        else:
            f = self.masses(tree)
            reached = min(accepted + 1, tree.depth)
            observed = (float(accepted), float(np.sum(np.divide(
                f[1 : reached + 1], f[:reached], out=np.zeros(reached), where=f[:reached] > 0))))
            self._pooled = _ema(self._pooled, observed, POOLED_EMA)
        self._sums[request_id] = _ema(old, observed, self.weight)


def _ema(old: tuple[float, float], new: tuple[float, float], w: float) -> tuple[float, float]:
    return (1 - w) * old[0] + w * new[0], (1 - w) * old[1] + w * new[1]
