"""Simulated against measured serving under load (`specscope validate --load`): per run, mean
TPOT and p99 request latency against throughput, and mean TPOT against arrival rate, one colour
per policy, the simulator dashed and the real continuous-batching run solid on the same axes."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from specscope.dashboards.load import LOAD_SIDES, LoadValidation, Results
from specscope.dashboards.style import Section, colour, facets, finish, rows_of
from specscope.validate.load_report import METRICS, _fmt, ranking_lines

PANELS = (
    ("throughput_tok_s", "mean_tpot_ms", "throughput (generated tokens/s)",
     "mean time per output token (ms)"),
    ("throughput_tok_s", "p99_latency_s", "throughput (generated tokens/s)",
     "p99 request latency (s)"),
    ("rate", "mean_tpot_ms", "arrival rate (requests/s)", "mean time per output token (ms)"),
)
"""(x, y, x label, y label) of each run's panels; `rate` is the cell's, the rest each side's."""
DASH = {"simulated": "dash", "measured": "solid"}
NAMES = {"throughput": "throughput", "mean_tpot": "mean TPOT", "p99_ttft": "p99 TTFT",
         "p99_latency": "p99 latency"}
GUIDE = (
    "Each point is one policy at one arrival rate of validate --load: the same requests (seeds, "
    "prompts, output lengths) simulated (dashed) and served for real by the continuous-batching "
    "executor (solid), joined in rate order, the simulated times already corrected for the "
    "machine's drift during each cell. Where a policy's two lines part, the simulator misprices "
    "that load: usually near saturation, where batches fill and queues grow, so watch whether "
    "the dashed line bends up at the same throughput and rate as the solid one. What a design "
    "choice needs most is the order: the simulated ranking of the policies (by throughput at "
    "the highest rate, by mean TPOT at the lowest) should be the measured one. Hover for each "
    "point's TTFT, mean batch and error."
)


def load_validation_section(results: Results) -> Section:
    """Per `validate --load` run, three panels of simulated and measured curves per policy."""
    title = "Serving under load: simulated against measured, per policy"
    runs = results.load_validations
    if not runs:
        return Section("load-validation", title, GUIDE, note="needs validate --load output "
                       "(specscope validate --load ... -o DIR, or --json > DIR/load.json)")
    fig, positions = facets([f"{run.label}<br>{y_label} against {x_label.split(' (')[0]}"
                             for run in runs for _, _, x_label, y_label in PANELS])
    seen: set[str] = set()
    for i, run in enumerate(runs):
        cells = _ordered(run.doc)
        for j, (x, y, x_label, y_label) in enumerate(PANELS):
            row, col = positions[i * len(PANELS) + j]
            for policy, rows in cells.items():
                for side, _ in LOAD_SIDES:
                    name = f"{policy} · {side}"
                    fig.add_trace(go.Scatter(
                        x=[c["rate"] if x == "rate" else c[side][x] for c in rows],
                        y=[c[side][y] for c in rows], mode="lines+markers", name=name,
                        legendgroup=policy, showlegend=name not in seen,
                        marker={"size": 7, "symbol": "circle" if side == "measured"
                                else "circle-open"},
                        line={"color": colour(policy), "dash": DASH[side]},
                        text=[_hover(run, c, side) for c in rows],
                        hovertemplate="%{text}<extra></extra>"), row=row, col=col)
                    seen.add(name)
            fig.update_xaxes(title_text=x_label, rangemode="tozero", row=row, col=col)
            fig.update_yaxes(title_text=y_label, rangemode="tozero", row=row, col=col)
        row, col = positions[i * len(PANELS)]
        fig.add_annotation(text="<br>".join(_errors(run.doc)), xref="x domain",
                           yref="y domain", x=0.02, y=0.98, xanchor="left", yanchor="top",
                           showarrow=False, align="left", bgcolor="rgba(255,255,255,0.85)",
                           font={"size": 11}, row=row, col=col)
    finish(fig, rows_of(positions), legend="policy", legend_rows=1 + len(seen) // 6)
    guide = GUIDE + " Runs:" + "".join(f" {_summary(run)}" for run in runs)
    return Section("load-validation", title, guide, fig,
                   tuple(dict.fromkeys(results.name(r.path) for r in runs)))


def _ordered(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The cells per policy (in the run's order), each policy's in rate order."""
    policies = [*doc.get("policies", []), *(c["policy"] for c in doc["cells"])]
    return {p: sorted((c for c in doc["cells"] if c["policy"] == p), key=lambda c: c["rate"])
            for p in dict.fromkeys(policies) if any(c["policy"] == p for c in doc["cells"])}


def _percent(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _errors(doc: dict[str, Any]) -> list[str]:
    """|relative error| median / max per metric and the ranking verdict, for a panel corner."""
    lines = ["|error| median / max"] + [
        f"{NAMES[m]} {_percent(doc[m]['median_rel_err'])} / {_percent(doc[m]['max_rel_err'])}"
        for m in METRICS]
    return [*lines, f"ranking {'agrees' if doc['ranking_agrees'] else 'differs'}"]


def _summary(run: LoadValidation) -> str:
    """One run's summary numbers and ranking checks as a sentence of the section's text."""
    doc = run.doc
    errors = ", ".join(f"{NAMES[m]} {_percent(doc[m]['median_rel_err'])} / "
                       f"{_percent(doc[m]['max_rel_err'])}" for m in METRICS)
    computed = " (computed from its cells)" if run.path.suffix == ".parquet" else ""
    return (f"{run.label}{computed}: |relative error| median / max over "
            f"{len(doc['cells'])} cells: {errors}; " + "; ".join(ranking_lines(doc)) + ".")


def _hover(run: LoadValidation, c: dict[str, Any], side: str) -> str:
    """One point: where it is, its values on `side`, and (simulated) its signed errors."""
    v = c[side]
    fraction = c.get("rate_fraction")  # of the probed saturation rate, else of the highest
    load = "" if fraction is None or run.doc.get("saturation_rate") is None \
        else f" ({fraction:.2g}× saturation)"
    text = (f"<b>{c['policy']}</b> · {side} · {run.label}<br>{_fmt(c['rate'])} arrivals/s"
            f"{load} → {_fmt(v['throughput_tok_s'])} generated tokens/s<br>mean TPOT "
            f"{_fmt(v['mean_tpot_ms'])} ms · p99 TTFT {_fmt(v['p99_ttft_ms'])} ms<br>request "
            f"latency p99 {_fmt(v['p99_latency_s'])} s<br>mean batch "
            f"{_fmt(v.get('mean_batch'))} · accepted per step {_fmt(v.get('mean_accepted'))}")
    if side == "simulated":
        text += "<br>simulated − measured: " + ", ".join(
            f"{NAMES[m]} {'–' if c.get(f'err_{m}') is None else format(c[f'err_{m}'], '+.1%')}"
            for m in METRICS)
    return text
