"""SWIFT (Xia, Li, Zhang, Yang, Yang, Li and Li 2025, "SWIFT: On-the-Fly Self-Speculative
Decoding for LLM Inference Acceleration", ICLR 2025, arXiv:2410.06916; hemingkx/SWIFT).

The target drafts for itself with some of its sublayers skipped and verifies with all of them.
The released code (evaluation_llama/inference_swift.py) keeps the first and the last layer and
skips attention and MLP sublayers of the other L − 2 layers separately, a fraction `skip_ratio`
(default 0.45, the code's and eval_llama.sh's) of those 2(L − 2) sublayers, chosen by its
on-the-fly (Bayesian) search. The draft therefore runs 1 − skip_ratio·(L − 2)/L of the target's
layers' work, reading the target's own weights and KV cache.

Priced as specscope's layer-skip drafter is (`models.catalogue.drafter_spec`): the target with
that share of its layers (rounded, at least one), the embedding and LM head whole, drafting the
case's tree level by level; the full target verifies. Approximated: sublayers skipped as whole
layers at the same share; the layer-set search, which runs a forward over the context window
on each step until it settles (`max_opt_iter`), is not priced; the confidence-aware early stop
of a draft is the case's tree (and τ).
"""

from __future__ import annotations

from specscope.models.catalogue import drafter_spec
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import Prediction, cost_model, pricing, speculative, target_model

SKIP_RATIO = 0.45
"""The released code's default skip ratio (inference_swift.py --skip-ratio, eval_llama.sh)."""
OPTIONS: dict[str, type | tuple[type, ...]] = {"skip_ratio": (int, float)}
"""skip_ratio: the fraction of the middle layers' sublayers the draft skips (default 0.45)."""


def kept_share(case: Case, layers: int) -> float:
    """The share of the target's layers the draft runs: 1 − skip_ratio·(L − 2)/L."""
    ratio = float(case.options.get("skip_ratio", SKIP_RATIO))
    if not 0.0 <= ratio < 1.0:
        raise case.fail(f"skip_ratio = {ratio:g} must lie in [0, 1)")
    if layers < 3:
        raise case.fail(f"SWIFT keeps the first and last layer; {case.target} has {layers}")
    return 1.0 - ratio * (layers - 2) / layers


def costs(case: Case) -> SystemCosts:
    """The target, and the target with `skip_ratio` of its middle sublayers skipped."""
    target = target_model(case)
    share = kept_share(case, target.model.n_layers)
    spec = drafter_spec(None, target.model, share, "swift")
    draft = cost_model(case, spec, weight_bits=case.weight_bits, act_bits=case.act_bits,
                       quant_lm_head=False)
    return SystemCosts(target, draft, "swift")


def predict(case: Case) -> Prediction:
    """The case's tree drafted by the layer-skipped target, verified by the full target."""
    if not case.tree:
        raise case.fail("system swift needs a tree (tokens per level)")
    c = costs(case)
    return speculative(case, pricing(case, c.target, c.drafter), c.source, assumptions=[
        f"draft: {c.drafter.model.n_layers} of {c.target.model.n_layers} layers "
        "(skipped sublayers as whole layers); layer-set search not priced"])


SYSTEM = System("swift", "Xia et al. 2025, SWIFT: On-the-Fly Self-Speculative Decoding for LLM "
                "Inference Acceleration (ICLR 2025, arXiv:2410.06916)", costs, predict, OPTIONS)
