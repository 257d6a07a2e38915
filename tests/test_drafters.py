"""Drafters: each proposes what its definition says, checked against a direct computation."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from tiny_pair import tiny_spec

from specscope.draft import DraftNode
from specscope.executor.drafters import (
    DraftModelDrafter,
    GooseDrafter,
    NgramDrafter,
    RecycleDrafter,
    SuffixDrafter,
    SuffixTrie,
    propose_chain,
)
from specscope.executor.targets import wrap
from specscope.models.torch import Transformer

torch.set_num_threads(1)

V = 50
SPEC = tiny_spec("tiny-draft", V)


def root(context: list[int]) -> DraftNode:
    return DraftNode(0, -1, context[-1], 0)


# ---- n-gram -----------------------------------------------------------------------------------


def test_ngram_uses_the_longest_match_and_ranks_by_recency_with_vote_shares() -> None:
    d = NgramDrafter()
    # "1 2 3" occurs twice before the end, followed by 4 then 5; "2 3" also once more → 6
    context = [1, 2, 3, 4, 9, 2, 3, 6, 1, 2, 3, 5, 0, 1, 2, 3]
    d.start(context, 64)
    d.begin(context)
    ((tokens, scores),) = d.propose([root(context)], 8)
    assert tokens == [5, 4]  # only 3-gram occurrences vote, the most recent first
    assert scores == [0.5, 0.5]
    other = [*context[:-1], 7]  # no earlier "2 7" or "7": nothing to propose
    d.start(other, 64)
    d.begin(other)
    assert d.propose([root(other)], 8) == [([], [])]


def test_ngram_proposal_copies_the_continuation_at_most_ten_tokens() -> None:
    d = NgramDrafter()
    body = list(range(10, 30))
    context = [1, 2, 3, *body, 1, 2, 3]
    d.start(context, 64)
    d.begin(context)
    assert propose_chain(d, context[-1], 24)[0] == body[:10]


def test_ngram_sees_the_path_below_the_root() -> None:
    d = NgramDrafter()
    context = [5, 6, 7, 8, 0, 0, 5, 6]
    d.start(context, 64)
    d.begin(context)
    child = DraftNode(1, 0, 7, 1)  # path 7: context ends 5 6 7, earlier followed by 8
    d.propose([root(context)], 1)
    assert d.propose([child], 4)[0][0] == [8]


# ---- suffix -----------------------------------------------------------------------------------


def test_suffix_trie_counts_every_substring_up_to_its_depth() -> None:
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 4, 30).tolist() for _ in range(3)]
    trie = SuffixTrie(5)
    for s in seqs:
        for t in s:
            trie.append(t)
        trie.close()
    expected = Counter(tuple(s[i:j]) for s in seqs for i in range(len(s))
                       for j in range(i + 1, min(i + 5, len(s)) + 1))
    for sub, count in expected.items():
        node = trie.root
        for t in sub:
            node = node.children[t]
        assert node.count == count


def test_suffix_trie_match_is_the_longest_suffix_seen_with_a_continuation() -> None:
    rng = np.random.default_rng(1)
    seq = rng.integers(0, 3, 60).tolist()
    trie = SuffixTrie(8)
    for t in seq:
        trie.append(t)
    for end in range(2, 60, 3):
        text = seq[:end]
        continued = [m for m in range(1, min(7, end) + 1)  # depth 8 holds no continuation
                     if any(seq[i : i + m] == text[end - m :] and i + m < len(seq)
                            for i in range(len(seq) - m))]
        node = trie.match(text)
        assert (node.depth if node else 0) == max(continued, default=0)


def test_suffix_proposes_frequent_continuations_above_the_floor_within_the_length_cap() -> None:
    d = SuffixDrafter(min_prob=0.3, factor=2.0, offset=0.0)
    context = [7, 8, 1, 2, 7, 8, 1, 2, 7, 8, 3, 4, 7, 8]
    d.start(context, 64)
    d.begin(context)
    # "7 8" (length 2, the longest suffix seen with a continuation) occurs 4 times, followed by
    # 1, 1, 3 and nothing: 1 has 2/4 = 0.5, 3 has 0.25 < 0.3
    assert d.propose([root(context)], 8) == [([1], [0.5])]
    # then "7 8 1" → 2 → 7 → 8 each with probability 1, cut at 2 × match length = 4 tokens
    assert propose_chain(d, context[-1], 24) == ([1, 2, 7, 8], [0.5, 1.0, 1.0, 1.0])


def test_suffix_remembers_earlier_responses_across_requests() -> None:
    d = SuffixDrafter()
    d.start([1, 2], 64)
    d.finish([40, 41, 42, 43, 44])
    context = [9, 9, 40, 41]
    d.start(context, 64)
    d.begin(context)
    assert propose_chain(d, context[-1], 24)[0] == [42, 43]  # capped at match length 2


# ---- recycling --------------------------------------------------------------------------------


def test_recycle_table_holds_the_last_top8_and_survives_requests() -> None:
    d = RecycleDrafter(V)
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(0))
    d.update(torch.tensor([4, 9, 4]), logits)  # the later row for token 4 wins
    d.start([1, 2], 64)
    d.begin([1, 4])
    ((tokens, probs),) = d.propose([root([1, 4])], 8)
    top = torch.softmax(logits[2], -1).topk(8)
    assert tokens == top.indices.tolist()
    np.testing.assert_allclose(probs, top.values.numpy(), rtol=1e-6)
    assert d.propose([DraftNode(1, 0, 5, 1)], 8) == [([], [])]  # never seen: nothing


def test_goose_puts_the_spine_candidate_first_then_recycling() -> None:
    d = GooseDrafter(NgramDrafter(), RecycleDrafter(V))
    context = [1, 2, 3, 4, 1, 2, 3]
    d.start(context, 64)
    logits = torch.full((1, V), -10.0)
    logits[0, [5, 4, 6]] = torch.tensor([3.0, 2.0, 1.0])
    d.update(torch.tensor([3]), logits)
    d.begin(context)
    ((tokens, _),) = d.propose([root(context)], 3)
    assert tokens == [4, 5, 6]


# ---- draft model ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def draft_module() -> Transformer:
    return Transformer.random(SPEC, seed=0, dtype=torch.float64, std=0.3)


def fresh_topk(module: Transformer, tokens: list[int], k: int) -> list[int]:
    """The draft's top-k after `tokens`, from a plain forward over them."""
    model = wrap(module)
    logits = model.prefill(torch.tensor([*tokens, 0]), len(tokens) + 1)[-1]
    return logits.topk(k).indices.tolist()


def test_draft_model_proposals_equal_plain_decoding_of_each_path(draft_module) -> None:
    """Levels of a tree, then steps with accepted paths of several lengths: every proposal
    equals the draft's top-k on the node's full context (its cache follows compaction)."""
    rng = np.random.default_rng(1)
    context = rng.integers(0, V, 7).tolist()
    drafter = DraftModelDrafter(wrap(draft_module, "d"))
    drafter.start(context, 128)
    for accepted in (2, 0, 3, 1):
        drafter.begin(context)
        ((level1, _),) = drafter.propose([root(context)], 3)
        assert level1 == fresh_topk(draft_module, context, 3)
        kids = [DraftNode(i + 1, 0, t, 1) for i, t in enumerate(level1)]
        level2 = drafter.propose(kids, 2)
        for kid, (tokens, _) in zip(kids, level2, strict=True):
            assert tokens == fresh_topk(draft_module, [*context, kid.token], 2)
        grandkid = DraftNode(9, 1, level2[0][0][0], 2)
        ((level3, _),) = drafter.propose([grandkid], 2)
        assert level3 == fresh_topk(draft_module, [*context, level1[0], grandkid.token], 2)
        path = [level1[0], grandkid.token, level3[0]][:accepted]
        drafter.accept(path)
        context = context + path + [int(rng.integers(0, V))]


def test_sampled_draft_children_come_from_q_and_q_is_kept(draft_module) -> None:
    g = torch.Generator().manual_seed(0)
    drafter = DraftModelDrafter(wrap(draft_module, "d"), "without", 0.7, g)
    context = [3, 1, 4, 1, 5]
    drafter.start(context, 64)
    drafter.begin(context)
    ((tokens, probs),) = drafter.propose([root(context)], 4)
    q = drafter.draft_probs[0]
    assert len(set(tokens)) == 4
    np.testing.assert_allclose(probs, q[tokens].numpy())
    assert float(q.sum()) == pytest.approx(1.0)
