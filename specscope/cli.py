"""The command line: parse options, call the library, print. Bad input → one stderr line, exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

from specscope.atomic import write_text_atomic
from specscope.errors import InputError
from specscope.tables import cost_table, generate_table, optimize_table, pareto_table

app = typer.Typer(
    help="specscope: design-space explorer for speculative decoding.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
trace_app = typer.Typer(help="Acceptance traces (schema v1 parquet).", no_args_is_help=True)
app.add_typer(trace_app, name="trace")
zoo_app = typer.Typer(help="The tiny trained model zoo.", no_args_is_help=True)
app.add_typer(zoo_app, name="zoo")
console = Console()

Hw = Annotated[str, typer.Option("--hw", help="Hardware profile (a100, h100, h200, ...).")]
PricedRuntime = Annotated[str | None, typer.Option(
    "--runtime", help="eager, graph or compile (default: the profile's own).")]
TreeAttention = Annotated[str, typer.Option(
    "--tree-attention", help="split (prefix read once) or dense (one (n, prefix + n) mask).")]


def _csv_ints(text: str, option: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{option}: expected comma-separated integers, got {text!r}") from None


def _csv_floats(text: str, option: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{option}: expected comma-separated numbers, got {text!r}") from None


def _emit(payload: dict, as_json: bool, output: Path | None) -> None:
    text = json.dumps(payload, indent=2)
    if output is not None:
        write_text_atomic(output, text + "\n")
    if as_json:
        sys.stdout.write(text + "\n")


@app.command()
def cost(
    hw: Hw,
    model: Annotated[str, typer.Option(help="Model name from the catalogue.")],
    batch: Annotated[int, typer.Option(help="Sequences in the batch.")] = 1,
    new_tokens: Annotated[int, typer.Option(help="New tokens per sequence.")] = 1,
    context: Annotated[int, typer.Option(help="Tokens already cached per sequence.")] = 512,
    weight_bits: Annotated[int | None, typer.Option(help="16, 8 or 4.")] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    group_size: Annotated[int, typer.Option(help="Weights per 4-bit quantisation group.")] = 128,
    runtime: PricedRuntime = None,
    tree_attention: TreeAttention = "split",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Step time of one forward pass on a hardware profile and runtime, with the per-operator
    breakdown (context 0 prices a prompt of --new-tokens tokens)."""
    from specscope.hw_profiles import CostModel, load_profile
    from specscope.models import get_model

    cm = CostModel(load_profile(hw), get_model(model), weight_bits=weight_bits, tp=tp,
                   group_size=group_size, runtime=runtime, tree_attention=tree_attention)
    report = cm.report(batch, new_tokens, context)
    if as_json:
        _emit(report, True, None)
        return
    console.print(cost_table(report, f"{model} on {hw} ({report['runtime']}, "
                                     f"{tree_attention} attention): batch {batch}, "
                                     f"{new_tokens} new tokens, context {context}"))
    console.print(f"step time {report['step_time_ms']:.3f} ms ({report['source']}); "
                  f"memory {report['memory_gb']:.1f} GB"
                  + ("" if report["fits"] else " — does NOT fit in device memory"))


@app.command("profile-hw")
def profile_hw(
    name: Annotated[str, typer.Option(help="Profile name (--hw NAME finds it afterwards).")],
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    runtime: Annotated[list[str] | None, typer.Option(
        help="eager, graph (cuda), compile; repeat or comma-separate (default: all the device "
             "runs).")] = None,
    quick: Annotated[bool, typer.Option(help="A small grid (under ~2.5 minutes on 2 CPU "
                                             "cores).")] = False,
    threads: Annotated[int, typer.Option(help="torch CPU threads (the executor benchmarks and "
                                              "the demo run 1).")] = 1,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Profile TOML to write "
                                                "(default: the user profile directory).")] = None,
) -> None:
    """Measure this machine's step times, fit each runtime's cost terms, write a profile."""
    from specscope.hw_profiles.calibrate import profile_hw as run_profile_hw

    runtimes = [r.strip() for item in runtime or [] for r in item.split(",") if r.strip()]
    command = (f"specscope profile-hw --name {name} --device {device} --threads {threads}"
               + "".join(f" --runtime {r}" for r in runtimes) + (" --quick" if quick else ""))
    with _progress("profiling") as bar:
        task = bar.add_task("profiling", total=None)
        result = run_profile_hw(
            name, device, runtimes, quick, threads, output,
            progress=lambda done, total, _: bar.update(task, completed=done, total=total),
            command=command)
    for fit in result.fits.values():
        console.print(f"{fit.runtime}: held-out error median {fit.heldout_median_rel_err:.1%}, "
                      f"max {fit.heldout_max_rel_err:.1%} ({fit.held_out} points; "
                      f"{fit.points} fitted)")
    console.print(f"wrote {result.path} in {result.wall_s:.0f} s; use it with --hw {name}")


@trace_app.command("synth")
def trace_synth(
    output: Annotated[Path, typer.Option("-o", "--output", help="Parquet file to write.")],
    requests: Annotated[int, typer.Option(help="Requests to generate.")] = 32,
    length: Annotated[int, typer.Option(help="Generated positions per request.")] = 256,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    sources: Annotated[str, typer.Option(help="Comma-separated drafter sources.")] = (
        "draft:llama-68m,ngram,recycle"
    ),
    k: Annotated[int, typer.Option("-k", help="Candidates per position.")] = 8,
) -> None:
    """Write a synthetic schema-v1 trace with documented, tunable acceptance behaviour."""
    from specscope.trace import synth_trace, write_trace

    names = tuple(s.strip() for s in sources.split(",") if s.strip())
    trace = synth_trace(requests=requests, seed=seed, sources=names, length=length, k=k)
    write_trace(trace, output)
    console.print(f"wrote {trace.df.height} rows ({requests} requests × {length} positions × "
                  f"{len(names)} sources) to {output}")


def _progress(label: str) -> Progress:
    """A rich progress bar on stderr; the library reports (done, total) to it."""

    return Progress(f"[bold]{label}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True,
                    disable=not sys.stderr.isatty())  # keep logs and error output one line


@app.command()
def generate(
    model: Annotated[str, typer.Option(help="Zoo model name or a Hugging Face folder.")],
    drafter: Annotated[str, typer.Option(help="draft, ngram, suffix, recycle or goose.")],
    prompts: Annotated[str, typer.Option(help="builtin:stdlib-code, builtin:code-edit or a "
                                              ".jsonl file.")],
    n: Annotated[int, typer.Option(help="Prompts to decode.")] = 8,
    max_new: Annotated[int, typer.Option(help="New tokens per prompt.")] = 64,
    draft_model: Annotated[str | None, typer.Option(help="Draft model (default: "
                                                         "tiny-code-draft).")] = None,
    algo: Annotated[str | None, typer.Option(help="sequoia, dyspec, specdecpp, goose, chain, "
                                                  "...")] = None,
    budget: Annotated[int | None, typer.Option(help="Tree size n (root included).")] = None,
    tree: Annotated[Path | None, typer.Option(help="A tree JSON from optimize-tree -o.")] = None,
    ssm_verify: Annotated[str, typer.Option(help="SSM tree verification: stree or naive.")] = (
        "stree"
    ),
    temperature: Annotated[float, typer.Option(help="0 = greedy.")] = 0.0,
    rule: Annotated[str | None, typer.Option(help="greedy, deterministic, specinfer or "
                                                  "sequoia (sampling rules).")] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads.")] = None,
    verify_lossless: Annotated[bool, typer.Option(help="Check the output against "
                                                       "autoregressive greedy.")] = False,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto (cuda when available).")] = (
        "auto"
    ),
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16.")] = "float32",
    runtime: Annotated[str | None, typer.Option(help="eager, graph (CUDA graphs) or compile "
                                                     "(default: graph on cuda, eager on cpu).")
                       ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Real speculative decoding against autoregressive decoding, in one process."""
    from specscope.executor.generate import generate as run_generate
    from specscope.executor.runtime import Runtime

    chosen = Runtime.resolve(device, dtype, runtime)
    with _progress("decoding") as bar:
        task = bar.add_task("decoding", total=None)
        result = run_generate(
            model, drafter, prompts, n, max_new, draft_model=draft_model, algo=algo,
            budget=budget, tree=tree, ssm_verify=ssm_verify, temperature=temperature, seed=seed,
            rule=rule, verify_lossless=verify_lossless, threads=threads,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
            runtime=chosen,
        )
    if as_json:
        _emit(result.to_dict(), True, None)
    else:
        console.print(generate_table(result.to_dict()))


@app.command()
def validate(
    hw: Hw,
    model: Annotated[str, typer.Option(help="Zoo target model (tiny-code, ...).")],
    device: Annotated[str, typer.Option(help="cpu, cuda or auto (cuda when available).")] = (
        "auto"
    ),
    runtime: Annotated[str | None, typer.Option(help="eager, graph (CUDA graphs) or compile "
                                                     "(default: graph on cuda, eager on cpu).")
                       ] = None,
    prompts: Annotated[str, typer.Option(help="Comma list of prompt sets, split into "
                                              "calibration and held-out halves.")] = (
        "builtin:code-edit,builtin:stdlib-code"
    ),
    quick: Annotated[bool, typer.Option(help="Nine configurations, 64 + 64 prompts, one "
                                             "pass.")] = False,
    seed: Annotated[int, typer.Option(help="Random seed (prompt split, sampling).")] = 0,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: those the "
                                                     "profile was measured with).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Folder for the "
                                                "per-configuration table (parquet).")] = None,
) -> None:
    """Predicted against measured speculative decoding on held-out prompts (batch 1)."""
    from specscope.validate.compare import ValidateRequest, run_validate
    from specscope.validate.report import (
        config_table,
        drift_line,
        recommendation_line,
        summary_table,
        write_table,
    )

    request = ValidateRequest(hw=hw, model=model, device=device, runtime=runtime, quick=quick,
                              prompts=prompts, seed=seed, threads=threads)
    with _progress("validating") as bar:
        task = bar.add_task("validating", total=None)
        result = run_validate(
            request, progress=lambda done, total: bar.update(task, completed=done, total=total)
        )
    doc = result.to_dict()
    if output is not None:
        write_table(result, output)
    if as_json:
        _emit(doc, True, None)
        return
    console.print(config_table(doc))
    console.print(summary_table(doc))
    console.print(recommendation_line(doc))
    drift = drift_line(doc)
    if drift:
        console.print(drift)
    for note in doc["notes"]:
        console.print(f"note: {note}")


@app.command()
def collect(
    model: Annotated[str, typer.Option(help="Zoo model name or a Hugging Face folder.")],
    prompts: Annotated[str, typer.Option(help="builtin:stdlib-code, builtin:code-edit or a "
                                              ".jsonl file.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Trace parquet to write.")],
    drafters: Annotated[str, typer.Option(help="Comma list of draft, ngram, suffix, "
                                               "recycle.")] = "draft,ngram,suffix,recycle",
    draft_model: Annotated[str | None, typer.Option(help="Draft model (default: "
                                                         "tiny-code-draft).")] = None,
    n: Annotated[int, typer.Option(help="Prompts to trace.")] = 16,
    max_new: Annotated[int, typer.Option(help="New tokens per prompt.")] = 128,
    temperature: Annotated[float, typer.Option(help="0 = greedy.")] = 0.0,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto (cuda when available).")] = (
        "auto"
    ),
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16.")] = "float32",
    runtime: Annotated[str | None, typer.Option(help="eager, graph (CUDA graphs) or compile "
                                                     "(default: graph on cuda, eager on cpu).")
                       ] = None,
) -> None:
    """Trace real forward passes: every drafter's candidates given the true prefix."""
    from specscope.executor.collect import collect as run_collect
    from specscope.executor.runtime import Runtime

    chosen = Runtime.resolve(device, dtype, runtime)

    with _progress("collecting") as bar:
        task = bar.add_task("collecting", total=n)
        trace = run_collect(
            model, drafters, prompts, n, max_new, output=output, temperature=temperature,
            seed=seed, draft_model=draft_model,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
            runtime=chosen,
        )
    requests = trace.df.get_column("request_id").n_unique()
    console.print(f"wrote {trace.df.height} rows ({requests} requests) to {output}")


@zoo_app.command("train")
def zoo_train(
    model: Annotated[str, typer.Option(help="tiny-code, tiny-code-draft, tiny-ssm, or all.")] = (
        "all"
    ),
    minutes: Annotated[float | None, typer.Option(help="Plan each model's steps from this "
                                                       "wall-clock budget instead.")] = None,
    steps: Annotated[int | None, typer.Option(help="Steps per model (default: those of the "
                                                   "shipped weights).")] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's, "
                                                     "one per core).")] = None,
    out: Annotated[Path | None, typer.Option(help="Zoo folder to write (default: the "
                                                  "package's).")] = None,
) -> None:
    """Retrain the zoo models on the Python standard library (about 80 minutes on two cores)."""
    import torch

    from specscope.executor.zoo_acceptance import store_acceptance
    from specscope.models.zoo import ZOO_DIR
    from specscope.models.zoo.train import ORDER, train

    if model != "all" and model not in ORDER:
        raise InputError(f"--model: unknown zoo model {model!r}; one of {', '.join(ORDER)}, all")
    if threads is not None:
        torch.set_num_threads(threads)
    names = list(ORDER) if model == "all" else [model]
    for name, r in train(names, out or ZOO_DIR, minutes, seed, steps).items():
        console.print(f"{name}: {r['params']:,} parameters, {r['tokens_seen']:,} tokens, "
                      f"{r['wall_time_s']} s, held-out {r['heldout_bits_per_byte']} bits/byte")
    for name, vectors in store_acceptance(out or ZOO_DIR).items():
        for source, p in vectors.items():
            console.print(f"{name}: stored acceptance of {source}: p1 = {p[0]}")


@app.command("optimize-tree")
def optimize_tree(
    hw: Hw,
    trace: Annotated[Path | None, typer.Option(help="Trace parquet for acceptance.")] = None,
    acceptance: Annotated[str | None, typer.Option(help="Positional vector p1,p2,...")] = None,
    source: Annotated[str | None, typer.Option(help="Drafter source in the trace.")] = None,
    target: Annotated[str | None, typer.Option(help="Target model (default: trace's, "
                                                    "else llama-2-7b).")] = None,
    drafter: Annotated[str | None, typer.Option(help="Draft model, or 'none' for model-free "
                                                     "drafters.")] = None,
    algo: Annotated[str, typer.Option(help="Method name, comma list, or 'all'.")] = "all",
    budget: Annotated[int | None, typer.Option(help="Tree size n (root included).")] = None,
    budgets: Annotated[str | None, typer.Option(help="Sizes to choose among, e.g. "
                                                     "8,16,32,64.")] = None,
    max_depth: Annotated[int | None, typer.Option(help="Depth cap (drafted levels).")] = 12,
    depth_dependent: Annotated[bool, typer.Option(help="Depth × rank acceptance from the "
                                                       "trace.")] = False,
    context: Annotated[int | None, typer.Option(help="Context length for the cost model "
                                                     "(default: trace mean, else 512).")] = None,
    ets_kv_penalty: Annotated[float, typer.Option(help="ETS λ_kv (authors: 0).")] = 0.0,
    ets_coverage: Annotated[float, typer.Option(help="ETS λ_cov over sources (authors: 0).")] = 0.0,
    specdecpp_threshold: Annotated[float | None, typer.Option(
        help="SpecDec++ stop threshold h (default: chosen per hardware; authors: 0.7).")] = None,
    goose_budget: Annotated[int | None, typer.Option(
        help="Goose tree size (default: the compared budget; 0: the authors' 60–100 by match "
             "confidence).")] = None,
    dyspec_calibrate: Annotated[bool, typer.Option(
        help="Map DySpec's draft scores to acceptance by a monotone fit.")] = True,
    eagle_beam: Annotated[int, typer.Option(help="EAGLE-2 nodes expanded per level.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed for fitted predictors.")] = 0,
    runtime: PricedRuntime = None,
    tree_attention: TreeAttention = "split",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write JSON here.")] = None,
) -> None:
    """Best draft tree per method for this hardware, runtime, target, drafter and acceptance."""
    from specscope.optimizers.compare import MethodOptions
    from specscope.optimizers.run import OptimizeRequest, run_optimize

    request = OptimizeRequest(
        hw=hw,
        trace_path=trace,
        acceptance=None if acceptance is None else _csv_floats(acceptance, "--acceptance"),
        source=source,
        target=target,
        drafter=drafter,
        algos=algo,
        budget=budget,
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
        runtime=runtime,
        tree_attention=tree_attention,
    )
    result = run_optimize(request)
    _emit(result.to_dict(), as_json, output)
    if not as_json:
        console.print(optimize_table(result))
        if budgets is not None:
            console.print(pareto_table(result))


@app.command()
def simulate(
    hw: Hw,
    target: Annotated[str, typer.Option(help="Target model from the catalogue.")],
    rate: Annotated[float, typer.Option(help="Arrivals per second.")],
    requests: Annotated[int, typer.Option(help="Arrivals to simulate.")],
    seed: Annotated[int, typer.Option(help="Random seed.")],
    drafter: Annotated[str | None, typer.Option(help="Draft model from the catalogue, or "
                                                     "ngram, suffix, recycle (default: the "
                                                     "trace's source).")] = None,
    trace: Annotated[Path | None, typer.Option(help="Trace parquet to replay (acceptance "
                                                    "and, by default, lengths).")] = None,
    acceptance: Annotated[str | None, typer.Option(help="Positional vector p1,p2,... when no "
                                                        "trace is given.")] = None,
    policy: Annotated[str, typer.Option(help="none, static, dyspec, specdecpp, smartspec, "
                                             "ets-batch.")] = "none",
    tree: Annotated[Path | None, typer.Option(help="A tree JSON, or optimize-tree --json / "
                                                   "-o output (its best result).")] = None,
    algo: Annotated[str | None, typer.Option(help="Method of the --tree file to use.")] = None,
    budget: Annotated[int, typer.Option(help="Tree size per request (root included) of the "
                                             "dynamic policies.")] = 16,
    max_depth: Annotated[int, typer.Option(help="Depth cap of the dynamic policies.")] = 12,
    runtime: PricedRuntime = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree of the target.")] = 1,
    weight_bits: Annotated[int | None, typer.Option(help="Target weight bits: 16, 8 or 4.")] = (
        None),
    max_batch: Annotated[int, typer.Option(help="Sequences per step.")] = 32,
    token_budget: Annotated[int, typer.Option(help="Tokens per step (trees and prompts).")] = (
        8192),
    chunked_prefill: Annotated[int | None, typer.Option(help="Prefill prompts in chunks of this "
                                                             "many tokens.")] = None,
    replicas: Annotated[int, typer.Option(help="Replicas behind the router.")] = 1,
    router: Annotated[str, typer.Option(help="round-robin or least-outstanding.")] = (
        "round-robin"),
    workload: Annotated[str, typer.Option(help="chat or forking.")] = "chat",
    fork_branches: Annotated[int, typer.Option(help="Forking: continuations per sequence.")] = 4,
    fork_levels: Annotated[int, typer.Option(help="Forking: levels (1 = best-of-N).")] = 1,
    arrivals: Annotated[str, typer.Option(help="poisson or gamma.")] = "poisson",
    cv: Annotated[float, typer.Option(help="Gamma arrivals: coefficient of variation.")] = 1.0,
    arrival_file: Annotated[Path | None, typer.Option(help="Arrival times, one number of "
                                                           "seconds per line.")] = None,
    prompt_len: Annotated[str | None, typer.Option(help="N, uniform:A:B, lognormal:MEDIAN:SIGMA "
                                                        "or trace.")] = None,
    output_len: Annotated[str | None, typer.Option(help="N, uniform:A:B, lognormal:MEDIAN:SIGMA "
                                                        "or trace.")] = None,
    draft_placement: Annotated[str, typer.Option(help="colocated or separate.")] = "colocated",
    link_gbps: Annotated[float, typer.Option(help="Separate placement: link Gbit/s.")] = 100.0,
    link_us: Annotated[float, typer.Option(help="Separate placement: link latency µs.")] = 10.0,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="TPOT SLO of goodput (ms).")] = None,
    drift: Annotated[str | None, typer.Option(help="Acceptance multipliers per 1000 arrivals, "
                                                   "e.g. 1,0.9,0.8.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Per-request metrics "
                                                "parquet (summary in its metadata); the time "
                                                "series and event log go beside it.")] = None,
) -> None:
    """Discrete-event serving simulation: speculation under load, batching, per-step policies."""
    from specscope.simulator.metrics import write_metrics
    from specscope.simulator.run import SimulateRequest, run_simulation
    from specscope.tables import simulate_table
    from specscope.trace import read_trace

    request = SimulateRequest(
        hw=hw, target=target, drafter=drafter,
        trace=None if trace is None else read_trace(trace), policy=policy, tree=tree, algo=algo,
        budget=budget, max_depth=max_depth,
        acceptance=None if acceptance is None else tuple(_csv_floats(acceptance,
                                                                     "--acceptance")),
        runtime=runtime, tp=tp, weight_bits=weight_bits, rate=rate, requests=requests,
        max_batch=max_batch, token_budget=token_budget, chunked_prefill=chunked_prefill,
        replicas=replicas, router=router, workload=workload, fork_branches=fork_branches,
        fork_levels=fork_levels, arrivals=arrivals, cv=cv, arrival_file=arrival_file,
        prompt_len=prompt_len, output_len=output_len, draft_placement=draft_placement,
        link_gbps=link_gbps, link_us=link_us, slo_tpot_ms=slo_tpot_ms,
        drift=() if drift is None else tuple(_csv_floats(drift, "--drift")), seed=seed,
    )
    with _progress("simulating") as bar:
        task = bar.add_task("simulating", total=requests)
        result = run_simulation(
            request, progress=lambda done, total: bar.update(task, completed=done, total=total))
    if output is not None:
        write_metrics(output, result.requests, result.summary, result.timeseries, result.events)
    if as_json:
        _emit(result.summary, True, None)
    else:
        console.print(simulate_table(result.summary))


@app.command()
def sweep(
    config: Annotated[Path, typer.Argument(help="Sweep TOML (examples/sweep.toml shows the "
                                                "format).")],
    engine: Annotated[str, typer.Option(help="local (this process) or ray.")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster to join (default: start a "
                                                     "local Ray).")] = None,
    workers: Annotated[int | None, typer.Option(help="CPUs of a local Ray (default: all).")] = (
        None),
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Results parquet "
                                                "(default: CONFIG's name .parquet, here).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Design-space sweep: every cell of a TOML grid, analytic or simulated, appended to parquet
    as it finishes; a re-run skips finished cells."""
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


@app.command()
def dashboard(
    folder: Annotated[Path, typer.Argument(help="Results folder: optimize-tree JSON, simulate "
                                                "metrics, validate tables, sweeps, traces, "
                                                "benchmark JSON (searched recursively).")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="HTML file to write "
                                                "(default: FOLDER/report.html).")] = None,
) -> None:
    """One self-contained HTML report (Plotly) of everything a results folder holds."""
    from specscope.dashboards import build_report

    report = build_report(folder, output or folder / "report.html")
    console.print(f"wrote {report.path}: {len(report.drawn)} figures from "
                  f"{report.results.used} files in {report.seconds:.1f} s")


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", help="Folder for every result and the "
                                                    "dashboard.")] = Path("out/demo"),
    quick: Annotated[bool, typer.Option("--quick", help="Fewer loads, validated "
                                                        "configurations and prompts.")] = False,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """The whole loop on embedded defaults: measure, trace, optimise, simulate, validate,
    dashboard."""
    from specscope.demo import run_demo

    run_demo(seed, console, out, quick)


def _run(
    command: typer.core.TyperCommand | typer.core.TyperGroup, prog: str, argv: list[str] | None
) -> None:
    """Invoke a click command; usage and input errors become one stderr line and exit 2."""
    try:
        code = command.main(args=argv, prog_name=prog, standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print(f"{prog}: aborted", file=sys.stderr)
        sys.exit(130)
    except (typer.TyperException, InputError) as exc:  # usage errors, bad values, bad input
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if not message.strip():  # no arguments at all: the help was printed
            sys.exit(0)
        print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `specscope` console script."""
    _run(typer.main.get_command(app), "specscope", argv)


def optimize_tree_main(argv: list[str] | None = None) -> None:
    """Entry point of the `optimize-tree` console script."""
    single = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    single.command()(optimize_tree)
    _run(typer.main.get_command(single), "optimize-tree", argv)
