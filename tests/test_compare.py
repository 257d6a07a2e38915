"""The matched-budget comparison: every method valid, within budget, never above the DP."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.pricing import Pricing
from specscope.models import get_model
from specscope.optimizers.compare import METHOD_NAMES, Setup, compare
from specscope.trace import AcceptanceModel, RankedBehaviour, synth_trace
from specscope.tree import Tree

SOURCE = "draft:llama-68m"


def setup_for(seed: int, top1: float, hw: str = "h100", depth: int | None = 8) -> Setup:
    behaviour = {SOURCE: RankedBehaviour(top1=top1, decay=0.8 * (1 - top1), depth_decay=0.98)}
    trace = synth_trace(requests=6, seed=seed, length=96, behaviour=behaviour)
    profile = load_profile(hw)
    pricing = Pricing(CostModel(profile, get_model("llama-2-7b")),
                      CostModel(profile, get_model("llama-68m")), 256)
    return Setup(AcceptanceModel.from_trace(trace, SOURCE).p, SOURCE, pricing, depth, trace)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), top1=st.floats(0.2, 0.9), budget=st.integers(2, 40))
def test_every_method_is_valid_within_budget_and_below_the_dp(seed: int, top1: float,
                                                              budget: int) -> None:
    setup = setup_for(seed, top1)
    result = compare(setup, METHOD_NAMES, budget=budget)
    assert set(result.skipped) == ({"specdecpp"} if budget < 3 else set())
    rows = {s.algo: s for s in result.scores}
    assert rows.keys() == set(METHOD_NAMES) - set(result.skipped)
    dp = rows["sequoia"].expected_tokens
    for s in result.scores:
        assert s.tree.size <= budget and s.n <= budget
        assert s.tree.depth <= setup.max_depth
        assert s.expected_tokens >= 1 and s.replay_tokens >= 1 and s.step_time_s > 0
        if set(s.tree.sources[1:]) <= {SOURCE}:  # the DP is exact over this source's trees
            assert s.expected_tokens <= dp + 1e-9, s.algo
    assert rows["ets"].expected_tokens == pytest.approx(dp, abs=1e-6)


def test_hardware_aware_choice_prefers_small_trees_on_the_edge_cpu() -> None:
    """The same acceptance, two price lists: the CPU's verification cost grows with n."""
    chosen = {}
    for hw in ("h100", "cpu-2core"):
        result = compare(setup_for(1, 0.7, hw), ["sequoia"], budgets=[4, 8, 16, 32, 64])
        chosen[hw] = result.scores[0].tree.size
    assert chosen["cpu-2core"] < chosen["h100"]


def test_pricing_adds_the_loop_slowdowns_and_the_sampled_rule_where_they_are_paid() -> None:
    import dataclasses

    cpu = load_profile("cpu-2core")
    base = dataclasses.replace(cpu, loop=dataclasses.replace(
        cpu.loop, draft_cold=0.0, verify_cold=0.0, sampled_verify=0.0, node=0.0,
        dyspec_node=0.0))
    hw = dataclasses.replace(base, loop=dataclasses.replace(
        base.loop, draft_cold=1e-3, verify_cold=2e-3, sampled_verify=base.loop.verify + 4e-3,
        node=5e-4, dyspec_node=7e-4))

    def pricing(profile: object, draft: bool, temperature: float = 0.0) -> Pricing:
        return Pricing(CostModel(profile, get_model("tiny-code")),
                       CostModel(profile, get_model("tiny-code-draft")) if draft else None, 128,
                       temperature=temperature)

    for draft in (True, False):
        plain, slow = pricing(base, draft), pricing(hw, draft)
        cold = 1e-3 if draft else 0.0
        assert slow.level_s("draft:x", 3) - plain.level_s("draft:x", 3) == pytest.approx(cold)
        assert slow.level_s("ngram") == plain.level_s("ngram")  # a model-free call
        # the target's forward is slower inside any speculative loop, model-free ones too
        assert slow.verify_s(5, 4) - plain.verify_s(5, 4) == pytest.approx(2e-3)
        hot = pricing(hw, draft, temperature=0.7)
        assert hot.verify_s(5, 4) - slow.verify_s(5, 4) == pytest.approx(4e-3)
    # a level proposing for more nodes pays the per-node host work for each beyond the first
    wide = pricing(hw, True)
    assert wide.level_s("draft:x", 7, 3) - wide.level_s("draft:x", 7) == pytest.approx(1e-3)
    fan = Tree.from_parents([-1, 0, 0, 1, 1, 2, 2])  # level 2 proposes for two parents
    assert wide.draft_s(fan) == pytest.approx(wide.level_s("draft", 1)
                                              + wide.level_s("draft", 3, 2))
    # DySpec's live calls pay its own per-node figure
    calls = wide.dyspec_calls_s("draft:x", [1, 4, 6], [1, 3, 2])
    assert calls == pytest.approx(sum(wide.level_s("draft:x", f) for f in (1, 4, 6))
                                  + 3 * 7e-4)
