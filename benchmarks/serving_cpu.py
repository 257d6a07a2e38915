"""The simulator under load against real continuous-batching serving on this CPU (issue 25):
`validate --load` of the zoo's tiny-code on the cpu-2core profile, every policy × rate cell
simulated against measured, with the error summaries and the ranking checks.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/serving_cpu.py [--full] [--seed 0]
     [--prompts builtin:code-edit,builtin:stdlib-code] [--drafter ngram|draft]

What runs (`specscope/validate/load.py`): the prompts' greedy n-gram trace, a saturation probe of
plain decoding, then per rate of the ladder (fractions of saturation) every policy served for
real in wall-clock time and simulated with the same seed, prompts, output lengths, limits and
tree, each cell's real runs repeated with the policies taking turns (`--repeats`, default 2:
the measured metrics are their mean); the profile's own steps re-timed around each run
(`machine_drift`) and the simulation corrected by time dilation. `--quick` sizes by default
(about three minutes on 2 quiet cores); `--full` the full ladder. Run it alone: other work on
this shared machine moves every real number (the load average is printed before and after).
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
from provenance import cpu_name  # benchmarks/provenance.py (scripts run from benchmarks/)
from rich.console import Console

from specscope.names import LOAD_DRAFTERS
from specscope.validate.compare import DEFAULT_PROMPTS
from specscope.validate.load import LoadRequest, default_policies, run_load_validate
from specscope.validate.load_report import cell_table, ranking_lines, summary_table

console = Console(width=200)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="The full ladder (longer).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", default=DEFAULT_PROMPTS)
    parser.add_argument("--repeats", type=int, default=None,
                        help="real runs per cell (default: the ladder's, 2)")
    parser.add_argument("--drafter", choices=LOAD_DRAFTERS, default="ngram",
                        help="n-gram, or the zoo's draft model (with dyspec)")
    args = parser.parse_args()
    before = os.getloadavg()[0]
    start = time.perf_counter()
    doc = run_load_validate(LoadRequest("cpu-2core", "tiny-code", device="cpu",
                                        quick=not args.full, prompts=args.prompts,
                                        drafter=args.drafter,
                                        policies=default_policies(args.drafter),
                                        seed=args.seed, repeats=args.repeats))
    wall = time.perf_counter() - start
    console.print(f"# benchmarks/serving_cpu.py on {cpu_name()} ({os.cpu_count()} cores), "
                  f"torch {torch.__version__}, {doc['threads']} thread(s) "
                  f"({doc['threads_reason']}), {datetime.date.today().isoformat()}, load "
                  f"average {before:.1f} before, {os.getloadavg()[0]:.1f} after; "
                  f"{wall:.0f} s; {'full' if args.full else 'quick'} ladder, {doc['repeats']} "
                  f"real run(s) per cell, seed {args.seed}, "
                  f"prompts {args.prompts}")
    console.print(cell_table(doc))
    console.print(summary_table(doc))
    for line in ranking_lines(doc):
        console.print(line)
    drift = ", ".join(f"{d:.2f}" for d in doc["machine_drift"] if d is not None)
    console.print(f"machine drift probes (now / profiled step time): {drift}; acceptance: "
                  f"{doc['acceptance']}")


if __name__ == "__main__":
    main()
