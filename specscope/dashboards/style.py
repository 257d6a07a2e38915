"""What every figure of the report shares: the section record, one look, one colour per name,
and the facet grid (one small panel per hardware, trace or run)."""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.colors import hex_to_rgb, qualitative
from plotly.subplots import make_subplots

from specscope.optimizers.compare import METHOD_NAMES

FONT = "DejaVu Sans, Liberation Sans, Arial, sans-serif"
"""System fonts only: the page fetches nothing when viewed."""
PANEL_HEIGHT = 330
"""Pixels per row of facet panels."""
COLUMNS = 3
"""Facet panels per row."""
KNOWN = (*METHOD_NAMES, "smartspec", "none", "static", "ets-batch")
"""Methods and serving policies: a policy named like a method (dyspec) gets its colour."""
PALETTE = [*qualitative.D3, "#000000", "#393B79", "#B8860B", *qualitative.Dark24]
"""The first `len(KNOWN)` colours are the known names', each distinct; `none` is black."""


@dataclass(frozen=True)
class Section:
    """One figure of the report: its title, what a reader should look for, the figure (None when
    the results hold nothing to draw it from, `note` then says what would), and the files it was
    drawn from."""

    key: str
    title: str
    guide: str
    figure: go.Figure | None = None
    sources: tuple[str, ...] = ()
    note: str = ""


def colour(name: str) -> str:
    """The colour of a method, policy or run label: fixed for known names, stable otherwise."""
    i = KNOWN.index(name) if name in KNOWN else len(KNOWN) + zlib.crc32(name.encode())
    return PALETTE[i % len(PALETTE)]


def translucent(name: str, alpha: float) -> str:
    """`colour(name)` with opacity `alpha`, for shaded bands."""
    return f"rgba{(*hex_to_rgb(colour(name)), alpha)}"


def facets(titles: Sequence[str], **kwargs: object) -> tuple[go.Figure, list[tuple[int, int]]]:
    """A grid of `COLUMNS` panels per row titled `titles`, and the (row, col) of each panel."""
    cols = min(COLUMNS, len(titles))
    rows = math.ceil(len(titles) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles),
                        horizontal_spacing=0.08, vertical_spacing=min(0.5 / rows, 0.16),
                        **kwargs)
    return fig, [(i // cols + 1, i % cols + 1) for i in range(len(titles))]


def finish(fig: go.Figure, rows: int = 1, height: int | None = None, legend: str = "",
           legend_rows: int = 1) -> go.Figure:
    """Apply the report's look: white template, system fonts, height (the plots' rows plus the
    legend's), and a horizontal legend under the plots. The page's heading is the title."""
    bottom = 80 + (28 * legend_rows + 20 if legend else 0)
    plots = height or PANEL_HEIGHT * rows
    fig.update_layout(
        template="plotly_white",
        font={"family": FONT, "size": 13},
        height=plots + bottom + 70,
        margin={"l": 80, "r": 30, "t": 70, "b": bottom},  # the mode bar sits in the top
        showlegend=bool(legend),
        legend={"title": {"text": f"{legend}:"}, "orientation": "h", "yanchor": "top",
                "y": -70 / plots, "x": 0, "xanchor": "left"},
        hoverlabel={"namelength": -1, "font": {"family": FONT}},
    )
    fig.update_annotations(font={"size": 13})
    return fig


def rows_of(positions: Sequence[tuple[int, int]]) -> int:
    """Rows of a facet grid."""
    return max(r for r, _ in positions)
