"""What a step of the batched draft pays to hand its rows to threads (issue 25's left-over).

Run: .venv/bin/python benchmarks/draft_pool.py

`BatchedDraft.run` drafts each row in its own thread; the threads are a pool kept until
`close`. The baseline, run in the same process, starts one thread per row every step (what `run`
did before). Jobs here do no work, so the table is the hand-off alone: median µs per step over 7
rounds of 200 steps, after 50 warm-up steps.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

from specscope.executor.batched_draft import BatchedDraft

ROUNDS, STEPS, WARM = 7, 200, 50


def thread_per_row(jobs: list[Callable[[], int]]) -> None:
    """The baseline: a new thread per row, joined."""
    threads = [threading.Thread(target=job, daemon=True) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def per_step_us(step: Callable[[list[Callable[[], int]]], object], rows: int) -> float:
    jobs: list[Callable[[], int]] = [lambda: 1] * rows
    for _ in range(WARM):
        step(jobs)
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(STEPS):
            step(jobs)
        rounds.append((time.perf_counter() - start) / STEPS * 1e6)
    return statistics.median(rounds)


def main() -> None:
    pooled = BatchedDraft(model=None)  # no job asks for a forward
    print("| rows | thread per row (µs/step) | pool (µs/step) | ratio |")
    print("|---:|---:|---:|---:|")
    for rows in (2, 4, 8):
        base, pool = per_step_us(thread_per_row, rows), per_step_us(pooled.run, rows)
        print(f"| {rows} | {base:.0f} | {pool:.0f} | {pool / base:.2f} |")
    pooled.close()


if __name__ == "__main__":
    main()
