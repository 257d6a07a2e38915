"""Tensors that turn a draft `Tree` into one attention pass (docs/methods.md#tree-attention).

The n tree tokens follow `committed_len` cached tokens. Each node sees the whole committed prefix
and its own ancestors-or-self, and sits at position committed_len + depth, so its query is the
same as if its root-to-node path had been decoded one token at a time.
"""

from __future__ import annotations

import torch

from specscope.tree import Tree


def tree_attention_mask(
    tree: Tree, committed_len: int, dtype: torch.dtype, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Additive mask (1, 1, n, committed_len + n): 0 where a node may attend, −inf elsewhere."""
    n = tree.size
    allowed = torch.ones(n, committed_len + n, dtype=torch.bool, device=device)
    allowed[:, committed_len:] = tree_block_mask(tree, device)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    return mask.masked_fill_(~allowed, float("-inf"))[None, None]


def tree_block_mask(tree: Tree, device: torch.device | str = "cpu") -> torch.Tensor:
    """Bool (n, n): node i may attend to node j when j is i or one of its ancestors."""
    return torch.from_numpy(tree.ancestor_mask.copy()).to(device)


def tree_position_ids(
    tree: Tree, committed_len: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Position id of every node (n,): committed_len + depth."""
    return committed_len + torch.tensor(tree.depths, dtype=torch.long, device=device)


def chain_attention_mask(input_pos: torch.Tensor, kv_len: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive causal mask (1, 1, t, kv_len) of tokens at `input_pos` over slots 0..kv_len−1."""
    slots = torch.arange(kv_len, device=input_pos.device)
    mask = torch.zeros(input_pos.numel(), kv_len, dtype=dtype, device=input_pos.device)
    return mask.masked_fill_(slots[None, :] > input_pos[:, None], float("-inf"))[None, None]
