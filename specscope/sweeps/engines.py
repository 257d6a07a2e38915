"""Engines that evaluate batches of cells: this process (`local`) or Ray tasks (`ray`).

Cells go out in batches, not one task per cell: an analytic cell takes about a millisecond, less
than a Ray task costs, and neighbouring cells share a pricing and trees (`cells.ORDER`), which a
worker caches. Simulated cells take from tenths of a second to seconds, one per batch. Each
finished batch is handed to `done` at once, which appends it to the results, so a kill loses
only the batches in flight. Both engines run the same `evaluate_batch` on the same cells, whose
results depend only on the cells: the tables are identical.

On a Ray cluster every node needs the same specscope installed: traces travel through the object
store, but hardware profiles are loaded by name on the workers (a profile given as a .toml path,
or one in a user profile folder, must exist there too).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence

import polars as pl

from specscope.errors import InputError
from specscope.sweeps.cells import Cell
from specscope.sweeps.evaluate import evaluate_batch
from specscope.trace import Trace

ENGINES = ("local", "ray")
MAX_BATCH = 100
"""Most analytic cells per batch (a part file each; about 0.1 s of work)."""

Done = Callable[[pl.DataFrame], None]
Tick = Callable[[int], None]


def batches(cells: Sequence[Cell], workers: int) -> list[list[Cell]]:
    """Consecutive analytic cells in batches of at most `MAX_BATCH`, small enough that every
    worker gets about four; each simulated cell alone."""
    analytic = sum(c.mode == "analytic" for c in cells)
    size = max(1, min(MAX_BATCH, math.ceil(analytic / (4 * workers))))
    out: list[list[Cell]] = []
    for cell in cells:
        if cell.mode == "analytic" and out and len(out[-1]) < size and (
                out[-1][-1].mode == "analytic"):
            out[-1].append(cell)
        else:
            out.append([cell])
    return out


def run_local(cells: Sequence[Cell], traces: Mapping[str, Trace], run_id: str, done: Done,
              tick: Tick) -> None:
    """Evaluate the cells in this process, batch by batch; `tick(1)` after each cell."""
    for batch in batches(cells, 1):
        done(evaluate_batch(batch, traces, run_id, on_cell=lambda: tick(1)))


def run_ray(cells: Sequence[Cell], traces: Mapping[str, Trace], run_id: str, done: Done,
            tick: Tick, address: str | None = None, workers: int | None = None) -> None:
    """Evaluate the cells in batches of Ray tasks and hand results over as they complete
    (`ray.wait`); `tick(n)` after each batch of n cells. Joins the cluster at `address`, uses
    a Ray already initialised in this process, or starts a local one with `workers` CPUs."""
    try:
        import ray
    except ImportError:
        raise InputError("--backend ray needs Ray: pip install 'specscope[ray]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            if address is not None:
                ray.init(address=address, logging_level=logging.WARNING)
            else:
                ray.init(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False,
                         logging_level=logging.WARNING)
        except ConnectionError as exc:
            raise InputError(f"--address {address}: cannot join a Ray cluster ({exc})") from None
    try:
        task = ray.remote(num_cpus=1)(evaluate_batch)
        shared = ray.put(dict(traces))
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        pending = {task.remote(batch, shared, run_id): len(batch)
                   for batch in batches(cells, cpus)}
        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1)
            for ref in finished:
                done(ray.get(ref))
                tick(pending.pop(ref))
    finally:
        if started:
            ray.shutdown()

