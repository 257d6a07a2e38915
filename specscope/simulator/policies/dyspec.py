"""`dyspec`: DySpec's greedy dynamic tree, grown afresh for every request at every step.

Rule (DySpec 2024; docs/methods.md#dyspec): expand the tree best-first by the estimated probability
that a node is accepted, the product of the draft's (calibrated) probabilities along its path, until
the per-request budget (`PolicySetup.budget`, root included) is spent. The engine is the optimizer's
`DySpecPolicy.build` (one batched draft forward per level, the heap's tree exactly); each request's
tree is capped at depth min(max_depth, remaining − 1), since a draft past the request's last token
can never be used.

Where the draft's scores come from. A slot replaying a trace request at `generated` tokens
reads the trace's rows of the drafter source from position `generated` on:

- on-path nodes, the root and every drafted node whose token is the target's token at its
  position (the rank recorded in the trace), propose the trace's candidates at their position
  with the draft's recorded probabilities: exactly what the drafter proposed there given the
  true prefix;
- off-path nodes, every node below a candidate that is not the target's token, have no row (the
  trace records the drafter only along the target's path). They propose K candidates scored by
  the source's mean draft probability per rank over the trace (`draft_scores`), an
  approximation: the real drafter's confidence after a wrong token is not recorded. Such nodes
  are never accepted, so the approximation moves budget, never acceptance: it decides how much
  of the budget goes below rejected candidates;
- positions past the end of the trace request are treated as off-path.

Scores are mapped to acceptance by `ScoreCalibration` fitted on the trace (row by row on path,
the mean of the calibrated scores off path) unless `options["calibrate"]` is 0. A slot without a
trace request (acceptance sampled from the model), or a run without a trace, scores every
node's k-th child p[d][k] of the acceptance model (its depth's row): the tree is then a function
of the depth cap alone and is built once per cap.

Cost: `draft_levels` is the build's number of draft forwards: the tree's depth, or one more when
the last forwarded level only showed that nothing deeper makes the cut (the executor pays that
forward too). DySpec's greedy does not weigh the draft's cost: with a 16-token budget and depth
cap 8 its trees reach depth 5 and 97% of steps pay the extra forward (h100, llama-3.1-8b,
llama-3.2-1b draft: 8.6 ms TPOT at batch 1 against 6.7 ms with depth cap 4).

Measured effects (synthetic trace, top-1 acceptance 0.54, 60 requests × 256 positions, replayed
one request at a time): calibration adds 0.5–1.8% tokens per step over raw draft probabilities
(budgets 8–32); the off-path scores are the approximation that matters: scaling them by 0.5 or
2 moves tokens per step by +8% or −22% at budget 8 (+11% / −23% at 16), and an oracle that
never expands off path (scores 0) would gain 17–39%. The simulated dyspec is therefore as good
as its off-path assumption; `validate` against the executor measures the real one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specscope.draft import DraftNode, Propose
from specscope.optimizers.dyspec import DySpecPolicy, ScoreCalibration, draft_scores
from specscope.simulator.policies.base import Policy, PolicySetup, Slot, Speculation, StepView
from specscope.simulator.policies.positions import RequestPath, TracePositions


class DySpec(Policy):
    """DySpec's per-step greedy tree under the per-request budget (module docstring)."""

    name = "dyspec"

    def __init__(self, setup: PolicySetup) -> None:
        self.budget = setup.budget
        self.max_depth = setup.max_depth
        self.source = setup.source
        self.model_table = setup.acceptance.table[:, : max(setup.budget - 1, 1)]
        self.positions: TracePositions | None = None
        if setup.trace is not None:
            self.positions = TracePositions(setup.trace, setup.source)
            self.k = min(self.positions.k, max(setup.budget - 1, 1))
            calibrate = bool(setup.options.get("calibrate", 1))
            self.calibration: Callable[[np.ndarray], np.ndarray] | None = (
                ScoreCalibration.fit(setup.trace, self.positions.source) if calibrate else None
            )
            self.off_path = draft_scores(setup.trace, self.positions.source, calibrate)[: self.k]
        self._builders: dict[int, DySpecPolicy] = {}
        self._model_trees: dict[int, Speculation] = {}

    def plan(self, view: StepView) -> list[Speculation]:
        """One greedy tree per slot, from its trace position's scores or the model's."""
        return [self._speculate(slot) for slot in view.slots]

    def _builder(self, cap: int) -> DySpecPolicy:
        found = self._builders.get(cap)
        if found is None:
            found = self._builders[cap] = DySpecPolicy(self.budget, cap, source=self.source)
        return found

    def _speculate(self, slot: Slot) -> Speculation:
        cap = min(self.max_depth, slot.remaining - 1)
        if cap < 1 or self.budget < 2:
            return Speculation.none()
        path = None if self.positions is None else self.positions.path(slot.trace_request)
        if path is None:
            found = self._model_trees.get(cap)
            if found is None:
                drafted = self._builder(cap).build(self._model_propose)
                found = self._model_trees[cap] = Speculation(drafted.tree, drafted.forwards)
            return found
        drafted = self._builder(cap).build(self._trace_propose(path, slot.generated))
        return Speculation(drafted.tree, drafted.forwards)

    def _model_propose(self, nodes: list[DraftNode]) -> list[tuple[list[int], list[float]]]:
        """Every node's k-th child scores the model's p[d][k] at the child's depth d."""
        table = self.model_table
        out = []
        for node in nodes:
            row = table[min(node.depth, table.shape[0] - 1)]
            out.append((list(range(row.size)), row.tolist()))
        return out

    def _trace_propose(self, path: RequestPath, start: int) -> Propose:
        """The trace's candidates on the target's path from `start`, mean scores off it."""
        on_path = {0: start}  # node id → its trace position
        off_path = (list(range(self.k)), self.off_path.tolist())

        def propose(nodes: list[DraftNode]) -> list[tuple[list[int], list[float]]]:
            out = []
            for node in nodes:
                if node.id:
                    parent = on_path.get(node.parent)
                    row = None if parent is None else path.row(parent)
                    if row is not None and node.token == row[1]:
                        on_path[node.id] = parent + 1
                pos = on_path.get(node.id)
                row = None if pos is None else path.row(pos)
                if row is None:
                    out.append(off_path)
                    continue
                scores = row[0][: self.k]
                if self.calibration is not None:
                    scores = np.where(scores > 0, self.calibration(scores), 0.0)
                out.append((list(range(self.k)), scores.tolist()))
            return out

        return propose
