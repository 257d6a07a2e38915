"""Goose anisotropic spine trees (2026), their honest expected value, and the isotropic control.

Two training-free sources with very different acceptance: a *spine*, the continuation copied from
an n-gram match in the context (sequence source `ngram` or `suffix`, rank-0 nodes, replayed by
match_len), and *branches*, ranked next-token candidates (a ranked source, `recycle` by default).
The tree is a deep chain of spine nodes under the root, with shallow wide branches of ranked
candidates hanging off the root and off every spine node. Verification may leave the spine at a
mismatch and continue on a branch, so a step accepts at least as much as either source alone
(the tree contains the spine chain and the root branches as subtrees).

Budget (the authors' defaults, `GoosePolicy`): total n between 60 and 100 nodes by match
confidence; the spine takes 15/30/50 % of the drafts by the spine's running acceptance (an EMA
with weight 0.3, tiers at 0.2 and 0.4); half of the rest goes to branches on spine nodes (node i
of the spine gets a share ∝ 1/i) and half to branches on the root. Branches are at most 6 deep and
drop candidates whose score is below 0.01. Where the paper leaves a detail open, this module
picks (and says so where it is defined): the running acceptance is the fraction of steps that
accepted the spine's first token (offline: the same rate over the steps a spine alone would
take, `GooseAcceptance.step_rate`); confidence maps linearly onto 60..100; a branch node's score
is the product of the branch source's acceptance along the branch, from its anchor.

Expected tokens. `Tree.expected_tokens` with a per-source mapping sums each node's acceptance
probability, which double counts here: a spine child and a branch child of the same node often
carry the same true token (measured: G = 6.12 predicted against 4.83 replayed on a mixed tree).
Replay walks the merged tree, so a step yields 1 + the depth of its deepest accepted node.
`GooseAcceptance` counts a branch only where the spine stopped: a step that accepts exactly i
spine tokens then follows the branch on spine node i (the root is i = 0), whose first level is
accepted with P(branch rank == k at pos + i | the spine accepted exactly i), estimated jointly
from the trace, and whose deeper levels multiply by the branch source's run-conditional depth
table (depth counted from the anchor). Branches of different anchors exclude each other (the
spine stops at one place), so no accepted depth is counted twice. What this misses, a branch of
an earlier anchor running deeper than the spine plus its own branch, is below 0.3 % of G on the
synthetic traces.

The larger effect is where steps start. Prompt-lookup matches come in copy runs (match_len falls
by one per position along a run), and a step consumes a run and starts again right after its
end, so the spine sees far fewer matches at step starts than over all positions (synthetic
defaults: a 10-node spine replays 1.74 tokens/step; position-averaged match lengths predict 2.70;
the depth-table sum 4.64 for the whole Goose tree against 2.87 replayed). `GooseAcceptance`
therefore takes the spine's match length at each position from the trace and weights positions
by how often a step starts there: a step from pos accepts s spine tokens, then J more on the
branch of spine node s with J's distribution from the branch statistics above, and the next step
starts at pos + s + J + 1. The spine alone is then predicted as replayed (by construction); for
whole Goose trees the prediction is within 3.1 % of replay on synthetic traces
(`tests/test_goose.py`; within 0.6 % unless the branch source accepts in runs: branch
statistics are averaged over every position, while steps tend to start where a run of branch
accepts just broke, where the branch source does better than average).

This cannot be written as per-source tables for `Tree.expected_tokens`: a branch node's
acceptance depends on its role (first level under a spine node, or deeper in a branch), which two
nodes at the same depth of one tree do not share, and the step starts depend on the whole tree.
`GooseAcceptance.expected_tokens(tree)` is the honest value of a Goose tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import polars as pl

from specscope.errors import InputError
from specscope.names import SEQUENCE_SOURCES
from specscope.optimizers.baselines import best_first_tree, kary_tree
from specscope.trace import AcceptanceModel, Trace, replay, resolve_source, sequence_sources
from specscope.tree import ROOT_SOURCE, Acceptance, Tree

SPINE_SHARES = (0.15, 0.30, 0.50)
"""Share of the drafts on the spine below, between and above the acceptance tiers."""
TIERS = (0.2, 0.4)
EMA_WEIGHT = 0.3
"""Weight of the newest step in the spine's running acceptance."""
BUDGET_RANGE = (60, 100)
"""Total tree size (root included) at match confidence 0 and 1."""
BRANCH_DEPTH = 6
SCORE_FLOOR = 0.01
ISOTROPIC_WIDTHS = range(2, 9)
"""Fan-outs tried by the isotropic control when none is given."""


class Split(NamedTuple):
    """Draft nodes (the root excluded) for the spine, branches on spine nodes, root branches."""

    spine: int
    spine_branches: int
    root_branches: int


class GoosePolicy:
    """Goose's per-step budget policy; holds the spine's running acceptance.

    `acceptance` starts at `initial` (0.3, the middle tier, by default) and moves by
    `update` after every verification step.
    """

    def __init__(self, initial: float = 0.3) -> None:
        if not 0 <= initial <= 1:
            raise InputError(f"spine acceptance must lie in [0, 1], got {initial}")
        self.acceptance = float(initial)

    def update(self, accepted_on_spine: int) -> float:
        """Fold in one step: the spine counts as accepted when its first token was (the paper
        does not pin the definition down). Returns the EMA."""
        hit = 1.0 if accepted_on_spine > 0 else 0.0
        self.acceptance = EMA_WEIGHT * hit + (1 - EMA_WEIGHT) * self.acceptance
        return self.acceptance

    @property
    def spine_share(self) -> float:
        """Fraction of the drafts the spine gets at the current running acceptance."""
        return SPINE_SHARES[sum(self.acceptance >= t for t in TIERS)]

    @staticmethod
    def total_budget(confidence: float) -> int:
        """Tree size for a match confidence in [0, 1] (clipped): 60 at 0 up to 100 at 1."""
        low, high = BUDGET_RANGE
        return round(low + (high - low) * min(max(confidence, 0.0), 1.0))

    def split(self, budget: int, spine_limit: int | None = None) -> Split:
        """Node counts for a tree of `budget` nodes (root included).

        spine_limit caps the spine (the proposal's length, the depth cap); what the spine cannot
        use goes to the branches, half and half (the root's half takes an odd node, and all of
        it when there is no spine).
        """
        if budget < 1:
            raise InputError(f"budget must be ≥ 1 (tree size counts the root), got {budget}")
        drafts = budget - 1
        spine = round(self.spine_share * drafts)
        if spine_limit is not None:
            spine = min(spine, max(spine_limit, 0))
        rest = drafts - spine
        on_spine = rest // 2 if spine else 0
        return Split(spine, on_spine, rest - on_spine)

    def tree(
        self,
        budget: int,
        spine_limit: int,
        branch_p: Acceptance,
        spine_source: str = "ngram",
        branch_source: str = "recycle",
        max_depth: int | None = None,
    ) -> Tree:
        """This step's tree shape: `split`, then best-first branches under branch_p (vector or
        depth table counted from the anchor), at most 6 and max_depth deep, floor 0.01.

        spine_limit: the spine proposal's length. An executor fills the spine with the
        proposal's tokens and a branch node of rank k with its parent token's k-th candidate.
        """
        cap = budget - 1 if max_depth is None else max_depth
        split = self.split(budget, min(spine_limit, cap))
        root = branch_paths(branch_p, split.root_branches, min(BRANCH_DEPTH, cap))
        on_spine = [
            branch_paths(branch_p, nodes, min(BRANCH_DEPTH, cap - i))
            for i, nodes in enumerate(spine_allowances(split.spine, split.spine_branches), 1)
        ]
        return spine_tree(split.spine, root, on_spine, spine_source, branch_source)


def spine_allowances(spine: int, nodes: int) -> list[int]:
    """Branch nodes for spine nodes 1..spine, ∝ 1/i, rounded by largest remainder to `nodes`."""
    if spine == 0:
        return []
    weights = 1.0 / np.arange(1, spine + 1)
    exact = nodes * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    extra = np.argsort(-(exact - counts), kind="stable")[: nodes - int(counts.sum())]
    counts[extra] += 1
    return counts.tolist()


def branch_paths(
    p: Acceptance, nodes: int, depth: int = BRANCH_DEPTH, floor: float = SCORE_FLOOR
) -> list[tuple[int, ...]]:
    """Rank paths of a best-first branch of at most `nodes` nodes and `depth` levels under p
    (a vector, or a depth table counted from the branch's anchor), nodes scoring < floor
    dropped (their descendants score less, so the rest stays a tree)."""
    if nodes < 1 or depth < 1:
        return []
    tree = best_first_tree(p, nodes + 1, depth)
    keep = tree.node_scores(p) >= floor
    return [
        tuple(int(tree.ranks[u]) for u in tree.path(v)[1:])
        for v in range(1, tree.size)
        if keep[v]
    ]


def spine_tree(
    spine: int,
    root_branch: list[tuple[int, ...]],
    spine_branches: list[list[tuple[int, ...]]],
    spine_source: str,
    branch_source: str,
) -> Tree:
    """Assemble a spine of `spine` nodes with the given branches (rank paths from their anchor:
    the root, then spine node i = 1..spine); siblings: the spine child first, then by rank."""
    if len(spine_branches) > spine:
        raise InputError(f"{len(spine_branches)} spine branches for a spine of {spine} nodes")
    # Nodes are keyed ("spine", i) or ("branch", anchor key, rank path); pending[parent key]
    # lists the children as (not the spine, rank, key, source), which sorts the spine first.
    parents, ranks, sources = [-1], [-1], [ROOT_SOURCE]
    index = {("root",): 0}
    pending: dict[tuple, list[tuple]] = {}

    def add(key: tuple, parent: tuple, rank: int, source: str) -> None:
        pending.setdefault(parent, []).append((source != spine_source, rank, key, source))

    for i in range(1, spine + 1):
        add(("spine", i), ("root",) if i == 1 else ("spine", i - 1), 0, spine_source)
    for anchor, paths in [(("root",), root_branch)] + [
        (("spine", i + 1), p) for i, p in enumerate(spine_branches)
    ]:
        for path in paths:
            parent = anchor if len(path) == 1 else ("branch", anchor, path[:-1])
            add(("branch", anchor, path), parent, path[-1], branch_source)
    level = [("root",)]
    while level:
        nxt = []
        for key in level:
            for _, rank, child, source in sorted(pending.get(key, []), key=lambda c: c[:2]):
                index[child] = len(parents)
                parents.append(index[key])
                ranks.append(rank)
                sources.append(source)
                nxt.append(child)
        level = nxt
    return Tree(np.array(parents), np.array(ranks), tuple(sources))


def _check_sources(trace: Trace, spine_source: str, branch_source: str) -> None:
    resolve_source(trace, spine_source)
    resolve_source(trace, branch_source)
    seq = {*sequence_sources(trace), *SEQUENCE_SOURCES}  # a known name may propose nothing
    if spine_source not in seq:
        raise InputError(f"{trace.name}: spine source {spine_source!r} has no proposals")
    if branch_source in seq:
        raise InputError(f"{trace.name}: branch source {branch_source!r} must be a ranked source")


def goose_tree(
    trace: Trace,
    spine_source: str = "ngram",
    branch_source: str = "recycle",
    budget: int | None = None,
    max_depth: int | None = None,
    spine_acceptance: float | None = None,
) -> Tree:
    """Goose's static spine tree from trace statistics.

    spine_acceptance (default: `GooseAcceptance.step_rate` of the longest proposal, the value
    `GoosePolicy.update` converges to) sets the spine's share and, when `budget` is None, the
    total budget (as the match confidence). The
    spine is capped by the longest proposal in the trace and by max_depth; branches are shaped
    best-first by the branch source's depth table (counted from the anchor). The floor can leave
    the tree under budget.
    """
    _check_sources(trace, spine_source, branch_source)
    longest = int(
        trace.df.filter(pl.col("source") == spine_source).get_column("proposal").list.len().max()
    )
    if spine_acceptance is None:
        spine_acceptance = goose_acceptance(trace, spine_source, branch_source).step_rate(longest)
    policy = GoosePolicy(spine_acceptance)
    if budget is None:
        budget = policy.total_budget(spine_acceptance)
    p = AcceptanceModel.from_trace(
        trace, branch_source, depth_dependent=True, max_depth=BRANCH_DEPTH
    ).p
    return policy.tree(budget, longest, p, spine_source, branch_source, max_depth)


def isotropic_tree(
    trace: Trace,
    spine_source: str = "ngram",
    branch_source: str = "recycle",
    budget: int = 80,
    max_depth: int | None = None,
    k: int | None = None,
) -> Tree:
    """The balanced control: a k-ary tree of `budget` nodes filled breadth-first whose every
    node's first child is the spine source's proposal and the other k − 1 the branch source's
    top candidates. k None: the k in 2..8 that replays best on `trace` (the strongest control)."""
    _check_sources(trace, spine_source, branch_source)

    def relabel(tree: Tree) -> Tree:
        first = tree.ranks == 0
        return Tree(
            tree.parents,
            np.where(first | (tree.ranks < 0), tree.ranks, tree.ranks - 1),
            tuple(
                ROOT_SOURCE if v == 0 else spine_source if first[v] else branch_source
                for v in range(tree.size)
            ),
        )

    if k is not None:
        return relabel(kary_tree(k, budget, max_depth))
    trees = [relabel(kary_tree(w, budget, max_depth)) for w in ISOTROPIC_WIDTHS]
    return max(trees, key=lambda t: replay(trace, t).tokens_per_step)


@dataclass(frozen=True, eq=False)
class GooseAcceptance:
    """Acceptance of Goose trees over one trace (module docstring): spine match lengths per
    position, branch ranks per position, the branch source's depth table. Built by
    `goose_acceptance`; `expected_tokens(tree)` is the honest G of a Goose tree."""

    spine_source: str
    branch_source: str
    match: np.ndarray  # (requests, length): spine match_len, 0 where no row
    rank: np.ndarray  # (requests, length): branch rank, −1 where no row or past the end
    lengths: np.ndarray  # positions per request
    deep: np.ndarray  # branch source's depth table p[j−1][k], j counted from the anchor

    def matched(self, spine: int) -> np.ndarray:
        """Spine tokens a step from each (request, pos) accepts on a spine of `spine` nodes."""
        left = self.lengths[:, None] - np.arange(self.match.shape[1])[None, :]
        return np.minimum(np.minimum(self.match, spine), np.maximum(left, 0))

    def first_level(self, spine: int) -> np.ndarray:
        """(spine + 1, K): row i = P(branch rank == k at pos + i | the spine accepted exactly i
        tokens from pos), over every position (i = 0: the root's branches). Joint with the
        spine: a branch child counts only where the spine child beside it failed."""
        m = self.matched(spine)
        valid = np.arange(m.shape[1])[None, :] < self.lengths[:, None]
        k = self.deep.shape[1]
        out = np.zeros((spine + 1, k))
        for i in range(spine + 1):
            stop = valid & (m == i)
            if not stop.any():
                continue
            ahead = np.full_like(self.rank, -1)
            ahead[:, : m.shape[1] - i] = self.rank[:, i:]
            hit = stop & (ahead >= 0) & (ahead < k)
            out[i] = np.bincount(ahead[hit], minlength=k)[:k] / stop.sum()
        return out

    def start_weights(self, spine: int, extension: np.ndarray) -> np.ndarray:
        """Expected number of steps starting at each (request, pos), the first at pos 0.

        A step from pos accepts s = matched(spine)[pos] spine tokens, then J more on the branch
        at spine node s with P(J ≥ j) = extension[s, j] (extension[:, 0] = 1), and the next step
        starts at pos + s + J + 1. Spreading each start's weight over those next starts gives
        the expected number of steps starting at every position.
        """
        m = self.matched(spine)
        n_req, width = m.shape
        p_j = np.maximum(extension - np.c_[extension[:, 1:], np.zeros(len(extension))], 0.0)
        w = np.zeros((n_req, width + spine + p_j.shape[1] + 1))
        w[:, 0] = 1.0
        rows = np.arange(n_req)
        for t in range(width):
            wt = np.where(t < self.lengths, w[:, t], 0.0)
            if not wt.any():
                continue
            for j in range(p_j.shape[1]):
                w[rows, t + m[:, t] + 1 + j] += wt * p_j[m[:, t], j]
        return np.where(np.arange(width)[None, :] < self.lengths[:, None], w[:, :width], 0.0)

    def step_rate(self, spine: int) -> float:
        """P(a step accepts the spine's first token), steps starting where a spine of `spine`
        nodes alone starts them: what `GoosePolicy.update` averages (over all positions it
        would be much higher, since a step consumes a whole copy run)."""
        w = self.start_weights(spine, np.ones((spine + 1, 1)))
        return float(w[self.matched(spine) >= 1].sum() / w.sum())

    def node_scores(self, tree: Tree) -> np.ndarray:
        """f(v) per node: the probability that v is the accepted node of its depth in a step,
        branch nodes counted only where the spine stopped; `InputError` for a non-Goose tree."""
        spine = [0]
        while nxt := [c for c in tree.children[spine[-1]] if tree.sources[c] == self.spine_source]:
            spine.append(nxt[0])
        length = len(spine) - 1
        on_spine = {s: i for i, s in enumerate(spine)}
        first = self.first_level(length)
        g = np.zeros(tree.size)  # branch nodes: P(accepted | the spine stopped at the anchor)
        anchor = np.zeros(tree.size, dtype=np.int64)  # spine index of a branch node's anchor
        below = np.zeros(tree.size, dtype=np.int64)  # depth below the anchor
        for v in range(1, tree.size):
            if v in on_spine:
                continue
            u, r = int(tree.parents[v]), int(tree.ranks[v])
            if tree.sources[v] != self.branch_source:
                raise InputError(
                    f"not a Goose tree: node {v} of source {tree.sources[v]!r} is off the spine"
                )
            if u in on_spine:
                anchor[v], below[v], row, scale = on_spine[u], 1, first[on_spine[u]], 1.0
            else:
                anchor[v], below[v] = anchor[u], below[u] + 1
                row, scale = self.deep[min(below[v], self.deep.shape[0]) - 1], g[u]
            g[v] = scale * (row[r] if r < row.size else 0.0)
        branch = np.flatnonzero(below)
        extension = np.zeros((length + 1, int(below.max()) + 2))
        extension[:, 0] = 1.0
        np.add.at(extension, (anchor[branch], below[branch]), g[branch])
        w = self.start_weights(length, extension)
        m = self.matched(length)
        steps = w.sum()
        f = np.zeros(tree.size)
        f[spine] = [w[m >= d].sum() / steps for d in range(length + 1)]
        stop = np.array([w[m == i].sum() / steps for i in range(length + 1)])
        f[branch] = stop[anchor[branch]] * g[branch]
        return f

    def expected_tokens(self, tree: Tree) -> float:
        """G of a Goose tree (accepted drafts + the bonus), spine and branches not double
        counted, over the positions where its steps start."""
        return float(self.node_scores(tree).sum())


def goose_acceptance(
    trace: Trace,
    spine_source: str = "ngram",
    branch_source: str = "recycle",
    max_depth: int = BRANCH_DEPTH,
) -> GooseAcceptance:
    """Acceptance of Goose trees over `trace`: the spine from match_len, branches from rank,
    jointly so that a branch child excludes the spine child at its parent. max_depth: rows of
    the branch depth table (deeper branch nodes reuse the last)."""
    _check_sources(trace, spine_source, branch_source)
    df = trace.df
    ids = df.get_column("request_id").unique().sort().to_numpy()
    lengths = (
        df.group_by("request_id").agg(pl.col("pos").max() + 1).sort("request_id")
    ).get_column("pos").to_numpy().astype(np.int64)
    shape = (ids.size, int(lengths.max()))
    dense = {}
    for source, column, fill in ((spine_source, "match_len", 0), (branch_source, "rank", -1)):
        rows = df.filter(pl.col("source") == source)
        out = np.full(shape, fill, dtype=np.int64)
        out[
            np.searchsorted(ids, rows.get_column("request_id").to_numpy()),
            rows.get_column("pos").to_numpy(),
        ] = rows.get_column(column).to_numpy()
        dense[column] = out
    deep = AcceptanceModel.from_trace(
        trace, branch_source, depth_dependent=True, max_depth=max_depth
    ).table
    return GooseAcceptance(
        spine_source, branch_source, dense["match_len"], dense["rank"], lengths, deep
    )
