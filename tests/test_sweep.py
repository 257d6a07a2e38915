"""`specscope sweep`: configs and their mistakes, the cells a grid makes, analytic and simulated
cells against `optimize-tree` and `simulate` themselves, invalid combinations recorded, re-runs
that compute nothing, the same table on Ray, and a killed sweep that resumes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest

from specscope.cli import main
from specscope.hw_profiles.deployment import deployment
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.sweeps import run_sweep
from specscope.sweeps.cells import enumerate_cells
from specscope.sweeps.config import load_config
from specscope.sweeps.store import ResultStore
from specscope.trace import synth_trace, write_trace

EXAMPLES = Path(__file__).parent.parent / "examples"
VECTORS = """
[acceptance]
"llama-68m" = [0.55, 0.12, 0.05, 0.03]
ngram = [0.45]
"""
SMALL = VECTORS + """
[[grid]]
hardware = ["h100", "cpu-2core"]
runtime = ["eager", "graph"]
target = ["llama-3.1-8b", "mamba2-2.7b"]
drafter = ["llama-68m", "ngram"]
method = ["sequoia", "chain"]
budget = [4, 8]
batch = [1, 8]
"""


def _write(folder: Path, text: str, name: str = "sweep.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def _without_run_id(table: pl.DataFrame) -> pl.DataFrame:
    return table.drop("run_id").sort("key")


def test_cells_are_the_product_of_the_axes_with_defaults_resolved(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, SMALL + """
        [[grid]]
        name = "again"
        hardware = "h100"
        runtime = "eager"
        target = "llama-3.1-8b"
        drafter = "llama-68m"
        method = "sequoia"
        budget = [4, 8, 16]
        """))
    cells = enumerate_cells(config)
    # the second grid repeats 2 cells of the first (budgets 4 and 8 at batch 1) and adds one
    assert len(cells) == 2 * 2 * 2 * 2 * 2 * 2 * 2 + 1
    assert len({c.key for c in cells}) == len(cells)
    default = enumerate_cells(load_config(_write(tmp_path, VECTORS + """
        [[grid]]
        hardware = ["h100", "tpu-v4"]
        target = "llama-3.1-8b"
        drafter = "llama-68m"
        method = "chain"
        budget = 4
        weight_bits = [4, 16]
        """, "defaults.toml")))
    assert [(c.hardware, c.runtime, c.weight_bits, c.batch, c.tp) for c in default] == [
        ("h100", "graph", 4, 1, 1), ("h100", "graph", 16, 1, 1),
        ("tpu-v4", "compile", 4, 1, 1), ("tpu-v4", "compile", 16, 1, 1)]


def test_a_key_changes_with_every_input_of_the_result(tmp_path: Path) -> None:
    def key(text: str) -> str:
        return enumerate_cells(load_config(_write(tmp_path, text)))[0].key

    base = VECTORS + """
        [[grid]]
        hardware = "h100"
        target = "llama-3.1-8b"
        drafter = "llama-68m"
        method = "chain"
        budget = 4
        """
    assert key(base) == key(base)
    for old, new in (("0.55, 0.12", "0.5, 0.12"), ("budget = 4", "budget = 5"),
                     ("budget = 4", "budget = 4\ncontext = 1024"), ("[acc", "seed = 1\n[acc")):
        assert key(base.replace(old, new, 1)) != key(base)


def test_the_example_grids_are_large_enough() -> None:
    analytic = enumerate_cells(load_config(EXAMPLES / "sweep.toml"))
    assert len(analytic) >= 5000 and {c.mode for c in analytic} == {"analytic"}
    assert {"h100", "a100", "h200", "gaudi2", "tpu-v4", "tpu-v5e", "cpu-2core"} <= {
        c.hardware for c in analytic}
    assert {"mamba2-2.7b", "bamba-9b"} <= {c.target for c in analytic}
    simulated = enumerate_cells(load_config(EXAMPLES / "sweep-sim.toml"))
    assert 0 < len(simulated) < 400 and {c.mode for c in simulated} == {"simulate"}


def test_analytic_cells_equal_optimize_tree_at_the_same_budget(tmp_path: Path) -> None:
    methods = ["sequoia", "ets", "dyspec", "kary", "chain"]
    config = _write(tmp_path, f"""
        acceptance = [0.55, 0.12, 0.05, 0.03]
        [[grid]]
        hardware = "a100"
        runtime = "eager"
        target = "llama-2-7b"
        drafter = "llama-68m"
        method = {methods}
        budget = [6, 24]
        """)
    table = run_sweep(config, output=tmp_path / "out.parquet").table
    assert table.height == 10 and set(table["status"]) == {"ok"}
    for budget in (6, 24):
        expected = run_optimize(OptimizeRequest(
            deployment=deployment("a100", target="llama-2-7b", drafter="llama-68m",
                                  runtime="eager"),
            acceptance=[0.55, 0.12, 0.05, 0.03], algos=",".join(methods), budget=budget))
        for score in expected.comparison.scores:
            row = table.filter(pl.col("method") == score.algo, pl.col("budget") == budget)
            assert row["speedup"].item() == pytest.approx(score.speedup, rel=1e-12)
            assert row["step_time_ms"].item() == pytest.approx(score.step_time_s * 1e3,
                                                               rel=1e-12)
            assert row["expected_tokens"].item() == pytest.approx(score.expected_tokens)
            assert row["tree_size"].item() == score.n


def test_engine_cells_equal_optimize_tree_on_that_engine(tmp_path: Path) -> None:
    config = _write(tmp_path, """
        acceptance = [0.55, 0.12, 0.05, 0.03]
        [[grid]]
        hardware = "a100"
        engine = ["specscope", "research-hf", "gpt-fast"]
        target = "llama-2-7b"
        drafter = "llama-68m"
        method = ["sequoia", "chain"]
        budget = 8
        """)
    table = run_sweep(config, output=tmp_path / "out.parquet").table
    assert table.height == 6 and set(table["engine"]) == {"specscope", "research-hf", "gpt-fast"}
    skipped = table.filter(pl.col("status") == "skipped")
    assert skipped.select("engine", "method").rows() == [("gpt-fast", "sequoia")]
    assert "verifies chains only" in skipped["reason"].item()
    for engine in ("research-hf", "gpt-fast"):
        expected = run_optimize(OptimizeRequest(
            deployment=deployment("a100", target="llama-2-7b", drafter="llama-68m", engine=engine),
            acceptance=[0.55, 0.12, 0.05, 0.03], algos="chain", budget=8))
        row = table.filter(pl.col("engine") == engine, pl.col("method") == "chain")
        assert row["runtime"].item() == expected.runtime
        assert row["speedup"].item() == pytest.approx(expected.comparison.scores[0].speedup,
                                                      rel=1e-12)


def test_an_engine_that_shards_the_draft_shards_it_in_a_sweep_too(tmp_path: Path) -> None:
    """vLLM runs the draft on the target's tp devices: an analytic cell at tp 2 prices it there,
    as optimize-tree does (it priced the draft on one device)."""
    config = _write(tmp_path, """
        acceptance = [0.6, 0.2]
        [[grid]]
        hardware = "h100"
        engine = "vllm"
        target = "llama-3.1-8b"
        drafter = "llama-3.2-1b"
        method = "chain"
        budget = 4
        tp = 2
        """)
    row = run_sweep(config, output=tmp_path / "out.parquet").table
    expected = run_optimize(OptimizeRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b",
                              engine="vllm", tp=2),
        acceptance=[0.6, 0.2], algos="chain", budget=4))
    chain = next(s for s in expected.comparison.scores if s.algo == "chain")
    assert row["speedup"].item() == pytest.approx(chain.speedup, rel=1e-12)


def test_trace_cells_replay_the_trace_and_run_every_method(tmp_path: Path) -> None:
    write_trace(synth_trace(requests=6, seed=3, length=96), tmp_path / "trace.parquet")
    config = _write(tmp_path, """
        trace = "trace.parquet"
        [[grid]]
        hardware = "h100"
        target = "llama-2-7b"
        drafter = ["llama-68m", "ngram"]
        method = ["sequoia", "goose", "specdecpp", "chain"]
        budget = 8
        """)
    table = run_sweep(config, output=tmp_path / "out.parquet").table
    expected = run_optimize(OptimizeRequest(
        deployment=deployment("h100", target="llama-2-7b", drafter="llama-68m"),
        trace_path=tmp_path / "trace.parquet", source="draft:llama-68m",
        algos="sequoia,goose,specdecpp,chain", budget=8))
    rows = table.filter(pl.col("drafter") == "llama-68m")
    assert set(rows["status"]) == {"ok"}
    for score in expected.comparison.scores:
        row = rows.filter(pl.col("method") == score.algo)
        assert row["replay_tokens"].item() == pytest.approx(score.replay_tokens)
        assert row["speedup"].item() == pytest.approx(score.speedup, rel=1e-12)
    # SpecDec++ needs a ranked source: the n-gram cell is skipped, with the reason
    ngram = table.filter(pl.col("drafter") == "ngram", pl.col("method") == "specdecpp")
    assert ngram["status"].item() == "skipped" and "ranked source" in ngram["reason"].item()


def test_invalid_combinations_are_recorded_with_a_reason(tmp_path: Path) -> None:
    config = _write(tmp_path, VECTORS + """
        [[grid]]
        hardware = ["tpu-v4", "cpu-2core"]
        runtime = ["eager", "compile"]
        target = ["llama-3.1-8b", "llama-2-70b"]
        drafter = "llama-68m"
        method = ["chain", "specdecpp"]
        budget = 4
        tp = [1, 2]
        """)
    result = run_sweep(config, output=tmp_path / "out.parquet")
    table = result.table
    assert result.cells == table.height == 2 * 2 * 2 * 2 * 2
    reasons = table.filter(pl.col("status") == "skipped")["reason"].to_list()
    assert any("prices compile, not eager" in r for r in reasons)
    assert any("tp=2 exceeds" in r for r in reasons)
    assert any("do not fit" in r for r in reasons)
    assert any("needs a trace" in r for r in reasons)
    ok = table.filter(pl.col("status") == "ok")
    assert ok.height > 0 and ok["speedup"].is_not_null().all()
    assert table.filter(pl.col("status") == "skipped")["speedup"].is_null().all()


def test_a_rerun_reuses_every_finished_cell(tmp_path: Path) -> None:
    config = _write(tmp_path, SMALL)
    out = tmp_path / "out.parquet"
    first = run_sweep(config, output=out)
    assert first.computed == first.cells == 128 and first.reused == 0
    assert not (tmp_path / "out.parquet.parts").exists()
    again = run_sweep(config, output=out)
    assert again.computed == 0 and again.reused == 128
    assert again.table.equals(first.table)  # run ids included: nothing was recomputed
    assert pl.read_parquet(out).equals(first.table)
    # a grown grid computes only its new cells, and the table keeps this config's cells
    grown = run_sweep(_write(tmp_path, SMALL.replace("budget = [4, 8]", "budget = [4, 8, 12]")),
                      output=out)
    assert grown.computed == 64 and grown.reused == 128 and grown.table.height == 192


def test_simulated_cells_equal_simulate_with_the_cells_seed(tmp_path: Path) -> None:
    config = _write(tmp_path, """
        mode = "simulate"
        acceptance = [0.6, 0.2, 0.1]
        [simulation]
        requests = 20
        output_len = "32"
        [[grid]]
        hardware = "h100"
        target = "llama-3.1-8b"
        drafter = ["llama-68m", "llama-3.2-1b"]
        method = ["none", "chain", "dyspec"]
        budget = 4
        batch = 8
        rate = [5.0, 50.0]
        """)
    result = run_sweep(config, output=tmp_path / "out.parquet")
    # plain decoding is one cell per rate, whatever the drafters and budgets
    assert result.cells == 2 * (1 + 2 * 2)
    table = result.table
    assert table.filter(pl.col("method") == "none")["drafter"].to_list() == ["none", "none"]
    row = table.filter(pl.col("method") == "dyspec", pl.col("drafter") == "llama-68m",
                       pl.col("rate") == 50.0)
    summary = run_simulation(SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-68m", max_batch=8),
        policy="dyspec", budget=4, acceptance=(0.6, 0.2, 0.1), rate=50.0, requests=20,
        output_len="32", seed=row["seed"].item())).summary
    for column in ("throughput_tok_s", "mean_tpot_ms", "p99_ttft_ms", "mean_accepted"):
        assert row[column].item() == summary[column]
    # common random numbers: every cell at one rate has the same seed
    assert table.group_by("rate").agg(pl.col("seed").n_unique())["seed"].to_list() == [1, 1]


@pytest.mark.parametrize(("text", "names"), [
    ("not toml [", "not valid TOML"),
    (VECTORS, "[[grid]]"),
    (SMALL.replace('hardware = ["h100", "cpu-2core"]', 'hardware = ["h100", "h1000"]'),
     "hardware"),
    (SMALL.replace("runtime", "runtimes"), "runtimes"),
    (SMALL.replace('target = ["llama-3.1-8b", "mamba2-2.7b"]', ""), "target"),
    (SMALL.replace('method = ["sequoia", "chain"]', 'method = ["sequoia", "smartspec"]'),
     "method"),
    (SMALL.replace("budget = [4, 8]", "budget = [0, 8]"), "budget"),
    (SMALL.replace("batch = [1, 8]", "batch = [1, 8]\nrate = 2.0"), "rate"),
    (SMALL.replace("batch = [1, 8]", 'mode = "simulate"'), "rate"),
    (SMALL.replace("batch = [1, 8]", "weight_bits = 3"), "weight_bits"),
    (SMALL.replace("0.55, 0.12", "0.95, 0.12"), "acceptance.llama-68m"),
    (SMALL.replace("ngram = [0.45]", ""), "acceptance"),
    (SMALL.replace("[[grid]]", 'trace = "missing.parquet"\n[[grid]]'), "trace"),
    (SMALL.replace("[[grid]]", '[simulation]\nrequests = 0\n[[grid]]'), "simulation.requests"),
    (SMALL.replace("[[grid]]", '[simulation]\nworkload = "batch"\n[[grid]]'),
     "simulation.workload"),
    (SMALL.replace("[[grid]]", '[simulation]\noutput_len = "trace"\n[[grid]]'),
     "simulation.output_len"),
])
def test_a_bad_config_is_one_line_naming_the_key_and_writes_nothing(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, names: str) -> None:
    out = tmp_path / "out.parquet"
    code, stdout, err = _cli(capsys, "sweep", str(_write(tmp_path, text)), "-o", str(out))
    assert code == 2 and stdout == ""
    assert err.count("\n") == 1 and err.startswith("specscope: error:") and names in err
    assert not out.exists() and not (tmp_path / "out.parquet.parts").exists()


@pytest.mark.parametrize(("args", "names"), [
    (["--backend", "spark"], "--backend"),
    (["--address", "10.0.0.1:6379"], "--address"),
    (["--workers", "2"], "--workers"),
])
def test_bad_options_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                  args: list[str], names: str) -> None:
    code, _, err = _cli(capsys, "sweep", str(_write(tmp_path, SMALL)), *args)
    assert code == 2 and err.count("\n") == 1 and names in err


def test_a_file_that_is_not_a_sweep_table_is_never_overwritten(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    other = tmp_path / "trace.parquet"
    write_trace(synth_trace(requests=2, seed=0, length=8), other)
    before = other.read_bytes()
    code, _, err = _cli(capsys, "sweep", str(_write(tmp_path, SMALL)), "-o", str(other))
    assert code == 2 and "not a sweep results table" in err
    assert other.read_bytes() == before


def test_the_ray_engine_without_ray_is_exit_2(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    code, _, err = _cli(capsys, "sweep", str(_write(tmp_path, SMALL)), "--backend", "ray",
                        "-o", str(tmp_path / "out.parquet"))
    assert code == 2 and err.count("\n") == 1 and "needs Ray" in err


def test_the_cli_prints_a_summary_and_json(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    config = _write(tmp_path, SMALL)
    code, out, _ = _cli(capsys, "sweep", str(config), "-o", str(tmp_path / "a.parquet"))
    assert code == 0 and "128 cells: 128 computed, 0 reused" in out
    code, out, _ = _cli(capsys, "sweep", str(config), "-o", str(tmp_path / "a.parquet"),
                        "--json")
    assert code == 0 and '"reused": 128' in out


@pytest.mark.slow
@pytest.mark.long
def test_ray_gives_the_local_table_for_the_example_and_simulated_cells(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    simulated = _write(tmp_path, """
        mode = "simulate"
        acceptance = [0.6, 0.2, 0.1]
        [simulation]
        requests = 20
        output_len = "32"
        [[grid]]
        hardware = ["h100", "cpu-2core"]
        target = "llama-3.1-8b"
        drafter = "llama-68m"
        method = ["none", "sequoia", "dyspec", "smartspec"]
        budget = 8
        rate = 20.0
        """)
    configs = {"example": EXAMPLES / "sweep.toml", "simulated": simulated}
    local = {name: run_sweep(c, output=tmp_path / f"{name}-local.parquet")
             for name, c in configs.items()}
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        remote = {name: run_sweep(c, engine="ray", output=tmp_path / f"{name}-ray.parquet")
                  for name, c in configs.items()}
    finally:
        ray.shutdown()
    assert local["example"].cells >= 5000 and local["simulated"].cells == 2 * 4
    for name in configs:
        assert remote[name].computed == local[name].computed == local[name].cells
        assert _without_run_id(remote[name].table).equals(_without_run_id(local[name].table))


@pytest.mark.slow
def test_a_killed_sweep_resumes_without_recomputing_finished_cells(tmp_path: Path) -> None:
    grid = SMALL.replace('"h100", "cpu-2core"', '"h100", "a100", "h200", "gaudi2", "cpu-2core"')
    grid = grid.replace("budget = [4, 8]", "budget = [4, 6, 8, 12, 16, 24]")
    grid = grid.replace('runtime = ["eager", "graph"]', 'runtime = ["eager", "compile"]')
    config = _write(tmp_path, grid)
    out = tmp_path / "out.parquet"
    parts = tmp_path / "out.parquet.parts"
    command = [sys.executable, "-c", "from specscope.cli import main; main()", "sweep",
               str(config), "-o", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(list(parts.glob("part-*.parquet"))) < 3 and proc.poll() is None:
        assert time.monotonic() < deadline, "no part file appeared"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the sweep finished before it was killed"
    assert not out.exists()
    kept = ResultStore(out).load()  # every part on disk reads whole
    total = len(enumerate_cells(load_config(config)))
    assert 0 < kept.height < total and kept["run_id"].n_unique() == 1

    resumed = run_sweep(config, output=out)
    assert resumed.computed == total - kept.height and resumed.reused == kept.height
    table = resumed.table
    earlier = table.filter(pl.col("run_id") != resumed.run_id)
    assert sorted(earlier["key"]) == sorted(kept["key"])  # finished cells were not recomputed
    assert earlier.equals(kept.sort("key").select(table.columns))
    fresh = run_sweep(config, output=tmp_path / "fresh.parquet")
    assert _without_run_id(table).equals(_without_run_id(fresh.table))
