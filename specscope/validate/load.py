"""`specscope validate --load`: the simulator under load against real continuous-batching runs.

1. Prompts: the sets of `--prompts` interleaved, those too long for the model or the token
   budget left out, the first `requests` kept; one per request.
2. Acceptance: a greedy trace of the target with the run's drafter on exactly these prompts
   (`collect_tokens`). The simulator replays it (request k replays trace request
   `Acceptance.trace_request(k)`), so the real run gives request k that request's prompt, and
   the simulated prompt lengths are the real ones (`--prompt-len trace`). The real run is
   lossless greedy decoding of the same prompts, so a static tree accepts, step by step, what the
   replay accepts; live policies (dyspec, smartspec) decide from their own state on each side.
3. Saturation: a probe run of plain decoding (`none`) with every request arriving at once; its
   throughput over the output length is the saturation rate in requests/s. The ladder is
   fractions of it, from light load to past saturation.
4. Each rate × policy is run for real (`run_serve_bench`, wall clock) and simulated
   (`run_simulation`) with the same seed (so the same Poisson arrivals and output lengths), the
   same prompts, the same limits and the same tree, budget or schedule. With the `schedule`
   policy, its table is `optimize-tree --schedule`'s chains for the run's drafter, found on
   the profile from the run's own trace over batch sizes 1..the run's limit, and the `static`
   policy verifies that search's best constant chain (the bar a schedule is held to) instead
   of a chain of `budget − 1`. The real runs repeat
   (`LoadSizes.repeats`, `--repeats`), the policies taking turns, and a cell's measured metrics
   are their mean: a shared machine's speed moves by tens of percent within a minute, and the
   p99 of a few dozen requests is nearly their maximum.
5. Machine drift, as `validate` measures it (`machine_drift`: the profile's own steps re-timed
   now against then, here the target's and the draft model's at every batch up to the run's
   maximum), before the first real run and after each; a cell's drift d is the
   geometric mean of the probes around its runs. The simulation, made for the machine as
   profiled, is corrected by time dilation: every simulated duration scaled by d is the same run
   as arrivals d times as fast, so the cell is simulated at d × rate and its times multiplied by
   d (throughput divided by d). A probe takes about a second; load from other processes that
   comes and goes within a cell is not seen by it.

Nothing is fitted to the runs compared: the simulator prices steps from the profile alone.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specscope.errors import InputError
from specscope.executor.collect import collect_tokens
from specscope.executor.drafters import make_drafter
from specscope.executor.methods import MAX_DEPTH
from specscope.executor.runtime import Runtime
from specscope.executor.session import Session, draft_model_for, load_session
from specscope.executor.threads import use_threads
from specscope.hw_profiles import load_profile
from specscope.hw_profiles.deployment import deployment
from specscope.hw_profiles.profile import check_device_kind
from specscope.interop.schedule_search import ScheduleResult, search_schedule
from specscope.models import get_model
from specscope.models.zoo import zoo_specs
from specscope.models.zoo.prompts import load_prompts
from specscope.names import DRAFT_MODEL_DRAFTERS, LOAD_POLICIES
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.profiling.drift import machine_drift
from specscope.schedule import Schedule
from specscope.serving.bench import ServeBenchRequest, run_serve_bench
from specscope.simulator.acceptance import Acceptance
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.trace import AcceptanceModel, Trace, write_trace
from specscope.tree import Tree
from specscope.validate.compare import DEFAULT_PROMPTS, profile_threads
from specscope.validate.load_report import METRICS, cell, summary


def default_policies(drafter: str) -> tuple[str, ...]:
    """Policies compared by default: plain decoding, a static chain, SmartSpec's length, and
    with a draft-model drafter DySpec (the simulator grows its trees on ranked candidates,
    which a sequence drafter such as n-gram does not have)."""
    return ("none", "static", "smartspec", *(("dyspec",) if drafter in DRAFT_MODEL_DRAFTERS
                                             else ()))

PROBE_RATE = 1e4
"""Requests/s of the saturation probe: every request arrives at once."""


@dataclass(frozen=True)
class LoadSizes:
    """How much is run: requests per cell (one prompt each), output tokens per request, the
    ladder's rates as fractions of the saturation rate, the batch limit, and the real runs per
    cell (`repeats`: the same arrivals served again, the policies' turns interleaved, the
    measured metrics their mean)."""

    requests: int
    output_len: int
    fractions: tuple[float, ...]
    max_batch: int
    repeats: int = 1


QUICK_LOAD = LoadSizes(requests=24, output_len=32, fractions=(0.25, 0.5, 1.0, 2.0), max_batch=4,
                       repeats=2)
FULL_LOAD = LoadSizes(requests=64, output_len=64,
                      fractions=(0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.5), max_batch=8, repeats=2)


@dataclass(frozen=True)
class LoadRequest:
    """The options of `specscope validate --load`; `sizes` and `rates` replace the ladder's
    (tests: `rates` in requests/s skips the saturation probe)."""

    hw: str
    model: str
    device: str = "auto"
    runtime: str | None = None
    quick: bool = False
    prompts: str = DEFAULT_PROMPTS
    drafter: str = "ngram"
    draft_model: str | None = None
    policies: tuple[str, ...] = ("none", "static", "smartspec")
    budget: int = 6
    token_budget: int = 512
    seed: int = 0
    threads: int | None = None
    sizes: LoadSizes | None = None
    rates: tuple[float, ...] | None = None
    repeats: int | None = None


Progress = Callable[[int, int], None]


def run_load_validate(req: LoadRequest, progress: Progress | None = None) -> dict[str, Any]:
    """Check every input, then simulate and run every policy × rate (module docstring); the
    JSON-ready result: its setting, `cells`, and the summaries of `load_report.summary`.
    `progress(done, total)` is called after each real run."""
    start = time.perf_counter()
    profile = load_profile(req.hw)
    if req.model not in zoo_specs():
        raise InputError(f"--target: unknown zoo model {req.model!r}; zoo models: "
                         f"{', '.join(sorted(zoo_specs()))}")
    unknown = [p for p in req.policies if p not in LOAD_POLICIES]
    if unknown or len(set(req.policies)) < 2:
        raise InputError(f"--policies: validate --load compares at least 2 of "
                         f"{', '.join(LOAD_POLICIES)}; got {', '.join(req.policies)}")
    if "dyspec" in req.policies and req.drafter not in DRAFT_MODEL_DRAFTERS:
        raise InputError(f"--policies dyspec grows trees on a draft model's ranked candidates; "
                         f"--drafter {req.drafter} proposes one sequence (use --drafter draft)")
    if req.rates is not None and (not req.rates or min(req.rates) <= 0):
        raise InputError(f"rates must be > 0 requests/s, got {list(req.rates)}")
    sizes = req.sizes or (QUICK_LOAD if req.quick else FULL_LOAD)
    if req.repeats is not None:
        if req.repeats < 1:
            raise InputError(f"--repeats must be ≥ 1, got {req.repeats}")
        sizes = dataclasses.replace(sizes, repeats=req.repeats)
    runtime = Runtime.resolve(req.device, "float32", req.runtime)
    check_device_kind(profile, runtime.device.type)
    threads = profile_threads(profile, runtime, req.threads)
    draft_name = draft_model_for([req.drafter], req.draft_model)
    session = load_session(req.model, draft_name, runtime)
    chosen = use_threads(threads, session.target, session.draft)
    texts, tokens = load_prompt_set(req.prompts, session, sizes.requests, get_model(
        req.model).max_seq_len - sizes.output_len - req.budget, req.token_budget)
    drafter = make_drafter(req.drafter, session.target.vocab_size, session.draft,
                           target=session.target)
    trace = collect_tokens(session.target, [drafter], tokens, sizes.output_len, 0.0, req.seed)
    source = drafter.source
    acceptance = Acceptance(AcceptanceModel.from_trace(trace, source), trace, req.seed)
    order = [acceptance.trace_request(k) for k in range(len(tokens))]
    total = (len(req.policies) * len(req.rates or sizes.fractions) * sizes.repeats
             + (req.rates is None))
    done = 0
    with tempfile.TemporaryDirectory() as folder:
        plan = (None if "schedule" not in req.policies else
                load_schedule(req, trace, source, draft_name, sizes, runtime.kind,
                              Path(folder) / "trace.parquet"))
        static = Tree.chain(req.budget - 1, source) if plan is None else plan.constant
        trees = {"static": static, "schedule": None}
        schedule = None if plan is None else plan.schedule
        # request k's prompt is the one the simulator's request k replays
        prompt_file = Path(folder) / "prompts.jsonl"
        prompt_file.write_text("".join(json.dumps({"prompt": texts[r]}) + "\n" for r in order),
                               encoding="utf-8")

        def real(policy: str, rate: float) -> dict[str, Any]:
            nonlocal done
            result = run_serve_bench(ServeBenchRequest(
                model=req.model, rate=rate, requests=len(tokens), drafter=req.drafter,
                draft_model=draft_name, prompts=str(prompt_file), policy=policy,
                tree=trees.get(policy), schedule=schedule if policy == "schedule" else None,
                budget=req.budget, max_depth=MAX_DEPTH,
                trace=trace, output_len=str(sizes.output_len), max_batch=sizes.max_batch,
                token_budget=req.token_budget, hw=req.hw, seed=req.seed,
                threads=chosen.count, runtime=runtime), session)
            done += 1
            if progress:
                progress(done, total)
            return result.summary

        saturation = None
        if req.rates is None:
            probe = real("none", PROBE_RATE)
            saturation = probe["throughput_tok_s"] / sizes.output_len
            ladder = [(f * saturation, f) for f in sizes.fractions]
        else:
            ladder = [(r, r / max(req.rates)) for r in req.rates]
        probed = [req.model] + ([draft_name] if draft_name is not None else [])
        probes = [machine_drift(profile, probed, runtime, sizes.max_batch)]
        cells = []
        for rate, fraction in ladder:
            runs: dict[str, list[dict[str, Any]]] = {p: [] for p in req.policies}
            around: dict[str, list[float | None]] = {p: [] for p in req.policies}
            for _ in range(sizes.repeats):  # each policy's turns interleaved with the others'
                for policy in req.policies:
                    runs[policy].append(real(policy, rate))
                    probes.append(machine_drift(profile, probed, runtime, sizes.max_batch))
                    around[policy] += probes[-2:]
            for policy in req.policies:
                drift = (None if None in around[policy]
                         else float(np.exp(np.mean(np.log(around[policy])))))
                sim = simulate(req, sizes, trace, source, draft_name, policy, rate,
                               runtime.kind, drift or 1.0, trees.get(policy),
                               schedule if policy == "schedule" else None)
                cells.append(cell(policy, rate, fraction, drift, sim, mean_run(runs[policy]),
                                  half_range(runs[policy])))
    return {
        "hardware": profile.name, "model": req.model, "drafter": req.drafter,
        "draft_model": draft_name, "source": source, "runtime": runtime.describe(),
        "threads": chosen.count, "threads_reason": chosen.reason, "prompts": req.prompts,
        "policies": list(req.policies), "budget": req.budget, "requests": len(tokens),
        "output_len": sizes.output_len, "max_batch": sizes.max_batch,
        "repeats": sizes.repeats,
        "token_budget": req.token_budget, "seed": req.seed, "saturation_rate": saturation,
        "rates": [r for r, _ in ladder], "machine_drift": probes,
        "acceptance": "replay of a greedy trace of the run's drafter on the run's prompts",
        "schedule": None if plan is None else plan.to_dict(),
        "cells": cells, **summary(cells), "wall_s": time.perf_counter() - start,
    }


def _numeric(runs: list[dict[str, Any]], key: str) -> bool:
    """Whether every repeat holds a number (not a flag) under `key`."""
    return all(isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool)
               for r in runs)


def mean_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The repeats of one cell as one summary: each number their mean."""
    return {key: float(np.mean([r[key] for r in runs])) if _numeric(runs, key) else runs[0][key]
            for key in runs[0]}


def half_range(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Half the range over the repeats of one cell of each compared metric (0 for one run)."""
    keys = [key for key, _ in METRICS.values()]
    return {key: float(np.ptp([r[key] for r in runs])) / 2 for key in keys
            if _numeric(runs, key)}


def load_schedule(req: LoadRequest, trace: Trace, source: str, draft_name: str | None,
                  sizes: LoadSizes, runtime: str, path: Path) -> ScheduleResult:
    """The schedule policy's table for the run: `optimize-tree --schedule`'s chains (the
    drafter proposes one sequence) over batch sizes 1..the run's limit, on the profile, from the
    run's own trace (written to `path`) at its mean context."""
    write_trace(trace, path)
    priced = draft_name if req.drafter in DRAFT_MODEL_DRAFTERS else req.drafter
    setup = run_optimize(OptimizeRequest(
        deployment=deployment(req.hw, target=req.model, drafter=priced, runtime=runtime,
                              max_batch=sizes.max_batch),
        trace_path=path, source=source, algos="chain", budget=req.budget,
        max_depth=MAX_DEPTH)).setup
    assert setup is not None
    return search_schedule(setup, req.budget, sizes.max_batch, "chain")


def simulate(req: LoadRequest, sizes: LoadSizes, trace: Trace, source: str,
             draft_name: str | None, policy: str, rate: float, runtime: str, drift: float,
             tree: Tree | None = None, schedule: Schedule | None = None) -> dict[str, Any]:
    """The simulated summary of one cell on the machine as it ran (`drift`: module docstring,
    step 5), the static policy verifying `tree`, the schedule policy reading `schedule`."""
    priced = draft_name if req.drafter in DRAFT_MODEL_DRAFTERS else req.drafter
    sim = run_simulation(SimulateRequest(
        deployment=deployment(req.hw, target=req.model, drafter=priced, runtime=runtime,
            max_batch=sizes.max_batch),
        trace=trace, source=source, policy=policy, tree=tree, schedule=schedule,
        budget=req.budget, max_depth=MAX_DEPTH, rate=rate * drift, requests=sizes.requests,
        token_budget=req.token_budget, prompt_len="trace", output_len=str(sizes.output_len),
        seed=req.seed, against_plain=False)).summary
    return dilate(sim, drift)


def dilate(summary: dict[str, Any], factor: float) -> dict[str, Any]:
    """`summary` with every duration multiplied by `factor` (rates divided by it)."""
    out = dict(summary)
    for key, higher in METRICS.values():
        if out.get(key) is not None:
            out[key] = out[key] / factor if higher else out[key] * factor
    return out


def load_prompt_set(spec: str, session: Session, count: int, max_tokens: int,
                    token_budget: int) -> tuple[list[str], list[list[int]]]:
    """The first `count` prompts (text and tokens) of the sets of `spec` (comma list,
    interleaved) holding 2 to min(`max_tokens`, `token_budget`) tokens."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    sets = [list(zip(load_prompts(n), session.prompts(n), strict=True)) for n in names]
    limit = min(max_tokens, token_budget)
    kept = [(t, p) for group in zip(*sets, strict=False) for t, p in group
            if 2 <= len(p) <= limit][:count]
    if len(kept) < count:
        raise InputError(f"--prompts {spec!r}: {len(kept)} prompts of 2 to {limit} tokens, "
                         f"a load cell needs {count}")
    return [t for t, _ in kept], [p for _, p in kept]

