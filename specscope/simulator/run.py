"""`specscope simulate` as a library call: check every option, build the pieces, run, measure.

The acceptance source and the priced drafter are `source` and `drafter`, each defaulting to the
other (`specscope.trace.drafting`): a catalogue draft model, a model-free drafter (`ngram`,
`suffix`, `recycle`), a `draft:<model>` or `rasd:<model>` source pricing `<model>`, a
self-speculative source pricing its share of the target's layers; neither given, the trace's
default source, or no drafter at all for `--policy none`. Acceptance comes from the trace
(replayed, and fitted as the policies' `AcceptanceModel`) or from a given vector `acceptance`.
Every bad option is an `InputError` naming it, raised before anything runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import simpy

from specscope.errors import InputError
from specscope.hw_profiles import CostModel, HardwareProfile, load_profile
from specscope.hw_profiles.deployment import Deployment
from specscope.hw_profiles.engine import DEFAULT_ENGINE
from specscope.hw_profiles.pricing import deployed as deployed_pricing
from specscope.hw_profiles.pricing import kv_capacity
from specscope.limits import check_memory
from specscope.models import ModelSpec, get_model, list_models
from specscope.models.catalogue import drafter_spec
from specscope.names import MODEL_FREE_SOURCES
from specscope.schedule import Schedule
from specscope.simulator.acceptance import Acceptance
from specscope.simulator.economics import economics, gpus
from specscope.simulator.entities import Group, KVCost, KVSpace, Request
from specscope.simulator.events import EVENT_BYTES, EventLog
from specscope.simulator.given import check_schedule_pairing, given_schedule, given_tree
from specscope.simulator.metrics import request_table, summarise, time_series
from specscope.simulator.policies import POLICIES
from specscope.simulator.policies.base import PolicySetup
from specscope.simulator.pricing import BatchPricer, Link
from specscope.simulator.scheduler import Limits, Router
from specscope.simulator.server import Replica, serve
from specscope.simulator.workload import LengthDist, WorkloadSpec, build_groups
from specscope.systems.base import SystemCosts
from specscope.systems.registry import deploy
from specscope.trace import AcceptanceModel, Trace, drafting
from specscope.tree import DEFAULT_SOURCE, Tree

PLACEMENTS = ("colocated", "separate")
MAX_BATCH = 32
"""Sequences per step when neither --max-batch nor the engine's scheduler states one."""
DEFAULT_PROMPT, DEFAULT_OUTPUT = "512", "256"
"""Lengths (tokens) without a trace."""
SEQUENCE_BYTES = 680
"""Memory one simulated sequence holds to the end, besides its events: its `Request` (and its
share of a `Group`), its row of the per-request table and the Python lists that build it
(measured: the peak resident memory grows by 1,040 bytes per sequence with 4 events, and by
2,480 with 20)."""


@dataclass(frozen=True)
class SimulateRequest:
    """The options of `specscope simulate` (see `specscope simulate --help`): what is deployed
    (its target a catalogue name or a `ModelSpec` of one's own; its max batch None: the engine
    scheduler's default for this policy, speculating or not, else `MAX_BATCH`), and the load."""

    deployment: Deployment
    trace: Trace | None = None
    source: str | None = None
    """The trace source whose acceptance is used (a kind alone, `rasd`, when unique)."""
    policy: str = "none"
    tree: Path | Tree | None = None
    """The static policy's tree: a tree or optimize-tree JSON file, or a `Tree`."""
    schedule: Path | Schedule | None = None
    """The schedule policy's table: an `optimize-tree --schedule` JSON file, or a
    `Schedule`."""
    algo: str | None = None
    budget: int = 16
    max_depth: int = 12
    acceptance: tuple[float, ...] | None = None
    rate: float = 1.0
    requests: int = 100
    token_budget: int = 8192
    chunked_prefill: int | None = None
    replicas: int = 1
    router: str = "round-robin"
    workload: str = "chat"
    fork_branches: int = 4
    fork_levels: int = 1
    arrivals: str = "poisson"
    cv: float = 1.0
    arrival_file: Path | None = None
    prompt_len: str | None = None
    output_len: str | None = None
    draft_placement: str = "colocated"
    link_gbps: float = 100.0
    link_us: float = 10.0
    slo_tpot_ms: float | None = None
    slo_ttft_ms: float | None = None
    gpu_hour_usd: float | None = None
    """The price of one GPU-hour: the cost per million output tokens (`economics`)."""
    drift: tuple[float, ...] = ()
    seed: int = 0
    against_plain: bool = True
    """Also simulate plain decoding of the same arrivals (`plain_comparison`)."""
    options: Mapping[str, float] = field(default_factory=dict)
    system: str | None = None
    """A seed system (`specscope.systems`) whose cost models serve in place of the plain ones."""
    system_options: Mapping[str, Any] = field(default_factory=dict)
    images: int = 0
    """Images per request, for a vision-language system (their tokens join every prompt; the
    vision encoder's own time is not simulated)."""


@dataclass(frozen=True)
class SimulationResult:
    """The summary (JSON-ready), one row per sequence, the event log and the time series."""

    summary: dict[str, Any]
    requests: pl.DataFrame
    events: pl.DataFrame
    timeseries: pl.DataFrame


@dataclass(frozen=True)
class _Drafter:
    """The drafter as resolved: its trace source and its cost model (None: model-free)."""

    source: str
    cost: CostModel | None


def run_simulation(req: SimulateRequest,
                   progress: Callable[[int, int], None] | None = None) -> SimulationResult:
    """Check `req`, simulate it, and measure it; `progress(done, total)` after each finished
    arrival."""
    asked, req = req, _with_max_batch(req)
    _check(req)
    dep = req.deployment
    profile = load_profile(dep.hw)
    spec = dep.target if isinstance(dep.target, ModelSpec) else get_model(dep.target)
    deployed = _deploy(req, spec)
    if deployed is None:
        target = dep.target_cost(profile, spec)
        drafter = _drafter(req, profile, spec)
        drift = req.drift
    else:
        target, drafter = deployed.target, _Drafter(deployed.source, deployed.drafter)
        scale = deployed.acceptance_scale
        drift = tuple(m * scale for m in req.drift or (1.0,)) if scale != 1.0 else req.drift
    price = deployed_pricing(dep, target, drafter.cost, 1)
    target, drafter, engine = price.target, _Drafter(drafter.source, price.drafter), price.engine
    model = _acceptance_model(req, drafter.source)
    tree = given_tree(req.tree, req.algo, spec.name, drafter.source, req.trace is not None,
                      req.token_budget)
    scheduled = given_schedule(req.schedule, spec.name, drafter.source, req.trace is not None,
                               req.token_budget)
    schedule = None if scheduled is None else scheduled.schedule
    acceptance = Acceptance(model, req.trace, req.seed, drift)
    for checked in [tree, *(() if schedule is None else (b.tree for b in schedule.buckets))]:
        if checked is not None and req.trace is not None:
            acceptance.check(checked)
    link = Link(req.link_gbps, req.link_us) if req.draft_placement == "separate" else None
    temperature = 0.0 if req.trace is None else req.trace.temperature
    pricer = BatchPricer(target, drafter.cost, drafter.source, link, temperature, engine,
                         dep.draft_window)
    colocated = [target] + ([drafter.cost] if drafter.cost is not None and link is None else [])
    capacity = kv_capacity(colocated, dep.stages if dep.stages > 1 else None)
    largest = max([tree.size if tree else 1] + ([] if schedule is None else [
        b.tree.size for b in schedule.buckets if b.tree is not None]))
    max_tree = 1 if req.policy == "none" else max(req.budget, largest)
    limits = Limits(dep.max_batch, req.token_budget, req.chunked_prefill, max_tree)
    limits.check()
    workload = _workload(req, deployed.prompt_tokens if deployed else 0)
    check_memory(memory_estimate(workload, dep.max_batch * req.replicas),
                 f"simulate --requests {req.requests:,}")
    groups = build_groups(workload, req.seed, acceptance.trace_request,
                          acceptance.trace_lengths, acceptance.multiplier)
    _check_fits(groups, limits, KVSpace(capacity, KVCost.of(*colocated)))

    env, log = simpy.Environment(), EventLog()
    setup = PolicySetup(model, drafter.source, req.trace, tree, req.budget, req.max_depth,
                        req.seed, dict(req.options), schedule)
    done = 0

    def finished(_: object) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, len(groups))

    replicas = [Replica(i, env, limits, KVSpace(capacity, KVCost.of(*colocated)), pricer,
                        POLICIES[req.policy](setup), acceptance, log, finished)
                for i in range(req.replicas)]
    serve(groups, replicas, Router(req.router, req.replicas))

    requests = request_table(_sequences(groups))
    events = log.frame()
    series = time_series(events, capacity)
    summary = {
        "hardware": profile.name, "target": spec.name, "runtime": target.runtime.name,
        "engine": dep.engine_name or DEFAULT_ENGINE,
        "tp": dep.tp, "weight_bits": target.weight_bits,
        "drafter": drafter.cost.model.name if drafter.cost else dep.drafter,
        "draft_tp": drafter.cost.tp if drafter.cost else None,
        "source": drafter.source, "system": req.system or "none",
        "lossy": bool(deployed and deployed.lossy),
        "policy": req.policy, "draft_placement": req.draft_placement,
        "workload": req.workload, "rate": req.rate, "arrivals": req.requests,
        "replicas": req.replicas, "max_batch": dep.max_batch, "seed": req.seed,
        **summarise(requests, series, req.slo_tpot_ms, req.slo_ttft_ms),
        "kv_capacity_bytes": capacity,
        "acceptance": acceptance.origin,
        "replayed_steps": acceptance.replayed, "sampled_steps": acceptance.sampled,
    }
    summary |= economics(summary, gpus(summary, dep.stages), req.gpu_hour_usd)
    if req.policy != "none" and req.against_plain:
        plain = run_simulation(dataclasses.replace(asked, policy="none", tree=None, algo=None,
                                                   schedule=None, drift=(),
                                                   against_plain=False))
        summary["plain"] = plain_comparison(summary, plain.summary)
        if scheduled is not None and scheduled.constant is not None:
            constant = run_simulation(dataclasses.replace(
                asked, policy="static", tree=scheduled.constant, algo=None, schedule=None,
                against_plain=False))
            summary["choices"] = {name: {k: s[k] for k in CHOICE_KEYS} for name, s in (
                ("schedule", summary), ("constant", constant.summary),
                ("none", plain.summary))}
    return SimulationResult(summary, requests, events, series)


PLAIN_KEYS = ("throughput_tok_s", "goodput_tok_s", "mean_ttft_ms", "mean_tpot_ms",
              "p99_ttft_ms", "mean_latency_s", "p99_latency_s", "mean_batch", "max_batch",
              "tokens_per_s_per_gpu", "goodput_per_gpu", "tokens_per_s_per_user",
              "usd_per_million_tokens", "usd_per_million_good_tokens")
"""What the plain-decoding run reports beside a speculative one."""
CHOICE_KEYS = (*PLAIN_KEYS, "gpus")
"""What `--policy schedule` reports for the schedule, its best constant and no speculation."""
BREAK_EVEN = 0.01
"""Speculation pays when it cuts the mean latency by more than 1% and keeps the throughput
within 1% (or raises it); a smaller difference is within the simulator's own noise."""


def speculation_pays(speculative: Mapping[str, Any], plain: Mapping[str, Any]) -> bool:
    """Whether a speculative run's summary beats plain decoding's of the same arrivals
    (`BREAK_EVEN`)."""
    return (speculative["mean_latency_s"] * (1 + BREAK_EVEN) < plain["mean_latency_s"]
            and speculative["throughput_tok_s"] >= plain["throughput_tok_s"] * (1 - BREAK_EVEN))


def plain_comparison(speculative: Mapping[str, Any], plain: Mapping[str, Any]
                     ) -> dict[str, Any]:
    """Plain decoding of the same arrivals beside a speculative policy's run: its metrics
    (`PLAIN_KEYS`), the policy's mean latency and throughput over plain decoding's
    (`latency_speedup` above 1: requests finish sooner; `throughput_ratio`), and whether
    speculation pays (`speculation_pays`). The plain run holds no draft model, so its KV memory
    is the target's alone."""
    latency = plain["mean_latency_s"] / speculative["mean_latency_s"]
    throughput = speculative["throughput_tok_s"] / plain["throughput_tok_s"]
    pays = speculation_pays(speculative, plain)
    return {**{k: plain[k] for k in PLAIN_KEYS}, "latency_speedup": latency,
            "throughput_ratio": throughput, "speculation_pays": pays,
            "verdict": (f"{speculative['policy']} finishes requests {latency:.2f}× as fast as "
                        f"plain decoding at {throughput:.2f}× its throughput"
                        + ("" if pays else "; plain decoding is the better choice here"))}


def _with_max_batch(req: SimulateRequest) -> SimulateRequest:
    """`req` with its batch limit resolved: as given, else the engine's scheduler default for
    the policy (vLLM's `max_num_seqs`; SGLang's 48 running requests while speculating), else
    `MAX_BATCH`."""
    limit = req.deployment.max_batch_for(req.policy != "none") or MAX_BATCH
    return dataclasses.replace(req, deployment=dataclasses.replace(req.deployment,
                                                                   max_batch=limit))


def _check(req: SimulateRequest) -> None:
    """Raise `InputError` for the first bad option that needs nothing loaded."""
    if req.deployment.target is None:
        raise InputError("--target: simulate serves a named target model; give one")
    if req.policy not in POLICIES:
        raise InputError(f"--policy: unknown policy {req.policy!r}; known: "
                         f"{', '.join(POLICIES)}")
    if req.budget < 1:
        raise InputError(f"--budget must be ≥ 1 (tree size counts the root), got {req.budget}")
    if req.budget > req.token_budget:
        raise InputError(f"--budget {req.budget} exceeds --token-budget {req.token_budget}")
    if req.max_depth < 0:
        raise InputError(f"--max-depth must be ≥ 0, got {req.max_depth}")
    if req.deployment.offload and req.system is not None:
        raise InputError("--offload prices the plain target; a --system deploys its own "
                         "(no offloading)")
    if req.draft_placement not in PLACEMENTS:
        raise InputError(f"--draft-placement must be one of {', '.join(PLACEMENTS)}, "
                         f"got {req.draft_placement!r}")
    if not (req.link_gbps > 0 and req.link_us >= 0):
        raise InputError(f"--link-gbps must be > 0 and --link-us ≥ 0, got {req.link_gbps} and "
                         f"{req.link_us}")
    for option, value in (("--slo-tpot-ms", req.slo_tpot_ms), ("--slo-ttft-ms", req.slo_ttft_ms),
                          ("--gpu-hour-usd", req.gpu_hour_usd)):
        if value is not None and not value > 0:
            raise InputError(f"{option} must be > 0, got {value}")
    if any(not m > 0 for m in req.drift):
        raise InputError(f"--drift multipliers must be > 0, got {list(req.drift)}")
    if req.drift and req.policy == "none":
        raise InputError("--drift changes acceptance, which --policy none never uses")
    check_schedule_pairing(req.policy, req.schedule)


def _drafter(req: SimulateRequest, profile: HardwareProfile, target: ModelSpec) -> _Drafter:
    """The drafter's source and cost model (module docstring), a draft model on the engine's
    devices for it (`Deployment.draft_tp`); plain decoding (`--policy none`) loads no draft model,
    whatever drafter is named."""
    dep = req.deployment
    if req.trace is None and dep.drafter is None and req.source is None:
        if req.policy != "none":
            raise InputError(f"--policy {req.policy} needs --drafter (a draft model or "
                             f"{', '.join(sorted(MODEL_FREE_SOURCES))}) or --trace")
        return _Drafter(DEFAULT_SOURCE, None)
    chosen = drafting(req.trace, req.source, dep.drafter, list_models())
    priced = dep.draft_spec(drafter_spec(chosen.model, target, chosen.kept_layers,
                                         chosen.source))
    if req.policy == "none":
        return _Drafter(chosen.source, None)
    cost = dep.draft_cost(profile, priced)
    if req.draft_placement == "separate" and cost is None:
        raise InputError("--draft-placement separate needs a draft model (--drafter MODEL)")
    return _Drafter(chosen.source, cost)


def _deploy(req: SimulateRequest, spec: ModelSpec) -> SystemCosts | None:
    """The cost models of `req.system` (None: the plain target and drafter)."""
    if req.images < 0:
        raise InputError(f"--images must be ≥ 0, got {req.images}")
    if req.system is None:
        if req.system_options or req.images:
            raise InputError(f"{'--images' if req.images else '--system-options'} needs "
                             "--system")
        return None
    dep = req.deployment
    draft = None if dep.drafter in (None, *MODEL_FREE_SOURCES) else dep.drafter
    return deploy(req.system, dep.hw, spec.name, draft=draft, weight_bits=dep.weight_bits,
                  tp=dep.tp, runtime=dep.runtime, images=req.images,
                  options=dict(req.system_options))


def _acceptance_model(req: SimulateRequest, source: str) -> AcceptanceModel:
    """The drafter's fitted (trace) or given acceptance vector."""
    if req.trace is not None:
        if req.acceptance is not None:
            raise InputError("give one of --trace and --acceptance")
        return AcceptanceModel.from_trace(req.trace, source)
    if req.acceptance is None:
        if req.policy != "none":
            raise InputError(f"--policy {req.policy} needs --trace or --acceptance")
        return AcceptanceModel.from_vector([0.0], source)
    return AcceptanceModel.from_vector(list(req.acceptance), source)


def _workload(req: SimulateRequest, prompt_extra: int = 0) -> WorkloadSpec:
    """The workload's spec; every prompt gains `prompt_extra` tokens (a VLM's images)."""
    default = "trace" if req.trace is not None else None
    spec = WorkloadSpec(
        requests=req.requests, rate=req.rate,
        prompt=LengthDist.parse(req.prompt_len or default or DEFAULT_PROMPT, "--prompt-len"),
        output=LengthDist.parse(req.output_len or default or DEFAULT_OUTPUT, "--output-len"),
        arrivals=req.arrivals, cv=req.cv, arrival_file=req.arrival_file, kind=req.workload,
        branches=req.fork_branches, levels=req.fork_levels, prompt_extra=prompt_extra)
    spec.check()
    return spec


def memory_estimate(workload: WorkloadSpec, batch: int) -> float:
    """Bytes a simulation of `workload` holds at its end (an estimate): every sequence's objects
    and table row, and the event log with its 4 events per sequence and 2 per step, counting
    steps at a full `batch` of one token each (a trace's lengths count one token)."""
    sequences = workload.requests * workload.sequences_per_request
    out = workload.output
    means: dict[str, Callable[[], float]] = {
        "fixed": lambda: out.a, "uniform": lambda: (out.a + out.b) / 2,
        "lognormal": lambda: out.a * math.exp(out.b**2 / 2), "trace": lambda: 1.0}
    mean_output = means[out.kind]()  # only this kind's: another's formula may not hold here
    steps = sequences * mean_output / batch
    return sequences * (SEQUENCE_BYTES + 4 * EVENT_BYTES) + 2 * steps * EVENT_BYTES


def _check_fits(groups: list[Group], limits: Limits, kv: KVSpace) -> None:
    """Raise `InputError` when an arrival could never run: its peak KV above the capacity, or
    (prefill not chunked) its prompt above the token budget."""
    for group in groups:
        if not kv.fits(kv.peak(group, limits.max_tree)):
            raise InputError(f"arrival {group.id} needs {kv.peak(group, limits.max_tree) / 1e9:.2f}"
                             f" GB of KV memory, more than the {kv.capacity / 1e9:.2f} GB left "
                             "after the weights (lower --output-len/--prompt-len or raise --tp)")
        if limits.chunk is None and group.prompt_len > limits.token_budget:
            raise InputError(f"--token-budget {limits.token_budget} is below a prompt of "
                             f"{group.prompt_len} tokens; raise it or use --chunked-prefill")


def _sequences(groups: list[Group]) -> list[Request]:
    """Every sequence of every group, in id order."""
    out, stack = [], [r for g in groups for r in g.first]
    while stack:
        r = stack.pop()
        out.append(r)
        stack.extend(r.children)
    return sorted(out, key=lambda r: r.id)
