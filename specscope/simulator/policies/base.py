"""The per-step policy interface of the serving simulator.

Before every decoding step the server shows its policy the running batch (`StepView`: one `Slot`
per request, a `StepPricer` for what a step of the batch would cost, and the drafter's fitted
`AcceptanceModel`) and the policy answers with one `Speculation` per slot: the tree the target
verifies for that request this step (`Tree.root()`: no speculation) and the draft levels paid to
build it. After the step the server reports each request's accepted drafts to `observe`, which
adaptive policies learn from. A user adds a policy by subclassing `Policy` and registering it
in `specscope.simulator.policies.POLICIES`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from specscope.schedule import Schedule
from specscope.trace import AcceptanceModel, Trace
from specscope.tree import Tree


@dataclass(frozen=True)
class Slot:
    """One running request as a policy sees it at the start of a step."""

    request_id: int
    trace_request: int | None
    """The trace request whose positions this request replays, as its row in the trace's
    requests sorted by `request_id` (0, 1, …; None when acceptance is sampled from the
    model)."""
    context_len: int
    """Tokens in its cache: prompt + generated so far."""
    generated: int
    """Tokens generated so far (its replay position in the trace)."""
    remaining: int
    """Tokens it still has to generate (≥ 1)."""


@dataclass(frozen=True)
class Speculation:
    """What one request does in one step: verify `tree` after `draft_levels` draft levels.

    `draft_levels` may exceed `tree.depth` when a policy drafted tokens it then did not verify
    (a stopping rule that looked one level further); it is the number of draft forwards (or
    model-free propose calls) the step pays for this request.
    """

    tree: Tree
    draft_levels: int

    @classmethod
    def none(cls) -> Speculation:
        """No speculation: the target decodes one token."""
        return cls(Tree.root(), 0)

    @classmethod
    def of(cls, tree: Tree) -> Speculation:
        """Verify `tree`, drafting one level per depth."""
        return cls(tree, tree.depth)


class StepPricer(Protocol):
    """Seconds of one decoding step of a batch (the simulator's cost predictor)."""

    def step_s(self, contexts: Sequence[int], speculations: Sequence[Speculation]) -> float:
        """Seconds of one step: the drafting of every speculation (batched per level), one
        batched target verification of all tree tokens, and the per-step host overhead."""
        ...


@dataclass(frozen=True)
class StepView:
    """What a policy sees before a step."""

    slots: tuple[Slot, ...]
    pricer: StepPricer | None
    """Prices candidate steps (None in a real run without a hardware profile, where no policy
    that prices steps runs)."""
    acceptance: AcceptanceModel
    """The drafter's acceptance model (positional p, possibly depth-dependent)."""
    source: str
    """The drafter source trees are drafted from (node `sources` of the trees it returns)."""
    step: int
    """Index of this step on its replica, from 0."""


@dataclass(frozen=True)
class PolicySetup:
    """What a policy is built from (`POLICIES[name](setup)`)."""

    acceptance: AcceptanceModel
    source: str
    trace: Trace | None
    tree: Tree | None
    """`--tree`: the static tree (the `static` policy's, and a shape others may start from)."""
    budget: int
    """Per-request verification budget (tree size, root included) of the dynamic policies."""
    max_depth: int
    seed: int
    options: Mapping[str, float] = field(default_factory=dict)
    """Policy-specific knobs by name (e.g. smartspec `margin`, ets-batch `every`)."""
    schedule: Schedule | None = None
    """`--schedule`: the schedule policy's table of trees per batch size and context."""


class Policy(ABC):
    """A per-step speculation policy."""

    name: ClassVar[str]
    chooses: ClassVar[bool] = False
    """Whether the policy prices candidate steps to choose each one (the host work a real
    server spends on it is `BatchPricer.choose_s`)."""

    @abstractmethod
    def plan(self, view: StepView) -> list[Speculation]:
        """One `Speculation` per slot of `view`, in slot order."""

    def observe(self, slot: Slot, speculation: Speculation, accepted: int) -> None:  # noqa: B027
        """Learn from one request's outcome: `accepted` drafts of `speculation.tree` (0 ≤
        accepted ≤ tree.depth). Default: nothing to learn."""
