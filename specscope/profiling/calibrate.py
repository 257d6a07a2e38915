"""`specscope profile-hw`: measure this machine, fit each runtime's cost terms, write a profile.

What it measures, every step through the executor's own path (`CachedModel.prefill` / `verify`
under each requested `Runtime`, padded buckets compiled or captured on their warm-up call):

- the device's peak: a large matrix product (fp32 on a CPU, the rate its float32 models run at;
  bf16 on a GPU) and a large device copy (read + write bytes over time);
- verification steps of catalogue models with random weights (three sizes, one ≥ 50 M parameters)
  over new tokens n (binary trees) × context, batch 1 (the single-sequence executor);
- batched verification steps (`batched.measure_batched`): B sequences × tree tokens n × context
  in one forward of the continuous-batching executor's target, the grid's draft model included
  (its few nodes per row are a batched draft level), under eager (and graph on a GPU);
- prefill of prompts (context 0; the wrappers prefill eagerly under every runtime, so these rows
  belong to `eager`);
- the decode loop's host costs where it pays them (`measure.measure_loop`: short
  `decode_speculative` runs of the zoo's tiny-code): each model-free drafter per drafted level
  (`[drafters]`), a draft-model level beyond its forward (`[speculation] level_us`), a
  verification beyond the target's forward (`verify_us`) and the bookkeeping per step
  (`step_us`), where the executor's loop imports (it needs polars; the GPU image may lack it,
  and then these are left out and said so);
- after the fit, under the default runtime: the first prefill's extra time after idle gaps
  (`serving.measure_wake`: `[idle]`), and the continuous-batching server's own host work per
  step, per sequence that does not speculate and per one that does (`serving.measure_serving`:
  `serve_step_us`, `serve_row_us`, `spec_row_us`), priced by the terms just fitted (it needs
  simpy as well).

Warm-up per shape, torch's threads from `use_threads` (`--threads` when given) and recorded
with why, median of repeats. Each runtime's terms (`[runtime.X]`, see `runtime.py`) are then
fitted (`runtime_fit.py`: scipy least squares on log(predicted / measured) through `CostModel`
itself, every 4th point held out to report the fit's error on points it did not see; batched
points second, fitting only the per-sequence host terms), and a
profile TOML (`profile_file.py`) is written atomically with the measured tables, the fit, its
held-out error and the machine's provenance.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from specscope.atomic import write_text_atomic
from specscope.errors import InputError
from specscope.executor.runtime import Runtime
from specscope.executor.threads import use_threads
from specscope.hw_profiles.profile import (
    DATA_DIR,
    HardwareProfile,
    check_name,
    is_shipped,
    load_profile,
    user_profile_dir,
    warn_poor_fit,
    with_runtime,
)
from specscope.hw_profiles.runtime import BATCH_FIELDS, FIELDS
from specscope.models import get_model
from specscope.models.spec import ModelSpec
from specscope.names import PROFILE_DEVICES, RUNTIMES
from specscope.outputs import check_output
from specscope.profiling.batched import batched_jobs
from specscope.profiling.measure import (
    Point,
    copy_rate,
    matmul_rate,
    measure_loop,
    measure_prefill,
    measure_steps,
    prompt_tokens,
    provenance,
    release,
)
from specscope.profiling.profile_file import PRIORS, Measurements, profile_toml
from specscope.profiling.runtime_fit import PREFILL_FIELDS, Fit, fit_runtime
from specscope.profiling.serving import (
    SERVE_BATCHES,
    WAKE_GAPS,
    measure_serving,
    measure_wake,
)

Progress = Callable[[int, int, str], None]
"""progress(done, total, what is being measured now)."""


@dataclass(frozen=True)
class Grid:
    """What `profile-hw` measures on one device kind.

    models: catalogue models (random weights); ns / contexts: tree sizes and committed tokens of
    the eager grid; static_ns / static_contexts: those of runtimes that compile or capture a step
    per padded bucket (each (model, bucket, context) costs seconds to compile on a CPU); prefill:
    prompt lengths; draft_model and draft_levels: the drafter model and the chain depths timed;
    loop_runs: rounds of the decode-loop runs that measure host costs (`measure_loop`);
    batches, batch_ns and batch_contexts: the batched steps (`measure_batched`, every model of
    the grid, under those of `batch_runtimes` requested; none when `batches` is empty);
    wake_gaps and serve_batches: the idle gaps and the batches of the serving measurements
    (`serving.measure_wake`, `serving.measure_serving`; none when empty).
    """

    models: tuple[str, ...]
    ns: tuple[int, ...]
    contexts: tuple[int, ...]
    static_ns: tuple[int, ...]
    static_contexts: tuple[int, ...]
    prefill: tuple[int, ...]
    draft_model: str
    draft_levels: int = 8
    repeats: int = 5
    loop_runs: int = 3
    batches: tuple[int, ...] = ()
    batch_ns: tuple[int, ...] = ()
    batch_contexts: tuple[int, ...] = ()
    batch_runtimes: tuple[str, ...] = ("eager", "graph")
    wake_gaps: tuple[float, ...] = WAKE_GAPS
    serve_batches: tuple[int, ...] = SERVE_BATCHES


CPU_MODELS = ("tiny-code-draft", "tiny-code", "llama-68m")
GPU_MODELS = ("llama-68m", "llama-3.2-1b", "llama-3.1-8b")
GRIDS = {
    ("cpu", True): Grid(CPU_MODELS, (1, 2, 4, 8, 16, 32), (64, 256, 512), (1, 2, 4, 8, 16),
                        (256,), (32, 128), "tiny-code-draft", repeats=9, batches=(2, 4, 8),
                        batch_ns=(1, 2, 3, 4), batch_contexts=(64, 256),
                        wake_gaps=(0.05, 0.2, 0.8), serve_batches=(1, 2)),
    ("cpu", False): Grid(CPU_MODELS, (1, 2, 4, 8, 16, 32, 64, 128), (64, 256, 1024),
                         (1, 2, 4, 8, 16, 32), (64, 256), (32, 128, 384), "tiny-code-draft",
                         repeats=15, batches=(2, 4, 8, 16), batch_ns=(1, 2, 4, 8),
                         batch_contexts=(64, 256)),
    ("cuda", True): Grid(GPU_MODELS, (1, 2, 4, 8, 16, 32), (256, 2048), (1, 2, 4, 8, 16, 32),
                         (1024,), (512, 2048), "llama-68m", repeats=10, batches=(2, 4, 8, 16),
                         batch_ns=(1, 4, 16), batch_contexts=(256, 2048)),
    ("cuda", False): Grid(GPU_MODELS, (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
                          (128, 1024, 8192), (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
                          (128, 1024, 8192), (512, 2048, 8192), "llama-68m", repeats=20,
                          batches=(2, 4, 8, 16, 32), batch_ns=(1, 2, 4, 8, 16, 32),
                          batch_contexts=(128, 1024, 8192)),
}
"""(device, quick) → grid. --quick on a 2-core CPU stays under ~2.5 minutes, compiling included.
Batched steps: B × n up to the single-sequence grid's largest n on a CPU (the tokens a batch's
operators see stay where the first fit measured them)."""
QUICK_CUDA_RUNTIMES = ("eager", "graph")
"""What --quick on cuda fits when no --runtime is given: compiling its grid's buckets took 12-15
minutes on an H100, so compile is measured only when asked for."""
EXECUTOR_DEFAULT = {"cpu": "eager", "cuda": "graph"}
"""The runtime the executor runs when none is asked for: the written profile's default."""


# ---- the profile -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileResult:
    """A written profile: its path, the fits, the measurements and the run's wall time."""

    path: Path
    fits: dict[str, Fit]
    measurements: Measurements
    wall_s: float


def resolve_device(device: str) -> str:
    """The device `profile-hw` measures: `device`, or for auto the GPU when torch sees one,
    else the CPU (so a GPU machine is not profiled as its host by default)."""
    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_request(name: str, device: str, runtimes: Sequence[str], threads: int | None
                  ) -> tuple[Runtime, list[Runtime]]:
    """Check `--name`, `--device`, `--runtime` and `--threads` together (one-line `InputError`s);
    the base runtime (device and dtype: bfloat16 on a GPU, float32 on a CPU) and one per
    requested runtime."""
    check_name(name)
    if device not in PROFILE_DEVICES:
        raise InputError(f"--device must be cpu or cuda, got {device!r}")
    if threads is not None and threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    base = Runtime.resolve(device, "bfloat16" if device == "cuda" else "float32")
    kinds = set(runtimes) or ({"eager", "graph", "compile"} if device == "cuda"
                              else {"eager", "compile"})
    unknown = sorted(kinds - set(RUNTIMES))
    if unknown:
        raise InputError(f"--runtime must be among {', '.join(RUNTIMES)}, got {unknown[0]!r}")
    kinds = [kind for kind in RUNTIMES if kind in kinds]  # eager first: its prefill fit is shared
    chosen = [Runtime.resolve(device, base.dtype_name, kind) for kind in kinds]
    return base, chosen


def memory_gb(runtime: Runtime) -> float:
    """The device's memory in GB (a GPU's, or the host's MemTotal)."""
    if runtime.device.type == "cuda":
        return torch.cuda.get_device_properties(runtime.device).total_memory / 1e9
    meminfo = Path("/proc/meminfo")
    for line in meminfo.read_text().splitlines() if meminfo.exists() else []:
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024 / 1e9
    return 0.0


def base_profile(name: str, m: Measurements, runtimes: Sequence[str]) -> HardwareProfile:
    """The profile to fit: the measured peak (int8 and fp8 not measured: 0), copy rate and memory,
    the device kind's shipped priors (`PRIORS`) for every runtime section, the interconnect and
    dequantisation, and no measured tables; `assumed` names the origin of each value not
    measured (`assumed_values`; the fit takes the fields it fits off)."""
    prior = load_profile(DATA_DIR / f"{PRIORS[m.device]}.toml")
    fallback = prior.runtime()
    sections = {r: dataclasses.replace(prior.runtimes.get(r, fallback), name=r)
                for r in runtimes}
    default = EXECUTOR_DEFAULT[m.device]
    return dataclasses.replace(
        prior, name=name, description=f"{m.provenance['device']}, measured by profile-hw",
        kind="gpu" if m.device == "cuda" else "cpu",
        default_runtime=default if default in runtimes else runtimes[0], runtimes=sections,
        peak_flops={"bf16": m.tflops * 1e12, "int8": 0.0, "fp8": 0.0},
        bandwidth=m.copy_gbps * 1e9, memory_bytes=m.memory_gb * 1e9, measured=(),
        sources=(f"measured on this machine by specscope profile-hw ({m.provenance['date']})",),
        loop=prior.loop if m.loop is None else m.loop,
        assumed=assumed_values(prior, runtimes))


NOT_PRICED = ("assumed: not measured by profile-hw (it times the bf16 matrix product only, fp32 "
              "on a CPU); 0 means not priced")
"""The origin of the int8 and fp8 peaks a written profile states as 0. They stay 0 rather than
copy the prior's: profile-hw measures any GPU, and the H100's 1,979 TOP/s would price 8-bit
activations on an A100 or an RTX card at a rate it does not have; at 0 `CostModel` refuses
8-bit activations on the profile with one line naming this origin (fp8 is priced nowhere)."""


def assumed_values(prior: HardwareProfile, runtimes: Sequence[str]) -> dict[str, str]:
    """The origin of every value a written profile states but profile-hw does not measure
    (`[assumed]`): the int8 and fp8 peaks (0, `NOT_PRICED`), the interconnect and the
    dequantisation (copied from the shipped `prior`), and each runtime's fields before the fit
    (the prior's runtime of that name, else its default runtime)."""
    copied = f"assumed: copied from the shipped {prior.name} profile"
    assumed = {
        "compute.int8_tops": f"{NOT_PRICED}: 8-bit activations are refused on this profile",
        "compute.fp8_tflops": f"{NOT_PRICED} (no step is priced at fp8)",
        **{f"interconnect.{key}": f"{copied} (one device measured)"
           for key in ("link_gbs", "max_tp", "allreduce_latency_us", "shard_lm_head")},
        **{f"dequant.{key}": copied
           for key in ("int8_ps_per_weight", "int4_ps_per_weight", "tile_tokens")},
    }
    for r in runtimes:
        source = r if r in prior.runtimes else prior.default_runtime
        assumed |= {f"runtime.{r}.{field}": f"{copied}'s {source} runtime (not fitted)"
                    for field in FIELDS}
    return assumed


def fitted_values(hw: HardwareProfile, runtime: str, fit: Fit,
                  carried: Sequence[str] = ()) -> dict[str, str]:
    """`hw.assumed` once `fit` has fitted `runtime`: its fitted fields (the batched ones too,
    where batched steps were fitted) measured, the `carried` fields eager's fit on this machine,
    and the dense-mask attention set from the split one."""
    measured = {*fit.fitted, *(BATCH_FIELDS if fit.batched is not None else ())}
    at = f"runtime.{runtime}."
    assumed = {key: text for key, text in hw.assumed.items()
               if not (key.startswith(at) and key[len(at):] in measured)}
    for field in (f for f in carried if f not in measured):
        why = ("batched steps measured under eager only" if field in BATCH_FIELDS else
               "prompts prefill eagerly under every runtime")
        assumed[at + field] = hw.assumed.get(f"runtime.eager.{field}",
                                             f"assumed: eager's fit on this machine ({why})")
    assumed[at + "attn_dense_memory_eff"] = ("assumed: equal to attn_memory_eff (the executor "
                                             "runs split tree attention, not the dense mask)")
    return assumed


def profile_hw(name: str, device: str = "cpu", runtimes: Sequence[str] = (),
               quick: bool = False, threads: int | None = None, output: Path | None = None,
               progress: Progress | None = None, grid: Grid | None = None,
               command: str = "specscope profile-hw", force: bool = False,
               models: Sequence[str] = ()) -> ProfileResult:
    """Measure this machine, fit each runtime and write the profile (default: the user profile
    directory, `<name>.toml`, which may replace an earlier one or take a shipped profile's name
    only with `force`); `grid` replaces the device's default grid (tests), `models` its
    catalogue models (the ones a user will price: a model shorter than a grid context is
    measured at the longest context it holds). torch's threads:
    `threads`, else `use_threads`'s for the grid's largest model (1 on cuda and for the CPU
    grid's models, which the executor runs on 1 too)."""
    start = time.perf_counter()
    if not runtimes and device == "cuda" and quick:
        runtimes = QUICK_CUDA_RUNTIMES
    base, chosen = check_request(name, device, runtimes, threads)
    path = Path(output) if output is not None else user_profile_dir() / f"{name}.toml"
    if output is None:
        if is_shipped(name) and not force:
            raise InputError(f"--name {name}: a shipped profile's name (--hw {name} would then "
                             "read yours instead); choose another, or pass --force")
        check_output(path, "--name", force=force)
    grid = grid or GRIDS[(device, quick)]
    if models:
        grid = dataclasses.replace(grid, models=tuple(models))
    specs = {model: get_model(model) for model in (*grid.models, grid.draft_model)}
    picked = use_threads(threads, *specs.values(), device=base.device)
    steps = _jobs(grid, chosen, specs)
    phases = ["peak FLOP/s and copy rate", *[what for what, _ in steps],
              "drafters and bookkeeping", *[f"fitting {r.kind}" for r in chosen],
              "the batching server"]
    report = progress or (lambda done, total, what: None)
    total = len(phases)
    report(0, total, phases[0])
    m = Measurements(device, picked.count, matmul_rate(base), copy_rate(base), memory_gb(base),
                     provenance=provenance(base), threads_reason=picked.reason)
    for i, (what, job) in enumerate(steps, start=1):
        report(i, total, what)
        m.points += job()
    release()
    report(len(steps) + 1, total, phases[len(steps) + 1])
    host_costs(m, base, specs[grid.draft_model], grid)
    hw = base_profile(name, m, [r.kind for r in chosen])
    fits: dict[str, Fit] = {}
    for i, runtime in enumerate(chosen, start=len(steps) + 2):
        report(i, total, phases[i])
        points = [p for p in m.points if p.runtime == runtime.kind]
        if runtime.kind != "eager" and "eager" in fits:  # prompts run eager under every runtime
            carried = PREFILL_FIELDS
            if fits["eager"].batched and not any(p.batch > 1 for p in points):
                carried += BATCH_FIELDS  # batched steps measured under eager only
            hw = with_runtime(hw, runtime.kind, **{f: fits["eager"].values[f] for f in carried})
        else:
            carried = ()
        fits[runtime.kind] = fit_runtime(hw, runtime.kind, points, specs)
        hw = dataclasses.replace(
            with_runtime(hw, runtime.kind, **fits[runtime.kind].values),
            assumed=fitted_values(hw, runtime.kind, fits[runtime.kind], carried))
    report(total - 1, total, phases[-1])
    hw = serving_costs(hw, m, next(r for r in chosen if r.kind == hw.default_runtime), grid)
    report(total, total, "writing")
    wall = time.perf_counter() - start
    text = profile_toml(hw, m, fits, command, wall)
    write_text_atomic(path, text)
    for fit in fits.values():
        warn_poor_fit(name, fit.runtime, fit.heldout_median_rel_err, fit.heldout_max_rel_err)
    return ProfileResult(path, fits, m, wall)


def _jobs(grid: Grid, chosen: Sequence[Runtime], specs: dict[str, ModelSpec]
          ) -> list[tuple[str, Callable[[], list[Point]]]]:
    """The step, prefill and batched-step measurements of a run, each with what it measures."""
    jobs: list[tuple[str, Callable[[], list[Point]]]] = []
    for runtime in chosen:
        eager = runtime.kind == "eager"
        ns = grid.ns if eager else grid.static_ns
        for model in grid.models:
            spec = specs[model]
            room = spec.max_seq_len - max(ns) - 1
            contexts = [c for c in (grid.contexts if eager else grid.static_contexts)
                        if c <= room] or ([room] if room > 0 else [])
            if contexts:
                jobs.append((f"{model} {runtime.kind}",
                             lambda s=spec, r=runtime, c=contexts, n=ns:
                             measure_steps(s, r, c, n, grid.repeats)))
    if any(r.kind == "eager" for r in chosen) and grid.prefill:
        for model in grid.models:
            spec = specs[model]
            lengths = [t for t in grid.prefill if t + 1 <= spec.max_seq_len] or [
                spec.max_seq_len - 1]
            if lengths:
                jobs.append((f"{model} prefill", lambda s=spec, t=lengths, r=chosen[0]:
                             measure_prefill(s, r, t, grid.repeats)))
    batched = [r for r in chosen if r.kind in grid.batch_runtimes]
    return jobs + batched_jobs([specs[m] for m in grid.models], batched, grid.batch_contexts,
                               grid.batches, grid.batch_ns, grid.repeats)


def serving_costs(hw: HardwareProfile, m: Measurements, runtime: Runtime, grid: Grid
                  ) -> HardwareProfile:
    """`hw` with the first forward's time after an idle gap (`serving.measure_wake`) and the
    batching server's own terms (`serving.measure_serving`, where the decode loop's were measured
    and the server imports here), under the default runtime."""
    if grid.wake_gaps:
        hw = dataclasses.replace(hw, wake=measure_wake(runtime, grid.wake_gaps))
    if m.loop is None or not grid.serve_batches:
        return hw
    try:
        loop = measure_serving(hw, runtime, grid.serve_batches, m.points)
    except ImportError as exc:
        m.notes.append(f"the batching server's costs not measured: {exc}")
        return hw
    m.loop = loop
    return dataclasses.replace(hw, loop=loop)


def host_costs(m: Measurements, base: Runtime, draft: ModelSpec, grid: Grid) -> None:
    """Fill the drafters' host cost, the draft-model level cost and the loop's bookkeeping into
    `m` (`measure_loop`), or a note where the executor's loop cannot be imported here (no polars
    on the image)."""
    try:
        m.loop = measure_loop(draft, base, prompt_tokens(), grid.draft_levels, grid.loop_runs)
    except ImportError as exc:
        m.notes.append(f"drafter and bookkeeping costs not measured: {exc}")


