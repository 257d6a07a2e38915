"""Trace collection: what the target generated and what every drafter proposed at each position.

Per request, the target first generates its continuation (greedy, or sampled at the temperature
with the request's seed), keeping its probabilities at every position. Then each drafter gives
its candidates for every position *given the true prefix* (docs/architecture.md#trace-schema):

- a draft model: one forward over the whole sequence gives its top-K at every position;
- n-gram and suffix: candidates at the position and the proposal (the top candidate followed as
  far as the drafter goes), with match_len against the true continuation;
- recycling: the table row of the last token, the table updated from the target's logits at
  each position after its row is read (kept across requests, as in the executor);
- RASD: the draft model's part from one forward over the whole sequence, fused at each position
  with the suffix retrieval there (`RasdDrafter.fuse`);
- layer skip: the skipped view's one forward as a draft model's (DEL: each position's logits at
  the exit the executor would choose there, `truth_logits`, and the chain it drafts from there as
  a sequence drafter's proposal, `truth_proposals`).

The rows form a schema-v1 `Trace`; `collect` also writes it with `write_trace`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl
import torch

from specscope.errors import InputError
from specscope.executor.drafters import (
    LAYERSKIP,
    ROOT,
    Drafter,
    DraftModelDrafter,
    RasdDrafter,
    make_drafter,
    parse_layer_skip,
    propose_chain,
)
from specscope.executor.runtime import Runtime
from specscope.executor.session import draft_model_for, load_session
from specscope.executor.targets import Model
from specscope.executor.threads import Threads, use_threads
from specscope.executor.verify import next_token, probabilities
from specscope.names import COLLECT_DRAFTERS, SEQUENCE_SOURCES, K
from specscope.trace import SCHEMA, Trace, write_trace

PROPOSAL_LEN = 24
"""Longest proposal recorded for a sequence drafter (each drafter stops at its own cap first)."""


def collect_tokens(
    target: Model,
    drafters: Sequence[Drafter],
    prompts: Sequence[Sequence[int]],
    max_new: int,
    temperature: float = 0.0,
    seed: int = 0,
    k: int = K,
    metadata: dict | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Trace:
    """A schema-v1 trace of `target` and `drafters` over tokenised `prompts` (seed + i for
    request i). `metadata` is added to the trace's own (target, temperature, drafters, K)."""
    if max_new < 1 or not prompts:
        raise InputError("give at least one prompt and --output-len ≥ 1")
    if any(len(p) < 2 for p in prompts):
        raise InputError("every prompt must hold at least 2 tokens")
    if temperature < 0:
        raise InputError(f"--temperature must be ≥ 0, got {temperature}")
    columns: dict[str, list] = {c: [] for c in SCHEMA}
    for i, prompt in enumerate(prompts):
        generator = torch.Generator().manual_seed(seed + i)
        out, logits = _generate(target, drafters, prompt, max_new, temperature, generator)
        probs = probabilities(logits, temperature)
        truth = list(prompt) + out
        for d in drafters:
            rows = _draft_rows(d, truth, len(prompt), logits, k)
            _append(columns, i, truth, len(prompt), probs, d.source, rows)
            d.finish(out)
        if progress:
            progress(i + 1, len(prompts))
    df = pl.DataFrame(columns, schema=SCHEMA)
    meta = {
        "target_model": target.name,
        "temperature": temperature,
        "drafters": {d.source: _settings(d) for d in drafters},
        "K": k,
        "seed": seed,
        "max_new": max_new,
        **(metadata or {}),
    }
    return Trace(df, meta)


def _generate(
    target: Model,
    drafters: Sequence[Drafter],
    prompt: Sequence[int],
    max_new: int,
    temperature: float,
    generator: torch.Generator,
) -> tuple[list[int], torch.Tensor]:
    """The target's continuation and its logits (max_new, vocab); drafters are started and the
    recycling table sees the prompt's logits."""
    capacity = len(prompt) + max_new
    tokens = torch.tensor(prompt)
    prompt_logits = target.prefill(tokens, capacity)
    for d in drafters:
        d.start(prompt, capacity)
        d.update(tokens[:-1], prompt_logits)
        d.learn(tokens[:-1], prompt_logits)
    token, out, rows = prompt[-1], [], []
    for _ in range(max_new):
        rows.append(target.decode(token).cpu())
        token = next_token(rows[-1], temperature, generator)
        out.append(token)
    return out, torch.stack(rows)


Rows = list[tuple[list[int], list[float], list[int]]]
"""Per position: candidate tokens, their scores, the proposal (empty for ranked drafters)."""


def _draft_rows(
    drafter: Drafter, truth: list[int], prompt_len: int, logits: torch.Tensor, k: int
) -> Rows:
    """Candidates for every generated position given the true prefix."""
    if isinstance(drafter, DraftModelDrafter):
        top = _draft_top(drafter, truth, prompt_len, k)
        chains = drafter.truth_proposals(truth, prompt_len, PROPOSAL_LEN) or [[]] * len(top)
        return [(t, s, c) for (t, s), c in zip(top, chains, strict=True)]
    drafted = None
    if isinstance(drafter, RasdDrafter):
        drafted = _draft_top(drafter.draft, truth, prompt_len, max(k, drafter.prune_k))
    rows = []
    sequence = drafter.source in SEQUENCE_SOURCES
    for pos in range(len(truth) - prompt_len):
        context = truth[: prompt_len + pos]
        drafter.begin(context)
        node = ROOT._replace(token=context[-1])
        ((cand, scores),) = ([drafter.fuse(node, drafted[pos], k)] if drafted is not None
                             else drafter.propose([node], k))
        proposal = propose_chain(drafter, context[-1], PROPOSAL_LEN)[0] if sequence else []
        rows.append((list(cand), list(scores), proposal))
        drafter.update(torch.tensor(context[-1:]), logits[pos : pos + 1])
        drafter.learn(torch.tensor(context[-1:]), logits[pos : pos + 1])
    return rows


def _draft_top(
    drafter: DraftModelDrafter, truth: list[int], prompt_len: int, k: int
) -> list[tuple[list[int], list[float]]]:
    """The draft model's top-k (tokens, probabilities) at every generated position, from one
    forward over the whole sequence."""
    draft_logits = drafter.truth_logits(truth)
    top = probabilities(draft_logits[prompt_len - 1 :], drafter.temperature).topk(k)
    return list(zip(top.indices.tolist(), top.values.tolist(), strict=True))


def _append(
    columns: dict[str, list],
    request: int,
    truth: list[int],
    prompt_len: int,
    probs: torch.Tensor,
    source: str,
    rows: Rows,
) -> None:
    for pos, (cand, scores, proposal) in enumerate(rows):
        token = truth[prompt_len + pos]
        ahead = truth[prompt_len + pos :]
        match = 0
        while match < min(len(proposal), len(ahead)) and proposal[match] == ahead[match]:
            match += 1
        p = probs[pos]
        columns["request_id"].append(request)
        columns["pos"].append(pos)
        columns["context_len"].append(prompt_len + pos)
        columns["token"].append(token)
        columns["target_prob"].append(float(p[token]))
        columns["source"].append(source)
        columns["cand_tokens"].append(cand)
        columns["cand_scores"].append([min(max(s, 0.0), 1.0) for s in scores])
        columns["cand_target_probs"].append(p[cand].tolist() if cand else [])
        columns["rank"].append(cand.index(token) if token in cand else -1)
        columns["proposal"].append(proposal)
        columns["match_len"].append(match)


def _settings(drafter: Drafter) -> dict:
    """A drafter's scalar settings (n-gram order, suffix floor, …) and its `notes` (what else
    it records, such as a search's scores), for the trace metadata."""
    return {
        key: value
        for key, value in vars(drafter).items()
        if not key.startswith("_") and key != "source" and isinstance(value, int | float | str)
    } | getattr(drafter, "notes", {})


def collect(
    model: str,
    drafters: Sequence[str] | str,
    prompts: str,
    n: int,
    max_new: int,
    output: str | Path | None = None,
    temperature: float = 0.0,
    seed: int = 0,
    draft_model: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    runtime: Runtime | None = None,
    layer_skip: str = "swift",
    threads: int | Threads | None = None,
) -> Trace:
    """`specscope collect`: trace `model` (zoo name or Hugging Face folder) and the named
    drafters on the first `n` prompts of `prompts` (builtin:NAME or a .jsonl file); written to
    `output` when given. The draft model defaults to the zoo's drafter. Both models run on
    `runtime` (default: eager float32 on the CPU) with `use_threads`'s threads (`threads` when
    given), which the trace's metadata records.
    `layer_skip` is the layerskip drafter's mode (`parse_layer_skip`)."""
    names = [d.strip() for d in drafters.split(",")] if isinstance(drafters, str) else drafters
    unknown = [d for d in names if d not in COLLECT_DRAFTERS]
    if unknown or not names:
        raise InputError(f"--drafter: unknown drafter {unknown or names!r}; known: "
                         f"{', '.join(COLLECT_DRAFTERS)}")
    if n < 1:
        raise InputError(f"--n must be ≥ 1, got {n}")
    session = load_session(model, draft_model_for(names, draft_model), runtime)
    target, draft, runtime = session.target, session.draft, session.runtime
    tokens = session.prompts(prompts, n)
    session.check_context(tokens, max_new, prompts)
    chosen = use_threads(threads, target, draft)
    options = parse_layer_skip(layer_skip, seed) if LAYERSKIP in names else None
    built = [make_drafter(n, target.vocab_size, draft, temperature=temperature, target=target,
                          layer_skip=options) for n in names]
    meta = {"prompt_set": prompts, "requests": len(tokens), **runtime.describe(),
            **chosen.to_dict()}
    trace = collect_tokens(target, built, tokens, max_new, temperature, seed, K, meta, progress)
    if output is not None:
        write_trace(trace, output)
    return trace
