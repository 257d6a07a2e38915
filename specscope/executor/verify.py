"""Verification rules: which drafted nodes the target accepts, and the token that follows them.

Every rule but `traversal` walks the tree from the root (docs/methods.md#verification-rules). At an
accepted node it tries the node's children in index order; the first child accepted becomes the
next node; when no child is accepted the walk stops and the target supplies one more token there
(the bonus). The output is the accepted path and the bonus token, so a step yields len(path)
tokens counting the bonus and not the root (which was already committed).

- `greedy`: accept the child whose token is the target's argmax (the deepest such path where
  siblings repeat a token). Equal to autoregressive greedy decoding token for token.
- `deterministic`: sampling with deterministic candidates (top-k, n-gram, suffix, recycling):
  accept child x with probability r(x); on rejection set r(x) = 0 and renormalise; if all are
  rejected sample from r. The output is distributed as the target's r.
- `specinfer`: children drawn from the draft's q *with* replacement: accept with min(1, r/q); on
  rejection r ← norm(max(r − q, 0)), q unchanged.
- `sequoia`: children drawn from q *without* replacement (Gumbel-top-k): as SpecInfer, and also
  remove the rejected token from q and renormalise.

- `rsd`: the same rule as `sequoia` under the name of Recursive Speculative Decoding (Jeon et al.
  2024), whose verification it is: RSD-C is a static tree (`--algo kary`, constant branching)
  with children drawn by Gumbel-top-k, RSD-S a tree drawn by Stochastic Beam Search (`rsd.py`).
- `traversal`: Traversal Verification (Weng et al. 2025) for children drawn with replacement:
  leaf to root, accepting whole sequences (see `traversal`).

Pairing SpecInfer's rule with children drawn without replacement is biased (q no longer describes
how the next child was drawn); tests/test_verify.py shows a chi-square test detects it.

Probabilities are float64 rows of the target (and draft) at each node, already tempered; every
random draw takes an explicit `torch.Generator`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specscope.errors import InputError
from specscope.names import RULES
from specscope.tree import Tree

DRAFT_SAMPLING = {"specinfer": "with", "sequoia": "without", "rsd": "without",
                  "traversal": "with"}
"""How each sampled-draft rule needs the children drawn from the draft's q: with or without
replacement (`draw_children`)."""
SAMPLED_DRAFT_RULES = tuple(DRAFT_SAMPLING)
"""Rules whose children must be drawn from the draft's distribution (see `draw_children`)."""


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one tree: the accepted nodes (root first) and the bonus token."""

    path: list[int]
    bonus: int

    @property
    def accepted(self) -> int:
        """Accepted drafted tokens (the root is not a draft)."""
        return len(self.path) - 1


def probabilities(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax of `logits` at `temperature` in float64 (temperature 0 reads as 1: the scores a
    greedy run reports)."""
    scale = temperature if temperature > 0 else 1.0
    return torch.softmax(logits.double() / scale, dim=-1)


def next_token(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> int:
    """The token plain decoding emits after `logits` (vocab,): the argmax at temperature 0,
    else a sample at the temperature."""
    if temperature > 0:
        return int(torch.multinomial(probabilities(logits, temperature), 1, generator=generator))
    return int(logits.argmax())


def greedy(tree: Tree, tokens: Sequence[int], logits: torch.Tensor) -> Verdict:
    """Greedy verification of `tokens` (n,) on `tree` from the target's `logits` (n, vocab).

    Where siblings repeat a token (two sources proposed it), each is followed and the deepest
    accepted path wins (the first in index order among equals): the nodes share their context,
    so this is the path of the merged tree, and the outcome matches trace replay.
    """
    best = logits.argmax(dim=-1).tolist()

    def deepest(node: int) -> list[int]:
        below = [deepest(c) for c in tree.children[node] if tokens[c] == best[node]]
        return [node, *max(below, key=len, default=[])]

    path = deepest(0)
    return Verdict(path, best[path[-1]])


def deterministic(
    tree: Tree, tokens: Sequence[int], probs: torch.Tensor, generator: torch.Generator
) -> Verdict:
    """Recursive rejection sampling of deterministic candidates; `probs` (n, vocab) is the
    target's tempered distribution at every node."""
    return _walk(tree, tokens, probs, None, generator, drop_rejected=False)


def specinfer(
    tree: Tree,
    tokens: Sequence[int],
    probs: torch.Tensor,
    draft_probs: Sequence[torch.Tensor | None],
    generator: torch.Generator,
) -> Verdict:
    """SpecInfer's rule for children drawn from the draft with replacement; `draft_probs[i]` is
    the draft's distribution q at node i (None where node i has no children)."""
    return _walk(tree, tokens, probs, draft_probs, generator, drop_rejected=False)


def sequoia(
    tree: Tree,
    tokens: Sequence[int],
    probs: torch.Tensor,
    draft_probs: Sequence[torch.Tensor | None],
    generator: torch.Generator,
) -> Verdict:
    """Sequoia's rule for children drawn from the draft without replacement: SpecInfer's residual
    update, and the rejected token leaves q as well."""
    return _walk(tree, tokens, probs, draft_probs, generator, drop_rejected=True)


def traversal(
    tree: Tree,
    tokens: Sequence[int],
    probs: torch.Tensor,
    draft_probs: Sequence[torch.Tensor | None],
    generator: torch.Generator,
) -> Verdict:
    """Traversal Verification (Weng et al. 2025, "Traversal Verification for Speculative Tree
    Decoding") of children drawn from the draft's q with replacement.

    Node v under parent u carries a sequence-level acceptance α(v) = min(1, α(u)·r_u(x_v) /
    q_u(x_v)), α(root) = 1, where r_u is u's target distribution (a residual once children of u
    were rejected). The traversal starts at the deepest first leaf (first children from the
    root down) and accepts the whole path from the root to the current leaf v with probability
    α(v), the bonus drawn from r_v. A rejected v leaves the tree and updates its parent u, with
    m = max(α(u)·r_u − q_u, 0): r_u ← m / Σm, α(u) ← Σm / (Σm + 1 − α(u)), and the α of u's
    remaining subtrees are recomputed from them; the traversal goes on at the first leaf under
    u (u itself once its children are gone). The root keeps α = 1, so it ends there at the
    latest. On a chain this is Block Verification (Sun et al. 2024), on one level SpecInfer's
    rule. The paper's algorithm as written, no approximation; tests/test_rsd_traversal.py checks
    the first two emitted tokens against the target.
    """
    kids = [list(c) for c in tree.children]
    target = list(probs)
    alpha = [1.0] * tree.size

    def refresh(top: int) -> None:
        stack = [top]
        while stack:
            u = stack.pop()
            for c in kids[u]:
                x = tokens[c]
                alpha[c] = min(1.0, alpha[u] * float(target[u][x]) / float(draft_probs[u][x]))
                stack.append(c)

    def first_leaf(v: int) -> int:
        while kids[v]:
            v = kids[v][0]
        return v

    refresh(0)
    v = first_leaf(0)
    while v != 0 and _uniform(generator) >= alpha[v]:
        u = int(tree.parents[v])
        kids[u].remove(v)
        m = (alpha[u] * target[u] - draft_probs[u]).clamp_min(0.0)
        mass = float(m.sum())
        # mass 0 with α(u) = 1 means r_u = q_u, whose children are never rejected (rounding)
        alpha[u] = mass / (mass + 1.0 - alpha[u]) if mass + 1.0 - alpha[u] > 0 else 1.0
        target[u] = _normalise(m, probs[u])
        refresh(u)
        v = first_leaf(u)
    return Verdict(tree.path(v), int(torch.multinomial(target[v], 1, generator=generator)))


def gumbel(shape: torch.Size | tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Standard Gumbel noise (float64): added to log-probabilities, the argmax is a sample and
    the top-k a sample without replacement (the Gumbel-top-k trick)."""
    u = torch.rand(shape, generator=generator, dtype=torch.float64).clamp_min(1e-300)
    return -(-u.log()).log()


def draw_children(
    q: torch.Tensor, k: int, replacement: bool, generator: torch.Generator
) -> list[int]:
    """k tokens drawn from the distribution q: i.i.d. (with replacement, for `specinfer`) or by
    Gumbel-top-k (without replacement, for `sequoia`; at most the size of q's support)."""
    if replacement:
        return torch.multinomial(q, k, replacement=True, generator=generator).tolist()
    keys = q.log() + gumbel(q.shape, generator)
    k = min(k, int(torch.count_nonzero(q)))
    return keys.topk(k).indices.tolist()


def verify(
    rule: str,
    tree: Tree,
    tokens: Sequence[int],
    logits: torch.Tensor,
    temperature: float,
    draft_probs: Sequence[torch.Tensor | None] | None,
    generator: torch.Generator,
) -> Verdict:
    """Apply the named rule (one of `RULES`) to the target's `logits` (n, vocab)."""
    if rule == "greedy":
        return greedy(tree, tokens, logits)
    probs = probabilities(logits, temperature)
    if rule == "deterministic":
        return deterministic(tree, tokens, probs, generator)
    if rule not in SAMPLED_DRAFT_RULES:
        raise InputError(f"unknown verification rule {rule!r}; known: {', '.join(RULES)}")
    if draft_probs is None:
        raise InputError(f"rule {rule!r} needs the draft's distributions (sampled drafts)")
    check = {"specinfer": specinfer, "traversal": traversal}.get(rule, sequoia)
    return check(tree, tokens, probs, draft_probs, generator)


def _walk(
    tree: Tree,
    tokens: Sequence[int],
    probs: torch.Tensor,
    draft_probs: Sequence[torch.Tensor | None] | None,
    generator: torch.Generator,
    drop_rejected: bool,
) -> Verdict:
    """The shared walk. Without draft distributions each child is a certain candidate (q is a
    point mass on its token), which turns SpecInfer's update into "r(x) = 0, renormalise"."""
    node, path = 0, [0]
    while True:
        r = probs[node]
        q = None if draft_probs is None else draft_probs[node]
        for child in tree.children[node]:
            x = tokens[child]
            qx = 1.0 if q is None else float(q[x])
            if _uniform(generator) * qx < float(r[x]):
                node = child
                path.append(node)
                break
            if q is None:
                r = r.clone()
                r[x] = 0.0
            else:
                r = (r - q).clamp_min(0.0)
                if drop_rejected:
                    q = q.clone()
                    q[x] = 0.0
                    q = q / q.sum()
            r = _normalise(r, probs[node])
        else:
            return Verdict(path, int(torch.multinomial(r, 1, generator=generator)))


def _normalise(r: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    total = float(r.sum())
    # r ≤ q everywhere means r = q, whose candidates are never rejected; only rounding gets here
    return r / total if total > 0 else fallback


def _uniform(generator: torch.Generator) -> float:
    return float(torch.rand((), generator=generator, dtype=torch.float64))
