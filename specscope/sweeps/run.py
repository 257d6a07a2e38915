"""`specscope sweep` as a library call: read the config, skip the finished cells, evaluate the
rest on an engine while appending their rows, and consolidate the table."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from specscope import __version__
from specscope.errors import InputError
from specscope.limits import check_memory
from specscope.sweeps.cells import CELL_BYTES, count_cells, enumerate_cells
from specscope.sweeps.config import load_config
from specscope.sweeps.engines import ENGINES, run_local, run_ray
from specscope.sweeps.store import ResultStore

TOP_REASONS = 5


@dataclass(frozen=True)
class SweepResult:
    """The consolidated table and what this run did: cells in the config, computed now, reused
    from earlier runs, recorded as skipped (with the most frequent reasons), seconds taken."""

    path: Path
    run_id: str
    engine: str
    cells: int
    computed: int
    reused: int
    skipped: int
    reasons: dict[str, int]
    wall_s: float
    table: pl.DataFrame

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary of `specscope sweep --json`."""
        return {"output": str(self.path), "run_id": self.run_id, "engine": self.engine,
                "cells": self.cells, "computed": self.computed, "reused": self.reused,
                "skipped": self.skipped, "skip_reasons": self.reasons, "wall_s": self.wall_s}


def run_sweep(config: str | Path, engine: str = "local", address: str | None = None,
              output: str | Path | None = None, workers: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Evaluate every cell of `config` not already in `output` (default: the config's name with
    .parquet, in the current folder); `progress(done, total)` as cells finish."""
    if engine not in ENGINES:
        raise InputError(f"--backend: one of {', '.join(ENGINES)}, got {engine!r}")
    if address is not None and engine != "ray":
        raise InputError("--address joins a Ray cluster: give it with --backend ray")
    if workers is not None and (engine != "ray" or address is not None):
        raise InputError("--workers sets the CPUs of a local Ray: give it with --backend ray "
                         "and no --address")
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be ≥ 1, got {workers}")
    start = time.perf_counter()
    cfg = load_config(config)
    n_cells = count_cells(cfg)
    check_memory(n_cells * CELL_BYTES, f"sweep {cfg.path.name}: a grid of {n_cells:,} cells")
    cells = enumerate_cells(cfg)
    store = ResultStore(output if output is not None else Path(f"{cfg.path.stem}.parquet"))
    finished = set(store.load().get_column("key"))
    todo = [c for c in cells if c.key not in finished]
    run_id = uuid.uuid4().hex[:12]
    count = len(cells) - len(todo)

    def tick(n: int) -> None:
        nonlocal count
        count += n
        if progress is not None:
            progress(count, len(cells))

    tick(0)
    if todo and engine == "local":
        run_local(todo, cfg.traces, run_id, lambda rows: store.append(rows, run_id), tick)
    elif todo:
        run_ray(todo, cfg.traces, run_id, lambda rows: store.append(rows, run_id), tick,
                address, workers)
    table = store.finish([c.key for c in cells],
                         {"sweep_config": cfg.text, "specscope_version": __version__})
    skipped = table.filter(pl.col("status") == "skipped")
    reasons = skipped.group_by("reason").len().sort(["len", "reason"], descending=[True, False])
    return SweepResult(
        path=store.path, run_id=run_id, engine=engine, cells=len(cells), computed=len(todo),
        reused=len(cells) - len(todo), skipped=skipped.height,
        reasons=dict(zip(reasons["reason"].head(TOP_REASONS), reasons["len"].head(TOP_REASONS),
                         strict=True)),
        wall_s=time.perf_counter() - start, table=table)
