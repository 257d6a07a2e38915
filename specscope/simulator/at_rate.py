"""`optimize-tree --rate`: the tree for a request rate, chosen by simulating the load.

A tree's worth under load depends on the batch the load builds, and the batch on the tree: a
tree that shortens every step also drains the queue. So the choice runs in three steps:

1. plain decoding is simulated at the rate, which gives the mean batch the load builds without
   speculation;
2. every method optimises its tree priced at that batch (`optimize-tree --batch`);
3. each distinct tree is simulated at the rate under the static policy, with SmartSpec (which
   picks each step's draft length by the same pricing, zero included) and plain decoding beside
   them, all on the same seeded arrivals.

The choice is the candidate with the lowest mean request latency among those that beat plain
decoding by `run.speculation_pays`'s rule; plain decoding when none does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specscope.errors import InputError
from specscope.optimizers.run import OptimizeRequest, OptimizeResult, run_optimize
from specscope.simulator.run import SimulateRequest, run_simulation, speculation_pays
from specscope.trace import read_trace
from specscope.trace.sources import NO_DRAFTER

MAX_TREES = 4
"""Distinct trees simulated (the best methods' first): each costs one simulation."""
AT_RATE_KEYS = ("throughput_tok_s", "mean_tpot_ms", "mean_ttft_ms", "mean_latency_s",
                "p99_latency_s", "mean_batch")
"""What each candidate's row reports."""


@dataclass(frozen=True)
class Candidate:
    """One way of serving the rate: plain decoding, a method's tree (static), or SmartSpec."""

    name: str
    policy: str
    summary: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "policy": self.policy,
                **{k: self.summary[k] for k in AT_RATE_KEYS}}


@dataclass(frozen=True)
class RateChoice:
    """The trees optimised at the load's batch, every candidate simulated, and the choice."""

    rate: float
    batch: int
    result: OptimizeResult
    candidates: list[Candidate]

    @property
    def plain(self) -> Candidate:
        return self.candidates[0]

    @property
    def best(self) -> Candidate:
        """The lowest mean latency among the candidates that beat plain decoding
        (`run.speculation_pays`); plain decoding when none does."""
        paying = [c for c in self.candidates[1:]
                  if speculation_pays(c.summary, self.plain.summary)]
        return min(paying, key=lambda c: c.summary["mean_latency_s"], default=self.plain)

    @property
    def verdict(self) -> str:
        best, plain = self.best, self.plain
        at = f"at {self.rate:g} requests/s (plain decoding's mean batch {self.batch})"
        if best is plain:
            return f"no speculation {at}: plain decoding finishes requests soonest"
        gain = plain.summary["mean_latency_s"] / best.summary["mean_latency_s"]
        return f"speculate {at} with {best.name}: requests finish {gain:.2f}× as fast"

    def to_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "batch": self.batch, "best": self.best.name,
                "speculation_pays": self.best is not self.plain, "verdict": self.verdict,
                "candidates": [c.to_dict() for c in self.candidates],
                "optimized": self.result.to_dict()}


def choose_at_rate(req: OptimizeRequest, rate: float, requests: int, seed: int = 0,
                   progress: Callable[[int, int], None] | None = None,
                   prompt_len: str | None = None, output_len: str | None = None
                   ) -> RateChoice:
    """The tree for `rate` arrivals per second (module docstring), each simulation serving
    `requests` seeded arrivals of `prompt_len` and `output_len` tokens (`simulate`'s; None:
    its defaults) under the request's deployment, its max batch included;
    `progress(done, total)` after each simulation."""
    if not rate > 0:
        raise InputError(f"--rate must be > 0 requests/s, got {rate}")
    if req.deployment.batch > 1:
        raise InputError(f"--batch {req.deployment.batch} fixes the batch that --rate "
                         "chooses by simulating the load; give one of them")
    alone = run_optimize(req)
    trace = None if req.trace_path is None else read_trace(req.trace_path)
    budget = req.budget or max(req.budgets or [1])
    drafter = (req.deployment.drafter if trace is not None or alone.drafter == NO_DRAFTER
               else alone.drafter)
    sim = SimulateRequest(
        deployment=dataclasses.replace(req.deployment, target=alone.target, drafter=drafter),
        trace=trace, source=alone.source,
        acceptance=None if req.acceptance is None else tuple(req.acceptance), rate=rate,
        system=req.system, system_options=req.system_options, prompt_len=prompt_len,
        output_len=output_len, requests=requests, seed=seed, budget=budget,
        max_depth=budget if req.max_depth is None else req.max_depth, against_plain=False)
    total = 2 + MAX_TREES
    plain = run_simulation(dataclasses.replace(sim, policy="none"))
    batch = max(1, round(plain.summary["mean_batch"] or 1))
    if progress:
        progress(1, total)
    result = alone if batch == 1 else run_optimize(dataclasses.replace(
        req, deployment=dataclasses.replace(req.deployment, batch=batch)))
    candidates = [Candidate("plain decoding", "none", plain.summary)]
    seen = set()
    for score in result.comparison.scores:
        if len(seen) == MAX_TREES:
            break
        key = score.tree.to_json()
        if key in seen or score.tree.size < 2:
            continue
        seen.add(key)
        run = run_simulation(dataclasses.replace(sim, policy="static", tree=score.tree))
        candidates.append(Candidate(f"{score.algo} (n = {score.tree.size})", "static",
                                    run.summary))
        if progress:
            progress(1 + len(seen), total)
    smart = run_simulation(dataclasses.replace(sim, policy="smartspec"))
    candidates.append(Candidate("smartspec", "smartspec", smart.summary))
    if progress:
        progress(total, total)
    return RateChoice(rate, batch, result, candidates)
