"""`specscope demo`: the whole loop on embedded defaults, every result written under one folder.

0. measure this machine (`profile-hw --quick`, eager, one thread, as the real runs decode);
1. collect a real trace from the zoo (tiny-code target; draft model, n-gram, suffix and
   recycling drafters; code prompts) and synthesise a catalogue-scale one;
2. optimise trees for every shipped hardware profile (llama-3.1-8b verified, llama-68m
   drafting, the synthetic trace) and for this machine (the real trace);
3. simulate serving under load on h100: autoregressive, the optimised static tree and
   SmartSpec at rising arrival rates;
4. validate predictions against real runs on this CPU (held-out prompts);
5. decode with this machine's predicted best tree, checked lossless against autoregressive;
   then price every seed system's published setup against its paper (`reproduce` of the
   checkout's examples/papers, copied into the folder for the dashboard) and write the
   accuracy document (`specscope accuracy --json`: every published set and the committed
   validation runs, a few seconds) for the dashboard's predicted-against-published figure;
6. write the dashboard of everything above.

`--quick` shrinks stages 3 and 4 (fewer rates and requests; three validated configurations on
fewer prompts) and skips stage 5.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from specscope.atomic import write_text_atomic
from specscope.errors import InputError
from specscope.hw_profiles.deployment import deployment
from specscope.hw_profiles.profile import DATA_DIR
from specscope.json_out import write_json
from specscope.optimizers.run import OptimizeRequest, OptimizeResult, run_optimize
from specscope.optimizers.scoring import Score
from specscope.tables import generate_table, optimize_table
from specscope.trace import synth_trace, write_trace

DEMO_DIR = Path("out/demo")
DEMO_BUDGETS = [8, 16, 32, 64]
REAL_PROMPTS = "builtin:code-edit"
SIM_HW, SIM_TARGET, SIM_DRAFT = "h100", "llama-3.1-8b", "llama-68m"
"""The served system of stage 3 (the synthetic trace's draft source is llama-68m)."""
SIM_POLICIES = ("none", "static", "smartspec")
SIM_RATES = {False: (1.0, 4.0, 16.0, 64.0), True: (2.0, 32.0)}
SIM_REQUESTS = {False: 300, True: 120}
PAPERS = Path(__file__).resolve().parents[1] / "examples" / "papers"
"""The published scenarios of the seed systems, in a source checkout."""


def run_demo(seed: int, console: Console, out: Path = DEMO_DIR, quick: bool = False) -> Path:
    """Run every stage (module docstring), writing under `out`; the dashboard's path. Without
    the executor extra it fails before writing anything (its stages run real models)."""
    import torch  # noqa: F401

    out.mkdir(parents=True, exist_ok=True)
    cpu_profile = _measure(out, console)
    real, synthetic = _traces(out, seed, quick, console)
    trees, best_here = _optimize(out, synthetic, real, cpu_profile, console)
    _simulate(out, synthetic, trees, seed, quick, console)
    _validate(out, cpu_profile, seed, quick, console)
    if not quick:
        _decode(out, best_here, seed, console)
    _papers(out, console)
    from specscope.dashboards import build_report

    report = out / "report.html"
    with console.status("6. writing the dashboard"):
        build_report(out, report)
    console.print(f"[bold]6. Dashboard[/] → {report} (open it in a browser; it needs no network)")
    return report


def _papers(out: Path, console: Console) -> None:
    """The seed systems against their papers, from the checkout's scenario files, and the
    checkout's accuracy document (`accuracy.json`)."""
    from specscope.systems.reproduce import reproduce
    from specscope.tables import reproduce_table
    from specscope.validate.accuracy import build_accuracy

    if not PAPERS.is_dir():
        console.print(f"[bold]5. Papers[/]: no {PAPERS} (not a source checkout): skipped")
        return
    folder = out / "papers"
    folder.mkdir(exist_ok=True)
    for path in sorted(PAPERS.glob("*.toml")):
        write_text_atomic(folder / path.name, path.read_text())
    console.print(reproduce_table(reproduce(folder)))
    with console.status("5. pricing every published set (specscope accuracy)"):
        try:
            accuracy = build_accuracy(PAPERS.parents[1])
        except InputError as exc:  # a checkout without the committed benchmark results
            console.print(f"[bold]5. Accuracy[/]: skipped ({exc})")
            return
    path = write_json(out / "accuracy.json", accuracy.to_dict())
    console.print(f"[bold]5. Accuracy[/] → {path}: {accuracy.headline()}")


def _measure(out: Path, console: Console) -> Path:
    from specscope.profiling.calibrate import profile_hw

    path = out / "this-machine.toml"
    with console.status("0. measuring this machine (profile-hw --quick, eager, 1 thread)"):
        measured = profile_hw("this-machine", runtimes=("eager",), quick=True, output=path,
                              command="specscope demo")
    fit = measured.fits["eager"]
    console.print(f"[bold]0. This machine[/] → {path} in {measured.wall_s:.0f} s; held-out "
                  f"step-time error median {fit.heldout_median_rel_err:.1%}, max "
                  f"{fit.heldout_max_rel_err:.1%}")
    return path


def _traces(out: Path, seed: int, quick: bool, console: Console) -> tuple[Path, Path]:
    from specscope.executor.collect import collect

    real = out / "traces" / "tiny-code.parquet"
    with console.status("1. collecting a real trace from the zoo models"):
        collect("tiny-code", "draft,ngram,suffix,recycle", REAL_PROMPTS, n=6 if quick else 8,
                max_new=48, output=real, seed=seed)
    synthetic = out / "traces" / "synthetic.parquet"
    write_trace(synth_trace(requests=32, seed=seed), synthetic)
    console.print(f"[bold]1. Traces[/]: tiny-code on {REAL_PROMPTS} → {real}; synthetic "
                  f"(draft llama-68m, n-gram, recycling) → {synthetic}")
    return real, synthetic


def _optimize(out: Path, synthetic: Path, real: Path, cpu_profile: Path, console: Console
              ) -> tuple[dict[str, Path], Score]:
    """Every shipped profile on the synthetic trace, this machine on the real one: the JSON
    files by hardware name, and this machine's best tree."""
    folder = out / "optimize"
    written: dict[str, Path] = {}
    summary = Table(title=f"2. Best tree per hardware ({SIM_TARGET} verifying, {SIM_DRAFT} "
                          f"drafting, synthetic trace, budgets {DEMO_BUDGETS})")
    for column in ("hardware", "runtime", "method", "n", "d", "tokens/step", "step ms",
                   "speedup"):
        summary.add_column(column, justify="left" if column in ("hardware", "method",
                                                                 "runtime") else "right")
    for hw in sorted(p.stem for p in DATA_DIR.glob("*.toml")):
        request = OptimizeRequest(
            deployment=deployment(hw, target=SIM_TARGET, drafter=SIM_DRAFT),
            trace_path=synthetic, budgets=DEMO_BUDGETS)
        with console.status(f"2. optimising trees for {hw}"):
            try:
                result = run_optimize(request)
            except InputError as exc:  # e.g. the target does not fit this device
                summary.add_row(hw, "", f"skipped: {exc}", *[""] * 5)
                continue
        written[hw] = _write(folder / f"{hw}.json", result)
        best = result.best
        summary.add_row(hw, result.runtime, best.algo, f"{best.n:g}", f"{best.depth:g}",
                        f"{best.expected_tokens:.2f}", f"{best.step_time_s * 1e3:.2f}",
                        f"{best.speedup:.2f}×")
    console.print(summary)
    result = run_optimize(OptimizeRequest(
        deployment=deployment(str(cpu_profile)),
        trace_path=real, source="ngram", budgets=[4, 8, 16], algos="sequoia,goose,chain"))
    written["this-machine"] = _write(folder / "this-machine.json", result)
    console.print(optimize_table(result))
    return written, result.best


def _write(path: Path, result: OptimizeResult) -> Path:
    write_json(path, result.to_dict(), indent=1)
    return path


def _simulate(out: Path, synthetic: Path, trees: dict[str, Path], seed: int, quick: bool,
              console: Console) -> None:
    from specscope.simulator.metrics import write_metrics
    from specscope.simulator.run import SimulateRequest, run_simulation
    from specscope.trace import read_trace

    trace = read_trace(synthetic)
    table = Table(title=f"3. Serving {SIM_TARGET} on {SIM_HW} ({SIM_DRAFT} drafting, "
                        f"{SIM_REQUESTS[quick]} requests per run)")
    for column in ("policy", "rate /s", "throughput tok/s", "mean TPOT ms", "p99 latency s",
                   "mean batch"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for policy in SIM_POLICIES:
        for rate in SIM_RATES[quick]:
            request = SimulateRequest(
                deployment=deployment(SIM_HW, target=SIM_TARGET, drafter=SIM_DRAFT, max_batch=64),
                trace=trace, policy=policy, tree=trees[SIM_HW] if policy == "static" else None,
                budget=16, rate=rate, requests=SIM_REQUESTS[quick], seed=seed, against_plain=False)
            with console.status(f"3. simulating {policy} at {rate:g} requests/s"):
                result = run_simulation(request)
            write_metrics(out / "simulate" / f"{policy}-rate{rate:g}.parquet", result.requests,
                          result.summary, result.timeseries, result.events)
            s = result.summary
            table.add_row(policy, f"{rate:g}", f"{s['throughput_tok_s']:,.0f}",
                          f"{s['mean_tpot_ms']:.2f}", f"{s['p99_latency_s']:.2f}",
                          f"{s['mean_batch']:.1f}")
    console.print(table)


def _validate(out: Path, cpu_profile: Path, seed: int, quick: bool, console: Console) -> None:
    from specscope.validate.compare import Sizes, ValidateRequest, run_validate
    from specscope.validate.grid import QUICK
    from specscope.validate.report import (
        config_table,
        recommendation_line,
        summary_table,
        write_table,
    )

    # --quick: one draft tree, one n-gram chain, Goose, on fewer prompts
    request = ValidateRequest(
        hw=str(cpu_profile), model="tiny-code", device="cpu", quick=True, seed=seed,
        configs=(QUICK[0], QUICK[5], QUICK[6]) if quick else None,
        sizes=Sizes(per_half=24, max_new=32, passes=1, recheck=1) if quick else None)
    with console.status("4. validating predictions against real runs on held-out prompts"):
        result = run_validate(request)
    write_table(result, out / "validate")
    doc = result.to_dict()
    write_json(out / "validate" / "validate.json", doc, indent=1)
    console.print(config_table(doc))
    console.print(summary_table(doc))
    console.print(recommendation_line(doc))


def _decode(out: Path, best: Score, seed: int, console: Console) -> None:
    from specscope.executor.generate import generate

    tree_path = out / "best-tree.json"
    write_text_atomic(tree_path, best.tree.to_json())
    drafter = "goose" if best.algo == "goose" else "ngram"
    with console.status(f"5. decoding with {best.algo}'s tree (n = {best.tree.size})"):
        run = generate("tiny-code", drafter, REAL_PROMPTS, n=8, max_new=48, tree=tree_path,
                       seed=seed, verify_lossless=True)
    console.print(f"[bold]5. Real speculative decoding[/] on {REAL_PROMPTS} with this machine's "
                  f"predicted best tree ({best.algo}, {tree_path}), checked lossless")
    console.print(generate_table(run.to_dict()))
    console.print(f"tokens/step: replay predicted {best.replay_tokens:.2f}, measured "
                  f"{run.tokens_per_step:.2f}. Speedup: predicted {best.speedup:.2f}× on this "
                  f"machine's profile, measured {run.speedup:.2f}× here.")
