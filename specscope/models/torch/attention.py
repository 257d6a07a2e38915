"""Attention of new tokens over a committed prefix and among themselves, merged exactly.

A tree (or a chunk of a prompt) attends to the whole committed prefix and, among its own tokens,
to what a small (t, t) mask allows. `split_attention` computes the two parts separately — the
prefix without a mask (or, in the static-shape step, with only a key-padding mask), the block
with its mask — and merges them by their log-sum-exps lse_p and lse_b:

    out = out_b + σ(lse_p − lse_b) · (out_p − out_b),

which equals one softmax over prefix and block together (σ(lse_p − lse_b) is the prefix's share
of the softmax mass). The prefix is read once, unmasked; no (t, prefix + t) mask is built, so its
cost does not depend on the tree's shape. `dense_attention` is the reference: one SDPA call under
the additive (t, prefix + t) mask (what many engines do, and what this module's tests compare
against). A prompt from an empty cache takes SDPA's causal path (`causal_attention`).

`attend` runs each part through a fused SDPA kernel that also returns the log-sum-exp: on a CPU
`_scaled_dot_product_flash_attention_for_cpu` (any dtype, bias mask); on CUDA the flash kernel
for an unmasked half-precision part, else the memory-efficient kernel (float32 too, bias mask).
These are private aten operators (with these signatures since torch 2.3, so in both 2.11 and 2.13),
looked up by name; where one is missing or does not apply, plain math with float32 softmax
statistics. The CUDA branches are untested here (no GPU). Measured on this project's 2-core CPU
(1 thread, tiny-code's 4 heads × 64 dims, median of 400 calls), the CPU kernel against plain math:
t = 1: 8.6 / 14.8 / 25.9 µs against 23.3 / 30.5 / 42.3 µs at prefix 16 / 200 / 512;
t = 16: 13.5 / 53.9 / 119 µs against 29.5 / 84.3 / 179 µs; a masked 16 × 16 block 18.4 against
35.7 µs. So the kernel is used wherever it exists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_CUDA_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention", None)
_CUDA_EFFICIENT = getattr(torch.ops.aten, "_scaled_dot_product_efficient_attention", None)
_BIAS_ALIGN = 16
"""Elements the memory-efficient kernel wants a bias row's stride to be a multiple of (SDPA pads
its masks the same way)."""


@dataclass(frozen=True)
class SplitMask:
    """How t new tokens attend in split form: cache slots 0..prefix−1 (all of them, or those that
    `keys` (1, prefix) bool allows), and one another under `block` (t, t) bool (a tree's ancestor
    mask, or causal). `causal` marks a lower-triangular block, which from an empty prefix takes
    SDPA's causal path."""

    prefix: int
    block: torch.Tensor
    keys: torch.Tensor | None = None
    causal: bool = False


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention and its log-sum-exp: q (b, h, t, d) over k, v (b, kv_heads, s, d)
    (grouped-query heads: h a multiple of kv_heads), `mask` bool (t, s), (1, s) for keys only,
    (b, t, s) or (b, 1, s) one per batch row, or None. Returns out (b, h, t, d) in q's dtype and
    lse (b, h, t) in at least float32. A row that the mask empties gets a finite output and an
    lse near the dtype's minimum (weight 0 when merged), never NaN."""
    b, h, t, d = q.shape
    kv_heads, s = k.shape[1], k.shape[2]
    groups = h // kv_heads
    # a kv head's query heads attend to the same keys: fold them into its query rows
    qf = q.reshape(b, kv_heads, groups * t, d)
    if mask is not None and groups > 1 and mask.shape[-2] > 1:
        mask = mask.repeat(*(1,) * (mask.ndim - 2), groups, 1)
    if mask is not None and mask.ndim == 3:
        mask = mask[:, None]  # one mask per batch row, shared by its kv heads
    fused = _fused(qf, k, v, mask) if s else None
    out, lse = fused if fused is not None else _math(qf, k, v, mask)
    return out.reshape(b, h, t, d), lse.reshape(b, h, t)


def _fused(qf: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(out, lse) of folded queries from a fused SDPA kernel, or None where none applies."""
    d = qf.shape[-1]
    if qf.device.type == "cpu" and _CPU_FLASH is not None:
        return _CPU_FLASH(qf, k, v, attn_mask=_bias(mask, qf.dtype))
    if qf.device.type != "cuda" or d % 8:
        return None
    half = qf.dtype in (torch.float16, torch.bfloat16)
    if mask is None and half and d <= 256 and _CUDA_FLASH is not None:
        out, lse = _CUDA_FLASH(qf, k, v)[:2]
        return out, lse
    if _CUDA_EFFICIENT is not None and (half or qf.dtype == torch.float32):
        bias = _bias(mask, qf.dtype)
        if bias is not None:
            s = bias.shape[-1]
            bias = F.pad(bias, (0, -s % _BIAS_ALIGN))[..., :s].expand(*qf.shape[:3], s)
        out, lse = _CUDA_EFFICIENT(qf, k, v, bias, True)[:2]
        return out, lse[..., : qf.shape[2]]  # the kernel pads lse's rows to a multiple of 32
    return None


def _bias(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A bool mask as an additive one: 0 where allowed, the dtype's minimum (not −inf, so that a
    row with nothing allowed stays finite) elsewhere."""
    if mask is None:
        return None
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill_(~mask, torch.finfo(dtype).min)


def _math(qf: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The plain-math fallback of `attend` on folded queries, in at least float32."""
    work = torch.promote_types(qf.dtype, torch.float32)
    scores = qf.to(work) @ k.to(work).transpose(-1, -2) * (1.0 / math.sqrt(qf.shape[-1]))
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(work).min)
    lse = scores.logsumexp(-1)
    out = (scores - lse[..., None]).exp() @ v.to(work)
    return out.to(qf.dtype), lse


def split_attention(q: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor,
                    k_block: torch.Tensor, v_block: torch.Tensor, block_mask: torch.Tensor,
                    prefix_keys: torch.Tensor | None = None) -> torch.Tensor:
    """Attention (b, h, t, d) of t new tokens over a prefix (k_prefix, v_prefix:
    (b, kv_heads, p, d), p may be 0) and their own keys under `block_mask` (t, t), or (b, t, t)
    one per batch row, merged by log-sum-exp. The prefix is unmasked, or restricted to the slots
    `prefix_keys` (1, p) or (b, 1, p) allows (the static-shape step, which reads the whole cache;
    a batch of sequences, each its own committed length). Every row of `block_mask` must allow
    at least its own token."""
    out_b, lse_b = attend(q, k_block, v_block, block_mask)
    if k_prefix.shape[2] == 0:
        return out_b
    out_p, lse_p = attend(q, k_prefix, v_prefix, prefix_keys)
    work = torch.promote_types(q.dtype, torch.float32)
    share = torch.sigmoid(lse_p - lse_b).to(work)[..., None]
    return torch.lerp(out_b.to(work), out_p.to(work), share).to(q.dtype)


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
