"""The drafter interface every drafter implements, a drafter of parts, the check of how a
drafter samples its children, and a chain walk over any drafter."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specscope.draft import DraftNode, Proposal
from specscope.errors import InputError
from specscope.executor.targets import Model
from specscope.tree import DEFAULT_SOURCE

ROOT = DraftNode(0, -1, -1, 0)
"""Node id 0 is the root of every step's tree (its token is the last committed one)."""

class Drafter:
    """Base of every drafter: step bookkeeping (the nodes seen this step) and no-op hooks."""

    source = DEFAULT_SOURCE

    def __init__(self) -> None:
        self.context: list[int] = []
        self.nodes: dict[int, DraftNode] = {}
        self.draft_probs: dict[int, torch.Tensor] = {}
        """The draft distribution q at each expanded node, for sampled drafts only."""

    @property
    def models(self) -> list[Model]:
        """The models this drafter runs (to compile or capture before decoding)."""
        return []

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        """A new request begins with `prompt`; `capacity` bounds the tokens it will hold."""

    def begin(self, context: Sequence[int]) -> None:
        """A new step over the committed `context`; its last token is the root (node id 0)."""
        self.context = list(context)
        self.nodes = {0: ROOT._replace(token=self.context[-1])}

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        """Up to k candidate tokens (best first) and their probabilities for each node; all
        nodes share one depth and their parents were passed before (or are the root)."""
        raise NotImplementedError

    def update(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        """The target computed `logits` (m, vocab) after each of `tokens` (m,)."""

    def learn(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        """The target's `logits` (m, vocab) after each of `tokens` (m,), committed text only,
        in order: the prompt's at prefill, then each step's root and accepted path (trace
        collection: one position at a time). State learned here is what greedy replay
        reproduces; `update` also sees the rejected nodes of a tree."""

    def accept(self, tokens: Sequence[int]) -> None:
        """The target accepted these drafted tokens (below the root) of this step's tree."""

    def finish(self, output: Sequence[int]) -> None:
        """The request ended with `output` (generated tokens)."""

    def path(self, node: int) -> list[int]:
        """Tokens from below the root down to `node` (empty for the root)."""
        out = []
        while node != 0:
            out.append(self.nodes[node].token)
            node = self.nodes[node].parent
        return out[::-1]

    def register(self, nodes: Sequence[DraftNode]) -> None:
        """Remember the nodes of this level (their parents are known already)."""
        for v in nodes:
            if v.id != 0:
                self.nodes[v.id] = v


class Composite(Drafter):
    """A drafter made of `parts` (Goose's spine and branches, RASD's draft and retrieval): what
    the target computed, accepted and finished reaches every part."""

    parts: tuple[Drafter, ...] = ()

    @property
    def models(self) -> list[Model]:
        return [m for part in self.parts for m in part.models]

    def update(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        for part in self.parts:
            part.update(tokens, logits)

    def learn(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        for part in self.parts:
            part.learn(tokens, logits)

    def accept(self, tokens: Sequence[int]) -> None:
        for part in self.parts:
            part.accept(tokens)

    def finish(self, output: Sequence[int]) -> None:
        for part in self.parts:
            part.finish(output)


SAMPLING = (None, "with", "without")
"""How a drafter's children are chosen: its top-k (None), or drawn from its distribution with
or without replacement."""


def check_sampling(sample: str | None, generator: torch.Generator | None, what: str) -> None:
    """An `InputError` unless `sample` is one of `SAMPLING` and drawn children have a
    generator (`what` names the drafter)."""
    if sample not in SAMPLING:
        raise InputError(f"{what} sampling must be None, 'with' or 'without', got {sample!r}")
    if sample is not None and generator is None:
        raise InputError(f"{what}: children drawn from its distribution need a torch.Generator")


def propose_chain(drafter: Drafter, root_token: int, max_len: int) -> tuple[list[int], list[float]]:
    """Follow the drafter's top candidate from the root, at most `max_len` tokens: its
    proposal (for n-gram and suffix drafters, the copied continuation). Call after `begin`."""
    tokens, probs = [], []
    node = DraftNode(0, -1, root_token, 0)
    while len(tokens) < max_len:
        ((cand, p),) = drafter.propose([node], 1)
        if not cand:
            break
        tokens.append(int(cand[0]))
        probs.append(float(p[0]))
        node = DraftNode(node.id + 1, node.id, tokens[-1], node.depth + 1)
    return tokens, probs
