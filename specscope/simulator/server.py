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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator

import simpy

from specscope.simulator.acceptance import Acceptance
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
        self.running: list[Request] = []
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
                self.running.append(self.ready.popleft())
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
        env, running, acceptance = self.env, self.running, self.acceptance
        specs: list[Speculation] = []
        slots: tuple[Slot, ...] = ()
        if running:
            slots = tuple(Slot(r.id, r.trace_row, r.context_len, r.generated, r.remaining)
                          for r in running)
            view = StepView(slots, self.pricer, acceptance.model, self.pricer.source, self.steps)
            planned = self.policy.plan(view)
            specs = self.scheduler.fit([
                acceptance.drafted(r.trace_row, r.generated, r.remaining, s, r.multiplier)
                for r, s in zip(running, planned, strict=True)])
        contexts = [r.context_len for r in running]
        tree_tokens = sum(s.tree.size for s in specs)
        chunks = (self.scheduler.chunks(self.prefilling, tree_tokens) if self.chunked else [])
        parts = self.pricer.parts(contexts, specs, [(n, g.prefilled) for g, n in chunks])
        accepted = [acceptance.accept(r.trace_row, r.generated, r.remaining, s.tree,
                                      r.multiplier) for r, s in zip(running, specs, strict=True)]
        redo = moved = 0.0
        if self.pricer.link is not None and running:
            stale = [i for i, r in enumerate(running) if not r.overlap_held]
            if stale:
                redo = self.pricer.draft_s([contexts[i] for i in stale],
                                           [specs[i] for i in stale])
            moved = tree_tokens + sum(accepted) + len(running)
        seconds = self.pricer.combine(parts, redo, int(moved)) + self._woken("step")
        if self.policy.chooses and running:
            seconds += self.pricer.choose_s(len(running))
        in_flight = tree_tokens * self.kv.cost.per_token
        self.log.add(env.now, STEP_START, self.index, batch=len(running) + len(chunks),
                     tokens=tree_tokens + sum(n for _, n in chunks),
                     kv_bytes=self.kv.used + in_flight)
        self.steps += 1
        yield env.timeout(seconds)
        self._commit(slots, specs, accepted)
        for group, n in chunks:
            group.prefilled += n
            if group.prefilled == group.prompt_len:
                self.prefilling.remove(group)
                self._prefilled(group)

    def _woken(self, kind: str) -> float:
        """The wake-up penalty (`BatchPricer.wake_s`) of a `kind` ("prefill" or "step") that
        starts now, after the gap since the last one began (a prefill warms what a step runs
        too: it counts as both)."""
        gap = self.env.now - self._last[kind]
        self._last[kind] = self._last["step"] = self.env.now
        return self.pricer.wake_s(gap)

    def _commit(self, slots: tuple[Slot, ...], specs: list[Speculation], accepted: list[int]
                ) -> None:
        """Append each request's tokens, observe, finish the requests that are done."""
        now, kv, observe = self.env.now, self.kv, self.policy.observe
        done, total = [], 0
        for r, slot, spec, a in zip(self.running, slots, specs, accepted, strict=True):
            tokens = min(a + 1, r.output_len - r.generated)
            if not r.generated:
                r.first_token_s = now
            r.generated += tokens
            r.steps += 1
            r.accepted += tokens - 1
            r.overlap_held = a == spec.tree.depth
            total += tokens
            kv.grow(r, tokens)
            observe(slot, spec, a)
            if r.generated == r.output_len:
                done.append(r)
        self.log.add(now, STEP_END, self.index, batch=len(self.running), tokens=total,
                     kv_bytes=kv.used)
        for r in done:
            self.running.remove(r)
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
