"""Drafters: candidate tokens for the nodes of a draft tree (ALGORITHMS.md, "Drafters").

Every drafter answers one question, batched over the nodes of one tree level: *given the
committed context and the path down to this node, which tokens might come next, best first, and
how likely is each?* (`propose`, returning DySpec's `Proposal` per `DraftNode`). Static trees,
chains, DySpec, SpecDec++ and Goose all grow their trees through it, level by level, so any
drafter works with any tree method.

- `DraftModelDrafter`: a small causal LM's top-k (or children drawn from it, for SpecInfer and
  Sequoia verification). One batched tree pass per level over the nodes drafted so far; its own
  KV cache (or SSM state) follows the committed text by compaction of the accepted path.
- `NgramDrafter` (prompt lookup): match the last 3, then 2, then 1 tokens in the context.
- `SuffixDrafter` (SuffixDecoding): suffix tries over this request's text and earlier responses.
- `RecycleDrafter` (Token Recycling): a vocab × 8 table of the target's top-8 next tokens.
- `GooseDrafter`: the n-gram spine candidate first, then recycling candidates.

One module per kind: `base` (the interface, `propose_chain`), `draft_model`, `model_free`
(n-gram, suffix, recycling) and `goose`; `make_drafter` builds one by name.

Life cycle, driven by the executor and by trace collection: `start` (new request), then per step
`begin` (committed context; its last token is the root), `propose` (level by level), `update`
(target logits the step computed), `accept` (the accepted drafted tokens); `finish` (response
done).
"""

from __future__ import annotations

import torch

from specscope.errors import InputError
from specscope.executor.drafters.base import ROOT, Drafter, propose_chain
from specscope.executor.drafters.draft_model import DraftModelDrafter
from specscope.executor.drafters.goose import GooseDrafter
from specscope.executor.drafters.model_free import (
    RECYCLE,
    NgramDrafter,
    RecycleDrafter,
    SuffixDrafter,
    SuffixTrie,
)
from specscope.executor.names import DRAFTERS
from specscope.executor.targets import Model


def make_drafter(
    name: str,
    vocab_size: int,
    draft_model: Model | None = None,
    sample: str | None = None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> Drafter:
    """The drafter called `name` (one of `DRAFTERS`); "draft" needs `draft_model`."""
    if name == "draft":
        if draft_model is None:
            raise InputError("--drafter draft needs --draft-model")
        return DraftModelDrafter(draft_model, sample, temperature, generator)
    if sample is not None:
        raise InputError(f"sampled drafts need --drafter draft, not {name!r}")
    if name == "ngram":
        return NgramDrafter()
    if name == "suffix":
        return SuffixDrafter()
    if name == "recycle":
        return RecycleDrafter(vocab_size)
    if name == "goose":
        return GooseDrafter(NgramDrafter(), RecycleDrafter(vocab_size))
    raise InputError(f"--drafter: unknown drafter {name!r}; known: {', '.join(DRAFTERS)}")


__all__ = ["DRAFTERS", "RECYCLE", "ROOT", "DraftModelDrafter", "Drafter", "GooseDrafter",
           "NgramDrafter", "RecycleDrafter", "SuffixDrafter", "SuffixTrie", "make_drafter",
           "propose_chain"]
