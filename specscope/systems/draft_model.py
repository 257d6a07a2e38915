"""Draft-model speculation (Leviathan et al. 2023; Chen et al. 2023): a small catalogue model
drafts the tree level by level, the target verifies it in one forward. The reference every other
system is measured against."""

from __future__ import annotations

from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import Prediction, cost_model, pricing, speculative, target_model


def costs(case: Case) -> SystemCosts:
    """The target as the case states it, and the `draft` catalogue model at 16 bits, on the
    devices the case's engine gives a draft (`Deployment.draft_tp`: vLLM's and SGLang's shard it
    as the target)."""
    if case.draft is None:
        raise case.fail("system draft-model needs a draft (a catalogue model)")
    draft = cost_model(case, case.draft, tp=case.deployment.draft_tp)
    return SystemCosts(target_model(case), draft, f"draft:{case.draft}")


def predict(case: Case) -> Prediction:
    """The case's tree drafted by its draft model, one forward per level, verified by the
    target."""
    if not case.tree:
        raise case.fail("system draft-model needs a tree (tokens per level)")
    c = costs(case)
    return speculative(case, pricing(case, c.target, c.drafter), c.source,
                       assumptions=[f"draft {case.draft} at 16 bits, one forward per level"])


SYSTEM = System("draft-model", "Leviathan et al. 2023, Fast Inference from Transformers via "
                "Speculative Decoding (arXiv:2211.17192)", costs, predict, {})
