"""Reading the user's JSON and TOML files: whatever is wrong with one (missing, a folder,
unreadable, not UTF-8, not JSON or TOML, not a table) is one `InputError` line that names it.
What the file must hold is checked by its reader."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from specscope.errors import InputError, first_line


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of `path`, a `what` ("tree file", "sweep config")."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: a folder, not a {what}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text (a {what} is expected)") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({first_line(exc)})") from None


def read_json(path: Path, what: str) -> Any:
    """The JSON value in `path`, a `what`."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply") from None


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
