"""What every command shares: option types, comma-list parsing, JSON output, progress, console."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from specscope.atomic import write_text_atomic
from specscope.errors import InputError

console = Console()

Hw = Annotated[str, typer.Option("--hw", help="Hardware profile (a100, h100, h200, ...).")]
PricedRuntime = Annotated[str | None, typer.Option(
    "--runtime", help="eager, graph or compile (default: the profile's own).")]
TreeAttention = Annotated[str, typer.Option(
    "--tree-attention", help="split (prefix read once) or dense (one (n, prefix + n) mask).")]


def _csv_ints(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{option}: expected comma-separated integers, got {text!r}") from None


def _csv_floats(text: str, option: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{option}: expected comma-separated numbers, got {text!r}") from None


def _emit(payload: dict, as_json: bool, output: Path | None) -> None:
    text = json.dumps(payload, indent=2)
    if output is not None:
        write_text_atomic(output, text + "\n")
    if as_json:
        sys.stdout.write(text + "\n")


def _progress(label: str) -> Progress:
    """A rich progress bar on stderr; the library reports (done, total) to it."""

    return Progress(f"[bold]{label}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True,
                    disable=not sys.stderr.isatty())  # keep logs and error output one line
