"""Positional acceptance statistics fitted on a trace, with confidence intervals.

`AcceptanceModel.p` is Sequoia's positional vector p[k] (rank k, 0-based: the marginal
probability that the k-th ranked child of an accepted node is the one accepted) or a depth table
p[d-1][k]. Every entry carries a confidence interval and the number of trace rows behind it.

Estimators, per drafter source:

- ranked source, greedy trace (temperature 0): p[k] = fraction of rows with rank == k; a binomial
  proportion, Wilson interval.
- ranked source, temperature > 0: p[k] = mean of cand_target_probs[k] (0 where the row has fewer
  candidates). With deterministic candidates the k-th candidate is accepted with probability equal
  to its target probability, so this mean is the marginal acceptance; normal-approximation
  interval of the mean.
- sequence source (rows carry a proposal): one rank, p[0] = P(match_len ≥ 1); Wilson interval.

Depth-dependent tables (`depth_dependent=True`): a node at depth d is only ever verified when the
d − 1 positions above it were accepted, and acceptance is not independent of that (easy stretches
of text are accepted in runs). So row d is estimated on the positions t whose previous d − 1
positions of the same request and source all had a rank in 0..K−1 (the path through a full top-K
tree survived down to t): row 1 uses every position, deeper rows use ever fewer. This is the
acceptance a node at depth d sees in a tree holding every top-K child above it; in a narrower tree
the surviving paths are a subset of these, so the estimate is an approximation measured by replay.
Sequence sources: p[d-1][0] = P(match_len ≥ d | match_len ≥ d − 1), d counted along the proposal.
Rows with no samples (nothing survived that deep) are dropped; deeper nodes reuse the last row,
which then is 0 or the max_depth cap was reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import polars as pl

from specscope.errors import InputError
from specscope.trace.schema import Trace, sequence_sources
from specscope.trace.sources import resolve_source
from specscope.tree import DEFAULT_SOURCE, acceptance_table

DEFAULT_MAX_DEPTH = 12


@dataclass(frozen=True, eq=False)
class AcceptanceModel:
    """Acceptance vector p[k] (shape (K,)) or depth table p[d-1][k] (shape (D, K)) of one source.

    `low`/`high` bound each entry at the given `confidence`; `n` is the number of trace rows
    behind it (0 for a vector given by hand). `method` says how it was estimated: "rank",
    "target_prob", "match_len" or "given".
    """

    p: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n: np.ndarray
    source: str = DEFAULT_SOURCE
    method: str = "given"
    confidence: float = 0.95

    def __post_init__(self) -> None:
        arrays = {k: np.array(getattr(self, k), dtype=np.float64) for k in ("p", "low", "high")}
        arrays["n"] = np.array(self.n, dtype=np.int64)
        acceptance_table(arrays["p"], f"acceptance of {self.source}")
        for key, value in arrays.items():
            if value.shape != arrays["p"].shape:
                raise InputError(
                    f"acceptance {self.source}: {key} has shape {value.shape}, p has "
                    f"{arrays['p'].shape}"
                )
            value.setflags(write=False)
            object.__setattr__(self, key, value)

    @classmethod
    def from_vector(cls, p: np.ndarray | list, source: str = DEFAULT_SOURCE) -> AcceptanceModel:
        """A model from a given vector or depth table (no samples, so the interval is the point)."""
        table = np.asarray(p, dtype=np.float64)
        acceptance_table(table, f"acceptance of {source}")
        return cls(table, table, table, np.zeros(table.shape, dtype=np.int64), source, "given")

    @classmethod
    def from_trace(
        cls,
        trace: Trace,
        source: str | None = None,
        k: int | None = None,
        depth_dependent: bool = False,
        max_depth: int | None = None,
        confidence: float = 0.95,
    ) -> AcceptanceModel:
        """Fit p (see the module docstring) for `source` (default: `default_source(trace)`).

        k: ranks to estimate (default: the trace's K metadata, else the longest candidate list);
        ignored for sequence sources, which have one rank. max_depth caps the depth table
        (default 12, at least one row).
        """
        source = resolve_source(trace, source)
        if not 0 < confidence < 1:
            raise InputError(f"acceptance: confidence must lie in (0, 1), got {confidence}")
        depth = max(1, DEFAULT_MAX_DEPTH if max_depth is None else max_depth)
        if not depth_dependent:
            depth = 1
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        rows = trace.df.filter(pl.col("source") == source).sort("request_id", "pos")
        if source in sequence_sources(trace):
            stats = _sequence_stats(rows.get_column("match_len").to_numpy(), depth, z)
            method = "match_len"
        else:
            if k is None:
                k = int(trace.metadata.get("K") or rows.get_column("cand_tokens").list.len().max())
            if k < 1:
                raise InputError(f"acceptance: k must be ≥ 1, got {k}")
            run = _runs(rows, k)
            if trace.temperature > 0:
                stats = _mean_stats(rows, run, k, depth, z)
                method = "target_prob"
            else:
                stats = _rank_stats(rows.get_column("rank").to_numpy(), run, k, depth, z)
                method = "rank"
        p, low, high, n = (s[: int(np.count_nonzero(stats[3][:, 0]))] for s in stats)
        if not depth_dependent:
            p, low, high, n = p[0], low[0], high[0], n[0]
        return cls(p, low, high, n, source, method, confidence)

    @property
    def depth_dependent(self) -> bool:
        """True for a depth × rank table, False for one vector used at every depth."""
        return self.p.ndim == 2

    @property
    def table(self) -> np.ndarray:
        """p as a (D, K) table (D = 1 for a vector)."""
        return np.atleast_2d(self.p)

    def to_frame(self) -> pl.DataFrame:
        """One row per entry: depth (null for a vector), rank, p, low, high, n."""
        d, k = np.indices(self.table.shape)
        return pl.DataFrame(
            {
                "depth": pl.Series(d.ravel() + 1, dtype=pl.UInt32),
                "rank": pl.Series(k.ravel(), dtype=pl.UInt32),
                "p": self.table.ravel(),
                "low": np.atleast_2d(self.low).ravel(),
                "high": np.atleast_2d(self.high).ravel(),
                "n": np.atleast_2d(self.n).ravel(),
            }
        ).with_columns(depth=pl.col("depth") if self.depth_dependent else pl.lit(None, pl.UInt32))


Stats = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""(p, low, high, n), each (D, K)."""


def wilson(hits: np.ndarray, n: np.ndarray, z: float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of hits/n at normal quantile z; (0, 1) where n = 0."""
    hits, n = np.asarray(hits, dtype=np.float64), np.asarray(n, dtype=np.float64)
    safe = np.maximum(n, 1.0)
    phat = hits / safe
    denom = 1 + z * z / safe
    centre = (phat + z * z / (2 * safe)) / denom
    half = z / denom * np.sqrt(phat * (1 - phat) / safe + z * z / (4 * safe * safe))
    empty = n == 0
    return np.where(empty, 0.0, centre - half).clip(0, 1), np.where(empty, 1.0, centre + half).clip(
        0, 1
    )


def _runs(rows: pl.DataFrame, k: int) -> np.ndarray:
    """For each row (sorted by request, pos): consecutive positions right before it (same
    request, no gap) whose rank was in 0..k−1."""
    hit = pl.col("rank").is_between(0, k - 1)
    prev_hit = hit.shift(1).over("request_id").fill_null(False) & (
        pl.col("pos").cast(pl.Int64).diff().over("request_id") == 1
    )
    return (
        rows.select("request_id", prev_hit.alias("prev"))
        .with_columns(group=(~pl.col("prev")).cum_sum().over("request_id"))
        .select(pl.int_range(pl.len()).over("request_id", "group"))
        .to_series()
        .to_numpy()
    )


def _at_least(per_run: np.ndarray) -> np.ndarray:
    """Row d of the result sums rows c ≥ d of per_run (runs of d or more hits)."""
    return np.cumsum(per_run[::-1], axis=0)[::-1]


def _rank_stats(rank: np.ndarray, run: np.ndarray, k: int, depth: int, z: float) -> Stats:
    c = np.minimum(run, depth - 1)
    ranked = (rank >= 0) & (rank < k)
    per_run = np.zeros((depth, k + 1))
    np.add.at(per_run, (c, np.where(ranked, rank, k)), 1)
    per_depth = _at_least(per_run)
    n = np.repeat(per_depth.sum(axis=1, keepdims=True), k, axis=1)
    hits = per_depth[:, :k]
    low, high = wilson(hits, n, z)
    return hits / np.maximum(n, 1), low, high, n


def _mean_stats(rows: pl.DataFrame, run: np.ndarray, k: int, depth: int, z: float) -> Stats:
    q = rows.select(
        pl.col("cand_target_probs")
        .list.get(i, null_on_oob=True)
        .fill_null(0.0)
        .cast(pl.Float64)
        .alias(str(i))
        for i in range(k)
    ).to_numpy()
    c = np.minimum(run, depth - 1)
    s0 = _at_least(np.bincount(c, minlength=depth).astype(np.float64))[:, None]
    s1, s2 = np.zeros((depth, k)), np.zeros((depth, k))
    np.add.at(s1, c, q)
    np.add.at(s2, c, q * q)
    s1, s2 = _at_least(s1), _at_least(s2)
    n = np.repeat(s0, k, axis=1)
    safe = np.maximum(n, 1)
    mean = s1 / safe
    var = np.maximum(s2 - s1 * mean, 0) / np.maximum(n - 1, 1)
    half = np.where(n > 1, z * np.sqrt(var / safe), 1.0)
    return mean, (mean - half).clip(0, 1), (mean + half).clip(0, 1), n


def _sequence_stats(match_len: np.ndarray, depth: int, z: float) -> Stats:
    m = np.minimum(match_len.astype(np.int64), depth)
    reach = _at_least(np.bincount(m, minlength=depth + 1).astype(np.float64))
    n, hits = reach[:depth, None], reach[1:, None]
    low, high = wilson(hits, n, z)
    return hits / np.maximum(n, 1), low, high, n
