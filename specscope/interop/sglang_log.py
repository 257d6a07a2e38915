"""SGLang's decode log as acceptance, for `trace import --from sglang-log`: each `Decode batch`
line's `#running-req` and `accept len` (the mean tokens per verification), read one line at a
time, and the acceptance whose SGLang tree gives the log's mean accept length (a chain's p[0]
solves Σ_{d≤L} p^d = accept len − 1). A malformed number is refused naming its line.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterable, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from specscope.errors import InputError
from specscope.interop.counters import CONFIDENCE, FORMAT, MAX_COUNT, with_lower_ranks
from specscope.interop.families import TopK, topk_tree
from specscope.trace.acceptance import AcceptanceModel
from specscope.tree import DEFAULT_SOURCE, acceptance_table

SGLANG_RUNNING = re.compile(r"#running-req:[ \t]*([^\s,]*)")
SGLANG_ACCEPT = re.compile(r"accept len:[ \t]*([^\s,]*)")
SGLANG_NUMBER = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,20})?")
SGLANG_INTERVAL = 40
"""Decode iterations between two of SGLang's decode log lines (`decode_log_interval`'s
default): a line's `accept len` averages #running-req × this many request-steps."""


def parse_sglang_log(lines: Iterable[tuple[int, str, bool]], where: str) -> np.ndarray:
    """(running requests, accept len) of every SGLang decode log line (a line with `Decode
    batch` and `accept len`), as an (N, 2) array, read in one pass (the log's lines as
    `text_lines` gives them); a malformed number is an `InputError` naming its line."""
    running, lengths = array("d"), array("d")
    for number, line, _ in lines:
        if "Decode batch" not in line or "accept len" not in line:
            continue
        r, m = SGLANG_RUNNING.search(line), SGLANG_ACCEPT.search(line)
        if r is None:
            raise InputError(f"{where}: line {number}: a decode line with accept len but no "
                             "#running-req")
        if not r.group(1).isdigit() or len(r.group(1)) > 15:
            raise InputError(f"{where}: line {number}: #running-req {r.group(1)[:40]!r} is not "
                             f"a whole number of requests below {MAX_COUNT:.0e}")
        if m is None or not SGLANG_NUMBER.fullmatch(m.group(1)):
            token = "" if m is None else m.group(1)
            raise InputError(f"{where}: line {number}: accept len {token[:40]!r} is not a "
                             "number")
        running.append(float(r.group(1)))
        lengths.append(float(m.group(1)))
    if not lengths:
        raise InputError(f"{where}: no 'Decode batch, #running-req: R, … accept len: X' line "
                         "(SGLang's decode log)")
    return np.column_stack([np.frombuffer(running), np.frombuffer(lengths)])


def accept_length(lines: Sequence[tuple[int, float]], setting: TopK,
                  lower: AcceptanceModel | None, confidence: float = CONFIDENCE
                  ) -> dict[str, Any]:
    """The acceptance whose SGLang tree for `setting` gives the log's mean accept length m
    (tokens per request-step, bonus included): p[0] solved by bisection on the expected
    tokens of `families.topk_tree`, the lower ranks in the trace's ratios when given (a tree
    of top-k > 1 needs them). Interval: m ± z·sd/√steps mapped through the same solution, sd
    exact for a chain (accepted drafts are a truncated geometric), else the largest a count in
    0..S with mean m − 1 can have."""
    rows = np.asarray(lines, dtype=np.float64).reshape(-1, 2)
    steps_in, lengths = rows[:, 0] * SGLANG_INTERVAL, rows[:, 1]
    if (lengths < 1).any() or (lengths > setting.steps + 1).any():
        raise InputError(f"accept len must lie in 1..{setting.steps + 1} (S + 1) for "
                         f"--steps {setting.steps}, got {lengths.min():g}..{lengths.max():g}")
    if steps_in.sum() == 0:
        raise InputError("no decode line has a running request")
    if setting.topk > 1 and lower is None:
        raise InputError("--topk > 1: SGLang's tree holds lower ranks the log cannot "
                         "separate; give --trace for their ratios")
    n = float(steps_in.sum())
    mean = float((lengths * steps_in).sum() / n)

    def vector(p0: float) -> np.ndarray:
        return np.array([p0]) if lower is None else with_lower_ranks(p0, lower)

    def tokens(p0: float) -> float:
        p = vector(p0)
        return topk_tree(p, setting, DEFAULT_SOURCE).expected_tokens(p)

    def solve(target: float) -> float:
        low, high = 0.0, 1.0
        if target >= tokens(1.0):
            return 1.0
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if tokens(mid) < target else (low, mid)
        return (low + high) / 2

    p0 = solve(mean)
    accepted = mean - 1
    if setting.topk == 1:
        tail = p0 ** np.arange(1, setting.steps + 1)  # P(accepted ≥ d)
        variance = float((2 * np.arange(1, setting.steps + 1) - 1) @ tail - accepted**2)
    else:
        variance = accepted * (setting.steps - accepted)
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(max(variance, 0.0) / n)
    p = vector(p0)
    low = vector(solve(max(1.0, mean - half)))
    high = vector(solve(min(setting.steps + 1.0, mean + half)))
    acceptance_table(p, "imported acceptance")
    return {
        "format": FORMAT, "from": "sglang-log",
        "source": DEFAULT_SOURCE if lower is None else lower.source,
        "acceptance": p.tolist(), "low": low.tolist(), "high": high.tolist(),
        "confidence": confidence,
        "counts": {"lines": len(rows), "request_steps": int(n), "mean_accept_length": mean,
                   "steps": setting.steps, "topk": setting.topk,
                   "draft_tokens": setting.tokens},
        "mean_accepted_length": mean,
        "assumption": (
            f"request-steps per line = #running-req × {SGLANG_INTERVAL} (SGLang's default "
            "decode_log_interval); the log's mean accept length determines one number, p[0] "
            + ("(the chain's top-draft acceptance)" if lower is None else
               f"with the lower ranks in the ratios of source {lower.source}")),
        "notes": [],
    }
