"""Verification rules: greedy follows the argmax; every sampling rule reproduces the target's
distribution (chi-square on a small vocabulary), and the biased pairing is caught."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from specscope.executor.verify import (
    Verdict,
    deterministic,
    draw_children,
    greedy,
    sequoia,
    specinfer,
    verify,
)
from specscope.tree import Tree

V = 5
SAMPLES = 6000


def test_greedy_descends_to_the_argmax_child_and_takes_the_bonus_at_the_stop_node() -> None:
    tree = Tree.from_parents([-1, 0, 0, 1, 2, 2])
    tokens = [9, 3, 4, 1, 2, 0]
    logits = torch.full((6, 10), -1.0)
    for node, best in [(0, 4), (1, 1), (2, 0), (3, 7), (4, 5), (5, 6)]:
        logits[node, best] = 1.0
    assert greedy(tree, tokens, logits) == Verdict([0, 2, 5], 6)
    logits[0] = 0.0
    logits[0, 8] = 1.0  # no child holds the argmax: the root's argmax is the bonus
    assert greedy(tree, tokens, logits) == Verdict([0], 8)


def test_greedy_follows_repeated_sibling_tokens_to_the_deepest_accepted_path() -> None:
    tree = Tree(np.array([-1, 0, 0, 2]), np.array([-1, 0, 0, 0]),
                ("root", "spine", "branch", "branch"))
    tokens = [9, 4, 4, 7]
    logits = torch.zeros(4, 10)
    logits[:, 7] = 1.0
    logits[0] = 0.0
    logits[0, 4] = 1.0
    assert greedy(tree, tokens, logits) == Verdict([0, 2, 3], 7)


def test_deterministic_rule_always_accepts_a_certain_candidate_and_never_a_zero_one() -> None:
    tree = Tree.from_parents([-1, 0, 0])
    probs = torch.zeros(3, V, dtype=torch.float64)
    probs[:, 2] = 1.0
    g = torch.Generator().manual_seed(0)
    assert deterministic(tree, [0, 1, 2], probs, g) == Verdict([0, 2], 2)


def tables(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Target r(·|last token) and draft q(·|last token), rows (V,) per token, deliberately apart."""
    rng = np.random.default_rng(seed)
    r = rng.dirichlet(np.full(V, 1.0), size=V)
    q = rng.dirichlet(np.full(V, 0.5), size=V)
    return torch.tensor(r), torch.tensor(q)


def two_tokens(rule: str, r: torch.Tensor, q: torch.Tensor, g: torch.Generator) -> tuple[int, int]:
    """The first two tokens emitted after token 0, drafting trees of 3 children per node and 2
    per child, verified by `rule` ("biased": drawn without replacement, checked by SpecInfer)."""
    out: list[int] = []
    last = 0
    while len(out) < 2:
        parents, tokens, dists = [-1], [last], []
        for node in range(4):
            if node > 0 and parents[node] != 0:
                break
            dist = q[tokens[node]]
            width = 3 if node == 0 else 2
            if rule == "deterministic":
                kids = dist.topk(width).indices.tolist()
            else:
                kids = draw_children(dist, width, rule == "specinfer", g)
            parents += [node] * len(kids)
            tokens += kids
        tree = Tree(np.array(parents), np.r_[-1, _ranks(parents[1:])], ("root",) + ("d",) * (
            len(parents) - 1))
        dists = [q[t] for t in tokens]
        probs = r[torch.tensor(tokens)]
        if rule == "deterministic":
            verdict = deterministic(tree, tokens, probs, g)
        elif rule == "sequoia":
            verdict = sequoia(tree, tokens, probs, dists, g)
        else:
            verdict = specinfer(tree, tokens, probs, dists, g)
        step = [tokens[v] for v in verdict.path[1:]] + [verdict.bonus]
        out += step
        last = out[-1]
    return out[0], out[1]


def _ranks(parents: list[int]) -> list[int]:
    seen: dict[int, int] = {}
    ranks = []
    for p in parents:
        ranks.append(seen.get(p, 0))
        seen[p] = ranks[-1] + 1
    return ranks


def joint_pvalue(rule: str, seed: int) -> float:
    r, q = tables(seed)
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros((V, V))
    for _ in range(SAMPLES):
        a, b = two_tokens(rule, r, q, g)
        counts[a, b] += 1
    expected = (r[0][:, None] * r).numpy() * SAMPLES
    return float(chisquare(counts.ravel(), expected.ravel()).pvalue)


@pytest.mark.parametrize("rule", ["deterministic", "specinfer", "sequoia"])
def test_sampling_rules_preserve_the_target_distribution(rule: str) -> None:
    assert joint_pvalue(rule, seed=1) > 1e-3


def test_drawing_without_replacement_but_keeping_q_is_detected_as_biased() -> None:
    assert joint_pvalue("biased", seed=1) < 1e-6


def test_draw_children_without_replacement_gives_distinct_tokens_from_the_support() -> None:
    q = torch.tensor([0.5, 0.0, 0.3, 0.2], dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    for _ in range(50):
        kids = draw_children(q, 4, False, g)
        assert sorted(kids) == [0, 2, 3]
    assert len(draw_children(q, 6, True, g)) == 6


def test_same_seed_same_verdicts() -> None:
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2])
    tokens = [0, 1, 2, 3, 4, 0]
    logits = torch.randn(6, V, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def run(seed: int) -> list[Verdict]:
        g = torch.Generator().manual_seed(seed)
        return [verify("deterministic", tree, tokens, logits, 0.8, None, g) for _ in range(20)]

    assert run(5) == run(5)
    assert run(5) != run(6)
