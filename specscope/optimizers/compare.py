"""Every method on the same acceptance data, under the same budget, scored the same way.

Tree methods build a static tree for (budget, depth cap); SpecDec++ is a per-step policy whose
row reports its mean verified length and most frequent chain. All rows are valued under the
positional acceptance model of their sources, replayed exactly over the trace, and priced by one
`Pricing` (draft levels + one verification), so speedups compare like with like.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from specscope.errors import InputError
from specscope.hw_profiles.pricing import Pricing
from specscope.optimizers.baselines import best_first_tree, best_kary_tree, chain_tree
from specscope.optimizers.delayed import delayed_tree
from specscope.optimizers.dyspec import (
    EAGLE2_BEAM,
    dyspec_from_scores,
    dyspec_tree,
    eagle2_from_scores,
    eagle2_tree,
)
from specscope.optimizers.ets import ets_tree
from specscope.optimizers.goose import GooseAcceptance, goose_acceptance, goose_tree
from specscope.optimizers.scoring import Score, score_tree
from specscope.optimizers.select import choose_size, choose_trees
from specscope.optimizers.sequoia import SequoiaDP
from specscope.optimizers.specdecpp import MAX_LEN as SPECDECPP_MAX_LEN
from specscope.optimizers.specdecpp import specdecpp
from specscope.trace import Trace, sequence_sources, trace_sources
from specscope.tree import ROOT_SOURCE, Tree

DP_REFERENCE = "sequoia"
SMALL_SIZES = 8
"""With --budgets the heuristics also try every size up to this (slow hardware wants tiny trees)."""


@dataclass(frozen=True)
class MethodOptions:
    """Method parameters; each default is the authors' (or the neutral value of a side term)."""

    ets_kv_penalty: float = 0.0
    ets_coverage: float = 0.0
    specdecpp_threshold: float | None = None  # None: chosen per hardware by replay
    goose_budget: int | None = None  # None: the compared budget; 0: the authors' 60–100 rule
    dyspec_calibrate: bool = True
    eagle_beam: int = EAGLE2_BEAM
    seed: int = 0


@dataclass(frozen=True)
class Setup:
    """What every method sees: acceptance of one drafter source, the trace, the pricing."""

    p: np.ndarray  # positional vector (K,) or depth table (D, K) of `source`
    source: str
    pricing: Pricing
    max_depth: int | None = None
    trace: Trace | None = None
    options: MethodOptions = field(default_factory=MethodOptions)
    _dps: dict[tuple[int, int | None], SequoiaDP] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def sequoia(self, budget: int, max_depth: int | None) -> SequoiaDP:
        """Sequoia's solved DP up to `budget` nodes and `max_depth`, built once per setup: the
        method's tree of n nodes, its best size and the any-size optimum read one table."""
        key = (budget, max_depth)
        if key not in self._dps:
            self._dps[key] = SequoiaDP(self.p, budget, max_depth)
        return self._dps[key]

    @cached_property
    def goose_sources(self) -> tuple[str, str] | None:
        """(spine, branch) sources for Goose: a sequence source and a model-free ranked one."""
        if self.trace is None:
            return None
        spines = sequence_sources(self.trace)
        ranked = [s for s in trace_sources(self.trace) if s not in spines]
        branch = "recycle" if "recycle" in ranked else next(iter(ranked), None)
        return (spines[0], branch) if spines and branch else None

    @cached_property
    def goose_value(self) -> GooseAcceptance:
        """Goose's joint acceptance: branches counted only where the spine stopped."""
        assert self.goose_sources is not None and self.trace is not None
        return goose_acceptance(self.trace, *self.goose_sources)

    def value(self, tree: Tree) -> float:
        """Expected tokens per step of `tree` under the acceptance model of its sources."""
        sources = set(tree.sources) - {ROOT_SOURCE}
        if sources <= {self.source}:
            return tree.expected_tokens(self.p)
        if self.goose_sources and sources <= set(self.goose_sources):
            return self.goose_value.expected_tokens(tree)
        raise InputError(f"no acceptance model for sources {sorted(sources)}")


Builder = Callable[[Setup, int, int | None], Tree]
"""(setup, budget, max depth) → the method's tree of at most `budget` nodes."""


def _dyspec(s: Setup, n: int, d: int | None) -> Tree:
    if s.trace is None:
        return dyspec_from_scores(s.p, n, d, s.source)
    return dyspec_tree(s.trace, s.source, n, d, s.options.dyspec_calibrate)


def _eagle2(s: Setup, n: int, d: int | None) -> Tree:
    if s.trace is None:
        return eagle2_from_scores(s.p, n, s.options.eagle_beam, d, s.source)
    return eagle2_tree(s.trace, s.source, n, s.options.eagle_beam, d, s.options.dyspec_calibrate)


def _goose(s: Setup, n: int, d: int | None) -> Tree:
    assert s.trace is not None and s.goose_sources is not None
    budget = n if s.options.goose_budget is None else s.options.goose_budget or None
    return goose_tree(s.trace, *s.goose_sources, budget=budget, max_depth=d)


TREE_METHODS: dict[str, Builder] = {
    "sequoia": lambda s, n, d: s.sequoia(n, d).tree(n, source=s.source),
    "ets": lambda s, n, d: ets_tree(
        s.p, n, d, s.source, kv_penalty=s.options.ets_kv_penalty, coverage=s.options.ets_coverage
    ),
    "dyspec": _dyspec,
    "eagle2": _eagle2,
    "goose": _goose,
    "best-first": lambda s, n, d: best_first_tree(s.p, n, d, s.source),
    "kary": lambda s, n, d: best_kary_tree(s.p, n, d, s.source),
    "chain": lambda s, n, d: chain_tree(n, d, s.source),
    "delayed": lambda s, n, d: delayed_tree(s.p, n, d, s.source),
}
POLICY_METHODS = ("specdecpp",)
METHOD_NAMES = (*TREE_METHODS, *POLICY_METHODS)


def resolve_algos(spec: str) -> list[str]:
    """Method names from "all" or a comma list; unknown names are an `InputError`."""
    names = list(METHOD_NAMES) if spec == "all" else [a.strip() for a in spec.split(",")]
    unknown = [a for a in names if a not in METHOD_NAMES]
    if unknown or not names or "" in names:
        raise InputError(f"--algo: unknown method {unknown or spec!r}; known: all, "
                         + ", ".join(METHOD_NAMES))
    return names


CHAIN_METHODS = ("chain", "specdecpp")
"""Methods whose every tree is a chain (what a chain-only engine can verify)."""


def unavailable(algo: str, setup: Setup, smallest_budget: int) -> str | None:
    """Why `algo` cannot run on this input, or None."""
    engine = setup.pricing.engine
    if engine is not None and engine.tree_attention == "none" and algo not in CHAIN_METHODS:
        return f"engine {engine.name} verifies chains only"
    if algo == "goose" and setup.goose_sources is None:
        return "needs a trace with a sequence source (ngram/suffix) and a ranked source"
    if algo == "specdecpp" and setup.trace is None:
        return "needs a trace (its predictor is fitted on draft features)"
    if algo == "specdecpp" and setup.source in sequence_sources(setup.trace):
        return f"needs a ranked source, not {setup.source!r}"
    if algo == "specdecpp" and (
        smallest_budget < 3 or (setup.max_depth is not None and setup.max_depth < 2)
    ):
        return "needs a budget ≥ 3 and a depth cap ≥ 2 (it drafts at least 2 tokens)"
    return None


def best_any_size(setup: Setup, budget: int) -> Score:
    """The exact best tree of at most `budget` nodes by predicted speedup, of any size and
    depth: the DP's hardware-aware choice over every size (on a chains-only engine, the chain
    method's over every length)."""
    algo = DP_REFERENCE if unavailable(DP_REFERENCE, setup, budget) is None else "chain"
    return compare(setup, [algo], budgets=[budget]).scores[0]


@dataclass(frozen=True)
class Comparison:
    """Best row per method (best predicted speedup first), the Pareto rows, skipped methods."""

    scores: list[Score]
    pareto: dict[int, list[Score]]  # budget → one row per method
    skipped: dict[str, str]


def compare(
    setup: Setup,
    algos: Sequence[str],
    budget: int | None = None,
    budgets: Sequence[int] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Comparison:
    """Score each method at `budget`, or at each of `budgets` with hardware-aware choice.

    With `budget` every tree has at most that many nodes (Sequoia and ETS exactly that many).
    With `budgets`, at each budget b every method picks (n ≤ b, d) by least time per expected
    token: the listed sizes and 1..8 × every depth for the heuristics, every size for the DP
    (free from its table), so the DP stays the exact reference. The best row of a method is its best
    budget. `progress(done, total)` counts the methods scored.
    """
    if (budget is None) == (budgets is None):
        raise InputError("give exactly one of --budget and --budgets")
    sizes = sorted({budget} if budget is not None else set(budgets or []))
    if not sizes or sizes[0] < 1:
        raise InputError(f"budgets must be ≥ 1 (tree size counts the root), got {sizes}")
    skipped = {a: why for a in algos if (why := unavailable(a, setup, sizes[0]))}
    pareto: dict[int, list[Score]] = {b: [] for b in sizes}
    run = [a for a in algos if a not in skipped]
    for done, algo in enumerate(run):
        if progress is not None:
            progress(done, len(run))
        rows = (
            [score_method(algo, setup, sizes[0])]
            if budget is not None
            else _hardware_aware(algo, setup, sizes)
        )
        for b, row in zip(sizes, rows, strict=True):
            pareto[b].append(row)
    if progress is not None:
        progress(len(run), len(run))
    best = [max(rows, key=lambda s: s.speedup) for rows in zip(*pareto.values(), strict=True)]
    return Comparison(sorted(best, key=lambda s: -s.speedup), pareto, skipped)


def score_method(algo: str, setup: Setup, budget: int) -> Score:
    """One method's row at exactly this budget (no hardware-aware choice)."""
    if algo in POLICY_METHODS:
        return _specdecpp(setup, budget)
    tree = TREE_METHODS[algo](setup, budget, setup.max_depth)
    return score_tree(algo, tree, setup.value(tree), setup.pricing, setup.trace)


def _hardware_aware(algo: str, setup: Setup, budgets: Sequence[int]) -> list[Score]:
    """One row per budget: the method's best (n ≤ budget, d) by step time per expected token."""
    if algo in POLICY_METHODS:
        rows: dict[int, Score] = {}
        for b in budgets:  # budgets past the longest draft give the same policy: solve once
            cap = min(b, SPECDECPP_MAX_LEN + 1)
            if cap not in rows:
                rows[cap] = _specdecpp(setup, cap)
        return [rows[min(b, SPECDECPP_MAX_LEN + 1)] for b in budgets]
    if algo == DP_REFERENCE:
        dp = setup.sequoia(max(budgets), setup.max_depth)
        steps = setup.pricing.step_table(max(budgets), dp.table.shape[1] - 1,
                                          setup.source)
        trees = [
            dp.tree(*choose_size(dp.table, range(1, b + 1), steps), source=setup.source)
            for b in budgets
        ]
    else:
        cap = max(budgets) - 1 if setup.max_depth is None else setup.max_depth
        sizes = sorted({*range(1, min(SMALL_SIZES, max(budgets)) + 1), *budgets})
        # dict, not set: Tree hashes vary between processes, insertion order does not
        candidates = dict.fromkeys(
            TREE_METHODS[algo](setup, n, d) for n in sizes for d in range(min(cap, n - 1) + 1)
        )
        trees = choose_trees(candidates, setup.value, setup.pricing.tree_step_s, budgets)
    return [score_tree(algo, t, setup.value(t), setup.pricing, setup.trace) for t in trees]


def _specdecpp(setup: Setup, budget: int) -> Score:
    """SpecDec++ as a row: n = mean verified length, tree = its most frequent chain."""
    assert setup.trace is not None
    if setup.max_depth is not None:  # a chain of d drafts has d + 1 nodes
        budget = min(budget, setup.max_depth + 1)
    res = specdecpp(setup.trace, setup.source, setup.pricing, budget=budget,
                    threshold=setup.options.specdecpp_threshold, seed=setup.options.seed)
    lengths = np.flatnonzero(res.length_hist)
    weights = res.length_hist[lengths] / res.length_hist.sum()
    expected = sum(
        w * Tree.chain(int(k), setup.source).expected_tokens(setup.p)
        for k, w in zip(lengths, weights, strict=True)
    )
    return Score(
        algo="specdecpp",
        tree=res.tree,
        n=res.mean_verified,
        depth=res.mean_drafted,
        expected_tokens=float(expected),
        replay_tokens=res.tokens_per_step,
        step_time_s=res.time_per_token_s * res.tokens_per_step,
        autoregressive_s=setup.pricing.autoregressive_s,
    )
