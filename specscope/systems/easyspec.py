"""EasySpec (2025, "EasySpec: Layer-Parallel Speculative Decoding for Efficient Multi-GPU
Utilization", arXiv:2502.02493): a draft model on a target served at tensor parallelism k, its
layers run in parallel across the k GPUs.

Modelled:

- The target verifies at TP = k (the case's `tp`): the cost model's ring all-reduce after every
  row-parallel projection over the profile's interconnect (none at TP = 1).
- Plain drafting runs the draft at TP = 1 on one GPU while the other k − 1 idle: one draft
  forward per level, every layer in sequence.
- Layer-parallel drafting (`layer_parallel`, default true): the draft's L layers are split over
  the k GPUs, each running its ⌈L / k⌉ consecutive layers at once on the same input (the
  approximation that costs acceptance), their outputs summed by one all-reduce of the level's
  hidden states, then one LM head: a level costs a forward of ⌈L / k⌉ layers plus that
  all-reduce (`LayerParallelDraftCost`). A step's first level runs the accepted tokens through
  every draft layer in sequence (EasySpec's KV calibration, fused with the first draft token):
  one sequential draft forward of τ tokens; the later levels run layer-parallel.
- Acceptance: drafting on approximate inputs loses `acceptance_loss` of the accepted drafts:
  τ_eff = 1 + (τ − 1)(1 − loss) (the paper: at most 7%); the simulator sees the per-level
  acceptance scaled by (1 − loss).
- `report = "draft"` makes the prediction the drafting speedup instead: sequential drafting's
  time per step over layer-parallel drafting's (calibration included), the paper's other
  headline.

Approximated: the split is by whole layers and every GPU waits for the slowest chunk; the
calibration pass is priced at the case's context; the draft's own KV stays on one GPU's
memory per chunk.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from specscope.hw_profiles import CostModel, load_profile
from specscope.models import get_model
from specscope.models.ops import ACT_BYTES, OpCost
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import (
    Prediction,
    cost_model,
    pricing,
    target_model,
    tree_step,
)

OPTIONS: dict[str, type | tuple[type, ...]] = {
    "layer_parallel": bool, "acceptance_loss": (int, float), "report": str}
"""layer_parallel: split the draft's layers over the tp GPUs (default true); acceptance_loss:
the fraction of accepted drafts lost to it (default 0); report: "speedup" (default) or "draft"
(the drafting speedup over sequential drafting)."""
REPORTS = ("speedup", "draft")


class LayerParallelDraftCost(CostModel):
    """A draft level run layer-parallel over `ways` GPUs: a forward of ⌈L / ways⌉ of the draft's
    layers (this model's spec) plus one all-reduce of the level's hidden states."""

    def __init__(self, *args: Any, ways: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ways = ways

    def extras(self, ops: list[OpCost]) -> dict[str, np.ndarray]:
        """The chunk's own terms, and the all-reduce that sums the chunks' outputs."""
        out = super().extras(ops)
        if self.ways > 1:
            lm_head = next(op for op in ops if op.op == "lm_head")
            hidden = np.asarray(lm_head.tokens, dtype=float) * self.model.d_model * ACT_BYTES
            ring = 2 * (self.ways - 1) / self.ways / self.hw.link_bandwidth
            out["comm"] = out["comm"] + self.hw.allreduce_latency_s + ring * hidden
        return out


def _options(case: Case) -> tuple[bool, float, str]:
    loss = float(case.options.get("acceptance_loss", 0.0))
    if not 0.0 <= loss < 1.0:
        raise case.fail(f"acceptance_loss = {loss:g} must lie in [0, 1)")
    report = case.options.get("report", "speedup")
    if report not in REPORTS:
        raise case.fail(f"report = {report!r} must be one of {', '.join(REPORTS)}")
    return bool(case.options.get("layer_parallel", True)), loss, report


def _draft_name(case: Case) -> str:
    if case.draft is None:
        raise case.fail("system easyspec needs a draft (a catalogue model)")
    return case.draft


def parallel_draft(case: Case) -> LayerParallelDraftCost:
    """The draft's layer-parallel level over the case's tp GPUs."""
    spec = get_model(_draft_name(case))
    chunk = dataclasses.replace(spec, name=f"{spec.name}/chunk",
                                n_layers=math.ceil(spec.n_layers / case.tp))
    return LayerParallelDraftCost(load_profile(case.hw), chunk, runtime=case.runtime,
                                  ways=case.tp)


def costs(case: Case) -> SystemCosts:
    """The target at tp, the draft at TP = 1, sequential or layer-parallel (its levels), and
    the acceptance kept: 1 − acceptance_loss per level."""
    layered, loss, _ = _options(case)
    draft = parallel_draft(case) if layered else cost_model(case, _draft_name(case))
    return SystemCosts(target_model(case), draft, f"draft:{case.draft}",
                       acceptance_scale=1.0 - loss)


def predict(case: Case) -> Prediction:
    """One step: the levels (layer-parallel or sequential), the calibration pass, the target's
    verification at tp; or, with `report = "draft"`, the drafting speedup."""
    if not case.tree:
        raise case.fail("system easyspec needs a tree (tokens per level)")
    layered, loss, report = _options(case)
    c = costs(case)
    sequential = cost_model(case, _draft_name(case))
    tau = 1.0 + (case.tokens_per_step - 1.0) * (1.0 - loss)
    price = pricing(case, c.target, c.drafter)
    parts = tree_step(price, case.tree, c.source)
    if layered:  # the first level is the calibration pass: sequential, over the accepted tokens
        parts["draft"] -= price.level_s(c.source)
        parts["calibration"] = float(sequential.forward_time(case.batch, round(tau),
                                                             price.context_len))
    assumptions = [f"target at tp {case.tp}, draft {case.draft} at tp 1"
                   + (f", layer-parallel: {c.drafter.model.n_layers} layers per GPU"
                      if layered else ", sequential"),
                   f"τ {case.tokens_per_step:g} → {tau:.3f} after a {loss:.0%} acceptance loss"]
    if report == "draft":
        plain = tree_step(pricing(case, c.target, sequential), case.tree, c.source)["draft"]
        drafting = parts["draft"] + parts.get("calibration", 0.0)
        return Prediction(tokens_per_step=1.0, step_s=drafting, baseline_s=plain,
                          batch=case.batch, parts={"draft": drafting, "sequential": plain},
                          assumptions=(*assumptions, "report: drafting time per step, "
                                       "sequential over layer-parallel"))
    return Prediction(tokens_per_step=tau, step_s=sum(parts.values()),
                      baseline_s=price.autoregressive_s, batch=case.batch, parts=parts,
                      assumptions=tuple(assumptions))


SYSTEM = System("easyspec", "EasySpec: Layer-Parallel Speculative Decoding for Efficient "
                "Multi-GPU Utilization (2025, arXiv:2502.02493)", costs, predict, OPTIONS)
