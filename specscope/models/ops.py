"""Per-operator FLOPs and bytes of one forward pass: the inputs of the roofline cost model.

A forward runs `batch` sequences × `new_tokens` new tokens each, with `context_len` tokens of
each sequence already in the KV cache (or summarised by the SSM state). Weights are read once per
forward at `weight_bits` (16, 8 or 4; 4-bit adds one 16-bit scale and zero per `group_size`
weights, 8-bit one scale per output channel, which is negligible); activations, the KV cache and
the SSM/conv state are 16-bit. The embedding table and norm, conv and SSM scalar parameters stay
16-bit; a tied lm_head reads the 16-bit embedding.

Numbers are per device under tensor parallelism `tp`: attention heads, MLP width and SSM heads
are split `tp` ways (KV heads and SSM groups are replicated when there are fewer than `tp`), the
lm_head is split over the vocabulary when `shard_lm_head`. Every numeric argument may be a numpy
array (broadcast together), so t(n) for n = 1..768 is one call.

Mixture-of-experts feed-forwards (their expert reads growing with the step's tokens, expert
parallelism `ep`) and multi-head latent attention are `moe_ops`' rows. Sliding-window layers
attend to, and read the KV of, at most `sliding_window` + new keys. FP8 and NVFP4 linear
layers and an 8-bit KV cache: `specscope.models.precision`. A draft module's input projection
(`ModelSpec.fused_inputs`: EAGLE's fc, an MTP module's eh_proj) is one more 16-bit row, whole
on every device.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from specscope.errors import InputError
from specscope.models.moe_ops import (
    mla_attention,
    mla_kv_row,
    mla_ops,
    mla_params,
    moe_layers,
    moe_params,
)
from specscope.models.moe_ops import moe_ops as moe_layer_ops
from specscope.models.op_cost import (
    ACT_BYTES,
    OUTSIDE_LAYERS,
    SCALED_FIELDS,
    WEIGHT_BITS,
    Num,
    OpCost,
    bytes_per_weight,
    layer_ops,
    linear_op,
    norm_op,
    scale_op,
)
from specscope.models.precision import Format, check_kv_bits, formats
from specscope.models.spec import ModelSpec

SSD_CHUNK = 256
SSM_VERIFY = ("stree", "naive")
PROMPT_LOGITS = ("all", "last")
"""Where a prompt's forward (context 0) computes logits: at every position, as a model's own
forward does, or at each sequence's last position only, as serving engines do (they sample
there alone)."""

def _n_layers(spec: ModelSpec) -> tuple[int, int, int]:
    """(attention layers, Mamba-2 layers, layers with a dense MLP)."""
    kinds = spec.layer_kinds
    n_attn = kinds.count("attn")
    n_mlp = spec.n_layers - moe_layers(spec) if spec.d_ff > 0 else 0
    return n_attn, len(kinds) - n_attn, n_mlp


def _n_sliding(spec: ModelSpec) -> int:
    """Attention layers that attend to the last `sliding_window` tokens only."""
    kinds = spec.layer_kinds
    return sum(kinds[i] == "attn" for i in set(spec.sliding_layers))


def _conv_dim(spec: ModelSpec, groups: int) -> int:
    """Channels of the Mamba-2 causal conv: x, B and C."""
    return spec.ssm_heads * spec.ssm_head_dim + 2 * groups * spec.d_state


def param_count(spec: ModelSpec) -> int:
    """Every parameter of the model (a count): all routed experts of an MoE, not only those a
    token uses (`active_param_count`); multi-token-prediction modules (`mtp_layers`) are a
    drafter and left out, so DeepSeek-V3 counts its 671B main model, not the 685B on disk."""
    d, v = spec.d_model, spec.vocab_size
    n_attn, n_ssm, n_mlp = _n_layers(spec)
    heads = (spec.n_heads + 2 * spec.n_kv_heads) * spec.head_dim
    attn = sum(mla_params(spec)) if spec.mla else (
        d * heads + spec.n_heads * spec.head_dim * d + d)
    h, p, g, n = spec.ssm_heads, spec.ssm_head_dim, spec.ssm_groups, spec.d_state
    conv = _conv_dim(spec, g)
    ssm = d * (2 * h * p + 2 * g * n + h) + conv * (spec.conv_kernel + 1) + 3 * h + h * p
    ssm += h * p * d + d
    mlp = 3 * d * spec.d_ff + d
    embed = v * d * (1 if spec.tie_embeddings else 2)
    moe = moe_layers(spec) * sum(moe_params(spec))
    fused = spec.fused_inputs * d * d
    return n_attn * attn + n_ssm * ssm + n_mlp * mlp + moe + embed + fused + d


def active_param_count(spec: ModelSpec) -> int:
    """Parameters one token uses: `param_count` less the routed experts it is not sent to
    (k routed experts, the shared experts, router, attention, embeddings and the rest)."""
    unused = spec.n_experts - spec.experts_per_token
    return param_count(spec) - moe_layers(spec) * unused * 3 * spec.d_model * \
        spec.d_expert


def weight_bytes(spec: ModelSpec, weight_bits: int = 16, group_size: int = 128,
                 precision: str = "bf16", expert_precision: str | None = None) -> float:
    """Bytes of all weights stored on one device at `weight_bits` (tp = 1), or with the linear
    layers and routed experts at `precision` and `expert_precision` (NVFP4's 4-byte scale per
    matrix left out); an MoE's router stays 16-bit, and so does the lm_head at a precision."""
    bpw = bytes_per_weight(weight_bits, group_size)
    d, v = spec.d_model, spec.vocab_size
    n_attn, n_ssm, n_mlp = _n_layers(spec)
    h, p, g, n = spec.ssm_heads, spec.ssm_head_dim, spec.ssm_groups, spec.d_state
    if spec.mla:
        linear = n_attn * mla_params(spec)[0]
    else:
        linear = n_attn * d * (2 * spec.n_heads + 2 * spec.n_kv_heads) * spec.head_dim
    linear += n_ssm * (d * (2 * h * p + 2 * g * n + h) + h * p * d) + n_mlp * 3 * d * spec.d_ff
    linear += moe_layers(spec) * moe_params(spec)[0]
    if not spec.tie_embeddings:
        linear += v * d
    other = param_count(spec) - linear
    dense, experts = formats(spec, precision, expert_precision, weight_bits)
    if dense is None and experts is None:
        return linear * bpw + other * ACT_BYTES
    routed = moe_layers(spec) * 3 * d * spec.n_experts * spec.d_expert
    head = 0 if spec.tie_embeddings else v * d
    return (linear - routed - head) * (dense.weight_bytes if dense else ACT_BYTES) + routed * (
        experts.weight_bytes if experts else ACT_BYTES) + (other + head) * ACT_BYTES


def _kv_row(spec: ModelSpec, tp: int = 1, kv_bits: int = 16) -> float:
    """KV-cache bytes of one token in one attention layer on one device: keys and values of
    its KV heads, or latent attention's latent and rope key (replicated, not split, by tp)."""
    if spec.mla:
        return mla_kv_row(spec) * kv_bits / 16
    return 2 * -(-spec.n_kv_heads // tp) * spec.head_dim * ACT_BYTES * kv_bits / 16


def kv_bytes_per_token(spec: ModelSpec, kv_bits: int = 16) -> float:
    """KV-cache bytes one token adds across the full-attention layers (one sequence, tp = 1):
    keys and values per KV head, or latent attention's latent and rope key. A sliding-window
    layer's cache stops growing at `sliding_window` tokens, so it is not counted here;
    `kv_cache_bytes` holds both."""
    return (_n_layers(spec)[0] - _n_sliding(spec)) * _kv_row(spec, kv_bits=kv_bits)


def kv_cache_bytes(spec: ModelSpec, tokens: int, tp: int = 1, kv_bits: int = 16) -> float:
    """KV-cache bytes of one sequence of `tokens` tokens over all `tp` devices: the full
    layers' per-token bytes, each sliding-window layer's at most `sliding_window` tokens; a
    latent-attention cache is held whole on every device (vLLM replicates it under tp)."""
    sliding = _n_sliding(spec) * _kv_row(spec, kv_bits=kv_bits) * min(tokens, spec.sliding_window)
    return (tokens * kv_bytes_per_token(spec, kv_bits) + sliding) * (tp if spec.mla else 1)


def ssm_state_bytes(spec: ModelSpec) -> float:
    """SSM plus conv state bytes of one sequence across all Mamba-2 layers (tp = 1)."""
    per_layer = spec.ssm_heads * spec.ssm_head_dim * spec.d_state
    per_layer += _conv_dim(spec, spec.ssm_groups) * (spec.conv_kernel - 1)
    return _n_layers(spec)[1] * per_layer * ACT_BYTES


def check_tp(spec: ModelSpec, tp: int, ep: int = 1) -> None:
    """Raise `InputError` unless `tp` splits the model's heads and widths evenly (an MoE's
    expert width over the tp/ep devices of an expert group)."""
    if tp < 1:
        raise InputError(f"tensor-parallel degree tp={tp} must be at least 1")
    n_attn, n_ssm, _ = _n_layers(spec)
    sizes = {"d_ff": spec.d_ff}
    if n_attn:
        sizes["n_heads"] = spec.n_heads
    if n_ssm:
        sizes["ssm_heads"] = spec.ssm_heads
    if spec.moe:
        sizes["d_shared"] = spec.d_shared
    for what, size in sizes.items():
        if size % tp:
            raise InputError(f"tp={tp} does not divide {what}={size} of {spec.name}")
    check_ep(spec, ep, tp)
    if spec.moe and spec.d_expert % (tp // ep):
        raise InputError(f"tp={tp} over ep={ep} expert groups does not divide "
                         f"d_expert={spec.d_expert} of {spec.name}")


def check_ep(spec: ModelSpec, ep: int, tp: int) -> None:
    """Raise `InputError` unless `ep` spreads the model's experts evenly over expert groups of
    its tp devices (module `moe_ops`)."""
    if ep < 1:
        raise InputError(f"--ep {ep} must be at least 1")
    if ep > 1 and not spec.moe:
        raise InputError(f"--ep {ep}: {spec.name} is dense, it has no experts to spread")
    if spec.n_experts % ep or tp % ep:
        raise InputError(f"--ep {ep} must divide both the {spec.n_experts} experts of "
                         f"{spec.name} and tp={tp} (expert groups are made of its tp devices)")


def _attention_ops(spec: ModelSpec, count: int, batch: Num, new: Num, context: Num, tp: int,
                   bpw: float, quant: bool, fmt: Format | None, kv_bits: int) -> list[OpCost]:
    """Norm, q/k/v projection, scores+softmax+AV, output projection (latent attention's rows
    come from `moe_ops`). Full layers attend to context + new keys; sliding-window layers to at
    most sliding_window + new, and read that much KV."""
    d, hd = spec.d_model, spec.head_dim
    heads, kv = spec.n_heads // tp, -(-spec.n_kv_heads // tp)
    tokens = batch * new
    n_sliding = _n_sliding(spec)
    scores = [("attention", count - n_sliding, context + new),
              ("sliding_attention", n_sliding,
               np.minimum(context + new, spec.sliding_window + new))]
    if spec.mla:
        *projections, o_proj = mla_ops(spec, count, batch, new, tp, bpw, quant, fmt)
        return [*projections, *(mla_attention(spec, op, n, batch, new, context, k, tp,
                                              kv_bits) for op, n, k in scores if n),
                o_proj]
    kv_row = _kv_row(spec, tp, kv_bits)
    return [
        norm_op("attn_norm", count, tokens, d),
        linear_op("qkv_proj", count, tokens, d, (heads + 2 * kv) * hd, bpw, quant, fmt=fmt),
        *(OpCost(op, n,
                 flops=n * batch * heads * new * keys * (4.0 * hd + 5.0),
                 weight_bytes=0.0,
                 act_bytes=n * 2.0 * tokens * heads * hd * ACT_BYTES,
                 kv_bytes=n * batch * (keys + new) * kv_row, tokens=tokens, kind="attention")
          for op, n, keys in scores if n),
        linear_op("o_proj", count, tokens, heads * hd, d, bpw, quant, reduce_width=d, fmt=fmt),
    ]


def _ssm_ops(spec: ModelSpec, count: int, seqs: Num, seq_len: Num, chunk: Num, tp: int,
             bpw: float, quant: bool, fmt: Format | None) -> list[OpCost]:
    """Norm, in_proj, causal conv, SSD (chunk-quadratic + state passing), gated norm, out_proj.

    `seqs` sequences of `seq_len` tokens each; the SSD's quadratic work spans `chunk` tokens.
    """
    d, n, k = spec.d_model, spec.d_state, spec.conv_kernel
    h, p = spec.ssm_heads // tp, spec.ssm_head_dim
    g = -(-spec.ssm_groups // tp)
    inner = h * p
    conv = inner + 2 * g * n
    tokens = seqs * seq_len
    state = h * p * n * ACT_BYTES
    scan_flops = tokens * (chunk * (2.0 * g * n + 2.0 * inner + h) + 4.0 * inner * n)
    return [
        norm_op("ssm_norm", count, tokens, d),
        linear_op("ssm_in_proj", count, tokens, d, 2 * inner + 2 * g * n + h, bpw, quant, 0, fmt),
        OpCost("ssm_conv", count, flops=count * 2.0 * tokens * conv * k,
               weight_bytes=count * conv * (k + 1) * ACT_BYTES,
               act_bytes=count * 2.0 * tokens * conv * ACT_BYTES,
               kv_bytes=count * 2.0 * seqs * conv * (k - 1) * ACT_BYTES, tokens=tokens),
        OpCost("ssm_scan", count, flops=count * scan_flops,
               weight_bytes=count * 3 * h * ACT_BYTES,
               act_bytes=count * tokens * (2 * inner + 2 * g * n + h) * ACT_BYTES,
               kv_bytes=count * 2.0 * seqs * state, tokens=tokens),
        norm_op("ssm_gate_norm", count, tokens, inner),
        linear_op("ssm_out_proj", count, tokens, inner, d, bpw, quant, d, fmt),
    ]


def forward_ops(
    spec: ModelSpec,
    batch: Num,
    new_tokens: Num,
    context_len: Num,
    *,
    weight_bits: int = 16,
    group_size: int = 128,
    tp: int = 1,
    ep: int = 1,
    shard_lm_head: bool = True,
    quant_lm_head: bool = True,
    ssm_verify: str | None = None,
    depth: Num | None = None,
    leaves: Num | None = None,
    prompt_logits: str = "all",
    precision: str = "bf16",
    expert_precision: str | None = None,
    kv_bits: int = 16,
) -> list[OpCost]:
    """The operator table of one forward, per device (see the module docstring).

    `quant_lm_head` False keeps an untied lm_head at 16 bits under 8/4-bit weights (GPTQ, AWQ
    and Marlin checkpoints do; gpt-fast quantises it). `ssm_verify` None: the new tokens are a
    chain (SSD chunks of 256); "stree": one tree-masked SSD pass over all new tokens; "naive":
    every root-to-leaf path unrolled, `leaves` sequences of `depth` + 1 tokens per batch item,
    plus one state copy per leaf. `prompt_logits` (`PROMPT_LOGITS`): "last" runs a prompt's
    lm_head on one token per sequence. `precision`, `expert_precision` and `kv_bits`: the
    formats of the linear layers, routed experts and KV cache (`specscope.models.precision`).
    """
    bpw = bytes_per_weight(weight_bits, group_size)
    fmt, expert_fmt = formats(spec, precision, expert_precision, weight_bits)
    check_kv_bits(kv_bits)
    check_tp(spec, tp, ep)
    if ssm_verify not in (None, *SSM_VERIFY):
        raise InputError(f"ssm_verify {ssm_verify!r} is not one of {list(SSM_VERIFY)}")
    if prompt_logits not in PROMPT_LOGITS:
        raise InputError(f"prompt logits {prompt_logits!r} is not one of {list(PROMPT_LOGITS)}")
    quant = weight_bits < 16
    batch, new, context = (np.asarray(x, dtype=float) for x in (batch, new_tokens, context_len))
    n_attn, n_ssm, n_mlp = _n_layers(spec)
    d, v = spec.d_model, spec.vocab_size
    tokens = batch * new
    ops = [OpCost("embedding", 1, flops=0.0,
                  weight_bytes=np.minimum(tokens, v) * d * ACT_BYTES,
                  act_bytes=tokens * d * ACT_BYTES, tokens=tokens)]
    if n_attn:
        ops += _attention_ops(spec, n_attn, batch, new, context, tp, bpw, quant, fmt, kv_bits)
    if n_ssm:
        seqs, seq_len, chunk = batch, new, np.minimum(new, SSD_CHUNK)
        if ssm_verify == "stree":
            chunk = new
        elif ssm_verify == "naive":
            if depth is None or leaves is None:
                raise InputError("naive SSM verification needs the tree's depth and leaves")
            seqs = batch * np.asarray(leaves, dtype=float)
            seq_len = chunk = np.asarray(depth, dtype=float) + 1
        ops += _ssm_ops(spec, n_ssm, seqs, seq_len, chunk, tp, bpw, quant, fmt)
        if ssm_verify == "naive":
            per_seq = ssm_state_bytes(spec) / n_ssm / tp
            ops.append(OpCost("ssm_state_copy", n_ssm, flops=0.0, weight_bytes=0.0,
                              act_bytes=0.0, kv_bytes=n_ssm * 2.0 * seqs * per_seq))
    if n_mlp:
        ff = spec.d_ff // tp
        ops += [
            norm_op("mlp_norm", n_mlp, tokens, d),
            linear_op("mlp_gate_up", n_mlp, tokens, d, 2 * ff, bpw, quant, fmt=fmt),
            linear_op("mlp_down", n_mlp, tokens, ff, d, bpw, quant, reduce_width=d, fmt=fmt),
        ]
    if spec.moe:
        ops += moe_layer_ops(spec, moe_layers(spec), batch, tokens, tp, ep, bpw, quant,
                             fmt, expert_fmt)
    vocab = -(-v // tp) if shard_lm_head else v
    logits = np.where((context == 0) & (prompt_logits == "last"), batch, tokens)
    ops += [
        norm_op("final_norm", 1, tokens, d),
        linear_op("lm_head", 1, logits, d, vocab, bpw,
                quant and quant_lm_head and not spec.tie_embeddings),
    ]
    if spec.fused_inputs:
        ops.append(linear_op("input_proj", 1, tokens, spec.fused_inputs * d, d, ACT_BYTES, False))
    return ops


DENSE_LAYER_OPS = 7
"""Operator rows of the dense Transformer layer a runtime's per-layer device term was measured
on: two norms, the qkv and output projections, attention, the MLP's gate-up and down."""


@cache
def layer_equivalents(model: ModelSpec) -> float:
    """Layers' worth of the per-layer device term (the gaps between a layer's kernels) that a
    forward of `model` pays: one per layer of a dense Transformer, Mamba or hybrid model, whose
    layers the runtimes were measured on; a mixture-of-experts or latent-attention layer runs
    more kernels (router, shared and routed experts; latent down- and up-projections and their
    norms), so it pays the term per operator row over the dense layer's `DENSE_LAYER_OPS`:
    Qwen3-MoE's layer 8/7, DeepSeek-V3's 15/7. Not fitted: the rule counts rows, and the
    published MoE rows (examples/serving) are checked after it."""
    if not (model.moe or model.mla):
        return float(model.n_layers)
    rows = sum(op.count for op in layer_ops(forward_ops(model, 1, 1, 1)))
    return rows / DENSE_LAYER_OPS


__all__ = ["ACT_BYTES", "OUTSIDE_LAYERS", "SCALED_FIELDS", "WEIGHT_BITS", "Num", "OpCost",
           "bytes_per_weight", "layer_ops", "linear_op", "norm_op", "scale_op"]
"""`op_cost`'s names, which importers of ops have always found here."""
