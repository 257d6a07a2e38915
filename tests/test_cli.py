"""The command line: every bad input is one stderr line, exit status 2, and no output file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import Run

from specscope.cli import main, optimize_tree_main
from specscope.profiling.fit import GPTFAST_A100, load_published
from specscope.trace import synth_trace, write_trace


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "synth.parquet"
    with pytest.raises(SystemExit) as exc:
        main(["trace", "synth", "--requests", "8", "--length", "96", "--seed", "3", "-o",
              str(path)])
    assert exc.value.code == 0
    return path


def _rewrite(src: Path, dst: Path, edit: Callable[[pa.Table], pa.Table]) -> Path:
    """Copy a parquet file through `edit`, keeping its key-value metadata."""
    table = pq.read_table(src)
    pq.write_table(edit(table).replace_schema_metadata(table.schema.metadata), dst)
    return dst


def _set_first(table: pa.Table, column: str, value: float) -> pa.Table:
    col = table.column(column).to_pylist()
    col[5] = value
    return table.set_column(table.schema.get_field_index(column), column,
                            pa.array(col, type=table.schema.field(column).type))


def _set_first_list(table: pa.Table, column: str, value: float) -> pa.Table:
    col = table.column(column).to_pylist()
    col[7] = [value, *col[7][1:]]
    return table.set_column(table.schema.get_field_index(column), column,
                            pa.array(col, type=table.schema.field(column).type))


BROKEN: dict[str, tuple[Callable[[Path, Path], Path], str]] = {
    "missing": (lambda src, d: d / "nope.parquet", "nope.parquet"),
    "truncated": (
        lambda src, d: (d / "t.parquet").write_bytes(src.read_bytes()[: src.stat().st_size // 2])
        and d / "t.parquet",
        "t.parquet",
    ),
    "not parquet": (
        lambda src, d: (d / "x.parquet").write_text("request_id,pos\n1,2\n") and d / "x.parquet",
        "x.parquet",
    ),
    "empty": (lambda src, d: _rewrite(src, d / "e.parquet", lambda t: t.slice(0, 0)), "empty"),
    "no rank column": (lambda src, d: _rewrite(src, d / "c.parquet", lambda t: t.drop(["rank"])),
                       "rank"),
    "probability > 1": (
        lambda src, d: _rewrite(src, d / "p.parquet", lambda t: _set_first(t, "target_prob", 1.5)),
        "target_prob",
    ),
    "NaN probability": (
        lambda src, d: _rewrite(
            src, d / "n.parquet", lambda t: _set_first_list(t, "cand_target_probs", float("nan"))
        ),
        "cand_target_probs",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_trace_is_one_line_exit_2(run: Run, trace_file: Path, tmp_path: Path,
                                         case: str) -> None:
    make, needle = BROKEN[case]
    bad = make(trace_file, tmp_path)
    out_file = tmp_path / "trees.json"
    code, _, err = run(optimize_tree_main, "--hw", "h100", "--target", "llama-2-7b",
                       "--trace", str(bad),
                         "--budget", "16", "-o", str(out_file))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert needle in err
    assert not out_file.exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--acceptance", "0.7,0.5", "--budget", "8"], "sum over 1"),
        (["--acceptance", "0.7,nan", "--budget", "8"], "[0, 1]"),
        (["--acceptance", "0.7,-0.1", "--budget", "8"], "[0, 1]"),
        (["--acceptance", "0.7,x", "--budget", "8"], "--acceptance"),
        (["--acceptance", "0.7", "--budget", "0"], "--budget"),
        (["--acceptance", "0.7", "--budgets", "8,0"], "--budgets"),
        (["--acceptance", "0.7", "--budget", "8", "--max-depth", "-1"], "--max-depth"),
        (["--acceptance", "0.7", "--budget", "abc"], "--budget"),
        (["--acceptance", "0.7", "--budget", "8", "--target", "gpt-9"], "gpt-9"),
        (["--acceptance", "0.7", "--budget", "8", "--drafter", "tiny-9"], "tiny-9"),
        (["--acceptance", "0.7", "--budget", "8", "--algo", "magic"], "magic"),
        (["--acceptance", "0.7", "--budget", "8", "--bogus"], "--bogus"),
        (["--acceptance", "0.6,0.2", "--budget", "64", "--max-depth", "2"], "64"),
        (["--budget", "8"], "--trace"),
        (["--acceptance", "0.7", "--budget", "8", "--runtime", "jit"], "--runtime jit"),
        (["--acceptance", "0.7", "--budget", "8", "--tree-attention", "flex"],
         "--tree-attention"),
    ],
)
def test_bad_options_are_one_line_exit_2(run: Run, tmp_path: Path, args: list[str],
                                         needle: str) -> None:
    out_file = tmp_path / "trees.json"
    code, _, err = run(optimize_tree_main, "--hw", "h100", "--target", "llama-2-7b", *args,
                       "-o", str(out_file))
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert needle in err
    assert not out_file.exists()


def test_unknown_hardware(run: Run, tmp_path: Path) -> None:
    code, _, err = run(optimize_tree_main, "--hw", "tpu-v9", "--target", "llama-2-7b",
                       "--acceptance", "0.7",
                       "--budget", "8", "-o", str(tmp_path / "t.json"))
    assert code == 2 and "tpu-v9" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "t.json").exists()


def test_unknown_model_in_cost(run: Run) -> None:
    code, _, err = run(main, "cost", "--hw", "a100", "--target", "llama-9-999b")
    assert code == 2 and "llama-9-999b" in err and len(err.strip().splitlines()) == 1


def test_optimize_tree_json_and_output_file(run: Run, trace_file: Path, tmp_path: Path) -> None:
    out_file = tmp_path / "trees.json"
    code, out, err = run(optimize_tree_main, "--hw", "h100", "--target", "llama-2-7b",
                         "--trace", str(trace_file),
                         "--budget", "16", "--json", "-o", str(out_file))
    assert code == 0, err
    doc = json.loads(out_file.read_text())  # -o holds the JSON; stdout says what it wrote
    assert out.count("\n") == 1 and out.startswith(f"wrote {out_file}: ")
    assert {"hardware", "target", "drafter", "results"} <= doc.keys()
    algos = {r["algo"] for r in doc["results"]}
    assert {"sequoia", "chain", "kary", "best-first"} <= algos
    best = max(r["expected_tokens"] for r in doc["results"])
    dp = next(r for r in doc["results"] if r["algo"] == "sequoia")
    assert dp["expected_tokens"] == pytest.approx(best) and dp["n"] == 16
    for r in doc["results"]:
        assert r["n"] <= 16 and r["replay_tokens"] >= 1
        if r["algo"] != "specdecpp":  # a policy: n is its mean verified length
            assert len(r["tree"]["parents"]) == r["n"]
        assert r["tokens_per_s"] == pytest.approx(r["expected_tokens"] / r["step_time_ms"] * 1e3)
    speedups = [r["speedup"] for r in doc["results"]]
    assert speedups == sorted(speedups, reverse=True)


def test_the_runtime_changes_the_price_of_drafting(run: Run, trace_file: Path) -> None:
    """Eager draft levels cost a launch-bound ~2 ms on an H100 where a graph replays them in
    ~0.3 ms: the same tree's predicted speedup falls under eager, and the JSON says which."""
    docs = {}
    for runtime in ("graph", "eager"):
        code, out, err = run(optimize_tree_main, "--hw", "h100", "--target", "llama-2-7b",
                             "--trace", str(trace_file),
                             "--budget", "16", "--algo", "sequoia", "--runtime", runtime,
                             "--json")
        assert code == 0, err
        docs[runtime] = json.loads(out)
        assert docs[runtime]["runtime"] == runtime
        assert docs[runtime]["tree_attention"] == "split"
    graph, eager = (docs[r]["results"][0] for r in ("graph", "eager"))
    assert eager["step_time_ms"] > graph["step_time_ms"]
    if docs["graph"]["drafter"] != "none":
        assert eager["speedup"] < graph["speedup"]


def test_budgets_choose_per_hardware(run: Run, trace_file: Path) -> None:
    """A fast accelerator affords bigger trees than the edge CPU at the same acceptance."""
    sizes = {}
    for hw in ("h100", "cpu-2core"):
        code, out, err = run(optimize_tree_main, "--hw", hw, "--target", "llama-2-7b",
                             "--trace", str(trace_file),
                             "--budgets", "4,8,16,32,64,128", "--algo", "sequoia", "--json")
        assert code == 0, err
        sizes[hw] = json.loads(out)["results"][0]["n"]
    assert sizes["h100"] >= sizes["cpu-2core"]


def test_cost_json(run: Run) -> None:
    code, out, err = run(main, "cost", "--hw", "a100", "--target", "llama-2-7b", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["step_time_ms"] > 0 and doc["operators"]


@pytest.mark.parametrize("row", [r for r in load_published(GPTFAST_A100) if r.tokens_per_s],
                         ids=lambda r: f"{r.model}-w{r.weight_bits}-tp{r.tp}")
def test_cost_command_reproduces_gptfast_a100_rows_within_15_percent(run: Run, row) -> None:
    code, out, err = run(main, "cost", "--hw", "a100", "--target", row.model, "--weight-bits",
                         str(row.weight_bits), "--group-size", str(row.group_size), "--tp",
                         str(row.tp), "--batch", str(row.batch), "--context", str(row.context),
                         "--json")
    assert code == 0, err
    assert 1e3 / json.loads(out)["step_time_ms"] == pytest.approx(row.tokens_per_s, rel=0.15)


def test_help_exits_zero(run: Run) -> None:
    code, out, _ = run(main, "--help")
    assert code == 0 and "optimize-tree" in out


def test_unknown_source_names_the_sources(run: Run, trace_file: Path) -> None:
    code, _, err = run(optimize_tree_main, "--hw", "h100", "--target", "llama-2-7b",
                       "--trace", str(trace_file),
                       "--source", "draft:nope", "--budget", "8")
    assert code == 2 and "draft:nope" in err and len(err.strip().splitlines()) == 1


def test_a_source_kind_resolves_when_the_trace_holds_one_of_it(run: Run, tmp_path: Path
                                                               ) -> None:
    one, two = tmp_path / "one.parquet", tmp_path / "two.parquet"
    write_trace(synth_trace(4, 0, sources=("ngram", "rasd:llama-68m"), length=32), one)
    write_trace(synth_trace(4, 0, sources=("rasd:llama-68m", "rasd:llama-3.2-1b"), length=32),
                two)
    args = ("--hw", "h100", "--target", "llama-2-7b", "--source", "rasd", "--budget", "8",
            "--algo", "chain", "--json")
    code, out, err = run(optimize_tree_main, "--trace", str(one), *args)
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["source"], doc["drafter"]) == ("rasd:llama-68m", "llama-68m")
    code, out, err = run(optimize_tree_main, "--trace", str(two), *args)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "--source" in err and "rasd:llama-68m, rasd:llama-3.2-1b" in err
    assert "Traceback" not in err


def test_depth_dependent_acceptance_from_the_trace(run: Run, trace_file: Path) -> None:
    code, out, err = run(optimize_tree_main, "--hw", "a100", "--target", "llama-2-7b",
                         "--trace", str(trace_file),
                         "--budget", "24", "--max-depth", "6", "--depth-dependent",
                         "--algo", "sequoia,best-first", "--json")
    assert code == 0, err
    results = {r["algo"]: r for r in json.loads(out)["results"]}
    assert results["sequoia"]["expected_tokens"] >= results["best-first"]["expected_tokens"] - 1e-9
    assert results["sequoia"]["depth"] <= 6


@pytest.mark.parametrize("budget", [16, 48])
def test_all_methods_at_one_budget_never_beat_the_dp(run: Run, trace_file: Path,
                                                      budget: int) -> None:
    """Five methods plus baselines, valued and replayed; none above the exact DP optimum."""
    code, out, err = run(optimize_tree_main, "--hw", "h100", "--target", "llama-2-7b",
                         "--trace", str(trace_file),
                         "--budget", str(budget), "--algo", "all", "--json")
    assert code == 0, err
    rows = {r["algo"]: r for r in json.loads(out)["results"]}
    assert {"sequoia", "dyspec", "goose", "specdecpp", "ets", "chain", "kary",
            "best-first"} <= rows.keys()
    dp = rows["sequoia"]["expected_tokens"]
    for algo, r in rows.items():
        assert r["expected_tokens"] <= dp + 1e-9, algo
        assert r["replay_tokens"] >= 1 and r["n"] <= budget
        assert len(r["tree"]["parents"]) <= budget
    assert rows["ets"]["expected_tokens"] == pytest.approx(dp, abs=1e-6)


def test_budgets_print_a_pareto_table(run: Run, trace_file: Path) -> None:
    code, out, err = run(optimize_tree_main, "--hw", "cpu-2core", "--target", "llama-2-7b",
                         "--trace", str(trace_file),
                         "--budgets", "8,32", "--algo", "sequoia,goose,chain", "--json")
    assert code == 0, err
    doc = json.loads(out)
    pareto = doc["pareto"]
    assert {(r["budget"], r["algo"]) for r in pareto} == {
        (b, a) for b in (8, 32) for a in ("sequoia", "goose", "chain")}
    for r in pareto:
        assert r["n"] <= r["budget"]
    best = {r["algo"]: r["speedup"] for r in doc["results"]}
    for r in pareto:
        assert r["speedup"] <= best[r["algo"]] + 1e-12


def test_methods_needing_a_trace_are_skipped_with_a_reason(run: Run) -> None:
    code, out, err = run(optimize_tree_main, "--hw", "h100", "--target", "llama-2-7b",
                         "--acceptance", "0.6,0.2,0.1",
                         "--budget", "12", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert {"goose", "specdecpp"} == doc["skipped"].keys()
    assert {r["algo"] for r in doc["results"]} >= {"sequoia", "ets", "dyspec", "eagle2"}


def test_bad_method_parameters_are_one_line(run: Run, trace_file: Path) -> None:
    code, _, err = run(optimize_tree_main, "--hw", "h100", "--target", "llama-2-7b",
                       "--trace", str(trace_file),
                       "--budget", "16", "--algo", "specdecpp", "--specdecpp-threshold", "1.5")
    assert code == 2 and "--specdecpp-threshold" in err and len(err.strip().splitlines()) == 1


def test_generate_is_lossless_and_reports_rates(run: Run) -> None:
    code, out, err = run(main, "generate", "--target", "tiny-code", "--drafter", "ngram",
                         "--algo", "sequoia", "--budget", "6", "--prompts", "builtin:code-edit",
                         "--n", "2", "--output-len", "16", "--verify-lossless", "--threads", "1",
                         "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["lossless"] is True and doc["mismatches"] == 0
    assert doc["tokens_per_s"] > 0 and doc["ar_tokens_per_s"] > 0
    assert doc["tokens_per_step"] == pytest.approx(doc["mean_accepted"] + 1)


def test_collect_writes_a_trace_that_drives_optimize_tree(run: Run, tmp_path: Path) -> None:
    trace = tmp_path / "real.parquet"
    code, _, err = run(main, "collect", "--target", "tiny-code", "--drafter",
                       "tiny-code-draft,ngram", "--prompts", "builtin:stdlib-code", "--n", "2",
                       "--output-len", "16",
                       "-o", str(trace))
    assert code == 0, err
    code, out, err = run(optimize_tree_main, "--hw", "cpu-2core", "--target", "llama-2-7b",
                         "--trace", str(trace),
                         "--budget", "8", "--algo", "sequoia,chain", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["source"] == "draft:tiny-code-draft" and doc["drafter"] == "tiny-code-draft"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["generate", "--target", "nope", "--drafter", "ngram", "--prompts", "builtin:code-edit",
          "--algo", "chain", "--budget", "4"], "nope"),
        (["generate", "--target", "tiny-code", "--drafter", "bogus", "--prompts",
          "builtin:code-edit", "--algo", "chain", "--budget", "4"], "bogus"),
        (["generate", "--target", "tiny-code", "--drafter", "ngram", "--prompts", "missing.jsonl",
          "--algo", "chain", "--budget", "4"], "missing.jsonl"),
        (["collect", "--target", "tiny-code", "--drafter", "magic", "--prompts",
          "builtin:stdlib-code", "-o", "OUT"], "magic"),
    ],
)
def test_bad_generate_and_collect_inputs(run: Run, tmp_path: Path, args: list[str],
                                         needle: str) -> None:
    out_file = tmp_path / "t.parquet"
    code, _, err = run(main, *[str(out_file) if a == "OUT" else a for a in args])
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not out_file.exists()


def test_choice_does_not_depend_on_the_hash_seed(trace_file: Path) -> None:
    """Same inputs, same output, whatever PYTHONHASHSEED orders sets and dicts by."""
    import os
    import subprocess
    import sys

    args = ["--hw", "h100", "--target", "llama-2-7b", "--trace", str(trace_file), "--budgets",
            "4,8,16", "--algo",
            "best-first,kary,dyspec", "--json"]
    code = "from specscope.cli import optimize_tree_main; optimize_tree_main()"
    outs = {
        subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       check=True, env=os.environ | {"PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
