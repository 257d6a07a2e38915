"""The serving simulator end to end: determinism, conservation, ordered events, KV within
capacity, the closed forms at vanishing load, state-space targets' larger batches."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.deployment import deployment
from specscope.hw_profiles.pricing import Pricing
from specscope.models import ModelSpec, get_model, param_count
from specscope.schedule import Bucket, Schedule
from specscope.simulator.analytic import chain_tokens, tpot_s
from specscope.simulator.policies import POLICIES
from specscope.simulator.run import SimulateRequest, SimulationResult, run_simulation
from specscope.trace import synth_trace
from specscope.tree import Tree

DRAFT = "llama-3.2-1b"
SOURCE = f"draft:{DRAFT}"
TREE = Tree.from_rank_paths([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)], SOURCE)


@pytest.fixture(scope="module")
def tree_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tree") / "tree.json"
    path.write_text(TREE.to_json())
    return path


def _request(tree_file: Path, **changes: object) -> SimulateRequest:
    base = SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter=DRAFT, max_batch=16),
        policy="static", tree=tree_file, acceptance=(0.6, 0.2, 0.1), rate=40.0, requests=60,
        prompt_len="uniform:64:512", output_len="lognormal:96:0.6", seed=7)
    return dataclasses.replace(base, **changes)


def _check_consistent(result: SimulationResult) -> None:
    """Conservation, ordered per-request timestamps and an ordered event log."""
    r = result.requests
    assert (r["tokens"] >= 1).all()
    assert r["tokens"].sum() == result.summary["generated_tokens"]
    order = ["start_s", "admitted_s", "prefill_done_s", "first_token_s", "finish_s"]
    for early, late in itertools.pairwise(order):
        assert (r[late] >= r[early]).all(), (early, late)
    times = result.events["time_s"].to_numpy()
    assert times.min() >= 0 and np.all(np.diff(times) >= 0)
    ends = result.events.filter(pl.col("event") == "step_end")
    assert ends["tokens"].sum() == result.summary["generated_tokens"]


def test_the_same_seed_gives_the_same_json_and_another_seed_another(tree_file: Path) -> None:
    one = json.dumps(run_simulation(_request(tree_file)).summary)
    assert json.dumps(run_simulation(_request(tree_file)).summary) == one
    assert json.dumps(run_simulation(_request(tree_file, seed=8)).summary) != one


@pytest.mark.parametrize("changes", [
    {}, {"policy": "none", "tree": None}, {"chunked_prefill": 128},
    {"replicas": 3, "router": "least-outstanding"}, {"replicas": 2},
    {"draft_placement": "separate"}, {"arrivals": "gamma", "cv": 3.0},
    {"workload": "forking", "fork_branches": 3, "fork_levels": 2, "requests": 10},
    {"drift": (1.0, 0.5)},
], ids=lambda c: ",".join(c) or "static")
def test_every_request_generates_exactly_its_requested_tokens(tree_file: Path,
                                                              changes: dict) -> None:
    result = run_simulation(_request(tree_file, **changes))
    _check_consistent(result)
    assert (result.requests["tokens"] == result.requests["output_len"]).all()
    assert result.requests["output_len"].n_unique() > 10  # lognormal lengths, clipped steps


def test_forked_sequences_start_when_their_parent_finishes(tree_file: Path) -> None:
    result = run_simulation(_request(tree_file, workload="forking", fork_branches=2,
                                     fork_levels=2, requests=6))
    r = result.requests
    assert r.height == 6 * (2 + 4)
    first, second = r.filter(pl.col("level") == 1), r.filter(pl.col("level") == 2)
    assert first["prompt_len"].to_list() == np.repeat(first["prompt_len"][::2], 2).tolist()
    parents = first.sort("request")
    finish = np.repeat(parents["finish_s"].to_numpy(), 2)
    assert np.allclose(second.sort("request")["start_s"].to_numpy(), finish)
    prompts = np.repeat((parents["prompt_len"] + parents["tokens"]).to_numpy(), 2)
    assert second.sort("request")["prompt_len"].to_list() == prompts.tolist()
    assert result.events.filter(pl.col("event") == "prefill_done").height == 6


def test_kv_memory_never_exceeds_the_capacity_and_requests_wait_for_it(
        tree_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tight profile (memory for the weights and a few long requests): arrivals queue."""
    profile = load_profile("h100")
    weights = sum(CostModel(profile, get_model(m)).memory_bytes(0, 0)
                  for m in ("llama-3.1-8b", DRAFT))
    per_request = (CostModel(profile, get_model("llama-3.1-8b")).memory_bytes(1, 3000)
                   + CostModel(profile, get_model(DRAFT)).memory_bytes(1, 3000) - weights)
    tight = dataclasses.replace(profile, memory_bytes=weights + 3.5 * per_request)
    monkeypatch.setattr("specscope.simulator.run.load_profile", lambda name: tight)
    result = run_simulation(_request(tree_file, prompt_len="2000", output_len="800",
                                     requests=20, rate=100.0))
    _check_consistent(result)
    capacity = result.summary["kv_capacity_bytes"]
    assert result.timeseries["kv_bytes"].max() <= capacity
    assert result.events["kv_bytes"].max() <= capacity
    assert result.summary["peak_batch"] == 3  # 3 of 20 fit; 16 slots would allow more
    waited = result.requests["admitted_s"] - result.requests["start_s"]
    assert (waited > 1.0).sum() >= 10


@pytest.mark.parametrize("tree", [Tree.chain(4, SOURCE), TREE], ids=["chain", "tree"])
def test_at_vanishing_load_tpot_is_the_closed_form(tmp_path: Path, tree: Tree) -> None:
    """One request at a time: TPOT = step_s / E[tokens per step] at the mean context (within
    1%); for the chain, E is Leviathan's formula."""
    p = [0.7] if tree.depth == tree.size - 1 else [0.6, 0.2, 0.1]
    path = tmp_path / "t.json"
    path.write_text(tree.to_json())
    prompt, output = 512, 2000
    result = run_simulation(SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter=DRAFT),
        policy="static", tree=path, acceptance=tuple(p), rate=1e-6, requests=40,
        prompt_len=str(prompt), output_len=str(output), seed=3))
    assert result.summary["peak_batch"] == 1
    profile = load_profile("h100")
    pricing = Pricing(CostModel(profile, get_model("llama-3.1-8b")),
                      CostModel(profile, get_model(DRAFT)), prompt + output // 2)
    if tree.size == 5:
        assert tree.expected_tokens(p) == pytest.approx(chain_tokens(0.7, 4))
    expected_ms = tpot_s(pricing, tree, p) * 1e3
    assert result.summary["mean_tpot_ms"] == pytest.approx(expected_ms, rel=0.01)
    plain = run_simulation(SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b"),
        rate=1e-6, requests=3, prompt_len=str(prompt), output_len=str(output), seed=3))
    assert plain.summary["mean_tpot_ms"] == pytest.approx(pricing.autoregressive_s * 1e3,
                                                          rel=0.01)


def test_a_state_space_target_batches_more_than_a_transformer_at_long_context() -> None:
    """mamba2-2.7b holds a fixed state per request; a Transformer of the same size holds a KV
    cache that grows with the context, so memory caps its batch first."""
    ssm = get_model("mamba2-2.7b")
    transformer = ModelSpec(name="transformer-2.7b", arch="transformer", n_layers=32,
                            d_model=2560, vocab_size=ssm.vocab_size, n_heads=20, n_kv_heads=20,
                            head_dim=128, d_ff=6912, tie_embeddings=True)
    assert param_count(transformer) == pytest.approx(param_count(ssm), rel=0.05)
    batches = {}
    for spec in (ssm, transformer):
        result = run_simulation(SimulateRequest(
            deployment=deployment("h100", target=spec, max_batch=256),
            rate=1000.0, requests=300, prompt_len="16000", output_len="32", token_budget=20000,
            seed=0))
        batches[spec.name] = result.summary["peak_batch"]
        assert result.summary["peak_kv_occupancy"] <= 1.0
    assert batches["mamba2-2.7b"] == 256
    assert batches["transformer-2.7b"] < 32


def test_replay_serves_the_trace_lengths_and_says_so(tmp_path: Path) -> None:
    trace = synth_trace(6, seed=1, sources=("draft:llama-68m", "ngram"), length=64)
    chain = tmp_path / "chain.json"
    chain.write_text(Tree.chain(3, "draft:llama-68m").to_json())
    common = dict(deployment=deployment("h100", target="llama-2-7b", drafter="llama-68m"),
                  trace=trace, policy="static", tree=chain, rate=5.0, requests=12, seed=0)
    replayed = run_simulation(SimulateRequest(**common))
    assert replayed.summary["acceptance"] == "replay"
    assert replayed.summary["sampled_steps"] == 0
    assert set(replayed.requests["tokens"].to_list()) == {64}
    longer = run_simulation(SimulateRequest(**common, output_len="100"))
    assert longer.summary["acceptance"] == "mixed"
    assert longer.summary["replayed_steps"] > 0 and longer.summary["sampled_steps"] > 0


@pytest.mark.parametrize(("p", "faster"), [(1.0, True), (0.0, False)])
def test_separate_drafting_pays_off_only_when_its_overlap_holds(tmp_path: Path, p: float,
                                                                faster: bool) -> None:
    """A chain whose drafts are always accepted keeps every overlapped drafting: separate
    placement hides the drafting behind verification. Drafts never accepted break every
    overlap: the drafting is redone after each step, on top of the overlapped one."""
    path = tmp_path / "chain.json"
    path.write_text(Tree.chain(4, SOURCE).to_json())
    tpot = {}
    for placement in ("colocated", "separate"):
        result = run_simulation(SimulateRequest(
            deployment=deployment("h100", target="llama-3.1-8b", drafter=DRAFT),
            policy="static", tree=path, acceptance=(p,), rate=1e-6, requests=3, output_len="200",
            seed=0, draft_placement=placement))
        tpot[placement] = result.summary["mean_tpot_ms"]
    assert (tpot["separate"] < tpot["colocated"]) == faster


def test_routers_spread_arrivals_over_replicas(tree_file: Path) -> None:
    for router in ("round-robin", "least-outstanding"):
        result = run_simulation(_request(tree_file, replicas=3, router=router))
        counts = result.requests.group_by("replica").len()["len"]
        assert counts.len() == 3 and counts.min() >= 15


def test_no_step_holds_more_than_max_batch_sequences_and_prompts(tree_file: Path) -> None:
    result = run_simulation(_request(tree_file, workload="forking", fork_branches=3,
                                     fork_levels=2, requests=30, chunked_prefill=64))
    assert result.summary["peak_batch"] == 16


def test_no_step_holds_more_tokens_than_the_budget(tree_file: Path) -> None:
    """16 trees of 7 tokens exceed a budget of 64: each is cut to its first 4 nodes; prompt
    chunks take what is left."""
    result = run_simulation(_request(tree_file, token_budget=64, chunked_prefill=32,
                                     prompt_len="200"))
    _check_consistent(result)
    starts = result.events.filter(pl.col("event") == "step_start")
    assert starts["tokens"].max() <= 64
    assert (result.requests["tokens"] == result.requests["output_len"]).all()


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_registered_policy_runs_through_the_server(tmp_path: Path, policy: str) -> None:
    """Each policy of the registry, on a replayed trace, keeps conservation and order."""
    trace = synth_trace(6, seed=2, sources=("draft:llama-68m",), length=48)
    path = tmp_path / "tree.json"
    path.write_text(Tree.chain(3, "draft:llama-68m").to_json())
    table = Schedule((Bucket((1, 2), None, Tree.chain(3, "draft:llama-68m")),
                      Bucket((3, 4), None, None))) if policy == "schedule" else None
    result = run_simulation(SimulateRequest(
        deployment=deployment("h100", target="llama-2-7b", max_batch=4),
        trace=trace, policy=policy, tree=path, schedule=table, budget=8, rate=50.0,
        requests=12, seed=0))
    _check_consistent(result)
    assert (result.requests["tokens"] == result.requests["output_len"]).all()
    assert result.summary["acceptance"] == ("none" if policy == "none" else "replay")


def test_a_speculative_run_reports_plain_decoding_of_the_same_arrivals(tree_file: Path) -> None:
    light = run_simulation(_request(tree_file, rate=2.0, acceptance=(0.9, 0.05)))
    plain = light.summary["plain"]
    alone = run_simulation(_request(tree_file, rate=2.0, policy="none", tree=None)).summary
    for key in ("throughput_tok_s", "mean_tpot_ms", "mean_latency_s"):
        assert plain[key] == alone[key]
    assert plain["latency_speedup"] == pytest.approx(
        alone["mean_latency_s"] / light.summary["mean_latency_s"])
    assert plain["speculation_pays"] and plain["latency_speedup"] > 1.2, plain["verdict"]
    hopeless = run_simulation(_request(tree_file, rate=80.0, acceptance=(0.05,))).summary
    assert not hopeless["plain"]["speculation_pays"]
    assert "plain decoding is the better choice" in hopeless["plain"]["verdict"]
    assert "plain" not in run_simulation(_request(tree_file, against_plain=False)).summary


def test_plain_decoding_holds_no_draft_model(tree_file: Path) -> None:
    named = run_simulation(_request(tree_file, policy="none", tree=None)).summary
    unnamed = run_simulation(_request(
        tree_file, policy="none", tree=None,
        deployment=deployment("h100", target="llama-3.1-8b", max_batch=16))).summary
    assert named["kv_capacity_bytes"] == unnamed["kv_capacity_bytes"]
    assert named["throughput_tok_s"] == unnamed["throughput_tok_s"]


def test_a_uniform_output_length_wider_than_exp_allows_still_runs() -> None:
    """The memory estimate evaluates only the workload's own length formula (the lognormal's
    exp(b²/2) overflowed for uniform:20:90 when every formula was built)."""
    result = run_simulation(SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b"), acceptance=(0.6,), rate=5.0,
        requests=8, output_len="uniform:20:90", seed=0))
    assert result.summary["throughput_tok_s"] > 0
