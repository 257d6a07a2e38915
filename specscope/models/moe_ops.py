"""Mixture-of-experts and multi-head latent attention rows of the operator table
(`specscope.models.ops`), their parameter counts, and `expected_experts`: the routing law that
makes an MoE's weight reads grow with the tokens of a step.

An MoE layer reads the weights of the experts its tokens touch, not all of them: one token reads
k experts, a step of many tokens (a batch, a verified tree) reads up to all E, so a
speculative step's weight reads grow with its tokens where a dense model's stay flat. Issued
eagerly from Python, each touched expert also costs host time (`moe_host_layers`).

Expert placement follows the serving engines. With `ep` = 1 every expert's width is split `tp`
ways (vLLM without expert parallelism); with `ep` > 1 (dividing `tp`) the experts are spread
over `ep` groups of tp/ep devices, each group holding n_experts/ep experts split tp/ep ways
(SGLang's moe_ep_size; ep = tp is vLLM's --enable-expert-parallel), and tokens travel to their
experts and back in two all-to-alls per layer. The router is replicated (it runs at 16 bits,
as quantised checkpoints keep it), shared experts are split `tp` ways.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from specscope.errors import InputError
from specscope.models.op_cost import ACT_BYTES, Num, OpCost, linear_op, norm_op
from specscope.models.precision import Format
from specscope.models.spec import ModelSpec


def expected_experts(n_experts: int, k: int, tokens: Num, skew: float = 0.0, rows: Num = 1,
                     row_exponent: float = 1.0) -> Num:
    """Expected distinct routed experts that `tokens` tokens touch in one layer, each token
    choosing `k` of `n_experts` (`tokens` and `rows` may be arrays).

    By default tokens route independently. With `skew` 0 every expert is equally likely, so
    one token misses a given expert with probability 1 − k/E and the count is
    E·(1 − (1 − k/E)^T): k at T = 1, E as T → ∞. `skew` and `row_exponent` stand for measured
    routing statistics (`ModelSpec.routing_skew`, `routing_row_exponent`):

    - `skew` > 0: the i-th most popular expert has Zipf-like weight i^(−skew), a token includes
      it with probability q_i = k × its share (capped at 1, the excess spread over the others
      so that Σ q_i = k), and the count is Σ_i 1 − (1 − q_i)^T: still k at T = 1 and E in the
      limit, fewer in between (the concave terms sum highest when the q_i are equal);
    - `row_exponent` α < 1: the tokens are `rows` sequences' (a verified tree's nodes, a
      prompt), the sequences route independently of each other but a sequence's own tokens
      alike, so its n = T / rows tokens count as n^α independent draws: T is replaced by
      rows · n^α (α = 1: independent tokens). An approximation for the step sizes speculation
      verifies (n ≤ 64): a long prompt's count grows without the saturation a finite
      correlation length would give.
    """
    if not 1 <= k <= n_experts:
        raise InputError(f"experts per token {k} must lie in 1..{n_experts}")
    if skew < 0:
        raise InputError(f"routing skew {skew} must not be negative")
    if not 0 < row_exponent <= 1:
        raise InputError(f"routing row exponent {row_exponent} must lie in (0, 1]")
    t = np.asarray(tokens, dtype=float)
    if row_exponent != 1:
        r = np.asarray(rows, dtype=float)
        t = r * (t / r) ** row_exponent
    if skew == 0:
        return n_experts * (1.0 - (1.0 - k / n_experts) ** t)
    q = _inclusion(n_experts, k, skew)
    return np.sum(1.0 - (1.0 - q) ** t[..., None], axis=-1)


def _inclusion(n_experts: int, k: int, skew: float) -> np.ndarray:
    """Per-token probabilities that each expert is among the k chosen, Zipf-like in `skew`
    and summing to k (`expected_experts`)."""
    if k == n_experts:
        return np.ones(n_experts)
    weight = np.arange(1, n_experts + 1, dtype=float) ** -skew
    q = k * weight / weight.sum()
    while q.max() > 1.0:
        capped = q >= 1.0
        q = np.where(capped, 1.0, q * (k - capped.sum()) / q[~capped].sum())
    return q


EXPERT_HOST_LAYERS = 0.11
"""Host time to issue one touched expert of an eager MoE layer (specscope's `MoEFeedForward`:
two index slices, index_select, three projections, SiLU, product, index_copy_; Hugging Face's
eager experts loop runs as many), in dense decoder layers' host time (a runtime's
`host_layer_us`). Measured by benchmarks/moe_cpu.py's `host_ratios` (`--host`) on tiny-code's
layout at width 8, where a step is its host time: 0.109-0.120 in five runs (2 cores,
2026-11-28). Counting ATen calls agrees: 12 per expert against 98 in a dense layer's verify step,
0.12 (tests/test_moe_executor.py)."""
ROUTER_HOST_LAYERS = 0.33
"""Host time of an eager MoE layer's fixed work beyond the SwiGLU it replaces (router
projection, softmax, top-k, renormalisation, argsort, bincount, the host copy of the counts,
the loop over the experts, the weighted sum), in dense layers' host time: 0.32-0.36 in the
same five runs."""


def touched_experts(spec: ModelSpec, rows: Num, tokens: Num) -> Num:
    """Expected distinct routed experts one MoE layer of `spec` reads for a step of `rows`
    sequences and `tokens` tokens in all, under its routing statistics (`expected_experts`)."""
    return expected_experts(spec.n_experts, spec.experts_per_token, tokens, spec.routing_skew,
                            rows, spec.routing_row_exponent)


def moe_host_layers(spec: ModelSpec, rows: Num, tokens: Num, ep: int = 1) -> Num:
    """Dense layers' worth of host issue time that the MoE layers of an eager forward of
    `rows` sequences, `tokens` tokens in all, add per device: each layer's router
    (`ROUTER_HOST_LAYERS`) and its share of the expected touched experts (`EXPERT_HOST_LAYERS`
    each). A runtime that replays a captured graph or runs fused MoE kernels issues none of
    it."""
    touched = touched_experts(spec, rows, tokens) / ep
    return moe_layers(spec) * (ROUTER_HOST_LAYERS + EXPERT_HOST_LAYERS * touched)


def moe_layers(spec: ModelSpec) -> int:
    """Layers whose feed-forward is a mixture of experts."""
    return spec.n_layers - spec.first_dense_layers if spec.moe else 0


def moe_params(spec: ModelSpec) -> tuple[int, int]:
    """(quantisable linear, 16-bit other) parameters of one MoE feed-forward: every routed
    expert, the shared experts; the router and the norm."""
    d = spec.d_model
    return 3 * d * (spec.n_experts * spec.d_expert + spec.d_shared), d * spec.n_experts + d


def mla_params(spec: ModelSpec) -> tuple[int, int]:
    """(quantisable linear, 16-bit other) parameters of one latent-attention block: the q
    path, the kv down- and up-projections and o_proj; the norms."""
    d, h, c, q = spec.d_model, spec.n_heads, spec.kv_lora_rank, spec.q_lora_rank
    qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
    q_path = (d * q + q * h * qk) if q else d * h * qk
    linear = q_path + d * (c + spec.qk_rope_head_dim) + c * h * (
        spec.qk_nope_head_dim + spec.v_head_dim) + h * spec.v_head_dim * d
    return linear, d + q + c


def mla_kv_row(spec: ModelSpec) -> int:
    """Cache bytes of one token in one latent-attention layer: its latent and rope key, shared
    by all heads."""
    return (spec.kv_lora_rank + spec.qk_rope_head_dim) * ACT_BYTES


def _expert_op(op: str, count: int, tokens: Num, pairs: Num, touched: Num, d_in: int,
               d_out: int, bpw: float, quant: bool, reduce_width: int, a2a: Num,
               fmt: Format | None) -> OpCost:
    """One projection of the routed experts: `pairs` (token, expert) pairs of the step's
    `tokens` through the `touched` experts of each of `count` layers (in `fmt` when given);
    the step's tokens are reduced after it, and travel in its all-to-all."""
    return dataclasses.replace(
        linear_op(op, count, pairs, d_in, d_out, bpw, quant, fmt=fmt, matrices=touched),
        reduce_bytes=tokens * reduce_width * ACT_BYTES, a2a_bytes=a2a)


def moe_ops(spec: ModelSpec, count: int, rows: Num, tokens: Num, tp: int, ep: int, bpw: float,
            quant: bool, fmt: Format | None = None,
            expert_fmt: Format | None = None) -> list[OpCost]:
    """Norm, router, shared experts and routed experts of `count` MoE layers for the step's
    `tokens` of `rows` sequences, per device (placement: module docstring); the shared experts
    in `fmt`, the routed ones in `expert_fmt`, the router at 16 bits.

    A device reads the weights of its share of the expected touched experts
    (`touched_experts` / ep: uniform independent routing unless the spec states its routing
    statistics) and runs its share of the
    tokens × k (token, expert) pairs. The MoE output is all-reduced over the tp devices unless
    ep = tp, where the combine all-to-all brings the routed output and only the shared experts'
    is all-reduced. Each all-to-all moves tokens × k × d_model activations, (ep − 1)/ep of them
    off the device (`OpCost.a2a_bytes`).
    """
    d, k = spec.d_model, spec.experts_per_token
    width = spec.d_expert // (tp // ep)
    touched = touched_experts(spec, rows, tokens) / ep
    pairs = tokens * k / ep
    a2a = tokens * k * d * ACT_BYTES * (ep - 1) / ep
    routed_reduce = d if ep < tp or ep == 1 else 0
    out = [norm_op("moe_norm", count, tokens, d),
           linear_op("router", count, tokens, d, spec.n_experts, bpw, False)]
    if spec.d_shared:
        shared = spec.d_shared // tp
        out += [linear_op("shared_gate_up", count, tokens, d, 2 * shared, bpw, quant,
                          fmt=fmt),
                linear_op("shared_down", count, tokens, shared, d, bpw, quant,
                          reduce_width=0 if routed_reduce else d, fmt=fmt)]
    return [
        *out,
        _expert_op("expert_gate_up", count, tokens, pairs, touched, d, 2 * width, bpw, quant,
                   0, a2a, expert_fmt),
        _expert_op("expert_down", count, tokens, pairs, touched, width, d, bpw, quant,
                   routed_reduce, a2a, expert_fmt),
    ]


def mla_ops(spec: ModelSpec, count: int, batch: Num, new: Num, tp: int, bpw: float,
            quant: bool, fmt: Format | None = None) -> list[OpCost]:
    """Norm and projections of `count` latent-attention layers, per device (the score op is
    `mla_attention`): the q path (through the q_lora_rank bottleneck when there is one), the
    kv down-projection to latent + rope key (both replicated under tp, as vLLM does), the kv
    up-projection absorbed into the query and the output (W_UK turns each head's nope query
    into a latent one, W_UV each head's latent output into its values: the same FLOPs and
    weights as kv_b_proj on the step's tokens), and o_proj; the projections in `fmt`."""
    d, c, rope, nope = spec.d_model, spec.kv_lora_rank, spec.qk_rope_head_dim, \
        spec.qk_nope_head_dim
    heads, q_rank = spec.n_heads // tp, spec.q_lora_rank
    tokens = batch * new
    out = [norm_op("attn_norm", count, tokens, d)]
    if q_rank:
        out += [linear_op("q_a_proj", count, tokens, d, q_rank, bpw, quant, fmt=fmt),
                norm_op("q_a_norm", count, tokens, q_rank),
                linear_op("q_b_proj", count, tokens, q_rank, heads * (nope + rope), bpw,
                          quant, fmt=fmt)]
    else:
        out.append(linear_op("q_proj", count, tokens, d, heads * (nope + rope), bpw, quant,
                             fmt=fmt))
    absorbed = linear_op("kv_b_absorbed", count, tokens, c, heads * (nope + spec.v_head_dim),
                         bpw, quant, fmt=fmt)
    return [
        *out,
        linear_op("kv_a_proj", count, tokens, d, c + rope, bpw, quant, fmt=fmt),
        norm_op("kv_a_norm", count, tokens, c),
        dataclasses.replace(absorbed, act_bytes=count * tokens * heads * (
            nope + 2 * c + spec.v_head_dim) * ACT_BYTES),
        linear_op("o_proj", count, tokens, heads * spec.v_head_dim, d, bpw, quant,
                  reduce_width=d, fmt=fmt),
    ]


def mla_attention(spec: ModelSpec, op: str, count: int, batch: Num, new: Num, context: Num,
                  keys: Num, tp: int, kv_bits: int = 16) -> OpCost:
    """Scores, softmax and weighted sum of `count` latent-attention layers over `keys` keys,
    the cache at `kv_bits` an element.

    Decode and verification (context > 0) run the absorbed form, as vLLM's and SGLang's
    FlashMLA kernels do: per head, the scores span latent + rope dimensions and the output the
    latent, heads × new × keys × (2(kv_lora_rank + rope) + 2·kv_lora_rank) FLOPs over a cache of
    one latent + rope key per token. A prompt (context 0) runs the decompressed form engines
    use for prefill: per head, keys of nope + rope and values of v_head_dim.
    """
    c, rope = spec.kv_lora_rank, spec.qk_rope_head_dim
    heads = spec.n_heads // tp
    tokens = batch * new
    per_key = np.where(np.asarray(context) == 0,
                       2.0 * (spec.qk_nope_head_dim + rope) + 2.0 * spec.v_head_dim,
                       2.0 * (c + rope) + 2.0 * c)
    return OpCost(op, count,
                  flops=count * batch * heads * new * keys * (per_key + 5.0),
                  weight_bytes=0.0,
                  act_bytes=count * tokens * heads * (2 * c + rope) * ACT_BYTES,
                  kv_bytes=count * batch * (keys + new) * mla_kv_row(spec) * kv_bits / 16,
                  tokens=tokens,
                  kind="attention")
