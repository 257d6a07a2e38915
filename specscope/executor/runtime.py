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
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

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
COMPILE_NOTICE = {
    "cpu": "about 8 s each for tiny-code, 14 s for tiny-ssm on a 2-core CPU, less once torch's "
           "compile cache holds them",
    "cuda": "about 70 s each for an 8B model on an H100 under max-autotune-no-cudagraphs",
}
"""How long compiling one step size takes, said on stderr before the first compile of a process:
`generate --runtime compile` on the 2-core EPYC with an empty inductor cache (tiny-code chain at
budget 4: 33 s for 4 steps, 7.5 s cached; tiny-ssm at budget 8: 70 s for 5, 34.5 s cached) and
`CUDA_COMPILE_MODE`'s 68-79 s per llama-3.1-8b bucket on the H100."""


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

    compile_announced: ClassVar[bool] = False
    """Whether this process has said on stderr that it is compiling (once per process)."""

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
            self._announce_compile()
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

    def _announce_compile(self) -> None:
        """One stderr line before this process's first compile, which can take minutes."""
        if self.runtime.kind != "compile" or StepRunner.compile_announced:
            return
        StepRunner.compile_announced = True
        print(f"compiling the steps with torch.compile: each new step size compiles once on first "
              f"use ({COMPILE_NOTICE[self.runtime.device.type]}), timed apart from decoding...",
              file=sys.stderr, flush=True)

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> tuple:
        self._announce_compile()
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
