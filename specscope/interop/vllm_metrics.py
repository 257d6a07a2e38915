"""vLLM's spec-decode counters read from its Prometheus text (`/metrics`), for `trace import
--from vllm-metrics`: `vllm:spec_decode_num_drafts`, `…num_draft_tokens`,
`…num_accepted_tokens` and `…num_accepted_tokens_per_pos` by `position`, summed over engines.

The text is read one line at a time, keeping only the spec-decode series (at most
`MAX_SERIES`), so memory stays bounded whatever the file's size. A series repeated with the
same value (one scrape pasted twice) is counted once with one warning; repeated with another
value (two scrapes of a growing counter) it is refused, naming the series and both lines, never
summed. A malformed sample or a count that is not a whole number in 0..`MAX_COUNT` is refused
naming its line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from specscope.errors import InputError, warn
from specscope.interop.counters import MAX_COUNT, MAX_POSITIONS, ChainCounts, Names

VLLM_PREFIX = "vllm:spec_decode_"
VLLM_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                 "num_accepted_tokens_per_pos")
VLLM_NAMES = Names(f"{VLLM_PREFIX}num_drafts",
                   f'{VLLM_PREFIX}num_accepted_tokens_per_pos{{{{position="{{index}}"}}}}',
                   f"{VLLM_PREFIX}num_draft_tokens", f"{VLLM_PREFIX}num_accepted_tokens")


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


def parse_vllm_metrics(lines: Iterable[tuple[int, str, bool]], where: str,
                       model: str | None = None) -> ChainCounts:
    """The spec-decode counters of vLLM's Prometheus text, its lines as `text_lines` gives
    them (number, text, whole), read in one pass keeping only the spec-decode series:
    summed over engines (`model` picks one `model_name` when several served). A series
    repeated with the same value (one scrape pasted twice) is counted once, with one warning;
    repeated with another value (two scrapes of a growing counter) it is refused, as are
    counts that are not whole numbers in 0..`MAX_COUNT`."""
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
