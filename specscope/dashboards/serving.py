"""Latency against throughput under load, one curve per serving policy, from simulations."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from specscope.dashboards.load import Results
from specscope.dashboards.style import Section, colour, finish

SETUP = ("hardware", "target", "source", "workload", "max_batch", "replicas")
"""Summary fields that, with the policy, name one curve (the arrival rate varies along it)."""
PANELS = (("p50_tpot_ms", "median time per output token (ms)"),
          ("p90_latency_s", "p90 end-to-end request latency (s)"))
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
GUIDE = (
    "Each point is one simulated serving run at a given arrival rate; a line joins the runs of "
    "one policy and setup as the load rises. Right is more throughput, down is faster. "
    "Speculation shortens each request's time per token while the server has spare compute; "
    "as batches fill, verifying drafts that are rejected costs throughput, so the "
    "speculating curves bend up earlier. Where curves cross, the best policy changes with load."
)


def simulation_table(results: Results) -> pl.DataFrame:
    """One row per simulated run (its summary, the file and the setup label)."""
    rows = [summary | {"file": results.name(path)} for path, summary in results.simulations]
    table = pl.DataFrame(rows, infer_schema_length=None)
    for name in SETUP:
        if name not in table.columns:
            table = table.with_columns(pl.lit(None).alias(name))
    return table.with_columns(setup=pl.concat_str(
        [pl.col(c).cast(pl.String) for c in SETUP[:4]], separator=" · ", ignore_nulls=True)
        + pl.format(" · batch ≤ {}", pl.col("max_batch")).fill_null(""))


def serving_section(results: Results) -> Section:
    """TPOT and request latency against throughput, one line per (policy, setup)."""
    title = "Latency against throughput under load, per speculation policy"
    if not results.simulations:
        return Section("serving", title, GUIDE, note="needs simulate output "
                       "(specscope simulate ... -o DIR/run.parquet, at several --rate values)")
    table = simulation_table(results)
    for column in ("p50_tpot_ms", "p90_latency_s", "p50_ttft_ms", "p90_tpot_ms",
                   "mean_accepted", "mean_batch", "goodput_tok_s"):
        if column not in table.columns:
            table = table.with_columns(pl.lit(None, pl.Float64).alias(column))
    table = table.with_columns(hover=pl.format(
        "<b>{}</b> · {}<br>{} arrivals/s → {} generated tokens/s (goodput {})<br>TTFT p50 {} ms "
        "· TPOT p50 {} ms, p90 {} ms<br>request latency p90 {} s<br>accepted drafts per step "
        "{} · mean batch {}<br>{}", "policy", "setup", "rate",
        pl.col("throughput_tok_s").round(0), pl.col("goodput_tok_s").round(0),
        pl.col("p50_ttft_ms").round(1), pl.col("p50_tpot_ms").round(2),
        pl.col("p90_tpot_ms").round(2), pl.col("p90_latency_s").round(3),
        pl.col("mean_accepted").round(2), pl.col("mean_batch").round(1), "file"))
    setups = table["setup"].unique(maintain_order=True).to_list()
    fig = make_subplots(rows=1, cols=2, subplot_titles=[label for _, label in PANELS],
                        horizontal_spacing=0.1)
    for col, (metric, label) in enumerate(PANELS, start=1):
        for (policy, setup), runs in table.sort("rate").group_by("policy", "setup",
                                                                 maintain_order=True):
            name = policy if len(setups) == 1 else f"{policy} · {setup}"
            fig.add_trace(go.Scatter(
                x=runs["throughput_tok_s"], y=runs[metric], mode="lines+markers", name=name,
                legendgroup=name, showlegend=col == 1, marker={"size": 8},
                line={"color": colour(policy), "dash": DASHES[setups.index(setup) % 5]},
                text=runs["hover"], hovertemplate="%{text}<extra></extra>"), row=1, col=col)
        fig.update_xaxes(title_text="throughput (generated tokens/s)", rangemode="tozero",
                         row=1, col=col)
        fig.update_yaxes(title_text=label, rangemode="tozero", row=1, col=col)
    finish(fig, height=400, legend="policy" if len(setups) == 1 else "policy · setup",
           legend_rows=len(setups))
    return Section("serving", title, GUIDE + f" Setup: {'; '.join(setups)}.", fig,
                   tuple(table["file"].unique().sort()))
