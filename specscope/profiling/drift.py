"""Machine drift: how fast this machine runs now against when its profile was measured.

A shared machine's speed moves by tens of percent over minutes, so a validation re-times a few
of the profile's own steps before comparing (`validate`, `validate --load`), and `profile-hw`
runs the same probe right after measuring to record what it reads on an unchanged machine
(`[drift]`, `HardwareProfile.drift_reference`).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from specscope.executor.runtime import Runtime
from specscope.hw_profiles import HardwareProfile
from specscope.models import get_model
from specscope.profiling.measure import binary_tree, build, timer

DRIFT_MAX_N = 8
"""Tree sizes re-timed by `machine_drift` (the small steps a decode loop runs)."""


def machine_drift(profile: HardwareProfile, spec_name: str, runtime: Runtime,
                  repeats: int = 15) -> float | None:
    """How fast this machine runs now against when the profile was measured: the median, over
    the profile's own measured points of `spec_name` under `runtime` (batch 1, n ≤ 8, context
    > 0), of the step time now (the same shapes through the executor, random weights as
    profile-hw uses; wall-clock time with the host's work, which is what a serving loop waits
    for: on a GPU a small model's step is host-bound, and the device's clock moves on its own)
    over the time in the profile, divided by the same probe's ratio when
    profile-hw ran it right after measuring (`HardwareProfile.drift_reference`: the probe, in a
    process that holds one model, runs ~10% faster on a 2-core CPU than the profile's grid
    measured the same steps, so an unreferenced probe reads drift where there is none). None
    when the profile holds no such points. A shared machine's speed moves by tens of percent
    over minutes; a ratio far from 1 says that part of every step-time miss is the machine, not
    the model."""
    tables = [t for t in profile.measured if (t.model, t.runtime, t.batch)
              == (spec_name, runtime.kind, 1) and t.context > 0]
    if not tables:
        return None
    spec = get_model(spec_name)
    ratios = []
    for table in tables:
        model = build(spec, runtime, table.context + int(table.new_tokens.max()) + 1)
        model.prefill(torch.zeros(table.context + 1, dtype=torch.long),
                      table.context + int(table.new_tokens.max()) + 1)
        for n, then in zip(table.new_tokens.astype(int), table.time_s, strict=True):
            if n <= DRIFT_MAX_N:
                tokens, tree = torch.arange(n) % spec.vocab_size, binary_tree(int(n))
                step = partial(model.verify, tokens, tree)
                now = timer(runtime, step, repeats, wall=True) * 1e-3
                ratios.append(now / then)
    if not ratios:
        return None
    return float(np.median(ratios)) / profile.drift_reference.get(drift_key(spec_name, runtime),
                                                                  1.0)


def drift_key(spec_name: str, runtime: Runtime) -> str:
    """The `[drift]` key of a model under a runtime."""
    return f"{spec_name} {runtime.kind}"
