"""The simulator's step pricer: at batch 1 it is the optimizers' `Pricing`, exactly; batched, its
tabulation stays within 1e-6 of direct cost-model calls."""

from __future__ import annotations

import numpy as np
import pytest

from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.pricing import Pricing
from specscope.models import get_model
from specscope.simulator.policies.base import Speculation
from specscope.simulator.pricing import BatchPricer, Link, host_terms
from specscope.tree import Tree

PAIRS = [("h100", "llama-3.1-8b", "llama-3.2-1b", None), ("cpu-2core", "tiny-code",
                                                          "tiny-code-draft", "eager"),
         ("h100", "mamba2-2.7b", "llama-68m", None)]


def _models(hw: str, target: str, draft: str, runtime: str | None) -> tuple[CostModel, CostModel]:
    profile = load_profile(hw)
    return (CostModel(profile, get_model(target), runtime=runtime),
            CostModel(profile, get_model(draft), runtime=runtime))


def _trees(source: str) -> list[Tree]:
    return [
        Tree.chain(1, source),
        Tree.chain(5, source),
        Tree.from_rank_paths([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)], source),
        Tree.from_parents([-1, 0, 0, 1, 2], [-1, 0, 0, 0, 0],
                          ["root", source, "ngram", source, "ngram"]),
    ]


@pytest.mark.parametrize(("hw", "target", "draft", "runtime"), PAIRS)
@pytest.mark.parametrize("context", [0, 37, 64, 159, 160, 161, 300, 1023, 4000])
def test_one_request_costs_what_pricing_says(hw: str, target: str, draft: str,
                                             runtime: str | None, context: int) -> None:
    """Contexts around 160 cross the nearest measured table of cpu-2core (64 | 256)."""
    t, d = _models(hw, target, draft, runtime)
    source = f"draft:{draft}"
    pricer = BatchPricer(t, d, source)
    reference = Pricing(t, d, context)
    served = reference.loop.serve_step  # the batching server's own work (0 for h100)
    # and its bookkeeping of a speculating sequence, in place of the decode loop's
    own = reference.loop.row_bookkeeping - reference.bookkeeping_s
    for tree in _trees(source):
        got = pricer.step_s([context], [Speculation.of(tree)])
        assert got == pytest.approx(reference.tree_step_s(tree) + served + own, rel=1e-9, abs=0)
    plain = pricer.step_s([context], [Speculation.none()])
    assert plain == pytest.approx(reference.autoregressive_s + served + reference.loop.serve_row,
                                  rel=1e-9, abs=0)


def test_a_sampled_step_pays_the_sampled_verification_as_pricing_does() -> None:
    t, d = _models("cpu-2core", "tiny-code", "tiny-code-draft", "eager")
    tree = _trees("draft:tiny-code-draft")[2]
    for temperature in (0.0, 0.7):
        pricer = BatchPricer(t, d, "draft:tiny-code-draft", temperature=temperature)
        reference = Pricing(t, d, 300, temperature=temperature)
        assert pricer.step_s([300], [Speculation.of(tree)]) == pytest.approx(
            reference.tree_step_s(tree) + reference.loop.serve_step
            + reference.loop.row_bookkeeping - reference.bookkeeping_s, rel=1e-9, abs=0)


def test_a_model_free_drafter_costs_its_propose_calls() -> None:
    t, _ = _models("cpu-2core", "tiny-code", "tiny-code-draft", "eager")
    pricer = BatchPricer(t, None, "ngram")
    chain = Tree.chain(4, "ngram")
    assert pricer.step_s([200], [Speculation.of(chain)]) == pytest.approx(
        Pricing(t, None, 200).tree_step_s(chain) + t.hw.loop.serve_step
        + t.hw.loop.row_bookkeeping - t.hw.loop.step, rel=1e-6)  # the tables' interpolation
    three = pricer.parts([200] * 3, [Speculation.of(chain)] * 3)
    assert three.draft_s == pytest.approx(3 * 4 * t.hw.loop.drafter["ngram"], rel=1e-12)


def test_levels_drafted_past_the_tree_forward_the_whole_tree() -> None:
    t, d = _models("h100", "llama-3.1-8b", "llama-3.2-1b", None)
    pricer = BatchPricer(t, d, "draft:llama-3.2-1b")
    chain = Tree.chain(3, "draft:llama-3.2-1b")
    extra = pricer.parts([500], [Speculation(chain, 4)]).draft_s
    base = pricer.parts([500], [Speculation.of(chain)]).draft_s
    assert extra - base == pytest.approx(float(d.forward_time(1, 4, 500))
                                         + host_terms(t, d).level, rel=1e-9)


@pytest.mark.parametrize(("hw", "target", "draft", "runtime"), PAIRS)
def test_batched_steps_are_the_cost_model_at_mean_tree_and_context(
        hw: str, target: str, draft: str, runtime: str | None) -> None:
    """The tabulated, interpolated forwards against direct cost-model calls at the batch's
    (non-integer) mean tree size and context: the interpolation error stays below 1e-6."""
    t, d = _models(hw, target, draft, runtime)
    source = f"draft:{draft}"
    pricer = BatchPricer(t, d, source)
    host = host_terms(t, d)
    rng = np.random.default_rng(0)
    worst = 0.0
    for batch in (2, 5, 16):
        contexts = rng.integers(10, 3000, batch).tolist()
        trees = [Tree.chain(int(k), source) for k in rng.integers(0, 6, batch)]
        specs = [Speculation.of(tree) for tree in trees]
        parts = pricer.parts(contexts, specs)
        n, c = np.mean([tree.size for tree in trees]), np.mean(contexts)
        if host.pads_context:  # the loop's pass reads every row to the longest context
            c = max(contexts)
        verify = float(t.verify_time(n, c, batch=batch)) + host.verify
        worst = max(worst, abs(parts.verify_s / verify - 1))
        for level in range(1, 6):
            drafting = [(ctx, tree) for ctx, tree in zip(contexts, trees, strict=True)
                        if tree.depth >= level]
            if not drafting:
                continue
            direct = float(d.forward_time(len(drafting), level, np.mean([x for x, _ in drafting])))
            one = BatchPricer(t, d, source).parts(
                [x for x, _ in drafting], [Speculation(Tree.chain(level, source), level)] *
                len(drafting))
            above = one.draft_s - BatchPricer(t, d, source).parts(
                [x for x, _ in drafting],
                [Speculation(Tree.chain(level - 1, source), level - 1)] * len(drafting)).draft_s
            level_host = host.level * (len(drafting) if host.level_per_row else 1) + (
                len(drafting) * host.shared_row if len(drafting) > 1 else 0.0)
            worst = max(worst, abs((above - level_host) / direct - 1))
    assert worst < 1e-6


def test_a_prefill_is_a_forward_at_context_zero_with_the_drafts() -> None:
    t, d = _models("h100", "llama-3.1-8b", "llama-3.2-1b", None)
    colocated = BatchPricer(t, d, "draft:llama-3.2-1b")
    separate = BatchPricer(t, d, "draft:llama-3.2-1b", Link(100, 5))
    target, draft = float(t.forward_time(1, 700, 0)), float(d.forward_time(1, 700, 0))
    assert colocated.prefill_s([700]) == pytest.approx(target + draft, rel=1e-12)
    assert separate.prefill_s([700]) == pytest.approx(max(target, draft), rel=1e-12)
    assert colocated.prefill_s([600, 800]) == pytest.approx(
        float(t.forward_time(2, 700, 0)) + float(d.forward_time(2, 700, 0)), rel=1e-12)


def test_separate_drafting_overlaps_verification_and_pays_the_link() -> None:
    t, d = _models("h100", "llama-3.1-8b", "llama-3.2-1b", None)
    link = Link(100, 5)
    pricer = BatchPricer(t, d, "draft:llama-3.2-1b", link)
    spec = Speculation.of(Tree.chain(4, "draft:llama-3.2-1b"))
    parts = pricer.parts([1000] * 4, [spec] * 4)
    held = pricer.combine(parts, 0.0, 40)
    assert held == pytest.approx(max(parts.verify_s + parts.bookkeeping_s, parts.draft_s)
                                 + link.step_s(40), rel=1e-12)
    assert pricer.combine(parts, parts.draft_s, 40) == pytest.approx(held + parts.draft_s)
    assert link.step_s(40) == pytest.approx(10e-6 + 40 * 4 * 8 / 100e9)


def test_bookkeeping_is_paid_per_speculating_request() -> None:
    t, d = _models("cpu-2core", "tiny-code", "tiny-code-draft", "eager")
    pricer = BatchPricer(t, d, "ngram")
    one = host_terms(t, d).bookkeeping
    assert one > 0
    chain, plain = Speculation.of(Tree.chain(4, "ngram")), Speculation.none()
    step, row = t.hw.loop.serve_step, t.hw.loop.serve_row  # the batching server's own work
    assert pricer.parts([100], [chain]).bookkeeping_s == pytest.approx(one + step, rel=1e-12)
    assert pricer.parts([100] * 3 + [50], [chain] * 3 + [plain]).bookkeeping_s == (
        pytest.approx(3 * one + step + row, rel=1e-12))
    assert pricer.parts([100] * 2, [plain] * 2).bookkeeping_s == pytest.approx(
        step + 2 * row, rel=1e-12, abs=1e-15)


def test_an_engine_whose_step_runs_over_the_batch_pays_it_once_as_pricing_does() -> None:
    from specscope.hw_profiles.deployment import deployment
    from specscope.hw_profiles.pricing import deployed

    setup = deployment("h100", engine="vllm", batch=16)
    engine = setup.engine
    assert engine.batched_step and not engine.loop_costs(load_profile("h100")).step_per_row
    priced = deployed(setup, CostModel(load_profile("h100"), get_model("llama-3.1-8b")),
                      CostModel(load_profile("h100"), get_model("llama-68m")), 300)
    pricer = BatchPricer(priced.target, priced.drafter, "draft", engine=engine)
    chain = Speculation.of(Tree.chain(4, "draft"))
    for rows in (1, 16):
        assert pricer.parts([300] * rows, [chain] * rows).bookkeeping_s == pytest.approx(
            priced.bookkeeping_s, rel=1e-12)
    assert pricer.parts([300] * 2, [Speculation.none()] * 2).bookkeeping_s == 0.0
