"""The configurations `specscope validate` predicts and runs.

Every method of `optimize-tree` that the executor runs (sequoia, ets, dyspec, specdecpp, goose)
and the chain baseline, on the drafters that fit it: the draft model for the ranked methods,
n-gram prompt lookup for chains (its candidates form one sequence, so every tree over it is a
chain), and Goose's n-gram spine with recycling branches. Chains and SpecDec++ stop at 12
drafted tokens, so budgets above 16 repeat them. Batch is 1 throughout: the executor decodes one
request at a time (no batched speculative step yet), so a small batch cannot be measured.
"""

from __future__ import annotations

from dataclasses import dataclass

BUDGETS = (4, 8, 16, 32, 64)
"""Tree sizes (root included) of the full grid."""
SHORT_BUDGETS = (4, 8, 16)
"""Budgets of the methods whose trees stop at 12 drafts (chain, SpecDec++)."""
TEMPERATURES = (0.0, 0.7)
"""Greedy and sampled decoding."""
BATCH_NOTE = ("batch 1 only: the executor decodes one request at a time (no batched speculative "
              "step), so batch > 1 is not validated")


@dataclass(frozen=True)
class Config:
    """One validated configuration: tree method, drafter, budget (tree size), temperature."""

    method: str
    drafter: str
    budget: int
    temperature: float
    batch: int = 1

    @property
    def label(self) -> str:
        """A short name, e.g. `sequoia/draft/n16/T0`."""
        return f"{self.method}/{self.drafter}/n{self.budget}/T{self.temperature:g}"


def _plan(temperature: float) -> list[Config]:
    plan = [
        *((m, "draft", b) for m in ("sequoia", "ets", "dyspec") for b in BUDGETS),
        *((m, "draft", b) for m in ("specdecpp", "chain") for b in SHORT_BUDGETS),
        *(("chain", "ngram", b) for b in SHORT_BUDGETS),
        *(("goose", "goose", b) for b in BUDGETS[1:]),
    ]
    return [Config(m, d, b, temperature) for m, d, b in plan]


QUICK = (
    Config("sequoia", "draft", 16, 0.0),
    Config("ets", "draft", 8, 0.0),
    Config("dyspec", "draft", 16, 0.0),
    Config("specdecpp", "draft", 8, 0.0),
    Config("chain", "draft", 4, 0.0),
    Config("chain", "ngram", 8, 0.0),
    Config("goose", "goose", 16, 0.0),
    Config("sequoia", "draft", 8, 0.7),
    Config("chain", "ngram", 8, 0.7),
)
"""`--quick`: every method and drafter once, budgets ≤ 16 (few buckets to compile), both
temperatures."""


def config_grid(quick: bool) -> list[Config]:
    """The configurations of a run: `QUICK`, or every method × budget × temperature."""
    if quick:
        return list(QUICK)
    return [c for t in TEMPERATURES for c in _plan(t)]
