"""Number formats of a model's linear layers and KV cache (`--precision`, `--kv-bits`).

"bf16" is the default and prices exactly as before (weights at `weight_bits`, activations and
GEMMs at 16 bits). The low-precision formats quantise weights and the GEMMs' input activations
with block scales and run the GEMMs on the profile's peak for that format:

- "fp8" (DeepSeek-V3's recipe, arXiv:2412.19437 §3.3): weights 1 byte with one fp32 scale per
  128×128 block, read with the weights (1 + 4/128² bytes per weight); input activations 1 byte
  with one fp32 scale per 1×128 group (1 + 4/128 bytes per element); GEMMs at `peak_flops["fp8"]`.
  The scales are applied where the partial sums are promoted to fp32, once per 128-long slice of
  the reduction (§3.3.2: every N_C = 128 elements): one multiply-add per output element per
  slice, 2·M·N·K/128 FLOPs, 1/128 of the GEMM's, counted at the GEMM's peak (`scale_flops`; the
  promotion overlaps the tensor cores' next slice there).
- "nvfp4" (NVIDIA's NVFP4: E2M1 values, one E4M3 scale per 16 elements and one fp32 scale per
  tensor): weights and input activations 0.5 + 1/16 bytes per element, plus 4 bytes per weight
  matrix; GEMMs at `peak_flops["fp4"]`. The block scales are applied inside the block-scaled
  tensor-core instruction, so they add no FLOPs.

GEMM outputs stay 16-bit; the pass that quantises each GEMM's input (fused into the preceding
norm or activation by the engines) is left out, as the int8 activation path leaves it out.
Attention's scores and values, the router, the embedding, norms and the lm_head stay 16-bit
(FP8 and NVFP4 checkpoints keep the lm_head in bf16). `precision` applies to every other linear
layer (attention projections, dense MLPs, shared experts, SSM projections); `expert_precision`
to the routed experts alone (None: as `precision`), so a checkpoint with NVFP4 experts and the
rest in FP8 or bf16 can be priced. `kv_bits` 8 stores and reads the KV cache at 1 byte an
element (FP8 KV cache; its per-tensor scales are left out).
"""

from __future__ import annotations

from dataclasses import dataclass

from specscope.errors import InputError
from specscope.models.spec import ModelSpec

KV_BITS = (16, 8)


@dataclass(frozen=True)
class Format:
    """How one component's GEMMs store their operands and where they run.

    peak: the `peak_flops` key its GEMMs run at; weight_bytes / act_bytes: bytes per weight
    element and per input activation element, block scales included; tensor_bytes: bytes per
    weight matrix (a per-tensor scale); scale_flops: FLOPs of applying the block scales per GEMM
    FLOP.
    """

    name: str
    peak: str
    weight_bytes: float
    act_bytes: float
    tensor_bytes: float = 0.0
    scale_flops: float = 0.0


FORMATS: dict[str, Format] = {
    "fp8": Format("fp8", "fp8", 1 + 4 / (128 * 128), 1 + 4 / 128, scale_flops=1 / 128),
    "nvfp4": Format("nvfp4", "fp4", 0.5 + 1 / 16, 0.5 + 1 / 16, tensor_bytes=4.0),
}
"""The low-precision formats by name (module docstring); "bf16" is none of them."""
PRECISIONS = ("bf16", *FORMATS)


def formats(spec: ModelSpec, precision: str = "bf16", expert_precision: str | None = None,
            weight_bits: int = 16) -> tuple[Format | None, Format | None]:
    """(format of the linear layers, format of the routed experts) for `precision` and
    `expert_precision`; None where a component stays at "bf16" (today's pricing, weights at
    `weight_bits`). A low precision with weight-only quantisation (`weight_bits` < 16) and
    `expert_precision` on a dense model are refused."""
    for what, name in (("--precision", precision), ("--expert-precision", expert_precision)):
        if name is not None and name not in PRECISIONS:
            raise InputError(f"{what} {name!r} must be one of {', '.join(PRECISIONS)}")
    if expert_precision is not None and not spec.moe:
        raise InputError(f"--expert-precision {expert_precision}: {spec.name} is dense, it has "
                         "no routed experts (set --precision alone)")
    experts = precision if expert_precision is None else expert_precision
    if weight_bits < 16 and {precision, experts} != {"bf16"}:
        raise InputError(f"--precision {precision} (experts {experts}) with {weight_bits}-bit "
                         "weights: weight-only quantisation and a low precision are two "
                         "formats for the same weights; state one")
    return FORMATS.get(precision), FORMATS.get(experts)


def check_kv_bits(kv_bits: int) -> None:
    """Refuse a KV-cache width other than 16 or 8 bits."""
    if kv_bits not in KV_BITS:
        raise InputError(f"--kv-bits {kv_bits} must be 16 or 8")
