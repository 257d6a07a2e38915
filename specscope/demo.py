"""`specscope demo`: the whole loop on embedded defaults.

1. a synthetic trace and every method on three hardware profiles (prediction only);
2. a real trace from the zoo models (tiny-code target, tiny-code-draft drafter, code prompts);
3. the predicted best tree for this CPU, then real speculative decoding with it against
   autoregressive decoding in the same process, checked lossless.

This CPU is measured first (`profile-hw --quick`, eager, one thread, as stage 3 decodes) and its
profile prices stages 1 and 3 beside the shipped ones.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from specscope.atomic import write_text_atomic
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.tables import generate_table, optimize_table, pareto_table
from specscope.trace import synth_trace, write_trace

DEMO_DIR = Path("out/demo")
CPU_PROFILE = DEMO_DIR / "this-machine.toml"
"""This machine's profile, measured by the demo itself (stage 0)."""
DEMO_HARDWARE = ("a100", "h100", "cpu-2core")
DEMO_BUDGETS = [8, 16, 32, 64]
REAL_PROMPTS = "builtin:code-edit"


def run_demo(seed: int, console: Console) -> None:
    """Measure this machine, then run the three stages, writing their files under out/demo/."""
    from specscope.hw_profiles.calibrate import profile_hw

    with console.status("0. measuring this machine (profile-hw --quick, eager, 1 thread)"):
        measured = profile_hw("this-machine", runtimes=("eager",), quick=True,
                              output=CPU_PROFILE, command="specscope demo")
    fit = measured.fits["eager"]
    console.print(f"[bold]0. This machine[/] → {CPU_PROFILE} in {measured.wall_s:.0f} s; held-out "
                  f"step-time error median {fit.heldout_median_rel_err:.1%}, max "
                  f"{fit.heldout_max_rel_err:.1%}")
    trace_path = DEMO_DIR / "synthetic.parquet"
    write_trace(synth_trace(requests=32, seed=seed), trace_path)
    console.print(f"[bold]1. Synthetic trace[/] → {trace_path}; every method, each choosing "
                  f"its best n ≤ budget in {DEMO_BUDGETS}")
    for hw in (*DEMO_HARDWARE, str(CPU_PROFILE)):
        with console.status(f"optimizing trees for {hw}"):
            result = run_optimize(
                OptimizeRequest(hw=hw, trace_path=trace_path, budgets=DEMO_BUDGETS)
            )
        console.print(optimize_table(result))
        console.print(pareto_table(result))

    from specscope.executor.collect import collect
    from specscope.executor.generate import generate

    real_path = DEMO_DIR / "tiny-code.parquet"
    with console.status("2. collecting a real trace from the zoo models"):
        collect("tiny-code", "draft,ngram,suffix,recycle", REAL_PROMPTS, n=8, max_new=48,
                output=real_path, seed=seed)
    console.print(f"[bold]2. Real trace[/]: tiny-code on {REAL_PROMPTS} → {real_path}")
    result = run_optimize(OptimizeRequest(hw=str(CPU_PROFILE), trace_path=real_path, source="ngram",
                                          budgets=[4, 8, 16], algos="sequoia,goose,chain"))
    console.print(optimize_table(result))
    best = result.comparison.scores[0]
    tree_path = DEMO_DIR / "best-tree.json"
    write_text_atomic(tree_path, best.tree.to_json())

    drafter = "goose" if best.algo == "goose" else "ngram"
    with console.status(f"3. decoding with {best.algo}'s tree (n = {best.tree.size})"):
        run = generate("tiny-code", drafter, REAL_PROMPTS, n=8, max_new=48, tree=tree_path,
                       seed=seed, verify_lossless=True, threads=1)
    console.print(f"[bold]3. Real speculative decoding[/] on the same prompts with the "
                  f"predicted best tree ({best.algo}, {tree_path})")
    console.print(generate_table(run.to_dict()))
    console.print(
        f"tokens/step: replay predicted {best.replay_tokens:.2f}, measured "
        f"{run.tokens_per_step:.2f}. Speedup: predicted {best.speedup:.2f}× on this machine's "
        f"profile (stage 0), measured {run.speedup:.2f}× here."
    )
