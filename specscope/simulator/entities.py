"""The simulator's entities: requests (sequences), request groups and a replica's KV memory.

A `Request` is one generated sequence. A `Group` is what arrives: a chat request is a group of
one sequence; a forking request (best-of-N, tree search) is a prompt whose sequences fork from
it and from each other, sharing the KV of their common prefix. Times are seconds of simulated
time (NaN until they happen).

KV memory (`KVSpace`): a replica's capacity is its devices' memory (the hardware profile's
memory × tp) minus the target's weights and, with a colocated draft model, the draft's. A
token costs `kv_bytes_per_token` of the target (and of a colocated draft model); a sequence
holds a fixed state besides (`ssm_state_bytes`: the Mamba-2 state of state-space and hybrid
targets, which replaces a growing KV in their SSM layers). Both come from
`CostModel.memory_bytes`. A group's prompt is held once, whatever forks from it; each sequence
adds its own tokens and state. Admission is conservative (no preemption): a group is admitted
only when its peak fits next to the peaks already reserved (prompt, every sequence's output and
the largest tree it may verify in flight), so the memory in use never exceeds the capacity; a
group that does not fit waits in the queue. Memory is released when the whole group finishes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specscope.hw_profiles import CostModel

NAN = math.nan


@dataclass(slots=True, eq=False)
class Request:
    """One sequence: what it must generate, where it replays from, and when things happened.

    `prompt_len` is its context when it starts decoding (a forked sequence's is its parent's
    final context, all shared); `trace_row` the trace request it replays (None: sampled);
    `multiplier` its drift multiplier; `accepted` and `steps` sum its accepted drafts (those
    it kept) and decoding steps; `start_s` is when it could start (its group's arrival, or its
    parent's finish); `overlap_held` whether its last step accepted as deep as its tree went
    (kept under separate draft placement, where it means the drafting overlapped with that step
    stands); `first_step` its replica's decoding steps when it joined the running batch (the
    simulator's `RunningBatch` derives `steps` and `accepted` from it when it finishes).
    """

    id: int
    group: Group
    prompt_len: int
    output_len: int
    level: int
    parent: Request | None
    trace_row: int | None
    multiplier: float
    generated: int = 0
    steps: int = 0
    accepted: int = 0
    start_s: float = NAN
    admitted_s: float = NAN
    prefill_done_s: float = NAN
    first_token_s: float = NAN
    finish_s: float = NAN
    overlap_held: bool = False
    first_step: int = 0
    children: list[Request] = field(default_factory=list)

    @property
    def context_len(self) -> int:
        """Tokens in its cache: its prompt (or shared prefix) and what it generated."""
        return self.prompt_len + self.generated

    @property
    def remaining(self) -> int:
        """Tokens it still has to generate."""
        return self.output_len - self.generated


@dataclass(slots=True, eq=False)
class Group:
    """An arrival: a prompt and the sequences generated from it (`first`: those that start
    once the prompt is prefilled; the others start when their parent finishes)."""

    id: int
    arrival_s: float
    prompt_len: int
    first: list[Request] = field(default_factory=list)
    sequences: int = 0
    output_tokens: int = 0
    """Tokens all its sequences generate together."""
    prefilled: int = 0
    finished: int = 0
    replica: int = -1
    reserved: float = 0.0
    used: float = 0.0

    @property
    def done(self) -> bool:
        """Whether every sequence has finished."""
        return self.finished == self.sequences


@dataclass(frozen=True)
class KVCost:
    """Bytes of KV memory: per cached token, and per sequence (fixed state)."""

    per_token: float
    per_sequence: float

    @classmethod
    def of(cls, *models: CostModel) -> KVCost:
        """The memory one token and one sequence cost in every model of `models` (target,
        colocated draft), from `CostModel.memory_bytes`."""
        token = sequence = 0.0
        for m in models:
            weights = m.memory_bytes(0, 0)
            sequence += m.memory_bytes(1, 0) - weights
            token += m.memory_bytes(1, 1) - m.memory_bytes(1, 0)
        return cls(token, sequence)


@dataclass(slots=True)
class KVSpace:
    """One replica's KV memory: reservations of admitted groups and the bytes in use."""

    capacity: float
    cost: KVCost
    reserved: float = 0.0
    used: float = 0.0

    def peak(self, group: Group, max_tree: int) -> float:
        """The most memory `group` can hold: its prompt once, and per sequence its state, its
        output and a tree of `max_tree` tokens in flight."""
        c = self.cost
        tokens = group.prompt_len + group.output_tokens + group.sequences * max_tree
        return tokens * c.per_token + group.sequences * c.per_sequence

    @property
    def exact(self) -> bool:
        """Whether every byte count is a whole number below 2⁵³ (whole bytes per token and per
        sequence, a capacity below 2⁵³), so that sums of them are exact in any order."""
        c = self.cost
        return (float(c.per_token).is_integer() and float(c.per_sequence).is_integer()
                and self.capacity < 2**53)

    def fits(self, peak: float) -> bool:
        """Whether a group of this peak can be admitted now."""
        return self.reserved + peak <= self.capacity

    def admit(self, group: Group, peak: float) -> None:
        """Reserve `peak` for `group` and hold its prompt."""
        group.reserved = peak
        group.used = group.prompt_len * self.cost.per_token
        self.reserved += peak
        self.used += group.used

    def start(self, request: Request) -> None:
        """A sequence starts: it holds its state."""
        request.group.used += self.cost.per_sequence
        self.used += self.cost.per_sequence

    def grow(self, request: Request, tokens: int) -> None:
        """`request` committed `tokens` tokens."""
        b = tokens * self.cost.per_token
        request.group.used += b
        self.used += b

    def grow_all(self, tokens: int) -> None:
        """Sequences committed `tokens` tokens in all, each to join its group's bytes when it
        finishes (`settle`): with `exact` costs, the bytes of `grow` for each in one sum."""
        self.used += tokens * self.cost.per_token

    def settle(self, request: Request) -> None:
        """A finished sequence's tokens, committed by `grow_all`, join its group's bytes."""
        request.group.used += request.generated * self.cost.per_token

    def release(self, group: Group) -> None:
        """A finished group frees everything it held."""
        self.reserved -= group.reserved
        self.used -= group.used
        group.used = group.reserved = 0.0
