"""Atomic file writes: write to a temporary file in the same folder, then rename over the target."""

from __future__ import annotations

import inspect
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


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


def write_parquet_atomic(path: str | Path, frame: Any, metadata: Mapping[str, str] | None = None
                         ) -> Path:
    """Write the polars DataFrame `frame` to `path` as parquet atomically, with key-value
    `metadata`. polars writes it where its `write_parquet` takes `metadata` (polars ≥ 1.30);
    with an older polars (the 1.x the GPU runbook carries), pyarrow writes the same table with
    the same compression."""
    if not metadata:
        return write_atomic(path, lambda tmp: frame.write_parquet(tmp))
    if "metadata" in inspect.signature(frame.write_parquet).parameters:
        return write_atomic(path, lambda tmp: frame.write_parquet(tmp, metadata=dict(metadata)))
    import pyarrow.parquet as pq

    table = frame.to_arrow()
    merged = {**(table.schema.metadata or {}), **{k.encode(): v.encode()
                                                  for k, v in metadata.items()}}
    return write_atomic(path, lambda tmp: pq.write_table(table.replace_schema_metadata(merged),
                                                         tmp, compression="zstd"))
