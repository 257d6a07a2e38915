"""Real speculative decoding: draft a tree, verify it in one target pass, commit, repeat.

The loop reads like gpt-fast's generate.py, one plain function per phase:

- `prefill`: the prompt into the target (and the drafter);
- the step's tree and tokens, grown level by level through the drafter by the `Method`
  (`methods.py`: a static tree, a chain, or a per-step policy);
- `verify_step`: one target pass over the tree and a verification rule (`verify.py`);
- `commit`: keep the accepted path in the target's cache or state, feed the drafter;
- `decode_speculative` / `decode_autoregressive`: one request, speculative or plain;
- `speculative_generate`: many requests with per-phase timing and the autoregressive baseline
  in the same process (`generate.py` builds the same from names, `specscope generate`).

Times are seconds of `Runtime.clock` (the device synchronised, then `time.perf_counter`), with
torch's threads set by `use_threads` and recorded with why; compile and capture time is kept
apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from specscope.draft import DraftedTree
from specscope.errors import InputError
from specscope.executor.drafters import (
    Drafter,
)
from specscope.executor.methods import Method
from specscope.executor.targets import Model
from specscope.executor.threads import Threads, use_threads
from specscope.executor.verify import (
    DRAFT_SAMPLING,
    RULES,
    SAMPLED_DRAFT_RULES,
    Verdict,
    next_token,
    verify,
)


def prefill(target: Model, drafter: Drafter, prompt: Sequence[int], capacity: int) -> None:
    """Start a request: the prompt (all but its last token) into the target and the drafter."""
    tokens = torch.tensor(prompt)
    logits = target.prefill(tokens, capacity)
    drafter.start(prompt, capacity)
    drafter.update(tokens[:-1], logits)
    drafter.learn(tokens[:-1], logits)


def verify_step(
    target: Model,
    drafted: DraftedTree,
    drafter: Drafter,
    rule: str,
    temperature: float,
    generator: torch.Generator,
) -> tuple[Verdict, torch.Tensor, torch.Tensor]:
    """One target pass over the drafted tree and the rule's verdict; also (tokens, logits)."""
    tokens = torch.as_tensor(drafted.tokens)
    logits = target.verify(tokens, drafted.tree)
    draft_probs = None
    if rule in SAMPLED_DRAFT_RULES:
        draft_probs = [drafter.draft_probs.get(i) for i in range(drafted.tree.size)]
    # sampling rules draw from a CPU generator, so a run's draws do not depend on the device
    scores = logits if rule == "greedy" else logits.cpu()
    verdict = verify(rule, drafted.tree, drafted.tokens.tolist(), scores, temperature,
                     draft_probs, generator)
    return verdict, tokens, logits


def commit(
    target: Model, drafter: Drafter, verdict: Verdict, tokens: torch.Tensor, logits: torch.Tensor
) -> list[int]:
    """Keep the accepted path in the target, tell the drafter; the step's new tokens."""
    target.commit(tokens, verdict.path)
    drafter.update(tokens, logits)
    drafter.learn(tokens[verdict.path], logits[verdict.path])
    accepted = tokens[verdict.path[1:]].tolist()
    drafter.accept(accepted)
    return [*accepted, verdict.bonus]


@dataclass
class PhaseTimes:
    """Seconds spent in each phase of speculative decoding, summed over steps and requests."""

    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    bookkeeping_s: float = 0.0

    @property
    def decode_s(self) -> float:
        """Seconds of the decoding steps (prefill excluded)."""
        return self.draft_s + self.verify_s + self.bookkeeping_s


@dataclass
class RequestRun:
    """One request's output, seconds spent decoding it (prefill excluded) and prefilling it,
    and per step (for speculative decoding) the accepted drafts and the tree size."""

    output: list[int] = field(default_factory=list)
    decode_s: float = 0.0
    prefill_s: float = 0.0
    accepted: list[int] = field(default_factory=list)
    tree_sizes: list[int] = field(default_factory=list)


def decode_speculative(
    target: Model,
    drafter: Drafter,
    method: Method,
    prompt: Sequence[int],
    max_new: int,
    rule: str = "greedy",
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    times: PhaseTimes | None = None,
) -> RequestRun:
    """`max_new` tokens after `prompt` by speculative decoding (`times` accumulates phases)."""
    generator = generator or torch.Generator().manual_seed(0)
    times = times if times is not None else PhaseTimes()
    clock = target.runtime.clock
    t0 = clock()
    prefill(target, drafter, prompt, len(prompt) + max_new + method.max_size)
    context = list(prompt)
    run = RequestRun()
    t1 = start = clock()
    run.prefill_s = t1 - t0
    times.prefill_s += run.prefill_s
    while len(run.output) < max_new:
        drafter.begin(context)
        drafted = method.build(drafter, context[-1])
        t2 = clock()
        verdict, tokens, logits = verify_step(target, drafted, drafter, rule, temperature,
                                              generator)
        t3 = clock()
        new = commit(target, drafter, verdict, tokens, logits)
        if method.observe is not None:
            method.observe(drafted, verdict)
        context += new
        run.output += new
        run.accepted.append(verdict.accepted)
        run.tree_sizes.append(drafted.tree.size)
        t4 = clock()
        times.draft_s += t2 - t1
        times.verify_s += t3 - t2
        times.bookkeeping_s += t4 - t3
        t1 = t4
    del run.output[max_new:]
    drafter.finish(run.output)
    run.decode_s = clock() - start
    return run


def decode_autoregressive(
    target: Model,
    prompt: Sequence[int],
    max_new: int,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> RequestRun:
    """`max_new` tokens after `prompt`, one target forward each (argmax, or a sample)."""
    generator = generator or torch.Generator().manual_seed(0)
    clock = target.runtime.clock
    t0 = clock()
    target.prefill(torch.tensor(prompt), len(prompt) + max_new)
    start = clock()
    token, out = prompt[-1], []
    for _ in range(max_new):
        logits = target.decode(token)
        token = next_token(logits if temperature == 0 else logits.cpu(), temperature, generator)
        out.append(token)
    return RequestRun(out, clock() - start, start - t0)


# ---- many requests ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerateResult:
    """Speculative against autoregressive decoding of the same prompts in one process.

    runs / reference: per request, the speculative and the autoregressive run (outputs, decode
    seconds, per-step accepted drafts and tree sizes). Times in seconds, prefill excluded from
    both rates. lossless / mismatches: set when checked against autoregressive greedy output
    (mismatches counts differing positions over all requests). runtime: device, dtype and
    runtime of the target (`Runtime.describe`); setup_s: seconds spent compiling or capturing
    steps before decoding (target and draft model), kept out of every rate.
    """

    target: str
    drafter: str
    method: str
    tree_origin: str
    rule: str
    temperature: float
    threads: int
    runs: list[RequestRun]
    reference: list[RequestRun]
    phases: PhaseTimes
    runtime: dict[str, str] = field(default_factory=dict)
    setup_s: float = 0.0
    lossless: bool | None = None
    mismatches: int | None = None
    threads_reason: str = ""
    """Why `threads` (`Threads.reason`: --threads, the small-model default, a probe)."""

    @property
    def requests(self) -> int:
        """Prompts decoded."""
        return len(self.runs)

    @property
    def new_tokens(self) -> int:
        """Tokens generated over all requests (each way)."""
        return sum(len(r.output) for r in self.runs)

    @property
    def outputs(self) -> list[list[int]]:
        """The speculative outputs, per request."""
        return [r.output for r in self.runs]

    @property
    def accepted(self) -> np.ndarray:
        """Accepted drafts of every step, all requests in order."""
        return np.array([a for r in self.runs for a in r.accepted])

    @property
    def tree_sizes(self) -> np.ndarray:
        """Tree size (root included) of every step, all requests in order."""
        return np.array([n for r in self.runs for n in r.tree_sizes])

    @property
    def steps(self) -> int:
        """Verification steps over all requests."""
        return int(self.accepted.size)

    @property
    def ar_decode_s(self) -> float:
        """Seconds of autoregressive decoding (prefill excluded)."""
        return sum(r.decode_s for r in self.reference)

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of speculative decoding."""
        return self.new_tokens / self.phases.decode_s

    @property
    def ar_tokens_per_s(self) -> float:
        """Generated tokens per second of autoregressive decoding."""
        return self.new_tokens / self.ar_decode_s

    @property
    def speedup(self) -> float:
        """Speculative over autoregressive tokens per second."""
        return self.tokens_per_s / self.ar_tokens_per_s

    @property
    def mean_accepted(self) -> float:
        """Accepted drafted tokens per step."""
        return float(self.accepted.mean())

    @property
    def tokens_per_step(self) -> float:
        """Tokens per step, bonus included (accepted + 1)."""
        return self.mean_accepted + 1.0

    @property
    def mean_tree_size(self) -> float:
        """Tokens per verification pass, root included."""
        return float(self.tree_sizes.mean())

    def to_dict(self) -> dict:
        """A JSON-ready summary (times in ms, rates in tokens/s)."""
        return {
            "target": self.target,
            "drafter": self.drafter,
            "method": self.method,
            "tree_origin": self.tree_origin,
            "rule": self.rule,
            "temperature": self.temperature,
            "threads": self.threads,
            "threads_reason": self.threads_reason,
            **self.runtime,
            "setup_s": self.setup_s,
            "requests": self.requests,
            "new_tokens": self.new_tokens,
            "steps": self.steps,
            "tokens_per_s": self.tokens_per_s,
            "ar_tokens_per_s": self.ar_tokens_per_s,
            "speedup": self.speedup,
            "mean_accepted": self.mean_accepted,
            "tokens_per_step": self.tokens_per_step,
            "mean_tree_size": self.mean_tree_size,
            "draft_ms": 1e3 * self.phases.draft_s,
            "verify_ms": 1e3 * self.phases.verify_s,
            "bookkeeping_ms": 1e3 * self.phases.bookkeeping_s,
            "ar_ms": 1e3 * self.ar_decode_s,
            "lossless": self.lossless,
            "mismatches": self.mismatches,
        }


def speculative_generate(
    target: Model,
    drafter: Drafter,
    method: Method,
    prompts: Sequence[Sequence[int]],
    max_new: int,
    rule: str = "greedy",
    temperature: float = 0.0,
    seed: int = 0,
    verify_lossless: bool = False,
    threads: int | Threads | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> GenerateResult:
    """Decode every prompt autoregressively and speculatively, timing both.

    `threads`: torch's intra-op threads (default: `use_threads`'s choice for these models).

    `rule` is one of `RULES`; greedy needs temperature 0, the others temperature > 0.
    `progress(done, total)` is called after each prompt.
    """
    check_rule(rule, temperature, method)
    if verify_lossless and rule != "greedy":
        raise InputError("--verify-lossless compares token for token, so it needs temperature 0")
    if max_new < 1 or not prompts:
        raise InputError("give at least one prompt and --output-len ≥ 1")
    if any(len(p) < 2 for p in prompts):
        raise InputError("every prompt must hold at least 2 tokens")
    chosen = use_threads(threads, target, *drafter.models)
    models = [target, *drafter.models]
    for model in models:
        model.prepare(method.max_size)

    reference, runs, times = [], [], PhaseTimes()
    for i, prompt in enumerate(prompts):
        # alternating keeps both rates exposed to the same drift in machine load
        ar_generator = torch.Generator().manual_seed(seed + i)
        reference.append(decode_autoregressive(target, prompt, max_new, temperature,
                                               ar_generator))
        generator = torch.Generator().manual_seed(seed + i)
        runs.append(decode_speculative(target, drafter, method, prompt, max_new, rule,
                                       temperature, generator, times))
        if progress:
            progress(i + 1, len(prompts))
    mismatches = None
    if verify_lossless:
        mismatches = sum(mismatched(r.output, ref.output) for r, ref in zip(runs, reference,
                                                                             strict=True))
    return GenerateResult(
        target=target.name,
        drafter=drafter.source,
        method=method.name,
        tree_origin=method.origin,
        rule=rule,
        temperature=temperature,
        threads=chosen.count,
        runs=runs,
        reference=reference,
        phases=times,
        runtime=target.runtime.describe(),
        setup_s=sum(model.setup_s for model in models),
        lossless=None if mismatches is None else mismatches == 0,
        mismatches=mismatches,
        threads_reason=chosen.reason,
    )


def mismatched(output: Sequence[int], reference: Sequence[int]) -> int:
    """Positions where two outputs differ; a missing or extra token counts as a mismatch."""
    common = min(len(output), len(reference))
    differ = sum(a != b for a, b in zip(output[:common], reference[:common], strict=True))
    return differ + abs(len(output) - len(reference))


def check_rule(rule: str, temperature: float, method: Method) -> None:
    """An `InputError` unless `rule` is known, fits `temperature`, and (a sampled-draft rule)
    `method` draws children the way the rule needs."""
    if rule not in RULES:
        raise InputError(f"unknown verification rule {rule!r}; known: {', '.join(RULES)}")
    if (rule == "greedy") != (temperature == 0):
        raise InputError(f"rule {rule!r} does not fit --temperature {temperature}: greedy needs "
                         "temperature 0, the sampling rules temperature > 0")
    if temperature < 0:
        raise InputError(f"--temperature must be ≥ 0, got {temperature}")
    if rule in SAMPLED_DRAFT_RULES and not method.static and method.draws != DRAFT_SAMPLING[rule]:
        # a static tree's children are the drafter's draws (drawn as the rule needs); a method
        # that picks children by their value, or draws them otherwise, biases the rule
        how = (f"draws children {method.draws} replacement" if method.draws
               else "picks children by their value")
        raise InputError(f"rule {rule!r} needs children drawn from the draft "
                         f"{DRAFT_SAMPLING[rule]} replacement (a static tree, or a method that "
                         f"draws them so); method {method.name!r} {how}")


