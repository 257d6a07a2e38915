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

Formats: `vllm-metrics` (vLLM's Prometheus text: `vllm:spec_decode_num_drafts`,
`…num_draft_tokens`, `…num_accepted_tokens`, `…num_accepted_tokens_per_pos` by `position`),
`sglang-log` (SGLang's decode log lines, whose `accept len` is the mean tokens per verification:
a chain's p[0] solves Σ_{d≤L} p^d = accept len − 1), and `json` (`{"drafts": N,
"accepted_per_position": [a_1, …, a_L]}`, optionally `draft_tokens`, `accepted_tokens`).

Bounds: metrics and logs are read one line at a time, keeping only the spec-decode series (at
most `MAX_SERIES`) or the decode lines' two numbers, so memory stays bounded whatever the file's
size, and a file whose reading would pass the time limit is refused before it is read
(`limits.check_read`); a counts JSON past `MAX_JSON_BYTES` is refused unread. Every count is a
whole number from 0 to `MAX_COUNT` (10^15), over at most `MAX_POSITIONS` positions. A vLLM series
repeated with the same value (one scrape pasted twice) is counted once with one warning; repeated
with another value (two scrapes of a growing counter) it is refused, naming the series and both
lines, never summed. A malformed number is refused naming its line.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from specscope.errors import InputError, warn
from specscope.files import read_json, text_lines
from specscope.interop.families import TopK, topk_tree
from specscope.limits import check_read
from specscope.trace.acceptance import AcceptanceModel, wilson
from specscope.tree import DEFAULT_SOURCE, acceptance_table

FORMAT = "specscope-acceptance"
"""The `format` of an imported acceptance document (what `--acceptance FILE.json` reads)."""
CONFIDENCE = 0.95
VLLM_PREFIX = "vllm:spec_decode_"
VLLM_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                 "num_accepted_tokens_per_pos")
MAX_COUNT = 10**15
"""The largest count taken (thirty years of a million drafts a second is under 10^15): counts
are whole numbers in 0..MAX_COUNT, so sums and ratios stay exact in float64."""
MAX_POSITIONS = 1024
"""Draft positions taken at most (no engine drafts chains this long)."""
MAX_JSON_BYTES = 1 << 20
"""A counts JSON larger than this (1 MiB) is refused unread: it holds a few numbers."""
READ_BYTES_PER_S = 20e6
"""A conservative rate at which metrics and logs are read, for `limits.check_read`'s estimate
(`benchmarks/imports.py` measures 36-75 MB/s on a 2-core VM)."""


@dataclass(frozen=True)
class Names:
    """What a format calls each counter, for messages (`position` takes the 1-based d)."""

    drafts: str = "drafts"
    position: str = "accepted_per_position[{index}]"
    draft_tokens: str = "draft_tokens"
    accepted_tokens: str = "accepted_tokens"

    def at(self, d: int) -> str:
        return self.position.format(index=d - 1)


VLLM_NAMES = Names(f"{VLLM_PREFIX}num_drafts",
                   f'{VLLM_PREFIX}num_accepted_tokens_per_pos{{{{position="{{index}}"}}}}',
                   f"{VLLM_PREFIX}num_draft_tokens", f"{VLLM_PREFIX}num_accepted_tokens")


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


PROM_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(?:\{(.*)\})?[ \t]+(\S+)"
                         r"(?:[ \t]+\S+)?[ \t]*")
"""A Prometheus text sample line: name, labels (between the braces), value, timestamp."""
PROM_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"'
                        r"[ \t]*(?:,|$)")
PROM_VALUE = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|Inf|NaN)")
MAX_SERIES = 100_000
"""Spec-decode series a metrics file may hold (models × engines × counters and positions): a
file with more is not one server's scrape, and memory stays bounded."""


def _labels(text: str | None) -> dict[str, str] | None:
    """The labels between a sample's braces; None when they are malformed."""
    labels: dict[str, str] = {}
    pos, text = 0, text or ""
    while pos < len(text.rstrip(" \t")):
        m = PROM_LABEL.match(text, pos)
        if m is None:
            return None
        labels[m.group(1)] = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n"
                                    else e.group(1), m.group(2))
        pos = m.end()
    return labels


def _series(name: str, labels: Mapping[str, str]) -> str:
    """A series as Prometheus writes it, for messages."""
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}" if inner else name


def parse_vllm_metrics(lines: str | Iterable[tuple[int, str, bool]], where: str,
                       model: str | None = None) -> ChainCounts:
    """The spec-decode counters of vLLM's Prometheus text, given whole or as `text_lines`
    gives it (number, text, whole), read in one pass keeping only the spec-decode series:
    summed over engines (`model` picks one `model_name` when several served). A series
    repeated with the same value (one scrape pasted twice) is counted once, with one warning;
    repeated with another value (two scrapes of a growing counter) it is refused, as are
    counts that are not whole numbers in 0..`MAX_COUNT`."""
    if isinstance(lines, str):
        lines = ((i, line, True) for i, line in enumerate(lines.splitlines(), 1))
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[int, int]] = {}
    repeats: list[tuple[str, int, int]] = []
    values: dict[str, int] = {}
    per_pos: dict[int, int] = {}
    models: set[str] = set()
    for number, line, whole in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        spec = stripped.startswith(VLLM_PREFIX)
        if not whole:
            if spec:
                raise InputError(f"{where}: line {number}: a spec-decode sample longer than "
                                 f"{len(line.encode())} bytes")
            continue
        m = PROM_SAMPLE.fullmatch(stripped)
        if m is None or (spec and not PROM_VALUE.fullmatch(m.group(3))):
            raise InputError(f"{where}: not Prometheus text (line {number}: "
                             f"{stripped[:60]!r})")
        if not spec:
            continue
        name = m.group(1)
        if name.endswith("_created"):
            continue
        counter = name.removesuffix("_total").removeprefix(VLLM_PREFIX)
        if counter not in VLLM_COUNTERS:
            continue
        labels = _labels(m.group(2))
        if labels is None:
            raise InputError(f"{where}: not Prometheus text (line {number}: malformed labels "
                             f"{stripped[:60]!r})")
        label = f"{VLLM_PREFIX}{counter}"
        series = _series(label, labels)
        token = m.group(3)
        value = float(token.replace("Inf", "inf"))
        if token.lstrip("+-") in ("Inf", "NaN") or value < 0:
            raise InputError(f"{where}: line {number}: {label} is {value}")
        if value > MAX_COUNT or value != int(value):
            shown = token if len(token) <= 40 else f"{token[:20]}… ({len(token)} characters)"
            raise InputError(f"{where}: line {number}: {series} is {shown}: a count must be "
                             f"a whole number from 0 to {MAX_COUNT:.0e}")
        count = int(value)
        key = (counter, tuple(sorted(labels.items())))
        if key in seen:
            first, before = seen[key]
            if before != count:
                raise InputError(f"{where}: line {number}: {series} repeats line {first} with "
                                 f"another value ({count} against {before}): two scrapes in "
                                 "one file? give one")
            repeats.append((series, first, number))
            continue
        if len(seen) >= MAX_SERIES:
            raise InputError(f"{where}: more than {MAX_SERIES:,} spec-decode series: not one "
                             "vLLM server's scrape")
        seen[key] = (number, count)
        served = labels.get("model_name")
        if served is not None:
            models.add(served)
            if model is not None and served != model:
                continue
        if counter == "num_accepted_tokens_per_pos":
            position = labels.get("position")
            if position is None or not position.isdigit():
                raise InputError(f"{where}: line {number}: {label} without a numeric position "
                                 "label")
            if len(position) > 6 or int(position) >= MAX_POSITIONS:
                raise InputError(f"{where}: line {number}: {series}: position past the "
                                 f"{MAX_POSITIONS} a draft of any engine has")
            per_pos[int(position)] = per_pos.get(int(position), 0) + count
        else:
            values[counter] = values.get(counter, 0) + count
    if repeats:
        series, first, again = repeats[0]
        warn(f"{where}: {len(repeats)} series repeated with the same value (first {series}, "
             f"lines {first} and {again}) counted once")
    if model is None and len(models) > 1:
        raise InputError(f"{where}: counters of several models ({', '.join(sorted(models))}); "
                         "pick one with --target")
    if model is not None and model not in models:
        raise InputError(f"{where}: no counters of --target {model} (models: "
                         f"{', '.join(sorted(models)) or 'none labelled'})")
    for counter, found in (("num_drafts", "num_drafts" in values),
                           ("num_accepted_tokens_per_pos", bool(per_pos))):
        if not found:
            raise InputError(f"{where}: counter {VLLM_PREFIX}{counter} is missing")
    if len(per_pos) <= max(per_pos):
        missing = next(i for i in range(max(per_pos) + 1) if i not in per_pos)
        raise InputError(f"{where}: {VLLM_PREFIX}num_accepted_tokens_per_pos has no position "
                         f"{missing} (positions run 0..{max(per_pos)})")
    return ChainCounts(
        values["num_drafts"], tuple(per_pos[i] for i in range(len(per_pos))),
        *(values.get(k) for k in ("num_draft_tokens", "num_accepted_tokens")),
        where=where, names=VLLM_NAMES)


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


def import_file(path: Path, origin: str, model: str | None = None,
                lower: AcceptanceModel | None = None, setting: TopK | None = None
                ) -> dict[str, Any]:
    """`trace import`: the acceptance document of an engine's file of format `origin`
    (`setting`: the SGLang run's steps, top-k and draft tokens, for `sglang-log`). Metrics and
    logs are read a line at a time (bounded memory), refused before reading when reading them
    would pass the time limit (`limits.check_read`); a counts JSON past `MAX_JSON_BYTES` is
    refused unread."""
    if origin == "json":
        try:
            size = path.stat().st_size
        except OSError:
            size = 0  # read_json says what is wrong
        if size > MAX_JSON_BYTES:
            raise InputError(f"{path}: {size:,} bytes, over the {MAX_JSON_BYTES:,} a counts "
                             "JSON of a few numbers needs")
        counts = parse_counts_json(read_json(path, "counts file"), str(path))
    elif origin == "vllm-metrics":
        check_read(path, "--from vllm-metrics", READ_BYTES_PER_S)
        counts = parse_vllm_metrics(text_lines(path, "metrics file"), str(path), model)
    elif origin == "sglang-log":
        if setting is None:
            raise InputError("--from sglang-log needs --steps, --topk and --draft-tokens (the "
                             "run's --speculative-num-steps, -eagle-topk, -num-draft-tokens)")
        check_read(path, "--from sglang-log", READ_BYTES_PER_S)
        return accept_length(parse_sglang_log(text_lines(path, "log file"), str(path)),
                             setting, lower) | {"file": str(path)}
    else:
        raise InputError(f"--from {origin}: not one of vllm-metrics, sglang-log, json")
    return imported(counts, origin, lower) | {"file": str(path)}


SGLANG_RUNNING = re.compile(r"#running-req:[ \t]*([^\s,]*)")
SGLANG_ACCEPT = re.compile(r"accept len:[ \t]*([^\s,]*)")
SGLANG_NUMBER = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,20})?")
SGLANG_INTERVAL = 40
"""Decode iterations between two of SGLang's decode log lines (`decode_log_interval`'s
default): a line's `accept len` averages #running-req × this many request-steps."""


def parse_sglang_log(lines: str | Iterable[tuple[int, str, bool]], where: str) -> np.ndarray:
    """(running requests, accept len) of every SGLang decode log line (a line with `Decode
    batch` and `accept len`), as an (N, 2) array, read in one pass (the log given whole or as
    `text_lines` gives it); a malformed number is an `InputError` naming its line."""
    if isinstance(lines, str):
        lines = ((i, line, True) for i, line in enumerate(lines.splitlines(), 1))
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
