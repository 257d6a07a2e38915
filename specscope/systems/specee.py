"""SpecEE (Xu, Pan, Zhou, Chen, Li, Lian, Wu and Dai 2025, "SpecEE: Accelerating Large Language
Model Inference with Speculative Early Exiting", ISCA 2025, arXiv:2504.08850).

Decoding runs on the target, but each token stops after the layer where a per-layer predictor
says it is settled. The predictor reads the hidden state through the LM-head rows of the
`candidates` speculative tokens an EAGLE-style head proposed (k × d_model weights, not the
vocabulary: how speculative tokens narrow the predictor's search space) and a two-layer MLP
(3k features → `predictor_hidden` → 1). Exits skip the remaining layers (lossy: the exited
token is the one the exit layer's LM head picks).

Modelled:

- Exits: the case gives the mean number of target layers a token runs, as `exit_layers` (the
  paper's Table 4 "#Avg L": 21.96–23.79 of Llama-2-7B's 32) or as `exit_fraction` of the
  target's layers. The exit distribution is taken uniform over the consecutive layers a..L
  whose mean that is (a = 2·mean − L, rounded), or 1..b (b = 2·mean − 1) for a mean below
  the middle layer. SpecEE's scheduler places predictors only where exits happen: a token
  runs one at each layer of that support it reaches, none at the last layer
  (`predictors_per_token`). A mean of every layer is no early exit: no predictor, the plain
  target, exactly.
- A forward costs its decoder layers in proportion to the layers run (every per-layer
  operator, the runtime's per-layer device and host terms, the all-reduces under tensor
  parallelism: `EarlyExitCost`); embedding, final norm and LM head are paid once. Each
  predictor run is three small operators, the candidates' logits (d → k) and the MLP, fused
  into one kernel by the authors' CUDA back end: its per-layer device and host terms are one
  operator's share of a decoder layer's (1 of the 7 in a Llama layer's operator table).
- The speculative tokens come from `speculator`: "head" (default, the paper's EAGLE draft,
  `head.head_model`) or "none" (taken as given, not priced). Without a tree the head runs one
  level per token, only when predictors run; with a tree (EAGLE + SpecEE, the paper's 2.25×
  setting) the head drafts it and the early-exiting target verifies it. Speedup is over
  autoregressive decoding of the plain target. Where the profile measured the target, an
  early-exiting forward is the measured time scaled by its roofline's ratio to the plain one.

Approximated: every token of a verification exits at the mean (SpecEE merges a tree path
into one "hyper-token" that exits at its latest token's layer, so a tree's mean exit may lie
deeper); the skipped layers' KV (SpecEE fills it from the exit layer), the full LM head the
paper's verification runs when a predictor fires wrongly, and the host synchronisation an
exit decision needs inside a CUDA-graph engine are not priced.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specscope.hw_profiles import CostModel
from specscope.hw_profiles.cost import StepCost
from specscope.models.ops import OUTSIDE_LAYERS, OpCost, layer_ops, linear_op, scale_op
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.head import head_model
from specscope.systems.step import Prediction, pricing, target_model, tree_step

CANDIDATES = 4
"""Speculative tokens the predictors read (the paper's 4 EAGLE draft tokens, §4.3.2)."""
PREDICTOR_HIDDEN = 512
"""The predictor MLP's hidden width (the paper's two-layer MLP, §4.3.2)."""
FEATURES_PER_CANDIDATE = 3
"""Features per speculative token: its logit, local probability and change (12 for 4)."""
SPECULATORS = ("head", "none")
PREDICTOR = ("predictor_logits", "predictor_mlp_in", "predictor_mlp_out")
"""The operators of one predictor run (one fused kernel)."""

OPTIONS: dict[str, type | tuple[type, ...]] = {
    "exit_layers": (int, float), "exit_fraction": (int, float), "candidates": int,
    "predictor_hidden": int, "speculator": str}
"""exit_layers: mean target layers run per token (the paper's #Avg L); exit_fraction: the same
as a fraction of the target's layers (give at most one; default: every layer, no early exit);
candidates: the speculative tokens the predictors read (default `CANDIDATES`);
predictor_hidden: the predictor MLP's width (default `PREDICTOR_HIDDEN`); speculator: "head"
(default) or "none" (the candidates' source is not priced)."""


def exit_support(layers: int, exit_layers: float) -> np.ndarray:
    """The layers tokens exit at, uniformly: a..L with mean `exit_layers` (a = 2·mean − L,
    rounded), or 1..b (b = 2·mean − 1, rounded) when a would fall below the first layer."""
    low = round(2 * exit_layers - layers)
    if low >= 1:
        return np.arange(low, layers + 1)
    return np.arange(1, max(1, round(2 * exit_layers - 1)) + 1)


def predictors_per_token(layers: int, exit_layers: float) -> float:
    """Expected predictor runs per token: one at each layer of `exit_support` a token reaches
    (its exit layer included), none at the last layer."""
    support = exit_support(layers, exit_layers)
    placed = support[support < layers]
    return float(np.mean([np.count_nonzero(placed <= e) for e in support]))


class EarlyExitCost(CostModel):
    """A target running `exit_layers` of its layers per token, plus `predictors` predictor runs
    per token over `candidates` speculative tokens (module docstring); `plain` is the same
    target without early exits."""

    def __init__(self, *args: Any, exit_layers: float, predictors: float, candidates: int,
                 hidden: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plain = self.variant(CostModel)
        self.exit_layers, self.predictors = exit_layers, predictors
        self.candidates, self.hidden = candidates, hidden
        self.predictor_share = 1 / len(layer_ops(self.plain.ops(1, 1, 1)))
        """A predictor run's per-layer terms as a share of a decoder layer's (one fused kernel
        over a layer's operators)."""

    @property
    def share(self) -> float:
        """The fraction of the decoder layers a token runs."""
        return self.exit_layers / self.model.n_layers

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        """The decoder layers' operators scaled to the layers run (their all-reduce bytes too;
        `extras` adds the latency), then the predictors'."""
        out = [op if op.op in OUTSIDE_LAYERS else scale_op(op, self.share)
               for op in super().ops(batch, new_tokens, context_len, **ssm)]
        if self.predictors:
            tokens = np.asarray(batch, dtype=float) * np.asarray(new_tokens, dtype=float)
            shapes = ((self.model.d_model, self.candidates),
                      (FEATURES_PER_CANDIDATE * self.candidates, self.hidden), (self.hidden, 1))
            for name, (d_in, d_out) in zip(PREDICTOR, shapes, strict=True):
                out.append(scale_op(linear_op(name, 1, tokens, d_in, d_out, 2.0, False),
                                    self.predictors))
        return out

    @property
    def device_layers(self) -> float:
        """The layers run and the predictor runs' share of a layer's per-layer terms."""
        return self.exit_layers + self.predictors * self.predictor_share

    @property
    def host_layers(self) -> float:
        """As `device_layers`: an eager host issues the layers run and the predictors."""
        return self.device_layers

    def extras(self, ops: list[OpCost]) -> dict[str, np.ndarray]:
        """The plain terms, with the all-reduce latency of the layers run only."""
        out = super().extras(ops)
        if self.tp > 1:
            reduces = sum(op.count for op in layer_ops(ops)
                          if np.any(np.asarray(op.reduce_bytes) > 0))
            out["comm"] = out["comm"] + (self.share - 1) * reduces * self.hw.allreduce_latency_s
        return out

    def forward(self, batch: int, new_tokens: Any, context_len: Any) -> StepCost:
        """The plain target's forward (measured where the profile measured it) scaled by this
        roofline's ratio to the plain roofline."""
        step = self.plain.forward(batch, new_tokens, context_len)
        ratio = (self.roofline_time(batch, new_tokens, context_len)
                 / self.plain.roofline_time(batch, new_tokens, context_len))
        time = np.asarray(step.time_s) * ratio
        return StepCost(float(time) if time.ndim == 0 else time, step.source)


def _exit_layers(case: Case, layers: int) -> float:
    """The case's mean layers per token (`exit_layers` or `exit_fraction`), checked."""
    given = [k for k in ("exit_layers", "exit_fraction") if k in case.options]
    if len(given) > 1:
        raise case.fail("give one of exit_layers and exit_fraction")
    if "exit_fraction" in case.options:
        fraction = float(case.options["exit_fraction"])
        if not 0.0 < fraction <= 1.0:
            raise case.fail(f"exit_fraction = {fraction:g} must lie in (0, 1]")
        exit_layers = fraction * layers
    else:
        exit_layers = float(case.options.get("exit_layers", layers))
    if not 1.0 <= exit_layers <= layers:
        raise case.fail(f"exit_layers = {exit_layers:g} must lie in 1..{layers}")
    return exit_layers


def _options(case: Case, layers: int) -> tuple[float, int, int, str]:
    candidates = case.options.get("candidates", CANDIDATES)
    hidden = case.options.get("predictor_hidden", PREDICTOR_HIDDEN)
    if candidates < 1 or hidden < 1:
        raise case.fail("candidates and predictor_hidden must be at least 1")
    speculator = case.options.get("speculator", "head")
    if speculator not in SPECULATORS:
        raise case.fail(f"speculator = {speculator!r} must be one of {', '.join(SPECULATORS)}")
    return _exit_layers(case, layers), candidates, hidden, speculator


def costs(case: Case) -> SystemCosts:
    """The early-exiting target and the head that proposes its candidates (None with
    `speculator = "none"`)."""
    plain = target_model(case)
    layers = plain.model.n_layers
    exit_layers, candidates, hidden, speculator = _options(case, layers)
    target = plain.variant(EarlyExitCost, exit_layers=exit_layers, candidates=candidates,
                           hidden=hidden, predictors=predictors_per_token(layers, exit_layers))
    if speculator == "none":
        return SystemCosts(target, None, "none", lossy=exit_layers < layers)
    return SystemCosts(target, head_model(case, plain.model), "head",
                       lossy=exit_layers < layers)


def predict(case: Case) -> Prediction:
    """A step of the early-exiting target (module docstring) against the plain target's
    autoregressive decoding."""
    c = costs(case)
    e = c.target
    exiting = pricing(case, e, c.drafter)
    if case.tree:
        if c.drafter is None:
            raise case.fail("a tree needs speculator = \"head\" to draft it")
        parts = tree_step(exiting, case.tree, c.source)
        tokens = case.tokens_per_step
    else:  # the head runs only to give the predictors their candidates
        parts = {"verify": float(exiting.target.forward_time(case.batch, 1,
                                                             exiting.context_len))}
        if e.predictors and c.drafter is not None:
            parts["draft"] = exiting.level_s(c.source)
        tokens = 1.0
    plain = pricing(case, e.plain, None)
    speculator = ("EAGLE-style head proposes the candidates"
                  + (" and drafts the tree" if case.tree else "")
                  if c.drafter is not None else "candidates taken as given (not priced)")
    return Prediction(
        tokens_per_step=tokens, step_s=sum(parts.values()), baseline_s=plain.autoregressive_s,
        batch=case.batch, parts=parts, lossy=c.lossy,
        assumptions=(f"{e.exit_layers:g} of {e.model.n_layers} layers per token, "
                     f"{e.predictors:.1f} predictor runs ({e.candidates} candidates, MLP "
                     f"{FEATURES_PER_CANDIDATE * e.candidates}→{e.hidden}→1)", speculator))


SYSTEM = System("specee", "Xu et al. 2025, SpecEE: Accelerating Large Language Model Inference "
                "with Speculative Early Exiting (ISCA 2025, arXiv:2504.08850)", costs, predict,
                OPTIONS, lossy=True)
