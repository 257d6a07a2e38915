"""`specscope accuracy`: the committed page is what the command writes; the group arithmetic
(median, p90, worst, signed median, anchored rows, kinds of assumption) on handmade rows; the
readers of the committed validation runs; `--check`, the page rewritten in place, and bad input
(exit 2, one line, nothing written); the dashboard's figure of its `--json` document."""

from __future__ import annotations

import dataclasses
import difflib
import io
import json
from pathlib import Path

import pytest
from conftest import Cli
from dashboard_fixture import external_references
from rich.console import Console

from specscope import demo
from specscope.dashboards import build_report, load_results
from specscope.dashboards.accuracy import accuracy_section
from specscope.errors import InputError
from specscope.validate import accuracy as acc
from specscope.validate.accuracy import (
    CPU_RUNS,
    GPU_RUNS,
    MARKER,
    PAGE,
    Accuracy,
    Point,
    PublishedSet,
    assumption_kind,
    build_accuracy,
    group_errors,
    render_page,
)
from specscope.validate.committed import MetricError, Provenance, read_gpu_run, read_serving_text
from specscope.validate.load_report import METRICS, cell, summary
from specscope.validate.report import error_summary

ROOT = Path(__file__).resolve().parents[1]


def _point(rel_err: float, family: str = "head", engine: str = "vllm", hardware: str = "h100",
           anchored: bool = False, assumptions: tuple[str, ...] = (), partial: bool = False
           ) -> Point:
    return Point(f"{family}-{rel_err:+.3f}", family, engine, hardware, 16, "speedup",
                 2.0 * (1 + rel_err), 2.0, rel_err, anchored, partial, assumptions)


def _accuracy(points: tuple[Point, ...]) -> Accuracy:
    """A small `Accuracy` of handmade rows and the committed runs (read in milliseconds)."""
    runs = [r for path in CPU_RUNS for r in read_serving_text(ROOT / path, path)]
    fits = []
    for path in GPU_RUNS:
        load, steps = read_gpu_run(ROOT / path, path)
        runs += load
        fits += steps
    published = PublishedSet("examples/made-up", points, tuple(group_errors(points)))
    return Accuracy((published,), tuple(runs), tuple(fits))


SMALL = (_point(0.10, assumptions=("timed prefill: 143.7 ms over 512 tokens",)),
         _point(-0.20, anchored=True, assumptions=("timed prefill: 61.3 ms over 256 tokens",)),
         _point(0.05, anchored=True), _point(-0.40), _point(0.30),
         _point(0.5, family="draft-model", assumptions=("draft llama-3.2-1b at 16 bits",)))


# ---- the committed page --------------------------------------------------------------------


@pytest.mark.slow
def test_the_committed_page_is_what_the_command_writes(cli: Cli, tmp_path: Path) -> None:
    code, out, err = cli("accuracy", "--root", ROOT, "-o", tmp_path / "accuracy.md")
    assert code == 0, err
    assert "examples/papers" in out and "examples/serving" in out
    written = (tmp_path / "accuracy.md").read_text(encoding="utf-8")
    committed = (ROOT / PAGE).read_text(encoding="utf-8")
    diff = "".join(difflib.unified_diff(committed.splitlines(keepends=True),
                                        written.splitlines(keepends=True),
                                        f"committed {PAGE}", "specscope accuracy"))
    assert written == committed, (f"{PAGE} is out of date: run `specscope accuracy` in the "
                                  f"repository root and commit it\n{diff}")


# ---- the group arithmetic ------------------------------------------------------------------


def test_a_group_has_the_median_p90_worst_and_signed_median_of_its_rows() -> None:
    draft, head, overall = group_errors(SMALL)
    assert (draft.family, head.family, overall.family) == ("draft-model", "head", "all")
    # |errors| 0.05, 0.10, 0.20, 0.30, 0.40: p90 lies 0.6 of the way from 0.30 to 0.40
    assert (head.rows, head.median, head.worst) == (5, 0.20, 0.40)
    assert head.p90 == pytest.approx(0.36)
    assert head.signed_median == 0.05  # of -0.40, -0.20, 0.05, 0.10, 0.30
    assert (head.anchored, head.from_source) == (2, 3)
    assert head.assumed == ("timed prefill: # ms over # tokens",)
    assert (draft.rows, draft.median, draft.signed_median, draft.anchored) == (1, 0.5, 0.5, 0)
    assert overall.rows == 6 and overall.median == pytest.approx(0.25)
    assert overall.worst == 0.5 and overall.anchored == 2
    assert overall.assumed == ("draft llama-3.2-1b at # bits", *head.assumed)


def test_partial_setups_are_counted_in_their_groups_and_summarised_apart() -> None:
    points = (_point(0.10), _point(-0.02), _point(0.60, partial=True),
              _point(-0.30, family="draft-model", partial=True))
    made = PublishedSet("examples/made-up", points, tuple(group_errors(points)))
    draft, head, overall = made.groups
    assert (draft.partial, head.partial, overall.partial) == (1, 1, 2)
    complete, partial = made.by_setup()
    assert (complete.family, complete.rows, complete.median, complete.worst) == (
        "complete", 2, pytest.approx(0.06), 0.10)
    assert (partial.family, partial.rows, partial.worst) == ("partial", 2, 0.60)
    assert overall.rows == 4 and overall.worst == 0.60
    page = render_page(Accuracy((made,), (), ()))
    assert "| `examples/made-up` | complete | 2 | 6.0% | 9.2% | 10.0% | +4.0% |" in page
    assert "| `examples/made-up` | partial | 2 | 45.0% |" in page
    assert "| `examples/made-up` | all | 4 |" in page


def test_groups_are_family_engine_hardware_in_order_with_all_last() -> None:
    points = [_point(0.1, hardware="h200"), _point(0.1, engine="sglang"), _point(0.1),
              _point(0.1, family="arbitrage")]
    keys = [(g.family, g.engine, g.hardware) for g in group_errors(points)]
    assert keys == [("arbitrage", "vllm", "h100"), ("head", "sglang", "h100"),
                    ("head", "vllm", "h100"), ("head", "vllm", "h200"), ("all", "", "")]


@pytest.mark.parametrize(("text", "kind"), [
    ("timed prefill: 143.7 ms (autoregressive 140.9 ms) per batch of requests over 512 tokens",
     "timed prefill: # ms (autoregressive # ms) per batch of requests over # tokens"),
    ("W = 15, N = 5, G = 15: all G guesses held", "W = #, N = #, G = #: all G guesses held"),
    ("draft llama-3.1-8b at 16 bits on 2 device(s)", "draft llama-3.1-8b at # bits on # device(s)"),
    ("a 16-bit LM head over a 32,000-token draft vocabulary",
     "a 16-bit LM head over a 32,000-token draft vocabulary"),
    ("template 8,21,25,15,8,3: one recycle propose call per level",
     "template #: one recycle propose call per level"),
])
def test_an_assumption_kind_drops_its_values_but_not_its_names(text: str, kind: str) -> None:
    assert assumption_kind(text) == kind


def test_assumptions_are_labelled_in_the_order_the_tables_show_them() -> None:
    ids = _accuracy(SMALL).assumption_ids()
    assert ids == {"draft llama-3.2-1b at # bits": ("A1", 1),
                   "timed prefill: # ms over # tokens": ("A2", 2)}


def test_the_page_shows_each_group_and_the_overall_line() -> None:
    page = render_page(_accuracy(SMALL))
    assert page.startswith(MARKER + "\n")
    assert ("| head | vllm | h100 | 5 | 20.0% | 36.0% | 40.0% | +5.0% | 2 | 3 | 0 | A2 |"
            in page.splitlines())
    assert "| **all** |  |  | 6 | 25.0% |" in page
    assert "- **A2** (2 rows): timed prefill: # ms over # tokens" in page
    assert "6 rows at batch 16 on h100; engines vllm; 2 anchored, 4 priced from the source" \
        in page


# ---- the committed validation runs ---------------------------------------------------------

HEADER = ("# benchmarks/serving_cpu.py on Some CPU (2 cores), torch 2.0+cpu, 1 thread(s) "
          "(why), 2026-01-0{day}, load average 0.1 before, 0.2 after;\n"
          "  validate --load tiny-code on cpu-2core ({drafter}, max batch 4, 24 requests × 32 "
          "tokens per cell; saturation 20.02 req/s)\n")
SUMMARY = "".join(f"│ {name} │ {1.5 + i} │ {10 + i} │ {20.5 + i} │ 12 │ {agrees} │\n"
                  for i, name in enumerate(METRICS) for agrees in ["True"])


def test_a_serving_cpu_file_gives_each_run_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "runs.txt"
    path.write_text("# two runs\n" + HEADER.format(day=1, drafter="ngram") + SUMMARY
                    + HEADER.format(day=2, drafter="draft") + SUMMARY.replace("True", "False"),
                    encoding="utf-8")
    first, second = read_serving_text(path, "runs.txt")
    assert (first.source, second.source) == ("runs.txt #1", "runs.txt #2")
    assert (first.drafter, second.drafter, first.model, first.hardware) == (
        "ngram", "draft", "tiny-code", "cpu-2core")
    assert first.cells == 12 and first.ranking_agrees and not second.ranking_agrees
    assert first.errors["throughput"] == MetricError(0.015, 0.10, 0.205)
    assert first.errors["p99_latency"].worst == 0.235
    assert (first.provenance.device, first.provenance.torch, first.provenance.date) == (
        "Some CPU (2 cores)", "2.0+cpu", "2026-01-01")
    assert second.provenance.date == "2026-01-02" and second.provenance.driver is None


def test_a_serving_cpu_run_without_its_summary_names_the_file_and_run(tmp_path: Path) -> None:
    path = tmp_path / "runs.txt"
    path.write_text(HEADER.format(day=1, drafter="ngram")
                    + SUMMARY.replace("p99_ttft", "p99_gone"), encoding="utf-8")
    with pytest.raises(InputError, match=r"runs\.txt: run 1: no the summary row of p99_ttft"):
        read_serving_text(path, "runs.txt")


def _gpu_folder(folder: Path) -> dict[str, object]:
    """A GPU runbook folder of one drafter's made-up load run; its document."""
    folder.mkdir()
    cells = [cell("none", rate, rate / 4, 1.0,
                  {"throughput_tok_s": 100 * rate * (1 + e), "mean_tpot_ms": 2.0,
                   "p99_ttft_ms": 10.0 * (1 - e), "p99_latency_s": 0.1},
                  {"throughput_tok_s": 100 * rate, "mean_tpot_ms": 2.0 * (1 + e),
                   "p99_ttft_ms": 10.0, "p99_latency_s": 0.1})
             for rate, e in ((1.0, 0.02), (2.0, -0.05), (4.0, 0.10))]
    doc = {"hardware": "gpu-run", "model": "tiny-code", "drafter": "ngram", "cells": cells,
           **summary(cells)}
    (folder / "load.json").write_text(json.dumps({"ngram": doc}))
    (folder / "env.json").write_text(json.dumps({
        "date": "2026-01-03T10:00:00+00:00", "torch": "2.1+cu1", "cuda": "13.0",
        "driver": "580.1", "gpu": {"name": "NVIDIA H0"}}))
    (folder / "profile.toml").write_text(
        "[fit.graph]\nheld_out = 4\nheldout_median_rel_err = 0.02\nheldout_max_rel_err = 0.05\n"
        "batched_held_out = 9\nbatched_heldout_median_rel_err = 0.1\n"
        "batched_heldout_max_rel_err = 0.2\n")
    return doc


def test_a_gpu_run_gives_its_load_runs_step_fits_and_provenance(tmp_path: Path) -> None:
    doc = _gpu_folder(tmp_path / "gpu")
    (run,), (fit,) = read_gpu_run(tmp_path / "gpu", "results/gpu")
    assert (run.source, run.drafter, run.cells) == ("results/gpu/load.json", "ngram", 3)
    assert run.errors["throughput"].median == pytest.approx(0.05)  # |errors| .02, .05, .10
    assert run.errors["throughput"].worst == pytest.approx(0.10)
    assert run.ranking_agrees == doc["ranking_agrees"]
    assert (fit.source, fit.runtime, fit.held_out, fit.median, fit.batched_worst) == (
        "results/gpu/profile.toml", "graph", 4, 0.02, 0.2)
    assert run.provenance == fit.provenance == Provenance(
        "results/gpu", "NVIDIA H0", "2.1+cu1", "2026-01-03", "580.1", "13.0")


@pytest.mark.parametrize("name", ["env.json", "load.json", "profile.toml"])
def test_a_gpu_run_missing_a_file_names_it(tmp_path: Path, name: str) -> None:
    _gpu_folder(tmp_path / "gpu")
    (tmp_path / "gpu" / name).unlink()
    with pytest.raises(InputError, match=f"gpu/{name}: no such"):
        read_gpu_run(tmp_path / "gpu", "gpu")


def test_the_committed_gpu_runs_read_back_as_their_cells_give() -> None:
    """Each committed load.json's summary, read back, is the one its own cells give."""
    for path in GPU_RUNS:
        runs, fits = read_gpu_run(ROOT / path, path)
        docs = json.loads((ROOT / path / "load.json").read_text())
        assert [r.drafter for r in runs] == list(docs) and {f.runtime for f in fits} >= {"graph"}
        for run, doc in zip(runs, docs.values(), strict=True):
            for name, error in run.errors.items():
                cells = error_summary([abs(c[f"err_{name}"]) for c in doc["cells"]])
                assert (error.median, error.worst) == (cells["median_rel_err"],
                                                       cells["max_rel_err"])


# ---- the command ---------------------------------------------------------------------------


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> Accuracy:
    """`build_accuracy` replaced by the handmade rows (the command's logic, without pricing
    467 rows)."""
    made = _accuracy(SMALL)
    monkeypatch.setattr(acc, "build_accuracy", lambda root, progress=None: made)
    return made


def test_check_is_quiet_on_a_current_page_and_one_line_exit_1_otherwise(
        cli: Cli, tmp_path: Path, small: Accuracy) -> None:
    page = tmp_path / "docs" / "accuracy.md"
    code, out, _ = cli("accuracy", "--root", tmp_path)
    assert code == 0 and out.startswith(f"wrote {page}")
    assert page.read_text(encoding="utf-8") == render_page(small)
    assert cli("accuracy", "--root", tmp_path, "--check")[:2] == (0, f"{page} is up to date\n")
    page.write_text(render_page(small).replace("20.0%", "19.9%"), encoding="utf-8")
    before = page.read_text(encoding="utf-8")
    code, out, err = cli("accuracy", "--root", tmp_path, "--check")
    assert (code, out) == (1, "")
    assert err == (f"specscope: {page} is out of date; run `specscope accuracy` to write it\n")
    assert page.read_text(encoding="utf-8") == before


def test_the_page_is_rewritten_in_place_but_another_file_needs_force(
        cli: Cli, tmp_path: Path, small: Accuracy) -> None:
    page = tmp_path / "docs" / "accuracy.md"
    page.parent.mkdir()
    page.write_text(MARKER + "\nan older page\n", encoding="utf-8")
    assert cli("accuracy", "--root", tmp_path)[0] == 0
    assert page.read_text(encoding="utf-8") == render_page(small)
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    code, _, err = cli("accuracy", "-o", notes)
    assert (code, err) == (2, f"specscope: error: -o {notes}: exists; pass --force to replace "
                              "it\n")
    assert notes.read_text() == "my notes\n"
    assert cli("accuracy", "-o", notes, "--force")[0] == 0
    assert notes.read_text(encoding="utf-8") == render_page(small)


def test_json_holds_the_tables_and_every_row(cli: Cli, tmp_path: Path, small: Accuracy) -> None:
    code, out, _ = cli("accuracy", "--root", tmp_path, "--json")
    assert code == 0
    doc = json.loads(out)
    (published,) = doc["published"]
    overall = json.loads(json.dumps(dataclasses.asdict(small.published[0].overall)))
    assert published["overall"] == overall
    assert [g["family"] for g in published["groups"]] == ["draft-model", "head"]
    assert [p["rel_err"] for p in published["points"]] == [p.rel_err for p in SMALL]
    assert len(doc["validation"]["load"]) == len(small.load_runs)
    assert doc["validation"]["steps"][0]["runtime"] == small.step_fits[0].runtime
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, message", [
    (("--root", "{tmp}"), "{tmp}/benchmarks/results/serving-cpu.txt: no such"),
    (("--check", "--json"), "--check compares the Markdown page; drop --json"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(cli: Cli, tmp_path: Path,
                                                          args: tuple[str, ...],
                                                          message: str) -> None:
    code, out, err = cli("accuracy", *(a.format(tmp=tmp_path) for a in args))
    assert code == 2 and out == ""
    assert err.startswith(f"specscope: error: {message.format(tmp=tmp_path)}")
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_missing_published_set_is_one_line(tmp_path: Path) -> None:
    for path in (*CPU_RUNS, *GPU_RUNS):
        source = ROOT / path
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(source, target_is_directory=source.is_dir())
    with pytest.raises(InputError, match=r"examples/papers: no such scenario file or folder"):
        build_accuracy(tmp_path)


# ---- the dashboard -------------------------------------------------------------------------


def test_the_dashboard_draws_every_speedup_row_by_family(tmp_path: Path) -> None:
    rate = dataclasses.replace(_point(0.2, family="rest"), compared="tokens/s", predicted=120.0,
                               published=100.0)
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "accuracy.json").write_text(json.dumps(_accuracy((*SMALL, rate)).to_dict()))
    report = build_report(folder, tmp_path / "report.html")
    assert [s.key for s in report.drawn] == ["accuracy"]
    assert external_references(report.path.read_text()) == []
    (drawn,) = report.drawn
    assert drawn.sources == ("accuracy.json",)
    points = [t for t in drawn.figure.data if t.mode == "markers" and t.x != (None,)]
    assert [t.name for t in points] == ["draft-model", "head"]  # the tokens/s row is left out
    for trace in points:
        rows = [p for p in SMALL if p.family == trace.name]
        assert list(trace.x) == [p.published for p in rows]
        assert list(trace.y) == [p.predicted for p in rows]
        assert trace.marker.symbol == "circle"
    (marker,) = [t for t in drawn.figure.data if t.x == (None,)]
    assert marker.name == "examples/made-up"


def test_a_malformed_accuracy_document_is_one_line_naming_it(cli: Cli, tmp_path: Path) -> None:
    doc = _accuracy(SMALL).to_dict()
    del doc["published"][0]["points"][1]["predicted"]
    (tmp_path / "accuracy.json").write_text(json.dumps(doc))
    code, _, err = cli("dashboard", tmp_path, "-o", tmp_path / "report.html")
    assert code == 2 and len(err.splitlines()) == 1
    assert err == (f"specscope: error: {tmp_path / 'accuracy.json'}: published[0].points[1] "
                   "lacks predicted\n")
    assert not (tmp_path / "report.html").exists()


def test_the_demo_writes_the_accuracy_document_of_the_checkout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made, roots = _accuracy(SMALL), []
    monkeypatch.setattr(acc, "build_accuracy", lambda root: roots.append(root) or made)
    log = io.StringIO()
    demo._papers(tmp_path, Console(file=log, width=200))
    assert roots == [ROOT]
    (found,) = load_results(tmp_path).accuracy
    assert found == (tmp_path / "accuracy.json", json.loads(json.dumps(made.to_dict())))
    assert f"5. Accuracy → {tmp_path / 'accuracy.json'}: {made.headline()}" in log.getvalue()
    assert accuracy_section(load_results(tmp_path)).figure is not None
