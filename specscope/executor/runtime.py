"""Where and how a model's steps run: the device, the dtype, and the runtime.

The runtime is what turns a step into kernels, and on a GPU it moves a step's cost by up to 10×:

- `eager`: each operator launched from Python as the model calls it (Hugging Face eager and most
  research code run this way). The reference path: exact shapes, no padding.
- `graph`: the step captured once as a CUDA graph per padded tree size, then replayed with its
  inputs copied into static buffers (CUDA-graph engines: vLLM, SGLang, TensorRT-LLM's runtime).
  CUDA only.
- `compile`: the same static step through `torch.compile` (inductor: fused Triton kernels on a GPU,
  then captured as a CUDA graph as gpt-fast does; generated C++ on a CPU, where a tiny model's step
  is otherwise dominated by per-operator overhead).

Tree sizes are padded to buckets (powers of two) so each bucket is captured or compiled once;
padded nodes attend only to themselves, their logits are dropped, and they are never accepted.
`StepRunner` holds the captured or compiled versions and the seconds spent making them, which
runs report apart from decoding time. `Runtime.clock` is the one timing helper: it waits for the
device to finish queued work, then reads `time.perf_counter`.

`use_threads` is the one thread policy every command that runs models follows: torch's intra-op
threads are `--threads` when given, else 1 on CUDA and for models under `SMALL_MODEL_PARAMS`
parameters on a CPU, else the fastest count on a short probe; results record the count and why.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from specscope.errors import InputError
from specscope.names import DEVICES, DTYPE_NAMES, RUNTIMES

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
"""`--dtype` choices and their torch dtypes."""
WARMUP_CALLS = 2
"""Eager calls on a side stream before a CUDA graph is captured (allocator and cuBLAS warm-up)."""
RECOMPILE_LIMIT = 64
"""Compiled versions dynamo may keep of one step function (models × buckets)."""
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
"""`torch.compile` modes a CUDA `compile` step may use: the runner captures the compiled step as a
CUDA graph itself, so the modes that capture their own (reduce-overhead, max-autotune) are left out.
max-autotune-no-cudagraphs times Triton matmul templates against cuBLAS for every shape (68-79 s per
llama-3.1-8b bucket on an H100); `default` leaves the matmuls to cuBLAS without that search."""
CUDA_COMPILE_MODE = "max-autotune-no-cudagraphs"
"""The executor's mode on CUDA when none is asked for."""
CPU_OPTIONS = {"freezing": True, "cpp_wrapper": True}
"""Inductor on a CPU: weights folded as constants (oneDNN prepacks them for small-batch GEMMs) and a
C++ wrapper instead of Python between kernels. Measured on tiny-code (2-core EPYC, 1 thread): one
token 3.3 ms eager, 3.1 ms compiled with defaults, 1.8 ms with these; its draft 0.64 → 0.13 ms."""


@dataclass(frozen=True)
class Runtime:
    """A device, a dtype and a runtime kind, checked together (see `resolve`)."""

    device: torch.device
    dtype: torch.dtype
    kind: str = "eager"
    compile_mode: str | None = None
    """`torch.compile` mode of `compile` steps on CUDA (one of `COMPILE_MODES`; None:
    `CUDA_COMPILE_MODE`). A CPU compiles with `CPU_OPTIONS` whatever the mode."""

    def __post_init__(self) -> None:
        if self.compile_mode is not None and self.compile_mode not in COMPILE_MODES:
            raise InputError(f"--compile-mode must be one of {', '.join(COMPILE_MODES)}, got "
                             f"{self.compile_mode!r}")

    @classmethod
    def resolve(cls, device: str = "auto", dtype: str = "float32",
                runtime: str | None = None) -> Runtime:
        """Check and combine `--device`, `--dtype` and `--runtime` (default: graph on CUDA,
        eager on CPU); raises `InputError` with one line for a combination that cannot run."""
        if device not in DEVICES:
            raise InputError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
        if dtype not in DTYPES:
            raise InputError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        if runtime is not None and runtime not in RUNTIMES:
            raise InputError(f"--runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
        cuda = torch.cuda.is_available()
        if device == "cuda" and not cuda:
            raise InputError("--device cuda: no CUDA GPU is visible to torch on this machine")
        chosen = "cuda" if device == "auto" and cuda else ("cpu" if device == "auto" else device)
        kind = runtime or ("graph" if chosen == "cuda" else "eager")
        if kind == "graph" and chosen != "cuda":
            raise InputError("--runtime graph captures CUDA graphs and needs --device cuda; "
                             "on cpu use eager or compile")
        return cls(torch.device(chosen), DTYPES[dtype], kind)

    @classmethod
    def cpu(cls, dtype: torch.dtype = torch.float32) -> Runtime:
        """Eager on the CPU: what the executor does when nothing is asked for."""
        return cls(torch.device("cpu"), dtype, "eager")

    @property
    def dtype_name(self) -> str:
        """The dtype as `--dtype` spells it."""
        return next(name for name, d in DTYPES.items() if d == self.dtype)

    def describe(self) -> dict[str, str]:
        """Device (with the GPU's name), dtype and runtime, for result files."""
        device = str(self.device)
        if self.device.type == "cuda":
            device = f"{device} ({torch.cuda.get_device_name(self.device)})"
        return {"device": device, "dtype": self.dtype_name, "runtime": self.kind}

    def sync(self) -> None:
        """Wait until the device has finished the work queued so far."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def clock(self) -> float:
        """Seconds (`time.perf_counter`) after the device has finished its queued work."""
        self.sync()
        return time.perf_counter()


def bucket(n: int) -> int:
    """The padded size of an n-token step: the next power of two ≥ n."""
    return 1 << max(0, n - 1).bit_length()


class StepRunner:
    """Runs a static-shape step function `fn(*tensors) -> tensor(s)` under a runtime.

    One compiled or captured version per input signature (shapes and dtypes), made on first use
    or by `prepare`; `setup_s` sums the seconds spent making them. Under `graph` (and `compile` on
    CUDA) inputs are copied into the captured graph's static buffers and its outputs are cloned,
    so a caller may keep them across calls.
    """

    def __init__(self, fn: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]],
                 runtime: Runtime) -> None:
        self.runtime = runtime
        self.setup_s = 0.0
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, tuple, object]] = {}
        self._seen: set[tuple] = set()
        if runtime.kind == "compile":
            # dynamo keeps its compiled versions per code object: a target and a draft model
            # share `Transformer.step`, each with a version per bucket
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit,
                                                        RECOMPILE_LIMIT)
        if runtime.kind == "compile" and runtime.device.type == "cuda":
            self.fn = torch.compile(fn, fullgraph=True, dynamic=False,
                                    mode=runtime.compile_mode or CUDA_COMPILE_MODE)
        elif runtime.kind == "compile":
            self.fn = torch.compile(fn, fullgraph=True, dynamic=False, options=CPU_OPTIONS)
        else:
            self.fn = fn

    @property
    def captures(self) -> bool:
        """Whether calls replay CUDA graphs."""
        return self.runtime.device.type == "cuda" and self.runtime.kind in ("graph", "compile")

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        key = tuple((tuple(x.shape), x.dtype) for x in inputs)
        if not self.captures:
            if key in self._seen or self.runtime.kind == "eager":
                return self.fn(*inputs)
            start = self.runtime.clock()
            out = self.fn(*inputs)  # the first call of a new signature compiles it
            self.setup_s += self.runtime.clock() - start
            self._seen.add(key)
            return out
        if key not in self._graphs:
            self._graphs[key] = self._capture(inputs)
        graph, static_in, static_out = self._graphs[key]
        for buffer, x in zip(static_in, inputs, strict=True):
            buffer.copy_(x, non_blocking=True)
        graph.replay()
        if isinstance(static_out, torch.Tensor):
            return static_out.clone()
        return tuple(t.clone() for t in static_out)

    def bind(self, *inputs: torch.Tensor) -> Callable[[], object]:
        """A zero-argument call of the step on `inputs` (already on the device) without what each
        `__call__` adds around it, for timing the step alone: the signature is compiled or
        captured first (a first call, counted in `setup_s`); under captures the inputs are
        copied into the graph's static buffers here, once, and the call only replays the graph
        (no copies in, no clone out). Binding other inputs of the same signature later
        overwrites those buffers: the call then runs on them (same shapes, same kernels)."""
        self(*inputs)
        if not self.captures:
            return partial(self.fn, *inputs)
        graph, static_in, _ = self._graphs[tuple((tuple(x.shape), x.dtype) for x in inputs)]
        for buffer, x in zip(static_in, inputs, strict=True):
            buffer.copy_(x)
        return graph.replay

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> tuple:
        start = self.runtime.clock()
        static_in = tuple(x.clone() for x in inputs)
        stream = torch.cuda.Stream(self.runtime.device)
        stream.wait_stream(torch.cuda.current_stream(self.runtime.device))
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_CALLS):
                self.fn(*static_in)
        torch.cuda.current_stream(self.runtime.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self.fn(*static_in)
        self.setup_s += self.runtime.clock() - start
        return graph, static_in, static_out


# ---- intra-op threads ---------------------------------------------------------------------------

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
"""Cores this process may run on: torch's default intra-op thread count."""
SMALL_MODEL_PARAMS = 100_000_000
"""A CPU run whose largest model has fewer parameters takes one thread without probing. Its
operators are too small to split: every split one waits for all its threads, and while another
process holds a core the thread sharing it runs only in time slices (tiny-code, 3.7 M
parameters, on 2 cores with one busy: 9.4 tok/s at torch's default 2 threads, 775 at 1; issue
22). A model this small gains at most ~20% from a second idle core."""
PROBE_ROWS = 8
"""Rows of the probe's step: a small speculation tree's tokens."""
PROBE_LAYERS = 4
"""Matmul, GELU and layer norm blocks in the probe's step."""
PROBE_REPEATS = 5
"""Timed steps per thread count (median), interleaved across the counts."""
PROBE_BUDGET_S = 1.0
"""The probe stops repeating after this many seconds (each count timed at least once)."""
PROBE_MAX_WIDTH = 4096
"""Widest probe step (a 64 MB float32 weight)."""
MORE_THREADS_GAIN = 0.9
"""More threads are taken only when the probe's step runs at least 10% faster with them."""


@dataclass(frozen=True)
class Threads:
    """torch's intra-op thread count for a run, and why it was chosen (`choose_threads`)."""

    count: int
    reason: str

    def to_dict(self) -> dict[str, int | str]:
        """The keys result files record: threads and threads_reason."""
        return {"threads": self.count, "threads_reason": self.reason}


def choose_threads(requested: int | Threads | None, device: torch.device | str = "cpu",
                   params: int = 0, width: int = 0) -> Threads:
    """The intra-op threads of a run whose largest model has `params` parameters and is `width`
    wide (its hidden size), not yet set (`use_threads` sets them):

    - `requested` (`--threads N`) as given;
    - on CUDA, 1: the host launches kernels and handles token-sized tensors, which one thread
      does best and which a busy core cannot stall;
    - on a CPU, 1 for models under `SMALL_MODEL_PARAMS` parameters;
    - else the fastest count on a short probe run now (`probe_threads`), so a core another
      process keeps busy shows in the choice.
    """
    if isinstance(requested, Threads):
        return requested
    if requested is not None:
        if requested < 1:
            raise InputError(f"--threads must be at least 1, got {requested}")
        return Threads(requested, "--threads")
    if torch.device(device).type == "cuda":
        return Threads(1, "default: 1 on cuda (the host only launches kernels)")
    if params < SMALL_MODEL_PARAMS:
        return Threads(1, f"default: 1 for models under {SMALL_MODEL_PARAMS // 10**6}M "
                          "parameters")
    return probe_threads(width)


def probe_threads(width: int, rows: int = PROBE_ROWS,
                  counts: tuple[int, ...] | None = None) -> Threads:
    """The fastest of `counts` threads (default: 1, half the cores and all of them) on a step of
    `PROBE_LAYERS` (rows × width) @ (width × width) matmuls with GELU and layer norm, timed now,
    interleaved, median of up to `PROBE_REPEATS`; more threads only when at least 10% faster.
    torch's thread count is restored afterwards."""
    counts = tuple(sorted(set(counts or (1, max(1, CORES // 2), CORES))))
    if counts == (1,):
        return Threads(1, "probe: one core available")
    width = min(max(width, 64), PROBE_MAX_WIDTH)
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(width, width, generator=generator) / width ** 0.5
    x = torch.randn(rows, width, generator=generator)

    def step() -> torch.Tensor:
        y = x
        for _ in range(PROBE_LAYERS):
            y = torch.nn.functional.layer_norm(torch.nn.functional.gelu(y @ weight), (width,))
        return y

    before = torch.get_num_threads()
    times: dict[int, list[float]] = {c: [] for c in counts}
    try:
        for c in counts:  # warm-up: starts each count's thread pool
            torch.set_num_threads(c)
            step()
        deadline = time.perf_counter() + PROBE_BUDGET_S
        for _ in range(PROBE_REPEATS):
            for c in counts:
                torch.set_num_threads(c)
                start = time.perf_counter()
                step()
                times[c].append(time.perf_counter() - start)
            if time.perf_counter() > deadline:
                break
    finally:
        torch.set_num_threads(before)
    medians = {c: statistics.median(t) for c, t in times.items()}
    best = counts[0]
    for c in counts[1:]:
        if medians[c] < MORE_THREADS_GAIN * medians[best]:
            best = c
    measured = ", ".join(f"{c}: {1e3 * m:.2f} ms" for c, m in medians.items())
    return Threads(best, f"probe: fastest on a {rows}×{width} step ({measured})")


def use_threads(requested: int | Threads | None, *models: object,
                device: torch.device | str | None = None) -> Threads:
    """`choose_threads` for a run's models, set in torch and returned for the result file.

    `models`: loaded executor models (with a `runtime`), `nn.Module`s, or catalogue `ModelSpec`s
    (before loading); None is skipped; the largest sets params and width. `device`: default the
    first loaded model's, else the CPU."""
    sizes = [_size(x) for x in models if x is not None]
    params = max((p for p, _ in sizes), default=0)
    width = max((w for _, w in sizes), default=0)
    if device is None:
        device = next((x.runtime.device for x in models
                       if isinstance(getattr(x, "runtime", None), Runtime)), "cpu")
    chosen = choose_threads(requested, device, params, width)
    torch.set_num_threads(chosen.count)
    return chosen


def _size(model: object) -> tuple[int, int]:
    """(parameters, width: the largest inner dimension of a 2-D weight) of a model or spec."""
    from specscope.models import ModelSpec, param_count

    if isinstance(model, ModelSpec):
        return param_count(model), model.d_model
    module = _module(model)
    if module is None:
        return 0, 0
    weights = list(module.parameters())
    return (sum(p.numel() for p in weights),
            max((min(p.shape) for p in weights if p.dim() == 2), default=0))


def _module(model: object) -> torch.nn.Module | None:
    """The `nn.Module` holding a model's weights: itself, or what its `.model` holds (executor
    models wrap a module; the Hugging Face adapter wraps one more level)."""
    for _ in range(3):
        if isinstance(model, torch.nn.Module):
            return model
        model = getattr(model, "model", None)
    return None
