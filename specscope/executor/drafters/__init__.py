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
- `RasdDrafter` (RASD): a draft model's top-k fused with suffix-retrieved continuations that
  pass the draft's top-k pruning.
- `LayerSkipDrafter` / `DynamicExitDrafter` (`layerskip`: a fixed skip set, SWIFT, DEL): the
  target with some layers skipped (or exited early) drafts for itself.
- `StandDrafter` (STAND): an n-gram table of the target's own next-token distributions; top-k,
  or children drawn by Gumbel-top-k for Sequoia verification.

One module per kind: `base` (the interface, `Composite`, `propose_chain`), `draft_model`,
`model_free` (n-gram, suffix, recycling), `goose`, `rasd`, `layerskip` and `stand`;
`make_drafter` builds one by name.

Life cycle, driven by the executor and by trace collection: `start` (new request), then per step
`begin` (committed context; its last token is the root), `propose` (level by level), `update`
(target logits the step computed), `learn` (those of the committed positions), `accept` (the
accepted drafted tokens); `finish` (response done).
"""

from __future__ import annotations

import torch

from specscope.errors import InputError
from specscope.executor.drafters.base import ROOT, Drafter, propose_chain
from specscope.executor.drafters.draft_model import DraftModelDrafter
from specscope.executor.drafters.goose import GooseDrafter
from specscope.executor.drafters.layerskip import (
    LAYERSKIP,
    LayerSkipOptions,
    layer_skip_drafter,
    parse_layer_skip,
)
from specscope.executor.drafters.model_free import (
    RECYCLE,
    NgramDrafter,
    RecycleDrafter,
    SuffixDrafter,
    SuffixTrie,
)
from specscope.executor.drafters.rasd import RASD, RasdDrafter
from specscope.executor.drafters.stand import STAND, StandDrafter
from specscope.executor.targets import Model
from specscope.names import DRAFTERS


def make_drafter(
    name: str,
    vocab_size: int,
    draft_model: Model | None = None,
    sample: str | None = None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    target: Model | None = None,
    layer_skip: LayerSkipOptions | None = None,
) -> Drafter:
    """The drafter called `name` (one of `DRAFTERS`); "draft" and "rasd" need `draft_model`;
    "layerskip" needs the `target` (and takes `layer_skip`, default SWIFT); `sample` (children
    drawn from the drafter's distribution) needs "draft", "stand" or "layerskip"."""
    if name == "draft":
        if draft_model is None:
            raise InputError("--drafter draft needs --draft-model")
        return DraftModelDrafter(draft_model, sample, temperature, generator)
    if name == LAYERSKIP:
        if target is None:
            raise InputError("--drafter layerskip drafts with the target's own layers and "
                             "needs the target model")
        return layer_skip_drafter(target, layer_skip or LayerSkipOptions(), sample, temperature,
                                  generator)
    if name == STAND:
        return StandDrafter(vocab_size, sample=sample, temperature=temperature,
                            generator=generator)
    if sample is not None:
        raise InputError(f"sampled drafts need --drafter layerskip, draft or stand, "
                         f"not {name!r}")
    if name == "ngram":
        return NgramDrafter()
    if name == "suffix":
        return SuffixDrafter()
    if name == "recycle":
        return RecycleDrafter(vocab_size)
    if name == "goose":
        return GooseDrafter(NgramDrafter(), RecycleDrafter(vocab_size))
    if name == RASD:
        if draft_model is None:
            raise InputError("--drafter rasd needs --draft-model")
        return RasdDrafter(DraftModelDrafter(draft_model, None, temperature), SuffixDrafter())
    raise InputError(f"--drafter: unknown drafter {name!r}; known: {', '.join(DRAFTERS)}")


__all__ = ["DRAFTERS", "LAYERSKIP", "RASD", "RECYCLE", "ROOT", "STAND", "DraftModelDrafter",
           "Drafter", "GooseDrafter", "LayerSkipOptions", "NgramDrafter", "RasdDrafter",
           "RecycleDrafter", "StandDrafter", "SuffixDrafter", "SuffixTrie", "make_drafter",
           "parse_layer_skip", "propose_chain"]
