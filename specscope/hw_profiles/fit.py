"""Calibrate a profile's free parameters against published batch-1 decode throughput.

`python -m specscope.hw_profiles.fit [--write]` fits the a100 profile to gpt-fast's A100 table
(`data/published/gptfast_a100.csv`) with scipy least squares and prints each row's error;
`--write` stores the fitted values in `data/a100.toml`. The fit minimises log(predicted /
published tokens/s), so every row weighs by its relative error.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from specscope.atomic import write_text_atomic
from specscope.errors import InputError
from specscope.hw_profiles.cost import CostModel
from specscope.hw_profiles.profile import DATA_DIR, HardwareProfile, load_profile, profile_path
from specscope.models.catalogue import get_model

GPTFAST_A100 = DATA_DIR / "published" / "gptfast_a100.csv"
# Free parameters: (TOML section, key, SI value of one TOML unit, lower and upper bound in TOML
# units).
PARAMS = {
    "memory_eff": ("memory", "memory_eff", 1.0, 0.3, 1.0),
    "step_us": ("overhead", "step_us", 1e-6, 0.0, 5000.0),
    "layer_us": ("overhead", "layer_us", 1e-6, 0.0, 200.0),
    "allreduce_latency_us": ("interconnect", "allreduce_latency_us", 1e-6, 0.0, 200.0),
    "int8_ps_per_weight": ("dequant", "int8_ps_per_weight", 1e-12, 0.0, 10.0),
    "int4_ps_per_weight": ("dequant", "int4_ps_per_weight", 1e-12, 0.0, 10.0),
}


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


def load_published(path: str | Path = GPTFAST_A100) -> list[PublishedRow]:
    """Rows of a published-measurements CSV (lines starting with # are comments)."""
    path = Path(path)
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    rows = []
    for i, rec in enumerate(csv.DictReader(lines), start=1):
        try:
            rate = rec["tokens_per_s"].strip()
            rows.append(PublishedRow(
                rec["model"], int(rec["weight_bits"]), int(rec["group_size"]), int(rec["tp"]),
                int(rec["batch"]), int(rec["context"]), float(rate) if rate else None))
        except (KeyError, ValueError) as exc:
            raise InputError(f"{path}: data row {i}: {exc}") from None
    return rows


def with_params(hw: HardwareProfile, values: dict[str, float]) -> HardwareProfile:
    """A copy of `hw` with free parameters replaced (values in TOML units, e.g. µs)."""
    scaled = {k: v * PARAMS[k][2] for k, v in values.items()}
    dequant = dict(hw.dequant_s_per_weight)
    dequant[8] = scaled.get("int8_ps_per_weight", dequant[8])
    dequant[4] = scaled.get("int4_ps_per_weight", dequant[4])
    return dataclasses.replace(
        hw,
        memory_eff=scaled.get("memory_eff", hw.memory_eff),
        step_overhead_s=scaled.get("step_us", hw.step_overhead_s),
        layer_overhead_s=scaled.get("layer_us", hw.layer_overhead_s),
        allreduce_latency_s=scaled.get("allreduce_latency_us", hw.allreduce_latency_s),
        dequant_s_per_weight=dequant,
    )


def current_params(hw: HardwareProfile) -> dict[str, float]:
    """The profile's free parameters in TOML units."""
    si = {"memory_eff": hw.memory_eff, "step_us": hw.step_overhead_s,
          "layer_us": hw.layer_overhead_s, "allreduce_latency_us": hw.allreduce_latency_s,
          "int8_ps_per_weight": hw.dequant_s_per_weight[8],
          "int4_ps_per_weight": hw.dequant_s_per_weight[4]}
    return {k: v / PARAMS[k][2] for k, v in si.items()}


def predict_tokens_per_s(hw: HardwareProfile, row: PublishedRow) -> float:
    """Predicted batch-1 decode tokens/s of one published row (1 / one-token forward time)."""
    model = CostModel(hw, get_model(row.model), row.weight_bits, row.tp, row.group_size)
    return row.batch / model.forward_time(row.batch, 1, row.context)


def fit(hw: HardwareProfile, rows: list[PublishedRow]) -> dict[str, float]:
    """Least-squares values (TOML units) of the free parameters over the rows with a rate."""
    names = list(PARAMS)
    measured = [r for r in rows if r.tokens_per_s is not None]
    lo = np.array([PARAMS[k][3] for k in names])
    hi = np.array([PARAMS[k][4] for k in names])
    x0 = np.clip(np.array([current_params(hw)[k] for k in names]), lo, hi)

    def residuals(x: np.ndarray) -> np.ndarray:
        trial = with_params(hw, dict(zip(names, x, strict=True)))
        return np.array([np.log(predict_tokens_per_s(trial, r) / r.tokens_per_s)
                         for r in measured])

    result = least_squares(residuals, x0, bounds=(lo, hi), x_scale=np.maximum(hi - lo, 1e-3) / 10,
                           xtol=1e-12, ftol=1e-12, gtol=1e-12)
    # Values at a bound come back within ~1e-13 of it; round them onto it.
    return dict(zip(names, (round(float(v), 9) for v in result.x), strict=True))


def error_table(hw: HardwareProfile, rows: list[PublishedRow]) -> list[dict[str, object]]:
    """Per row: published and predicted tokens/s, relative error, and whether it fits memory."""
    table = []
    for r in rows:
        model = CostModel(hw, get_model(r.model), r.weight_bits, r.tp, r.group_size)
        fits = model.report(r.batch, 1, r.context)["fits"]
        pred = predict_tokens_per_s(hw, r)
        err = None if r.tokens_per_s is None else pred / r.tokens_per_s - 1
        table.append({"model": r.model, "weight_bits": r.weight_bits, "tp": r.tp,
                      "published": r.tokens_per_s, "predicted": pred, "error": err, "fits": fits})
    return table


def write_params(path: Path, values: dict[str, float]) -> None:
    """Replace each fitted `key = value` line of a profile TOML, keeping its comments."""
    text = path.read_text()
    for name, value in values.items():
        key = PARAMS[name][1]
        pattern = re.compile(rf"^({re.escape(key)}\s*=\s*)[-+0-9.eE]+", re.M)
        text, n = pattern.subn(lambda m, v=value: f"{m.group(1)}{v:.4g}", text, count=1)
        if n != 1:
            raise InputError(f"{path}: no line '{key} = ...' to write the fitted value into")
    write_text_atomic(path, text)


def main(argv: list[str] | None = None) -> None:
    """Fit the a100 profile to gpt-fast's table, print the errors, optionally write the TOML."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the fit in data/a100.toml")
    args = parser.parse_args(argv)
    rows = load_published(GPTFAST_A100)
    values = fit(load_profile("a100"), rows)
    hw = with_params(load_profile("a100"), values)
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
    if args.write:
        write_params(profile_path("a100"), values)
        print(f"wrote {profile_path('a100')}")


if __name__ == "__main__":
    main()
