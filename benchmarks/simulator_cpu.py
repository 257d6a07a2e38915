"""The simulator at batch 1 against the real executor on this CPU (issue 12): `generate` of the
zoo's tiny-code with an n-gram chain of 5 drafts, and the simulator replaying the trace of the
same prompts on the cpu-2core profile (eager, one thread, as the profile was measured).

This shared 2-core VM runs 10–40% faster or slower from one minute to the next, so, as
`validate` does, the profile's own measured tiny-code steps are re-timed before and after each
`generate` pass (`machine_drift`: now over then; a pass's drift is the geometric mean of the
two) and the prediction, made for the machine as it was profiled, is scaled by it pass by pass;
the error is the median over interleaved passes. Decoding only: prefill is excluded from both
rates. Run it alone (`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/simulator_cpu.py`): other
work on the machine moves every number. `tests/test_simulator_generate.py` checks what does not
depend on the machine: the simulator takes the same steps over the same trees as the real run.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from specscope.executor.collect import collect
from specscope.executor.generate import generate
from specscope.executor.runtime import Runtime
from specscope.hw_profiles import load_profile
from specscope.hw_profiles.deployment import deployment
from specscope.profiling.drift import machine_drift
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.tree import Tree

PROMPTS, N, MAX_NEW, BUDGET = "builtin:stdlib-code", 6, 64, 6
PASSES = 5


def simulated_tokens_per_s(trace: object, folder: Path) -> float:
    """Decoding tokens/s the simulator predicts at vanishing load (batch 1)."""
    chain = folder / "chain.json"
    chain.write_text(Tree.chain(BUDGET - 1, "ngram").to_json())
    sim = run_simulation(SimulateRequest(
        deployment=deployment("cpu-2core", target="tiny-code", drafter="ngram", runtime="eager"),
        trace=trace, policy="static", tree=chain, rate=1e-6, requests=N, seed=0))
    r = sim.requests
    return float(r["tokens"].sum() / (r["finish_s"] - r["prefill_done_s"]).sum())


def main() -> None:
    torch.set_num_threads(1)
    runtime = Runtime.cpu()
    trace = collect("tiny-code", "ngram", PROMPTS, N, MAX_NEW, runtime=runtime)
    profile = load_profile("cpu-2core")
    runs, probes = [], [machine_drift(profile, "tiny-code", runtime)]
    for _ in range(PASSES):
        runs.append(generate("tiny-code", "ngram", PROMPTS, N, MAX_NEW, algo="chain",
                             budget=BUDGET, threads=1, runtime=runtime))
        probes.append(machine_drift(profile, "tiny-code", runtime))
    drifts = [float(np.sqrt(a * b)) for a, b in itertools.pairwise(probes)]
    with tempfile.TemporaryDirectory() as folder:
        predicted = simulated_tokens_per_s(trace, Path(folder))
    table = Table(title=f"simulator (cpu-2core, batch 1) against generate: tiny-code, n-gram "
                        f"chain of {BUDGET - 1}, {N} × {MAX_NEW} tokens of {PROMPTS}")
    for column in ("pass", "measured tok/s", "drift", "predicted / drift", "error"):
        table.add_column(column, justify="right")
    errors = []
    for i, (run, drift) in enumerate(zip(runs, drifts, strict=True)):
        errors.append(predicted / drift / run.tokens_per_s - 1)
        table.add_row(str(i + 1), f"{run.tokens_per_s:.1f}", f"{drift:.3f}",
                      f"{predicted / drift:.1f}", f"{errors[-1]:+.1%}")
    table.caption = (f"predicted {predicted:.1f} tok/s for the machine as profiled; median error "
                     f"{np.median(errors):+.1%} (raw against the fastest pass "
                     f"{predicted / max(r.tokens_per_s for r in runs) - 1:+.1%})")
    Console().print(table)


if __name__ == "__main__":
    main()
