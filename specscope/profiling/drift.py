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
from specscope.profiling.measure import Point, measure_steps

DRIFT_MAX_N = 8
"""Tree sizes re-timed by `machine_drift` (the small steps a decode loop runs)."""


def machine_drift(profile: HardwareProfile, spec_names: str | Sequence[str], runtime: Runtime,
                  max_batch: int = 1, repeats: int = 7) -> float | None:
    """How fast this machine runs now against when the profile was measured: `retime` of the
    profile's own measured points. A ratio far from 1 says that part of every step-time miss
    is the machine, not the model."""
    return retime(profile_points(profile), spec_names, runtime, max_batch, repeats)


def profile_points(profile: HardwareProfile) -> list[Point]:
    """The profile's measured tables as the points profile-hw measured."""
    return [Point(t.model, t.runtime, t.context, int(n), float(s), t.batch)
            for t in profile.measured for n, s in zip(t.new_tokens, t.time_s, strict=True)]


def retime(then: Sequence[Point], spec_names: str | Sequence[str], runtime: Runtime,
           max_batch: int = 1, repeats: int = 7) -> float | None:
    """The median, over the points of `then` of each model of `spec_names` under `runtime`
    (batch ≤ `max_batch`, n ≤ 8, context > 0), of the step time now (the same shapes through
    the executor, random weights and timing as profile-hw's) over the time in `then`. None
    when there are no such points."""
    names = [spec_names] if isinstance(spec_names, str) else list(spec_names)
    ratios = []
    for name in names:
        old = {(p.batch, p.context, p.new_tokens): p.time_s for p in then
               if (p.model, p.runtime) == (name, runtime.kind) and p.batch <= max_batch
               and p.context > 0 and p.new_tokens <= DRIFT_MAX_N}
        if not old:
            continue
        spec = get_model(name)
        ns = sorted({n for _, _, n in old})
        contexts = sorted({c for b, c, _ in old if b == 1})
        batches = sorted({b for b, _, _ in old if b > 1})
        now = measure_steps(spec, runtime, contexts, ns, repeats) if contexts else []
        if batches:
            now += measure_batched(spec, runtime, sorted({c for b, c, _ in old if b > 1}),
                                   batches, ns, repeats)
        ratios += [p.time_s / old[p.batch, p.context, p.new_tokens] for p in now
                   if (p.batch, p.context, p.new_tokens) in old]
    return float(np.median(ratios)) if ratios else None
