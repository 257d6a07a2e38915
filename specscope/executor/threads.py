"""How many intra-op threads torch runs a run's models with: one policy for every command.

`use_threads` sets torch's intra-op threads to `--threads` when given, else 1 on CUDA and for
models under `SMALL_MODEL_PARAMS` parameters on a CPU, else the fastest count on a short probe
(`probe_threads`); results record the count and why (`Threads`).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import torch

from specscope.errors import InputError
from specscope.executor.runtime import Runtime

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
