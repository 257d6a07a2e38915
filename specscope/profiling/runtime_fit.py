"""Fitting a runtime's cost terms to measured steps, with the error on points the fit did not see.

`fit_runtime` varies a profile's `[runtime.X]` fields (`fit_fields`) by scipy least squares on
log(predicted / measured) through `CostModel` itself, each field pulled weakly towards its prior
(`PRIOR_WEIGHT`), and reports the relative error on every `HOLD_OUT_EVERY`-th point, held out.
Batched steps (points of batch > 1) are fitted second, on their own: with every field the
single-sequence points fitted held, they fit only the per-sequence host terms
(`runtime.BATCH_FIELDS`), so the operators (weight reuse over the batch's tokens, each row's
attention) stay priced by the roofline those points fitted, and batch 1 prices the same with or
without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specscope.errors import InputError
from specscope.hw_profiles.cost import CostModel
from specscope.hw_profiles.profile import HardwareProfile, with_runtime
from specscope.hw_profiles.runtime import BATCH_FIELDS, FIELDS
from specscope.models.spec import ModelSpec
from specscope.profiling.fit import least_squares_fit
from specscope.profiling.measure import Point

HOLD_OUT_EVERY = 4
"""Every 4th measured point is kept out of the fit (see `split_held_out`)."""
PRIOR_WEIGHT = 0.02
"""Weight of each fitted field's log-distance from its prior in the fit's residuals: it keeps a
term the measurements do not determine (attention at short context) at its prior."""


@dataclass(frozen=True)
class Fit:
    """One runtime's fitted fields (TOML units) and its relative error on held-out points."""

    runtime: str
    values: dict[str, float]
    fitted: tuple[str, ...]
    points: int
    held_out: int
    heldout_median_rel_err: float
    heldout_max_rel_err: float
    fit_median_rel_err: float
    batched: Fit | None = None
    """The second fit, of `BATCH_FIELDS` to the batched points, where there were any."""


PREFILL_FIELDS = tuple(f for f in FIELDS if f.startswith("prefill_"))
"""Runtime fields that only prompts (context 0) determine."""


def fit_fields(kind: str, prefill: bool) -> tuple[str, ...]:
    """The runtime fields a single-sequence fit varies: all but the dense-mask attention the
    executor does not run (set from the split one), the per-sequence terms of batched steps
    (`BATCH_FIELDS`), the prompt fields unless prompts were measured, and on a CPU
    the device-side fixed times (`step_us`, `layer_us`: the same thread issues and computes, so
    they fold into the host terms and stay 0) and `gemm_half_tokens` (kept at its prior, 1: a
    CPU's vector units are full from one token, and small tiny-model timings would otherwise
    fit a GEMV that is compute-bound, which extrapolates wrongly to large models)."""
    skip = {"attn_dense_memory_eff", *BATCH_FIELDS, *([] if prefill else PREFILL_FIELDS)}
    if kind == "cpu":
        skip |= {"step_us", "layer_us", "gemm_half_tokens"}
    return tuple(f for f in FIELDS if f not in skip)


def predict(hw: HardwareProfile, runtime: str, points: Sequence[Point],
            specs: dict[str, ModelSpec]) -> np.ndarray:
    """Seconds `CostModel` predicts for each point under `runtime` (one call per model and
    batch)."""
    out = np.empty(len(points))
    for name, batch in {(p.model, p.batch) for p in points}:
        idx = [i for i, p in enumerate(points) if (p.model, p.batch) == (name, batch)]
        cm = CostModel(hw, specs[name], runtime=runtime)
        n = np.array([points[i].new_tokens for i in idx], dtype=float)
        ctx = np.array([points[i].context for i in idx], dtype=float)
        out[idx] = cm.forward_time(batch, n, ctx)
    return out


def split_held_out(points: Sequence[Point]) -> tuple[list[Point], list[Point]]:
    """(fitted, held out): in each (model, batch, context) table, n increasing, every
    `HOLD_OUT_EVERY`-th point is held out, starting one point earlier in each next table, so the
    held-out points cover every n and no n is left out of the fit everywhere."""
    train: list[Point] = []
    held: list[Point] = []
    for g, rows in enumerate(groups(points, ("model", "batch", "context")).values()):
        for i, p in enumerate(rows):
            (held if (i + g) % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1 else train).append(p)
    return train, held


def fit_runtime(hw: HardwareProfile, runtime: str, points: Sequence[Point],
                specs: dict[str, ModelSpec], fields: Sequence[str] | None = None,
                prior_weight: float = PRIOR_WEIGHT) -> Fit:
    """Fit `runtime`'s fields of `hw` (no measured tables) to `points` by least squares on
    log(predicted / measured), every `HOLD_OUT_EVERY`-th point held out: the single-sequence
    points first (`fields`, default `fit_fields`), then `BATCH_FIELDS` to the batched points
    (module docstring); returns the fitted values (all fields, TOML units) and the errors."""
    single = [p for p in points if p.batch == 1]
    fields = tuple(fields or fit_fields(hw.kind, any(p.context == 0 for p in single)))
    fit = _fit(hw, runtime, single, specs, fields, prior_weight)
    batched = [p for p in points if p.batch > 1]
    if not batched:
        return fit
    second = _fit(with_runtime(hw, runtime, **fit.values), runtime, batched, specs,
                  BATCH_FIELDS, prior_weight)
    return dataclasses.replace(fit, values=second.values, batched=second)


def _fit(hw: HardwareProfile, runtime: str, points: Sequence[Point],
         specs: dict[str, ModelSpec], fields: tuple[str, ...], prior_weight: float) -> Fit:
    """One least-squares fit of `fields` to `points`, with its held-out and fit errors."""
    train, held = split_held_out(points)
    if not held:
        raise InputError(f"runtime {runtime}: {len(points)} measured points are too few to fit "
                         f"and hold out every {HOLD_OUT_EVERY}th")
    measured = np.array([p.time_s for p in train])
    values = least_squares_fit(
        hw, runtime, fields, lambda trial: np.log(predict(trial, runtime, train, specs) / measured),
        prior_weight=prior_weight, scale_by_jacobian=True)
    fitted = with_runtime(hw, runtime, **values)
    values = fitted.runtimes[runtime].values()
    values["attn_dense_memory_eff"] = values["attn_memory_eff"]

    def rel_err(subset: Sequence[Point]) -> np.ndarray:
        pred = predict(fitted, runtime, subset, specs)
        return np.abs(pred / np.array([p.time_s for p in subset]) - 1)

    err = rel_err(held)
    return Fit(runtime, values, fields, len(train), len(held), float(np.median(err)),
               float(np.max(err)), float(np.median(rel_err(train))))


def groups(points: Sequence[Point], keys: tuple[str, ...]) -> dict[tuple, list[Point]]:
    """Points grouped by the fields `keys` (groups in sorted order), n increasing in each."""
    groups: dict[tuple, list[Point]] = {}
    for p in sorted(points, key=lambda p: (*(getattr(p, k) for k in keys), p.new_tokens)):
        groups.setdefault(tuple(getattr(p, k) for k in keys), []).append(p)
    return groups
