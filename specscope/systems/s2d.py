"""S2D (Kavehzadeh, Pourreza, Valipour, Zhu, Bai, Ghodsi, Chen and Rezagholizadeh 2024, "S2D:
Sorted Speculative Decoding For More Efficient Deployment of Nested Large Language Models",
arXiv:2407.01955).

One draft model trained by sorted fine-tuning holds nested sub-drafts: its first k layers
followed by the shared final norm and LM head. One such draft serves several targets; per target
the deployment uses the sub-draft that drafts best for it. Modelled: sub-draft k is the `draft`
catalogue spec with n_layers = k (`dataclasses.replace`: same width, heads, vocabulary and LM
head), priced as a draft model drafting the case's tree level by level (`step.speculative`); the
case gives the sub-drafts (`sub_layers`) and the τ each reaches on this target (`sub_tau`, counted
as the case counts τ), and the prediction is the sub-draft with the highest predicted speedup.
Without `sub_layers` the draft is used whole at the case's τ (plain draft-model speculation).

Approximated: S2D's confidence-based switching between sub-drafts inside one step is replaced by
the one best fixed sub-draft per target (the τ a case gives for a sub-draft is what the paper
measured for it); the sub-draft's KV cache holds only its k layers.
"""

from __future__ import annotations

import dataclasses
import math

from specscope.models import get_model
from specscope.models.spec import ModelSpec
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case, check_tokens, tree_tokens
from specscope.systems.step import Prediction, cost_model, pricing, speculative, target_model

OPTIONS: dict[str, type | tuple[type, ...]] = {"sub_layers": str, "sub_tau": str}
"""sub_layers: the sub-drafts' layer counts, "6,9,12"; sub_tau: the τ each reaches on the
case's target, "2.1,2.4,2.6" (same order; counted with or without the bonus as the case's τ)."""


def _numbers(case: Case, key: str, kind: type) -> list:
    text = case.options[key]
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise case.fail(f"{key} = {text!r} must be comma-separated numbers") from None


def sub_drafts(case: Case) -> list[tuple[int, float]]:
    """(layers, τ) of every sub-draft the case gives; the whole draft at the case's τ when it
    gives none."""
    if case.draft is None:
        raise case.fail("system s2d needs a draft (the sorted draft, a catalogue model)")
    full = get_model(case.draft).n_layers
    if "sub_layers" not in case.options and "sub_tau" not in case.options:
        return [(full, case.tau)]
    if "sub_layers" not in case.options or "sub_tau" not in case.options:
        raise case.fail("system s2d needs both sub_layers and sub_tau")
    layers, taus = _numbers(case, "sub_layers", int), _numbers(case, "sub_tau", float)
    if not layers or len(layers) != len(taus):
        raise case.fail(f"sub_layers ({len(layers)}) and sub_tau ({len(taus)}) must give one "
                        "τ per sub-draft")
    for k in layers:
        if not 1 <= k <= full:
            raise case.fail(f"sub-draft of {k} layers: {case.draft} has 1..{full}")
    for tau in taus:
        if not math.isfinite(tau):
            raise case.fail(f"sub_tau {tau:g} is not a finite number")
        tokens = dataclasses.replace(case, tau=tau).tokens_per_step
        if tokens < 1.0:
            raise case.fail(f"sub_tau {tau:g} is below 1 token per step")
        check_tokens(case, tokens, tree_tokens(case), f"sub_tau {tau:g}")
    return list(zip(layers, taus, strict=True))


def sub_draft_spec(draft: ModelSpec, layers: int) -> ModelSpec:
    """The sorted draft's first `layers` layers with its final norm and LM head."""
    if layers == draft.n_layers:
        return draft
    return dataclasses.replace(draft, name=f"{draft.name}/L{layers}", n_layers=layers)


def _predict_sub(case: Case, layers: int, tau: float) -> Prediction:
    """The case's tree drafted by the `layers`-layer sub-draft reaching τ = `tau`."""
    sub = dataclasses.replace(case, tau=tau)
    c = _costs(case, layers)
    return speculative(sub, pricing(sub, c.target, c.drafter), c.source, assumptions=[
        f"sub-draft: the first {layers} of {get_model(case.draft).n_layers} layers of "
        f"{case.draft} with its LM head, τ = {tau:g}, at 16 bits"])


def choose(case: Case) -> tuple[int, Prediction]:
    """The sub-draft (its layers) with the highest predicted speedup, and its prediction."""
    if not case.tree:
        raise case.fail("system s2d needs a tree (tokens per level)")
    return max(((k, _predict_sub(case, k, tau)) for k, tau in sub_drafts(case)),
               key=lambda kp: kp[1].speedup)


def _costs(case: Case, layers: int) -> SystemCosts:
    spec = sub_draft_spec(get_model(case.draft), layers)
    return SystemCosts(target_model(case), cost_model(case, spec), f"draft:{case.draft}")


def costs(case: Case) -> SystemCosts:
    """The target as the case states it, drafted by the chosen sub-draft (with one sub-draft
    given, or none, no tree is needed to choose)."""
    subs = sub_drafts(case)
    layers = subs[0][0] if len(subs) == 1 else choose(case)[0]
    return _costs(case, layers)


def predict(case: Case) -> Prediction:
    """The best sub-draft's speculation (module docstring) against autoregressive decoding."""
    layers, best = choose(case)
    others = ", ".join(f"L{k}: τ {tau:g}" for k, tau in sub_drafts(case) if k != layers)
    extra = (f"chosen over {others} by predicted speedup",) if others else ()
    return dataclasses.replace(best, assumptions=(*best.assumptions, *extra))


SYSTEM = System("s2d", "Kavehzadeh et al. 2024, S2D: Sorted Speculative Decoding For More "
                "Efficient Deployment of Nested Large Language Models (arXiv:2407.01955)", costs,
                predict, OPTIONS)
