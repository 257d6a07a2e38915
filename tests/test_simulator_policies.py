"""The simulator's dynamic per-step policies (dyspec, specdecpp, smartspec, ets-batch) on
hand-built batches, each checked against an independent computation of its paper's rule."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from specscope.hw_profiles.deployment import deployment
from specscope.optimizers.dyspec import draft_scores, dyspec_from_scores
from specscope.optimizers.sequoia import SequoiaDP
from specscope.optimizers.specdecpp_predictor import AcceptancePredictor, candidate_features
from specscope.simulator.policies import POLICIES
from specscope.simulator.policies.base import PolicySetup, Slot, Speculation, StepView
from specscope.simulator.policies.common import AcceptanceTracker, truncated
from specscope.simulator.policies.dyspec import DySpec
from specscope.simulator.policies.ets_batch import ETSBatch
from specscope.simulator.policies.positions import TracePositions
from specscope.simulator.policies.smartspec import SmartSpec
from specscope.simulator.policies.specdecpp import SpecDecPP
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.trace import AcceptanceModel, Trace, synth_trace
from specscope.tree import Tree

DRAFT = "draft:tiny"


class LinearPricer:
    """A fake `StepPricer`: `base` + `per_token` × the batch's tree tokens + `per_level` × the
    deepest drafting (seconds)."""

    def __init__(self, base: float, per_token: float, per_level: float = 0.0) -> None:
        self.base, self.per_token, self.per_level = base, per_token, per_level

    def step_s(self, contexts: Sequence[int], speculations: Sequence[Speculation]) -> float:
        tokens = sum(s.tree.size for s in speculations)
        levels = max(s.draft_levels for s in speculations)
        return self.base + self.per_token * tokens + self.per_level * levels


CHEAP = LinearPricer(0.010, 0.0001, 0.0005)


@cache
def trace() -> Trace:
    return synth_trace(6, 0, sources=(DRAFT,), length=48, k=3)


def setup(p: Sequence[float] | None = None, with_trace: bool = True, budget: int = 8,
          max_depth: int = 6, tree: Tree | None = None, **options: float) -> PolicySetup:
    model = (AcceptanceModel.from_trace(trace(), DRAFT) if p is None
             else AcceptanceModel.from_vector(p, DRAFT))
    return PolicySetup(model, DRAFT, trace() if with_trace else None, tree, budget, max_depth,
                       seed=0, options=options)


def view(policy_setup: PolicySetup, slots: Sequence[Slot], pricer: LinearPricer = CHEAP,
         step: int = 0) -> StepView:
    return StepView(tuple(slots), pricer, policy_setup.acceptance, DRAFT, step)


def slot(request_id: int, trace_request: int | None = None, generated: int = 0,
         remaining: int = 100, context: int = 500) -> Slot:
    return Slot(request_id, trace_request, context + generated, generated, remaining)


def rank_paths(tree: Tree) -> set[tuple[int, ...]]:
    paths: list[tuple[int, ...]] = [()]
    for v in range(1, tree.size):
        paths.append((*paths[tree.parents[v]], int(tree.ranks[v])))
    return set(paths[1:])


def test_registry_builds_every_dynamic_policy() -> None:
    for name in ("dyspec", "specdecpp", "smartspec", "ets-batch"):
        policy = POLICIES[name](setup())
        assert policy.name == name
        out = policy.plan(view(setup(), [slot(0, 0), slot(1, None, remaining=1)]))
        assert len(out) == 2
        assert out[1].tree.size == 1  # one token left: nothing to draft


# ---- dyspec ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("budget", "max_depth", "remaining"),
                         [(8, 6, 100), (12, 3, 100), (16, 6, 3), (5, 6, 1)])
def test_dyspec_respects_budget_and_depth(budget: int, max_depth: int, remaining: int) -> None:
    s = setup(budget=budget, max_depth=max_depth)
    policy = DySpec(s)
    slots = [slot(r, r % 6, generated=g, remaining=remaining) for r, g in enumerate((0, 7, 30))]
    for spec in policy.plan(view(s, [*slots, slot(9, None, remaining=remaining)])):
        assert spec.tree.size <= budget
        assert spec.tree.depth <= min(max_depth, remaining - 1)
        assert spec.tree.depth <= spec.draft_levels <= spec.tree.depth + 1
        cap = min(max_depth, remaining - 1)
        assert spec.tree.size == min(budget, sum(3**d for d in range(cap + 1)))  # K = 3


def test_dyspec_follows_the_trace_scores_on_path_and_mean_scores_off_it() -> None:
    """Brute force: the tree holds the budget − 1 rank paths of largest path score, where an
    edge scores the trace's draft probability at its position while the path follows the
    target's tokens, and the source's mean probability per rank once it left them."""
    s = setup(budget=10, max_depth=4, calibrate=0)
    rows = TracePositions(trace(), DRAFT)
    off = draft_scores(trace(), DRAFT, calibrate=False)
    for request, generated in ((0, 0), (2, 11), (5, 40)):
        path = rows.path(request)
        scored = {}
        for depth in range(1, 5):
            for ranks in itertools.product(range(3), repeat=depth):
                f, pos, on = 1.0, generated, True
                for r in ranks:
                    row = path.row(pos) if on else None
                    f *= off[r] if row is None else row[0][r]
                    on = row is not None and row[1] == r
                    pos += 1
                scored[ranks] = f
        best = sorted(scored, key=scored.get, reverse=True)[:9]
        (spec,) = DySpec(s).plan(view(s, [slot(0, request, generated)]))
        assert rank_paths(spec.tree) == set(best)


def test_dyspec_without_trace_is_the_greedy_tree_of_the_model_vector() -> None:
    p = [0.6, 0.2, 0.1]
    s = setup(p, with_trace=False, budget=9, max_depth=5)
    specs = DySpec(s).plan(view(s, [slot(0), slot(1, remaining=3)]))
    assert specs[0].tree == dyspec_from_scores(p, 9, 5, DRAFT)
    assert specs[1].tree == dyspec_from_scores(p, 9, 2, DRAFT)


# ---- specdecpp -------------------------------------------------------------------------------


def expected_length(a: Sequence[float], h: float, cap: int) -> int:
    """The threshold rule by hand: the first i ≥ min(2, cap) with 1 − Π_{j≤i} a_j ≥ h."""
    prod = 1.0
    for i in range(1, cap + 1):
        prod *= a[i - 1]
        if i >= min(2, cap) and 1 - prod >= h:
            return i
    return cap


def test_specdecpp_stops_by_the_threshold_on_trace_features() -> None:
    predictor = AcceptancePredictor.fit(trace(), DRAFT, seed=0)
    rows = TracePositions(trace(), DRAFT)
    lengths = set()
    for h in (0.3, 0.7, 0.95):
        s = setup(budget=21, max_depth=20, threshold=h)
        policy = SpecDecPP(s)
        for request, generated in itertools.product(range(6), (0, 5, 20, 33)):
            (spec,) = policy.plan(view(s, [slot(0, request, generated)]))
            scores = rows.path(request).scores[generated : generated + 20]
            a = predictor.predict(candidate_features(scores))
            a = np.r_[a, np.full(20 - a.size, s.acceptance.p[0])]  # past the trace: the model
            assert spec.tree == Tree.chain(expected_length(a, h, 20), DRAFT)
            lengths.add(spec.tree.depth)
    assert len(lengths) > 3  # the rule reacts to the features and the threshold


def test_specdecpp_without_trace_uses_the_model_top1_and_pays_each_drafted_token() -> None:
    """No drafted token goes unverified: the estimate of token i comes with the forward that
    drafted it, so the step pays exactly the chain's levels."""
    s = setup([0.8, 0.1], with_trace=False, budget=21, max_depth=20, threshold=0.7)
    specs = SpecDecPP(s).plan(view(s, [slot(0), slot(1, remaining=4), slot(2, remaining=2)]))
    # 0.8^5 = 0.33 > 0.3 ≥ 0.8^6: stop after the 6th draft; caps 3 and 1 (min length cut too).
    assert [spec.tree.depth for spec in specs] == [6, 3, 1]
    assert all(spec.draft_levels == spec.tree.depth for spec in specs)
    assert specs[0].tree == Tree.chain(6, DRAFT)


# ---- smartspec -------------------------------------------------------------------------------


def chain_goodput(p: float, k: int, batch: int, pricer: LinearPricer) -> float:
    tokens = batch * sum(p**d for d in range(k + 1))
    spec = Speculation.of(Tree.chain(k, DRAFT))
    return tokens / pricer.step_s([500] * batch, [spec] * batch)


@pytest.mark.parametrize(("pricer", "batch"),
                         [(CHEAP, 1), (CHEAP, 16), (LinearPricer(0.002, 0.004), 8)])
def test_smartspec_goodput_is_expected_tokens_over_step_time(pricer: LinearPricer,
                                                             batch: int) -> None:
    s = setup([0.7], with_trace=False, max_depth=5)
    goodput = SmartSpec(s).goodputs(view(s, [slot(r) for r in range(batch)], pricer))
    brute = [chain_goodput(0.7, k, batch, pricer) for k in range(6)]
    np.testing.assert_allclose(goodput, brute, rtol=1e-12)


def test_smartspec_speculates_when_verification_is_cheap_and_not_when_steep() -> None:
    s = setup([0.7], with_trace=False, max_depth=5)
    slots = [slot(r) for r in range(32)]
    cheap = SmartSpec(s).plan(view(s, slots, CHEAP))
    assert cheap[0].tree.depth > 0
    assert all(spec is cheap[0] for spec in cheap)  # one length for the whole batch
    steep = LinearPricer(0.002, 0.004)  # every verified token costs 2x a whole base step
    assert all(spec.tree.size == 1 for spec in SmartSpec(s).plan(view(s, slots, steep)))


def test_smartspec_caps_each_request_at_its_remaining_tokens() -> None:
    s = setup([0.9], with_trace=False, max_depth=6)
    specs = SmartSpec(s).plan(view(s, [slot(0), slot(1, remaining=3), slot(2, remaining=1)]))
    assert [spec.tree.depth for spec in specs] == [6, 2, 0]


def test_smartspec_honours_the_margin() -> None:
    # gain of the best length over none ≈ 3.5% with this pricer: speculate only below it.
    pricer = LinearPricer(0.010, 0.0045)
    brute = [chain_goodput(0.7, k, 4, pricer) for k in range(6)]
    gain = max(brute) / brute[0] - 1
    assert 0.02 < gain < 0.05
    for margin, speculates in ((0.05, False), (0.0, True), (gain - 1e-3, True),
                               (gain + 1e-3, False)):
        s = setup([0.7], with_trace=False, max_depth=5, margin=margin)
        (spec, *_) = SmartSpec(s).plan(view(s, [slot(r) for r in range(4)], pricer))
        assert (spec.tree.depth > 0) == speculates
        if speculates:
            assert spec.tree.depth == int(np.argmax(brute))


def test_smartspec_tracks_observed_acceptance_online() -> None:
    """Requests whose drafts are accepted at 0.9 a token, under a model that says 0.6: the
    tracked ratio moves from 1 toward 1.5, and the policy starts to speculate."""
    s = setup([0.6], with_trace=False, max_depth=4, ema=0.05)
    policy = SmartSpec(s)
    pricer = LinearPricer(0.010, 0.0035)
    slots = [slot(r) for r in range(4)]
    assert policy.plan(view(s, slots, pricer))[0].tree.depth == 0
    chain = Speculation.of(Tree.chain(4, DRAFT))
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(400):
        for sl in slots:
            accepted = int(np.argmin(np.r_[rng.random(4) < 0.9, False]))
            policy.observe(sl, chain, accepted)
        ratios.append(policy.tracker.ratio(0))
    assert abs(np.mean(ratios[-200:]) - 1.5) < 0.08
    assert policy.plan(view(s, slots, pricer))[0].tree.depth > 0


def test_tracker_follows_observations_and_falls_back_to_the_pooled_ratio_without_them() -> None:
    tracker = AcceptanceTracker(AcceptanceModel.from_vector([0.6, 0.2]), weight=0.2)
    tree = Tree.from_rank_paths([(0,), (1,), (0, 0)])
    tracker.observe(7, Tree.root(), 0)
    assert tracker.ratio(7) == tracker.pooled == 1.0
    for _ in range(30):
        tracker.observe(7, tree, 0)
    # one trial per step, expected 0.6 + 0.2 accepted: the ratio falls toward 0, the pooled
    # ratio (weight 0.01) part of the way, and a new request starts from the pooled ratio
    assert tracker.ratio(7) < 0.01
    assert 0.6 < tracker.pooled < 0.9
    assert tracker.ratio(8) == tracker.pooled
    for _ in range(40):
        tracker.observe(7, Tree.root(), 0)  # drafting nothing pulls it to the pooled ratio
    assert tracker.ratio(7) == pytest.approx(tracker.pooled, rel=1e-3)
    for _ in range(60):
        tracker.observe(7, tree, 2)
    assert tracker.ratio(7) == pytest.approx(1 / 0.8)  # capped: a scaled row sums to 1


def test_tracker_pooled_ratio_returns_to_the_model_when_nobody_drafts() -> None:
    tracker = AcceptanceTracker(AcceptanceModel.from_vector([0.6]), weight=0.2)
    chain = Tree.chain(2)
    for request in range(300):
        tracker.observe(request, chain, 0)
    assert tracker.pooled < 0.1
    for _ in range(50_000):
        tracker.observe(0, Tree.root(), 0)
    assert tracker.pooled > 0.99


def test_smartspec_with_a_tree_truncates_it_by_depth() -> None:
    tree = Tree.from_rank_paths([(0,), (1,), (0, 0), (0, 1), (0, 0, 0)])
    s = setup([0.7, 0.2], with_trace=False, tree=tree)
    policy = SmartSpec(s)
    assert [spec.tree for spec in policy.lengths] == [truncated(tree, k) for k in range(4)]
    assert [spec.tree.size for spec in policy.lengths] == [1, 3, 5, 6]


# ---- ets-batch -------------------------------------------------------------------------------


def test_ets_batch_allocation_fills_the_batch_budget() -> None:
    s = setup([0.7, 0.15, 0.05], with_trace=False, budget=6, max_depth=5)
    specs = ETSBatch(s).plan(view(s, [slot(r) for r in range(5)]))
    assert sum(spec.tree.size for spec in specs) == 6 * 5
    s = setup([0.7, 0.15, 0.05], with_trace=False, budget=6, max_depth=5, batch_budget=17)
    specs = ETSBatch(s).plan(view(s, [slot(r) for r in range(5)]))
    assert sum(spec.tree.size for spec in specs) == 17
    s = setup([0.7], with_trace=False, budget=6, batch_budget=3)
    specs = ETSBatch(s).plan(view(s, [slot(r) for r in range(5)]))
    assert all(spec.tree.size == 1 for spec in specs)  # the roots alone exceed the budget


def test_ets_batch_gives_more_to_requests_with_higher_acceptance() -> None:
    s = setup([0.5, 0.1, 0.05], with_trace=False, budget=8, max_depth=6)
    policy = ETSBatch(s)
    chain = Speculation.of(Tree.chain(4, DRAFT))
    for _ in range(20):  # ratios to the model: 2 / 1.5 and 0 / 0.5; pooled 1 (request 2's)
        policy.observe(slot(0), chain, 2)
        policy.observe(slot(1), chain, 0)
    specs = policy.plan(view(s, [slot(0), slot(1), slot(2)]))
    sizes = [spec.tree.size for spec in specs]
    assert policy.rounded_ratio(0) > policy.rounded_ratio(2) > policy.rounded_ratio(1)
    assert sizes[0] > sizes[2] > sizes[1]
    assert sum(sizes) == 24


def test_ets_batch_re_solves_only_every_n_steps_and_memoises() -> None:
    s = setup([0.6, 0.2, 0.1], with_trace=False, budget=8, max_depth=6, every=3)
    policy = ETSBatch(s)
    slots = [slot(0), slot(1)]
    chain = Speculation.of(Tree.chain(4, DRAFT))
    plans = []
    for step in range(7):
        plans.append(policy.plan(view(s, slots, step=step)))
        for _ in range(4):  # request 0 does better every step: its ratio keeps moving
            policy.observe(slots[0], chain, 4)
            policy.observe(slots[1], chain, 1)
    assert policy.solves == 3  # steps 0, 3 and 6
    trees = [[spec.tree for spec in plan] for plan in plans]
    assert trees[0] == trees[1] == trees[2] != trees[3]
    assert trees[3] == trees[4] == trees[5]
    # a newcomer between solves verifies its own ratio's tree under the per-request budget
    (_, _, newcomer) = policy.plan(view(s, [*slots, slot(5)], step=7))
    assert newcomer.tree.size == 8
    # a fresh policy meeting a batch of the same composition hits the memo: no new solve
    s = setup([0.6, 0.2, 0.1], with_trace=False, budget=8, max_depth=6, every=1)
    again = ETSBatch(s)
    for step in range(3):
        again.plan(view(s, [slot(10 + 2 * step), slot(11 + 2 * step)], step=step))
    assert again.solves == 1


def test_ets_batch_cuts_trees_at_the_remaining_tokens() -> None:
    s = setup([0.8, 0.1], with_trace=False, budget=8, max_depth=6)
    specs = ETSBatch(s).plan(view(s, [slot(0), slot(1, remaining=2), slot(2, remaining=1)]))
    assert [min(spec.tree.depth, 1) for spec in specs] == [1, 1, 0]
    assert specs[1].tree.depth == 1 and specs[2].tree.size == 1


def test_policies_are_deterministic_for_a_seed() -> None:
    for name in ("dyspec", "specdecpp", "smartspec", "ets-batch"):
        slots = [slot(r, r % 6, generated=3 * r) for r in range(4)]
        a = POLICIES[name](setup()).plan(view(setup(), slots))
        b = POLICIES[name](setup()).plan(view(setup(), slots))
        assert [x.tree for x in a] == [y.tree for y in b]


# ---- speculation under load: the crossover ---------------------------------------------------


LOADS = {"low": (0.02, 12), "saturated": (1e4, 384)}  # (arrivals/s, requests) at max batch 64


def test_static_tree_crosses_over_autoregressive_and_smartspec_follows_the_better(
        tmp_path: Path) -> None:
    """h100, llama-3.1-8b with a llama-3.2-1b draft of top-1 acceptance 0.54 (synthetic trace:
    256 tokens per request, prompts of 32-512 tokens), at most 64 requests a step. The DP tree
    of 16 tokens lowers TPOT at low load (one request at a time) but verifies 64 × 16 tokens a
    step at saturation and loses throughput to autoregressive decoding; SmartSpec, choosing a
    chain length per step, stays within 5% of the better of the two at both ends."""
    source = "draft:llama-3.2-1b"
    trace = synth_trace(64, 0, sources=(source,), length=256, k=8)
    model = AcceptanceModel.from_trace(trace, source)
    tree_file = tmp_path / "tree.json"
    tree_file.write_text(SequoiaDP(model.p, 16, 8).tree(16, source=source).to_json())
    runs = {}
    for (load, (rate, requests)), policy in itertools.product(
            LOADS.items(), ("none", "static", "smartspec")):
        req = SimulateRequest(
            deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b",
                                  max_batch=64),
            trace=trace, policy=policy, tree=tree_file if policy == "static" else None, budget=16,
            max_depth=8, rate=rate, requests=requests, seed=0)
        runs[load, policy] = run_simulation(req).summary
    tpot = {p: runs["low", p]["mean_tpot_ms"] for p in ("none", "static", "smartspec")}
    tput = {p: runs["saturated", p]["throughput_tok_s"] for p in ("none", "static", "smartspec")}
    shown = f"low-load TPOT (ms) {tpot}, saturated throughput (tokens/s) {tput}"
    assert runs["low", "none"]["mean_batch"] < 1.5 and runs["saturated", "none"]["mean_batch"] > 60
    assert tpot["static"] < tpot["none"], shown
    assert tput["static"] < tput["none"], shown
    assert tpot["smartspec"] <= 1.05 * min(tpot["none"], tpot["static"]), shown
    assert tput["smartspec"] >= 0.95 * max(tput["none"], tput["static"]), shown
