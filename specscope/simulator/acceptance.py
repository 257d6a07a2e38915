"""How many drafts a request accepts in a step: exact trace replay, or samples from the model.

Replay. Each simulated request is mapped to a trace request (a seeded permutation of the trace's
requests, then round robin), and its step starting at generated position `pos` walks the step's
tree over that trace request from `pos` on, as `specscope.trace.replay` defines it: a child at
depth d of an accepted node is accepted when its (source, rank) is the true token's at position
pos + d − 1 (a sequence source's node when the proposal made at its anchor matches that deep);
nodes past the trace request's last position are rejected; the step accepts the deepest accepted
node (the first in breadth-first order on ties). The trace is read once into dense
(request, position) arrays per source (`dense_trace`), and a step walks only the levels it
accepts, so trees may change every step (dynamic policies) at O(depth) cost; for every position
the result equals `accepted_lengths` (tested).

A sequence drafter (n-gram, suffix) proposes no deeper than its proposal: a tree of one sequence
source (a chain) is cut to the proposal's length at the step's position, and drafting stops at
the level that finds nothing (min(levels, length + 1) propose calls), as the executor drafts it.

Sampling, when there is no trace, when a step would read past the end of its trace request while
the request goes on (the workload outlasts the trace), or when drift changes the acceptance:
Sequoia's semantics on the `AcceptanceModel` p (a vector, or a depth table whose row d − 1 holds
the children at depth d): at an accepted node, child rank k is the accepted one with probability
p[k], else the step stops there; the step goes on iff the tree holds that child. Every drafted node
counts as the model's source (with several sources, the first child of rank k in breadth-first
order).

Drift: a schedule m_0, m_1, … multiplies the acceptance of requests 1000·i … 1000·i + 999 (by
arrival order; the last entry holds after the schedule ends) by m_i: every row of p becomes m·p,
divided by its sum when that exceeds 1 (the entries are marginal probabilities of exclusive
events). A request whose multiplier is not 1 is sampled from that model throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from specscope.errors import InputError
from specscope.simulator.entities import Request
from specscope.simulator.policies.base import Speculation
from specscope.trace import AcceptanceModel, Trace
from specscope.trace.replay import dense_trace
from specscope.trace.schema import trace_sources
from specscope.tree import Tree, scaled_acceptance

DRIFT_PERIOD = 1000
"""Requests per entry of a drift schedule."""
_UNIFORMS = 4096
"""Uniform draws taken from the generator at a time."""


@dataclass(frozen=True)
class _Plan:
    """A tree prepared for walking: per node its children as (child, depth, array, offset,
    value, sequence) for replay, and for sampling the child each rank a uniform can pick
    leads to (0: none; ranks 0..K, K past the acceptance model's last candidate); its depth,
    each node's depth, and the sequence source of its drafted nodes when they are all of one
    (else None)."""

    tree: Tree
    kids: tuple[tuple[tuple[int, int, np.ndarray | None, int, int, bool], ...], ...]
    by_rank: tuple[tuple[int, ...], ...]
    depth: int
    depths: tuple[int, ...]
    sequence: str | None


class Acceptance:
    """Accepted drafts per step of each request (module docstring).

    `model` is the drafter's acceptance (sampling); `trace` the trace to replay (None: always
    sample); `drift` the per-1000-requests schedule of multipliers (empty: none).
    """

    def __init__(self, model: AcceptanceModel, trace: Trace | None, seed: int,
                 drift: Sequence[float] = ()) -> None:
        self.model, self.trace, self.drift = model, trace, tuple(drift)
        self._rng = np.random.default_rng([seed, 1])
        self._uniforms = np.empty(0)
        self._next = 0
        self._ranks: dict[tuple[int, float], list[list[int]]] = {}
        self._cumulative: dict[tuple[int, float], list[float]] = {}
        self._plans: dict[int, _Plan] = {}
        self._cut: dict[tuple[str, int, int], Speculation] = {}
        self.replayed = self.sampled = 0
        if trace is None:
            self._dense, self._order = None, np.zeros(0, dtype=np.int64)
            return
        self._dense = dense_trace(trace)
        self._sources = set(trace_sources(trace))
        self._prompts = (trace.df.group_by("request_id")
                         .agg((pl.col("context_len").cast(pl.Int64) - pl.col("pos")).min())
                         .sort("request_id").get_column("context_len").to_numpy())
        self._order = np.random.default_rng([seed, 2]).permutation(self._dense.lengths.size)

    # ---- requests ------------------------------------------------------------------------

    def trace_request(self, index: int) -> int | None:
        """The trace request (row of the dense arrays) simulated request `index` replays."""
        if self._dense is None:
            return None
        return int(self._order[index % self._order.size])

    def trace_lengths(self, row: int) -> tuple[int, int]:
        """(prompt, output) tokens of trace request `row`: its context before position 0 and
        its positions."""
        return int(self._prompts[row]), int(self._dense.lengths[row])

    def multiplier(self, index: int) -> float:
        """The drift multiplier of simulated request `index` (1 without drift)."""
        if not self.drift:
            return 1.0
        return self.drift[min(index // DRIFT_PERIOD, len(self.drift) - 1)]

    def check(self, tree: Tree) -> None:
        """Raise `InputError` when `tree` cannot be replayed over the trace (a source the trace
        lacks, a sequence-source node of rank > 0)."""
        self._plan(tree)

    # ---- one step ------------------------------------------------------------------------

    def _replays(self, row: int | None, pos: int, remaining: int, depth: int,
                 multiplier: float) -> bool:
        if row is None or multiplier != 1.0:
            return False
        length = int(self._dense.lengths[row])
        return pos + depth <= length or (pos < length and remaining <= length - pos)

    def cuts(self, spec: Speculation) -> bool:
        """Whether `drafted` may give a request less than `spec` (a chain of a sequence drafter,
        replayed)."""
        return (self._dense is not None and spec.tree.size > 1
                and self._plan(spec.tree).sequence is not None)

    def drafted(self, row: int | None, pos: int, remaining: int, spec: Speculation,
                multiplier: float = 1.0) -> Speculation:
        """What the drafter really proposes for `spec` at this step: a chain of one sequence
        source cut to the trace's proposal length (module docstring), else `spec`."""
        if self._dense is None or spec.tree.size == 1:
            return spec
        plan = self._plan(spec.tree)
        source = plan.sequence
        if source is None or not self._replays(row, pos, remaining, plan.depth, multiplier):
            return spec
        length = int(self._dense.proposal[source][row, pos])
        if plan.depth <= length:
            return spec
        key = (source, length, min(spec.draft_levels, length + 1))
        cut = self._cut.get(key)
        if cut is None:
            cut = self._cut[key] = Speculation(Tree.chain(length, source), key[2])
        return cut

    def accept(self, row: int | None, pos: int, remaining: int, tree: Tree,
               multiplier: float = 1.0) -> int:
        """Drafts of `tree` accepted by a step of a request at generated position `pos` with
        `remaining` tokens to go, replaying trace request `row` when it can (module
        docstring)."""
        if tree.size == 1:
            return 0
        return self._accept(self._plan(tree), row, pos, remaining, multiplier)

    def accept_all(self, requests: Sequence[Request], tree: Tree) -> list[int]:
        """`accept` of each of `requests` (in order) verifying `tree`."""
        if tree.size == 1:
            return [0] * len(requests)
        plan = self._plan(tree)
        if self._dense is None:
            self.sampled += len(requests)
            return self._samples(plan, [r.multiplier for r in requests])
        return [self._accept(plan, r.trace_row, r.generated, r.output_len - r.generated,
                             r.multiplier) for r in requests]

    def _accept(self, plan: _Plan, row: int | None, pos: int, remaining: int,
                multiplier: float) -> int:
        if self._replays(row, pos, remaining, plan.depth, multiplier):
            self.replayed += 1
            return self._walk(plan, row, pos)
        self.sampled += 1
        return self._sample(plan, multiplier)

    def _walk(self, plan: _Plan, row: int, pos: int) -> int:
        """Depth of the deepest accepted node (replay)."""
        end = int(self._dense.lengths[row]) - pos
        level, best = [0], 0
        kids = plan.kids
        while level:
            found = [child for v in level
                     for child, depth, array, offset, value, sequence in kids[v]
                     if depth <= end and (array[row, pos + offset] >= value if sequence
                                          else array[row, pos + offset] == value)]
            if found:
                best = found[0]
            level = found
        return plan.depths[best]

    def _sample(self, plan: _Plan, multiplier: float) -> int:
        """Accepted depth of one Sequoia walk down the acceptance model."""
        return self._samples(plan, (multiplier,))[0]

    def _samples(self, plan: _Plan, multipliers: Sequence[float]) -> list[int]:
        """Accepted depths of Sequoia walks down the acceptance model, one per multiplier, in
        order: at each node the next uniform's rank (the first cumulative acceptance above
        it) picks the child, if any."""
        self._reserve((plan.depth + 1) * len(multipliers))
        by_rank, depths, out = plan.by_rank, plan.depths, []
        i, last, at = self._next, None, []
        for multiplier in multipliers:
            if multiplier != last:
                ranks = self._depth_ranks(plan.depth, multiplier)
                at, last = [ranks[d] for d in depths], multiplier  # each node's ranks
            node = 0
            while True:
                child = by_rank[node][at[node][i]]
                i += 1
                if not child:
                    break
                node = child
            out.append(depths[node])
        self._next = i
        return out

    def _reserve(self, n: int) -> None:
        """Draw uniforms until `n` are left unused (the generator's stream, in order)."""
        while self._uniforms.size - self._next < n:
            self._uniforms = np.concatenate([self._uniforms[self._next:],
                                             self._rng.random(_UNIFORMS)])
            self._next = 0
            self._ranks.clear()

    def _depth_ranks(self, depth: int, multiplier: float) -> list[list[int]]:
        """Per depth 0..`depth`, the rank each drawn uniform picks there (`_row`)."""
        key = (depth, multiplier)
        found = self._ranks.get(key)
        if found is None:
            rows = self.model.table.shape[0]
            by_row: dict[int, list[int]] = {}
            for d in range(depth + 1):
                if min(d, rows - 1) not in by_row:
                    by_row[min(d, rows - 1)] = np.searchsorted(
                        np.array(self._row(d, multiplier)), self._uniforms, side="right").tolist()
            found = self._ranks[key] = [by_row[min(d, rows - 1)] for d in range(depth + 1)]
        return found

    def _row(self, depth: int, multiplier: float) -> list[float]:
        """Cumulative acceptance of the children of a node at `depth`, drift applied."""
        key = (depth, multiplier)
        row = self._cumulative.get(key)
        if row is None:
            table = self.model.table
            p = scaled_acceptance(table[min(depth, table.shape[0] - 1)], multiplier)
            row = self._cumulative[key] = np.cumsum(p).tolist()
        return row

    def _plan(self, tree: Tree) -> _Plan:
        plan = self._plans.get(id(tree))
        if plan is not None and plan.tree is tree:
            return plan
        if len(self._plans) > 4096:
            self._plans.clear()
        plan = self._plans[id(tree)] = self._build(tree)
        return plan

    def _build(self, tree: Tree) -> _Plan:
        """Per node its children's replay tests and its children by rank."""
        depths, parents, names = tree.depths, tree.parents, tree.sources
        anchor = np.zeros(tree.size, dtype=np.int64)
        kids: list[list] = [[] for _ in range(tree.size)]
        by_rank: list[dict[int, int]] = [{} for _ in range(tree.size)]
        width = self.model.table.shape[1]
        dense = self._dense
        for v in range(1, tree.size):
            u, source, d, rank = int(parents[v]), names[v], int(depths[v]), int(tree.ranks[v])
            anchor[v] = anchor[u] if names[u] == source else depths[u]
            by_rank[u].setdefault(rank, v)
            if dense is None:
                continue
            if source not in self._sources:
                raise InputError(f"{self.trace.name}: tree source {source!r} is not in the trace "
                                 f"(sources: {', '.join(sorted(self._sources))})")
            if source in dense.sequence:
                if rank != 0:
                    raise InputError(f"tree node {v} of sequence source {source!r} has rank "
                                     f"{rank}; sequence-source nodes have rank 0")
                test = (v, d, dense.match[source], int(anchor[v]), d - int(anchor[v]), True)
            else:
                test = (v, d, dense.rank[source], d - 1, rank, False)
            kids[u].append(test)
        drafted = set(names[1:])
        sequence = next(iter(drafted)) if len(drafted) == 1 and dense is not None and \
            drafted <= dense.sequence else None
        picks = tuple(tuple(r.get(k, 0) for k in range(width + 1)) for r in by_rank)
        return _Plan(tree, tuple(tuple(k) for k in kids), picks, tree.depth,
                     tuple(int(d) for d in depths), sequence)

    @property
    def origin(self) -> str:
        """Which acceptance the steps used: "replay", "sampled", "mixed" or "none" (no step
        speculated)."""
        if self.replayed and self.sampled:
            return "mixed"
        if self.replayed:
            return "replay"
        return "sampled" if self.sampled else "none"
