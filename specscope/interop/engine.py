"""What every engine exporter takes and returns, and the names an engine's command needs."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from specscope.errors import InputError
from specscope.models import get_model, list_models
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

    @property
    def source(self) -> str:
        return self.setup.source

    @property
    def chains_only(self) -> bool:
        return chains_only(self.setup)

    def draft_id(self) -> str | None:
        """The draft model's Hugging Face id (`model_id`); None for a model-free drafter."""
        name = draft_model(self.source) or self.drafter
        return None if name == NO_DRAFTER else model_id(name)


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
MODEL_REF = re.compile(r"[\w.-]+(/[\w.-]+)*/?")


def checked_model(name: str, option: str) -> str:
    """`name` when it is a catalogue model, a Hugging Face id (org/name) or a path; an
    `InputError` naming `option` otherwise."""
    if name in list_models() or MODEL_REF.fullmatch(name):
        return name
    raise InputError(f"{option} {name!r}: not a catalogue model, a Hugging Face id (org/name) "
                     "or a path")


def model_id(name: str) -> str:
    """A catalogue model's Hugging Face id, as its catalogue entry cites it (the name itself
    when the entry cites none, or for a model outside the catalogue)."""
    if name not in list_models():
        return name
    found = HF_ID.search(get_model(name).source)
    return found.group(1) if found else name


def method_for(source: str, method: str | None, engine: str, by_source: dict[str, str],
               known: tuple[str, ...]) -> str:
    """The engine method: `method` if it is one of `known`, else the default of `source`'s
    kind in `by_source` (keys: "ngram", "suffix", "draft"); an `InputError` naming the option
    or the source otherwise."""
    if method is not None:
        if method not in known:
            raise InputError(f"--export-method {method}: not a {engine} method "
                             f"({', '.join(known)})")
        return method
    kind = source if source in SEQUENCE_PROPOSERS else (
        "draft" if draft_model(source) or source == DEFAULT_SOURCE else source)
    if kind not in by_source:
        raise InputError(f"{engine} has no proposer for source {source!r} (it runs "
                         f"{', '.join(sorted(by_source))}); name one with --export-method")
    return by_source[kind]
