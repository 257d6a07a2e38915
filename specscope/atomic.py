"""Atomic file writes: write to a temporary file in the same folder, then rename over the target."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call `write(tmp_path)` and move the result to `path`; on any error nothing is left behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    tmp_path.chmod(0o666 & ~umask)  # mkstemp makes 0600; a written file gets the usual mode
    try:
        write(tmp_path)
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` to `path` atomically."""
    return write_atomic(path, lambda tmp: tmp.write_text(text))
