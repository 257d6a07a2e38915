"""Prediction commands: cost, optimize-tree, simulate, sweep, reproduce (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specscope.cli.checks import Choices, Needs, Output, Range
from specscope.cli.common import (
    ArrivalCv,
    ArrivalFile,
    Arrivals,
    AsJson,
    ChunkedPrefill,
    EngineName,
    ExportMethod,
    Force,
    Hw,
    Images,
    MetricsOutput,
    Offload,
    PolicyBudget,
    PolicyDepth,
    PricedRuntime,
    Seed,
    SloTpot,
    Stages,
    SystemName,
    SystemOptions,
    TensorParallel,
    TokenBudget,
    TreeAttention,
    WeightBits,
    _acceptance_inputs,
    _check_metrics_output,
    _csv_floats,
    _csv_ints,
    _emit,
    _progress,
    _report_serving,
    console,
)
from specscope.errors import InputError

if TYPE_CHECKING:
    from specscope.optimizers.run import Deployed

Source = Annotated[str | None, typer.Option(
    help="Trace source whose acceptance is used, or its kind alone (rasd) when the trace holds "
         "one (default: the drafter's, else the trace's first draft model).")]
PricedDrafter = Annotated[str | None, typer.Option(
    help="Drafter priced: a catalogue draft model, ngram, suffix, recycle, or none (default: "
         "the source's draft model).")]


def cost(
    hw: Hw,
    model: Annotated[str, typer.Option(help="Model name from the catalogue.")],
    batch: Annotated[int, typer.Option(min=1, help="Sequences in the batch.")] = 1,
    new_tokens: Annotated[int, typer.Option(min=1, help="New tokens per sequence.")] = 1,
    context: Annotated[int, typer.Option(min=0, help="Tokens already cached per sequence.")] = (
        512),
    weight_bits: WeightBits = None,
    tp: TensorParallel = 1,
    stages: Stages = 1,
    group_size: Annotated[int, typer.Option(min=1, help="Weights per 4-bit quantisation "
                                                        "group.")] = 128,
    runtime: PricedRuntime = None,
    engine: EngineName = None,
    offload: Offload = 0.0,
    tree_attention: TreeAttention = None,
    system: SystemName = None,
    system_options: SystemOptions = None,
    draft: Annotated[str | None, typer.Option(help="Draft model of a --system that drafts "
                                                   "with one (catalogue name).")] = None,
    images: Images = 0,
    as_json: AsJson = False,
) -> None:
    """Step time of one forward pass, per operator. Prices a batch on a hardware profile and
    runtime (context 0 prices a prompt of --new-tokens tokens); --system prices the target
    and drafter as that seed system deploys them."""
    from specscope.hw_profiles import CostModel, load_profile
    from specscope.models import get_model
    from specscope.systems.registry import deploy
    from specscope.systems.registry import system_options as parse_system
    from specscope.tables import cost_table

    options = parse_system(system, system_options)
    drafter = None
    if system is None:
        if draft or images:
            raise InputError(f"{'--draft' if draft else '--images'} needs --system")
        cm = CostModel(load_profile(hw), get_model(model), weight_bits=weight_bits, tp=tp,
                       group_size=group_size, runtime=runtime,
                       tree_attention=tree_attention or "split", offload=offload, stages=stages)
    else:
        if group_size != 128 or offload or stages > 1:
            raise InputError("--group-size, --offload and --stages price the plain model; a "
                             "--system deploys its own (128-weight groups, no offloading, one "
                             "stage)")
        deployed = deploy(system, hw, model, draft=draft, weight_bits=weight_bits, tp=tp,
                          runtime=runtime, images=images, options=options)
        cm, drafter = deployed.target, deployed.drafter
        if tree_attention is not None:
            cm = cm.under(tree_attention=tree_attention)
            drafter = None if drafter is None else drafter.under(tree_attention=tree_attention)
        context += deployed.prompt_tokens
    if engine is not None:
        from specscope.hw_profiles.pricing import for_engine

        priced = for_engine(engine, cm, drafter, context, batch, runtime=runtime,
                            tree_attention=tree_attention)
        cm, drafter = priced.target, priced.drafter
    report = cm.report(batch, new_tokens, context)
    if engine is not None:
        report["engine"] = engine
        report["baseline_ms_per_token"] = priced.autoregressive_s * 1e3
    if drafter is not None:
        report["system"] = system
        report["drafter"] = drafter.report(batch, 1, context)
    if as_json:
        _emit(report, True, None)
        return
    console.print(cost_table(report, f"{model} on {hw} ({report['runtime']}, "
                                     f"{cm.tree_attention} attention): batch {batch}, "
                                     f"{new_tokens} new tokens, context {context}"))
    console.print(f"step time {report['step_time_ms']:.3f} ms ({report['source']}, "
                  f"{report['bound']}-bound); "
                  f"memory {report['memory_gb']:.1f} GB"
                  + ("" if report["fits"] else " — does NOT fit in device memory"))
    if drafter is not None:
        console.print(f"{system}: drafter {report['drafter']['model']}, one token "
                      f"{report['drafter']['step_time_ms']:.3f} ms")


def optimize_tree(
    hw: Hw,
    trace: Annotated[Path | None, typer.Option(help="Trace parquet for acceptance.")] = None,
    acceptance: Annotated[str | None, typer.Option(help="Positional acceptance vector, or "
                                                        "trace import's JSON (instead of a "
                                                        "trace).")] = None,
    source: Source = None,
    target: Annotated[str | None, typer.Option(help="Target model (default: trace's, "
                                                    "else llama-2-7b).")] = None,
    drafter: PricedDrafter = None,
    algo: Annotated[str, typer.Option(help="Methods to compare."),
                    Choices("specscope.optimizers.compare:METHOD_NAMES", ("all",), many=True)
                    ] = "all",
    budget: Annotated[int | None, typer.Option(min=1, help="Tree size n (root included).")] = (
        None),
    budgets: Annotated[str | None, typer.Option(help="Tree sizes to choose among (a Pareto "
                                                     "table per size).")] = None,
    max_depth: Annotated[int | None, typer.Option(min=1, help="Depth cap (drafted levels).")
                         ] = 12,
    depth_dependent: Annotated[bool, typer.Option(help="Acceptance per depth and rank.")] = (
        False),
    context: Annotated[int | None, typer.Option(min=0, help="Context length for the cost model "
                                                            "(default: trace mean, else 512).")
                       ] = None,
    batch: Annotated[int, typer.Option(min=1, help="Sequences verified together: every tree "
                                                   "and the plain baseline are priced at this "
                                                   "batch.")] = 1,
    draft_window: Annotated[int | None, typer.Option(
        min=1, help="Tokens the draft keeps and reads (capped-KV self-speculation, a draft "
                    "with a bounded cache; default: the whole context).")] = None,
    draft_tp: Annotated[int, typer.Option(min=1, help="Devices the draft is sharded over.")
                        ] = 1,
    draft_vocab: Annotated[int | None, typer.Option(
        min=1, help="The draft's vocabulary (an EAGLE-3 head's reduced one; default: the "
                    "draft model's own).")] = None,
    stages: Stages = 1,
    tp: TensorParallel = 1,
    rate: Annotated[float | None, typer.Option(
        help="Choose for this request rate (arrivals/s) by simulating it: the trees are "
             "optimised at the batch the load builds and each is served beside plain decoding "
             "and SmartSpec."), Range(0, low_closed=False)] = None,
    requests: Annotated[int, typer.Option(min=1, help="--rate: arrivals each simulation "
                                                      "serves.")] = 200,
    ets_kv_penalty: Annotated[float, typer.Option(help="ETS λ_kv (authors: 0)."), Range(0)] = 0.0,
    ets_coverage: Annotated[float, typer.Option(help="ETS λ_cov over sources (authors: 0)."),
                            Range(0)] = 0.0,
    specdecpp_threshold: Annotated[float | None, typer.Option(
        help="SpecDec++ stop threshold h (default: chosen per hardware; authors: 0.7)."),
        Range(0, 1)] = None,
    goose_budget: Annotated[int | None, typer.Option(
        min=0, help="Goose tree size (default: the compared budget; 0: the authors' 60–100 by "
                    "match confidence).")] = None,
    dyspec_calibrate: Annotated[bool, typer.Option(
        help="Map DySpec's draft scores to acceptance by a monotone fit.")] = True,
    eagle_beam: Annotated[int, typer.Option(min=1, help="EAGLE-2 nodes expanded per level.")
                          ] = 10,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the fitted predictors.")] = 0,
    runtime: PricedRuntime = None,
    engine: EngineName = None,
    offload: Offload = 0.0,
    tree_attention: TreeAttention = None,
    system: SystemName = None,
    system_options: SystemOptions = None,
    export: Annotated[str | None, typer.Option(
        help="Also solve for the best configuration this engine can run at the budget, "
             "beside the unconstrained optimum (with -o or --json: that document)."),
        Choices("specscope.names:EXPORT_ENGINES")] = None,
    export_method: Annotated[ExportMethod, Needs(("export",), ())] = None,
    as_json: AsJson = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write JSON here."),
                      Output(inputs=("trace",))] = None,
    force: Force = False,
) -> None:
    """Best draft tree per method for this hardware, target, drafter and acceptance. Each
    method's tree is built under the same budget and priced on the profile's runtime."""
    from specscope.optimizers.compare import MethodOptions
    from specscope.optimizers.run import OptimizeRequest, run_optimize
    from specscope.systems.registry import system_options as parse_system
    from specscope.tables import export_lines, optimize_table, pareto_table

    trace, vector = _acceptance_inputs(trace, acceptance)
    options = parse_system(system, system_options)
    request = OptimizeRequest(
        hw=hw,
        trace_path=trace,
        acceptance=vector,
        source=source,
        target=target,
        drafter=drafter,
        algos=algo,
        budget=budget,
        budgets=None if budgets is None else _csv_ints(budgets, "--budgets"),
        max_depth=max_depth,
        depth_dependent=depth_dependent,
        context=context,
        batch=batch,
        draft_window=draft_window,
        draft_tp=draft_tp,
        draft_vocab=draft_vocab,
        stages=stages,
        tp=tp,
        options=MethodOptions(
            ets_kv_penalty=ets_kv_penalty,
            ets_coverage=ets_coverage,
            specdecpp_threshold=specdecpp_threshold,
            goose_budget=goose_budget,
            dyspec_calibrate=dyspec_calibrate,
            eagle_beam=eagle_beam,
            seed=seed,
        ),
        runtime=runtime,
        engine=engine,
        offload=offload,
        tree_attention=tree_attention,
        system=system,
        system_options=options,
        deployed=None if system is None else _deployed(system, hw, target, drafter, tp,
                                                       runtime, options),
    )
    choice = None
    with _progress("optimizing") as bar:
        task = bar.add_task("optimizing" if rate is None else "simulating", total=None)
        if rate is None:
            result = run_optimize(request, progress=lambda done, total: bar.update(
                task, completed=done, total=total))
        else:
            from specscope.simulator.at_rate import choose_at_rate

            choice = choose_at_rate(request, rate, requests, seed, progress=lambda done, total:
                                    bar.update(task, completed=done, total=total))
            result = choice.result
    sizes, best = list(result.comparison.pareto), result.comparison.scores[0]
    summary = (f"{len(result.comparison.scores)} methods × {len(sizes)} "
               f"budget{'s' if len(sizes) > 1 else ''} (n ≤ {', '.join(map(str, sizes))}) for "
               f"{result.target} on {result.hardware}; best {best.algo} {best.speedup:.2f}× "
               f"(n = {best.n:g})" + ("" if result.speculation_pays else
                                      f"; {result.verdict}"))
    exported = None
    if export is not None:
        from specscope.interop.document import optimized_export

        exported = optimized_export(result, export, export_method)
        summary = (f"{export} {exported['method']}: {exported['predicted']:.2f}× against "
                   f"{exported['unconstrained']:.2f}× unconstrained (n ≤ {max(sizes)})")
    if choice is not None:
        summary = f"{choice.verdict}; {summary}"
    document = exported or (result.to_dict() if choice is None else choice.to_dict())
    if _emit(document, as_json, output, summary):
        return
    console.print(optimize_table(result))
    if budgets is not None:
        console.print(pareto_table(result))
    if choice is not None:
        from specscope.tables import rate_table

        console.print(rate_table(choice))
    console.print(result.verdict if choice is None else choice.verdict, highlight=False,
                  soft_wrap=True)
    if exported is not None:
        for line in export_lines(exported):
            console.print(line, soft_wrap=True, highlight=False)


def _deployed(system: str, hw: str, target: str | None, drafter: str | None, tp: int,
              runtime: str | None, options: dict) -> Deployed:
    """`system`'s target and drafter for optimize-tree (a draft-model system's --drafter
    is its draft)."""
    from specscope.names import MODEL_FREE_SOURCES
    from specscope.optimizers.run import Deployed
    from specscope.systems.registry import deploy

    if target is None:
        raise InputError("--system deploys its models around a named --target; pass one")
    draft = None if drafter in (None, *MODEL_FREE_SOURCES) else drafter
    costs = deploy(system, hw, target, draft=draft, tp=tp, runtime=runtime, options=options)
    if costs.acceptance_scale != 1.0:
        raise InputError(f"--system {system} scales its drafter's acceptance by "
                         f"{costs.acceptance_scale:g}; give the acceptance as measured under it "
                         "and price the drafter with --drafter")
    return Deployed(costs.target, costs.drafter, costs.source)


def simulate(
    hw: Hw,
    target: Annotated[str, typer.Option(help="Target model from the catalogue.")],
    rate: Annotated[float, typer.Option(help="Arrivals per second."), Range(0, low_closed=False)],
    requests: Annotated[int, typer.Option(min=1, help="Arrivals to simulate.")],
    seed: Seed,
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
    budget: PolicyBudget = 16,
    max_depth: PolicyDepth = 12,
    runtime: PricedRuntime = None,
    engine: EngineName = None,
    offload: Offload = 0.0,
    tp: TensorParallel = 1,
    weight_bits: WeightBits = None,
    max_batch: Annotated[int | None, typer.Option(
        min=1, help="Sequences per step, on both sides of the plain comparison (default: "
                    "the engine's scheduler's, vLLM's 256, SGLang's 2048 and 48 while "
                    "speculating; else 32).")] = None,
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
    prompt_len: Annotated[str | None, typer.Option(help="Prompt tokens: N, uniform:A:B, "
                                                        "lognormal:MEDIAN:SIGMA or trace.")
                          ] = None,
    output_len: Annotated[str | None, typer.Option(help="Output tokens: N, uniform:A:B, "
                                                        "lognormal:MEDIAN:SIGMA or trace.")
                          ] = None,
    draft_placement: Annotated[str, typer.Option(help="Draft model on the target's GPUs or "
                                                      "on its own, across a link."),
                               Choices("specscope.simulator.run:PLACEMENTS")] = "colocated",
    link_gbps: Annotated[float, typer.Option(help="Separate placement: link Gbit/s."),
                         Range(0, low_closed=False)] = 100.0,
    link_us: Annotated[float, typer.Option(help="Separate placement: link latency (µs)."),
                       Range(0)] = 10.0,
    slo_tpot_ms: SloTpot = None,
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
    from specscope.simulator.run import SimulateRequest, run_simulation
    from specscope.systems.registry import system_options as parse_system
    from specscope.trace import read_trace

    trace, vector = _acceptance_inputs(trace, acceptance)
    request = SimulateRequest(
        hw=hw, target=target, drafter=drafter,
        trace=None if trace is None else read_trace(trace), source=source, policy=policy,
        tree=tree, algo=algo,
        budget=budget, max_depth=max_depth,
        acceptance=None if vector is None else tuple(vector),
        runtime=runtime, engine=engine, offload=offload, tp=tp, weight_bits=weight_bits,
        rate=rate,
        requests=requests,
        max_batch=max_batch, token_budget=token_budget, chunked_prefill=chunked_prefill,
        replicas=replicas, router=router, workload=workload, fork_branches=fork_branches,
        fork_levels=fork_levels, arrivals=arrivals, cv=cv, arrival_file=arrival_file,
        prompt_len=prompt_len, output_len=output_len, draft_placement=draft_placement,
        link_gbps=link_gbps, link_us=link_us, slo_tpot_ms=slo_tpot_ms,
        against_plain=against_plain,
        drift=() if drift is None else tuple(_csv_floats(drift, "--drift")), seed=seed,
        system=system, system_options=parse_system(system, system_options), images=images,
    )
    _check_metrics_output(output, force)
    with _progress("simulating") as bar:
        task = bar.add_task("simulating", total=requests)
        result = run_simulation(
            request, progress=lambda done, total: bar.update(task, completed=done, total=total))
    _report_serving(result, as_json, output)


def sweep(
    config: Annotated[Path, typer.Argument(help="Sweep TOML (examples/sweep.toml shows the "
                                                "format).")],
    engine: Annotated[str, typer.Option(help="local: this process; ray: tasks on a Ray "
                                             "cluster."),
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
        result = run_sweep(config, engine, address, output, workers,
                           progress=lambda done, total: bar.update(task, completed=done,
                                                                   total=total))
    if as_json:
        _emit(result.to_dict(), True, None)
        return
    console.print(f"{result.cells} cells: {result.computed} computed, {result.reused} reused, "
                  f"{result.skipped} skipped as invalid; {result.wall_s:.1f} s ({engine}) → "
                  f"{result.path}")
    for reason, count in result.reasons.items():
        console.print(f"  skipped {count}: {reason}")


def reproduce(
    scenarios: Annotated[Path, typer.Argument(metavar="FILE_OR_DIR", help="A scenario TOML "
                                              "([[case]] tables) or a folder of them.")],
    as_json: AsJson = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the JSON list "
                                                "to this file too."),
                      Output(inputs=("scenarios",))] = None,
    force: Force = False,
) -> None:
    """Each paper's setup priced by its system, against what the paper published: predicted
    and published speedup, relative error, source and assumptions per case."""
    from specscope.systems.reproduce import provenance, summarise
    from specscope.systems.reproduce import reproduce as run
    from specscope.tables import error_table, reproduce_table

    rows = run(scenarios)
    overall = summarise(rows)[-1]
    summary = (f"{len(rows)} cases; |relative error| median {overall.median:.1%}, worst "
               f"{overall.worst:.1%}")
    if _emit([r.to_dict() for r in rows], as_json, output, summary):
        return
    console.print(reproduce_table(rows))
    console.print(error_table(summarise(rows)))
    console.print(error_table(summarise(rows, by="engine"), by="engine"))
    for r in rows:
        console.print(f"[bold]{r.case.name}[/bold] ({r.case.source or 'no source given'}): "
                      + "; ".join(r.prediction.assumptions))
    console.print("[bold]Engines and hosts[/bold] (where each parameter comes from):")
    for line in provenance(rows):
        console.print(f"  {line}", highlight=False, markup=False)
