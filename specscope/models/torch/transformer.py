"""Llama-style decoder built from a `ModelSpec`, with tree verification and KV compaction.

Parameter names and layouts are those of Hugging Face `LlamaForCausalLM`, so a state dict moves
between the two with `load_state_dict`. The KV cache is one preallocated tensor for all layers
(layers × 2 × batch × kv heads × max len × head dim) whose slots are written in place. A chain
writes position p into slot p; a tree writes node i into slot committed_len + i at position
committed_len + depth(i), and `compact` moves the accepted path back into consecutive slots, in
every layer at once (one gather, one scatter).

Attention (`attention.py`) is split by default: the committed prefix read once without a mask,
the new tokens among themselves under a small mask, merged by log-sum-exp; `tree_attention =
"dense"` uses one additive (t, prefix + t) mask instead. A prompt goes through SDPA's causal path
in `PREFILL_CHUNK`-token chunks. `step` is the static-shape form for torch.compile and CUDA graphs,
over a batch of sequences in the cache's batch rows (one sequence is a batch of one): each row's
whole cache read under its key mask (slot < its committed length), its new tokens' own keys under
its block mask; `forward_rows` is the same pass in exact shapes. On this project's 2-core CPU,
whose fused kernel takes a mask at almost no cost, split is the slower of the two for tiny
models: tiny-code's shape (eager, 1 thread, prefix 200, interleaved medians of 600) verifies
n = 1 / 8 / 16 nodes in 2.64 / 3.61 / 4.38 ms against dense 2.33 / 3.16 / 3.97, and decodes a
token in 2.73 against 2.37. The split form is for GPUs, where a mask keeps SDPA off its flash
kernel. The public methods run under `torch.no_grad`, except the
training pass `forward_sequence`.

A mixture-of-experts spec (n_experts > 0) gets `moe.MoEFeedForward` in its layers from
`first_dense_layers` on and runs eager only (`step` refuses it); a dense spec builds exactly the
modules, parameter order and random weights it always did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from specscope.errors import InputError
from specscope.models.spec import ModelSpec
from specscope.models.torch.attention import (
    SplitMask,
    causal_attention,
    dense_attention,
    split_attention,
)
from specscope.models.torch.layers import (
    CausalLM,
    FeedForward,
    RMSNorm,
    apply_rope,
    rope_cos_sin,
)
from specscope.models.torch.moe import MoEFeedForward
from specscope.models.torch.tree_inputs import (
    chain_attention_mask,
    tree_attention_mask,
    tree_block_mask,
    tree_position_ids,
)
from specscope.tree import Tree

PREFILL_CHUNK = 1024
"""Prompt tokens per prefill pass: a long prompt's later chunks attend to the earlier ones as an
unmasked prefix."""


class KVCache(nn.Module):
    """Preallocated keys and values of a model's attention layers, all in one tensor `kv`
    (layers, 2, batch, kv_heads, max_len, head_dim): each layer reads and writes its own view
    (`layer`), and `compact` moves slots of every layer at once."""

    def __init__(
        self,
        layers: int,
        batch: int,
        kv_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        super().__init__()
        shape = (layers, 2, batch, kv_heads, max_len, head_dim)
        self.register_buffer("kv", torch.zeros(shape, dtype=dtype, device=device),
                             persistent=False)

    def layer(self, index: int) -> LayerCache:
        """The keys and values of attention layer `index`."""
        return LayerCache(self, index)

    @torch.no_grad()
    def compact(self, committed_len: int, accepted_nodes: Sequence[int],
                row: int | None = None) -> None:
        """Move the KV of `accepted_nodes` (slots committed_len + node, root first) into slots
        committed_len, +1, +2, … in every layer: of every batch row, or of `row` only."""
        device = self.kv.device
        src = committed_len + torch.as_tensor(list(accepted_nodes), dtype=torch.long, device=device)
        dst = torch.arange(committed_len, committed_len + src.numel(), device=device)
        kv = self.kv if row is None else self.kv[:, :, row : row + 1]
        kv.index_copy_(4, dst, kv.index_select(4, src))


@dataclass(frozen=True, eq=False)
class LayerCache:
    """One attention layer's part of a `KVCache`: k and v (batch, kv_heads, max_len, head_dim)."""

    cache: KVCache
    index: int

    @property
    def k(self) -> torch.Tensor:
        return self.cache.kv[self.index, 0]

    @property
    def v(self) -> torch.Tensor:
        return self.cache.kv[self.index, 1]

    def update(
        self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor, row: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (b, kv_heads, t, head_dim) of batch rows row..row+b−1 into `slots` (t,),
        the same in every row, or (b, t), each row its own; return those b rows."""
        b, t = k.shape[0], k.shape[2]
        layer = torch.full((1,), self.index, device=slots.device)
        rows = torch.arange(row, row + b, device=slots.device)[:, None]
        # written through the whole tensor, not this layer's view: torch.compile then updates it
        # in place (a view's update became a copy of the whole cache)
        self.cache.kv[layer, :, rows, :, slots.expand(b, t)] = (
            torch.stack([k, v]).permute(1, 3, 0, 2, 4))
        return self.k[row : row + b], self.v[row : row + b]


class Attention(nn.Module):
    """Grouped-query attention over its `LayerCache` (set by the model's `setup_caches`)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = spec.n_heads, spec.n_kv_heads, spec.head_dim
        self.q_proj = nn.Linear(spec.d_model, spec.n_heads * spec.head_dim, bias=False)
        self.k_proj = nn.Linear(spec.d_model, spec.n_kv_heads * spec.head_dim, bias=False)
        self.v_proj = nn.Linear(spec.d_model, spec.n_kv_heads * spec.head_dim, bias=False)
        self.o_proj = nn.Linear(spec.n_heads * spec.head_dim, spec.d_model, bias=False)
        self.kv_cache: LayerCache | None = None

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | SplitMask,
        slots: torch.Tensor,
        row: int = 0,
    ) -> torch.Tensor:
        """x (b, t, d_model) → (b, t, d_model) of cache batch rows row..row+b−1; keys and values
        go to cache `slots` ((t,) or (b, t)). `mask` is an additive (1, 1, t, kv_len) mask over
        cache slots 0..kv_len−1 (dense), or a `SplitMask` (cache slots 0..prefix−1, and the new
        tokens among themselves under a small mask)."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        cache_k, cache_v = self.kv_cache.update(slots, k, v, row)
        if not isinstance(mask, SplitMask):
            kv_len = mask.shape[-1]
            y = dense_attention(q, cache_k[:, :, :kv_len], cache_v[:, :, :kv_len], mask)
        elif mask.causal and mask.prefix == 0:
            y = causal_attention(q, k, v)
        else:
            p = mask.prefix
            y = split_attention(q, cache_k[:, :, :p], cache_v[:, :, :p], k, v, mask.block,
                                mask.keys)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class TransformerBlock(nn.Module):
    """Pre-norm attention and feed-forward, each with a residual: the feed-forward is a SwiGLU,
    or in an MoE spec's layers from `first_dense_layers` on a mixture of experts (`moe.py`)."""

    def __init__(self, spec: ModelSpec, index: int = 0) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(spec.d_model, spec.norm_eps)
        self.self_attn = Attention(spec)
        self.post_attention_layernorm = RMSNorm(spec.d_model, spec.norm_eps)
        self.mlp = (MoEFeedForward(spec) if spec.moe and index >= spec.first_dense_layers
                    else FeedForward(spec.d_model, spec.d_ff))

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | SplitMask,
        slots: torch.Tensor,
        row: int = 0,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, slots, row)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    """Embedding, blocks and final norm: the `model.` prefix of a Llama state dict."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.d_model)
        self.layers = nn.ModuleList(TransformerBlock(spec, i) for i in range(spec.n_layers))
        self.norm = RMSNorm(spec.d_model, spec.norm_eps)


class Transformer(CausalLM):
    """A Llama-style causal LM from a `ModelSpec` with arch "transformer"."""

    embedding_key = "model.embed_tokens.weight"

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        if spec.arch != "transformer":
            raise InputError(
                f"model {spec.name}: Transformer needs arch 'transformer', not {spec.arch!r}"
            )
        self.spec = spec
        self.model = Decoder(spec)
        self.lm_head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.tie_weights()
        self.max_seq_len = 0
        self.kv_cache: KVCache | None = None
        self.tree_attention = "split"
        """"split" (the prefix read once without a mask, the tree block under its own (n, n)
        mask, merged by log-sum-exp) or "dense" (one (n, prefix + n) additive mask)."""

    @property
    def embedding(self) -> nn.Embedding:
        return self.model.embed_tokens

    def setup_caches(self, max_batch_size: int = 1, max_seq_len: int | None = None) -> None:
        """Allocate a zeroed KV cache for every layer (one tensor), in the weights' dtype and
        device."""
        self.max_seq_len = max_seq_len or self.spec.max_seq_len
        weight = self.lm_head.weight
        self.kv_cache = KVCache(self.spec.n_layers, max_batch_size, self.spec.n_kv_heads,
                                self.max_seq_len, self.spec.head_dim, weight.dtype, weight.device)
        for i, block in enumerate(self.model.layers):
            block.self_attn.kv_cache = self.kv_cache.layer(i)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Logits (b, t, vocab) of a chain of tokens (b, t) at consecutive positions `input_pos`
        (t,), written to the same cache slots.

        Each token attends to cache slots up to its own position; later slots are ignored.
        """
        if self.tree_attention == "dense":
            kv_len = int(input_pos.max()) + 1
            mask = chain_attention_mask(input_pos, kv_len, self.lm_head.weight.dtype)
        else:
            mask = causal_mask(int(input_pos[0]), input_pos.numel(), tokens.device)
        return self._run(tokens, input_pos, input_pos, mask)

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, start: int = 0, row: int = 0) -> torch.Tensor:
        """Logits (b, t, vocab) of a prompt (b, t) written into slots start..start+t−1 of cache
        batch rows row..row+b−1 (`start` tokens already cached there: a later chunk of a
        prompt): SDPA's causal path, `PREFILL_CHUNK` tokens a pass (a later chunk attends to the
        earlier ones as an unmasked prefix)."""
        if start + tokens.shape[1] > self.max_seq_len:
            raise InputError(f"a {start + tokens.shape[1]}-token prompt exceeds the "
                             f"{self.max_seq_len}-slot cache")
        logits = []
        for first in range(start, start + tokens.shape[1], PREFILL_CHUNK):
            chunk = tokens[:, first - start : first - start + PREFILL_CHUNK]
            positions = torch.arange(first, first + chunk.shape[1], device=tokens.device)
            mask = causal_mask(first, chunk.shape[1], tokens.device)
            logits.append(self._run(chunk, positions, positions, mask, row=row))
        return torch.cat(logits, dim=1)

    def forward_sequence(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (b, t, vocab) of windows (b, t) from an empty context in one causal pass,
        differentiable (training). Allocates fresh caches of t slots."""
        b, t = tokens.shape
        self.setup_caches(b, t)
        positions = torch.arange(t, device=tokens.device)
        return self._run(tokens, positions, positions, causal_mask(0, t, tokens.device))

    @torch.no_grad()
    def forward_tree(self, tokens: torch.Tensor, tree: Tree, committed_len: int) -> torch.Tensor:
        """Logits (n, vocab) of every node of `tree` (tokens (n,)) in one pass over the tree.

        `committed_len` tokens are already cached; node i goes to slot committed_len + i.
        """
        return self._run(tokens[None], *self._tree_inputs(tree, committed_len, tokens.device))[0]

    @torch.no_grad()
    def forward_exits(self, tokens: torch.Tensor, tree: Tree, committed_len: int,
                      exits: Sequence[int]) -> torch.Tensor:
        """`forward_tree` exiting after each of the first e layers, e in `exits` (ascending):
        logits (len(exits), n, vocab) from one pass through the first max(exits) layers, the
        final norm and LM head applied at every exit (DEL's early exits). Deeper layers are
        neither run nor written. A chain runs causal, as `prefill` runs a prompt."""
        n = tree.size
        inputs = self._tree_inputs(tree, committed_len, tokens.device)
        if self.tree_attention != "dense" and tree.depth == n - 1:  # a chain
            inputs = (*inputs[:2], causal_mask(committed_len, n, tokens.device))
        return self._run(tokens[None], *inputs, exits=exits)[:, 0]

    def _tree_inputs(self, tree: Tree, committed_len: int, device: torch.device
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | SplitMask]:
        """Positions, cache slots and mask of a tree's pass after `committed_len` tokens."""
        n = tree.size
        if committed_len + n > self.max_seq_len:
            raise InputError(f"tree of {n} nodes after {committed_len} tokens exceeds the cache")
        if self.tree_attention == "dense":
            mask = tree_attention_mask(tree, committed_len, self.lm_head.weight.dtype, device)
        else:
            mask = SplitMask(committed_len, tree_block_mask(tree, device))
        positions = tree_position_ids(tree, committed_len, device)
        slots = torch.arange(committed_len, committed_len + n, device=device)
        return positions, slots, mask

    def compact(self, committed_len: int, accepted_nodes: Sequence[int],
                row: int | None = None) -> None:
        """Move the KV of `accepted_nodes` (root first) into slots committed_len, +1, +2, … of
        every cache batch row, or of `row` only."""
        self.kv_cache.compact(committed_len, accepted_nodes, row)

    @property
    def step(self) -> Callable[..., torch.Tensor]:
        """The static-shape step (`static_step`) that torch.compile and CUDA graphs run, asked for
        when a runtime other than eager is chosen. A mixture of experts has none (its dispatch
        reads the routing on the host): asking for it is refused, one `InputError` line."""
        if self.spec.moe:
            raise InputError(f"model {self.spec.name}: a mixture of experts runs under --runtime "
                             f"eager only (its expert dispatch reads the routing on the host)")
        return self.static_step

    @torch.no_grad()
    def static_step(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        committed: torch.Tensor,
        block_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Logits (b, t, vocab) of t new tokens in each of cache batch rows 0..b−1, in static
        shapes, for CUDA graphs and compiling (a single sequence is b = 1).

        Row r's tokens[r] (b, t) at `positions[r]` (b, t) are written to its cache `slots[r]`
        (b, t); each attends to its row's slots below `committed[r]` (b,) long (the whole cache
        is read under that key mask) and to its row's new tokens that `block_mask[r]` (b, t, t)
        allows (their keys as computed, not read back). No value is read on the host and no
        shape depends on one, so one capture serves every context length. A padding node
        (`block_mask` allowing only its diagonal) stays finite and changes no other node; no row
        reads another row's keys.
        """
        return self.forward_rows(tokens, positions, slots, committed, block_mask,
                                 self.max_seq_len)

    @torch.no_grad()
    def forward_rows(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                     committed: torch.Tensor, block_mask: torch.Tensor, prefix: int,
                     row: int = 0) -> torch.Tensor:
        """`step` over cache batch rows row..row+b−1, reading only the first `prefix` slots of
        each (prefix ≥ every committed length): the exact-shape form eager batches run."""
        keys = torch.arange(prefix, device=tokens.device) < committed[:, None]
        return self._run(tokens, positions, slots, SplitMask(prefix, block_mask, keys[:, None]),
                         row=row)

    def _run(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
        mask: torch.Tensor | SplitMask,
        exits: Sequence[int] | None = None,
        row: int = 0,
    ) -> torch.Tensor:
        """Logits after the last layer, or (`exits`) stacked after each layer count in it, of
        cache batch rows row..row+b−1."""
        if self.max_seq_len == 0:
            raise RuntimeError("call setup_caches before running the model")
        x = self.model.embed_tokens(tokens)
        cos, sin = rope_cos_sin(positions, self.spec.head_dim, self.spec.rope_theta, x.dtype)
        if exits is None:
            for block in self.model.layers:
                x = block(x, cos, sin, mask, slots, row)
            return self.lm_head(self.model.norm(x))
        out = []
        for depth, block in enumerate(self.model.layers[: exits[-1]], 1):
            x = block(x, cos, sin, mask, slots, row)
            if depth in exits:
                out.append(self.lm_head(self.model.norm(x)))
        return torch.stack(out)


def causal_mask(prefix: int, t: int, device: torch.device | str) -> SplitMask:
    """t consecutive tokens after `prefix` cached ones: the prefix unmasked, causal among
    themselves."""
    block = torch.ones(t, t, dtype=torch.bool, device=device).tril()
    return SplitMask(prefix, block, causal=True)
