"""The event log: every arrival, admission, prefill, step and finish, in simulated time order.

Rows are appended as the simulation reaches them (simpy processes events in time order, so times
never decrease) and become one polars table at the end: `time_s`, `event` (one of `EVENTS`),
`replica`, `group` (the arrival), `request` (the sequence; −1 for group and step events),
`batch` (sequences in the step), `tokens` (a step's tree tokens at its start, tokens generated
at its end; a prefill's prompt tokens) and `kv_bytes` (KV memory in use on the replica, a
step's trees in flight included).
"""

from __future__ import annotations

import polars as pl

EVENTS = ("arrival", "admit", "prefill_done", "step_start", "step_end", "finish")
ARRIVAL, ADMIT, PREFILL_DONE, STEP_START, STEP_END, FINISH = range(len(EVENTS))


class EventLog:
    """Typed events appended in time order; `frame()` is the table."""

    def __init__(self) -> None:
        self._rows: list[tuple[float, int, int, int, int, int, int, float]] = []

    def add(self, time_s: float, event: int, replica: int, group: int = -1, request: int = -1,
            batch: int = 0, tokens: int = 0, kv_bytes: float = 0.0) -> None:
        """Append one event (`event` is an index into `EVENTS`)."""
        self._rows.append((time_s, event, replica, group, request, batch, tokens, kv_bytes))

    def frame(self) -> pl.DataFrame:
        """The log as a table (module docstring), in the order the events happened."""
        columns = list(zip(*self._rows, strict=True)) if self._rows else [()] * 8
        names = ("time_s", "event", "replica", "group", "request", "batch", "tokens",
                 "kv_bytes")
        types = (pl.Float64, pl.UInt8, pl.Int32, pl.Int64, pl.Int64, pl.Int32, pl.Int64,
                 pl.Float64)
        df = pl.DataFrame({n: pl.Series(n, c, dtype=t)
                           for n, c, t in zip(names, columns, types, strict=True)})
        return df.with_columns(pl.col("event").replace_strict(
            list(range(len(EVENTS))), list(EVENTS), return_dtype=pl.Enum(EVENTS)))
