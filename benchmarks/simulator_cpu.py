"""The simulator on this CPU: its accuracy against the real executor (issue 12), and its own
speed against the simulator of commit dbb9a71 (issue 42).

Accuracy (`benchmarks/simulator_cpu.py`): `generate` of the zoo's tiny-code with an n-gram chain
of 5 drafts, and the simulator replaying the trace of the same prompts on the cpu-2core profile
(eager, one thread, as the profile was measured). This shared 2-core VM runs 10–40% faster or
slower from one minute to the next, so, as `validate` does, the profile's own measured tiny-code
steps are re-timed before and after each `generate` pass (`machine_drift`: now over then; a
pass's drift is the geometric mean of the two) and the prediction, made for the machine as it
was profiled, is scaled by it pass by pass; the error is the median over interleaved passes.
Decoding only: prefill is excluded from both rates. `tests/test_simulator_generate.py` checks
what does not depend on the machine: the simulator takes the same steps over the same trees as
the real run.

Speed (`benchmarks/simulator_cpu.py speed`): one `run_simulation` of issue 42's workload, h100,
llama-3.1-8b with a llama-3.2-1b draft of acceptance `P`, the static Sequoia tree of 16 tokens
(depth ≤ 8), 3,000 requests of 512-token prompts and 256-token outputs arriving at 50/s, seed 0,
with its plain-decoding comparison (a second simulation, as `simulate` runs by default): the
simulated tokens per wall second of the whole call (checks, workload, both simulations,
metrics). The simulator of commit `BASELINE` runs from a `git worktree` of it, in a child
process like the current one's, the two alternating `ROUNDS` times (each child warms up on a
small run first); the table gives the median and range of each, and their ratio. Both runs'
summaries and per-request, event and time-series tables must be identical (the fields the
baseline reports): the script says so or fails. `tests/test_simulator_speed.py` checks the same
identity over every policy.

Run either alone (`OMP_NUM_THREADS=1 .venv/bin/python benchmarks/simulator_cpu.py [speed]`):
other work on the machine moves every number.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from provenance import REPO, commit  # benchmarks/provenance.py (scripts run from benchmarks/)
from rich.console import Console
from rich.table import Table

PROMPTS, N, MAX_NEW, BUDGET = "builtin:stdlib-code", 6, 64, 6
PASSES = 5
BASELINE = "dbb9a71"
"""The commit before the faster simulator (issue 42, item 4)."""
ROUNDS = 5
P = (0.72, 0.1, 0.04, 0.02, 0.01, 0.01)
"""llama-3.2-1b's acceptance by rank (examples/sweep-sim.toml)."""
SOURCE = "draft:llama-3.2-1b"
TABLES = ("requests", "events", "timeseries")


def simulated_tokens_per_s(trace: object, folder: Path) -> float:
    """Decoding tokens/s the simulator predicts at vanishing load (batch 1)."""
    from specscope.hw_profiles.deployment import deployment
    from specscope.simulator.run import SimulateRequest, run_simulation
    from specscope.tree import Tree

    chain = folder / "chain.json"
    chain.write_text(Tree.chain(BUDGET - 1, "ngram").to_json())
    sim = run_simulation(SimulateRequest(
        deployment=deployment("cpu-2core", target="tiny-code", drafter="ngram", runtime="eager"),
        trace=trace, policy="static", tree=chain, rate=1e-6, requests=N, seed=0))
    r = sim.requests
    return float(r["tokens"].sum() / (r["finish_s"] - r["prefill_done_s"]).sum())


def accuracy() -> None:
    """The simulator's batch-1 decoding rate against `generate`'s (module docstring)."""
    import torch

    from specscope.executor.collect import collect
    from specscope.executor.generate import generate
    from specscope.executor.runtime import Runtime
    from specscope.hw_profiles import load_profile
    from specscope.profiling.drift import machine_drift

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


def measure(out: Path) -> None:
    """In a child: one timed `run_simulation` of the speed workload after a small warm-up, with
    whichever simulator `specscope` imports; its wall seconds and tokens as JSON on stdout, its
    summary and tables under `out`."""
    from specscope.hw_profiles.deployment import deployment
    from specscope.optimizers.sequoia import SequoiaDP
    from specscope.simulator.run import SimulateRequest, run_simulation

    tree = out / "tree.json"
    tree.write_text(SequoiaDP(np.array(P), 16, 8).tree(16, source=SOURCE).to_json())

    def request(requests: int) -> SimulateRequest:
        return SimulateRequest(
            deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b"),
            policy="static", tree=tree, acceptance=P, rate=50.0, requests=requests,
            prompt_len="512", output_len="256", seed=0)

    run_simulation(request(50))
    start = time.perf_counter()
    result = run_simulation(request(3000))
    wall = time.perf_counter() - start
    (out / "summary.json").write_text(json.dumps(result.summary))
    for name in TABLES:
        getattr(result, name).write_parquet(out / f"{name}.parquet")
    print(json.dumps({"wall_s": wall, "tokens": result.summary["generated_tokens"]}))


def _child(source: Path, out: Path) -> dict[str, float]:
    """`measure` in a child process importing `specscope` from `source`."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(source), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, __file__, "_measure", str(out)], env=env, cwd=source,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _differences(old: Path, new: Path) -> list[str]:
    """What the run in `new` reports differently from the one in `old`, on `old`'s fields."""
    import polars as pl

    out = []
    before, after = (json.loads((p / "summary.json").read_text()) for p in (old, new))
    for key, value in before.items():
        mine = after.get(key)
        if isinstance(value, dict) and isinstance(mine, dict):
            mine = {k: mine.get(k) for k in value}
        if mine != value:
            out.append(f"summary {key}: {value!r} against {mine!r}")
    for name in TABLES:
        a, b = (pl.read_parquet(p / f"{name}.parquet") for p in (old, new))
        if not b.select(a.columns).equals(a):
            out.append(f"{name} table differs")
    return out


def speed() -> None:
    """The speed workload under `BASELINE`'s simulator and the current one (module docstring)."""
    head = commit()
    walls: dict[str, list[float]] = {BASELINE: [], "current": []}
    tokens = 0
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree),
                        BASELINE], capture_output=True, check=True)
        try:
            for i in range(ROUNDS):
                order = [BASELINE, "current"] if i % 2 == 0 else ["current", BASELINE]
                for name in order:
                    got = _child(tree if name == BASELINE else REPO,
                                 Path(folder) / f"{name}-{i}")
                    walls[name].append(got["wall_s"])
                    tokens = int(got["tokens"])
            differences = _differences(Path(folder) / f"{BASELINE}-0",
                                       Path(folder) / "current-0")
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                           capture_output=True, check=False)
    table = Table(title=f"specscope simulate: simulated tokens per wall second, {tokens:,} "
                        "tokens (h100, llama-3.1-8b + llama-3.2-1b, static Sequoia tree of 16, "
                        "3,000 requests at 50/s, with the plain comparison)")
    for column in ("simulator", "tokens/s (median)", "tokens/s (range)", "wall s (median)",
                   "ratio"):
        table.add_column(column, justify="right")
    base = tokens / float(np.median(walls[BASELINE]))
    for name, label in ((BASELINE, f"commit {BASELINE}"), ("current", f"{head} + working tree")):
        rates = [tokens / w for w in walls[name]]
        median = tokens / float(np.median(walls[name]))
        table.add_row(label, f"{median:,.0f}", f"{min(rates):,.0f}–{max(rates):,.0f}",
                      f"{np.median(walls[name]):.3f}", f"{median / base:.2f}×")
    table.caption = (f"median of {ROUNDS} alternating runs, each in its own process after a "
                     "warm-up; outputs " + ("identical (summary, requests, events, time series)"
                                            if not differences else "DIFFER"))
    Console(width=110).print(table)
    if differences:
        raise SystemExit("outputs differ from commit " + BASELINE + ":\n" + "\n".join(differences))


if __name__ == "__main__":
    if sys.argv[1:2] == ["_measure"]:
        measure(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["speed"]:
        speed()
    else:
        accuracy()
