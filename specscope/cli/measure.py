"""Measuring commands: real torch runs (profile-hw, validate, generate, collect, zoo train) and
synthetic traces."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specscope.cli.checks import Choices, DrafterOrModel, Needs, Output, Range
from specscope.cli.common import (
    DRAFTER_HELP,
    PROMPT_SOURCES,
    AsJson,
    CpuThreads,
    Device,
    DraftModel,
    Dtype,
    Force,
    Hw,
    OutputLen,
    Seed,
    StepRuntime,
    Target,
    ZooTarget,
    _emit,
    _progress,
    _wrote,
    console,
    drafter_option,
)
from specscope.errors import InputError
from specscope.names import DEFAULT_BUDGET, DEFAULT_OUTPUT_LEN, LAYERSKIP

if TYPE_CHECKING:
    from specscope.validate.load import LoadRequest

Prompts = Annotated[str, typer.Option(help=f"Prompts: {PROMPT_SOURCES}.")]
LayerSkip = Annotated[str, typer.Option(help="The layerskip drafter's layers: swift (a skip set "
                                             "searched on the first requests), del (an exit "
                                             "layer per step) or layer indices to skip (1,2)."),
                      Needs(("drafter",), (LAYERSKIP,))]
GenerateDrafter = drafter_option("specscope.names:DRAFTERS")
CollectDrafters = drafter_option("specscope.names:COLLECT_DRAFTERS",
                                 "A comma list: every drafter whose candidates are recorded.",
                                 many=True)
Temperature = Annotated[float, typer.Option(help="Sampling temperature (0: greedy)."),
                        Range(0)]


def profile_hw(
    name: Annotated[str, typer.Option(help="Profile name (--hw NAME finds it afterwards).")],
    device: Annotated[str, typer.Option(help="The device to measure (auto: cuda when torch "
                                             "sees a GPU, else cpu)."),
                      Choices("specscope.names:DEVICES")] = "auto",
    runtime: Annotated[list[str] | None, typer.Option(
        help="Runtimes to fit, repeated or comma-separated; graph needs cuda (default: all "
             "the device runs; --quick on cuda leaves out compile)."),
        Choices("specscope.names:RUNTIMES", many=True)] = None,
    quick: Annotated[bool, typer.Option(help="A small grid (on 2 cores: eager about 30 s, "
                                              "eager and compile 1-2 min).")] = False,
    threads: CpuThreads = None,
    models: Annotated[str | None, typer.Option(help="Catalogue models to measure, "
                                                    "comma-separated (default: the device's "
                                                    "grid: three sizes).", metavar="LIST")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Profile TOML to write "
                                                "(default: the user profile directory)."),
                      Output()] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing profile, or take "
                                                        "a shipped profile's name.")] = False,
) -> None:
    """Measure this machine and write a calibrated profile. Each runtime's cost terms are fitted
    to measured step times."""
    from specscope.models import get_model
    from specscope.profiling.calibrate import profile_hw as run_profile_hw
    from specscope.profiling.calibrate import resolve_device

    device = resolve_device(device)

    runtimes = [r.strip() for item in runtime or [] for r in item.split(",") if r.strip()]
    chosen = [m.strip() for m in (models or "").split(",") if m.strip()]
    for model in chosen:
        try:
            get_model(model)
        except InputError as exc:
            raise InputError(f"--models: {exc}") from None
    command = (f"specscope profile-hw --name {name} --device {device}"
               + (f" --threads {threads}" if threads is not None else "")
               + "".join(f" --runtime {r}" for r in runtimes) + (" --quick" if quick else "")
               + (f" --models {','.join(chosen)}" if chosen else ""))
    with _progress("profiling") as bar:
        task = bar.add_task("profiling", total=None)
        result = run_profile_hw(
            name, device, runtimes, quick, threads, output,
            progress=lambda done, total, _: bar.update(task, completed=done, total=total),
            command=command, force=force, models=chosen)
    for fit in result.fits.values():
        console.print(f"{fit.runtime}: held-out error median {fit.heldout_median_rel_err:.1%}, "
                      f"max {fit.heldout_max_rel_err:.1%} ({fit.held_out} points; "
                      f"{fit.points} fitted)")
    console.print(f"wrote {result.path} in {result.wall_s:.0f} s; use it with --hw {name}")


def trace_synth(
    output: Annotated[Path, typer.Option("-o", "--output", help="Parquet file to write."),
                      Output()],
    requests: Annotated[int, typer.Option(min=1, help="Requests to generate.")] = 32,
    length: Annotated[int, typer.Option(min=1, help="Generated positions per request.")] = 256,
    seed: Seed = 0,
    sources: Annotated[str, typer.Option(help="Comma-separated drafter sources.")] = (
        "draft:llama-68m,ngram,recycle"
    ),
    k: Annotated[int, typer.Option("-k", min=1, help="Candidates per position.")] = 8,
    force: Force = False,
) -> None:
    """Write a synthetic schema-v1 trace with documented, tunable acceptance behaviour."""
    from specscope.trace import synth_trace, write_trace

    names = tuple(s.strip() for s in sources.split(",") if s.strip())
    trace = synth_trace(requests=requests, seed=seed, sources=names, length=length, k=k)
    write_trace(trace, output)
    console.print(f"wrote {trace.df.height} rows ({requests} requests × {length} positions × "
                  f"{len(names)} sources) to {output}")


def generate(
    target: Target,
    drafter: GenerateDrafter,
    prompts: Prompts,
    n: Annotated[int, typer.Option(min=1, help="Prompts to decode.")] = 8,
    output_len: OutputLen = DEFAULT_OUTPUT_LEN,
    draft_model: DraftModel = None,
    layer_skip: LayerSkip = "swift",
    algo: Annotated[str | None, typer.Option(help="Tree method (dyspec, specdecpp and goose "
                                                  "grow each step's tree live; stand keeps the "
                                                  "most accepted nodes on calibration prompts; "
                                                  "rsd-s draws it by stochastic beam search)."),
                    Choices("specscope.optimizers.compare:METHOD_NAMES", ("stand", "rsd-s"))
                    ] = None,
    budget: Annotated[int | None, typer.Option(
        "--budget", min=1, help=f"Tree size n per step, root included: a static tree's, or the "
                                f"most a dynamic policy grows (default {DEFAULT_BUDGET}; goose: "
                                "its own, 60-100 nodes by the spine's acceptance).")] = None,
    tree: Annotated[Path | None, typer.Option(help="A tree JSON from optimize-tree -o.")] = None,
    ssm_verify: Annotated[str, typer.Option(help="SSM targets: one tree-masked pass (stree) "
                                                 "or one pass per leaf (naive)."),
                          Choices("specscope.models.ops:SSM_VERIFY")] = "stree",
    temperature: Temperature = 0.0,
    rule: Annotated[str | None, typer.Option(help="Verification rule (default: greedy at "
                                                  "temperature 0, else deterministic)."),
                    Choices("specscope.names:RULES")] = None,
    seed: Seed = 0,
    threads: CpuThreads = None,
    verify_lossless: Annotated[bool, typer.Option(help="Check against greedy decoding.")] = (
        False),
    device: Device = "auto",
    dtype: Dtype = "float32",
    runtime: StepRuntime = None,
    as_json: AsJson = False,
) -> None:
    """Real speculative decoding against autoregressive decoding, in one process."""
    from specscope.executor.generate import generate as run_generate
    from specscope.executor.runtime import Runtime
    from specscope.tables import generate_table

    chosen = Runtime.resolve(device, dtype, runtime)
    if budget is None and algo not in (None, "goose"):
        budget = DEFAULT_BUDGET
    with _progress("decoding") as bar:
        task = bar.add_task("decoding", total=None)
        result = run_generate(
            target, drafter, prompts, n, output_len, draft_model=draft_model, algo=algo,
            budget=budget, tree=tree, ssm_verify=ssm_verify, temperature=temperature, seed=seed,
            rule=rule, verify_lossless=verify_lossless, threads=threads,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
            runtime=chosen, layer_skip=layer_skip,
        )
    if as_json:
        _emit(result.to_dict(), True, None)
    else:
        console.print(generate_table(result.to_dict()))


def validate(
    hw: Hw,
    target: ZooTarget,
    device: Device = "auto",
    runtime: StepRuntime = None,
    prompts: Annotated[str, typer.Option(help=f"Comma list of prompt sets, each "
                                              f"{PROMPT_SOURCES}; split into calibration and "
                                              "held-out halves.")] = (
        "builtin:code-edit,builtin:stdlib-code"
    ),
    quick: Annotated[bool, typer.Option(help="9 configurations, 64+64 prompts, one pass.")] = (
        False),
    seed: Annotated[int, typer.Option(min=0, help="Random seed (prompt split, sampling).")] = 0,
    threads: Annotated[int | None, typer.Option(min=1, help="torch CPU threads (default: those the "
                                                     "profile was measured with, else as "
                                                     "generate's).")] = None,
    load: Annotated[bool, typer.Option("--load", help="Serving under load instead: each "
                                           "policy × a ladder of arrival rates simulated and "
                                           "run for real (continuous batching).")] = False,
    drafter: Annotated[str, typer.Option(help=f"--load: {DRAFTER_HELP[0].lower()}"
                                              f"{DRAFTER_HELP[1:]}."),
                       DrafterOrModel("specscope.names:LOAD_DRAFTERS"),
                       Needs(("load",), ())] = "ngram",
    draft_model: DraftModel = None,
    policies: Annotated[str | None, typer.Option(help="--load: the policies compared (default "
                                                      "none,static,smartspec, and dyspec with "
                                                      "--drafter draft).", metavar="LIST"),
                        Choices("specscope.names:LOAD_POLICIES", many=True),
                        Needs(("load",), ())] = None,
    repeats: Annotated[int | None, typer.Option(min=1, help="--load: real runs per cell, the "
                                                            "policies taking turns (default 2)."),
                       Needs(("load",), ())] = None,
    as_json: AsJson = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", metavar="DIR",
                                                help="Folder for the per-configuration table "
                                                     "(parquet)."),
                      Output(folder=True)] = None,
    force: Force = False,
) -> None:
    """Predicted against measured speculative decoding on held-out prompts (batch 1), or with
    --load the simulator against real serving under load."""
    from specscope.outputs import check_folder_files

    if load:
        from specscope.validate.load import LoadRequest, default_policies

        chosen = (default_policies(drafter) if policies is None
                  else tuple(p.strip() for p in policies.split(",")))
        _validate_load(LoadRequest(hw=hw, model=target, device=device, runtime=runtime,
                                   quick=quick, prompts=prompts, drafter=drafter,
                                   draft_model=draft_model, policies=chosen, seed=seed,
                                   threads=threads, repeats=repeats), as_json, output, force)
        return
    from specscope.validate.compare import ValidateRequest, run_validate
    from specscope.validate.report import (
        PARQUET_NAME,
        config_table,
        drift_line,
        miss_table,
        recommendation_line,
        summary_table,
        write_table,
    )

    if output is not None:
        check_folder_files(output, [PARQUET_NAME], "-o", force)
    request = ValidateRequest(hw=hw, model=target, device=device, runtime=runtime, quick=quick,
                              prompts=prompts, seed=seed, threads=threads)
    with _progress("validating") as bar:
        task = bar.add_task("validating", total=None)
        result = run_validate(
            request, progress=lambda done, total: bar.update(task, completed=done, total=total)
        )
    doc = result.to_dict()
    written = None if output is None else write_table(result, output)
    if not _emit(doc, as_json):
        console.print(config_table(doc))
        console.print(miss_table(doc))
        console.print(summary_table(doc))
        console.print(recommendation_line(doc))
        drift = drift_line(doc)
        if drift:
            console.print(drift)
        for note in doc["notes"]:
            console.print(f"note: {note}")
    if written is not None:
        _wrote(written, f"{len(doc['configs'])} configurations, predicted against measured",
               as_json)


def _validate_load(request: LoadRequest, as_json: bool, output: Path | None,
                   force: bool) -> None:
    """`validate --load`: the run, then its tables (or JSON) and its parquet."""
    from specscope.outputs import check_folder_files
    from specscope.validate.load import run_load_validate
    from specscope.validate.load_report import (
        LOAD_PARQUET,
        cell_table,
        ranking_lines,
        summary_table,
        write_cells,
    )

    if output is not None:
        check_folder_files(output, [LOAD_PARQUET], "-o", force)
    with _progress("validating under load") as bar:
        task = bar.add_task("validating under load", total=None)
        doc = run_load_validate(
            request, progress=lambda done, total: bar.update(task, completed=done, total=total))
    if not _emit(doc, as_json):
        console.print(cell_table(doc))
        console.print(summary_table(doc))
        for line in ranking_lines(doc):
            console.print(line)
    if output is not None:
        _wrote(write_cells(doc["cells"], output), f"{len(doc['cells'])} cells, simulated "
               "against measured", as_json)


def collect(
    target: Target,
    prompts: Prompts,
    output: Annotated[Path, typer.Option("-o", "--output", help="Trace parquet to write."),
                      Output()],
    drafter: CollectDrafters = "draft,ngram,suffix,recycle",
    draft_model: DraftModel = None,
    layer_skip: LayerSkip = "swift",
    n: Annotated[int, typer.Option(min=1, help="Prompts to trace.")] = 16,
    output_len: OutputLen = DEFAULT_OUTPUT_LEN,
    temperature: Temperature = 0.0,
    seed: Seed = 0,
    threads: CpuThreads = None,
    device: Device = "auto",
    dtype: Dtype = "float32",
    runtime: StepRuntime = None,
    force: Force = False,
) -> None:
    """Trace real forward passes: every drafter's candidates given the true prefix."""
    from specscope.executor.collect import collect as run_collect
    from specscope.executor.runtime import Runtime

    chosen = Runtime.resolve(device, dtype, runtime)

    with _progress("collecting") as bar:
        task = bar.add_task("collecting", total=n)
        trace = run_collect(
            target, drafter, prompts, n, output_len, output=output, temperature=temperature,
            seed=seed, draft_model=draft_model, layer_skip=layer_skip,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
            runtime=chosen, threads=threads,
        )
    requests = trace.df.get_column("request_id").n_unique()
    console.print(f"wrote {trace.df.height} rows ({requests} requests) to {output} "
                  f"({trace.metadata['threads']} thread(s): {trace.metadata['threads_reason']})")


def zoo_train(
    model: Annotated[str, typer.Option(help="Zoo model to train (all: every one, targets "
                                            "first)."),
                     Choices("specscope.models.zoo:ORDER", ("all",))] = "all",
    minutes: Annotated[float | None, typer.Option(help="Plan each model's steps from this "
                                                       "wall-clock budget instead."),
                       Range(0, low_closed=False)] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="Steps per model (default: those of "
                                                          "the shipped weights).")] = None,
    seed: Seed = 0,
    threads: Annotated[int | None, typer.Option(min=1, help="torch CPU threads (default: the "
                                                            "fastest on a short probe of a "
                                                            "training-sized step).")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", metavar="DIR",
                                                help="Zoo folder to write (default: the "
                                                     "package's)."),
                      Output(folder=True)] = None,
) -> None:
    """Retrain the zoo models on the Python standard library (about 2.6 hours on two cores)."""
    import torch

    from specscope.executor.threads import choose_threads, probe_threads
    from specscope.executor.zoo_acceptance import store_acceptance
    from specscope.models.zoo import ORDER, ZOO_DIR, zoo_specs
    from specscope.models.zoo.train import HYPER, train

    if model != "all" and model not in ORDER:
        raise InputError(f"--model: unknown zoo model {model!r}; one of {', '.join(ORDER)}, all")
    names = list(ORDER) if model == "all" else [model]
    # training steps are batched (rows = batch × sequence), so they are probed at that size
    picked = choose_threads(threads) if threads is not None else probe_threads(
        max(zoo_specs(output or ZOO_DIR)[n].d_model for n in names),
        rows=max(HYPER[n].batch * HYPER[n].seq_len for n in names))
    torch.set_num_threads(picked.count)
    console.print(f"{picked.count} thread(s): {picked.reason}")
    for name, r in train(names, output or ZOO_DIR, minutes, seed, steps).items():
        console.print(f"{name}: {r['params']:,} parameters, {r['tokens_seen']:,} tokens, "
                      f"{r['wall_time_s']} s, held-out {r['heldout_bits_per_byte']} bits/byte")
    for name, vectors in store_acceptance(output or ZOO_DIR).items():
        for source, p in vectors.items():
            console.print(f"{name}: stored acceptance of {source}: p1 = {p[0]}")
