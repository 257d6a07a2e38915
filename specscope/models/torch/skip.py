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

DEL's early-exit pass over a view of the first layers is `Transformer.forward_exits`: one pass
through the first max(exits) layers, the final norm and LM head applied after each layer in
`exits` ("shadow tokens" of every exit at once).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from specscope.errors import InputError
from specscope.models.torch.transformer import Transformer

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

