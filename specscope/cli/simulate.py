"""Serving commands: simulate (one load through the discrete-event simulator) and sweep (a grid
of analytic or simulated cells), without torch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.cli.checks import Choices, Output, Range
from specscope.cli.common import (
    ArrivalCv,
    ArrivalFile,
    Arrivals,
    AsJson,
    Budget,
    ChunkedPrefill,
    DraftRuntime,
    DraftTp,
    DraftVocab,
    DraftWindow,
    EngineName,
    ExpertParallel,
    ExpertPrecision,
    Force,
    GpuHourUsd,
    Hw,
    Images,
    KvBits,
    MetricsOutput,
    Offload,
    PolicyDepth,
    Precision,
    PricedDrafter,
    PricedRuntime,
    PricedTarget,
    PromptLen,
    RoutingRowExponent,
    RoutingSkew,
    ScheduleFile,
    Seed,
    ServerMaxBatch,
    SloTpot,
    SloTtft,
    Source,
    Stages,
    SystemName,
    SystemOptions,
    TensorParallel,
    TokenBudget,
    TreeAttention,
    WeightBits,
    WorkloadOutputLen,
    _acceptance_inputs,
    _check_metrics_output,
    _csv_floats,
    _emit,
    _progress,
    _report_serving,
    console,
)
from specscope.errors import InputError


def simulate(
    hw: Hw,
    rate: Annotated[float, typer.Option(help="Arrivals per second."), Range(0, low_closed=False)],
    requests: Annotated[int, typer.Option(min=1, help="Arrivals to simulate.")],
    target: PricedTarget = None,
    seed: Seed = 0,
    drafter: PricedDrafter = None,
    trace: Annotated[Path | None, typer.Option(help="Trace parquet to replay (acceptance "
                                                    "and, by default, lengths).")] = None,
    source: Source = None,
    acceptance: Annotated[str | None, typer.Option(help="Positional acceptance vector (or "
                                                        "trace import's JSON) when no trace "
                                                        "is given.")] = None,
    policy: Annotated[str, typer.Option(help="Per-step speculation policy (none: plain "
                                             "decoding)."),
                      Choices("specscope.simulator.policies:POLICIES")] = "none",
    tree: Annotated[Path | None, typer.Option(help="A tree JSON, or optimize-tree --json / "
                                                   "-o output (its best result).")] = None,
    algo: Annotated[str | None, typer.Option(help="Method of the --tree file to use.")] = None,
    schedule: ScheduleFile = None,
    budget: Budget = None,
    max_depth: PolicyDepth = 12,
    runtime: PricedRuntime = None,
    draft_runtime: DraftRuntime = None,
    engine: EngineName = None,
    tree_attention: TreeAttention = None,
    offload: Offload = 0.0,
    weight_bits: WeightBits = None,
    tp: TensorParallel = 1,
    ep: ExpertParallel = 1,
    precision: Precision = "bf16",
    expert_precision: ExpertPrecision = None,
    kv_bits: KvBits = 16,
    routing_skew: RoutingSkew = None,
    routing_row_exponent: RoutingRowExponent = None,
    draft_tp: DraftTp = None,
    stages: Stages = 1,
    draft_window: DraftWindow = None,
    draft_vocab: DraftVocab = None,
    max_batch: ServerMaxBatch = None,
    token_budget: TokenBudget = 8192,
    chunked_prefill: ChunkedPrefill = None,
    replicas: Annotated[int, typer.Option(min=1, help="Replicas behind the router.")] = 1,
    router: Annotated[str, typer.Option(help="How the router picks a replica."),
                      Choices("specscope.simulator.scheduler:ROUTERS")] = "round-robin",
    workload: Annotated[str, typer.Option(help="chat: one sequence per request; forking: "
                                               "sequences continuing a shared prompt (best-of-N, "
                                               "tree search)."),
                        Choices("specscope.simulator.workload:WORKLOADS")] = "chat",
    fork_branches: Annotated[int, typer.Option(min=1, help="Forking: continuations per "
                                                           "sequence.")] = 4,
    fork_levels: Annotated[int, typer.Option(min=1, help="Forking: levels (1 = best-of-N).")
                           ] = 1,
    arrivals: Arrivals = "poisson",
    cv: ArrivalCv = 1.0,
    arrival_file: ArrivalFile = None,
    prompt_len: PromptLen = None,
    output_len: WorkloadOutputLen = None,
    draft_placement: Annotated[str, typer.Option(help="Draft model on the target's GPUs or "
                                                      "on its own, across a link."),
                               Choices("specscope.simulator.run:PLACEMENTS")] = "colocated",
    link_gbps: Annotated[float, typer.Option(help="Separate placement: link Gbit/s."),
                         Range(0, low_closed=False)] = 100.0,
    link_us: Annotated[float, typer.Option(help="Separate placement: link latency (µs)."),
                       Range(0)] = 10.0,
    slo_tpot_ms: SloTpot = None,
    slo_ttft_ms: SloTtft = None,
    gpu_hour_usd: GpuHourUsd = None,
    front: Annotated[str | None, typer.Option(
        "--front", help="Also serve --rate × each of these multiples (e.g. 0.25,0.5,1,2) and "
                        "report the Pareto front of tokens/s per GPU against tokens/s per "
                        "user, for each choice served (the policy, no speculation, and a "
                        "schedule's best constant).")] = None,
    against_plain: Annotated[bool, typer.Option(
        help="Also simulate plain decoding of the same arrivals and say whether speculation "
             "pays.")] = True,
    drift: Annotated[str | None, typer.Option(help="Acceptance multipliers per 1000 arrivals, "
                                                   "e.g. 1,0.9,0.8.")] = None,
    system: SystemName = None,
    system_options: SystemOptions = None,
    images: Images = 0,
    as_json: AsJson = False,
    output: MetricsOutput = None,
    force: Force = False,
) -> None:
    """Discrete-event serving simulation of speculation under load. Continuous batching,
    per-step speculation policies, replicas behind a router."""
    from specscope.hw_profiles.deployment import deployment
    from specscope.names import DEFAULT_BUDGET
    from specscope.simulator.run import SimulateRequest, run_simulation
    from specscope.systems.registry import system_options as parse_system
    from specscope.trace import read_trace

    if front is not None and arrival_file is not None:
        raise InputError("--front scales --rate, which --arrival-file's arrival times ignore "
                         "(every rung would be one run): give --front or --arrival-file")
    trace, vector = _acceptance_inputs(trace, acceptance)
    setup = deployment(hw, target=target, drafter=drafter, engine=engine, runtime=runtime,
                       draft_runtime=draft_runtime, tree_attention=tree_attention,
                       weight_bits=weight_bits, tp=tp, draft_tp=draft_tp, stages=stages,
                       offload=offload, draft_window=draft_window, draft_vocab=draft_vocab,
                       max_batch=max_batch,
                       ep=ep, precision=precision, expert_precision=expert_precision,
                       kv_bits=kv_bits, routing_skew=routing_skew,
                       routing_row_exponent=routing_row_exponent)
    setup.check_system(system)
    request = SimulateRequest(
        deployment=setup,
        trace=None if trace is None else read_trace(trace), source=source, policy=policy,
        tree=tree, algo=algo, schedule=schedule,
        budget=DEFAULT_BUDGET if budget is None else budget, max_depth=max_depth,
        acceptance=None if vector is None else tuple(vector),
        rate=rate,
        requests=requests,
        token_budget=token_budget, chunked_prefill=chunked_prefill,
        replicas=replicas, router=router, workload=workload, fork_branches=fork_branches,
        fork_levels=fork_levels, arrivals=arrivals, cv=cv, arrival_file=arrival_file,
        prompt_len=prompt_len, output_len=output_len, draft_placement=draft_placement,
        link_gbps=link_gbps, link_us=link_us, slo_tpot_ms=slo_tpot_ms,
        slo_ttft_ms=slo_ttft_ms, gpu_hour_usd=gpu_hour_usd,
        against_plain=against_plain,
        drift=() if drift is None else tuple(_csv_floats(drift, "--drift")), seed=seed,
        system=system, system_options=parse_system(system, system_options), images=images,
    )
    _check_metrics_output(output, force)
    with _progress("simulating") as bar:
        task = bar.add_task("simulating", total=requests)
        result = run_simulation(
            request, progress=lambda done, total: bar.update(task, completed=done, total=total))
        if front is not None:
            from specscope.simulator.fronts import serving_front

            multiples = _csv_floats(front, "--front")
            bar.update(task, completed=0, total=len(set(multiples)), description="rate ladder")
            result.summary["front"] = serving_front(
                request, multiples, progress=lambda done, total: bar.update(
                    task, completed=done, total=total), base=result.summary)
    _report_serving(result, as_json, output)
    if front is not None and not as_json:
        from specscope.tables import front_table

        console.print(front_table(result.summary["front"]))


def sweep(
    config: Annotated[Path, typer.Argument(help="Sweep TOML (examples/sweep.toml shows the "
                                                "format).")],
    backend: Annotated[str, typer.Option(help="Where the cells run: local (this process) or "
                                              "ray (tasks on a Ray cluster)."),
                       Choices("specscope.sweeps.engines:ENGINES")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster to join (default: start a "
                                                     "local Ray).")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="CPUs of a local Ray (default: "
                                                            "all).")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Results parquet "
                                                "(default: CONFIG's name .parquet, here; an "
                                                "existing one is resumed)."),
                      Output(inputs=("config",), resumes=True)] = None,
    as_json: AsJson = False,
) -> None:
    """Design-space sweep over a TOML grid, each cell analytic or simulated. Cells are appended
    to parquet as they finish; a re-run skips finished cells."""
    from specscope.sweeps import run_sweep

    with _progress("sweeping") as bar:
        task = bar.add_task("sweeping", total=None)
        result = run_sweep(config, backend, address, output, workers,
                           progress=lambda done, total: bar.update(task, completed=done,
                                                                   total=total))
    if as_json:
        _emit(result.to_dict(), True, None)
        return
    console.print(f"{result.cells} cells: {result.computed} computed, {result.reused} reused, "
                  f"{result.skipped} skipped as invalid; {result.wall_s:.1f} s ({backend}) → "
                  f"{result.path}")
    for reason, count in result.reasons.items():
        console.print(f"  skipped {count}: {reason}")
