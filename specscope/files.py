"""Reading the user's JSON and TOML files: whatever is wrong with one (missing, a folder,
unreadable, not UTF-8, not JSON or TOML, not a table) is one `InputError` line that names it.
What the file must hold is checked by its reader."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from specscope.errors import InputError, first_line


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of `path`, a `what` ("tree file", "sweep config")."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text (a {what} is expected)") from None
    except OSError as exc:
        raise unreadable(path, what, exc) from None


def unreadable(path: Path, what: str, exc: OSError) -> InputError:
    """The one line of `path`, a `what`, failing to open or read with `exc`."""
    if isinstance(exc, FileNotFoundError):
        return InputError(f"{path}: no such {what}")
    if isinstance(exc, IsADirectoryError):
        return InputError(f"{path}: a folder, not a {what}")
    return InputError(f"{path}: cannot read ({first_line(exc)})")


def read_json(path: Path, what: str) -> Any:
    """The JSON value in `path`, a `what`."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:  # an integer of more digits than Python converts (4,300)
        raise InputError(f"{path}: not JSON we can read ({first_line(exc).split(';')[0]})"
                         ) from None


MAX_LINE = 1 << 16
"""Bytes of a line `text_lines` reads at most: the rest of a longer line is skipped unread."""


def text_lines(path: Path, what: str, max_line: int = MAX_LINE
               ) -> Iterator[tuple[int, str, bool]]:
    """(line number from 1, text without its newline, whether whole) of each line of `path`, a
    `what`, read one line at a time: memory stays bounded by `max_line` whatever the file's
    size. A line longer than `max_line` bytes gives its first `max_line` bytes, marked not
    whole. A line that is not UTF-8 is an `InputError` naming it."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise unreadable(path, what, exc) from None
    with handle:
        number = 0
        while True:
            try:
                raw = handle.readline(max_line)
            except OSError as exc:  # a folder opens, and fails here
                raise unreadable(path, what, exc) from None
            if not raw:
                return
            number += 1
            whole = raw.endswith(b"\n") or len(raw) < max_line
            if not whole:  # skip the rest of the line, a chunk at a time
                rest = raw
                while rest and not rest.endswith(b"\n"):
                    rest = handle.readline(max_line)
            try:
                text = raw.decode("utf-8") if whole else raw.decode("utf-8", "replace")
            except UnicodeDecodeError:
                raise InputError(f"{path}: line {number}: not UTF-8 text (a {what} is "
                                 "expected)") from None
            yield number, text.rstrip("\r\n"), whole


def known_keys(table: Mapping[str, Any], known: Sequence[str], where: str,
               what: str = "key") -> None:
    """Refuse the first key of `table` that is not in `known` (a typo would otherwise be
    dropped without a word), naming it and the known ones; `where` prefixes the line ("path: ",
    "path: [section] "), `what` names the thing ("key", "key or table")."""
    unknown = [key for key in table if key not in known]
    if unknown:
        raise InputError(f"{where}unknown {what} {unknown[0]!r}; known: {', '.join(known)}")


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """The TOML table in `path`, a `what`."""
    return parse_toml(read_text(path, what), path)


def parse_toml(text: str, path: Path) -> dict[str, Any]:
    """The TOML table in `text`, read from `path`."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({first_line(exc)})") from None
    except RecursionError:
        raise InputError(f"{path}: TOML nested too deeply") from None
