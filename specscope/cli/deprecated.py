"""Old option spellings, kept working for one release: the one table of them and the rewrite of a
command line to the current spelling, applied before click parses it (`cli._run`).

Every command names one concept one way (docs/glossary.md): the target is `--target`, who drafts
is `--drafter`, the serving stack is `--engine`, output tokens per request are `--output-len`.
An option renamed to get there keeps its old spelling here until `REMOVED_IN`: the old spelling
is rewritten to the new one and one line on stderr says so. Old spellings are not options of
the commands, so `--help` never shows them.
"""

from __future__ import annotations

from typer.core import TyperCommand, TyperGroup, TyperOption

REMOVED_IN = "0.2"
"""The release that drops the spellings of `DEPRECATED`."""

DEPRECATED: dict[tuple[str, str], str] = {
    ("cost", "--model"): "--target",
    ("cost", "--draft"): "--drafter",
    ("generate", "--model"): "--target",
    ("adapt", "--model"): "--target",
    ("validate", "--model"): "--target",
    ("collect", "--model"): "--target",
    ("serve-bench", "--model"): "--target",
    ("trace import", "--model"): "--target",
    ("generate", "--max-new"): "--output-len",
    ("adapt", "--max-new"): "--output-len",
    ("collect", "--max-new"): "--output-len",
    ("collect", "--drafters"): "--drafter",
    ("adapt", "--draft-model"): "--drafter",
    ("sweep", "--engine"): "--backend",
    ("export", "--engine"): "--to",
    ("optimize-tree", "--export"): "--to",
    ("demo", "--out"): "--output",
    ("zoo train", "--out"): "--output",
}
"""(command path, old option) → the option that replaced it. A command path is the words after
`specscope` (`cost`, `trace import`); the `optimize-tree` script's is `optimize-tree`."""


def command_path(group: TyperGroup | TyperCommand, argv: list[str]
                 ) -> tuple[str, TyperCommand | None, int]:
    """The command `argv` runs under `group`: its path (`trace import`), the command (None when
    `argv` names none) and the index in `argv` where its own arguments start."""
    words: list[str] = []
    command: TyperGroup | TyperCommand = group
    i = 0
    while isinstance(command, TyperGroup):
        while i < len(argv) and argv[i].startswith("-"):  # the group's own options
            i += 1
        if i == len(argv) or argv[i] not in command.commands:
            return " ".join(words), None, i
        words.append(argv[i])
        command = command.commands[argv[i]]
        i += 1
    return " ".join(words), command, i


def rewrite(path: str, command: TyperCommand, args: list[str]) -> tuple[list[str], list[str]]:
    """`args` (a command's own arguments) with every deprecated spelling of `path`'s options in
    `DEPRECATED` replaced by its successor (`--old value` and `--old=value`), and one warning
    per spelling used. An entry applies only once the command has the new option and not the
    old one, so the table may name a rename before it lands. Values of options are never
    rewritten, nor anything after `--`."""
    options = {opt: param for param in command.params if isinstance(param, TyperOption)
               for opt in (*param.opts, *param.secondary_opts)}
    renamed = {old: new for (where, old), new in DEPRECATED.items()
               if where == path and old not in options and new in options}
    out: list[str] = []
    warned: list[str] = []
    tokens = iter(args)
    for token in tokens:
        if token == "--":
            out += [token, *tokens]
            break
        name, eq, value = token.partition("=")
        if name in renamed:
            new = renamed[name]
            line = (f"{path} {name} is deprecated; use {new} (removed in {REMOVED_IN})")
            if line not in warned:
                warned.append(line)
            name = new
            token = f"{name}{eq}{value}"
        out.append(token)
        param = options.get(name)
        if param is not None and not eq and not param.is_flag and param.nargs != 0:
            following = next(tokens, None)  # the option's value, never an option itself
            if following is not None:
                out.append(following)
    return out, warned


def upgrade(group: TyperGroup | TyperCommand, argv: list[str], path: str = ""
            ) -> tuple[list[str], list[str]]:
    """`argv` for `group` (the `specscope` app, or a single command such as the `optimize-tree`
    script, whose path is `path`) in current spellings, and the warnings to print."""
    if isinstance(group, TyperGroup):
        path, command, start = command_path(group, argv)
    else:
        command, start = group, 0
    if command is None:
        return argv, []
    args, warned = rewrite(path, command, argv[start:])
    return [*argv[:start], *args], warned
