"""Judge Decoding (Bachmann, Anagnostidis, Pumarola, Georgopoulos, Sanakoyeu, Du, Schönfeld,
Thabet and Kohler 2025, "Judge Decoding: Faster Speculative Sampling Requires Going Beyond Model
Alignment", ICLR 2025, arXiv:2501.19309).

A draft model proposes a chain of d tokens (the case's `tree`, one token per level); the target
verifies it in one forward, and a linear judge head on the target's last hidden state of every
verified token (d_model → 1: 8k parameters on a 70B target, 16k on a 405B one) scores each
drafted token. A token is kept when the target accepts it OR the judge does: acceptance beyond
the target's own distribution, so the system is lossy.

Modelled: per drafted token the target accepts with probability α (the case's `alpha`, or solved
from the case's τ read as the standard, target-only τ of the chain) and the judge accepts a
fraction j (`judge_rate`) of the tokens the target rejects, so α_judge = α + (1 − α)·j, and a
chain of d yields G(a) = (1 − a^{d+1}) / (1 − a) tokens per step at a = α_judge. One step is d
draft forwards, one target verification of d + 1 tokens with the judge head's linear on each, and
the loop's bookkeeping (`step.tree_step`); j = 0 is no judge at all, plain draft-model
speculation at α. The draft runs at `draft_tp` devices (default: the engine's,
`Deployment.draft_tp`; gpt-fast, the paper's engine, shards the draft with the target).

Approximated: acceptance independent and identical per position (the geometric chain); the
judge's threshold enters only through j; the judge's own quality (the paper's benchmark scores)
is not priced.
"""

from __future__ import annotations

from typing import Any

from specscope.hw_profiles import CostModel
from specscope.models.ops import OpCost, linear_op
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import (
    Prediction,
    cost_model,
    pricing,
    target_model,
    tree_step,
)

OPTIONS: dict[str, type | tuple[type, ...]] = {
    "alpha": (int, float), "judge_rate": (int, float), "draft_tp": int}
"""alpha: the target's own per-token acceptance of the draft (default: solved from the case's τ
as the standard τ of its chain); judge_rate: the fraction of target-rejected drafted tokens the
judge accepts at its threshold (default 0: no judge); draft_tp: devices the draft is sharded
over (default: the engine's, `Deployment.draft_tp`)."""


class JudgeTargetCost(CostModel):
    """The target's `CostModel` plus the judge head: one linear d_model → 1 (16-bit) on the last
    hidden state of every token of the forward."""

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        judge = linear_op("judge_head", 1, batch * new_tokens, self.model.d_model, 1, 2.0, False)
        return [*super().ops(batch, new_tokens, context_len, **ssm), judge]


def chain_tokens(a: float, depth: int) -> float:
    """Expected tokens per step of a chain of `depth` drafts accepted each with probability `a`
    (the bonus token counted): (1 − a^{d+1}) / (1 − a), d + 1 at a = 1."""
    if a >= 1.0:
        return depth + 1.0
    return (1.0 - a ** (depth + 1)) / (1.0 - a)


def solve_alpha(tokens: float, depth: int) -> float:
    """The per-token acceptance a whose chain of `depth` yields `tokens` per step (bisection on
    the increasing `chain_tokens`)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if chain_tokens(mid, depth) < tokens else (lo, mid)
    return 0.5 * (lo + hi)


def _depth(case: Case) -> int:
    if not case.tree:
        raise case.fail("system judge needs a tree: the draft's chain, one token per level "
                        '("1,1,1,1")')
    if any(w != 1 for w in case.tree):
        raise case.fail(f"system judge drafts a chain: every level of tree {case.tree} must be 1")
    return len(case.tree)


def judge_rate(case: Case) -> float:
    """The case's `judge_rate` j, checked (0 when not given: no judge)."""
    j = float(case.options.get("judge_rate", 0.0))
    if not 0.0 <= j <= 1.0:
        raise case.fail(f"judge_rate = {j:g} must lie in [0, 1]")
    return j


def acceptance(case: Case) -> tuple[float, float]:
    """(α, α_judge): the target's own per-token acceptance and the judged one."""
    j = judge_rate(case)
    if "alpha" in case.options:
        alpha = float(case.options["alpha"])
    else:
        depth = _depth(case)
        if case.tokens_per_step > depth + 1:
            raise case.fail(f"τ = {case.tokens_per_step:g} exceeds the chain's {depth + 1} "
                            "tokens per step")
        alpha = solve_alpha(case.tokens_per_step, depth)
    if not 0.0 < alpha <= 1.0:
        raise case.fail(f"alpha = {alpha:g} must lie in (0, 1]")
    return alpha, alpha + (1.0 - alpha) * j


def _draft(case: Case) -> CostModel:
    if case.draft is None:
        raise case.fail("system judge needs a draft (a catalogue model)")
    devices = case.options.get("draft_tp", case.deployment.draft_tp)
    if devices < 1:
        raise case.fail(f"draft_tp = {devices} must be at least 1")
    if devices > (case.gpus or case.tp):
        raise case.fail(f"draft_tp = {devices}: the case has {case.gpus or case.tp} device(s) "
                        "(gpus, else tp); a draft is sharded over at most those")
    return cost_model(case, case.draft, tp=devices)


def costs(case: Case) -> SystemCosts:
    """The target with its judge head, the draft model, and the acceptance the judge adds:
    α_judge / α per drafted token. At judge_rate 0 (the default) there is no judge: the plain
    target, scale 1, lossless, and α is not needed."""
    plain, draft = target_model(case), _draft(case)
    if judge_rate(case) == 0.0:
        return SystemCosts(plain, draft, f"draft:{case.draft}")
    alpha, judged = acceptance(case)
    target = plain.variant(JudgeTargetCost)
    return SystemCosts(target, draft, f"draft:{case.draft}", acceptance_scale=judged / alpha,
                       lossy=True)


def predict(case: Case) -> Prediction:
    """One step: the draft's chain, the target's verification with the judge head on every
    verified token, against autoregressive decoding of the target without it."""
    depth = _depth(case)
    c = costs(case)
    alpha, judged = acceptance(case)
    plain = pricing(case, target_model(case), c.drafter)
    parts = tree_step(plain, case.tree, c.source)
    if c.lossy:
        n, context = depth + 1, plain.context_len
        judging = pricing(case, c.target, c.drafter).target  # on the case's engine too
        parts["judge"] = float(judging.verify_time(n, context, batch=case.batch)
                               - plain.target.verify_time(n, context, batch=case.batch))
    j = judge_rate(case)
    return Prediction(
        tokens_per_step=chain_tokens(judged, depth), step_s=sum(parts.values()),
        baseline_s=plain.autoregressive_s, batch=case.batch, parts=parts, lossy=c.lossy,
        assumptions=(f"chain of {depth}: α = {alpha:.3f} (target), judge accepts {j:.0%} of "
                     f"its rejections: α_judge = {judged:.3f}",
                     f"draft {case.draft} at 16 bits on {c.drafter.tp} device(s)",
                     "judge head: one 16-bit linear d_model → 1 per verified token"))


SYSTEM = System("judge", "Bachmann et al. 2025, Judge Decoding: Faster Speculative Sampling "
                "Requires Going Beyond Model Alignment (ICLR 2025, arXiv:2501.19309)", costs,
                predict, OPTIONS, lossy=True)
