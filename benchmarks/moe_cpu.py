"""A real mixture of experts on this CPU against its pricing (issue 41): verify-forward times of
a random-weight MoE of the zoo's size and of its dense twin, measured through the executor's own
verify paths, beside `CostModel(load_profile("cpu-2core"), spec, runtime="eager")`'s
`forward_time(B, n, context)`.

The MoE is tiny-code's shape (4 layers of width 256, 4 heads of 64, vocabulary 2,048, tied
embedding) with every layer's SwiGLU (d_ff 688) replaced by 16 routed experts of width 344, top-2
and no shared expert: the active MLP width 2 × 344 equals the dense twin's 688, so both run the
same active parameters per token (the MoE stores 8× the MLP weights). The dense twin is tiny-
code's own shape. Random weights (seed 0, std 0.02: a router with no preferred expert, the
pricing's default law). Steps are binary trees of n nodes after 128 committed tokens per row, B =
1 through `CachedModel.verify` (`measure_steps`) and B = 4 through the batched target's `verify`
(`measure_batched`): profile-hw's own timing (perf_counter, warm-up per shape, median of
interleaved repeats), float32, eager, 1 torch thread, as cpu-2core was measured. Predictions are
the profile as it stands: nothing is fitted to these measurements. The machine-drift probe
(cpu-2core's own tiny-code points re-timed, now over then; the geometric mean of a probe before
and after) is printed, and the errors are shown both raw and with the prediction scaled by it ("×
drift": validate's correction for a machine running slower than when it was profiled).

"experts" is the mean over MoE layers of the distinct experts the step's B × n tokens touched
(counted in one extra forward of the timed inputs: token ids 0..n−1 in every row, as profile-hw
times steps, after each row's own random context), beside `expected_experts`(16, 2, B × n), the
law's count for tokens that route independently.

Run alone: `.venv/bin/python benchmarks/moe_cpu.py` (writes benchmarks/results/moe-cpu.txt).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from specscope.executor.batched_transformer import batch_target
from specscope.executor.runtime import Runtime
from specscope.hw_profiles import load_profile
from specscope.hw_profiles.cost import CostModel
from specscope.models.catalogue import get_model
from specscope.models.moe_ops import expected_experts
from specscope.models.spec import ModelSpec
from specscope.models.torch.moe import MoEFeedForward
from specscope.profiling.batched import measure_batched
from specscope.profiling.drift import machine_drift
from specscope.profiling.measure import binary_tree, build, measure_steps, provenance

NS = (1, 2, 4, 8, 16, 32)
BATCHES = (1, 4)
CONTEXT = 128
RESULTS = Path(__file__).parent / "results" / "moe-cpu.txt"


def moe_twin(dense: ModelSpec) -> ModelSpec:
    """`dense` with every layer's SwiGLU replaced by 16 experts top-2 of half its width."""
    return dataclasses.replace(dense, name=f"{dense.name}-moe16", d_ff=0, n_experts=16,
                               experts_per_token=2, d_expert=dense.d_ff // 2)


def measure(spec: ModelSpec, runtime: Runtime, repeats: int) -> dict[tuple[int, int], float]:
    """Seconds of each (B, n) verify forward after `CONTEXT` tokens."""
    points = measure_steps(spec, runtime, [CONTEXT], NS, repeats)
    points += measure_batched(spec, runtime, [CONTEXT], [b for b in BATCHES if b > 1], NS,
                              repeats)
    return {(p.batch, p.new_tokens): p.time_s for p in points}


def touched_experts(spec: ModelSpec, runtime: Runtime) -> dict[tuple[int, int], float]:
    """Mean over MoE layers of the distinct experts each (B, n) step's tokens touch, from one
    forward of the measured shapes (rows with different random contexts)."""
    counts: list[int] = []

    def count(layer: MoEFeedForward, inputs: tuple[torch.Tensor], _: torch.Tensor) -> None:
        experts, _weights = layer.route(inputs[0].reshape(-1, spec.d_model))
        counts.append(int(experts.unique().numel()))

    room = CONTEXT + max(NS) + 1
    rows = max(BATCHES)
    target = batch_target(build(spec, runtime, room), rows, room)
    generator = torch.Generator().manual_seed(0)
    for row in range(rows):
        target.admit(row, room)
        target.prefill(row, torch.randint(0, spec.vocab_size, (CONTEXT,), generator=generator))
    hooks = [m.register_forward_hook(count) for m in target.model.modules()
             if isinstance(m, MoEFeedForward)]
    out = {}
    for b in BATCHES:
        for n in NS:
            counts.clear()
            tokens, tree = torch.arange(n) % spec.vocab_size, binary_tree(n)
            target.verify(range(b), [tokens] * b, [tree] * b)
            out[b, n] = statistics.mean(counts)
    for hook in hooks:
        hook.remove()
    return out


def pricing_commit() -> str:
    """The last commit of the pricing code the predictions come from (provenance)."""
    files = [f"specscope/{f}" for f in ("models/ops.py", "models/moe_ops.py",
                                         "hw_profiles/cost.py")]
    return subprocess.run(["git", "log", "-1", "--format=%h", "--", *files], capture_output=True,
                          text=True, check=False, cwd=Path(__file__).parents[1]).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    runtime = Runtime.cpu()
    profile = load_profile("cpu-2core")
    dense = get_model("tiny-code")
    moe = moe_twin(dense)
    drift_before = machine_drift(profile, "tiny-code", runtime)
    measured = {spec.name: measure(spec, runtime, args.repeats) for spec in (moe, dense)}
    drift_after = machine_drift(profile, "tiny-code", runtime)
    touched = touched_experts(moe, runtime)
    table = Table(title=f"verify forward after {CONTEXT} tokens, eager float32, 1 thread: "
                        f"{moe.name} (16 experts × 344, top-2) and its dense twin {dense.name} "
                        f"(d_ff 688), measured against cpu-2core's CostModel")
    drift = float(np.sqrt(drift_before * drift_after))
    for column in ("B", "n", "experts (expected)", "MoE ms", "predicted", "error",
                   "× drift", "dense ms", "predicted", "error", "× drift", "MoE / dense"):
        table.add_column(column, justify="right")
    errors: dict[str, list[float]] = {moe.name: [], dense.name: []}
    drifted: dict[str, list[float]] = {moe.name: [], dense.name: []}
    priced = {spec.name: CostModel(profile, spec, runtime="eager") for spec in (moe, dense)}
    for b in BATCHES:
        for n in NS:
            row = [str(b), str(n), f"{touched[b, n]:.1f} ({expected_experts(16, 2, b * n):.1f})"]
            for spec in (moe, dense):
                real = measured[spec.name][b, n]
                predicted = float(priced[spec.name].forward_time(b, n, CONTEXT))
                errors[spec.name].append(predicted / real - 1)
                drifted[spec.name].append(predicted * drift / real - 1)
                row += [f"{real * 1e3:.2f}", f"{predicted * 1e3:.2f}",
                        f"{errors[spec.name][-1]:+.0%}", f"{drifted[spec.name][-1]:+.0%}"]
            row.append(f"{measured[moe.name][b, n] / measured[dense.name][b, n]:.2f}×")
            table.add_row(*row)
    table.caption = "\n".join(
        f"{name}: median |error| {np.median(np.abs(e)):.0%}, worst {np.max(np.abs(e)):.0%}; "
        f"prediction × drift {drift:.2f}: median {np.median(np.abs(d)):.0%}, worst "
        f"{np.max(np.abs(d)):.0%}" for (name, e), d in zip(errors.items(), drifted.values(),
                                                          strict=True))
    prov = provenance(runtime)
    header = (f"# benchmarks/moe_cpu.py on {prov['device']}, torch {prov['torch']}, "
              f"{prov['date']}; median of {args.repeats} "
              f"interleaved repeats per cell; machine drift (cpu-2core's tiny-code steps, "
              f"now / then) "
              f"{drift_before:.2f} before, {drift_after:.2f} after; '× drift': the error of the "
              f"prediction scaled by their geometric mean\n"
              f"# pricing: ops.py, moe_ops.py and cost.py as of commit {pricing_commit()}\n"
              f"# command: .venv/bin/python benchmarks/moe_cpu.py --repeats {args.repeats}\n")
    console = Console(record=True, width=160)
    console.print(table)
    args.out.write_text(header + console.export_text())
    print(header, end="")


if __name__ == "__main__":
    main()
