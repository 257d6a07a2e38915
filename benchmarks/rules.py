"""Verification rules for sampled drafts at matched tree sizes on the zoo, with and without
delayed tree expansion.

Run: .venv/bin/python benchmarks/rules.py [--n 8] [--max-new 48] [--budgets 8,16,32]
     [--temperatures 0.7,1.0] [--threads N] [-o benchmarks/results/rules-cpu.txt]

Models: zoo `tiny-code` (target) and `tiny-code-draft`; prompts: the first --n of
`builtin:code-edit`. Per temperature, a calibration pass on the next 4 prompts gives the draft's
positional acceptance p, which shapes every tree. At each budget (tree size n, root included)
every row verifies trees of the same size, so the target computes the same per step:

- specinfer: children drawn i.i.d. from q, SpecInfer's token-level rule;
- rsd-c: children drawn by Gumbel-top-k, recursive rejection sampling (RSD-C, rule `rsd`);
- traversal: children drawn i.i.d., Traversal Verification (sequence-level, leaf to root);
- rsd-s: RSD-S, the tree drawn by stochastic beam search each step, rule `rsd`.

Shapes: `kary` is the best k-ary tree under p (constant branching, RSD-C's tree; rsd-s: the
beam width giving the same size and depth, `matching_beam`); `delayed` is the best
delayed-expansion tree under p with a delay of at least one token (rsd-s: as many single-path
levels, then the beam matching the delayed tree's size and depth below them). Under these
acceptance vectors the unconstrained search picks no delay (root rollouts; printed), since a
positional model values a branch below the path by the path's acceptance; the forced delay shows
what delaying costs or gains for each rule.

Every row decodes each prompt autoregressively and speculatively in turn in this process (the
speedup is tokens/s over tokens/s, prefill excluded); draft and verify are milliseconds per
verification step. One run per row (no repeats: the point is tokens/step; the CPU is shared, so
times are noisy).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from specscope.atomic import write_text_atomic
from specscope.executor.drafters import DraftModelDrafter
from specscope.executor.generate import calibration
from specscope.executor.loop import GenerateResult, speculative_generate
from specscope.executor.methods import MAX_DEPTH, Method, rsd_s_method, static_method
from specscope.executor.rsd import matching_beam
from specscope.executor.session import load_session
from specscope.executor.threads import use_threads
from specscope.executor.verify import DRAFT_SAMPLING
from specscope.models import get_model
from specscope.names import DEFAULT_DRAFT_MODEL
from specscope.optimizers.baselines import best_kary_tree
from specscope.optimizers.delayed import delayed_shape, delayed_tree
from specscope.trace import AcceptanceModel

PROMPTS = "builtin:code-edit"
RULES = {"specinfer": "specinfer", "rsd-c": "rsd", "traversal": "traversal", "rsd-s": "rsd"}
"""Row label → verification rule."""


def methods(p, budget: int, source: str) -> dict[tuple[str, str], tuple[Method, str]]:
    """(row, shape) → (method, its shape in words) at one budget."""
    kary = best_kary_tree(p, budget, MAX_DEPTH, source)
    delay, lengths = max(
        (delayed_shape(p, budget, MAX_DEPTH, k) for k in range(1, min(budget - 1, MAX_DEPTH))),
        key=lambda s: delayed_tree(p, budget, MAX_DEPTH, source, s[0]).expected_tokens(p))
    delayed = delayed_tree(p, budget, MAX_DEPTH, source, delay)
    beam, delayed_beam = matching_beam(kary), matching_beam(delayed, delay)
    out = {}
    for row in ("specinfer", "rsd-c", "traversal"):
        out[row, "kary"] = (static_method("kary", kary, "kary"),
                            f"{max(len(c) for c in kary.children)}-ary, depth {kary.depth}")
        out[row, "delayed"] = (static_method("delayed", delayed, "delayed"),
                               f"delay {delay}, rollouts {lengths}")
    out["rsd-s", "kary"] = (rsd_s_method(budget, beam), f"beam {beam}")
    out["rsd-s", "delayed"] = (rsd_s_method(budget, delayed_beam, delay),
                               f"delay {delay}, beam {delayed_beam}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new", type=int, default=48)
    parser.add_argument("--budgets", default="8,16,32")
    parser.add_argument("--temperatures", default="0.7,1.0")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", default="benchmarks/results/rules-cpu.txt")
    args = parser.parse_args()
    threads = use_threads(args.threads, get_model("tiny-code"))
    args.threads = threads.count  # the tables and the header say it; every run uses it
    console = Console(width=150, record=True)
    load_before = os.getloadavg()[0]
    session = load_session("tiny-code", DEFAULT_DRAFT_MODEL)
    target, draft = session.target, session.draft
    tokens = session.prompts(PROMPTS)
    prompts, others = tokens[: args.n], tokens[args.n : args.n + 4]
    for temperature in map(float, args.temperatures.split(",")):
        calibrate = calibration(target, draft, others, args.max_new, temperature, args.seed,
                                "other prompts")
        traced = DraftModelDrafter(draft, temperature=temperature)
        trace, _ = calibrate([traced])
        source = traced.source
        p = AcceptanceModel.from_trace(trace, source).p
        table = Table(title=f"{PROMPTS}: {args.n} prompts × {args.max_new} new tokens, "
                            f"temperature {temperature}, {args.threads} thread(s); "
                            f"p = {', '.join(f'{x:.2f}' for x in p[:4])}, …")
        for col in ("n", "rule", "shape", "tree", "tokens/step", "speedup", "draft ms/step",
                    "verify ms/step"):
            table.add_column(col, justify="left" if col in ("rule", "shape", "tree") else
                             "right")
        for budget in map(int, args.budgets.split(",")):
            searched = delayed_shape(p, budget, MAX_DEPTH)
            for (row, shape), (method, words) in methods(p, budget, source).items():
                rule = RULES[row]
                g = torch.Generator().manual_seed(args.seed)
                drafter = DraftModelDrafter(draft, DRAFT_SAMPLING[rule], temperature, g)
                result: GenerateResult = speculative_generate(
                    target, drafter, method, prompts, args.max_new, rule, temperature,
                    args.seed, threads=args.threads)
                steps = result.steps
                table.add_row(str(budget), row, shape, words, f"{result.tokens_per_step:.2f}",
                              f"{result.speedup:.2f}×",
                              f"{1e3 * result.phases.draft_s / steps:.2f}",
                              f"{1e3 * result.phases.verify_s / steps:.2f}")
            table.add_section()
            console.print(f"n = {budget}: the unconstrained delayed search picks delay "
                          f"{searched[0]}, rollouts {searched[1]}")
        console.print(table)
    header = (f"# benchmarks/rules.py on this CPU: {platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores shared (1-min load {load_before:.1f} → "
              f"{os.getloadavg()[0]:.1f}), torch {torch.__version__}, {args.threads} thread "
              f"({threads.reason}), "
              f"{datetime.date.today()}\n# command: .venv/bin/python benchmarks/rules.py   "
              f"(--n {args.n} --max-new {args.max_new} --budgets {args.budgets} "
              f"--temperatures {args.temperatures})\n")
    write_text_atomic(Path(args.output), header + console.export_text())


if __name__ == "__main__":
    main()
