"""STAND's data-driven static tree (Song et al. 2025): the nodes most often accepted.

STAND decodes calibration prompts with a large template tree, counts how often each template
node is accepted, and keeps the most accepted nodes. Greedy verification of a static tree is
replayed exactly from a trace of the drafter's candidates on the true prefix (`trace.replay`;
STAND's candidates qualify up to its horizon), so the counts here come from replaying the
template over a calibration trace instead of decoding with it: the same counts, without a target
pass over thousands of nodes per step. At temperature > 0 with deterministic (top-k) candidates
the replay is an exact coupling; for children drawn by Gumbel-top-k it counts the top-k
candidates' acceptance instead, an approximation.

The template: every rank path (r_1..r_d) with d ≤ the depth cap, r_i < K (the trace's
candidates per position) and Π(1 + r_i) ≤ `spread`, i.e. the paths a harmonic prior (the r-th
candidate accepted 1/(1 + r) as often as the first) scores at least 1/spread: the full-depth
chain, every candidate at the root, bushy first levels (spread 8, depth 12: 2,704 nodes).
Sequence sources (n-gram, suffix) only have rank-0 nodes: their template is the chain.

The kept set: the budget − 1 nodes with the most accepts, ties to the earlier node in breadth-
first order. A node is accepted only with its parent, so a parent has at least its child's count
and comes first: the set is closed under ancestors. Nodes never accepted are not kept, so the
tree can be smaller than the budget.
"""

from __future__ import annotations

import polars as pl

from specscope.errors import InputError
from specscope.optimizers.baselines import depth_cap
from specscope.trace import Trace, replay, resolve_source, sequence_sources
from specscope.tree import Tree

SPREAD = 8
"""Default template bound on Π(1 + rank) along a path."""


def template_tree(width: int, max_depth: int, spread: int = SPREAD,
                  source: str = "stand") -> Tree:
    """Every rank path of depth ≤ `max_depth`, ranks < `width`, with Π(1 + rank) ≤ `spread`."""
    paths: list[tuple[int, ...]] = []
    stack: list[tuple[tuple[int, ...], int]] = [((), 1)]
    while stack:
        path, weight = stack.pop()
        paths.append(path)
        if len(path) < max_depth:
            stack += [((*path, r), weight * (1 + r)) for r in range(width)
                      if weight * (1 + r) <= spread]
    return Tree.from_rank_paths(paths, source)


def data_driven_tree(
    trace: Trace, source: str, budget: int, max_depth: int | None = None, spread: int = SPREAD
) -> Tree:
    """STAND's tree of at most `budget` nodes (root included) for `source`: the template's most
    accepted nodes when it is replayed over `trace` (module docstring)."""
    source = resolve_source(trace, source)
    depth = depth_cap(budget, max_depth)
    if spread < 1:
        raise InputError(f"template spread must be ≥ 1, got {spread}")
    if source in sequence_sources(trace):
        template = Tree.chain(depth, source)
    else:
        width = trace.df.filter(pl.col("source") == source).get_column("cand_tokens").list.len()
        template = template_tree(max(1, int(width.max())), depth, spread, source)
    counts = replay(trace, template).node_accepts
    ranked = sorted(range(1, template.size), key=lambda v: (-counts[v], v))
    kept = [v for v in ranked[: budget - 1] if counts[v] > 0]
    return Tree.from_rank_paths(
        [[int(template.ranks[u]) for u in template.path(v)[1:]] for v in kept], source
    )
