"""LongSpec (Yang, Du, Zhang, Wang, Pang, Du and An 2025, "LongSpec: Long-Context Speculative
Decoding with Efficient Drafting and Verification", arXiv:2502.17421): a one-layer draft whose
own KV cache stays constant at long context, and a target that verifies with hybrid tree
attention.

Modelled, as the authors' code (github.com/sail-sg/LongSpec, `llama_glide.py`) runs it:

- The draft (`LongSpecDraftCost`) is one decoder layer of the target's shape fed the target's
  token embeddings (no feature input, so no fc projection): self-attention over a sliding
  window of `window` tokens (flash attention's `window_size=(512, -1)`: the KV read and the
  scores span the window, not the context), then a cross-attention block whose queries read
  the KV cache of one target layer (the last) over the whole committed context — context × 2 ×
  n_kv_heads × head_dim × 2 bytes per forward and sequence — then the MLP and the target's LM
  head at 16 bits. The cross-attention block runs its own norm and q/k/v/o projections (the
  code projects k and v and discards them), and an eager host issues its operators one by one
  as it does a layer's: the draft's host time is a layer's and 4/7 of another (the block's 4
  operators over a layer's 7).
- Each drafted level is one draft forward of the nodes it expands (the case's `tree`, tokens
  per level; the code's `tree_shape`, beam-style top-k over the level), then the target
  verifies 1 + Σ tree tokens in one forward whose attention reads the prefix once with flash
  attention and the tree block under its mask (`split`).
- Autoregressive decoding is the same target one token per forward, flash attention (split).

Approximated: the first level forwards the τ tokens accepted last step, priced as one token;
the code pads the verified block with those tokens to 1 + Σ tree + depth tokens, priced as
1 + Σ tree; the levels' beam top-k and tree-mask bookkeeping are host work the profile's
per-level terms stand for (0 where it has not measured them); the draft and the target are
priced at the case's mean decoding context.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from specscope.hw_profiles import CostModel
from specscope.models.ops import ACT_BYTES, OpCost, layer_ops
from specscope.models.spec import ModelSpec
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.head import head_spec
from specscope.systems.step import Prediction, cost_model, pricing, speculative, target_model

WINDOW = 512
"""The draft's sliding window in tokens (`llama_glide.py`: `window_size=(512, -1)`)."""

OPTIONS: dict[str, type | tuple[type, ...]] = {"window": int}
"""window: the draft's self-attention window in tokens (default `WINDOW`)."""

_BLOCK = ("attn_norm", "qkv_proj", "o_proj")
"""The attention block's operators that the cross-attention block repeats unchanged."""


class LongSpecDraftCost(CostModel):
    """A `CostModel` of LongSpec's draft layer: `head_spec`'s layer with its self-attention's
    KV limited to `window` tokens, plus a cross-attention block over one target layer's KV."""

    def __init__(self, *args: Any, window: int = WINDOW, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window = window
        # the cross-attention block's operators over a decoder layer's: the share of a
        # layer's host issue time the block adds under an eager runtime
        layer = layer_ops(super().ops(1, 1, 1))
        self.cross_share = len(self.cross_attention_ops(1, 1, 1)) / len(layer)

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        """The layer's operators with the self-attention over min(context, window) cached
        tokens, followed by `cross_attention_ops`."""
        windowed = np.minimum(context_len, self.window)
        return [*super().ops(batch, new_tokens, windowed, **ssm),
                *self.cross_attention_ops(batch, new_tokens, context_len)]

    def cross_attention_ops(self, batch: Any, new_tokens: Any, context_len: Any
                            ) -> list[OpCost]:
        """The cross-attention block: norm and q/k/v/o projections as the self-attention
        block's, and scores + softmax + AV of the new tokens over the target's KV of one layer
        (`context_len` tokens, read once, nothing written)."""
        spec = self.model
        block = [dataclasses.replace(op, op=f"cross_{op.op}")
                 for op in super().ops(batch, new_tokens, context_len) if op.op in _BLOCK]
        heads, kv = spec.n_heads // self.tp, -(-spec.n_kv_heads // self.tp)
        hd = spec.head_dim
        batch, new, context = (np.asarray(x, dtype=float)
                               for x in (batch, new_tokens, context_len))
        tokens = batch * new
        attention = OpCost("cross_attention", 1,
                           flops=batch * heads * new * context * (4.0 * hd + 5.0),
                           weight_bytes=0.0,
                           act_bytes=2.0 * tokens * heads * hd * ACT_BYTES,
                           kv_bytes=batch * context * 2 * kv * hd * ACT_BYTES,
                           tokens=tokens, kind="attention")
        return [*block[:2], attention, *block[2:]]

    @property
    def host_layers(self) -> float:
        """A layer and `cross_share` of another: an eager host issues the cross-attention
        block's operators one by one as it does the layer's."""
        return super().host_layers + self.cross_share


def draft_spec(target: ModelSpec) -> ModelSpec:
    """LongSpec's draft layer: `head_spec` of the target (one layer, its vocabulary, 16 bits)."""
    return dataclasses.replace(head_spec(target), name=f"{target.name}/longspec")


def _window(case: Case) -> int:
    window = case.options.get("window", WINDOW)
    if window < 1:
        raise case.fail(f"window = {window} must be at least 1 token")
    return window


def draft_model(case: Case, target: ModelSpec) -> LongSpecDraftCost:
    """LongSpec's draft of `target` on the case's hardware and runtime, at its `window`."""
    return cost_model(case, draft_spec(target), cls=LongSpecDraftCost, window=_window(case))


def costs(case: Case) -> SystemCosts:
    """The target as the case states it (split tree attention), drafted by LongSpec's
    sliding-window, cross-attending draft layer."""
    target = target_model(case)
    return SystemCosts(target, draft_model(case, target.model), "longspec")


def predict(case: Case) -> Prediction:
    """The case's tree drafted level by level by the LongSpec draft, verified by the target
    with split prefix/tree attention, against autoregressive decoding at the same context."""
    if not case.tree:
        raise case.fail("system longspec needs a tree (tokens per level)")
    c = costs(case)
    price = pricing(case, c.target, c.drafter)
    return speculative(case, price, c.source, assumptions=[
        f"draft: one layer, self-attention over a {c.drafter.window}-token window, "
        f"cross-attention to one target layer's KV over {price.context_len} tokens, 16-bit "
        "LM head",
        "verification and autoregressive decoding with split (flash prefix + tree block) "
        "attention",
    ])


SYSTEM = System("longspec", "Yang et al. 2025, LongSpec: Long-Context Speculative Decoding "
                "with Efficient Drafting and Verification (arXiv:2502.17421)", costs, predict,
                OPTIONS)
