"""Exact replay of a static draft tree over a trace: tokens per verification step.

Per request, a step starts at position `pos` (the first at 0). It walks down the tree from the
root: a child of a node at depth d with (source s, rank r) is accepted when the trace row
(request, pos + d, s) has rank == r. A node v of a sequence source s (one whose rows carry
proposals) is instead accepted when match_len of row (request, pos + d_a, s) ≥ j, where a is v's
nearest ancestor not of source s, d_a its depth and j = depth(v) − d_a: the proposal made right
after a's token, followed j tokens deep. The step accepts the deepest accepted node (ties: the
first in breadth-first order, i.e. the longest accepted candidate, as executors pick), yields its
depth + 1 tokens (the bonus) and the next step starts right after them. Nodes whose position lies
past the request's last position are never accepted, and the last step of a request yields only the
positions left, so the tokens of a request are its positions.

Why this is exact. Greedy: a drafted node can only be accepted when its path is accepted, i.e.
when every token above it is the true continuation; the trace's candidates were computed on that
true prefix, so the node's token is the trace's candidate at its rank and it matches the target's
argmax iff that rank is the true token's rank. Off-path nodes never influence the outcome.
Sampling with deterministic candidates (top-k, n-gram, suffix, recycling): the recursive
rejection scheme accepts the k-th child with probability r(x_k) and outputs a token distributed as
the target's r; coupling that output with the trace's sampled token, the accepted child is the
one whose token is the sample. The replayed accepted lengths thus have exactly the distribution of
real verification (an exact coupling, not an approximation).

Missing rows count as rejections; a request's length is its largest position + 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from weakref import WeakKeyDictionary

import numpy as np
import polars as pl

from specscope.errors import InputError
from specscope.trace.schema import Trace, sequence_sources, trace_sources
from specscope.tree import Tree

_CHUNK_CELLS = 1 << 25
"""Bound on nodes × start positions held at once (bytes of the acceptance mask)."""
_NO_RANK = -2
"""A rank that no trace row has: tree ranks beyond int16 compare against it."""


@dataclass(frozen=True, eq=False)
class ReplayResult:
    """Replay totals over all requests of a trace.

    tokens_per_step: tokens / steps (accepted drafts + bonus per verification step).
    accepted_hist[a]: steps that accepted a drafts. node_accepts[v]: steps whose accepted path
    contains node v (node_accepts[0] = steps; node_accepts / steps is the empirical f(v)).
    """

    tokens_per_step: float
    steps: int
    tokens: int
    accepted_hist: np.ndarray
    node_accepts: np.ndarray


def replay(trace: Trace, tree: Tree) -> ReplayResult:
    """Replay `tree` as a static tree over every request of `trace` (module docstring): exact
    for greedy traces, an exact coupling for sampled traces with deterministic candidates."""
    dense = dense_trace(trace)
    best = _best_nodes(trace, dense, tree)
    depths = tree.depths
    lengths = dense.lengths
    pos = np.zeros_like(lengths)
    visits = np.zeros(tree.size, dtype=np.int64)
    hist = np.zeros(tree.depth + 1, dtype=np.int64)
    tokens = steps = 0
    active = np.arange(lengths.size)
    while active.size:
        node = best[active, pos[active]]
        accepted = depths[node]
        visits += np.bincount(node, minlength=tree.size)
        hist += np.bincount(accepted, minlength=hist.size)
        tokens += int(np.minimum(accepted + 1, lengths[active] - pos[active]).sum())
        steps += active.size
        pos[active] += accepted + 1
        active = active[pos[active] < lengths[active]]
    node_accepts = visits @ tree.ancestor_mask.astype(np.int64)
    return ReplayResult(tokens / steps, steps, tokens, hist, node_accepts)


def accepted_lengths(trace: Trace, tree: Tree) -> np.ndarray:
    """Drafts `tree` accepts if a step starts at each position: shape (requests, max length),
    rows in ascending request_id, −1 past a request's last position."""
    dense = dense_trace(trace)
    out = tree.depths[_best_nodes(trace, dense, tree)]
    out[np.arange(out.shape[1])[None, :] >= dense.lengths[:, None]] = -1
    return out


# ---- dense per-source arrays ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class DenseTrace:
    """Trace columns as (requests, max length) arrays per source, requests in ascending
    request_id: `rank` (−1 where missing), `match` (match_len) and `proposal` (proposal length),
    with each request's length and the sequence sources."""

    lengths: np.ndarray
    rank: dict[str, np.ndarray]
    match: dict[str, np.ndarray]
    proposal: dict[str, np.ndarray]
    sequence: frozenset[str]


_DENSE: WeakKeyDictionary[Trace, DenseTrace] = WeakKeyDictionary()


def dense_trace(trace: Trace) -> DenseTrace:
    """The trace's `DenseTrace` (built once per trace object)."""
    if trace not in _DENSE:
        df = trace.df
        ids = df.get_column("request_id").unique().sort().to_numpy()
        lengths = (
            (df.group_by("request_id").agg(pl.col("pos").max() + 1).sort("request_id"))
            .get_column("pos")
            .to_numpy()
            .astype(np.int64)
        )
        shape = (ids.size, int(lengths.max()))
        rank, match, proposal = {}, {}, {}
        for (source,), part in df.partition_by("source", as_dict=True).items():
            r = np.searchsorted(ids, part.get_column("request_id").to_numpy())
            p = part.get_column("pos").to_numpy()
            rank[source] = np.full(shape, -1, dtype=np.int16)
            rank[source][r, p] = part.get_column("rank").to_numpy()
            match[source] = np.zeros(shape, dtype=np.int16)
            match[source][r, p] = part.get_column("match_len").to_numpy()
            proposal[source] = np.zeros(shape, dtype=np.int16)
            proposal[source][r, p] = part.get_column("proposal").list.len().to_numpy()
        _DENSE[trace] = DenseTrace(lengths, rank, match, proposal,
                                   frozenset(sequence_sources(trace)))
    return _DENSE[trace]


# ---- the tree walk, vectorised over every start position -----------------------------------


@dataclass(frozen=True)
class _Group:
    """Nodes of one level tested against one shifted trace array."""

    members: np.ndarray  # positions within the level
    match: bool  # compare match_len ≥ values, else rank == values
    source: str
    offset: int  # row = start position + offset
    values: np.ndarray


def _plan(trace: Trace, dense: DenseTrace, tree: Tree) -> list[tuple[int, int, list[_Group]]]:
    """Per level d ≥ 1: (first node, end node, groups)."""
    _check_sources(trace, tree)
    names = tree.sources
    depths, parents = tree.depths, tree.parents
    anchor = np.zeros(tree.size, dtype=np.int64)
    for v in range(1, tree.size):
        u = parents[v]
        anchor[v] = anchor[u] if names[u] == names[v] else depths[u]
    levels = []
    for d in range(1, tree.depth + 1):
        start, end = np.searchsorted(depths, [d, d + 1])
        keyed: dict[tuple[bool, str, int], list[tuple[int, int]]] = {}
        for v in range(start, end):
            s = names[v]
            if s in dense.sequence:
                if tree.ranks[v] != 0:
                    raise InputError(
                        f"tree node {v} of sequence source {s!r} has rank {tree.ranks[v]}; "
                        "sequence-source nodes have rank 0"
                    )
                key, value = (True, s, int(anchor[v])), int(d - anchor[v])
            else:
                r = int(tree.ranks[v])
                key, value = (False, s, d - 1), r if r <= np.iinfo(np.int16).max else _NO_RANK
            keyed.setdefault(key, []).append((v - start, value))
        groups = [
            _Group(
                np.array([m for m, _ in items]),
                key[0],
                key[1],
                key[2],
                np.array([x for _, x in items], dtype=np.int16)[:, None],
            )
            for key, items in keyed.items()
        ]
        levels.append((int(start), int(end), groups))
    return levels


def _check_sources(trace: Trace, tree: Tree) -> None:
    available = trace_sources(trace)
    missing = sorted(set(tree.sources[1:]) - set(available))
    if missing:
        raise InputError(
            f"{trace.name}: tree source {missing[0]!r} is not in the trace "
            f"(sources: {', '.join(available)})"
        )


def _best_nodes(trace: Trace, dense: DenseTrace, tree: Tree) -> np.ndarray:
    """Deepest accepted node (first in BFS order) for a step starting at every (request, pos)."""
    levels = _plan(trace, dense, tree)
    n_req, width = dense.rank[next(iter(dense.rank))].shape
    pad = tree.depth + 1
    padded = {
        (match, s): np.pad(arrays[s], ((0, 0), (0, pad)), constant_values=0 if match else -1)
        for match, arrays in ((False, dense.rank), (True, dense.match))
        for s in {g.source for _, _, groups in levels for g in groups if g.match == match}
    }
    best = np.zeros((n_req, width), dtype=np.int64)
    chunk = max(1, _CHUNK_CELLS // (tree.size * width))
    for r0 in range(0, n_req, chunk):
        r1 = min(r0 + chunk, n_req)
        cells = (r1 - r0) * width
        left = dense.lengths[r0:r1, None] - np.arange(width)[None, :]  # positions from pos on
        acc = np.zeros((tree.size, cells), dtype=bool)
        acc[0] = True
        out = np.zeros(cells, dtype=np.int64)
        for d, (start, end, groups) in enumerate(levels, start=1):
            cond = np.empty((end - start, cells), dtype=bool)
            for g in groups:
                row = padded[g.match, g.source][r0:r1, g.offset : g.offset + width].reshape(1, -1)
                cond[g.members] = row >= g.values if g.match else row == g.values
            cond &= acc[tree.parents[start:end]]
            cond &= (left >= d).reshape(1, -1)
            acc[start:end] = cond
            out = np.where(cond.any(axis=0), start + cond.argmax(axis=0), out)
        best[r0:r1] = out.reshape(r1 - r0, width)
    return best
