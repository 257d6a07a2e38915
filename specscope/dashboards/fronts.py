"""Speedup against verification budget (the Pareto front of each method) and tokens/s against
tree size with the chosen tree marked, from optimize-tree output and sweeps."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import polars as pl

from specscope.dashboards.load import Results
from specscope.dashboards.style import Section, colour, facets, finish, rows_of

METHOD_COLUMNS = ("method", "algo", "policy")
"""Sweep columns that may name the method, first found wins."""
SWEEP_DIMENSIONS = ("target", "drafter", "runtime", "weight_bits", "batch", "rate")
"""Sweep columns a Pareto panel takes the best over (those present)."""
PARETO_GUIDE = (
    "Each line is one tree-construction method; each point is the best tree it finds with at "
    "most that many tokens in the verification pass, priced on that hardware. A curve that "
    "flattens means a larger budget buys nothing there: on fast accelerators the front keeps "
    "rising, on slow or launch-bound hardware it peaks early. Below the dotted line at 1× "
    "speculation loses to plain decoding. Sequoia's dynamic program is the exact optimum for "
    "its drafter, so the other methods can only touch it from below."
)
SIZE_GUIDE = (
    "Predicted tokens per second of every tree the methods chose, against its size. The star "
    "is the tree optimize-tree recommends (best predicted speedup over all methods and "
    "budgets). Look for where the curve bends: past it, each extra token of verification "
    "costs more time than the expected accepted tokens it adds."
)


def optimize_rows(results: Results) -> pl.DataFrame:
    """One row per (optimize-tree document, budget, method) of the Pareto rows, and each
    method's best row (budget null); `chosen` marks the document's recommended tree."""
    rows = []
    for opt in results.optimized:
        best = opt.doc["results"][0]["algo"]
        for budget, row in [(r.get("budget"), r) for r in opt.doc.get("pareto", [])] + [
                (None, r) for r in opt.doc["results"]]:
            rows.append({
                "panel": opt.label, "file": results.name(opt.path), "budget": budget,
                "algo": row["algo"], "n": float(row["n"]), "depth": float(row["depth"]),
                "expected_tokens": float(row["expected_tokens"]),
                "step_time_ms": float(row["step_time_ms"]),
                "tokens_per_s": float(row["tokens_per_s"]), "speedup": float(row["speedup"]),
                "chosen": budget is None and row["algo"] == best,
            })
    return pl.DataFrame(rows, schema_overrides={"budget": pl.Int64}, infer_schema_length=None)


def sweep_fronts(results: Results) -> pl.DataFrame:
    """From sweeps with hardware, method, budget and speedup columns: the best speedup per
    (hardware, method, budget) over the sweep's other dimensions, one panel per hardware."""
    frames = []
    for path, sweep in results.sweeps:
        method = next((c for c in METHOD_COLUMNS if c in sweep.columns), None)
        if method is None or "budget" not in sweep.columns:
            continue
        over = [c for c in SWEEP_DIMENSIONS if c in sweep.columns and sweep[c].n_unique() > 1]
        note = f" · best over {', '.join(over)}" if over else ""
        frames.append(
            sweep.drop_nulls("speedup")
            .group_by("hardware", method, "budget")
            .agg(pl.col("speedup").max())
            .select(panel=pl.format("{} (sweep{})", "hardware", pl.lit(note)),
                    file=pl.lit(results.name(path)), budget=pl.col("budget").cast(pl.Int64),
                    algo=pl.col(method).cast(pl.String), speedup=pl.col("speedup"))
        )
    return pl.concat(frames) if frames else pl.DataFrame()


def pareto_section(results: Results) -> Section:
    """Speedup against budget per method, one panel per hardware (and target, drafter)."""
    title = "Speedup against verification budget, per method and hardware"
    opt = optimize_rows(results) if results.optimized else pl.DataFrame()
    fronts = pl.concat([
        opt.filter(pl.col("budget").is_not_null()).select("panel", "file", "budget", "algo",
                                                          "speedup")
        if opt.height else pl.DataFrame(),
        sweep_fronts(results),
    ], how="diagonal_relaxed")
    if fronts.height == 0:
        return Section("pareto", title, PARETO_GUIDE, note="needs optimize-tree output with "
                       "--budgets (several budgets) or a sweep parquet")
    hover = _hover(opt, fronts)
    panels = fronts["panel"].unique(maintain_order=True).to_list()
    fig, positions = facets(panels)
    seen: set[str] = set()
    for (row, col), panel in zip(positions, panels, strict=True):
        part = hover.filter(pl.col("panel") == panel).sort("algo", "budget")
        _method_lines(fig, part, "budget", "speedup", row, col, seen)
        budgets = sorted(part["budget"].unique().to_list())
        fig.update_xaxes(type="log", tickvals=budgets, ticktext=[str(b) for b in budgets],
                         title_text="budget: tree size n ≤ (tokens)", row=row, col=col)
        fig.update_yaxes(title_text="speedup (×)" if col == 1 else None, row=row, col=col)
    fig.add_hline(y=1, line={"dash": "dot", "color": "grey"}, row="all", col="all")
    finish(fig, rows_of(positions), legend="method")
    return Section("pareto", title, PARETO_GUIDE, fig, tuple(fronts["file"].unique().sort()))


def _method_lines(fig: go.Figure, part: pl.DataFrame, x: str, y: str, row: int, col: int,
                  seen: set[str]) -> None:
    """One line per method of `part` (columns algo, `x`, `y`, hover) in one panel; each
    method enters the legend once."""
    for (algo,), line in part.group_by("algo", maintain_order=True):
        fig.add_trace(go.Scatter(
            x=line[x], y=line[y], mode="lines+markers", name=algo, legendgroup=algo,
            showlegend=algo not in seen, line={"color": colour(algo), "width": 2},
            marker={"size": 7}, text=line["hover"], hovertemplate="%{text}<extra></extra>"),
            row=row, col=col)
        seen.add(algo)


def _hover(opt: pl.DataFrame, fronts: pl.DataFrame) -> pl.DataFrame:
    """The fronts with a hover text: the chosen tree's size, depth, tokens/s and step time where
    the optimize-tree output gives them."""
    if opt.height:
        fronts = fronts.join(opt.select("panel", "budget", "algo", "n", "depth", "tokens_per_s",
                                        "step_time_ms"),
                             on=["panel", "budget", "algo"], how="left")
    else:
        fronts = fronts.with_columns(n=None, depth=None, tokens_per_s=None, step_time_ms=None)
    return fronts.with_columns(hover=pl.format(
        "<b>{}</b> · {}<br>budget n ≤ {} tokens<br>predicted speedup {}×", "algo", "panel",
        "budget", pl.col("speedup").round(2)) + pl.when(pl.col("n").is_not_null()).then(
        pl.format("<br>its tree: n = {}, depth {}<br>{} tokens/s predicted, step {} ms",
                  pl.col("n").round(1), pl.col("depth").round(1),
                  pl.col("tokens_per_s").round(0).cast(pl.Int64),
                  pl.col("step_time_ms").round(3))).otherwise(pl.lit("")))


def size_ticks(sizes: list[float]) -> list[float]:
    """Tick positions of a log tree-size axis: the sizes themselves when few, else powers of 2."""
    distinct = sorted(set(sizes))
    if len(distinct) <= 8:
        return distinct
    return [2.0**k for k in range(12) if min(distinct) / 2 < 2**k < max(distinct) * 2]


def size_section(results: Results) -> Section:
    """Predicted tokens/s against tree size, per method, the recommended tree starred."""
    title = "Tokens per second against tree size, recommended tree starred"
    if not results.optimized:
        return Section("size", title, SIZE_GUIDE, note="needs optimize-tree output "
                       "(optimize-tree --json -o DIR/trees.json)")
    rows = optimize_rows(results).unique(["panel", "algo", "n"], keep="first",
                                         maintain_order=True)
    chosen_rows = optimize_rows(results).filter("chosen")
    panels = rows["panel"].unique(maintain_order=True).to_list()
    fig, positions = facets(panels)
    seen: set[str] = set()
    hover = pl.format("<b>{}</b> · {}<br>tree size n = {} tokens, depth {}<br>{} tokens/s "
                      "predicted ({}× autoregressive)<br>{} tokens per step expected, step {} ms",
                      "algo", "panel", pl.col("n").round(1), pl.col("depth").round(1),
                      pl.col("tokens_per_s").round(0).cast(pl.Int64), pl.col("speedup").round(2),
                      pl.col("expected_tokens").round(2), pl.col("step_time_ms").round(3))
    for (row, col), panel in zip(positions, panels, strict=True):
        part = rows.filter(pl.col("panel") == panel).with_columns(hover=hover).sort("algo", "n")
        _method_lines(fig, part, "n", "tokens_per_s", row, col, seen)
        star = chosen_rows.filter(pl.col("panel") == panel).with_columns(hover=hover)
        fig.add_trace(go.Scatter(
            x=star["n"], y=star["tokens_per_s"], mode="markers", name="recommended tree",
            legendgroup="chosen", showlegend="chosen" not in seen,
            marker={"symbol": "star", "size": 20, "color": "gold",
                    "line": {"color": "black", "width": 1.5}},
            text="<b>recommended</b><br>" + star["hover"],
            hovertemplate="%{text}<extra></extra>"), row=row, col=col)
        seen.add("chosen")
        for s in star.iter_rows(named=True):  # a log axis places annotations at log10(x)
            fig.add_annotation(x=math.log10(s["n"]), y=s["tokens_per_s"], row=row, col=col,
                               ax=0, ay=-34, text=f"{s['algo']}, n = {s['n']:g}", showarrow=True,
                               font={"size": 12}, bgcolor="rgba(255,255,255,0.8)")
        fig.update_xaxes(type="log", tickvals=size_ticks(part["n"].to_list()),
                         title_text="tree size n (tokens verified per step)", row=row, col=col)
        fig.update_yaxes(title_text="tokens/s (predicted)" if col == 1 else None, row=row,
                         col=col, rangemode="tozero")
    finish(fig, rows_of(positions), legend="method")
    return Section("size", title, SIZE_GUIDE, fig, tuple(rows["file"].unique().sort()))
