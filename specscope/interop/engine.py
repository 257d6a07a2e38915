"""What every engine exporter takes and returns, and the names an engine's command needs."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specscope.errors import InputError
from specscope.models import get_model, list_models
from specscope.models.catalogue import is_head
from specscope.names import MODEL_FREE_SOURCES, MTP_DRAFTER
from specscope.optimizers.compare import Setup
from specscope.optimizers.scoring import Score
from specscope.trace.sources import NO_DRAFTER, draft_model
from specscope.tree import DEFAULT_SOURCE

SEQUENCE_PROPOSERS = ("ngram", "suffix")
"""Sources an engine's prompt-lookup (n-gram) proposer stands for."""


def breadth_first(paths: Iterable[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Rank paths as engines list a static tree: by length, then by ranks (parents first)."""
    return sorted(paths, key=lambda p: (len(p), p))


def orphan(paths: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The first path whose parent path is not listed (None: the paths form one tree)."""
    have = set(paths)
    return next((p for p in paths if len(p) > 1 and p[:-1] not in have), None)


def is_count(value: object) -> bool:
    """Whether a config value is an integer ≥ 1 (a JSON boolean is not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True)
class Plan:
    """What an export is solved on: the optimizers' setup (acceptance of `setup.source`, the
    pricing, the depth cap), the budget, the best tree over all trees, the models served
    (catalogue names), and the engine method asked for (None: the source's default)."""

    setup: Setup
    budget: int
    unconstrained: Score
    target: str
    drafter: str
    method: str | None = None
    dp: Score | None = None
    """The DP's best tree of at most `budget` nodes (None where only chains are priced)."""
    release: str | None = None
    """The engine release targeted (`--engine-version`; None: the current one)."""

    @property
    def source(self) -> str:
        return self.setup.source

    @property
    def chains_only(self) -> bool:
        return chains_only(self.setup)

    def served(self, engine: str, method: str, serving: Serving) -> tuple[str, str | None]:
        """The target's and the draft's ids for `engine`'s command (`served`): the draft is
        the source's draft model, else the drafter priced (None for a model-free drafter)."""
        named = draft_model(self.source)
        trace = self.setup.trace
        where = (f"{trace.name}: source's draft model" if trace is not None else "--source"
                 ) if named else "the drafter priced"
        name = named or (None if self.drafter in (NO_DRAFTER, *MODEL_FREE_SOURCES)
                         else self.drafter)
        return served(engine, method, serving, self.target, name, ("--target", where))


def chains_only(setup: Setup) -> bool:
    """Whether the stack priced (`--engine`) verifies chains only, so no tree is priced."""
    engine = setup.pricing.engine
    return engine is not None and engine.tree_attention == "none"


@dataclass(frozen=True)
class Export:
    """One engine's configuration: `config`, exactly what its API takes; `command`, the same
    on its command line; `score`, the tree the engine verifies, priced as specscope prices
    every tree; `family`, what the engine can express."""

    engine: str
    method: str
    config: dict[str, Any]
    command: str
    score: Score
    family: str
    notes: tuple[str, ...] = ()


HF_ID = re.compile(r"huggingface\.co/([\w.-]+/[\w.-]+)")
_SEGMENT = r"[A-Za-z0-9_.][A-Za-z0-9._-]*"
MODEL_NAME = re.compile(rf"/?{_SEGMENT}(?:/{_SEGMENT})*/?")
"""What a printed command may name as a model: a catalogue name, a Hugging Face id (org/name)
or a path, of ASCII letters, digits, `.`, `_` and `-` in segments joined by `/`, none starting
with `-` (an engine would read it as an option)."""
MAX_NAME = 256


def shown(value: object) -> str:
    """`value` for a one-line message: ASCII, escapes visible, at most 80 characters."""
    text = ascii(value)
    return text if len(text) <= 80 else text[:77] + "..."


def checked_model(name: object, where: str) -> str:
    """`name` when it is a catalogue model, a Hugging Face id (org/name) or a path by the
    `MODEL_NAME` grammar; an `InputError` naming `where` (an option, or a file and its field)
    otherwise."""
    if isinstance(name, str) and len(name) <= MAX_NAME and (
            name in list_models() or MODEL_NAME.fullmatch(name)):
        return name
    raise InputError(f"{where} {shown(name)}: not a catalogue model, a Hugging Face id "
                     "(org/name) or a path (letters, digits, '.', '_', '-' in segments joined "
                     "by '/', none starting with '-')")


def model_id(name: str) -> str:
    """A catalogue model's Hugging Face id, as its catalogue entry cites it (the name itself for
    a model outside the catalogue); an `InputError` for a catalogue model that cites none (a
    specscope zoo model: no engine can download it)."""
    if name not in list_models():
        return name
    found = HF_ID.search(get_model(name).source)
    if found is None:
        raise InputError(f"{name} is a specscope zoo model: it has no Hugging Face id an engine "
                         "could serve (export a catalogue model or a Hugging Face id)")
    return found.group(1)


def _hub_id(name: str, where: str) -> str:
    """`model_id(name)`, its refusal naming `where`; a name under a catalogue model's (a
    `--system`'s head, `llama-3.1-8b/head`) is a stand-in specscope prices, refused too."""
    if name not in list_models() and name.split("/")[0] in list_models():
        raise InputError(f"{where} {name}: a stand-in specscope prices for "
                         f"{name.split('/')[0]}, not a model an engine could download (name "
                         "the served model's Hugging Face id)")
    try:
        return model_id(name)
    except InputError as exc:
        raise InputError(f"{where} {name}: {exc}") from None


@dataclass(frozen=True)
class Serving:
    """What an engine's methods serve: `draft` the methods that load a draft model, `heads`
    those whose draft must be a head of a kind (method → kind: EAGLE, EAGLE-3), `own` those
    that draft with the target's own multi-token-prediction layers."""

    draft: tuple[str, ...]
    heads: dict[str, str]
    own: tuple[str, ...] = ()


def served(engine: str, method: str, serving: Serving, target: str, draft: str | None,
           where: tuple[str, str]) -> tuple[str, str | None]:
    """The target's and the draft's ids as `engine`'s command names them (the draft None when
    `method` loads none), each name checked by `checked_model` (`where`: what names the target
    and the draft, for messages) and the pair checked servable: a head method's draft is a
    head (a catalogue head, or a name specscope cannot read) and a head is served by a head
    method only, a multi-token-prediction
    method's target declares such layers where specscope can read it (a catalogue model or a
    config; the method loads no draft: the engine reads the layers from the target), a draft
    model shares the target's vocabulary (the engines verify the draft's token ids as the
    target's), and neither is a zoo model (`model_id`)."""
    target = checked_model(target, where[0])
    target_id = _hub_id(target, where[0])
    catalogue = list_models()
    if method in serving.own:
        if (target in catalogue or Path(target).exists()) and get_model(target).mtp_layers < 1:
            raise InputError(f"{engine} {method} drafts with the target's own multi-token-"
                             f"prediction layers; {where[0]} {target} declares none")
        return target_id, None
    if method not in serving.draft or draft is None:
        return target_id, None  # a model-free method; or the engine's check names the draft
    draft = checked_model(draft, where[1])
    draft_id = _hub_id(draft, where[1])
    head = head_kind(draft)
    if method in serving.heads and draft in catalogue and head is None:
        raise InputError(f"{engine} {method} serves an {serving.heads[method]} head; {draft} is "
                         "a catalogue language model, not a head: name a catalogue head "
                         "(qwen3-30b-a3b-eagle3, ...) or the head's Hugging Face id (export "
                         "--drafter ORG/NAME; optimize-tree --source draft:ORG/NAME)")
    if head is not None and method not in serving.heads:
        raise InputError(f"{engine} {method} loads a draft language model; {draft} is an "
                         f"{head.upper()} head drafting on the target's features (serve it with "
                         f"{' or '.join(serving.heads)})")
    if target in catalogue and draft in catalogue and head is None:
        ours, theirs = get_model(target).vocab_size, get_model(draft).vocab_size
        if ours != theirs:
            raise InputError(f"{engine}: draft {draft}'s vocabulary ({theirs:,} tokens) differs "
                             f"from target {target}'s ({ours:,}); a draft model must share the "
                             "target's tokenizer")
    return target_id, draft_id


def head_kind(name: str | None) -> str | None:
    """"eagle3" or "eagle" for a catalogue head (a model drafting on its target's features:
    `ModelSpec.fused_inputs` 3 or 2), else None."""
    if not is_head(name):
        return None
    return "eagle3" if get_model(name).fused_inputs == 3 else "eagle"


def source_kind(source: str) -> str:
    """What drafts `source`, as the exporters' `BY_SOURCE` keys it: "ngram" or "suffix", "mtp"
    (the target's own MTP layers, `draft:mtp`), "eagle3" or "eagle" (a catalogue head), "draft"
    (any other draft model, or the generic source); other sources by their own name."""
    if source in SEQUENCE_PROPOSERS:
        return source
    model = draft_model(source)
    if model == MTP_DRAFTER:
        return MTP_DRAFTER
    return head_kind(model) or ("draft" if model or source == DEFAULT_SOURCE else source)


def method_for(source: str, method: str | None, engine: str, by_source: dict[str, str],
               known: tuple[str, ...]) -> str:
    """The engine method: `method` if it is one of `known`, else the default of `source`'s
    kind in `by_source` (`source_kind`); an `InputError` naming the option or the source
    otherwise."""
    if method is not None:
        if method not in known:
            raise InputError(f"--export-method {method}: not a {engine} method "
                             f"({', '.join(known)})")
        return method
    kind = source_kind(source)
    if kind not in by_source:
        raise InputError(f"{engine} has no proposer for source {source!r} (it runs "
                         f"{', '.join(sorted(by_source))}); name one with --export-method")
    return by_source[kind]
