"""Latency against throughput under load, one curve per serving policy, from simulations and
simulated sweeps; one panel per setup (hardware, target, drafter, batch limit)."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from specscope.dashboards.load import Results, ok_rows
from specscope.dashboards.style import Section, colour, facets, finish, rows_of

SETUP = ("hardware", "target", "source", "workload")
"""Summary fields that name a simulate run's panel (with its batch limit)."""
METRICS = ("throughput_tok_s", "goodput_tok_s", "p50_tpot_ms", "p99_tpot_ms", "p50_ttft_ms",
           "p99_latency_s", "mean_accepted", "mean_batch")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
GUIDE = (
    "Each point is one simulated serving run at a given arrival rate; a line joins one policy's "
    "runs as the load rises. Right is more throughput, down is a faster stream of tokens for "
    "each user. Speculation shortens the time per output token while the server has spare "
    "compute; as batches fill, verifying drafts that get rejected costs throughput, so the "
    "speculating curves bend up earlier. Where curves cross, the best policy changes with "
    "load. Hover for TTFT, the 99th-percentile request latency and the batch size."
)


def serving_table(results: Results) -> pl.DataFrame:
    """One row per simulated run: panel (setup), policy, method, rate, file and `METRICS`."""
    frames = []
    if results.simulations:
        runs = pl.DataFrame([s | {"file": results.name(p)} for p, s in results.simulations],
                            infer_schema_length=None)
        runs = runs.with_columns(pl.lit(None).alias(c) for c in (*SETUP, *METRICS, "max_batch")
                                 if c not in runs.columns)
        frames.append(runs.with_columns(
            panel=pl.concat_str([pl.col(c).cast(pl.String) for c in SETUP], separator=" · ",
                                ignore_nulls=True)
            + pl.format(" · batch ≤ {}", "max_batch").fill_null(""),
            method=pl.col("policy"), budget=pl.lit(None, pl.Int64)))
    for path, sweep in results.sweeps:
        rows = ok_rows(sweep).filter(pl.col("throughput_tok_s").is_not_null()) \
            if "throughput_tok_s" in sweep.columns else pl.DataFrame()
        if rows.height:
            frames.append(_with_baseline(rows).with_columns(
                panel=pl.format("{} · {} · draft {} · batch ≤ {}", "hardware", "target",
                                "drafter", "batch"),
                policy=pl.when(pl.col("method") == "none").then(pl.lit("none")).otherwise(
                    pl.format("{} n={}", "method", "budget")),
                file=pl.lit(results.name(path))))
    columns = ["panel", "policy", "method", "budget", "rate", "file", *METRICS]
    return pl.concat([f.select(columns) for f in frames], how="vertical_relaxed") if frames \
        else pl.DataFrame()


def _with_baseline(rows: pl.DataFrame) -> pl.DataFrame:
    """Sweep rows with plain decoding (method none, which has no drafter) repeated in every
    drafter's panel of the same hardware, target and batch, as the baseline to beat."""
    setup = ["hardware", "target", "batch"]
    plain = rows.filter(pl.col("method") == "none").drop("drafter")
    drafted = rows.filter(pl.col("method") != "none")
    if drafted.height == 0:
        return rows
    panels = drafted.select(*setup, "drafter").unique()
    return pl.concat([drafted, plain.join(panels, on=setup).select(drafted.columns)])


def serving_section(results: Results) -> Section:
    """TPOT against throughput, one line per policy, one panel per setup."""
    title = "Latency against throughput under load, per speculation policy"
    table = serving_table(results)
    if table.height == 0:
        return Section("serving", title, GUIDE, note="needs simulate output (specscope "
                       "simulate ... -o DIR/run.parquet at several --rate values) or a "
                       "simulated sweep")
    table = table.with_columns(hover=pl.format(
        "<b>{}</b> · {}<br>{} arrivals/s → {} generated tokens/s (goodput {})<br>TPOT p50 {} ms,"
        " p99 {} ms · TTFT p50 {} ms<br>request latency p99 {} s<br>accepted drafts per step "
        "{} · mean batch {}<br>{}", "policy", "panel", "rate",
        *(pl.col(c).round(r) for c, r in (("throughput_tok_s", 0), ("goodput_tok_s", 0),
                                          ("p50_tpot_ms", 2), ("p99_tpot_ms", 2),
                                          ("p50_ttft_ms", 1), ("p99_latency_s", 3),
                                          ("mean_accepted", 2), ("mean_batch", 1))), "file"))
    setups = table["panel"].unique(maintain_order=True).to_list()
    metrics = [("p50_tpot_ms", "median time per output token (ms)")]
    if len(setups) == 1:  # room for the tail as well
        metrics.append(("p99_latency_s", "p99 request latency (s)"))
    panels = [(setup, metric) for setup in setups for metric in metrics]
    fig, positions = facets([f"{setup}<br>{label}" if len(metrics) > 1 else setup
                             for setup, (_, label) in panels])
    seen: set[str] = set()
    for (row, col), (setup, (metric, label)) in zip(positions, panels, strict=True):
        part = table.filter(pl.col("panel") == setup).sort("policy", "rate")
        for (policy,), runs in part.group_by("policy", maintain_order=True):
            budgets = sorted(part.filter(pl.col("method") == runs["method"][0])["budget"]
                             .drop_nulls().unique().to_list())
            budget = runs["budget"][0]
            fig.add_trace(go.Scatter(
                x=runs["throughput_tok_s"], y=runs[metric], mode="lines+markers",
                name=policy, legendgroup=policy, showlegend=policy not in seen,
                marker={"size": 7}, line={"color": colour(runs["method"][0]), "dash": DASHES[
                    budgets.index(budget) % len(DASHES) if budget in budgets else 0]},
                text=runs["hover"], hovertemplate="%{text}<extra></extra>"), row=row, col=col)
            seen.add(policy)
        fig.update_xaxes(title_text="throughput (generated tokens/s)", rangemode="tozero",
                         row=row, col=col)
        fig.update_yaxes(title_text=label if col == 1 or len(metrics) > 1 else None,
                         rangemode="tozero", row=row, col=col)
    finish(fig, rows_of(positions), legend="policy", legend_rows=1 + len(seen) // 8)
    return Section("serving", title, GUIDE, fig, tuple(table["file"].unique().sort()))
