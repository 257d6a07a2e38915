"""Every drafter × verification rule on one target, one machine and the same prompts, at matched
budgets: the fair comparison issue 14 asks for.

Run: .venv/bin/python benchmarks/methods.py [--n 4] [--max-new 48] [--budgets 8,16,32]
     [--sets code-edit,docstring] [--drafters ...] [--threads N] [-o FILE]

Target `tiny-code` with `tiny-code-draft` where a drafter needs a draft model (draft, rasd).
Workloads: `builtin:code-edit` (agentic edits: the continuation copies the prompt) and
`builtin:docstring` (prose: the nearest to a chat workload the zoo has). Per drafter, the tree is
Sequoia's DP tree at each budget under the drafter's acceptance from a calibration pass on the
next 4 prompts of the set (Goose: its own spine tree; layerskip: SWIFT's skip set, chosen on
the first requests), so every drafter gets the tree it deserves at the same tree size. Greedy
rows use the greedy rule and are checked token for token against autoregressive decoding;
rows at temperature 0.7 use the deterministic-candidate rule, and the drafters whose children
can be drawn from their distribution (draft, stand) also run Sequoia/RSD-C's rule (children
without replacement), SpecInfer's (with replacement), Traversal Verification and RSD-S (Stochastic
Beam Search trees). Each row decodes every prompt autoregressively and speculatively in turn in
this process (`generate`); speedup is the ratio of the two rates (prefill excluded), draft ms the
drafting phase per verification step.
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from provenance import cpu_name  # benchmarks/provenance.py (scripts run from benchmarks/)
from rich.console import Console
from rich.table import Table

from specscope.executor.generate import generate
from specscope.executor.loop import GenerateResult
from specscope.names import DRAFTERS

TARGET = "tiny-code"
SETS = ("code-edit", "docstring")
SAMPLED = ("draft", "stand")
"""Drafters whose children can be drawn from their own distribution."""
SAMPLED_RULES = ("sequoia", "specinfer", "traversal")
TEMPERATURE = 0.7
console = Console(width=160)


@dataclass(frozen=True)
class Row:
    """One configuration: drafter, tree method, rule, temperature, budget."""

    drafter: str
    algo: str
    rule: str
    temperature: float
    budget: int


def plan(drafters: list[str], budgets: list[int]) -> list[Row]:
    """The rows of one workload's table."""
    rows = []
    for d in drafters:
        algo = "goose" if d == "goose" else "sequoia"
        for b in budgets:
            rows.append(Row(d, algo, "greedy", 0.0, b))
            rows.append(Row(d, algo, "deterministic", TEMPERATURE, b))
            if d in SAMPLED:
                rows += [Row(d, algo, r, TEMPERATURE, b) for r in SAMPLED_RULES]
            if d == "draft":
                rows.append(Row(d, "rsd-s", "rsd", TEMPERATURE, b))
    return rows


def run(row: Row, prompts: str, n: int, max_new: int, threads: int | None) -> GenerateResult:
    """`generate` for one row (greedy rows checked against autoregressive output)."""
    return generate(TARGET, row.drafter, prompts, n, max_new, algo=row.algo, budget=row.budget,
                    temperature=row.temperature, rule=row.rule, seed=0,
                    verify_lossless=row.temperature == 0, threads=threads)


def table(name: str, results: list[tuple[Row, GenerateResult]]) -> Table:
    """The workload's table: one line per row, best speedup per (temperature, budget) marked."""
    out = Table(title=f"{name}: tiny-code, {results[0][1].requests} prompts × "
                      f"{results[0][1].new_tokens // results[0][1].requests} tokens, "
                      f"{results[0][1].threads} thread(s): {results[0][1].threads_reason}")
    for col in ("drafter", "tree", "rule", "T", "n", "tokens/step", "speedup", "draft ms",
                "verify ms", "tok/s", "AR tok/s", "lossless"):
        out.add_column(col, justify="left" if col in ("drafter", "tree", "rule") else "right")
    best: dict[tuple[float, int], float] = {}
    for row, res in results:
        key = (row.temperature, row.budget)
        best[key] = max(best.get(key, 0.0), res.speedup)
    for row, res in results:
        steps = res.steps
        mark = " *" if res.speedup == best[row.temperature, row.budget] else ""
        out.add_row(row.drafter, row.algo, row.rule, f"{row.temperature:g}", str(row.budget),
                    f"{res.tokens_per_step:.2f}", f"{res.speedup:.2f}×{mark}",
                    f"{1e3 * res.phases.draft_s / steps:.2f}",
                    f"{1e3 * res.phases.verify_s / steps:.2f}", f"{res.tokens_per_s:.0f}",
                    f"{res.ar_tokens_per_s:.0f}",
                    "—" if res.lossless is None else ("yes" if res.lossless else "NO"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4, help="prompts per workload")
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--budgets", default="8,16,32")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--drafters", default=",".join(DRAFTERS))
    ap.add_argument("--threads", type=int, default=None, help="default: specscope's choice")
    ap.add_argument("-o", "--output", type=Path, default=None, help="also write the tables here")
    args = ap.parse_args()
    torch.manual_seed(0)
    budgets = [int(b) for b in args.budgets.split(",")]
    drafters = [d.strip() for d in args.drafters.split(",")]
    record = Console(width=160, record=True)
    record.print(f"# benchmarks/methods.py on {cpu_name()}, {os.cpu_count()} cores, torch "
                 f"{torch.__version__}, {args.threads or 'default'} thread(s), "
                 f"{datetime.date.today()}; "
                 f"--n {args.n} --max-new {args.max_new} --budgets {args.budgets}", highlight=False)
    start = time.perf_counter()
    for name in args.sets.split(","):
        results = []
        rows = plan(drafters, budgets)
        for i, row in enumerate(rows):
            results.append((row, run(row, f"builtin:{name}", args.n, args.max_new, args.threads)))
            console.print(f"[dim]{name} {i + 1}/{len(rows)} {row}[/dim]", highlight=False)
        record.print(table(name, results))
    record.print(f"{time.perf_counter() - start:.0f} s on this machine "
                 f"({torch.get_num_threads()} thread(s), torch {torch.__version__})")
    if args.output:
        args.output.write_text(record.export_text())


if __name__ == "__main__":
    main()
