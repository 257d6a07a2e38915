"""A replica's running batch: the sequences every decoding step advances, in the order they
joined, with what a step needs of them in aggregate (their contexts' sum) kept as they change.

Committing a step writes per sequence only what the step's outcome changes, its `generated`
tokens; the rest is set once, when it can no longer change. Every running sequence takes part
in every decoding step of its replica and keeps all but one of each step's tokens, so when it
finishes its `steps` are the replica's steps since it joined (`Request.first_step`) and its
`accepted` drafts are its tokens less its steps; its first token comes with the first step after
it joined. The values are those of counting step by step.

KV memory: with exact byte counts (`KVSpace.exact`) a step adds its tokens' bytes to the
replica's in one sum (`KVSpace.grow_all`) and a sequence adds its own to its group's when it
finishes (`KVSpace.settle`): the same bytes, exactly, as adding each sequence's tokens at every
step (`KVSpace.grow`), which the batch does otherwise.

Plain decoding (`commit_plain`: every sequence verifies its last token alone) advances every
sequence one token a step, so a sequence finishes `remaining` steps after it joins: with exact
byte counts the batch keeps its sequences in a heap by that step and touches only those that
join or finish (`generated` is then set when a sequence finishes; `plain` batches must be
committed with `commit_plain` alone).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from specscope.simulator.entities import KVSpace, Request


class RunningBatch:
    """The running sequences of one replica and their contexts' sum (module docstring);
    `plain`: every step is committed by `commit_plain`."""

    def __init__(self, kv: KVSpace, plain: bool = False) -> None:
        self.kv = kv
        self.exact = kv.exact
        self.lazy = plain and self.exact
        self.requests: list[Request] = []
        self.context_sum = 0
        self._fresh: list[Request] = []
        self._finishing: list[tuple[int, int, Request]] = []
        self._joined = 0

    def __len__(self) -> int:
        return len(self.requests)

    def join(self, r: Request, step: int) -> None:
        """`r` (nothing generated yet) joins after the replica's `step` decoding steps."""
        self.requests.append(r)
        self.context_sum += r.prompt_len
        self._fresh.append(r)
        r.first_step = step
        if self.lazy:
            heapq.heappush(self._finishing, (step + r.output_len, self._joined, r))
        self._joined += 1

    def commit(self, now: float, step: int, accepted: Sequence[int]) -> tuple[int, list[Request]]:
        """Decoding step `step` ended at `now`: each sequence appends its `accepted` drafts and
        the bonus token, never past its output. The tokens appended in all, and the sequences
        that finished, in batch order, taken out of the batch."""
        self._first_tokens(now)
        total, done = 0, []
        if self.exact:
            for r, a in zip(self.requests, accepted, strict=True):
                generated = r.generated + a + 1
                if generated >= r.output_len:
                    total += r.output_len - r.generated
                    r.generated = r.output_len
                    done.append(r)
                else:
                    total += a + 1
                    r.generated = generated
            self.kv.grow_all(total)
        else:
            grow = self.kv.grow
            for r, a in zip(self.requests, accepted, strict=True):
                tokens = min(a + 1, r.output_len - r.generated)
                r.generated += tokens
                total += tokens
                grow(r, tokens)
                if r.generated == r.output_len:
                    done.append(r)
        self.context_sum += total
        self._finish(done, step)
        return total, done

    def commit_plain(self, now: float, step: int) -> tuple[int, list[Request]]:
        """`commit` of a step in which every sequence accepted no draft."""
        if not self.lazy:
            return self.commit(now, step, [0] * len(self.requests))
        self._first_tokens(now)
        total = len(self.requests)
        self.kv.grow_all(total)
        self.context_sum += total
        finishing, done = self._finishing, []
        while finishing and finishing[0][0] == step:
            r = heapq.heappop(finishing)[2]
            r.generated = r.output_len
            done.append(r)
        self._finish(done, step)
        return total, done

    def _first_tokens(self, now: float) -> None:
        for r in self._fresh:
            r.first_token_s = now
        self._fresh.clear()

    def _finish(self, done: list[Request], step: int) -> None:
        for r in done:
            self.requests.remove(r)
            self.context_sum -= r.prompt_len + r.generated
            r.steps = step - r.first_step
            r.accepted = r.generated - r.steps
            if self.exact:
                self.kv.settle(r)
