"""Import from engines: vLLM's metrics (exported by prometheus_client as vLLM registers them),
SGLang's decode log and plain counts become the acceptance `--acceptance FILE.json` takes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.files import text_lines
from specscope.interop.counters import ChainCounts, imported, read_acceptance
from specscope.interop.families import TopK
from specscope.interop.sglang_log import accept_length
from specscope.interop.vllm_metrics import parse_vllm_metrics

PER_POS = (650, 380, 190)


def vllm_metrics(drafts: int = 1000, per_pos: tuple[int, ...] = PER_POS,
                 draft_tokens: int | None = None, accepted: int | None = None,
                 models: tuple[str, ...] = ("meta-llama/Llama-3.1-8B-Instruct",),
                 engines: int = 1) -> str:
    """The /metrics text of vLLM's spec-decode counters (`vllm/v1/metrics/loggers.py`
    `SpecDecodingProm`: counters labelled model_name and engine, per position by `position`),
    counted as `SpecDecodingStats.observe_draft` counts, split over `engines`."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    counters = {name: Counter(f"vllm:spec_decode_{name}", doc, labels, registry=registry)
                for name, doc in (("num_drafts", "Number of spec decoding drafts."),
                                  ("num_draft_tokens", "Number of draft tokens."),
                                  ("num_accepted_tokens", "Number of accepted tokens."))}
    per_position = Counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                           "Accepted tokens per draft position.", [*labels, "position"],
                           registry=registry)
    for model in models:
        for engine in range(engines):
            share = 1 / engines
            lv = (model, str(engine))
            counters["num_drafts"].labels(*lv).inc(drafts * share)
            counters["num_draft_tokens"].labels(*lv).inc(
                (draft_tokens if draft_tokens is not None else drafts * len(per_pos)) * share)
            counters["num_accepted_tokens"].labels(*lv).inc(
                (accepted if accepted is not None else sum(per_pos)) * share)
            for pos, count in enumerate(per_pos):
                per_position.labels(*lv, str(pos)).inc(count * share)
    return generate_latest(registry).decode()


def test_vllm_counters_give_the_pooled_top_rank_acceptance(tmp_path: Path) -> None:
    path = tmp_path / "m.txt"
    path.write_text(vllm_metrics(engines=2))
    counts = parse_vllm_metrics(text_lines(path, "metrics file"), "m.txt")
    assert counts == ChainCounts(1000, PER_POS, 3000, 1220, counts.where, counts.names)
    doc = imported(counts, "vllm-metrics")
    tries = 1000 + 650 + 380
    assert doc["acceptance"] == [pytest.approx(1220 / tries)]
    assert doc["low"][0] < doc["acceptance"][0] < doc["high"][0]
    assert [d["acceptance"] for d in doc["by_depth"]] == pytest.approx(
        [650 / 1000, 380 / 650, 190 / 380])
    assert doc["mean_accepted_length"] == pytest.approx(2.22)
    assert doc["counts"]["top_rank_tries"] == tries
    assert "not observed" in doc["assumption"]


def test_a_geometric_chain_is_recovered() -> None:
    """Drafts of L = 5 accepted independently with p = 0.7 at every position (seeded): the
    pooled estimate is p's maximum-likelihood estimate and its interval covers p."""
    rng = np.random.default_rng(0)
    accepted = np.minimum(rng.geometric(0.3, 20000) - 1, 5)  # P(≥ d) = 0.7^d, capped at L
    per_pos = tuple(int((accepted > d).sum()) for d in range(5))
    doc = imported(ChainCounts(20000, per_pos), "json")
    assert doc["low"][0] <= 0.7 <= doc["high"][0]
    assert doc["acceptance"][0] == pytest.approx(0.7, abs=0.01)


def test_lower_ranks_come_from_a_trace(tmp_path: Path) -> None:
    from specscope.trace import AcceptanceModel, synth_trace

    lower = AcceptanceModel.from_trace(synth_trace(requests=8, seed=1, length=64,
                                                   sources=("draft:llama-68m",), k=4))
    doc = imported(ChainCounts(1000, PER_POS), "vllm-metrics", lower)
    p = np.array(doc["acceptance"])
    assert p[0] == pytest.approx(1220 / 2030) and p.sum() <= 1 + 1e-12
    ratios = np.asarray(lower.p) / lower.p[0]
    if p.sum() < 1 - 1e-9:  # unclipped: the trace's ratios kept
        assert p / p[0] == pytest.approx(ratios)
    assert doc["source"] == "draft:llama-68m" and "ratios" in doc["assumption"]


def test_lower_ranks_never_push_a_row_past_one() -> None:
    """A top draft accepted 95% of the time leaves 5% for the ranks below: the trace's ratios
    (here 0.6 and 0.3 of the top rank) are scaled together into it."""
    from specscope.trace import AcceptanceModel

    lower = AcceptanceModel.from_vector([0.5, 0.3, 0.15], "draft:x")
    doc = imported(ChainCounts(1000, (950, 900)), "json", lower)
    p = np.array(doc["acceptance"])
    assert p.sum() == pytest.approx(1.0) and p[1] / p[2] == pytest.approx(2.0)
    for bound in ("low", "high"):
        assert np.sum(doc[bound]) <= 1 + 1e-12


@pytest.mark.parametrize(("p", "steps"), [(0.55, 3), (0.8, 5), (0.3, 1)])
def test_sglang_accept_length_inverts_a_chain(p: float, steps: int) -> None:
    mean = sum(p**d for d in range(steps + 1))
    lines = [(4, mean)] * 10
    doc = accept_length(lines, TopK(steps, 1, steps + 1), None)
    assert doc["acceptance"][0] == pytest.approx(p, abs=1e-9)
    assert doc["low"][0] <= p <= doc["high"][0]
    assert doc["counts"]["request_steps"] == 10 * 4 * 40


def test_sglang_tree_needs_the_lower_ranks() -> None:
    with pytest.raises(InputError, match="--topk > 1"):
        accept_length([(1, 2.0)], TopK(3, 2, 6), None)
    with pytest.raises(InputError, match=r"accept len must lie in 1\.\.4"):
        accept_length([(1, 4.5)], TopK(3, 1, 4), None)


@pytest.mark.parametrize(("text", "word"), [
    (vllm_metrics(per_pos=(1200, 380, 190)),
     r'per_pos\{position="0"\} \(1200\) exceeds vllm:spec_decode_num_drafts '),
    (vllm_metrics(per_pos=(650, 700, 190)), r'per_pos\{position="1"\} \(700\) exceeds'),
    (vllm_metrics(accepted=999), r"num_accepted_tokens \(999\) differs"),
    (vllm_metrics(draft_tokens=4000), r"num_draft_tokens \(4000\) exceeds"),
    (vllm_metrics(draft_tokens=1000),
     r"\(1220 in all\) exceed vllm:spec_decode_num_draft_tokens"),
    (vllm_metrics(models=("a", "b")), "several models"),
    (vllm_metrics(drafts=0, per_pos=(0, 0)), "nothing was drafted"),
    (vllm_metrics().replace('position="1"', 'position="4"'), "has no position 1"),
    ("\n".join(line for line in vllm_metrics().splitlines() if "num_drafts" not in line),
     "spec_decode_num_drafts is missing"),
    (vllm_metrics().replace("} 1000.0", "} NaN", 1), "spec_decode_num_drafts is nan"),
    ("not metrics at all {", "not Prometheus text"),
])
def test_bad_vllm_dumps_exit_2_naming_the_counter(cli, tmp_path: Path, text: str,
                                                  word: str) -> None:
    dump = tmp_path / "metrics.txt"
    dump.write_text(text)
    out = tmp_path / "acc.json"
    code, _, err = cli("trace", "import", dump, "--from", "vllm-metrics", "-o", out)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1
    assert str(dump) in err
    import re

    assert re.search(word, err), err
    assert not out.exists()


def test_import_then_optimize_equals_the_vector_by_hand(cli, tmp_path: Path) -> None:
    dump = tmp_path / "metrics.txt"
    dump.write_text(vllm_metrics())
    acc = tmp_path / "acc.json"
    code, out, err = cli("trace", "import", dump, "--from", "vllm-metrics", "-o", acc)
    assert code == 0, err
    assert "wrote" in out or "acc.json" in out
    doc = json.loads(acc.read_text())
    assert {"acceptance", "counts"} <= set(doc)
    by_hand = ",".join(repr(x) for x in doc["acceptance"])
    common = ("optimize-tree", "--hw", "h100", "--target", "llama-2-7b", "--budget", 8, "--json")
    code, from_file, err = cli(*common, "--acceptance", acc)
    assert code == 0, err
    assert from_file == cli(*common, "--acceptance", by_hand)[1]
    assert from_file == cli(*common, "--trace", acc)[1]  # --trace takes the document too
    code, sim, err = cli("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
                         "llama-68m", "--acceptance", acc, "--policy", "smartspec", "--rate", 2,
                         "--requests", 10, "--seed", 0, "--json")
    assert code == 0, err
    assert json.loads(sim)["throughput_tok_s"] > 0


def test_json_counts_and_sglang_log_import(cli, tmp_path: Path) -> None:
    counts = tmp_path / "counts.json"
    counts.write_text(json.dumps({"drafts": 100, "accepted_per_position": [60, 30, 10]}))
    code, out, err = cli("trace", "import", counts, "--from", "json")
    assert code == 0, err
    assert json.loads(out)["acceptance"] == [pytest.approx(100 / 190)]
    log = tmp_path / "server.log"
    mean = 1 + 0.6 + 0.36 + 0.216
    log.write_text("".join(
        f"[2026-07-01 12:00:0{i} TP0] Decode batch, #running-req: 3, #token: 512, token usage: "
        f"0.01, accept len: {mean:.4f}, accept rate: 0.40, cuda graph: True, gen throughput "
        "(token/s): 812.40, #queue-req: 0\n" for i in range(5)))
    code, out, err = cli("trace", "import", log, "--from", "sglang-log", "--steps", 3,
                         "--topk", 1)
    assert code == 0, err
    assert json.loads(out)["acceptance"][0] == pytest.approx(0.6, abs=1e-4)


@pytest.mark.parametrize(("content", "args", "word"), [
    ('{"drafts": 10}', ("--from", "json"), "missing accepted_per_position"),
    ('{"drafts": 10, "accepted_per_position": [3, -1]}', ("--from", "json"),
     "whole count"),
    ('{"drafts": 10, "accepted_per_position": [3]}', ("--from", "json", "--steps", 3),
     "with --from sglang-log"),
    ("no log here", ("--from", "sglang-log", "--steps", 3, "--topk", 1), "no 'Decode batch"),
    ("accept len: 2", ("--from", "sglang-log"), "needs --steps"),
    ('{"drafts": 10, "accepted_per_position": [3]}', ("--from", "protobuf"), "--from protobuf"),
])
def test_bad_imports_exit_2(cli, tmp_path: Path, content: str, args: tuple, word: str) -> None:
    path = tmp_path / "in.txt"
    path.write_text(content)
    code, _, err = cli("trace", "import", path, *args)
    assert code == 2 and word in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(("doc", "word"), [
    ({"counts": {}}, "expected an object with an acceptance list"),
    ({"acceptance": [0.5, 1.2]}, "acceptance"),
    ({"acceptance": [math.nan]}, "acceptance"),
    ({"acceptance": []}, "non-empty list"),
    ({"acceptance": [0.7, 0.6]}, "acceptance"),
])
def test_bad_acceptance_files_exit_2(cli, tmp_path: Path, doc: dict, word: str) -> None:
    path = tmp_path / "acc.json"
    path.write_text(json.dumps(doc).replace("NaN", "NaN"))
    code, _, err = cli("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
                       "--budget", 4, "--acceptance", path)
    assert code == 2 and word in err and len(err.strip().splitlines()) == 1, err
    with pytest.raises(InputError):
        read_acceptance(path)
