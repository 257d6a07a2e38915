"""Arbitrage (Maheswaran, Tiwari, Hu, Dilmen, Hooper, Xi, Lee, Farajtabar, Mahoney, Keutzer and
Gholami 2025, "Arbitrage: Efficient Reasoning via Advantage-Aware Speculation",
arXiv:2512.05033): step-level speculative reasoning. The draft model writes a reasoning step (up
to the step separator, "\\n\\n"); a scorer reads it; when the score says so, the target writes
the step again and its step is kept instead. Reward-guided speculative decoding (RSD, Liao et
al. 2025) scores the draft's step with a process reward model and regenerates below a fixed
threshold; Arbitrage's router (a PRM-sized model fine-tuned to predict the target's advantage
over the draft) regenerates only where the target is predicted to do better, so it regenerates
less often at the same accuracy. Steps of either model are kept without token-level
verification: lossy.

Modelled per reasoning step of S = `step_tokens` tokens at the case's mean decoding context:
the draft writes it autoregressively (S draft forwards), the scorer (`prm`, a catalogue model)
reads it in one forward of S new tokens over its prefix-cached context, and with probability r
(`regenerate`) the target writes it again (S target forwards):

    latency(r) = S · t_draft + t_score(S) + r · S · t_target

A step yields S tokens. The published comparison is against RSD at matched accuracy, the same
models regenerating at `baseline_regenerate`: speedup = latency(r_RSD) / latency(r). Without
`baseline_regenerate` the baseline is autoregressive decoding of the target (S · t_target per
step).

Approximated: every step has the mean length S; the prefix-cache catch-up of each model on the
other's steps (one prefill of the new tokens per switch, about one decode forward against S) is
left out; RSD's PRM and Arbitrage's router are priced as the same `prm` model (both Qwen2.5-1.5B
sized in the authors' code); host and HTTP overheads of the serving endpoints are not priced.

A per-token simulation (`costs`) sees the target and the draft model as draft-model
speculation: the step-level routing, the scorer and the regeneration rate are priced only by
`predict`.
"""

from __future__ import annotations

import dataclasses

from specscope.hw_profiles import CostModel
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import Prediction, cost_model, target_model

OPTIONS: dict[str, type | tuple[type, ...]] = {
    "step_tokens": int, "prm": str, "regenerate": (int, float),
    "baseline_regenerate": (int, float), "draft_bits": int, "prm_runtime": str}
"""step_tokens: mean tokens of a reasoning step; prm: the catalogue model that scores each step
(RSD's PRM, Arbitrage's router); regenerate: fraction of steps the target writes again;
baseline_regenerate: RSD's fraction at matched accuracy (default: none, the baseline is
autoregressive decoding of the target); draft_bits: the draft's weight bits (default 16);
prm_runtime: the runtime serving the scorer (default the case's; the authors' vLLM scorer
endpoints run eager)."""


def _draft(case: Case) -> CostModel:
    if case.draft is None:
        raise case.fail("system arbitrage needs a draft (a catalogue model)")
    return cost_model(case, case.draft, weight_bits=case.options.get("draft_bits", 16))


def _fraction(case: Case, key: str) -> float:
    value = float(case.options[key])
    if not 0.0 <= value <= 1.0:
        raise case.fail(f"{key} = {value:g} must lie in [0, 1]")
    return value


def step_parts(case: Case) -> dict[str, float]:
    """Seconds of one reasoning step by phase: draft (S forwards), score (one forward of S
    tokens) and the target's regeneration weighted by its rate (`regenerate`)."""
    for key in ("step_tokens", "prm", "regenerate"):
        if key not in case.options:
            raise case.fail(f"system arbitrage needs {key} (see its OPTIONS)")
    tokens = case.options["step_tokens"]
    if tokens < 1:
        raise case.fail(f"step_tokens = {tokens} must be at least 1")
    context = round(case.decode_context)
    runtime = case.options.get("prm_runtime", case.runtime)
    scorer = cost_model(dataclasses.replace(case, runtime=runtime), case.options["prm"])
    return {
        "draft": tokens * float(_draft(case).forward_time(case.batch, 1, context)),
        "score": float(scorer.forward_time(case.batch, tokens, context)),
        "target": _fraction(case, "regenerate") * tokens * _target_token_s(case, context),
    }


def _target_token_s(case: Case, context: int) -> float:
    return float(target_model(case).forward_time(case.batch, 1, context))


def costs(case: Case) -> SystemCosts:
    """The target and the draft model, served as draft-model speculation (module docstring)."""
    return SystemCosts(target_model(case), _draft(case), f"draft:{case.draft}", lossy=True)


def predict(case: Case) -> Prediction:
    """One reasoning step of S tokens against RSD's step at `baseline_regenerate` (or against S
    autoregressive target tokens)."""
    parts = step_parts(case)
    tokens = case.options["step_tokens"]
    context = round(case.decode_context)
    regenerate = _fraction(case, "regenerate")
    if "baseline_regenerate" in case.options:
        base = _fraction(case, "baseline_regenerate")
        rsd = parts["draft"] + parts["score"] + base * tokens * _target_token_s(case, context)
        baseline_s, against = rsd / tokens, f"RSD regenerating {base:.0%} of steps"
    else:
        baseline_s, against = _target_token_s(case, context), "autoregressive target"
    return Prediction(
        tokens_per_step=float(tokens), step_s=sum(parts.values()), baseline_s=baseline_s,
        batch=case.batch, parts=parts, lossy=True, assumptions=(
            f"steps of {tokens} tokens; the target regenerates {regenerate:.0%} of them; "
            f"baseline: {against}",
            f"scorer {case.options['prm']} ({case.options.get('prm_runtime', 'case runtime')}): "
            "one forward of the step over a prefix-cached context; catch-up prefills and "
            "endpoint overheads left out",
            f"draft {case.draft} at {_draft(case).weight_bits} bits"))


SYSTEM = System("arbitrage", "Maheswaran et al. 2025, Arbitrage: Efficient Reasoning via "
                "Advantage-Aware Speculation (arXiv:2512.05033)", costs, predict, OPTIONS,
                lossy=True, most_tokens=lambda case: None)
"""A step yields `step_tokens`; the case's τ is not used, so nothing bounds it."""
