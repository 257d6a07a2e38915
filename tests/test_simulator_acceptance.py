"""Acceptance in the simulator: the per-step replay walk is the trace replay, sampling follows
the acceptance model, sequence drafters stop at their proposal, drift scales p."""

from __future__ import annotations

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.simulator.acceptance import Acceptance
from specscope.simulator.policies.base import Speculation
from specscope.trace import AcceptanceModel, Trace, accepted_lengths, synth_trace
from specscope.trace.replay import dense_trace
from specscope.tree import Tree

DRAFT = "draft:llama-68m"


@pytest.fixture(scope="module")
def trace() -> Trace:
    return synth_trace(8, seed=5, sources=(DRAFT, "ngram", "recycle"), length=120)


TREES = [
    Tree.chain(5, DRAFT),
    Tree.chain(8, "ngram"),
    Tree.from_rank_paths([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1)], DRAFT),
    Tree.from_parents([-1, 0, 0, 0, 1, 2, 3, 5], [-1, 0, 0, 1, 0, 0, 0, 0],
                      ["root", DRAFT, "ngram", "recycle", DRAFT, "ngram", "recycle", "ngram"]),
]


@pytest.mark.parametrize("tree", TREES, ids=["chain", "ngram", "tree", "mixed"])
def test_the_walk_from_every_position_is_the_trace_replay(trace: Trace, tree: Tree) -> None:
    acceptance = Acceptance(AcceptanceModel.from_vector([0.5]), trace, seed=0)
    reference = accepted_lengths(trace, tree)
    for row in range(reference.shape[0]):
        length = int((reference[row] >= 0).sum())
        for pos in range(length):
            got = acceptance.accept(row, pos, length - pos, tree)
            assert got == reference[row, pos], (row, pos)
    assert acceptance.origin == "replay"


def test_requests_map_round_robin_over_a_permutation(trace: Trace) -> None:
    acceptance = Acceptance(AcceptanceModel.from_vector([0.5]), trace, seed=3)
    rows = [acceptance.trace_request(i) for i in range(16)]
    assert sorted(rows[:8]) == list(range(8)) and rows[8:] == rows[:8]
    prompt, length = acceptance.trace_lengths(rows[0])
    first = trace.df.filter((trace.df["request_id"] == rows[0]) & (trace.df["pos"] == 0))
    assert prompt == first["context_len"][0] and length == 120


def test_a_step_past_the_trace_is_sampled_when_the_request_goes_on(trace: Trace) -> None:
    acceptance = Acceptance(AcceptanceModel.from_vector([0.5]), trace, seed=0)
    chain = Tree.chain(5, DRAFT)
    acceptance.accept(0, 118, 2, chain)  # ends inside the trace: replayed
    assert (acceptance.replayed, acceptance.sampled) == (1, 0)
    acceptance.accept(0, 118, 50, chain)  # goes on past the trace's 120 positions
    acceptance.accept(0, 400, 50, chain)
    assert (acceptance.replayed, acceptance.sampled) == (1, 2)
    assert acceptance.origin == "mixed"


def test_sampling_follows_the_positional_acceptance() -> None:
    """Mean accepted depth + 1 over many sampled steps is G(tree) = Σ f(v)."""
    p = [[0.6, 0.2, 0.1], [0.5, 0.2, 0.05]]
    acceptance = Acceptance(AcceptanceModel.from_vector(p), None, seed=1)
    tree = TREES[2]
    draws = np.array([acceptance.accept(None, 0, 100, tree) for _ in range(40000)])
    assert draws.mean() + 1 == pytest.approx(tree.expected_tokens(p), abs=0.015)
    assert acceptance.origin == "sampled"


def test_drift_multiplies_p_and_renormalises_above_one() -> None:
    acceptance = Acceptance(AcceptanceModel.from_vector([0.4, 0.2]), None, seed=2,
                            drift=(1.0, 0.5, 2.0))
    assert [acceptance.multiplier(i) for i in (0, 999, 1000, 2500, 10**6)] == [1, 1, .5, 2, 2]
    chain = Tree.chain(1, DRAFT)
    for m, expected in ((0.5, 0.2), (2.0, 0.8 / 1.2)):
        draws = [acceptance.accept(None, 0, 10, chain, m) for _ in range(20000)]
        assert np.mean(draws) == pytest.approx(expected, abs=0.01)


def test_drifted_requests_are_sampled_even_with_a_trace(trace: Trace) -> None:
    acceptance = Acceptance(AcceptanceModel.from_vector([0.5]), trace, seed=0, drift=(0.5,))
    acceptance.accept(0, 0, 50, Tree.chain(3, DRAFT), acceptance.multiplier(0))
    assert (acceptance.replayed, acceptance.sampled) == (0, 1)


def test_a_sequence_drafter_proposes_no_deeper_than_its_proposal(trace: Trace) -> None:
    acceptance = Acceptance(AcceptanceModel.from_vector([0.5]), trace, seed=0)
    proposal = dense_trace(trace).proposal["ngram"]
    spec = Speculation.of(Tree.chain(8, "ngram"))
    for row, pos in ((0, 0), (1, 7), (3, 50), (5, 100)):
        length = int(proposal[row, pos])
        got = acceptance.drafted(row, pos, 10, spec)
        assert got.tree.depth == min(8, length)
        assert got.draft_levels == min(8, length + 1)
    draft = Speculation.of(Tree.chain(8, DRAFT))
    assert acceptance.drafted(0, 0, 10, draft) is draft


def test_a_tree_of_a_source_the_trace_lacks_is_an_input_error(trace: Trace) -> None:
    acceptance = Acceptance(AcceptanceModel.from_vector([0.5]), trace, seed=0)
    with pytest.raises(InputError, match="suffix"):
        acceptance.check(Tree.chain(2, "suffix"))
