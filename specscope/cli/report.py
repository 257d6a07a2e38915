"""Reporting commands: the HTML dashboard and the whole-loop demo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.cli.checks import Output
from specscope.cli.common import Force, Seed, console
from specscope.errors import InputError
from specscope.outputs import check_output


def dashboard(
    folder: Annotated[Path, typer.Argument(help="Results folder: optimize-tree JSON, simulate "
                                                "metrics, validate tables, sweeps, traces, "
                                                "benchmark JSON (searched recursively).")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="HTML file to write "
                                                "(default: FOLDER/report.html)."),
                      Output(inputs=("folder",))] = None,
    force: Force = False,
) -> None:
    """One self-contained HTML report (Plotly) of everything a results folder holds."""
    from specscope.dashboards import build_report

    if output is None:
        check_output(folder / "report.html", "-o", force=force)
    report = build_report(folder, output or folder / "report.html")
    console.print(f"wrote {report.path}: {len(report.drawn)} figures from "
                  f"{report.results.used} files in {report.seconds:.1f} s")


def demo(
    output: Annotated[Path, typer.Option("-o", "--output", metavar="DIR",
                                         help="Folder for every result and the dashboard."),
                      Output(folder=True)] = Path("out/demo"),
    quick: Annotated[bool, typer.Option("--quick", help="Fewer loads, validated "
                                                        "configurations and prompts.")] = False,
    seed: Seed = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace the results of an earlier "
                                                        "demo in the folder.")] = False,
) -> None:
    """The whole loop on embedded defaults. Measures this machine, traces the zoo, optimises
    trees for every profile, simulates serving, validates on this CPU, writes the dashboard."""
    from specscope.demo import run_demo

    if output.is_dir() and any(output.iterdir()) and not force:
        raise InputError(f"-o {output}: holds files already (an earlier demo?); pass --force "
                         "to write this demo's results over them")

    run_demo(seed, console, output, quick)
