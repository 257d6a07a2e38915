"""`specscope demo`: the whole loop on embedded defaults (grows with each capability)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.tables import optimize_table, pareto_table
from specscope.trace import synth_trace, write_trace

DEMO_DIR = Path("out/demo")
DEMO_HARDWARE = ("a100", "h100", "edge-cpu")
DEMO_BUDGETS = [8, 16, 32, 64]


def run_demo(seed: int, console: Console) -> None:
    """Synthesise a trace, then compare every method on three hardware profiles."""
    trace_path = DEMO_DIR / "trace.parquet"
    trace = synth_trace(requests=32, seed=seed)
    write_trace(trace, trace_path)
    console.print(f"[bold]1. Synthetic trace[/]: {trace.df.height} rows → {trace_path}")
    console.print(f"[bold]2. Every method, each choosing its best n ≤ budget in {DEMO_BUDGETS}[/]")
    for hw in DEMO_HARDWARE:
        with console.status(f"optimizing trees for {hw}"):
            result = run_optimize(
                OptimizeRequest(hw=hw, trace_path=trace_path, budgets=DEMO_BUDGETS)
            )
        console.print(optimize_table(result))
        console.print(pareto_table(result))
