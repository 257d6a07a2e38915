"""What a runtime adds to a step's cost: host issue time, device gaps and achieved efficiencies.

The same forward pass costs very different times depending on what executes it. A profile holds
one `[runtime.<name>]` section per runtime it prices (docs/hardware.md#runtimes):

- `eager`: operators issued one by one from Python (Hugging Face eager, research code): the host
  spends `host_layer_us` per layer dispatching them, and a GPU waits on it (launch-bound).
- `graph`: the step captured once and replayed (CUDA-graph engines: vLLM, SGLang, TensorRT-LLM's
  runtime): the host only replays; the device still runs every unfused kernel (`layer_us`).
- `compile`: the same step through a compiler first (gpt-fast's torch.compile, TensorRT-LLM
  engines, fused kernels), then replayed: fewer, better kernels.

Per operator the device time is the memory time m and the compute time c combined as
(m^b + c^b)^(1/b) (`blend` b: 1 adds them, large b takes the larger), each with the efficiency of
its operator class: weight streaming (`gemv_memory_eff` for one token, `gemm_memory_eff` for
more), GEMM compute (`gemm_compute_eff` · M / (M + `gemm_half_tokens`), small M under-fills the
tensor cores or vector units), K/V reads of attention (`attn_memory_eff`, or
`attn_dense_memory_eff` for the dense-mask multi-query kernel some engines run), attention compute,
and a prompt's compute (`prefill_compute_eff`). A forward adds `step_us` + layers · `layer_us` on
the device and needs `host_step_us` + layers · `host_layer_us` of host time: on a GPU the two
overlap (the step takes the longer), on a CPU the same thread does both (they add). A step of
B > 1 sequences adds (B − 1) × (`host_seq_us` + layers × `host_layer_seq_us`) of host time: the
per-sequence work of a batched step (each row's inputs and masks, per-row attention calls) beyond
what the operators price; both default to 0, so a profile written before batched steps were
measured prices every batch as it did then.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specscope.errors import InputError
from specscope.files import known_keys
from specscope.names import RUNTIMES

if TYPE_CHECKING:
    from pathlib import Path


FIELDS: dict[str, tuple[float, float, float]] = {
    "host_step_us": (1e-6, 0.0, 1e5),
    "host_layer_us": (1e-6, 0.0, 1e4),
    "step_us": (1e-6, 0.0, 1e5),
    "layer_us": (1e-6, 0.0, 1e4),
    "gemv_memory_eff": (1.0, 0.02, 1.0),
    "gemm_memory_eff": (1.0, 0.02, 1.0),
    "gemm_compute_eff": (1.0, 0.01, 1.0),
    "gemm_half_tokens": (1.0, 0.0, 4096.0),
    "attn_memory_eff": (1.0, 0.005, 1.0),
    "attn_dense_memory_eff": (1.0, 0.005, 1.0),
    "attn_compute_eff": (1.0, 0.01, 1.0),
    "prefill_compute_eff": (1.0, 0.01, 1.0),
    "prefill_attn_compute_eff": (1.0, 0.01, 1.0),
    "prefill_host_step_us": (1e-6, 0.0, 1e5),
    "prefill_host_layer_us": (1e-6, 0.0, 1e4),
    "blend": (1.0, 1.0, 16.0),
    "host_seq_us": (1e-6, 0.0, 1e5),
    "host_layer_seq_us": (1e-6, 0.0, 1e4),
}
"""Numeric fields of a runtime section: (SI value of one TOML unit, lower bound, upper bound in
TOML units). The bounds are what a fit may search and what a profile file may hold."""
BATCH_FIELDS = ("host_seq_us", "host_layer_seq_us")
"""The fields only steps of more than one sequence determine."""
OPTIONAL = dict.fromkeys(BATCH_FIELDS, 0.0)
"""Fields a profile may leave out, with the value that prices as profiles without them did."""


@dataclass(frozen=True)
class RuntimeParams:
    """One runtime's section of a profile, in SI units (seconds; efficiencies in (0, 1]).

    engine: the public engines it stands for; origin: where its values come from (fitted on
    which measurements, scaled from which profile, or a prior).
    """

    name: str
    engine: str
    origin: str
    host_step_s: float
    host_layer_s: float
    step_s: float
    layer_s: float
    gemv_memory_eff: float
    gemm_memory_eff: float
    gemm_compute_eff: float
    gemm_half_tokens: float
    attn_memory_eff: float
    attn_dense_memory_eff: float
    attn_compute_eff: float
    prefill_compute_eff: float
    prefill_attn_compute_eff: float
    prefill_host_step_s: float
    prefill_host_layer_s: float
    blend: float
    host_seq_s: float = 0.0
    host_layer_seq_s: float = 0.0

    def values(self) -> dict[str, float]:
        """The numeric fields in TOML units (µs and fractions), keyed as in the file."""
        return {key: getattr(self, _attr(key)) / FIELDS[key][0] for key in FIELDS}


def _attr(key: str) -> str:
    """The dataclass attribute of a TOML key (`step_us` → `step_s`)."""
    return key[:-3] + "_s" if key.endswith("_us") else key


def parse_runtime(name: str, table: Any, where: Path | str) -> RuntimeParams:
    """A `[runtime.<name>]` table checked: every field present (but `OPTIONAL` ones), numeric and
    within its bounds."""
    at = f"{where}: [runtime.{name}]"
    if name not in RUNTIMES:
        raise InputError(f"{at}: unknown runtime; known: {', '.join(RUNTIMES)}")
    if not isinstance(table, dict):
        raise InputError(f"{at} must be a table")
    known_keys(table, ("engine", "origin", *FIELDS), f"{at}: ")
    values: dict[str, Any] = {}
    for key, (unit, lo, hi) in FIELDS.items():
        value = table.get(key, OPTIONAL.get(key))
        if value is None:
            raise InputError(f"{at}: missing {key}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"{at}: {key} must be a number, got {value!r}")
        if not lo <= value <= hi:
            raise InputError(f"{at}: {key} = {value} lies outside [{lo:g}, {hi:g}]")
        values[_attr(key)] = float(value) * unit
    return RuntimeParams(name=name, engine=str(table.get("engine", "")),
                         origin=str(table.get("origin", "")), **values)


def replace_values(params: RuntimeParams, **values: float) -> RuntimeParams:
    """A copy of `params` with some fields replaced (TOML units: µs, fractions), for fitting; an
    unknown field is an `InputError`."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise InputError(f"unknown runtime fields {sorted(unknown)}; known: {', '.join(FIELDS)}")
    return dataclasses.replace(
        params, **{_attr(k): float(v) * FIELDS[k][0] for k, v in values.items()})


def runtime_toml(params: RuntimeParams) -> str:
    """The `[runtime.<name>]` section of a profile file for `params` (TOML units)."""
    # a JSON string is a TOML basic string (calibrate.py writes its strings the same way)
    lines = [f"[runtime.{params.name}]", f"engine = {json.dumps(params.engine)}",
             f"origin = {json.dumps(params.origin)}"]
    lines += [f"{key} = {value:.6g}" for key, value in params.values().items()]
    return "\n".join(lines) + "\n"
