"""Where a sweep's rows go: part files while it runs, one table when it ends.

While a sweep runs, every finished batch of cells is one parquet file in `<output>.parts/`,
written atomically (a temporary file renamed into place), so a kill at any moment loses only the
batches in flight and never leaves a half-written file. At the end the parts and any earlier
table are consolidated into `<output>` (rows of this config's cells, one per key, sorted by key),
written atomically, and the parts are removed. A crash between the two leaves rows in both
places; they are the same rows, and the next run keeps one of each.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection, Mapping
from pathlib import Path

import polars as pl

from specscope.atomic import write_atomic, write_parquet_atomic
from specscope.errors import InputError
from specscope.sweeps.cells import DEPLOYMENT_DEFAULTS
from specscope.sweeps.evaluate import SCHEMA


class ResultStore:
    """The results table at `path` and its parts folder `path.parts/`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.parts = self.path.with_name(self.path.name + ".parts")
        self._written = 0

    def load(self) -> pl.DataFrame:
        """Every finished row on disk (the table, then the parts), one per key."""
        frames = [self._read(self.path)] if self.path.exists() else []
        if self.parts.is_dir():
            for leftover in self.parts.glob(".*.tmp"):  # a write killed before its rename
                leftover.unlink(missing_ok=True)
            frames += [self._read(p) for p in sorted(self.parts.glob("part-*.parquet"))]
        if not frames:
            return pl.DataFrame(schema=SCHEMA)
        return pl.concat(frames).unique("key", keep="first", maintain_order=True)

    def append(self, rows: pl.DataFrame, run_id: str) -> None:
        """Write `rows` as the next part file of run `run_id`, atomically."""
        if rows.is_empty():
            return
        self._written += 1
        part = self.parts / f"part-{run_id}-{self._written:06d}.parquet"
        write_atomic(part, lambda tmp: rows.write_parquet(tmp))

    def finish(self, keys: Collection[str], metadata: Mapping[str, str]) -> pl.DataFrame:
        """Consolidate into the table: the rows of `keys`, sorted by key, with `metadata` in the
        parquet key-value metadata; then remove the parts."""
        wanted = pl.Series("key", list(keys), dtype=pl.String)
        table = self.load().filter(pl.col("key").is_in(wanted.implode())).sort("key")
        write_parquet_atomic(self.path, table, metadata)
        shutil.rmtree(self.parts, ignore_errors=True)
        return table

    def _read(self, path: Path) -> pl.DataFrame:
        """A table or part file with the sweep schema; anything else is an `InputError` (so a
        sweep never overwrites a file it did not write). A table written before the deployment
        axes (ep, precision, expert_precision, kv_bits) holds their defaults."""
        try:
            frame = pl.read_parquet(path)
        except Exception as exc:  # polars raises several kinds for a file that is not parquet
            raise InputError(f"{path}: not a parquet file ({type(exc).__name__})") from None
        frame = frame.with_columns(pl.lit(v, SCHEMA[c]).alias(c)
                                   for c, v in DEPLOYMENT_DEFAULTS.items()
                                   if c not in frame.columns)
        missing = [c for c in SCHEMA if c not in frame.columns]
        if missing:
            raise InputError(f"{path}: not a sweep results table (no column {missing[0]!r}); "
                             "choose another -o")
        return frame.select(pl.col(c).cast(t) for c, t in SCHEMA.items())
