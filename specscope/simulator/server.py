"""The server: replicas as simpy processes behind a router, continuous batching, decoding steps.

Each replica loops: admit queued groups (`Scheduler.admit`), move ready sequences into the
running batch, then run one step:

- prefill (without chunked prefill): the prompts admitted since the last step, in one batched
  forward (`BatchPricer.prefill_s`); the running requests wait, as vLLM's default scheduler
  makes them. A prompt is prefilled once for all the sequences that fork from it. Prefill
  generates no token: the first decoding step verifies a tree rooted at the prompt's last
  token, as the executor and the trace do.
- decoding: the policy plans one `Speculation` per running request (`Policy.plan`); a sequence
  drafter's chain is cut to its proposal (`Acceptance.drafted`); trees are fitted to the
  limits (`Scheduler.fit`); chunks of prompts being prefilled join the step when prefill is
  chunked. The pricer gives the step's seconds; simulated time advances by them; each request
  accepts drafts (`Acceptance.accept`) and appends accepted + 1 bonus tokens, never past its
  requested output; the policy observes each outcome.

Draft placement `separate`: drafting for the next step overlaps this step's verification
(pipelined, assuming the step accepts as deep as each tree goes). A step costs the drafting
redone for requests whose last step broke that assumption (and for requests on their first
step, which had nothing to overlap with), then the longer of verification and the overlapped
drafting, then the link's transfers (`BatchPricer.combine`).

A prefill (or a decoding step) pays the machine's wake-up penalty for the time since the last
prefill (or any forward) began (`BatchPricer.wake_s`: the profile's `[idle]` table; none
without it): where the machine pages out what sat unused, a prefill's kernels go cold while
only decoding steps run, and everything goes cold while the replica idles.

A sequence that finishes frees nothing until its group finishes; its children (forking
workloads) become ready to run at once, their prefix already cached.

Speed: the running sequences are a `RunningBatch`, which keeps their contexts' sum and commits a
step's tokens touching each sequence once (or, in plain decoding, only those that finish). A
`FixedPolicy` (`none`, `static`) gives every request the same speculation at every step; when
nothing cuts it per request (colocated drafting, no replayed sequence drafter) a step of it
builds no per-request slots, speculations or contexts: it is priced from the batch's count and
contexts' sum (`BatchPricer.parts_all`) and its acceptance drawn for the whole batch
(`Acceptance.accept_all`), with the same results.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator

import simpy

from specscope.simulator.acceptance import Acceptance
from specscope.simulator.batch import RunningBatch
from specscope.simulator.entities import Group, KVSpace, Request
from specscope.simulator.events import (
    ADMIT,
    ARRIVAL,
    FINISH,
    PREFILL_DONE,
    STEP_END,
    STEP_START,
    EventLog,
)
from specscope.simulator.policies.base import Policy, Slot, Speculation, StepView
from specscope.simulator.policies.static import FixedPolicy
from specscope.simulator.pricing import BatchPricer
from specscope.simulator.scheduler import Limits, Router, Scheduler

Steps = Generator[simpy.Event, object, None]
"""A simpy process body."""


class Replica:
    """One replica: its queue, batch, KV memory, policy and simpy process."""

    def __init__(self, index: int, env: simpy.Environment, limits: Limits, kv: KVSpace,
                 pricer: BatchPricer, policy: Policy, acceptance: Acceptance, log: EventLog,
                 finished: Callable[[Group], None]) -> None:
        self.index, self.env, self.kv, self.pricer = index, env, kv, pricer
        self.policy, self.acceptance, self.log, self.finished = policy, acceptance, log, finished
        self.scheduler = Scheduler(limits, kv)
        self.max_batch, self.chunked = limits.max_batch, limits.chunk is not None
        self.queue: deque[Group] = deque()
        self.prefilling: list[Group] = []
        self.ready: deque[Request] = deque()
        self.fixed = (policy.speculation if isinstance(policy, FixedPolicy)
                      and pricer.link is None and not acceptance.cuts(policy.speculation)
                      else None)
        """The speculation of every request at every step, when nothing cuts it per request."""
        plain = (self.fixed is not None and self.fixed.tree.size == 1
                 and not pricer.needs_contexts)
        self.batch = RunningBatch(kv, plain)
        self.running = self.batch.requests
        self.outstanding = 0
        self.steps = 0
        self._wake: simpy.Event | None = None
        self._last = {"prefill": env.now, "step": env.now}
        self.process = env.process(self.run())

    def arrive(self, group: Group) -> None:
        """A group routed here joins the queue."""
        group.replica = self.index
        self.outstanding += 1
        self.queue.append(group)
        self.log.add(self.env.now, ARRIVAL, self.index, group.id)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def run(self) -> Steps:
        """The replica's loop (module docstring)."""
        while True:
            occupied = len(self.running) + len(self.ready) + len(self.prefilling)
            for group in self.scheduler.admit(self.queue, occupied):
                self.log.add(self.env.now, ADMIT, self.index, group.id,
                             kv_bytes=self.kv.used)
                for r in group.first:
                    r.admitted_s = self.env.now
                self.prefilling.append(group)
            while self.ready and len(self.running) + len(self.prefilling) < self.max_batch:
                self.batch.join(self.ready.popleft(), self.steps)
            if not self.running and not self.prefilling:
                self._wake = self.env.event()
                yield self._wake
                continue
            if self.prefilling and not self.chunked:
                yield from self._prefill()
            else:
                yield from self._decode()

    def _prefilled(self, group: Group) -> None:
        now = self.env.now
        self.log.add(now, PREFILL_DONE, self.index, group.id, tokens=group.prompt_len,
                     kv_bytes=self.kv.used)
        for r in group.first:
            r.prefill_done_s = now
            self.kv.start(r)
            self.ready.append(r)

    def _prefill(self) -> Steps:
        groups, self.prefilling = self.prefilling, []
        seconds = self.pricer.prefill_s([g.prompt_len for g in groups]) + self._woken("prefill")
        yield self.env.timeout(seconds)
        for group in groups:
            group.prefilled = group.prompt_len
            self._prefilled(group)

    def _decode(self) -> Steps:
        env, running, pricer = self.env, self.running, self.pricer
        count = len(running)
        slots: tuple[Slot, ...] = ()
        specs: list[Speculation] = []
        if self.fixed is not None and running:
            fixed = self.scheduler.fit_all(self.fixed, count)
            tree_tokens = fixed.tree.size * count
            chunks = self._chunks(tree_tokens)
            contexts = [r.context_len for r in running] if pricer.needs_contexts else []
            parts = pricer.parts_all(fixed, count, self.batch.context_sum, contexts,
                                     [(n, g.prefilled) for g, n in chunks])
            accepted = (None if fixed.tree.size == 1 and self.batch.lazy
                        else self.acceptance.accept_all(running, fixed.tree))
            seconds = pricer.combine(parts)
        else:
            slots, specs = self._plan()
            contexts = [r.context_len for r in running]
            tree_tokens = sum(s.tree.size for s in specs)
            chunks = self._chunks(tree_tokens)
            parts = pricer.parts(contexts, specs, [(n, g.prefilled) for g, n in chunks])
            accepted = [self.acceptance.accept(r.trace_row, r.generated, r.remaining, s.tree,
                                               r.multiplier)
                        for r, s in zip(running, specs, strict=True)]
            seconds = pricer.combine(parts, *self._separate(contexts, specs, accepted,
                                                             tree_tokens))
        seconds += self._woken("step")
        if self.policy.chooses and running:
            seconds += pricer.choose_s(count)
        in_flight = tree_tokens * self.kv.cost.per_token
        self.log.add(env.now, STEP_START, self.index, -1, -1, count + len(chunks),
                     tree_tokens + sum(n for _, n in chunks), self.kv.used + in_flight)
        self.steps += 1
        yield env.timeout(seconds)
        if specs:
            self._learn(slots, specs, accepted)
        self._commit(count, accepted)
        for group, n in chunks:
            group.prefilled += n
            if group.prefilled == group.prompt_len:
                self.prefilling.remove(group)
                self._prefilled(group)

    def _plan(self) -> tuple[tuple[Slot, ...], list[Speculation]]:
        """The running requests as the policy sees them, and what each verifies this step."""
        running, acceptance = self.running, self.acceptance
        if not running:
            return (), []
        slots = tuple(Slot(r.id, r.trace_row, r.context_len, r.generated, r.remaining)
                      for r in running)
        view = StepView(slots, self.pricer, acceptance.model, self.pricer.source, self.steps)
        planned = self.policy.plan(view)
        return slots, self.scheduler.fit([
            acceptance.drafted(r.trace_row, r.generated, r.remaining, s, r.multiplier)
            for r, s in zip(running, planned, strict=True)])

    def _chunks(self, tree_tokens: int) -> list[tuple[Group, int]]:
        """The prompt chunks that join a step of `tree_tokens` tree tokens."""
        return self.scheduler.chunks(self.prefilling, tree_tokens) if self.chunked else []

    def _separate(self, contexts: list[int], specs: list[Speculation], accepted: list[int],
                  tree_tokens: int) -> tuple[float, int]:
        """Under separate placement, the seconds of drafting redone for requests whose
        overlapped drafting broke, and the token ids the link moves (colocated: none)."""
        if self.pricer.link is None or not self.running:
            return 0.0, 0
        stale = [i for i, r in enumerate(self.running) if not r.overlap_held]
        redo = 0.0
        if stale:
            redo = self.pricer.draft_s([contexts[i] for i in stale], [specs[i] for i in stale])
        return redo, tree_tokens + sum(accepted) + len(specs)

    def _woken(self, kind: str) -> float:
        """The wake-up penalty (`BatchPricer.wake_s`) of a `kind` ("prefill" or "step") that
        starts now, after the gap since the last one began (a prefill warms what a step runs
        too: it counts as both)."""
        gap = self.env.now - self._last[kind]
        self._last[kind] = self._last["step"] = self.env.now
        return self.pricer.wake_s(gap)

    def _learn(self, slots: tuple[Slot, ...], specs: list[Speculation], accepted: list[int]
               ) -> None:
        """The policy observes each request's outcome; under separate placement each request
        records whether its overlapped drafting held."""
        observe, separate = self.policy.observe, self.pricer.link is not None
        for r, slot, spec, a in zip(self.running, slots, specs, accepted, strict=True):
            if separate:
                r.overlap_held = a == spec.tree.depth
            observe(slot, spec, a)

    def _commit(self, count: int, accepted: list[int] | None) -> None:
        """Append each request's tokens (`accepted` drafts + 1; None: plain decoding), finish
        the requests that are done."""
        now, kv = self.env.now, self.kv
        if accepted is None:
            total, done = self.batch.commit_plain(now, self.steps)
        else:
            total, done = self.batch.commit(now, self.steps, accepted)
        self.log.add(now, STEP_END, self.index, -1, -1, count, total, kv.used)
        for r in done:
            r.finish_s = now
            self.log.add(now, FINISH, self.index, r.group.id, r.id, kv_bytes=kv.used)
            for child in r.children:
                child.start_s = child.admitted_s = child.prefill_done_s = now
                kv.start(child)
                self.ready.append(child)
            group = r.group
            group.finished += 1
            if group.done:
                kv.release(group)
                self.outstanding -= 1
                self.finished(group)


def serve(groups: list[Group], replicas: list[Replica], router: Router) -> None:
    """Run the simulation to its end: every group arrives at its time on the replica the
    router picks, and every replica works until its last group finishes."""
    env = replicas[0].env

    def arrivals() -> Steps:
        for group in groups:
            if group.arrival_s > env.now:
                yield env.timeout(group.arrival_s - env.now)
            for r in group.first:
                r.start_s = group.arrival_s
            replicas[router.pick([x.outstanding for x in replicas])].arrive(group)

    env.process(arrivals())
    env.run()
