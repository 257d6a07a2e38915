"""Speed of the serving simulator: simulated tokens per wall-clock second as batch size and
request count grow.

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/simulator.py
One process, one core. Each row is one whole `run_simulation` (checks, workload, simulation,
metrics tables) of llama-3.1-8b with a llama-3.2-1b draft on h100, the static 7-node tree below
under sampled acceptance (0.6, 0.2, 0.1), 512-token prompts and 256-token outputs, every request
arriving at once so the batch stays at its limit. µs/request staying flat down a column is cost
linear in requests.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from specscope.hw_profiles.deployment import deployment
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.tree import Tree

BATCHES = (1, 8, 32)
REQUESTS = (200, 1000, 5000)
TREE = Tree.from_rank_paths([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)],
                            "draft:llama-3.2-1b")


def measure(tree: Path, batch: int, requests: int) -> tuple[float, int, float]:
    """(wall seconds, simulated tokens, mean batch) of one run."""
    req = SimulateRequest(
        deployment=deployment("h100", target="llama-3.1-8b", drafter="llama-3.2-1b",
                              max_batch=batch),
        policy="static", tree=tree, acceptance=(0.6, 0.2, 0.1), rate=1e6, requests=requests,
        prompt_len="512", output_len="256", seed=0)
    start = time.perf_counter()
    result = run_simulation(req)
    wall = time.perf_counter() - start
    return wall, result.summary["generated_tokens"], result.summary["mean_batch"]


def main() -> None:
    table = Table(title="specscope simulate: simulated tokens per wall-clock second (one core)")
    for col in ("batch", "requests", "mean batch", "tokens", "wall s", "sim tok/s",
                "µs/request"):
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "tree.json"
        tree.write_text(TREE.to_json())
        measure(tree, 8, 50)  # imports and first cost tables out of the timings
        for batch in BATCHES:
            for requests in REQUESTS:
                wall, tokens, mean_batch = measure(tree, batch, requests)
                table.add_row(str(batch), f"{requests:,}", f"{mean_batch:.1f}", f"{tokens:,}",
                              f"{wall:.2f}", f"{tokens / wall:,.0f}",
                              f"{wall / requests * 1e6:,.0f}")
    Console(width=100).print(table)


if __name__ == "__main__":
    main()
