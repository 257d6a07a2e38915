"""The drafts and placements optimize-tree and cost can state (issue 27): a draft with a bounded
cache (--draft-window), a sharded draft (--draft-tp), a head with its own vocabulary
(--draft-vocab), a target split by layers over devices (--stages). Each at its limit prices as
today."""

from __future__ import annotations

import json

import pytest

from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.cost_report import cost_report
from specscope.hw_profiles.deployment import deployment
from specscope.hw_profiles.pricing import deployed
from specscope.models import get_model
from specscope.optimizers.run import OptimizeRequest, run_optimize

BASE = ("optimize-tree", "--hw", "h100", "--target", "llama-3.1-8b", "--drafter", "llama-3.2-1b",
        "--acceptance", "0.6,0.2,0.1", "--budgets", "4,8,16", "--context", "4096", "--json")


def optimized(cli, *extra: object) -> dict:
    code, out, err = cli(*BASE, *extra)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("extra", [("--draft-window", 4096), ("--draft-window", 10**6),
                                   ("--draft-tp", 1), ("--draft-vocab", 128256),
                                   ("--stages", 1), ("--tp", 1)])
def test_each_option_at_its_limit_prices_as_today(cli, extra: tuple) -> None:
    assert optimized(cli, *extra) == optimized(cli)


def step(draft_window: int | None = None, context: int = 4096, batch: int = 1) -> float:
    hw = load_profile("h100")
    pricing = deployed(deployment("h100", draft_window=draft_window, batch=batch),
                       CostModel(hw, get_model("llama-3.1-8b")),
                       CostModel(hw, get_model("llama-3.2-1b")), context)
    return pricing.level_s("draft", 4)


def test_a_window_prices_the_draft_at_the_window() -> None:
    assert step(512, context=8192) == pytest.approx(step(None, context=512))
    assert step(512, context=8192, batch=32) < step(None, context=8192, batch=32)
    assert step(8192, context=8192) == step(None, context=8192)


def test_a_smaller_head_vocabulary_makes_drafting_cheaper(cli) -> None:
    full = optimized(cli, "--algo", "sequoia")
    small = optimized(cli, "--algo", "sequoia", "--draft-vocab", 32000)
    assert small["results"][0]["step_time_ms"] < full["results"][0]["step_time_ms"]
    assert small["results"][0]["expected_tokens"] == full["results"][0]["expected_tokens"]


def test_draft_tp_shards_the_draft() -> None:
    hw = load_profile("h100")
    spec = get_model("llama-3.2-1b")
    one, two = (CostModel(hw, spec, tp=tp).forward_time(16, 4, 4096) for tp in (1, 2))
    assert two != one  # half the weights per device, plus the all-reduces
    stated = dict(target="llama-3.1-8b", drafter="llama-3.2-1b", batch=16, tp=2)

    def best(**draft: int) -> float:
        setup = deployment("h100", **stated, **draft)
        return run_optimize(OptimizeRequest(setup, acceptance=[0.6, 0.2], budget=8)
                            ).comparison.scores[0].speedup

    assert best(draft_tp=2) != best()


@pytest.mark.parametrize(("engine", "sharded"), [("vllm", True), ("sglang", True),
                                                ("gpt-fast", True), (None, False)])
def test_an_engine_shards_the_draft_as_the_target_unless_told(cli, engine: str | None,
                                                              sharded: bool) -> None:
    """vLLM, SGLang and gpt-fast run a draft model over the target's devices by default;
    specscope's own loop runs it on one."""
    args = (*(() if engine is None else ("--engine", engine)), "--tp", 2, "--algo", "chain")
    default = optimized(cli, *args)["results"][0]["step_time_ms"]
    for tp, same in ((2, sharded), (1, not sharded)):
        stated = optimized(cli, *args, "--draft-tp", tp)["results"][0]["step_time_ms"]
        assert (stated == default) is same, (tp, stated, default)


def test_stages_hold_what_one_device_cannot(cli) -> None:
    args = ("optimize-tree", "--hw", "a100", "--target", "llama-3.1-70b", "--drafter",
            "llama-3.2-1b", "--acceptance", "0.6,0.2", "--budget", 8, "--json")
    code, _, err = cli(*args)
    assert code == 2 and "do not fit" in err
    for placement in (("--stages", 2), ("--tp", 2)):
        code, _, err = cli(*args, *placement)
        assert code == 0, err
    one = CostModel(load_profile("a100"), get_model("llama-3.1-70b"))
    two = CostModel(load_profile("a100"), get_model("llama-3.1-70b"), stages=2)
    hop = two.pipeline_time(1, 1)
    assert 0 < hop < 1e-3
    assert two.forward_time(1, 1, 512) == pytest.approx(one.forward_time(1, 1, 512) + hop)
    report = cost_report(two, 1, 1, 512)
    assert report["fits"] and any(r["term"] == "pipeline" for r in report["step_terms"])


@pytest.mark.parametrize(("args", "word"), [
    (("--source", "ngram", "--draft-window", 512), "--draft-window prices a draft model"),
    (("--stages", 1000), "--stages 1000: must lie in 1..32"),
    (("--tp", 8, "--draft-tp", 5), "tp=5"),
    (("--draft-tp", 2), "--draft-tp 2: the deployment has 1 device"),
    (("--draft-vocab", 1), "--draft-vocab 1: a reduced draft vocabulary lies in"),
])
def test_bad_draft_options_exit_2(cli, tmp_path, args: tuple, word: str) -> None:
    trace = tmp_path / "x.parquet"
    cli("trace", "synth", "--requests", 4, "--length", 32, "--seed", 1, "-o", trace)
    code, _, err = cli("optimize-tree", "--hw", "h100", "--trace", trace, "--budget", 4,
                       "--target", "llama-3.1-8b", *args)
    assert code == 2 and word in err and len(err.strip().splitlines()) == 1, err


def test_cost_stages_and_a_system_do_not_mix(cli) -> None:
    code, _, err = cli("cost", "--hw", "h100", "--target", "llama-3.1-8b", "--stages", 2,
                       "--system", "medusa")
    assert code == 2 and "--stages" in err
