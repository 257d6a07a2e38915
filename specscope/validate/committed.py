"""The validation runs committed under `benchmarks/results/`, read back without re-running them.

Two kinds of file hold them:

- `benchmarks/serving_cpu.py`'s printed tables (`serving-cpu*.txt`): one or more runs of
  `validate --load` on this project's CPU, each a header line (CPU, torch, threads, date), the
  cell table and the summary table of `load_report.summary_table`, whose median, p90 and max
  |relative error| per metric are read back (to the 0.1% the table prints);
- a GPU runbook folder (`benchmarks/gpu_run.sh`): `env.json` (GPU, driver, CUDA, torch, date),
  `load.json` (one `validate --load --json` document per drafter, with its summaries) and
  `profile.toml` (the `profile-hw` fit of that machine, with its held-out step-time errors).

Anything missing or not in these shapes is an `InputError` naming the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specscope.errors import InputError
from specscope.files import read_json, read_text, read_toml
from specscope.validate.load_report import METRICS


@dataclass(frozen=True)
class Provenance:
    """Where and when a run was measured: the file or folder that says so (`origin`), the
    device, its driver and CUDA (None on a CPU), the torch version and the date (YYYY-MM-DD)."""

    origin: str
    device: str
    torch: str
    date: str
    driver: str | None = None
    cuda: str | None = None


@dataclass(frozen=True)
class MetricError:
    """|relative error| of one metric over a run's cells: median, p90 and max (fractions)."""

    median: float
    p90: float
    worst: float


@dataclass(frozen=True)
class LoadRun:
    """One `validate --load` run read back: what was served (model, drafter, priced profile),
    how many policy × rate cells, each metric's error summary (`METRICS` order), whether the
    simulation ranks the policies as the real runs did, and where it came from (`source`: the
    file, with "#k" for the k-th run of a file holding several)."""

    source: str
    model: str
    drafter: str
    hardware: str
    cells: int
    errors: dict[str, MetricError]
    ranking_agrees: bool
    provenance: Provenance


@dataclass(frozen=True)
class StepFit:
    """One runtime of a measured profile's fit: held-out step times against the fitted cost
    model (single sequences, then batched steps), as point counts and median / max |relative
    error|."""

    source: str
    runtime: str
    held_out: int
    median: float
    worst: float
    batched_held_out: int
    batched_median: float
    batched_worst: float
    provenance: Provenance


HEADER = re.compile(r"^# benchmarks/serving_cpu\.py on (?P<cpu>.+) \((?P<cores>\d+) cores\), "
                    r"torch (?P<torch>\S+), .*?(?P<date>\d{4}-\d{2}-\d{2})", re.M)
TITLE = re.compile(r"validate --load (?P<model>\S+) on (?P<hardware>\S+) \((?P<drafter>[^,]+),")
SUMMARY_ROW = re.compile(r"│\s*(?P<metric>\w+)\s*│\s*(?P<median>[\d.]+)\s*│\s*(?P<p90>[\d.]+)\s*│"
                         r"\s*(?P<max>[\d.]+)\s*│\s*(?P<cells>\d+)\s*│\s*(?P<agrees>True|False)\s*│")


def read_serving_text(path: Path, source: str) -> list[LoadRun]:
    """Every run in a `serving_cpu.py` output file (`source`: its name in the report)."""
    text = read_text(path, "serving_cpu.py output")
    starts = [m.start() for m in HEADER.finditer(text)]
    if not starts:
        raise InputError(f"{path}: no `# benchmarks/serving_cpu.py on …` header line")
    runs = []
    for k, (start, end) in enumerate(zip(starts, [*starts[1:], len(text)], strict=True), 1):
        label = source if len(starts) == 1 else f"{source} #{k}"
        runs.append(_text_run(text[start:end], source, label, f"{path}: run {k}"))
    return runs


def _text_run(text: str, origin: str, source: str, where: str) -> LoadRun:
    header, title = HEADER.match(text), TITLE.search(text)
    rows = {m["metric"]: m for m in SUMMARY_ROW.finditer(text)}
    missing = [name for name in METRICS if name not in rows]
    if header is None or title is None or missing:
        what = "the table title" if title is None else f"the summary row of {missing[0]}"
        raise InputError(f"{where}: no {what}")
    errors = {name: MetricError(*(round(float(rows[name][k]) / 100, 4)  # printed in 0.1%
                                  for k in ("median", "p90", "max"))) for name in METRICS}
    device = f"{header['cpu']} ({header['cores']} cores)"
    return LoadRun(source, title["model"], title["drafter"], title["hardware"],
                   int(rows[next(iter(METRICS))]["cells"]), errors,
                   all(rows[name]["agrees"] == "True" for name in METRICS),
                   Provenance(origin, device, header["torch"], header["date"]))


def read_gpu_run(folder: Path, source: str) -> tuple[list[LoadRun], list[StepFit]]:
    """A GPU runbook folder's `validate --load` runs (one per drafter, in the file's order) and
    its profile's fits (one per runtime); `source` names the folder in the report."""
    env = _table(read_json(folder / "env.json", "runbook env.json"), folder / "env.json")
    try:
        provenance = Provenance(source, env["gpu"]["name"], env["torch"], env["date"][:10],
                                env["driver"], env["cuda"])
    except (KeyError, TypeError):
        raise InputError(f"{folder / 'env.json'}: lacks gpu.name, torch, date, driver or "
                         "cuda") from None
    path = folder / "load.json"
    load = _table(read_json(path, "runbook load.json"), path)
    runs = [_json_run(doc, f"{source}/load.json", f"{path}: {drafter}", provenance)
            for drafter, doc in load.items()]
    path = folder / "profile.toml"
    fits = read_toml(path, "profile").get("fit")
    if not isinstance(fits, dict) or not fits:
        raise InputError(f"{path}: no [fit.<runtime>] tables")
    try:
        steps = [StepFit(f"{source}/profile.toml", runtime, f["held_out"],
                         f["heldout_median_rel_err"], f["heldout_max_rel_err"],
                         f["batched_held_out"], f["batched_heldout_median_rel_err"],
                         f["batched_heldout_max_rel_err"], provenance)
                 for runtime, f in fits.items()]
    except (KeyError, TypeError) as exc:
        raise InputError(f"{path}: a [fit.<runtime>] table lacks {exc}") from None
    return runs, steps


def _json_run(doc: Any, source: str, where: str, provenance: Provenance) -> LoadRun:
    """One drafter's `validate --load --json` document."""
    doc = _table(doc, where)
    if "error" in doc:
        raise InputError(f"{where}: the run failed ({doc['error']})")
    try:
        errors = {name: MetricError(doc[name]["median_rel_err"], doc[name]["p90_rel_err"],
                                    doc[name]["max_rel_err"]) for name in METRICS}
        return LoadRun(source, doc["model"], doc["drafter"], doc["hardware"], len(doc["cells"]),
                       errors, bool(doc["ranking_agrees"]), provenance)
    except (KeyError, TypeError) as exc:
        raise InputError(f"{where}: lacks {exc}") from None


def _table(value: Any, where: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{where}: a JSON object is expected")
    return value
