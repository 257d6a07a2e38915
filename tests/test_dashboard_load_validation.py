"""The dashboard's `validate --load` section: its JSON and parquet recognised (once when both lie
in one folder), simulated and measured curves of every policy on the same axes, the run's own
summaries in its text, and malformed output (exit 2, one line naming the file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dashboard_fixture import external_references

from specscope.cli import main
from specscope.dashboards import Report, build_report, load_results
from specscope.dashboards.load_validation import PANELS
from specscope.dashboards.style import Section
from specscope.validate.load_report import LOAD_PARQUET, cell, frame, summary, write_cells

POLICIES = ("none", "static", "smartspec")
RATES = (0.5, 1.0, 2.0, 4.0)
CAPS = {"none": 60.0, "static": 45.0, "smartspec": 70.0}
"""Measured saturation throughput (tokens/s) of each policy."""


def load_doc(swap: bool = False) -> dict[str, Any]:
    """A small `validate --load` document (as `run_load_validate` returns it) of made-up runs;
    the simulator misses each cell by a few percent, and with `swap` it ranks none above
    smartspec by throughput at the highest rate where the measured ranking is the reverse."""
    cells = []
    for k, rate in enumerate(RATES[::-1]):  # written out of rate order on purpose
        for i, policy in enumerate(POLICIES):
            throughput = min(32 * rate, CAPS[policy])
            measured = {"throughput_tok_s": throughput, "mean_tpot_ms": 20 * (1 + i) * (1 + rate),
                        "p99_ttft_ms": 50 * (1 + rate), "p99_latency_s": 0.8 * (1 + rate),
                        "mean_batch": 1 + rate, "mean_accepted": 1.5 + 0.2 * i}
            miss = 0.01 * (1 + (i + k) % 4)
            simulated = {key: v * (1 + miss) for key, v in measured.items()}
            if swap and rate == max(RATES) and policy == "none":
                simulated["throughput_tok_s"] = 1.2 * CAPS["smartspec"]
            cells.append(cell(policy, rate, rate / max(RATES), 1.02, simulated, measured))
    return {"hardware": "cpu-2core", "model": "tiny-code", "drafter": "ngram",
            "runtime": {"device": "cpu", "dtype": "float32", "runtime": "eager"},
            "saturation_rate": max(RATES), "policies": list(POLICIES), "cells": cells,
            **summary(cells)}


def write_json(folder: Path, doc: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "load.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def section(folder: Path, tmp_path: Path) -> tuple[Report, Section]:
    """The report of `folder` and its validate --load section."""
    report = build_report(folder, tmp_path / "report.html")
    return report, next(s for s in report.sections if s.key == "load-validation")


@pytest.mark.parametrize("kind", ["json", "parquet"])
def test_each_policy_has_simulated_and_measured_curves_in_rate_order(
        kind: str, tmp_path: Path) -> None:
    doc = load_doc()
    folder = tmp_path / "results" / "run"
    if kind == "json":
        write_json(folder, doc)
    else:
        write_cells(doc["cells"], folder)
    report, drawn = section(tmp_path / "results", tmp_path)
    assert [s.key for s in report.drawn] == ["load-validation"]
    assert external_references(report.path.read_text()) == []
    names = [t.name for t in drawn.figure.data]
    assert sorted(set(names)) == sorted(f"{p} · {side}" for p in POLICIES
                                        for side in ("simulated", "measured"))
    assert len(names) == len(PANELS) * len(POLICIES) * 2  # one run: one trace per panel
    for trace in drawn.figure.data:
        policy, side = trace.name.split(" · ")
        assert trace.line.dash == {"simulated": "dash", "measured": "solid"}[side]
        rows = sorted((c for c in doc["cells"] if c["policy"] == policy), key=lambda c: c["rate"])
        if trace.xaxis == "x3":  # mean TPOT against rate
            assert list(trace.x) == list(RATES)
            assert list(trace.y) == [c[side]["mean_tpot_ms"] for c in rows]
        if trace.xaxis == "x":  # mean TPOT against throughput
            assert list(trace.x) == [c[side]["throughput_tok_s"] for c in rows]
    median = doc["throughput"]["median_rel_err"]
    assert f"throughput {100 * median:.1f}% / " in drawn.guide
    assert "ranking by throughput at the highest rate: simulated smartspec > none > static" \
        in drawn.guide
    label = "cpu-2core · tiny-code · ngram · cpu eager: " if kind == "json" \
        else "run (computed from its cells): "
    assert label in drawn.guide
    hover = drawn.figure.data[0].text[0]
    assert ("× saturation" in hover) == (kind == "json")  # the parquet has no probe's rate


def test_the_parquet_gives_the_documents_summaries(tmp_path: Path) -> None:
    doc = load_doc()
    write_cells(doc["cells"], tmp_path)
    (run,) = load_results(tmp_path).load_validations
    for metric in ("throughput", "mean_tpot", "p99_ttft", "p99_latency"):
        for key, value in doc[metric].items():
            assert run.doc[metric][key] == pytest.approx(value, rel=1e-12), (metric, key)
    assert run.doc["rankings"] == doc["rankings"]


def test_a_folder_with_the_json_and_the_parquet_of_one_run_draws_it_once(tmp_path: Path) -> None:
    doc = load_doc()
    folder = tmp_path / "results"
    write_json(folder, doc)
    write_cells(doc["cells"], folder)
    results = load_results(folder)
    assert [results.name(r.path) for r in results.load_validations] == ["load.json"]
    assert (folder / LOAD_PARQUET, "same validate --load run as the JSON beside it") \
        in results.ignored
    _, drawn = section(folder, tmp_path)
    assert len(drawn.figure.data) == len(PANELS) * len(POLICIES) * 2
    assert drawn.sources == ("load.json",)


def test_another_runs_parquet_beside_the_json_is_drawn_too(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    write_json(folder, load_doc())
    write_cells([c for c in load_doc()["cells"] if c["rate"] != max(RATES)], folder)
    assert len(load_results(folder).load_validations) == 2


def test_a_ranking_the_simulator_gets_wrong_is_said(tmp_path: Path) -> None:
    doc = load_doc(swap=True)
    assert not doc["ranking_agrees"]
    _, drawn = section(write_json(tmp_path / "results", doc).parent, tmp_path)
    assert "(differs)" in drawn.guide
    assert "ranking differs" in drawn.figure.layout.annotations[-1].text


@pytest.mark.parametrize("case", ["cell", "summary", "parquet"])
def test_malformed_output_exits_2_with_one_line_naming_the_file(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = load_doc()
    folder = tmp_path / "results"
    if case == "cell":
        del doc["cells"][2]["measured"]["mean_tpot_ms"]
        write_json(folder, doc)
        named = "load.json: cells[2] lacks measured.mean_tpot_ms"
    elif case == "summary":
        del doc["p99_ttft"]
        write_json(folder, doc)
        named = "load.json: validate --load output lacks p99_ttft"
    else:
        folder.mkdir()
        frame(doc["cells"]).drop("real_p99_ttft_ms").write_parquet(folder / LOAD_PARQUET)
        named = f"{LOAD_PARQUET}: validate --load table lacks the columns real_p99_ttft_ms"
    out = tmp_path / "report.html"
    with pytest.raises(SystemExit) as exit_:
        main(["dashboard", str(folder), "-o", str(out)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.count("\n") == 1 and "Traceback" not in err and named in err
    assert not out.exists()
