"""`simulate --policy schedule --schedule FILE` (issue 42, item 2): each step verifies the tree
the schedule holds for its running batch size (and each request's context). A one-bucket
schedule serves exactly as the static policy with that tree; a bucket without a tree decodes
plainly; wrong pairings of policy and file are one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Cli
from test_guards import refused

from specscope.hw_profiles.deployment import deployment
from specscope.schedule import Bucket, Schedule
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.tree import Tree

NUMBERS = ("throughput_tok_s", "mean_tpot_ms", "mean_ttft_ms", "mean_accepted", "mean_batch")


def _run(**options: object) -> dict:
    req = SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b",
                              max_batch=16),
        acceptance=(0.6, 0.1), rate=30.0, requests=120, prompt_len="256", output_len="64",
        seed=3, against_plain=False, **options)
    return run_simulation(req).summary


def test_a_one_bucket_schedule_serves_as_the_static_tree() -> None:
    tree = Tree.from_rank_paths([(0,), (1,), (0, 0)], "draft:llama-3.2-1b")
    static = _run(policy="static", tree=tree)
    scheduled = _run(policy="schedule", schedule=Schedule.constant(tree, 16))
    assert [scheduled[k] for k in NUMBERS] == [static[k] for k in NUMBERS]


def test_buckets_switch_with_the_running_batch() -> None:
    chain = Tree.chain(3, "draft:llama-3.2-1b")
    off = _run(policy="schedule", schedule=Schedule.constant(None, 16))
    assert off["mean_accepted"] == 0.0
    split = Schedule((Bucket((1, 4), None, chain), Bucket((5, 16), None, None)))
    mixed = _run(policy="schedule", schedule=split)
    always = _run(policy="schedule", schedule=Schedule.constant(chain, 16))
    assert 0.0 < mixed["mean_accepted"] < always["mean_accepted"]
    assert mixed == _run(policy="schedule", schedule=split)  # same seed, same result


def test_the_command_serves_optimize_trees_schedule(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "schedule.json"
    assert cli("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
               "llama-3.2-1b", "--acceptance", "0.6,0.1", "--budget", "6", "--schedule",
               "--to", "vllm", "--max-batch", "32", "-o", path)[0] == 0
    common = ("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
              "llama-3.2-1b", "--acceptance", "0.6,0.1", "--rate", "20", "--requests", "60",
              "--max-batch", "32", "--seed", "0")
    code, out, err = cli(*common, "--policy", "schedule", "--schedule", path, "--json")
    assert code == 0, err
    assert json.loads(out)["policy"] == "schedule"
    refused(cli(*common, "--policy", "schedule"), "--policy schedule", "--schedule FILE")
    refused(cli(*common, "--policy", "none", "--schedule", path), "--schedule")
    other = json.loads(path.read_text()) | {"target": "llama-3.1-70b"}
    path.write_text(json.dumps(other))
    refused(cli(*common, "--policy", "schedule", "--schedule", path), "optimised for target "
            "llama-3.1-70b")


@pytest.mark.parametrize("text", ["[]", '{"schedule": [{"batch": [2, 3], "tree": null}]}'])
def test_a_malformed_schedule_file_is_one_line(cli: Cli, tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    refused(cli("simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter",
                "llama-3.2-1b", "--acceptance", "0.6,0.1", "--rate", "20", "--requests", "10",
                "--policy", "schedule", "--schedule", path), str(path))
