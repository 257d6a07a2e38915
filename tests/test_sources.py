"""The one source↔drafter mapping (`specscope.trace.sources`): `--source` and `--drafter`, each
defaulting to the other, a kind alone resolving when unique, and the self-speculative case."""

from __future__ import annotations

import pytest

from specscope.errors import InputError
from specscope.models import get_model, list_models
from specscope.models.catalogue import drafter_spec
from specscope.trace import (
    Drafting,
    Trace,
    default_source,
    draft_model,
    drafting,
    resolve_source,
    source_of,
    synth_trace,
)
from specscope.tree import DEFAULT_SOURCE

CATALOGUE = list_models()


def pair(chosen: Drafting) -> tuple[str, str | None]:
    return chosen.source, chosen.drafter


def traced(*sources: str) -> Trace:
    """A small synthetic trace holding `sources`."""
    return synth_trace(2, 0, sources=sources, length=8)


def test_sources_name_their_draft_model() -> None:
    assert draft_model("draft:llama-68m") == draft_model("rasd:llama-68m") == "llama-68m"
    assert draft_model("ngram") is draft_model("layerskip") is draft_model("draft:") is None
    assert source_of("llama-68m") == "draft:llama-68m" and source_of("ngram") == "ngram"


def test_a_kind_alone_resolves_to_the_traces_only_source_of_that_kind() -> None:
    trace = traced("ngram", "rasd:llama-68m", "draft:llama-3.2-1b")
    assert resolve_source(trace, "rasd") == "rasd:llama-68m"
    assert resolve_source(trace, "draft") == "draft:llama-3.2-1b"
    assert resolve_source(trace, "ngram") == "ngram"
    assert resolve_source(trace, None) == default_source(trace) == "draft:llama-3.2-1b"
    with pytest.raises(InputError, match=r"'suffix' is not in the trace \(sources: ngram, "):
        resolve_source(trace, "suffix")
    with pytest.raises(InputError, match="'draft:llama' is not in the trace"):
        resolve_source(trace, "draft:llama")  # a name is matched whole, never cut short


def test_an_ambiguous_kind_names_the_candidates() -> None:
    trace = traced("rasd:llama-68m", "rasd:llama-3.2-1b")
    with pytest.raises(InputError, match=r"'rasd' is ambiguous.*rasd:llama-68m, "
                                         r"rasd:llama-3\.2-1b; name one"):
        resolve_source(trace, "rasd")
    with pytest.raises(InputError, match=r"^--source: trace: source 'rasd' is ambiguous"):
        drafting(trace, "rasd", None, CATALOGUE)


def test_source_and_drafter_default_to_each_other() -> None:
    trace = traced("draft:llama-68m", "ngram", "recycle")
    assert pair(drafting(trace, None, None, CATALOGUE)) == ("draft:llama-68m", "llama-68m")
    # a given drafter is priced on the source's acceptance: the trace's default source
    assert pair(drafting(trace, None, "llama-3.2-1b", CATALOGUE)) == ("draft:llama-68m",
                                                                     "llama-3.2-1b")
    assert drafting(trace, "draft", "llama-3.2-1b", CATALOGUE).source == "draft:llama-68m"
    # a model-free drafter's source is its own name, and prices nothing
    chosen = drafting(trace, None, "ngram", CATALOGUE)
    assert (chosen.source, chosen.drafter, chosen.model) == ("ngram", "ngram", None)
    assert drafting(trace, "recycle", None, CATALOGUE).model is None
    assert drafting(trace, "draft:llama-68m", "none", CATALOGUE).model is None
    with pytest.raises(InputError, match="'suffix' is not in the trace"):
        drafting(trace, None, "suffix", CATALOGUE)


def test_a_drafter_takes_its_own_source_draft_before_rasd() -> None:
    trace = traced("ngram", "rasd:llama-68m", "draft:llama-3.2-1b")
    assert drafting(trace, None, "llama-68m", CATALOGUE).source == "rasd:llama-68m"
    assert drafting(trace, None, "llama-3.2-1b", CATALOGUE).source == "draft:llama-3.2-1b"
    both = traced("rasd:llama-68m", "draft:llama-68m")
    assert drafting(both, None, "llama-68m", CATALOGUE).source == "draft:llama-68m"


def test_a_rasd_source_prices_its_draft_model() -> None:
    trace = traced("rasd:llama-68m", "ngram")
    chosen = drafting(trace, "rasd", None, CATALOGUE)
    assert (chosen.source, chosen.model) == ("rasd:llama-68m", "llama-68m")


def test_a_draft_model_outside_the_catalogue_needs_a_drafter() -> None:
    trace = traced("draft:llama-68m")
    with pytest.raises(InputError, match="'llama-68m' of source 'draft:llama-68m' is not in "
                                         "the catalogue; pass --drafter"):
        drafting(trace, None, None, ["llama-3.2-1b"])
    assert drafting(trace, None, "llama-3.2-1b", ["llama-3.2-1b"]).model == "llama-3.2-1b"


def test_without_a_trace_the_source_is_the_given_or_the_drafters_own() -> None:
    assert pair(drafting(None, None, None, CATALOGUE)) == (DEFAULT_SOURCE, None)
    assert pair(drafting(None, None, "llama-68m", CATALOGUE)) == ("draft:llama-68m", "llama-68m")
    assert drafting(None, "rasd:llama-3.2-1b", None, CATALOGUE).model == "llama-3.2-1b"
    assert drafting(None, DEFAULT_SOURCE, None, CATALOGUE).drafter is None


def test_a_self_speculative_source_prices_its_share_of_the_targets_layers() -> None:
    trace = traced("draft:llama-68m")
    settings = {"mean_layers": 3.0, "target_layers": 4}
    renamed = trace.df.with_columns(trace.df["source"].replace({"draft:llama-68m": "layerskip"}))
    own = Trace(renamed, trace.metadata | {"drafters": {"layerskip": settings}})
    chosen = drafting(own, None, None, CATALOGUE)
    assert (chosen.source, chosen.drafter, chosen.kept_layers) == ("layerskip", None, 0.75)
    spec = drafter_spec(chosen.model, get_model("llama-2-7b"), chosen.kept_layers, "layerskip")
    assert spec is not None and (spec.name, spec.n_layers) == ("llama-2-7b[24/32 layers]", 24)
    with pytest.raises(InputError, match=r"target mamba2-2\.7b is 'ssm'; pass --drafter"):
        drafter_spec(None, get_model("mamba2-2.7b"), 0.75, "layerskip")
    assert drafting(own, None, "llama-68m", CATALOGUE).kept_layers is None  # --drafter wins
