"""Closed forms the simulator must meet at vanishing load (one request at a time, batch 1).

A request that runs alone takes steps of `Pricing.tree_step_s(tree)` seconds (the step's
drafting, verification and bookkeeping at its context) and gains E[tokens per step] = G(tree)
tokens per step on average (accepted drafts + the bonus: `Tree.expected_tokens` under the
acceptance vector). So its time per output token is step_s / G, priced at the request's mean
context; for a chain of γ drafts with a constant acceptance α, G is Leviathan et al.'s
(1 − α^(γ+1)) / (1 − α). Plain decoding is one target forward per token
(`Pricing.autoregressive_s`).
"""

from __future__ import annotations

from specscope.hw_profiles.pricing import Pricing
from specscope.tree import Acceptance, Tree


def chain_tokens(alpha: float, gamma: int) -> float:
    """Leviathan's expected tokens per step of a chain of `gamma` drafts, each accepted with
    probability `alpha` given those above it: (1 − α^(γ+1)) / (1 − α) (γ + 1 at α = 1)."""
    if alpha == 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def tpot_s(pricing: Pricing, tree: Tree, p: Acceptance) -> float:
    """Seconds per output token at batch 1 at `pricing`'s context: step_s / E[tokens per step]
    of `tree` under acceptance `p` (plain decoding: `pricing.autoregressive_s`)."""
    return pricing.tree_step_s(tree) / tree.expected_tokens(p)
