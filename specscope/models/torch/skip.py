"""Layer-skipped views of a target, for self-speculative drafting (SWIFT, DEL).

`skip_layers(model, kept)` returns a model of the same class (`Transformer` or `HFCausalLM`) that
runs only the layers `kept` (target indices, ascending), then the target's final norm and LM head.
Nothing is copied: the embedding, the norms, the kept blocks' projections and the head are the
target's own modules. The cache is the view's own, so the view drafts while the target's cache
holds the committed text, and each is verified and compacted on its own.

How a view gets its own cache while sharing the blocks: a block's attention reads and writes the
cache its model points it at (`Attention.kv_cache` in a `Transformer`, set by `setup_caches`;
`layer_idx` into the `DynamicCache` in a Hugging Face decoder layer). The view holds shallow
copies of the kept blocks and of their attention modules (`_shallow`): the same submodules and
parameters, but their own cache pointer (a Hugging Face view renumbers `layer_idx` 0..k−1 and
carries a copy of the config with k layers, so its `DynamicCache` has k layers).

`exit_logits` is DEL's early-exit pass over a `Transformer` (or a view of its first layers): one
pass through the first max(exits) layers, the final norm and LM head applied after each layer in
`exits` ("shadow tokens" of every exit at once).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from specscope.errors import InputError
from specscope.models.torch.attention import SplitMask
from specscope.models.torch.layers import rope_cos_sin
from specscope.models.torch.transformer import Transformer, causal_mask
from specscope.models.torch.tree_inputs import (
    tree_attention_mask,
    tree_block_mask,
    tree_position_ids,
)
from specscope.tree import Tree

if TYPE_CHECKING:
    from specscope.models.torch.hf import HFCausalLM


def layer_count(model: Transformer | HFCausalLM) -> int:
    """Decoder layers of a `Transformer` or a Hugging Face model."""
    if isinstance(model, Transformer):
        return model.spec.n_layers
    return len(_hf_decoder(model).layers)


def check_kept(kept: Sequence[int], layers: int) -> tuple[int, ...]:
    """`kept` as sorted distinct layer indices; an `InputError` unless it is a non-empty subset of
    0..layers−1."""
    out = tuple(sorted({int(i) for i in kept}))
    if not out or out[0] < 0 or out[-1] >= layers:
        raise InputError(f"kept layers {list(kept)} must be a non-empty subset of "
                         f"0..{layers - 1}")
    return out


def layer_label(layers: Sequence[int]) -> str:
    """Layer indices as one comma-separated word ("" for none)."""
    return ",".join(str(i) for i in layers)


def skip_layers(model: Transformer | HFCausalLM, kept: Sequence[int]) -> Transformer | HFCausalLM:
    """A view of `model` that runs only the layers `kept`, sharing every weight with `model`
    and holding its own cache (module docstring). With every layer kept it computes what `model`
    does."""
    kept = check_kept(kept, layer_count(model))
    if isinstance(model, Transformer):
        return _transformer_view(model, kept)
    return _hf_view(model, kept)


def _shallow(module: nn.Module, **children: nn.Module) -> nn.Module:
    """A copy of `module` sharing its parameters, buffers and submodules, except `children`,
    which replace the submodules of those names in the copy only."""
    out = copy.copy(module)
    out._modules = {**module._modules, **children}
    return out


def _transformer_view(model: Transformer, kept: tuple[int, ...]) -> Transformer:
    spec = dataclasses.replace(model.spec, name=f"{model.spec.name}/layers={layer_label(kept)}",
                               n_layers=len(kept))
    with torch.device("meta"):  # laid out without memory, every module replaced below
        view = Transformer(spec)
    blocks = [model.model.layers[i] for i in kept]
    view.model.embed_tokens = model.model.embed_tokens
    view.model.layers = nn.ModuleList(_shallow(b, self_attn=_shallow(b.self_attn)) for b in blocks)
    view.model.norm = model.model.norm
    view.lm_head = model.lm_head
    view.tree_attention = model.tree_attention
    return view


def _hf_decoder(model: HFCausalLM) -> nn.Module:
    """The decoder (`model.model.model`: embeddings, `layers`, norm) of a Hugging Face causal LM
    whose layers keep their cache index in `self_attn.layer_idx` (Llama and its relatives)."""
    decoder = getattr(model.model, "model", None)
    layers = getattr(decoder, "layers", None)
    if layers is None or not all(hasattr(getattr(layer, "self_attn", None), "layer_idx")
                                 for layer in layers):
        raise InputError(f"{model.model.config.name_or_path}: layer skipping needs a decoder "
                         "whose layers index the cache by self_attn.layer_idx (Llama-style)")
    return decoder


def _hf_view(model: HFCausalLM, kept: tuple[int, ...]) -> HFCausalLM:
    outer, decoder = model.model, _hf_decoder(model)
    config = copy.deepcopy(outer.config)
    config.num_hidden_layers = len(kept)
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[i] for i in kept]
    layers = []
    for j, i in enumerate(kept):
        attention = _shallow(decoder.layers[i].self_attn)
        attention.layer_idx = j
        layers.append(_shallow(decoder.layers[i], self_attn=attention))
    inner = _shallow(decoder, layers=nn.ModuleList(layers))
    inner.config = config
    head = _shallow(outer, model=inner)
    head.config = config
    view = copy.copy(model)
    view.model = head
    view.cache = view._new_cache()
    return view


@torch.no_grad()
def exit_logits(
    model: Transformer, tokens: torch.Tensor, tree: Tree, committed: int, exits: Sequence[int]
) -> torch.Tensor:
    """Logits (len(exits), n, vocab) of every node of `tree` (tokens (n,)) after the first e
    layers, for each e in `exits` (ascending), from one pass through the first max(exits) layers.

    Node i goes to cache slot committed + i in the layers run; deeper layers are neither run nor
    written. A chain is causal (from an empty cache, SDPA's causal path, as `prefill` runs it).
    This is `Transformer`'s own pass with the final norm and LM head applied at every exit.
    """
    n, device = tree.size, tokens.device
    if model.max_seq_len == 0:
        raise RuntimeError("call setup_caches before running the model")
    if committed + n > model.max_seq_len:
        raise InputError(f"tree of {n} nodes after {committed} tokens exceeds the cache")
    chain = bool(np.array_equal(tree.parents, np.arange(-1, n - 1)))
    if model.tree_attention == "dense":
        mask = tree_attention_mask(tree, committed, model.lm_head.weight.dtype, device)
    elif chain:
        mask = causal_mask(committed, n, device)
    else:
        mask = SplitMask(committed, tree_block_mask(tree, device))
    positions = tree_position_ids(tree, committed, device)
    slots = torch.arange(committed, committed + n, device=device)
    x = model.model.embed_tokens(tokens[None])
    cos, sin = rope_cos_sin(positions, model.spec.head_dim, model.spec.rope_theta, x.dtype)
    out = []
    for depth, block in enumerate(model.model.layers[: exits[-1]], 1):
        x = block(x, cos, sin, mask, slots)
        if depth in exits:
            out.append(model.lm_head(model.model.norm(x))[0])
    return torch.stack(out)
