"""The Sequoia-family engine (issue 43, item 2): Sequoia's stack runs the target eager on its
own Llama code, the draft and its sampling as CUDA graphs, and the tree's per-node work on the
device. Its limit: research code with a graph-captured draft and no per-node host work, i.e. the
research pricing less exactly those terms."""

from __future__ import annotations

import pytest

from specscope.hw_profiles import load_profile
from specscope.hw_profiles.deployment import deployment, engine_sources
from specscope.hw_profiles.engine import ENGINE_NAMES
from specscope.hw_profiles.pricing import Pricing, deployed, draft_levels
from specscope.models import get_model
from specscope.tree import Tree

TREE = Tree.from_rank_paths([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0)], "draft")


def _pricing(engine: str, **extra: str) -> Pricing:
    dep = deployment("a100", target="llama-2-7b", drafter="llama-68m", engine=engine, **extra)
    profile = load_profile("a100")
    return deployed(dep, dep.target_cost(profile, get_model("llama-2-7b")),
                    dep.draft_cost(profile, get_model("llama-68m")), 512)


def test_the_engine_exists_with_its_sources() -> None:
    assert "sequoia" in ENGINE_NAMES
    sources = engine_sources("sequoia")
    for key in ("target_runtime", "draft_runtime", "node_us", "tree_attention"):
        assert "Sequoia" in sources[key]


def test_a_graph_draft_without_node_work_is_the_research_pricing_less_those_terms() -> None:
    sequoia = _pricing("sequoia")
    research = _pricing("research-hf", draft_runtime="graph")
    assert sequoia.loop.node == sequoia.loop.dyspec_node == sequoia.loop.tree_node == 0.0
    assert research.loop.node > 0 and research.loop.tree_node > 0
    further = sum(expanded - 1 for _, _, expanded in draft_levels(TREE, False))
    assert further > 0
    assert sequoia.tree_step_s(TREE) == pytest.approx(
        research.tree_step_s(TREE) - further * research.loop.node
        - TREE.size * research.loop.tree_node, rel=1e-12)
    assert sequoia.autoregressive_s == pytest.approx(research.autoregressive_s, rel=1e-12)


def test_it_prices_faster_than_the_eager_research_stack() -> None:
    sequoia, research = _pricing("sequoia"), _pricing("research-hf")
    assert sequoia.draft_s(TREE) < research.draft_s(TREE)
    assert sequoia.verify_s(TREE.size, TREE.depth) == pytest.approx(
        research.verify_s(TREE.size, TREE.depth) - TREE.size * research.loop.tree_node,
        rel=1e-12)
