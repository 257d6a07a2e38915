"""Trace sources and the drafters priced for them: the one mapping every command uses.

A source names who drafted a trace's candidates: `draft:<model>` (a draft model), `rasd:<model>`
(RASD: that draft model's forwards fused with retrieval, which is host work), a model-free
drafter (`ngram`, `suffix`, `recycle`, `stand`), or a self-speculative drafter (`layerskip`,
whose trace settings record `mean_layers` of the target's `target_layers`).

Commands take two options, each defaulting to the other (`drafting`):

- `--source`, whose acceptance is used: a source of the trace, or a kind alone (`draft`,
  `rasd`) when the trace holds exactly one source of that kind (`resolve_source`);
- `--drafter`, what is priced: a catalogue model, the target's MTP layer (`mtp`), a model-free
  drafter, or `none`.

Without `--drafter`, a `draft:<model>` or `rasd:<model>` source prices `<model>`, and a
self-speculative source prices its share of the target's layers. Without `--source`, the
drafter's own source is used when the trace holds it (`draft:<model>`, else `rasd:<model>`; a
model-free drafter's own name), else, for a model, the trace's default source, whose acceptance
is then priced as that model's.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from specscope.errors import InputError
from specscope.names import MODEL_FREE_SOURCES, MTP_DRAFTER
from specscope.trace.schema import Trace, trace_sources
from specscope.tree import DEFAULT_SOURCE

DRAFT_PREFIX = "draft:"
RASD_PREFIX = "rasd:"
NO_DRAFTER = "none"
"""`--drafter none`: nothing priced for drafting."""


def draft_model(source: str) -> str | None:
    """The draft model a source's drafter runs: `<model>` of `draft:<model>` or `rasd:<model>`;
    None for the others."""
    for prefix in (DRAFT_PREFIX, RASD_PREFIX):
        if source.startswith(prefix) and len(source) > len(prefix):
            return source.removeprefix(prefix)
    return None


def source_of(drafter: str) -> str:
    """The source a drafter writes: a model-free drafter's own name, a draft model's
    `draft:<model>`."""
    return drafter if drafter in MODEL_FREE_SOURCES else DRAFT_PREFIX + drafter


def default_source(trace: Trace) -> str:
    """The first `draft:` source if there is one, else the first source."""
    sources = trace_sources(trace)
    return next((s for s in sources if s.startswith(DRAFT_PREFIX)), sources[0])


def resolve_source(trace: Trace, source: str | None) -> str:
    """`source` as the trace names it: the default source when None, the name itself, or the
    one source of a kind given alone (`rasd` → the trace's only `rasd:*` source); an unknown
    name or an ambiguous kind is an `InputError` naming the candidates."""
    if source is None:
        return default_source(trace)
    sources = trace_sources(trace)
    if source in sources:
        return source
    kind = [s for s in sources if ":" not in source and s.startswith(f"{source}:")]
    if len(kind) == 1:
        return kind[0]
    if kind:
        raise InputError(f"{trace.name}: source {source!r} is ambiguous: the trace holds "
                         f"{', '.join(kind)}; name one of them")
    raise InputError(
        f"{trace.name}: source {source!r} is not in the trace (sources: {', '.join(sources)})"
    )


@dataclass(frozen=True)
class Drafting:
    """The source whose acceptance is used and the drafter priced for it: `drafter` as given
    (a catalogue model, a model-free drafter or `none`), else the source's draft model, else
    None; `kept_layers` is a self-speculative source's share of the target's layers."""

    source: str
    drafter: str | None
    kept_layers: float | None = None

    @property
    def model(self) -> str | None:
        """The catalogue model priced as the drafter; None when none is (a model-free drafter,
        `none`, or a self-speculative source, which runs the target's own layers)."""
        free = self.drafter in MODEL_FREE_SOURCES or self.drafter == NO_DRAFTER
        return None if free else self.drafter


def _names_a_drafter(source: str) -> bool:
    """Whether `source` names a drafter by itself: the generic draft, a draft model's, or a
    model-free drafter's."""
    model = source.removeprefix(DRAFT_PREFIX).removeprefix(RASD_PREFIX)
    return (source == DEFAULT_SOURCE or source in MODEL_FREE_SOURCES
            or (model != source and bool(model.strip())))


def drafting(trace: Trace | None, source: str | None, drafter: str | None,
             catalogue: Collection[str]) -> Drafting:
    """`--source` and `--drafter`, each defaulting to the other (module docstring). Without a
    trace the source is `source`, else the drafter's own (`DEFAULT_SOURCE` without either). A
    source's draft model must be in `catalogue` unless `--drafter` is given."""
    if trace is None:
        if source is not None and not _names_a_drafter(source):
            raise InputError(f"--source {source!r}: without a trace, a source is "
                             f"{DEFAULT_SOURCE}, {DRAFT_PREFIX}MODEL, {RASD_PREFIX}MODEL or one "
                             f"of {', '.join(sorted(MODEL_FREE_SOURCES))}")
        source = source or (DEFAULT_SOURCE if drafter is None else source_of(drafter))
    elif source is not None:
        try:
            source = resolve_source(trace, source)
        except InputError as exc:
            raise InputError(f"--source: {exc}") from None
    elif drafter in MODEL_FREE_SOURCES:
        source = resolve_source(trace, drafter)
    else:
        held = trace_sources(trace)
        own = [] if drafter is None else [DRAFT_PREFIX + drafter, RASD_PREFIX + drafter]
        source = next((s for s in own if s in held), None) or default_source(trace)
    if drafter is not None:
        return Drafting(source, drafter)
    model = draft_model(source)
    if model is not None and model not in catalogue and model != MTP_DRAFTER:
        raise InputError(f"draft model {model!r} of source {source!r} is not in the catalogue; "
                         "pass --drafter")
    settings = {} if trace is None else trace.metadata.get("drafters", {}).get(source, {})
    if model is None and {"mean_layers", "target_layers"} <= set(settings):
        return Drafting(source, None, float(settings["mean_layers"])
                        / float(settings["target_layers"]))
    return Drafting(source, model)
