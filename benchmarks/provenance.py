"""Where a benchmark ran, for its results' header lines: the CPU's model and the commit of the
code it measured, and the results file written with them (scripts run from benchmarks/ import it
as `provenance`)."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

from rich.console import Console
from rich.table import Table

from specscope.atomic import write_text_atomic

REPO = Path(__file__).resolve().parent.parent


def cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit(*paths: str, repo: Path = REPO) -> str:
    """The short hash of `repo`'s HEAD, or of the last commit that touched `paths` (relative to
    it); "unknown" outside a git checkout."""
    command = ["git", "-C", str(repo), "log", "-1", "--format=%h", "--", *paths]
    found = subprocess.run(command, capture_output=True, text=True, check=False).stdout.strip()
    return found or "unknown"


def write_results(path: Path, header: str, table: Table, width: int) -> None:
    """`table` rendered `width` columns wide and printed, written to `path` (atomically) under
    the `header` lines, which are printed after it."""
    console = Console(record=True, width=width)
    console.print(table)
    write_text_atomic(path, header + console.export_text())
    print(header, end="")
