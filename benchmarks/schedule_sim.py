"""A per-batch speculation schedule against the best constant choice, in simulation, over a
ladder of request rates (issue 42).

For each setup (hardware, target, drafter, acceptance; vLLM's engine and its chain family) the
schedule is `optimize-tree --schedule`'s (`search_schedule` at the workload's mean decoding
context: prompt + half the output), over batch sizes 1..the server's limit. Each rate of the
ladder (a quarter of saturation to twice it; saturation: plain decoding's throughput with every
request arriving at once, over the output length) is simulated with no speculation, with every
constant chain K = 1..budget − 1 as a static tree, and with the schedule, on the same arrivals
(seed 0). The best constant is the chain with the highest simulated throughput at that rate
(chosen after the fact, which no deployment can do: the bar the schedule is held to). Printed:
throughput of each and the schedule's over the best constant's, and at the lowest rate TPOT
against the best constant's TPOT there.

Run: `.venv/bin/python benchmarks/schedule_sim.py` (writes benchmarks/results/schedule-sim.txt).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from provenance import (  # benchmarks/provenance.py (run from benchmarks/)
    commit,
    cpu_name,
    write_results,
)
from rich.table import Table

from specscope.hw_profiles.deployment import deployment
from specscope.interop.schedule_search import search_schedule
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.tree import Tree

RESULTS = Path(__file__).parent / "results" / "schedule-sim.txt"
LADDER = (0.25, 0.5, 1.0, 1.5, 2.0)
PROMPT, OUTPUT = 512, 256
BUDGET = 8


@dataclass(frozen=True)
class Setup:
    """One profile × target × drafter of the benchmark set."""

    hw: str
    target: str
    drafter: str
    acceptance: tuple[float, ...]
    tp: int = 1

    @property
    def name(self) -> str:
        return f"{self.hw} {self.target} tp{self.tp} + {self.drafter}"


SETS = (
    Setup("h100", "llama-3.1-8b", "llama-3.2-1b", (0.6, 0.1)),
    Setup("h100", "llama-3.1-70b", "llama-3.2-1b", (0.7, 0.1), tp=4),
    Setup("a100", "llama-2-7b", "llama-68m", (0.5, 0.1)),
    Setup("h200", "qwen3-30b-a3b", "qwen3-30b-a3b-eagle3", (0.7, 0.1), tp=2),
)


def simulate(s: Setup, rate: float, requests: int, policy: str, **extra: object) -> dict:
    """The summary of one simulation of `s` at `rate` (same arrivals for every policy)."""
    req = SimulateRequest(
        deployment=deployment(s.hw, target=s.target, drafter=s.drafter, tp=s.tp,
                              engine="vllm"),
        acceptance=s.acceptance, rate=rate, requests=requests, prompt_len=str(PROMPT),
        output_len=str(OUTPUT), seed=0, policy=policy, against_plain=False, **extra)
    return run_simulation(req).summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    table = Table(title=f"schedule vs best constant chain (K = 1..{BUDGET - 1}) and no "
                        f"speculation, simulated: vLLM engine, {PROMPT}-token prompts, {OUTPUT} "
                        f"new tokens, {args.requests} arrivals per run, seed 0")
    for col in ("setup", "rate /s", "× sat.", "none tok/s", "best K", "best const tok/s",
                "schedule tok/s", "sched / const", "TPOT ms sched", "TPOT ms const"):
        table.add_column(col, justify="left" if col == "setup" else "right")
    start, worst, tpots = time.perf_counter(), 1e9, []
    for s in SETS:
        dep = deployment(s.hw, target=s.target, drafter=s.drafter, tp=s.tp, engine="vllm")
        found = search_schedule(run_optimize(OptimizeRequest(
            deployment=dep, acceptance=list(s.acceptance), budget=BUDGET, algos="chain",
            context=PROMPT + OUTPUT // 2)).setup, BUDGET, dep.max_batch_for(True) or 256,
            "chain")
        saturated = simulate(s, 1e6, args.requests, "none")["throughput_tok_s"] / OUTPUT
        for i, share in enumerate(LADDER):
            rate = saturated * share
            plain = simulate(s, rate, args.requests, "none")
            constants = {k: simulate(s, rate, args.requests, "static",
                                     tree=Tree.chain(k, f"draft:{s.drafter}"))
                         for k in range(1, BUDGET)}
            best = max(constants, key=lambda k: constants[k]["throughput_tok_s"])
            ours = simulate(s, rate, args.requests, "schedule", schedule=found.schedule)
            ratio = ours["throughput_tok_s"] / constants[best]["throughput_tok_s"]
            worst = min(worst, ratio)
            tpot = ""
            if i == 0:
                fastest = min(constants, key=lambda k: constants[k]["mean_tpot_ms"])
                tpots.append(ours["mean_tpot_ms"] / constants[fastest]["mean_tpot_ms"] - 1)
                tpot = f"{constants[fastest]['mean_tpot_ms']:.2f} (K={fastest})"
            table.add_row(s.name if i == 0 else "", f"{rate:.2f}", f"{share:g}",
                          f"{plain['throughput_tok_s']:,.0f}", str(best),
                          f"{constants[best]['throughput_tok_s']:,.0f}",
                          f"{ours['throughput_tok_s']:,.0f}", f"{ratio:.3f}",
                          f"{ours['mean_tpot_ms']:.2f}" if i == 0 else "", tpot)
    table.caption = (f"schedule over best constant throughput: lowest {worst:.3f}; TPOT at the "
                     f"lowest rate against the constant with the lowest TPOT there: "
                     + ", ".join(f"{t:+.1%}" for t in tpots)
                     + f" · {time.perf_counter() - start:.0f} s of simulation")
    header = (f"# benchmarks/schedule_sim.py: specscope {commit()}, {cpu_name()}"
              f", {time.strftime('%Y-%m-%d')}; command: .venv/bin/python "
              f"benchmarks/schedule_sim.py --requests {args.requests}\n")
    write_results(args.out, header, table, 160)


if __name__ == "__main__":
    main()
