"""Acceptance by depth and rank per drafter source, with its confidence, from traces
(`AcceptanceModel.from_trace`, depth-dependent)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from specscope.dashboards.load import Results
from specscope.dashboards.style import Section, facets, finish, rows_of
from specscope.trace import AcceptanceModel, trace_sources

MAX_DEPTH = 8
MAX_RANK = 8
"""Depths and ranks drawn (deeper rows and lower ranks are estimated on few rows)."""
GUIDE = (
    "Estimated acceptance of each drafter source at each depth of the tree (rows, 1 = the first "
    "drafted token) and candidate rank (columns, 1 = the drafter's best guess), fitted on the "
    "trace with its 95% confidence half-width (±) printed under each value. For ranked drafters "
    "a cell is the probability that the k-th candidate is the one accepted, given the path above "
    "it was accepted; for sequence drafters (n-gram, suffix: one proposal) the probability that "
    "the next proposed token matches. Mass concentrated in rank 1 favours deep chains; mass "
    "spread over ranks favours wide trees. Wide intervals mean too few trace rows reach that "
    "depth to trust it."
)


def acceptance_section(results: Results) -> Section:
    """One heatmap of p[depth, rank] per (trace, drafter source)."""
    title = "Acceptance by depth and rank, per drafter source (95% confidence)"
    if not results.traces:
        return Section("acceptance", title, GUIDE, note="needs a trace parquet "
                       "(specscope collect, or specscope trace synth)")
    models = [(results.name(path), AcceptanceModel.from_trace(trace, source,
                                                              depth_dependent=True,
                                                              max_depth=MAX_DEPTH))
              for path, trace in results.traces for source in trace_sources(trace)]
    fig, positions = facets([f"{m.source} · {name}" for name, m in models])
    top = max(float(m.table.max()) for _, m in models)
    for (row, col), (name, m) in zip(positions, models, strict=True):
        p = m.table[:, :MAX_RANK]
        low, high = (np.atleast_2d(a)[:, :MAX_RANK] for a in (m.low, m.high))
        n = np.atleast_2d(m.n)[:, :MAX_RANK]
        depths = np.arange(1, p.shape[0] + 1)
        ranks = np.arange(1, p.shape[1] + 1)
        sequence = m.method == "match_len"
        what = ("P(proposal token at this depth matches | the ones above matched)" if sequence
                else "P(candidate of this rank is the accepted one | path above accepted)")
        hover = [[f"<b>{m.source}</b> · {name}<br>depth {d}, rank {k}<br>{what}<br>p = "
                  f"{p[i, j]:.3f}, 95% CI {low[i, j]:.3f}–{high[i, j]:.3f}<br>from "
                  f"{int(n[i, j]):,} trace rows" for j, k in enumerate(ranks)]
                 for i, d in enumerate(depths)]
        text = [[f"{p[i, j]:.2f}<br>±{(high[i, j] - low[i, j]) / 2:.2f}"
                 for j in range(p.shape[1])] for i in range(p.shape[0])]
        fig.add_trace(go.Heatmap(
            z=p, x=ranks, y=depths, coloraxis="coloraxis", text=text,
            texttemplate="%{text}", textfont={"size": 10}, customdata=hover,
            hovertemplate="%{customdata}<extra></extra>", xgap=1, ygap=1), row=row, col=col)
        fig.update_xaxes(title_text="proposal (one rank)" if sequence else "candidate rank",
                         tickvals=ranks, row=row, col=col)
        fig.update_yaxes(title_text="depth" if col == 1 else None, tickvals=depths,
                         autorange="reversed", row=row, col=col)
    fig.update_layout(coloraxis={"colorscale": "Blues", "cmin": 0, "cmax": top,
                                 "colorbar": {"title": {"text": "P(accept)"}}})
    finish(fig, rows_of(positions))
    return Section("acceptance", title, GUIDE, fig,
                   tuple(results.name(path) for path, _ in results.traces))
