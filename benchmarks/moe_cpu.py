"""A real mixture of experts on this CPU against its pricing (issue 41): verify-forward times of
a random-weight MoE of the zoo's size and of its dense twin, measured through the executor's own
verify paths, beside `CostModel(load_profile("cpu-2core"), spec, runtime="eager")`'s
`forward_time(B, n, context)`.

The MoE is tiny-code's shape (4 layers of width 256, 4 heads of 64, vocabulary 2,048, tied
embedding) with every layer's SwiGLU (d_ff 688) replaced by 16 routed experts of width 344, top-2
and no shared expert: the active MLP width 2 × 344 equals the dense twin's 688, so both run the
same active parameters per token (the MoE stores 8× the MLP weights). The dense twin is tiny-
code's own shape. Random weights (seed 0, std 0.02). Steps are binary trees of n nodes after 128
committed tokens per row, B = 1 through `CachedModel.verify` and B = 4 through the batched
target's `verify`, timed as profile-hw times them (perf_counter, warm-up per shape, median of
repeats interleaved over the shapes, and here over both models), float32, eager, 1 torch
thread, as cpu-2core was measured.

Inputs. profile-hw feeds token ids 0..n−1 in every row, which is harmless for a dense model but
not for an MoE: identical rows route identically, so a B = 4 step touches the experts of one row.
Here every repeat of a shape draws its own token ids, per row and per node (seeded: `TIMED_SEED`),
as the rows of a real verify step differ; the dense twin is timed on the same draws.

"experts" is the mean, over the MoE layers and the draws, of the distinct experts a step's B × n
tokens touched, counted in an untimed forward of the timed draws. This random model does not
route as independent tokens over a uniform router: tokens of one row pick alike (their hidden
states presumably share the average of the row's context that the near-uniform attention of
random weights takes) and the deeper layers prefer a few experts, so the count depends on the
rows, not only on B × n. The pricing's law carries both as routing statistics
(`moe_ops.expected_experts`: a Zipf `skew` of expert popularity and a `row_exponent` α, a row's n
tokens counting as n^α independent draws). They are measured on a separate calibration set
(other contexts and tokens: `CALIBRATION_SEED`, never timed): the (skew, α) whose law best meets
the calibration counts in relative least squares over the grid's shapes (`routing_statistics`),
then set on the MoE's spec (`ModelSpec.routing_skew`, `routing_row_exponent`) for the graded
prediction. The same pricing under the uniform independent law is shown beside it.

Predictions are the profile as it stands: nothing is fitted to these rows. The pricing's eager
host term for an MoE layer (`moe_ops.moe_host_layers`: its router and per touched expert, in the
runtime's per-layer host time) comes from the separate micro-benchmark `host_ratios` below, not
from this grid; `--host` runs it alone. The machine-drift probe (cpu-2core's own tiny-code points
re-timed, now over then; the geometric mean of a probe before and after the grid) is printed, and
the errors are shown both raw and with the prediction scaled by it ("× drift": validate's
correction for a machine running slower than when it was profiled). The × drift columns are the
ones to judge the pricing by, as validate does: the raw ones also carry the machine's speed. The
probe itself moves with the shared machine's load (1.19-1.49 within minutes), so the last
columns price the MoE over its dense twin timed in the same process, a ratio no machine speed
enters: what the MoE pricing adds to the dense pricing, checked alone.

Run alone: `.venv/bin/python benchmarks/moe_cpu.py` (writes benchmarks/results/moe-cpu.txt).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from provenance import (  # benchmarks/provenance.py (scripts run from benchmarks/)
    commit,
    write_results,
)
from rich.table import Table

from specscope.executor.batched_transformer import batch_target
from specscope.executor.runtime import Runtime
from specscope.hw_profiles import load_profile
from specscope.hw_profiles.cost import CostModel
from specscope.models.catalogue import get_model
from specscope.models.moe_ops import EXPERT_HOST_LAYERS, ROUTER_HOST_LAYERS, expected_experts
from specscope.models.spec import ModelSpec
from specscope.models.torch.moe import MoEFeedForward
from specscope.profiling.drift import machine_drift
from specscope.profiling.measure import WARMUP_FIRST, binary_tree, build, provenance, warmups

NS = (1, 2, 4, 8, 16, 32)
BATCHES = (1, 4)
CONTEXT = 128
TIMED_SEED = 1
CALIBRATION_SEED = 2
RESULTS = Path(__file__).parent / "results" / "moe-cpu.txt"
Shape = tuple[int, int]
Draw = list[torch.Tensor]


def moe_twin(dense: ModelSpec) -> ModelSpec:
    """`dense` with every layer's SwiGLU replaced by 16 experts top-2 of half its width."""
    return dataclasses.replace(dense, name=f"{dense.name}-moe16", d_ff=0, n_experts=16,
                               experts_per_token=2, d_expert=dense.d_ff // 2)


class Steps:
    """The grid's steps on one model: B = 1 through `CachedModel.verify`, B > 1 through the
    batched target, every row after its own random context of `CONTEXT` tokens."""

    def __init__(self, spec: ModelSpec, runtime: Runtime, seed: int) -> None:
        room = CONTEXT + max(NS) + 1
        generator = torch.Generator().manual_seed(seed)
        self.single = build(spec, runtime, room)
        self.single.prefill(torch.randint(0, spec.vocab_size, (CONTEXT + 1,),
                                          generator=generator), room)
        self.batched = batch_target(build(spec, runtime, room), max(BATCHES), room)
        for row in range(max(BATCHES)):
            self.batched.admit(row, room)
            self.batched.prefill(row, torch.randint(0, spec.vocab_size, (CONTEXT,),
                                                    generator=generator))

    def call(self, shape: Shape, draw: Draw) -> Callable[[], object]:
        """One verify step of `shape` (B, n) on the rows' tokens `draw`."""
        b, n = shape
        tree = binary_tree(n)
        if b == 1:
            return lambda: self.single.verify(draw[0], tree)
        return lambda: self.batched.verify(range(b), draw, [tree] * b)

    def modules(self) -> list[MoEFeedForward]:
        """The MoE layers of both models (the single and the batched one)."""
        return [m for model in (self.single.model, self.batched.model) for m in model.modules()
                if isinstance(m, MoEFeedForward)]


def draws(vocab: int, count: int, seed: int) -> dict[Shape, list[Draw]]:
    """`count` draws of token ids per shape, each row and node its own (seeded)."""
    generator = torch.Generator().manual_seed(seed)
    return {(b, n): [[torch.randint(0, vocab, (n,), generator=generator) for _ in range(b)]
                     for _ in range(count)] for b in BATCHES for n in NS}


def measure(models: dict[str, Steps], inputs: dict[Shape, list[Draw]], runtime: Runtime
            ) -> dict[str, dict[Shape, float]]:
    """Median seconds of each model's verify step per shape, repeat r on draw r, the repeats
    interleaved over the shapes and the models (a burst of load from elsewhere hits every
    shape of both)."""
    for i, (shape, shape_draws) in enumerate(inputs.items()):
        for steps in models.values():
            for w in range(WARMUP_FIRST if i == 0 else warmups(runtime)):
                steps.call(shape, shape_draws[w % len(shape_draws)])()
    times = {name: {shape: [] for shape in inputs} for name in models}
    for r in range(len(next(iter(inputs.values())))):
        for shape, shape_draws in inputs.items():
            for name, steps in models.items():
                call = steps.call(shape, shape_draws[r])
                start = time.perf_counter()
                call()
                times[name][shape].append(time.perf_counter() - start)
    return {name: {shape: statistics.median(ts) for shape, ts in by_shape.items()}
            for name, by_shape in times.items()}


def touched_experts(steps: Steps, inputs: dict[Shape, list[Draw]], d_model: int
                    ) -> dict[Shape, float]:
    """Mean over MoE layers and draws of the distinct experts each shape's tokens touch (one
    untimed forward per draw)."""
    counts: list[int] = []

    def count(layer: MoEFeedForward, args: tuple[torch.Tensor], _: torch.Tensor) -> None:
        experts, _weights = layer.route(args[0].reshape(-1, d_model))
        counts.append(int(experts.unique().numel()))

    hooks = [m.register_forward_hook(count) for m in steps.modules()]
    out = {}
    for shape, shape_draws in inputs.items():
        counts.clear()
        for draw in shape_draws:
            steps.call(shape, draw)()
        out[shape] = statistics.mean(counts)
    for hook in hooks:
        hook.remove()
    return out


def host_ratios(runtime: Runtime, repeats: int = 40, nodes: int = 16) -> tuple[float, float]:
    """The eager MoE layer's host issue time in dense layers' host time: (per touched expert,
    fixed per layer beyond the SwiGLU it replaces), measured on tiny-code's layout at width 8
    (every kernel a few elements, so a step is its host time).

    The dense layer's host time is the slope over 2 and 6 layers of a 1-node verify step (what
    a profile's `host_layer_us` prices). The MoE model (4 layers, 16 experts of width 4, top-2)
    runs its real router, then a forced routing of `nodes` tokens onto m ∈ {2, 4, 8, 16}
    experts; its step minus the 4-layer dense one's at the same `nodes`, per layer, is a line in
    m: slope the per-expert time, intercept the fixed. All steps interleaved, medians."""
    tiny = dataclasses.replace(get_model("tiny-code"), name="tiny-host", d_model=8, n_heads=2,
                               n_kv_heads=2, head_dim=4, d_ff=8, vocab_size=64)
    moe = dataclasses.replace(tiny, d_ff=0, n_experts=16, experts_per_token=2, d_expert=4)
    room = CONTEXT + nodes + 1
    calls: dict[tuple[str, int], Callable[[], object]] = {}

    def step(spec: ModelSpec, n: int) -> tuple[object, Callable[[], object]]:
        model = build(spec, runtime, room)
        model.prefill(torch.zeros(CONTEXT + 1, dtype=torch.long), room)
        return model, lambda: model.verify(torch.arange(n), binary_tree(n))

    for layers in (2, 6):
        calls["dense", layers] = step(dataclasses.replace(tiny, n_layers=layers), 1)[1]
    calls["dense", 4] = step(tiny, nodes)[1]
    for m in (2, 4, 8, 16):
        model, calls["moe", m] = step(moe, nodes)
        chosen = torch.stack([torch.arange(nodes) % m, (torch.arange(nodes) + 1) % m], 1)
        for layer in model.model.modules():
            if isinstance(layer, MoEFeedForward):
                layer.route = _forced(layer.route, chosen)
    for call in calls.values():
        for _ in range(WARMUP_FIRST):
            call()
    times: dict[tuple[str, int], list[float]] = {key: [] for key in calls}
    for _ in range(repeats):
        for key, call in calls.items():
            start = time.perf_counter()
            call()
            times[key].append(time.perf_counter() - start)
    med = {key: statistics.median(ts) for key, ts in times.items()}
    layer_s = (med["dense", 6] - med["dense", 2]) / 4
    ms = (2, 4, 8, 16)
    slope, intercept = np.polyfit(ms, [(med["moe", m] - med["dense", 4]) / 4 for m in ms], 1)
    return float(slope / layer_s), float(intercept / layer_s)


def _forced(route: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
            chosen: torch.Tensor) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """`route` run for its cost, its experts replaced by `chosen`."""

    def forced(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _experts, weights = route(x)
        return chosen, weights

    return forced


def routing_statistics(spec: ModelSpec, counts: dict[Shape, float]) -> tuple[float, float]:
    """The routing statistics (skew, row exponent) of `spec`'s router from expert `counts` per
    (B, n): the grid point (skew in 0..3 by 0.01, α in 0.01..1 by 0.01) whose
    `expected_experts` meets the counts best in relative least squares."""
    shapes = list(counts)
    rows = np.array([b for b, _ in shapes], dtype=float)
    tokens = np.array([b * n for b, n in shapes], dtype=float)
    seen = np.array([counts[s] for s in shapes])
    best = (np.inf, 0.0, 1.0)
    for skew in np.round(np.arange(0.0, 3.0001, 0.01), 2):
        for alpha in np.round(np.arange(0.01, 1.0001, 0.01), 2):
            law = expected_experts(spec.n_experts, spec.experts_per_token, tokens, skew, rows,
                                   alpha)
            loss = float(np.sum((law / seen - 1) ** 2))
            if loss < best[0]:
                best = (loss, float(skew), float(alpha))
    return best[1], best[2]


PRICING_FILES = ("specscope/models/ops.py", "specscope/models/moe_ops.py",
                 "specscope/hw_profiles/cost.py")
"""The pricing code the predictions come from (the header names its last commit)."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--calibration-draws", type=int, default=8)
    ap.add_argument("--host", action="store_true",
                    help="run the host micro-benchmark alone (host_ratios) and print it")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    runtime = Runtime.cpu()
    if args.host:
        expert, fixed = host_ratios(runtime)
        print(f"per touched expert {expert:.3f}, fixed {fixed:.3f} dense layers' host time "
              f"(moe_ops: {EXPERT_HOST_LAYERS}, {ROUTER_HOST_LAYERS})")
        return
    profile = load_profile("cpu-2core")
    dense = get_model("tiny-code")
    moe = moe_twin(dense)
    timed = draws(dense.vocab_size, args.repeats, TIMED_SEED)
    calibration = draws(dense.vocab_size, args.calibration_draws, CALIBRATION_SEED)
    drift_before = machine_drift(profile, "tiny-code", runtime)
    models = {spec.name: Steps(spec, runtime, TIMED_SEED) for spec in (moe, dense)}
    measured = measure(models, timed, runtime)
    touched = touched_experts(models[moe.name], timed, moe.d_model)
    del models
    drift_after = machine_drift(profile, "tiny-code", runtime)
    calibrated = touched_experts(Steps(moe, runtime, CALIBRATION_SEED), calibration,
                                 moe.d_model)
    skew, alpha = routing_statistics(moe, calibrated)
    routed = dataclasses.replace(moe, routing_skew=skew, routing_row_exponent=alpha)
    host = host_ratios(runtime)
    table = Table(title=f"verify forward after {CONTEXT} tokens, eager float32, 1 thread: "
                        f"{moe.name} (16 experts × 344, top-2) and its dense twin {dense.name} "
                        f"(d_ff 688), measured against cpu-2core's CostModel")
    drift = float(np.sqrt(drift_before * drift_after))
    for column in ("B", "n", "experts (measured; uniform)", "MoE ms", "predicted", "error",
                   "× drift", "uniform × drift", "dense ms", "predicted", "error", "× drift",
                   "MoE / dense", "predicted", "error"):
        table.add_column(column, justify="right")
    errors: dict[str, list[float]] = {moe.name: [], dense.name: []}
    drifted: dict[str, list[float]] = {moe.name: [], dense.name: []}
    priced = {spec.name: CostModel(profile, spec, runtime="eager") for spec in (routed, dense)}
    uniform = CostModel(profile, moe, runtime="eager")
    law_errors, uniform_errors, ratio_errors = [], [], []
    for b in BATCHES:
        for n in NS:
            law = float(expected_experts(16, 2, b * n, skew, b, alpha))
            flat = float(expected_experts(16, 2, b * n))
            law_errors.append(law / touched[b, n] - 1)
            row = [str(b), str(n), f"{touched[b, n]:.1f} ({law:.1f}; {flat:.1f})"]
            for spec in (routed, dense):
                real = measured[spec.name][b, n]
                predicted = float(priced[spec.name].forward_time(b, n, CONTEXT))
                errors[spec.name].append(predicted / real - 1)
                drifted[spec.name].append(predicted * drift / real - 1)
                row += [f"{real * 1e3:.2f}", f"{predicted * 1e3:.2f}",
                        f"{errors[spec.name][-1]:+.0%}", f"{drifted[spec.name][-1]:+.0%}"]
                if spec.moe:
                    flat_s = float(uniform.forward_time(b, n, CONTEXT))
                    uniform_errors.append(flat_s * drift / real - 1)
                    row.append(f"{uniform_errors[-1]:+.0%}")
            real_ratio = measured[moe.name][b, n] / measured[dense.name][b, n]
            ratio = (float(priced[routed.name].forward_time(b, n, CONTEXT))
                     / float(priced[dense.name].forward_time(b, n, CONTEXT)))
            ratio_errors.append(ratio / real_ratio - 1)
            row += [f"{real_ratio:.2f}×", f"{ratio:.2f}×", f"{ratio_errors[-1]:+.0%}"]
            table.add_row(*row)
    table.caption = "\n".join(
        f"{name}: median |error| {np.median(np.abs(e)):.0%}, worst {np.max(np.abs(e)):.0%}; "
        f"prediction × drift {drift:.2f}: median {np.median(np.abs(d)):.0%}, worst "
        f"{np.max(np.abs(d)):.0%}" for (name, e), d in zip(errors.items(), drifted.values(),
                                                          strict=True))
    table.caption += (
        f"\n{moe.name}'s routing measured on the calibration set: skew {skew:.2f}, row "
        f"exponent {alpha:.2f}; its law's expert count over the timed draws' count: median "
        f"{np.median(np.abs(law_errors)):.0%}, largest "
        f"{law_errors[int(np.argmax(np.abs(law_errors)))]:+.0%}\n"
        f"{moe.name} under the uniform independent law × drift: median "
        f"{np.median(np.abs(uniform_errors)):.0%}, worst {np.max(np.abs(uniform_errors)):.0%}"
        f"\nMoE over its dense twin, timed in the same process (no machine drift): median "
        f"|error| {np.median(np.abs(ratio_errors)):.0%}, worst "
        f"{np.max(np.abs(ratio_errors)):.0%}")
    prov = provenance(runtime)
    header = (f"# benchmarks/moe_cpu.py on {prov['device']}, torch {prov['torch']}, "
              f"{prov['date']}; median of {args.repeats} repeats per cell, each on its own "
              f"seeded token draw (seed {TIMED_SEED}), interleaved over the cells; experts "
              f"counted on those draws (calibration: {args.calibration_draws} draws of seed "
              f"{CALIBRATION_SEED}, untimed)\n"
              f"# machine drift (cpu-2core's tiny-code steps, now / then) {drift_before:.2f} "
              f"before, {drift_after:.2f} after; '× drift': the error of the prediction scaled "
              f"by their geometric mean (the columns to judge the pricing by)\n"
              f"# routing statistics from the calibration counts (routing_statistics): skew "
              f"{skew:.2f}, row exponent {alpha:.2f}\n"
              f"# host micro-benchmark (host_ratios) now: an expert {host[0]:.3f}, the router "
              f"{host[1]:.3f} dense layers' host time; the pricing's: {EXPERT_HOST_LAYERS}, "
              f"{ROUTER_HOST_LAYERS}\n"
              f"# pricing: ops.py, moe_ops.py and cost.py as of commit {commit(*PRICING_FILES)}\n"
              f"# command: .venv/bin/python benchmarks/moe_cpu.py --repeats {args.repeats}\n")
    write_results(args.out, header, table, 190)


if __name__ == "__main__":
    main()
