"""Hybrid state-space / attention decoder (Bamba-style) built from a `ModelSpec` with arch "hybrid".

Layers listed in `spec.attn_layers` are grouped-query attention over a KV cache (the
`Transformer`'s `Attention`), the others Mamba-2 mixers (`Mamba2Mixer`); every layer has a
pre-norm residual, and a SwiGLU MLP after it when d_ff > 0. Parameter names follow Hugging Face's
`BambaForCausalLM` (`model.layers.{i}.mamba` / `self_attn`, `input_layernorm`, `pre_ff_layernorm`,
`feed_forward`, `model.final_layernorm`); full RoPE rather than Bamba's partial rotary.

Tree verification runs both kinds of layer in one pass: in attention layers the committed prefix
unmasked and the tree's nodes under their ancestor mask (`SplitMask`; node i in cache slot
committed + i at position committed + depth), STree's masked dual form in SSM layers, both from
the same `Layout`. Committing an accepted path compacts the KV cache and takes the SSM state after
the path from the pass's `TreeRecord`, so nothing is run twice. One `KVCache` holds the attention
layers' keys and values; the SSM state (over the SSM layers only) is a value, as in `Mamba2`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from specscope.errors import InputError
from specscope.models.spec import ModelSpec
from specscope.models.torch.attention import SplitMask
from specscope.models.torch.layers import CausalLM, FeedForward, RMSNorm, rope_cos_sin
from specscope.models.torch.ssm import (
    CHUNK,
    Layout,
    Mamba2Mixer,
    SSMState,
    TreeRecord,
    chain_layout,
    reset_mixer_parameters,
    state_dtype,
    tree_layout,
)
from specscope.models.torch.transformer import Attention, KVCache
from specscope.models.torch.tree_inputs import tree_position_ids
from specscope.tree import Tree


class HybridBlock(nn.Module):
    """One layer: pre-norm attention or Mamba-2 mixer with a residual, then a pre-norm MLP."""

    def __init__(self, spec: ModelSpec, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.input_layernorm = RMSNorm(spec.d_model, spec.norm_eps)
        if kind == "attn":
            self.self_attn = Attention(spec)
        else:
            self.mamba = Mamba2Mixer(spec)
        has_mlp = spec.d_ff > 0
        self.pre_ff_layernorm = RMSNorm(spec.d_model, spec.norm_eps) if has_mlp else None
        self.feed_forward = FeedForward(spec.d_model, spec.d_ff) if has_mlp else None


class HybridDecoder(nn.Module):
    """Embedding, layers and final norm: the `model.` prefix of a Bamba state dict."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.d_model)
        self.layers = nn.ModuleList(HybridBlock(spec, kind) for kind in spec.layer_kinds)
        self.final_layernorm = RMSNorm(spec.d_model, spec.norm_eps)


class Hybrid(CausalLM):
    """A hybrid causal LM from a `ModelSpec` with arch "hybrid"."""

    embedding_key = "model.embed_tokens.weight"

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        if spec.arch != "hybrid":
            raise InputError(f"model {spec.name}: Hybrid needs arch 'hybrid', not {spec.arch!r}")
        self.spec = spec
        self.model = HybridDecoder(spec)
        self.lm_head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.tie_weights()
        self.max_seq_len = 0
        self.kv_cache: KVCache | None = None

    @property
    def embedding(self) -> nn.Embedding:
        return self.model.embed_tokens

    @torch.no_grad()
    def reset_special_parameters(self, generator: torch.Generator) -> None:
        """Mamba-2's initialisation of every SSM layer's decays (see `reset_mixer_parameters`)."""
        for mixer in self.mixers:
            reset_mixer_parameters(mixer, generator)

    @property
    def mixers(self) -> list[Mamba2Mixer]:
        """The Mamba-2 mixers, in layer order."""
        return [block.mamba for block in self.model.layers if block.kind == "ssm"]

    @property
    def attentions(self) -> list[Attention]:
        """The attention modules, in layer order."""
        return [block.self_attn for block in self.model.layers if block.kind == "attn"]

    def setup_caches(self, max_batch_size: int = 1, max_seq_len: int | None = None) -> None:
        """Allocate one zeroed KV cache over the attention layers (weights' dtype and device),
        each attention layer reading and writing its own view of it."""
        self.max_seq_len = max_seq_len or self.spec.max_seq_len
        weight, attentions = self.lm_head.weight, self.attentions
        self.kv_cache = KVCache(len(attentions), max_batch_size, self.spec.n_kv_heads,
                                self.max_seq_len, self.spec.head_dim, weight.dtype, weight.device)
        for i, attn in enumerate(attentions):
            attn.kv_cache = self.kv_cache.layer(i)

    def new_state(self, batch: int = 1) -> SSMState:
        """The zero SSM state (over the SSM layers) before any token."""
        s, w, mixers = self.spec, self.lm_head.weight, self.mixers
        return SSMState(
            w.new_zeros(len(mixers), batch, mixers[0].conv_dim, s.conv_kernel - 1),
            w.new_zeros(len(mixers), batch, s.ssm_heads, s.ssm_head_dim, s.d_state,
                        dtype=state_dtype(w.dtype)),
        )

    def forward_sequence(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (b, t, vocab) of windows (b, t) from an empty context, differentiable (training).

        One pass over the whole window (a chunked pass would overwrite cache slots that earlier
        chunks' attention still needs for its gradient); the SSM layers' masked form is then
        O(t²), which at t = 512 costs less than the projections.
        """
        b, t = tokens.shape
        self.setup_caches(b, t)
        positions = torch.arange(t, device=tokens.device)
        layout = chain_layout(t, self.spec.conv_kernel, tokens.device)
        mask = SplitMask(0, layout.mask, causal=True)
        hidden, _, _ = self._run(tokens, positions, positions, mask, self.new_state(b), layout)
        return self.lm_head(hidden)

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor) -> tuple[torch.Tensor, SSMState]:
        """Logits (b, t, vocab) of a prompt (b, t) into slots 0..t−1 from an empty state, and the
        SSM state after it (call `setup_caches` first)."""
        hidden, state = self._chain(tokens, self.new_state(tokens.shape[0]))
        return self.lm_head(hidden), state

    @torch.no_grad()
    def verify_tree(
        self, tokens: torch.Tensor, tree: Tree, committed_len: int, state: SSMState
    ) -> tuple[torch.Tensor, TreeRecord]:
        """Logits (n, vocab) of every node of `tree` (tokens (n,)) in one pass after
        `committed_len` cached tokens and SSM `state` (batch 1), and the pass's SSM record."""
        n, device = tree.size, tokens.device
        if committed_len + n > self.max_seq_len:
            raise InputError(f"tree of {n} nodes after {committed_len} tokens exceeds the cache")
        positions = tree_position_ids(tree, committed_len, device)
        slots = torch.arange(committed_len, committed_len + n, device=device)
        layout = tree_layout(tree, self.spec.conv_kernel, device)
        mask = SplitMask(committed_len, layout.mask)
        hidden, _, parts = self._run(tokens[None], positions, slots, mask, state, layout)
        record = TreeRecord.of_tree(parts, layout.conv_index, state.ssm)
        return self.lm_head(hidden[0]), record

    @torch.no_grad()
    def decode(self, token: torch.Tensor, committed_len: int,
               state: SSMState) -> tuple[torch.Tensor, SSMState]:
        """Logits (vocab,) of one token (a 1-element tensor) at position `committed_len`, and the
        SSM state after it; its keys and values go to slot `committed_len`."""
        positions = torch.full((1,), committed_len, device=token.device)
        layout = chain_layout(1, self.spec.conv_kernel, token.device)
        mask = SplitMask(committed_len, layout.mask)
        hidden, state, _ = self._run(token.view(1, 1), positions, positions, mask, state, layout)
        return self.lm_head(hidden[0, 0]), state

    def compact(self, committed_len: int, accepted_nodes: Sequence[int]) -> None:
        """Move the KV of `accepted_nodes` (root first) into slots committed_len, +1, +2, …"""
        self.kv_cache.compact(committed_len, accepted_nodes)

    def _chain(self, tokens: torch.Tensor, state: SSMState) -> tuple[torch.Tensor, SSMState]:
        """A prompt from slot 0, `CHUNK` tokens at a time (causal mask, chain layout)."""
        if self.max_seq_len < tokens.shape[1]:
            raise InputError(f"{tokens.shape[1]} tokens exceed the {self.max_seq_len}-slot cache")
        hidden = []
        for start in range(0, tokens.shape[1], CHUNK):
            chunk = tokens[:, start : start + CHUNK]
            positions = torch.arange(start, start + chunk.shape[1], device=tokens.device)
            layout = chain_layout(chunk.shape[1], self.spec.conv_kernel, tokens.device)
            mask = SplitMask(start, layout.mask, causal=True)
            h, state, _ = self._run(chunk, positions, positions, mask, state, layout)
            hidden.append(h)
        return torch.cat(hidden, dim=1), state

    def _run(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        mask: SplitMask,
        state: SSMState,
        layout: Layout,
    ) -> tuple[torch.Tensor, SSMState, tuple[torch.Tensor, ...]]:
        """Final hidden states, the SSM state after the last token's path, and the SSM layers'
        records stacked over them (see `ssm.LayerRecord`)."""
        x = self.model.embed_tokens(tokens)
        cos, sin = rope_cos_sin(positions, self.spec.head_dim, self.spec.rope_theta, x.dtype)
        conv, ssm, parts = [], [], []
        states = iter(zip(state.conv, state.ssm, strict=True))
        for block in self.model.layers:
            u = block.input_layernorm(x)
            if block.kind == "attn":
                x = x + block.self_attn(u, cos, sin, mask, slots)
            else:
                c, h = next(states)
                mixed, c, h, part = block.mamba(u, c, h, layout)
                x = x + mixed
                conv.append(c)
                ssm.append(h)
                parts.append(part)
            if block.feed_forward is not None:
                x = x + block.feed_forward(block.pre_ff_layernorm(x))
        stacked = tuple(torch.stack(t) for t in zip(*parts, strict=True))
        return self.model.final_layernorm(x), SSMState(torch.stack(conv), torch.stack(ssm)), stacked
