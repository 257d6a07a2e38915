"""What every command checks before it runs: each number finite and in its range, each output
path writable without loss (`specscope.outputs`). One pass over the options a command declares,
so a new option with a `Range` or `Output` mark is checked like the others."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from typer.core import TyperCommand, TyperOption

from specscope.errors import InputError
from specscope.outputs import check_output


@dataclass(frozen=True)
class Range:
    """Marks a number option (in its `Annotated[...]`) with its physical range: above `low`
    (or at it, when `low_closed`) and at most `high`."""

    low: float | None = None
    high: float | None = None
    low_closed: bool = True

    def check(self, value: float, option: str) -> None:
        """One `InputError` line when `value` lies outside the range."""
        below = self.low is not None and (value < self.low if self.low_closed
                                          else value <= self.low)
        if below or (self.high is not None and value > self.high):
            raise InputError(f"{option} {value:g}: must be {self.describe()}")

    def describe(self) -> str:
        """`> 0`, `>= 1`, `in [0, 1]`."""
        if self.low is not None and self.high is not None:
            return f"in {'[' if self.low_closed else '('}{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f"{'>=' if self.low_closed else '>'} {self.low:g}"
        return f"<= {self.high:g}"


@dataclass(frozen=True)
class Output:
    """Marks an output path option: checked before the command runs against the input options
    named in `inputs`, with the command's `--force`. `folder`: a folder the command writes
    files in; `resumes`: an existing file is extended, not replaced (a sweep)."""

    inputs: tuple[str, ...] = ()
    folder: bool = False
    resumes: bool = False


def check_options(command: TyperCommand, params: dict[str, Any]) -> None:
    """Refuse, before any work, a non-finite number, a number outside its `Range`, and an
    output path that `check_output` refuses."""
    declared = inspect.signature(inspect.unwrap(command.callback), eval_str=True).parameters
    for param in command.params:
        value = params.get(param.name)
        if value is None or not isinstance(param, TyperOption):
            continue
        option = max(param.opts, key=len)
        marks = get_args(declared[param.name].annotation)[1:]
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{option} {value}: must be a finite number")
        for mark in marks:
            if isinstance(mark, Range):
                mark.check(value, option)
            elif isinstance(mark, Output):
                inputs = [Path(params[name]) for name in mark.inputs
                          if params.get(name) is not None]
                check_output(Path(value), option, inputs=inputs,
                             force=bool(params.get("force")), folder=mark.folder,
                             resumes=mark.resumes)

