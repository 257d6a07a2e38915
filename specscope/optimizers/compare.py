"""Run every method on one acceptance input under one budget and score them the same way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specscope.errors import InputError
from specscope.optimizers.baselines import best_first_tree, best_kary_tree, chain_tree
from specscope.optimizers.ets import ets_tree
from specscope.optimizers.scoring import Pricing, Score, score_tree
from specscope.optimizers.select import choose_size, choose_tree
from specscope.optimizers.sequoia import SequoiaDP, optimal_tree
from specscope.trace import Trace
from specscope.tree import Tree

DP_REFERENCE = "sequoia"


@dataclass(frozen=True)
class Setup:
    """What every method sees: acceptance of one drafter source, the trace, the pricing."""

    p: np.ndarray  # positional vector (K,) or depth table (D, K)
    source: str
    pricing: Pricing
    max_depth: int | None = None
    trace: Trace | None = None


Builder = Callable[[Setup, int, int | None], Tree]
"""(setup, budget, max depth) → the method's tree of at most `budget` nodes."""

METHODS: dict[str, Builder] = {
    "sequoia": lambda s, n, d: optimal_tree(s.p, n, d, s.source),
    "ets": lambda s, n, d: ets_tree(s.p, n, d, s.source),
    "best-first": lambda s, n, d: best_first_tree(s.p, n, d, s.source),
    "kary": lambda s, n, d: best_kary_tree(s.p, n, d, s.source),
    "chain": lambda s, n, d: chain_tree(n, d, s.source),
}


def resolve_algos(spec: str) -> list[str]:
    """Method names from "all" or a comma list; unknown names are an `InputError`."""
    names = list(METHODS) if spec == "all" else [a.strip() for a in spec.split(",") if a.strip()]
    unknown = [a for a in names if a not in METHODS]
    if unknown or not names:
        raise InputError(f"--algo: unknown method {unknown or spec!r}; known: all, "
                         + ", ".join(METHODS))
    return names


def compare(
    setup: Setup,
    algos: Sequence[str],
    budget: int | None = None,
    budgets: Sequence[int] | None = None,
) -> list[Score]:
    """Scores of each method, best predicted speedup first.

    With `budget` every tree has at most that many nodes (Sequoia exactly that many). With
    `budgets` each method picks (n, d) by least time per expected token with n ≤ max(budgets):
    the listed sizes × every depth for the heuristics, every size for the DP (free from its
    table), so the DP stays the exact reference.
    """
    if (budget is None) == (budgets is None):
        raise InputError("give exactly one of --budget and --budgets")
    sizes = [budget] if budget is not None else list(budgets or [])
    if not sizes or min(sizes) < 1:
        raise InputError(f"budgets must be ≥ 1 (tree size counts the root), got {sizes}")
    scores = []
    for algo in algos:
        tree = (
            METHODS[algo](setup, budget, setup.max_depth)
            if budget is not None
            else _hardware_aware(algo, setup, sizes)
        )
        scores.append(score_tree(algo, tree, setup.p, setup.pricing, setup.trace))
    return sorted(scores, key=lambda s: -s.speedup)


def _hardware_aware(algo: str, setup: Setup, budgets: Sequence[int]) -> Tree:
    """The method's tree with the least step time per expected token over budgets × depths."""
    cap = max(budgets) - 1 if setup.max_depth is None else setup.max_depth
    if algo == DP_REFERENCE:
        dp = SequoiaDP(setup.p, max(budgets), setup.max_depth)
        n, d = choose_size(dp.table, range(1, max(budgets) + 1), setup.pricing.step_s)
        return dp.tree(n, d, setup.source)
    candidates = {
        METHODS[algo](setup, n, d) for n in budgets for d in range(min(cap, n - 1) + 1)
    }
    return choose_tree(
        candidates, lambda t: t.expected_tokens(setup.p), setup.pricing.tree_step_s
    )
