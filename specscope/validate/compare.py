"""`specscope validate`: predict speculative decoding from a calibration half, measure it on a
held-out half.

1. The prompts (prompt sets interleaved, prompts too long for the model left out) are split
   alternately into a calibration half and a held-out half.
2. A trace of the target with the draft model, n-gram and recycling drafters is collected on the
   calibration half, once per temperature.
3. Each configuration (`grid.Config`) is predicted from that trace and the hardware profile as
   `optimize-tree` would: the method's tree (or SpecDec++'s policy) from the trace, tokens/step
   by replaying it over the trace, step time from `Pricing` (draft levels, model-free drafter
   calls, verification, bookkeeping) on the profile under the chosen runtime, at the
   configuration's temperature. DySpec, run live, is priced by the propose calls and forwarded
   nodes of its builder on the trace's mean draft probabilities (`dyspec_build`).
4. The executor decodes the held-out half with the same tree (static methods), the same policy
   (SpecDec++), or the method's live per-step policy (DySpec, Goose), in interleaved passes
   whose fastest is kept, then the recommended configuration and the three measured fastest
   in more interleaved passes (`contenders`); draft, verify and bookkeeping seconds come from
   its `PhaseTimes`.
5. Replay fidelity: a greedy trace of the held-out half itself, replayed with each greedy static
   tree, against the accepted lengths of the real run, step by step.

Batch is 1 (`grid.BATCH_NOTE`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import polars as pl
import torch

from specscope.errors import InputError
from specscope.executor.collect import collect_tokens
from specscope.executor.drafters import Drafter, make_drafter
from specscope.executor.loop import PhaseTimes, decode_speculative
from specscope.executor.methods import (
    MAX_DEPTH,
    STATIC_METHODS,
    Method,
    draft_specdecpp,
    resolve_method,
    static_method,
)
from specscope.executor.runtime import Runtime
from specscope.executor.session import Session, load_session
from specscope.executor.targets import Model
from specscope.executor.threads import Threads, use_threads
from specscope.hw_profiles import CostModel, HardwareProfile, load_profile
from specscope.hw_profiles.pricing import Pricing
from specscope.hw_profiles.profile import check_device_kind
from specscope.models import get_model
from specscope.models.zoo import zoo_specs
from specscope.names import DEFAULT_DRAFT_MODEL
from specscope.optimizers.compare import TREE_METHODS, Setup
from specscope.optimizers.dyspec import dyspec_build
from specscope.optimizers.ets import PULP_MISSING, pulp_available
from specscope.optimizers.specdecpp import AUTHORS_THRESHOLD, specdecpp
from specscope.profiling.drift import machine_drift
from specscope.trace import (
    AcceptanceModel,
    Trace,
    accepted_lengths,
    replay,
    sequence_sources,
    source_of,
)
from specscope.tree import Tree
from specscope.validate.grid import BATCH_NOTE, Config, config_grid
from specscope.validate.report import Fidelity, Measured, Outcome, Prediction, Validation

DEFAULT_PROMPTS = "builtin:code-edit,builtin:stdlib-code"
TRACE_DRAFTERS = ("draft", "ngram", "recycle")
"""Drafters traced on the calibration half (Goose is its parts, n-gram and recycling)."""


@dataclass(frozen=True)
class Sizes:
    """How much is run: prompts per half, new tokens per prompt, timed passes per config, and
    passes re-timing the contenders (`contenders`)."""

    per_half: int
    max_new: int
    passes: int
    recheck: int = 0


QUICK_SIZES = Sizes(per_half=64, max_new=32, passes=1, recheck=1)
FULL_SIZES = Sizes(per_half=64, max_new=64, passes=1, recheck=2)
CONTENDERS = 3
"""Configurations measured fastest that are re-timed beside the recommended one."""


@dataclass(frozen=True)
class ValidateRequest:
    """The options of `specscope validate`; `configs` and `sizes` replace the grid's (tests)."""

    hw: str
    model: str
    device: str = "auto"
    runtime: str | None = None
    quick: bool = False
    prompts: str = DEFAULT_PROMPTS
    draft_model: str = DEFAULT_DRAFT_MODEL
    seed: int = 0
    threads: int | None = None
    """torch CPU threads; default: those the profile was measured with (else `use_threads`'s)."""
    configs: tuple[Config, ...] | None = None
    sizes: Sizes | None = None


Progress = Callable[[int, int], None]


def run_validate(req: ValidateRequest, progress: Progress | None = None) -> Validation:
    """Check every input, then predict and measure every configuration (module docstring).
    `progress(done, total)` is called after each trace and each timed run."""
    start = time.perf_counter()
    profile = load_profile(req.hw)
    for name, option in ((req.model, "--target"), (req.draft_model, "draft model")):
        if name not in zoo_specs():
            raise InputError(f"{option}: unknown zoo model {name!r}; zoo models: "
                             f"{', '.join(sorted(zoo_specs()))}")
    runtime = Runtime.resolve(req.device, "float32", req.runtime)
    check_device_kind(profile, runtime.device.type)
    threads = profile_threads(profile, runtime, req.threads)
    costs = {name: CostModel(profile, get_model(name), runtime=runtime.kind)
             for name in (req.model, req.draft_model)}
    configs = list(req.configs or config_grid(req.quick))
    notes = [BATCH_NOTE]
    if not pulp_available() and any(c.method == "ets" for c in configs):
        notes.append(f"ETS configurations skipped: {PULP_MISSING}")
        configs = [c for c in configs if c.method != "ets"]
    sizes = req.sizes or (QUICK_SIZES if req.quick else FULL_SIZES)
    session = load_session(req.model, req.draft_model, runtime)
    target, draft = session.target, session.draft
    chosen_threads = use_threads(threads, target, draft)
    longest = max(c.budget for c in configs)
    calibration, held_out = split_prompts(req.prompts, session, sizes.per_half,
                                          get_model(req.model).max_seq_len - sizes.max_new
                                          - longest, req.seed)
    replayable = [c for c in configs if c.temperature == 0 and c.method in STATIC_METHODS]
    temperatures = sorted({c.temperature for c in configs})
    rechecked = min(len(configs), CONTENDERS + 1)
    total = (len(temperatures) + bool(replayable) + sizes.passes * len(configs)
             + sizes.recheck * rechecked)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    traces: dict[float, Trace] = {}
    for t in temperatures:
        traces[t] = collect_tokens(target, trace_drafters(target, draft, t), calibration,
                                   sizes.max_new, t, req.seed)
        tick()
    own = None
    if replayable:
        own = collect_tokens(target, trace_drafters(target, draft, 0.0), held_out,
                             sizes.max_new, 0.0, req.seed)
        tick()
    predictions = {}
    for c in configs:
        trace = traces[c.temperature]
        pricing = Pricing(costs[req.model], costs[req.draft_model] if c.drafter == "draft"
                          else None, round(trace.mean_context_len), temperature=c.temperature)
        predictions[c] = predict(c, trace, pricing, draft.name, req.seed)
    best: dict[Config, Measured] = {}
    for i in range(sizes.passes + sizes.recheck):
        # after the full passes, the comparison the recommendation is judged by, re-timed
        timed = configs if i < sizes.passes else contenders(configs, predictions, best,
                                                              rechecked)
        for c in timed:  # interleaved: every config sees the same drift in load
            run = measure(c, predictions[c], target, draft, traces[c.temperature], held_out,
                          sizes.max_new, req.seed)
            if c not in best or run.decode_s < best[c].decode_s:
                best[c] = run
            tick()
    drift = machine_drift(profile, req.model, runtime)
    outcomes = [
        Outcome(c, predictions[c], best[c],
                fidelity(own, predictions[c].tree, best[c]) if c in replayable else None)
        for c in configs
    ]
    return Validation(
        hardware=profile.name, model=req.model, draft_model=req.draft_model,
        runtime=runtime.describe(), threads=chosen_threads.count,
        threads_reason=chosen_threads.reason, prompts=req.prompts,
        calibration_prompts=len(calibration), held_out_prompts=len(held_out),
        max_new=sizes.max_new, passes=sizes.passes, outcomes=outcomes,
        setup_s=sum(m.setup_s for m in (target, draft)), wall_s=time.perf_counter() - start,
        host_costs=host_costs(profile), machine_drift=drift, notes=notes,
    )


def profile_threads(profile: HardwareProfile, runtime: Runtime, threads: int | None
                    ) -> int | Threads | None:
    """The CPU threads of a run checked against `profile`: `threads` when given, else on the CPU
    those the profile's step times were measured with (None: `use_threads` chooses)."""
    if threads is not None and threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    if threads is None and runtime.device.type == "cpu" and profile.threads:
        return Threads(profile.threads, f"profile: {profile.name}'s steps were measured "
                                        f"with {profile.threads}")
    return threads


def contenders(configs: Sequence[Config], predictions: dict[Config, Prediction],
               best: dict[Config, Measured], count: int) -> list[Config]:
    """The configuration predicted fastest and the `count − 1` others measured fastest so far:
    re-timed in extra interleaved passes (fastest kept, as for every pass), so that a burst of
    load from elsewhere during one run does not decide whether the recommendation measures
    within reach of the best."""
    pick = max(configs, key=lambda c: predictions[c].tokens_per_s)
    fastest = sorted(configs, key=lambda c: best[c].decode_s / best[c].tokens)
    return [pick, *[c for c in fastest if c != pick][: count - 1]]


def host_costs(profile: HardwareProfile) -> bool:
    """Whether the profile carries measured host costs of drafting and bookkeeping."""
    return bool(profile.loop.drafter or profile.loop.step or profile.loop.level)


def split_prompts(spec: str, session: Session, per_half: int, max_tokens: int, seed: int = 0
                  ) -> tuple[list[list[int]], list[list[int]]]:
    """Calibration and held-out prompts: each set of `spec` (comma list), prompts of more than
    `max_tokens` tokens left out, shuffled by `seed` (built-in sets cycle their edit kinds, so a
    split in file order would put some kinds in one half only), then alternately one to each
    half; the sets interleaved in both."""
    cal_sets, held_sets = [], []
    rng = np.random.default_rng(seed)
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        tokens = session.prompts(name)
        kept = [t for t in tokens if 2 <= len(t) <= max_tokens]
        kept = [kept[i] for i in rng.permutation(len(kept))]
        cal_sets.append(kept[0::2])
        held_sets.append(kept[1::2])
    cal, held = ([p for group in zip(*sets, strict=False) for p in group][:per_half]
                 for sets in (cal_sets, held_sets))
    if len(held) < 2:
        raise InputError(f"--prompts {spec!r}: need at least 4 prompts of at most {max_tokens} "
                         f"tokens, found {len(cal) + len(held)}")
    return cal, held


def trace_drafters(target: Model, draft: Model, temperature: float) -> list[Drafter]:
    """Fresh drafters of `TRACE_DRAFTERS` at `temperature` (the draft model shared)."""
    return [make_drafter(name, target.vocab_size, draft, None, temperature)
            for name in TRACE_DRAFTERS]


def _source(config: Config, draft_name: str) -> str:
    """The trace source a configuration's tree is shaped on (Goose's spine is n-gram)."""
    return source_of(draft_name) if config.drafter == "draft" else "ngram"


def predict(config: Config, trace: Trace, pricing: Pricing, draft_name: str, seed: int
            ) -> Prediction:
    """Tokens/step and step time of `config` from the calibration `trace` and `pricing`."""
    source = _source(config, draft_name)
    if config.method == "specdecpp":
        res = specdecpp(trace, source, pricing, budget=min(config.budget, MAX_DEPTH + 1),
                        threshold=AUTHORS_THRESHOLD, seed=seed)
        verify = pricing.verify_s(res.mean_verified, res.mean_drafted)
        step = res.time_per_token_s * res.tokens_per_step
        return Prediction(res.tree, res.tokens_per_step, step - verify - pricing.bookkeeping_s,
                          verify, pricing.bookkeeping_s, res.mean_verified, res.policy)
    setup = Setup(AcceptanceModel.from_trace(trace, source).p, source, pricing, MAX_DEPTH, trace)
    tree = TREE_METHODS[config.method](setup, config.budget, MAX_DEPTH)
    tokens = replay(trace, tree).tokens_per_step
    if source in sequence_sources(trace) and set(tree.sources[1:]) == {source}:
        sizes = chain_sizes(trace, tree, source)
        calls = np.minimum(sizes, tree.depth)  # the call that finds nothing ends the chain
        verify = float(np.mean([pricing.verify_s(int(n), int(n) - 1) for n in sizes]))
        return Prediction(tree, tokens, float(calls.mean()) * pricing.level_s(source), verify,
                          pricing.bookkeeping_s, float(sizes.mean()))
    verify = pricing.verify_s(tree.size, tree.depth, int(tree.leaves.size))
    if config.method == "dyspec":  # run live: the builder's calls on raw draft probabilities
        built = dyspec_build(trace, source, config.budget, MAX_DEPTH, calibrate=False)
        draft = pricing.dyspec_calls_s(source, built.forwarded, built.expanded)
    else:
        draft = pricing.draft_s(tree)
    return Prediction(tree, tokens, draft, verify, pricing.bookkeeping_s, float(tree.size))


def steps(accepted: np.ndarray) -> list[tuple[int, int]]:
    """(start position, accepted drafts) of each step of one request, from its row of
    `accepted_lengths` (−1 past its last position)."""
    end, pos, out = int(np.count_nonzero(accepted >= 0)), 0, []
    while pos < end:
        out.append((pos, int(accepted[pos])))
        pos += out[-1][1] + 1
    return out


def chain_sizes(trace: Trace, chain: Tree, source: str) -> np.ndarray:
    """Tokens verified by each step of `chain` over a sequence `source`, walked over `trace`:
    the executor leaves out the nodes past the drafter's proposal, so a step starting at a
    position verifies 1 + min(depth, proposal length there)."""
    rows = trace.df.filter(pl.col("source") == source).sort("request_id", "pos")
    proposals = [part.get_column("proposal").list.len().to_numpy()
                 for part in rows.partition_by("request_id", maintain_order=True)]
    return np.array([1 + min(chain.depth, int(lengths[pos]))
                     for row, lengths in zip(accepted_lengths(trace, chain), proposals,
                                             strict=True)
                     for pos, _ in steps(row)])


def executor_method(config: Config, pred: Prediction, drafter: Drafter, trace: Trace) -> Method:
    """What the executor runs for `config`: the predicted tree or policy, else the method's
    live policy shaped on the calibration `trace`."""
    if pred.policy is not None:
        return Method("specdecpp", partial(draft_specdecpp, policy=pred.policy),
                      pred.policy.max_len + 1, "policy predicted on the calibration half")
    if config.method in STATIC_METHODS:
        return static_method(config.method, pred.tree, "tree predicted on the calibration half")
    return resolve_method(config.method, config.budget, drafter,
                          lambda parts: (trace, "the calibration half"))


def measure(config: Config, pred: Prediction, target: Model, draft: Model, trace: Trace,
            prompts: Sequence[Sequence[int]], max_new: int, seed: int) -> Measured:
    """Decode `prompts` with `config` on the executor (fresh drafter and method); phase times
    exclude compilation, which `Model.prepare` does first."""
    drafter = make_drafter(config.drafter, target.vocab_size, draft, None, config.temperature)
    method = executor_method(config, pred, drafter, trace)
    for model in (target, *drafter.models):
        model.prepare(method.max_size)
    rule = "greedy" if config.temperature == 0 else "deterministic"
    times, runs = PhaseTimes(), []
    for i, prompt in enumerate(prompts):
        generator = torch.Generator().manual_seed(seed + i)
        runs.append(decode_speculative(target, drafter, method, prompt, max_new, rule,
                                       config.temperature, generator, times))
    return Measured(
        steps=sum(len(r.accepted) for r in runs),
        tokens=sum(len(r.output) for r in runs),
        draft_s=times.draft_s, verify_s=times.verify_s, bookkeeping_s=times.bookkeeping_s,
        mean_tree_size=float(np.mean([n for r in runs for n in r.tree_sizes])),
        accepted=[list(r.accepted) for r in runs],
    )


def fidelity(trace: Trace | None, tree: Tree, run: Measured) -> Fidelity:
    """The held-out half's own greedy `trace` replayed with `tree` against the real `run`: per
    request the accepted lengths step by step (the run's last step capped at the positions the
    trace holds, as replay counts it)."""
    assert trace is not None
    exact, count = True, 0
    for row, real in zip(accepted_lengths(trace, tree), run.accepted, strict=True):
        replayed = [a for _, a in steps(row)]
        end, pos, capped = int(np.count_nonzero(row >= 0)), 0, []
        for a in real:
            capped.append(min(a, end - pos))
            pos += a + 1
        exact &= replayed == capped
        count += len(replayed)
    return Fidelity(run.tokens / count, exact)
