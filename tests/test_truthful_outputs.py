"""Outputs tell the truth about themselves (issue 24): `cost`'s rows add up to its step and say
what bounds it, `-o` writes the file and prints one line, `validate` fits 80 columns, a poorly
fitted profile says so, a profile of another device kind is refused, `--prompts` help lists
what it takes."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
import torch
from conftest import Run
from rich.console import Console

from specscope.cli import main, optimize_tree_main
from specscope.errors import InputError, InputWarning
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.cost_report import cost_report
from specscope.hw_profiles.profile import (
    DATA_DIR,
    HELDOUT_ERR_LIMIT,
    PROFILE_DIR_ENV,
    check_device_kind,
)
from specscope.models import get_model
from specscope.names import PROMPT_SET_SIZES
from specscope.tables import cost_table
from specscope.validate.report import config_table, miss_table, summary_table

PAPERS = Path(__file__).parent.parent / "examples" / "papers"




@pytest.fixture(autouse=True)
def no_user_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user profile directory: only shipped profiles and the tests' own files."""
    folder = tmp_path / "profiles"
    monkeypatch.setenv(PROFILE_DIR_ENV, str(folder))
    return folder


# ---- cost: rows add up to the step, and the bound is the step's --------------------------------


def _rendered_rows(report: dict) -> tuple[list[float], float, str]:
    """The time column of every row above the step row, the step row's time and its bound, as
    printed."""
    console = Console(width=200, record=True)
    console.print(cost_table(report, "t"))
    rows = [[c.strip() for c in line.split("│")[1:-1]]
            for line in console.export_text().splitlines() if line.startswith("│")]
    *parts, step = rows
    return [float(r[3]) for r in parts], float(step[3]), step[4]


@pytest.mark.parametrize(("hw", "model", "runtime", "extra"), [
    ("h100", "llama-3.1-8b", "eager", {}),
    ("h100", "llama-3.1-8b", "graph", {}),
    ("h100", "llama-3.1-8b", "compile", {}),
    ("h100", "llama-3.1-8b", "eager", {"tp": 2, "weight_bits": 4, "offload": 0.5}),
    ("h100", "llama-3.1-8b", "graph", {"weight_bits": 8, "offload": 0.9}),
    ("cpu-2core", "llama-68m", "eager", {}),
    ("cpu-2core", "tiny-code", "compile", {}),
])
def test_cost_rows_add_up_to_the_step(hw: str, model: str, runtime: str, extra: dict) -> None:
    cm = CostModel(load_profile(hw), get_model(model), runtime=runtime, **extra)
    report = cost_report(cm, 1, 4, 512)
    parts = [op["time_ms"] for op in report["operators"]]
    parts += [t["time_ms"] for t in report["step_terms"]]
    assert sum(parts) == pytest.approx(report["step_time_ms"], rel=1e-9)
    printed, step, bound = _rendered_rows(report)
    assert len(printed) == len(parts)
    assert sum(printed) == pytest.approx(step, abs=5e-5 * len(printed) + 5e-5)
    assert step == pytest.approx(report["step_time_ms"], abs=5e-5)
    assert bound == f"{report['bound']}-bound"


def test_an_eager_gpu_step_reads_host_bound_and_a_graph_step_does_not() -> None:
    spec, h100 = get_model("llama-3.1-8b"), load_profile("h100")
    eager = cost_report(CostModel(h100, spec, runtime="eager"), 1, 1, 512)
    graph = cost_report(CostModel(h100, spec, runtime="graph"), 1, 1, 512)
    host = next(t for t in eager["step_terms"] if t["term"] == "host")
    assert eager["bound"] == "host" and host["bound"] == "host"
    # the host row is what the device's work does not hide: the step is the host's issue time
    assert eager["step_time_ms"] == pytest.approx(eager["host_ms"])
    assert host["time_ms"] > 0.5 * eager["step_time_ms"]
    assert graph["bound"] == "memory"
    assert all(t["term"] != "host" for t in graph["step_terms"])  # hidden under the device
    # on a CPU the thread issues and computes in turn: all of the host time is a row
    cpu = cost_report(CostModel(load_profile("cpu-2core"), get_model("llama-68m")), 1, 1, 512)
    host = next(t for t in cpu["step_terms"] if t["term"] == "host")
    assert host["time_ms"] == pytest.approx(cpu["host_ms"])


def test_the_cli_prints_the_bound_and_its_json_carries_the_terms(run: Run) -> None:
    args = ("cost", "--hw", "h100", "--target", "llama-3.1-8b", "--runtime", "eager")
    code, out, err = run(main, *args)
    assert code == 0, err
    assert "(roofline, host-bound)" in out and "host issue" in out
    code, out, err = run(main, *args, "--json")
    doc = json.loads(out)
    assert doc["bound"] == "host"
    assert {t["term"] for t in doc["step_terms"]} == {"overhead", "host"}


def test_measured_steps_show_what_the_table_adds_to_the_formula(tmp_path: Path) -> None:
    path = tmp_path / "measured.toml"
    path.write_text((DATA_DIR / "cpu-2core.toml").read_text() + (
        '\n[[measured]]\nmodel = "llama-68m"\nruntime = "eager"\ncontext = 512\n'
        "new_tokens = [1, 8]\ntime_ms = [40.0, 50.0]\n"))
    report = cost_report(CostModel(load_profile(path), get_model("llama-68m")), 1, 1, 512)
    assert report["source"] == "measured" and report["step_time_ms"] == pytest.approx(40.0)
    measured = report["step_terms"][-1]
    assert measured["term"] == "measured"
    assert measured["time_ms"] == pytest.approx(40.0 - report["roofline_ms"])
    printed, step, _ = _rendered_rows(report)
    assert sum(printed) == pytest.approx(step, abs=5e-5 * len(printed) + 5e-5)


# ---- -o writes the file and prints one line ----------------------------------------------------


OPTIMIZE = ("--hw", "h100", "--target", "llama-2-7b",
            "--acceptance", "0.4,0.2,0.1", "--budget", "16")


@pytest.mark.parametrize("as_json", [False, True])
def test_optimize_tree_output_prints_one_line_not_the_file(run: Run, tmp_path: Path,
                                                           as_json: bool) -> None:
    out_file = tmp_path / "trees.json"
    code, out, err = run(optimize_tree_main, *OPTIMIZE, "-o", str(out_file),
                         *(["--json"] if as_json else []))
    assert code == 0, err
    doc = json.loads(out_file.read_text())
    best = doc["results"][0]
    assert out.count("\n") == 1
    methods = [r for r in doc["results"] if r["algo"] != "any-size"]  # a row, not a method
    assert out.startswith(f"wrote {out_file}: {len(methods)} methods × 1 budget (n ≤ 16)")
    assert f"best {best['algo']} {best['speedup']:.2f}×" in out


def test_optimize_tree_json_without_output_prints_the_json(run: Run) -> None:
    code, out, err = run(optimize_tree_main, *OPTIMIZE, "--json")
    assert code == 0, err
    assert json.loads(out)["results"]


def test_reproduce_output_prints_one_line(run: Run, tmp_path: Path) -> None:
    out_file = tmp_path / "cases.json"
    code, out, err = run(main, "reproduce", str(PAPERS / "medusa.toml"), "-o", str(out_file))
    assert code == 0, err
    cases = json.loads(out_file.read_text())
    assert out.count("\n") == 1 and out.startswith(f"wrote {out_file}: {len(cases)} cases; ")


def test_simulate_output_keeps_stdout_one_json_document(run: Run, tmp_path: Path) -> None:
    """simulate's -o is its per-request table, not its report: the report still prints, and
    under --json the line saying what was written goes to stderr."""
    out_file = tmp_path / "m.parquet"
    args = ("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--rate", "2",
            "--requests", "5", "--seed", "0", "-o", str(out_file))
    code, out, err = run(main, *args, "--json")
    assert code == 0, err
    assert json.loads(out)["generated_tokens"] > 0
    assert f"wrote {out_file}: 5 requests" in err
    code, out, err = run(main, *args, "--force")
    assert code == 0, err
    assert out.rstrip().splitlines()[-1].startswith(f"wrote {out_file}: 5 requests")


# ---- validate fits 80 columns ------------------------------------------------------------------


def _validate_doc() -> dict:
    """A validate document with the longest labels and wide numbers."""
    labels = ["specdecpp/draft/n16/T0.7", "sequoia/draft/n64/T0", "goose/goose/n32/T0.7"]
    rows = []
    for i, label in enumerate(labels):
        rows.append({
            "config": label, "predicted_tokens_per_step": 3.14159,
            "measured_tokens_per_step": 2.5, "predicted_step_ms": 1234.5 / (i + 1),
            "measured_step_ms": 9.876, "predicted_tokens_per_s": 12345.6,
            "measured_tokens_per_s": 999.4, "tokens_per_s_rel_err": 11.2345,
            "miss": ["acceptance model", "drafter overhead", "bookkeeping"][i],
            "replay_exact": [True, False, None][i], "replay_rel_err": [0.0, 0.123, None][i]})
    summary = {"median_rel_err": 0.1234, "p90_rel_err": 0.5, "max_rel_err": 12.5, "count": 3}
    return {"model": "tiny-code", "hardware": "cpu-2core", "runtime": "compile",
            "device": "cpu", "held_out_prompts": 64, "max_new": 64, "configs": rows,
            "tokens_per_step": summary, "step_time": summary, "tokens_per_s": summary,
            "phases": {p: summary for p in ("verify", "draft", "bookkeeping")},
            "replay_fidelity": summary}


def test_validate_tables_fit_80_columns_with_nothing_cut() -> None:
    doc = _validate_doc()
    console = Console(width=80, record=True)
    for table in (config_table(doc), miss_table(doc), summary_table(doc)):
        console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    lines = text.splitlines()
    for r in doc["configs"]:
        row = next(line for line in lines if line.split() and line.split()[0] == r["config"])
        assert row.split()[1:] == ["3.14", "2.50", f"{r['predicted_step_ms']:.0f}"
                                   if r["predicted_step_ms"] >= 100 else
                                   f"{r['predicted_step_ms']:.1f}", "9.88", "12346", "999"]
        assert r["miss"] in text
    assert "exact 0.0%" in text and "differs 12.3%" in text and "1123.5" in text


# ---- a poorly fitted profile says so -----------------------------------------------------------


def _profile_with_fit(tmp_path: Path, median: float, maximum: float) -> Path:
    text = (DATA_DIR / "cpu-2core.toml").read_text()
    text = re.sub(r'^name = "cpu-2core"', 'name = "noisy"', text, flags=re.M)
    text = re.sub(r"(\[fit\.eager\][^\[]*?heldout_median_rel_err = )[0-9.]+", rf"\g<1>{median}",
                  text)
    text = re.sub(r"(\[fit\.eager\][^\[]*?heldout_max_rel_err = )[0-9.]+", rf"\g<1>{maximum}",
                  text)
    path = tmp_path / "noisy.toml"
    path.write_text(text)
    return path


def test_a_profile_over_the_threshold_warns_when_loaded(tmp_path: Path) -> None:
    path = _profile_with_fit(tmp_path, 0.28, 3.52)
    with pytest.warns(InputWarning) as caught:
        load_profile(path)
    (message,) = [str(w.message) for w in caught]
    for needle in ("noisy", "eager", "28.0%", "352.0%", f"{HELDOUT_ERR_LIMIT:.0%}"):
        assert needle in message


def test_the_warning_is_one_stderr_line_and_the_command_succeeds(run: Run,
                                                                 tmp_path: Path) -> None:
    path = _profile_with_fit(tmp_path, 0.28, 3.52)
    code, out, err = run(main, "cost", "--hw", str(path), "--target", "llama-68m", "--json")
    assert code == 0 and json.loads(out)["step_time_ms"] > 0
    (line,) = err.strip().splitlines()
    assert line.startswith("specscope: warning: profile noisy: its eager fit")


def test_a_profile_under_the_threshold_and_every_shipped_profile_are_quiet(
        tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputWarning)
        load_profile(_profile_with_fit(tmp_path, HELDOUT_ERR_LIMIT, 3.52))
        for path in sorted(DATA_DIR.glob("*.toml")):
            load_profile(path)


def test_profile_hw_warns_when_it_writes_a_poor_fit(monkeypatch: pytest.MonkeyPatch,
                                                    no_user_profiles: Path) -> None:
    from specscope.hw_profiles import profile
    from specscope.profiling.calibrate import Grid, profile_hw

    monkeypatch.setattr(profile, "HELDOUT_ERR_LIMIT", -1.0)  # any fit is poor
    grid = Grid(models=("tiny-code-draft",), ns=(1, 2, 4), contexts=(16, 48), static_ns=(1,),
                static_contexts=(16,), prefill=(8, 24), draft_model="tiny-code-draft",
                draft_levels=2, repeats=2, loop_runs=1, wake_gaps=(), serve_batches=())
    threads = torch.get_num_threads()
    try:
        with pytest.warns(InputWarning) as caught:
            result = profile_hw("tiny-box", runtimes=["eager"], grid=grid)
    finally:
        torch.set_num_threads(threads)
    assert result.path.is_file()
    assert any(str(w.message).startswith("profile tiny-box: its eager fit") for w in caught)


# ---- a profile of another device kind is refused -----------------------------------------------


def test_a_profile_of_another_device_kind_is_refused() -> None:
    with pytest.raises(InputError, match=r"GPU.*the run is on cpu.*cpu-2core"):
        check_device_kind(load_profile("h100"), "cpu")
    with pytest.raises(InputError, match=r"CPU.*the run is on cuda.*h100"):
        check_device_kind(load_profile("cpu-2core"), "cuda")
    check_device_kind(load_profile("cpu-2core"), "cpu")
    check_device_kind(load_profile("h100"), "cuda")


def test_validate_refuses_a_gpu_profile_on_cpu_before_any_work(
        run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specscope.validate import compare

    def no_work(*_: object, **__: object) -> None:
        raise AssertionError("validate loaded models before refusing the profile")

    monkeypatch.setattr(compare, "load_session", no_work)
    out = tmp_path / "out"
    code, _, err = run(main, "validate", "--hw", "h100", "--target", "tiny-code", "--device",
                       "cpu", "--quick", "-o", str(out))
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "--hw h100" in line and "cpu-2core" in line
    assert not (out / "validate.parquet").exists()


# ---- --prompts help ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["generate", "collect", "validate", "adapt"])
def test_prompts_help_lists_every_builtin_set_and_the_file_format(run: Run,
                                                                  command: str) -> None:
    code, out, _ = run(main, command, "--help")
    assert code == 0
    text = "".join(out.split())  # help wraps lines, sometimes inside a name
    for name in PROMPT_SET_SIZES:
        assert f"builtin:{name}" in text
    assert ".jsonlfile" in text and '{"prompt":"..."}' in text
