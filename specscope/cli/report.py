"""Reporting commands: the HTML dashboard and the whole-loop demo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.cli.common import Seed, console


def dashboard(
    folder: Annotated[Path, typer.Argument(help="Results folder: optimize-tree JSON, simulate "
                                                "metrics, validate tables, sweeps, traces, "
                                                "benchmark JSON (searched recursively).")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="HTML file to write "
                                                "(default: FOLDER/report.html).")] = None,
) -> None:
    """One self-contained HTML report (Plotly) of everything a results folder holds."""
    from specscope.dashboards import build_report

    report = build_report(folder, output or folder / "report.html")
    console.print(f"wrote {report.path}: {len(report.drawn)} figures from "
                  f"{report.results.used} files in {report.seconds:.1f} s")


def demo(
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Folder for every result "
                                                                   "and the dashboard.")] = (
        Path("out/demo")),
    quick: Annotated[bool, typer.Option("--quick", help="Fewer loads, validated "
                                                        "configurations and prompts.")] = False,
    seed: Seed = 0,
) -> None:
    """The whole loop on embedded defaults. Measures this machine, traces the zoo, optimises
    trees for every profile, simulates serving, validates on this CPU, writes the dashboard."""
    from specscope.demo import run_demo

    run_demo(seed, console, out, quick)
