"""`CostModel`: seconds per forward and per tree verification on a hardware profile and runtime.

Per operator, the device time combines memory time (bytes over bandwidth × the efficiency of its
operator class) and compute time (FLOPs over peak × efficiency) as the runtime's `blend` says
(`runtime.py`); the device adds a fixed per-step and per-layer time, the dequantisation of 8/4-bit
weights (seconds per weight element, once per tile of tokens) and, under tensor parallelism, one
ring all-reduce after every row-parallel projection (latency + 2(k−1)/k × bytes / link
bandwidth) and, under expert parallelism `ep`, an MoE layer's dispatch and combine all-to-alls
(each latency + the bytes a device sends / link bandwidth). The host needs its own time to
issue the forward (the runtime's `host_*` terms): on a GPU the two overlap and the step takes
the longer, on a CPU they add; a step of several sequences adds each further sequence's host
work (`batch_host_time`), an eager MoE its routers' and touched experts' (`moe_host_time`).
`roofline_terms` gives the forward as terms that add up to it (what `specscope cost` prints:
`cost_report.py`).

Verification attention is priced as it runs: `split` reads the committed prefix once without a
mask and the tree block under its (n, n) mask; `dense` (one (n, prefix + n) additive mask, as
some engines and the shared H100 rows do) reads the prefix through the masked multi-query kernel
once n ≥ 2; `masked` runs prefix and tree through one flash kernel under a bit-packed
(n, prefix + n) mask, as SGLang's tree verification on FlashInfer does, `CUSTOM_MASK_SLOWDOWN`
times the unmasked flash kernel's time once n ≥ 2. A forward with context 0 is a prompt
(prefill): its GEMMs and attention run at the runtime's `prefill_compute_eff`, and a flash
(split or masked) causal prompt skips the masked half of its attention and runs it at the flash
kernel's `attn_compute_eff` (`prefill_attn_compute_eff` is the dense-mask prompt's).

When the profile holds a measured t(n) table for this model, batch, weight bits, tp and runtime,
measured points win (linear interpolation in n, scaled by the formula's ratio for a different
context), and beyond the table the formula is scaled to meet its nearest measured point.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from specscope.errors import InputError
from specscope.hw_profiles.profile import HardwareProfile
from specscope.hw_profiles.runtime import RuntimeParams
from specscope.models.moe_ops import moe_host_layers
from specscope.models.ops import (
    ACT_BYTES,
    SSM_VERIFY,
    OpCost,
    bytes_per_weight,
    check_tp,
    forward_ops,
    kv_cache_bytes,
    layer_equivalents,
    ssm_state_bytes,
    weight_bytes,
)
from specscope.models.precision import check_kv_bits, formats
from specscope.models.spec import ModelSpec

Num = float | np.ndarray
TREE_ATTENTION = ("split", "dense", "masked")
"""How verification attention reads the prefix (see the module docstring)."""
CUSTOM_MASK_SLOWDOWN = 2.0
"""A flash attention kernel under a bit-packed custom mask over its time without one:
flashinfer-ai/flashinfer#724 measured the bit-packed mask kernel "about twice as slow" as the
causal one, and its maintainer gives the cause (the kernel's reads of the mask are not
coalesced); with a custom mask FlashInfer also runs its FA2 kernels on Hopper, not FA3
(flashinfer/utils.py, is_fa3_backend_supported). One measurement, applied at every length."""


@dataclass(frozen=True)
class StepCost:
    """A forward's time in seconds and where it came from ("measured" or "roofline").

    Both are scalars for scalar inputs and arrays shaped like the broadcast arguments otherwise.
    """

    time_s: Num
    source: str | np.ndarray


def _scalar_or_array(x: np.ndarray) -> Num:
    """A 0-d array as a Python float, anything else unchanged."""
    return float(x) if np.ndim(x) == 0 else x


def _check_counts(**values: Num) -> None:
    """Raise `InputError` naming the first argument below its minimum (batch ≥ 1 etc.)."""
    minimum = {"batch": 1, "new_tokens": 1, "tree_size": 1, "leaves": 1}
    for name, value in values.items():
        if np.any(np.asarray(value) < minimum.get(name, 0)):
            raise InputError(f"{name}={value} must be at least {minimum.get(name, 0)}")


class CostModel:
    """Step times of one model on one profile and runtime, at `weight_bits` (default: the
    spec's), `tp` and `ep` (an MoE's experts spread over `ep` groups of its tp devices:
    `specscope.models.moe_ops`).

    `runtime` defaults to the profile's `default_runtime`; `group_size` is the 4-bit quantisation
    group (one 16-bit scale and zero per group); `tree_attention` is "split", "dense" or
    "masked" (module docstring).
    `act_bits` 8 runs the projections on the integer tensor cores (W8A8, W4A8: the profile's
    int8 peak; 8-bit weights then need no dequantisation, 4-bit ones still unpack at the int4
    rate; the per-token activation quantisation is an elementwise pass, left out).
    `quant_lm_head` False keeps the lm_head at 16 bits (GPTQ/Marlin checkpoints).
    `prompt_logits` "last" computes a prompt's logits at each sequence's last position only, as
    serving engines do (`specscope.models.ops.PROMPT_LOGITS`).
    `stages` splits the layers over that many devices in sequence (pipeline placement, as
    `device_map` places a model too big for one): a forward runs the stages one after another
    (the bubble: no overlap, at any batch) and hands the hidden states over the interconnect
    between them, each hop an all-reduce's fixed latency plus the activations over a link.
    `offload` is the fraction of the weights kept in host memory and streamed to the device
    over its host link (`host_link_gbs`) in every forward, as offloading engines (FlexGen,
    Sequoia's and SpecInfer's offloading runs) do; with `offload_overlap` the stream runs under
    the forward's compute (layer by layer, prefetching the next), so the device takes the
    longer of the two, else they add.
    `precision` ("bf16", "fp8", "nvfp4") is the format of the linear layers and
    `expert_precision` (None: as `precision`) that of an MoE's routed experts; `kv_bits` 8
    stores and reads the KV cache at 1 byte (`specscope.models.precision`). A low-precision
    GEMM runs at the profile's fp8 or fp4 peak under the runtime's linear efficiencies;
    measured tables (bf16 runs) are not used then.
    """

    def __init__(self, hw: HardwareProfile, model: ModelSpec, weight_bits: int | None = None,
                 tp: int = 1, group_size: int = 128, runtime: str | None = None,
                 tree_attention: str = "split", act_bits: int = 16,
                 quant_lm_head: bool = True, offload: float = 0.0,
                 offload_overlap: bool = True, stages: int = 1,
                 prompt_logits: str = "all", ep: int = 1, *, precision: str = "bf16",
                 expert_precision: str | None = None, kv_bits: int = 16) -> None:
        bits = model.weight_bits if weight_bits is None else weight_bits
        if not 1 <= stages <= model.n_layers:
            raise InputError(f"--stages {stages}: must lie in 1..{model.n_layers} (the layers of "
                             f"{model.name})")
        bytes_per_weight(bits, group_size)
        if act_bits not in (16, 8):
            raise InputError(f"activation bits {act_bits} must be 16 or 8")
        if act_bits == 8 and hw.peak_flops.get("int8", 0.0) <= 0:
            why = hw.assumed.get("compute.int8_tops", "")
            raise InputError(f"profile {hw.name} has no int8 peak for 8-bit activations"
                             + (f" ([compute] int8_tops {why})" if why else ""))
        check_tp(model, tp, ep)
        self._check_precision(hw, model, bits, act_bits, precision, expert_precision, kv_bits)
        self.precision, self.expert_precision = precision, expert_precision
        self.kv_bits = kv_bits
        if tp > hw.max_tp:
            raise InputError(f"tp={tp} exceeds the {hw.max_tp} devices profile {hw.name} links")
        if tree_attention not in TREE_ATTENTION:
            raise InputError(f"--tree-attention must be one of {', '.join(TREE_ATTENTION)}, "
                             f"got {tree_attention!r}")
        if not 0.0 <= offload <= 1.0:
            raise InputError(f"offload = {offload} must be a fraction of the weights in [0, 1]")
        if offload > 0 and hw.host_link_bandwidth <= 0:
            raise InputError(f"profile {hw.name} states no host link ([interconnect] "
                             "host_link_gbs) to stream offloaded weights over")
        self.offload, self.offload_overlap = offload, offload_overlap
        self.stages = stages
        self.hw, self.model = hw, model
        self.runtime: RuntimeParams = hw.runtime(runtime)
        self.weight_bits, self.tp, self.ep, self.group_size = bits, tp, ep, group_size
        self.tree_attention = tree_attention
        self.act_bits, self.quant_lm_head = act_bits, quant_lm_head
        self.prompt_logits = prompt_logits

    @staticmethod
    def _check_precision(hw: HardwareProfile, model: ModelSpec, weight_bits: int, act_bits: int,
                         precision: str, expert_precision: str | None, kv_bits: int) -> None:
        """Refuse formats the model or profile cannot price: a low precision with weight-only
        quantisation or 8-bit integer activations, `expert_precision` on a dense model, a
        format whose peak the profile states as 0, a KV width other than 16 or 8."""
        check_kv_bits(kv_bits)
        dense, experts = formats(model, precision, expert_precision, weight_bits)
        for what, fmt in (("--precision", dense), ("--expert-precision", experts)):
            if fmt is None:
                continue
            if act_bits == 8:
                raise InputError(f"{what} {fmt.name}: 8-bit integer activations (W8A8) are "
                                 "another format for the same GEMMs; state one")
            if hw.peak_flops.get(fmt.peak, 0.0) <= 0:
                raise InputError(f"{what} {fmt.name}: profile {hw.name} has no {fmt.peak} "
                                 f"peak ([compute] {fmt.peak}_tflops is 0 or absent)")

    def variant(self, cls: type[CostModel], **extra: Any) -> CostModel:
        """This model, hardware, precision, tp, ep, runtime and attention as a `cls` (a
        mechanism's subclass taking `extra` keywords)."""
        return cls(self.hw, self.model, weight_bits=self.weight_bits, tp=self.tp, ep=self.ep,
                   group_size=self.group_size, runtime=self.runtime.name,
                   tree_attention=self.tree_attention, act_bits=self.act_bits,
                   quant_lm_head=self.quant_lm_head, offload=self.offload,
                   offload_overlap=self.offload_overlap, stages=self.stages,
                   prompt_logits=self.prompt_logits, precision=self.precision,
                   expert_precision=self.expert_precision, kv_bits=self.kv_bits, **extra)

    def under(self, runtime: str | None = None, tree_attention: str | None = None,
              host_layer_ratio: float = 1.0, device_layer_ratio: float = 1.0,
              prompt_logits: str | None = None) -> CostModel:
        """This cost model (its class and extras kept) under another runtime, tree attention
        and prompt logits (None keeps each), its host issue time per layer × `host_layer_ratio`
        and its device's fixed time per layer × `device_layer_ratio` (an engine's model code and
        kernels against the Transformer the runtime was fitted on); itself when nothing
        changes."""
        if tree_attention is not None and tree_attention not in TREE_ATTENTION:
            raise InputError(f"tree attention must be one of {', '.join(TREE_ATTENTION)}, "
                             f"got {tree_attention!r}")
        if (runtime in (None, self.runtime.name) and host_layer_ratio == 1.0
                and device_layer_ratio == 1.0 and tree_attention in (None, self.tree_attention)
                and prompt_logits in (None, self.prompt_logits)):
            return self
        clone = copy.copy(self)
        if runtime is not None:
            clone.runtime = self.hw.runtime(runtime)
        if host_layer_ratio != 1.0:
            r = clone.runtime
            clone.runtime = dataclasses.replace(
                r, host_layer_s=r.host_layer_s * host_layer_ratio,
                prefill_host_layer_s=r.prefill_host_layer_s * host_layer_ratio)
        if device_layer_ratio != 1.0:
            clone.runtime = dataclasses.replace(
                clone.runtime, layer_s=clone.runtime.layer_s * device_layer_ratio)
        if tree_attention is not None:
            clone.tree_attention = tree_attention
        if prompt_logits is not None:
            clone.prompt_logits = prompt_logits
        return clone

    def ops(self, batch: Num, new_tokens: Num, context_len: Num, **ssm: Any) -> list[OpCost]:
        """The per-device operator table of one forward (see `specscope.models.ops`)."""
        return forward_ops(self.model, batch, new_tokens, context_len,
                           weight_bits=self.weight_bits, group_size=self.group_size, tp=self.tp,
                           ep=self.ep,
                           shard_lm_head=self.hw.shard_lm_head,
                           quant_lm_head=self.quant_lm_head, prompt_logits=self.prompt_logits,
                           precision=self.precision, expert_precision=self.expert_precision,
                           kv_bits=self.kv_bits, **ssm)

    def op_time(self, op: OpCost, new_tokens: Num, context_len: Num
                ) -> tuple[np.ndarray, np.ndarray]:
        """(seconds, compute-bound flag) of one operator of a forward of `new_tokens` per
        sequence after `context_len`, under the runtime's efficiencies."""
        r, bandwidth, peak = self.runtime, self.hw.bandwidth, self.hw.peak_flops[op.peak]
        prefill = np.asarray(context_len) == 0
        flops = np.asarray(op.flops, dtype=float)
        if op.kind == "linear":
            if self.act_bits == 8 and np.any(op.qweights):
                peak = self.hw.peak_flops["int8"]
            tokens = np.asarray(op.tokens, dtype=float)
            weights = np.where(tokens <= 1, r.gemv_memory_eff, r.gemm_memory_eff)
            memory = op.weight_bytes / (bandwidth * weights) + op.act_bytes / (
                bandwidth * r.gemm_memory_eff)
            ceiling = np.where(prefill, r.prefill_compute_eff, r.gemm_compute_eff)
            compute = flops / (peak * ceiling * tokens / (tokens + r.gemm_half_tokens))
        elif op.kind == "attention":
            multi = (np.asarray(new_tokens) >= 2) & ~prefill
            kv = np.where(multi & (self.tree_attention == "dense"), r.attn_dense_memory_eff,
                          r.attn_memory_eff)
            memory = (op.kv_bytes + self._mask_bytes(op, new_tokens, context_len)) / (
                bandwidth * kv) + op.act_bytes / (bandwidth * r.gemm_memory_eff)
            dense = self.tree_attention == "dense"
            if not dense:  # a flash causal prompt skips the masked half
                flops = np.where(prefill, 0.5 * flops, flops)
            # a dense-mask prompt runs the masked kernel the prefill rows were fitted on; a flash
            # prompt, the flash kernel a chunk or a verification runs
            compute = flops / (peak * np.where(prefill & dense, r.prefill_attn_compute_eff,
                                               r.attn_compute_eff))
            if self.tree_attention == "masked":
                slowdown = np.where(multi, CUSTOM_MASK_SLOWDOWN, 1.0)
                memory, compute = memory * slowdown, compute * slowdown
        else:
            memory = np.asarray(op.bytes) / (bandwidth * r.gemm_memory_eff)
            compute = flops / (peak * r.attn_compute_eff)
        return blend(memory, compute, r.blend), compute > memory

    def _mask_bytes(self, op: OpCost, new_tokens: Num, context_len: Num) -> Num:
        """Bytes of a dense additive mask that the attention kernel reads in every layer: (n,
        context + n) 16-bit values per sequence, broadcast over the heads, so a verification's
        small mask is read once per layer from cache, while a prompt's (t, t) mask, larger than
        any on-chip cache at the lengths where it matters, is read again for every head (an
        approximation of the cache's effect). 0 under split attention, whose (n, n) block mask
        is negligible, and under masked attention, whose bit-packed mask's cost is in
        `CUSTOM_MASK_SLOWDOWN`."""
        if self.tree_attention != "dense":
            return 0.0
        new = np.asarray(new_tokens, dtype=float)
        batch = np.asarray(op.tokens, dtype=float) / new
        reads = np.where(np.asarray(context_len) == 0, self.model.n_heads // self.tp, 1)
        return op.count * batch * reads * new * (np.asarray(context_len) + new) * 2.0

    @property
    def device_layers(self) -> float:
        """Layers' worth of the runtime's per-layer device term a forward pays (a mechanism
        that runs fewer or more layer-like blocks says so here): `ops.layer_equivalents`."""
        return layer_equivalents(self.model)

    @property
    def host_layers(self) -> float:
        """Layers' worth of the runtime's per-layer host issue time a forward pays."""
        return float(self.model.n_layers)

    def extras(self, ops: list[OpCost]) -> dict[str, np.ndarray]:
        """Device seconds of a forward beyond its operators: the fixed per-step and per-layer
        time ("overhead"), dequantisation and tensor- and expert-parallel communication."""
        hw, k, r = self.hw, self.tp, self.runtime
        overhead = np.asarray(r.step_s + self.device_layers * r.layer_s)
        dequant = np.asarray(0.0)
        if self.weight_bits < 16 and not (self.weight_bits == 8 and self.act_bits == 8):
            per_weight = hw.dequant_s_per_weight[self.weight_bits]
            for op in ops:
                tiles = np.ceil(np.asarray(op.tokens) / hw.dequant_tile)
                dequant = dequant + op.qweights * tiles * per_weight
        comm = np.asarray(0.0)
        if k > 1:
            ring = (k - 1) / k / hw.link_bandwidth
            for op in ops:
                if np.any(np.asarray(op.reduce_bytes) > 0):
                    comm = comm + op.count * (hw.allreduce_latency_s + 2 * ring * op.reduce_bytes)
            if hw.shard_lm_head:
                lm_head = next(op for op in ops if op.op == "lm_head")
                logits = lm_head.tokens * self.model.vocab_size * 2.0
                comm = comm + hw.allreduce_latency_s + ring * logits
        if self.ep > 1:
            for op in ops:
                if np.any(np.asarray(op.a2a_bytes) > 0):
                    comm = comm + op.count * (hw.allreduce_latency_s
                                              + op.a2a_bytes / hw.link_bandwidth)
        return {"overhead": overhead, "dequant": dequant, "comm": comm}

    def host_time(self, context_len: Num) -> np.ndarray:
        """Seconds the host needs to issue one forward (a prompt when the context is 0), on the
        profile's host (`host_speed`)."""
        r, layers = self.runtime, self.host_layers
        return np.where(np.asarray(context_len) == 0,
                        r.prefill_host_step_s + layers * r.prefill_host_layer_s,
                        r.host_step_s + layers * r.host_layer_s) / self.hw.host_speed

    def batch_host_time(self, batch: Num) -> np.ndarray:
        """Host seconds a step of `batch` sequences adds to one sequence's (`host_time`): each
        further sequence's work (`host_seq_us`, `host_layer_seq_us`; 0 at batch 1)."""
        r = self.runtime
        return (np.asarray(batch, dtype=float) - 1) * (
            r.host_seq_s + self.host_layers * r.host_layer_seq_s) / self.hw.host_speed

    def moe_host_time(self, batch: Num, new_tokens: Num, context_len: Num) -> np.ndarray:
        """Host seconds an eager forward's MoE layers add to `host_time`: their routers and
        touched experts (`moe_host_layers`) at the runtime's per-layer host time; 0 under other
        runtimes, whose graphs or fused kernels issue no per-expert work from the host."""
        if not self.model.moe or self.runtime.name != "eager":
            return np.asarray(0.0)
        r = self.runtime
        per_layer = np.where(np.asarray(context_len) == 0, r.prefill_host_layer_s, r.host_layer_s)
        rows = np.asarray(batch, dtype=float)
        tokens = rows * np.asarray(new_tokens, dtype=float)
        return moe_host_layers(self.model, rows, tokens, self.ep) * per_layer * (
            self.host_layers / self.model.n_layers) / self.hw.host_speed

    def roofline_terms(self, batch: Num, new_tokens: Num, context_len: Num, **ssm: Any
                       ) -> tuple[list[tuple[OpCost, np.ndarray, np.ndarray]],
                                  dict[str, np.ndarray]]:
        """The formula's forward as terms that add up to it: per operator (the operator, its
        device seconds, whether compute bounds it), then the device extras (`extras`), the
        offloaded weights' stream ("offload": what of it the device's work does not hide) and
        the host's issue time ("host": on a GPU what of it the device's work does not hide, on
        a CPU all of it)."""
        ops = self.ops(batch, new_tokens, context_len, **ssm)
        timed = [(op, *self.op_time(op, new_tokens, context_len)) for op in ops]
        terms = dict(self.extras(ops))
        device = sum(terms.values()) + sum(seconds for _, seconds, _ in timed)
        if self.offload > 0:
            stream = np.asarray(self.offloaded_bytes / self.hw.host_link_bandwidth)
            terms["offload"] = np.maximum(stream - device, 0.0) if self.offload_overlap \
                else stream
            device = device + terms["offload"]
        host = self.host_time(context_len) + self.batch_host_time(batch) + self.moe_host_time(
            batch, new_tokens, context_len)
        terms["host"] = np.maximum(host - device, 0.0) if self.hw.kind == "gpu" else host
        if self.stages > 1:
            terms["pipeline"] = self.pipeline_time(batch, new_tokens)
        return timed, terms

    def pipeline_time(self, batch: Num, new_tokens: Num) -> np.ndarray:
        """Seconds a forward spends handing its hidden states from stage to stage (`stages`)."""
        hidden = np.asarray(batch, dtype=float) * np.asarray(new_tokens, dtype=float) * (
            self.model.d_model * ACT_BYTES)
        return (self.stages - 1) * (self.hw.allreduce_latency_s
                                    + hidden / self.hw.link_bandwidth)

    def roofline_time(self, batch: Num, new_tokens: Num, context_len: Num, **ssm: Any
                      ) -> np.ndarray:
        """Seconds of one forward predicted by the formula alone (no measured table): the
        device's operators and extras, combined with the host's issue time."""
        timed, terms = self.roofline_terms(batch, new_tokens, context_len, **ssm)
        return np.asarray(sum(seconds for _, seconds, _ in timed) + sum(terms.values()))

    def forward(self, batch: int, new_tokens: Num, context_len: Num) -> StepCost:
        """Seconds of one forward of `batch` × `new_tokens` at `context_len`, and its source."""
        _check_counts(batch=batch, new_tokens=new_tokens, context_len=context_len)
        new = np.asarray(new_tokens, dtype=float)
        roof = self.roofline_time(batch, new, context_len)
        tables = self.hw.measured_for(self.model.name, int(batch), self.weight_bits, self.tp,
                                      self.runtime.name) if self.bf16 else []
        if not tables:
            shape = np.shape(roof)
            source = "roofline" if not shape else np.full(shape, "roofline")
            return StepCost(_scalar_or_array(roof), source)
        context = float(np.mean(context_len))
        table = min(tables, key=lambda m: abs(m.context - context))
        n_in = np.clip(new, table.new_tokens[0], table.new_tokens[-1])
        measured = np.interp(n_in, table.new_tokens, table.time_s)
        # a measured table times one device: the stages' hand-overs add to it
        hops, hops_in = (self.pipeline_time(batch, n) if self.stages > 1 else 0.0
                         for n in (new, n_in))
        time = (roof - hops) * measured / (self.roofline_time(batch, n_in, table.context)
                                           - hops_in) + hops
        source = np.where(n_in == new, "measured", "roofline")
        return StepCost(_scalar_or_array(time), str(source) if source.ndim == 0 else source)

    def forward_time(self, batch: int, new_tokens: Num, context_len: Num) -> Num:
        """Seconds of one forward (a float, or an array shaped like the broadcast arguments)."""
        return self.forward(batch, new_tokens, context_len).time_s

    def verify_time(self, tree_size: Num, context_len: Num, batch: int = 1,
                    depth: Num | None = None, leaves: Num | None = None,
                    ssm_verify: str = "stree") -> Num:
        """Seconds to verify a draft tree of `tree_size` tokens (root included) in one step.

        Attention layers verify the n tokens in one tree-masked forward. Mamba-2 layers either
        run one tree-masked SSD pass over the n tokens ("stree") or unroll every root-to-leaf
        path ("naive": `leaves` sequences of `depth` + 1 tokens and one state copy per leaf);
        attention, MLPs and the lm_head see the n tokens once either way. Only a transformer
        uses the profile's measured tables (a measured t(n) is a transformer forward).
        """
        if ssm_verify not in SSM_VERIFY:
            raise InputError(f"ssm_verify {ssm_verify!r} is not one of {list(SSM_VERIFY)}")
        _check_counts(batch=batch, tree_size=tree_size, context_len=context_len)
        if "ssm" not in self.model.layer_kinds:
            return self.forward_time(batch, tree_size, context_len)
        if ssm_verify == "naive":
            if depth is None or leaves is None:
                raise InputError("naive SSM verification needs the tree's depth and leaves")
            _check_counts(depth=depth, leaves=leaves)
            n = np.asarray(tree_size) - 1
            d, ell = np.asarray(depth), np.asarray(leaves)
            if np.any((d > n) | (d + ell - 1 > n) | (n > d * ell)):
                raise InputError(f"no tree of {tree_size} tokens has depth {depth} and "
                                 f"{leaves} leaves")
        roof = self.roofline_time(batch, tree_size, context_len, ssm_verify=ssm_verify,
                                  depth=depth, leaves=leaves)
        return _scalar_or_array(roof)

    @property
    def bf16(self) -> bool:
        """Whether weights, activations and KV cache are in today's 16-bit formats (what the
        profile's measured tables ran)."""
        return self.precision == "bf16" and self.expert_precision in (None, "bf16") \
            and self.kv_bits == 16

    @property
    def stored_weight_bytes(self) -> float:
        """Bytes of all the model's weights in their formats (tp = 1)."""
        return weight_bytes(self.model, self.weight_bits, self.group_size, self.precision,
                            self.expert_precision)

    @property
    def offloaded_bytes(self) -> float:
        """Bytes of weights each device streams from host memory per forward (`offload`)."""
        return self.offload * self.stored_weight_bytes / self.tp

    def memory_bytes(self, batch: int, tokens: int) -> float:
        """Bytes of device-resident weights, KV cache and SSM state for `batch` sequences of
        `tokens` tokens over the tp devices (offloaded weights live in host memory; an MoE's
        experts are stored once, split tp ways or spread over the ep groups; a latent-attention
        cache is held on every device: `kv_cache_bytes`)."""
        spec = self.model
        cache = batch * (kv_cache_bytes(spec, tokens, self.tp, self.kv_bits)
                         + ssm_state_bytes(spec))
        return (1.0 - self.offload) * self.stored_weight_bytes + cache


def blend(memory: Num, compute: Num, b: float) -> np.ndarray:
    """(m^b + c^b)^(1/b) of memory and compute times, computed without underflow (b = 1 adds
    them, a large b tends to the larger)."""
    memory, compute = np.asarray(memory, dtype=float), np.asarray(compute, dtype=float)
    top = np.maximum(memory, compute)
    safe = np.where(top > 0, top, 1.0)
    return top * ((memory / safe) ** b + (compute / safe) ** b) ** (1.0 / b)
