"""Online drafter adaptation: OSD (Liu et al. 2024, "Online Speculative Decoding").

OSD serves a stream of requests with speculative decoding and, between requests, distils the
draft model on what the target computed while serving them, so that acceptance rises over the
stream. `serve_stream` serves the requests in order with a draft-model chain of `depth` drafts;
every `every` requests it runs the distillation of `distil.py` on the buffer of served requests
(the target's distributions where the draft was wrong) and empties the buffer, as the paper's
algorithm does. `run_adapt` serves the stream twice, adapted and never adapted (the control:
same prompts, same seeds), and turns the curve into the simulator's drift schedule.

Approximations, against the paper: one draft model (OSD may keep one per query cluster); the
updates run between requests in the serving process instead of on spare cycles beside it.

The draft trained is a deep copy of the draft model's module in its own `CachedModel` (the
loaded weights are never touched); its KV cache is reallocated after each update (training
resizes it) and every request starts from its own prefill. Verification never reads the draft's
weights, so at temperature 0 every output equals autoregressive greedy decoding; each request
is checked.

Acceptance is per node, the quantity the simulator's drift multiplies (its positional p_k:
P(a drafted child is accepted | its parent was)): in a chain, accepted drafts over the drafts the
target judged (the accepted ones and, in a step that stopped early, the rejected one).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

from specscope.errors import InputError
from specscope.executor.distil import AdaptConfig, Distiller, ServingDrafter
from specscope.executor.loop import check_rule, decode_autoregressive, decode_speculative
from specscope.executor.methods import Method, static_method
from specscope.executor.session import load_session
from specscope.executor.targets import CachedModel, Model
from specscope.executor.threads import Threads, use_threads
from specscope.executor.verify import DRAFT_SAMPLING
from specscope.models.torch import Transformer
from specscope.names import DRIFT_RELATIVE_TO
from specscope.tree import Tree


@dataclass(frozen=True)
class RequestRecord:
    """One served request: steps, accepted drafts, drafted nodes the target judged (trials: the
    accepted ones and, in a step that stopped early, the rejected one), tokens generated,
    whether the output equals autoregressive greedy output (None when sampling), and the
    divergence of the update that followed it (None: no update)."""

    steps: int
    accepted: int
    trials: int
    tokens: int
    lossless: bool | None
    update_loss: float | None = None

    @property
    def acceptance(self) -> float:
        """Per-node acceptance: P(a drafted child is accepted | its parent was)."""
        return self.accepted / max(1, self.trials)

    @property
    def tokens_per_step(self) -> float:
        """Accepted drafts per step plus the bonus token."""
        return 1.0 + self.accepted / max(1, self.steps)


def serve_stream(
    target: Model,
    draft: Model,
    prompts: Sequence[Sequence[int]],
    max_new: int,
    config: AdaptConfig,
    adapt: bool = True,
    rule: str = "greedy",
    temperature: float = 0.0,
    seed: int = 0,
    references: Sequence[Sequence[int]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[RequestRecord]:
    """Serve `prompts` in order by speculative decoding with a copy of `draft` (a
    specscope `Transformer` in a `CachedModel`), distilled between requests when `adapt`.

    Request i verifies with generator seed + i; sampled drafts draw from one generator seeded
    with `seed`. `references` (autoregressive greedy outputs) mark each record lossless or not.
    """
    check_draft(draft)
    module = copy.deepcopy(draft.model)
    student = CachedModel(module, draft.name, draft.vocab_size, draft.runtime)
    sample = DRAFT_SAMPLING.get(rule)
    generator = torch.Generator().manual_seed(seed)
    drafter = ServingDrafter(student, config.positions, sample, temperature, generator)
    method: Method = replace(static_method("chain", Tree.chain(config.depth, drafter.source),
                                           f"chain of {config.depth}"), observe=drafter.observe)
    check_rule(rule, temperature, method)
    distiller = Distiller(module, config) if adapt else None
    records = []
    for i, prompt in enumerate(prompts):
        run = decode_speculative(target, drafter, method, prompt, max_new, rule, temperature,
                                 torch.Generator().manual_seed(seed + i))
        accepted = sum(run.accepted)
        rejected = sum(a < n - 1 for a, n in zip(run.accepted, run.tree_sizes, strict=True))
        due = distiller is not None and (i + 1) % config.every == 0
        loss = distiller.update(drafter.buffer.served) if due else None
        if due or distiller is None:
            drafter.buffer.served.clear()
        lossless = None if references is None else run.output == list(references[i])
        records.append(RequestRecord(len(run.accepted), accepted, accepted + rejected,
                                     len(run.output), lossless, loss))
        if progress:
            progress(i + 1, len(prompts))
    return records


def check_draft(draft: Model) -> None:
    """Raise `InputError` unless `draft` is a specscope `Transformer` running eager (what the
    distillation trains)."""
    if not isinstance(draft, CachedModel) or not isinstance(draft.model, Transformer):
        raise InputError(f"--drafter {draft.name}: online adaptation trains specscope's "
                         "own Transformer drafts")
    if draft.runtime.kind != "eager":
        raise InputError(f"online adaptation runs eager, not --runtime {draft.runtime.kind}")


@dataclass(frozen=True)
class Block:
    """Requests [start, stop) of both streams, pooled: per-node acceptance and tokens/step."""

    start: int
    stop: int
    adapted: float
    control: float
    adapted_tokens_per_step: float
    control_tokens_per_step: float


def pooled(records: Sequence[RequestRecord]) -> tuple[float, float]:
    """(per-node acceptance, tokens per step) of `records` pooled over their steps: those of
    one record summing them."""
    total = RequestRecord(*(sum(getattr(r, k) for r in records)
                            for k in ("steps", "accepted", "trials", "tokens")), None)
    return total.acceptance, total.tokens_per_step


@dataclass(frozen=True)
class AdaptResult:
    """The adapted stream against its control, per request and per block of `block` requests.

    `relative_to` says what the drift schedule (one entry per block) divides by.
    """

    target: str
    draft: str
    prompts: str
    repeat: int
    config: AdaptConfig
    rule: str
    temperature: float
    seed: int
    threads: int
    max_new: int
    block: int
    relative_to: str
    adapted: list[RequestRecord] = field(default_factory=list)
    control: list[RequestRecord] = field(default_factory=list)
    threads_reason: str = ""
    """Why `threads` (`Threads.reason`)."""

    @property
    def blocks(self) -> list[Block]:
        """Consecutive blocks of `block` requests (the last may be shorter)."""
        out = []
        for start in range(0, len(self.adapted), self.block):
            stop = min(start + self.block, len(self.adapted))
            a, a_tps = pooled(self.adapted[start:stop])
            c, c_tps = pooled(self.control[start:stop])
            out.append(Block(start, stop, a, c, a_tps, c_tps))
        return out

    @property
    def drift(self) -> list[float] | None:
        """The simulator's drift schedule: per block, the adapted per-node acceptance over the
        control's on the same requests ("control"), or over the adapted first block's
        ("first"), rounded to 4 decimals; None when a block accepted nothing (no multiplier
        > 0 describes it)."""
        blocks = self.blocks
        pairs = [(b.adapted, blocks[0].adapted if self.relative_to == "first" else b.control)
                 for b in blocks]
        if any(not (a > 0 and c > 0) for a, c in pairs):
            return None
        return [round(a / c, 4) for a, c in pairs]

    @property
    def lossless(self) -> bool | None:
        """Every adapted and control output equals autoregressive greedy (None: sampling)."""
        checks = [r.lossless for r in (*self.adapted, *self.control)]
        return None if None in checks else all(checks)

    def to_dict(self) -> dict:
        """A JSON-ready summary: settings, per-block curve, schedule, per-request records."""
        overall_a, tps_a = pooled(self.adapted)
        overall_c, tps_c = pooled(self.control)
        return {
            "target": self.target, "draft": self.draft, "prompts": self.prompts,
            "repeat": self.repeat, "requests": len(self.adapted), "max_new": self.max_new,
            "rule": self.rule, "temperature": self.temperature, "seed": self.seed,
            "threads": self.threads, "threads_reason": self.threads_reason,
            **{k: getattr(self.config, k) for k in ("every", "steps", "lr", "loss",
                                                    "positions", "depth")},
            "acceptance_meaning": "per-node: P(drafted child accepted | parent accepted)",
            "adapted_acceptance": overall_a, "control_acceptance": overall_c,
            "adapted_tokens_per_step": tps_a, "control_tokens_per_step": tps_c,
            "lossless": self.lossless,
            "block": self.block, "drift_relative_to": self.relative_to, "drift": self.drift,
            "blocks": [vars(b) for b in self.blocks],
            "adapted_requests": [_request(r) for r in self.adapted],
            "control_requests": [_request(r) for r in self.control],
        }


def run_adapt(
    model: str,
    draft_model: str,
    prompts: str,
    n: int,
    max_new: int,
    config: AdaptConfig,
    repeat: int = 1,
    temperature: float = 0.0,
    rule: str | None = None,
    seed: int = 0,
    block: int = 4,
    relative_to: str = "control",
    threads: int | Threads | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> AdaptResult:
    """`specscope adapt`: the first `n` prompts of `prompts`, served `repeat` times over in
    order (n · repeat requests), by `model` with `draft_model` adapting online (OSD), and the
    same stream never adapted (the control); at temperature 0 every output is checked against
    autoregressive greedy decoding. Eager float32 on the CPU, on `use_threads`'s threads
    (`threads` when given).

    `rule` defaults to greedy at temperature 0 and deterministic-candidate sampling above.
    `progress(done, total)` counts the requests of both streams.
    """
    config.check()
    rule = rule or ("greedy" if temperature == 0 else "deterministic")
    check_rule(rule, temperature, static_method("chain", Tree.chain(config.depth), ""))
    if n < 1 or max_new < 1 or repeat < 1:
        raise InputError(f"--n, --output-len and --repeat must be ≥ 1, got {n}, {max_new} and "
                         f"{repeat}")
    if block < 1:
        raise InputError(f"the drift schedule's block must be ≥ 1 request, got {block}")
    if relative_to not in DRIFT_RELATIVE_TO:
        raise InputError(f"--relative-to must be one of {', '.join(DRIFT_RELATIVE_TO)}, got "
                         f"{relative_to!r}")
    session = load_session(model, draft_model)
    target, draft = session.target, session.draft
    chosen = use_threads(threads, target, draft)
    check_draft(draft)
    tokens = session.prompts(prompts, n)
    if len(tokens) < n:
        raise InputError(f"--n {n}: {prompts} holds {len(tokens)} prompts")
    session.check_context(tokens, max_new, prompts)
    if any(len(t) < 2 for t in tokens):
        raise InputError(f"{prompts}: every prompt must hold at least 2 tokens")
    references = None
    if temperature == 0:
        references = [decode_autoregressive(target, p, max_new).output for p in tokens] * repeat
    stream = tokens * repeat
    streams = [
        serve_stream(target, draft, stream, max_new, config, adapt, rule, temperature, seed,
                     references,
                     None if progress is None else
                     lambda done, total, k=k: progress(k * total + done, 2 * total))
        for k, adapt in enumerate((True, False))
    ]
    return AdaptResult(target.name, draft.name, prompts, repeat, config, rule, temperature,
                       seed, chosen.count, max_new, block, relative_to, *streams,
                       threads_reason=chosen.reason)


def _request(record: RequestRecord) -> dict:
    """A request's record for JSON, with its per-node acceptance and tokens per step."""
    return vars(record) | {"acceptance": record.acceptance,
                           "tokens_per_step": record.tokens_per_step}
