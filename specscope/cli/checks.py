"""What every command checks before it runs: no empty value, each choice one of its set, each
number finite and in its range, no option without the option it needs, each output path
writable without loss (`specscope.outputs`). One pass over the options a command declares,
so a new option with a `Range` or `Output` mark is checked like the others."""

from __future__ import annotations

import importlib
import inspect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from typer.core import TyperCommand, TyperOption

from specscope.cli.compat import Context, ParameterSource
from specscope.errors import InputError
from specscope.outputs import check_output


@dataclass(frozen=True)
class Choices:
    """Marks an option (in its `Annotated[...]`) whose values are a fixed set the library defines:
    `source` names the constant ("module:NAME", a tuple or a dict's keys), `extra` adds values
    the command itself takes (`all`), `many` says it takes a comma-separated list, `files` a
    file suffix it takes too (an engine's `.toml`). Help lists the values (`--runtime
    [eager|graph|compile]`) and `check_options` refuses others, importing `source` only then."""

    source: str
    extra: tuple[str, ...] = ()
    many: bool = False
    files: str = ""

    def values(self) -> list[str]:
        """The values the option takes."""
        module, name = self.source.split(":")
        return [*(str(v) for v in getattr(importlib.import_module(module), name)), *self.extra]

    def metavar(self) -> str:
        """`[a|b|c]`, or `[a|b|c],...` for a list."""
        listed = f"[{'|'.join([*self.values(), *([f'FILE{self.files}'] if self.files else [])])}]"
        return f"{listed},..." if self.many else listed

    def check(self, value: object, option: str) -> None:
        """One `InputError` line naming a value that is not one of `values`."""
        known = self.values()
        items = list(value) if isinstance(value, list | tuple) else [value]
        given = [v.strip() for item in items for v in
                 (str(item).split(",") if self.many else [str(item)])]
        unknown = [v for v in given if v not in known
                   and not (self.files and v.endswith(self.files))] or (
            [] if any(given) else [""])
        if unknown:
            raise InputError(f"{option} {unknown[0]}: not one of {', '.join(known)}")


@dataclass(frozen=True)
class DrafterOrModel(Choices):
    """Marks a `--drafter` that takes a drafter kind (`source`) or a draft model: a zoo model or
    a Hugging Face folder, which means kind `draft` running that model (`--drafter
    tiny-code-draft` is `--drafter draft --draft-model tiny-code-draft`). `resolve` turns the
    model into the kind and the command's `model` parameter before any other check, so
    `--draft-model`'s `Needs`, the library and the run's report see kind and model apart."""

    model: str = "draft_model"
    kind: str = "draft"

    def metavar(self) -> str:
        """`[draft|ngram|...|MODEL]`, or `[...],...` for a list."""
        listed = f"[{'|'.join([*self.values(), 'MODEL'])}]"
        return f"{listed},..." if self.many else listed

    def resolve(self, params: dict[str, Any], name: str, flags: dict[str, str]) -> None:
        """Rewrite the value given to parameter `name` in `params`: each draft model named
        becomes the kind `draft` and fills `params[self.model]`; a value that is neither a
        kind nor a model is refused, naming both."""
        from specscope.models.zoo import zoo_specs

        known = self.values()
        given = [v.strip() for v in (str(params[name]).split(",") if self.many
                                     else [str(params[name])])]
        models = [v for v in given if v not in known]
        zoo = sorted(zoo_specs())
        for value in models:
            if not value or (value not in zoo and not _names_a_folder(value)):
                raise InputError(f"{flags[name]} {value or repr(value)}: not a drafter "
                                 f"({', '.join(known)}) nor a draft model (a zoo model: "
                                 f"{', '.join(zoo)}, or a Hugging Face folder)")
        if not models:
            return
        named = params.get(self.model)
        if len(set(models)) > 1 or (named is not None and named != models[0]):
            others = sorted({*models, *([] if named is None else [named])})
            raise InputError(f"{flags[name]}: one draft model per run, got "
                             f"{' and '.join(others)}")
        kinds = [self.kind if v in models else v for v in given]
        params[name] = ",".join(dict.fromkeys(kinds))
        params[self.model] = models[0]


def _names_a_folder(value: str) -> bool:
    """Whether `value` names a local folder rather than a zoo model, as the loader reads it
    (`executor.targets.load_model`): it exists, or it has a path's marks."""
    return Path(value).exists() or any(mark in value for mark in ("/", "\\", "~"))


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


@dataclass(frozen=True)
class Needs:
    """Marks an option that only means something when the command's option `option` (the
    first of these names it has) takes one of `values` (`--draft-model` with a drafter that
    runs one), or, with no `values`, when that flag is set (`--policies` with `--load`): given
    otherwise, it is refused rather than silently ignored."""

    option: tuple[str, ...]
    values: tuple[str, ...]

    def check(self, params: dict[str, Any], given: str, flags: dict[str, str]) -> None:
        """One `InputError` line when the option `given` was given without its partner
        (`flags`: each parameter's option as typed, `--from` for `source_format`). With no
        `values`, every one of `option` the command has is a partner flag, any of them set
        enough (`--max-batch` with `--rate` or `--schedule`)."""
        if not self.values:
            names = [n for n in self.option if n in params]
            if not any(params[n] for n in names):
                partners = " or ".join(flags.get(n, f"--{n.replace('_', '-')}") for n in names)
                raise InputError(f"{given} is used with {partners} only")
            return
        name = next(n for n in self.option if n in params)
        chosen = params[name]
        flag = flags.get(name, f"--{name.replace('_', '-')}")
        chosen = set() if chosen is None else {v.strip() for v in str(chosen).split(",")}
        if not chosen & set(self.values):
            raise InputError(f"{given} is used with {flag} {' or '.join(self.values)} only; "
                             f"{flag} {','.join(sorted(chosen)) or 'is unset'} runs without it")


@dataclass(frozen=True)
class Excludes:
    """Marks an option the command ignores when any of its flags `option` is set (`--rate`
    with `optimize-tree --schedule`): given with one, it is refused rather than silently
    ignored."""

    option: tuple[str, ...]

    def check(self, params: dict[str, Any], given: str, flags: dict[str, str]) -> None:
        """One `InputError` line naming `given` and the first of `option` that is set."""
        for name in self.option:
            if params.get(name):
                flag = flags.get(name, f"--{name.replace('_', '-')}")
                raise InputError(f"{given} is not used with {flag}: give one of them")


def declared(command: TyperCommand) -> dict[str, tuple[Any, ...]]:
    """Each parameter of `command`'s function: (its type, its `Annotated` marks after the
    typer option: `Choices`, `Range`, `Needs`, `Excludes`, `Output`)."""
    signature = inspect.signature(inspect.unwrap(command.callback), eval_str=True)
    out = {}
    for name, parameter in signature.parameters.items():
        kind, *marks = get_args(parameter.annotation) or (parameter.annotation,)
        out[name] = (kind, *marks[1:])
    return out


def check_options(command: TyperCommand, ctx: Context) -> None:
    """Refuse, before any work, an empty value, a value outside its `Choices`, a non-finite
    number, a number outside its `Range`, an option given without the option it `Needs` or with
    one it `Excludes`, and an output path that `check_output` refuses."""
    params = ctx.params
    marks_of = declared(command)
    flags = {p.name: max(p.opts, key=len) for p in command.params if isinstance(p, TyperOption)}
    for name, (_, *marks) in marks_of.items():  # a draft model given as --drafter, first
        for mark in marks:
            if (isinstance(mark, DrafterOrModel) and params.get(name) is not None
                    and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE):
                mark.resolve(params, name, flags)
    for param in command.params:
        value = params.get(param.name)
        if value is None or not isinstance(param, TyperOption):
            continue
        option = max(param.opts, key=len)
        marks = marks_of[param.name][1:]
        given = ctx.get_parameter_source(param.name) == ParameterSource.COMMANDLINE
        if given and isinstance(value, str) and not value.strip():
            raise InputError(f"{option}: empty value")
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{option} {value}: must be a finite number")
        for mark in marks:
            if isinstance(mark, Choices) and given:
                mark.check(value, option)
            elif isinstance(mark, Needs | Excludes) and given:
                mark.check(params, option, flags)
            elif isinstance(mark, Range):
                mark.check(value, option)
            elif isinstance(mark, Output):
                inputs = [Path(params[name]) for name in mark.inputs
                          if params.get(name) is not None]
                check_output(Path(value), option, inputs=inputs,
                             force=bool(params.get("force")), folder=mark.folder,
                             resumes=mark.resumes)

