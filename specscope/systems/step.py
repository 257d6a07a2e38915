"""What every system's price is made of: a case's cost models, a drafted tree's step, and the
`Prediction` that `reproduce` compares with the paper.

A published tree is given as tokens per drafted level (w₁, …, w_d); drafting it takes d draft
forwards, level ℓ running the w_{ℓ−1} nodes it expands (w₀ = 1, the root) with the earlier levels
in the draft's KV cache, as EAGLE-style and draft-model implementations do; one target forward
verifies the n = 1 + Σ w tokens. Both come from `Pricing` (the profile's host terms included), at
the case's mean decoding context: prompt + half the new tokens. Prefill is left out of a
speedup unless the source timed whole requests (`with_prefill`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.pricing import Pricing, deployed
from specscope.models import get_model
from specscope.models.spec import ModelSpec
from specscope.systems.case import Case


@dataclass(frozen=True)
class Prediction:
    """A system's price for one case: seconds per step and per baseline token, tokens per step.

    parts: seconds by phase of one step (draft, verify, …); assumptions: what the mechanism
    approximated or assumed for this case, in words; lossy: acceptance beyond the target's own
    distribution (the output may differ from the target's)."""

    tokens_per_step: float
    step_s: float
    baseline_s: float
    batch: int = 1
    parts: dict[str, float] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()
    lossy: bool = False

    @property
    def speedup(self) -> float:
        """Tokens/s over the baseline's tokens/s."""
        return self.tokens_per_step / self.step_s * self.baseline_s

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second over the batch."""
        return self.batch * self.tokens_per_step / self.step_s

    @property
    def seconds_per_token(self) -> float:
        """Seconds of one step per token it yields (a baseline for another system)."""
        return self.step_s / self.tokens_per_step


_profile = cache(load_profile)
"""Profiles by name, read once per process (a reproduce run prices ~200 cost models)."""


def cost_model(case: Case, spec: ModelSpec | str, *, cls: type[CostModel] = CostModel,
               weight_bits: int | None = None, act_bits: int = 16, tp: int = 1,
               quant_lm_head: bool = True, **extra: Any) -> CostModel:
    """A cost model (`cls`, a mechanism's subclass taking `extra` keywords) on the case's
    hardware and runtime (split tree attention)."""
    model = get_model(spec) if isinstance(spec, str) else spec
    return cls(_profile(case.hw), model, weight_bits=weight_bits, tp=tp, runtime=case.runtime,
               act_bits=act_bits, quant_lm_head=quant_lm_head, **extra)


def target_model(case: Case, cls: type[CostModel] = CostModel, **extra: Any) -> CostModel:
    """The case's target at its weight and activation bits, number formats, tp, expert
    parallelism and offloaded fraction; a quantised target keeps its lm_head at 16 bits, as
    GPTQ, AWQ and Marlin checkpoints do."""
    return cost_model(case, case.target, cls=cls, weight_bits=case.weight_bits,
                      act_bits=case.act_bits, tp=case.tp, quant_lm_head=False,
                      offload=case.offload, ep=case.ep, precision=case.precision,
                      expert_precision=case.expert_precision, kv_bits=case.kv_bits, **extra)


def pricing(case: Case, target: CostModel, draft: CostModel | None,
            context: float | None = None) -> Pricing:
    """`Pricing` of the case's batch at its mean decoding context (or `context`), on the case's
    engine (none: the models as they stand)."""
    at = case.decode_context if context is None else context
    priced = deployed(case.deployment, target, draft, round(at))
    try:
        priced.check_fits(case.context + case.new_tokens, case.gpus)
    except InputError as exc:
        raise case.fail(f"does not fit: {exc}") from None
    return priced


def tree_step(price: Pricing, widths: Sequence[int], source: str, verified: int | None = None
              ) -> dict[str, float]:
    """Seconds of one step drafting the levels `widths` with `source` and verifying them:
    draft (every level), verify (one target forward of 1 + Σ widths tokens, or `verified` when
    the draft keeps more candidates than it verifies, and its host work) and bookkeeping."""
    price.check_chains(any(w > 1 for w in widths), f"the tree {','.join(map(str, widths))}")
    expanded = [1, *widths[:-1]]
    draft = sum(price.level_s(source, w, w) for w in expanded) if widths else 0.0
    n = verified or 1 + sum(widths)
    return {"draft": draft, "verify": price.verify_s(n, len(widths)),
            "bookkeeping": price.bookkeeping_s if widths else 0.0}


def speculative(case: Case, price: Pricing, source: str, tokens_per_step: float | None = None,
                assumptions: Sequence[str] = (), lossy: bool = False,
                verified: int | None = None) -> Prediction:
    """The `Prediction` of drafting the case's tree with `source` under `price` (verifying
    `verified` tokens a step when given), against autoregressive decoding of the same target."""
    tokens = tokens_per_step or case.tokens_per_step
    parts = tree_step(price, case.tree, source, verified)
    parts["bookkeeping"] = price.bookkeeping_for(tokens) if case.tree else 0.0
    return Prediction(tokens_per_step=tokens,
                      step_s=sum(parts.values()), baseline_s=price.autoregressive_s,
                      batch=case.batch, parts=parts, assumptions=tuple(assumptions), lossy=lossy)


def with_prefill(prediction: Prediction, case: Case, plain_s: float, ours_s: float
                 ) -> Prediction:
    """`prediction` for a source that timed whole requests: each request's prefill (`ours_s`
    speculating, `plain_s` decoding plainly, the batch's prompt forwards) enters its time per
    token as prefill / new_tokens, so a step pays the share of the tokens it yields."""
    share = ours_s * prediction.tokens_per_step / case.new_tokens
    return replace(prediction, step_s=prediction.step_s + share,
                   parts={**prediction.parts, "prefill": share},
                   baseline_s=prediction.baseline_s + plain_s / case.new_tokens,
                   assumptions=(*prediction.assumptions,
                                f"timed prefill: {ours_s * 1e3:.1f} ms (autoregressive "
                                f"{plain_s * 1e3:.1f} ms) per batch of requests over "
                                f"{case.new_tokens} tokens"))
