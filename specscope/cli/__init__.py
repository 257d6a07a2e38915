"""The command line: parse options, call the library, print. Bad input → one stderr line, exit 2.

The commands live in `predict` (cost, optimize-tree, reproduce), `simulate` (simulate, sweep),
`serve` (serve-bench), `measure` (profile-hw, validate, generate, collect, trace synth, zoo
train), `adapt` (online drafter adaptation), `interop` (export, trace import), `accuracy` (the
accuracy page) and `report` (dashboard, demo); `help` makes their help read like click's. This
module holds the typer apps, registers the commands with an example each, and turns errors into
one line.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import Annotated

import typer

from specscope import __version__
from specscope.cli import accuracy, adapt, interop, measure, predict, report, serve, simulate
from specscope.cli.compat import USAGE_ERRORS, NoArgsIsHelpError
from specscope.cli.deprecated import upgrade
from specscope.cli.help import APP_SETTINGS, Command, example
from specscope.errors import InputError, InputWarning, first_line

DEBUG_ENV = "SPECSCOPE_DEBUG"
"""Set (to anything) to see the traceback of an internal error instead of its one line."""

app = typer.Typer(help="specscope: design-space explorer for speculative decoding.",
                  no_args_is_help=True, **APP_SETTINGS)
trace_app = typer.Typer(help="Acceptance traces (schema v1 parquet).", no_args_is_help=True,
                        **APP_SETTINGS)
app.add_typer(trace_app, name="trace")
zoo_app = typer.Typer(help="The tiny trained model zoo.", no_args_is_help=True, **APP_SETTINGS)
app.add_typer(zoo_app, name="zoo")

OPTIMIZE_TREE_EXAMPLE = ("specscope optimize-tree --hw h100 --target llama-3.1-8b \\",
                         "    --drafter llama-68m --acceptance 0.6,0.2,0.1,0.05 \\",
                         "    --budgets 8,16,32,64 --runtime graph")
COMMANDS: tuple[tuple[typer.Typer, str, Callable[..., None], tuple[str, ...]], ...] = (
    (app, "cost", predict.cost,
     ("specscope cost --hw h100 --target llama-3.1-8b --batch 8 --new-tokens 16 \\",
      "    --runtime graph")),
    (app, "profile-hw", measure.profile_hw,
     ("specscope profile-hw --name my-laptop --device cpu --quick",)),
    (trace_app, "synth", measure.trace_synth,
     ("specscope trace synth --requests 64 --seed 1 -o out/synthetic.parquet",)),
    (trace_app, "import", interop.trace_import,
     ("specscope trace import metrics.txt --from vllm-metrics \\",
      "    -o out/acceptance.json")),
    (app, "generate", measure.generate,
     ("specscope generate --target tiny-code --drafter ngram --algo sequoia \\",
      "    --budget 8 --prompts builtin:code-edit --device cpu \\",
      "    --verify-lossless")),
    (app, "adapt", adapt.adapt,
     ("specscope adapt --target tiny-code --drafter tiny-code-draft \\",
      "    --prompts builtin:code-edit --n 32 --output-len 64 --every 1 --steps 4 \\",
      "    --drift-out out/drift.txt")),
    (app, "validate", measure.validate,
     ("specscope validate --hw cpu-2core --target tiny-code --device cpu --quick",)),
    (app, "collect", measure.collect,
     ("specscope collect --target tiny-code --drafter tiny-code-draft,ngram \\",
      "    --prompts builtin:stdlib-code --n 8 --device cpu -o out/trace.parquet")),
    (zoo_app, "train", measure.zoo_train,
     ("specscope zoo train --model tiny-code --minutes 2 -o out/zoo",)),
    (app, "optimize-tree", predict.optimize_tree, OPTIMIZE_TREE_EXAMPLE),
    (app, "export", interop.export,
     ("specscope export out/tree.json --to vllm -o out/vllm.json",)),
    (app, "simulate", simulate.simulate,
     ("specscope simulate --hw h100 --target llama-3.1-8b --drafter llama-68m \\",
      "    --acceptance 0.6,0.2,0.1 --policy smartspec --rate 8 --requests 500 \\",
      "    --seed 0")),
    (app, "serve-bench", serve.serve_bench,
     ("specscope serve-bench --target tiny-code --drafter tiny-code-draft \\",
      "    --policy dyspec --rate 4 --requests 16 --output-len 32 --max-batch 4 \\",
      "    --device cpu")),
    (app, "sweep", simulate.sweep, ("specscope sweep examples/sweep.toml -o out/sweep.parquet",)),
    (app, "reproduce", predict.reproduce, ("specscope reproduce examples/papers --json",)),
    (app, "accuracy", accuracy.accuracy, ("specscope accuracy --check",)),
    (app, "dashboard", report.dashboard,
     ("specscope dashboard out/demo -o out/demo/report.html",)),
    (app, "demo", report.demo, ("specscope demo --quick -o out/demo",)),
)
"""Every command: its group, name, function and an example shown under its help."""
for group, name, function, lines in COMMANDS:
    group.command(name, cls=Command, epilog=example(*lines))(function)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"specscope {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Options before the command."""


def _run(
    command: typer.core.TyperCommand | typer.core.TyperGroup, prog: str, argv: list[str] | None,
    path: str = "",
) -> None:
    """Invoke a click command (`path`: its name, when `command` is one command rather than the
    app); usage and input errors become one stderr line and exit 2, input warnings and each
    deprecated option spelling (`cli/deprecated.py`, rewritten before click parses) one stderr
    line each (once per message)."""

    def show(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
        if issubclass(category, InputWarning):
            print(f"{prog}: warning: {' '.join(str(message).split())}", file=sys.stderr)
        else:
            shown(message, category, *_, **__)

    argv, deprecated = upgrade(command, sys.argv[1:] if argv is None else list(argv), path)
    for line in deprecated:
        print(f"{prog}: warning: {line}", file=sys.stderr)
    shown = warnings.showwarning
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default", InputWarning)
            warnings.showwarning = show
            code = command.main(args=argv, prog_name=prog, standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print(f"{prog}: aborted", file=sys.stderr)
        sys.exit(130)
    except NoArgsIsHelpError as exc:  # a group called alone: its help, on stdout
        typer.echo(exc.format_message())
        sys.exit(0)
    except (*USAGE_ERRORS, InputError) as exc:  # usage errors, bad values, bad input
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # a bug of ours, not the user's input: one line, traceback on request
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"{prog}: internal error: {type(exc).__name__}: {' '.join(first_line(exc).split())}"
              f" (please report it with the command; {DEBUG_ENV}=1 shows the traceback)",
              file=sys.stderr)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `specscope` console script."""
    _run(typer.main.get_command(app), "specscope", argv)


def optimize_tree_main(argv: list[str] | None = None) -> None:
    """Entry point of the `optimize-tree` console script (`specscope optimize-tree`)."""
    single = typer.Typer(**APP_SETTINGS)
    lines = [line.replace("specscope optimize-tree", "optimize-tree")
             for line in OPTIMIZE_TREE_EXAMPLE]
    single.command(cls=Command, epilog=example(*lines))(predict.optimize_tree)
    _run(typer.main.get_command(single), "optimize-tree", argv, "optimize-tree")
