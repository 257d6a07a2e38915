"""`ModelSpec`: the architecture of a model, enough to price it and to build it in torch; and
`spec_from_table`, which builds a checked spec from a TOML table (the catalogue's or the zoo's)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from specscope.errors import InputError


@dataclass(frozen=True)
class ModelSpec:
    """One model's architecture.

    `arch` is "transformer" (Llama-style: RMSNorm, RoPE, SwiGLU, grouped-query attention),
    "ssm" (Mamba-2: scalar decay per head, short causal conv, SSD; no MLP unless d_ff > 0) or
    "hybrid" (layers listed in `attn_layers` are attention, the others Mamba-2 mixers; every
    layer has a SwiGLU MLP when d_ff > 0).

    A vision-language model names its vision encoder (`vision_encoder`, another catalogue entry,
    "" for a text model); one image at the model's default resolution becomes `image_tokens`
    tokens of the language model (after any projector or patch merger) and costs the encoder a
    forward over `image_patches` tokens.
    """

    name: str
    arch: str
    n_layers: int
    d_model: int
    vocab_size: int
    # attention
    n_heads: int = 0
    n_kv_heads: int = 0
    head_dim: int = 0
    d_ff: int = 0
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    # mixture of experts (n_experts 0: dense). Layers from `first_dense_layers` on replace the
    # SwiGLU MLP (width d_ff, kept by the first dense layers) with `n_experts` routed SwiGLU experts
    # of width `d_expert`, `experts_per_token` of them chosen per token by a linear router, beside
    # always-on shared experts of total width `d_shared` (0: none).
    n_experts: int = 0
    experts_per_token: int = 0
    d_expert: int = 0
    d_shared: int = 0
    first_dense_layers: int = 0
    # the router's measured statistics (`moe_ops.expected_experts`; defaults: uniform,
    # independent tokens): a Zipf skew of expert popularity, and the exponent α by which a
    # sequence's n tokens count as n^α independent draws (its consecutive tokens route alike)
    routing_skew: float = 0.0
    routing_row_exponent: float = 1.0
    # multi-head latent attention (DeepSeek-V2/V3; kv_lora_rank 0: grouped-query attention): the
    # cache holds a `kv_lora_rank` latent plus a `qk_rope_head_dim` rope key per token; queries
    # go through a `q_lora_rank` bottleneck (0: a plain projection); per head, keys are
    # qk_nope_head_dim + qk_rope_head_dim wide and values `v_head_dim`.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # sliding-window attention: the layers in `sliding_layers` attend to the last
    # `sliding_window` tokens only (gpt-oss alternates them with full attention)
    sliding_window: int = 0
    sliding_layers: tuple[int, ...] = ()
    # multi-token-prediction modules shipped with the model (DeepSeek-V3's
    # num_nextn_predict_layers): each one decoder layer drafting with the model's embedding and head
    mtp_layers: int = 0
    # a draft module's input projection (EAGLE's fc, an MTP module's eh_proj): `fused_inputs`
    # d-wide vectors (the token's embedding and the target's hidden state: 2) concatenated and
    # projected to d, 16-bit and replicated on every device; 0: none
    fused_inputs: int = 0
    # Mamba-2
    d_state: int = 0
    ssm_heads: int = 0
    ssm_head_dim: int = 0
    ssm_groups: int = 1
    conv_kernel: int = 4
    attn_layers: tuple[int, ...] = ()
    # deployment
    max_seq_len: int = 4096
    weight_bits: int = 16
    source: str = ""
    # vision
    vision_encoder: str = ""
    image_tokens: int = 0
    image_patches: int = 0

    @property
    def d_inner(self) -> int:
        """Mamba-2 inner width: SSM heads × head dim."""
        return self.ssm_heads * self.ssm_head_dim

    @property
    def moe(self) -> bool:
        """Whether the feed-forward of layers `first_dense_layers` on is a mixture of experts."""
        return self.n_experts > 0

    @property
    def mla(self) -> bool:
        """Whether attention is multi-head latent attention."""
        return self.kv_lora_rank > 0

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """"attn" or "ssm" for every layer."""
        if self.arch == "transformer":
            return ("attn",) * self.n_layers
        if self.arch == "ssm":
            return ("ssm",) * self.n_layers
        attn = set(self.attn_layers)
        return tuple("attn" if i in attn else "ssm" for i in range(self.n_layers))


ARCHS = ("transformer", "ssm", "hybrid")


def spec_from_table(name: str, table: dict[str, Any], where: str) -> ModelSpec:
    """Build and check one `ModelSpec` from a TOML table; `where` names the file for errors."""
    unknown = sorted(set(table) - ({f.name for f in dataclasses.fields(ModelSpec)} - {"name"}))
    if unknown:
        raise InputError(f"{where}: model {name!r} has unknown keys {unknown}")
    fields = dict(table)
    for key in ("attn_layers", "sliding_layers"):
        if key in fields:
            fields[key] = tuple(fields[key])
    try:
        spec = ModelSpec(name=name, **fields)
    except TypeError as exc:
        raise InputError(f"{where}: model {name!r}: {exc}") from None
    _check(spec, where)
    return spec


def _check(spec: ModelSpec, where: str) -> None:
    """Raise `InputError` when a spec is inconsistent (missing sizes for its architecture)."""
    bad = f"{where}: model {spec.name!r}"
    if spec.arch not in ARCHS:
        raise InputError(f"{bad}: arch {spec.arch!r} is not one of {list(ARCHS)}")
    if min(spec.n_layers, spec.d_model, spec.vocab_size) < 1:
        raise InputError(f"{bad}: n_layers, d_model and vocab_size must be positive")
    kinds = spec.layer_kinds
    if "attn" in kinds and min(spec.n_heads, spec.n_kv_heads, spec.head_dim) < 1:
        raise InputError(f"{bad}: attention layers need n_heads, n_kv_heads and head_dim")
    if "attn" in kinds and spec.n_heads % spec.n_kv_heads:
        raise InputError(f"{bad}: n_heads {spec.n_heads} is not a multiple of n_kv_heads")
    if "ssm" in kinds and min(spec.d_state, spec.ssm_heads, spec.ssm_head_dim) < 1:
        raise InputError(f"{bad}: Mamba-2 layers need d_state, ssm_heads and ssm_head_dim")
    if spec.arch == "transformer" and spec.d_ff < 1 and not spec.moe:
        raise InputError(f"{bad}: a transformer needs d_ff (or n_experts)")
    if spec.moe:
        if not 1 <= spec.experts_per_token <= spec.n_experts or spec.d_expert < 1:
            raise InputError(f"{bad}: a mixture of experts needs d_expert >= 1 and "
                             f"1 <= experts_per_token <= n_experts")
        if not 0 <= spec.first_dense_layers <= spec.n_layers or (
                spec.first_dense_layers and spec.d_ff < 1):
            raise InputError(f"{bad}: first_dense_layers must lie in 0..n_layers, and dense "
                             f"layers need d_ff")
    if spec.routing_skew < 0 or not 0 < spec.routing_row_exponent <= 1:
        raise InputError(f"{bad}: routing_skew must be >= 0 and routing_row_exponent in (0, 1]")
    if spec.mla and min(spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim) < 1:
        raise InputError(f"{bad}: latent attention (kv_lora_rank) needs qk_nope_head_dim, "
                         f"qk_rope_head_dim and v_head_dim")
    if not all(0 <= i < spec.n_layers for i in spec.sliding_layers) or (
            spec.sliding_layers and spec.sliding_window < 1):
        raise InputError(f"{bad}: sliding_layers must lie in 0..{spec.n_layers - 1} and need "
                         f"sliding_window >= 1")
    if min(spec.n_experts, spec.d_shared, spec.mtp_layers, spec.q_lora_rank,
           spec.fused_inputs) < 0:
        raise InputError(f"{bad}: expert, shared, MTP, LoRA and fused-input sizes must not be "
                         "negative")
    if spec.arch == "hybrid" and not all(0 <= i < spec.n_layers for i in spec.attn_layers):
        raise InputError(f"{bad}: attn_layers must lie in 0..{spec.n_layers - 1}")
    if spec.weight_bits not in (16, 8, 4):
        raise InputError(f"{bad}: weight_bits {spec.weight_bits} is not 16, 8 or 4")
    if spec.vision_encoder and min(spec.image_tokens, spec.image_patches) < 1:
        raise InputError(f"{bad}: a model with vision_encoder {spec.vision_encoder!r} needs "
                         f"image_tokens and image_patches >= 1")
    if min(spec.image_tokens, spec.image_patches) < 0:
        raise InputError(f"{bad}: image_tokens and image_patches must not be negative")
