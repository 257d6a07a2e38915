"""Where results go, checked before any work starts.

A command that measures for minutes and then cannot write its result has lost the user's time;
one that writes over its own input, or over a file the user kept, has lost their data. So every
output path is checked up front: a folder where a file is meant (or a file where a folder is
meant), an output that is one of the command's inputs, an existing file that would be replaced
without `--force`, and a parent folder that cannot be created or written. The writes themselves
are atomic (`specscope.atomic`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from specscope.errors import InputError


def check_output(path: Path, option: str, *, inputs: Iterable[Path] = (), force: bool = False,
                 folder: bool = False, resumes: bool = False) -> None:
    """Refuse, as one `InputError` line naming `option`, an output `path` that cannot or must
    not be written. `folder`: the command writes a folder's files there; `resumes`: an existing
    file is the command's own earlier result, which it extends (a sweep), not replaces."""
    where = f"{option} {path}"
    if folder:
        if path.exists() and not path.is_dir():
            raise InputError(f"{where}: is a file; a folder is expected here")
    elif path.is_dir():
        raise InputError(f"{where}: is a folder; name a file to write")
    for source in inputs:
        if path.exists() and source.exists() and path.resolve() == source.resolve():
            raise InputError(f"{where}: is this command's input; name another file")
    if path.exists() and not (folder or resumes or force):
        raise InputError(f"{where}: exists; pass --force to replace it")
    _check_writable(path, where)


def check_folder_files(folder: Path, names: Iterable[str], option: str, force: bool) -> None:
    """Refuse to replace the files `names` inside `folder` without `force`."""
    existing = [name for name in names if (folder / name).exists()]
    if existing and not force:
        raise InputError(f"{option} {folder}: already holds {', '.join(existing)}; pass --force "
                         f"to replace {'them' if len(existing) > 1 else 'it'}")


def _check_writable(path: Path, where: str) -> None:
    """The nearest existing ancestor of `path` must be a folder this process can write in."""
    parent = path if path.is_dir() else path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{where}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{where}: cannot write in {parent} (permission denied)")
