"""Prediction commands: cost, optimize-tree, reproduce (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specscope.cli.checks import Choices, Needs, Output, Range
from specscope.cli.common import (
    AsJson,
    EngineName,
    ExportMethod,
    Force,
    Hw,
    Images,
    Offload,
    PricedDrafter,
    PricedRuntime,
    Source,
    Stages,
    SystemName,
    SystemOptions,
    TensorParallel,
    TreeAttention,
    WeightBits,
    _acceptance_inputs,
    _csv_ints,
    _emit,
    _progress,
    console,
)
from specscope.errors import InputError

if TYPE_CHECKING:
    from specscope.optimizers.run import Deployed

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
    from specscope.hw_profiles.cost_report import cost_report
    from specscope.hw_profiles.pricing import for_engine, under_attention
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
        cm, drafter = under_attention(deployed.target, deployed.drafter, tree_attention)
        context += deployed.prompt_tokens
    if engine is not None:
        priced = for_engine(engine, cm, drafter, context, batch, runtime=runtime,
                            tree_attention=tree_attention)
        cm, drafter = priced.target, priced.drafter
    report = cost_report(cm, batch, new_tokens, context)
    if engine is not None:
        report["engine"] = engine
        report["baseline_ms_per_token"] = priced.autoregressive_s * 1e3
    if drafter is not None:
        report["system"] = system
        report["drafter"] = cost_report(drafter, batch, 1, context)
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
    draft_tp: Annotated[int | None, typer.Option(
        min=1, help="Devices the draft is sharded over (default: the --engine's, the "
                    "target's --tp under vLLM, SGLang and gpt-fast; else 1).")] = None,
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
