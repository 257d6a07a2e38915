"""`HardwareProfile`: one accelerator's facts, efficiencies and overheads, read from TOML.

Profile files use the units people quote (TFLOP/s, GB/s, µs, ps); the loaded profile is in SI
units (FLOP/s, bytes, bytes/s, seconds). Shipped profiles live in `data/<name>.toml`; profiles that
`specscope profile-hw` writes go to the user directory (`user_profile_dir`), which `--hw NAME`
searches first. Each profile prices one or more runtimes (`[runtime.<name>]`, see `runtime.py`) and
says under which one its public anchors were measured (`default_runtime`). A profile may carry
measured step-time tables (`[[measured]]`), which the cost model prefers to its formula, and the
host cost of model-free drafting and of the speculative loop's bookkeeping measured on it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specscope.errors import InputError, warn
from specscope.files import known_keys, read_toml
from specscope.hw_profiles.loop import FLAGS, LOOP_KEYS, LoopCosts
from specscope.hw_profiles.runtime import RuntimeParams, parse_runtime, replace_values
from specscope.hw_profiles.wake import Wake, parse_wake
from specscope.names import HOST_DRAFTERS, RUNTIMES

DATA_DIR = Path(__file__).parent / "data"
PROFILE_DIR_ENV = "SPECSCOPE_PROFILE_DIR"
"""Environment variable naming the user profile directory (default ~/.config/specscope/...)."""
KINDS = ("gpu", "cpu")
"""Device kinds: a GPU overlaps host issue with device work, a CPU thread does both in turn."""
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A profile name (it becomes a file name)."""
HELDOUT_ERR_LIMIT = 0.20
"""Median relative error of a runtime's fit on its held-out points (`[fit.<runtime>]`, written
by profile-hw) above which the profile warns, when written and whenever loaded: its step times
miss shapes it was not fitted on by that much (docs/hardware.md#fit-quality). The shipped
cpu-2core's worst is 15.9% (compile); a `--quick` profile on a busy 2-core box reached 28%."""


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
    runtime: str = ""
    """The runtime it was measured under ("" matches any)."""
    priced: bool = True
    """Whether `CostModel` prices the table's shapes from it (`measured_for`). profile-hw's own
    tables are the data its fit pools (`priced = false`): on a shared CPU one table's medians
    carry the minute's load, and validate --quick against a fresh quick profile missed step
    time by 15.1% (median) priced from its tables and by 7.8% from its fit, in the same
    period."""


@dataclass(frozen=True)
class HardwareProfile:
    """One device (and the software stack its overheads were measured on), in SI units.

    kind: "gpu" or "cpu"; peak_flops: dense FLOP/s by number format ("bf16", "int8", "fp8",
    "fp4": NVFP4 block-scaled, optional in the file; 0 = unsupported); memory_bytes /
    bandwidth: device memory and its bandwidth (bytes, bytes/s);
    link_bandwidth: scale-up interconnect bytes/s per direction; host_link_bandwidth: the
    device's link to host memory (PCIe) bytes/s per direction, what offloaded weights stream
    over (0: not stated); runtimes: the priced runtimes and their parameters,
    default_runtime the one its anchors were measured under; dequant_s_per_weight: seconds per
    weight element dequantised, by weight bits, once per `dequant_tile` tokens;
    allreduce_latency_s: fixed cost of one all-reduce; max_tp: largest tensor-parallel group;
    shard_lm_head: whether tensor parallelism splits the lm_head; loop: the host costs of
    specscope's speculative loop on this box (`[speculation]` and `[drafters]`, measured by
    profile-hw in the decode loop; 0 where not measured: on a GPU the draft and verification
    cold terms are ≈ 0).
    """

    name: str
    description: str
    peak_flops: dict[str, float]
    memory_bytes: float
    bandwidth: float
    link_bandwidth: float
    kind: str
    default_runtime: str
    runtimes: dict[str, RuntimeParams]
    dequant_s_per_weight: dict[int, float]
    dequant_tile: int
    allreduce_latency_s: float
    max_tp: int
    shard_lm_head: bool = True
    measured: tuple[MeasuredTable, ...] = ()
    sources: tuple[str, ...] = field(default=())
    threads: int | None = None
    """CPU threads its measurements used (`[provenance] threads`, written by profile-hw)."""
    loop: LoopCosts = field(default_factory=LoopCosts)
    host_link_bandwidth: float = 0.0
    host_cpu: str = ""
    """The box's usual host CPU (or the one a paper ran), `[host] cpu`."""
    host_speed: float = 1.0
    """Single-thread speed of that host relative to the host the eager runtime's host terms were
    measured on (`[host] single_thread`): eager issue time scales as 1 / host_speed."""
    host_source: str = ""
    """Where host_speed comes from, or "assumed: …"."""
    wake: Wake = field(default_factory=Wake)
    """The first forward's extra time after an idle gap (`[idle]`, measured by profile-hw)."""
    assumed: dict[str, str] = field(default_factory=dict)
    """The stated values not measured on the device, by key ("compute.int8_tops",
    "runtime.graph.step_us"), each "assumed: <where it comes from>" (`[assumed]`, written by
    profile-hw: what it copied from a shipped profile or left 0)."""

    def runtime(self, name: str | None = None) -> RuntimeParams:
        """The parameters of runtime `name` (default: the profile's default runtime)."""
        name = name or self.default_runtime
        if name not in self.runtimes:
            raise InputError(f"--runtime {name}: profile {self.name} prices "
                             f"{', '.join(self.runtimes)} (runtimes: {', '.join(RUNTIMES)})")
        return self.runtimes[name]

    def measured_for(self, model: str, batch: int, weight_bits: int, tp: int,
                     runtime: str = "") -> list[MeasuredTable]:
        """The priced measured tables that match a model, batch, weight bits, tp and runtime."""
        return [m for m in self.measured if m.priced and (m.model, m.batch, m.weight_bits, m.tp)
                == (model, batch, weight_bits, tp) and m.runtime in ("", runtime)]


def user_profile_dir() -> Path:
    """Where `profile-hw` writes profiles and `--hw NAME` looks first: $SPECSCOPE_PROFILE_DIR,
    else ~/.config/specscope/hw_profiles."""
    env = os.environ.get(PROFILE_DIR_ENV)
    return Path(env) if env else Path.home() / ".config" / "specscope" / "hw_profiles"


def check_name(name: str) -> str:
    """A profile name: letters, digits, '.', '_' and '-' (it becomes a file name)."""
    if not NAME.fullmatch(name):
        raise InputError(f"--name {name!r}: a profile name is letters, digits, '.', '_' or '-'")
    return name


def is_shipped(name: str) -> bool:
    """Whether `name` is a profile that ships with specscope (a name user profiles may not take
    without `--force`)."""
    return (DATA_DIR / f"{name}.toml").is_file()


def warn_poor_fit(profile: str, runtime: str, median: float, maximum: float) -> None:
    """One warning line when the fit of `profile`'s `runtime` misses its held-out points by more
    than `HELDOUT_ERR_LIMIT` (median relative error)."""
    if median > HELDOUT_ERR_LIMIT:
        warn(f"profile {profile}: its {runtime} fit misses its held-out points by "
             f"{median:.1%} (median) and {maximum:.1%} (max), over the {HELDOUT_ERR_LIMIT:.0%} "
             f"limit; {runtime} step times priced from it are that uncertain")


def check_device_kind(hw: HardwareProfile, device: str) -> None:
    """Refuse a profile of another device kind than the run's `device` (cpu or cuda): a GPU's
    step times priced against a CPU's runs, or the reverse, are wrong by the ratio of the two
    machines, whatever the model. Names the profiles of the right kind."""
    kind = "gpu" if device == "cuda" else "cpu"
    if hw.kind == kind:
        return
    right = [name for name in list_profiles() if _kind_of(name) == kind]
    what = {"gpu": "a GPU (kind \"gpu\")", "cpu": "a CPU (kind \"cpu\")"}
    raise InputError(f"--hw {hw.name}: the profile is of {what[hw.kind]}, the run is on {device}; "
                     f"name a {kind.upper()} profile ({', '.join(right) or 'none found'}) or one "
                     f"profile-hw --device {device} wrote")


def _kind_of(name: str) -> str | None:
    """The `kind` a profile file states, read without loading (nor warning about) the rest;
    None when the file cannot be read."""
    user = user_profile_dir() / f"{name}.toml"
    try:
        return str(read_toml(user if user.is_file() else DATA_DIR / user.name,
                             "hardware profile").get("kind"))
    except InputError:
        return None


def list_profiles() -> list[str]:
    """Names of the user and built-in profiles, sorted."""
    found = {p.stem for p in DATA_DIR.glob("*.toml")}
    if user_profile_dir().is_dir():
        found |= {p.stem for p in user_profile_dir().glob("*.toml")}
    return sorted(found)


def profile_path(name: str | Path) -> Path:
    """The file of a profile: `name` itself when it is a .toml path, else the user profile of
    that name, else the built-in one."""
    path = Path(name)
    if path.suffix == ".toml":
        if not path.is_file():
            raise InputError(f"hardware profile file {str(path)!r} does not exist")
        return path
    for folder in (user_profile_dir(), DATA_DIR):
        path = folder / f"{name}.toml"
        if NAME.fullmatch(str(name)) and path.is_file():
            if folder != DATA_DIR and is_shipped(str(name)):
                warn(f"--hw {name}: read {path}, a profile you wrote under a shipped profile's "
                     f"name, not the shipped {DATA_DIR / path.name}")
            return path
    raise InputError(
        f"unknown hardware profile {str(name)!r}; known profiles: {', '.join(list_profiles())}"
    )


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
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: [{section}] {key} must be a finite number >= 0, got {value}")
    return kind(value)


_SECTIONS: dict[str, tuple[str, ...]] = {
    "compute": ("bf16_tflops", "int8_tops", "fp8_tflops", "fp4_tflops"),
    "memory": ("capacity_gb", "bandwidth_gbs"),
    "interconnect": ("link_gbs", "max_tp", "allreduce_latency_us", "shard_lm_head",
                     "host_link_gbs"),
    "dequant": ("int8_ps_per_weight", "int4_ps_per_weight", "tile_tokens"),
    "host": ("cpu", "single_thread", "source"),
    "speculation": (*LOOP_KEYS, *FLAGS),
    "idle": ("seconds", "extra_ms"),
}
"""The keys of each fixed section a profile reads; `[drafters]` (`<drafter>_us`),
`[runtime.<name>]` (runtime.py) and `[[measured]]` are checked where they are read, and
`[fit.<runtime>]` and `[provenance]` are profile-hw's record of how it was measured, and
`[drift]` the GPU runbook's machine-drift probe recorded beside a profile it measured
(benchmarks/gpu_run.sh); none of these is priced."""
_TOP = ("name", "kind", "default_runtime", "description", "sources", "assumed", "runtime",
        "drafters", "fit", "provenance", "drift", "measured", *_SECTIONS)
"""Every top-level key and table of a profile file. `[assumed]` (written by profile-hw) names,
per stated value it did not measure ("<section>.<key>" or "runtime.<name>.<field>"), where the
value comes from: "assumed: copied from the shipped h100 profile", "assumed: not measured, 0
means not priced" (`_assumed`)."""
_MEASURED_KEYS = ("model", "batch", "context", "new_tokens", "time_ms", "weight_bits", "tp",
                  "source", "runtime", "priced")


def _check_keys(data: dict[str, Any], path: Path) -> None:
    """Refuse a key or table a profile does not read (a typo would be dropped without a word),
    naming the known ones."""
    known_keys(data, _TOP, f"{path}: ", "key or table")
    for section, keys in _SECTIONS.items():
        table = data.get(section, {})
        if not isinstance(table, dict):
            raise InputError(f"{path}: [{section}] must be a table")
        known_keys(table, keys, f"{path}: [{section}] ")
    measured = data.get("measured", [])
    if not isinstance(measured, list) or not all(isinstance(m, dict) for m in measured):
        raise InputError(f"{path}: [[measured]] must be tables")
    for i, entry in enumerate(measured):
        known_keys(entry, _MEASURED_KEYS, f"{path}: [[measured]] #{i + 1} ")


def _assumed(data: dict[str, Any], where: Path) -> dict[str, str]:
    """The `[assumed]` table checked: each key names a value the file states (a fixed section's
    key, or a field of one of its `[runtime.<name>]` sections), each value is "assumed: …" with
    the value's origin."""
    table = data.get("assumed", {})
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise InputError(f"{where}: [assumed] must map keys to strings (\"assumed: …\")")
    for key, text in table.items():
        section, _, name = key.rpartition(".")
        stated = data.get(section, {}) if section in _SECTIONS else (
            data.get("runtime", {}).get(section[len("runtime."):], {})
            if section.startswith("runtime.") else {})
        if not isinstance(stated, dict) or name not in stated:
            raise InputError(f"{where}: [assumed] {key!r} names no value the file states "
                             "(\"<section>.<key>\" or \"runtime.<name>.<field>\")")
        if not text.startswith("assumed:") or not text[len("assumed:"):].strip():
            raise InputError(f"{where}: [assumed] {key} must read \"assumed: <its origin>\", "
                             f"got {text!r}")
    return dict(table)


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
            source=str(entry.get("source", "")), runtime=str(entry.get("runtime", "")),
            priced=entry.get("priced", True),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{at}: needs model, new_tokens and time_ms ({exc})") from None
    if not isinstance(table.priced, bool):
        raise InputError(f"{at}: priced must be true or false")
    if n.ndim != 1 or n.shape != t.shape or n.size == 0:
        raise InputError(f"{at}: new_tokens and time_ms must be lists of the same length")
    if not np.all(np.isfinite(n) & np.isfinite(t)):
        raise InputError(f"{at}: new_tokens and time_ms must be finite numbers")
    if np.any(np.diff(n) <= 0) or n[0] < 1 or np.any(t <= 0):
        raise InputError(f"{at}: new_tokens must increase from >= 1 and times be positive")
    return table


def load_profile(name: str | Path) -> HardwareProfile:
    """Load a built-in profile by name, or a profile TOML file by path."""
    path = profile_path(name)
    return profile_from_data(read_toml(path, "hardware profile"), path)


def profile_from_data(data: dict[str, Any], path: Path) -> HardwareProfile:
    """A profile's parsed TOML `data` checked and converted; `path` names it in errors."""

    def g(section: str, key: str, kind: type = float) -> Any:
        return _get(data, section, key, path, kind)

    _check_keys(data, path)
    kind = g("", "kind", str)
    if kind not in KINDS:
        raise InputError(f"{path}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    sections = data.get("runtime")
    if not isinstance(sections, dict) or not sections:
        raise InputError(f"{path}: needs at least one [runtime.<name>] section")
    runtimes = {name: parse_runtime(name, table, path) for name, table in sections.items()}
    default_runtime = g("", "default_runtime", str)
    if default_runtime not in runtimes:
        raise InputError(f"{path}: default_runtime {default_runtime!r} has no [runtime] section")
    drafters = data.get("drafters", {})
    unknown = set(drafters) - {f"{d}_us" for d in HOST_DRAFTERS}
    if unknown:
        raise InputError(f"{path}: [drafters] has unknown keys {sorted(unknown)}")
    if min(g("compute", "bf16_tflops"), g("memory", "bandwidth_gbs")) <= 0:
        raise InputError(f"{path}: bf16_tflops and bandwidth_gbs must be positive")
    fits = data.get("fit", {})
    if not isinstance(fits, dict) or not all(isinstance(f, dict) for f in fits.values()):
        raise InputError(f"{path}: [fit] must hold one [fit.<runtime>] table per runtime")
    for runtime, fit in fits.items():
        sections = {f"fit.{runtime}": fit}
        warn_poor_fit(g("", "name", str), runtime,
                      _get(sections, f"fit.{runtime}", "heldout_median_rel_err", path),
                      _get(sections, f"fit.{runtime}", "heldout_max_rel_err", path))
    return HardwareProfile(
        name=g("", "name", str),
        description=g("", "description", str),
        peak_flops={
            "bf16": g("compute", "bf16_tflops") * 1e12,
            "int8": g("compute", "int8_tops") * 1e12,
            "fp8": g("compute", "fp8_tflops") * 1e12,
            "fp4": _optional(data, "compute", "fp4_tflops", path) * 1e12,
        },
        memory_bytes=g("memory", "capacity_gb") * 1e9,
        bandwidth=g("memory", "bandwidth_gbs") * 1e9,
        link_bandwidth=g("interconnect", "link_gbs") * 1e9,
        kind=kind,
        default_runtime=default_runtime,
        runtimes=runtimes,
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
        threads=int(_optional(data, "provenance", "threads", path)) or None,
        loop=LoopCosts(
            drafter={key[:-3]: _get(data, "drafters", key, path) * 1e-6 for key in drafters},
            **{name: _optional(data, "speculation", key, path) * 1e-6
               for key, name in LOOP_KEYS.items() if name != "spec_row"},
            spec_row=(_get(data, "speculation", "spec_row_us", path) * 1e-6
                      if "spec_row_us" in data.get("speculation", {}) else None),
            **{flag: data.get("speculation", {}).get(flag, False) is True for flag in FLAGS}),
        host_link_bandwidth=_optional(data, "interconnect", "host_link_gbs", path) * 1e9,
        **_host(data, path),
        wake=parse_wake(data, path),
        assumed=_assumed(data, path),
    )


def _host(data: dict[str, Any], where: Path) -> dict[str, Any]:
    """The `[host]` section (cpu, single_thread, source) as HardwareProfile fields; absent, the
    host is the one the runtimes were measured on (speed 1)."""
    if "host" not in data:
        return {}
    speed = _get(data, "host", "single_thread", where)
    if speed <= 0:
        raise InputError(f"{where}: [host] single_thread must be positive, got {speed}")
    return {"host_cpu": _get(data, "host", "cpu", where, str), "host_speed": speed,
            "host_source": _get(data, "host", "source", where, str)}


def _optional(data: dict[str, Any], section: str, key: str, where: Path) -> float:
    """`data[section][key]` checked as `_get` does, or 0 when absent."""
    if key not in data.get(section, {}):
        return 0.0
    return _get(data, section, key, where)


def with_runtime(hw: HardwareProfile, name: str, **values: float) -> HardwareProfile:
    """A copy of `hw` whose runtime `name` has some fields replaced (TOML units: µs, fractions),
    for fitting; an unknown runtime or field is an `InputError`."""
    if name not in hw.runtimes:
        raise InputError(f"profile {hw.name} has no runtime {name!r}; it has "
                         f"{', '.join(hw.runtimes)}")
    params = replace_values(hw.runtimes[name], **values)
    return dataclasses.replace(hw, runtimes={**hw.runtimes, name: params})
