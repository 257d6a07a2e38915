"""What `optimize-tree --to` costs on top of `optimize-tree`, and what each engine's family
loses against the unconstrained optimum.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/export.py [--budgets 16,64,256]

One process, one core: per budget, `run_optimize` alone (every method at the budget, on a
synthetic trace of 32 requests, seed 0, h100, llama-2-7b priced with llama-68m drafting), then
each engine's `optimized_export` on that result, timed as the median of 3 runs; the ratio column
is the export's time over optimize-tree's. The family searches are exact: vLLM's per-level
branchings by a pruned depth-first search, SGLang's (steps, top-k, tokens) by enumeration, the
chain engines over every length; the table also prints each engine's predicted speedup against
the unconstrained one.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from optimizers import timed  # benchmarks/optimizers.py (scripts run from benchmarks/)
from rich.console import Console
from rich.table import Table

from specscope.hw_profiles.deployment import deployment
from specscope.interop.document import optimized_export
from specscope.names import EXPORT_ENGINES
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.trace import synth_trace, write_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budgets", default="16,64,256")
    args = parser.parse_args()
    console = Console(width=140)
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "x.parquet"
        write_trace(synth_trace(requests=32, seed=0, length=256,
                                sources=("draft:llama-68m", "ngram", "recycle"), k=8), trace)
        table = Table(title=f"optimize-tree --to on h100 (llama-2-7b, llama-68m; "
                            f"{os.cpu_count()} cores, 1 thread)")
        for col in ("budget", "engine", "method", "optimize-tree s", "export s", "ratio",
                    "predicted", "unconstrained", "lost"):
            table.add_column(col, justify="right")
        for budget in (int(b) for b in args.budgets.split(",")):
            request = OptimizeRequest(
                deployment=deployment("h100", target="llama-2-7b"),
                trace_path=trace, budget=budget)
            base, result = timed(lambda request=request: run_optimize(request))
            for engine in EXPORT_ENGINES:
                spent, doc = timed(lambda engine=engine, result=result:
                                      optimized_export(result, engine))
                table.add_row(str(budget), engine, doc["method"], f"{base:.2f}", f"{spent:.2f}",
                              f"{spent / base:.2f}×", f"{doc['predicted']:.3f}×",
                              f"{doc['unconstrained']:.3f}×", f"{doc['loss']:.1%}")
        console.print(table)


if __name__ == "__main__":
    main()
