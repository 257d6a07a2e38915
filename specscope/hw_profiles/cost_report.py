"""`cost_report`: one forward of a `CostModel` as `specscope cost` prints it: the step, what
bounds it, each operator's roofline and the terms beyond the operators, which add up to the step,
and whether the memory fits."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from specscope.hw_profiles.cost import CostModel

TERM_BOUNDS = {"overhead": "launch", "dequant": "dequant", "comm": "interconnect",
               "offload": "host link", "host": "host", "pipeline": "interconnect"}
"""What each term of `CostModel.roofline_terms` beyond the operators is bound by."""
TERM_LABELS = {"overhead": "device step + layer gaps", "dequant": "dequantisation",
               "comm": "tp all-reduce", "offload": "offload stream", "host": "host issue",
               "pipeline": "pipeline stage hand-overs"}
"""How `specscope cost` names those terms."""


def cost_report(model: CostModel, batch: int, new_tokens: int, context_len: int
                ) -> dict[str, Any]:
    """A JSON-ready summary of one forward: time (ms), source, what bounds it, per-operator
    roofline, the terms beyond the operators (`step_terms`: with the operators they add up
    to the step), memory."""
    step = model.forward(batch, int(new_tokens), context_len)
    timed, terms = model.roofline_terms(batch, int(new_tokens), context_len)
    operators = [{
        "op": op.op, "count": op.count, "flops": float(op.flops), "bytes": float(op.bytes),
        "time_ms": float(seconds) * 1e3, "bound": "compute" if compute_bound else "memory",
    } for op, seconds, compute_bound in timed]
    extras = {f"{k}_ms": float(v) * 1e3
              for k, v in model.extras([op for op, _, _ in timed]).items()}
    extras["host_ms"] = float(model.host_time(context_len) + model.batch_host_time(batch)) * 1e3
    if model.offload:
        extras["offload_stream_ms"] = model.offloaded_bytes / model.hw.host_link_bandwidth * 1e3
    roofline_ms = float(model.roofline_time(batch, int(new_tokens), context_len)) * 1e3
    step_ms = float(step.time_s) * 1e3
    rows = [{"term": key, "what": _term_label(model, key), "time_ms": float(value) * 1e3,
             "bound": TERM_BOUNDS[key]} for key, value in terms.items() if value > 0]
    if not math.isclose(step_ms, roofline_ms, rel_tol=1e-9):
        rows.append({"term": "measured", "what": "measured table − formula",
                     "time_ms": step_ms - roofline_ms, "bound": "measured"})
    memory = model.memory_bytes(batch, context_len + int(new_tokens))
    return {
        "hw": model.hw.name, "runtime": model.runtime.name,
        "tree_attention": model.tree_attention, "model": model.model.name,
        "weight_bits": model.weight_bits,
        "tp": model.tp, "batch": batch, "new_tokens": int(new_tokens),
        "context_len": context_len, "step_time_ms": step_ms,
        "source": str(step.source), "bound": _bound(model, operators, terms),
        "roofline_ms": roofline_ms,
        **extras, "operators": operators, "step_terms": rows, "memory_gb": memory / 1e9,
        "stages": model.stages,
        "device_memory_gb": model.hw.memory_bytes * model.tp * model.stages / 1e9,
        "fits": memory <= model.hw.memory_bytes * model.tp * model.stages,
    }


def _term_label(model: CostModel, key: str) -> str:
    """What a term of `roofline_terms` is, in a few words ("not hidden": the part the
    device's work does not overlap)."""
    hidden = {"host": model.hw.kind == "gpu", "offload": model.offload_overlap}.get(key)
    return TERM_LABELS[key] + (" (not hidden)" if hidden else "")


def _bound(model: CostModel, operators: list[dict[str, Any]], terms: dict[str, np.ndarray]
           ) -> str:
    """What bounds the step: the host when a GPU waits on its issue time, the host link
    when an overlapped weight stream outlasts the device's work, else the largest of the
    memory-bound and compute-bound operators' times and the other terms."""
    if model.hw.kind == "gpu" and terms["host"] > 0:
        return "host"
    if model.offload_overlap and terms.get("offload", 0.0) > 0:
        return TERM_BOUNDS["offload"]
    shares: dict[str, float] = {"memory": 0.0, "compute": 0.0}
    for op in operators:
        shares[op["bound"]] += op["time_ms"]
    for key, value in terms.items():
        shares[TERM_BOUNDS[key]] = shares.get(TERM_BOUNDS[key], 0.0) + float(value) * 1e3
    return max(shares, key=lambda k: shares[k])
