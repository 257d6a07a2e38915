"""`specscope demo`: the whole loop on embedded defaults.

1. a synthetic trace and every method on three hardware profiles (prediction only);
2. a real trace from the zoo models (tiny-code target, tiny-code-draft drafter, code prompts);
3. the predicted best tree for this CPU (the `cpu-2core` profile profile-hw measured on a machine
   of this kind), then real speculative decoding with it against autoregressive decoding in the
   same process, checked lossless.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from specscope.atomic import write_text_atomic
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.tables import generate_table, optimize_table, pareto_table
from specscope.trace import synth_trace, write_trace

DEMO_DIR = Path("out/demo")
CPU_PROFILE = "cpu-2core"
"""The CPU prediction's profile: measured by `specscope profile-hw` on a 2-core machine of the kind
the demo runs on (one torch thread, as stage 3 decodes)."""
DEMO_HARDWARE = ("a100", "h100", CPU_PROFILE)
DEMO_BUDGETS = [8, 16, 32, 64]
REAL_PROMPTS = "builtin:code-edit"


def run_demo(seed: int, console: Console) -> None:
    """Run the three stages, writing their files under out/demo/."""
    trace_path = DEMO_DIR / "synthetic.parquet"
    write_trace(synth_trace(requests=32, seed=seed), trace_path)
    console.print(f"[bold]1. Synthetic trace[/] → {trace_path}; every method, each choosing "
                  f"its best n ≤ budget in {DEMO_BUDGETS}")
    for hw in DEMO_HARDWARE:
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
    result = run_optimize(OptimizeRequest(hw=CPU_PROFILE, trace_path=real_path, source="ngram",
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
        f"{run.tokens_per_step:.2f}. Speedup: predicted {best.speedup:.2f}× on the {CPU_PROFILE} "
        f"profile (measured by profile-hw on a machine of this kind), measured "
        f"{run.speedup:.2f}× here."
    )
