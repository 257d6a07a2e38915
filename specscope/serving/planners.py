"""The simulator's speculation policies run for real: each step's tree for every running request.

- `none`, `static`, `smartspec`: the simulator's own `Policy` (`simulator/policies/`) plans one
  `Speculation` per request from a `StepView` of the live batch (context, generated and
  remaining tokens of each request), and the request's drafter fills the planned shape
  (`methods.draft_static`: a candidate missing from the drafter leaves its node out). SmartSpec
  observes each request's accepted drafts as in the simulator, and prices candidate steps with
  the simulator's own `BatchPricer` on the machine's hardware profile (SmartSpec models batch
  time from offline profiling), so that both sides choose by the same prices.
- `dyspec`, `specdecpp`: the executor's live methods (`methods.dyspec_method`,
  `methods.specdecpp_method`) on each request's drafter, the rules the simulator's policies
  replay from a trace. Approximation: the simulator caps their trees at the request's remaining
  tokens; here they are not capped (a node past a request's last token costs verification and
  is dropped if accepted).

`ets-batch` is not run for real.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from specscope.draft import DraftedTree
from specscope.errors import InputError
from specscope.executor.methods import Method, draft_static, dyspec_method, specdecpp_method
from specscope.executor.verify import Verdict
from specscope.names import SERVED_POLICIES
from specscope.optimizers.specdecpp import AUTHORS_THRESHOLD
from specscope.optimizers.specdecpp_predictor import AcceptancePredictor
from specscope.schedule import Schedule
from specscope.simulator.policies import POLICIES
from specscope.simulator.policies.base import (
    Policy,
    PolicySetup,
    Slot,
    Speculation,
    StepPricer,
    StepView,
)
from specscope.trace import AcceptanceModel, Trace
from specscope.tree import Tree

if TYPE_CHECKING:
    from specscope.serving.served import Served

Runner = Callable[[Sequence[Callable[[], Any]]], list[Any]]
"""Runs each row's drafting job and returns their results in order: one after another, or
concurrently with their draft forwards batched (`BatchedDraft.run`)."""


def in_turn(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    """Each job after the other."""
    return [job() for job in jobs]


class Planner(Protocol):
    """Grows each running request's tree for a step, and learns from the outcomes."""

    def trees(self, running: Sequence[Served], step: int) -> list[DraftedTree]:
        """One drafted tree per running request (each drafter has begun the step)."""
        ...

    def observe(self, index: int, served: Served, drafted: DraftedTree, verdict: Verdict
                ) -> None:
        """Running request `index` of the step accepted `verdict` on `drafted`."""
        ...

    def stepped(self, seconds: float) -> None:
        """The step just planned took `seconds` (drafting, verification, prompt chunks): what a
        planner that learns from step times, or a measuring one, reads."""
        ...


class PolicyPlanner:
    """A simulator `Policy` planning shapes that each request's drafter fills."""

    def __init__(self, policy: Policy, acceptance: AcceptanceModel, source: str,
                 pricer: StepPricer | None, run: Runner = in_turn) -> None:
        self.policy, self.acceptance, self.source = policy, acceptance, source
        self.pricer, self.run = pricer, run
        self._slots: tuple[Slot, ...] = ()
        self._specs: list[Speculation] = []

    def trees(self, running: Sequence[Served], step: int) -> list[DraftedTree]:
        self._slots = tuple(Slot(s.request.id, None, s.request.context_len, s.request.generated,
                                 s.request.remaining) for s in running)
        view = StepView(self._slots, self.pricer, self.acceptance, self.source, step)
        self._specs = self.policy.plan(view)
        jobs = [partial(draft_static, s.drafter, s.context[-1], spec.tree)
                for s, spec in zip(running, self._specs, strict=True)]
        # rows that draft nothing (a plain step: SmartSpec's k = 0) stay out of `run`, whose
        # drafting threads cost a step about 0.1 ms even with nothing to draft (2 CPU cores)
        drafting = [i for i, spec in enumerate(self._specs) if spec.tree.size > 1]
        drafted = dict(zip(drafting, self.run([jobs[i] for i in drafting]), strict=True))
        return [drafted[i] if i in drafted else job() for i, job in enumerate(jobs)]

    def observe(self, index: int, served: Served, drafted: DraftedTree, verdict: Verdict
                ) -> None:
        self.policy.observe(self._slots[index], self._specs[index], verdict.accepted)

    def stepped(self, seconds: float) -> None:
        """Prices come from the profile, not from step times."""


class MethodPlanner:
    """An executor `Method` growing every request's tree on its own drafter."""

    def __init__(self, method: Method, run: Runner = in_turn) -> None:
        self.method, self.run = method, run

    def trees(self, running: Sequence[Served], step: int) -> list[DraftedTree]:
        return self.run([partial(self.method.build, s.drafter, s.context[-1])
                         for s in running])

    def observe(self, index: int, served: Served, drafted: DraftedTree, verdict: Verdict
                ) -> None:
        if self.method.observe is not None:
            self.method.observe(drafted, verdict)

    def stepped(self, seconds: float) -> None:
        """Nothing to learn from step times."""


def make_planner(policy: str, source: str, budget: int, max_depth: int,
                 tree: Tree | None = None, acceptance: AcceptanceModel | None = None,
                 trace: Trace | None = None, seed: int = 0,
                 options: Mapping[str, float] | None = None,
                 pricer: StepPricer | None = None, run: Runner = in_turn,
                 schedule: Schedule | None = None) -> tuple[Planner, int]:
    """The named policy (`SERVED_POLICIES`) for drafter `source`, and the largest tree it may
    verify per request. `smartspec` needs `acceptance` (or a `trace` holding `source`) and a
    `pricer` (the simulator's `BatchPricer` on the machine's profile), `specdecpp` a `trace`
    holding `source` to fit its predictor on, `static` a `tree`, `schedule` a `schedule`.
    `run` runs the rows' drafting (`in_turn`, or batching their draft forwards)."""
    if policy not in SERVED_POLICIES:
        known = ", ".join(SERVED_POLICIES)
        raise InputError(f"--policy {policy!r} is not run for real; serve-bench runs {known}")
    options = dict(options or {})
    if trace is not None and acceptance is None:
        acceptance = AcceptanceModel.from_trace(trace, source)
    if policy == "dyspec":
        return MethodPlanner(dyspec_method(budget), run), budget
    if policy == "specdecpp":
        if trace is None:
            raise InputError("--policy specdecpp fits its acceptance predictor on a trace of the "
                             "drafter: give --trace")
        predictor = AcceptancePredictor.fit(trace, source, seed)
        method = specdecpp_method(predictor, min(budget, max_depth + 1), "predictor fitted on "
                                  "--trace", options.get("threshold", AUTHORS_THRESHOLD))
        return MethodPlanner(method, run), method.max_size
    if acceptance is None:
        if policy == "smartspec":
            raise InputError("--policy smartspec needs --trace or --acceptance")
        acceptance = AcceptanceModel.from_vector([0.0], source)
    if policy == "smartspec" and pricer is None:
        raise InputError("--policy smartspec prices its steps on a hardware profile: give --hw")
    setup = PolicySetup(acceptance, source, trace, tree, budget, max_depth, seed, options,
                        schedule)
    chosen = POLICIES[policy](setup)
    scheduled = [] if schedule is None else [b.tree.size for b in schedule.buckets if b.tree]
    largest = {"none": 1, "static": tree.size if tree is not None else 1,
               "schedule": max([1, *scheduled])}.get(
        policy, max(budget, tree.size if tree is not None else 1))
    return PolicyPlanner(chosen, acceptance, source, pricer, run), largest
