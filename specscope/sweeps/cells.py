"""Cells: one point of a sweep's grid, with every parameter concrete, and its stable key.

A cell's key is a hash of everything its result depends on: its parameters, its acceptance
input (the vector, or the trace file's digest), its hardware profile's file digest, the
simulation settings and the config's seed. A re-run recomputes a cell only when one of them
changed. Simulation seeds derive from the config's seed and the workload (rate and settings), not
from the rest of the key: every hardware, method and drafter at one rate meets the same arrivals
and lengths (common random numbers), so differences between cells are not sampling noise.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from specscope.hw_profiles import load_profile
from specscope.hw_profiles.deployment import Deployment, deployment
from specscope.hw_profiles.engine import DEFAULT_ENGINE
from specscope.json_out import strict_json
from specscope.models import get_model
from specscope.sweeps.config import (
    NO_SYSTEM,
    AcceptanceInput,
    Grid,
    SweepConfig,
    digest,
    profile_digest,
)
from specscope.trace.sources import NO_DRAFTER

KEY_VERSION = 1
"""Part of every key: bump it when a cell's evaluation changes meaning, so nothing stale is
reused."""
ORDER = ("hardware", "runtime", "engine", "target", "tp", "weight_bits", "ep", "precision",
         "expert_precision", "kv_bits", "system", "drafter", "batch", "rate", "method", "budget")
"""Enumeration order, outermost first: cells that share a pricing (hardware … batch) are
neighbours, so a batch of cells reuses one pricing and one set of trees."""
DEPLOYMENT_DEFAULTS: dict[str, Any] = {"ep": 1, "precision": "bf16", "expert_precision": None,
                                       "kv_bits": 16}
"""The deployment axes added after the first sweeps, at their defaults: a cell that leaves one
at its default keeps the key it had before the axis existed."""


@dataclass(frozen=True)
class Cell:
    """One grid point, every parameter resolved (runtime, weight bits, context); ep, precision,
    expert_precision (None: as precision) and kv_bits are the target's as deployed
    (`Deployment`)."""

    mode: str
    hardware: str
    runtime: str
    target: str
    drafter: str
    source: str
    """The source whose acceptance the cell uses (`Grid.sources`; `none` for plain decoding)."""
    method: str
    budget: int
    batch: int
    rate: float | None
    tp: int
    weight_bits: int
    context: int | None  # None for simulated cells: their prompts set the context
    max_depth: int
    acceptance: AcceptanceInput
    seed: int
    simulation: tuple[tuple[str, Any], ...]
    profile: str
    """sha256 of the hardware profile's file."""
    system: str = NO_SYSTEM
    system_options: tuple[tuple[str, Any], ...] = ()
    engine: str = DEFAULT_ENGINE
    ep: int = 1
    precision: str = "bf16"
    expert_precision: str | None = None
    kv_bits: int = 16

    @property
    def deployment(self) -> Deployment:
        """What the cell deploys (specscope's own engine: the models as they stand on the
        profile's loop); a simulated cell's batch is its server's limit."""
        return cell_deployment(self.hardware, self.runtime, self.target, self.drafter, self.tp,
                               self.weight_bits, self.engine, self.ep, self.precision,
                               self.expert_precision, self.kv_bits,
                               batch=self.batch if self.mode == "analytic" else 1,
                               max_batch=self.batch if self.mode == "simulate" else None)

    @cached_property
    def key(self) -> str:
        """16 hex digits of sha256 over everything the result depends on (module docstring)."""
        params = self.columns() | {
            "acceptance": self.acceptance.digest, "simulation": dict(self.simulation),
            "profile": self.profile, "version": KEY_VERSION,
        }
        if self.system == NO_SYSTEM:  # the keys of cells without a system are those before
            del params["system"], params["system_options"]  # systems existed
        if self.engine == DEFAULT_ENGINE:  # and those on specscope's loop, before engines
            del params["engine"]
        for name, default in DEPLOYMENT_DEFAULTS.items():  # and those before these axes
            if params[name] == default:
                del params[name]
        return digest(params)[:16]

    def columns(self) -> dict[str, Any]:
        """The parameter columns of the results table."""
        return {
            "mode": self.mode, "hardware": self.hardware, "runtime": self.runtime,
            "engine": self.engine, "target": self.target, "drafter": self.drafter,
            "method": self.method,
            "budget": self.budget, "batch": self.batch, "rate": self.rate, "tp": self.tp,
            "weight_bits": self.weight_bits, "ep": self.ep, "precision": self.precision,
            "expert_precision": self.expert_precision, "kv_bits": self.kv_bits,
            "context": self.context,
            "max_depth": self.max_depth, "acceptance": self.acceptance.label, "seed": self.seed,
            "system": self.system,
            "system_options": strict_json(dict(self.system_options), None, sort_keys=True),
        }


def cell_deployment(hardware: str, runtime: str, target: str, drafter: str, tp: int,
                    weight_bits: int, engine: str, ep: int, precision: str,
                    expert_precision: str | None, kv_bits: int, *, batch: int = 1,
                    max_batch: int | None = None) -> Deployment:
    """The `Deployment` of a cell's parameters (`Cell.deployment`; the analytic pricing builds
    it from the same parameters, so cells that share them share one pricing)."""
    return deployment(hardware, target=target,
                      drafter=None if drafter == NO_DRAFTER else drafter,
                      engine=None if engine == DEFAULT_ENGINE else engine,
                      runtime=runtime, tp=tp, weight_bits=weight_bits, batch=batch,
                      max_batch=max_batch, ep=ep, precision=precision,
                      expert_precision=expert_precision, kv_bits=kv_bits)


CELL_BYTES = 3700
"""Memory a sweep holds per cell, an estimate: its `Cell` and key, its row of results and the
bookkeeping of finished keys (measured: 3.7 KB a cell more, from 4,000 to 16,000 analytic
cells)."""


def count_cells(config: SweepConfig) -> int:
    """How many cells `enumerate_cells` yields at most (before merging repeated keys), counted
    without expanding the grids."""
    total = 0
    for grid in config.grids:
        points = math.prod(len(grid.axes[a]) for a in ORDER if a != "system")
        total += points * sum(math.prod(len(v) for v in grid.system_options.get(s, {}).values())
                              for s in grid.axes["system"])
    return total


def enumerate_cells(config: SweepConfig) -> list[Cell]:
    """Every cell of every grid in `ORDER`, each key once (the first grid that names it)."""
    cells: dict[str, Cell] = {}
    for grid in config.grids:
        for cell in _grid_cells(grid, config):
            cells.setdefault(cell.key, cell)
    return list(cells.values())


def _grid_cells(grid: Grid, config: SweepConfig) -> Iterator[Cell]:
    profiles = {h: (load_profile(h).default_runtime, profile_digest(h))
                for h in grid.axes["hardware"]}
    settings = tuple(sorted(grid.simulation.items()))
    context = grid.context
    if grid.mode == "simulate":
        context = None
    elif context is None:
        assert grid.trace is not None
        context = int(config.traces[grid.trace].mean_context_len)  # as optimize-tree takes it
    for values in itertools.product(*(grid.axes[a] for a in ORDER)):
        p = dict(zip(ORDER, values, strict=True))
        for options in _option_grid(grid.system_options.get(p["system"], {})):
            yield _cell(grid, config, dict(p), options, profiles[p["hardware"]], settings,
                        context)


def _option_grid(axes: dict[str, tuple[Any, ...]]) -> Iterator[tuple[tuple[str, Any], ...]]:
    """Every combination of a system's option values, keys sorted."""
    keys = sorted(axes)
    for combo in itertools.product(*(axes[k] for k in keys)):
        yield tuple(zip(keys, combo, strict=True))


def _cell(grid: Grid, config: SweepConfig, p: dict[str, Any],
          options: tuple[tuple[str, Any], ...], profile: tuple[str, str],
          settings: tuple[tuple[str, Any], ...], context: int | None) -> Cell:
    """The cell of grid point `p` with the system's `options`; `profile` is the hardware's
    (default runtime, file digest)."""
    default_runtime, digest_ = profile
    engine = p["engine"] or DEFAULT_ENGINE
    acceptance = grid.acceptance(p["drafter"])
    if p["method"] == NO_DRAFTER:  # plain decoding: drafter and budget mean nothing
        p |= {"drafter": NO_DRAFTER, "budget": 1}
        acceptance = AcceptanceInput(trace=grid.trace, digest=grid.trace_digest)
    seed = config.seed
    if grid.mode == "simulate":
        seed = int(digest({"seed": seed, "rate": p["rate"], "workload": settings})[:8], 16)
    return Cell(
        mode=grid.mode, hardware=p["hardware"],
        runtime=deployment(p["hardware"], engine=engine, runtime=p["runtime"]).runtime
        or default_runtime,
        target=p["target"], drafter=p["drafter"],
        source=grid.sources.get(p["drafter"], NO_DRAFTER),
        method=p["method"], budget=p["budget"],
        batch=p["batch"] or 1, rate=None if p["rate"] is None else float(p["rate"]),
        tp=p["tp"] or 1,
        weight_bits=p["weight_bits"] or get_model(p["target"]).weight_bits,
        context=context, max_depth=grid.max_depth, acceptance=acceptance, seed=seed,
        simulation=settings if grid.mode == "simulate" else (),
        profile=digest_, system=p["system"] or NO_SYSTEM, system_options=options,
        engine=engine, ep=p["ep"] or 1, precision=p["precision"] or "bf16",
        expert_precision=p["expert_precision"], kv_bits=p["kv_bits"] or 16,
    )
