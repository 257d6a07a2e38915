"""One scoring for every method: a tree's expected tokens, its exact replay over a trace, and its
step time from the one step pricer (`hw_profiles.pricing.Pricing`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specscope.hw_profiles.pricing import Pricing
from specscope.trace import Trace, replay
from specscope.tree import Tree


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
        """The JSON record of `optimize-tree --json` (docs/architecture.md#tree-files), times in
        ms."""
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
    under the acceptance model of its sources (the step pays the loop's per-accepted-token
    work on them)."""
    return Score(
        algo=algo,
        tree=tree,
        n=tree.size,
        depth=tree.depth,
        expected_tokens=expected_tokens,
        replay_tokens=None if trace is None else replay(trace, tree).tokens_per_step,
        step_time_s=pricing.tree_step_s(tree) + pricing.accepted_s * expected_tokens,
        autoregressive_s=pricing.autoregressive_s,
    )


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)
