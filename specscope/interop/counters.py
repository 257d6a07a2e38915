"""Acceptance an engine measured, for the optimizers (`specscope trace import`).

An engine that speculates with a chain of L drafts counts, over N drafts (speculation steps),
how many had their draft at position d accepted, a_d (d = 1..L; accepted at d implies accepted
at every position above, so a_1 ≥ a_2 ≥ … ≥ a_L). Position d is verified only when the d − 1
drafts above it were accepted, so it was tried a_{d−1} times (a_0 = N) and

    P(top draft accepted at depth d | reached) = a_d / a_{d−1},

each a binomial proportion with a Wilson interval (`by_depth`). specscope's positional vector
p[k] (`--acceptance P1,P2,...`, `trace/acceptance.py`) holds, for a node reached, the chance its
rank-k child is the one accepted, the same at every depth; its rank-0 entry pooled over depths
is the maximum-likelihood p[0] = Σ a_d / Σ a_{d−1}, the estimate a trace gives (the fraction of
verified positions where the top candidate was the target's token).

What the counters cannot give: the lower ranks. A chain engine only ever verifies the top draft
at each position, so p[1], p[2], … are not observed. Without `--trace` they are left out (the
vector is [p[0]], and a tree optimised on it is a chain); with `--trace T --source S` the
trace's ratios p_T[k] / p_T[0] are kept and scaled to the engine's p[0] (renormalised where the
row would pass 1). Either way the document says which (`assumption`). Drafts shorter than L
(an n-gram proposer that finds fewer tokens) make a_{d−1} an upper bound of the tries at depth
d; when the engine counts the tokens it drafted and they fall short of N·L, the document says
so (`notes`): the depth rates are then lower bounds.

The counts come from an engine's files (`trace_import.import_file`): vLLM's metrics text
(`vllm_metrics.py`), SGLang's decode log (`sglang_log.py`, which solves the acceptance its
accept length implies) or a counts JSON (`parse_counts_json` here: `{"drafts": N,
"accepted_per_position": [a_1, …, a_L]}`, optionally `draft_tokens`, `accepted_tokens`).
Every count is a whole number from 0 to `MAX_COUNT` (10^15), over at most `MAX_POSITIONS`
positions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from specscope.errors import InputError
from specscope.files import read_json
from specscope.trace.acceptance import AcceptanceModel, wilson
from specscope.tree import DEFAULT_SOURCE, acceptance_table

FORMAT = "specscope-acceptance"
"""The `format` of an imported acceptance document (what `--acceptance FILE.json` reads)."""
CONFIDENCE = 0.95
MAX_COUNT = 10**15
"""The largest count taken (thirty years of a million drafts a second is under 10^15): counts
are whole numbers in 0..MAX_COUNT, so sums and ratios stay exact in float64."""
MAX_POSITIONS = 1024
"""Draft positions taken at most (no engine drafts chains this long)."""


@dataclass(frozen=True)
class Names:
    """What a format calls each counter, for messages (`position` takes the 1-based d)."""

    drafts: str = "drafts"
    position: str = "accepted_per_position[{index}]"
    draft_tokens: str = "draft_tokens"
    accepted_tokens: str = "accepted_tokens"

    def at(self, d: int) -> str:
        return self.position.format(index=d - 1)


@dataclass(frozen=True)
class ChainCounts:
    """An engine's chain counters: `drafts` N, `accepted[d-1]` = a_d, and when counted the
    tokens drafted and accepted in all; `where` names the file and `names` the counters in
    messages."""

    drafts: int
    accepted: tuple[int, ...]
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    where: str = "counts"
    names: Names = Names()

    def check(self) -> None:
        """One `InputError` naming the counter that breaks the counters' own arithmetic."""
        n, where = self.names, self.where
        for name, value in ((n.drafts, self.drafts),
                            *((n.at(d), a) for d, a in enumerate(self.accepted, 1)),
                            (n.draft_tokens, self.draft_tokens),
                            (n.accepted_tokens, self.accepted_tokens)):
            if value is not None and value > MAX_COUNT:
                raise InputError(f"{where}: {name} is {value}, past the largest count taken "
                                 f"({MAX_COUNT:.0e})")
        if self.drafts <= 0:
            raise InputError(f"{where}: {n.drafts} is {self.drafts}: nothing was drafted")
        if not self.accepted:
            raise InputError(f"{where}: no {n.at(1)}: no per-position accepted counts")
        above, above_name = self.drafts, n.drafts
        for d, a in enumerate(self.accepted, 1):
            if a > above:
                raise InputError(f"{where}: {n.at(d)} ({a}) exceeds {above_name} ({above}): "
                                 "a draft accepted at a position was accepted at every one "
                                 "above")
            above, above_name = a, n.at(d)
        total = sum(self.accepted)
        length = len(self.accepted)
        if self.draft_tokens is not None:
            if self.draft_tokens > self.drafts * length:
                raise InputError(f"{where}: {n.draft_tokens} ({self.draft_tokens}) exceeds "
                                 f"{n.drafts} × positions ({self.drafts} × {length})")
            if total > self.draft_tokens:
                raise InputError(f"{where}: the accepted per position ({total} in all) exceed "
                                 f"{n.draft_tokens} ({self.draft_tokens})")
        if self.accepted_tokens is not None and self.accepted_tokens != total:
            raise InputError(f"{where}: {n.accepted_tokens} ({self.accepted_tokens}) differs "
                             f"from the sum of {n.position.format(index='*')} ({total})")


def imported(counts: ChainCounts, origin: str, lower: AcceptanceModel | None = None,
             confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The acceptance document of `counts` (module docstring); `lower`, a trace's acceptance,
    supplies the ratios of the ranks below the top one."""
    counts.check()
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    a = np.array(counts.accepted, dtype=np.float64)
    tried = np.r_[counts.drafts, a[:-1]]
    low_d, high_d = wilson(a, tried, z)
    hits, n = float(a.sum()), float(tried.sum())
    (low0,), (high0,) = wilson(np.array([hits]), np.array([n]), z)
    p0 = hits / n
    notes = []
    if lower is None:
        p, low, high = np.array([p0]), np.array([low0]), np.array([high0])
        assumption = ("ranks below the top draft are not observed by a chain engine's counters "
                      "and are left out: the vector holds p[0] alone, so a tree optimised on it "
                      "is a chain; give --trace to take the lower ranks' ratios from a trace")
    else:
        p = with_lower_ranks(p0, lower)
        scale = p0 / float(np.asarray(lower.p)[0])
        low, high = (with_lower_ranks(bound, lower, np.asarray(b, dtype=np.float64) * scale)
                     for bound, b in ((low0, lower.low), (high0, lower.high)))
        assumption = (f"ranks below the top draft take the trace's ratios p[k]/p[0] of source "
                      f"{lower.source} ({lower.method}), scaled to the engine's p[0] (and "
                      "together to 1 − p[0] where they would pass it)")
    length = len(counts.accepted)
    if counts.draft_tokens is not None and counts.draft_tokens < counts.drafts * length:
        notes.append(f"{counts.draft_tokens} draft tokens in {counts.drafts} drafts of up to "
                     f"{length}: some drafts were shorter, so the depth rates (and p[0]) are "
                     "lower bounds")
    acceptance_table(p, "imported acceptance")
    return {
        "format": FORMAT,
        "from": origin,
        "source": DEFAULT_SOURCE if lower is None else lower.source,
        "acceptance": p.tolist(),
        "low": low.tolist(),
        "high": high.tolist(),
        "confidence": confidence,
        "counts": {
            "drafts": counts.drafts,
            "accepted_per_position": list(counts.accepted),
            "draft_tokens": counts.draft_tokens,
            "accepted_tokens": int(hits),
            "top_rank_tries": int(n),
        },
        "by_depth": [
            {"depth": d, "tries": int(t), "accepted": int(h), "acceptance": h / t if t else 0.0,
             "low": float(lo), "high": float(hi)}
            for d, (t, h, lo, hi) in enumerate(zip(tried, a, low_d, high_d, strict=True), 1)
        ],
        "mean_accepted_length": hits / counts.drafts + 1.0,
        "assumption": assumption,
        "notes": notes,
    }


def with_lower_ranks(p0: float, lower: AcceptanceModel, ranks: np.ndarray | None = None
                     ) -> np.ndarray:
    """[p0, then the lower ranks]: `ranks` (default: `lower`'s ratios p[k]/p[0] times p0),
    scaled together to 1 − p0 where they would pass it (a row of acceptance sums to at most 1).
    """
    vector = np.asarray(lower.p, dtype=np.float64)
    if vector.ndim != 1 or vector[0] <= 0:
        raise InputError(f"--trace: source {lower.source} has no top-rank acceptance to scale")
    rest = vector[1:] * (p0 / vector[0]) if ranks is None else np.asarray(ranks)[1:]
    total = float(rest.sum())
    if total > 1 - p0:
        rest = rest * ((1 - p0) / total)
    return np.r_[p0, rest]


def parse_counts_json(data: object, where: str) -> ChainCounts:
    """`{"drafts": N, "accepted_per_position": [...], "draft_tokens"?, "accepted_tokens"?}`."""
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: expected an object with drafts and accepted_per_position")
    for key in ("drafts", "accepted_per_position"):
        if key not in data:
            raise InputError(f"{where}: missing {key}")
    per_pos = data["accepted_per_position"]
    if not isinstance(per_pos, list) or not per_pos:
        raise InputError(f"{where}: accepted_per_position must be a non-empty list of counts")
    if len(per_pos) > MAX_POSITIONS:
        raise InputError(f"{where}: accepted_per_position holds {len(per_pos)} positions, more "
                         f"than the {MAX_POSITIONS} a draft of any engine has")
    return ChainCounts(
        _count(data["drafts"], f"{where}: drafts"),
        tuple(_count(v, f"{where}: accepted_per_position[{i}]") for i, v in enumerate(per_pos)),
        *(None if data.get(k) is None else _count(data[k], f"{where}: {k}")
          for k in ("draft_tokens", "accepted_tokens")),
        where=where)


def _count(value: object, where: str) -> int:
    """A whole count in 0..`MAX_COUNT`, else an `InputError` naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
            value) or value < 0 or value != int(value) or value > MAX_COUNT:
        raise InputError(f"{where}: expected a whole count from 0 to {MAX_COUNT:.0e}, got "
                         f"{value!r}")
    return int(value)


def read_acceptance(path: Path) -> list[float]:
    """The vector of an acceptance document (`trace import`'s, or any JSON object with an
    `acceptance` list) for `--acceptance FILE.json`."""
    data = read_json(path, "acceptance file")
    if not isinstance(data, Mapping) or "acceptance" not in data:
        raise InputError(f"{path}: expected an object with an acceptance list (trace import's "
                         "output)")
    vector = data["acceptance"]
    if not isinstance(vector, list) or not vector or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in vector):
        raise InputError(f"{path}: acceptance must be a non-empty list of numbers")
    table = acceptance_table(vector, f"{path}: acceptance")
    return table[0].tolist()
