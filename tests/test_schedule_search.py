"""`optimize-tree --schedule` (issue 42, item 1): at every batch size the family's best choice
(or none where none beats plain decoding), merged into ranges; the best constant is the
geometric-mean best over the batch sizes; the schedule never yields less than it at any batch."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import Cli
from test_guards import refused

from specscope.hw_profiles.deployment import deployment
from specscope.interop.families import best_chain
from specscope.interop.schedule_search import family_for, search_schedule
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.optimizers.scoring import score_tree
from specscope.tree import Tree


@pytest.fixture(scope="module")
def setup():
    dep = deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b", engine="vllm")
    return run_optimize(OptimizeRequest(deployment=dep, acceptance=[0.55, 0.1], budget=8,
                                        algos="sequoia")).setup


def _speedup(setup, batch: int, tree: Tree | None) -> float:
    if tree is None:
        return 1.0
    s = dataclasses.replace(setup, pricing=dataclasses.replace(setup.pricing, batch=batch))
    return score_tree("t", tree, s.value(tree), s.pricing).speedup


def test_each_batch_takes_the_best_chain_or_none(setup) -> None:
    found = search_schedule(setup, 8, 256, "chain")
    chains = [Tree.chain(k) for k in range(1, 8)]
    offs = 0
    for row in found.rows:
        best = max(_speedup(setup, row.batch, t) for t in chains)
        ours = _speedup(setup, row.batch, row.tree)
        assert ours == pytest.approx(max(best, 1.0), rel=1e-12)
        offs += row.tree is None
    assert offs > 0 and found.rows[0].tree is not None  # speculation turns off at high batch
    assert found.schedule.buckets[-1].tree is None
    depths = [0 if b.tree is None else b.tree.depth for b in found.schedule.buckets]
    assert depths == sorted(depths, reverse=True)  # shorter drafts as the batch grows
    assert found.schedule.buckets[0].batch[0] == 1
    assert found.schedule.max_batch == found.rows[-1].batch


def test_the_constant_is_the_geometric_mean_best_and_never_beats_the_schedule(setup) -> None:
    found = search_schedule(setup, 8, 64, "chain")
    batches = range(1, 65)
    candidates = [Tree.chain(k) for k in range(1, 8)]
    mean = [np.mean([np.log(_speedup(setup, b, t)) for b in batches]) for t in candidates]
    best = candidates[int(np.argmax(mean))]
    assert found.constant is not None and found.constant.depth == best.depth
    for row in found.rows:
        assert row.schedule_tps >= row.constant_tps * (1 - 1e-12)
        assert row.schedule_tps >= row.plain_tps * (1 - 1e-12)


def test_the_any_family_takes_the_dp_tree_and_beats_chains(setup) -> None:
    anytree = search_schedule(setup, 8, 16, "any")
    for row in anytree.rows:
        at = dataclasses.replace(setup, pricing=dataclasses.replace(setup.pricing,
                                                                    batch=row.batch))
        assert _speedup(setup, row.batch, row.tree) >= max(1.0, best_chain(at, 8).speedup) * (
            1 - 1e-12)


def test_families_follow_the_engine() -> None:
    assert family_for("vllm", False) == family_for("tensorrt-llm", False) == "chain"
    assert family_for("sglang", False) == "topk" and family_for(None, False) == "any"
    assert family_for(None, True) == "chain"


def test_the_command_writes_the_schedule(cli: Cli) -> None:
    code, out, err = cli("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b",
                         "--drafter", "llama-3.2-1b", "--acceptance", "0.55,0.1", "--budget",
                         "8", "--schedule", "--to", "vllm", "--max-batch", "64", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["family"] == "chain" and len(doc["batches"]) == 64
    assert doc["schedule"][0]["batch"][0] == 1 and doc["schedule"][-1]["batch"][1] == 64
    refused(cli("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--acceptance",
                "0.55,0.1", "--budgets", "4,8", "--schedule"), "--schedule", "--budget")
    refused(cli("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--acceptance",
                "0.55,0.1", "--max-batch", "8"), "--max-batch", "--rate or --schedule")
    for extra in (["--rate", "5"], ["--requests", "50"], ["--prompt-len", "256"],
                  ["--output-len", "64"], ["--rate", "5", "--prompt-len", "256"]):
        refused(cli("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--acceptance",
                    "0.55,0.1", "--schedule", *extra), extra[0], "--schedule")


def test_context_buckets_each_cover_the_batch_sizes_that_fit(setup) -> None:
    found = search_schedule(setup, 8, 64, "chain", contexts=[512, 8192, 65536])
    contexts = sorted({b.context for b in found.schedule.buckets})
    assert contexts == [(0, 2047), (2048, 23169), (23170, 2**31 - 1)]
    by_context = {c: max(b.batch[1] for b in found.schedule.buckets if b.context == c)
                  for c in contexts}
    assert by_context[(0, 2047)] == 64 > by_context[(23170, 2**31 - 1)]  # long caches fill up
    for row in found.rows:
        assert found.schedule.choice(row.batch, row.context) is row.tree or (
            row.tree is not None and found.schedule.choice(row.batch, row.context).size
            == row.tree.size)


def test_the_vllm_export_reads_back_as_the_schedule(cli: Cli) -> None:
    from specscope.interop.schedules import parse_schedule
    from specscope.schedule import Schedule

    args = ("optimize-tree", "--hw", "h100", "--target", "llama-3.1-70b", "--tp", "4",
            "--drafter", "llama-3.2-1b", "--acceptance", "0.6,0.1", "--budget", "8",
            "--engine", "vllm", "--schedule", "--to", "vllm", "--json")
    code, out, err = cli(*args)
    assert code == 0, err
    doc = json.loads(out)
    ranges = doc["export"]["config"]["num_speculative_tokens_per_batch_size"]
    ours = Schedule.from_dict(doc)
    assert [[b.batch[0], b.batch[1], b.drafts] for b in ours.buckets] == ranges
    parsed = parse_schedule("vllm", doc["export"]["config"], "draft")
    assert [(b.batch, b.drafts) for b in parsed.buckets] == [(b.batch, b.drafts)
                                                               for b in ours.buckets]
    assert "num_speculative_tokens_per_batch_size" in doc["export"]["command"]
    code, out, err = cli(*args, "--engine-version", "0.20.2")
    assert code == 0, err
    old = json.loads(out)["export"]
    assert "num_speculative_tokens_per_batch_size" not in old["config"]
    assert any("best constant" in n for n in old["notes"])
