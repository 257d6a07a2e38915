"""`CostModel`: seconds per forward pass and per tree verification on a hardware profile.

Per operator, time = max(FLOPs / (peak × compute_eff), bytes / (bandwidth × memory_eff)); the
forward adds a fixed per-step and per-layer overhead, the dequantisation of 8/4-bit weights
(seconds per weight element, once per tile of tokens) and, under tensor parallelism, one ring
all-reduce after every row-parallel projection (latency + 2(k−1)/k × bytes / link bandwidth).
When the profile holds a measured t(n) table for this model, batch, weight bits and tp, measured
points win (linear interpolation in n, scaled by the roofline's ratio for a different context),
and beyond the table the roofline is scaled to meet its nearest measured point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specscope.errors import InputError
from specscope.hw_profiles.profile import HardwareProfile
from specscope.models.ops import (
    SSM_VERIFY,
    OpCost,
    bytes_per_weight,
    check_tp,
    forward_ops,
    kv_bytes_per_token,
    ssm_state_bytes,
    weight_bytes,
)
from specscope.models.spec import ModelSpec

Num = float | np.ndarray


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
    """Step times of one model on one profile at `weight_bits` (default: the spec's) and `tp`.

    `group_size` is the 4-bit quantisation group (one 16-bit scale and zero per group).
    """

    def __init__(self, hw: HardwareProfile, model: ModelSpec, weight_bits: int | None = None,
                 tp: int = 1, group_size: int = 128) -> None:
        bits = model.weight_bits if weight_bits is None else weight_bits
        bytes_per_weight(bits, group_size)
        check_tp(model, tp)
        if tp > hw.max_tp:
            raise InputError(f"tp={tp} exceeds the {hw.max_tp} devices profile {hw.name} links")
        self.hw, self.model = hw, model
        self.weight_bits, self.tp, self.group_size = bits, tp, group_size

    def ops(self, batch: Num, new_tokens: Num, context_len: Num, **ssm: Any) -> list[OpCost]:
        """The per-device operator table of one forward (see `specscope.models.ops`)."""
        return forward_ops(self.model, batch, new_tokens, context_len,
                           weight_bits=self.weight_bits, group_size=self.group_size, tp=self.tp,
                           shard_lm_head=self.hw.shard_lm_head, **ssm)

    def op_time(self, op: OpCost) -> tuple[np.ndarray, np.ndarray]:
        """(seconds, compute-bound flag) of one operator under the roofline."""
        compute = np.asarray(op.flops) / (self.hw.peak_flops["bf16"] * self.hw.compute_eff)
        memory = np.asarray(op.bytes) / (self.hw.bandwidth * self.hw.memory_eff)
        return np.maximum(compute, memory), compute > memory

    def extras(self, ops: list[OpCost]) -> dict[str, np.ndarray]:
        """Seconds of overhead, dequantisation and tensor-parallel communication of a forward."""
        hw, k = self.hw, self.tp
        overhead = np.asarray(hw.step_overhead_s + self.model.n_layers * hw.layer_overhead_s)
        dequant = np.asarray(0.0)
        if self.weight_bits < 16:
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
        return {"overhead": overhead, "dequant": dequant, "comm": comm}

    def roofline_time(self, batch: Num, new_tokens: Num, context_len: Num, **ssm: Any
                      ) -> np.ndarray:
        """Seconds of one forward predicted by the roofline alone (no measured table)."""
        ops = self.ops(batch, new_tokens, context_len, **ssm)
        total = sum(self.extras(ops).values())
        for op in ops:
            total = total + self.op_time(op)[0]
        return np.asarray(total)

    def forward(self, batch: int, new_tokens: Num, context_len: Num) -> StepCost:
        """Seconds of one forward of `batch` × `new_tokens` at `context_len`, and its source."""
        _check_counts(batch=batch, new_tokens=new_tokens, context_len=context_len)
        new = np.asarray(new_tokens, dtype=float)
        roof = self.roofline_time(batch, new, context_len)
        tables = self.hw.measured_for(self.model.name, int(batch), self.weight_bits, self.tp)
        if not tables:
            shape = np.shape(roof)
            source = "roofline" if not shape else np.full(shape, "roofline")
            return StepCost(_scalar_or_array(roof), source)
        context = float(np.mean(context_len))
        table = min(tables, key=lambda m: abs(m.context - context))
        n_in = np.clip(new, table.new_tokens[0], table.new_tokens[-1])
        measured = np.interp(n_in, table.new_tokens, table.time_s)
        time = roof * measured / self.roofline_time(batch, n_in, table.context)
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

    def memory_bytes(self, batch: int, tokens: int) -> float:
        """Bytes of weights, KV cache and SSM state for `batch` sequences of `tokens` tokens."""
        spec = self.model
        cache = batch * (tokens * kv_bytes_per_token(spec) + ssm_state_bytes(spec))
        return weight_bytes(spec, self.weight_bits, self.group_size) + cache

    def report(self, batch: int, new_tokens: int, context_len: int) -> dict[str, Any]:
        """A JSON-ready summary of one forward: time (ms), source, per-operator roofline, memory."""
        step = self.forward(batch, int(new_tokens), context_len)
        ops = self.ops(batch, int(new_tokens), context_len)
        operators = []
        for op in ops:
            seconds, compute_bound = self.op_time(op)
            operators.append({
                "op": op.op, "count": op.count, "flops": float(op.flops),
                "bytes": float(op.bytes), "time_ms": float(seconds) * 1e3,
                "bound": "compute" if compute_bound else "memory",
            })
        extras = {f"{k}_ms": float(v) * 1e3 for k, v in self.extras(ops).items()}
        memory = self.memory_bytes(batch, context_len + int(new_tokens))
        return {
            "hw": self.hw.name, "model": self.model.name, "weight_bits": self.weight_bits,
            "tp": self.tp, "batch": batch, "new_tokens": int(new_tokens),
            "context_len": context_len, "step_time_ms": float(step.time_s) * 1e3,
            "source": str(step.source),
            "roofline_ms": float(self.roofline_time(batch, int(new_tokens), context_len)) * 1e3,
            **extras, "operators": operators, "memory_gb": memory / 1e9,
            "device_memory_gb": self.hw.memory_bytes * self.tp / 1e9,
            "fits": memory <= self.hw.memory_bytes * self.tp,
        }
