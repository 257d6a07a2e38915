"""Sweep axes of the deployment (issue 41): ep, precision, expert_precision and kv_bits carried
by every cell into its `Deployment`, analytic cells priced as `optimize-tree` prices the same
options (`Deployment.target_cost`, `drafter_spec` → `draft_spec` → `draft_cost`), simulated
cells simulated as `simulate` runs them, and `drafter = "mtp"`: the target's own
multi-token-prediction layer, a skipped cell with its reason on a target without one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import Cli
from test_guards import refused

from specscope.sweeps import run_sweep
from specscope.sweeps.cells import enumerate_cells
from specscope.sweeps.config import load_config

ACCEPTANCE = "0.6,0.2,0.05"
RESULTS = ("speedup", "tokens_per_s", "step_time_ms", "expected_tokens")


def _grid(**axes: Any) -> str:
    """A one-grid analytic sweep config of these axes (TOML values)."""
    lines = [f"acceptance = [{ACCEPTANCE}]", "[[grid]]", 'name = "g"']
    lines += [f"{key} = {json.dumps(value)}" for key, value in axes.items()]
    return "\n".join(lines) + "\n"


def _sweep(tmp_path: Path, text: str) -> pl.DataFrame:
    config = tmp_path / "sweep.toml"
    config.write_text(text)
    return run_sweep(config, output=tmp_path / "out.parquet").table


def _optimized(cli: Cli, row: dict[str, Any]) -> dict[str, Any]:
    """`optimize-tree`'s result for the method of a sweep row, on the row's options."""
    args = ["optimize-tree", "--hw", row["hardware"], "--target", row["target"],
            "--drafter", row["drafter"], "--acceptance", ACCEPTANCE, "--algo", row["method"],
            "--budget", row["budget"], "--batch", row["batch"], "--tp", row["tp"],
            "--ep", row["ep"], "--precision", row["precision"], "--kv-bits", row["kv_bits"],
            "--context", row["context"], "--max-depth", row["max_depth"]]
    if row["expert_precision"] is not None:
        args += ["--expert-precision", row["expert_precision"]]
    if row["engine"] != "specscope":
        args += ["--engine", row["engine"]]
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return next(r for r in json.loads(out)["results"] if r["algo"] == row["method"])


def _equal_to_optimize_tree(cli: Cli, table: pl.DataFrame) -> None:
    for row in table.filter(pl.col("status") == "ok").iter_rows(named=True):
        theirs = _optimized(cli, row)
        for name in RESULTS:
            assert row[name] == pytest.approx(theirs[name], rel=1e-9, abs=0), (name, row)


def test_fp8_and_an_fp8_kv_cache_are_rows_priced_as_optimize_tree(tmp_path: Path,
                                                                  cli: Cli) -> None:
    table = _sweep(tmp_path, _grid(
        hardware="h200", target="qwen3-30b-a3b", drafter="qwen3-0.6b", method="chain",
        budget=8, batch=[1, 8], precision=["bf16", "fp8"], kv_bits=[16, 8]))
    assert table.height == 8 and set(table["status"]) == {"ok"}
    formats = table.group_by("batch").agg(pl.col("step_time_ms").n_unique())
    assert formats["step_time_ms"].to_list() == [4, 4]  # every format prices differently
    one = table.filter(pl.col("batch") == 1)
    steps = {(r["precision"], r["kv_bits"]): r["step_time_ms"] for r in one.iter_rows(named=True)}
    assert steps["fp8", 16] < steps["bf16", 16]  # half the weight bytes a step reads
    _equal_to_optimize_tree(cli, table)


def test_expert_parallelism_is_an_axis(tmp_path: Path, cli: Cli) -> None:
    table = _sweep(tmp_path, _grid(
        hardware="h200", target="qwen3-30b-a3b", drafter="qwen3-0.6b", method="sequoia",
        budget=8, tp=2, ep=[1, 2]))
    assert sorted(table["ep"]) == [1, 2] and set(table["status"]) == {"ok"}
    assert table["step_time_ms"].n_unique() == 2
    _equal_to_optimize_tree(cli, table)


def test_mtp_drafts_with_the_targets_layer_as_optimize_tree_prices_it(tmp_path: Path,
                                                                       cli: Cli) -> None:
    table = _sweep(tmp_path, _grid(
        hardware="h200", engine=["specscope", "sglang"], target="deepseek-v3",
        drafter=["mtp", "qwen3-0.6b"], method=["chain", "sequoia"], budget=4, tp=8,
        precision=["bf16", "fp8"]))
    ok = table.filter(pl.col("status") == "ok")
    assert set(ok["precision"]) == {"fp8"}  # bf16 weights do not fit in 8 × 141 GB
    bf16 = table.filter(pl.col("precision") == "bf16")
    assert all("do not fit" in r for r in bf16["reason"])
    assert ok.filter(pl.col("drafter") == "mtp").height == 4
    _equal_to_optimize_tree(cli, ok)


def test_mtp_on_a_dense_target_is_a_skipped_cell_with_its_reason(tmp_path: Path) -> None:
    table = _sweep(tmp_path, _grid(
        hardware="h100", target="llama-3.1-8b", drafter=["mtp", "llama-68m"], method="chain",
        budget=4))
    rows = {r["drafter"]: r for r in table.iter_rows(named=True)}
    assert rows["llama-68m"]["status"] == "ok"
    assert rows["mtp"]["status"] == "skipped"
    assert "llama-3.1-8b declares none" in rows["mtp"]["reason"]


def test_a_format_the_profile_cannot_run_and_a_system_beside_fp8_are_skipped(
        tmp_path: Path) -> None:
    table = _sweep(tmp_path, _grid(
        hardware="h200", target="qwen3-30b-a3b", drafter="qwen3-0.6b", method="chain",
        budget=4, precision="fp8", expert_precision=["none", "nvfp4"],
        system=["none", "draft-model"]))
    rows = {(r["expert_precision"], r["system"]): r for r in table.iter_rows(named=True)}
    assert rows[None, "none"]["status"] == "ok"
    assert "--expert-precision nvfp4" in rows["nvfp4", "none"]["reason"]
    assert "h200" in rows["nvfp4", "none"]["reason"]
    assert "--precision prices the plain target" in rows[None, "draft-model"]["reason"]


def test_simulated_cells_deploy_the_formats(tmp_path: Path, cli: Cli) -> None:
    config = tmp_path / "sim.toml"
    config.write_text(_grid(
        mode="simulate", hardware="h200", target="qwen3-30b-a3b", drafter="qwen3-0.6b",
        method="dyspec", budget=4, batch=8, rate=4.0, precision=["bf16", "fp8"], kv_bits=8)
        + '[simulation]\nrequests = 12\nprompt_len = "128"\noutput_len = "16"\n')
    table = run_sweep(config, output=tmp_path / "sim.parquet").table
    assert set(table["status"]) == {"ok"} and table["mean_tpot_ms"].n_unique() == 2
    for row in table.iter_rows(named=True):
        code, out, err = cli(
            "simulate", "--hw", "h200", "--target", "qwen3-30b-a3b", "--drafter", "qwen3-0.6b",
            "--acceptance", ACCEPTANCE, "--policy", "dyspec", "--budget", 4, "--max-depth",
            row["max_depth"], "--max-batch", 8, "--rate", 4, "--requests", 12, "--prompt-len",
            128, "--output-len", 16, "--seed", row["seed"], "--precision", row["precision"],
            "--kv-bits", 8, "--no-against-plain", "--json")
        assert code == 0, err
        summary = json.loads(out)
        for name in ("throughput_tok_s", "mean_tpot_ms", "p99_latency_s"):
            assert row[name] == pytest.approx(summary[name], rel=1e-9), name


def test_cells_at_the_defaults_keep_their_keys(tmp_path: Path) -> None:
    """A grid stating the defaults is the grid without them: same cells, same keys (so the
    results of sweeps run before these axes are reused), and a results table written before
    them is read with their defaults."""
    plain = dict(hardware="a100", target="llama-3.1-8b", drafter="llama-68m", method="chain",
                 budget=4)
    keys = []
    for extra in ({}, {"ep": 1, "precision": "bf16", "expert_precision": "none",
                       "kv_bits": 16}):
        config = tmp_path / "keys.toml"
        config.write_text(_grid(**plain, **extra))
        keys.append([c.key for c in enumerate_cells(load_config(config))])
    assert keys[0] == keys[1]
    config.write_text(_grid(**plain, kv_bits=8))
    assert [c.key for c in enumerate_cells(load_config(config))] != keys[0]
    table = _sweep(tmp_path, _grid(**plain))
    table.drop("ep", "precision", "expert_precision", "kv_bits").write_parquet(
        tmp_path / "out.parquet")
    again = run_sweep(tmp_path / "sweep.toml", output=tmp_path / "out.parquet")
    assert (again.computed, again.reused) == (0, 1)
    assert again.table.drop("run_id").equals(table.drop("run_id"))


@pytest.mark.parametrize(("axis", "value", "words"), [
    ("precision", '"fp16"', ("precision: unknown 'fp16'", "bf16, fp8, nvfp4")),
    ("expert_precision", '["int4"]', ("expert_precision: unknown 'int4'",)),
    ("kv_bits", "[16, 4]", ("kv_bits: unknown 4", "16, 8")),
    ("kv_bits", "8.0", ("kv_bits: unknown 8.0",)),
    ("ep", "[1, 0]", ("ep: expected an integer ≥ 1, got 0",)),
    ("ep", '"two"', ("ep: expected an integer ≥ 1",)),
])
def test_bad_values_are_refused_in_one_line(tmp_path: Path, cli: Cli, axis: str, value: str,
                                            words: tuple[str, ...]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(_grid(hardware="h200", target="qwen3-30b-a3b", drafter="qwen3-0.6b",
                            method="chain", budget=4) + f"{axis} = {value}\n")
    refused(cli("sweep", config, "-o", tmp_path / "out.parquet"), str(config), "grid g",
            *words)


def test_the_moe_example_is_a_grid_of_these_axes() -> None:
    cells = enumerate_cells(load_config(Path(__file__).parent.parent / "examples"
                                        / "sweep-moe.toml"))
    assert len(cells) == 640
    assert {c.drafter for c in cells} == {"qwen3-0.6b", "mtp"}
    assert {(c.precision, c.expert_precision, c.kv_bits) for c in cells} == {
        (p, e, k) for p in ("bf16", "fp8") for e in (None, "nvfp4") for k in (16, 8)}
