"""The command line: parse options, call the library, print. Bad input → one stderr line, exit 2.

The commands live in `predict` (cost, optimize-tree, simulate, sweep), `measure` (profile-hw,
validate, generate, collect, trace synth, zoo train) and `report` (dashboard, demo); this module
holds the typer apps, registers the commands and turns errors into one line.
"""

from __future__ import annotations

import sys

import typer

from specscope.cli import measure, predict, report
from specscope.errors import InputError

app = typer.Typer(
    help="specscope: design-space explorer for speculative decoding.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
trace_app = typer.Typer(help="Acceptance traces (schema v1 parquet).", no_args_is_help=True)
app.add_typer(trace_app, name="trace")
zoo_app = typer.Typer(help="The tiny trained model zoo.", no_args_is_help=True)
app.add_typer(zoo_app, name="zoo")

app.command()(predict.cost)
app.command("profile-hw")(measure.profile_hw)
trace_app.command("synth")(measure.trace_synth)
app.command()(measure.generate)
app.command()(measure.validate)
app.command()(measure.collect)
zoo_app.command("train")(measure.zoo_train)
app.command("optimize-tree")(predict.optimize_tree)
app.command()(predict.simulate)
app.command()(predict.sweep)
app.command()(report.dashboard)
app.command()(report.demo)


def _run(
    command: typer.core.TyperCommand | typer.core.TyperGroup, prog: str, argv: list[str] | None
) -> None:
    """Invoke a click command; usage and input errors become one stderr line and exit 2."""
    try:
        code = command.main(args=argv, prog_name=prog, standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print(f"{prog}: aborted", file=sys.stderr)
        sys.exit(130)
    except (typer.TyperException, InputError) as exc:  # usage errors, bad values, bad input
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if not message.strip():  # no arguments at all: the help was printed
            sys.exit(0)
        print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `specscope` console script."""
    _run(typer.main.get_command(app), "specscope", argv)


def optimize_tree_main(argv: list[str] | None = None) -> None:
    """Entry point of the `optimize-tree` console script."""
    single = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    single.command()(predict.optimize_tree)
    _run(typer.main.get_command(single), "optimize-tree", argv)
