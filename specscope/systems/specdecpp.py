"""SpecDec++ (Huang, Guo and Wang 2024, "SpecDec++: Boosting Speculative Decoding via Adaptive
Candidate Lengths", arXiv:2405.19715; Kaffaljidhmah2/SpecDec_pp).

A draft model drafts a chain; after each drafted token an acceptance-prediction head on the
draft's hidden state predicts â, and drafting stops once the predicted probability that some
drafted token is rejected exceeds the threshold h. The authors' code
(specdec_pp/hf_generation.py, schedule "ada"): at draft step s the cumulative acceptance is
Π â over the tokens drafted before step s (step 1 is skipped: nothing is proposed yet), and it
stops after step s when 1 − Π > h, the length forced into [min, max] (`--bound 2 20`).

With a per-token acceptance α the same everywhere (â = α, the case's `alpha`), the rule stops
after drafting L = clip(⌊ln(1 − h) / ln α⌋ + 2, min, max) tokens, every step; i.i.d. acceptance
then yields τ = (1 − α^{L+1}) / (1 − α) tokens per step (the bonus counted). A step costs L draft
forwards, the stop check per drafted token (`Pricing.stop_rule_s`) and one verification of the
L + 1 tokens. Approximated: a constant â, where the paper's gain comes from â varying token by
token (with a constant α the rule is a fixed length, so it cannot beat the best fixed chain);
the acceptance head's forward (a few d × d layers, small beside the draft's) is not priced.
specscope's trace-driven SpecDec++ (`optimizers/specdecpp.py`) replays the rule on measured
per-token predictions instead.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from specscope.optimizers.specdecpp import stop_length as rule_length
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.draft_model import costs as draft_costs
from specscope.systems.step import Prediction, pricing, speculative
from specscope.tree import Tree

THRESHOLD = 0.7
"""The authors' default h (specdec_pp/sample.py stop_threshold; the README's example runs 0.3)."""
MIN_LEN, MAX_LEN = 2, 20
"""The authors' bounds on the drafted length (`--bound 2 20`)."""
OPTIONS: dict[str, type | tuple[type, ...]] = {
    "alpha": (int, float), "threshold": (int, float), "min_len": int, "max_len": int}
"""alpha: per-token acceptance α (required); threshold: h (default 0.7); min_len, max_len: the
bounds on the drafted length (default 2, 20)."""


def stop_length(alpha: float, threshold: float, min_len: int = MIN_LEN,
                max_len: int = MAX_LEN) -> int:
    """Tokens drafted per step by the authors' rule (`optimizers.specdecpp.stop_length`) with
    â = α on every drafted token but the first, whose estimate their code skips (1): the first
    draft step s at which 1 − α^(s − 1) > h, within [min_len, max_len]."""
    log_a = np.r_[0.0, np.full(max_len - 1, math.log(alpha))]
    return rule_length(log_a, threshold, min_len, max_len)


def expected_tokens(alpha: float, drafted: int) -> float:
    """Tokens per step of a chain of `drafted` tokens at i.i.d. acceptance α, the bonus
    counted: Σ_{i=0..L} α^i."""
    return Tree.chain(drafted).expected_tokens(np.array([alpha]))


def _options(case: Case) -> tuple[float, float, int, int]:
    if "alpha" not in case.options:
        raise case.fail("system specdecpp needs alpha, the per-token acceptance")
    alpha = float(case.options["alpha"])
    threshold = float(case.options.get("threshold", THRESHOLD))
    low, high = case.options.get("min_len", MIN_LEN), case.options.get("max_len", MAX_LEN)
    if not 0.0 < alpha < 1.0:
        raise case.fail(f"alpha = {alpha:g} must lie strictly between 0 and 1")
    if not 0.0 < threshold < 1.0:
        raise case.fail(f"threshold = {threshold:g} must lie strictly between 0 and 1")
    if not 1 <= low <= high:
        raise case.fail(f"min_len = {low}, max_len = {high}: need 1 ≤ min_len ≤ max_len")
    if case.tree:
        raise case.fail("system specdecpp drafts the chain its stop rule gives; leave tree out")
    return alpha, threshold, low, high


def costs(case: Case) -> SystemCosts:
    """The target and the draft model (the stop head is not priced)."""
    return draft_costs(case)


def predict(case: Case) -> Prediction:
    """A chain of the rule's length L drafted by the draft model, the stop check per drafted
    token, one verification; τ from α."""
    alpha, threshold, low, high = _options(case)
    drafted = stop_length(alpha, threshold, low, high)
    tokens = expected_tokens(alpha, drafted)
    chain = dataclasses.replace(case, tree=(1,) * drafted)
    c = draft_costs(chain)
    price = pricing(chain, c.target, c.drafter)
    out = speculative(chain, price, c.source, tokens_per_step=tokens, assumptions=[
        f"stop rule with â = α = {alpha:g}, h = {threshold:g}: {drafted} drafted tokens per "
        f"step, τ = {tokens:.3f}"])
    parts = {**out.parts, "stop_rule": drafted * price.stop_rule_s}
    return dataclasses.replace(out, parts=parts, step_s=sum(parts.values()))


SYSTEM = System("specdecpp", "Huang et al. 2024, SpecDec++: Boosting Speculative Decoding via "
                "Adaptive Candidate Lengths (arXiv:2405.19715)", costs, predict, OPTIONS)
