"""The drafter's recorded candidates along each trace request's true path, by position.

A trace row (request, pos, source) holds what the drafter proposed at that position *given the
true prefix*: its candidates' scores (the draft's probabilities, best first) and the rank of the
target's token among them. A simulated request replaying a trace request at `generated` tokens
sits at position `generated`; the nodes of a step's tree that follow the target's path sit at the
positions after it. Policies that read the draft's scores per step (DySpec, SpecDec++) look them
up here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from specscope.trace import Trace, resolve_source


@dataclass(frozen=True, eq=False)
class RequestPath:
    """One trace request's rows, dense by position: scores (positions, K) zero-padded, the
    target token's rank (−1: not a candidate), and whether the trace has the row at all."""

    scores: np.ndarray
    ranks: np.ndarray
    present: np.ndarray

    def row(self, pos: int) -> tuple[np.ndarray, int] | None:
        """(candidate scores, rank of the target's token) at `pos`, None without a row."""
        if pos >= self.present.size or not self.present[pos]:
            return None
        return self.scores[pos], int(self.ranks[pos])


class TracePositions:
    """Candidate scores and ranks of one drafter source, per trace request and position."""

    def __init__(self, trace: Trace, source: str | None) -> None:
        self.source = resolve_source(trace, source)
        rows = trace.df.filter(pl.col("source") == self.source).sort("request_id", "pos")
        self.k = int(rows.get_column("cand_scores").list.len().max() or 0)
        scores = rows.select(
            pl.col("cand_scores").list.get(i, null_on_oob=True).fill_null(0.0).cast(pl.Float64)
            .alias(str(i))
            for i in range(self.k)
        ).to_numpy().reshape(rows.height, self.k)
        every = trace.df.get_column("request_id").unique().sort().to_numpy()
        ids = np.searchsorted(every, rows.get_column("request_id").to_numpy())
        pos = rows.get_column("pos").to_numpy().astype(np.int64)
        rank = rows.get_column("rank").to_numpy()
        requests, starts = np.unique(ids, return_index=True)
        ends = np.r_[starts[1:], ids.size]
        self._paths: dict[int, RequestPath] = {}
        for request, lo, hi in zip(requests.tolist(), starts, ends, strict=True):
            width = int(pos[hi - 1]) + 1
            dense = np.zeros((width, self.k))
            ranks = np.full(width, -1, dtype=np.int64)
            present = np.zeros(width, dtype=bool)
            dense[pos[lo:hi]] = scores[lo:hi]
            ranks[pos[lo:hi]] = rank[lo:hi]
            present[pos[lo:hi]] = True
            self._paths[int(request)] = RequestPath(dense, ranks, present)

    def path(self, request: int | None) -> RequestPath | None:
        """The rows of trace request `request`, None if it has none. Trace requests are
        numbered as `Slot.trace_request` numbers them (and `trace.replay.dense_trace` rows
        them): 0, 1, … in ascending request_id over the whole trace."""
        return None if request is None else self._paths.get(request)
