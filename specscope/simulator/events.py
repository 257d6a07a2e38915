"""The event log: every arrival, admission, prefill, step and finish, in simulated time order.

Rows are appended as the simulation reaches them (simpy processes events in time order, so times
never decrease) and become one polars table at the end: `time_s`, `event` (one of `EVENTS`),
`replica`, `group` (the arrival), `request` (the sequence; −1 for group and step events),
`batch` (sequences in the step), `tokens` (a step's tree tokens at its start, tokens generated
at its end; a prefill's prompt tokens) and `kv_bytes` (KV memory in use on the replica, a
step's trees in flight included).
"""

from __future__ import annotations

from array import array

import numpy as np
import polars as pl

EVENTS = ("arrival", "admit", "prefill_done", "step_start", "step_end", "finish")
ARRIVAL, ADMIT, PREFILL_DONE, STEP_START, STEP_END, FINISH = range(len(EVENTS))


COLUMNS = (("time_s", "d", pl.Float64), ("event", "B", pl.UInt8), ("replica", "i", pl.Int32),
           ("group", "q", pl.Int64), ("request", "q", pl.Int64), ("batch", "i", pl.Int32),
           ("tokens", "q", pl.Int64), ("kv_bytes", "d", pl.Float64))
"""Column name, `array` type code and polars type."""
EVENT_BYTES = 90
"""Bytes one event holds at the end of a run: its row in the typed arrays (45) and again in the
table `frame()` makes of them."""


class EventLog:
    """Typed events appended in time order (to typed arrays: a long run's million events
    cost 45 bytes each and nothing to the garbage collector); `frame()` is the table."""

    def __init__(self) -> None:
        self._columns = tuple(array(code) for _, code, _ in COLUMNS)

    def add(self, time_s: float, event: int, replica: int, group: int = -1, request: int = -1,
            batch: int = 0, tokens: int = 0, kv_bytes: float = 0.0) -> None:
        """Append one event (`event` is an index into `EVENTS`)."""
        c = self._columns
        c[0].append(time_s)
        c[1].append(event)
        c[2].append(replica)
        c[3].append(group)
        c[4].append(request)
        c[5].append(batch)
        c[6].append(tokens)
        c[7].append(kv_bytes)

    def frame(self) -> pl.DataFrame:
        """The log as a table (module docstring), in the order the events happened."""
        df = pl.DataFrame([pl.Series(name, np.asarray(column), dtype=kind)
                           for (name, _, kind), column in zip(COLUMNS, self._columns,
                                                               strict=True)])
        return df.with_columns(pl.col("event").replace_strict(
            list(range(len(EVENTS))), list(EVENTS), return_dtype=pl.Enum(EVENTS)))
