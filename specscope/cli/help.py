"""The command class: help that reads like click's own (plain text, every option's value named:
`--hw NAME`, `--rate REQ/S`, `-o PATH`; fixed sets listed from the library: `--runtime
[eager|graph|compile]`; flags bare: `--json`; an example under each command), and the checks of
`cli/checks.py` before the command runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import typer
from typer.core import TyperArgument, TyperCommand, TyperOption

from specscope.cli.checks import Choices, check_options, declared
from specscope.errors import missing_extra

if TYPE_CHECKING:
    from typer._click import HelpFormatter

APP_SETTINGS: dict[str, Any] = {
    "rich_markup_mode": None,  # click's plain formatting: no panels, no markup, no emoji
    "context_settings": {"max_content_width": 100},
    "pretty_exceptions_enable": False,
    "add_completion": False,
}
"""Settings of every Typer app."""
METAVARS = {
    "--prompts": "PROMPTS", "--acceptance": "P1,P2,..|FILE", "--budgets": "N,N,...",
    "--drift": "X,X,...", "--sources": "NAME,...", "--prompt-len": "DIST", "--output-len": "DIST",
    "--address": "ADDR", "--rate": "REQ/S", "--link-gbps": "GBIT/S", "--link-us": "USEC",
    "--slo-tpot-ms": "MS", "--minutes": "MIN", "--temperature": "T", "--cv": "CV",
    "--ets-kv-penalty": "LAMBDA", "--ets-coverage": "LAMBDA", "--specdecpp-threshold": "H",
}
"""Values named by option, where the type's name (`BY_TYPE`) says too little."""
BY_TYPE = {int: "N", float: "X", str: "NAME", Path: "PATH"}


def name_metavars(command: TyperCommand) -> None:
    """Name the value of each option of `command` that has no metavar yet: the values it declares
    with `Choices` (their module imported now), else `METAVARS`, else its type (`BY_TYPE`).
    Arguments are named in capitals (`CONFIG`), flags stay bare."""
    marks_of = declared(command)
    for param in command.params:
        if isinstance(param, TyperArgument):
            param.metavar = param.metavar or param.name.upper()
        if not isinstance(param, TyperOption) or param.is_flag or param.metavar is not None:
            continue
        kind, *marks = marks_of[param.name]
        choices = [m for m in marks if isinstance(m, Choices)]
        if choices:
            param.metavar = choices[0].metavar()
        else:
            kind = next(k for k in (*get_args(kind), kind) if k is not type(None))  # X | None
            param.metavar = METAVARS.get(max(param.opts, key=len), BY_TYPE.get(kind, "VALUE"))


class Command(TyperCommand):
    """A command whose options are checked before it runs (`check_options`) and whose help
    names its options' values (`name_metavars`) when it is shown, so that only `--help` imports
    the modules that define the choices."""

    context_class = typer.Context

    def invoke(self, ctx: typer.Context) -> Any:
        """Run the command once its options pass `check_options`; one that needs the executor
        extra where it is not installed stops with one line naming it (`missing_extra`)."""
        check_options(self, ctx)
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            name = " ".join(ctx.command_path.split()[1:]) or ctx.command_path
            if (error := missing_extra(exc, name)) is None:
                raise
            raise error from None

    def get_help(self, ctx: typer.Context) -> str:
        """The help text, values named."""
        name_metavars(self)
        return super().get_help(ctx)

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        """`[OPTIONS] CONFIG`: arguments by name, as click writes them."""
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [_name(p) for p in self._arguments()]

    def format_options(self, ctx: typer.Context, formatter: HelpFormatter) -> None:
        """Arguments by name (their type is in their help), then the options."""
        if arguments := self._arguments():
            with formatter.section("Arguments"):
                formatter.write_dl([(_name(p), p.help or "") for p in arguments])
        options = [p.get_help_record(ctx) for p in self.get_params(ctx)
                   if not isinstance(p, TyperArgument)]
        with formatter.section("Options"):
            formatter.write_dl([record for record in options if record is not None])

    def _arguments(self) -> list[TyperArgument]:
        return [p for p in self.params if isinstance(p, TyperArgument)]


def _name(argument: TyperArgument) -> str:
    return argument.metavar or argument.name.upper()


def example(*lines: str) -> str:
    """A command's epilog: `lines` under "Example:", kept as written (click's \\b)."""
    return "\b\nExample:\n" + "\n".join(f"  {line}" for line in lines)
