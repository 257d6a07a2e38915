"""`smartspec`: SmartSpec's goodput-maximising speculation length for the whole batch.

Rule (SmartSpec 2024; docs/methods.md#smartspec): before each step choose one speculation length
k for every request of the batch, 0 (no speculation) included, maximising the predicted goodput

    goodput(k) = Σ_i E[tokens_i(k)] / step_s(contexts, speculations(k)),

where E[tokens_i(k)] = Σ_{d≤k_i} F[d] · r_i^d counts the expected accepted drafts plus the bonus
token of request i, k_i = min(k, remaining_i − 1) (no draft past a request's last token), F[d]
the acceptance model's summed node scores at depth d of the speculated shape (for a chain,
Π_{j≤d} p_j), and r_i the request's tracked acceptance ratio. The step time is the simulator's
own `StepPricer` (SmartSpec fits a linear model of batch time online; pricing with the cost model
itself is an idealisation in the policy's favour). Speculation must beat k = 0 by a margin:
k > 0 is used only when goodput(k) ≥ (1 + margin) · goodput(0). The authors use 10%; the
default here is `options["margin"]` = 0.05, which bounds what the margin can cost (where
speculation would gain less than 5% the policy forgoes it) to the 5% the crossover test
tolerates. Measured at batch 1 (h100, llama-3.1-8b, llama-3.2-1b draft of top-1 acceptance
0.54, where a chain of 1 predicts +14%): TPOT 7.62 ms with no margin, 7.64 ms at 5%, 8.06 ms at
10% (the tracked acceptance dips often enough below what a 10% margin needs).

Online acceptance (the paper tracks each request's acceptance by a moving average of what it
observed): `observe` folds each step's accepted drafts into the request's ratio r_i to the
acceptance model (`common.AcceptanceTracker`, weight `options["ema"]`, default 0.1), which
starts from the ratio pooled over all requests (the model's 1 before any observation).
Measured (h100, llama-3.1-8b, llama-3.2-1b draft of top-1 acceptance 0.54, budget 16): where
the model is right (synthetic requests drawn alike) tracking only adds noise, TPOT 7.64 ms at
batch 1 against 7.55 ms with the model alone; where acceptance drifted to 0.4 × the model's it
gives 8.84 ms against 9.48 ms at batch 1 (autoregressive: 8.80 ms) and 5,032 tokens/s against
4,376 at batch 64 (autoregressive: 5,116); at 1.6 × it gives 6.86 ms against 7.02 ms.

The speculated shape is a chain of up to min(max_depth, budget − 1) drafts, as in the paper;
given a `--tree` (`PolicySetup.tree`), the shape is that tree and length k keeps its nodes down
to depth k (our extension to trees). In the setting above, with the 16-token DP tree (depth 5)
as the shape: 5.97 ms TPOT at batch 1 and 5,612 tokens/s at batch 64, against 7.64 ms and 5,371
with chains (a wide, shallow cut of the tree pays fewer draft levels).
"""

from __future__ import annotations

import numpy as np

from specscope.errors import InputError
from specscope.simulator.policies.base import Policy, PolicySetup, Slot, Speculation, StepView
from specscope.simulator.policies.common import DEFAULT_EMA, AcceptanceTracker, truncated
from specscope.tree import Tree

DEFAULT_MARGIN = 0.05
"""Relative goodput gain speculation must predict over no speculation."""


class SmartSpec(Policy):
    """One goodput-maximising speculation length per step for the batch (module docstring)."""

    name = "smartspec"
    chooses = True

    def __init__(self, setup: PolicySetup) -> None:
        self.margin = float(setup.options.get("margin", DEFAULT_MARGIN))
        if self.margin < 0:
            raise InputError(f"smartspec margin must be ≥ 0, got {self.margin}")
        shape = setup.tree
        if shape is None:
            shape = Tree.chain(max(0, min(setup.max_depth, setup.budget - 1)), setup.source)
        self.tracker = AcceptanceTracker(setup.acceptance, setup.options.get("ema", DEFAULT_EMA))
        self.masses = self.tracker.masses(shape)
        self.lengths = [Speculation.of(truncated(shape, k)) for k in range(shape.depth + 1)]

    def plan(self, view: StepView) -> list[Speculation]:
        """The same speculation length for every slot, capped by its remaining tokens."""
        k = self.best_length(view)
        return [self.lengths[min(k, slot.remaining - 1)] for slot in view.slots]

    def goodputs(self, view: StepView) -> np.ndarray:
        """Predicted goodput (tokens/s) of each length 0..depth of the shape for this batch."""
        slots = view.slots
        contexts = [slot.context_len for slot in slots]
        caps = np.array([slot.remaining - 1 for slot in slots])
        ratios = np.array([self.tracker.ratio(slot.request_id) for slot in slots])
        depth = np.arange(self.masses.size)
        expected = np.cumsum(self.masses * ratios[:, None] ** depth, axis=1)
        rows = np.arange(len(slots))
        out = np.zeros(self.masses.size)
        for k in depth:
            kept = np.minimum(k, caps)
            specs = [self.lengths[d] for d in kept]
            out[k] = expected[rows, kept].sum() / view.pricer.step_s(contexts, specs)
        return out

    def best_length(self, view: StepView) -> int:
        """The length of the largest predicted goodput if it beats no speculation by the
        margin, else 0."""
        goodput = self.goodputs(view)
        k = int(np.argmax(goodput))
        return k if goodput[k] >= (1 + self.margin) * goodput[0] else 0

    def observe(self, slot: Slot, speculation: Speculation, accepted: int) -> None:
        """Track the request's acceptance ratio to the model."""
        self.tracker.observe(slot.request_id, speculation.tree, accepted)
