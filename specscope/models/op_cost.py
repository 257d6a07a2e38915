"""`OpCost`, one operator's work in a forward, and the operators every layer kind builds from
(a projection, in a number format or not; a norm): what `ops` and `moe_ops` share, below both."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from specscope.errors import InputError
from specscope.models.precision import Format

ACT_BYTES = 2
OUT_BYTES = 2
"""Bytes of a GEMM's output element: 16-bit in every number format."""
WEIGHT_BITS = (16, 8, 4)
Num = float | np.ndarray


OUTSIDE_LAYERS = ("embedding", "final_norm", "lm_head", "input_proj")
"""Operators of a forward that run once, outside its decoder layers."""
SCALED_FIELDS = ("flops", "weight_bytes", "act_bytes", "kv_bytes", "qweights", "reduce_bytes",
                 "a2a_bytes")
"""The work fields of an `OpCost` that grow with how often it runs."""


@dataclass(frozen=True)
class OpCost:
    """One operator summed over the `count` layers that hold it, per device.

    flops: floating-point operations; weight_bytes: weights read; act_bytes: activations read and
    written; kv_bytes: KV cache or SSM/conv state read and written; qweights: weight elements
    dequantised from 8/4 bits (0 at 16 bits); tokens: tokens through the op in one layer;
    reduce_bytes: bytes all-reduced after the op in each layer under tensor parallelism;
    a2a_bytes: bytes the device sends in the op's all-to-all in each layer (expert
    parallelism's dispatch into the routed experts, combine out of them); kind:
    the operator class whose efficiencies a runtime prices it with ("linear", "attention",
    or "other": norms, embedding, SSM conv and scan, state copies); peak: the `peak_flops` key
    its FLOPs run at ("fp8", "fp4" for a low-precision GEMM: `specscope.models.precision`).
    Numeric fields are scalars or arrays that broadcast with the forward's arguments.
    """

    op: str
    count: int
    flops: Num
    weight_bytes: Num
    act_bytes: Num
    kv_bytes: Num = 0.0
    qweights: Num = 0.0
    tokens: Num = 0.0
    reduce_bytes: Num = 0.0
    kind: str = "other"
    a2a_bytes: Num = 0.0
    peak: str = "bf16"

    @property
    def bytes(self) -> Num:
        """Every byte moved to or from device memory."""
        return self.weight_bytes + self.act_bytes + self.kv_bytes


def scale_op(op: OpCost, factor: Num) -> OpCost:
    """`op` run `factor` times as often: every work field scaled (a mechanism running a share
    of the layers, or a block several times)."""
    return dataclasses.replace(op, **{k: getattr(op, k) * factor for k in SCALED_FIELDS})


def layer_ops(ops: list[OpCost]) -> list[OpCost]:
    """The operators of a forward's decoder layers (`OUTSIDE_LAYERS` left out)."""
    return [op for op in ops if op.op not in OUTSIDE_LAYERS]


def bytes_per_weight(weight_bits: int, group_size: int = 128) -> float:
    """Bytes stored per quantisable weight element, scales and zeros included."""
    if weight_bits not in WEIGHT_BITS:
        raise InputError(f"weight bits {weight_bits} is not one of {list(WEIGHT_BITS)}")
    if group_size < 1:
        raise InputError(f"quantisation group size {group_size} must be positive")
    if weight_bits == 4:
        return 0.5 + 2 * ACT_BYTES / group_size
    return weight_bits / 8


def linear_op(op: str, count: int, tokens: Num, d_in: int, d_out: int, bpw: float, quant: bool,
              reduce_width: int = 0, fmt: Format | None = None, matrices: Num = 1) -> OpCost:
    """A projection d_in → d_out applied to `tokens` rows in each of `count` layers (in
    low-precision format `fmt` when given). `matrices` > 1 spreads the rows over that many
    weight matrices, each read once (an MoE's touched experts): its `tokens` field is the
    rows of one matrix's GEMM, which set its efficiency."""
    per_matrix = d_in * d_out
    weights = per_matrix if np.ndim(matrices) == 0 and matrices == 1 else matrices * per_matrix
    return low_precision(OpCost(
        op, count,
        flops=count * 2.0 * tokens * per_matrix,
        weight_bytes=count * weights * (bpw if quant else ACT_BYTES),
        act_bytes=count * tokens * (d_in + d_out) * ACT_BYTES,
        qweights=count * weights if quant else 0.0,
        tokens=tokens if weights is per_matrix else tokens / matrices,
        reduce_bytes=tokens * reduce_width * ACT_BYTES,
        kind="linear",
    ), fmt, tokens, weights, matrices, d_in, d_out)


def low_precision(op: OpCost, fmt: Format | None, rows: Num, weights: Num, matrices: Num,
                  d_in: int, d_out: int) -> OpCost:
    """`op`, the GEMMs of its layers (`rows` input rows through `matrices` d_in × d_out weight
    matrices, `weights` elements, per layer), priced in `fmt`: its weights and inputs at the
    format's bytes, its FLOPs plus the block scales' and run at the format's peak; `op` itself
    when `fmt` is None (bf16)."""
    if fmt is None:
        return op
    return dataclasses.replace(
        op, flops=op.flops * (1 + fmt.scale_flops),
        weight_bytes=op.count * (weights * fmt.weight_bytes + matrices * fmt.tensor_bytes),
        act_bytes=op.count * rows * (d_in * fmt.act_bytes + d_out * OUT_BYTES), peak=fmt.peak)


def norm_op(op: str, count: int, tokens: Num, width: int) -> OpCost:
    """An RMSNorm over `width` channels (gated or not: a few FLOPs per element)."""
    return OpCost(op, count, flops=count * 5.0 * tokens * width,
                  weight_bytes=count * width * ACT_BYTES,
                  act_bytes=count * 2.0 * tokens * width * ACT_BYTES, tokens=tokens)
