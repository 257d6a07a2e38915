"""DySpec's greedy dynamic tree (2024) and EAGLE-2's beam variant, static and per step.

DySpec grows the draft tree with a max-heap keyed by the estimated probability that a node is
accepted: the product along its path of the draft's probabilities (optionally mapped to real
acceptance by a monotone calibration fitted on a trace). It pops the best frontier node, adds it
and pushes its children, until the budget is spent. specscope keeps Sequoia's tree space: a node's
children are its top-b candidates, so the frontier holds each added node's first child and its
next sibling, and the DP (`sequoia.py`) is the exact reference for every tree built here.

One engine, `DySpecPolicy.build`, serves both faces:

- per step (executor, simulator): `propose(nodes)` returns each node's top-k candidate tokens and
  draft probabilities, one batched draft forward per call;
- offline (`dyspec_tree`, `dyspec_from_scores`): `propose` returns the same per-rank scores at
  every node (the trace's mean draft probability per rank, calibrated or not).

Level batching preserves the heap's greedy exactly. Run literally, the heap needs one draft
forward per popped node (its next pop may be a child of the node it just popped). But its pop
order is a fixed sort order over the tree of all candidates. A node enters the frontier once its
predecessor (previous sibling, or the parent for a first child) is popped; along the chain of
predecessors from the root's first child to v, with path scores k_1..k_m, take the strict suffix
minima (the k_j smaller than every later k_i; k_m is always one). The heap, ties of f broken by
the rank path, pops in increasing order of ((−k_j, rank path of node j) for those j, in chain
order); `tests/test_dyspec.py` checks this against a literal heap. For live drafts scores never
grow along a chain (top-k candidates come best first, probabilities are ≤ 1), so the key is just
(−f(v), rank path of v); a non-monotone per-rank vector makes it longer. Hence the heap's tree is
the first n − 1 candidates in this order. A child sorts after its parent, so among the candidates
proposed so far the first n − 1 (the kept set) hold every node of the final tree proposed so
far, and a node that drops out never returns (new candidates only push it back), nor do its
descendants. The engine keeps that set and at level d forwards, in one batch, the kept nodes at
depth d. Every final node's parent was kept when its level was processed, so every final node
gets proposed: the heap's tree, from at most depth + 1 forwards (the last can only show that
nothing deeper makes the cut). The price is width: a forward covers every kept node of its level,
some of which later lose their place to deeper nodes.

EAGLE-2 (`beam=k`): at each level only the k first kept nodes of that level are expanded, and the
tree is the first n − 1 of all candidates by path score. Children of a node outside the kept set
can never make the cut, so this is EAGLE-2's top-k of the whole layer.

With scores equal to a non-increasing positional vector p the greedy is optimal, with or without
a depth cap (it keeps the n − 1 largest f among the allowed nodes). It can lose to the DP when p
is not monotone (a strong rank hidden behind a weak one: 32 % below the DP for
p = (0.326, 0.023, 0.645) at n = 5; 0.6 % on average over random vectors), when acceptance
depends on depth, or when the draft's probabilities are not the acceptance: `dp_gap` says by how
much.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy.optimize import isotonic_regression

from specscope.draft import DraftedTree, DraftNode, Propose
from specscope.errors import InputError
from specscope.optimizers.sequoia import value_table
from specscope.trace import Trace, resolve_source
from specscope.tree import DEFAULT_SOURCE, ROOT_SOURCE, Acceptance, Tree

EAGLE2_BEAM = 10
"""Nodes EAGLE-2 expands per level by default (its top-k)."""


@dataclass(frozen=True, eq=False)
class ScoreCalibration:
    """Monotone map from a draft probability to the probability the candidate is accepted.

    Piecewise linear through the knots (x, y) (both non-decreasing), constant past the ends.
    """

    x: np.ndarray
    y: np.ndarray

    @classmethod
    def fit(cls, trace: Trace, source: str | None = None) -> ScoreCalibration:
        """Isotonic regression of acceptance on cand_scores[k] over every (row, k) of `source`.

        Acceptance of the k-th candidate is 1 when rank == k on a greedy trace, its target
        probability cand_target_probs[k] at temperature > 0 (docs/architecture.md#trace-schema: with
        deterministic candidates that is the marginal acceptance). Pooled over ranks, so one map
        serves every child of a live tree.
        """
        source = resolve_source(trace, source)
        rows = trace.df.filter(pl.col("source") == source)
        pairs = rows.select(
            pl.col("cand_scores"),
            pl.col("cand_target_probs"),
            pl.int_ranges(pl.col("cand_scores").list.len()).alias("k"),
            pl.col("rank"),
        ).explode("cand_scores", "cand_target_probs", "k")
        pairs = pairs.drop_nulls("cand_scores")
        if pairs.height == 0:
            raise InputError(f"{trace.name}: source {source!r} has no candidate scores")
        hit = (
            pl.col("cand_target_probs")
            if trace.temperature > 0
            else (pl.col("k") == pl.col("rank")).cast(pl.Float64)
        )
        binned = (
            pairs.group_by(pl.col("cand_scores").cast(pl.Float64).alias("x"))
            .agg(hit.mean().alias("y"), pl.len().alias("w"))
            .sort("x")
        )
        x = binned.get_column("x").to_numpy()
        fitted = isotonic_regression(
            binned.get_column("y").to_numpy(),
            weights=binned.get_column("w").to_numpy().astype(np.float64),
        ).x
        return cls(x, np.clip(fitted, 0.0, 1.0))

    def __call__(self, probs: np.ndarray | Sequence[float]) -> np.ndarray:
        """Estimated acceptance of candidates with these draft probabilities."""
        return np.interp(np.asarray(probs, dtype=np.float64), self.x, self.y)


class DySpecPolicy:
    """DySpec's greedy tree builder (EAGLE-2's with `beam`), one `build` per decoding step.

    budget: tree size n, root included. max_depth: drafted levels (None: as deep as the greedy
    goes). calibration: maps draft probabilities to acceptance (None: use them as they are).
    beam: EAGLE-2's expansion width per level (None: DySpec's exact greedy). source: the tree
    nodes' source name.
    """

    def __init__(
        self,
        budget: int,
        max_depth: int | None = None,
        calibration: Callable[[np.ndarray], np.ndarray] | None = None,
        beam: int | None = None,
        source: str = DEFAULT_SOURCE,
    ) -> None:
        if budget < 1:
            raise InputError(f"budget must be ≥ 1 (tree size counts the root), got {budget}")
        if max_depth is not None and max_depth < 0:
            raise InputError(f"max depth must be ≥ 0, got {max_depth}")
        if beam is not None and beam < 1:
            raise InputError(f"beam must be ≥ 1, got {beam}")
        self.budget = budget
        self.max_depth = budget - 1 if max_depth is None else min(max_depth, budget - 1)
        self.calibration = calibration
        self.beam = beam
        self.source = source

    def build(self, propose: Propose, root_token: int = -1) -> DraftedTree:
        """Grow this step's tree from live draft proposals, one `propose` call per level.

        The tree has `budget` nodes unless the depth cap or the proposals run out first.
        """
        parent, rank, depth, token = [-1], [-1], [0], [root_token]
        score: list[float] = [1.0]
        # The heap's pop order (module docstring): ((−k_j, rank path j), …) over the strict
        # suffix minima of the path scores along the chain of frontier predecessors.
        priority: list[tuple[tuple[float, tuple[int, ...]], ...]] = [()]
        kept: list[int] = []  # the budget − 1 first candidates in pop order
        level, forwarded, expanded = [0], [], []
        for d in range(self.max_depth):
            if not level:
                break
            nodes = [DraftNode(v, parent[v], token[v], d) for v in level]
            proposals = propose(nodes)
            forwarded.append(_with_ancestors(level, parent))
            expanded.append(len(level))
            if len(proposals) != len(nodes):
                raise InputError(
                    f"propose returned {len(proposals)} proposals for {len(nodes)} nodes"
                )
            for v, (tokens, probs) in zip(level, proposals, strict=True):
                probs = np.asarray(probs, dtype=np.float64).reshape(-1)
                if len(tokens) != probs.size or not np.all((probs >= 0) & (probs <= 1)):
                    raise InputError(
                        f"propose: node {v} needs as many tokens as probabilities, each in [0, 1]"
                    )
                acc = probs if self.calibration is None else self.calibration(probs)
                before = priority[v]  # the first child's predecessor is its parent
                node_path = priority[v][-1][1] if v else ()
                for r, (tok, a) in enumerate(zip(tokens, acc, strict=True)):
                    f = score[v] * float(a)
                    mine = (-f, (*node_path, r))
                    before = (*(rec for rec in before if rec[0] > mine[0]), mine)
                    parent.append(v)
                    rank.append(r)
                    depth.append(d + 1)
                    token.append(int(tok))
                    score.append(f)
                    priority.append(before)
                    kept.append(len(parent) - 1)
            kept = sorted(kept, key=priority.__getitem__)[: self.budget - 1]
            level = [v for v in kept if depth[v] == d + 1][: self.beam]
        return _drafted(kept, parent, rank, token, score, self.source, tuple(forwarded),
                        tuple(expanded))


def _with_ancestors(level: list[int], parent: list[int]) -> int:
    """How many nodes `level`, their ancestors and the root (node 0) are."""
    seen = {0}
    for v in level:
        while v not in seen:
            seen.add(v)
            v = parent[v]
    return len(seen)


def _drafted(
    kept: list[int],
    parent: list[int],
    rank: list[int],
    token: list[int],
    score: list[float],
    source: str,
    forwarded: tuple[int, ...],
    expanded: tuple[int, ...],
) -> DraftedTree:
    """The kept candidates as a breadth-first tree (siblings by rank), with their tokens."""
    index = {0: 0}
    order = [0]
    frontier = [0]
    children: dict[int, list[int]] = {}
    for v in kept:
        children.setdefault(parent[v], []).append(v)
    while frontier:
        nxt = []
        for u in frontier:
            for v in sorted(children.get(u, []), key=lambda c: rank[c]):
                index[v] = len(order)
                order.append(v)
                nxt.append(v)
        frontier = nxt
    tree = Tree(
        np.array([-1] + [index[parent[v]] for v in order[1:]]),
        np.array([rank[v] for v in order]),
        (ROOT_SOURCE,) + (source,) * (len(order) - 1),
    )
    return DraftedTree(
        tree,
        np.array([token[v] for v in order], dtype=np.int64),
        np.array([score[v] for v in order]),
        len(forwarded),
        forwarded,
        expanded,
    )


def _scores(q: Acceptance) -> np.ndarray:
    vec = np.asarray(q, dtype=np.float64)
    if vec.ndim != 1 or vec.size == 0 or not np.all(np.isfinite(vec)):
        raise InputError("scores: expected a non-empty vector of per-rank probabilities")
    if vec.min() < 0 or vec.max() > 1:
        raise InputError("scores: entries must lie in [0, 1]")
    return vec


def _static(q: np.ndarray) -> Propose:
    """A drafter proposing the same per-rank scores at every node (tokens are the ranks)."""
    proposal = (list(range(q.size)), q.tolist())
    return lambda nodes: [proposal] * len(nodes)


def dyspec_from_scores(
    q: Acceptance, budget: int, max_depth: int | None = None, source: str = DEFAULT_SOURCE
) -> Tree:
    """DySpec's greedy tree when every node's k-th child scores q[k] (a vector over ranks)."""
    q = _scores(q)
    return DySpecPolicy(budget, max_depth, source=source).build(_static(q)).tree


def eagle2_from_scores(
    q: Acceptance,
    budget: int,
    beam: int = EAGLE2_BEAM,
    max_depth: int | None = None,
    source: str = DEFAULT_SOURCE,
) -> Tree:
    """EAGLE-2's tree when every node's k-th child scores q[k]: top-`beam` expanded per level."""
    q = _scores(q)
    return DySpecPolicy(budget, max_depth, beam=beam, source=source).build(_static(q)).tree


def draft_scores(trace: Trace, source: str | None = None, calibrate: bool = True) -> np.ndarray:
    """Per-rank score DySpec uses offline: the mean over the source's rows of the draft's
    probability of its k-th candidate, mapped through `ScoreCalibration.fit` when `calibrate`.

    The map is applied row by row before averaging (it is not linear, so mapping the mean
    would not estimate the mean acceptance). Rows with fewer than k candidates count 0.
    """
    source = resolve_source(trace, source)
    rows = trace.df.filter(pl.col("source") == source)
    k = int(trace.metadata.get("K") or rows.get_column("cand_scores").list.len().max() or 0)
    if k < 1:
        raise InputError(f"{trace.name}: source {source!r} has no candidate scores")
    scores = rows.select(
        pl.col("cand_scores").list.get(i, null_on_oob=True).cast(pl.Float64).alias(str(i))
        for i in range(k)
    ).to_numpy()
    missing = np.isnan(scores)
    if calibrate:
        scores = ScoreCalibration.fit(trace, source)(np.where(missing, 0.0, scores))
    return np.where(missing, 0.0, scores).mean(axis=0)


def dyspec_tree(
    trace: Trace,
    source: str | None,
    budget: int,
    max_depth: int | None = None,
    calibrate: bool = True,
) -> Tree:
    """DySpec's static tree from trace statistics (`draft_scores`), nodes of `source`."""
    return dyspec_build(trace, source, budget, max_depth, calibrate).tree


def dyspec_build(
    trace: Trace,
    source: str | None,
    budget: int,
    max_depth: int | None = None,
    calibrate: bool = True,
) -> DraftedTree:
    """`DySpecPolicy.build` on a drafter proposing the trace's mean scores at every node: the
    tree, and the propose calls and forwarded nodes that building it costs. Live builds on a
    draft model's own probabilities (`calibrate=False`, as the executor runs them) measured
    3.4 / 4.4 / 5.5 calls and 16 / 33 / 75 forwarded nodes per step at budgets 8 / 16 / 32 on
    the zoo's tiny-code pair, where this gives 4 / 5 / 6 and 19 / 32 / 69."""
    source = resolve_source(trace, source)
    q = _scores(draft_scores(trace, source, calibrate))
    return DySpecPolicy(budget, max_depth, source=source).build(_static(q))


def eagle2_tree(
    trace: Trace,
    source: str | None,
    budget: int,
    beam: int = EAGLE2_BEAM,
    max_depth: int | None = None,
    calibrate: bool = True,
) -> Tree:
    """EAGLE-2's static tree from trace statistics (`draft_scores`), nodes of `source`."""
    source = resolve_source(trace, source)
    q = draft_scores(trace, source, calibrate)
    return eagle2_from_scores(q, budget, beam, max_depth, source)


@dataclass(frozen=True)
class DPGap:
    """A tree's expected tokens against the DP optimum of the same size and depth cap."""

    dp: float
    tree: float

    @property
    def absolute(self) -> float:
        """Expected tokens per step the tree leaves on the table (≥ 0 up to rounding)."""
        return self.dp - self.tree

    @property
    def relative(self) -> float:
        """The gap as a fraction of the DP optimum."""
        return self.absolute / self.dp


def dp_gap(tree: Tree, p: Acceptance, max_depth: int | None = None) -> DPGap:
    """How far `tree` lands from Sequoia's DP under acceptance p (vector or depth table).

    The DP solves for trees of exactly tree.size nodes and depth ≤ max_depth (None: unlimited);
    G never drops when a node is added, so that is the best any method could do at this size.
    """
    table = value_table(p, tree.size, max_depth)
    return DPGap(float(table[tree.size, -1]), tree.expected_tokens(p))
