"""Kangaroo (Liu, Wang, Zhu, Zhang, Zheng, Chen and Han 2024, "Kangaroo: Lossless Self-Speculative
Decoding for Accelerating LLMs via Double Early Exiting", NeurIPS 2024, arXiv:2404.18911;
Equationliu/Kangaroo).

The draft is the target's first `exit_layer` layers (ℓ = 2 for Vicuna-7B, 3 for 13B) and an
adapter ("one multi-head attention and two normalization layers", the README) before the
target's own LM head. It drafts a chain token by token and stops early once its top-1
confidence falls below η (the second early exit; γ = 6 drafts at most, η = 0.6). Verification
runs only the remaining L − ℓ layers over the early-exited hidden states of the chain, since
the first ℓ already ran while drafting.

Priced: a draft token is a forward of ℓ target layers, the adapter (a layer's attention
operators: norm, QKV, attention over its own cache, output projection, and one more norm) and
the final norm and LM head (`KangarooDraftCost`); a verification is the target running L − ℓ of
its layers on the chain's tokens (`specee.EarlyExitCost`, no predictors), the embedding and LM
head whole. The baseline is the plain target. The confidence stop is given as `drafted`, the
mean tokens drafted per step (default the case's chain length γ, no early stop): η's effect on
the drafted length needs the draft's confidence distribution, which a case does not state.
Approximated: the chain's verification is priced at its γ + 1 tokens whatever is drafted.
"""

from __future__ import annotations

from typing import Any

from specscope.hw_profiles import CostModel
from specscope.models.catalogue import drafter_spec
from specscope.models.ops import OpCost, layer_ops, scale_op
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.specee import EarlyExitCost
from specscope.systems.step import Prediction, cost_model, pricing, target_model

ADAPTER_OPS = ("attn_norm", "qkv_proj", "attention", "o_proj")
"""A decoder layer's operators that make up the adapter's attention block."""
OPTIONS: dict[str, type | tuple[type, ...]] = {"exit_layer": int, "drafted": (int, float)}
"""exit_layer: the target layers the draft runs (ℓ; default 2, the authors' Vicuna-7B
setting); drafted: mean tokens drafted per step (default the chain's length)."""


class KangarooDraftCost(CostModel):
    """The target's first ℓ layers (the model's layers) and the adapter's attention block."""

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        out = super().ops(batch, new_tokens, context_len, **ssm)
        one = self.model.n_layers
        adapter = [op for op in out if op.op in ADAPTER_OPS]
        return [*out, *(scale_op(op, 1 / one) for op in adapter),
                scale_op(next(op for op in out if op.op == "attn_norm"), 1 / one)]

    @property
    def device_layers(self) -> float:
        return self.model.n_layers + (len(ADAPTER_OPS) + 1) / len(
            layer_ops(CostModel.ops(self, 1, 1, 1)))

    @property
    def host_layers(self) -> float:
        return self.device_layers


def _exit_layer(case: Case, layers: int) -> int:
    exit_layer = case.options.get("exit_layer", 2)
    if not 1 <= exit_layer < layers:
        raise case.fail(f"exit_layer = {exit_layer} must lie in 1..{layers - 1}")
    return exit_layer


def _options(case: Case, layers: int) -> tuple[int, float]:
    if not case.tree or any(w != 1 for w in case.tree):
        raise case.fail("system kangaroo drafts a chain: give tree as 1,1,… (γ levels)")
    exit_layer = _exit_layer(case, layers)
    drafted = float(case.options.get("drafted", len(case.tree)))
    if not 1.0 <= drafted <= len(case.tree):
        raise case.fail(f"drafted = {drafted:g} must lie in 1..{len(case.tree)} (the chain)")
    return exit_layer, drafted


def costs(case: Case) -> SystemCosts:
    """The target verifying with its last L − ℓ layers, and the shallow draft."""
    plain = target_model(case)
    layers = plain.model.n_layers
    exit_layer = _exit_layer(case, layers)
    target = plain.variant(EarlyExitCost, exit_layers=layers - exit_layer, predictors=0.0,
                           candidates=1, hidden=1)
    spec = drafter_spec(None, plain.model, exit_layer / layers, "kangaroo")
    draft = cost_model(case, spec, cls=KangarooDraftCost, weight_bits=case.weight_bits,
                       act_bits=case.act_bits, quant_lm_head=False)
    return SystemCosts(target, draft, "kangaroo")


def predict(case: Case) -> Prediction:
    """`drafted` shallow draft forwards, one verification by the remaining layers, the loop's
    bookkeeping; against the plain target's autoregressive decoding."""
    c = costs(case)
    exit_layer, drafted = _options(case, c.target.model.n_layers)
    price = pricing(case, c.target, c.drafter)
    tokens = case.tokens_per_step
    n = 1 + len(case.tree)
    parts = {"draft": drafted * price.level_s(c.source),
             "verify": price.verify_s(n, len(case.tree)),
             "bookkeeping": price.bookkeeping_for(tokens)}
    plain = pricing(case, c.target.plain, None)
    return Prediction(tokens_per_step=tokens, step_s=sum(parts.values()),
                      baseline_s=plain.autoregressive_s, batch=case.batch, parts=parts,
                      assumptions=(f"draft: {exit_layer} layers + adapter, {drafted:g} tokens "
                                   f"per step; verify: the last "
                                   f"{c.target.model.n_layers - exit_layer} layers",))


SYSTEM = System("kangaroo", "Liu et al. 2024, Kangaroo: Lossless Self-Speculative Decoding for "
                "Accelerating LLMs via Double Early Exiting (NeurIPS 2024, arXiv:2404.18911)",
                costs, predict, OPTIONS)
