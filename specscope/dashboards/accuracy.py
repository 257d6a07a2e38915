"""Published speedups predicted against published: one point per row of every published set of
the `specscope accuracy --json` document (the figure of docs/accuracy.md's tables)."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from specscope.dashboards.load import Results
from specscope.dashboards.style import Section, colour, finish

GUIDE = (
    "Each point is one published row (a paper's setup, or a serving benchmark's row at batch "
    "> 1), its speedup as specscope prices it against the speedup its source measured, "
    "coloured by the family (system) that prices it; each published set has its own marker "
    "(first in the legend). "
    "On the diagonal the prediction is exact; above it specscope promises more than was "
    "measured. Look for a family whose points leave the diagonal together (a mechanism that "
    "misses a term) and for points on opposite sides of the dotted 1× lines (a wrong verdict "
    "on whether speculation pays). Rows whose source published tokens/s rather than a speedup "
    "are not drawn. docs/accuracy.md has the same rows as tables per family, engine and "
    "hardware, with the validation runs against real torch runs."
)
SYMBOLS = ("circle", "diamond", "square", "triangle-up", "x")
"""The marker of each published set, in the document's order."""
LEGEND_COLUMNS = 6
"""Legend entries (sets, then families) per row."""


def accuracy_section(results: Results) -> Section:
    """Predicted against published speedup of every row of the folder's accuracy documents."""
    title = "Published speedups: predicted against published (specscope accuracy)"
    if not results.accuracy:
        return Section("accuracy", title, GUIDE,
                       note="needs `specscope accuracy --json -o DIR/accuracy.json`")
    fig = go.Figure()
    families: set[str] = set()
    many = len(results.accuracy) > 1
    values = []
    for path, doc in results.accuracy:
        for k, published in enumerate(doc["published"]):
            label = f"{results.name(path)}: {published['set']}" if many else published["set"]
            points = [p for p in published["points"] if p["compared"] == "speedup"]
            symbol = SYMBOLS[k % len(SYMBOLS)]
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=label,
                                     marker={"color": "#5f6368", "symbol": symbol, "size": 8}))
            for family in sorted({p["family"] for p in points}):
                members = [p for p in points if p["family"] == family]
                values += [v for p in members for v in (p["published"], p["predicted"])]
                fig.add_trace(go.Scatter(
                    x=[p["published"] for p in members], y=[p["predicted"] for p in members],
                    mode="markers", name=family, legendgroup=family,
                    showlegend=family not in families,
                    marker={"color": colour(family), "symbol": symbol,
                            "size": 8, "opacity": 0.8},
                    text=[f"{p['name']} ({label})<br>{p['engine']} on {p['hardware']}, batch "
                          f"{p['batch']}<br>predicted {p['predicted']:.2f}×, published "
                          f"{p['published']:.2f}× ({p['rel_err']:+.1%})" for p in members],
                    hovertemplate="%{text}<extra></extra>"))
                families.add(family)
    low, high = min([1.0, *values]), max([1.0, *values])
    fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="exact",
                             line={"color": "#5f6368", "dash": "dash", "width": 1},
                             hoverinfo="skip", showlegend=False))
    fig.add_hline(y=1.0, line={"color": "#9aa0a6", "dash": "dot", "width": 1})
    fig.add_vline(x=1.0, line={"color": "#9aa0a6", "dash": "dot", "width": 1})
    fig.update_xaxes(title_text="published speedup (×)")
    fig.update_yaxes(title_text="predicted speedup (×)", scaleanchor="x")
    entries = len(families) + sum(len(doc["published"]) for _, doc in results.accuracy)
    return Section("accuracy", title, GUIDE,
                   finish(fig, height=560, legend="set and family",
                          legend_rows=math.ceil(entries / LEGEND_COLUMNS)),
                   tuple(results.name(path) for path, _ in results.accuracy))
