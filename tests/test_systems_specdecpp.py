"""SpecDec++: the authors' stop rule at constant acceptance; its published rows reproduce."""

import dataclasses
from pathlib import Path

import pytest

from specscope.errors import InputError
from specscope.systems.case import Case
from specscope.systems.reproduce import reproduce
from specscope.systems.specdecpp import expected_tokens, predict, stop_length

CASE = Case(name="p", system="specdecpp", hw="a100", target="llama-2-70b", draft="llama-2-7b",
            where="t.toml", engine="hf-eager", gpus=2,
            options={"alpha": 0.8, "threshold": 0.7})


def test_stop_rule() -> None:
    # stop after step s once 1 - a^(s-1) > h: a = 0.8, h = 0.7 -> 0.8^5 = 0.328, 0.8^6 = 0.262
    assert stop_length(0.8, 0.7) == 7
    assert stop_length(0.8, 0.01) == 2  # the lower bound
    assert stop_length(0.999, 0.9) == 20  # the upper bound
    assert stop_length(0.8, 0.9) > stop_length(0.8, 0.5)
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_threshold_sets_drafted_length_and_tau() -> None:
    low = predict(dataclasses.replace(CASE, options={"alpha": 0.8, "threshold": 0.3}))
    high = predict(CASE)
    assert high.tokens_per_step > low.tokens_per_step
    assert high.parts["draft"] > low.parts["draft"]


def test_bad_options_name_the_case() -> None:
    for options in ({}, {"alpha": 1.2}, {"alpha": 0.5, "threshold": 1.0}):
        with pytest.raises(InputError, match="case 'p'"):
            predict(dataclasses.replace(CASE, options=options))


def test_rows_reproduce() -> None:
    assert len(reproduce(Path("examples/papers/specdecpp.toml"))) == 6
    assert len(reproduce(Path("examples/papers/engines.toml"))) == 15
