"""FastDraft (Zafrir, Margulis, Shteyman, Guskin and Boudoukh 2024, Intel Labs, "FastDraft: How
to Train Your Draft", arXiv:2411.11055): a small draft pre-trained from scratch on the target's
vocabulary (about 10B tokens of web text and code) and aligned on target-generated data, then
used for draft-model speculation on an AI PC (Intel Core Ultra).

The paper's sweep dimensions are the draft's size and its training budget; their effect on
quality is what it publishes (acceptance, block efficiency), so both are inputs here:

- the draft's architecture: a catalogue `draft`, or a spec built from `draft_layers` and
  `draft_d_model` in the family of the target, or of the case's `draft` when one is named (a
  sweep's drafter; it must share the target's vocabulary) (`draft_spec`: the family's head
  dimension, its ratio of query to KV heads, its MLP ratio d_ff / d_model unless
  `draft_d_ff` is given, and its vocabulary and tied-embedding choice);
- its quality: the case's τ, as published for that draft after its training (`train_tokens`,
  recorded into the prediction's assumptions; it does not change the price).

One step drafts the case's tree level by level with the draft at `draft_bits` (default 16;
OpenVINO deployments compress the draft like the target) and verifies it with the target at
the case's weight bits, as draft-model speculation does (`step.speculative`), on the case's
profile and runtime.

Approximated: τ is the published mean for the benchmark, not a function of train_tokens (no
scaling law is assumed); a built draft's parameter count is what its shape gives, which may
differ from the published count by the embedding choice.
"""

from __future__ import annotations

import dataclasses

from specscope.models import get_model
from specscope.models.ops import param_count
from specscope.models.spec import ModelSpec
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import Prediction, cost_model, pricing, speculative, target_model

OPTIONS: dict[str, type | tuple[type, ...]] = {
    "draft_layers": int, "draft_d_model": int, "draft_d_ff": int, "draft_bits": int,
    "train_tokens": (int, float)}
"""draft_layers, draft_d_model (and optionally draft_d_ff): build the draft in the target's
family instead of naming a catalogue `draft`; draft_bits: the draft's weight bits (default 16);
train_tokens: the draft's training budget in tokens (recorded, must be positive)."""


def draft_spec(target: ModelSpec, layers: int, d_model: int, d_ff: int | None = None
               ) -> ModelSpec:
    """A draft of `layers` × `d_model` in `target`'s family (module docstring)."""
    heads = d_model // target.head_dim
    kv = max(1, heads * target.n_kv_heads // target.n_heads)
    ff = round(target.d_ff * d_model / target.d_model) if d_ff is None else d_ff
    return dataclasses.replace(
        target, name=f"{target.name}/draft-L{layers}-d{d_model}", n_layers=layers,
        d_model=d_model, n_heads=heads, n_kv_heads=kv, d_ff=ff, attn_layers=(),
        arch="transformer", weight_bits=16, vision_encoder="", image_tokens=0, image_patches=0)


def _built(case: Case) -> bool:
    return any(k in case.options for k in ("draft_layers", "draft_d_model", "draft_d_ff"))


def draft(case: Case) -> ModelSpec:
    """The case's draft: its catalogue `draft`, or the spec its draft_* options build."""
    if not _built(case):
        if case.draft is None:
            raise case.fail("system fastdraft needs a draft: a catalogue model, or "
                            "draft_layers and draft_d_model")
        return get_model(case.draft)
    if "draft_layers" not in case.options or "draft_d_model" not in case.options:
        raise case.fail("a built draft needs both draft_layers and draft_d_model")
    target = get_model(case.target)
    if case.draft is not None:  # built in the family of the named draft (a sweep's drafter)
        family = get_model(case.draft)
        if family.vocab_size != target.vocab_size:
            raise case.fail(f"draft {family.name} has {family.vocab_size} tokens, target "
                            f"{target.name} {target.vocab_size}: no shared vocabulary")
        target = family
    layers, d_model = case.options["draft_layers"], case.options["draft_d_model"]
    d_ff = case.options.get("draft_d_ff")
    if layers < 1 or (d_ff is not None and d_ff < 1):
        raise case.fail("draft_layers and draft_d_ff must be at least 1")
    if target.arch != "transformer":
        raise case.fail(f"a built draft needs a transformer target, {target.name} is "
                        f"{target.arch}")
    if d_model < target.head_dim or d_model % target.head_dim:
        raise case.fail(f"draft_d_model = {d_model} must be a multiple of the target's head "
                        f"dimension {target.head_dim}")
    return draft_spec(target, layers, d_model, d_ff)


def _train_tokens(case: Case) -> float | None:
    tokens = case.options.get("train_tokens")
    if tokens is not None and not tokens > 0:
        raise case.fail(f"train_tokens = {tokens:g} must be positive")
    return tokens


def costs(case: Case) -> SystemCosts:
    """The target as the case states it, drafted by the case's draft at `draft_bits`."""
    spec = draft(case)
    _train_tokens(case)
    bits = case.options.get("draft_bits", 16)
    return SystemCosts(target_model(case), cost_model(case, spec, weight_bits=bits),
                       f"draft:{case.draft or spec.name}")  # a sweep prices its drafter's source


def predict(case: Case) -> Prediction:
    """The case's tree drafted by the FastDraft draft and verified by the target, against
    autoregressive decoding of the target."""
    if not case.tree:
        raise case.fail("system fastdraft needs a tree (tokens per level)")
    c = costs(case)
    spec, tokens = c.drafter.model, _train_tokens(case)
    budget = (f"trained on {tokens:.3g} tokens" if tokens is not None
              else "training budget not given")
    return speculative(case, pricing(case, c.target, c.drafter), c.source, assumptions=[
        f"draft {spec.name}: {spec.n_layers} layers × {spec.d_model}, "
        f"{param_count(spec) / 1e6:.0f}M parameters at {c.drafter.weight_bits} bits, "
        f"{budget}; τ = {case.tokens_per_step:g} (the case's, for this draft)"])


SYSTEM = System("fastdraft", "Zafrir et al. 2024, FastDraft: How to Train Your Draft "
                "(arXiv:2411.11055)", costs, predict, OPTIONS)
