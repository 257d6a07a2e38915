"""SpecEE (Xu, Chen, Zhong, Xu, Li, Du, Ren, Zhang, Zhao and Liang 2025, "SpecEE: Accelerating
Large Language Model Inference with Speculative Early Exiting", ISCA 2025, arXiv:2504.08850).

An EAGLE-style head proposes `candidates` speculative tokens per step; the target runs its
layers until a per-layer predictor, reading the hidden state through the LM-head rows of those
few tokens only (k × d_model weights, not the vocabulary: how speculative tokens narrow the
predictor's vocabulary) and a small MLP (12 features → `predictor_hidden` → 1), says the token is
settled. Exits skip the remaining layers (lossy: the exited token is the predictor's choice).

Modelled:

- Exits: the case's `exit_layers` is the mean number of target layers a token runs (the paper
  publishes it per model: 22–24 of Llama-2-7B's 32). The exit distribution is taken uniform
  over the layers a..L whose mean is `exit_layers` (a = 2·exit_layers − L); SpecEE's scheduler
  places predictors only where exits happen, so a token runs one at each layer of that support
  it reaches, none at the last: for exit layer e, e − a + 1 predictors below L, L − a at L.
  `exit_layers` = L (the default) is no early exit: no predictor, the plain target.
- A forward's layers cost in proportion to the layers run (every per-layer operator, the
  runtime's per-layer device and host terms, `EarlyExitCost`); embedding, final norm and LM
  head once. Each predictor is three small operations: the candidates' logits (d → k), the MLP
  (12 → hidden → 1), run as one kernel: its device per-layer gap and, eager, its host issue
  time as that share of a decoder layer's (1 kernel of a layer's 7).
- With a tree (EAGLE + SpecEE, the paper's 2.25× setting) the head drafts it and the target
  verifies it with early exits; without one, the head proposes the `candidates` in one
  forward (only when a predictor runs) and the target decodes one token per early-exiting
  forward. Speedup is over autoregressive decoding of the plain target.

Approximated: every token of a verification exits at the mean; the skipped layers' KV (SpecEE
fills it from the exit layer) is not priced; the features' own computation is folded into the
MLP.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from specscope.hw_profiles import CostModel
from specscope.models.ops import OpCost, linear_op
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.head import head_model
from specscope.systems.step import Prediction, pricing, target_model, tree_step

CANDIDATES = 4
"""Speculative tokens the predictors read (the paper's 4 EAGLE draft tokens)."""
PREDICTOR_HIDDEN = 512
"""The predictor MLP's hidden width (the paper's two-layer MLP)."""
FEATURES = 12
"""Features the predictor reads (the paper's 12, from the 4 speculative tokens)."""
PREDICTOR_OPS, LAYER_OPS = 1, 7
"""Kernels of a predictor (the authors' C++/CUDA back end runs it as one: the paper measures
0.9 ms per token for ~10 predictors on an A100, about one launch each) and of a decoder layer
(norms, projections, attention, MLP)."""
_OUTSIDE = ("embedding", "final_norm", "lm_head")
_SCALED = ("flops", "weight_bytes", "act_bytes", "kv_bytes", "qweights", "reduce_bytes")

OPTIONS: dict[str, type | tuple[type, ...]] = {
    "exit_layers": (int, float), "candidates": int, "predictor_hidden": int}
"""exit_layers: mean target layers run per token (default: all, no early exit); candidates: the
head's speculative tokens the predictors read (default `CANDIDATES`); predictor_hidden: the
predictor MLP's width (default `PREDICTOR_HIDDEN`)."""


def predictors_per_token(layers: int, exit_layers: float) -> float:
    """Expected predictor runs per token: exits uniform over a..L with mean `exit_layers`,
    one predictor at each layer of that support a token reaches, none at the last."""
    a = round(2 * exit_layers - layers)
    support = np.arange(a, layers + 1)
    runs = np.where(support < layers, support - a + 1, layers - a)
    return float(runs.mean())


class EarlyExitCost(CostModel):
    """The target running `exit_layers` of its layers per token, plus `predictors` predictor
    runs per token (module docstring)."""

    def __init__(self, *args: Any, exit_layers: float, predictors: float, candidates: int,
                 hidden: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exit_layers, self.predictors = exit_layers, predictors
        self.candidates, self.hidden = candidates, hidden

    @property
    def _share(self) -> float:
        return self.exit_layers / self.model.n_layers

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        """The layers' operators scaled to the layers run, and the predictors'."""
        out = []
        for op in super().ops(batch, new_tokens, context_len, **ssm):
            if op.op not in _OUTSIDE:
                op = dataclasses.replace(op, **{k: getattr(op, k) * self._share
                                                for k in _SCALED})
            out.append(op)
        if self.predictors:
            tokens = np.asarray(batch, dtype=float) * np.asarray(new_tokens, dtype=float)
            for op in (linear_op("predictor_logits", 1, tokens, self.model.d_model,
                                 self.candidates, 2.0, False),
                       linear_op("predictor_mlp_in", 1, tokens, FEATURES, self.hidden, 2.0,
                                 False),
                       linear_op("predictor_mlp_out", 1, tokens, self.hidden, 1, 2.0, False)):
                out.append(dataclasses.replace(op, **{k: getattr(op, k) * self.predictors
                                                      for k in _SCALED}))
        return out

    def extras(self, ops: list[OpCost]) -> dict[str, np.ndarray]:
        """The per-layer device term for the layers run and the predictors' gaps."""
        out = super().extras(ops)
        r, layers = self.runtime, self.model.n_layers
        runs = self.exit_layers - layers + self.predictors * PREDICTOR_OPS / LAYER_OPS
        out["overhead"] = out["overhead"] + runs * r.layer_s
        return out

    def host_time(self, context_len: Any) -> np.ndarray:
        """The host's issue time for the layers run and the predictors (eager: per operator)."""
        r, layers = self.runtime, self.model.n_layers
        runs = self.exit_layers - layers + self.predictors * PREDICTOR_OPS / LAYER_OPS
        layer = np.where(np.asarray(context_len) == 0, r.prefill_host_layer_s, r.host_layer_s)
        return super().host_time(context_len) + runs * layer


def _options(case: Case, layers: int) -> tuple[float, int, int]:
    exit_layers = float(case.options.get("exit_layers", layers))
    if not 1.0 <= exit_layers <= layers:
        raise case.fail(f"exit_layers = {exit_layers:g} must lie in 1..{layers}")
    candidates = case.options.get("candidates", CANDIDATES)
    hidden = case.options.get("predictor_hidden", PREDICTOR_HIDDEN)
    if candidates < 1 or hidden < 1:
        raise case.fail("candidates and predictor_hidden must be at least 1")
    return exit_layers, candidates, hidden


def costs(case: Case) -> SystemCosts:
    """The early-exiting target and the head that proposes its candidates."""
    plain = target_model(case)
    exit_layers, candidates, hidden = _options(case, plain.model.n_layers)
    target = EarlyExitCost(
        plain.hw, plain.model, weight_bits=plain.weight_bits, tp=plain.tp,
        runtime=plain.runtime.name, act_bits=plain.act_bits, quant_lm_head=plain.quant_lm_head,
        exit_layers=exit_layers, candidates=candidates, hidden=hidden,
        predictors=predictors_per_token(plain.model.n_layers, exit_layers))
    return SystemCosts(target, head_model(case, plain.model), "head",
                       lossy=exit_layers < plain.model.n_layers)


def predict(case: Case) -> Prediction:
    """A step of the early-exiting target (module docstring) against the plain target."""
    c = costs(case)
    plain = pricing(case, target_model(case), c.drafter)
    exiting = pricing(case, c.target, c.drafter)
    if case.tree:
        parts = tree_step(exiting, case.tree, c.source)
        tokens = case.tokens_per_step
    else:  # the head runs only to give the predictors their candidates
        parts = {"verify": float(c.target.forward_time(case.batch, 1, exiting.context_len))}
        if c.target.predictors:
            parts["draft"] = exiting.level_s(c.source)
        tokens = 1.0
    e = c.target
    return Prediction(
        tokens_per_step=tokens, step_s=sum(parts.values()), baseline_s=plain.autoregressive_s,
        batch=case.batch, parts=parts, lossy=c.lossy,
        assumptions=(f"{e.exit_layers:g} of {e.model.n_layers} layers per token, "
                     f"{e.predictors:.1f} predictor runs ({e.candidates} candidates, MLP "
                     f"{FEATURES}→{e.hidden}→1)",
                     "EAGLE head proposes the candidates" + (" and drafts the tree"
                                                             if case.tree else "")))


SYSTEM = System("specee", "Xu et al. 2025, SpecEE: Accelerating Large Language Model Inference "
                "with Speculative Early Exiting (ISCA 2025, arXiv:2504.08850)", costs, predict,
                OPTIONS, lossy=True)
