"""`optimize-tree --schedule`: the best speculation choice for every running batch size, within
the family an engine can run, merged into a `Schedule`, with what it gains over the best
constant choice and over no speculation.

For each batch size b in 1..max the step is priced at b (`Pricing` with `batch` b: the draft
levels and the verification of b sequences' trees, the loop's host terms), and the family's best
choice taken by predicted speedup over plain decoding at b:

- `chain` (vLLM ≥ 0.21 and TensorRT-LLM take a draft length per batch size): K = 1..budget − 1;
- `topk` (SGLang: steps, top-k, draft tokens; it takes no schedule, so its export is the best
  constant): `families.best_topk`;
- `any` (no engine): the DP's best tree of any size up to the budget (`compare.best_any_size`'s
  rule: Sequoia's value table, sized for the step times at b).

With context buckets (`contexts`: representative context lengths C₁ < C₂ < …) the search runs
at each C_i, and bucket i holds the contexts from the geometric midpoint of C_{i−1} and C_i up
to the next (the first from 0, the last without end).

Where no choice beats plain decoding at b, the schedule turns speculation off there. The best
constant is the one speculating choice with the highest geometric mean of the speedup over batch
sizes 1..max, each batch size weighted alike: the family's every chain, else the per-batch
winners (plain decoding is reported beside both, not among the constants). Throughput at b is
b sequences' expected tokens per step over the step time; TPOT is the step time over one
sequence's expected tokens (plain decoding: its step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from specscope.errors import InputError
from specscope.interop.families import best_chain, best_topk, depth_limit
from specscope.optimizers.compare import Setup, best_any_size
from specscope.optimizers.scoring import Score, score_tree
from specscope.schedule import OPEN_CONTEXT, Range, Schedule, merged
from specscope.tree import Tree

FAMILIES = ("chain", "topk", "any")
ENGINE_FAMILY = {"vllm": "chain", "tensorrt-llm": "chain", "transformers": "chain",
                 "sglang": "topk"}
"""The family each export engine's schedule (or constant) is chosen in (module docstring)."""
MAX_TOPK = 8
"""Largest top-k searched for SGLang (its exporter's)."""


@dataclass(frozen=True)
class BatchRow:
    """One batch size: the schedule's choice, the best constant's, and plain decoding, each as
    throughput over the batch (tokens/s) and TPOT (s per token of one sequence)."""

    batch: int
    context: int
    tree: Tree | None
    schedule_tps: float
    schedule_tpot: float
    constant_tps: float
    constant_tpot: float
    plain_tps: float
    plain_tpot: float

    def to_dict(self) -> dict[str, Any]:
        """JSON record, TPOT in ms."""
        return {"batch": self.batch, "context": self.context,
                "drafts": 0 if self.tree is None else self.tree.size - 1,
                "depth": 0 if self.tree is None else self.tree.depth,
                "schedule_tokens_per_s": self.schedule_tps,
                "schedule_tpot_ms": self.schedule_tpot * 1e3,
                "constant_tokens_per_s": self.constant_tps,
                "constant_tpot_ms": self.constant_tpot * 1e3,
                "plain_tokens_per_s": self.plain_tps, "plain_tpot_ms": self.plain_tpot * 1e3}


@dataclass(frozen=True)
class ScheduleResult:
    """The schedule found, the best constant (None: no speculation), the family and one row
    per batch size."""

    family: str
    schedule: Schedule
    constant: Tree | None
    rows: tuple[BatchRow, ...]

    def to_dict(self) -> dict[str, Any]:
        """The JSON document: `Schedule.to_dict`'s keys, the constant and the rows."""
        return {**self.schedule.to_dict(), "family": self.family,
                "constant": None if self.constant is None else self.constant.to_dict(),
                "batches": [r.to_dict() for r in self.rows]}


def family_for(engine: str | None, chains_only: bool) -> str:
    """The family a schedule is chosen in for export `engine` (None: any tree; a priced engine
    that verifies chains only: chains)."""
    family = ENGINE_FAMILY.get(engine or "", "any")
    return "chain" if chains_only and family == "any" else family


def search_schedule(setup: Setup, budget: int, max_batch: int, family: str,
                    contexts: Sequence[int] | None = None) -> ScheduleResult:
    """The best choice of `family` at every batch size 1..`max_batch` on `setup` (its pricing's
    batch, and with `contexts` its context, replaced), merged into a schedule; the best
    constant beside it (module docstring). A batch whose KV cache does not fit ends the search
    there, as a server's would."""
    if family not in FAMILIES:
        raise InputError(f"schedule family {family!r} is not one of {', '.join(FAMILIES)}")
    if budget < 2:
        raise InputError(f"--budget {budget}: a schedule chooses drafts; give at least 2")
    points = sorted(set(contexts)) if contexts else [setup.pricing.context_len]
    if points[0] < 0:
        raise InputError(f"--schedule-contexts: context lengths are >= 0, got {points[0]}")
    buckets, at, choices = [], [], []
    for i, ranges in enumerate(_context_ranges(points) if contexts else [None]):
        here = _setups(_at_context(setup, points[i]), max_batch, budget)
        picked = [(s.pricing.batch, _choose(s, budget, family)) for s in here]
        buckets += merged(picked, ranges)
        at += here
        choices += [t for _, t in picked]
    candidates = _constants(setup, budget, family, choices)
    constant = max(candidates, key=lambda t: _mean_log_speedup(at, t))
    rows = tuple(_row(s, tree, constant) for s, tree in zip(at, choices, strict=True))
    return ScheduleResult(family, Schedule(tuple(buckets)), constant, rows)


def _choose(setup: Setup, budget: int, family: str) -> Tree | None:
    """The family's best tree at this setup's batch and context, None where it does not beat
    plain decoding."""
    won = _best(setup, budget, family)
    return None if won is None or won.speedup <= 1.0 else won.tree


def _context_ranges(points: list[int]) -> list[Range]:
    """Inclusive context ranges around sorted representative contexts: boundaries at their
    geometric midpoints, the first from 0, the last up to `OPEN_CONTEXT`."""
    cuts = [int(np.sqrt(max(a, 1) * b)) for a, b in pairwise(points)]
    starts, ends = [0, *cuts], [c - 1 for c in cuts] + [OPEN_CONTEXT]
    return list(zip(starts, ends, strict=True))


def _at_context(setup: Setup, context: int) -> Setup:
    """`setup` priced at `context` tokens of cache."""
    if context == setup.pricing.context_len:
        return setup
    return dataclasses.replace(setup, pricing=dataclasses.replace(setup.pricing,
                                                                   context_len=context))


def _setups(setup: Setup, max_batch: int, budget: int) -> list[Setup]:
    """`setup` at each batch size 1..`max_batch` whose cache fits (at least batch 1); the
    trace is left out (a schedule is chosen on the acceptance model, not replayed)."""
    out = []
    for b in range(1, max_batch + 1):
        pricing = dataclasses.replace(setup.pricing, batch=b)
        try:
            pricing.check_fits(pricing.context_len + budget)
        except InputError:
            if b == 1:
                raise
            break
        out.append(dataclasses.replace(setup, pricing=pricing, trace=None))
    return out


def _best(setup: Setup, budget: int, family: str) -> Score | None:
    """The family's best scored choice at this setup's batch (None: no tree fits)."""
    if family == "chain":
        return best_chain(setup, budget) if depth_limit(budget, setup.max_depth) else None
    if family == "topk":
        return best_topk(setup, budget, min(MAX_TOPK, np.asarray(setup.p).shape[-1]))[1]
    return best_any_size(setup, budget)


def _constants(setup: Setup, budget: int, family: str, chosen: list[Tree | None]
               ) -> list[Tree | None]:
    """The constant speculation choices compared: the family's every chain (chain), else the
    per-batch winners, in first-seen order (equal trees once); no speculation only where no
    batch size speculates."""
    out: list[Tree | None] = []
    if family == "chain":
        out += [Tree.chain(k, setup.source)
                for k in range(1, depth_limit(budget, setup.max_depth) + 1)]
    out += [tree for tree in dict.fromkeys(chosen) if tree is not None and tree not in out]
    return out or [None]


def _speedup(setup: Setup, tree: Tree | None) -> float:
    """Predicted speedup of `tree` (1: no speculation) at this setup's batch."""
    if tree is None:
        return 1.0
    return score_tree("schedule", tree, setup.value(tree), setup.pricing).speedup


def _mean_log_speedup(at: list[Setup], tree: Tree | None) -> float:
    return float(np.mean([np.log(_speedup(s, tree)) for s in at]))


def _row(setup: Setup, tree: Tree | None, constant: Tree | None) -> BatchRow:
    """The batch's row: throughput and TPOT of the schedule's tree, the constant, plain."""
    b, plain = setup.pricing.batch, setup.pricing.autoregressive_s

    def rates(t: Tree | None) -> tuple[float, float]:
        if t is None:
            return b / plain, plain
        s = score_tree("schedule", t, setup.value(t), setup.pricing)
        return b * s.tokens_per_s, s.step_time_s / s.expected_tokens

    return BatchRow(b, setup.pricing.context_len, tree, *rates(tree), *rates(constant),
                    b / plain, plain)
