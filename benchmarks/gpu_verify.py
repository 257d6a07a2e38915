"""Verification step time against its byte floor, per model shape × context × tree size × runtime.

Run: .venv/bin/python benchmarks/gpu_verify.py [--quick] [--device auto] [--models a,b]
     [--contexts 256,2048] [--ns 1,2,4] [--runtimes eager,graph,compile] [--prefill 2048,8192]
     [--compile-mode default] [--compile-context 256] [--compile-ns 1,2] [--repeats 20]
     [--warmup 20] [--no-e2e | --e2e-only] [--e2e tiny-code:draft,...] [--merge] [-o FILE]
(from a plain checkout: PYTHONPATH=$PWD python3 benchmarks/gpu_verify.py …; the GPU runbook,
benchmarks/gpu_run.sh, runs it stage by stage).

On a GPU: the catalogue's llama-68m, llama-3.2-1b, llama-3.1-8b, mamba2-2.7b and bamba-9b with
random bf16 weights, contexts 256, 2048 and 8192, binary trees of n = 1, 2, 4, …, 256 nodes (64 for
state-space targets), runtimes eager, graph and compile. On a CPU: the zoo's shapes and
`llama-3.2-1b/4` (the catalogue model 4-fold narrower and shallower, 32 M parameters), float32,
contexts 256 and 448, n up to 32, eager and compile. Every step is the executor's own path: the
`CachedModel` / `SSMModel` / `HybridModel` wrapper's `verify` after a prefill of `context` random
tokens (each padded bucket compiled or captured on its first, warm-up call), timed with CUDA
events on a GPU and `time.perf_counter` on a CPU, median of --repeats after --warmup calls (20 on
a GPU, 3 on a CPU). A step's inputs (tokens, positions, slots, masks, state) are built on the
device before the timed window (`Model.verify_call`): the timed call is the forward alone (under
graph and compile the replay of the captured graph, no input copies and no clone of its logits).

`compile` is measured at one context per model (--compile-context, default the first) and at
--compile-ns (default 1,8,64 on a GPU, --ns on a CPU): every bucket compiles once per context, so
a compiled grid is kept to the one context its items need. --compile-mode picks torch.compile's
mode on a GPU (default `default`; `max-autotune-no-cudagraphs`, the executor's own, searches
Triton matmul templates for 68-79 s per llama-3.1-8b bucket on an H100). Compile and capture
seconds per group go in `groups`.

byte floor = (weight bytes + the context's K/V or SSM-state bytes) / the copy rate measured in
the same run (a device-to-device `copy_` of a large buffer, read + write bytes over time): what
one pass must read at least. Beside the steps: the state-space targets' `commit` (the state
after a root-to-leaf path, taken from the verification's record) at the first context, under the
last runtime listed that the model runs under; prefill of long prompts for the Transformers
(eager: the wrappers prefill eagerly under every runtime); and, where polars and PuLP are
importable (the GPU runbook carries a polars wheel), `generate` on the zoo per --e2e pair
(model:drafter; float32, 8 code-edit prompts × 64 new tokens, a Sequoia tree of 8, checked
lossless) for end-to-end speedups per runtime.

Writes -o FILE (default benchmarks/results/gpu_verify-<device>.json) after every measured row
(provenance, copy_GBps, compile_mode, steps, prefill, commit, e2e, groups); --merge keeps the
rows of an earlier run on the same
device and torch (re-measured rows replace theirs; its floors are rescaled to this run's copy
rate), so a GPU sweep can be split over several commands. Prints a table per section.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from specscope.atomic import write_text_atomic
from specscope.errors import InputError
from specscope.executor.runtime import COMPILE_MODES, Runtime
from specscope.executor.targets import HybridModel, Model, SSMModel
from specscope.models import get_model
from specscope.models.spec import ModelSpec
from specscope.models.torch.ssm import state_dtype
from specscope.models.zoo import zoo_specs
from specscope.names import RUNTIMES
from specscope.profiling.measure import (
    binary_tree,
    build,
    copy_rate,
    provenance,
    release,
    timer,
    warmups,
)
from specscope.tree import Tree

GPU = {"models": "llama-68m,llama-3.2-1b,llama-3.1-8b,mamba2-2.7b,bamba-9b",
       "contexts": "256,2048,8192", "ns": "1,2,4,8,16,32,64,128,256",
       "runtimes": "eager,graph,compile", "prefill": "2048,8192", "compile_ns": "1,8,64"}
CPU = {"models": "tiny-code-draft,tiny-code,llama-3.2-1b/4,tiny-ssm,tiny-hybrid",
       "contexts": "256,448", "ns": "1,2,4,8,16,32", "runtimes": "eager,compile",
       "prefill": "256,1024"}
QUICK = {"models": "tiny-code,tiny-ssm", "contexts": "256", "ns": "1,4", "prefill": "256",
         "repeats": 5, "e2e_prompts": 2}
"""--quick: a CI-sized run (options given explicitly still win)."""
MAX_SSM_N = 64
"""Largest tree verified on state-space and hybrid targets."""
E2E = "tiny-code:draft,tiny-code:ngram,tiny-code:suffix,tiny-code:recycle,tiny-ssm:ngram"
"""--e2e default: zoo model:drafter pairs decoded end to end."""
E2E_TREE = ("sequoia", 8)
E2E_PROMPTS = "builtin:code-edit"
E2E_NEEDS = ("polars",)
"""What `specscope.executor.generate` imports beyond the GPU image (the runbook carries it)."""
COMPILE_MODE = "default"
"""--compile-mode default: torch.compile's mode for compiled steps on a GPU."""
KEYS = {"steps": ("model", "context", "n", "runtime"), "prefill": ("model", "tokens", "runtime"),
        "commit": ("model", "n"), "e2e": ("model", "drafter", "tree", "runtime", "dtype"),
        "groups": ("model", "context", "runtime")}
"""The fields that identify a row of each section: a re-measured row replaces its namesake."""
console = Console(width=150)


def spec_of(name: str) -> ModelSpec:
    """A catalogue or zoo spec. "<transformer>/k" is that catalogue Transformer k-fold smaller in
    width, heads, MLP, vocabulary and layers, with its head size kept: the family's shape at a
    size a CPU runs."""
    if "/" not in name:
        zoo = zoo_specs()
        return zoo[name] if name in zoo else get_model(name)
    base, _, factor = name.partition("/")
    s = get_model(base)
    if s.arch != "transformer" or not factor.isdigit() or int(factor) < 1:
        raise InputError(f"{name}: '<model>/k' needs a catalogue Transformer and an integer k ≥ 1")
    k = int(factor)
    return dataclasses.replace(
        s, name=name, n_layers=max(2, s.n_layers // k), d_model=s.d_model // k,
        n_heads=max(1, s.n_heads // k), n_kv_heads=max(1, s.n_kv_heads // k),
        d_ff=s.d_ff // k, vocab_size=s.vocab_size // k)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of a model's parameters (tied ones once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def context_bytes(spec: ModelSpec, dtype: torch.dtype, context: int) -> int:
    """Bytes a step reads for the committed prefix: keys and values of `context` tokens in every
    attention layer, and the recurrent state (conv inputs in `dtype`, SSM state in its
    `state_dtype`) of every SSM layer."""
    size = torch.finfo(dtype).bits // 8
    kinds = spec.layer_kinds
    kv = kinds.count("attn") * 2 * spec.n_kv_heads * spec.head_dim * context * size
    conv_dim = spec.d_inner + 2 * spec.ssm_groups * spec.d_state
    ssm_size = torch.finfo(state_dtype(dtype)).bits // 8
    state = (conv_dim * (spec.conv_kernel - 1) * size
             + spec.ssm_heads * spec.ssm_head_dim * spec.d_state * ssm_size)
    return kv + kinds.count("ssm") * state


def floor_ms(read: int, copy_gbps: float) -> float:
    """Milliseconds to read `read` bytes once at `copy_gbps` (GB/s)."""
    return read / (copy_gbps * 1e9) * 1e3


def device_slug(runtime: Runtime) -> str:
    """The result file's device name: "cpu", or the GPU's model ("h100", "h200", …) or its
    name as a slug."""
    if runtime.device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(runtime.device).lower()
    known = re.search(r"\b(gh200|b200|[ahl]\d{2,3})\b", name)
    return known.group(1) if known else re.sub(r"[^a-z0-9]+", "-", name).strip("-")


class Results:
    """The result file's content, rewritten atomically after every row."""

    def __init__(self, path: Path, prov: dict[str, str], copy_gbps: float,
                 merge: bool = False, compile_mode: str = COMPILE_MODE) -> None:
        """With `merge`, start from the rows of the file at `path` (same device and torch),
        their floors rescaled to `copy_gbps`."""
        self.path = path
        self.data: dict = {"provenance": prov, "copy_GBps": copy_gbps,
                           "compile_mode": compile_mode, **{section: [] for section in KEYS}}
        if merge and path.exists():
            old = json.loads(path.read_text())
            was = old["provenance"]
            if (was["device"], was["torch"]) != (prov["device"], prov["torch"]):
                raise InputError(f"{path}: measured on {was['device']} with torch {was['torch']}"
                                 f", not this run's {prov['device']} with torch "
                                 f"{prov['torch']}; run without --merge")
            for section in KEYS:
                self.data[section] = old.get(section, [])
            for row in self.data["steps"]:
                row["floor_ms"] *= old["copy_GBps"] / copy_gbps

    def add(self, section: str, row: dict) -> None:
        """Add `row` to `section` (replacing the row with the same key) and write the file."""
        key = [row[k] for k in KEYS[section]]
        rows = [r for r in self.data[section] if [r[k] for k in KEYS[section]] != key]
        self.data[section] = [*rows, row]
        write_text_atomic(self.path, json.dumps(self.data, indent=1) + "\n")


def measure_steps(args: argparse.Namespace, base: Runtime, out: Results) -> None:
    """Step ms and floor per model × runtime × context × n, and commit rows of SSM and hybrid
    targets at the first context. A KV-cached model is built per context (its static cache
    sized to it); a state-space model once per runtime, so each bucket compiles once. `compile`
    runs at --compile-context and --compile-ns only (one compiled grid per model)."""
    for name in args.models:
        spec = spec_of(name)
        for kind in args.runtimes:
            compiled = kind == "compile"
            ns = [n for n in (args.compile_ns if compiled else args.ns)
                  if spec.arch == "transformer" or n <= MAX_SSM_N]
            if not ns:
                continue
            runtime = dataclasses.replace(base, kind=kind)
            contexts = [args.compile_context] if compiled else args.contexts
            wrapped = None
            for context in contexts:
                if wrapped is None or spec.arch != "ssm":
                    wrapped = None
                    release()
                    longest = max(contexts) if spec.arch == "ssm" else context
                    try:
                        wrapped = build(spec, runtime, longest + max(ns) + 1)
                    except InputError as exc:
                        console.print(f"{name} {kind}: skipped ({exc})")
                        break
                steps_at(wrapped, spec, name, context, ns, args, out)
            wrapped = None
            release()


def steps_at(wrapped: Model, spec: ModelSpec, name: str, context: int, ns: Sequence[int],
             args: argparse.Namespace, out: Results) -> None:
    """Prefill `context` random tokens (seeded), then time the verification of each tree size
    (and, at the first context, the SSM commit after it)."""
    runtime, capacity = wrapped.runtime, context + max(ns) + 1
    generator = torch.Generator().manual_seed(0)
    wrapped.prefill(torch.randint(0, spec.vocab_size, (context + 1,), generator=generator),
                    capacity)
    read = weight_bytes(wrapped.model) + context_bytes(spec, runtime.dtype, context)
    start, setup = time.perf_counter(), wrapped.setup_s
    for n in ns:
        tree, tokens = binary_tree(n), torch.arange(n) % spec.vocab_size
        step = wrapped.verify_call(tokens, tree)  # inputs on the device before the timed window
        ms = timer(runtime, step, args.repeats, args.warmup)
        out.add("steps", {"model": name, "context": context, "n": n, "runtime": runtime.kind,
                          "ms": ms, "floor_ms": floor_ms(read, out.data["copy_GBps"])})
        if spec.arch != "transformer" and context == args.contexts[0]:
            out.add("commit", commit_row(wrapped, tree, tokens, name, ms, args.repeats,
                                         args.warmup))
    wall, setup_s = time.perf_counter() - start, wrapped.setup_s - setup
    out.add("groups", {"model": name, "context": context, "runtime": runtime.kind,
                       "compile_mode": args.compile_mode if runtime.kind == "compile" else None,
                       "ns": list(ns), "wall_s": round(wall, 2), "setup_s": round(setup_s, 2)})
    console.print(f"{name} context {context} {runtime.kind}: {wall:.1f} s, of which "
                  f"{setup_s:.1f} s compiling or capturing")


def commit_row(wrapped: SSMModel | HybridModel, tree: Tree, tokens: torch.Tensor, name: str,
               verify_ms: float, repeats: int, warmup: int | None = None) -> dict:
    """Ms of committing the deepest root-to-leaf path of `tree` after verifying it (the state is
    put back after every commit, so each one starts from the same verification)."""
    path = tree.path(tree.size - 1)
    state, committed = wrapped.state, wrapped.committed
    wrapped.verify(tokens, tree)

    def commit() -> None:
        wrapped.state, wrapped.committed = state, committed
        wrapped.commit(tokens, path)

    ms = timer(wrapped.runtime, commit, repeats, warmup)
    wrapped.state, wrapped.committed = state, committed
    return {"model": name, "n": tree.size, "commit_ms": ms, "verify_ms": verify_ms}


def measure_prefill(args: argparse.Namespace, base: Runtime, out: Results) -> None:
    """Ms of prefilling each --prefill length on every Transformer model (eager, as the wrappers
    prefill under every runtime)."""
    runtime = dataclasses.replace(base, kind="eager")
    for name in args.models:
        spec = spec_of(name)
        if spec.arch != "transformer":
            continue
        for tokens in args.prefill:
            wrapped = build(spec, runtime, tokens + 1)
            prompt = torch.arange(tokens + 1, device=runtime.device) % spec.vocab_size
            ms = timer(runtime, lambda w=wrapped, p=prompt, t=tokens: w.prefill(p, t + 1),
                       max(3, args.repeats // 5), warmup=min(args.warmup, 3))
            out.add("prefill", {"model": name, "tokens": tokens, "runtime": "eager", "ms": ms})
            del wrapped
            release()


def missing(modules: Sequence[str]) -> list[str]:
    """The named modules that cannot be imported here."""
    lacking = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            lacking.append(module)
    return lacking


def measure_e2e(args: argparse.Namespace, base: Runtime, out: Results) -> None:
    """`generate` on the zoo per --e2e pair and runtime in float32, checked lossless (skipped
    with a note where polars is missing; a pair a runtime cannot run is skipped with a note)."""
    lacking = missing(E2E_NEEDS)
    if lacking:
        console.print(f"end-to-end runs skipped: generate needs {', '.join(lacking)}")
        return
    from specscope.executor.generate import generate

    algo, budget = E2E_TREE
    for model, drafter in args.e2e:
        for kind in args.runtimes:
            runtime = dataclasses.replace(base, dtype=torch.float32, kind=kind)
            try:
                r = generate(model, drafter, E2E_PROMPTS, n=args.e2e_prompts, max_new=64,
                             algo=algo, budget=budget, verify_lossless=True, runtime=runtime,
                             threads=args.threads)
            except InputError as exc:
                console.print(f"end to end {model} {drafter} {kind}: skipped ({exc})")
                continue
            finally:
                release()
            out.add("e2e", {"model": model, "drafter": drafter, "tree": f"{algo} n={budget}",
                            "runtime": kind, "dtype": "float32", "speedup": r.speedup,
                            "lossless": r.lossless, "tokens_per_s": r.tokens_per_s,
                            "ar_tokens_per_s": r.ar_tokens_per_s, "setup_s": r.setup_s})


def tables(data: dict) -> list[Table]:
    """One table per non-empty section of a result file."""
    out = []
    prov = data["provenance"]
    steps = Table(title=f"verification step: {prov['device']}, torch {prov['torch']}, copy "
                        f"{data['copy_GBps']:.1f} GB/s", title_justify="left")
    for col in ("model", "context", "runtime", "n", "ms", "floor ms", "× floor", "t(n)/t(1)"):
        steps.add_column(col, justify="left" if col in ("model", "runtime") else "right")
    models = list(dict.fromkeys(s["model"] for s in data["steps"]))

    def group(s: dict) -> tuple:
        return models.index(s["model"]), s["context"], RUNTIMES.index(s["runtime"])

    rows = sorted(data["steps"], key=lambda s: (*group(s), s["n"]))
    one = {group(s): s["ms"] for s in rows if s["n"] == 1}
    for i, s in enumerate(rows):
        base = one.get(group(s))
        steps.add_row(s["model"], str(s["context"]), s["runtime"], str(s["n"]), f"{s['ms']:.3f}",
                      f"{s['floor_ms']:.3f}", f"{s['ms'] / s['floor_ms']:.2f}",
                      f"{s['ms'] / base:.2f}" if base else "",
                      end_section=i + 1 < len(rows) and group(rows[i + 1]) != group(s))
    out.append(steps)
    if data["prefill"]:
        prefill = Table(title="prefill", title_justify="left")
        for col in ("model", "tokens", "runtime", "ms", "tokens/s"):
            prefill.add_column(col, justify="left" if col in ("model", "runtime") else "right")
        for p in data["prefill"]:
            prefill.add_row(p["model"], str(p["tokens"]), p["runtime"], f"{p['ms']:.1f}",
                            f"{p['tokens'] / p['ms'] * 1e3:,.0f}")
        out.append(prefill)
    if data["commit"]:
        commit = Table(title="SSM commit (state after a root-to-leaf path) beside verification",
                       title_justify="left")
        for col in ("model", "n", "commit ms", "verify ms", "commit / verify"):
            commit.add_column(col, justify="left" if col == "model" else "right")
        for c in data["commit"]:
            commit.add_row(c["model"], str(c["n"]), f"{c['commit_ms']:.3f}",
                           f"{c['verify_ms']:.3f}", f"{c['commit_ms'] / c['verify_ms']:.1%}")
        out.append(commit)
    if data["e2e"]:
        e2e = Table(title=f"end to end: generate, {E2E_PROMPTS}, 64 new tokens",
                    title_justify="left")
        for col in ("model", "drafter", "tree", "runtime", "dtype", "speedup", "lossless"):
            e2e.add_column(col, justify="right" if col == "speedup" else "left")
        for e in data["e2e"]:
            e2e.add_row(e["model"], e["drafter"], e["tree"], e["runtime"], e["dtype"],
                        f"{e['speedup']:.2f}×", str(e["lossless"]))
        out.append(e2e)
    if data.get("groups"):
        groups = Table(title="groups: seconds measuring and, of them, compiling or capturing",
                       title_justify="left")
        for col in ("model", "context", "runtime", "compile mode", "wall s", "setup s"):
            groups.add_column(col, justify="right" if col.endswith(" s") else "left")
        for g in data["groups"]:
            groups.add_row(g["model"], str(g["context"]), g["runtime"], g["compile_mode"] or "",
                           f"{g['wall_s']:.1f}", f"{g['setup_s']:.1f}")
        out.append(groups)
    return out


def ints(text: str) -> list[int]:
    """A comma-separated list of positive integers ("" is none)."""
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not all(v.isdigit() and int(v) > 0 for v in values):
        raise InputError(f"expected comma-separated positive integers, got {text!r}")
    return [int(v) for v in values]


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, Runtime]:
    """Options, with device-dependent defaults (GPU or CPU shapes; --quick shrinks what is not
    given), and the base runtime (device and dtype)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, else float32")
    parser.add_argument("--models", default=None, help="catalogue, zoo or '<transformer>/k'")
    parser.add_argument("--contexts", default=None, help="committed tokens before the tree")
    parser.add_argument("--ns", default=None, help="tree sizes (binary trees)")
    parser.add_argument("--runtimes", default=None, help="eager, graph (CUDA), compile")
    parser.add_argument("--prefill", default=None, help="prompt lengths to time ('' for none)")
    parser.add_argument("--compile-mode", default=COMPILE_MODE, choices=COMPILE_MODES,
                        help="torch.compile mode of compiled steps on a GPU")
    parser.add_argument("--compile-context", type=int, default=None,
                        help="the one context compiled steps are measured at (default: the "
                             "first of --contexts)")
    parser.add_argument("--compile-ns", default=None,
                        help="tree sizes compiled (default: 1,8,64 on a GPU, --ns on a CPU)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls (median)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="calls before timing each shape (default: 20 on a GPU, 3 on a CPU)")
    parser.add_argument("--e2e", default=E2E, help="end-to-end model:drafter pairs")
    parser.add_argument("--e2e-prompts", type=int, default=None, help="prompts per e2e run")
    parser.add_argument("--no-e2e", action="store_true", help="skip the end-to-end runs")
    parser.add_argument("--e2e-only", action="store_true",
                        help="only the end-to-end runs (no steps, no prefill)")
    parser.add_argument("--quick", action="store_true", help="a CI-sized run")
    parser.add_argument("--merge", action="store_true",
                        help="keep the rows of an earlier run in the output file")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("-o", "--output", default=None, help="result file")
    args = parser.parse_args(argv)
    cuda = args.device != "cpu" and torch.cuda.is_available()
    base = Runtime.resolve(args.device, args.dtype or ("bfloat16" if cuda else "float32"))
    defaults = {**(GPU if cuda else CPU), "repeats": 20, "e2e_prompts": 8,
                **(QUICK if args.quick else {})}
    for option, value in defaults.items():
        if getattr(args, option) is None:
            setattr(args, option, value)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.contexts, args.ns, args.prefill = ints(args.contexts), ints(args.ns), ints(args.prefill)
    args.compile_ns = args.ns if args.compile_ns is None else ints(args.compile_ns)
    if args.compile_context is None:
        args.compile_context = args.contexts[0] if args.contexts else 0
    args.warmup = warmups(base) if args.warmup is None else args.warmup
    args.runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    args.e2e = pairs(args.e2e)
    for kind in args.runtimes:  # checks each runtime against the device
        Runtime.resolve(str(base.device), base.dtype_name, kind)
    if not (args.models and args.contexts and args.ns and args.runtimes) or args.repeats < 1:
        raise InputError("give at least one model, context, tree size and runtime, and "
                         "--repeats ≥ 1")
    if args.compile_context < 1 or args.warmup < 0 or (args.no_e2e and args.e2e_only):
        raise InputError("--compile-context must be ≥ 1, --warmup ≥ 0, and --no-e2e and "
                         "--e2e-only exclude each other")
    return args, dataclasses.replace(base, compile_mode=args.compile_mode)


def pairs(text: str) -> list[tuple[str, str]]:
    """Comma-separated model:drafter pairs ("" is none)."""
    out = []
    for item in (v.strip() for v in text.split(",") if v.strip()):
        model, sep, drafter = item.partition(":")
        if not (sep and model and drafter):
            raise InputError(f"--e2e: expected model:drafter pairs, got {item!r}")
        out.append((model, drafter))
    return out


def main(argv: Sequence[str] | None = None) -> Path:
    """Run the benchmark; returns the result file's path."""
    args, base = parse_args(argv)
    torch.set_num_threads(args.threads)
    path = Path(args.output or f"benchmarks/results/gpu_verify-{device_slug(base)}.json")
    out = Results(path, provenance(base), copy_rate(base), args.merge, args.compile_mode)
    if not args.e2e_only:
        measure_steps(args, base, out)
        measure_prefill(args, base, out)
    if not args.no_e2e:
        measure_e2e(args, base, out)
    for table in tables(out.data):
        console.print(table)
    console.print(f"wrote {out.path}")
    return out.path


if __name__ == "__main__":
    try:
        main()
    except InputError as exc:  # bad options: one line, exit 2 (as the CLI does)
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
