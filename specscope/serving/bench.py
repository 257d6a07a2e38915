"""`specscope serve-bench`: a real load run of the continuous-batching executor, measured as
`simulate` measures a simulated one.

Arrivals and output lengths are drawn exactly as `simulate` draws them for the same seed and a
fixed prompt length (`build_groups` of a `WorkloadSpec`: Poisson or Gamma gaps, or an arrival
file; `LengthDist` outputs); prompts are the prompt set's, request i taking prompt i mod its
size, so prompt lengths are the prompts' own. Before any model runs, a run whose last arrival
comes past the time limit is refused (`limits.check_time`: the run waits that long at least);
once the prompts are known, so is a run whose estimated wall time (`wall_estimate`: its prompts'
prefill and its decode steps priced on a profile) passes `--max-wall` or the time limit; and
prompts whose output runs past the target's trained context are warned of
(`Session.check_context`, as every runner does). The requests are replayed in wall-clock time in
this process by `serving.Server` over the batched target (`batch_target`: one forward for all
rows of a Transformer, a `PerRowModel` otherwise) and per-row drafters (the `draft` drafter's
rows share one batched draft model, each level one forward for all rows: `BatchedDraft`;
plain decoding, `--policy none`, starts none: no draft model prefills the prompts), and the
per-request table, summary, time series and event log are `simulator/metrics.py`'s, plus
each request's token times (`token_times_s`, seconds from the run's start).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from specscope.errors import InputError
from specscope.executor.batched import BatchedModel, own_cache
from specscope.executor.batched_draft import BatchedDraft
from specscope.executor.batched_transformer import batch_target
from specscope.executor.drafters import Drafter, make_drafter
from specscope.executor.loop import decode_autoregressive
from specscope.executor.methods import MAX_DEPTH, load_tree
from specscope.executor.runtime import Runtime
from specscope.executor.session import Session, draft_model_for, load_session
from specscope.executor.targets import Model
from specscope.executor.threads import use_threads
from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.profile import check_device_kind
from specscope.limits import check_time
from specscope.models import get_model
from specscope.names import DEFAULT_BUDGET, DEFAULT_OUTPUT_LEN, SERVED_MAX_BATCH
from specscope.schedule import Schedule
from specscope.serving.planners import in_turn, make_planner
from specscope.serving.server import Server, ServeRun
from specscope.simulator.entities import Group
from specscope.simulator.given import check_schedule_pairing, given_schedule
from specscope.simulator.metrics import request_table, summarise, time_series
from specscope.simulator.pricing import BatchPricer
from specscope.simulator.scheduler import Limits
from specscope.simulator.workload import LengthDist, WorkloadSpec, build_groups
from specscope.trace import AcceptanceModel, Trace
from specscope.tree import Tree


@dataclass(frozen=True)
class ServeBenchRequest:
    """The options of `specscope serve-bench` (see its `--help`)."""

    model: str
    rate: float
    requests: int
    drafter: str = "ngram"
    draft_model: str | None = None
    prompts: str = "builtin:code-edit"
    policy: str = "none"
    tree: Path | Tree | None = None
    schedule: Path | Schedule | None = None
    """The schedule policy's table (`optimize-tree --schedule -o`, or a `Schedule`)."""
    budget: int = DEFAULT_BUDGET
    max_depth: int = MAX_DEPTH
    acceptance: tuple[float, ...] | None = None
    trace: Trace | None = None
    arrivals: str = "poisson"
    cv: float = 1.0
    arrival_file: Path | None = None
    output_len: str = str(DEFAULT_OUTPUT_LEN)
    max_batch: int = SERVED_MAX_BATCH
    token_budget: int = 512
    chunked_prefill: int | None = None
    slo_tpot_ms: float | None = None
    max_wall_s: float | None = None
    hw: str | None = None
    seed: int = 0
    threads: int | None = None
    runtime: Runtime = field(default_factory=Runtime.cpu)
    options: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ServeBenchResult:
    """The summary (JSON-ready, `simulate`'s keys), one row per request, the event log and the
    time series, and the run's outputs."""

    summary: dict[str, Any]
    requests: pl.DataFrame
    events: pl.DataFrame
    timeseries: pl.DataFrame
    run: ServeRun


def arrivals(req: ServeBenchRequest) -> list[Group]:
    """The requests of `req`, drawn once as `simulate` draws them for its seed (arrivals and
    output lengths; prompt lengths come with the prompts: `with_prompts`), checked: its
    options, and its wait, refused when the last arrival comes past the time limit (the run
    waits for it in wall-clock time)."""
    spec = WorkloadSpec(requests=req.requests, rate=req.rate, prompt=LengthDist("fixed", 1.0),
                        output=LengthDist.parse(req.output_len, "--output-len"),
                        arrivals=req.arrivals, cv=req.cv, arrival_file=req.arrival_file)
    spec.check()
    groups = _unprompted(spec, req.seed)
    last = groups[-1].arrival_s
    what = (f"--arrival-file {req.arrival_file}" if req.arrival_file is not None
            else f"--rate {req.rate:g} with --requests {req.requests}")
    wait = f"{last:,.0f} s" if last < 1e7 else f"{last:.1e} s"
    check_time(last, f"{what} (its last arrival comes {wait} after the start, waited in "
                     "wall-clock time)", "serving")
    return groups


def with_prompts(groups: list[Group], prompts: Sequence[Sequence[int]]) -> list[Group]:
    """`groups` with request i given prompt i mod len(prompts) (its length the prompt's own)."""
    for group in groups:
        group.prompt_len = group.first[0].prompt_len = len(prompts[group.id % len(prompts)])
    return groups


def prompted_groups(spec: WorkloadSpec, seed: int, prompts: Sequence[Sequence[int]]
                    ) -> list[Group]:
    """`spec`'s arrivals and output lengths as `simulate` draws them for `seed`, request i with
    prompt i mod len(prompts)."""
    return with_prompts(_unprompted(spec, seed), prompts)


def _unprompted(spec: WorkloadSpec, seed: int) -> list[Group]:
    """`spec`'s groups in arrival order, as `simulate` draws them for `seed`, no trace."""
    return build_groups(spec, seed, lambda i: None, lambda row: (0, 0), lambda g: 1.0)


def run_serve_bench(req: ServeBenchRequest, session: Session | None = None) -> ServeBenchResult:
    """Check `req`, load its models (unless `session` holds them), serve its arrivals for real
    and measure them."""
    if req.budget < 1:
        raise InputError(f"--budget must be ≥ 1 (tree size counts the root), got {req.budget}")
    if req.acceptance is not None and req.trace is not None:
        raise InputError("give one of --trace and --acceptance")
    groups = arrivals(req)  # a bad or endless workload is refused before any model loads
    session = session or load_session(req.model, draft_model_for([req.drafter], req.draft_model),
                                      req.runtime)
    prompts = session.prompts(req.prompts)
    if any(len(p) < 2 for p in prompts):
        raise InputError(f"--prompts {req.prompts}: every prompt must hold at least 2 tokens")
    shared = _shared_draft(req, session)
    drafters = [_drafter(req, session, row, shared) for row in range(req.max_batch)]
    source = drafters[0].source
    tree = req.tree
    if isinstance(tree, Path):
        tree = load_tree(tree, source.split(":")[0], session.target.name)
    acceptance = (None if req.acceptance is None
                  else AcceptanceModel.from_vector(list(req.acceptance), source))
    pricer = None if req.hw is None else step_pricer(req.hw, session.target.name,
                                                     session.draft, source, req.runtime)
    check_schedule_pairing(req.policy, req.schedule)
    scheduled = given_schedule(req.schedule, session.target.name, source, req.trace is not None,
                               req.token_budget)
    planner, max_tree = make_planner(req.policy, source, req.budget, req.max_depth, tree,
                                     acceptance, req.trace, req.seed, req.options, pricer,
                                     in_turn if shared is None else shared.run,
                                     None if scheduled is None else scheduled.schedule)
    limits = Limits(req.max_batch, req.token_budget, req.chunked_prefill, max_tree)
    limits.check()
    if req.policy == "none":  # plain decoding starts no drafter, as `simulate` prices it
        shared, drafters = None, [Drafter() for _ in drafters]
    if req.chunked_prefill is None and any(len(p) > req.token_budget for p in prompts):
        raise InputError(f"--token-budget {req.token_budget} is below a prompt of "
                         f"{max(map(len, prompts))} tokens; raise it or use --chunked-prefill")
    groups = with_prompts(groups, prompts)
    served = [prompts[g.id % len(prompts)] for g in groups]
    session.check_context(served, [g.output_tokens for g in groups], f"--prompts {req.prompts}",
                          req.output_len)
    _check_wall(req, session, groups)
    threads = use_threads(req.threads, session.target, session.draft)
    if shared is not None:
        shared.model.prepare(max_tree)
    for m in drafters[0].models:  # first calls are slow: once before the clock starts
        decode_autoregressive(m, prompts[0][:8], 2)
    for m in (m for d in drafters for m in d.models):  # each row's draft model, captured now
        m.prepare(max_tree)
    capacity = max(g.prompt_len + g.output_tokens for g in groups) + max_tree
    model = batch_target(session.target, req.max_batch, capacity)
    model.prepare(max_tree)
    _warm_up(model, prompts[0])
    server = Server(model, drafters.__getitem__, planner, limits)
    try:
        run = server.run(groups, served)
    finally:
        if shared is not None:
            shared.close()
    requests = request_table([s.request for s in run.sequences]).with_columns(
        token_times_s=pl.Series([s.token_times for s in run.sequences],
                                dtype=pl.List(pl.Float64)))
    series = time_series(run.events, math.inf)
    summary = {
        "hardware": "measured", "target": session.target.name,
        **session.runtime.describe(), "threads": threads.count, "tp": 1,
        "drafter": req.drafter, "source": source, "policy": req.policy,
        "workload": "chat", "rate": req.rate, "arrivals": req.requests,
        "max_batch": req.max_batch, "token_budget": req.token_budget,
        "chunked_prefill": req.chunked_prefill, "seed": req.seed, "prompts": req.prompts,
        **summarise(requests, series, req.slo_tpot_ms),
        "kv_capacity_bytes": 0.0, "acceptance": "measured", "replayed_steps": 0,
        "sampled_steps": 0, "decode_steps": run.steps,
    }
    return ServeBenchResult(summary, requests, run.events, series, run)


WALL_PROFILES = {"cpu": "cpu-2core", "cuda": "h100"}
"""The profile a run's wall time is estimated on when no --hw names one, by device type."""


@dataclass(frozen=True)
class WallEstimate:
    """A serving run's wall time, estimated before it starts: its last arrival, and the
    priced work after it (`wall_estimate`)."""

    last_arrival_s: float
    prefill_s: float
    decode_s: float
    profile: str

    @property
    def total_s(self) -> float:
        """At least the wait for the last arrival, at least the work: the larger."""
        return max(self.last_arrival_s, self.prefill_s + self.decode_s)


def wall_estimate(cost: CostModel, prompt_lens: Sequence[int], outputs: Sequence[int],
                  last_arrival_s: float, chunk: int | None, max_batch: int) -> WallEstimate:
    """How long serving these requests takes at least, priced by `cost`: every prompt's
    prefill, in chunks of `chunk` tokens (whole when None) each at the context before it, one
    after another; every output token's decode step at batch 1 at its request's mean context,
    shared by `max_batch` rows (an optimistic share: a step of more rows costs more, and
    speculation's steps are not counted), so the run takes at least about this long."""
    lens, outs = np.asarray(prompt_lens), np.asarray(outputs, dtype=float)
    prefill = 0.0
    for length, count in zip(*np.unique(lens, return_counts=True), strict=True):
        size = int(length) if chunk is None else chunk
        starts = np.arange(0, int(length), size)
        new = np.minimum(size, length - starts)
        prefill += count * float(np.sum(cost.forward_time(1, new, starts)))
    decode = float(np.sum(outs * cost.forward_time(1, 1, lens + outs / 2))) / max_batch
    return WallEstimate(last_arrival_s, prefill, decode, cost.hw.name)


def _check_wall(req: ServeBenchRequest, session: Session, groups: Sequence[Group]) -> None:
    """Refuse a run whose `wall_estimate` passes `--max-wall` (default: the time limit)."""
    spec = session.target_spec
    if spec is None:  # a Hugging Face adapter's model: nothing to price it with
        return
    profile = load_profile(req.hw or WALL_PROFILES.get(req.runtime.device.type, "h100"))
    est = wall_estimate(CostModel(profile, spec, runtime=req.runtime.kind),
                        [g.prompt_len for g in groups],
                        [g.output_tokens for g in groups], max(g.arrival_s for g in groups),
                        req.chunked_prefill, req.max_batch)
    what = (f"this run (last arrival {est.last_arrival_s:,.0f} s; prefill {est.prefill_s:,.0f} "
            f"s and decode {est.decode_s:,.0f} s priced on {est.profile})")
    if req.max_wall_s is None:
        check_time(est.total_s, what, "serving")
    elif est.total_s > req.max_wall_s:
        raise InputError(f"--max-wall {req.max_wall_s:g}: {what} needs an estimated "
                         f"{est.total_s:,.0f} s of serving; serve fewer or shorter requests, or "
                         "raise --max-wall")


def step_pricer(hw: str, target: str, draft: Model | None, source: str, runtime: Runtime
                ) -> BatchPricer:
    """The simulator's step prices of `target` (a catalogue name) drafting from `source` (with
    the `draft` model, if any) under `runtime` on profile `hw`: what SmartSpec chooses by."""
    profile = load_profile(hw)
    check_device_kind(profile, runtime.device.type)
    drafter = None if draft is None else CostModel(profile, get_model(draft.name),
                                                   runtime=runtime.kind)
    return BatchPricer(CostModel(profile, get_model(target), runtime=runtime.kind), drafter,
                       source)


def _shared_draft(req: ServeBenchRequest, session: Session) -> BatchedDraft | None:
    """The draft model every row's `draft` drafter shares, its levels batched across rows
    (`executor/batched_draft.py`); None for other drafters."""
    if req.drafter != "draft" or session.draft is None:
        return None
    return BatchedDraft(batch_target(session.draft, req.max_batch))


def _drafter(req: ServeBenchRequest, session: Session, row: int,
             shared: BatchedDraft | None) -> Drafter:
    """Row `row`'s drafter: the shared draft's row, or a draft model with a cache of its own
    per row (the other drafters that run one)."""
    draft = session.draft if shared is None else shared.row(row)
    if shared is None and draft is not None and row > 0:
        draft = own_cache(draft)
    return make_drafter(req.drafter, session.target.vocab_size, draft_model=draft,
                        target=session.target)


def _warm_up(model: BatchedModel, prompt: Sequence[int]) -> None:
    """A short prefill and step in row 0 before the clock starts (first calls are slow)."""
    model.admit(0, len(prompt))
    model.prefill(0, torch.tensor(prompt[:-1]))
    model.verify([0], [torch.tensor(prompt[-1:])], [Tree.root()])
    model.commit(0, [0])
    model.release(0)
