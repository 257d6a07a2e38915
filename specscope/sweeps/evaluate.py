"""Evaluating cells, and the caches that cells share.

Analytic cells: the method's tree at exactly the cell's budget (matched budgets, as
`optimize-tree --budget` builds them), valued under the acceptance vector (and replayed over the
trace when there is one), priced by the optimizers' `Pricing` on the cell's hardware, runtime,
target and drafter, tp, weight bits, ep, number formats, context and batch, the cost models built
as `optimize-tree` builds them (`Deployment.target_cost`, `drafter_spec` → `draft_spec` →
`draft_cost`, so `mtp` drafts with the target's own layer on its devices): speedup over
autoregressive decoding on the same hardware, tokens/s, step time, expected tokens, tree size and
depth. SpecDec++ is a policy
whose stopping threshold is chosen per hardware, so it is solved per cell.

Simulated cells: `run_simulation` on the cell's hardware with max batch = the cell's batch; a
tree method (sequoia, chain, ...) is served as a static tree built as above, the dynamic policies
(dyspec, specdecpp, smartspec, ets-batch) run per step with the cell's budget: throughput,
goodput, TPOT, TTFT, latency percentiles, accepted drafts per step, mean batch.

Caches (per process, so each Ray worker keeps its own across tasks): profiles, cost models and
pricings by their parameters (a target's cost model shared by its drafters, batches and
contexts); positional vectors by (acceptance, source, depth cap); trees with their expected and
replayed tokens by (acceptance, source, method, budget, depth cap), because a matched-budget tree
does not depend on the hardware. A cell that cannot run (an `InputError`: a runtime the profile
does not price, a model that does not fit, tp above the profile's links, a method that needs a
trace, a format the profile has no peak for, mtp on a target without MTP layers, a seed system
beside ep or a low precision) is recorded as skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np
import polars as pl

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, HardwareProfile, load_profile
from specscope.hw_profiles.deployment import Deployment
from specscope.hw_profiles.engine import DEFAULT_ENGINE
from specscope.hw_profiles.pricing import Pricing
from specscope.hw_profiles.pricing import deployed as deployed_pricing
from specscope.models import get_model
from specscope.models.catalogue import drafter_spec
from specscope.names import MODEL_FREE_SOURCES, MTP_DRAFTER
from specscope.optimizers.compare import (
    POLICY_METHODS,
    TREE_METHODS,
    MethodOptions,
    Setup,
    score_method,
    unavailable,
)
from specscope.optimizers.scoring import score_tree
from specscope.simulator.policies import POLICIES
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.sweeps.cells import NO_DRAFTER, Cell, cell_deployment
from specscope.sweeps.config import NO_SYSTEM
from specscope.systems.base import SystemCosts
from specscope.systems.registry import deploy
from specscope.trace import AcceptanceModel, Trace, replay
from specscope.tree import Tree, acceptance_table, scaled_acceptance

PARAMS: dict[str, pl.DataType] = {
    "key": pl.String(), "mode": pl.String(), "hardware": pl.String(), "runtime": pl.String(),
    "engine": pl.String(), "target": pl.String(), "drafter": pl.String(), "method": pl.String(),
    "budget": pl.Int64(), "batch": pl.Int64(), "rate": pl.Float64(), "tp": pl.Int64(),
    "weight_bits": pl.Int64(), "ep": pl.Int64(), "precision": pl.String(),
    "expert_precision": pl.String(), "kv_bits": pl.Int64(), "context": pl.Int64(),
    "max_depth": pl.Int64(),
    "acceptance": pl.String(), "seed": pl.Int64(), "system": pl.String(),
    "system_options": pl.String(),
}
ANALYTIC = ("speedup", "tokens_per_s", "step_time_ms", "autoregressive_ms", "expected_tokens",
            "replay_tokens", "tree_size", "tree_depth")
SIMULATED = ("throughput_tok_s", "goodput_tok_s", "slo_met", "mean_tpot_ms", "p50_tpot_ms",
             "p99_tpot_ms", "mean_ttft_ms", "p50_ttft_ms", "p99_ttft_ms", "mean_latency_s",
             "p50_latency_s", "p99_latency_s", "mean_accepted", "mean_batch")
SCHEMA: dict[str, pl.DataType] = (
    PARAMS | {"status": pl.String(), "reason": pl.String()}
    | dict.fromkeys(ANALYTIC, pl.Float64()) | {"tree": pl.String()}
    | dict.fromkeys(SIMULATED, pl.Float64()) | {"run_id": pl.String()}
)
"""The results table: parameters, outcome ("ok" or "skipped" and why), analytic results (ms,
tokens/s, tokens per step; `tree` as `Tree.to_json`), simulated results (units in the names), and
the run that computed the row."""

_VECTORS: dict[tuple[str, str, int], np.ndarray] = {}
_COSTS: dict[tuple[Any, ...], CostModel | None] = {}
_TREES: dict[tuple[Any, ...], tuple[Tree, float, float | None]] = {}


def evaluate_batch(cells: Sequence[Cell], traces: Mapping[str, Trace], run_id: str,
                   on_cell: Callable[[], None] | None = None) -> pl.DataFrame:
    """One results row per cell (`SCHEMA`), in order; `on_cell()` after each."""
    rows = []
    for cell in cells:
        rows.append({"key": cell.key, **cell.columns(), **evaluate(cell, traces),
                     "run_id": run_id})
        if on_cell is not None:
            on_cell()
    return pl.DataFrame(rows, schema=SCHEMA)


def evaluate(cell: Cell, traces: Mapping[str, Trace]) -> dict[str, Any]:
    """The outcome and result columns of one cell (module docstring)."""
    trace = None if cell.acceptance.trace is None else traces[cell.acceptance.trace]
    try:
        profile = _profile(cell.hardware)
        if cell.runtime not in profile.runtimes:
            raise InputError(f"profile {profile.name} prices {', '.join(profile.runtimes)}, "
                             f"not {cell.runtime}")
        results = (_analytic if cell.mode == "analytic" else _simulated)(cell, trace)
    except InputError as exc:
        return {"status": "skipped", "reason": str(exc)}
    return {"status": "ok", **results}


def _analytic(cell: Cell, trace: Trace | None) -> dict[str, Any]:
    pricing = _pricing(cell, trace)
    pricing.check_fits(pricing.context_len + cell.budget)
    setup = _setup(cell, trace, pricing)
    if cell.method in POLICY_METHODS:
        score = score_method(cell.method, setup, cell.budget)
    else:
        tree, expected, replayed = _tree(cell, setup)
        score = replace(score_tree(cell.method, tree, expected, pricing), replay_tokens=replayed)
    return {
        "speedup": score.speedup, "tokens_per_s": score.tokens_per_s,
        "step_time_ms": score.step_time_s * 1e3,
        "autoregressive_ms": score.autoregressive_s * 1e3,
        "expected_tokens": score.expected_tokens, "replay_tokens": score.replay_tokens,
        "tree_size": float(score.n), "tree_depth": float(score.depth),
        "tree": score.tree.to_json(),
    }


def _simulated(cell: Cell, trace: Trace | None) -> dict[str, Any]:
    if cell.system != NO_SYSTEM:  # a seed system deploys its own models
        cell.deployment.check_system(cell.system)
    tree = None
    if cell.method not in POLICIES:  # a tree method: its tree served as a static tree
        tree = _tree(cell, _setup(cell, trace, _pricing(cell, trace)))[0]
    request = SimulateRequest(
        deployment=cell.deployment, trace=trace,
        source=None if cell.drafter == NO_DRAFTER else cell.source,
        policy="static" if tree else cell.method, tree=tree, budget=cell.budget,
        max_depth=cell.max_depth, acceptance=cell.acceptance.vector,
        rate=float(cell.rate or 0.0), seed=cell.seed, **dict(cell.simulation),
        system=None if cell.system == NO_SYSTEM else cell.system,
        system_options=dict(cell.system_options), against_plain=False)
    summary = run_simulation(request).summary
    return {name: summary[name] for name in SIMULATED}


def _setup(cell: Cell, trace: Trace | None, pricing: Pricing) -> Setup:
    """What the optimizers see for this cell; an unavailable method is an `InputError`."""
    setup = Setup(p=_vector(cell, trace), source=cell.source, pricing=pricing,
                  max_depth=cell.max_depth, trace=trace, options=MethodOptions(seed=cell.seed))
    why = unavailable(cell.method, setup, cell.budget)
    if why:
        raise InputError(f"{cell.method} {why}")
    return setup


@cache
def _profile(hardware: str) -> HardwareProfile:
    return load_profile(hardware)


def _target_cost(setup: Deployment) -> CostModel:
    """The target's cost model as `setup` deploys it (`Deployment.target_cost`), one per
    process for every deployment that prices it alike (the fields `target_cost` reads)."""
    key = ("target", setup.hw, setup.target, setup.weight_bits, setup.runtime,
           setup.tree_attention, setup.offload, setup.tp, setup.stages, setup.ep,
           setup.precision, setup.expert_precision, setup.kv_bits)
    if key not in _COSTS:
        _COSTS[key] = setup.target_cost(_profile(setup.hw), get_model(str(setup.target)))
    cost = _COSTS[key]
    assert cost is not None
    return cost


def _draft_cost(setup: Deployment) -> CostModel | None:
    """The draft's cost model as `setup` deploys it, as optimize-tree builds it: the priced
    spec (`drafter_spec`: a catalogue model, the target's MTP module for mtp, None for a
    model-free drafter) with the draft options (`draft_spec`), on its devices (`draft_cost`:
    an MTP module on the target's tp, ep and formats)."""
    key: tuple[Any, ...] = ("draft", setup.hw, setup.drafter, setup.runtime,
                            setup.tree_attention, setup.draft_tp, setup.draft_vocab)
    if setup.drafter == MTP_DRAFTER:  # the target's own layer, on its devices and formats
        key += (setup.target, setup.weight_bits, setup.tp, setup.ep, setup.precision,
                setup.kv_bits)
    if key not in _COSTS:
        free = setup.drafter is None or setup.drafter in MODEL_FREE_SOURCES
        spec = drafter_spec(None if free else setup.drafter, get_model(str(setup.target)))
        _COSTS[key] = setup.draft_cost(_profile(setup.hw), setup.draft_spec(spec))
    return _COSTS[key]


@cache
def _cached_pricing(hardware: str, runtime: str, target: str, drafter: str, tp: int,
                    weight_bits: int, context: int, batch: int, temperature: float,
                    system: str, system_options: tuple[tuple[str, Any], ...],
                    engine: str = DEFAULT_ENGINE, ep: int = 1, precision: str = "bf16",
                    expert_precision: str | None = None, kv_bits: int = 16) -> Pricing:
    setup = cell_deployment(hardware, runtime, target, drafter, tp, weight_bits, engine, ep,
                            precision, expert_precision, kv_bits, batch=batch)
    if system != NO_SYSTEM:
        setup.check_system(system)
        deployed = _deployed(hardware, runtime, target, drafter, tp, weight_bits, system,
                             system_options)
        models = deployed.target, deployed.drafter
    else:  # the draft on the devices the engine shards it over, as optimize-tree prices it
        models = _target_cost(setup), _draft_cost(setup)
    return deployed_pricing(setup, *models, context, temperature=temperature)


@cache
def _deployed(hardware: str, runtime: str, target: str, drafter: str, tp: int,
              weight_bits: int, system: str, system_options: tuple[tuple[str, Any], ...]
              ) -> SystemCosts:
    """The cost models a seed system deploys for a cell (`System.costs`)."""
    return deploy(system, hardware, target,
                  draft=None if drafter in (NO_DRAFTER, *MODEL_FREE_SOURCES) else drafter,
                  weight_bits=weight_bits, tp=tp, runtime=runtime,
                  options=dict(system_options), where=f"system {system}")


def _pricing(cell: Cell, trace: Trace | None) -> Pricing:
    """The cell's pricing, shared by every cell with the same parameters (its cached
    autoregressive and draft-level times with it). A simulated cell's static tree needs one
    only to build its `Setup` (tree builders never read it): it is priced at context 0."""
    return _cached_pricing(cell.hardware, cell.runtime, cell.target, cell.drafter, cell.tp,
                           cell.weight_bits, cell.context or 0, cell.batch,
                           0.0 if trace is None else trace.temperature, cell.system,
                           cell.system_options, cell.engine, cell.ep, cell.precision,
                           cell.expert_precision, cell.kv_bits)


def _vector(cell: Cell, trace: Trace | None) -> np.ndarray:
    """The positional acceptance vector of the cell's drafter: the given one, or the trace's;
    times the acceptance scale of the cell's system."""
    key = (cell.acceptance.digest, cell.source, cell.max_depth)
    if key not in _VECTORS:
        if trace is None:
            _VECTORS[key] = acceptance_table(cell.acceptance.vector, "acceptance")[0]
        else:
            _VECTORS[key] = np.asarray(AcceptanceModel.from_trace(
                trace, cell.source, max_depth=cell.max_depth).p)
    if cell.system == NO_SYSTEM:
        return _VECTORS[key]
    deployed = _deployed(cell.hardware, cell.runtime, cell.target, cell.drafter, cell.tp,
                         cell.weight_bits, cell.system, cell.system_options)
    return scaled_acceptance(_VECTORS[key], deployed.acceptance_scale)


def _tree(cell: Cell, setup: Setup) -> tuple[Tree, float, float | None]:
    """The method's tree at the cell's budget, its expected tokens per step, and its replayed
    tokens per step over the trace (None without one)."""
    key = (cell.acceptance.digest, cell.source, cell.method, cell.budget, cell.max_depth,
           cell.system, cell.system_options)  # a system may scale the acceptance
    if key not in _TREES:
        tree = TREE_METHODS[cell.method](setup, cell.budget, cell.max_depth)
        replayed = None if setup.trace is None else replay(setup.trace, tree).tokens_per_step
        _TREES[key] = (tree, setup.value(tree), replayed)
    return _TREES[key]
