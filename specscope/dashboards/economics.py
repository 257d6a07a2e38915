"""What a choice costs: goodput per GPU against tokens/s per user over a rate ladder, one line
per choice (a schedule, its best constant, no speculation, a policy), from `simulate --front`
runs; the points on the Pareto front of every choice marked, the cost per million tokens in the
hover."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from specscope.dashboards.load import Results
from specscope.dashboards.style import Section, colour, facets, finish, rows_of

GUIDE = (
    "Each point is one simulated run of a deployment at one arrival rate; a line joins one "
    "choice's runs as the load rises. Right is more tokens per second from each GPU within the "
    "stated latency limits (what the operator pays for), up is a faster stream for each user. "
    "Raising the load moves a choice down and right; the outlined points are the Pareto front "
    "over every choice: no other run gives more of both. Hover for the rate, TTFT and the cost "
    "per million output tokens at the stated GPU-hour price."
)


def front_table(results: Results) -> pl.DataFrame:
    """One row per (simulate run with a front, choice, rate): panel, choice, the front's
    fields, the file."""
    rows = []
    for path, summary in results.simulations:
        panel = f"{summary.get('hardware')} · {summary.get('target')} · {summary.get('source')}"
        rows += [r | {"panel": panel, "file": results.name(path)}
                 for r in summary.get("front") or []]
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def economics_section(results: Results) -> Section:
    """Tokens/s per user against tokens/s per GPU, one line per choice, one panel per run."""
    title = "Goodput per GPU against tokens per user, per choice (the cost of a choice)"
    table = front_table(results)
    if table.height == 0:
        return Section("economics", title, GUIDE, note="needs simulate output with a front "
                       "(specscope simulate ... --front 0.25,0.5,1,2 -o DIR/run.parquet)")
    table = table.with_columns(hover=pl.format(
        "<b>{}</b> · {} arrivals/s<br>{} good tok/s per GPU · {} tok/s per user<br>TTFT {} ms "
        "· $ {} per million tokens<br>{}", "choice", pl.col("rate").round(2),
        *(pl.col(c).round(r) for c, r in (("goodput_per_gpu", 0),
                                          ("tokens_per_s_per_user", 1), ("mean_ttft_ms", 0),
                                          ("usd_per_million_tokens", 3))), "file"))
    panels = table["panel"].unique(maintain_order=True).to_list()
    fig, positions = facets(panels)
    seen: set[str] = set()
    for (row, col), panel in zip(positions, panels, strict=True):
        part = table.filter(pl.col("panel") == panel)
        for (choice,), runs in part.sort("choice", "rate").group_by("choice",
                                                                    maintain_order=True):
            fig.add_trace(go.Scatter(
                x=runs["goodput_per_gpu"], y=runs["tokens_per_s_per_user"],
                mode="lines+markers", name=choice, legendgroup=choice,
                showlegend=choice not in seen, line={"color": colour(choice)},
                marker={"size": [13 if f else 7 for f in runs["on_front"]],
                        "line": {"width": [2 if f else 0 for f in runs["on_front"]],
                                 "color": "black"}},
                text=runs["hover"], hovertemplate="%{text}<extra></extra>"), row=row, col=col)
            seen.add(choice)
        fig.update_xaxes(title_text="goodput per GPU (tokens/s)", rangemode="tozero", row=row,
                         col=col)
        fig.update_yaxes(title_text="tokens/s per user" if col == 1 else None,
                         rangemode="tozero", row=row, col=col)
    finish(fig, rows_of(positions), legend="choice")
    return Section("economics", title, GUIDE, fig, tuple(table["file"].unique().sort()))
