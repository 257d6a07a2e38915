"""Speculation schedules: the draft tree (or none) for each running batch size and context length.

Engines take a schedule, not a constant: vLLM's `num_speculative_tokens_per_batch_size` (ranges
of running batch size → K, K = 0 turning speculation off) and TensorRT-LLM's
`draft_len_schedule` (batch size → draft length). A `Schedule` is specscope's engine-neutral
form: buckets of inclusive batch ranges (and optionally inclusive context ranges), each holding
the tree a step verifies there, or None for plain decoding. `optimize-tree --schedule` finds
one, the simulator's `schedule` policy runs one, and `specscope.interop` writes it as each
engine's own keys.

A schedule file is JSON: `{"schedule": [{"batch": [lo, hi], "context": [lo, hi] | null,
"tree": <Tree.to_dict> | null}, ...]}` (`Schedule.to_dict`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from pathlib import Path
from typing import Any

from specscope.errors import InputError
from specscope.files import read_json
from specscope.tree import Tree

Range = tuple[int, int]
"""An inclusive range lo..hi of batch sizes or context lengths (lo ≤ hi)."""

OPEN_CONTEXT = 2**31 - 1
"""The upper end of an open-ended context range (the last context bucket)."""


@dataclass(frozen=True)
class Bucket:
    """The choice for running batch sizes `batch` (inclusive) and, when given, contexts
    `context` (inclusive; None: any context): `tree` verified each step, None for no
    speculation."""

    batch: Range
    context: Range | None
    tree: Tree | None

    def holds(self, batch: int, context: int) -> bool:
        """Whether a step of `batch` sequences at `context` tokens falls in this bucket."""
        lo, hi = self.batch
        if not lo <= batch <= hi:
            return False
        return self.context is None or self.context[0] <= context <= self.context[1]

    @property
    def drafts(self) -> int:
        """Draft tokens verified per sequence (the tree's size less its root; 0: none)."""
        return 0 if self.tree is None else self.tree.size - 1


@dataclass(frozen=True)
class Schedule:
    """Buckets covering batch sizes 1..`max_batch` (and, where they state contexts, every
    context), without overlap; checked on construction (module docstring)."""

    buckets: tuple[Bucket, ...]

    def __post_init__(self) -> None:
        if not self.buckets:
            raise InputError("a schedule needs at least one bucket")
        for b in self.buckets:
            for what, rng in (("batch", b.batch), ("context", b.context)):
                if rng is None:
                    continue
                low = 1 if what == "batch" else 0
                if not (len(rng) == 2 and low <= rng[0] <= rng[1]):
                    raise InputError(f"schedule: {what} range {list(rng)} must be lo..hi with "
                                     f"{low} <= lo <= hi")
        for context, group in self._groups().items():
            batches = sorted(b.batch for b in group)
            if batches[0][0] != 1 or any(nxt[0] != cur[1] + 1
                                         for cur, nxt in pairwise(batches)):
                where = "" if context is None else f" at contexts {list(context)}"
                raise InputError(f"schedule: batch ranges{where} must cover 1..max without gaps "
                                 f"or overlap, got {[list(r) for r in batches]}")

    def _groups(self) -> dict[Range | None, list[Bucket]]:
        """The buckets by context range (None: any context)."""
        groups: dict[Range | None, list[Bucket]] = {}
        for b in self.buckets:
            groups.setdefault(b.context, []).append(b)
        return groups

    @cached_property
    def _lookup(self) -> tuple[tuple[Range | None, list[int], list[int]], ...]:
        """Per context range (in first-seen order): its buckets' first batch sizes, ascending,
        and their indices in `buckets`; built once, as `choice` runs per request per step."""
        out = []
        for context, group in self._groups().items():
            ordered = sorted(group, key=lambda b: b.batch)
            out.append((context, [b.batch[0] for b in ordered],
                        [self.buckets.index(b) for b in ordered]))
        return tuple(out)

    @property
    def max_batch(self) -> int:
        """The largest batch size the schedule covers."""
        return max(b.batch[1] for b in self.buckets)

    def index(self, batch: int, context: int = 0) -> int:
        """The index in `buckets` of the bucket for a step of `batch` sequences at `context`
        tokens; a batch above its context's last range takes that range's bucket, as vLLM's
        last range extends to its scheduler's limit."""
        for rng, starts, indices in self._lookup:
            if rng is None or rng[0] <= context <= rng[1]:
                return indices[bisect_right(starts, max(batch, 1)) - 1]
        raise InputError(f"schedule: no bucket holds batch {max(batch, 1)} at context {context}")

    def choice(self, batch: int, context: int = 0) -> Tree | None:
        """The tree for a step of `batch` sequences at `context` tokens (None: no speculation;
        `index`)."""
        return self.buckets[self.index(batch, context)].tree

    @classmethod
    def constant(cls, tree: Tree | None, max_batch: int) -> Schedule:
        """One choice for every batch size 1..`max_batch`."""
        return cls((Bucket((1, max_batch), None, tree),))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (module docstring)."""
        return {"schedule": [
            {"batch": list(b.batch), "context": None if b.context is None else list(b.context),
             "tree": None if b.tree is None else b.tree.to_dict()} for b in self.buckets]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "schedule") -> Schedule:
        """A schedule from its JSON form; an `InputError` naming `where` for a malformed one."""
        rows = data.get("schedule") if isinstance(data, Mapping) else None
        if not isinstance(rows, list) or not rows:
            raise InputError(f"{where}: a schedule is {{\"schedule\": [buckets]}}")
        buckets = []
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping) or "batch" not in row or "tree" not in row:
                raise InputError(f"{where}: bucket {i} needs batch and tree")
            buckets.append(Bucket(_range(row["batch"], f"{where}: bucket {i} batch"),
                                  None if row.get("context") is None
                                  else _range(row["context"], f"{where}: bucket {i} context"),
                                  None if row["tree"] is None else Tree.from_dict(row["tree"])))
        try:
            return cls(tuple(buckets))
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class ScheduleFile:
    """A schedule read from a JSON file, with what `optimize-tree --schedule` recorded about
    it (None for a bare schedule): the target and drafter source it was chosen for."""

    schedule: Schedule
    target: str | None = None
    source: str | None = None
    constant: Tree | None = None
    """The best constant choice recorded beside the schedule (None: none recorded)."""


def read_schedule_file(path: str | Path) -> ScheduleFile:
    """A schedule from a JSON file: a bare one (`Schedule.to_dict`) or `optimize-tree
    --schedule -o` output; every mistake is an `InputError` naming the file."""
    data = read_json(Path(path), "schedule file")
    if not isinstance(data, Mapping):
        raise InputError(f"{path}: a schedule file is a JSON object with a schedule")
    names = {k: data.get(k) for k in ("target", "source")}
    for key, value in names.items():
        if value is not None and not isinstance(value, str):
            raise InputError(f"{path}: {key} must be a string, got {value!r}")
    constant = data.get("constant")
    return ScheduleFile(Schedule.from_dict(data, str(path)), names["target"], names["source"],
                        None if constant is None else Tree.from_dict(constant))


def _range(value: object, where: str) -> Range:
    """An inclusive [lo, hi] of integers."""
    if not (isinstance(value, Sequence) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise InputError(f"{where}: {value!r} is not [lo, hi] of integers")
    return int(value[0]), int(value[1])


def merged(choices: Sequence[tuple[int, Tree | None]], context: Range | None = None
           ) -> list[Bucket]:
    """Buckets from per-batch choices (batch, tree), ascending and contiguous: consecutive batch
    sizes with the same tree (equal parents, ranks and sources) merged into one range."""
    out: list[Bucket] = []
    for batch, tree in choices:
        if out and out[-1].tree == tree and out[-1].batch[1] == batch - 1:
            out[-1] = Bucket((out[-1].batch[0], batch), context, tree)
        else:
            out.append(Bucket((batch, batch), context, tree))
    return out
