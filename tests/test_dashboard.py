"""`specscope dashboard`: what a results folder holds, each figure against an independent
computation, the page's self-containment, and bad input (exit 2, one line, nothing written)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from dashboard_fixture import (
    FRONT,
    HARDWARE,
    POLICIES,
    RATES,
    build_results,
    external_references,
)
from plotly.offline import get_plotlyjs

from specscope.cli import main
from specscope.dashboards import build_report, load_results
from specscope.dashboards.acceptance import MAX_DEPTH, MAX_RANK
from specscope.dashboards.economics import economics_section, front_table
from specscope.dashboards.fronts import sweep_fronts, sweep_sizes
from specscope.dashboards.hardware import analytic_table
from specscope.dashboards.serving import serving_table
from specscope.dashboards.trees import tree_layout
from specscope.hw_profiles.deployment import deployment
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.sweeps import run_sweep
from specscope.trace import AcceptanceModel, read_trace
from specscope.tree import Tree

SWEEP = """
seed = 0
mode = "analytic"
context = 512
max_depth = 8
[acceptance]
"llama-68m" = [0.55, 0.12, 0.05, 0.03]
[[grid]]
name = "small"
hardware = ["h100", "cpu-2core"]
target = ["llama-3.1-8b", "llama-2-70b"]
drafter = ["llama-68m"]
method = ["sequoia", "kary", "chain"]
budget = [4, 8, 16]
batch = [1, 8]
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture's results folder, a bare tree and a small analytic sweep."""
    out = build_results(tmp_path_factory.mktemp("results"))
    (out / "tree.json").write_text(Tree.from_rank_paths([[0], [0, 0], [1]]).to_json())
    (out / "sweep.toml").write_text(SWEEP)
    run_sweep(out / "sweep.toml", output=out / "sweep.parquet")
    return out


def test_every_kind_of_file_is_recognised(folder: Path) -> None:
    results = load_results(folder)
    assert sorted(o.doc["hardware"] for o in results.optimized) == sorted(HARDWARE)
    assert len(results.simulations) == len(POLICIES) * len(RATES)
    assert [results.name(p) for p, _ in results.traces] == ["trace.parquet"]
    assert [results.name(p) for p, _ in results.trees] == ["tree.json"]
    assert [results.name(p) for p, _ in results.sweeps] == ["sweep.parquet"]
    assert "benchmarks/gpu_verify-cpu.json" in {results.name(p) for p, _ in results.benchmarks}
    ignored = {results.name(p) for p, _ in results.ignored}
    assert {"simulate/none-2.timeseries.parquet", "sweep.toml",
            "benchmarks/peers-cpu.json"} <= ignored


def test_report_draws_each_section_and_loads_nothing_from_the_network(folder: Path,
                                                                      tmp_path: Path) -> None:
    report = build_report(folder, tmp_path / "report.html")
    page = report.path.read_text()
    assert [s.key for s in report.drawn] == ["pareto", "size", "trees", "acceptance", "serving",
                                             "economics", "validation", "hardware"]
    assert external_references(page) == []
    assert page.count('class="plotly-graph-div"') == len(report.drawn)
    assert "MathJax" not in page.replace(get_plotlyjs(), "")


def test_tree_layout_puts_the_root_on_top_and_parents_over_their_children() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        parents = [-1] + [int(rng.integers(0, i)) for i in range(1, 40)]
        tree = Tree.from_parents(parents)
        x, y = tree_layout(tree)
        assert np.array_equal(y, -tree.depths)
        leaves = np.sort(x[tree.leaves])
        assert np.array_equal(leaves, np.arange(len(leaves)))  # one unit apart
        for v, kids in enumerate(tree.children):
            if kids:
                assert min(x[list(kids)]) <= x[v] <= max(x[list(kids)])
        for d in range(tree.depth + 1):  # no two nodes of one level on top of each other
            assert len(set(x[y == -d])) == int(np.sum(y == -d))


def test_acceptance_heatmap_shows_the_fitted_table_with_its_intervals(folder: Path,
                                                                     tmp_path: Path) -> None:
    figure = next(s for s in build_report(folder, tmp_path / "r.html").sections
                  if s.key == "acceptance").figure
    trace = read_trace(folder / "trace.parquet")
    heatmaps = [t for t in figure.data if t.type == "heatmap"]
    assert len(heatmaps) == trace.df["source"].n_unique()
    for heatmap in heatmaps:
        source = heatmap.customdata[0][0].split("</b>")[0].removeprefix("<b>")
        model = AcceptanceModel.from_trace(trace, source, depth_dependent=True,
                                           max_depth=MAX_DEPTH)
        assert np.allclose(np.asarray(heatmap.z, dtype=float), model.table[:, :MAX_RANK])
        half = (model.high - model.low)[0, 0] / 2
        assert heatmap.text[0][0].endswith(f"±{half:.2f}")


def test_hardware_cells_equal_optimize_tree_on_the_same_inputs(folder: Path) -> None:
    table, _, _ = analytic_table(load_results(folder))
    cell = table.filter(hardware="h100", runtime="graph", target="llama-3.1-8b",
                        weight_bits=16).row(0, named=True)
    trace = read_trace(folder / "trace.parquet")
    result = run_optimize(OptimizeRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-68m", runtime="graph"),
        trace_path=folder / "trace.parquet", source="draft:llama-68m", algos="sequoia",
        budgets=[8, 16, 32, 64], context=int(trace.mean_context_len)))
    assert cell["speedup"] == pytest.approx(result.comparison.scores[0].speedup, rel=1e-12)
    assert cell["n"] == result.comparison.scores[0].n
    tpu = table.filter(hardware="tpu-v5e", target="llama-3.1-8b", weight_bits=16)
    assert tpu["speedup"].is_null().all() and "does not fit" in tpu["reason"][0]


def test_sweep_fronts_are_the_best_cell_per_hardware_method_and_budget(folder: Path) -> None:
    fronts = sweep_fronts(load_results(folder))
    sweep = pl.read_parquet(folder / "sweep.parquet")
    for row in fronts.iter_rows(named=True):
        hardware = row["panel"].split(" ")[0]
        speedups = [r["speedup"] for r in sweep.iter_rows(named=True)
                    if (r["hardware"], r["method"], r["budget"], r["batch"], r["status"])
                    == (hardware, row["algo"], row["budget"], 1, "ok")]
        assert row["speedup"] == max(speedups)
    assert fronts.height == 2 * 3 * 3  # hardware × method × budget


def test_serving_table_has_one_row_per_simulation_and_the_baseline_in_every_panel(
        folder: Path) -> None:
    table = serving_table(load_results(folder))
    assert sorted(table["policy"].unique()) == sorted(POLICIES)
    assert sorted(table["rate"].unique()) == sorted(RATES)
    assert table.height == len(POLICIES) * len(RATES)


@pytest.mark.parametrize("case", ["missing", "empty", "json", "parquet", "results"])
def test_bad_input_exits_2_with_one_line_naming_the_file_and_writes_nothing(
        case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], folder: Path) -> None:
    bad = tmp_path / "results"
    if case != "missing":
        bad.mkdir()
    named = {"missing": "no such results folder", "empty": "no results found",
             "json": "broken.json", "parquet": "broken.parquet", "results": "trees.json"}[case]
    if case in ("json", "parquet", "results"):
        shutil.copy(folder / "trace.parquet", bad)  # a usable file beside the broken one
    if case == "json":
        (bad / "broken.json").write_text('{"results": [')
    if case == "parquet":
        (bad / "broken.parquet").write_bytes(b"PAR1 not really")
    if case == "results":
        (bad / "trees.json").write_text(json.dumps({"hardware": "h100", "results": [{}]}))
    out = tmp_path / "report.html"
    with pytest.raises(SystemExit) as exit_:
        main(["dashboard", str(bad), "-o", str(out)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.count("\n") == 1 and "Traceback" not in err and named in err
    assert not out.exists() and not list(tmp_path.glob("*.html"))


def test_a_sweeps_size_panel_holds_one_number_format(tmp_path: Path) -> None:
    (tmp_path / "moe.toml").write_text(
        'seed = 0\nmode = "analytic"\ncontext = 512\nmax_depth = 4\n[acceptance]\n'
        '"qwen3-0.6b" = [0.6, 0.1]\n[[grid]]\nname = "moe"\nhardware = ["h200"]\n'
        'target = ["qwen3-30b-a3b"]\ndrafter = ["qwen3-0.6b"]\nmethod = ["sequoia", "chain"]\n'
        'budget = [2, 4]\nprecision = ["bf16", "fp8"]\nkv_bits = [16, 8]\n')
    run_sweep(tmp_path / "moe.toml", output=tmp_path / "sweep.parquet")
    sizes = sweep_sizes(load_results(tmp_path))
    chosen = sizes.filter("chosen")
    assert sizes.height == 2 * 2 and chosen.height == 1  # one format's methods × budgets
    sweep = pl.read_parquet(tmp_path / "sweep.parquet")
    best = sweep.sort("speedup", descending=True).row(0, named=True)
    assert f"{best['precision']}" in chosen["panel"][0] or best["precision"] == "bf16"
    assert ("kv 8-bit" in chosen["panel"][0]) == (best["kv_bits"] == 8)



def test_the_economics_section_draws_each_choice_and_marks_the_front(folder: Path) -> None:
    table = front_table(load_results(folder))
    assert sorted(table["choice"].unique()) == ["none", "static"]
    assert table.height == 2 * len(FRONT)
    section = economics_section(load_results(folder))
    assert {t.name for t in section.figure.data} == {"none", "static"}
    starred = sum(w > 0 for t in section.figure.data for w in t.marker.line.width)
    assert starred == int(table["on_front"].sum()) >= 1
    assert table["usd_per_million_tokens"].min() > 0
