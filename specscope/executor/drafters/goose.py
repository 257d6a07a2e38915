"""Goose's drafter: an n-gram (or other) spine candidate first, then recycling candidates."""

from __future__ import annotations

from collections.abc import Sequence

from specscope.draft import DraftNode, Proposal
from specscope.executor.drafters.base import Composite, Drafter
from specscope.executor.drafters.model_free import NgramDrafter, RecycleDrafter


class GooseDrafter(Composite):
    """Goose's two sources: a `spine` (n-gram: source "goose"; another drafter X: "goose:X")
    and recycling `branches`.

    As a single candidate list (static trees, DySpec, SpecDec++): the spine's top candidate,
    then the recycling candidates. The Goose method uses the two sources separately.
    """

    def __init__(self, spine: Drafter, branches: RecycleDrafter) -> None:
        super().__init__()
        self.spine, self.branches = spine, branches
        self.parts = (spine, branches)
        self.source = "goose" if isinstance(spine, NgramDrafter) else f"goose:{spine.source}"

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        for part in self.parts:
            part.start(prompt, capacity)

    def begin(self, context: Sequence[int]) -> None:
        super().begin(context)
        for part in self.parts:
            part.begin(context)

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        out = []
        spine = self.spine.propose(nodes, 1)
        branches = self.branches.propose(nodes, k)
        for (s_tok, s_prob), (b_tok, b_prob) in zip(spine, branches, strict=True):
            pairs = dict(zip(s_tok, s_prob, strict=True))
            for t, p in zip(b_tok, b_prob, strict=True):
                pairs.setdefault(t, p)
            out.append((list(pairs)[:k], list(pairs.values())[:k]))
        return out
