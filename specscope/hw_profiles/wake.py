"""`Wake`: what the first forward after an idle gap costs beyond a warm one, on this machine.

Some machines slow the first forward after the process has left its model alone for a while:
a memory manager that pages out cold pages (this project's CPU VMs run DAMON's `pageout` scheme:
the kernels' code and the weights' file pages go, and come back as major faults), a CPU that
drops its clocks, a GPU that drops its clocks between bursts. A serving loop meets it where a
request arrives to an idle server, and where a prompt's prefill comes after a stretch of
decoding steps only (a prefill's kernels are not a decoding step's). `profile-hw` measures it
(`profiling.serving.measure_wake`: a prompt's prefill right after waiting each gap, against the
same prefill warm) and writes a profile's `[idle]` section; the simulator adds it to each
prefill and each decoding step for the time since the last one began (`simulator/server.py`;
the prefill's figure stands for a step's, an approximation). A profile without the section
prices no penalty.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specscope.errors import InputError


@dataclass(frozen=True)
class Wake:
    """Extra seconds of the first forward after `idle_s[i]` seconds idle (`extra_s[i]`), linear
    between the measured gaps, from 0 at no gap, and the last value past the last gap."""

    idle_s: tuple[float, ...] = ()
    extra_s: tuple[float, ...] = ()

    def extra(self, gap: float) -> float:
        """Extra seconds after an idle gap of `gap` seconds."""
        if not self.idle_s or gap <= 0:
            return 0.0
        return float(np.interp(gap, (0.0, *self.idle_s), (0.0, *self.extra_s)))

    def toml(self) -> list[str]:
        """The `[idle]` section's lines (none when nothing was measured)."""
        if not self.idle_s:
            return []
        return ["[idle]    # the first forward after an idle gap, over the same forward warm",
                f"seconds = [{', '.join(f'{g:g}' for g in self.idle_s)}]",
                f"extra_ms = [{', '.join(f'{e * 1e3:.4g}' for e in self.extra_s)}]", ""]


def parse_wake(data: dict[str, Any], where: Path | str) -> Wake:
    """A profile's `[idle]` section checked: `seconds` increasing and positive, `extra_ms` as
    many finite values ≥ 0; absent, no penalty."""
    table = data.get("idle")
    if table is None:
        return Wake()
    at = f"{where}: [idle]"
    if not isinstance(table, dict):
        raise InputError(f"{at} must be a table")
    values = {}
    for key in ("seconds", "extra_ms"):
        row = table.get(key)
        if not isinstance(row, list) or not row or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                and v >= 0 for v in row):
            raise InputError(f"{at}: {key} must be a non-empty list of finite numbers >= 0")
        values[key] = tuple(float(v) for v in row)
    gaps, extra = values["seconds"], values["extra_ms"]
    if len(gaps) != len(extra):
        raise InputError(f"{at}: seconds and extra_ms differ in length ({len(gaps)} and "
                         f"{len(extra)})")
    if gaps[0] <= 0 or any(b <= a for a, b in itertools.pairwise(gaps)):
        raise InputError(f"{at}: seconds must be positive and increasing, got {list(gaps)}")
    return Wake(gaps, tuple(e * 1e-3 for e in extra))
