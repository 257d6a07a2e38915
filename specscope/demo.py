"""`specscope demo`: the whole loop on embedded defaults (grows with each capability)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.tables import optimize_table
from specscope.trace import synth_trace, write_trace

DEMO_DIR = Path("out/demo")
DEMO_HARDWARE = ("a100", "h100", "edge-cpu")


def run_demo(seed: int, console: Console) -> None:
    """Synthesise a trace, then compare every method on three hardware profiles."""
    trace_path = DEMO_DIR / "trace.parquet"
    trace = synth_trace(requests=32, seed=seed)
    write_trace(trace, trace_path)
    console.print(f"[bold]1. Synthetic trace[/]: {trace.df.height} rows → {trace_path}")
    console.print("[bold]2. Best tree per method, each choosing among budgets 8,16,32,64[/]")
    for hw in DEMO_HARDWARE:
        request = OptimizeRequest(hw=hw, trace_path=trace_path, budgets=[8, 16, 32, 64])
        console.print(optimize_table(run_optimize(request)))
