"""Trace schema v1: the `Trace` type, parquet read/write and validation.

A trace has one row per (request, generated position, drafter source);
docs/architecture.md#trace-schema gives the columns. Validation errors are one-line `InputError`s
naming the file, the column and the first bad row, counted from 0 in file order. A file without
the metadata that says what it is (rewritten by a tool that drops parquet key-value metadata)
reads as version 1 at temperature 0, with one warning saying so; its target is unnamed, so
pricing it needs --target.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from specscope import __version__
from specscope.atomic import write_parquet_atomic
from specscope.errors import InputError, first_line, warn
from specscope.json_out import strict_json

SCHEMA_VERSION = 1

SCHEMA: dict[str, pl.DataType] = {
    "request_id": pl.UInt32(),
    "pos": pl.UInt32(),
    "context_len": pl.UInt32(),
    "token": pl.Int32(),
    "target_prob": pl.Float32(),
    "source": pl.String(),
    "cand_tokens": pl.List(pl.Int32()),
    "cand_scores": pl.List(pl.Float32()),
    "cand_target_probs": pl.List(pl.Float32()),
    "rank": pl.Int16(),
    "proposal": pl.List(pl.Int32()),
    "match_len": pl.Int16(),
}
"""Column name → polars dtype of schema version 1, in file order."""

KEY = ("request_id", "pos", "source")

_MAGIC = b"PAR1"


@dataclass(frozen=True, eq=False)
class Trace:
    """A validated trace: the rows (`df`, schema v1) and the file's key-value `metadata`.

    `metadata` holds JSON values: schema_version, target_model, temperature, drafters and their
    settings, prompt_set, K, specscope_version. `path` is the file it came from, if any.
    """

    df: pl.DataFrame
    metadata: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def name(self) -> str:
        """The file name for messages, or "trace" for an in-memory trace."""
        return str(self.path) if self.path is not None else "trace"

    @property
    def temperature(self) -> float:
        """Target sampling temperature the trace was collected at (0 = greedy)."""
        return float(self.metadata.get("temperature", 0.0))

    @property
    def target(self) -> str | None:
        """Target model name from the metadata, if recorded."""
        name = self.metadata.get("target_model")
        return None if name is None else str(name)

    @property
    def mean_context_len(self) -> float:
        """Mean context length over the rows (tokens)."""
        return float(self.df.get_column("context_len").mean())


def trace_sources(trace: Trace) -> list[str]:
    """Drafter sources in the trace, in order of first appearance."""
    return trace.df.get_column("source").unique(maintain_order=True).to_list()


def sequence_sources(trace: Trace) -> list[str]:
    """Sources with at least one non-empty `proposal` (multi-token sequence drafters)."""
    seq = (
        trace.df.group_by("source", maintain_order=True)
        .agg((pl.col("proposal").list.len().max() > 0).alias("seq"))
        .filter(pl.col("seq"))
    )
    return seq.get_column("source").to_list()


# ---- files ---------------------------------------------------------------------------------


def read_trace(path: str | Path) -> Trace:
    """Read and validate a schema-v1 trace parquet file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such trace file")
    _check_magic(path)
    # pyarrow reports a corrupt file as an exception; polars' reader may panic and print to stderr
    try:
        parquet = pq.ParquetFile(path)
        df = pl.from_arrow(parquet.read())
    except (pa.ArrowException, pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable parquet file ({first_line(exc)})") from None
    raw = {k.decode(): v.decode() for k, v in (parquet.metadata.metadata or {}).items()}
    metadata = {k: _decode(v) for k, v in raw.items() if not k.startswith("ARROW:")}
    validate(df, path, metadata)
    missing = [k for k in ("schema_version", "temperature") if k not in metadata]
    if missing:
        warn(f"{path}: its metadata has no {' or '.join(missing)} (a tool that rewrote the file "
             f"dropped it?): read as schema version {SCHEMA_VERSION} at temperature "
             f"{metadata.get('temperature', 0.0):g}")
    return Trace(df, metadata, path)


def write_trace(trace: Trace, path: str | Path) -> Path:
    """Validate `trace` and write it atomically as parquet; metadata gains schema and version."""
    path = Path(path)
    metadata = {
        "schema_version": SCHEMA_VERSION,
        **trace.metadata,
        "specscope_version": __version__,
    }
    validate(trace.df, path, metadata)
    strict_json(metadata, None)  # a non-finite value is refused naming its key
    encoded = {k: strict_json(v, None) for k, v in metadata.items()}
    return write_parquet_atomic(path, trace.df, encoded)


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _check_magic(path: Path) -> None:
    with path.open("rb") as f:
        head = f.read(4)
        size = f.seek(0, 2)
        f.seek(max(size - 4, 0))
        tail = f.read(4)
    if head != _MAGIC:
        raise InputError(f"{path}: not a parquet file (no PAR1 header)")
    if size < 12 or tail != _MAGIC:
        raise InputError(f"{path}: truncated parquet file (no PAR1 footer; {size} bytes)")


# ---- validation ----------------------------------------------------------------------------


def validate(df: pl.DataFrame, path: str | Path, metadata: Mapping[str, Any] | None = None) -> None:
    """Check `df` (and `metadata`, when given) against schema v1; raise InputError at the first
    problem, naming `path`, the column and the first bad row."""
    if metadata is not None:
        _check_metadata(metadata, path)
    if df.height == 0:
        raise InputError(f"{path}: empty trace (0 rows)")
    for col, dtype in SCHEMA.items():
        if col not in df.columns:
            raise InputError(f"{path}: column {col!r} is missing (schema v{SCHEMA_VERSION})")
        if df.schema[col] != dtype:
            raise InputError(f"{path}: column {col!r} has type {df.schema[col]}, expected {dtype}")
    checks = _row_checks()
    first = df.select(e.arg_true().first().alias(str(i)) for i, (_, e, _) in enumerate(checks))
    for i, (col, _, what) in enumerate(checks):
        row = first.item(0, i)
        if row is not None:
            value = _short(df.select(col.split(",")).row(row))
            raise InputError(f"{path}: column {col!r}, row {row}: {what} (value {value})")


def _check_metadata(metadata: Mapping[str, Any], path: str | Path) -> None:
    # Tools that rewrite parquet (pyarrow's read_table/write_table, pandas) drop key-value
    # metadata; such a file is read as version 1, its columns being checked all the same.
    version = metadata.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise InputError(
            f"{path}: metadata 'schema_version' is {version!r}; this specscope reads version "
            f"{SCHEMA_VERSION}"
        )
    temperature = metadata.get("temperature", 0.0)
    if not isinstance(temperature, int | float) or not temperature >= 0:
        raise InputError(
            f"{path}: metadata 'temperature' must be a number ≥ 0, got {temperature!r}"
        )
    k = metadata.get("K", 1)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InputError(f"{path}: metadata 'K' must be an integer ≥ 1, got {k!r}")


def _row_checks() -> list[tuple[str, pl.Expr, str]]:
    """(column, expression true on a bad row, what is wrong) in reporting order."""

    def bad_prob(e: pl.Expr) -> pl.Expr:
        return e.is_nan() | (e < 0) | (e > 1)

    def bad_probs(col: str) -> pl.Expr:
        return pl.col(col).list.eval(bad_prob(pl.element())).list.any()

    n_cand = pl.col("cand_tokens").list.len()
    rank = pl.col("rank")
    ranked_token = pl.col("cand_tokens").list.get(rank.cast(pl.Int64), null_on_oob=True)
    checks: list[tuple[str, pl.Expr, str]] = [
        (c, pl.col(c).is_null(), "null value") for c in SCHEMA
    ]
    checks += [
        (c, pl.col(c).list.eval(pl.element().is_null()).list.any(), "null list element")
        for c, t in SCHEMA.items()
        if isinstance(t, pl.List)
    ]
    checks += [
        ("target_prob", bad_prob(pl.col("target_prob")), "NaN or outside [0, 1]"),
        ("cand_scores", bad_probs("cand_scores"), "an entry is NaN or outside [0, 1]"),
        ("cand_target_probs", bad_probs("cand_target_probs"), "an entry is NaN or outside [0, 1]"),
        (
            "cand_scores",
            pl.col("cand_scores").list.len() != n_cand,
            "length differs from cand_tokens in the same row",
        ),
        (
            "cand_target_probs",
            pl.col("cand_target_probs").list.len() != n_cand,
            "length differs from cand_tokens in the same row",
        ),
        ("rank", (rank < -1) | (rank >= n_cand), "outside [-1, len(cand_tokens))"),
        ("rank", (rank >= 0) & (ranked_token != pl.col("token")), "cand_tokens[rank] != token"),
        (
            "rank",
            (rank == -1) & pl.col("cand_tokens").list.contains(pl.col("token")),
            "is -1 but token is among cand_tokens",
        ),
        (
            "match_len",
            (pl.col("match_len") < 0) | (pl.col("match_len") > pl.col("proposal").list.len()),
            "outside [0, len(proposal)]",
        ),
        (",".join(KEY), ~pl.struct(KEY).is_first_distinct(), "duplicate (request_id, pos, source)"),
    ]
    checks += [
        (
            c,
            pl.col(c).n_unique().over("request_id", "pos") > 1,
            "differs between sources at the same (request_id, pos)",
        )
        for c in ("token", "context_len")
    ]
    return checks


def _short(values: tuple[Any, ...], width: int = 60) -> str:
    """The bad row's value(s), floats to 4 significant digits, cut to `width` characters."""

    def fmt(v: Any) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        return f"{v:.4g}" if isinstance(v, float) else repr(v)

    text = ", ".join(fmt(v) for v in values)
    return text if len(text) <= width else text[: width - 3] + "..."
