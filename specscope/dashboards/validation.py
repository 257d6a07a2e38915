"""Predicted against measured, per quantity, with the error band of each run: validate runs
(tokens/step, step time and tokens/s of whole decoding runs) and benchmark step tables
(`benchmarks/gpu_verify.py`: one verification pass, priced by the cost model on the profile
measured on that device)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from specscope.dashboards.load import Results, ValidationRun, profiles
from specscope.dashboards.style import Section, colour, finish, translucent
from specscope.hw_profiles import CostModel, HardwareProfile
from specscope.models import get_model, list_models

QUANTITIES = (
    ("tokens_per_step", "predicted_tokens_per_step", "measured_tokens_per_step",
     "tokens per step"),
    ("step_time", "predicted_step_ms", "measured_step_ms", "step time (ms)"),
    ("tokens_per_s", "predicted_tokens_per_s", "measured_tokens_per_s", "tokens per second"),
)
"""(name, predicted column, measured column, axis label) of each panel."""
GUIDE = (
    "Each point is one configuration (method, drafter, tree size, temperature) predicted from a "
    "calibration half of the prompts and then run for real on the held-out half. On the "
    "diagonal the prediction is exact; the shaded bands are ± the run's median (darker) and "
    "90th-percentile (lighter) relative error, printed in each panel's corner. Tokens per "
    "step tests the acceptance model, step time the hardware profile; tokens per second "
    "combines both. Points far outside the bands "
    "name the configurations the model gets wrong (hover: which component carries the miss)."
)
BENCHMARK_GUIDE = (
    " Benchmark rows (verification passes alone, timed by benchmarks/gpu_verify.py) test the "
    "cost model of the profile measured on that device."
)


def errors(run: ValidationRun, name: str, predicted: str, measured: str) -> pl.Series:
    """Relative errors |predicted − measured| / measured of one quantity."""
    column = f"{name}_rel_err"
    if column in run.frame.columns:
        return run.frame[column]
    return ((run.frame[predicted] - run.frame[measured]).abs() / run.frame[measured]).alias(column)


def benchmark_runs(results: Results) -> list[ValidationRun]:
    """One run per (benchmark file, runtime) of verification step times whose model is in the
    catalogue, priced by `CostModel.verify_time` on the profile of the benchmark's device
    (a GPU profile named in the device, else a profile whose description begins with it)."""
    runs = []
    for path, doc in results.benchmarks:
        device = str(doc["provenance"].get("device", ""))
        found = next(((name, hw) for name, hw in profiles(results) if device and (
            name in device.lower() if hw.kind == "gpu" else hw.description.startswith(device))),
            None)
        steps = [s for s in doc.get("steps", []) if s.get("model") in list_models()]
        if found is None or not steps:
            continue
        name, hw = found
        for runtime in dict.fromkeys(s["runtime"] for s in steps):
            if runtime not in hw.runtimes:
                continue
            rows = [_priced(hw, s) for s in steps if s["runtime"] == runtime]
            runs.append(ValidationRun(path, f"{device} · {runtime}: one verification pass, "
                                            f"priced on {name}", pl.DataFrame(rows)))
    return runs


def _priced(hw: HardwareProfile, step: dict) -> dict[str, object]:
    """A benchmark step as a row: measured and predicted ms, and what priced it."""
    cost = CostModel(hw, get_model(step["model"]), runtime=step["runtime"])
    forward = cost.forward(1, step["n"], step["context"])
    how = ("the profile's own measured table" if forward.source == "measured"
           else "the roofline")
    predicted = 1e3 * float(cost.verify_time(step["n"], step["context"]))
    return {"config": f"{step['model']}, n = {step['n']}, context {step['context']}",
            "predicted_step_ms": predicted, "measured_step_ms": float(step["ms"]),
            "miss": f"priced from {how}"}


def validation_section(results: Results) -> Section:
    """Predicted against measured tokens/step, step time and tokens/s, per run."""
    title = "Predicted against measured, with each run's error band"
    runs = results.validations + benchmark_runs(results)
    if not runs:
        return Section("validation", title, GUIDE, note="needs a validate table "
                       "(specscope validate ... -o DIR/validate, or --json > DIR/validate.json)"
                       " or benchmark step times (benchmarks/results/gpu_verify-*.json)")
    present = [q for q in QUANTITIES if any(q[1] in r.frame.columns for r in runs)]
    fig = make_subplots(rows=1, cols=len(present), subplot_titles=[q[3] for q in present],
                        horizontal_spacing=0.08)
    shown: set[str] = set()
    for col, (name, predicted, measured, label) in enumerate(present, start=1):
        drawn = [r for r in runs if predicted in r.frame.columns]
        low = min(r.frame[c].min() for r in drawn for c in (predicted, measured))
        high = max(r.frame[c].max() for r in drawn for c in (predicted, measured))
        x = np.geomspace(low / 1.15, high * 1.15, 40)
        notes = []
        for run in drawn:
            err = errors(run, name, predicted, measured)
            median, p90 = float(err.median()), float(err.quantile(0.9, "linear"))
            _band(fig, run.label, x, p90, 0.08, col)
            _band(fig, run.label, x, median, 0.18, col)
            _points(fig, run, predicted, measured, err, col, run.label not in shown)
            shown.add(run.label)
            notes.append(f"<span style='color:{colour(run.label)}'>■</span> median "
                         f"{100 * median:.1f}%, p90 {100 * p90:.1f}%")
        fig.add_trace(go.Scatter(x=x[[0, -1]], y=x[[0, -1]], mode="lines", name="exact",
                                 line={"color": "black", "dash": "dot", "width": 1},
                                 legendgroup="exact", showlegend=col == 1, legendrank=2000,
                                 hoverinfo="skip"),
                      row=1, col=col)
        axis = "x" if col == 1 else f"x{col}"
        fig.add_annotation(text="<br>".join(notes), xref=f"{axis} domain",
                           yref=f"{axis.replace('x', 'y')} domain", x=0.02, y=0.98,
                           xanchor="left", yanchor="top", showarrow=False, align="left",
                           bgcolor="rgba(255,255,255,0.85)", font={"size": 11})
        scale = "log" if high / low > 10 else "linear"
        ticks = {"dtick": "D2"} if scale == "log" else {}  # label 1, 2, 5 × each decade
        fig.update_xaxes(type=scale, title_text=f"measured {label}", row=1, col=col, **ticks)
        fig.update_yaxes(type=scale, title_text=f"predicted {label}", row=1, col=col, **ticks)
    finish(fig, height=420, legend="run", legend_rows=len(runs) + 1)
    labels = [r.label for r in runs]
    gpu = any(word in label.lower() for label in labels for word in ("cuda", "nvidia", "gpu"))
    guide = GUIDE + (BENCHMARK_GUIDE if len(runs) > len(results.validations) else "") + (
        f" Runs: {'; '.join(labels)}.") + (
        "" if gpu else " No GPU run is in this folder (validate --device cuda, or "
        "benchmarks/gpu_verify.py on a GPU).")
    return Section("validation", title, guide, fig,
                   tuple(dict.fromkeys(results.name(r.path) for r in runs)))


def _band(fig: go.Figure, label: str, x: np.ndarray, err: float, opacity: float,
          col: int) -> None:
    """Shade predicted within x·(1 ± err) for one run."""
    lower = np.maximum(x * (1 - err), x[0] * 1e-3)
    fig.add_trace(go.Scatter(
        x=np.concatenate([x, x[::-1]]), y=np.concatenate([x * (1 + err), lower[::-1]]),
        fill="toself", mode="none", fillcolor=translucent(label, opacity),
        name=f"±{100 * err:.1f}%", legendgroup=label, showlegend=False, hoverinfo="skip"),
        row=1, col=col)


def _points(fig: go.Figure, run: ValidationRun, predicted: str, measured: str,
            err: pl.Series, col: int, legend: bool) -> None:
    f = run.frame.with_columns(err=err)
    miss = f["miss"] if "miss" in f.columns else pl.Series([""] * f.height)
    hover = [f"<b>{c}</b> · {run.label}<br>predicted {p:,.3g} · measured {m:,.3g}<br>error "
             f"{100 * e:.1f}%" + (f"<br>miss carried by: {w}" if w else "")
             for c, p, m, e, w in zip(f["config"], f[predicted], f[measured], f["err"], miss,
                                      strict=True)]
    fig.add_trace(go.Scatter(
        x=f[measured], y=f[predicted], mode="markers", name=run.label,
        legendgroup=run.label, showlegend=legend,
        marker={"color": colour(run.label), "size": 9, "line": {"color": "white", "width": 1}},
        text=hover, hovertemplate="%{text}<extra></extra>"), row=1, col=col)
