"""One scoring for every method: expected tokens, trace replay, and step time on hardware.

A speculative step costs d draft levels plus one verification of the n tree tokens:
step = d · t_draft + t_verify(n). t_draft is one draft forward of a single token at the
context length (draft levels of a small model at batch 1 are memory-bound, so a level of
width w costs about the same; the executor measures the difference); a model-free drafter
(n-gram, suffix, recycling) costs 0. Speedup compares tokens/s with autoregressive decoding
(one target forward per token) on the same hardware and context.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from specscope.hw_profiles import CostModel
from specscope.trace import Trace, replay
from specscope.trace.schema import MODEL_FREE_SOURCES
from specscope.tree import ROOT_SOURCE, Tree


@dataclass(frozen=True)
class Pricing:
    """Prices speculative steps of one (hardware, target, drafter, context, batch)."""

    target: CostModel
    drafter: CostModel | None
    context_len: int
    batch: int = 1
    ssm_verify: str = "stree"

    @cached_property
    def draft_level_s(self) -> float:
        """Seconds for one draft level (0 for a model-free drafter)."""
        if self.drafter is None:
            return 0.0
        return float(self.drafter.forward_time(self.batch, 1, self.context_len))

    @cached_property
    def autoregressive_s(self) -> float:
        """Seconds per token of plain autoregressive decoding."""
        return float(self.target.forward_time(self.batch, 1, self.context_len))

    def verify_s(self, n: int, depth: int, leaves: int | None = None) -> float:
        """Seconds for the target to verify a tree of n tokens."""
        return float(
            self.target.verify_time(
                n, self.context_len, batch=self.batch, depth=depth, leaves=leaves,
                ssm_verify=self.ssm_verify,
            )
        )

    def step_table(self, max_n: int, max_depth: int) -> np.ndarray:
        """Seconds of one step for every tree size n ≤ max_n (rows) and depth d (columns):
        d draft levels + one verification of n tokens; row 0 is +inf (no tree has 0 nodes)."""
        sizes = np.arange(1, max_n + 1)
        table = np.full((max_n + 1, max_depth + 1), np.inf)
        for d in range(max_depth + 1):
            verify = self.target.verify_time(sizes, self.context_len, batch=self.batch, depth=d,
                                             ssm_verify=self.ssm_verify)
            table[1:, d] = d * self.draft_level_s + np.asarray(verify, dtype=float)
        return table

    def tree_step_s(self, tree: Tree) -> float:
        """Seconds for one speculative step with this tree.

        Only levels holding a node of a draft model cost a draft forward; n-gram, suffix and
        recycling candidates are free.
        """
        drafted = {
            int(d)
            for d, s in zip(tree.depths, tree.sources, strict=True)
            if s != ROOT_SOURCE and s not in MODEL_FREE_SOURCES
        }
        verify = self.verify_s(tree.size, tree.depth, int(tree.leaves.size))
        return len(drafted) * self.draft_level_s + verify


@dataclass(frozen=True)
class Score:
    """A tree priced and valued: what `optimize-tree` prints for one method."""

    algo: str
    tree: Tree
    n: float  # tree size; a policy's mean verified length
    depth: float  # drafted levels; a policy's mean drafted length
    expected_tokens: float
    replay_tokens: float | None
    step_time_s: float
    autoregressive_s: float

    @property
    def tokens_per_s(self) -> float:
        """Predicted tokens/s: expected tokens per step over the step time."""
        return self.expected_tokens / self.step_time_s

    @property
    def speedup(self) -> float:
        """Predicted tokens/s over autoregressive tokens/s on the same hardware."""
        return self.tokens_per_s * self.autoregressive_s

    def to_dict(self) -> dict[str, Any]:
        """The JSON record of DESIGN.md's `optimize-tree --json` (times in ms)."""
        out: dict[str, Any] = {
            "algo": self.algo,
            "n": _number(self.n),
            "depth": _number(self.depth),
            "expected_tokens": self.expected_tokens,
        }
        if self.replay_tokens is not None:
            out["replay_tokens"] = self.replay_tokens
        out |= {
            "step_time_ms": self.step_time_s * 1e3,
            "tokens_per_s": self.tokens_per_s,
            "speedup": self.speedup,
            "tree": self.tree.to_dict(),
        }
        return out


def score_tree(
    algo: str,
    tree: Tree,
    expected_tokens: float,
    pricing: Pricing,
    trace: Trace | None = None,
) -> Score:
    """Price `tree` and replay it exactly over `trace` when given; `expected_tokens` is its value
    under the acceptance model of its sources."""
    return Score(
        algo=algo,
        tree=tree,
        n=tree.size,
        depth=tree.depth,
        expected_tokens=expected_tokens,
        replay_tokens=None if trace is None else replay(trace, tree).tokens_per_step,
        step_time_s=pricing.tree_step_s(tree),
        autoregressive_s=pricing.autoregressive_s,
    )


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)
