"""`specdecpp`: SpecDec++'s threshold stopping, one chain per request per step.

Rule (SpecDec++ 2024; docs/methods.md#specdecpp): draft the top-1 chain; after drafted token i stop
and verify once the predicted probability that some draft so far is rejected reaches the threshold,
1 − Π_{j≤i} â_j ≥ h, drafting at least 2 and at most min(20, budget − 1, max_depth) tokens (authors'
bounds) and never past the request's last token (remaining − 1). h is
`options["threshold"]`, default the authors' 0.7 (`optimize-tree --algo specdecpp` chooses a
hardware-aware one to pass here).

â_j is the optimizer's `AcceptancePredictor` (a logistic regression on the draft's candidate
scores, fitted on the trace with the setup's seed) applied to the features of the trace row at
drafted token j's position, generated + j − 1, of the slot's trace request: the features the
drafter shows for that token on the true prefix. While every earlier draft of the step is
accepted that is exactly what the live drafter sees; past the first rejection the live drafter
would be off the true prefix and show other features, which can change the chain's length
(its cost), never its accepted drafts (the step ends at the first rejection): the optimizer's
replay makes the same approximation. Its reach, measured on a synthetic trace (top-1
acceptance 0.54): at h = 0.7, 25% of steps draft past both the first rejection and the minimum
length, and 12% of drafted tokens lie there (h = 0.5: 2.4%; h = 0.9: 37%); only those tokens'
count could differ with the live drafter. Positions without a row, slots without a trace
request and runs without a trace use the acceptance model's top-1 acceptance at the token's
depth.

Cost. The estimate of token i comes from the draft forward that drafted it, so the decision to
stop after token i needs no forward beyond it, and the token that crosses the threshold is
verified (as in the authors' code, whose head is one token later still: it stops on
â_1..â_{i−1} and verifies token i). No drafted token goes unverified, so `draft_levels` is the
chain's length, as the executor's SpecDec++ drafting pays.
"""

from __future__ import annotations

import numpy as np

from specscope.optimizers.specdecpp import (
    AUTHORS_THRESHOLD,
    MAX_LEN,
    MIN_LEN,
    check_threshold,
    stop_length,
)
from specscope.optimizers.specdecpp_predictor import AcceptancePredictor, candidate_features
from specscope.simulator.policies.base import Policy, PolicySetup, Slot, Speculation, StepView
from specscope.simulator.policies.positions import TracePositions
from specscope.tree import Tree


class SpecDecPP(Policy):
    """SpecDec++'s per-step chain stopped by the threshold rule (module docstring)."""

    name = "specdecpp"

    def __init__(self, setup: PolicySetup) -> None:
        self.threshold = check_threshold(setup.options.get("threshold", AUTHORS_THRESHOLD))
        self.max_len = min(MAX_LEN, setup.budget - 1, setup.max_depth)
        top1 = setup.acceptance.table[:, 0]
        depth_rows = np.minimum(np.arange(max(self.max_len, 0)), top1.size - 1)
        with np.errstate(divide="ignore"):
            self.model_log_a = np.log(top1[depth_rows])
        self.positions: TracePositions | None = None
        self.predictor: AcceptancePredictor | None = None
        if setup.trace is not None:
            self.positions = TracePositions(setup.trace, setup.source)
            self.predictor = AcceptancePredictor.fit(setup.trace, self.positions.source, setup.seed)
        self._log_a: dict[int, np.ndarray] = {}
        lengths = range(self.max_len + 1)
        self._chains = [Speculation.of(Tree.chain(n, setup.source)) for n in lengths]

    def plan(self, view: StepView) -> list[Speculation]:
        """One chain per slot, stopped by the threshold rule."""
        return [self._speculate(slot) for slot in view.slots]

    def _speculate(self, slot: Slot) -> Speculation:
        cap = min(self.max_len, slot.remaining - 1)
        if cap < 1:
            return Speculation.none()
        log_a = self.model_log_a[:cap].copy()
        known = self._trace_log_a(slot.trace_request)
        if known is not None:
            rows = known[slot.generated : slot.generated + cap]
            have = ~np.isnan(rows)
            log_a[: rows.size][have] = rows[have]
        return self._chains[stop_length(log_a, self.threshold, min(MIN_LEN, cap), cap)]

    def _trace_log_a(self, request: int | None) -> np.ndarray | None:
        """log â of the drafted token at every position of a trace request (NaN: no row)."""
        if request is None or self.positions is None or self.predictor is None:
            return None
        path = self.positions.path(request)
        if path is None:
            return None
        found = self._log_a.get(request)
        if found is None:
            found = self.predictor.log_predict(candidate_features(path.scores))
            found[~path.present] = np.nan
            self._log_a[request] = found
        return found
