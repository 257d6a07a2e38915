"""`optimize-tree --rate`: trees optimised at the batch the load builds, each served in
simulation beside plain decoding and SmartSpec, and the choice of what finishes requests
soonest."""

from __future__ import annotations

import json

import pytest

from specscope.hw_profiles.deployment import deployment
from specscope.optimizers.run import OptimizeRequest
from specscope.simulator.at_rate import choose_at_rate

ARGS = ("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter", "llama-68m",
        "--acceptance", "0.8,0.1", "--budget", "8", "--requests", "60")


def choose(rate: float, acceptance: list[float]):
    return choose_at_rate(OptimizeRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-68m"),
        acceptance=acceptance, budget=8),
                          rate, requests=60, seed=3)


def test_light_load_with_good_drafts_speculates() -> None:
    choice = choose(0.2, [0.85, 0.1])
    assert choice.batch <= 2 and choice.best is not choice.plain
    assert choice.best.summary["mean_latency_s"] < choice.plain.summary["mean_latency_s"]
    assert choice.to_dict()["speculation_pays"] and choice.verdict.startswith("speculate at")


def test_poor_drafts_under_load_decode_plainly() -> None:
    choice = choose(60.0, [0.1])
    assert choice.batch > 8
    assert choice.best is choice.plain and choice.verdict.startswith("no speculation at 60")
    names = [c.name for c in choice.candidates]
    assert names[0] == "plain decoding" and names[-1] == "smartspec" and len(names) >= 3


def test_the_trees_are_optimised_at_the_loads_batch() -> None:
    choice = choose(30.0, [0.8, 0.1])
    assert choice.result.batch == choice.batch > 1


def test_same_seed_same_choice(cli) -> None:
    one = json.loads(cli(*ARGS, "--rate", 20, "--json")[1])
    assert json.loads(cli(*ARGS, "--rate", 20, "--json")[1]) == one
    assert set(one) >= {"rate", "batch", "best", "speculation_pays", "verdict", "candidates",
                        "optimized"}
    code, out, _ = cli(*ARGS, "--rate", 20)
    assert code == 0 and "served at 20 requests/s" in out


def test_the_rate_is_served_under_every_deployment_and_workload_option(cli) -> None:
    stated = ("--draft-window", 64, "--draft-tp", 2, "--draft-vocab", 16000, "--stages", 2,
              "--weight-bits", 8, "--draft-runtime", "eager", "--engine", "vllm",
              "--tree-attention", "dense", "--prompt-len", 128, "--output-len", 24)
    code, out, err = cli(*ARGS, "--rate", 40, "--json", *stated)
    assert code == 0, err
    limited = json.loads(cli(*ARGS, "--rate", 40, "--json", *stated, "--max-batch", 2)[1])
    assert max(c["mean_batch"] for c in limited["candidates"]) <= 2
    assert json.loads(out)["candidates"] != limited["candidates"]


@pytest.mark.parametrize(("extra", "word"), [
    (("--rate", 0), "--rate"), (("--rate", -1), "--rate"),
    (("--rate", 5, "--batch", 8), "--batch")])
def test_bad_rates_exit_2(cli, extra: tuple, word: str) -> None:
    code, _, err = cli(*ARGS, *extra)
    assert code == 2 and word in err and len(err.strip().splitlines()) == 1, err
