"""Fit profiles' runtime parameters to measurements, with scipy least squares.

`python -m specscope.profiling.fit a100|h100 [--write]` fits and prints each row's error;
`--write` stores the result.

- `a100`: its `compile` runtime (gpt-fast: torch.compile + CUDA graphs) and interconnect and
  dequantisation terms, on gpt-fast's published A100 table (`data/published/gptfast_a100.csv`),
  each row predicted as 1 / forward_time(batch=1, new_tokens=1, context=205); residual
  log(predicted / published tokens/s).
- `h100`: its `graph` runtime on the CUDA-graph verify rows of `data/measured/h100-transformer.csv`
  (dense tree mask), then the host terms of `eager` on the eager verify rows, then
  `prefill_compute_eff` on the prefill rows, then `compile` on the compiled anchor of
  docs/hardware.md#measured-data
  (llama-3.1-8b, n = 1, context 2048: 6.0 ms); residual log(predicted / measured ms). `--write`
  also writes the runtime sections of the profiles without measurements of their own (h200,
  gaudi2, tpu-v4, tpu-v5e, and a100's eager and graph), carried over from the h100 fit: the
  software terms (host and device gaps, achieved efficiencies) are kept and the profile's own
  datasheet peak and bandwidth apply, each section marked as scaled.

Every fitted term is physical (bandwidth and compute efficiencies per operator class, per-step
and per-layer times), not a table per model, so that other shapes on the same GPU are predicted.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from specscope.atomic import write_text_atomic
from specscope.errors import InputError
from specscope.hw_profiles.cost import CostModel
from specscope.hw_profiles.cost_report import cost_report
from specscope.hw_profiles.profile import (
    DATA_DIR,
    HardwareProfile,
    load_profile,
    profile_path,
    with_runtime,
)
from specscope.hw_profiles.runtime import FIELDS, RuntimeParams, runtime_toml
from specscope.models.catalogue import get_model
from specscope.names import RUNTIMES

GPTFAST_A100 = DATA_DIR / "published" / "gptfast_a100.csv"
H100_STEPS = DATA_DIR / "measured" / "h100-transformer.csv"
PROFILE_FIELDS = {
    "allreduce_latency_us": ("interconnect", 1e-6, 0.0, 200.0),
    "int8_ps_per_weight": ("dequant", 1e-12, 0.0, 10.0),
    "int4_ps_per_weight": ("dequant", 1e-12, 0.0, 10.0),
}
"""Profile-level terms a fit may vary: (TOML section, SI value of one TOML unit, bounds)."""
A100_FIELDS = ("gemv_memory_eff", "step_us", "layer_us", *PROFILE_FIELDS)
"""What gpt-fast's batch-1 table determines: weight streaming, per-step and per-layer time,
all-reduce latency and dequantisation (its rows have one token per step and 205 cached)."""
GRAPH_FIELDS = ("step_us", "layer_us", "gemv_memory_eff", "gemm_memory_eff", "gemm_compute_eff",
                "gemm_half_tokens", "attn_memory_eff", "attn_dense_memory_eff",
                "attn_compute_eff", "blend")
"""The device-side terms the CUDA-graph verify rows determine (their host time is a replay)."""
HOST_FIELDS = ("host_step_us", "host_layer_us")
"""What eager rows add: the host's time to issue a forward."""
PREFILL_FIELDS = ("prefill_compute_eff", "prefill_attn_compute_eff", "prefill_host_step_us",
                  "prefill_host_layer_us")
"""What the (eager) prefill rows determine: a prompt's GEMM and attention efficiency and the
host time of its forward."""
H100_COPY_FRACTION = 2839.0 / 3350.0
"""The device-to-device copy rate measured in the same run as the rows, over the datasheet
bandwidth: no operator streams faster, so it bounds every memory efficiency of the fit (without
it, per-step, per-layer and streaming terms trade off along a line the two models cannot pin)."""
H100_MATMUL_FRACTION = 741.0 / 989.0
"""The bf16 8192³ matrix product measured in the same run over the datasheet peak: the ceiling
of every compute efficiency of the fit."""
GRAPH_STEP_US = 50.0
"""Upper bound of a replayed graph's fixed device time per step: the few kernels outside the
layers (embedding, final norm, lm_head launch gaps). Without it the fit may trade per-layer
kernel gaps for a per-step constant, which predicts the two measured models alike but other
depths wrongly."""
COMPILE_ANCHOR = ("llama-3.1-8b", 2048, 1, 6.0)
"""docs/hardware.md#measured-data: llama-3.1-8b, context 2048, one token, compiled then graph'd
on the H100: 6.0 ms."""
SCALED = {"h200": RUNTIMES, "gaudi2": RUNTIMES,
          "tpu-v4": ("compile",), "tpu-v5e": ("compile",), "a100": ("eager", "graph")}
"""Runtime sections carried over from the h100 fit to profiles without measurements of their
own (TPUs run XLA-compiled programs only)."""


@dataclass(frozen=True)
class PublishedRow:
    """One published batch-1 measurement; `tokens_per_s` is None where it ran out of memory."""

    model: str
    weight_bits: int
    group_size: int
    tp: int
    batch: int
    context: int
    tokens_per_s: float | None


@dataclass(frozen=True)
class StepRow:
    """One measured forward: "verify" (n tree tokens after `context`) or "prefill" (a prompt of
    n tokens, context 0), batch 1, under `runtime`, in milliseconds."""

    model: str
    phase: str
    context: int
    n: int
    runtime: str
    ms: float


def _csv_rows(path: Path) -> list[dict[str, str]]:
    """The records of a CSV whose comment lines start with #."""
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def load_published(path: str | Path = GPTFAST_A100) -> list[PublishedRow]:
    """Rows of a published-measurements CSV (lines starting with # are comments)."""
    path = Path(path)
    rows = []
    for i, rec in enumerate(_csv_rows(path), start=1):
        try:
            rate = rec["tokens_per_s"].strip()
            rows.append(PublishedRow(
                rec["model"], int(rec["weight_bits"]), int(rec["group_size"]), int(rec["tp"]),
                int(rec["batch"]), int(rec["context"]), float(rate) if rate else None))
        except (KeyError, ValueError) as exc:
            raise InputError(f"{path}: data row {i}: {exc}") from None
    return rows


def load_steps(path: str | Path = H100_STEPS) -> list[StepRow]:
    """Rows of a measured step-time CSV (model, phase, context, n, runtime, ms)."""
    path = Path(path)
    rows = []
    for i, rec in enumerate(_csv_rows(path), start=1):
        try:
            rows.append(StepRow(rec["model"], rec["phase"], int(rec["context"]), int(rec["n"]),
                                rec["runtime"], float(rec["ms"])))
        except (KeyError, ValueError) as exc:
            raise InputError(f"{path}: data row {i}: {exc}") from None
    return rows


def with_values(hw: HardwareProfile, runtime: str, values: dict[str, float]) -> HardwareProfile:
    """A copy of `hw` with runtime fields (of `runtime`) and profile-level terms replaced
    (TOML units)."""
    level = {k: v * PROFILE_FIELDS[k][1] for k, v in values.items() if k in PROFILE_FIELDS}
    hw = with_runtime(hw, runtime, **{k: v for k, v in values.items() if k not in PROFILE_FIELDS})
    dequant = dict(hw.dequant_s_per_weight)
    dequant[8] = level.get("int8_ps_per_weight", dequant[8])
    dequant[4] = level.get("int4_ps_per_weight", dequant[4])
    return dataclasses.replace(
        hw, allreduce_latency_s=level.get("allreduce_latency_us", hw.allreduce_latency_s),
        dequant_s_per_weight=dequant)


def current_values(hw: HardwareProfile, runtime: str, names: tuple[str, ...]
                   ) -> dict[str, float]:
    """The named runtime fields and profile-level terms of `hw`, in TOML units."""
    level = {"allreduce_latency_us": hw.allreduce_latency_s,
             "int8_ps_per_weight": hw.dequant_s_per_weight[8],
             "int4_ps_per_weight": hw.dequant_s_per_weight[4]}
    fields = hw.runtime(runtime).values()
    return {k: level[k] / PROFILE_FIELDS[k][1] if k in PROFILE_FIELDS else fields[k]
            for k in names}


def least_squares_fit(hw: HardwareProfile, runtime: str, names: tuple[str, ...],
                      residuals: Callable[[HardwareProfile], np.ndarray],
                      upper: dict[str, float] | None = None, prior_weight: float = 0.0,
                      scale_by_jacobian: bool = False) -> dict[str, float]:
    """Values (TOML units) of the named terms minimising `residuals(profile)`, within their
    bounds (`upper` lowers some upper bounds), starting from the profile's own values.

    `prior_weight` > 0 adds, per term, that weight times its log-distance from the start (µs
    terms softened by 1 µs, fractions by 0.001): terms the data cannot pin down then stay near
    their prior instead of wandering along a flat direction. Steps are scaled by each term's
    bounds (robust from a far start, as the published tables need), or by the Jacobian
    (`scale_by_jacobian`: faster to converge from a start near the answer, as profile-hw's
    measurements and priors are)."""
    bounds = {k: PROFILE_FIELDS[k][2:] if k in PROFILE_FIELDS else FIELDS[k][1:] for k in names}
    lo = np.array([bounds[k][0] for k in names])
    hi = np.array([min(bounds[k][1], (upper or {}).get(k, np.inf)) for k in names])
    x0 = np.clip(np.array(list(current_values(hw, runtime, names).values())), lo, hi)
    soft = np.array([1.0 if k.endswith("_us") else 1e-3 for k in names])

    def objective(x: np.ndarray) -> np.ndarray:
        fit = residuals(with_values(hw, runtime, dict(zip(names, x, strict=True))))
        if not prior_weight:
            return fit
        return np.concatenate([fit, prior_weight * np.log((x + soft) / (x0 + soft))])

    scale = "jac" if scale_by_jacobian else np.maximum(hi - lo, 1e-3) / 10
    result = least_squares(objective, x0, bounds=(lo, hi), x_scale=scale, xtol=1e-12, ftol=1e-12,
                           gtol=1e-12)
    # Values at a bound come back within ~1e-13 of it; round them onto it.
    return dict(zip(names, (round(float(v), 9) for v in result.x), strict=True))


# ---- a100: gpt-fast's published table --------------------------------------------------------


def predict_tokens_per_s(hw: HardwareProfile, row: PublishedRow, runtime: str = "compile"
                         ) -> float:
    """Predicted batch-1 decode tokens/s of one published row (1 / one-token forward time)."""
    model = CostModel(hw, get_model(row.model), row.weight_bits, row.tp, row.group_size,
                      runtime=runtime)
    return row.batch / model.forward_time(row.batch, 1, row.context)


def fit(hw: HardwareProfile, rows: list[PublishedRow]) -> dict[str, float]:
    """Least-squares values (TOML units) of `A100_FIELDS` of the compile runtime over the rows
    with a rate."""
    measured = [r for r in rows if r.tokens_per_s is not None]
    return least_squares_fit(hw, "compile", A100_FIELDS, lambda trial: np.array(
        [np.log(predict_tokens_per_s(trial, r) / r.tokens_per_s) for r in measured]))


def error_table(hw: HardwareProfile, rows: list[PublishedRow]) -> list[dict[str, object]]:
    """Per row: published and predicted tokens/s, relative error, and whether it fits memory."""
    table = []
    for r in rows:
        model = CostModel(hw, get_model(r.model), r.weight_bits, r.tp, r.group_size,
                          runtime="compile")
        fits = cost_report(model, r.batch, 1, r.context)["fits"]
        pred = predict_tokens_per_s(hw, r)
        err = None if r.tokens_per_s is None else pred / r.tokens_per_s - 1
        table.append({"model": r.model, "weight_bits": r.weight_bits, "tp": r.tp,
                      "published": r.tokens_per_s, "predicted": pred, "error": err, "fits": fits})
    return table


# ---- h100: measured step rows ------------------------------------------------------------------


def predict_ms(hw: HardwareProfile, row: StepRow, runtime: str | None = None,
               tree_attention: str = "dense") -> float:
    """Predicted milliseconds of one measured row (under `runtime`, default the row's)."""
    model = CostModel(hw, get_model(row.model), runtime=runtime or row.runtime,
                      tree_attention=tree_attention)
    context = 0 if row.phase == "prefill" else row.context
    return float(model.forward_time(1, row.n, context)) * 1e3


def _log_errors(hw: HardwareProfile, rows: list[StepRow], runtime: str | None = None
                ) -> np.ndarray:
    return np.array([np.log(predict_ms(hw, r, runtime) / r.ms) for r in rows])


def fit_h100(hw: HardwareProfile, rows: list[StepRow]) -> HardwareProfile:
    """The h100 profile with its runtimes fitted in stages (see the module docstring): graph's
    device terms, eager's host terms, the prefill efficiency, then compile's per-layer time."""
    verify = [r for r in rows if r.phase == "verify"]
    graph = [r for r in verify if r.runtime == "graph"]
    eager = [r for r in verify if r.runtime == "eager"]
    prefill = [r for r in rows if r.phase == "prefill"]
    ceiling = {k: H100_COPY_FRACTION for k in GRAPH_FIELDS if k.endswith("memory_eff")}
    ceiling |= {k: H100_MATMUL_FRACTION for k in GRAPH_FIELDS if k.endswith("compute_eff")}
    ceiling["step_us"] = GRAPH_STEP_US
    hw = with_values(hw, "graph", least_squares_fit(hw, "graph", GRAPH_FIELDS,
                                                    lambda t: _log_errors(t, graph), ceiling))
    device = {k: v for k, v in hw.runtime("graph").values().items() if "host" not in k}
    for name in ("eager", "compile"):
        hw = with_values(hw, name, device)
    hw = with_values(hw, "eager", least_squares_fit(hw, "eager", HOST_FIELDS,
                                                    lambda t: _log_errors(t, eager)))
    fitted = least_squares_fit(hw, "eager", PREFILL_FIELDS, lambda t: _log_errors(t, prefill),
                               {k: H100_MATMUL_FRACTION for k in PREFILL_FIELDS if "eff" in k})
    device_prefill = {k: v for k, v in fitted.items() if "host" not in k}
    for name in RUNTIMES:
        hw = with_values(hw, name, device_prefill)
    hw = with_values(hw, "eager", fitted)
    model, context, n, ms = COMPILE_ANCHOR
    anchor = [StepRow(model, "verify", context, n, "compile", ms)]
    return with_values(hw, "compile", least_squares_fit(
        hw, "compile", ("layer_us",), lambda t: _log_errors(t, anchor)))


def step_errors(hw: HardwareProfile, rows: list[StepRow], runtime: str | None = None
                ) -> list[tuple[StepRow, float, float]]:
    """Per row: (row, predicted ms, relative error) under `runtime` (default the row's)."""
    out = []
    for r in rows:
        pred = predict_ms(hw, r, runtime)
        out.append((r, pred, pred / r.ms - 1))
    return out


# ---- writing -----------------------------------------------------------------------------------


def write_params(path: Path, values: dict[str, float]) -> None:
    """Replace each fitted profile-level `key = value` line of a profile TOML, keeping its
    comments."""
    text = path.read_text()
    for key, value in values.items():
        pattern = re.compile(rf"^({re.escape(key)}\s*=\s*)[-+0-9.eE]+", re.M)
        text, n = pattern.subn(lambda m, v=value: f"{m.group(1)}{v:.4g}", text, count=1)
        if n != 1:
            raise InputError(f"{path}: no line '{key} = ...' to write the fitted value into")
    write_text_atomic(path, text)


def write_runtime(path: Path, params: RuntimeParams) -> None:
    """Replace (or append) the `[runtime.<name>]` section of a profile TOML."""
    text = path.read_text()
    section = runtime_toml(params)
    pattern = re.compile(rf"^\[runtime\.{params.name}\]\n(?:(?!\[).*\n?)*", re.M)
    text, n = pattern.subn(lambda m: section + "\n", text, count=1)
    if n == 0:
        text = text.rstrip("\n") + "\n\n" + section
    write_text_atomic(path, text.rstrip("\n") + "\n")


def scaled_runtime(params: RuntimeParams, source: str) -> RuntimeParams:
    """`params` carried over to another profile, marked as such."""
    return dataclasses.replace(params, origin=(
        f"scaled from {source}'s fitted {params.name} runtime: its software terms and achieved "
        "efficiencies, applied to this profile's datasheet peak and bandwidth (not measured "
        "here)"))


# ---- command line ------------------------------------------------------------------------------


def _summary(errors: list[float]) -> str:
    e = np.abs(np.array(errors))
    return (f"median |error| {np.median(e):.1%}, p90 {np.quantile(e, 0.9):.1%}, "
            f"worst {e.max():.1%} over {e.size} rows")


def a100_start() -> HardwareProfile:
    """The a100 profile whose compile runtime carries h100's fitted compile terms, except those
    gpt-fast's table determines (which the a100 fit then replaces)."""
    h100 = load_profile("h100").runtime("compile").values()
    return with_values(load_profile("a100"), "compile",
                       {k: v for k, v in h100.items() if k not in A100_FIELDS})


def _main_a100(write: bool) -> None:
    rows = load_published(GPTFAST_A100)
    start = a100_start()
    values = fit(start, rows)
    hw = with_values(start, "compile", values)
    for name, value in values.items():
        print(f"{name:22s} {value:.4g}")
    print(f"{'model':14s} {'bits':>4s} {'tp':>3s} {'published tok/s':>16s} "
          f"{'predicted tok/s':>16s} {'error':>7s}")
    for row in error_table(hw, rows):
        pub = "out of memory" if row["published"] is None else f"{row['published']:.2f}"
        pred = f"{row['predicted']:.2f}" + ("" if row["fits"] else " (does not fit)")
        err = "" if row["error"] is None else f"{row['error']:+.1%}"
        print(f"{row['model']:14s} {row['weight_bits']:4d} {row['tp']:3d} {pub:>16s} "
              f"{pred:>16s} {err:>7s}")
    if write:
        path = profile_path("a100")
        write_params(path, {k: v for k, v in values.items() if k in PROFILE_FIELDS})
        write_runtime(path, dataclasses.replace(hw.runtime("compile"), origin=(
            f"{', '.join(k for k in A100_FIELDS if k not in PROFILE_FIELDS)} fitted by `python -m "
            "specscope.profiling.fit a100` on gpt-fast's A100 table; the other terms scaled "
            "from h100's fitted compile runtime")))
        print(f"wrote {path}")


def _main_h100(write: bool) -> None:
    rows = load_steps(H100_STEPS)
    hw = fit_h100(load_profile("h100"), rows)
    for name in ("graph", "eager", "compile"):
        values = ", ".join(f"{k} {v:.4g}" for k, v in hw.runtime(name).values().items())
        print(f"[runtime.{name}] {values}")
    print(f"{'model':13s} {'phase':8s} {'context':>7s} {'n':>5s} {'runtime':8s} "
          f"{'measured ms':>11s} {'predicted':>10s} {'error':>7s}")
    errors: dict[tuple[str, str], list[float]] = {}
    for row, pred, err in step_errors(hw, rows):
        errors.setdefault((row.phase, row.runtime), []).append(err)
        print(f"{row.model:13s} {row.phase:8s} {row.context:7d} {row.n:5d} {row.runtime:8s} "
              f"{row.ms:11.3f} {pred:10.3f} {err:+7.1%}")
    for (phase, runtime), errs in errors.items():
        print(f"{phase} {runtime}: {_summary(errs)}")
    model, context, n, ms = COMPILE_ANCHOR
    pred = predict_ms(hw, StepRow(model, "verify", context, n, "compile", ms))
    print(f"compile anchor {model} n={n} context {context}: {ms} ms, predicted {pred:.2f} ms")
    if write:
        path = profile_path("h100")
        for name in RUNTIMES:
            write_runtime(path, dataclasses.replace(
                hw.runtime(name), origin=_h100_origin(name)))
        for profile, names in SCALED.items():
            for name in names:
                write_runtime(profile_path(profile), scaled_runtime(hw.runtime(name), "h100"))
        print(f"wrote {path} and the scaled sections of {', '.join(SCALED)}")


def _h100_origin(name: str) -> str:
    """Where each h100 runtime section comes from."""
    return {
        "graph": "fitted by `python -m specscope.profiling.fit h100` on the 45 CUDA-graph "
                 "verify rows of data/measured/h100-transformer.csv (dense tree mask)",
        "eager": "device terms of the graph fit; host terms fitted on the 45 eager verify rows "
                 "of data/measured/h100-transformer.csv",
        "compile": "device terms of the graph fit, layer_us fitted on docs/hardware.md's compiled "
                   "anchor (llama-3.1-8b, context 2048, n = 1: 6.0 ms)",
    }[name] + ("; prefill terms fitted on its 8 eager prefill rows"
               + ("" if name == "eager" else "; host_step_us 30 is a prior (a replay's issue "
                  "time, hidden behind the device's, so no row determines it)"))


def main(argv: list[str] | None = None) -> None:
    """Fit a profile (a100 or h100), print the errors, optionally write the TOML files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", choices=("a100", "h100"), help="which profile to fit")
    parser.add_argument("--write", action="store_true", help="store the fit in the TOML files")
    args = parser.parse_args(argv)
    (_main_a100 if args.profile == "a100" else _main_h100)(args.write)


if __name__ == "__main__":
    main()
