"""What `profile-hw` measures of serving on this machine: the host work each step and each
sequence pays in specscope's continuous-batching server beyond what the simulator already
prices (`measure_serving`), and the first forward's extra time after an idle gap
(`measure_wake`).

The simulator prices a step of the batching server (`simulator/pricing.BatchPricer`) from the
fitted forwards and the decode loop's host terms (`measure.measure_loop`: drafting, the
verification's tensors, the bookkeeping of each speculating sequence). The server does more on
the host every step: it admits and plans, drafts row by row, builds the batch's inputs, and
verifies, commits and updates the drafter of every running sequence, speculating or not. Here
the real server (`serving.Server` over `batch_target`, n-gram drafting) serves requests that all
arrive at once, with plain decoding (`none`) and a static chain, at batches `SERVE_BATCHES`;
every step is timed (`Planner.stepped`) and priced by the profile just fitted, and the
difference is fitted by least squares as

    measured / d − priced = serve_step + serve_row × (sequences that do not speculate)
                                       + spec_row × (sequences that speculate),

the price leaving out the decode loop's bookkeeping of a speculating sequence (`step`), which
`spec_row` replaces: the single-sequence loop's figure does not carry over to the server's rows
(H100, 2026-11-26: with `step`, 385 µs there, a static n-gram chain was priced 49% over its
real TPOT at batch 2; the server measured 156 µs against the loop's 301 in the next profile),

where d is the machine's drift since the grid the fit was made from (the grid's own small
steps re-timed before and after each phase, `drift.retime`: a shared VM's speed moves by
10-20% within the two minutes between, which would otherwise be fitted as the server's work),
the server's own work per step, per plain sequence and per speculating one
(`LoopCosts.serve_step`, `.serve_row`, `.spec_row`; each at least 0); it also marks
`pads_context` under eager (the batched target's eager pass reads every row up to the longest
row's context; graph and compile read the whole cache, which this does not price) and
`level_per_row` (each row's drafter does a draft level's host work itself). Then the server
drafts the static chain from the zoo's draft model, its rows sharing one batched draft model as
serve-bench runs them (`BatchedDraft`: each row's thread hands its level's nodes over and waits
for one forward of all rows), and what those steps take beyond their price with the terms just
fitted is fitted per row and draft level (`shared_row`). The prompts are the zoo's `docstring`
set, which `validate` and `validate --load` do not use by default, so a validation never
re-prices the steps that priced it.

`measure_wake`: the same target prefills a prompt of `WAKE_PROMPT` tokens warm, then again
right after each gap of `WAKE_GAPS` seconds in which the process runs nothing (it sleeps); the
extra time over the warm prefill, median of `WAKE_REPEATS`, is the profile's `[idle]` table
(`hw_profiles/wake.py`). On this project's 2-core CPU VM the shipped `cpu-2core` holds 3.2 ms
after 50 ms and 4.0 ms after 1.6 s; an earlier profile of the same VM held 5.5 and 52 ms for a
97-token prefill of 12 ms, when the VM paged out what was not touched.

SmartSpec chooses each step's length by pricing every length on the profile; what that costs
the server is timed in it too (`Policy.plan` of a SmartSpec planner at each batch of
`SERVE_BATCHES`) and fitted as `choose_step` + `choose_row` × running sequences.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from specscope.executor.runtime import Runtime
from specscope.hw_profiles import CostModel, HardwareProfile
from specscope.hw_profiles.loop import LoopCosts
from specscope.hw_profiles.wake import Wake
from specscope.models import get_model
from specscope.names import MODEL_FREE_SOURCES
from specscope.profiling.drift import retime
from specscope.profiling.measure import BOOKKEEPING_TARGET, Point
from specscope.tree import Tree

if TYPE_CHECKING:
    from specscope.draft import DraftedTree
    from specscope.executor.drafters import Drafter
    from specscope.executor.session import Session
    from specscope.executor.targets import Model
    from specscope.executor.verify import Verdict
    from specscope.serving.planners import Planner
    from specscope.serving.served import Served
    from specscope.simulator.pricing import BatchPricer

SERVE_BATCHES = (1, 2, 4)
"""Batch sizes the server runs at (every request arrives at once, so the batch stays full)."""
SERVE_PROMPTS = "builtin:docstring"
"""The prompts served (not the prompt sets `validate` uses by default)."""
SERVE_REQUESTS_PER_ROW = 3
"""Requests per batch row in each run."""
SERVE_OUTPUT = 32
"""Output tokens per request (EOS ignored)."""
CHAIN = 4
"""Drafts of the static policy's chain (and the longest SmartSpec chooses among)."""
CHOOSE_ACCEPTANCE = 0.5
"""The acceptance SmartSpec chooses by while its choice is timed (its cost does not depend on
it: every length is priced each step)."""
WAKE_GAPS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
"""Idle gaps (seconds) after which the first forward is timed."""
WAKE_PROMPT = 96
"""Prompt tokens of that forward."""
WAKE_REPEATS = 3
"""Timings per gap (the median is kept)."""


def measure_serving(hw: HardwareProfile, runtime: Runtime,
                    batches: Sequence[int] = SERVE_BATCHES, then: Sequence[Point] = ()
                    ) -> LoopCosts:
    """`hw.loop` with the batching server's terms measured in it (module docstring) under
    `runtime`, whose section of `hw` prices the forwards; `then` are the grid's points the
    fit was made from, re-timed around each phase so that the machine's drift since the grid
    (`drift.retime`) is not taken for the server's work."""
    from specscope.executor.session import draft_model_for, load_session
    from specscope.serving.planners import make_planner
    from specscope.simulator.pricing import BatchPricer

    session = load_session(BOOKKEEPING_TARGET, draft_model_for(["draft"]), runtime)
    target, spec = session.target, get_model(BOOKKEEPING_TARGET)
    probed = [BOOKKEEPING_TARGET, session.draft.name] if session.draft else [BOOKKEEPING_TARGET]
    probes = [retime(then, probed, runtime, max(batches)) or 1.0]

    def drift() -> float:
        """The geometric mean of the probes before and after the phase just run."""
        probes.append(retime(then, probed, runtime, max(batches)) or 1.0)
        return math.sqrt(probes[-2] * probes[-1])

    prompts = [p for p in session.prompts(SERVE_PROMPTS)
               if 2 <= len(p) <= spec.max_seq_len - SERVE_OUTPUT - CHAIN - 1]
    unserved = dataclasses.replace(hw, loop=dataclasses.replace(
        hw.loop, serve_step=0.0, serve_row=0.0, shared_row=0.0, spec_row=0.0,
        pads_context=runtime.kind == "eager", level_per_row=True))
    pricer = BatchPricer(CostModel(unserved, spec, runtime=runtime.kind), None, "ngram")
    rows: list[tuple[float, float, float]] = []
    timed_s: list[tuple[float, float]] = []
    for policy in ("none", "static"):
        tree = Tree.chain(CHAIN, "ngram") if policy == "static" else None
        for batch in batches:
            planner, max_tree = make_planner(policy, "ngram", CHAIN + 1, CHAIN, tree)
            timed = _Timed(planner, pricer)
            _serve(target, prompts, batch, timed, max_tree)
            for plain, speculating, _, measured, priced in timed.steps[1:]:  # 1st warms up
                rows.append((1.0, plain, speculating))
                timed_s.append((measured, priced))
    d = drift()
    step, row, spec_row = _nonnegative_lstsq(np.array(rows),
                                             np.array([m / d - p for m, p in timed_s]))
    choosing, spent = _choosing(target, prompts, batches, pricer)
    choose_step, choose_row = _nonnegative_lstsq(choosing, spent / drift())
    served = dataclasses.replace(unserved.loop, serve_step=step, serve_row=row, spec_row=spec_row,
                                 choose_step=choose_step, choose_row=choose_row)
    if not any(b > 1 for b in batches):  # a lone row shares no draft forward: not measured
        return served
    levels, timed_steps = _sharing(session, prompts, batches,
                                   dataclasses.replace(unserved, loop=served))
    d = drift()
    shared = _nonnegative_lstsq(levels[:, None], timed_steps[:, 0] / d - timed_steps[:, 1])[0]
    return dataclasses.replace(served, shared_row=shared)


def _sharing(session: Session, prompts: Sequence[Sequence[int]], batches: Sequence[int],
             hw: HardwareProfile) -> tuple[np.ndarray, np.ndarray]:
    """The server drafting a static chain from the session's draft model, its rows sharing it
    as serve-bench runs them (`BatchedDraft`), at each batch of two or more (a lone row shares
    nothing): per step, the draft-model levels its rows share, and its (measured, priced on
    `hw`) seconds."""
    from specscope.executor.batched_draft import BatchedDraft
    from specscope.executor.batched_transformer import batch_target
    from specscope.executor.drafters import make_drafter
    from specscope.serving.planners import make_planner
    from specscope.simulator.pricing import BatchPricer

    assert session.draft is not None
    levels, seconds = [], []
    for batch in (b for b in batches if b > 1):
        shared = BatchedDraft(batch_target(session.draft, batch))
        drafters = [make_drafter("draft", session.target.vocab_size, draft_model=shared.row(r))
                    for r in range(batch)]
        source = drafters[0].source
        kind = session.runtime.kind
        pricer = BatchPricer(CostModel(hw, get_model(session.target.name), runtime=kind),
                             CostModel(hw, get_model(session.draft.name), runtime=kind), source)
        planner, max_tree = make_planner("static", source, CHAIN + 1, CHAIN,
                                         Tree.chain(CHAIN, source), run=shared.run)
        shared.model.prepare(max_tree)
        timed = _Timed(planner, pricer)
        try:
            _serve(session.target, prompts, batch, timed, max_tree, drafters)
        finally:
            shared.close()
        for _, _, row_levels, measured, priced in timed.steps[1:]:
            levels.append(row_levels)
            seconds.append((measured, priced))
    return np.array(levels, dtype=float), np.array(seconds)


def _choosing(target: Model, prompts: Sequence[Sequence[int]], batches: Sequence[int],
              pricer: BatchPricer) -> tuple[np.ndarray, np.ndarray]:
    """SmartSpec's choice timed in the server at each batch: rows (1, running sequences) and
    the seconds of each step's `Policy.plan` (the first step of a run warms up)."""
    import time

    from specscope.serving.planners import PolicyPlanner, make_planner
    from specscope.trace import AcceptanceModel

    rows, seconds = [], []
    for batch in batches:
        planner, max_tree = make_planner("smartspec", "ngram", CHAIN + 1, CHAIN,
                                         acceptance=AcceptanceModel.from_vector(
                                             [CHOOSE_ACCEPTANCE], "ngram"), pricer=pricer)
        assert isinstance(planner, PolicyPlanner)
        policy, timed = planner.policy, []

        def plan(view, policy=policy, timed=timed):
            start = time.perf_counter()
            out = type(policy).plan(policy, view)
            timed.append((len(view.slots), time.perf_counter() - start))
            return out

        policy.plan = plan
        _serve(target, prompts, batch, planner, max_tree)
        for running, spent in timed[1:]:
            rows.append((1.0, running))
            seconds.append(spent)
    return np.array(rows), np.array(seconds)


def _serve(target: Model, prompts: Sequence[Sequence[int]], batch: int, planner: Planner,
           max_tree: int, drafters: Sequence[Drafter] | None = None) -> None:
    """`SERVE_REQUESTS_PER_ROW` × `batch` requests of `SERVE_OUTPUT` tokens, all arriving at
    once, served with `planner` at batch `batch` by `drafters` (one per row; default n-gram)."""
    from specscope.executor.batched_transformer import batch_target
    from specscope.executor.drafters import make_drafter
    from specscope.serving.bench import prompted_groups
    from specscope.serving.server import Server
    from specscope.simulator.scheduler import Limits
    from specscope.simulator.workload import LengthDist, WorkloadSpec

    count = batch * SERVE_REQUESTS_PER_ROW
    workload = WorkloadSpec(requests=count, rate=1e9, prompt=LengthDist("fixed", 1.0),
                            output=LengthDist("fixed", float(SERVE_OUTPUT)))
    served = [prompts[i % len(prompts)] for i in range(count)]
    longest = max(map(len, served))
    model = batch_target(target, batch, longest + SERVE_OUTPUT + max_tree)
    model.prepare(max_tree)
    drafters = drafters or [make_drafter("ngram", target.vocab_size) for _ in range(batch)]
    limits = Limits(batch, batch * (longest + max_tree), None, max_tree)
    Server(model, drafters.__getitem__, planner, limits).run(
        prompted_groups(workload, 0, prompts), served)


def measure_wake(runtime: Runtime, gaps: Sequence[int | float] = WAKE_GAPS) -> Wake:
    """The first prefill's extra seconds after each idle gap (module docstring)."""
    import statistics
    import time

    import torch

    from specscope.executor.targets import load_model

    model = load_model(BOOKKEEPING_TARGET, runtime=runtime)[0]
    prompt = torch.arange(WAKE_PROMPT + 1) % model.vocab_size

    def prefill() -> float:
        start = time.perf_counter()
        model.prefill(prompt, WAKE_PROMPT + 1)
        if runtime.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    for _ in range(5):
        prefill()
    warm = statistics.median(prefill() for _ in range(WAKE_REPEATS * 2))
    extra = []
    for gap in gaps:
        timed = []
        for _ in range(WAKE_REPEATS):
            prefill()
            time.sleep(gap)
            timed.append(prefill())
        extra.append(max(0.0, statistics.median(timed) - warm))
    return Wake(tuple(float(g) for g in gaps), tuple(extra))


def _nonnegative_lstsq(x: np.ndarray, y: np.ndarray) -> tuple[float, ...]:
    """Least squares of y ≈ x · c with every c ≥ 0 (scipy's bounded solver)."""
    from scipy.optimize import lsq_linear

    return tuple(float(c) for c in lsq_linear(x, y, bounds=(0.0, np.inf)).x)


class _Timed:
    """A planner that records each step: its sequences that do not speculate and that do, its
    rows' draft levels of a draft model shared with another row, its measured seconds and the
    seconds `pricer` gives it."""

    def __init__(self, inner: Planner, pricer: BatchPricer) -> None:
        self.inner, self.pricer = inner, pricer
        self.steps: list[tuple[int, int, int, float, float]] = []
        self._step: tuple[int, int, int, float] | None = None

    def trees(self, running: Sequence[Served], step: int) -> list[DraftedTree]:
        from specscope.simulator.policies.base import Speculation

        drafted = self.inner.trees(running, step)
        specs = [Speculation(d.tree, d.forwards) for d in drafted]
        contexts = [s.request.context_len for s in running]
        shapes = [self.pricer.shape(s) for s in specs]
        plain = sum(not shape.speculates for shape in shapes)
        rows = Counter(key for shape in shapes for key, _, _ in shape.levels
                       if key[1] not in MODEL_FREE_SOURCES)
        row_levels = sum(count for count in rows.values() if count > 1)  # shared levels
        self._step = (plain, len(shapes) - plain, row_levels,
                      self.pricer.step_s(contexts, specs))
        return drafted

    def observe(self, index: int, served: Served, drafted: DraftedTree, verdict: Verdict
                ) -> None:
        self.inner.observe(index, served, drafted, verdict)

    def stepped(self, seconds: float) -> None:
        if self._step is not None:
            plain, speculating, row_levels, priced = self._step
            self.steps.append((plain, speculating, row_levels, seconds, priced))
            self._step = None
        self.inner.stepped(seconds)
