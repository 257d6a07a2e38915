"""`specscope serve-bench`: a real load run of the continuous-batching executor, reported as
`simulate` reports a simulated one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.cli.checks import Choices, Range
from specscope.cli.common import (
    ArrivalCv,
    ArrivalFile,
    Arrivals,
    AsJson,
    Budget,
    ChunkedPrefill,
    CpuThreads,
    Device,
    DraftModel,
    Dtype,
    Force,
    MaxBatch,
    MetricsOutput,
    PolicyDepth,
    ScheduleFile,
    Seed,
    SloTpot,
    StepRuntime,
    Target,
    TokenBudget,
    _acceptance_inputs,
    _check_metrics_output,
    _progress,
    _report_serving,
    drafter_option,
)
from specscope.cli.measure import Prompts
from specscope.names import DEFAULT_BUDGET, DEFAULT_OUTPUT_LEN, SERVED_MAX_BATCH

ServedDrafter = drafter_option("specscope.names:DRAFTERS", "One per row of the batch.")


def serve_bench(
    target: Target,
    rate: Annotated[float, typer.Option(help="Arrivals per second."), Range(0, low_closed=False)],
    requests: Annotated[int, typer.Option(min=1, help="Arrivals to serve.")],
    seed: Seed = 0,
    drafter: ServedDrafter = "ngram",
    draft_model: DraftModel = None,
    prompts: Prompts = "builtin:code-edit",
    policy: Annotated[str, typer.Option(help="Per-step speculation policy (none: plain "
                                             "decoding)."),
                      Choices("specscope.names:SERVED_POLICIES")] = "none",
    tree: Annotated[Path | None, typer.Option(help="The static policy's tree: a tree JSON or "
                                                   "optimize-tree -o output.")] = None,
    schedule: ScheduleFile = None,
    trace: Annotated[Path | None, typer.Option(help="Trace of the drafter (smartspec's "
                                                    "acceptance, specdecpp's predictor).")
                     ] = None,
    acceptance: Annotated[str | None, typer.Option(help="smartspec: positional acceptance "
                                                        "vector (or trace import's JSON) "
                                                        "when no trace is given.")] = None,
    budget: Budget = None,
    max_depth: PolicyDepth = 12,
    max_batch: MaxBatch = None,
    token_budget: TokenBudget = 512,
    chunked_prefill: ChunkedPrefill = None,
    arrivals: Arrivals = "poisson",
    cv: ArrivalCv = 1.0,
    arrival_file: ArrivalFile = None,
    output_len: Annotated[str, typer.Option(help="Output tokens per request (EOS ignored): N, "
                                                 "uniform:A:B or lognormal:MEDIAN:SIGMA.")
                          ] = str(DEFAULT_OUTPUT_LEN),
    slo_tpot_ms: SloTpot = None,
    max_wall: Annotated[float | None, typer.Option(
        "--max-wall", help="Seconds the run may take: refused before it starts when its "
                           "estimated wall time (last arrival; prefill and decode priced on "
                           "--hw, else cpu-2core or h100) is longer (default: the time limit)."),
        Range(0, low_closed=False)] = None,
    hw: Annotated[str | None, typer.Option(help="Hardware profile (shipped name or TOML file) "
                                                "SmartSpec prices its steps on.")] = None,
    threads: CpuThreads = None,
    device: Device = "auto",
    dtype: Dtype = "float32",
    runtime: StepRuntime = None,
    as_json: AsJson = False,
    output: MetricsOutput = None,
    force: Force = False,
) -> None:
    """Real serving under load: arrivals replayed in wall-clock time through the
    continuous-batching speculative executor, measured as simulate measures."""
    from specscope.executor.runtime import Runtime
    from specscope.serving.bench import ServeBenchRequest, run_serve_bench
    from specscope.trace import read_trace

    trace, vector = _acceptance_inputs(trace, acceptance)
    request = ServeBenchRequest(
        model=target, rate=rate, requests=requests, drafter=drafter, draft_model=draft_model,
        prompts=prompts, policy=policy, tree=tree, schedule=schedule,
        budget=DEFAULT_BUDGET if budget is None else budget, max_depth=max_depth,
        acceptance=None if vector is None else tuple(vector),
        trace=None if trace is None else read_trace(trace), arrivals=arrivals, cv=cv,
        arrival_file=arrival_file, output_len=output_len,
        max_batch=SERVED_MAX_BATCH if max_batch is None else max_batch,
        token_budget=token_budget, chunked_prefill=chunked_prefill, slo_tpot_ms=slo_tpot_ms,
        max_wall_s=max_wall, hw=hw, seed=seed, threads=threads,
        runtime=Runtime.resolve(device, dtype, runtime))
    _check_metrics_output(output, force)
    with _progress("serving"):
        result = run_serve_bench(request)
    _report_serving(result, as_json, output)
