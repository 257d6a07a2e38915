"""What `profile-hw` measures of batched steps: B sequences' trees verified in one forward.

The continuous-batching executor verifies every running sequence's tree in one forward of its
batched target (`executor.batched_transformer.batch_target`), and drafts each level of a draft
model the same way. Both are a batched forward of B rows × n nodes after a context: timed here
through the batched target's own `verify` on every model of the grid (its draft model among
them, at the few nodes a draft level forwards), B rows each holding `context` committed tokens
and a complete binary tree of n nodes, the repeats interleaved over (B, n) as
`measure.measure_steps` does for one sequence. `runtime_fit` fits these points' per-sequence
host terms through `CostModel`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from functools import partial

import torch

from specscope.executor.batched_transformer import batch_target
from specscope.executor.runtime import Runtime
from specscope.models.spec import ModelSpec
from specscope.profiling.measure import (
    WARMUP_FIRST,
    Point,
    binary_tree,
    build,
    release,
    timer,
    warmups,
)


def measure_batched(spec: ModelSpec, runtime: Runtime, contexts: Sequence[int],
                    batches: Sequence[int], ns: Sequence[int], repeats: int) -> list[Point]:
    """Median seconds of one batched verification of `b` rows × binary trees of n nodes after
    each context, for every b of `batches` and n of `ns`, through the batched target's `verify`.
    The rows are sized to the context (a static runtime's step reads each row's whole cache),
    so each context gets a target of its own."""
    points: list[Point] = []
    rows = max(batches)
    for context in contexts:
        release()
        room = context + max(ns) + 1
        target = batch_target(build(spec, runtime, room), rows, room)
        generator = torch.Generator().manual_seed(0)
        for row in range(rows):
            target.admit(row, room)
            target.prefill(row, torch.randint(0, spec.vocab_size, (context,),
                                              generator=generator))
        calls = {}
        for b in batches:
            for n in ns:
                tokens, tree = torch.arange(n) % spec.vocab_size, binary_tree(n)
                calls[b, n] = partial(target.verify, range(b), [tokens] * b, [tree] * b)
        for i, call in enumerate(calls.values()):
            for _ in range(WARMUP_FIRST if i == 0 else warmups(runtime)):
                call()
        times: dict[tuple[int, int], list[float]] = {shape: [] for shape in calls}
        for _ in range(repeats):  # interleaved: a burst of load from elsewhere hits every shape
            for shape, call in calls.items():
                times[shape].append(timer(runtime, call, 1, warmup=0))
        points += [Point(spec.name, runtime.kind, context, n, statistics.median(ms) * 1e-3, b)
                   for (b, n), ms in times.items()]
        del target  # freed before the next one is built
    return points


def batched_jobs(specs: Sequence[ModelSpec], runtimes: Sequence[Runtime],
                 contexts: Sequence[int], batches: Sequence[int], ns: Sequence[int],
                 repeats: int) -> list[tuple[str, Callable[[], list[Point]]]]:
    """`measure_batched` of every model under every runtime, each with what it measures (the
    contexts a model's `max_seq_len` holds; none when `batches` is empty)."""
    jobs: list[tuple[str, Callable[[], list[Point]]]] = []
    for runtime in runtimes if batches else ():
        for spec in specs:
            fit = [c for c in contexts if c + max(ns) + 1 <= spec.max_seq_len]
            if fit:
                jobs.append((f"{spec.name} {runtime.kind} batched",
                             partial(measure_batched, spec, runtime, fit, batches, ns, repeats)))
    return jobs
