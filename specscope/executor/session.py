"""A run's models and prompts, loaded once: the target and its tokenizer, the draft model, and
prompt sets as token ids.

Every command and benchmark that runs models loads them here, once, in its main function, and
hands the loaded models to the library (`speculative_generate`, `collect_tokens`,
`serve_stream`, ...), as gpt-fast loads its model once in `main` and hands it to `generate`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specscope.errors import InputError, warn
from specscope.executor.runtime import Runtime
from specscope.executor.targets import Model, load_model
from specscope.models.spec import ModelSpec
from specscope.names import DEFAULT_DRAFT_MODEL, DRAFT_MODEL_DRAFTERS


@dataclass(frozen=True)
class Session:
    """Loaded models: the target and its tokenizer (None: a folder without one), the draft
    model (None when the run needs none), and the runtime both run on."""

    target: Model
    tokenizer: object | None
    draft: Model | None
    runtime: Runtime

    def prompts(self, spec: str, n: int | None = None) -> list[list[int]]:
        """The first `n` prompts of `spec` (builtin:NAME or a .jsonl file; all of them when
        None) as the target's token ids."""
        from specscope.models.zoo.prompts import load_prompts

        return [encode(self.tokenizer, text, spec) for text in load_prompts(spec)[:n]]

    @property
    def target_spec(self) -> ModelSpec | None:
        """The target's architecture (None: a Hugging Face adapter's model, which has none)."""
        return getattr(self.target.model, "spec", None)

    def check_context(self, tokens: Sequence[Sequence[int]], max_new: int | Sequence[int],
                      where: str, output_len: str | None = None) -> None:
        """Warn when prompts of `tokens` and `max_new` new tokens (one number for all, or one
        per prompt; `output_len` names it in the warning, default the number) run past the
        target's trained context: it decodes them, at positions it never learned. generate,
        collect, adapt and serve-bench call this once a run, before running (validate keeps
        only the prompts that fit instead)."""
        limit = getattr(self.target_spec, "max_seq_len", 0)
        news = [max_new] * len(tokens) if isinstance(max_new, int) else list(max_new)
        over = [len(t) + n - limit for t, n in zip(tokens, news, strict=True)
                if len(t) + n > limit]
        if limit and over:
            warn(f"{where}: {len(over)} of {len(tokens)} prompts with --output-len "
                 f"{output_len or max_new} run past {self.target.name}'s {limit}-token trained "
                 f"context, by up to {max(over):,} tokens: positions it never learned")


def load_session(model: str, draft_model: str | None = None, runtime: Runtime | None = None,
                 ssm_verify: str = "stree") -> Session:
    """Load `model` (zoo name or Hugging Face folder) and, when named, `draft_model` on `runtime`
    (default: eager float32 on the CPU); `ssm_verify` is an SSM target's tree verification."""
    runtime = runtime or Runtime.cpu()
    target, tokenizer = load_model(model, ssm_verify, runtime)
    draft = None if draft_model is None else load_model(draft_model, runtime=runtime)[0]
    return Session(target, tokenizer, draft, runtime)


def draft_model_for(drafters: Iterable[str], draft_model: str | None = None) -> str | None:
    """The draft model `drafters` need: `draft_model` (default: the zoo's) when one of them runs
    a draft model, else None."""
    if not set(DRAFT_MODEL_DRAFTERS) & set(drafters):
        return None
    return draft_model or DEFAULT_DRAFT_MODEL


def encode(tokenizer: object | None, text: str, where: str) -> list[int]:
    """Token ids of a prompt; an `InputError` naming `where` when there is no tokenizer."""
    if tokenizer is None:
        raise InputError(f"{where}: the model has no tokenizer to encode prompts with")
    return list(tokenizer.encode(text))
