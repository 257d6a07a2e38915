"""`optimize-tree` as a library call: resolve inputs, build the pricing, compare methods."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.engine import default_draft_tp
from specscope.hw_profiles.pricing import for_engine, under_attention
from specscope.limits import check_memory, check_time
from specscope.models import get_model, list_models
from specscope.models.catalogue import drafter_spec
from specscope.models.spec import ModelSpec
from specscope.names import MODEL_FREE_SOURCES
from specscope.optimizers.compare import (
    DP_REFERENCE,
    Comparison,
    MethodOptions,
    Setup,
    compare,
    resolve_algos,
)
from specscope.trace import AcceptanceModel, Trace, drafting, read_trace
from specscope.trace.sources import NO_DRAFTER
from specscope.tree import DEFAULT_SOURCE, acceptance_table

DEFAULT_TARGET = "llama-2-7b"
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
    """The options of `optimize-tree`, as given (None = default)."""

    hw: str
    trace_path: Path | None = None
    acceptance: list[float] | None = None
    source: str | None = None
    target: str | None = None
    drafter: str | None = None
    algos: str = "all"
    budget: int | None = None
    budgets: list[int] | None = None
    max_depth: int | None = 12
    depth_dependent: bool = False
    context: int | None = None
    options: MethodOptions = field(default_factory=MethodOptions)
    runtime: str | None = None
    tree_attention: str | None = None
    """How verification attention runs (`cost.TREE_ATTENTION`; None: the engine's, else
    split)."""
    engine: str | None = None
    offload: float = 0.0
    tp: int = 1
    batch: int = 1
    draft_window: int | None = None
    draft_tp: int | None = None
    """Devices the draft is sharded over (None: the engine's default, `default_draft_tp`, else
    1)."""
    draft_vocab: int | None = None
    stages: int = 1
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


SYSTEM_UNSTATED = ("offload", "stages", "draft_tp", "draft_vocab")
"""Options that restate a plain target or draft model, which a --system deploys itself."""


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

    @property
    def speculation_pays(self) -> bool:
        """Whether the best method beats plain decoding at this batch (speedup above 1)."""
        return self.comparison.scores[0].speedup > 1.0

    @property
    def verdict(self) -> str:
        """One line: speculate with the best method, or decode plainly and why."""
        best = self.comparison.scores[0]
        at = f"at batch {self.batch}"
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
                s.to_dict() | {"dp_optimum": s.algo == self.reference}
                for s in self.comparison.scores
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
    for option, value in (("--batch", req.batch), ("--tp", req.tp),
                          ("--draft-window", req.draft_window or 1),
                          ("--draft-tp", req.draft_tp or 1),
                          ("--draft-vocab", req.draft_vocab or 1), ("--stages", req.stages)):
        if value < 1:
            raise InputError(f"{option} must be ≥ 1, got {value}")
    largest = req.budget if req.budget is not None else max(req.budgets or [1])
    what = f"optimize-tree {'--budget' if req.budget is not None else '--budgets'} {largest:,}"
    check_memory(largest * NODE_BYTES, what)
    check_time(largest**2 * NODE_PAIR_S, what)
    algos = resolve_algos(req.algos)
    profile = load_profile(req.hw)

    trace: Trace | None = None
    if req.trace_path is not None:
        trace = read_trace(req.trace_path)
        chosen = drafting(trace, req.source, req.drafter, list_models())
        source = chosen.source
        model = AcceptanceModel.from_trace(
            trace, source, depth_dependent=req.depth_dependent, max_depth=req.max_depth
        )
        p = np.asarray(model.p)
        context = req.context if req.context is not None else trace.mean_context_len
        target = req.target or _catalogue_or(trace.target, DEFAULT_TARGET)
    else:
        p = acceptance_table(req.acceptance, "--acceptance")[0]
        source = req.source or DEFAULT_SOURCE  # a generic tree, whichever model drafts it
        chosen = drafting(None, source, req.drafter, list_models())
        chosen = dataclasses.replace(chosen, drafter=chosen.drafter or DEFAULT_DRAFTER)
        context = req.context if req.context is not None else DEFAULT_CONTEXT
        target = req.target or DEFAULT_TARGET
    priced = drafter_spec(chosen.model, get_model(target), chosen.kept_layers, source)
    drafter = chosen.drafter or (priced.name if priced else NO_DRAFTER)
    priced = _draft_as_stated(priced, req)

    def cost_model(spec: ModelSpec, offload: float = 0.0, tp: int = 1, stages: int = 1
                   ) -> CostModel:
        return CostModel(profile, spec, runtime=req.runtime,
                         tree_attention=req.tree_attention or "split", offload=offload, tp=tp,
                         stages=stages)

    if req.deployed is None:
        verified = cost_model(get_model(target), req.offload, tp=req.tp, stages=req.stages)
        tp = req.draft_tp or default_draft_tp(req.engine, req.tp)
        drafts = None if priced is None else cost_model(priced, tp=tp)
    else:
        verified, drafts, source, drafter = _as_deployed(req, source)
    pricing = for_engine(
        req.engine, verified, drafts, int(context), req.batch,
        tree_attention=req.tree_attention if req.engine else None,
        temperature=0.0 if trace is None else trace.temperature, draft_window=req.draft_window,
    )
    pricing.check_fits(int(context) + max([*(req.budgets or ()), req.budget or 0]),
                       req.stages if req.stages > 1 else None)
    setup = Setup(p=p, source=source, pricing=pricing, max_depth=req.max_depth, trace=trace,
                  options=req.options)
    comparison = compare(setup, algos, budget=req.budget, budgets=req.budgets, progress=progress)
    return OptimizeResult(profile.name, target, drafter, source, int(context), comparison,
                          pricing.target.runtime.name, pricing.target.tree_attention,
                          engine=req.engine, batch=req.batch, system=req.system, setup=setup)


def _as_deployed(req: OptimizeRequest, source: str
                 ) -> tuple[CostModel, CostModel | None, str, str]:
    """(target, drafter, source, drafter name) as `req.system` deploys them: a system that
    drafts with a model prices the acceptance's source as that model's levels (a given vector
    is its drafter's, so the trees are labelled with its source); a model-free one prices its
    own source's."""
    deployed = req.deployed
    assert deployed is not None
    default = OptimizeRequest(hw=req.hw)
    restated = [key for key in SYSTEM_UNSTATED if getattr(req, key) != getattr(default, key)]
    if restated:
        option = f"--{restated[0].replace('_', '-')} {getattr(req, restated[0])}"
        raise InputError(f"{option} restates the plain target or draft; --system "
                         f"{req.system} deploys its own (its keys: --system-options)")
    target, drafter = under_attention(deployed.target, deployed.drafter, req.tree_attention)
    if drafter is None:
        return target, None, deployed.source, deployed.source
    if source in MODEL_FREE_SOURCES:
        raise InputError(f"--system {req.system} drafts with a model; the acceptance's source "
                         f"{source} is model-free")
    if req.trace_path is None:  # a given vector: the trees are the system's drafter's
        source = deployed.source
    return target, drafter, source, drafter.model.name


def _draft_as_stated(spec: ModelSpec | None, req: OptimizeRequest) -> ModelSpec | None:
    """The priced draft with the request's draft options: its own vocabulary replaced by
    `draft_vocab` (an EAGLE-3 head's reduced one; a new name, so no measured table of the
    full-vocabulary model prices it). The window and tp act on its pricing."""
    stated = [o for o, v in (("--draft-window", req.draft_window),
                             ("--draft-vocab", req.draft_vocab),
                             ("--draft-tp", (req.draft_tp or 1) > 1 or None)) if v]
    if spec is None:
        if stated:
            raise InputError(f"{stated[0]} prices a draft model; this source drafts without one")
        return None
    if req.draft_vocab is None or req.draft_vocab == spec.vocab_size:
        return spec
    return dataclasses.replace(spec, name=f"{spec.name}/vocab-{req.draft_vocab}",
                               vocab_size=req.draft_vocab)


def _catalogue_or(name: str | None, default: str) -> str:
    return name if name in list_models() else default
