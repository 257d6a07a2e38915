"""Attention of new tokens over a committed prefix, in two parts merged exactly.

A tree (or a chunk of a prompt) attends to the whole committed prefix and, among its own tokens,
to what a small (t, t) mask allows. `split_attention` computes the two parts separately — the
prefix without any mask, the block with its mask — and merges them by their log-sum-exps:

    out = (e^{lse_p} · out_p + e^{lse_b} · out_b) / (e^{lse_p} + e^{lse_b}),

which equals one softmax over prefix and block together. The prefix is read once by two
unmasked matrix products; no (t, prefix + t) mask is built, so the cost of the prefix does not
depend on the tree's shape. `dense_attention` is the reference: one SDPA call under the additive
(t, prefix + t) mask (what many engines do, and what this module's tests compare against).
A prompt from an empty cache takes SDPA's causal path (`is_causal`, flash kernels where the
device has them) instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class SplitMask:
    """How t new tokens attend in split form: the first `prefix` cache slots without a mask, and
    one another under `block` (t, t) bool (a tree's ancestor mask, or causal). `causal` marks a
    lower-triangular block, which from an empty prefix takes SDPA's causal path."""

    prefix: int
    block: torch.Tensor
    causal: bool = False


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention and its log-sum-exp: q (b, h, t, d) over k, v (b, kv_heads, s, d)
    (grouped-query heads), `mask` bool (t, s) or None. Returns out (b, h, t, d) in q's dtype and
    lse (b, h, t) in at least float32."""
    b, h, t, d = q.shape
    groups = h // k.shape[1]
    work = torch.promote_types(q.dtype, torch.float32)
    # grouped-query heads share their kv head: fold the group into the query rows
    qg = q.reshape(b, k.shape[1], groups * t, d).to(work)
    scores = qg @ k.to(work).transpose(-1, -2) * (1.0 / math.sqrt(d))
    scores = scores.view(b, k.shape[1], groups, t, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    lse = scores.logsumexp(-1)
    probs = (scores - lse[..., None]).exp().view(b, k.shape[1], groups * t, -1)
    out = (probs @ v.to(work)).view(b, h, t, d)
    return out.to(q.dtype), lse.reshape(b, h, t)


def split_attention(q: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor,
                    k_block: torch.Tensor, v_block: torch.Tensor,
                    block_mask: torch.Tensor) -> torch.Tensor:
    """Attention (b, h, t, d) of t new tokens over an unmasked prefix (k_prefix, v_prefix:
    (b, kv_heads, p, d), p may be 0) and their own keys under `block_mask` (t, t), merged by
    log-sum-exp. Every row of `block_mask` must allow at least its own token."""
    out_b, lse_b = attend(q, k_block, v_block, block_mask)
    if k_prefix.shape[2] == 0:
        return out_b
    out_p, lse_p = attend(q, k_prefix, v_prefix)
    top = torch.maximum(lse_p, lse_b)
    w_p, w_b = (lse_p - top).exp()[..., None], (lse_b - top).exp()[..., None]
    merged = (w_p * out_p.to(w_p.dtype) + w_b * out_b.to(w_b.dtype)) / (w_p + w_b)
    return merged.to(q.dtype)


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
    """The reference: SDPA of q (b, h, t, d) over k, v (b, kv_heads, s, d) under an additive mask
    (1, 1, t, s) (0 where allowed, −inf elsewhere)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                          enable_gqa=q.shape[1] != k.shape[1])


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """SDPA's causal path for a prompt from an empty cache: q, k, v of the same t tokens."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                          enable_gqa=q.shape[1] != k.shape[1])
