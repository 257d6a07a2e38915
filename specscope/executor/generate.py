"""`specscope generate`: models, prompts, drafter and method from names, then the decoding loop.

The calibration pass (a trace over prompts other than the evaluated ones) shapes methods that
need statistics when none are stored with the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from specscope.errors import InputError
from specscope.executor.collect import collect_tokens
from specscope.executor.drafters import (
    LAYERSKIP,
    Drafter,
    GooseDrafter,
    RecycleDrafter,
    make_drafter,
    parse_layer_skip,
)
from specscope.executor.loop import GenerateResult, speculative_generate
from specscope.executor.methods import (
    load_tree,
    resolve_method,
    static_method,
)
from specscope.executor.runtime import Runtime
from specscope.executor.session import draft_model_for, load_session
from specscope.executor.targets import Model
from specscope.executor.threads import use_threads
from specscope.executor.verify import DRAFT_SAMPLING
from specscope.executor.zoo_acceptance import stored_acceptance
from specscope.names import DRAFT_MODEL_DRAFTERS
from specscope.trace import Trace

CALIBRATION_PROMPTS = 4
"""Prompts of the calibration pass that shapes a tree when no statistics are stored."""


def generate(
    model: str,
    drafter: str,
    prompts: str,
    n: int,
    max_new: int,
    draft_model: str | None = None,
    algo: str | None = None,
    budget: int | None = None,
    tree: str | Path | None = None,
    ssm_verify: str = "stree",
    temperature: float = 0.0,
    seed: int = 0,
    rule: str | None = None,
    verify_lossless: bool = False,
    threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    runtime: Runtime | None = None,
    layer_skip: str = "swift",
) -> GenerateResult:
    """`specscope generate`: speculative decoding of `model` (zoo name or Hugging Face folder)
    with the named drafter on the first `n` prompts of `prompts`, against autoregressive
    decoding in the same process.

    The tree: `tree` (a JSON file), or `algo` at `budget` (static methods shaped by the greedy
    acceptance stored with a zoo target at temperature 0, else by a calibration pass on other
    prompts; dyspec, specdecpp, goose per step).
    `rule` defaults to greedy at temperature 0 and deterministic-candidate sampling above;
    "specinfer" and "traversal" draw the draft model's children with replacement, "sequoia"
    (alias "rsd") without (static trees, or `algo` "rsd-s", which draws its own).
    Target and draft model run on `runtime` (default: eager float32 on the CPU), with torch's
    threads from `use_threads` (`threads` when given).
    `layer_skip` is the layerskip drafter's mode (`parse_layer_skip`: swift, del or a fixed set).
    """
    if (tree is None) == (algo is None):
        raise InputError("give exactly one of --tree and --algo")
    if n < 1:
        raise InputError(f"--n must be ≥ 1, got {n}")
    rule = rule or ("greedy" if temperature == 0 else "deterministic")
    session = load_session(model, draft_model_for([drafter], draft_model), runtime, ssm_verify)
    target, draft = session.target, session.draft
    tokens = session.prompts(prompts)
    session.check_context(tokens[:n], max_new, prompts)
    chosen_threads = use_threads(threads, target, draft)  # before calibration runs the models
    sample = DRAFT_SAMPLING.get(rule)
    generator = torch.Generator().manual_seed(seed)
    options = parse_layer_skip(layer_skip, seed) if drafter == LAYERSKIP else None
    chosen = make_drafter(drafter, target.vocab_size, draft, sample, temperature, generator,
                          target=target, layer_skip=options)
    if algo == "goose":
        chosen = with_branches(chosen, target.vocab_size)
    others = tokens[n:][:CALIBRATION_PROMPTS]
    use, how = (others, "other") if len(others) >= 2 else (tokens[:n], "the evaluated")
    calibrate = calibration(target, draft, use, max(8, min(max_new, 64)), temperature, seed,
                            f"{how} prompts")
    if tree is not None:
        method = static_method("file", load_tree(tree, drafter, target.name), f"file {tree}")
    else:
        stored = stored_acceptance(model, chosen.source) if temperature == 0 else None
        method = resolve_method(algo, budget, chosen, calibrate, stored)
    return speculative_generate(target, chosen, method, tokens[:n], max_new, rule, temperature,
                                seed, verify_lossless, chosen_threads, progress)


def with_branches(drafter: Drafter, vocab_size: int) -> GooseDrafter:
    """`drafter` as Goose's spine with recycling branches (a Goose drafter as it is)."""
    if isinstance(drafter, GooseDrafter):
        return drafter
    return GooseDrafter(drafter, RecycleDrafter(vocab_size))


def calibration(
    target: Model,
    draft: Model | None,
    prompts: Sequence[Sequence[int]],
    max_new: int,
    temperature: float,
    seed: int,
    what: str,
) -> Callable[[Sequence[Drafter]], tuple[Trace, str]]:
    """A calibration pass for `resolve_method`: a trace of fresh drafters of the given kinds
    (the draft model shared) over `prompts` (`what` describes them), and its description."""

    def calibrate(parts: Sequence[Drafter]) -> tuple[Trace, str]:
        fresh = [make_drafter(_kind(d), target.vocab_size, draft, None, temperature,
                              target=target, layer_skip=getattr(d, "layer_skip", None))
                 for d in parts]
        trace = collect_tokens(target, fresh, prompts, max_new, temperature, seed)
        return trace, f"a calibration pass on {len(prompts)} {what}"

    return calibrate


def _kind(drafter: Drafter) -> str:
    """The `make_drafter` name of a drafter (a draft model's and RASD's source name the
    draft model after a colon)."""
    kind = drafter.source.split(":")[0]
    return kind if kind in DRAFT_MODEL_DRAFTERS else drafter.source
