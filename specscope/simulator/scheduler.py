"""Scheduling decisions: which replica takes an arrival, which groups a replica admits, how a
step's trees and prompt chunks fit its limits.

- Router: `round-robin` (arrival g goes to replica g mod K) or `least-outstanding` (the replica
  with the fewest groups queued or unfinished; the lowest index on ties).
- Admission (continuous batching): groups leave the queue in arrival order while a batch slot is
  free (sequences running, waiting to run and groups prefilling stay under `max_batch`; a step
  holds at most `max_batch` sequences and prompts being prefilled together), their
  peak KV fits (`KVSpace`), and, without chunked prefill, the prompts admitted together fit the
  step's token budget. A group that does not fit blocks those behind it (first come, first
  served).
- A step's trees: a tree larger than `max_tree` (the per-request size the KV reservation covers)
  or than its share of the token budget (budget // batch, when the batch's trees exceed the
  budget) is cut to its first nodes in breadth-first order (an ancestor-closed prefix); it then
  drafts no level deeper than it keeps.
- Chunked prefill: after the decoding requests' tree tokens, the budget left goes to prompt
  chunks of at most `chunk` tokens, one per prefilling group, in admission order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from specscope.errors import InputError
from specscope.simulator.entities import Group, KVSpace
from specscope.simulator.policies.base import Speculation
from specscope.tree import Tree

ROUTERS = ("round-robin", "least-outstanding")


@dataclass(frozen=True)
class Limits:
    """Continuous-batching limits of a replica: sequences per step, tokens per step (tree
    tokens and prompt tokens together), prompt chunk size (None: whole prompts on admission)
    and the largest tree a request may verify."""

    max_batch: int
    token_budget: int
    chunk: int | None
    max_tree: int

    def check(self) -> None:
        """Raise `InputError` naming the first impossible limit."""
        if self.max_batch < 1:
            raise InputError(f"--max-batch must be ≥ 1, got {self.max_batch}")
        if self.token_budget < self.max_batch:
            raise InputError(f"--token-budget {self.token_budget} is below --max-batch "
                             f"{self.max_batch} (every running request needs a token per step)")
        if self.chunk is not None and not self.chunk >= 1:
            raise InputError(f"--chunked-prefill must be ≥ 1 token, got {self.chunk}")


class Router:
    """Picks the replica of each arrival (module docstring)."""

    def __init__(self, kind: str, replicas: int) -> None:
        if kind not in ROUTERS:
            raise InputError(f"--router must be one of {', '.join(ROUTERS)}, got {kind!r}")
        if replicas < 1:
            raise InputError(f"--replicas must be ≥ 1, got {replicas}")
        self.kind, self.replicas, self._next = kind, replicas, 0

    def pick(self, outstanding: Sequence[int]) -> int:
        """The replica for the next arrival, given each replica's outstanding groups."""
        if self.kind == "round-robin":
            self._next = (self._next + 1) % self.replicas
            return (self._next - 1) % self.replicas
        return min(range(self.replicas), key=outstanding.__getitem__)


class Scheduler:
    """One replica's admission and step-fitting decisions under its `Limits`."""

    def __init__(self, limits: Limits, kv: KVSpace) -> None:
        self.limits, self.kv = limits, kv
        self._cuts: dict[tuple[int, int, int], tuple[Tree, Speculation]] = {}

    def admit(self, queue: deque[Group], occupied: int) -> list[Group]:
        """Groups taken from the head of `queue` now, `occupied` batch slots being taken."""
        limits, out, prompts = self.limits, [], 0
        while queue and occupied < limits.max_batch:
            group = queue[0]
            peak = self.kv.peak(group, limits.max_tree)
            if not self.kv.fits(peak):
                break
            if limits.chunk is None and prompts + group.prompt_len > limits.token_budget:
                break
            queue.popleft()
            self.kv.admit(group, peak)
            prompts += group.prompt_len
            occupied += 1
            out.append(group)
        return out

    def fit(self, speculations: list[Speculation]) -> list[Speculation]:
        """The step's speculations cut to `max_tree` and to the token budget (module
        docstring)."""
        limit = self.limits.max_tree
        if sum(s.tree.size for s in speculations) > self.limits.token_budget:
            limit = min(limit, self.limits.token_budget // len(speculations))
        if all(s.tree.size <= limit for s in speculations):
            return speculations
        return [s if s.tree.size <= limit else self._cut(s, limit) for s in speculations]

    def fit_all(self, spec: Speculation, count: int) -> Speculation:
        """`fit` of a step in which all `count` requests verify `spec`: what each verifies."""
        size, limit = spec.tree.size, self.limits.max_tree
        if size * count > self.limits.token_budget:
            limit = min(limit, self.limits.token_budget // count)
        return spec if size <= limit else self._cut(spec, limit)

    def _cut(self, spec: Speculation, size: int) -> Speculation:
        key = (id(spec.tree), spec.draft_levels, size)
        hit = self._cuts.get(key)
        if hit is not None and hit[0] is spec.tree:
            return hit[1]
        if len(self._cuts) > 4096:
            self._cuts.clear()
        tree = spec.tree
        kept = Tree(tree.parents[:size], tree.ranks[:size], tree.sources[:size])
        cut = Speculation(kept, min(spec.draft_levels, kept.depth))
        self._cuts[key] = (tree, cut)
        return cut

    def chunks(self, prefilling: Sequence[Group], tree_tokens: int) -> list[tuple[Group, int]]:
        """Prompt chunks (group, tokens) that share a step whose trees hold `tree_tokens`."""
        left = self.limits.token_budget - tree_tokens
        out = []
        for group in prefilling:
            size = min(self.limits.chunk or 0, group.prompt_len - group.prefilled, left)
            if size <= 0:
                break
            out.append((group, size))
            left -= size
        return out
