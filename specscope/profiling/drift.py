"""Machine drift: how fast this machine runs now against when its profile was measured.

A shared machine's speed moves by tens of percent over minutes, so a validation re-times a few
of the profile's own steps before comparing (`validate`, `validate --load`). The probe times
them exactly as `profile-hw` timed them (`measure_steps` for one sequence, `measure_batched`
for B rows: one call of each shape in turn, median of the rounds), so its ratio needs no
reference. Two things it learned on a 2-core VM (2026-11-26):
- a probe that repeats one shape back to back runs 10-20% faster than the same steps
  interleaved, so that probe, divided by its own reading right after profiling, read
  1.12-1.34 while the grid re-timed in the same minutes read 0.93-1.10;
- batched steps slow down more than one sequence's steps when the VM slows (by 5-10%), so
  a load run's probe re-times the batches it serves as well.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specscope.executor.runtime import Runtime
from specscope.hw_profiles import HardwareProfile
from specscope.models import get_model
from specscope.profiling.batched import measure_batched
from specscope.profiling.measure import measure_steps

DRIFT_MAX_N = 8
"""Tree sizes re-timed by `machine_drift` (the small steps a decode loop runs)."""


def machine_drift(profile: HardwareProfile, spec_names: str | Sequence[str], runtime: Runtime,
                  max_batch: int = 1, repeats: int = 7) -> float | None:
    """How fast this machine runs now against when the profile was measured: the median, over
    the profile's own measured points of each model of `spec_names` under `runtime` (batch ≤
    `max_batch`, n ≤ 8, context > 0), of the step time now (the same shapes through the
    executor, random weights and timing as profile-hw's) over the time in the profile. None
    when the profile holds no such points. A ratio far from 1 says that part of every
    step-time miss is the machine, not the model."""
    names = [spec_names] if isinstance(spec_names, str) else list(spec_names)
    ratios = []
    for name in names:
        tables = {(t.batch, t.context): t for t in profile.measured
                  if (t.model, t.runtime) == (name, runtime.kind) and t.batch <= max_batch
                  and t.context > 0}
        ns = sorted({int(n) for t in tables.values() for n in t.new_tokens if n <= DRIFT_MAX_N})
        if not ns:
            continue
        spec = get_model(name)
        contexts = sorted({c for b, c in tables if b == 1})
        batches = sorted({b for b, _ in tables if b > 1})
        now = measure_steps(spec, runtime, contexts, ns, repeats) if contexts else []
        batched = sorted({c for b, c in tables if b > 1})
        if batches:
            now += measure_batched(spec, runtime, batched, batches, ns, repeats)
        for point in now:
            table = tables.get((point.batch, point.context))
            hit = None if table is None else table.new_tokens == point.new_tokens
            if hit is not None and hit.any():
                ratios.append(point.time_s / float(table.time_s[hit][0]))
    return float(np.median(ratios)) if ratios else None
