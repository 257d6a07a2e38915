"""Prediction commands: cost, optimize-tree, reproduce (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specscope.cli.checks import Choices, Excludes, Needs, Output, Range
from specscope.cli.common import (
    AsJson,
    Budget,
    Context,
    DraftRuntime,
    DraftTp,
    DraftVocab,
    DraftWindow,
    EngineName,
    EngineVersion,
    ExpertParallel,
    ExpertPrecision,
    ExportMethod,
    Force,
    Hw,
    Images,
    KvBits,
    Offload,
    Precision,
    PricedDrafter,
    PricedRuntime,
    PricedTarget,
    PromptLen,
    RoutingRowExponent,
    RoutingSkew,
    ServerMaxBatch,
    Source,
    Stages,
    StaticBatch,
    SystemName,
    SystemOptions,
    TensorParallel,
    TreeAttention,
    WeightBits,
    WorkloadOutputLen,
    _acceptance_inputs,
    _csv_ints,
    _emit,
    _progress,
    console,
)
from specscope.errors import InputError

if TYPE_CHECKING:
    from specscope.hw_profiles.deployment import Deployment
    from specscope.optimizers.run import Deployed, OptimizeRequest

def cost(
    hw: Hw,
    target: PricedTarget = None,
    drafter: PricedDrafter = None,
    batch: StaticBatch = 1,
    new_tokens: Annotated[int, typer.Option(min=1, help="New tokens per sequence.")] = 1,
    context: Context = None,
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
    group_size: Annotated[int, typer.Option(min=1, help="Weights per 4-bit quantisation "
                                                        "group.")] = 128,
    runtime: PricedRuntime = None,
    draft_runtime: DraftRuntime = None,
    engine: EngineName = None,
    offload: Offload = 0.0,
    tree_attention: TreeAttention = None,
    system: SystemName = None,
    system_options: SystemOptions = None,
    images: Images = 0,
    as_json: AsJson = False,
) -> None:
    """Step time of one forward pass, per operator. Prices a batch on a hardware profile and
    runtime (context 0 prices a prompt of --new-tokens tokens); --drafter adds one draft
    token's step; --system prices the target and drafter as that seed system deploys them."""
    from specscope.hw_profiles import load_profile
    from specscope.hw_profiles.cost_report import cost_report
    from specscope.hw_profiles.deployment import deployment
    from specscope.hw_profiles.pricing import deployed
    from specscope.models import get_model
    from specscope.models.catalogue import drafter_spec
    from specscope.names import MODEL_FREE_SOURCES
    from specscope.optimizers.run import DEFAULT_CONTEXT
    from specscope.systems.registry import deploy
    from specscope.systems.registry import system_options as parse_system
    from specscope.tables import cost_table

    if target is None:
        raise InputError("--target: cost prices a named target model; give one (a catalogue "
                         "model, e.g. llama-3.1-8b)")
    setup = deployment(hw, target=target, drafter=drafter, engine=engine,
                       runtime=runtime, draft_runtime=draft_runtime,
                       tree_attention=tree_attention, weight_bits=weight_bits, tp=tp,
                       draft_tp=draft_tp, stages=stages, offload=offload,
                       draft_window=draft_window, draft_vocab=draft_vocab, batch=batch,
                       ep=ep, precision=precision, expert_precision=expert_precision,
                       kv_bits=kv_bits, routing_skew=routing_skew,
                       routing_row_exponent=routing_row_exponent)
    setup.check_system(system)
    options = parse_system(system, system_options)
    context = DEFAULT_CONTEXT if context is None else context
    draft_model = None if drafter in (None, *MODEL_FREE_SOURCES) else drafter
    if system is None:
        if images:
            raise InputError("--images needs --system")
        profile, spec = load_profile(hw), get_model(setup.target)
        cm = setup.target_cost(profile, spec, group_size=group_size)
        draft = setup.draft_spec(drafter_spec(draft_model, spec))
        drafts = setup.draft_cost(profile, draft)
    else:
        if group_size != 128 or offload or stages > 1:
            raise InputError("--group-size, --offload and --stages price the plain model; a "
                             "--system deploys its own (128-weight groups, no offloading, one "
                             "stage)")
        models = deploy(system, hw, setup.target, draft=draft_model, weight_bits=weight_bits,
                        tp=tp, runtime=runtime, images=images, options=options)
        cm, drafts = models.target, models.drafter
        context += models.prompt_tokens
    priced = deployed(setup, cm, drafts, context)
    cm, drafts = priced.target, priced.drafter
    report = cost_report(cm, batch, new_tokens, context)
    if engine is not None:
        report["engine"] = engine
        report["baseline_ms_per_token"] = priced.autoregressive_s * 1e3
    if drafts is not None:
        report["system"] = system
        report["drafter"] = cost_report(drafts, batch, 1, priced.draft_context)
    if as_json:
        _emit(report, True, None)
        return
    console.print(cost_table(report, f"{setup.target} on {hw} ({report['runtime']}, "
                                     f"{cm.tree_attention} attention): batch {batch}, "
                                     f"{new_tokens} new tokens, context {context}"))
    console.print(f"step time {report['step_time_ms']:.3f} ms ({report['source']}, "
                  f"{report['bound']}-bound); "
                  f"memory {report['memory_gb']:.1f} GB"
                  + ("" if report["fits"] else " — does NOT fit in device memory"))
    if drafts is not None:
        console.print(f"{system or 'drafter'}: {report['drafter']['model']}, one token "
                      f"{report['drafter']['step_time_ms']:.3f} ms")


def optimize_tree(
    hw: Hw,
    trace: Annotated[Path | None, typer.Option(help="Trace parquet for acceptance.")] = None,
    acceptance: Annotated[str | None, typer.Option(help="Positional acceptance vector, or "
                                                        "trace import's JSON (instead of a "
                                                        "trace).")] = None,
    source: Source = None,
    target: PricedTarget = None,
    drafter: PricedDrafter = None,
    algo: Annotated[str, typer.Option(help="Methods to compare."),
                    Choices("specscope.optimizers.compare:METHOD_NAMES", ("all",), many=True)
                    ] = "all",
    budget: Budget = None,
    budgets: Annotated[str | None, typer.Option(help="Tree sizes to choose among (a Pareto "
                                                     "table per size).")] = None,
    max_depth: Annotated[int | None, typer.Option(min=1, help="Depth cap (drafted levels).")
                         ] = 12,
    depth_dependent: Annotated[bool, typer.Option(help="Acceptance per depth and rank.")] = (
        False),
    context: Context = None,
    batch: StaticBatch = 1,
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
    rate: Annotated[float | None, typer.Option(
        help="Choose for this request rate (arrivals/s) by simulating it: the trees are "
             "optimised at the batch the load builds and each is served beside plain decoding "
             "and SmartSpec."), Range(0, low_closed=False), Excludes(("schedule",))] = None,
    requests: Annotated[int, typer.Option(min=1, help="--rate: arrivals each simulation "
                                                      "serves."),
                        Excludes(("schedule",))] = 200,
    schedule: Annotated[bool, typer.Option(
        "--schedule", help="Choose per running batch size 1..--max-batch (default: the "
                           "--engine's or --to's scheduler limit, else 32) within the engine's "
                           "family (--to vllm, tensorrt-llm: a chain length; sglang: its "
                           "steps, top-k, tokens; none: any tree), merged into ranges, beside "
                           "the best constant and plain decoding.")] = False,
    schedule_contexts: Annotated[str | None, typer.Option(
        "--schedule-contexts", help="--schedule: also by context length, at these "
                                    "representative contexts (e.g. 512,8192,32768; buckets "
                                    "split at their geometric midpoints)."),
        Needs(("schedule",), ())] = None,
    max_batch: Annotated[ServerMaxBatch, Needs(("rate", "schedule"), ())] = None,
    prompt_len: Annotated[PromptLen, Excludes(("schedule",)), Needs(("rate",), ())] = None,
    output_len: Annotated[WorkloadOutputLen, Excludes(("schedule",)), Needs(("rate",), ())
                          ] = None,
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
    seed: Annotated[int, typer.Option(min=0, help="Seed of the fitted predictors and of "
                                                  "--rate's arrivals.")] = 0,
    runtime: PricedRuntime = None,
    draft_runtime: DraftRuntime = None,
    engine: EngineName = None,
    offload: Offload = 0.0,
    tree_attention: TreeAttention = None,
    system: SystemName = None,
    system_options: SystemOptions = None,
    to: Annotated[str | None, typer.Option(
        "--to", help="Also solve for the best configuration this engine can run at the "
                     "budget, beside the unconstrained optimum (with -o or --json: that "
                     "document, which `specscope export` reads)."),
        Choices("specscope.names:EXPORT_ENGINES")] = None,
    export_method: Annotated[ExportMethod, Needs(("to",), ())] = None,
    engine_version: Annotated[EngineVersion, Needs(("to",), ())] = None,
    as_json: AsJson = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write JSON here."),
                      Output(inputs=("trace",))] = None,
    force: Force = False,
) -> None:
    """Best draft tree per method for this hardware, target, drafter and acceptance. Each
    method's tree is built under the same budget and priced on the profile's runtime."""
    from specscope.hw_profiles.deployment import deployment
    from specscope.names import DEFAULT_BUDGET
    from specscope.optimizers.compare import MethodOptions
    from specscope.optimizers.run import OptimizeRequest, run_optimize
    from specscope.systems.registry import system_options as parse_system
    from specscope.tables import export_lines, optimize_table, pareto_table

    trace, vector = _acceptance_inputs(trace, acceptance)
    options = parse_system(system, system_options)
    setup = deployment(hw, target=target, drafter=drafter, engine=engine, runtime=runtime,
                       draft_runtime=draft_runtime, tree_attention=tree_attention,
                       weight_bits=weight_bits, tp=tp, draft_tp=draft_tp, stages=stages,
                       offload=offload, draft_window=draft_window, draft_vocab=draft_vocab,
                       batch=batch, max_batch=max_batch,
                       ep=ep, precision=precision, expert_precision=expert_precision,
                       kv_bits=kv_bits, routing_skew=routing_skew,
                       routing_row_exponent=routing_row_exponent)
    request = OptimizeRequest(
        deployment=setup,
        trace_path=trace,
        acceptance=vector,
        source=source,
        algos=algo,
        budget=DEFAULT_BUDGET if budget is None and budgets is None else budget,
        budgets=None if budgets is None else _csv_ints(budgets, "--budgets"),
        max_depth=max_depth,
        depth_dependent=depth_dependent,
        context=context,
        options=MethodOptions(
            ets_kv_penalty=ets_kv_penalty,
            ets_coverage=ets_coverage,
            specdecpp_threshold=specdecpp_threshold,
            goose_budget=goose_budget,
            dyspec_calibrate=dyspec_calibrate,
            eagle_beam=eagle_beam,
            seed=seed,
        ),
        system=system,
        system_options=options,
        deployed=None if system is None else _deployed(system, setup, options),
    )
    if schedule:
        _schedule(request, (to, export_method, engine_version), as_json, output,
                  None if schedule_contexts is None
                  else _csv_ints(schedule_contexts, "--schedule-contexts"))
        return
    choice = None
    with _progress("optimizing") as bar:
        task = bar.add_task("optimizing" if rate is None else "simulating", total=None)
        if rate is None:
            result = run_optimize(request, progress=lambda done, total: bar.update(
                task, completed=done, total=total))
        else:
            from specscope.simulator.at_rate import choose_at_rate

            choice = choose_at_rate(request, rate, requests, seed, progress=lambda done, total:
                                    bar.update(task, completed=done, total=total),
                                    prompt_len=prompt_len, output_len=output_len)
            result = choice.result
    sizes, best = list(result.comparison.pareto), result.best
    summary = (f"{len(result.comparison.scores)} methods × {len(sizes)} "
               f"budget{'s' if len(sizes) > 1 else ''} (n ≤ {', '.join(map(str, sizes))}) for "
               f"{result.target} on {result.hardware}; best {best.algo} {best.speedup:.2f}× "
               f"(n = {best.n:g})" + ("" if result.speculation_pays else
                                      f"; {result.verdict}"))
    exported = None
    if to is not None:
        from specscope.interop.document import optimized_export

        exported = optimized_export(result, to, export_method, engine_version)
        summary = (f"{to} {exported['method']}: {exported['predicted']:.2f}× against "
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


def _schedule(request: OptimizeRequest, export: tuple[str | None, str | None, str | None],
              as_json: bool, output: Path | None, contexts: list[int] | None) -> None:
    """`optimize-tree --schedule`: the best choice per batch size, as ranges (module
    `interop.schedule_search`), and with `export` (--to, --export-method, --engine-version)
    the engine's configuration of it."""
    from specscope.interop.document import schedule_export
    from specscope.interop.engine import chains_only
    from specscope.interop.schedule_search import family_for, search_schedule
    from specscope.optimizers.run import run_optimize
    from specscope.simulator.run import MAX_BATCH
    from specscope.tables import export_lines, schedule_table

    if request.budgets is not None or request.budget is None:
        raise InputError("--schedule chooses within one --budget; --budgets compares sizes")
    dep = request.deployment
    with _progress("optimizing") as bar:
        bar.add_task("choosing per batch size", total=None)
        result = run_optimize(request)
        setup = result.setup
        assert setup is not None
        to = export[0]
        engine = to or dep.engine_name
        most = (dep.max_batch or (None if engine is None else _scheduler_limit(dep.hw, engine))
                or MAX_BATCH)
        found = search_schedule(setup, request.budget, most,
                                family_for(engine, chains_only(setup)), contexts)
    ranges = len(found.schedule.buckets)
    summary = (f"schedule for {result.target} on {result.hardware}: {ranges} range"
               f"{'s' if ranges > 1 else ''} over batch 1..{found.rows[-1].batch}")
    document = {"hardware": result.hardware, "target": result.target,
                "drafter": result.drafter, "source": result.source, "engine": engine,
                "budget": request.budget, "context_len": result.context_len, **found.to_dict()}
    if to is not None:
        document["export"] = schedule_export(result, found, to, export[1], export[2])
        summary += f"; {to} {document['export']['method']}"
    if _emit(document, as_json, output, summary):
        return
    console.print(schedule_table(found))
    if to is not None:
        for line in export_lines(document["export"]):
            console.print(line, soft_wrap=True, highlight=False)


def _scheduler_limit(hw: str, engine: str) -> int | None:
    """The sequences `engine`'s scheduler runs in one step while speculating by default (an
    engine specscope prices; None for one it only exports to)."""
    from specscope.hw_profiles.deployment import deployment
    from specscope.hw_profiles.engine import ENGINE_NAMES

    return deployment(hw, engine=engine).max_batch_for(True) if engine in ENGINE_NAMES else None


def _deployed(system: str, setup: Deployment, options: dict) -> Deployed:
    """`system`'s target and drafter for optimize-tree (a draft-model system's --drafter
    is its draft)."""
    from specscope.names import MODEL_FREE_SOURCES
    from specscope.optimizers.run import Deployed
    from specscope.systems.registry import deploy

    if setup.target is None:
        raise InputError("--system deploys its models around a named --target; pass one")
    setup.check_system(system)
    draft = None if setup.drafter in (None, *MODEL_FREE_SOURCES) else setup.drafter
    costs = deploy(system, setup.hw, str(setup.target), draft=draft,
                   weight_bits=setup.weight_bits, tp=setup.tp, runtime=setup.runtime,
                   options=options)
    if costs.acceptance_scale != 1.0:
        raise InputError(f"--system {system} scales its drafter's acceptance by "
                         f"{costs.acceptance_scale:g}; give the acceptance as measured under it "
                         "and price the drafter with --drafter")
    return Deployed(costs.target, costs.drafter, costs.source)


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
