"""RSD-S: Recursive Speculative Decoding's draft tree grown by Stochastic Beam Search.

Recursive Speculative Decoding (Jeon, Gagrani, Goel, Park, Lee, Lott 2024, "Recursive
Speculative Decoding: Accelerating LLM Inference via Sampling Without Replacement") drafts a
tree whose siblings are drawn from the draft's q without replacement and verifies it by
recursive rejection sampling: the children of an accepted node are tried in the order they were
drawn, x accepted with min(1, r(x)/q(x)), on rejection r ← norm(max(r − q, 0)) and x leaves q
(`verify.sequoia`, rule name `rsd`). It drafts one of two ways:

- RSD-C, constant branching: a static tree (`--algo kary`) whose children are drawn by
  Gumbel-top-k (`DraftModelDrafter(sample="without")`, chosen by the rule): no code here.
- RSD-S, here: Stochastic Beam Search (Kool, van Hoof, Welling 2019: Gumbel-top-k over
  sequences). Each beam sequence s carries a perturbed log-probability G_s (the root's is 0).
  A level expands every beam sequence over the whole vocabulary: continuation c gets
  G̃_c = log q(s) + log q(c|s) + Gumbel noise, conditioned on its siblings' maximum being G_s:
  G_c = −log(e^{−G_s} − e^{−Z_s} + e^{−G̃_c}), Z_s = max_c G̃_c. The level keeps the W
  continuations of largest G over all beams, a sample without replacement of W sequences from
  the draft's distribution over sequences of that length. A sequence none of whose
  continuations makes the cut ends there: the paper's early truncation of unlikely sequences,
  whose threshold is the level's W-th largest perturbed log-probability (not a fixed floor).

Why recursive rejection sampling stays exact on these trees, whose shape depends on the draws
(the paper's argument, spelled out for this code). At node u the rule needs, each time it
offers the j-th child, that the child's token is distributed as q_u without the j − 1 earlier
siblings, given everything that decided the child is offered at all. Within one parent the
conditioning G̃ → G is increasing, so u's children in descending G are in descending G̃: i.i.d.
Gumbel-perturbed log q_u, i.e. drawn one by one without replacement. Given the first j − 1
tokens and their perturbed values, the j-th token is drawn from the rest of q_u *independently
of its own perturbed value* (argmax and max of Gumbel-perturbed values are independent, also
when truncated below the previous value). Whether the j-th child is kept depends only on
perturbed values (its own, its elder siblings', the other beams'), so it says nothing about the
j-th token: the number of siblings is a stopping time and the rule is exact as for a fixed
count; the same holds one level down, given the accepted path. What breaks it is a cut on the
token itself, e.g. dropping continuations whose draft probability is below a fixed floor: the
offered tokens then over-represent likely ones (tests/test_rsd_traversal.py detects it). Hence
the siblings are stored in descending G, the order the rule tries them, and q is recorded at
every expanded node (`distributions` keeps it in the drafter's `draft_probs`). SpecInfer's
rule or Traversal Verification (both for draws with replacement) do not fit these trees.

Delayed expansion (a single path, then branching) is a width schedule: widths 1 for the first
levels (a width-1 level keeps one continuation, a sample from q), then W.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from specscope.draft import DraftedTree, DraftNode
from specscope.errors import InputError
from specscope.executor.verify import gumbel
from specscope.tree import ROOT_SOURCE, Tree


class DistributionDrafter(Protocol):
    """A drafter that gives its whole next-token distribution (`DraftModelDrafter`)."""

    source: str
    generator: torch.Generator | None

    def distributions(self, nodes: Sequence[DraftNode]) -> list[torch.Tensor]:
        """q at each node (float64, CPU), also kept in the drafter's `draft_probs`."""
        ...


def sbs_widths(budget: int, beam: int, delay: int = 0, max_depth: int | None = None) -> list[int]:
    """Sequences kept per level for a tree of at most `budget` nodes (root included): one for
    the first `delay` levels (delayed expansion), then `beam`, the last level what is left of
    the budget; at most `max_depth` levels."""
    if budget < 2 or beam < 1 or delay < 0:
        raise InputError(f"RSD-S needs --budget ≥ 2, a beam ≥ 1 and a delay ≥ 0, got budget "
                         f"{budget}, beam {beam}, delay {delay}")
    widths, left = [], budget - 1
    while left > 0 and (max_depth is None or len(widths) < max_depth):
        widths.append(min(1 if len(widths) < delay else beam, left))
        left -= widths[-1]
    return widths


def matching_beam(tree: Tree, delay: int = 0) -> int:
    """RSD-S's beam width to match `tree`: its nodes below a single path of `delay` levels over
    its levels below that path, rounded up, so the beam search's tree has the same size and at
    most the same depth. The paper sweeps (W, depth) by hand; matching a tree is specscope's
    choice."""
    return max(1, math.ceil((tree.size - 1 - delay) / max(tree.depth - delay, 1)))


def conditioned(perturbed: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """Gumbel-perturbed log-probabilities (one row per beam sequence) conditioned on each row's
    maximum being `bound[row]`: −log(e^{−bound} − e^{−Z} + e^{−G̃}), computed in log space."""
    top = perturbed.max(dim=1, keepdim=True).values
    below = -perturbed + torch.log(-torch.expm1(perturbed - top))  # log(e^{−G̃} − e^{−Z})
    return -torch.logaddexp(-bound[:, None], below)


def draft_sbs(drafter: DistributionDrafter, root_token: int, widths: Sequence[int]
              ) -> DraftedTree:
    """One step's RSD-S tree: Stochastic Beam Search keeping `widths[l]` sequences at depth
    l + 1, drawn with the drafter's generator; node ids are tree indices (breadth-first, each
    parent's children in descending perturbed log-probability)."""
    generator = getattr(drafter, "generator", None)
    if generator is None or not hasattr(drafter, "distributions"):
        raise InputError("--algo rsd-s draws from the draft model's distribution: it needs "
                         "--drafter draft and a sampled-draft rule (--rule rsd or sequoia)")
    parents, ranks, tokens, scores = [-1], [-1], [root_token], [1.0]
    beam = [DraftNode(0, -1, root_token, 0)]
    value = torch.zeros(1, dtype=torch.float64)  # G of each beam sequence
    logq = torch.zeros(1, dtype=torch.float64)  # log q of each beam sequence
    for width in widths:
        q = torch.stack(drafter.distributions(beam))
        logp = logq[:, None] + q.log()
        perturbed = conditioned(logp + gumbel(q.shape, generator), value)
        keep = min(width, int(torch.isfinite(perturbed).sum()))
        top = perturbed.flatten().topk(keep)  # descending
        rows = (top.indices // q.shape[1]).tolist()
        cols = (top.indices % q.shape[1]).tolist()
        order = sorted(range(keep), key=lambda i: (rows[i], i))  # by parent, then descending G
        level, siblings = [], Counter()
        for i in order:
            b, token = rows[i], cols[i]
            u = beam[b].id
            ranks.append(siblings[b])
            siblings[b] += 1
            level.append(DraftNode(len(parents), u, token, beam[b].depth + 1))
            parents.append(u)
            tokens.append(token)
            scores.append(scores[u] * float(q[b, token]))
        value = top.values[order]
        logq = logp[[rows[i] for i in order], [cols[i] for i in order]]
        beam = level
    tree = Tree(np.array(parents), np.array(ranks),
                (ROOT_SOURCE,) + (drafter.source,) * (len(parents) - 1))
    return DraftedTree(tree, np.array(tokens), np.array(scores), len(widths))
