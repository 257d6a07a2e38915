"""The simulator's step-time predictor: `BatchPricer`, the `StepPricer` of the server.

A decoding step of a batch costs, from the `CostModel`s of target and drafter (chosen runtime,
tensor parallelism, weight bits):

- drafting, one batched forward per draft level: at level ℓ the requests still drafting (their
  `Speculation.draft_levels` ≥ ℓ, one level per (depth, source) of their tree as
  `Pricing.draft_s` counts them) run one draft-model forward of `b` sequences × the mean number
  of nodes they forward (a tree's level forwards the nodes above it, root first; a level drafted
  past the tree's depth forwards the whole tree) at their mean context, plus the level's host
  work once per batched level; a model-free drafter (n-gram, suffix, recycling) costs its
  propose call (the loop's `drafter[source]`) per request per level (the calls are per request);
- verification: one batched target forward (`verify_time`) of all requests' tree tokens plus the
  host's work around it. Requests' trees and contexts differ, so the forward is priced at
  the batch's mean tree size and mean context: exact for every linear layer (they see the
  total token count) and for the KV reads of attention (the sum of contexts), approximate only
  for attention FLOPs (Σ nᵢ·cᵢ against B·n̄·c̄, small in decoding); exact at batch 1. Every
  forward of B sequences (verification, draft level, plain decoding, prompts) includes the
  host work of each further one, the runtime's per-sequence terms (`CostModel.batch_host_time`,
  fitted by `profile-hw` on batched steps; 0 in a profile without them);
- bookkeeping: the loop's `step` (`Pricing.bookkeeping_s`: the acceptance walk, the commit and
  the drafter's update of one sequence) once per speculating request, as a batched loop runs
  them row by row (`serving/server.py` does), or the server's own measured figure for it,
  `spec_row`, where the profile has one; and the batching server's own work, `serve_step`
  per step and `serve_row` per request that does not speculate (`LoopCosts`: measured by
  `profile-hw` in specscope's server, 0 for an engine or a profile that did not measure them).

A loop whose batched pass pads (`LoopCosts.pads_context`: specscope's batched target under
eager) reads every row's keys up to the longest row's context: its forwards are priced at the
batch's longest context instead of the mean (the linear layers see the same tokens either way).
A loop whose rows do their own draft-level host work (`LoopCosts.level_per_row`: specscope's
server) pays it once per drafting request, not once per batched level, and, when two or more
rows draft a level, each row's hand-over to the one batched draft forward (`shared_row`: a
lone row drafts in the calling thread).

The host terms (per level, per verification, per step) are `Pricing`'s own (`host_terms`).

A step where no request speculates is plain decoding: one target forward of one token each
(`forward_time`) and the server's own work, so at batch 1 a step is `Pricing.autoregressive_s`
and a tree step `Pricing.tree_step_s(tree)`, each plus the server's terms (and `spec_row` in
place of the loop's `step` where measured). A prompt (prefill) is a target forward at context 0
(the cost model's prefill terms), plus the draft model's own prefill.

Draft placement `separate` (draft model on other devices, `Link`): drafting of the next step
overlaps this step's verification, so a step costs the longer of the two plus the link's
transfers, plus the drafting redone for requests whose last step rejected what the overlapped
drafting assumed (`combine`).

Speed: each `CostModel` call costs ~0.2 ms, so forwards are tabulated lazily by (batch, total
new tokens of the batch) over blocks of 256 consecutive integer contexts (or, for prompts,
integer total lengths) in one vectorised call, and read back by index. Keyed by the total, a
batch's mean tree size is exact; a batch's mean context falls between integers, where the table
interpolates linearly (exact at batch 1; `tests/test_simulator_pricing.py` measures the error
against direct cost-model calls: below 1e-6 relative).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from specscope.hw_profiles import CostModel
from specscope.hw_profiles.engine import Engine
from specscope.hw_profiles.pricing import Pricing, draft_levels
from specscope.names import MODEL_FREE_SOURCES
from specscope.simulator.policies.base import Speculation
from specscope.tree import Tree

BLOCK = 256
"""Consecutive integer arguments tabulated per cost-model call."""
TOKEN_BYTES = 4
"""Bytes of one token id sent over the draft link."""


@dataclass(frozen=True)
class Link:
    """The link between separate draft and target devices: bandwidth (Gbit/s) and latency (µs)."""

    gbps: float
    latency_us: float

    def step_s(self, tokens: int) -> float:
        """Seconds of one step's two transfers (trees to the target, verdicts back) moving
        `tokens` token ids in all."""
        return 2 * self.latency_us * 1e-6 + tokens * TOKEN_BYTES * 8 / (self.gbps * 1e9)


class StepParts(NamedTuple):
    """Seconds of one step's phases: drafting, verification (forward + host) and bookkeeping
    (a tuple: one is made per simulated step)."""

    draft_s: float
    verify_s: float
    bookkeeping_s: float
    speculates: bool = True


class _Grid:
    """Exact values of `fn(batch, total, xs)` at integer x, tabulated in blocks of
    consecutive integers, interpolated linearly between integers."""

    def __init__(self, fn: Callable[[int, int, np.ndarray], np.ndarray]) -> None:
        self._fn = fn
        self._rows: dict[tuple[int, int, int], list[float]] = {}

    def at(self, batch: int, total: int, x: float) -> float:
        """The value at (batch, total, x), x ≥ 0 real."""
        i = int(x)
        key = (batch, total, i // BLOCK)
        row = self._rows.get(key)
        if row is None:
            xs = np.arange(key[2] * BLOCK, (key[2] + 1) * BLOCK + 1)
            row = self._rows[key] = np.asarray(self._fn(batch, total, xs), dtype=float).tolist()
        j = i % BLOCK
        frac = x - i
        return row[j] if frac == 0 else row[j] + frac * (row[j + 1] - row[j])


def _by_table(cost: CostModel, call: Callable[[np.ndarray], np.ndarray], batch: int,
              contexts: np.ndarray) -> np.ndarray:
    """`call(contexts)` evaluated so that each context uses the measured table a scalar call
    would: the cost model picks the table nearest the *mean* context of an array, so contexts
    are grouped by their own nearest table (a group's mean has the same nearest table)."""
    tables = cost.hw.measured_for(cost.model.name, batch, cost.weight_bits, cost.tp,
                                  cost.runtime.name)
    if len(tables) < 2:
        return call(contexts)
    where = np.array([t.context for t in tables], dtype=float)
    nearest = np.abs(contexts[:, None] - where[None, :]).argmin(axis=1)
    out = np.empty(contexts.size)
    for k in np.unique(nearest):
        mask = nearest == k
        out[mask] = call(contexts[mask])
    return out


class _Forwards:
    """Tabulated forwards of one model, each of `batch` sequences holding `total` new tokens
    together (so `total / batch` each: exact for any mix of sizes with that total):
    `forward` (autoregressive, draft levels, chunks), `verify` (tree verification,
    `verify_time` with STree for state-space layers) after a mean `context`, and `prompt`
    (context 0)."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self._forward = _Grid(lambda b, t, c: _by_table(
            cost, lambda cs: cost.forward_time(b, t / b, cs), b, c))
        self._verify = _Grid(lambda b, t, c: _by_table(
            cost, lambda cs: cost.verify_time(t / b, cs, batch=b), b, c))
        self._prompt = _Grid(lambda b, _, t: cost.forward_time(b, np.maximum(t, b) / b, 0))

    def forward(self, batch: int, total: int, context: float) -> float:
        """Seconds of one forward of `batch` sequences, `total` new tokens, after `context`."""
        return self._forward.at(batch, total, context)

    def verify(self, batch: int, total: int, context: float) -> float:
        """Seconds for the target to verify `batch` trees of `total` tokens after `context`."""
        return self._verify.at(batch, total, context)

    def prompt(self, batch: int, total: int) -> float:
        """Seconds of one prefill of `batch` prompts of `total` tokens."""
        return self._prompt.at(batch, 0, total)


@dataclass(frozen=True)
class HostTerms:
    """Host seconds a speculative step adds to the model forwards, as `Pricing` prices them:
    per draft-model level, per verification, per step (bookkeeping), `level_s` of a
    model-free source, per further node a draft-model level proposes for, and the batching
    server's own work per step, per sequence that does not speculate and per sequence sharing a
    batched draft level, and per token verified (`tree_node`) (`LoopCosts`). `bookkeeping` is
    paid per speculating sequence, `batched_bookkeeping` once per step that speculates (an
    engine whose step runs over the whole batch: `LoopCosts.step_per_row` false);
    `draft_cache`: the engine's draft levels forward only the nodes they expand
    (`Pricing.draft_cache`)."""

    level: float
    verify: float
    bookkeeping: float
    level_s: Callable[[str], float]
    batched_bookkeeping: float = 0.0
    node: float = 0.0
    serve_step: float = 0.0
    serve_row: float = 0.0
    pads_context: bool = False
    level_per_row: bool = False
    choose_step: float = 0.0
    choose_row: float = 0.0
    shared_row: float = 0.0
    draft_cache: bool = False
    tree_node: float = 0.0


def host_terms(target: CostModel, drafter: CostModel | None, temperature: float = 0.0,
               engine: Engine | None = None) -> HostTerms:
    """The host terms of `Pricing` on these models at `temperature` (what its draft level and
    verification pay beyond their forwards), so that the simulator and the optimizers price the
    loop's host work alike, on `engine`'s loop (None: the profile's own)."""
    ref = Pricing(target, drafter, 1, temperature=temperature, engine=engine)
    level = ref.level_host_s if drafter is not None else 0.0
    node = ref.loop.node if drafter is not None else 0.0
    per_row = ref.loop.step_per_row
    return HostTerms(level, ref.verify_extra_s, ref.loop.row_bookkeeping if per_row else 0.0,
                     ref.level_s, 0.0 if per_row else ref.loop.step, node,
                     ref.loop.serve_step, ref.loop.serve_row, ref.loop.pads_context,
                     ref.loop.level_per_row, ref.loop.choose_step, ref.loop.choose_row,
                     ref.loop.shared_row, ref.draft_cache, ref.loop.tree_node)


@dataclass(frozen=True)
class _Shape:
    """What pricing needs of one speculation: tree size, and per draft level its key
    (depth, source), the nodes it forwards and the parents it proposes for."""

    size: int
    levels: tuple[tuple[tuple[int, str], int, int], ...]
    speculates: bool


def speculation_shape(spec: Speculation, source: str, draft_cache: bool = False) -> _Shape:
    """The draft levels of `spec` as `Pricing.draft_s` counts them (module docstring): the
    tree's `draft_levels` up to `spec.draft_levels`, then levels of `source` past the tree's
    depth, each forwarding the whole tree (or with a `draft_cache` the tree's deepest nodes)."""
    tree = spec.tree
    levels = draft_levels(tree, draft_cache, spec.draft_levels)
    past = int(np.sum(tree.depths == tree.depth)) if draft_cache else tree.size
    levels += [((d, source), past, 1) for d in range(tree.depth + 1, spec.draft_levels + 1)]
    return _Shape(tree.size, tuple(levels), tree.size > 1 or spec.draft_levels > 0)


@dataclass(frozen=True)
class _Step:
    """A step's requests as pricing sums them: tree tokens, sequences, cached tokens, requests
    that speculate, and per draft level (source, requests, nodes forwarded, the draft's cached
    tokens, parents expanded)."""

    tokens: int
    batch: int
    context_sum: int
    speculating: int
    levels: tuple[tuple[str, int, int, int, int], ...]


class BatchPricer:
    """Seconds of steps and prefills of a batch (module docstring); implements `StepPricer`.

    `source` is the drafter source of levels drafted past a tree's depth; `link` is the draft
    link under separate placement (None: colocated); `temperature` the sampling temperature
    (the verification's host work depends on it); `engine` the engine whose loop's host work
    a step pays (None: the profile's own); `draft_window` the tokens the draft keeps and reads
    of each request's context (None: all of it), as `Pricing.draft_context`.
    """

    def __init__(self, target: CostModel, drafter: CostModel | None, source: str,
                 link: Link | None = None, temperature: float = 0.0,
                 engine: Engine | None = None, draft_window: int | None = None) -> None:
        self.target, self.drafter, self.source, self.link = target, drafter, source, link
        self.draft_window = draft_window
        self._target = _Forwards(target)
        self._drafter = None if drafter is None else _Forwards(drafter)
        self._shapes: dict[tuple[int, int], tuple[Tree, _Shape]] = {}
        self._alike: dict[tuple[int, int], tuple[Speculation, _Step]] = {}
        self._host = host_terms(target, drafter, temperature, engine)

    def shape(self, spec: Speculation) -> _Shape:
        """The (cached) `speculation_shape` of `spec`."""
        key = (id(spec.tree), spec.draft_levels)
        hit = self._shapes.get(key)
        if hit is not None and hit[0] is spec.tree:
            return hit[1]
        if len(self._shapes) > 4096:
            self._shapes.clear()
        shape = speculation_shape(spec, self.source, self._host.draft_cache)
        self._shapes[key] = (spec.tree, shape)
        return shape

    @property
    def needs_contexts(self) -> bool:
        """Whether a step's price reads each request's context, not their sum alone (a draft
        window, or a loop that pads to the longest context): `parts_all` then takes them."""
        return self.draft_window is not None or self._host.pads_context

    def parts(self, contexts: Sequence[int], speculations: Sequence[Speculation],
              chunks: Sequence[tuple[int, int]] = ()) -> StepParts:
        """Seconds of each phase of one step: `contexts[i]` tokens cached for the request that
        verifies `speculations[i]`; `chunks` (tokens, tokens already prefilled) are prompt
        chunks that join the step's target forward as more sequences (chunked prefill), and
        the draft model's forward of them (colocated drafting only)."""
        groups: dict[int, list] = {}
        for spec, context in zip(speculations, contexts, strict=True):
            group = groups.get(id(spec))
            if group is None:
                groups[id(spec)] = [spec, 1, context, self._drafted(context)]
            else:
                group[1] += 1
                group[2] += context
                group[3] += self._drafted(context)
        tokens = batch = context_sum = 0
        speculating = 0
        levels: dict[tuple[int, str], list[int]] = {}
        for spec, count, contexts_sum, drafted_sum in groups.values():
            shape = self.shape(spec)
            tokens += shape.size * count
            batch += count
            context_sum += contexts_sum
            speculating += count * shape.speculates
            for key, forwarded, expanded in shape.levels:
                level = levels.get(key)
                if level is None:
                    levels[key] = [count, forwarded * count, drafted_sum, expanded * count]
                else:
                    level[0] += count
                    level[1] += forwarded * count
                    level[2] += drafted_sum
                    level[3] += expanded * count
        step = _Step(tokens, batch, context_sum, speculating,
                     tuple((source, *level) for (_, source), level in levels.items()))
        return self._priced(step, contexts, chunks)

    def parts_all(self, spec: Speculation, count: int, context_sum: int,
                  contexts: Sequence[int] = (), chunks: Sequence[tuple[int, int]] = ()
                  ) -> StepParts:
        """`parts` of a step in which all `count` requests verify `spec`, their contexts
        summing to `context_sum` (`contexts`, each request's, only when `needs_contexts`);
        what does not depend on the contexts is kept per (speculation, count)."""
        drafted = (context_sum if self.draft_window is None
                   else sum(self._drafted(c) for c in contexts))
        key = (id(spec), count)
        hit = self._alike.get(key)
        if hit is None or hit[0] is not spec:
            if len(self._alike) > 4096:
                self._alike.clear()
            shape = self.shape(spec)
            hit = self._alike[key] = (spec, _Step(
                shape.size * count, count, 0, count * shape.speculates,
                tuple((source, count, forwarded * count, 0, expanded * count)
                      for (_, source), forwarded, expanded in shape.levels)))
        return self._priced(hit[1], contexts, chunks, count, context_sum, drafted)

    def _priced(self, step: _Step, contexts: Sequence[int], chunks: Sequence[tuple[int, int]],
                requests: int | None = None, context_sum: int = 0, drafted: int = 0
                ) -> StepParts:
        """`parts` of the requests' `step` (`requests` of them, None: `len(contexts)`; plus
        `context_sum` cached tokens, `drafted` of them the draft's, at every level)."""
        draft = sum(self._level_s(source, count, forwarded, drafted + drafted_sum, expanded)
                    for source, count, forwarded, drafted_sum, expanded in step.levels)
        tokens, batch, context_sum = step.tokens, step.batch, step.context_sum + context_sum
        verified = tokens
        for size, done in chunks:
            tokens += size
            batch += 1
            context_sum += done
        if chunks and self._drafter is not None and self.link is None:
            draft += self._drafter.forward(len(chunks), sum(s for s, _ in chunks),
                                           sum(self._drafted(d) for _, d in chunks)
                                           / len(chunks))
        requests = len(contexts) if requests is None else requests
        served = self._host.serve_step + (requests - step.speculating) * self._host.serve_row
        context = context_sum / batch
        if self._host.pads_context and contexts:
            context = max(context, max(contexts))
        if not step.speculating:
            forward = self._target.forward(batch, tokens, context)
            return StepParts(draft, forward, served, False)
        verify = (self._target.verify(batch, tokens, context) + self._host.verify
                  + verified * self._host.tree_node)
        return StepParts(draft, verify, step.speculating * self._host.bookkeeping
                         + self._host.batched_bookkeeping + served)

    def _drafted(self, context: int) -> int:
        """Tokens of a request's `context` the draft reads (its window's worth at most)."""
        return context if self.draft_window is None else min(context, self.draft_window)

    def _level_s(self, source: str, count: int, forwarded: int, context_sum: int,
                 expanded: int) -> float:
        """Seconds of one batched draft level of `source`: `count` requests forwarding
        `forwarded` nodes and proposing for `expanded` in all, after `context_sum` cached
        tokens in all."""
        if source in MODEL_FREE_SOURCES:
            return count * self._host.level_s(source)
        if self._drafter is None:
            return 0.0
        host = (self._host.level * (count if self._host.level_per_row else 1)
                + (count * self._host.shared_row if count > 1 else 0.0))
        return (self._drafter.forward(count, forwarded, context_sum / count) + host
                + (expanded - count) * self._host.node)

    def draft_s(self, contexts: Sequence[int], speculations: Sequence[Speculation]) -> float:
        """Seconds drafting `speculations` alone (a subset of a step's requests)."""
        return self.parts(contexts, speculations).draft_s

    def combine(self, parts: StepParts, redo_s: float = 0.0, moved: int = 0) -> float:
        """Seconds of a step from its parts: colocated, their sum; separate placement, the
        longer of verification (+ bookkeeping) and the overlapped drafting, plus `redo_s` of
        drafting redone serially and the link's transfers of `moved` token ids."""
        if self.link is None:
            return parts.draft_s + parts.verify_s + parts.bookkeeping_s
        link = self.link.step_s(moved) if parts.speculates else 0.0
        return redo_s + max(parts.verify_s + parts.bookkeeping_s, parts.draft_s) + link

    def step_s(self, contexts: Sequence[int], speculations: Sequence[Speculation]) -> float:
        """Seconds of one decoding step (`StepPricer`); under separate placement the
        overlapped drafting is assumed to hold (no redo) and the link moves the trees and one
        token per request back."""
        parts = self.parts(contexts, speculations)
        moved = sum(self.shape(s).size + 1 for s in speculations) if self.link else 0
        return self.combine(parts, 0.0, moved)

    def choose_s(self, rows: int) -> float:
        """Host seconds a policy that chooses each step's speculation from its prices
        (`Policy.chooses`) spends choosing for `rows` running sequences (`LoopCosts`)."""
        return self._host.choose_step + rows * self._host.choose_row

    def wake_s(self, gap: float) -> float:
        """Extra seconds of the first forward after the replica idled `gap` seconds (the target
        profile's `Wake`)."""
        return self.target.hw.wake.extra(gap)

    def prefill_s(self, prompts: Sequence[int]) -> float:
        """Seconds to prefill `prompts` (token counts) in one batched forward at their mean
        length, with the draft model's prefill (in turn when colocated, alongside when
        separate)."""
        batch, total = len(prompts), sum(prompts)
        target = self._target.prompt(batch, total)
        if self._drafter is None:
            return target
        draft = self._drafter.prompt(batch, total)
        return max(target, draft) if self.link else target + draft
