"""The model-free drafting systems (systems/model_free.py): each mechanism's price moves with
its own knob, bad options name the case, and the paper files reproduce."""

from __future__ import annotations

from pathlib import Path

import pytest

from specscope.errors import InputError
from specscope.systems.case import Case
from specscope.systems.model_free import lookahead_tokens
from specscope.systems.registry import SYSTEMS
from specscope.systems.reproduce import predict_case, reproduce

PAPERS = Path(__file__).resolve().parents[1] / "examples" / "papers"


def _case(system: str, **options: object) -> Case:
    tree = options.pop("tree", ())
    return Case(name="c", system=system, hw="h100", target="llama-2-7b", where="t.toml",
                tau=2.0, published_speedup=2.0, engine="research-hf", tree=tree,
                runtime="graph", options=options)
    # graph: device time shows (an eager 7B forward hides under its host issue time)


def _verified(system: str, **options: object) -> float:
    return predict_case(_case(system, **options)).parts["verify"]


def test_lookahead_tokens_follow_lade_code() -> None:
    # (W + G)(N - 1): 120 for the 7B configuration, the blog's "120x"
    assert lookahead_tokens(15, 5, 15) == 120
    assert lookahead_tokens(10, 5, 10) == 80


def test_lookahead_window_changes_the_verified_tokens() -> None:
    small = predict_case(_case("lookahead", window=4, guesses=4))
    large = predict_case(_case("lookahead", window=60, guesses=60))
    assert "32 tokens verified per step" in small.assumptions
    assert large.parts["verify"] > small.parts["verify"]


def test_longer_prompt_lookup_chain_costs_more() -> None:
    assert _verified("prompt-lookup", num_tokens=200) > _verified("prompt-lookup", num_tokens=2)


def test_rest_trie_and_stated_lookup() -> None:
    assert _verified("rest", num_draft=400) > _verified("rest", num_draft=8)
    stated = predict_case(_case("rest", retrieval_us=1500))
    assert stated.parts["draft"] == pytest.approx(1.5e-3)


def test_token_recycling_pays_one_call_per_level() -> None:
    one = predict_case(_case("token-recycling", tree=(8,)))
    six = predict_case(_case("token-recycling", tree=(8, 8, 8, 8, 8, 8)))
    assert six.parts["draft"] == pytest.approx(6 * one.parts["draft"])
    assert six.parts["draft"] > 0


@pytest.mark.parametrize(("system", "options", "message"), [
    ("lookahead", {"ngram": 1}, "ngram = 1"),
    ("prompt-lookup", {"num_tokens": 0}, "num_tokens = 0"),
    ("rest", {"num_draft": 0}, "num_draft = 0"),
    ("rest", {"retrieval_us": -1}, "retrieval_us"),
    ("prompt-lookup", {"tree": (2, 2)}, "takes no tree"),
])
def test_bad_options_name_the_case(system: str, options: dict, message: str) -> None:
    with pytest.raises(InputError, match=rf"t\.toml: case 'c'.*{message}"):
        predict_case(_case(system, **options))


def test_branching_drafts_need_tree_attention() -> None:
    case = Case(name="c", system="rest", hw="h100", target="llama-2-7b", where="t.toml",
                tau=2.0, published_speedup=2.0, engine="hf-eager")
    with pytest.raises(InputError, match=r"case 'c'.*chains only"):
        predict_case(case)


def test_registered() -> None:
    for name in ("prompt-lookup", "token-recycling", "lookahead", "rest"):
        assert name in SYSTEMS


@pytest.mark.parametrize("paper", ["prompt_lookup", "token_recycling", "lookahead", "rest"])
def test_paper_files_reproduce(paper: str) -> None:
    rows = reproduce(PAPERS / f"{paper}.toml")
    assert rows
    for row in rows:
        assert row.predicted_speedup > 0
        assert row.case.source
