"""What a served choice costs (issue 42, item 3): GPUs held, tokens/s per GPU and per user,
goodput under TTFT and TPOT limits, cost per million output tokens; `--policy schedule`
reports the schedule, its best constant and no speculation on the same arrivals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Cli
from test_guards import refused

from specscope.hw_profiles.deployment import deployment
from specscope.simulator.economics import economics, gpus, pareto
from specscope.simulator.fronts import serving_front
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.tree import Tree


def test_gpus_count_every_device_held() -> None:
    base = {"tp": 4, "replicas": 2, "draft_placement": "colocated", "draft_tp": 1}
    assert gpus(base) == 8 and gpus(base, stages=2) == 16
    assert gpus(base | {"draft_placement": "separate"}) == 10


def test_per_gpu_per_user_and_cost_follow_their_definitions() -> None:
    summary = {"throughput_tok_s": 2000.0, "goodput_tok_s": 1500.0, "mean_tpot_ms": 25.0}
    out = economics(summary, 4, 3.6)
    assert out["tokens_per_s_per_gpu"] == 500.0 and out["goodput_per_gpu"] == 375.0
    assert out["tokens_per_s_per_user"] == 40.0
    assert out["usd_per_million_tokens"] == pytest.approx(4 * 3.6 / 3600 / 2000 * 1e6)
    assert out["usd_per_million_good_tokens"] == pytest.approx(4 * 3.6 / 3600 / 1500 * 1e6)
    assert economics(summary, 4, None)["usd_per_million_tokens"] is None


def test_pareto_keeps_the_undominated_points() -> None:
    assert pareto([(10, 1), (5, 5), (4, 4), (1, 10), (None, 20)]) == [True, True, False, True,
                                                                      False]


def test_limits_cut_goodput_and_the_summary_carries_the_economics() -> None:
    def run(**limits: float) -> dict:
        return run_simulation(SimulateRequest(
            deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b",
                                  tp=2, max_batch=16),
            policy="static", tree=Tree.chain(2, "draft:llama-3.2-1b"), acceptance=(0.6, 0.1),
            rate=40.0, requests=100, prompt_len="256", output_len="64", seed=1,
            gpu_hour_usd=2.0, against_plain=False, **limits)).summary

    free = run()
    assert free["goodput_tok_s"] == free["throughput_tok_s"] and free["gpus"] == 2
    assert free["tokens_per_s_per_gpu"] == pytest.approx(free["throughput_tok_s"] / 2)
    ttft = sorted([free["p50_ttft_ms"], free["p99_ttft_ms"]])[0]
    tight = run(slo_ttft_ms=ttft)
    assert tight["goodput_tok_s"] < free["goodput_tok_s"]
    assert tight["usd_per_million_good_tokens"] > tight["usd_per_million_tokens"]


def test_a_schedule_run_reports_its_constant_and_no_speculation(cli: Cli,
                                                                 tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    assert cli("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
               "llama-3.2-1b", "--acceptance", "0.6,0.1", "--budget", "6", "--schedule",
               "--to", "vllm", "--max-batch", "32", "-o", path)[0] == 0
    constant = json.loads(path.read_text())["constant"]
    common = ("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
              "llama-3.2-1b", "--acceptance", "0.6,0.1", "--rate", "20", "--requests", "60",
              "--max-batch", "32", "--seed", "0", "--gpu-hour-usd", "2.5")
    code, out, err = cli(*common, "--policy", "schedule", "--schedule", path, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["choices"]) == {"schedule", "constant", "none"}
    tree = tmp_path / "c.json"
    tree.write_text(json.dumps(constant))
    code, out, err = cli(*common, "--policy", "static", "--tree", tree, "--json")
    alone = json.loads(out)
    assert doc["choices"]["constant"]["throughput_tok_s"] == alone["throughput_tok_s"]
    assert doc["choices"]["none"]["throughput_tok_s"] == doc["plain"]["throughput_tok_s"]
    assert doc["choices"]["schedule"]["usd_per_million_tokens"] == doc["usd_per_million_tokens"]
    refused(cli(*common[:-2], "--gpu-hour-usd", "0", "--policy", "none"), "--gpu-hour-usd")


def test_the_front_serves_each_choice_over_the_rate_ladder(cli: Cli) -> None:
    common = ("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
              "llama-3.2-1b", "--acceptance", "0.6,0.1", "--rate", "10", "--requests", "40",
              "--max-batch", "16", "--seed", "0")
    req = SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b",
                              max_batch=16),
        policy="static", tree=Tree.chain(2, "draft:llama-3.2-1b"), acceptance=(0.6, 0.1),
        rate=10.0, requests=40, prompt_len="256", output_len="64", seed=0, gpu_hour_usd=2.0)
    rows = serving_front(req, [0.5, 1, 4])
    assert sorted({(r["choice"], r["rate"]) for r in rows}) == sorted(
        (c, r) for c in ("static", "none") for r in (5.0, 10.0, 40.0))
    points = [(r["goodput_per_gpu"], r["tokens_per_s_per_user"]) for r in rows]
    # a point is on the front when no other point is at least as good on both and better on one
    dominated = [any(o[0] >= p[0] and o[1] >= p[1] and o != p for o in points) for p in points]
    assert [r["on_front"] for r in rows] == [not d for d in dominated] and not all(dominated)
    assert all(r["usd_per_million_tokens"] > 0 for r in rows)
    refused(cli(*common, "--policy", "none", "--front", "0,1"), "--front")


def test_the_front_reuses_the_run_at_multiple_one_and_refuses_an_arrival_file(
        cli: Cli, tmp_path: Path) -> None:
    req = SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b",
                              max_batch=16),
        policy="static", tree=Tree.chain(2, "draft:llama-3.2-1b"), acceptance=(0.6, 0.1),
        rate=10.0, requests=30, prompt_len="256", output_len="64", seed=0)
    counts: list[tuple[int, int]] = []
    rerun = serving_front(req, [2, 1, 0.5, 1])
    reused = serving_front(req, [2, 1, 0.5, 1], base=run_simulation(req).summary,
                           progress=lambda done, total: counts.append((done, total)))
    assert reused == rerun and counts == [(1, 3), (2, 3), (3, 3)]
    times = tmp_path / "arrivals.txt"
    times.write_text("0\n0.1\n0.2\n")
    refused(cli("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
                "llama-3.2-1b", "--acceptance", "0.6,0.1", "--rate", "10", "--requests", "3",
                "--policy", "none", "--front", "1,2", "--arrival-file", times),
            "--front", "--arrival-file")
