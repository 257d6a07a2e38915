"""Draft heads (EAGLE, Li et al. 2024, arXiv:2401.15077; EAGLE-2, arXiv:2406.16858): one decoder
layer on the target's features drafts, and every level ends in the target's LM head over the
full vocabulary. Most of the papers priced here draft this way.

The head is priced as a one-layer model of the target's shape (`head_spec`): its fc (the
concatenated feature and token embedding, 2d → d), one attention and MLP block over its own KV
cache of the whole context, the final norm and an untied LM head of the target's vocabulary at
16 bits (on a Llama-3 target, 128k × 4096: 1 GB read per level, often more than the layer).
The head runs at the target's tensor parallelism (vLLM's and SGLang's EAGLE workers share the
target's group). `vocab` gives the head its own LM-head vocabulary: an EAGLE-3 head drafts over
a reduced one (`draft_vocab_size` 32,000 in SpecForge's configs/llama3-8B-eagle3.json and
llama3-70B-ealge3.json) and maps its tokens into the target's. `verified` sets the tokens a step
verifies when the head drafts more candidates than it verifies: SGLang's EAGLE worker keeps
`topk` beams a level (the case's tree gives the beams each level keeps, "3,3,3,3,3" for 5 steps
at top-3: levels forward 1, 3, 3, 3, 3 nodes) and verifies the best `num_draft_tokens` of their
candidates, the root counted.
A head is a dense Llama decoder layer whatever its target (SpecForge's EAGLE-3 heads are all
`LlamaForCausalLMEagle3`, one layer): for a mixture-of-experts target the layer keeps the
target's width, attention heads and vocabulary but none of its MoE fields (routed and shared
experts, first dense layers), MTP modules or sliding-window layers, and its SwiGLU MLP is
`head_ff` wide, the head's own intermediate_size (an option read from the head's published
config; without it `MOE_HEAD_FF` × d_model, the width of SpecForge's heads for Qwen3-30B-A3B,
Qwen3-Coder-30B-A3B, Qwen3-235B-A22B and gpt-oss-20b/120b: configs/qwen3-30B-A3B-eagle3.json
and the others, 12,288 at d_model 2,048, 24,576 at 4,096, 17,280 at 2,880). A multi-head
latent attention target's (DeepSeek-V3's) head attends as plain multi-head attention with the
heads the catalogue states for it (n_heads × head_dim, the query-key width MLA expands to, one
KV head per query head), not through the latent. A dense target's head is its one layer as
before (`head_ff`, when given, sets its MLP width too).
Approximated: EAGLE-2's reranking of the expanded candidates (host work the profile's per-level
terms stand for) and the head's own top-k; EAGLE-3's fusion of three of the target's layers'
features (its fc takes 3d, priced as EAGLE's 2d).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specscope.hw_profiles import CostModel
from specscope.hw_profiles.deployment import MIN_DRAFT_VOCAB
from specscope.models.ops import OpCost, linear_op
from specscope.models.spec import ModelSpec
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import Prediction, cost_model, pricing, speculative, target_model

MOE_HEAD_FF = 6
"""A mixture-of-experts target's head MLP width per d_model when no `head_ff` is given:
SpecForge's EAGLE-3 heads for Qwen3-30B-A3B, Qwen3-Coder-30B-A3B, Qwen3-235B-A22B and
gpt-oss-20b/120b (intermediate_size = 6 × hidden_size in their configs; its others range
2.7-8×)."""


def head_spec(target: ModelSpec, vocab: int | None = None, ff: int | None = None) -> ModelSpec:
    """One dense decoder layer of `target`'s shape with the target's vocabulary (or `vocab`), at
    16 bits; its MLP `ff` wide (default: the target's d_ff, or `MOE_HEAD_FF` × d_model for a
    mixture-of-experts target). An MoE or latent-attention target's MoE, MTP, latent and
    sliding-window fields are dropped: the head is a plain Llama layer (module docstring)."""
    name = f"{target.name}/head" + ("" if vocab is None else f"-vocab-{vocab}") + (
        "" if ff is None else f"-ff-{ff}")
    dense: dict[str, Any] = {}
    if target.moe or target.mla or target.mtp_layers or target.sliding_layers:
        dense = dict(n_experts=0, experts_per_token=0, d_expert=0, d_shared=0,
                     first_dense_layers=0, kv_lora_rank=0, q_lora_rank=0, qk_nope_head_dim=0,
                     qk_rope_head_dim=0, v_head_dim=0, sliding_window=0, sliding_layers=(),
                     mtp_layers=0)
        if target.mla:
            dense["n_kv_heads"] = target.n_heads
    if ff is None and target.moe:
        ff = MOE_HEAD_FF * target.d_model
    if ff is not None:
        dense["d_ff"] = ff
    return dataclasses.replace(target, name=name, n_layers=1, arch="transformer",
                               attn_layers=(), tie_embeddings=False, weight_bits=16,
                               vision_encoder="", image_tokens=0, image_patches=0,
                               vocab_size=vocab or target.vocab_size, **dense)


class HeadCost(CostModel):
    """A `CostModel` of `head_spec`, plus the head's fc projection (2d → d) per token."""

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        d = self.model.d_model
        fc = linear_op("head_fc", 1, batch * new_tokens, 2 * d, d, 2.0, False)
        return [*super().ops(batch, new_tokens, context_len, **ssm), fc]


def head_model(case: Case, target: ModelSpec) -> HeadCost:
    """The head of `target` on the case's hardware and runtime, at the case's tp, with the
    case's `vocab` (default: the target's) and MLP width `head_ff` (default: `head_spec`'s)."""
    vocab = case.options.get("vocab")
    least = min(MIN_DRAFT_VOCAB, target.vocab_size)
    if vocab is not None and not least <= vocab <= target.vocab_size:
        raise case.fail(f"vocab = {vocab} must lie in {least}..{target.vocab_size} (the "
                        "target's; hw_profiles.deployment.MIN_DRAFT_VOCAB)")
    ff = case.options.get("head_ff")
    if ff is not None and ff < 1:
        raise case.fail(f"head_ff = {ff} must be positive (the head's intermediate_size)")
    return cost_model(case, head_spec(target, vocab, ff), cls=HeadCost, tp=case.tp)


def costs(case: Case) -> SystemCosts:
    """The target as the case states it, drafted by its head."""
    target = target_model(case)
    return SystemCosts(target, head_model(case, target.model), "head")


def predict(case: Case) -> Prediction:
    """The case's tree drafted by an EAGLE-style head of the target, verified by the target."""
    if not case.tree:
        raise case.fail("system head needs a tree (tokens per level)")
    c = costs(case)
    vocab, verified = case.options.get("vocab"), case.options.get("verified")
    most = 1 + sum(case.tree) * max(case.tree, default=0)
    if verified is not None and not 2 <= verified <= most:
        raise case.fail(f"verified = {verified} must lie in 2..{most} (the candidates the "
                        "tree's beams propose)")
    over = "the full vocabulary" if vocab is None else f"a {vocab:,}-token draft vocabulary"
    shape = "the target's shape"
    if c.target.model.moe or c.target.model.mla:
        shape = f"dense Llama shape (d_model {c.drafter.model.d_model}, MLP {c.drafter.model.d_ff})"
    return speculative(case, pricing(case, c.target, c.drafter), c.source, assumptions=[
        f"one-layer head of {shape} with a 16-bit LM head over {over}"], verified=verified)


SYSTEM = System("head", "Li et al. 2024, EAGLE-2: Faster Inference of Language Models with "
                "Dynamic Draft Trees (arXiv:2406.16858)", costs, predict,
                {"vocab": int, "verified": int, "head_ff": int})
