"""ViSpec (Kang, Shu, Li, Zhai and Chen 2025, "ViSpec: Accelerating Vision-Language Models with
Vision-Aware Speculative Decoding", arXiv:2509.15235): an EAGLE-style head drafts for a
vision-language target, seeing each image compressed to a few tokens.

Modelled, as the authors' code (github.com/KangJialiang/ViSpec, `cnets_ours.py`) runs it:

- The target holds each request's images as `image_tokens` LM tokens apiece (the catalogue's
  `image_tokens`) before the text prompt (`context`), so every verification and every
  autoregressive step reads their KV; `SystemCosts.prompt_tokens` hands them to the simulator.
- The draft is an EAGLE head (`head.head_model`: fc 2d → d, one decoder layer, the target's LM
  head at 16 bits) whose KV holds the text and, per image, `query_tokens` − 1 tokens: the vision
  adaptor cross-attends `query_tokens` learned queries (the code's `num_q`, 2 in the released
  checkpoints) over the image's embeddings, keeps all but the last in the draft's sequence and
  injects the last, the image's global feature, into every later token through `img_fc`
  (2d → d), one more projection per drafted token.
- EAGLE-2's dynamic tree: `depth` 3, `top_k` 8, `total_token` 30 is written as the levels it
  drafts, "8,8,8,6": the first head forward (on the accepted tokens) proposes level 1 and each
  of the 3 further forwards expands the 8 nodes kept, so the head runs forwards of 1, 8, 8 and
  8 nodes (EAGLE-2's depth counts the expansions after the first level); the target verifies
  31 tokens. Speedups are over autoregressive decoding of the same target.
- The vision encoder (`spec.vision_encoder`) runs once per image in prefill: a prompt of
  `image_patches` tokens per image, split into sequences no longer than the encoder's
  `max_seq_len` (LLaVA-NeXT's 5 crops of 576 patches). It is reported as the `vision_encoder`
  part (seconds per request, not per step) and left out of the speedup unless the prefill is
  timed.
- A timed prefill (the case key `timed_prefill`, the paper's protocol: the authors' scripts
  time whole requests, `wall_time` around `specgenerate` and around the baseline's loop,
  prompt included, and divide by the tokens generated): `reproduce` spreads each request's
  prefill over its `new_tokens` in both times per token. ViSpec's prefill (`prefill_s`) is the
  vision encoder and the target's prompt forward over image and text tokens, and for ViSpec
  the head's prompt forward over the text and the compressed images too.

Approximated: the adaptor's cross-attention (a few learned queries per image) is not priced;
EAGLE-2's reranking and tree bookkeeping are host work the profile's per-level terms stand for;
the first draft forward of the accepted tokens is priced as one token; every step is priced at
the case's mean decoding context.
"""

from __future__ import annotations

from typing import Any

from specscope.models import get_model
from specscope.models.ops import OpCost, linear_op
from specscope.models.spec import ModelSpec
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.head import HeadCost, head_model, head_spec
from specscope.systems.step import (
    Prediction,
    cost_model,
    pricing,
    target_model,
    tree_step,
)

QUERY_TOKENS = 2
"""Learned queries of the vision adaptor per image (`--num-q 2`, the released checkpoints)."""

OPTIONS: dict[str, type | tuple[type, ...]] = {"query_tokens": int}
"""query_tokens: the adaptor's queries per image (default `QUERY_TOKENS`)."""


class ViSpecHeadCost(HeadCost):
    """A `HeadCost` plus ViSpec's global-feature projection `img_fc` (2d → d) per token."""

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        d = self.model.d_model
        img_fc = linear_op("img_fc", 1, batch * new_tokens, 2 * d, d, 2.0, False)
        return [*super().ops(batch, new_tokens, context_len, **ssm), img_fc]


def _query_tokens(case: Case) -> int:
    queries = case.options.get("query_tokens", QUERY_TOKENS)
    if queries < 1:
        raise case.fail(f"query_tokens = {queries} must be at least 1")
    return queries


def _vlm(case: Case) -> ModelSpec:
    """The case's target, checked to see images when the case has them."""
    spec = get_model(case.target)
    if case.images and (not spec.vision_encoder or spec.image_tokens < 1):
        raise case.fail(f"target {spec.name} has no vision encoder for images = {case.images}")
    return spec


def draft_model(case: Case, target: ModelSpec) -> HeadCost:
    """ViSpec's head of `target`: the EAGLE head, with `img_fc` when the request has images."""
    if not case.images:
        return head_model(case, target)
    return cost_model(case, head_spec(target), cls=ViSpecHeadCost)


def costs(case: Case) -> SystemCosts:
    """The target as the case states it, drafted by ViSpec's head; each prompt gains its
    images' tokens."""
    spec = _vlm(case)
    _query_tokens(case)
    target = target_model(case)
    return SystemCosts(target, draft_model(case, target.model), "vispec",
                       prompt_tokens=case.images * spec.image_tokens)


def vision_encoder_s(case: Case, spec: ModelSpec) -> float:
    """Seconds of the vision encoder over the batch's images: per image, `image_patches` tokens
    in sequences of at most the encoder's `max_seq_len` (0 without images)."""
    if not case.images:
        return 0.0
    encoder = cost_model(case, spec.vision_encoder)
    crops = -(-spec.image_patches // encoder.model.max_seq_len)
    return float(encoder.forward_time(case.batch * case.images * crops,
                                      spec.image_patches / crops, 0))


def prefill_s(case: Case) -> tuple[float, float]:
    """Seconds of the batch's prefill, (autoregressive, ViSpec): the vision encoder and the
    target's prompt forward over image and text tokens, ViSpec adding its head's prompt forward
    over the text and the compressed images (the models as the case's engine runs them)."""
    spec, c = _vlm(case), costs(case)
    deployed = pricing(case, c.target, c.drafter)
    prompt = case.context + c.prompt_tokens
    shared = vision_encoder_s(case, spec) + float(deployed.target.forward_time(case.batch,
                                                                                 prompt, 0))
    draft_prompt = case.context + case.images * (_query_tokens(case) - 1)
    return shared, shared + float(deployed.drafter.forward_time(case.batch, draft_prompt, 0))


def predict(case: Case) -> Prediction:
    """The case's tree drafted by ViSpec's head over the text and the compressed images,
    verified by the target over the text and the full image tokens, against autoregressive
    decoding of the same target behind the same images."""
    if not case.tree:
        raise case.fail("system vispec needs a tree (tokens per level)")
    spec, c = _vlm(case), costs(case)
    queries = _query_tokens(case)
    target_at = pricing(case, c.target, c.drafter, case.decode_context + c.prompt_tokens)
    draft_at = pricing(case, c.target, c.drafter,
                       case.decode_context + case.images * (queries - 1))
    parts = tree_step(target_at, case.tree, c.source)
    parts["draft"] = tree_step(draft_at, case.tree, c.source)["draft"]
    assumptions = [
        f"target context {target_at.context_len} tokens ({c.prompt_tokens} image tokens), "
        f"draft context {draft_at.context_len} ({queries - 1} per image and a global feature)",
        "one-layer EAGLE head with a 16-bit LM head over the full vocabulary",
    ]
    step = sum(parts.values())
    if case.images:
        parts["vision_encoder"] = vision_encoder_s(case, spec)
        assumptions.append(f"vision_encoder: {spec.vision_encoder} once per request, not a "
                           "part of the step")
    return Prediction(tokens_per_step=case.tokens_per_step, step_s=step,
                      baseline_s=target_at.autoregressive_s,
                      batch=case.batch, parts=parts, assumptions=tuple(assumptions))


SYSTEM = System("vispec", "Kang et al. 2025, ViSpec: Accelerating Vision-Language Models with "
                "Vision-Aware Speculative Decoding (arXiv:2509.15235)", costs, predict, OPTIONS,
                prompts=prefill_s)
