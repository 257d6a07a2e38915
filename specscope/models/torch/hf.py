"""A local Hugging Face causal LM behind the same methods as `Transformer`.

Tree verification passes the tree as a 4-D additive attention mask with explicit position ids
(committed length + depth) on top of a `DynamicCache`; compaction keeps the committed prefix and
the accepted path by index selection. Only attention implementations that apply a custom mask are
accepted ("eager", "sdpa"); flash-attention kernels take padding masks only and would silently
verify the tree as a chain. Caches whose layers are not plain full-attention layers (sliding
windows, recurrent states) are refused too, since positions cannot be selected from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, DynamicCache
from transformers.cache_utils import DynamicLayer

from specscope.errors import InputError
from specscope.models.torch.tree_inputs import tree_attention_mask, tree_position_ids
from specscope.tree import Tree

MASKED_ATTENTION = ("eager", "sdpa")
"""Attention implementations that honour an arbitrary additive mask."""


class HFCausalLM:
    """A causal LM loaded from a local folder, verifying trees in one pass.

    `prefill` starts a new sequence; `forward`, `forward_tree` and `compact` continue it exactly
    as the same methods of `Transformer` do. Methods run under `torch.no_grad`.
    """

    def __init__(
        self,
        path: str | Path,
        attn_implementation: str = "sdpa",
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        if attn_implementation not in MASKED_ATTENTION:
            raise InputError(
                f"attention implementation {attn_implementation!r} ignores custom masks, so it "
                f"cannot verify trees; use one of {', '.join(MASKED_ATTENTION)}"
            )
        if not Path(path).is_dir():
            raise InputError(f"{path}: not a model folder")
        try:
            model = AutoModelForCausalLM.from_pretrained(
                path, attn_implementation=attn_implementation, dtype=dtype, local_files_only=True
            )
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: cannot load a causal LM ({exc})") from None
        self.model = model.to(device).eval()
        self.cache = self._new_cache()
        kinds = {type(layer) for layer in self.cache.layers}
        if kinds - {DynamicLayer}:
            odd = sorted(k.__name__ for k in kinds - {DynamicLayer})
            raise InputError(
                f"{path}: cache layers {odd} cannot be compacted by position; "
                "only full-attention models are supported"
            )

    @property
    def device(self) -> torch.device:
        """Where the weights live."""
        return self.model.device

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (b, t, vocab) of a prompt (b, t), starting a new cache."""
        self.cache = self._new_cache()
        return self.model(input_ids=tokens, past_key_values=self.cache, use_cache=True).logits

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Logits (b, t, vocab) of a chain (b, t) at consecutive positions `input_pos` (t,).

        Cached entries at or after input_pos[0] are dropped first.
        """
        self._truncate(int(input_pos[0]))
        positions = input_pos[None].expand(tokens.shape[0], -1)
        out = self.model(
            input_ids=tokens, position_ids=positions, past_key_values=self.cache, use_cache=True
        )
        return out.logits

    __call__ = forward

    @torch.no_grad()
    def forward_tree(self, tokens: torch.Tensor, tree: Tree, committed_len: int) -> torch.Tensor:
        """Logits (n, vocab) of every node of `tree` (tokens (n,)) after `committed_len` tokens."""
        self._truncate(committed_len)
        mask = tree_attention_mask(tree, committed_len, self.model.dtype, tokens.device)
        positions = tree_position_ids(tree, committed_len, tokens.device)
        out = self.model(
            input_ids=tokens[None],
            attention_mask=mask,
            position_ids=positions[None],
            past_key_values=self.cache,
            use_cache=True,
        )
        return out.logits[0]

    def compact(self, committed_len: int, accepted_nodes: Sequence[int]) -> None:
        """Move the KV of `accepted_nodes` (root first) to the positions right after the
        committed prefix. Later entries stay, as in `Transformer`'s cache (the next pass drops
        them): a draft model that commits a chain but its last token, then that token as the
        root of the tree it ran last, still finds it there."""
        source = committed_len + torch.as_tensor(list(accepted_nodes), dtype=torch.long,
                                                 device=self.device)
        moved = committed_len + torch.arange(source.numel(), device=self.device)
        for layer in self.cache.layers:
            layer.keys = layer.keys.index_copy(-2, moved, layer.keys.index_select(-2, source))
            layer.values = layer.values.index_copy(-2, moved, layer.values.index_select(-2, source))

    def _new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.model.config)

    def _truncate(self, length: int) -> None:
        cached = self.cache.get_seq_length()
        if cached < length:
            raise ValueError(f"{length} tokens are committed but only {cached} are cached")
        if cached > length:  # crop(-k) drops k tokens; before 5.14, crop(0) dropped them all
            self.cache.crop(length - cached)
