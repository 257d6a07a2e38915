"""`ModelSpec`: the architecture of a model, enough to price it and to build it in torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """One model's architecture.

    `arch` is "transformer" (Llama-style: RMSNorm, RoPE, SwiGLU, grouped-query attention),
    "ssm" (Mamba-2: scalar decay per head, short causal conv, SSD; no MLP unless d_ff > 0) or
    "hybrid" (layers listed in `attn_layers` are attention, the others Mamba-2 mixers; every
    layer has a SwiGLU MLP when d_ff > 0).
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

    @property
    def d_inner(self) -> int:
        """Mamba-2 inner width: SSM heads × head dim."""
        return self.ssm_heads * self.ssm_head_dim

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """"attn" or "ssm" for every layer."""
        if self.arch == "transformer":
            return ("attn",) * self.n_layers
        if self.arch == "ssm":
            return ("ssm",) * self.n_layers
        attn = set(self.attn_layers)
        return tuple("attn" if i in attn else "ssm" for i in range(self.n_layers))
