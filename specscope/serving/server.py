"""Continuous-batching speculative decoding on a `BatchedModel`, in wall-clock time.

The loop is the simulator's replica (`simulator/server.py`) run for real, with its entities
(`Group`, `Request`), its scheduler (`Scheduler`: admission, tree fitting, prompt chunks under
the token budget) and its event log, so that a real run and a simulated one are measured the
same way (`simulator/metrics.py`). Each turn of the loop:

- arrivals whose time has come join the queue (their `start_s` is the arrival time itself, not
  when the loop saw them); groups are admitted to free rows (`Scheduler.admit`); prefilled
  sequences join the running batch while it has room;
- without chunked prefill, the admitted prompts are prefilled (the running requests wait);
- otherwise one decoding step: every running request's drafter grows its tree under the policy
  (`planners.py`), the trees are cut to the limits (`Scheduler.fit`'s rule on the drafted
  tree's breadth-first prefix), prompt chunks take the token budget left (`Scheduler.chunks`),
  all rows are verified in ONE `BatchedModel.verify` call, the chunks are prefilled, and each
  row commits its greedy verdict (`verify.greedy`, so each sequence's output is its own greedy
  autoregressive output whatever shares its batches). Tokens past a request's fixed output
  length are dropped (EOS is ignored); a request that has them all leaves and frees its row.

A token's time is the end of the step that committed it. A prompt's last token is not
prefilled (it is the first step's root), so the last chunk feeds one token fewer than the
scheduler counts; a drafter starts (a draft model prefills the whole prompt) when the prompt's
last chunk is done.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl
import torch

from specscope.draft import DraftedTree
from specscope.executor.batched import BatchedModel
from specscope.executor.drafters import Drafter
from specscope.executor.verify import greedy
from specscope.serving.planners import Planner
from specscope.serving.served import Served
from specscope.simulator.entities import Group, KVCost, KVSpace, Request
from specscope.simulator.events import (
    ADMIT,
    ARRIVAL,
    FINISH,
    PREFILL_DONE,
    STEP_END,
    STEP_START,
    EventLog,
)
from specscope.simulator.scheduler import Limits, Scheduler
from specscope.tree import Tree


@dataclass(frozen=True)
class ServeRun:
    """What a run produced: every request's sequence (`Served`, in request id order), the
    event log (time-ordered), and the decoding steps run."""

    sequences: list[Served]
    events: pl.DataFrame
    steps: int

    @property
    def outputs(self) -> list[list[int]]:
        """Generated tokens per request, in request id order."""
        return [s.output for s in self.sequences]


def cut(drafted: DraftedTree, size: int) -> DraftedTree:
    """The drafted tree's first `size` nodes (breadth-first, so ancestor-closed)."""
    if drafted.tree.size <= size:
        return drafted
    t = drafted.tree
    return DraftedTree(Tree(t.parents[:size], t.ranks[:size], t.sources[:size]),
                       drafted.tokens[:size], drafted.scores[:size], drafted.forwards)


class Server:
    """The continuous-batching loop over `model` (module docstring).

    `drafter_for(row)` is row `row`'s drafter (made once per row, started anew per request);
    `prompts[i]` is request i's prompt, whose length must be its `Request.prompt_len`.
    `clock` gives seconds and `sleep` waits (wall clock by default; tests may pass others).
    """

    def __init__(self, model: BatchedModel, drafter_for: Callable[[int], Drafter],
                 planner: Planner, limits: Limits,
                 clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        limits.check()
        if limits.max_batch > model.rows:
            raise ValueError(f"max_batch {limits.max_batch} exceeds the model's {model.rows} rows")
        self.model, self.planner, self.limits = model, planner, limits
        self.drafters = [drafter_for(row) for row in range(limits.max_batch)]
        self.scheduler = Scheduler(limits, KVSpace(math.inf, KVCost(0.0, 0.0)))
        self.clock = clock or model.runtime.clock
        self.sleep = sleep
        self.log = EventLog()

    def run(self, groups: Sequence[Group], prompts: Sequence[Sequence[int]]) -> ServeRun:
        """Serve `groups` (one sequence each, in arrival order) arriving at their times."""
        self._t0 = self.clock()
        self.steps = 0
        pending = deque(sorted(groups, key=lambda g: g.arrival_s))
        self.queue: deque[Group] = deque()
        self.prefilling: list[Group] = []
        self.ready: deque[Served] = deque()
        self.running: list[Served] = []
        self.free = list(range(self.limits.max_batch))
        self.of_group: dict[int, Served] = {}
        self.prompts = prompts
        done: list[Served] = []
        self.done = done
        while pending or self.queue or self.prefilling or self.ready or self.running:
            now = self.now()
            while pending and pending[0].arrival_s <= now:
                group = pending.popleft()
                group.replica = 0
                group.first[0].start_s = group.arrival_s
                self.queue.append(group)
                self.log.add(group.arrival_s, ARRIVAL, 0, group.id)
            occupied = len(self.running) + len(self.ready) + len(self.prefilling)
            for group in self.scheduler.admit(self.queue, occupied):
                self._admit(group)
            while self.ready and len(self.running) + len(self.prefilling) < self.limits.max_batch:
                self.running.append(self.ready.popleft())
            if not self.running and not self.prefilling:
                if pending:
                    self.sleep(max(0.0, pending[0].arrival_s - self.now()))
                continue
            if self.prefilling and self.limits.chunk is None:
                self._prefill_whole()
            else:
                self._decode()
        events = self.log.frame().sort("time_s", maintain_order=True)
        return ServeRun(sorted(done, key=lambda s: s.request.id), events, self.steps)

    def now(self) -> float:
        """Seconds since the run started."""
        return self.clock() - self._t0

    def _admit(self, group: Group) -> None:
        request = group.first[0]
        row = min(self.free)  # the lowest: a batched pass costs what its highest row implies
        self.free.remove(row)
        prompt = list(self.prompts[request.id])
        seq = Served(request, row, prompt, self.drafters[row])
        self.model.admit(row, self._capacity(request))
        self.of_group[group.id] = seq
        request.admitted_s = self.now()
        self.log.add(request.admitted_s, ADMIT, 0, group.id)
        self.prefilling.append(group)

    def _capacity(self, request: Request) -> int:
        return request.prompt_len + request.output_len + self.limits.max_tree

    def _feed(self, group: Group, n: int) -> None:
        """Prefill the group's next `n` prompt tokens (its last token left out)."""
        seq = self.of_group[group.id]
        lo, hi = group.prefilled, min(group.prefilled + n, len(seq.prompt) - 1)
        if hi > lo:
            seq.prompt_logits.append(self.model.prefill(seq.row, torch.tensor(seq.prompt[lo:hi])))
        group.prefilled += n

    def _prefilled(self, group: Group) -> None:
        seq = self.of_group.pop(group.id)
        tokens = torch.tensor(seq.prompt[:-1])
        logits = torch.cat(seq.prompt_logits)
        seq.prompt_logits = []
        seq.drafter.start(seq.prompt, self._capacity(seq.request))
        seq.drafter.update(tokens, logits)
        seq.drafter.learn(tokens, logits)
        now = self.now()
        seq.request.prefill_done_s = now
        self.log.add(now, PREFILL_DONE, 0, group.id, tokens=group.prompt_len)
        self.ready.append(seq)

    def _prefill_whole(self) -> None:
        groups, self.prefilling = self.prefilling, []
        for group in groups:
            self._feed(group, group.prompt_len)
        for group in groups:
            self._prefilled(group)

    def _decode(self) -> None:
        running, limits = self.running, self.limits
        start = self.now()
        drafted = []
        if running:
            for seq in running:
                seq.drafter.begin(seq.context)
            drafted = self.planner.trees(running, self.steps)
            limit = limits.max_tree
            if sum(d.tree.size for d in drafted) > limits.token_budget:
                limit = min(limit, limits.token_budget // len(running))
            drafted = [cut(d, limit) for d in drafted]
        tree_tokens = sum(d.tree.size for d in drafted)
        chunks = self.scheduler.chunks(self.prefilling, tree_tokens) if limits.chunk else []
        self.log.add(start, STEP_START, 0, batch=len(running) + len(chunks),
                     tokens=tree_tokens + sum(n for _, n in chunks))
        self.steps += 1
        tokens = [torch.as_tensor(d.tokens) for d in drafted]
        logits = []
        if running:
            logits = self.model.verify([s.row for s in running], tokens,
                                       [d.tree for d in drafted])
        for group, n in chunks:
            self._feed(group, n)
        total = self._commit(drafted, tokens, logits)
        for group, _ in chunks:
            if group.prefilled >= group.prompt_len:
                self.prefilling.remove(group)
                self._prefilled(group)
        end = self.now()
        self.log.add(end, STEP_END, 0, batch=len(running), tokens=total)
        self.planner.stepped(end - start)

    def _commit(self, drafted: list[DraftedTree], tokens: list[torch.Tensor],
                logits: list[torch.Tensor]) -> int:
        """Each row's greedy verdict committed; the finished requests leave. Tokens made."""
        now, total, finished = self.now(), 0, []
        for i, (seq, d, t, x) in enumerate(zip(self.running, drafted, tokens, logits,
                                               strict=True)):
            verdict = greedy(d.tree, d.tokens.tolist(), x)
            self.model.commit(seq.row, verdict.path)
            seq.drafter.update(t, x)
            seq.drafter.learn(t[verdict.path], x[verdict.path])
            accepted = t[verdict.path[1:]].tolist()
            seq.drafter.accept(accepted)
            self.planner.observe(i, seq, d, verdict)
            r = seq.request
            new = [*accepted, verdict.bonus][: r.output_len - r.generated]
            if not r.generated:
                r.first_token_s = now
            seq.output += new
            seq.token_times += [now] * len(new)
            r.generated += len(new)
            r.steps += 1
            r.accepted += len(new) - 1
            total += len(new)
            if r.generated == r.output_len:
                finished.append(seq)
        for seq in finished:
            self.running.remove(seq)
            seq.drafter.finish(seq.output)
            self.model.release(seq.row)
            self.free.append(seq.row)
            r = seq.request
            r.finish_s = now
            r.group.finished += 1
            self.log.add(now, FINISH, 0, r.group.id, r.id)
            self.done.append(seq)
        return total
