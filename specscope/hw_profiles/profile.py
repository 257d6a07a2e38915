"""`HardwareProfile`: one accelerator's facts, efficiencies and overheads, read from TOML.

Profile files (`data/<name>.toml`) use the units people quote (TFLOP/s, GB/s, µs, ps); the loaded
profile is in SI units (FLOP/s, bytes, bytes/s, seconds). A profile may carry measured step-time
tables (`[[measured]]`), which the cost model prefers to its roofline.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specscope.errors import InputError

DATA_DIR = Path(__file__).parent / "data"


@dataclass(frozen=True)
class MeasuredTable:
    """Measured forward times t(n) of one model at one batch, context, weight bits and tp."""

    model: str
    batch: int
    context: int
    new_tokens: np.ndarray
    time_s: np.ndarray
    weight_bits: int = 16
    tp: int = 1
    source: str = ""


@dataclass(frozen=True)
class HardwareProfile:
    """One device (and the software stack its overheads were measured on), in SI units.

    peak_flops: dense FLOP/s by number format ("bf16", "int8", "fp8"; 0 = unsupported);
    memory_bytes / bandwidth: device memory and its bandwidth (bytes, bytes/s); link_bandwidth:
    scale-up interconnect bytes/s per direction; compute_eff / memory_eff: achievable fractions
    of peak; step_overhead_s / layer_overhead_s: fixed cost per forward and per layer;
    dequant_s_per_weight: seconds per weight element dequantised, by weight bits, once per
    `dequant_tile` tokens; allreduce_latency_s: fixed cost of one all-reduce; max_tp: largest
    tensor-parallel group; shard_lm_head: whether tensor parallelism splits the lm_head.
    """

    name: str
    description: str
    peak_flops: dict[str, float]
    memory_bytes: float
    bandwidth: float
    link_bandwidth: float
    compute_eff: float
    memory_eff: float
    step_overhead_s: float
    layer_overhead_s: float
    dequant_s_per_weight: dict[int, float]
    dequant_tile: int
    allreduce_latency_s: float
    max_tp: int
    shard_lm_head: bool = True
    measured: tuple[MeasuredTable, ...] = ()
    sources: tuple[str, ...] = field(default=())

    def measured_for(self, model: str, batch: int, weight_bits: int, tp: int
                     ) -> list[MeasuredTable]:
        """The measured tables that match a model, batch, weight bits and tp."""
        return [m for m in self.measured if (m.model, m.batch, m.weight_bits, m.tp)
                == (model, batch, weight_bits, tp)]


def list_profiles() -> list[str]:
    """Names of the built-in profiles, sorted."""
    return sorted(p.stem for p in DATA_DIR.glob("*.toml"))


def profile_path(name: str | Path) -> Path:
    """The file of a built-in profile name, or `name` itself when it is a .toml path."""
    path = Path(name)
    if path.suffix == ".toml":
        if not path.is_file():
            raise InputError(f"hardware profile file {str(path)!r} does not exist")
        return path
    path = DATA_DIR / f"{name}.toml"
    if not path.is_file():
        raise InputError(
            f"unknown hardware profile {str(name)!r}; known profiles: {', '.join(list_profiles())}"
        )
    return path


def _get(table: dict[str, Any], section: str, key: str, where: Path, kind: type = float) -> Any:
    """`table[section][key]` converted to `kind`; a missing or mistyped value is an `InputError`."""
    try:
        value = table[section][key] if section else table[key]
    except (KeyError, TypeError):
        name = f"[{section}] {key}" if section else key
        raise InputError(f"{where}: missing {name}") from None
    if kind is bool:
        if not isinstance(value, bool):
            raise InputError(f"{where}: [{section}] {key} must be true or false")
        return value
    if kind is str:
        return str(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}: [{section}] {key} must be a number, got {value!r}")
    if value < 0:
        raise InputError(f"{where}: [{section}] {key} must not be negative, got {value}")
    return kind(value)


def _measured(entry: dict[str, Any], where: Path, i: int) -> MeasuredTable:
    """One `[[measured]]` table, checked: equal lengths, increasing n, positive times."""
    at = f"{where}: [[measured]] #{i + 1}"
    try:
        n = np.asarray(entry["new_tokens"], dtype=float)
        t = np.asarray(entry["time_ms"], dtype=float) / 1e3
        table = MeasuredTable(
            model=str(entry["model"]), batch=int(entry.get("batch", 1)),
            context=int(entry.get("context", 0)), new_tokens=n, time_s=t,
            weight_bits=int(entry.get("weight_bits", 16)), tp=int(entry.get("tp", 1)),
            source=str(entry.get("source", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{at}: needs model, new_tokens and time_ms ({exc})") from None
    if n.ndim != 1 or n.shape != t.shape or n.size == 0:
        raise InputError(f"{at}: new_tokens and time_ms must be lists of the same length")
    if np.any(np.diff(n) <= 0) or n[0] < 1 or np.any(t <= 0):
        raise InputError(f"{at}: new_tokens must increase from >= 1 and times be positive")
    return table


def load_profile(name: str | Path) -> HardwareProfile:
    """Load a built-in profile by name, or a profile TOML file by path."""
    path = profile_path(name)
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None

    def g(section: str, key: str, kind: type = float) -> Any:
        return _get(data, section, key, path, kind)

    compute_eff, memory_eff = g("compute", "compute_eff"), g("memory", "memory_eff")
    if not (0 < compute_eff <= 1 and 0 < memory_eff <= 1):
        raise InputError(f"{path}: compute_eff and memory_eff must lie in (0, 1]")
    if min(g("compute", "bf16_tflops"), g("memory", "bandwidth_gbs")) <= 0:
        raise InputError(f"{path}: bf16_tflops and bandwidth_gbs must be positive")
    return HardwareProfile(
        name=g("", "name", str),
        description=g("", "description", str),
        peak_flops={
            "bf16": g("compute", "bf16_tflops") * 1e12,
            "int8": g("compute", "int8_tops") * 1e12,
            "fp8": g("compute", "fp8_tflops") * 1e12,
        },
        memory_bytes=g("memory", "capacity_gb") * 1e9,
        bandwidth=g("memory", "bandwidth_gbs") * 1e9,
        link_bandwidth=g("interconnect", "link_gbs") * 1e9,
        compute_eff=compute_eff,
        memory_eff=memory_eff,
        step_overhead_s=g("overhead", "step_us") * 1e-6,
        layer_overhead_s=g("overhead", "layer_us") * 1e-6,
        dequant_s_per_weight={
            8: g("dequant", "int8_ps_per_weight") * 1e-12,
            4: g("dequant", "int4_ps_per_weight") * 1e-12,
        },
        dequant_tile=max(1, g("dequant", "tile_tokens", int)),
        allreduce_latency_s=g("interconnect", "allreduce_latency_us") * 1e-6,
        max_tp=max(1, g("interconnect", "max_tp", int)),
        shard_lm_head=g("interconnect", "shard_lm_head", bool),
        measured=tuple(_measured(m, path, i) for i, m in enumerate(data.get("measured", []))),
        sources=tuple(str(s) for s in data.get("sources", [])),
    )
