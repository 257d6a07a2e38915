"""Draft heads (EAGLE, Li et al. 2024, arXiv:2401.15077; EAGLE-2, arXiv:2406.16858): one decoder
layer on the target's features drafts, and every level ends in the target's LM head over the
full vocabulary. Most of the papers priced here draft this way.

The head is priced as a one-layer model of the target's shape (`head_spec`): its fc (the
concatenated feature and token embedding, 2d → d), one attention and MLP block over its own KV
cache of the whole context, the final norm and an untied LM head of the target's vocabulary at
16 bits (on a Llama-3 target, 128k × 4096: 1 GB read per level, often more than the layer).
Approximated: EAGLE-2's reranking of the expanded candidates (host work the profile's per-level
terms stand for) and the head's own top-k.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specscope.hw_profiles import CostModel
from specscope.models.ops import OpCost, linear_op
from specscope.models.spec import ModelSpec
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import Prediction, cost_model, pricing, speculative, target_model


def head_spec(target: ModelSpec) -> ModelSpec:
    """One decoder layer of `target`'s shape with the target's vocabulary, at 16 bits."""
    return dataclasses.replace(target, name=f"{target.name}/head", n_layers=1, arch="transformer",
                               attn_layers=(), tie_embeddings=False, weight_bits=16,
                               vision_encoder="", image_tokens=0, image_patches=0)


class HeadCost(CostModel):
    """A `CostModel` of `head_spec`, plus the head's fc projection (2d → d) per token."""

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        d = self.model.d_model
        fc = linear_op("head_fc", 1, batch * new_tokens, 2 * d, d, 2.0, False)
        return [*super().ops(batch, new_tokens, context_len, **ssm), fc]


def head_model(case: Case, target: ModelSpec) -> HeadCost:
    """The head of `target` on the case's hardware and runtime."""
    return cost_model(case, head_spec(target), cls=HeadCost)


def costs(case: Case) -> SystemCosts:
    """The target as the case states it, drafted by its head."""
    target = target_model(case)
    return SystemCosts(target, head_model(case, target.model), "head")


def predict(case: Case) -> Prediction:
    """The case's tree drafted by an EAGLE-style head of the target, verified by the target."""
    if not case.tree:
        raise case.fail("system head needs a tree (tokens per level)")
    c = costs(case)
    return speculative(case, pricing(case, c.target, c.drafter), c.source, assumptions=[
        "one-layer head of the target's shape with a 16-bit LM head over the full vocabulary"])


SYSTEM = System("head", "Li et al. 2024, EAGLE-2: Faster Inference of Language Models with "
                "Dynamic Draft Trees (arXiv:2406.16858)", costs, predict, {})
