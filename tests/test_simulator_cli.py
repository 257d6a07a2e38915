"""`specscope simulate` on the command line: identical JSON for a seed, the metrics file, and
every bad input as one stderr line with exit status 2 and nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from specscope.cli import main, optimize_tree_main
from specscope.trace import synth_trace, write_trace
from specscope.tree import Tree

BASE = ["simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter", "llama-3.2-1b",
        "--acceptance", "0.6,0.2", "--rate", "20", "--requests", "30", "--seed", "1",
        "--output-len", "64"]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `specscope` in-process: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("sim")
    tree = Tree.chain(3, "draft:llama-3.2-1b")
    paths = {"tree": folder / "tree.json", "other": folder / "other.json",
             "trace": folder / "trace.parquet", "garbage": folder / "garbage.parquet",
             "arrivals": folder / "arrivals.txt", "rasd": folder / "rasd.parquet",
             "rasds": folder / "rasds.parquet"}
    paths["tree"].write_text(tree.to_json())
    optimized = {"target": "llama-2-7b", "source": "draft:llama-3.2-1b",
                 "results": [{"algo": "chain", "tree": tree.to_dict()}]}
    paths["other"].write_text(json.dumps(optimized))
    write_trace(synth_trace(4, seed=0, sources=("draft:llama-68m",), length=32), paths["trace"])
    write_trace(synth_trace(4, seed=0, sources=("rasd:llama-68m", "ngram"), length=32),
                paths["rasd"])
    write_trace(synth_trace(4, seed=0, sources=("rasd:llama-68m", "rasd:llama-3.2-1b"),
                            length=32), paths["rasds"])
    paths["garbage"].write_text("not a parquet file\n")
    paths["arrivals"].write_text("0.0\n0.5\nsoon\n")
    return paths


def test_json_is_identical_for_a_seed_and_the_metrics_file_holds_every_request(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path], tmp_path: Path) -> None:
    args = [*BASE, "--policy", "static", "--tree", str(files["tree"]), "--json"]
    code, first, err = _cli(capsys, *args, "-o", str(tmp_path / "m.parquet"))
    assert code == 0, err
    assert _cli(capsys, *args)[1] == first
    summary = json.loads(first)
    for key in ("throughput_tok_s", "goodput_tok_s", "mean_tpot_ms", "mean_ttft_ms",
                "mean_latency_s", "p99_latency_s", "mean_accepted", "generated_tokens",
                "acceptance", "replayed_steps", "sampled_steps"):
        assert key in summary
    assert summary["acceptance"] == "sampled"
    table = pl.read_parquet(tmp_path / "m.parquet")
    assert table.height == 30 and table["tokens"].sum() == summary["generated_tokens"]
    stored = json.loads(pq.read_metadata(tmp_path / "m.parquet").metadata[b"summary"])
    assert stored == summary
    series = pl.read_parquet(tmp_path / "m.timeseries.parquet")
    assert series["batch"].max() == summary["peak_batch"]
    events = pl.read_parquet(tmp_path / "m.events.parquet")
    assert events.filter(pl.col("event") == "finish").height == 30


def test_the_terminal_summary_states_its_units(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, *BASE)
    assert code == 0
    assert "TPOT ms" in out and "tok/s" in out


BAD = {
    "unknown policy": (["--policy", "magic"], "--policy"),
    "tree for another target": (["--policy", "static", "--tree", "{other}"], "llama-2-7b"),
    "zero rate": (["--rate", "0"], "--rate"),
    "negative rate": (["--rate", "-2"], "--rate"),
    "trace that does not parse": (["--trace", "{garbage}", "--acceptance", ""], "garbage"),
    "unknown hardware": (["--hw", "h900"], "h900"),
    "unknown target": (["--target", "llama-9"], "llama-9"),
    "unknown drafter": (["--drafter", "nope-1b"], "nope-1b"),
    "budget below the batch": (["--max-batch", "64", "--token-budget", "32"], "--token-budget"),
    "empty tree budget": (["--budget", "0", "--policy", "static", "--tree", "{tree}"],
                          "--budget"),
    "static without a tree": (["--policy", "static"], "--tree"),
    "unknown algo": (["--policy", "static", "--tree", "{other}", "--algo", "sequoia"],
                     "--algo"),
    "bad arrival file": (["--arrival-file", "{arrivals}"], "line 3"),
    "bad lengths": (["--prompt-len", "uniform:9"], "--prompt-len"),
    "bad router": (["--router", "random"], "--router"),
    "model-free drafter not in the trace": (["--drafter", "ngram", "--trace", "{trace}",
                                             "--acceptance", ""], "'ngram'"),
    "source not in the trace": (["--trace", "{trace}", "--acceptance", "", "--source",
                                 "draft:nope"], "--source"),
    "source kind not in the trace": (["--trace", "{trace}", "--acceptance", "", "--source",
                                      "rasd"], "'rasd' is not in the trace"),
    "ambiguous source kind": (["--trace", "{rasds}", "--acceptance", "", "--source", "rasd"],
                              "rasd:llama-68m, rasd:llama-3.2-1b"),
    "weights do not fit": (["--target", "llama-2-70b"], "do not fit"),
    "prompt over the budget": (["--prompt-len", "9000"], "--chunked-prefill"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_is_one_line_exit_2_and_nothing_written(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path], tmp_path: Path,
        case: str) -> None:
    extra, needle = BAD[case]
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in extra]
    argv = list(BASE)
    for i in range(0, len(args), 2):
        flag, value = args[i], args[i + 1]
        if flag in argv:
            at = argv.index(flag)
            if value:
                argv[at + 1] = value
            else:
                del argv[at : at + 2]
        else:
            argv += [flag, value]
    out_file = tmp_path / "metrics.parquet"
    code, out, err = _cli(capsys, *argv, "-o", str(out_file))
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and needle in err
    assert not out_file.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_simulator_imports_neither_torch_nor_the_executor() -> None:
    """docs/architecture.md: the simulator starts fast and works without torch."""
    code = ("import sys; from specscope.simulator.run import run_simulation; "
            "print(sorted(m for m in ('torch', 'specscope.executor', 'specscope.validate') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


SIM = ["simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--rate", "20", "--requests", "20",
       "--seed", "1", "--output-len", "64", "--policy", "smartspec", "--json"]


def test_synth_then_simulate_prices_another_drafter_on_the_traces_acceptance(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The issue's flow: `trace synth` (source draft:llama-68m), then `simulate --drafter
    llama-3.2-1b`, accepted as `optimize-tree` accepts the same request."""
    trace = tmp_path / "x.parquet"
    code, _, err = _cli(capsys, "trace", "synth", "--requests", "4", "--length", "64", "--seed",
                        "1", "-o", str(trace))
    assert code == 0, err
    code, out, err = _cli(capsys, *SIM, "--trace", str(trace), "--drafter", "llama-3.2-1b")
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["drafter"], summary["source"]) == ("llama-3.2-1b", "draft:llama-68m")
    with pytest.raises(SystemExit) as exc:
        optimize_tree_main(["--hw", "h100", "--target", "llama-3.1-8b", "--trace", str(trace),
                            "--drafter", "llama-3.2-1b", "--budget", "8", "--json"])
    optimized = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0
    assert (optimized["drafter"], optimized["source"]) == ("llama-3.2-1b", "draft:llama-68m")
    # without --drafter the source's own draft model is priced
    code, out, _ = _cli(capsys, *SIM, "--trace", str(trace))
    assert code == 0 and json.loads(out)["drafter"] == "llama-68m"


@pytest.mark.parametrize("source", [None, "rasd", "rasd:llama-68m"])
def test_simulate_prices_a_rasd_source_as_its_draft_model(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path], source: str | None) -> None:
    extra = [] if source is None else ["--source", source]
    code, out, err = _cli(capsys, *SIM, "--trace", str(files["rasd"]), *extra)
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["source"], summary["drafter"]) == ("rasd:llama-68m", "llama-68m")


def test_a_generic_tree_is_drafted_by_the_rasd_source(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path], tmp_path: Path) -> None:
    tree = tmp_path / "chain.json"
    tree.write_text(Tree.chain(3).to_json())  # source "draft", as optimize-tree --acceptance
    code, out, err = _cli(capsys, *SIM[:-3], "--policy", "static", "--tree", str(tree),
                          "--trace", str(files["rasd"]), "--source", "rasd", "--json")
    assert code == 0, err
    assert json.loads(out)["source"] == "rasd:llama-68m"


@pytest.mark.parametrize(("extra", "expected"), [
    ((), 32),                                   # specscope's own default
    (("--engine", "vllm"), 256),                # vLLM's max_num_seqs
    (("--engine", "sglang"), 2048),             # SGLang's request pool: the KV cache binds
    (("--engine", "vllm", "--max-batch", "8"), 8),  # as given
])
def test_the_batch_limit_is_the_engines_schedulers_unless_given(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path], extra: tuple,
        expected: int) -> None:
    code, out, err = _cli(capsys, *BASE, "--policy", "none", "--json", *extra)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["max_batch"] == expected and summary["peak_batch"] <= expected


def test_simulate_prices_the_stated_tree_attention(capsys: pytest.CaptureFixture[str],
                                                   files: dict[str, Path]) -> None:
    """SGLang's trees on FlashInfer (masked) verify slower than its default split attention."""
    tpot = {}
    for attention in ((), ("--tree-attention", "split"), ("--tree-attention", "masked")):
        code, out, err = _cli(capsys, *BASE, "--engine", "sglang", "--policy", "dyspec",
                              "--prompt-len", "2048", "--json", *attention)
        assert code == 0, err
        tpot[attention[-1] if attention else "default"] = json.loads(out)["mean_tpot_ms"]
    assert tpot["default"] == tpot["split"] < tpot["masked"]


@pytest.mark.parametrize(("extra", "draft_tp"), [((), 1), (("--engine", "vllm"), 2),
                                                 (("--engine", "sglang"), 2)])
def test_a_draft_model_runs_on_the_devices_its_engine_gives_it(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path], extra: tuple,
        draft_tp: int) -> None:
    code, out, err = _cli(capsys, *BASE, "--tp", "2", "--policy", "smartspec", "--json", *extra)
    assert code == 0, err
    assert json.loads(out)["draft_tp"] == draft_tp


@pytest.mark.parametrize(("extra", "speculating", "plain"), [
    (("--engine", "sglang"), 48, 2048),         # SGLang resets running requests to 48
    (("--engine", "vllm"), 256, 256),           # vLLM states no such reset
    (("--engine", "sglang", "--max-batch", "64"), 64, 64),  # as given, on both sides
])
def test_speculation_batches_at_the_engines_speculative_limit_and_plain_decoding_at_its_own(
        capsys: pytest.CaptureFixture[str], files: dict[str, Path], extra: tuple,
        speculating: int, plain: int) -> None:
    code, out, err = _cli(capsys, *BASE, "--policy", "smartspec", "--json", *extra)
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["max_batch"], summary["plain"]["max_batch"]) == (speculating, plain)
