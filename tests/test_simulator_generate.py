"""The simulator at batch 1 against the real executor on this CPU: the simulator, replaying the
trace of the same prompts, takes the same steps over the same trees as `specscope generate`
(zoo tiny-code, n-gram chain). How close its tokens/s comes to the measured ones depends on this
shared machine's load at the moment, so that comparison is `benchmarks/simulator_cpu.py`."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from specscope.hw_profiles.deployment import deployment
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.tree import Tree

PROMPTS, N, MAX_NEW, BUDGET = "builtin:stdlib-code", 6, 64, 6


@pytest.mark.slow
def test_the_simulator_takes_the_steps_generate_takes_on_this_cpu(tmp_path: Path) -> None:
    import torch

    from specscope.executor.collect import collect
    from specscope.executor.generate import generate
    from specscope.executor.runtime import Runtime

    torch.set_num_threads(1)
    runtime = Runtime.cpu()
    trace = collect("tiny-code", "ngram", PROMPTS, N, MAX_NEW, runtime=runtime)
    run = generate("tiny-code", "ngram", PROMPTS, N, MAX_NEW, algo="chain", budget=BUDGET,
                   threads=1, runtime=runtime)
    chain = tmp_path / "chain.json"
    chain.write_text(Tree.chain(BUDGET - 1, "ngram").to_json())
    sim = run_simulation(SimulateRequest(
        deployment=deployment("cpu-2core", target="tiny-code", drafter="ngram", runtime="eager"),
        trace=trace, policy="static", tree=chain, rate=1e-6, requests=N, seed=0))
    starts = sim.events.filter(pl.col("event") == "step_start")
    # replay is exact and n-gram chains are cut alike: the same steps over the same trees
    assert sim.summary["acceptance"] == "replay"
    assert sim.summary["steps"] == run.steps
    assert starts["tokens"].mean() == pytest.approx(run.mean_tree_size, rel=1e-9)
    assert sim.summary["generated_tokens"] == N * MAX_NEW
