"""Drafters: candidate tokens for the nodes of a draft tree (docs/methods.md#drafters).

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
`make_drafter` builds one by name from the `BUILDERS` registry.

Life cycle, driven by the executor and by trace collection: `start` (new request), then per step
`begin` (committed context; its last token is the root), `propose` (level by level), `update`
(target logits the step computed), `learn` (those of the committed positions), `accept` (the
accepted drafted tokens); `finish` (response done).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class DraftRequest:
    """What a drafter may be built from: the vocabulary, a draft model or the target (for
    self-speculation), and how children are drawn (`sample`, at `temperature`, from
    `generator`; None for top-k)."""

    vocab_size: int
    draft_model: Model | None = None
    sample: str | None = None
    temperature: float = 0.0
    generator: torch.Generator | None = None
    target: Model | None = None
    layer_skip: LayerSkipOptions | None = None

    def model(self, name: str) -> Model:
        """The draft model drafter `name` runs; an `InputError` when none was given."""
        if self.draft_model is None:
            raise InputError(f"--drafter {name} needs --draft-model")
        return self.draft_model


def _layerskip(r: DraftRequest) -> Drafter:
    if r.target is None:
        raise InputError("--drafter layerskip drafts with the target's own layers and needs the "
                         "target model")
    return layer_skip_drafter(r.target, r.layer_skip or LayerSkipOptions(), r.sample,
                              r.temperature, r.generator)


BUILDERS: dict[str, Callable[[DraftRequest], Drafter]] = {
    "draft": lambda r: DraftModelDrafter(r.model("draft"), r.sample, r.temperature, r.generator),
    "ngram": lambda r: NgramDrafter(),
    "suffix": lambda r: SuffixDrafter(),
    RECYCLE: lambda r: RecycleDrafter(r.vocab_size),
    "goose": lambda r: GooseDrafter(NgramDrafter(), RecycleDrafter(r.vocab_size)),
    STAND: lambda r: StandDrafter(r.vocab_size, sample=r.sample, temperature=r.temperature,
                                  generator=r.generator),
    RASD: lambda r: RasdDrafter(DraftModelDrafter(r.model(RASD), None, r.temperature),
                                SuffixDrafter()),
    LAYERSKIP: _layerskip,
}
"""Every drafter by its `--drafter` name (`names.DRAFTERS`, in that order)."""
SAMPLED_DRAFTERS = (LAYERSKIP, "draft", STAND)
"""Drafters that can draw children from their distribution (`sample`) instead of a top-k."""


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
    """The drafter called `name` (one of `DRAFTERS`, built by `BUILDERS`): "draft" and "rasd"
    need `draft_model`, "layerskip" the `target` (default layer skip: SWIFT); `sample` (children
    drawn from the drafter's distribution) needs one of `SAMPLED_DRAFTERS`."""
    if name not in BUILDERS:
        raise InputError(f"--drafter: unknown drafter {name!r}; known: {', '.join(DRAFTERS)}")
    if sample is not None and name not in SAMPLED_DRAFTERS:
        *others, last = SAMPLED_DRAFTERS
        raise InputError(f"sampled drafts need --drafter {', '.join(others)} or {last}, "
                         f"not {name!r}")
    return BUILDERS[name](DraftRequest(vocab_size, draft_model, sample, temperature, generator,
                                       target, layer_skip))


__all__ = ["DRAFTERS", "LAYERSKIP", "RASD", "RECYCLE", "ROOT", "STAND", "DraftModelDrafter",
           "Drafter", "GooseDrafter", "LayerSkipOptions", "NgramDrafter", "RasdDrafter",
           "RecycleDrafter", "StandDrafter", "SuffixDrafter", "SuffixTrie", "make_drafter",
           "parse_layer_skip", "propose_chain"]
