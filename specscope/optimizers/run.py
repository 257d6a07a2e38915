"""`optimize-tree` as a library call: resolve inputs, build the pricing, compare methods."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.deployment import Deployment
from specscope.hw_profiles.pricing import deployed as deployed_pricing
from specscope.limits import check_memory, check_time
from specscope.models import get_model, list_models
from specscope.models.catalogue import drafter_spec, is_head
from specscope.names import MODEL_FREE_SOURCES, MTP_DRAFTER
from specscope.optimizers.compare import (
    DP_REFERENCE,
    Comparison,
    MethodOptions,
    Setup,
    best_any_size,
    compare,
    resolve_algos,
)
from specscope.optimizers.scoring import Score
from specscope.trace import AcceptanceModel, Trace, drafting, read_trace
from specscope.trace.sources import NO_DRAFTER, source_of
from specscope.tree import DEFAULT_SOURCE, acceptance_table

ANY_SIZE = "any-size"
"""The row of the exact best tree of any size up to one --budget (`OptimizeResult.any_size`)."""
DEFAULT_DRAFTER = "llama-68m"
DEFAULT_CONTEXT = 512
NODE_BYTES = 15_000
NODE_PAIR_S = 1e-7
"""Memory per node of the largest budget, and seconds per (node, node) pair, of comparing every
method, estimates: the DP's tables and the heuristics' candidate trees grow with n, the DP's
max-plus convolutions with n² (measured on two CPU cores, 8 ranks, depth cap 12: 15 KB a node
from 1,000 to 16,000 nodes; 24.5 s at 16,000 nodes)."""


@dataclass(frozen=True)
class OptimizeRequest:
    """The options of `optimize-tree`, as given (None = default): what is deployed (its target
    None: the trace's catalogue model, else refused; its drafter None: the source's draft
    model), and
    the acceptance, budgets and methods to compare."""

    deployment: Deployment
    trace_path: Path | None = None
    acceptance: list[float] | None = None
    source: str | None = None
    algos: str = "all"
    budget: int | None = None
    budgets: list[int] | None = None
    max_depth: int | None = 12
    depth_dependent: bool = False
    context: int | None = None
    options: MethodOptions = field(default_factory=MethodOptions)
    system: str | None = None
    system_options: dict[str, Any] = field(default_factory=dict)
    deployed: Deployed | None = None
    """With `system`: its target and drafter as it deploys them, built by the caller (the
    systems sit above the optimizers), in place of catalogue models."""


@dataclass(frozen=True)
class Deployed:
    """A seed system's cost models for `optimize-tree --system`: the target as verified and the
    drafter (None: a model-free `source`)."""

    target: CostModel
    drafter: CostModel | None
    source: str



@dataclass(frozen=True)
class OptimizeResult:
    """Scores of every method, best predicted speedup first, and what they were priced on."""

    hardware: str
    target: str
    drafter: str
    source: str
    context_len: int
    comparison: Comparison
    runtime: str = ""
    tree_attention: str = "split"
    reference: str = DP_REFERENCE
    engine: str | None = None
    batch: int = 1
    system: str | None = None
    setup: Setup | None = field(default=None, repr=False, compare=False)
    """What every method was scored on (`export` solves engines' families on it)."""
    optimum: Score | None = None
    """Under one --budget n: the exact best tree of any size up to n (`best_any_size`), which
    `export` solves its families beside."""

    @cached_property
    def any_size(self) -> Score | None:
        """The optimum as a row of its own (algo `ANY_SIZE`) when it beats every method's tree
        of n nodes (a smaller tree can pay where n nodes do not, at a large batch); else
        None."""
        if self.optimum is None or (self.optimum.speedup
                                    <= self.comparison.scores[0].speedup * (1 + 1e-12)):
            return None
        return dataclasses.replace(self.optimum, algo=ANY_SIZE)

    @property
    def ranked(self) -> list[Score]:
        """Every row, best predicted speedup first: the any-size optimum, then each method."""
        return [*([self.any_size] if self.any_size else []), *self.comparison.scores]

    @property
    def best(self) -> Score:
        """The fastest tree found: the one the verdict, the export and `-o`'s first result
        name."""
        return self.ranked[0]

    @property
    def speculation_pays(self) -> bool:
        """Whether the best tree beats plain decoding at this batch (speedup above 1)."""
        return self.best.speedup > 1.0

    @property
    def verdict(self) -> str:
        """One line: speculate with the best tree, or decode plainly and why."""
        best, sized = self.best, self.comparison.scores[0]
        at = f"at batch {self.batch}"
        if self.any_size is not None:
            smaller = (f"the best tree of at most {max(self.comparison.pareto)} nodes (n = "
                       f"{best.n:g}) predicts {best.speedup:.2f}× over plain decoding; every "
                       f"method's tree of {max(self.comparison.pareto)} nodes predicts at most "
                       f"{sized.speedup:.2f}×")
            return (f"speculate {at}: {smaller}" if self.speculation_pays
                    else f"no speculation {at}: plain decoding is faster ({smaller})")
        if self.speculation_pays:
            return f"speculate {at}: {best.algo} predicts {best.speedup:.2f}× over plain decoding"
        return (f"no speculation {at}: plain decoding is faster (the best tree, {best.algo}, "
                f"predicts {best.speedup:.2f}×)")

    def to_dict(self) -> dict[str, Any]:
        """The `--json` document (docs/architecture.md#tree-files), plus the Pareto rows and
        skipped methods."""
        doc: dict[str, Any] = {
            "hardware": self.hardware,
            "target": self.target,
            "drafter": self.drafter,
            "source": self.source,
            "context_len": self.context_len,
            "batch": self.batch,
            "runtime": self.runtime,
            "tree_attention": self.tree_attention,
            **({"engine": self.engine} if self.engine else {}),
            **({"system": self.system} if self.system else {}),
            "speculation_pays": self.speculation_pays,
            "verdict": self.verdict,
            "results": [
                s.to_dict() | {"dp_optimum": s.algo in (self.reference, ANY_SIZE)}
                for s in self.ranked
            ],
        }
        if len(self.comparison.pareto) > 1:
            doc["pareto"] = [
                {"budget": b} | {k: v for k, v in s.to_dict().items() if k != "tree"}
                for b, rows in self.comparison.pareto.items()
                for s in rows
            ]
        if self.comparison.skipped:
            doc["skipped"] = self.comparison.skipped
        return doc


def run_optimize(req: OptimizeRequest, progress: Callable[[int, int], None] | None = None
                 ) -> OptimizeResult:
    """Validate the request (a budget too big for this machine's memory or the time limit
    included: `specscope.limits`), derive acceptance and pricing, and score every method;
    `progress(done, total)` after each method."""
    if (req.trace_path is None) == (req.acceptance is None):
        raise InputError("give exactly one of --trace and --acceptance")
    if (req.budget is None) == (req.budgets is None):
        raise InputError("give exactly one of --budget and --budgets")
    if req.budget is not None and req.budget < 1:
        raise InputError(f"--budget must be ≥ 1 (tree size counts the root), got {req.budget}")
    if req.budgets is not None and (not req.budgets or min(req.budgets) < 1):
        raise InputError(f"--budgets must be integers ≥ 1, got {req.budgets}")
    if req.max_depth is not None and req.max_depth < 0:
        raise InputError(f"--max-depth must be ≥ 0, got {req.max_depth}")
    if req.context is not None and req.context < 0:
        raise InputError(f"--context must be ≥ 0, got {req.context}")
    largest = req.budget if req.budget is not None else max(req.budgets or [1])
    what = f"optimize-tree {'--budget' if req.budget is not None else '--budgets'} {largest:,}"
    check_memory(largest * NODE_BYTES, what)
    check_time(largest**2 * NODE_PAIR_S, what)
    algos = resolve_algos(req.algos)
    dep = req.deployment
    profile = load_profile(dep.hw)

    trace: Trace | None = None
    if req.trace_path is not None:
        trace = read_trace(req.trace_path)
        chosen = drafting(trace, req.source, dep.drafter, list_models())
        source = chosen.source
        model = AcceptanceModel.from_trace(
            trace, source, depth_dependent=req.depth_dependent, max_depth=req.max_depth
        )
        p = np.asarray(model.p)
        context = req.context if req.context is not None else trace.mean_context_len
        target = dep.target or _trace_target(trace, req.trace_path)
    else:
        p = acceptance_table(req.acceptance, "--acceptance")[0]
        # a generic tree, whichever model drafts it; the target's MTP layers and a head are
        # named, as an engine serves each by a method of its own
        own = dep.drafter == MTP_DRAFTER or is_head(dep.drafter)
        source = req.source or (source_of(dep.drafter) if own else DEFAULT_SOURCE)
        chosen = drafting(None, source, dep.drafter, list_models())
        chosen = dataclasses.replace(chosen, drafter=chosen.drafter or DEFAULT_DRAFTER)
        context = req.context if req.context is not None else DEFAULT_CONTEXT
        if dep.target is None:
            raise InputError("--target: --acceptance states no model; name the target to "
                             "price with --target (a catalogue model, e.g. llama-3.1-8b)")
        target = dep.target
    priced = drafter_spec(chosen.model, get_model(target), chosen.kept_layers, source)
    drafter = chosen.drafter or (priced.name if priced else NO_DRAFTER)
    priced = dep.draft_spec(priced)

    if req.deployed is None:
        verified = dep.target_cost(profile, get_model(target))
        drafts = dep.draft_cost(profile, priced)
    else:
        verified, drafts, source, drafter = _as_deployed(req, source)
    pricing = deployed_pricing(dep, verified, drafts, int(context),
                               temperature=0.0 if trace is None else trace.temperature)
    pricing.check_fits(int(context) + max([*(req.budgets or ()), req.budget or 0]),
                       dep.stages if dep.stages > 1 else None)
    setup = Setup(p=p, source=source, pricing=pricing, max_depth=req.max_depth, trace=trace,
                  options=req.options)
    comparison = compare(setup, algos, budget=req.budget, budgets=req.budgets, progress=progress)
    optimum = (best_any_size(setup, req.budget)
               if req.budget is not None and req.budget > 1 else None)
    return OptimizeResult(profile.name, target, drafter, source, int(context), comparison,
                          pricing.target.runtime.name, pricing.target.tree_attention,
                          engine=dep.engine_name, batch=dep.batch, system=req.system,
                          setup=setup, optimum=optimum)


def _as_deployed(req: OptimizeRequest, source: str
                 ) -> tuple[CostModel, CostModel | None, str, str]:
    """(target, drafter, source, drafter name) as `req.system` deploys them: a system that
    drafts with a model prices the acceptance's source as that model's levels (a given vector
    is its drafter's, so the trees are labelled with its source); a model-free one prices its
    own source's."""
    deployed, dep = req.deployed, req.deployment
    assert deployed is not None
    restated = [key for key, given in (("offload", dep.offload != 0.0), ("stages", dep.stages > 1),
                                       ("draft_tp", "draft_tp" in dep.stated),
                                       ("draft_vocab", dep.draft_vocab is not None)) if given]
    if restated:
        option = f"--{restated[0].replace('_', '-')} {getattr(dep, restated[0])}"
        raise InputError(f"{option} restates the plain target or draft; --system "
                         f"{req.system} deploys its own (its keys: --system-options)")
    target, drafter = deployed.target, deployed.drafter
    if drafter is None:
        return target, None, deployed.source, deployed.source
    if source in MODEL_FREE_SOURCES:
        raise InputError(f"--system {req.system} drafts with a model; the acceptance's source "
                         f"{source} is model-free")
    if req.trace_path is None:  # a given vector: the trees are the system's drafter's
        source = deployed.source
    return target, drafter, source, drafter.model.name


def _trace_target(trace: Trace, path: Path) -> str:
    """The catalogue model the trace was collected with; a synthetic trace, or one collected
    from a model the catalogue lacks, names none that can be priced, and is refused."""
    if trace.target in list_models():
        return trace.target
    what = f"names target {trace.target!r}" if trace.target else "names no target model"
    raise InputError(f"--target: {path} {what}, which the catalogue cannot price; name the "
                     f"target to price with --target (a catalogue model, e.g. llama-3.1-8b)")
