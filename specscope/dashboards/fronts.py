"""Speedup against verification budget (the Pareto front of each method) and tokens/s against
tree size with the chosen tree marked, from optimize-tree output and sweeps."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import polars as pl

from specscope.dashboards.load import Results, analytic_cells
from specscope.dashboards.style import Section, colour, facets, finish, rows_of

SLICE = ("target", "drafter", "runtime", "weight_bits", "tp", "ep", "precision",
         "expert_precision", "kv_bits", "batch", "context", "acceptance")
"""Sweep columns that, with the hardware, fix one setup whose methods a panel compares."""
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
    "is the recommended tree (best predicted speedup over all methods and budgets; for a "
    "sweep, the hardware's best cell, its panel the setup of that cell). Look for where the "
    "curve bends: past it, each extra token of verification costs more time than the expected "
    "accepted tokens it adds."
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


def _analytic_sweeps(results: Results) -> list[tuple[str, pl.DataFrame, list[str]]]:
    """(file, analytic cells, the `SLICE` columns it has) of each sweep with analytic cells."""
    out = []
    for path, sweep in results.sweeps:
        cells = analytic_cells(sweep)
        if cells.height:
            out.append((results.name(path), cells, [c for c in SLICE if c in cells.columns]))
    return out


def sweep_fronts(results: Results) -> pl.DataFrame:
    """From analytic sweeps: per (hardware, method, budget) the best cell over the sweep's other
    dimensions at its smallest batch, one panel per hardware; `detail` names the cell."""
    frames = []
    for file, cells, fixed in _analytic_sweeps(results):
        frames.append(
            cells.sort("speedup", descending=True).group_by("hardware", "method", "budget")
            .first().select(
                panel=pl.format("{} (sweep, batch {})", "hardware", "batch"),
                file=pl.lit(file), budget="budget", algo="method",
                speedup="speedup", n="n", depth="depth", tokens_per_s="tokens_per_s",
                step_time_ms="step_time_ms",
                detail=pl.concat_str([pl.col(c).cast(pl.String) for c in fixed],
                                     separator=" · ", ignore_nulls=True)))
    return pl.concat(frames).sort("panel") if frames else pl.DataFrame()


def sweep_sizes(results: Results) -> pl.DataFrame:
    """From analytic sweeps, per hardware: every method and budget of the setup (`SLICE`)
    holding the hardware's best cell, that cell `chosen`; the `optimize_rows` columns."""
    frames = []
    for file, cells, fixed in _analytic_sweeps(results):
        best = cells.sort("speedup", descending=True).group_by("hardware").first().sort(
            "hardware")
        for cell in best.iter_rows(named=True):
            part = cells.filter(pl.col("hardware") == cell["hardware"],
                                *(pl.col(c).eq_missing(cell[c]) for c in fixed))
            frames.append(part.select(
                panel=pl.lit(f"{cell['hardware']} · {_setup(cell)} (sweep)"),
                file=pl.lit(file), budget="budget", algo="method", n="n",
                depth="depth", expected_tokens="expected_tokens", step_time_ms="step_time_ms",
                tokens_per_s="tokens_per_s", speedup="speedup",
                chosen=pl.col("key") == cell["key"]))
    return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()


def _setup(cell: dict) -> str:
    """A sweep cell's target, drafter and runtime, and its tp, ep, weight bits and number
    formats where not the defaults."""
    words = [str(cell[c]) for c in ("target", "drafter", "runtime") if cell.get(c)]
    words += [f"tp {cell['tp']}"] if cell.get("tp", 1) != 1 else []
    words += [f"ep {cell['ep']}"] if (cell.get("ep") or 1) != 1 else []
    words += [f"{cell['weight_bits']}-bit"] if cell.get("weight_bits", 16) != 16 else []
    words += [str(cell["precision"])] if cell.get("precision") not in (None, "bf16") else []
    words += [f"{cell['expert_precision']} experts"] if cell.get("expert_precision") else []
    words += [f"kv {cell['kv_bits']}-bit"] if (cell.get("kv_bits") or 16) != 16 else []
    return " · ".join(words)


def pareto_section(results: Results) -> Section:
    """Speedup against budget per method, one panel per hardware (and target, drafter)."""
    title = "Speedup against verification budget, per method and hardware"
    columns = ["panel", "file", "budget", "algo", "speedup", "n", "depth", "tokens_per_s",
               "step_time_ms"]
    opt = optimize_rows(results) if results.optimized else pl.DataFrame()
    fronts = pl.concat([
        opt.filter(pl.col("budget").is_not_null()).select(columns) if opt.height
        else pl.DataFrame(),
        sweep_fronts(results),
    ], how="diagonal_relaxed")
    if fronts.height == 0:
        return Section("pareto", title, PARETO_GUIDE, note="needs optimize-tree output with "
                       "--budgets (several budgets) or an analytic sweep")
    hover = _hover(fronts)
    panels = fronts["panel"].unique(maintain_order=True).to_list()
    fig, positions = facets(panels)
    seen: set[str] = set()
    for (row, col), panel in zip(positions, panels, strict=True):
        part = hover.filter(pl.col("panel") == panel).sort("algo", "budget")
        _method_lines(fig, part, "budget", "speedup", row, col, seen)
        fig.update_xaxes(type="log", tickvals=size_ticks(part["budget"].to_list()),
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


def _hover(fronts: pl.DataFrame) -> pl.DataFrame:
    """The fronts with a hover text: the tree's size, depth, tokens/s and step time, and for a
    sweep the setup of its best cell (`detail`)."""
    if "detail" not in fronts.columns:
        fronts = fronts.with_columns(detail=pl.lit(None, pl.String))
    return fronts.with_columns(hover=pl.format(
        "<b>{}</b> · {}<br>budget n ≤ {} tokens<br>predicted speedup {}×<br>its tree: n = {}, "
        "depth {}<br>{} tokens/s predicted, step {} ms", "algo", "panel", "budget",
        pl.col("speedup").round(2), pl.col("n").round(1), pl.col("depth").round(1),
        pl.col("tokens_per_s").round(0).cast(pl.Int64), pl.col("step_time_ms").round(3))
        + pl.format("<br>best cell: {}", "detail").fill_null(""))


def size_ticks(sizes: list[float]) -> list[float]:
    """Tick positions of a log tree-size axis: the powers of 2 near the sizes' range, or the
    sizes themselves when fewer than two are near."""
    low, high = min(sizes), max(sizes)
    powers = [2.0**k for k in range(16) if low / 2 < 2**k < high * 2]  # the axis clips
    return powers if len(powers) >= 2 else sorted(set(sizes))


def size_section(results: Results) -> Section:
    """Predicted tokens/s against tree size, per method, the recommended tree starred."""
    title = "Tokens per second against tree size, recommended tree starred"
    every = pl.concat([optimize_rows(results) if results.optimized else pl.DataFrame(),
                       sweep_sizes(results)], how="diagonal_relaxed")
    if every.height == 0:
        return Section("size", title, SIZE_GUIDE, note="needs optimize-tree output "
                       "(optimize-tree --json -o DIR/trees.json) or an analytic sweep")
    rows = every.unique(["panel", "algo", "n"], keep="first", maintain_order=True)
    chosen_rows = every.filter("chosen")
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
