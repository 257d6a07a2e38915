"""The sweep config: a TOML grid over hardware × runtime × engine × target × drafter × method ×
budget × batch × arrival rate (and tensor and expert parallelism, weight bits and number
formats), read and checked.

    seed = 0                        # seeds of the simulations and of fitted predictors
    mode = "analytic"               # or "simulate"; every top-level key is a default for grids
    acceptance = [0.6, 0.15, 0.06]  # p1..pK for every drafter, or a table by drafter name
                                    # ([acceptance] llama-68m = [...], default = [...]);
                                    # or trace = "trace.parquet" (relative to this file)
    context = 512                   # analytic: tokens before the step (default: the trace's
                                    # mean, else 512); simulated prompts set their own
    max_depth = 12                  # depth cap of the trees and of the dynamic policies

    [simulation]                    # simulate cells: the workload (`specscope simulate` options)
    requests = 100                  # requests, token_budget, prompt_len, output_len, workload,
    output_len = "128"              # arrivals, cv, replicas, router, slo_tpot_ms, images

    [[grid]]                        # one section per sub-grid; its keys override the defaults
    name = "gpus"
    hardware = ["h100", "a100"]     # every axis takes one value or a list
    runtime = ["eager", "graph"]    # default: the engine's, else each profile's own
    engine = ["specscope", "vllm"]  # software stacks (hw_profiles/data/engines); default
                                    # specscope: the loop profile-hw measures on the profile
    target = ["llama-3.1-8b", "mamba2-2.7b"]
    drafter = ["llama-68m", "ngram"]  # catalogue draft models, mtp (the target's own
                                    # multi-token-prediction layer) or ngram, suffix, recycle
    method = ["sequoia", "chain"]   # optimizer methods; simulate: also none, dyspec, specdecpp,
                                    # smartspec, ets-batch (a tree method is a static tree)
    budget = [8, 16, 32]            # tree size n (root included); dynamic policies' budget
    batch = [1, 16]                 # analytic: the batch priced; simulate: the max batch
    rate = [1.0, 10.0]              # simulate only: arrivals per second
    tp = [1, 2]                     # default 1
    weight_bits = [16, 4]           # default: the model's own
    ep = [1, 8]                     # expert-parallel degree of an MoE target; default 1
    precision = ["bf16", "fp8"]     # the target's linear layers: bf16 (default), fp8, nvfp4
    expert_precision = ["none", "nvfp4"]  # an MoE's routed experts; none (default): precision
    kv_bits = [16, 8]               # KV cache bits: 16 (default) or 8 (FP8 KV cache)
    system = ["none", "head"]       # seed systems (specscope.systems) serving their cost
                                    # models; default none: the plain target and drafter

    [system_options.longspec]       # a system's own keys (one table per system);
    window = [512, 2048]            # a list is one more dimension of the grid

Every mistake is an `InputError` naming the file, the grid and the key, raised before any cell
runs. Combinations that cannot run (a runtime the profile does not price, a model that does not
fit, tp above the profile's max, a format the profile has no peak for, mtp on a target without
MTP layers) are not mistakes: their cells are recorded as skipped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specscope.errors import InputError
from specscope.files import known_keys, parse_toml, read_text
from specscope.hw_profiles import load_profile
from specscope.hw_profiles.engine import ENGINE_NAMES
from specscope.hw_profiles.profile import profile_path
from specscope.models import get_model, list_models
from specscope.models.precision import KV_BITS, PRECISIONS
from specscope.names import MODEL_FREE_SOURCES, MTP_DRAFTER, RUNTIMES
from specscope.optimizers.compare import METHOD_NAMES, TREE_METHODS
from specscope.simulator.policies import POLICIES
from specscope.simulator.scheduler import ROUTERS
from specscope.simulator.workload import ARRIVALS, WORKLOADS, LengthDist
from specscope.systems.case import check_options
from specscope.systems.registry import SYSTEMS
from specscope.trace import Trace, drafting, read_trace
from specscope.tree import acceptance_table

MODES = ("analytic", "simulate")
AXES = ("hardware", "runtime", "engine", "target", "drafter", "method", "budget", "batch", "rate",
        "tp", "weight_bits", "ep", "precision", "expert_precision", "kv_bits", "system")
REQUIRED = ("hardware", "target", "drafter", "method", "budget")
SETTINGS = ("mode", "seed", "context", "max_depth", "acceptance", "trace", "simulation",
            "system_options")
SIMULATION: dict[str, type] = {
    "requests": int, "token_budget": int, "prompt_len": str, "output_len": str,
    "workload": str, "arrivals": str, "cv": float, "replicas": int, "router": str,
    "slo_tpot_ms": float, "images": int,
}
"""Simulation settings a config may give, and their types (`SimulateRequest` fields)."""
SIMULATE_METHODS = tuple(dict.fromkeys([*(p for p in POLICIES if p != "static"), *TREE_METHODS]))
"""Simulated methods: the simulator's policies (dyspec and specdecpp decide per step), and the
tree methods, whose tree the static policy serves."""
DEFAULT_CONTEXT = 512
DEFAULT_MAX_DEPTH = 12
WEIGHT_BITS = (16, 8, 4)
NO_SYSTEM = "none"
"""The system axis' default: plain target and drafter cost models."""
AS_PRECISION = "none"
"""The expert_precision axis' default: the routed experts in the format of `precision`."""


@dataclass(frozen=True)
class AcceptanceInput:
    """Where a cell's acceptance comes from: a positional vector, or a trace file (its path and
    the digest of its bytes), or neither (no speculation)."""

    vector: tuple[float, ...] | None = None
    trace: str | None = None
    digest: str = ""

    @property
    def label(self) -> str:
        """What the results table shows: the vector, or the trace file and its digest."""
        if self.trace is not None:
            return f"trace:{Path(self.trace).name}#{self.digest[:8]}"
        return "none" if self.vector is None else json.dumps(list(self.vector))


@dataclass(frozen=True)
class Grid:
    """One `[[grid]]` section with the top-level defaults merged in, checked."""

    name: str
    mode: str
    axes: dict[str, tuple[Any, ...]]  # an axis the grid leaves out holds None: the default
    context: int | None  # None: the trace's mean context
    max_depth: int
    vectors: dict[str, tuple[float, ...]]  # drafter (or "default") → vector; {} with a trace
    sources: dict[str, str]  # drafter → the source whose acceptance its cells use (`drafting`)
    trace: str | None
    trace_digest: str  # sha256 of the trace file's bytes ("" without a trace)
    simulation: dict[str, Any]
    system_options: dict[str, dict[str, tuple[Any, ...]]]  # system → its keys' values

    def acceptance(self, drafter: str) -> AcceptanceInput:
        """The acceptance input of `drafter`'s cells."""
        if self.trace is not None:
            return AcceptanceInput(trace=self.trace, digest=self.trace_digest)
        vector = self.vectors.get(drafter, self.vectors.get("default"))
        assert vector is not None  # checked on load
        return AcceptanceInput(vector=vector, digest=digest(list(vector)))


@dataclass(frozen=True)
class SweepConfig:
    """A checked sweep config: its grids, the traces they read (by path), the seed, the text."""

    path: Path
    text: str
    seed: int
    grids: tuple[Grid, ...]
    traces: dict[str, Trace]


def digest(value: Any) -> str:
    """sha256 (hex) of a JSON value written canonically (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def load_config(path: str | Path) -> SweepConfig:
    """Read and check a sweep TOML (module docstring); any mistake is an `InputError`."""
    path = Path(path)
    text = read_text(path, "sweep config")
    data = parse_toml(text, path)
    known = {*AXES, *SETTINGS, "grid"}
    known_keys(data, sorted(known), f"{path}: ")
    sections = data.get("grid", [])
    if not isinstance(sections, list) or not sections or not all(
            isinstance(s, dict) for s in sections):
        raise InputError(f"{path}: needs at least one [[grid]] section")
    seed = _int(data.get("seed", 0), f"{path}: seed", 0)
    defaults = {k: v for k, v in data.items() if k != "grid"}
    traces: dict[str, Trace] = {}
    grids = []
    for i, section in enumerate(sections):
        name = str(section.get("name", f"#{i + 1}"))
        where = f"{path}: grid {name}: "
        known_keys(section, sorted({*AXES, *SETTINGS, "name"} - {"seed"}), where)
        grids.append(_grid(name, _merge(defaults, section), path.parent, where, traces))
    return SweepConfig(path, text, seed, tuple(grids), traces)


def _merge(defaults: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    """The section over the defaults; `simulation` merges key by key; a section's acceptance or
    trace replaces both of the defaults'."""
    merged = dict(defaults)
    if "acceptance" in section or "trace" in section:
        merged.pop("acceptance", None)
        merged.pop("trace", None)
    merged |= section
    if isinstance(defaults.get("simulation"), dict) and isinstance(section.get("simulation"),
                                                                     dict):
        merged["simulation"] = defaults["simulation"] | section["simulation"]
    merged.pop("seed", None)
    return merged


def _grid(name: str, table: dict[str, Any], folder: Path, where: str,
          traces: dict[str, Trace]) -> Grid:
    mode = table.get("mode", "analytic")
    if mode not in MODES:
        raise InputError(f"{where}mode: one of {', '.join(MODES)}, got {mode!r}")
    for key in REQUIRED + (("rate",) if mode == "simulate" else ()):
        if key not in table:
            raise InputError(f"{where}{key}: missing (give one value or a list)")
    if mode == "analytic" and "rate" in table:
        raise InputError(f"{where}rate: arrival rates are for mode = \"simulate\" grids")
    axes = {key: _list(table.get(key), f"{where}{key}") for key in AXES}
    methods = METHOD_NAMES if mode == "analytic" else SIMULATE_METHODS
    _check_names(axes, methods, folder, where)
    axes["expert_precision"] = tuple(None if e == AS_PRECISION else e
                                     for e in axes["expert_precision"])
    axes["hardware"] = tuple(_hardware(h, folder) for h in axes["hardware"])
    trace = _trace(table.get("trace"), folder, where, traces)
    vectors = _vectors(table.get("acceptance"), axes["drafter"], trace, where)
    sources = {}
    for drafter in axes["drafter"]:
        try:
            sources[drafter] = drafting(None if trace is None else traces[trace], None, drafter,
                                        list_models()).source
        except InputError as exc:
            raise InputError(f"{where}drafter: {exc}") from None
    context = table.get("context")
    if context is None and trace is None:
        context = DEFAULT_CONTEXT
    return Grid(
        name=name, mode=mode, axes=axes,
        context=None if context is None else _int(context, f"{where}context", 0),
        max_depth=_int(table.get("max_depth", DEFAULT_MAX_DEPTH), f"{where}max_depth", 0),
        vectors=vectors, sources=sources, trace=trace,
        trace_digest="" if trace is None else _file_digest(trace),
        simulation=_simulation(table.get("simulation", {}), trace, where),
        system_options=_system_options(table.get("system_options", {}), where),
    )


def _list(value: Any, where: str) -> tuple[Any, ...]:
    """An axis as a tuple: a list as is, one value as a list of one, absent as (None,)."""
    if value is None:
        return (None,)
    values = tuple(value) if isinstance(value, list) else (value,)
    if not values:
        raise InputError(f"{where}: an empty list")
    return values


def _check_names(axes: dict[str, tuple[Any, ...]], methods: tuple[str, ...], folder: Path,
                 where: str) -> None:
    """Raise `InputError` for the first unknown name or out-of-range number of an axis."""
    for h in axes["hardware"]:
        try:
            load_profile(_hardware(h, folder))
        except InputError as exc:
            raise InputError(f"{where}hardware: {exc}") from None
    choices = {"runtime": (None, *RUNTIMES), "engine": (None, *ENGINE_NAMES), "method": methods,
               "weight_bits": (None, *WEIGHT_BITS), "system": (None, NO_SYSTEM, *SYSTEMS),
               "precision": (None, *PRECISIONS),
               "expert_precision": (None, AS_PRECISION, *PRECISIONS),
               "kv_bits": (None, *KV_BITS)}
    for key, allowed in choices.items():
        for value in axes[key]:
            if (value not in allowed or isinstance(value, bool)
                    or (key == "kv_bits" and isinstance(value, float))):
                raise InputError(f"{where}{key}: unknown {value!r}; one of "
                                 f"{', '.join(str(a) for a in allowed if a is not None)}")
    for key in ("target", "drafter"):
        for value in axes[key]:
            if not isinstance(value, str):
                raise InputError(f"{where}{key}: model names are strings, got {value!r}")
            if key == "drafter" and value in (*MODEL_FREE_SOURCES, MTP_DRAFTER):
                continue
            try:
                get_model(value)
            except InputError as exc:
                raise InputError(f"{where}{key}: {exc}") from None
    for key, low in (("budget", 1), ("batch", 1), ("tp", 1), ("ep", 1)):
        for value in axes[key]:
            if value is not None:
                _int(value, f"{where}{key}", low)
    for value in axes["rate"]:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not value > 0):
            raise InputError(f"{where}rate: arrivals per second must be numbers > 0, got "
                             f"{value!r}")


def _hardware(name: Any, folder: Path) -> str:
    """A profile name, or a profile .toml path taken relative to the config's folder."""
    if not isinstance(name, str):
        raise InputError(f"hardware: profile names are strings, got {name!r}")
    return str(folder / name) if name.endswith(".toml") else name


def profile_digest(hardware: str) -> str:
    """sha256 of a hardware profile's file: recalibrating a profile makes new cells."""
    return _file_digest(profile_path(hardware))


def _file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _int(value: Any, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{where}: expected an integer ≥ {low}, got {value!r}")
    return value


def _trace(value: Any, folder: Path, where: str, traces: dict[str, Trace]) -> str | None:
    """The trace path (relative to the config's folder), read once and kept in `traces`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"{where}trace: a path string, got {value!r}")
    path = str(folder / value)
    if path not in traces:
        try:
            traces[path] = read_trace(path)
        except InputError as exc:
            raise InputError(f"{where}trace: {exc}") from None
    return path


def _vectors(value: Any, drafters: tuple[Any, ...], trace: str | None, where: str
             ) -> dict[str, tuple[float, ...]]:
    """Acceptance vectors by drafter name ("default" for the rest); {} with a trace."""
    if (value is None) == (trace is None):
        raise InputError(f"{where}acceptance: give exactly one of acceptance and trace")
    if value is None:
        return {}
    table = value if isinstance(value, dict) else {"default": value}
    vectors = {}
    for name, vector in table.items():
        if not isinstance(vector, list) or any(
                isinstance(x, bool) or not isinstance(x, int | float) for x in vector):
            raise InputError(f"{where}acceptance.{name}: a list of numbers, got {vector!r}")
        acceptance_table(vector, f"{where}acceptance.{name}")
        vectors[name] = tuple(float(x) for x in vector)
    missing = [d for d in drafters if d not in vectors and "default" not in vectors]
    if missing:
        raise InputError(f"{where}acceptance: no vector for drafter {missing[0]!r} (give "
                         f"acceptance.{missing[0]} or acceptance.default)")
    return vectors


def _system_options(value: Any, where: str) -> dict[str, dict[str, tuple[Any, ...]]]:
    """`[system_options.NAME]` tables, each checked against the system's own keys; a key given
    a list is a dimension of the grid (FastDraft's draft sizes, an acceptance loss, ...)."""
    if not isinstance(value, dict):
        raise InputError(f"{where}system_options: a table of tables, got {value!r}")
    out = {}
    for name, table in value.items():
        if name not in SYSTEMS:
            raise InputError(f"{where}system_options: unknown system {name!r}; known: "
                             f"{', '.join(SYSTEMS)}")
        at = f"{where}system_options.{name}"
        if not isinstance(table, dict):
            raise InputError(f"{at}: a table of {name}'s keys, got {table!r}")
        axes = {key: tuple(v) if isinstance(v, list) else (v,) for key, v in table.items()}
        for key, values in axes.items():
            if not values:
                raise InputError(f"{at}: {key} is an empty list")
            for v in values:
                check_options({key: v}, SYSTEMS[name].options, name, at)
        out[name] = axes
    return out


def _simulation(value: Any, trace: str | None, where: str) -> dict[str, Any]:
    """The simulation settings, checked (types, ranges, names)."""
    if not isinstance(value, dict):
        raise InputError(f"{where}simulation: a table of settings, got {value!r}")
    known_keys(value, sorted(SIMULATION), f"{where}simulation: ")
    out: dict[str, Any] = {}
    for key, item in value.items():
        at = f"{where}simulation.{key}"
        kind = SIMULATION[key]
        if kind is int:
            out[key] = _int(item, at, 1)
        elif kind is float:
            if isinstance(item, bool) or not isinstance(item, int | float) or not item > 0:
                raise InputError(f"{at}: expected a number > 0, got {item!r}")
            out[key] = float(item)
        elif not isinstance(item, str):
            raise InputError(f"{at}: expected a string, got {item!r}")
        else:
            out[key] = item
    for key in ("prompt_len", "output_len"):
        if key in out:
            dist = LengthDist.parse(out[key], f"{where}simulation.{key}")
            if dist.kind == "trace" and trace is None:
                raise InputError(f"{where}simulation.{key}: 'trace' lengths need a trace")
    for key, allowed in (("workload", WORKLOADS), ("arrivals", ARRIVALS), ("router", ROUTERS)):
        if key in out and out[key] not in allowed:
            raise InputError(f"{where}simulation.{key}: one of {', '.join(allowed)}, got "
                             f"{out[key]!r}")
    return out
