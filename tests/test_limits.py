"""Memory- and time-hungry requests are estimated up front and refused above a limit the user can
raise (`specscope.limits`); requests under it run as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Cli

from specscope.errors import InputError
from specscope.limits import MEMORY_ENV, TIME_ENV, check_memory, check_time, memory_limit
from specscope.trace import read_trace, synth_trace

SWEEP = """seed = 0
mode = "analytic"
context = 512
[acceptance]
"llama-68m" = [0.55, 0.12, 0.05]
[[grid]]
name = "g"
hardware = ["h100", "a100"]
target = ["llama-3.1-8b"]
drafter = ["llama-68m"]
method = ["chain"]
budget = [2, 4]
batch = [BATCHES]
"""


def _refused(result: tuple[int, str, str], *words: str) -> None:
    status, _, err = result
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specscope: error: ")
    for word in (*words, "estimated", MEMORY_ENV):
        assert word in lines[0]


def test_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEMORY_ENV, "2.5")
    assert memory_limit() == (2.5e9, f"{MEMORY_ENV}=2.5")
    check_memory(2.4e9, "x")
    with pytest.raises(InputError, match=r"2\.6 GB of memory, over the limit of 2\.5 GB"):
        check_memory(2.6e9, "x")
    for bad in ("lots", "0", "-1", "inf", "nan"):
        monkeypatch.setenv(MEMORY_ENV, bad)
        with pytest.raises(InputError, match=MEMORY_ENV):
            memory_limit()
    monkeypatch.delenv(MEMORY_ENV)
    assert 0 < memory_limit()[0] < float("inf")
    monkeypatch.setenv(TIME_ENV, "1")
    check_time(59, "x")
    with pytest.raises(InputError, match=TIME_ENV):
        check_time(61, "x")


def test_simulate_refuses_too_many_requests(cli: Cli, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEMORY_ENV, "0.01")
    out = tmp_path / "sim.parquet"
    _refused(cli("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--rate", "1",
                 "--requests", "10000000", "--seed", "0", "-o", out), "--requests 10,000,000")
    assert not out.exists()
    # 100 requests of 256 tokens need about 0.3 MB: they run under the same limit
    status, stdout, _ = cli("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--rate",
                            "1", "--requests", "100", "--seed", "0", "--json")
    assert status == 0 and '"requests": 100' in stdout


def test_trace_synth_refuses_a_large_trace_and_keeps_small_ones(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = synth_trace(requests=4, seed=3, length=16)
    monkeypatch.setenv(MEMORY_ENV, "0.01")
    out = tmp_path / "t.parquet"
    _refused(cli("trace", "synth", "--requests", "100000", "--length", "4096", "-o", out),
             "--requests 100,000", "--length 4,096")
    assert not out.exists()
    assert cli("trace", "synth", "--requests", "4", "--length", "16", "--seed", "3",
               "-o", out)[0] == 0
    assert read_trace(out).df.equals(reference.df)


def test_sweep_counts_its_grid_before_expanding_it(cli: Cli, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEMORY_ENV, "0.001")  # about 270 cells
    big = tmp_path / "big.toml"
    big.write_text(SWEEP.replace("BATCHES", ", ".join(map(str, range(1, 1001)))))
    _refused(cli("sweep", big, "-o", tmp_path / "big.parquet"), "4,000 cells")
    assert not (tmp_path / "big.parquet").exists()
    small = tmp_path / "small.toml"
    small.write_text(SWEEP.replace("BATCHES", "1, 8"))
    status, stdout, _ = cli("sweep", small, "-o", tmp_path / "small.parquet", "--json")
    assert status == 0 and '"cells": 8' in stdout


def test_optimize_tree_refuses_budgets_over_memory_or_time(
        cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
            "--acceptance", "0.6,0.2,0.1", "--budget")
    _refused(cli(*args, "1000000000"), "--budget 1,000,000,000")
    monkeypatch.setenv(TIME_ENV, "0.01")
    status, _, err = cli(*args, "100000")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "--budget 100,000" in err and TIME_ENV in err
    status, stdout, _ = cli(*args, "16", "--algo", "sequoia,chain", "--json")
    assert status == 0 and '"algo": "sequoia"' in stdout
