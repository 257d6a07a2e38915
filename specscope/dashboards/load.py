"""Everything a results folder holds that the report can draw, recognised by content, not name.

Files are found recursively (hidden files, such as the temporary files of an atomic write, are
skipped) and recognised as:

- optimize-tree output (`--json` / `-o`): a JSON object with `hardware` and `results`;
- a bare tree (`Tree.to_json`, the demo's `best-tree.json`);
- a simulation: `simulate -o` metrics parquet (its summary in the file metadata; the time series
  and event log beside it are not drawn) or the `simulate --json` summary;
- a validation: `validate -o` parquet (one row per configuration) or the `validate --json`
  document (which also names the device; a parquet beside it is the same run);
- a validation under load: `validate --load -o` parquet (one row per policy × rate) or the
  `validate --load --json` document (which also names the setting; a parquet beside it of the
  same cells is the same run);
- a sweep (`specscope sweep`): a parquet of one row per cell with `hardware` and `speedup` or
  `throughput_tok_s` columns;
- a trace: schema-v1 parquet (`specscope collect`, `trace synth`);
- a benchmark with verification step times: `benchmarks/results/gpu_verify-*.json`;
- a hardware profile: a TOML with `[compute]` and `[memory]` tables (`profile-hw`);
- a paper scenario: a TOML of `[[case]]` tables (`examples/papers/`, `specscope reproduce`);
- the accuracy document (`specscope accuracy --json`): every published row predicted against
  published, and the committed validation runs.

A file that cannot be parsed is an `InputError` naming it; a parseable file of none of these
kinds is listed as ignored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from specscope.errors import InputError
from specscope.files import read_json, read_toml
from specscope.hw_profiles import HardwareProfile, load_profile
from specscope.hw_profiles.profile import DATA_DIR
from specscope.systems.case import Case
from specscope.systems.reproduce import read_cases
from specscope.trace import Trace, read_trace
from specscope.tree import Tree
from specscope.validate import load_report

SIDE_TABLES = (".timeseries.parquet", ".events.parquet")
"""Files `simulate -o` writes beside its metrics table."""
RESULT_KEYS = ("algo", "n", "depth", "expected_tokens", "step_time_ms", "tokens_per_s",
               "speedup", "tree")
"""Keys every `results` row of optimize-tree output has."""
VALIDATE_COLUMNS = ("config", "predicted_tokens_per_s", "measured_tokens_per_s")
ACCURACY_POINT_KEYS = ("name", "family", "engine", "hardware", "batch", "compared", "predicted",
                       "published", "rel_err")
"""What the accuracy figure reads of every published row (`validate.accuracy.Point`)."""
LOAD_SIDES = (("simulated", "sim_"), ("measured", "real_"))
"""The two sides of a `validate --load` cell and their column prefixes in its parquet."""
LOAD_KEYS = tuple(key for key, _ in load_report.METRICS.values())
"""Metrics every side of a `validate --load` cell has (`mean_batch` and `mean_accepted` may
be missing)."""

Run = TypeVar("Run", "ValidationRun", "LoadValidation")


@dataclass(frozen=True)
class Optimized:
    """One optimize-tree document (`OptimizeResult.to_dict`) and its file."""

    path: Path
    doc: dict[str, Any]

    @property
    def label(self) -> str:
        """Hardware, runtime, target and drafter source: what the trees were optimised for."""
        d = self.doc
        runtime = f" ({d['runtime']})" if d.get("runtime") else ""
        return f"{d['hardware']}{runtime} · {d.get('target', '?')} · {d.get('source', '?')}"


@dataclass(frozen=True)
class ValidationRun:
    """One validate run: a label (hardware and device where known) and one row per config."""

    path: Path
    label: str
    frame: pl.DataFrame


@dataclass(frozen=True)
class LoadValidation:
    """One `validate --load` run: a label (hardware, model and drafter where known), and its
    document: `cells` and the summaries of `load_report.summary` (computed from the cells for
    the parquet, which holds only them)."""

    path: Path
    label: str
    doc: dict[str, Any]

    @property
    def key(self) -> tuple[Path, frozenset[tuple[str, float]]]:
        """Folder and (policy, rate) of every cell: the same run in a JSON and a parquet."""
        return self.path.parent, frozenset((c["policy"], c["rate"]) for c in self.doc["cells"])


@dataclass
class Results:
    """What `load_results` found under `root`, by kind; `ignored` lists (file, why)."""

    root: Path
    optimized: list[Optimized] = field(default_factory=list)
    trees: list[tuple[Path, Tree]] = field(default_factory=list)
    simulations: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    validations: list[ValidationRun] = field(default_factory=list)
    load_validations: list[LoadValidation] = field(default_factory=list)
    sweeps: list[tuple[Path, pl.DataFrame]] = field(default_factory=list)
    traces: list[tuple[Path, Trace]] = field(default_factory=list)
    benchmarks: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    profiles: list[tuple[Path, HardwareProfile]] = field(default_factory=list)
    scenarios: list[Case] = field(default_factory=list)
    accuracy: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    ignored: list[tuple[Path, str]] = field(default_factory=list)

    def name(self, path: Path) -> str:
        """`path` relative to the results folder, for captions."""
        return str(path.relative_to(self.root))

    @property
    def used(self) -> int:
        """How many files were recognised."""
        return sum(len(x) for x in (self.optimized, self.trees, self.simulations,
                                    self.validations, self.load_validations, self.sweeps,
                                    self.traces, self.benchmarks, self.profiles,
                                    self.accuracy)
                   ) + len({c.where for c in self.scenarios})


def profiles(results: Results) -> list[tuple[str, HardwareProfile]]:
    """The folder's hardware profiles (by file), then every shipped one (by name)."""
    return [(results.name(p), prof) for p, prof in results.profiles] + [
        (p.stem, load_profile(p)) for p in sorted(DATA_DIR.glob("*.toml"))]


def load_results(root: str | Path) -> Results:
    """Read every recognised file under `root` (module docstring); `InputError` for a folder
    that does not exist, a malformed file, or a folder with nothing recognised."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: no such results folder")
    results = Results(root)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        if path.suffix == ".json":
            _json(path, results)
        elif path.suffix == ".parquet":
            _parquet(path, results)
        elif path.suffix == ".toml":
            _toml(path, results)
    results.validations = _beside_documents(
        results.validations, lambda v: (v.path.parent, v.frame.height), "validate", results)
    results.load_validations = _beside_documents(
        results.load_validations, lambda v: v.key, "validate --load", results)
    if not results.used:
        raise InputError(f"{root}: no results found (optimize-tree JSON, simulate metrics, "
                         "validate tables, sweep parquet, traces or benchmark JSON)")
    return results


def _json(path: Path, results: Results) -> None:
    doc = read_json(path, "JSON file")
    if not isinstance(doc, dict):
        results.ignored.append((path, "JSON that is not an object"))
    elif "results" in doc and "hardware" in doc:
        results.optimized.append(Optimized(path, _optimize_doc(doc, path)))
    elif {"parents", "ranks", "sources"} <= doc.keys():
        try:
            results.trees.append((path, Tree.from_dict(doc)))
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from None
    elif "throughput_tok_s" in doc and "policy" in doc:
        results.simulations.append((path, doc))
    elif "configs" in doc and "tokens_per_s" in doc:
        frame = _frame(doc["configs"], path, VALIDATE_COLUMNS)
        label = " · ".join(str(doc[k]) for k in ("hardware", "device", "runtime") if doc.get(k))
        results.validations.append(ValidationRun(path, label or path.stem, frame))
    elif "cells" in doc and "hardware" in doc:
        results.load_validations.append(_load_doc(doc, path))
    elif "provenance" in doc and "steps" in doc:
        results.benchmarks.append((path, doc))
    elif "published" in doc and "validation" in doc:
        results.accuracy.append((path, _accuracy_doc(doc, path)))
    elif "provenance" in doc:
        results.ignored.append((path, "benchmark without verification step times (not drawn)"))
    else:
        results.ignored.append((path, "JSON of no known kind"))


def _optimize_doc(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """The document, checked: every result row has the keys the figures read."""
    rows = doc["results"]
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{path}: optimize-tree output without results")
    for i, row in enumerate(rows):
        missing = [k for k in RESULT_KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            raise InputError(f"{path}: results[{i}] lacks {', '.join(missing)}")
        try:
            row["tree"] = Tree.from_dict(row["tree"])
        except InputError as exc:
            raise InputError(f"{path}: results[{i}].tree: {exc}") from None
    return doc


def _accuracy_doc(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """The accuracy document, checked: every published set has a name and rows with the keys
    the figure reads."""
    sets = doc["published"]
    if not isinstance(sets, list) or not sets:
        raise InputError(f"{path}: accuracy output without published sets")
    for i, s in enumerate(sets):
        points = s.get("points") if isinstance(s, dict) else None
        if not isinstance(points, list) or "set" not in s:
            raise InputError(f"{path}: published[{i}] lacks set or points")
        for j, point in enumerate(points):
            missing = [k for k in ACCURACY_POINT_KEYS
                       if not isinstance(point, dict) or k not in point]
            if missing:
                raise InputError(f"{path}: published[{i}].points[{j}] lacks "
                                 f"{', '.join(missing)}")
    return doc


def _frame(rows: object, path: Path, needed: tuple[str, ...]) -> pl.DataFrame:
    """Rows (a list of objects) as a table that has the `needed` columns."""
    try:
        frame = pl.DataFrame(rows, infer_schema_length=None)
    except (TypeError, ValueError, pl.exceptions.PolarsError) as exc:
        raise InputError(f"{path}: rows are not a table ({exc})") from None
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: rows lack the columns {', '.join(missing)}")
    return frame


def _parquet(path: Path, results: Results) -> None:
    try:
        file = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: not a readable parquet file ({exc})") from None
    columns, meta = set(file.schema_arrow.names), file.metadata.metadata or {}
    if path.name.endswith(SIDE_TABLES):
        results.ignored.append((path, "simulation time series / event log (not drawn)"))
    elif b"summary" in meta:
        try:
            summary = json.loads(meta[b"summary"])
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: metadata `summary` is not JSON ({exc})") from None
        results.simulations.append((path, summary))
    elif {"request_id", "pos", "source", "cand_tokens"} <= columns:
        results.traces.append((path, read_trace(path)))
    elif set(VALIDATE_COLUMNS) <= columns:
        results.validations.append(ValidationRun(path, _folder_label(path, results.root),
                                                 _read(path)))
    elif {"policy", "rate", "sim_throughput_tok_s", "real_throughput_tok_s"} <= columns:
        cells = _load_cells(_read(path), path)
        doc = {"cells": cells, **load_report.summary(cells)}
        results.load_validations.append(LoadValidation(path, _folder_label(path, results.root),
                                                       doc))
    elif "hardware" in columns and columns & {"speedup", "throughput_tok_s"}:
        results.sweeps.append((path, _read(path)))
    else:
        results.ignored.append((path, f"parquet of no known kind (columns {sorted(columns)[:6]}"
                                      f"{'…' if len(columns) > 6 else ''})"))


def ok_rows(sweep: pl.DataFrame) -> pl.DataFrame:
    """The cells of a sweep that ran (`status` "ok"; every row when there is no status)."""
    return sweep.filter(pl.col("status") == "ok") if "status" in sweep.columns else sweep


def analytic_cells(sweep: pl.DataFrame) -> pl.DataFrame:
    """The analytic cells of a sweep that ran, at its smallest batch (speculation's best case),
    with the optimize-tree names for tree size and depth (`n`, `depth`)."""
    if "speedup" not in sweep.columns:
        return pl.DataFrame()
    cells = ok_rows(sweep).filter(pl.col("speedup").is_not_null())
    if "batch" in cells.columns and cells.height:
        cells = cells.filter(pl.col("batch") == pl.col("batch").min())
    return cells.rename({k: v for k, v in (("tree_size", "n"), ("tree_depth", "depth"))
                         if k in cells.columns})


def _read(path: Path) -> pl.DataFrame:
    try:
        return pl.read_parquet(path)
    except (OSError, pa.ArrowException, pl.exceptions.PolarsError) as exc:
        raise InputError(f"{path}: not a readable parquet file ({exc})") from None


def _folder_label(path: Path, root: Path) -> str:
    """A validate table's run label: its folder under the results folder, else its file."""
    parent = path.parent.relative_to(root)
    return str(parent) if parent.parts else path.stem


def _toml(path: Path, results: Results) -> None:
    data = read_toml(path, "TOML file")
    if {"compute", "memory"} <= data.keys():
        results.profiles.append((path, load_profile(path)))
    elif isinstance(data.get("case"), list):
        results.scenarios.extend(read_cases(path))
    else:
        results.ignored.append((path, "TOML that is neither a hardware profile nor a scenario"))


def _load_doc(doc: dict[str, Any], path: Path) -> LoadValidation:
    """A `validate --load` document, checked: cells with both sides of every compared metric,
    and the summaries the section quotes."""
    cells = doc["cells"]
    if not isinstance(cells, list) or not cells:
        raise InputError(f"{path}: validate --load output without cells")
    for i, c in enumerate(cells):
        missing = [k for k in ("policy", "rate") if not isinstance(c, dict) or k not in c] or [
            f"{side}.{k}" for side, _ in LOAD_SIDES for k in LOAD_KEYS
            if not isinstance(c.get(side), dict) or k not in c[side]]
        if missing:
            raise InputError(f"{path}: cells[{i}] lacks {', '.join(missing)}")
    missing = [k for k in (*load_report.METRICS, "rankings", "ranking_agrees") if k not in doc]
    if missing:
        raise InputError(f"{path}: validate --load output lacks {', '.join(missing)}")
    runtime = doc.get("runtime")
    if isinstance(runtime, dict):  # `Runtime.describe`
        runtime = " ".join(str(runtime[k]) for k in ("device", "runtime") if runtime.get(k))
    label = " · ".join(str(x) for x in (doc["hardware"], doc.get("model"), doc.get("drafter"),
                                        runtime) if x)
    return LoadValidation(path, label, doc)


def _load_cells(table: pl.DataFrame, path: Path) -> list[dict[str, Any]]:
    """The cells of a `validate --load` parquet (`load_report.frame` undone), errors recomputed
    by `load_report.cell`."""
    needed = [f"{prefix}{k}" for _, prefix in LOAD_SIDES for k in LOAD_KEYS]
    missing = [c for c in needed if c not in table.columns]
    if missing:
        raise InputError(f"{path}: validate --load table lacks the columns {', '.join(missing)}")
    return [load_report.cell(row["policy"], row["rate"], row.get("rate_fraction"), row.get("drift"),
                 *({k.removeprefix(prefix): v for k, v in row.items() if k.startswith(prefix)}
                   for _, prefix in LOAD_SIDES))
            for row in table.iter_rows(named=True)]


def _beside_documents(runs: list[Run], key: Callable[[Run], object], kind: str,
                      results: Results) -> list[Run]:
    """`runs` less each parquet beside a JSON of the same run (`key`), which is kept: it names
    the hardware and setting. The parquets dropped are listed as ignored."""
    documents = {key(r) for r in runs if r.path.suffix == ".json"}
    kept = []
    for run in runs:
        if run.path.suffix == ".parquet" and key(run) in documents:
            results.ignored.append((run.path, f"same {kind} run as the JSON beside it"))
        else:
            kept.append(run)
    return kept
