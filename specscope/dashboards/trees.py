"""The chosen draft trees drawn as trees: root on top, one row per depth, a node per token."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from specscope.dashboards.load import Results, analytic_cells
from specscope.dashboards.style import Section, colour, facets, finish, rows_of
from specscope.optimizers.compare import DP_REFERENCE
from specscope.tree import ROOT_SOURCE, Tree

MAX_TREES = 9
LABELLED = 40
"""Trees up to this size print each node's candidate rank inside it."""
GUIDE = (
    "The recommended tree of each optimize-tree result (and Sequoia's exact optimum where it "
    "differs), any tree file in the folder, and each hardware's best tree in a sweep. The root is "
    "the last committed token; each row below it is one drafted level, and the number in a node is "
    "its candidate rank (1 = the drafter's best guess for that position). All nodes are verified "
    "in one target pass. Look at the shape: a long spine means rank-1 guesses are reliable; wide "
    "top levels mean the drafter's first guess is often wrong and its runners-up are worth "
    "checking."
)


def tree_layout(tree: Tree) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of each node: leaves one unit apart in depth-first order, each parent centred
    over its children, y = −depth so the root is on top."""
    children = tree.children
    order, stack = [], [0]
    while stack:  # depth-first preorder, children in rank order
        v = stack.pop()
        order.append(v)
        stack.extend(reversed(children[v]))
    x = np.zeros(tree.size)
    leaves = [v for v in order if not children[v]]
    x[leaves] = np.arange(len(leaves))
    for v in reversed(order):  # descendants come before their ancestor
        if children[v]:
            x[v] = (x[children[v][0]] + x[children[v][-1]]) / 2
    return x, -tree.depths.astype(float)


def chosen_trees(results: Results) -> list[tuple[str, Tree, str]]:
    """(panel title, tree, file) of each tree to draw, at most `MAX_TREES`."""
    out = []
    for opt in results.optimized:
        rows = opt.doc["results"]
        picks = [rows[0]] + [r for r in rows[1:] if r["algo"] == DP_REFERENCE
                             and rows[0]["algo"] != DP_REFERENCE]
        for r in picks:
            title = (f"{'recommended: ' if r is rows[0] else 'exact optimum: '}{r['algo']}, "
                     f"n = {r['n']:g}, depth {r['depth']:g}, {r['speedup']:.2f}×<br>"
                     f"{opt.label}")
            out.append((title, r["tree"], results.name(opt.path)))
    for path, tree in results.trees:
        out.append((f"{results.name(path)}<br>n = {tree.size}, depth {tree.depth}", tree,
                    results.name(path)))
    for path, sweep in results.sweeps:
        cells = analytic_cells(sweep)
        if cells.height and "tree" in cells.columns:
            best = cells.sort("speedup", descending=True).group_by("hardware",
                                                                   maintain_order=True).first()
            out += [(f"best on {c['hardware']} (sweep): {c['method']}, n = {c['n']:g}, depth "
                     f"{c['depth']:g}, {c['speedup']:.2f}×<br>{c['target']} · draft "
                     f"{c['drafter']} · {c['runtime']}", Tree.from_json(c["tree"]),
                     results.name(path)) for c in best.iter_rows(named=True)]
    return out[:MAX_TREES]


def trees_section(results: Results) -> Section:
    """Node-link drawings of the chosen trees."""
    title = "The chosen draft trees"
    trees = chosen_trees(results)
    if not trees:
        return Section("trees", title, GUIDE, note="needs optimize-tree output or a tree JSON")
    fig, positions = facets([t for t, _, _ in trees])
    seen: set[str] = set()
    for (row, col), (_, tree, _) in zip(positions, trees, strict=True):
        x, y = tree_layout(tree)
        edges_x = np.column_stack([x[tree.parents[1:]], x[1:], np.full(tree.size - 1, np.nan)])
        edges_y = np.column_stack([y[tree.parents[1:]], y[1:], np.full(tree.size - 1, np.nan)])
        fig.add_trace(go.Scatter(x=edges_x.ravel(), y=edges_y.ravel(), mode="lines",
                                 line={"color": "#9aa0a6", "width": 1.2}, hoverinfo="skip",
                                 showlegend=False), row=row, col=col)
        for source in dict.fromkeys(tree.sources):
            nodes = [v for v in range(tree.size) if tree.sources[v] == source]
            fig.add_trace(go.Scatter(
                x=x[nodes], y=y[nodes], mode="markers+text" if tree.size <= LABELLED else
                "markers", name="root" if source == ROOT_SOURCE else source,
                legendgroup=source, showlegend=source not in seen,
                marker={"size": 16 if tree.size <= LABELLED else 8,
                        "color": "black" if source == ROOT_SOURCE else colour(source),
                        "line": {"color": "white", "width": 1}},
                text=["" if v == 0 else str(tree.ranks[v] + 1) for v in nodes],
                textfont={"color": "white", "size": 9},
                customdata=[_node_hover(tree, v) for v in nodes],
                hovertemplate="%{customdata}<extra></extra>"), row=row, col=col)
            seen.add(source)
        depths = np.arange(tree.depth + 1)
        fig.update_yaxes(tickvals=-depths, ticktext=[str(d) for d in depths],
                         title_text="depth" if col == 1 else None, range=[-tree.depth - 0.5,
                                                                          0.5],
                         showgrid=False, zeroline=False, row=row, col=col)
        fig.update_xaxes(visible=False, row=row, col=col)
    finish(fig, rows_of(positions), legend="drafter source")
    fig.update_annotations(font={"size": 12})
    return Section("trees", title, GUIDE, fig, tuple(dict.fromkeys(f for _, _, f in trees)))


def _node_hover(tree: Tree, v: int) -> str:
    if v == 0:
        return "root: the last committed token"
    path = " → ".join(str(tree.ranks[u] + 1) for u in tree.path(v)[1:])
    return (f"node {v} · depth {tree.depths[v]} · candidate rank {tree.ranks[v] + 1}<br>"
            f"source {tree.sources[v]}<br>ranks from the root: {path}")
