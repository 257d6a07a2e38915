"""Best speedup per hardware × runtime × target × weight format: Transformer against SSM against
hybrid targets, 16-bit against 4-bit weights.

From a sweep when the folder holds one (the best cell over its other dimensions); otherwise
computed here from the shipped hardware profiles (and any profile in the folder) and the model
catalogue, with the acceptance vector fitted on a trace in the folder held fixed, so the table
isolates what the hardware and the target's architecture do to the price of speculation: the
exact Sequoia optimum over trees of n ≤ 64 tokens, depth ≤ 12, for each cell.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from specscope.dashboards.load import Results, analytic_cells, profiles
from specscope.dashboards.style import Section, finish
from specscope.hw_profiles import CostModel, HardwareProfile
from specscope.hw_profiles.pricing import Pricing
from specscope.models import get_model, list_models
from specscope.names import RUNTIMES
from specscope.optimizers.compare import DP_REFERENCE, Setup, compare
from specscope.trace import AcceptanceModel, default_source, source_of, trace_sources

TARGETS = ("llama-3.1-8b", "mamba2-2.7b", "bamba-9b")
"""One Transformer, one state-space and one hybrid target of similar size."""
DRAFTER = "llama-68m"
WEIGHT_BITS = (16, 4)
BUDGETS = (8, 16, 32, 64)
MAX_DEPTH = 12
ARCH_NAMES = {"transformer": "Transformer", "ssm": "SSM", "hybrid": "hybrid"}
GUIDE = (
    "Best predicted speedup over autoregressive decoding for each hardware and runtime (rows) "
    "and target (columns: architecture and weight format), each cell the best tree of any size "
    "up to its budget. Read across a row to see which architectures gain most from "
    "speculation on that machine, down a column to see which hardware and runtime make it pay. "
    "4-bit weights make the target's autoregressive step cheaper, so the same tree often gains "
    "less; state-space targets pay per token of the tree, so their gains shrink on fast "
    "hardware. “no fit”: the target and drafter do not fit in the device's memory."
)


def hardware_section(results: Results) -> Section:
    """The hardware comparison heatmap, from a sweep or computed from the profiles."""
    title = "Best speedup per hardware, runtime and target (Transformer / SSM / hybrid, "\
            "16-bit / 4-bit)"
    table, how, files = sweep_table(results)
    if table is None:
        computed = analytic_table(results)
        if computed is None:
            return Section("hardware", title, GUIDE, note="needs a sweep parquet or a trace "
                           "(its acceptance prices every hardware profile)")
        table, how, files = computed
    return Section("hardware", title, f"{GUIDE} {how}", _heatmap(table), files)


def sweep_table(results: Results) -> tuple[pl.DataFrame | None, str, tuple[str, ...]]:
    """The best analytic cell per (hardware, runtime, target, weight bits) of the sweeps, at
    their smallest batch; a combination whose every cell was skipped keeps the first reason."""
    frames, files = [], []
    keys = ("hardware", "runtime", "target", "weight_bits")
    for path, sweep in results.sweeps:
        cells = analytic_cells(sweep)
        if cells.height == 0 or not set(keys) <= set(cells.columns):
            continue
        best = (cells.sort("speedup", descending=True).group_by(keys).first()
                .select(*keys, "speedup", "n", "depth", "tokens_per_s", "drafter", "method"))
        skipped = (sweep.filter(pl.col("status") == "skipped", pl.col("mode") == "analytic")
                   .group_by(keys).agg(pl.col("reason").first())
                   .join(best, on=list(keys), how="anti"))
        frames += [best, skipped]
        files.append(results.name(path))
    if not files:
        return None, "", ()
    return (pl.concat(frames, how="diagonal_relaxed"),
            "From the sweep: each cell is its best method, budget, drafter and tensor-parallel "
            "degree at the sweep's smallest batch.", tuple(files))


def analytic_table(results: Results) -> tuple[pl.DataFrame, str, tuple[str, ...]] | None:
    """Every profile (the folder's, then the shipped ones) × runtime × `TARGETS` ×
    `WEIGHT_BITS`, priced with the acceptance of `DRAFTER` in the first trace that has it (else
    the first trace's first draft-model source, else its first source)."""
    if not results.traces:
        return None
    own = source_of(DRAFTER)
    path, trace = next(((p, t) for p, t in results.traces if own in trace_sources(t)),
                       results.traces[0])
    source = own if own in trace_sources(trace) else default_source(trace)
    model = AcceptanceModel.from_trace(trace, source)
    context = int(trace.mean_context_len)
    rows = [_cell(label, hw, runtime, target, bits, model, context)
            for label, hw in profiles(results) for runtime in _runtimes(hw)
            for target in TARGETS for bits in WEIGHT_BITS]
    how = (f"Computed from the hardware profiles: acceptance of {source} fitted on "
           f"{results.name(path)} (p₁ = {float(model.table[0, 0]):.2f}), {DRAFTER} priced as "
           f"the drafter, context {context} tokens, batch 1, Sequoia's exact optimum with n ≤ "
           f"{max(BUDGETS)}, depth ≤ {MAX_DEPTH}.")
    return pl.DataFrame(rows, infer_schema_length=None), how, (results.name(path),)


def _runtimes(hw: HardwareProfile) -> list[str]:
    return sorted(hw.runtimes, key=lambda r: _order(RUNTIMES, r))


def _cell(label: str, hw: HardwareProfile, runtime: str, target: str, bits: int,
          model: AcceptanceModel, context: int) -> dict[str, object]:
    """One priced cell: the best Sequoia tree within the budgets, or no speedup when the
    target and drafter do not fit in device memory."""
    target_cost = CostModel(hw, get_model(target), weight_bits=bits, runtime=runtime)
    drafter_cost = CostModel(hw, get_model(DRAFTER), runtime=runtime)
    tokens = context + max(BUDGETS)
    memory = target_cost.memory_bytes(1, tokens) + drafter_cost.memory_bytes(1, tokens)
    row: dict[str, object] = {"hardware": label, "runtime": runtime, "target": target,
                              "weight_bits": bits, "speedup": None, "n": None, "depth": None,
                              "tokens_per_s": None, "reason": None}
    if memory > hw.memory_bytes:
        row["reason"] = (f"needs {memory / 1e9:.1f} GB with the drafter: does not fit in "
                         f"{hw.memory_bytes / 1e9:.0f} GB")
    else:
        pricing = Pricing(target_cost, drafter_cost, context)
        setup = Setup(p=model.p, source=model.source, pricing=pricing, max_depth=MAX_DEPTH)
        best = compare(setup, [DP_REFERENCE], budgets=list(BUDGETS)).scores[0]
        row |= {"speedup": best.speedup, "n": best.n, "depth": best.depth,
                "tokens_per_s": best.tokens_per_s}
    return row


def _column(target: str, bits: int) -> str:
    arch = get_model(target).arch if target in list_models() else ""
    return f"{target}<br>{ARCH_NAMES.get(arch, arch)}, {'bf16' if bits == 16 else f'{bits}-bit'}"


def _heatmap(table: pl.DataFrame) -> go.Figure:
    """Rows hardware · runtime, columns target · weight format, colour and text the speedup."""
    cells = {((r["hardware"], r["runtime"]), (r["target"], int(r["weight_bits"]))): r
             for r in table.iter_rows(named=True)}
    rows = sorted({k[0] for k in cells}, key=lambda hr: (hr[0], _order(RUNTIMES, hr[1])))
    cols = sorted({k[1] for k in cells}, key=lambda tb: (_order(TARGETS, tb[0]), -tb[1]))
    labels = [f"{h} · {r}" for h, r in rows]
    columns = [_column(t, b) for t, b in cols]
    grid = [[cells.get((r, c)) for c in cols] for r in rows]
    fig = go.Figure(go.Heatmap(
        z=[[cell["speedup"] if cell else None for cell in line] for line in grid],
        x=columns, y=labels, text=[[_text(cell) for cell in line] for line in grid],
        texttemplate="%{text}",
        customdata=[[_hover(label, column, cell) for column, cell in zip(columns, line,
                                                                         strict=True)]
                    for label, line in zip(labels, grid, strict=True)],
        hovertemplate="%{customdata}<extra></extra>", colorscale="Viridis", xgap=2, ygap=2,
        colorbar={"title": {"text": "speedup (×)"}}))
    fig.update_yaxes(autorange="reversed", title_text="hardware · runtime", showgrid=False)
    fig.update_xaxes(side="top", title_text="target · weight format", showgrid=False)
    finish(fig, height=40 * len(rows))
    return fig.update_layout(margin={"t": 120})  # the column labels sit on top


def _order(known: tuple[str, ...], name: str) -> int:
    return known.index(name) if name in known else len(known)


def _text(cell: dict | None) -> str:
    if not cell:
        return ""
    if cell["speedup"] is None:
        return "no fit" if "fit" in str(cell.get("reason")) else "skipped"
    size = f"<br>n={cell['n']:g}" if cell.get("n") is not None else ""
    return f"{cell['speedup']:.2f}×{size}"


def _hover(row: str, column: str, cell: dict | None) -> str:
    head = f"<b>{row}</b><br>{column.replace('<br>', ' · ')}"
    if not cell:
        return f"{head}<br>not in the results"
    if cell["speedup"] is None:
        return f"{head}<br>{cell.get('reason')}"
    detail = "".join(f"<br>{label} {cell[k]:{fmt}}" for k, label, fmt in (
        ("method", "method", "s"), ("drafter", "drafter", "s"), ("n", "tree size n =", "g"),
        ("depth", "depth", "g"), ("tokens_per_s", "tokens/s predicted:", ",.0f"))
        if cell.get(k) is not None)
    return f"{head}<br>best speedup {cell['speedup']:.2f}×{detail}"
