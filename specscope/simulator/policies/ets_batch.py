"""`ets-batch`: one verification budget shared by the batch, allocated by ETS's integer program.

Rule (ETS 2025 as specscope applies it to draft trees; docs/methods.md#ets): choose every
request's tree jointly from candidate pools, maximising the batch's expected accepted tokens
under one budget of tree tokens (roots included): `optimizers.ets.ets_batch` (PuLP + CBC). A
request whose drafter does better gets more nodes. The budget is `options["batch_budget"]`, else
`PolicySetup.budget` × batch size (the same tokens a per-request budget would verify); when the
batch's roots alone exceed it, nobody speculates.

Each request's acceptance is the acceptance model scaled by its tracked ratio r (SmartSpec's
online tracking, `common.AcceptanceTracker`, weight `options["ema"]`), rounded to a grid of
`options["grid"]` (default 0.1) so that batches of like requests give the same program. Solutions
are memoised by (budget, the sorted rounded ratios): the program's input, so a hit is exactly
the solution a new solve would give. Each tree is cut at depth remaining − 1 (a draft past a
request's last token is never used; its nodes are not given to others).

Re-solving. A solve takes 13 ms for one request and grows quickly with the batch (this machine,
16 tokens a request: 0.09 s for 16 requests, 0.43 s for 64, 1.5 s for 128), so the program is
re-solved every `options["every"]` steps (default 8); in between a request keeps its tree, and a
request that joined since the last solve verifies the tree the program gives one request of its
rounded ratio under the per-request budget alone (memoised too), so the step's total can differ
from the batch budget until the next solve. Measured (h100, llama-3.1-8b, llama-3.2-1b draft of
top-1 acceptance 0.54, budget 16): every 8 steps against every step changes TPOT by +0.1% at
batch 1 and +0.8% at batch 16, throughput at batch 64 by −0.1%, and runs 8.7× faster at batch
64 (every 32: 1.0–1.4% worse, 36× faster).

Per-request limits. A request may get more than `PolicySetup.budget` tokens; the scheduler cuts
a tree larger than its per-request `max_tree` (the KV reservation, `--budget` unless a `--tree`
is larger). At budget 16 and batch 16 a third of the trees exceed 16 tokens and the cut removes
10% of the allocated tokens; raising max_tree to 64 accepts 2% more drafts but verifies deeper
trees, and TPOT rises 13% (the program maximises accepted tokens, not tokens per second).
"""

from __future__ import annotations

from specscope.errors import InputError
from specscope.optimizers.ets import ets_batch
from specscope.simulator.policies.base import Policy, PolicySetup, Slot, Speculation, StepView
from specscope.simulator.policies.common import DEFAULT_EMA, AcceptanceTracker, truncated
from specscope.tree import Tree

DEFAULT_EVERY = 8
"""Steps between re-solves of the batch's program."""
DEFAULT_GRID = 0.1
"""Rounding of the tracked acceptance ratio."""


class ETSBatch(Policy):
    """The batch's trees from one joint integer program, re-solved every N steps."""

    name = "ets-batch"

    def __init__(self, setup: PolicySetup) -> None:
        options = setup.options
        self.every = int(options.get("every", DEFAULT_EVERY))
        self.grid = float(options.get("grid", DEFAULT_GRID))
        batch_budget = options.get("batch_budget")
        self.batch_budget = None if batch_budget is None else int(batch_budget)
        if self.every < 1:
            raise InputError(f"ets-batch every must be ≥ 1 step, got {self.every}")
        if self.grid <= 0:
            raise InputError(f"ets-batch grid must be > 0, got {self.grid}")
        if self.batch_budget is not None and self.batch_budget < 1:
            raise InputError(f"ets-batch batch_budget must be ≥ 1, got {self.batch_budget}")
        self.budget = setup.budget
        self.max_depth = setup.max_depth
        self.source = setup.source
        self.table = setup.acceptance.table
        self.tracker = AcceptanceTracker(setup.acceptance, options.get("ema", DEFAULT_EMA))
        self.solves = 0
        """CBC solves so far (memo hits excluded)."""
        self._memo: dict[tuple[int, tuple[float, ...]], list[Tree]] = {}
        self._trees: dict[int, Tree] = {}
        self._speculations: dict[tuple[int, int], Speculation] = {}
        self._steps = 0
        self._next_solve = 0

    def rounded_ratio(self, request_id: int) -> float:
        """The request's tracked acceptance ratio on the grid (never past the model's cap)."""
        r = self.tracker.ratio(request_id)
        return min(round(r / self.grid) * self.grid, self.tracker.max_ratio)

    def allocate(self, ratios: tuple[float, ...], total: int) -> list[Tree]:
        """`ets_batch`'s trees for requests of these rounded ratios (sorted) under `total`."""
        key = (total, ratios)
        found = self._memo.get(key)
        if found is None:
            if total < len(ratios):
                found = [Tree.root()] * len(ratios)
            else:
                tables = [self.table * r for r in ratios]
                found = ets_batch(tables, total, self.max_depth, self.source)
                self.solves += 1
            self._memo[key] = found
        return found

    def plan(self, view: StepView) -> list[Speculation]:
        """Re-solve for the whole batch every `every` steps, else keep each request's tree."""
        slots = view.slots
        ratios = [self.rounded_ratio(slot.request_id) for slot in slots]
        if self._steps >= self._next_solve:
            total = self.batch_budget or self.budget * len(slots)
            order = sorted(range(len(slots)), key=lambda i: (ratios[i], slots[i].request_id))
            trees = self.allocate(tuple(ratios[i] for i in order), total)
            self._trees = {slots[i].request_id: tree for i, tree in zip(order, trees, strict=True)}
            self._next_solve = self._steps + self.every
        self._steps += 1
        out = []
        for slot, ratio in zip(slots, ratios, strict=True):
            tree = self._trees.get(slot.request_id)
            if tree is None:
                tree = self._trees[slot.request_id] = self.allocate((ratio,), self.budget)[0]
            out.append(self._speculation(tree, min(tree.depth, slot.remaining - 1)))
        return out

    def _speculation(self, tree: Tree, depth: int) -> Speculation:
        """`tree` cut at `depth`, one object per (memoised tree, depth): the pricer groups
        identical speculations."""
        key = (id(tree), depth)
        found = self._speculations.get(key)
        if found is None:
            found = self._speculations[key] = Speculation.of(truncated(tree, depth))
        return found

    def observe(self, slot: Slot, speculation: Speculation, accepted: int) -> None:
        """Track the request's acceptance ratio to the model."""
        self.tracker.observe(slot.request_id, speculation.tree, accepted)
