"""EasySpec (Wu, Gao, Li and Wu 2025, "EasySpec: Layer-Parallel Speculative Decoding for
Efficient Multi-GPU Utilization", NeurIPS 2025, arXiv:2502.02493): a draft model at TP = 1 on
a target served at tensor parallelism k, its layers run in parallel on the GPUs that would
otherwise idle while it drafts.

Modelled:

- The target verifies at TP = k (the case's `tp`): the cost model's ring all-reduce after
  every row-parallel projection over the profile's interconnect (none at TP = 1).
- Sequential drafting (`layer_parallel = false`) is draft-model speculation: the draft at
  TP = 1 on one GPU, every layer in sequence, one forward per level.
- Layer-parallel ("fuzzy") drafting (default): the draft's layers other than the first and
  the last are taken in groups of N (`parallel_layers`, default min(4, tp): the paper's 4, at
  most one layer per GPU); a group's attention blocks run at once on N GPUs, all on the
  group's input hidden state, and its MLP blocks then run in sequence. A level's critical
  path is 2 + ⌈(L − 2) / N⌉ attention blocks and L MLP blocks, the per-layer device and host
  terms split between the two blocks by their operators (4 and 3 of a Llama layer's 7), plus
  per group a broadcast of the input and a gather of the N − 1 other attention outputs over
  the profile's link: 2 × (latency + (N − 1) × tokens × d_model × 2 bytes / link bandwidth)
  (`LayerParallelDraftCost`). At N = 1 (so at TP = 1) the levels are the plain draft's, with
  no transfer. (The grouping, the sequential MLPs and N = 4 are as two summaries of the
  NeurIPS paper describe it; the paper itself was not reachable.)
- Bonus calibration: each step starts with one sequential draft forward over the tokens
  accepted last step and the bonus token (the mean τ_eff of them), which rewrites their KV
  exactly and drafts the first level; the later levels run layer-parallel.
- Acceptance: fuzzy drafting loses `acceptance_loss` of the accepted drafts,
  τ_eff = 1 + (τ − 1)(1 − loss), the case's τ being that of exact drafting (the paper: at
  most 7%). `costs` reports acceptance_scale = (τ_eff − 1)/(τ − 1) = 1 − loss, which the
  simulator applies to every level's acceptance (so deep trees lose more there). Sequential
  drafting is exact: no loss.
- `report = "draft"` makes the prediction the drafting speedup: sequential drafting's time
  per step over layer-parallel drafting's (calibration included), the paper's 1.62× figure.
- `baseline_tp` prices the autoregressive baseline at another tensor-parallel degree (the
  paper's vanilla decoding runs the target without tensor parallelism: 1); default `tp`.

Approximated: the calibration pass and the levels are priced at the case's mean context;
each GPU keeps the KV of the attention blocks it runs (not priced as memory); `simulate` and
`sweep` serve the layer-parallel draft for every level (no calibration pass) with the
acceptance scaled per level.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from specscope.hw_profiles import CostModel
from specscope.models.ops import ACT_BYTES, OpCost, layer_ops, scale_op
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import Prediction, cost_model, pricing, target_model, tree_step

PARALLEL_LAYERS = 4
"""Attention blocks per layer-parallel group (the paper's recommended layer-parallel size)."""
REPORTS = ("speedup", "draft")
_ATTENTION = ("attn_norm", "qkv_proj", "attention", "o_proj")
"""A decoder layer's attention-block operators (the rest of the layer is its MLP block)."""

OPTIONS: dict[str, type | tuple[type, ...]] = {
    "layer_parallel": bool, "parallel_layers": int, "acceptance_loss": (int, float),
    "report": str, "baseline_tp": int}
"""layer_parallel: fuzzy layer-parallel drafting (default true); parallel_layers: attention
blocks run at once, one per GPU (default min(`PARALLEL_LAYERS`, tp)); acceptance_loss: the
fraction of accepted drafts lost to it (default 0); report: "speedup" (default) or "draft"
(drafting speedup over sequential drafting); baseline_tp: the autoregressive baseline's
tensor-parallel degree (default tp)."""


class LayerParallelDraftCost(CostModel):
    """A draft forward whose middle layers' attention blocks run `ways` at a time on `ways`
    GPUs (module docstring); `ways` 1 is the plain draft."""

    def __init__(self, *args: Any, ways: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ways = ways
        layers = self.model.n_layers
        self.groups = math.ceil((layers - 2) / ways) if ways > 1 and layers > 2 else 0
        self.attention_blocks = 2 + self.groups if self.groups else layers
        """Attention blocks on the critical path of one forward."""
        layer = [op.op for op in layer_ops(super().ops(1, 1, 1))]
        attention = sum(op in _ATTENTION for op in layer) / len(layer)
        self.layer_share = (attention * self.attention_blocks / layers + 1 - attention)
        """The per-layer terms paid, as a share of every layer's (the attention block's
        share of a layer's operators paid once per group)."""

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        """The attention blocks' operators scaled to those on the critical path."""
        scale = self.attention_blocks / self.model.n_layers
        return [scale_op(op, scale) if op.op in _ATTENTION else op
                for op in super().ops(batch, new_tokens, context_len, **ssm)]

    @property
    def device_layers(self) -> float:
        """The per-layer terms of the critical path, in layers."""
        return self.layer_share * self.model.n_layers

    @property
    def host_layers(self) -> float:
        """As `device_layers`: the other GPUs' hosts issue their attention blocks meanwhile."""
        return self.device_layers

    def extras(self, ops: list[OpCost]) -> dict[str, np.ndarray]:
        """The plain terms, and each group's broadcast of its input and gather of the other
        attention outputs."""
        out = super().extras(ops)
        if self.groups:
            lm_head = next(op for op in ops if op.op == "lm_head")
            hidden = np.asarray(lm_head.tokens, dtype=float) * self.model.d_model * ACT_BYTES
            transfer = self.hw.allreduce_latency_s + (self.ways - 1) * hidden / (
                self.hw.link_bandwidth)
            out["comm"] = out["comm"] + self.groups * 2 * transfer
        return out


def _draft_name(case: Case) -> str:
    if case.draft is None:
        raise case.fail("system easyspec needs a draft (a catalogue model)")
    return case.draft


def _options(case: Case) -> tuple[bool, int, float, str, int]:
    layered = bool(case.options.get("layer_parallel", True))
    ways = case.options.get("parallel_layers", min(PARALLEL_LAYERS, case.tp))
    if not 1 <= ways <= case.tp:
        raise case.fail(f"parallel_layers = {ways} must lie in 1..tp ({case.tp}): one "
                        "attention block per GPU")
    loss = float(case.options.get("acceptance_loss", 0.0))
    if not 0.0 <= loss < 1.0:
        raise case.fail(f"acceptance_loss = {loss:g} must lie in [0, 1)")
    report = case.options.get("report", "speedup")
    if report not in REPORTS:
        raise case.fail(f"report = {report!r} must be one of {', '.join(REPORTS)}")
    baseline_tp = case.options.get("baseline_tp", case.tp)
    if baseline_tp < 1:
        raise case.fail(f"baseline_tp = {baseline_tp} must be at least 1")
    return layered, ways, loss if layered else 0.0, report, baseline_tp


def parallel_draft(case: Case, ways: int) -> LayerParallelDraftCost:
    """The case's draft at TP = 1, its attention blocks `ways` at a time."""
    return cost_model(case, _draft_name(case)).variant(LayerParallelDraftCost, ways=ways)


def costs(case: Case) -> SystemCosts:
    """The target at tp, the draft at TP = 1 drafting layer-parallel or in sequence (its
    levels; the calibration pass is the plain draft's forward), and the acceptance kept."""
    layered, ways, loss, _, _ = _options(case)
    draft = parallel_draft(case, ways) if layered else cost_model(case, _draft_name(case))
    return SystemCosts(target_model(case), draft, f"draft:{case.draft}",
                       acceptance_scale=1.0 - loss)


def predict(case: Case) -> Prediction:
    """One step: the calibration pass and the layer-parallel levels (or sequential levels),
    the target's verification at tp; with `report = "draft"`, the drafting speedup."""
    if not case.tree:
        raise case.fail("system easyspec needs a tree (tokens per level)")
    layered, ways, loss, report, baseline_tp = _options(case)
    c = costs(case)
    sequential = cost_model(case, _draft_name(case))
    tau = 1.0 + (case.tokens_per_step - 1.0) * (1.0 - loss)
    price = pricing(case, c.target, c.drafter)
    parts = tree_step(price, case.tree, c.source)
    if layered:  # the first level is the calibration pass: sequential, over τ_eff tokens
        parts["draft"] -= price.level_s(c.source)
        parts["calibration"] = float(sequential.forward_time(
            case.batch, tau, price.context_len)) + price.level_host_s
    assumptions = [f"target at tp {case.tp}, draft {case.draft} at tp 1, "
                   + (f"layer-parallel: attention blocks {ways} at a time "
                      f"({c.drafter.attention_blocks} of {c.drafter.model.n_layers} in "
                      "sequence), calibration pass over the accepted tokens"
                      if layered else "sequential"),
                   f"τ {case.tokens_per_step:g} → {tau:.3f} after a {loss:.0%} acceptance loss"]
    if report == "draft":
        plain = tree_step(pricing(case, c.target, sequential), case.tree, c.source)["draft"]
        drafting = parts["draft"] + parts.get("calibration", 0.0)
        return Prediction(tokens_per_step=1.0, step_s=drafting, baseline_s=plain,
                          batch=case.batch, parts={"draft": drafting, "sequential": plain},
                          assumptions=(*assumptions, "report: drafting time per step, "
                                       "sequential over layer-parallel"))
    baseline = price.autoregressive_s
    if baseline_tp != case.tp:
        base = dataclasses.replace(case, tp=baseline_tp)
        baseline = pricing(base, target_model(base), None).autoregressive_s
        assumptions.append(f"baseline: autoregressive at tp {baseline_tp}")
    return Prediction(tokens_per_step=tau, step_s=sum(parts.values()), baseline_s=baseline,
                      batch=case.batch, parts=parts, assumptions=tuple(assumptions))


SYSTEM = System("easyspec", "Wu et al. 2025, EasySpec: Layer-Parallel Speculative Decoding for "
                "Efficient Multi-GPU Utilization (NeurIPS 2025, arXiv:2502.02493)", costs,
                predict, OPTIONS)
