"""Verification step time against its byte floor, per model shape × context × tree size × runtime.

Run: python benchmarks/gpu_verify.py [--quick] [--models a,b] [--contexts 256,2048]
     [--ns 1,2,4] [--runtimes eager,graph,compile] [--no-e2e]

On a GPU: the catalogue's llama-68m, llama-3.2-1b, llama-3.1-8b, mamba2-2.7b and bamba-9b with
random bf16 weights, contexts 256, 2048 and 8192, binary trees of n = 1, 2, 4, …, 256 nodes (64 for
state-space targets), runtimes eager, graph and compile. On a CPU ("runs on CPU too"): the zoo's
shapes and a 16-fold narrower llama-3.2-1b, float32, contexts 256 and 448, n up to 32, eager and
compile. Every step is the executor's own path (`CachedModel` / `SSMModel` / `HybridModel`
`verify` after a prefill of `context` random tokens), timed with CUDA events after warm-up on a
GPU (`time.perf_counter` on a CPU), median of repeats.

byte floor = (weight bytes + K/V or SSM-state bytes of the context) / the copy rate measured in
the same run (a device-to-device `copy_` of a large buffer, read + write bytes over time): what
one pass must read at least. The SSM's `commit` (the state after the accepted path from the
verification's record) is timed beside its verification; prefill of long prompts is timed for the
Transformers; and, when polars is importable (not on the GPU image), `generate` on the zoo
(float32, 8 code-edit prompts × 64 tokens) gives end-to-end speedups per runtime.

Writes benchmarks/results/gpu_verify-<device>.json as it goes (provenance, copy_GBps, steps,
prefill, commit, e2e) and prints a table per section.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import torch

from specscope.atomic import write_text_atomic
from specscope.executor.runtime import Runtime
from specscope.executor.targets import CachedModel, HybridModel, Model, SSMModel
from specscope.models import get_model
from specscope.models.spec import ModelSpec
from specscope.models.torch import Hybrid, Mamba2, Transformer
from specscope.models.zoo import zoo_specs
from specscope.tree import Tree

GPU_MODELS = ("llama-68m", "llama-3.2-1b", "llama-3.1-8b", "mamba2-2.7b", "bamba-9b")
CPU_MODELS = ("tiny-code-draft", "tiny-code", "llama-3.2-1b/16", "tiny-ssm", "tiny-hybrid")
E2E = (("tiny-code", "ngram"), ("tiny-code", "draft"), ("tiny-ssm", "ngram"))


def spec_of(name: str) -> ModelSpec:
    """A catalogue or zoo spec; "<name>/k" is the catalogue model k-fold narrower (width, heads,
    MLP and vocabulary; a quarter of its layers), for CPU runs of a family's shape."""
    if "/" not in name:
        zoo = zoo_specs()
        return zoo[name] if name in zoo else get_model(name)
    base, k = name.split("/")
    s, k = get_model(base), int(k)
    return dataclasses.replace(s, name=name, n_layers=max(2, s.n_layers // 4),
                               d_model=s.d_model // k, n_heads=max(1, s.n_heads // 4),
                               n_kv_heads=max(1, s.n_kv_heads // 4), d_ff=s.d_ff // k,
                               vocab_size=s.vocab_size // k)


def build(spec: ModelSpec, runtime: Runtime, max_len: int) -> Model:
    """Random weights of `spec` wrapped as the executor runs them, with room for `max_len`."""
    spec = dataclasses.replace(spec, max_seq_len=max(spec.max_seq_len, max_len))
    cls = {"transformer": Transformer, "ssm": Mamba2, "hybrid": Hybrid}[spec.arch]
    model = cls.random(spec, seed=0, dtype=runtime.dtype, device=runtime.device)
    if spec.arch == "transformer":
        return CachedModel(model, spec.name, spec.vocab_size, runtime, max_len=max_len)
    if spec.arch == "ssm":
        return SSMModel(model, spec.name, runtime=runtime)
    return HybridModel(model, spec.name, runtime)


def timer(runtime: Runtime, fn: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    """Median milliseconds of `fn` after warm-up: CUDA events on a GPU, perf_counter on a CPU."""
    for _ in range(warmup):
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
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def copy_rate(runtime: Runtime) -> float:
    """GB/s of a device-to-device copy, read + write bytes counted (median of 10)."""
    size = (1 << 28) if runtime.device.type == "cuda" else (1 << 26)
    src = torch.empty(size, dtype=torch.uint8, device=runtime.device)
    dst = torch.empty_like(src)
    ms = timer(runtime, lambda: dst.copy_(src), 10)
    return 2 * size / (ms * 1e-3) / 1e9


def read_bytes(wrapped: Model, context: int) -> int:
    """Bytes one verification must read at least: weights, and the context's K/V or SSM state."""
    model, spec = wrapped.model, wrapped.model.spec
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    size = torch.finfo(wrapped.runtime.dtype).bits // 8
    kinds = spec.layer_kinds
    kv = kinds.count("attn") * 2 * spec.n_kv_heads * spec.head_dim * context * size
    state = 0
    if "ssm" in kinds:
        conv_dim = spec.d_inner + 2 * spec.ssm_groups * spec.d_state
        per_layer = conv_dim * (spec.conv_kernel - 1) * size + spec.d_inner * spec.d_state * 4
        state = kinds.count("ssm") * per_layer
    return weights + kv + state


def binary_tree(n: int) -> Tree:
    """A complete binary tree of n nodes in BFS order."""
    return Tree.from_parents([-1] + [(i - 1) // 2 for i in range(1, n)])


class Results:
    """The JSON file, rewritten atomically after every measured group."""

    def __init__(self, path: Path, runtime: Runtime, copy_gbps: float) -> None:
        self.path = path
        driver = ""
        if runtime.device.type == "cuda":
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                     "--format=csv,noheader"], capture_output=True,
                                    text=True, check=False).stdout.strip()
        cpu = next((line.split(":", 1)[1].strip() for line in
                    Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "cpu")
        device = (torch.cuda.get_device_name(runtime.device) if runtime.device.type == "cuda"
                  else f"{cpu}, {torch.get_num_threads()} thread(s)")
        self.data = {"provenance": {"device": device, "driver": driver,
                                    "torch": torch.__version__,
                                    "date": datetime.date.today().isoformat()},
                     "copy_GBps": copy_gbps, "steps": [], "prefill": [], "commit": [],
                     "e2e": []}

    def add(self, section: str, row: dict) -> None:
        self.data[section].append(row)
        write_text_atomic(self.path, json.dumps(self.data, indent=1) + "\n")


def measure_steps(args: argparse.Namespace, base: Runtime, out: Results) -> None:
    """Step ms and floor per model × context × runtime × n; SSM commits; prefill."""
    gbps = out.data["copy_GBps"]
    for name in args.models.split(","):
        spec = spec_of(name)
        ns = [n for n in args.ns if spec.arch == "transformer" or n <= args.max_ssm_n]
        for context in args.contexts:
            for kind in args.runtimes.split(","):
                runtime = dataclasses.replace(base, kind=kind)
                if spec.arch == "hybrid" and kind != "eager":
                    print(f"{name}: hybrid targets run eager only; {kind} skipped")
                    continue
                wrapped = build(spec, runtime, context + max(ns) + 1)
                wrapped.prepare(max(ns))
                generator = torch.Generator().manual_seed(0)
                prompt = torch.randint(0, spec.vocab_size, (context + 1,), generator=generator)
                wrapped.prefill(prompt, context + max(ns) + 1)
                floor = read_bytes(wrapped, context) / (gbps * 1e9) * 1e3
                for n in ns:
                    tree, tokens = binary_tree(n), torch.arange(n) % spec.vocab_size
                    ms = timer(runtime, lambda t=tree, x=tokens, w=wrapped: w.verify(x, t),
                               args.repeats)
                    out.add("steps", {"model": name, "context": context, "n": n,
                                      "runtime": kind, "ms": ms, "floor_ms": floor})
                    first = kind == args.runtimes.split(",")[0] and context == args.contexts[0]
                    if isinstance(wrapped, SSMModel | HybridModel) and first:
                        out.add("commit", commit_row(wrapped, tree, tokens, name, ms, runtime,
                                                     args.repeats))
                del wrapped
        if spec.arch == "transformer":
            for tokens in args.prefill:
                wrapped = build(spec, base, tokens + 2)
                prompt = torch.arange(tokens + 1) % spec.vocab_size
                ms = timer(base, lambda w=wrapped, p=prompt, t=tokens: w.prefill(p, t + 2),
                           max(3, args.repeats // 5), warmup=1)
                out.add("prefill", {"model": name, "tokens": tokens, "runtime": "eager",
                                    "ms": ms})


def commit_row(wrapped: SSMModel | HybridModel, tree: Tree, tokens: torch.Tensor, name: str,
               verify_ms: float, runtime: Runtime, repeats: int) -> dict:
    """Ms of committing the deepest root-to-leaf path after a verification of `tree`."""
    path = tree.path(tree.size - 1)
    state, committed = wrapped.state, wrapped.committed
    wrapped.verify(tokens, tree)

    def commit() -> None:
        wrapped.state, wrapped.committed = state, committed
        wrapped.commit(tokens, path)

    ms = timer(runtime, commit, repeats)
    wrapped.state, wrapped.committed = state, committed
    return {"model": name, "n": tree.size, "commit_ms": ms, "verify_ms": verify_ms}


def measure_e2e(args: argparse.Namespace, base: Runtime, out: Results) -> None:
    """`generate` on the zoo per drafter and runtime (float32), when polars is importable."""
    try:
        from specscope.executor.generate import generate
    except ImportError as exc:
        print(f"end-to-end runs skipped: {exc}")
        return
    for model, drafter in E2E:
        for kind in args.runtimes.split(","):
            runtime = Runtime(base.device, torch.float32, kind)
            r = generate(model, drafter, "builtin:code-edit", n=args.e2e_prompts, max_new=64,
                         algo="sequoia", budget=8, verify_lossless=True, runtime=runtime)
            out.add("e2e", {"model": model, "drafter": drafter, "tree": "sequoia n=8",
                            "runtime": kind, "dtype": "float32", "speedup": r.speedup,
                            "lossless": r.lossless})


def print_tables(data: dict) -> None:
    """Each section as a plain table."""
    print(f"\ncopy rate {data['copy_GBps']:.1f} GB/s ({data['provenance']['device']})")
    print(f"{'model':18} {'context':>7} {'runtime':>8} {'n':>4} {'ms':>9} {'floor ms':>9} "
          f"{'×floor':>7} {'t(n)/t(1)':>9}")
    first = {}
    for s in data["steps"]:
        key = (s["model"], s["context"], s["runtime"])
        first.setdefault(key, s["ms"])
        print(f"{s['model']:18} {s['context']:7d} {s['runtime']:>8} {s['n']:4d} {s['ms']:9.3f} "
              f"{s['floor_ms']:9.3f} {s['ms'] / s['floor_ms']:7.1f} {s['ms'] / first[key]:9.2f}")
    for p in data["prefill"]:
        print(f"prefill {p['model']:18} {p['tokens']:6d} tokens {p['ms']:9.1f} ms")
    for c in data["commit"]:
        print(f"commit {c['model']:18} n={c['n']:3d} commit {c['commit_ms']:.3f} ms, verify "
              f"{c['verify_ms']:.3f} ms ({c['commit_ms'] / c['verify_ms']:.1%})")
    for e in data["e2e"]:
        print(f"e2e {e['model']:10} {e['drafter']:6} {e['tree']:12} {e['runtime']:8} "
              f"{e['speedup']:.2f}× lossless={e['lossless']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, else float32")
    parser.add_argument("--models", default=None)
    parser.add_argument("--contexts", default=None)
    parser.add_argument("--ns", default=None)
    parser.add_argument("--runtimes", default=None)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--e2e-prompts", type=int, default=8)
    parser.add_argument("--no-e2e", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a CI-sized run")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cuda = args.device != "cpu" and torch.cuda.is_available()
    base = Runtime.resolve(args.device, args.dtype or ("bfloat16" if cuda else "float32"),
                           "eager")
    args.models = args.models or ",".join(GPU_MODELS if cuda else CPU_MODELS)
    args.contexts = [int(c) for c in (args.contexts or ("256,2048,8192" if cuda else "256,448"))
                     .split(",")]
    args.ns = [int(n) for n in (args.ns or ("1,2,4,8,16,32,64,128,256" if cuda
                                            else "1,2,4,8,16,32")).split(",")]
    args.max_ssm_n = 64
    args.runtimes = args.runtimes or ("eager,graph,compile" if cuda else "eager,compile")
    args.prefill = [2048, 8192] if cuda else [256]
    if args.quick:
        args.models, args.contexts, args.ns = "tiny-code,tiny-ssm", args.contexts[:1], [1, 4]
        args.repeats, args.e2e_prompts, args.prefill = 5, 2, args.prefill[:1]
    slug = re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name().lower()).strip("-") if cuda \
        else "cpu"
    slug = next((g for g in ("h100", "h200", "a100") if g in slug), slug)
    out = Results(Path(args.output or f"benchmarks/results/gpu_verify-{slug}.json"), base,
                  copy_rate(base))
    measure_steps(args, base, out)
    if not args.no_e2e:
        measure_e2e(args, base, out)
    print_tables(out.data)
    print(f"wrote {out.path}")


if __name__ == "__main__":
    main()
