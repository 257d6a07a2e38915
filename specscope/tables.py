"""Rich tables for terminal output (times in ms, every column says its unit)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from specscope.optimizers.run import OptimizeResult


def optimize_table(result: OptimizeResult) -> Table:
    """One `optimize-tree` result, best predicted speedup first, the DP optimum marked."""
    replay = any(s.replay_tokens is not None for s in result.scores)
    table = Table(
        title=f"{result.target} on {result.hardware} · drafter {result.drafter} · source "
        f"{result.source} · context {result.context_len}",
        caption="★ exact DP optimum (Sequoia) · tok/s and speedup predicted from expected tok/step",
    )
    cols = ["method", "n", "d", "exp tok/step"]
    cols += ["replay tok/step"] if replay else []
    cols += ["step ms", "tok/s", "speedup"]
    for col in cols:
        table.add_column(col, justify="left" if col == "method" else "right")
    for s in result.scores:
        mark = " ★" if s.algo == result.reference else ""
        row = [s.algo + mark, str(s.tree.size), str(s.tree.depth), f"{s.expected_tokens:.3f}"]
        if replay:
            row.append(f"{s.replay_tokens:.3f}")
        row += [f"{s.step_time_s * 1e3:.3f}", f"{s.tokens_per_s:,.1f}", f"{s.speedup:.2f}×"]
        table.add_row(*row)
    return table


def cost_table(report: dict[str, Any], title: str) -> Table:
    """The per-operator breakdown of `specscope cost`."""
    table = Table(title=title)
    for col in ("operator", "GFLOP", "MB moved", "time ms", "bound"):
        table.add_column(col, justify="left" if col in ("operator", "bound") else "right")
    for op in report["operators"]:
        table.add_row(op["op"], f"{op['flops'] / 1e9:.3f}", f"{op['bytes'] / 1e6:.1f}",
                      f"{op['time_ms']:.4f}", op["bound"])
    return table
