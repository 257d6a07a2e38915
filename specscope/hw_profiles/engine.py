"""Engines: the software a speculative step runs on, priced apart from the hardware it runs on.

The same tree on the same GPU costs very different times under Hugging Face eager code, a
research stack built on it (EAGLE- and Medusa-style model code with a pre-allocated KV cache),
gpt-fast, vLLM, SGLang, TensorRT-LLM or llama.cpp. An engine states (docs/hardware.md#engines):

- the runtime of the target and of the draft, separately (Sequoia-style code captures only the
  draft as a CUDA graph), and how its baseline runs (`baseline`: the engine whose plain
  autoregressive loop a paper's speedup divides by);
- its tree attention: a dense (n, prefix + n) mask, split (flash prefix + tree block), or none
  (chains only);
- its speculative loop's host work (`LoopCosts`): per step, per drafted level, per further tree
  node a level proposes for, per accepted token, per verification (greedy and sampled), and the
  baseline loop's per-token host work beyond the forward.

An engine's host terms are stated in microseconds on the host they were measured on
(`measured_on`, a profile) and priced on a box in proportion to how long that box's host takes to
issue the same eager transformer layer (`host_scale`): operator dispatch is what both are made of.
The `specscope` engine is the loop `profile-hw` measures on the box itself, which is what every
command prices when no engine is named.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from specscope.errors import InputError
from specscope.files import read_toml
from specscope.hw_profiles.cost import TREE_ATTENTION as PRICED_ATTENTION
from specscope.hw_profiles.loop import LOOP_KEYS, LOOP_TERMS, LoopCosts
from specscope.hw_profiles.profile import HardwareProfile, load_profile
from specscope.models.ops import PROMPT_LOGITS
from specscope.names import HOST_DRAFTERS, RUNTIMES

ENGINE_DIR = Path(__file__).parent / "data" / "engines"
TREE_ATTENTION = (*PRICED_ATTENTION, "none")
"""How an engine verifies a tree: as `cost.TREE_ATTENTION` prices it (split, dense or masked),
or none (it verifies chains only)."""
DEFAULT_ENGINE = "specscope"


_LOOP_SETTINGS = ("measured_on", "from_profile", "uncarried", "reference_layer_us",
                  "batched_step")
_SCHEDULER_KEYS = ("max_batch", "max_batch_speculative")
_TOP_KEYS = ("name", "description", "target_runtime", "draft_runtime", "tree_attention",
             "baseline", "draft_cache", "draft_at_target_tp", "host_layer_ratio",
             "device_layer_ratio", "prompt_logits", "loop", "scheduler", "sources")
"""Every top-level key and table of an engine file; any other is refused (a typo such as
`device_layer_ration` or `[schedulr]` would otherwise be dropped without a word)."""
HOST_US_MAX = 1e6
"""The most microseconds an engine's host term (`[loop] *_us`, `reference_layer_us`) may state:
one second of host work per step, level, node or token is no engine's (the slowest shipped
terms are Hugging Face's eager loop's hundreds of µs), so a larger value is a unit slip."""
RATIO_MAX = 100.0
"""The largest `host_layer_ratio` / `device_layer_ratio`: an engine's layer costing a hundred
times specscope's own is no engine's (the shipped ratios lie in 0.5..2)."""
MAX_BATCH_MAX = 1_000_000
"""The largest `[scheduler]` batch an engine may state (vLLM's largest default is 1,024)."""


@dataclass(frozen=True)
class Engine:
    """One engine's file, read and checked (module docstring).

    target_runtime / draft_runtime: None keeps the profile's default (or the command's
    --runtime); stated / stated_drafters: the `[loop]` terms the file gives (seconds);
    reference_layer_s: specscope's eager Transformer layer's host issue time measured beside
    them (0: they are seconds on the host the eager runtimes were measured on);
    loop_from_profile: under them, the terms (`LoopCosts` fields; all of them for
    `from_profile = true`) of the loop profile-hw measured on `measured_on` ("" for the box
    itself); uncarried: the terms, carried from the profile or stated, taken as measured (over
    the box's host speed only: host work a GPU's launch cost does not multiply, CPU-tensor and
    Python work); device_layer_ratio: the engine's fixed device time
    per layer (its kernels' launches and gaps) over specscope's Transformer's under the same
    runtime (a fused engine runs fewer kernels a layer); host_layer_ratio: the engine's model
    code's eager
    host issue time per layer over specscope's Transformer's, which the eager runtimes were
    fitted on; sources: where each stated value comes from, by key, or "assumed: …";
    batched_step (`[loop] batched_step`): the step's bookkeeping runs once over a batch of
    sequences (`LoopCosts.step_per_row` false), not once per speculating sequence;
    draft_cache: the draft keeps its drafted levels in its KV cache, so a level forwards only
    the nodes it expands (specscope's executor forwards each level's nodes with their
    ancestors after the committed prefix); max_batch (`[scheduler] max_batch`): the sequences
    its scheduler runs in one step by default (vLLM's `max_num_seqs`), which `simulate`
    serves at when no --max-batch is given (None: the simulator's own default);
    max_batch_speculative (`[scheduler] max_batch_speculative`): the default in its place when
    the engine speculates (SGLang resets its running requests to 48 under any speculative
    algorithm), so plain decoding and speculation of the same arrivals batch differently;
    prompt_logits: where a prompt's forward computes logits (`ops.PROMPT_LOGITS`; "last": at
    each sequence's last position, where the engine samples); draft_at_target_tp: a draft model
    is sharded over the target's devices unless told otherwise (`deployment.deployment`), as the
    draft workers of vLLM, SGLang and gpt-fast are.
    """

    name: str
    description: str
    target_runtime: str | None
    draft_runtime: str | None
    tree_attention: str
    baseline: str
    measured_on: str
    stated: dict[str, float]
    stated_drafters: dict[str, float]
    loop_from_profile: tuple[str, ...]
    uncarried: tuple[str, ...]
    reference_layer_s: float
    host_layer_ratio: float
    device_layer_ratio: float
    sources: dict[str, str]
    batched_step: bool = False
    draft_cache: bool = False
    draft_at_target_tp: bool = False
    max_batch: int | None = None
    max_batch_speculative: int | None = None
    prompt_logits: str = "all"

    def default_batch(self, speculating: bool) -> int | None:
        """The sequences a step runs when none is given: `max_batch_speculative` while
        speculating (when stated), else `max_batch`."""
        return (self.max_batch_speculative or self.max_batch) if speculating else self.max_batch

    def loop_costs(self, hw: HardwareProfile) -> LoopCosts:
        """This engine's loop priced on box `hw` (module docstring): the loop profile-hw
        measured on `measured_on` (or on `hw` itself) when `loop_from_profile`, carried to `hw`'s
        host by `host_scale`, with the `[loop]` terms the file states over it, carried by the
        reference layer they were measured beside (or, without one, µs on the host the eager
        runtimes were measured on)."""
        base = LoopCosts()
        if self.loop_from_profile:
            source = self._measured_on or hw
            base = LoopCosts(**{f: getattr(source.loop, f) for f in self.loop_from_profile})
            if source.name != hw.name:
                base = dataclasses.replace(
                    base.carried(host_scale(source, hw)),
                    **{f: getattr(base, f) / hw.host_speed for f in self.uncarried
                       if f in self.loop_from_profile})
        factor = (_eager_layer_s(hw) / self.reference_layer_s if self.reference_layer_s
                  else 1.0 / hw.host_speed)
        return dataclasses.replace(
            base, **{k: v * (1.0 / hw.host_speed if k in self.uncarried else factor)
                     for k, v in self.stated.items()},
            drafter={**base.drafter, **{k: v * factor for k, v in self.stated_drafters.items()}},
            step_per_row=not self.batched_step)

    @cached_property
    def _measured_on(self) -> HardwareProfile | None:
        """The profile whose loop this engine carries, read once (`loop_costs` runs for every
        pricing a reproduce run builds); None: the priced box's own."""
        return load_profile(self.measured_on) if self.measured_on else None


def host_scale(measured_on: HardwareProfile, box: HardwareProfile) -> float:
    """How much longer `box`'s host takes than `measured_on`'s to issue the same work: the ratio
    of their eager per-layer host times (each as its profile prices it, host speed included)."""
    mine, theirs = _eager_layer_s(box), _eager_layer_s(measured_on)
    return mine / theirs


def _eager_layer_s(hw: HardwareProfile) -> float:
    if "eager" not in hw.runtimes:
        raise InputError(f"profile {hw.name} prices no eager runtime, so an engine's host work "
                         "cannot be carried to it")
    return hw.runtimes["eager"].host_layer_s / hw.host_speed


def list_engines() -> list[str]:
    """Names of the shipped engines, sorted."""
    return sorted(p.stem for p in ENGINE_DIR.glob("*.toml"))


ENGINE_NAMES = tuple(list_engines())
"""The shipped engines (`--engine` takes these or an engine TOML path)."""


@cache
def load_engine(name: str) -> Engine:
    """The shipped engine `name`, or an engine TOML file by path."""
    path = Path(name) if name.endswith(".toml") else ENGINE_DIR / f"{name}.toml"
    if not path.is_file():
        raise InputError(f"--engine: unknown engine {name!r}; known: {', '.join(list_engines())}")
    return _parse(read_toml(path, "engine file"), path)


def _parse(data: dict[str, Any], path: Path) -> Engine:
    """An engine file's `data` checked (docs/hardware.md#engines): known keys only, every
    number finite and within its bound (`HOST_US_MAX`, `RATIO_MAX`, `MAX_BATCH_MAX`), every
    stated value sourced; any fault is one `InputError` naming the file and the key."""
    where = str(path)
    unknown = [key for key in data if key not in _TOP_KEYS]
    if unknown:
        what = "table" if isinstance(data[unknown[0]], dict) else "key"
        raise InputError(f"{where}: unknown {what} {unknown[0]!r}; known: {', '.join(_TOP_KEYS)}")
    for key in ("name", "description", "tree_attention", "baseline"):
        if not isinstance(data.get(key), str):
            raise InputError(f"{where}: {key} must be a string")
    for key in ("name", "baseline"):
        if not data[key].strip():
            raise InputError(f"{where}: {key} must not be empty")
    runtimes = {}
    for key in ("target_runtime", "draft_runtime"):
        value = data.get(key)
        if value is not None and value not in RUNTIMES:
            raise InputError(f"{where}: {key} {value!r} is not one of {', '.join(RUNTIMES)}")
        runtimes[key] = value
    if data["tree_attention"] not in TREE_ATTENTION:
        raise InputError(f"{where}: tree_attention must be one of {', '.join(TREE_ATTENTION)}")
    table = data.get("loop", {})
    if not isinstance(table, dict):
        raise InputError(f"{where}: [loop] must be a table")
    measured_on = table.get("measured_on", "")
    if not isinstance(measured_on, str):
        raise InputError(f"{where}: [loop] measured_on must be a profile's name, got "
                         f"{measured_on!r}")
    from_profile = _terms(table.get("from_profile", False), "from_profile", where)
    uncarried = _terms(table.get("uncarried", []), "uncarried", where)
    drafters = {}
    values: dict[str, float] = {}
    for key, value in table.items():
        if key in _LOOP_SETTINGS:
            continue
        name = LOOP_KEYS.get(key)
        drafter = key[:-3] if key.endswith("_us") and key[:-3] in HOST_DRAFTERS else None
        if name is None and drafter is None:
            raise InputError(f"{where}: [loop] unknown key {key!r}; known: "
                             f"{', '.join([*LOOP_KEYS, *_LOOP_SETTINGS])}")
        seconds = _number(value, f"[loop] {key}", where, HOST_US_MAX, "µs") * 1e-6
        if drafter:
            drafters[drafter] = seconds
        else:
            values[name] = seconds
    if not set(uncarried) <= {*from_profile, *values} or "drafter" in uncarried:
        raise InputError(f"{where}: [loop] uncarried names terms neither from_profile takes nor "
                         "the file states (or drafter)")
    reference = _number(table.get("reference_layer_us", 0.0), "[loop] reference_layer_us", where,
                        HOST_US_MAX, "µs")
    batched_step, draft_cache = table.get("batched_step", False), data.get("draft_cache", False)
    sharded = data.get("draft_at_target_tp", False)
    for key, value in (("[loop] batched_step", batched_step), ("draft_cache", draft_cache),
                       ("draft_at_target_tp", sharded)):
        if not isinstance(value, bool):
            raise InputError(f"{where}: {key} must be true or false")
    ratio = _number(data.get("host_layer_ratio", 1.0), "host_layer_ratio", where, RATIO_MAX,
                    positive=True)
    prompt_logits = data.get("prompt_logits", "all")
    if prompt_logits not in PROMPT_LOGITS:
        raise InputError(f"{where}: prompt_logits must be one of {', '.join(PROMPT_LOGITS)}")
    device = _number(data.get("device_layer_ratio", 1.0), "device_layer_ratio", where, RATIO_MAX,
                     positive=True)
    scheduler = data.get("scheduler", {})
    if not isinstance(scheduler, dict) or set(scheduler) - set(_SCHEDULER_KEYS):
        raise InputError(f"{where}: [scheduler] takes {' and '.join(_SCHEDULER_KEYS)} only")
    limits = {key: scheduler.get(key) for key in _SCHEDULER_KEYS}
    for key, value in limits.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 1 <= value <= MAX_BATCH_MAX):
            raise InputError(f"{where}: [scheduler] {key} must be a whole number in "
                             f"1..{MAX_BATCH_MAX:,}, got {value!r}")
    sources = data.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise InputError(f"{where}: [sources] must map keys to strings")
    blank = [key for key, text in sources.items() if not text.strip()]
    if blank:
        raise InputError(f"{where}: [sources] {blank[0]} is empty (a source, or \"assumed: …\")")
    sourced = {*_TOP_KEYS, *_LOOP_SETTINGS, *_SCHEDULER_KEYS, *LOOP_KEYS,
               *(f"{d}_us" for d in HOST_DRAFTERS)} - {"sources", "scheduler"}
    strays = [key for key in sources if key not in sourced]
    if strays:
        raise InputError(f"{where}: [sources] {strays[0]!r} names no key of an engine file "
                         f"(known: {', '.join(sorted(sourced))})")
    needed = [k for k in table if k not in _LOOP_SETTINGS]
    needed += ["loop"] if from_profile else []
    needed += ["host_layer_ratio"] if ratio != 1.0 else []
    needed += ["device_layer_ratio"] if device != 1.0 else []
    needed += ["draft_cache"] if draft_cache else []
    needed += ["draft_at_target_tp"] if sharded else []
    needed += ["prompt_logits"] if prompt_logits != "all" else []
    needed += [key for key, value in limits.items() if value is not None]
    unsourced = [k for k in needed if k not in sources and (k == "loop" or "loop" not in sources)]
    if unsourced:
        raise InputError(f"{where}: [sources] says nothing of {unsourced[0]!r} (a source, or "
                         "\"assumed: …\")")
    return Engine(name=data["name"], description=data["description"],
                  target_runtime=runtimes["target_runtime"],
                  draft_runtime=runtimes["draft_runtime"],
                  tree_attention=data["tree_attention"], baseline=data["baseline"],
                  measured_on=measured_on, stated=values, stated_drafters=drafters,
                  loop_from_profile=from_profile, uncarried=uncarried,
                  reference_layer_s=reference * 1e-6, host_layer_ratio=ratio,
                  device_layer_ratio=device, sources=dict(sources), batched_step=batched_step,
                  draft_cache=draft_cache, draft_at_target_tp=sharded,
                  prompt_logits=prompt_logits, **limits)


def _terms(value: Any, key: str, where: str) -> tuple[str, ...]:
    """`[loop] key`: true (every term), false (none) or a list of `LoopCosts` terms."""
    if isinstance(value, bool):
        return LOOP_TERMS if value else ()
    if not isinstance(value, list) or not set(value) <= set(LOOP_TERMS):
        raise InputError(f"{where}: [loop] {key} must be true, false or a list of "
                         f"{', '.join(LOOP_TERMS)}; got {value!r}")
    return tuple(value)


def _number(value: Any, key: str, where: str, most: float, unit: str = "",
            positive: bool = False) -> float:
    """`value` as a float; anything but a finite number in [0, `most`] (or (0, `most`] when
    `positive`) is an `InputError` naming `key`."""
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not 0 <= value <= most or (positive and value == 0)):
        unit = f" {unit}" if unit else ""
        span = f"{'(' if positive else '['}0, {most:g}]"
        raise InputError(f"{where}: {key} must be a number in {span}{unit}, got {value!r}")
    return float(value)
