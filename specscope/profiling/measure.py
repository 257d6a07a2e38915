"""What `profile-hw` measures, through the executor's own path: timing helpers (shared with
`benchmarks/gpu_verify.py`), the device's peak rates, verification and prefill steps of models
with random weights, draft-model levels, model-free drafters and the speculative loop's
bookkeeping. `calibrate.py` fits and writes what these return.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from specscope.executor.runtime import Runtime
from specscope.executor.targets import Model, load_model, wrap
from specscope.hw_profiles.loop import LoopCosts
from specscope.models.spec import ModelSpec
from specscope.models.torch import Hybrid, Mamba2, Transformer
from specscope.names import HOST_DRAFTERS
from specscope.tree import Tree

if TYPE_CHECKING:  # the executor's loop imports polars, which the GPU image may lack
    from specscope.executor.loop import PhaseTimes
    from specscope.executor.methods import Method
    from specscope.optimizers.specdecpp_predictor import AcceptancePredictor

DRAFTER_TREE = 15
"""Drafters are timed filling a complete binary tree of this many nodes: three propose calls (over
1, 2 and 4 parents), one per drafted level."""
PROMPTS = "builtin:code-edit"
BOOKKEEPING_TARGET = "tiny-code"
"""The target of the loop runs that measure drafting and bookkeeping (`measure_loop`)."""
LOOP_TOKENS = 32
"""New tokens per loop run."""
SAMPLED_TEMPERATURE = 0.7
"""Temperature of the loop runs that measure sampled verification's host cost."""
WARMUP_FIRST = 20
"""Warm-up calls of a context's first shape (a model's first calls run slower for ~20 calls)."""
GPU_WARMUP = 20
"""Warm-up calls of every timed shape on a GPU (clocks, caches and the allocator settle)."""
CPU_WARMUP = 3
"""Warm-up calls of a timed shape on a CPU after the first."""


# ---- timing helpers (shared with benchmarks/gpu_verify.py) ------------------------------------


def build(spec: ModelSpec, runtime: Runtime, max_len: int) -> Model:
    """Random weights of `spec` (seed 0) wrapped as the executor runs them, with room for
    `max_len` tokens (a static cache of exactly that size: the static step reads all of it)."""
    spec = dataclasses.replace(spec, max_seq_len=max(spec.max_seq_len, max_len))
    cls = {"transformer": Transformer, "ssm": Mamba2, "hybrid": Hybrid}[spec.arch]
    model = cls.random(spec, seed=0, dtype=runtime.dtype, device=runtime.device)
    return wrap(model, spec.name, runtime=runtime, max_len=max_len)


def warmups(runtime: Runtime) -> int:
    """Warm-up calls of a timed shape: `GPU_WARMUP` on a GPU, `CPU_WARMUP` on a CPU."""
    return GPU_WARMUP if runtime.device.type == "cuda" else CPU_WARMUP


def timer(runtime: Runtime, fn: Callable[[], object], repeats: int,
          warmup: int | None = None) -> float:
    """Median milliseconds of `fn` after `warmup` calls (default: `warmups`): CUDA events on a
    GPU, perf_counter on a CPU."""
    for _ in range(warmups(runtime) if warmup is None else warmup):
        fn()
    times = []
    for _ in range(repeats):
        if runtime.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            start_s = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - start_s))
    return statistics.median(times)


def copy_rate(runtime: Runtime) -> float:
    """GB/s of a device-to-device copy of a buffer larger than any cache, read + write bytes
    counted (median of 10)."""
    size = (1 << 28) if runtime.device.type == "cuda" else (1 << 26)
    src = torch.ones(size, dtype=torch.uint8, device=runtime.device)
    dst = torch.empty_like(src)
    ms = timer(runtime, lambda: dst.copy_(src), 10)
    return 2 * size / (ms * 1e-3) / 1e9


def matmul_rate(runtime: Runtime) -> float:
    """TFLOP/s of a large square matrix product in the runtime's dtype (median of 5)."""
    size = 8192 if runtime.device.type == "cuda" else 2048
    a = torch.randn(size, size, dtype=runtime.dtype, device=runtime.device)
    b = torch.randn(size, size, dtype=runtime.dtype, device=runtime.device)
    ms = timer(runtime, lambda: a @ b, 5, warmup=2)
    return 2 * size**3 / (ms * 1e-3) / 1e12


def binary_tree(n: int) -> Tree:
    """A complete binary tree of n nodes in BFS order (parent of i: (i − 1) // 2)."""
    return Tree.from_parents([-1] + [(i - 1) // 2 for i in range(1, n)])


def provenance(runtime: Runtime) -> dict[str, str]:
    """Device (GPU name, or CPU model and threads), driver, torch version and today's date."""
    driver = ""
    if runtime.device.type == "cuda":
        device = torch.cuda.get_device_name(runtime.device)
        smi = shutil.which("nvidia-smi")
        if smi:
            driver = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, check=False).stdout
            driver = driver.strip().splitlines()[0] if driver.strip() else ""
        driver = f"{driver} (CUDA {torch.version.cuda})".strip()
    else:
        cpuinfo = Path("/proc/cpuinfo")
        lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
        cpu = next((line.split(":", 1)[1].strip() for line in lines
                    if line.startswith("model name")), "cpu")
        device = f"{cpu}, {torch.get_num_threads()} thread(s)"
    return {"device": device, "driver": driver, "torch": torch.__version__,
            "date": datetime.date.today().isoformat()}


def release() -> None:
    """Drop compiled versions, captured graphs and cached device memory of the last group."""
    torch.compiler.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()



# ---- measurements ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One measured forward of `batch` sequences (1: the single-sequence executor), each
    `new_tokens` after `context` committed tokens (0: a prompt)."""

    model: str
    runtime: str
    context: int
    new_tokens: int
    time_s: float
    batch: int = 1


def measure_steps(spec: ModelSpec, runtime: Runtime, contexts: Sequence[int], ns: Sequence[int],
                  repeats: int) -> list[Point]:
    """Median seconds of verifying binary trees of each n after each context, through
    `CachedModel.verify`, the repeats interleaved over n. Static runtimes get a model per context
    (their step reads the whole static cache, so it is sized to the context); eager one model
    for all."""
    points: list[Point] = []
    wrapped: Model | None = None
    for context in contexts:
        if wrapped is None or runtime.kind != "eager":
            wrapped = None  # freed before the next one is built
            release()
            room = max(contexts) if runtime.kind == "eager" else context
            wrapped = build(spec, runtime, room + max(ns) + 1)
        generator = torch.Generator().manual_seed(0)
        wrapped.prefill(torch.randint(0, spec.vocab_size, (context + 1,), generator=generator),
                        context + max(ns) + 1)
        calls = {n: partial(wrapped.verify, torch.arange(n) % spec.vocab_size, binary_tree(n))
                 for n in ns}
        for i, call in enumerate(calls.values()):
            for _ in range(WARMUP_FIRST if i == 0 else warmups(runtime)):
                call()
        times: dict[int, list[float]] = {n: [] for n in ns}
        for _ in range(repeats):  # interleaved: a burst of load from elsewhere hits every n
            for n, call in calls.items():
                times[n].append(timer(runtime, call, 1, warmup=0))
        points += [Point(spec.name, runtime.kind, context, n, statistics.median(ms) * 1e-3)
                   for n, ms in times.items()]
    return points


def measure_prefill(spec: ModelSpec, runtime: Runtime, lengths: Sequence[int], repeats: int
                    ) -> list[Point]:
    """Prompts of each length (context 0) through `CachedModel.prefill` under eager (what every
    runtime's wrapper runs for a prompt)."""
    eager = dataclasses.replace(runtime, kind="eager")
    wrapped = build(spec, eager, max(lengths) + 1)
    points = []
    for tokens in lengths:
        prompt = torch.arange(tokens + 1) % spec.vocab_size
        ms = timer(eager, lambda p=prompt, t=tokens: wrapped.prefill(p, t + 1), repeats)
        points.append(Point(spec.name, "eager", 0, tokens, ms * 1e-3))
    return points


def prompt_tokens() -> list[int]:
    """The first code-edit prompt in the zoo tokenizer's ids: real text for drafters to match."""
    from specscope.models.zoo import load_zoo_tokenizer
    from specscope.models.zoo.prompts import load_prompts

    return list(load_zoo_tokenizer().encode(load_prompts(PROMPTS)[0]))


class _Timed:
    """Wraps a model's `verify`, recording each call's size and seconds (monkey-patched on the
    instance for one run, then removed)."""

    def __init__(self, model: Model) -> None:
        self.model, self.sizes, self.seconds = model, [], []

    def __enter__(self) -> _Timed:
        self.sizes, self.seconds = [], []
        forward = self.model.verify

        def timed(tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
            start = time.perf_counter()
            out = forward(tokens, tree)
            self.seconds.append(time.perf_counter() - start)
            self.sizes.append(tree.size)
            return out

        self.model.verify = timed
        return self

    def __exit__(self, *exc: object) -> None:
        del self.model.verify  # the instance attribute shadowed the method

    def by_size(self) -> dict[int, float]:
        """Median seconds of the recorded calls, per tree size."""
        out: dict[int, list[float]] = {}
        for n, s in zip(self.sizes, self.seconds, strict=True):
            out.setdefault(n, []).append(s)
        return {n: statistics.median(v) for n, v in out.items()}


@dataclass(frozen=True)
class _Run:
    """One timed `decode_speculative` run: its phases, steps, and per propose call the nodes
    proposed for; the target's and the draft's forwards."""

    times: PhaseTimes
    steps: int
    widths: list[int]
    verified: _Timed
    drafted: _Timed | None

    def host_per_call(self) -> float:
        """The drafting phase beyond the draft's forwards, per propose call."""
        forwards = sum(self.drafted.seconds) if self.drafted else 0.0
        return (self.times.draft_s - forwards) / len(self.widths)

    def mean_width(self) -> float:
        """Nodes proposed for per call."""
        return statistics.fmean(self.widths)


DYSPEC_BUDGET = 32
"""Tree size of the DySpec runs that price its builder's per-node work."""


def measure_loop(draft: ModelSpec, runtime: Runtime, prompt: list[int], levels: int,
                 runs: int = 3) -> LoopCosts:
    """The loop's host costs measured inside `decode_speculative` (the zoo's tiny-code target,
    eager), where they are paid: after every target verification the drafter's code and data
    are cold, so timing a drafter alone under-prices it (≈ 3× for n-gram on a 2-core CPU).

    Model-free drafters draft chains of `levels`, greedy; their drafting phase
    (`PhaseTimes.draft_s`) is divided by their propose calls (wider levels cost more per call:
    a binary tree's calls measured ≈ 2× a chain's for n-gram, which this leaves out). The
    verification phase less the target's forwards, timed in the same run, per step, greedy and
    (n-gram, the deterministic rule) at `SAMPLED_TEMPERATURE`. The draft model (`draft`, random
    weights, under `runtime`) drafts, in each of `runs` rounds, a chain of `levels`, a complete
    binary tree of `DRAFTER_TREE` nodes, DySpec's tree of `DYSPEC_BUDGET` and SpecDec++'s
    chain of `levels` (a predictor that never stops it early: its check runs at every level);
    per propose call, the drafting phase less the forwards timed in the same run is its host
    work. The chain's is the level's; the tree's and DySpec's excess over it, per further node
    proposed for, their per-node work; SpecDec++'s excess its stop check. Each is the median
    over rounds of the figures paired within a round. Subtracting what ran in the same run,
    not a model's price, keeps a shared machine's drift out of the difference. For the same
    reason the forwards' slowdown inside the loop is paired: right after each greedy run the
    same forwards are timed alone, and the run's figure is the median over sizes of in-loop
    less alone; the slowdown is the median over runs. The target's forward is slower in every
    speculative loop, model-free ones included (≈ 0.15-0.4 ms of a 3 ms step on a 2-core CPU:
    the drafter's and the loop's Python between forwards cools the caches a tight loop of
    forwards keeps warm); the draft's where it alternates with the target's (the two evict
    each other's weights). The model-free figures are the fastest of
    `runs`; bookkeeping is the median per step."""
    target = load_model(BOOKKEEPING_TARGET, runtime=dataclasses.replace(runtime, kind="eager"))[0]
    # the draft proposes the target's tokens: its shape, the target's vocabulary (the GPU
    # grid's llama-68m has 32,000 tokens, tiny-code far fewer)
    draft = dataclasses.replace(draft, vocab_size=target.vocab_size)
    model = build(draft, runtime, len(prompt) + 2 * LOOP_TOKENS + DYSPEC_BUDGET + 1)
    context = prompt + [0] * (LOOP_TOKENS // 2)
    methods = _draft_methods(levels)
    drafter_s: dict[str, float] = {}
    verify_s, sampled_s, bookkeeping, cold_verify = [], [], [], []
    runs_of = [(kind, 0.0) for kind in HOST_DRAFTERS] + [("ngram", SAMPLED_TEMPERATURE)]
    for kind, temperature in runs_of:
        for _ in range(runs):
            run = _loop_run(target, kind, None, methods["chain"], prompt, temperature)
            host = (run.times.verify_s - sum(run.verified.seconds)) / run.steps
            if temperature > 0:
                sampled_s.append(host)
                continue
            bookkeeping.append(run.times.bookkeeping_s / run.steps)
            verify_s.append(host)
            drafter_s[kind] = min(drafter_s.get(kind, float("inf")), run.host_per_call())
            cold_verify.append(_slowdown(target, run.verified.by_size(), context, runtime))
    rounds: dict[str, list[float]] = {k: [] for k in ("level", "node", "dyspec", "stop", "draft")}
    for _ in range(runs):
        done = {name: _loop_run(target, "draft", model, method, prompt, 0.0)
                for name, method in methods.items()}
        chain = done["chain"]
        level = chain.host_per_call()
        rounds["level"].append(level)
        for name, key in (("tree", "node"), ("dyspec", "dyspec")):
            extra = done[name].mean_width() - 1
            rounds[key].append((done[name].host_per_call() - level) / extra if extra else 0.0)
        rounds["stop"].append(done["specdecpp"].host_per_call() - level)
        rounds["draft"].append(_slowdown(model, chain.drafted.by_size(), context, runtime))
        cold_verify.append(_slowdown(target, chain.verified.by_size(), context, runtime))
        bookkeeping.append(chain.times.bookkeeping_s / chain.steps)
        verify_s.append((chain.times.verify_s - sum(chain.verified.seconds)) / chain.steps)
    median = {k: max(0.0, statistics.median(v)) for k, v in rounds.items()}
    return LoopCosts(drafter=drafter_s, level=median["level"], verify=max(0.0, min(verify_s)),
                     sampled_verify=max(0.0, min(sampled_s)),
                     step=statistics.median(bookkeeping), draft_cold=median["draft"],
                     verify_cold=max(0.0, statistics.median(cold_verify)), node=median["node"],
                     dyspec_node=median["dyspec"], stop_rule=median["stop"])


def _draft_methods(levels: int) -> dict[str, Method]:
    """The draft model's shapes of `measure_loop`, by name."""
    from specscope.executor.methods import dyspec_method, specdecpp_method, static_method

    return {
        "chain": static_method("chain", Tree.chain(levels), "profile-hw"),
        "tree": static_method("tree", binary_tree(DRAFTER_TREE), "profile-hw"),
        "dyspec": dyspec_method(DYSPEC_BUDGET),
        "specdecpp": specdecpp_method(_never_stopping(), levels + 1, "profile-hw"),
    }


def _never_stopping() -> AcceptancePredictor:
    """A SpecDec++ predictor whose estimate is ≈ 1 for every token: its policy drafts to its
    cap, checking the stop rule after every token as a fitted one does (the cost is the same
    whatever the coefficients)."""
    import numpy as np
    import polars as pl

    from specscope.optimizers.specdecpp_predictor import FEATURES, AcceptancePredictor

    width = len(FEATURES)
    return AcceptancePredictor("draft", np.r_[np.zeros(width), 30.0], np.zeros(width),
                               np.ones(width), 0, 0, 1.0, 0.0, 0.0, pl.DataFrame())


def _loop_run(target: Model, kind: str, model: Model | None, method: Method,
              prompt: list[int], temperature: float) -> _Run:
    """Decode `prompt` once with a fresh drafter of `kind` and `method`, timed."""
    from specscope.executor.drafters import make_drafter
    from specscope.executor.loop import PhaseTimes, decode_speculative

    drafter = make_drafter(kind, target.vocab_size, model, None, temperature)
    widths: list[int] = []
    propose = drafter.propose
    drafter.propose = (lambda nodes, k, f=propose: (widths.append(len(nodes)), f(nodes, k))[1])
    times = PhaseTimes()
    rule = "greedy" if temperature == 0 else "deterministic"
    drafted = _Timed(model) if model is not None else None
    with _Timed(target) as verified, drafted or contextlib.nullcontext():
        steps = len(decode_speculative(target, drafter, method, prompt, LOOP_TOKENS, rule,
                                       temperature, times=times).tree_sizes)
    return _Run(times, steps, widths, verified, drafted)


def _slowdown(model: Model, in_loop: dict[int, float], context: list[int], runtime: Runtime
              ) -> float:
    """Median over sizes of `in_loop[n]` (seconds) less the same chain forward of `model`
    repeated alone after `context`."""
    extra = []
    for n, seconds in in_loop.items():
        model.prefill(torch.tensor(context), len(context) + n + 1)
        tokens, chain = torch.arange(n), Tree.chain(n - 1)
        alone = timer(runtime, lambda t=tokens, c=chain: model.verify(t, c), 7) * 1e-3
        extra.append(seconds - alone)
    return statistics.median(extra)
