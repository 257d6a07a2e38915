"""Kangaroo: a deeper exit makes drafting dearer and verification cheaper."""

import dataclasses

import pytest

from specscope.errors import InputError
from specscope.systems.case import Case
from specscope.systems.kangaroo import predict

CASE = Case(name="k", system="kangaroo", hw="a100", target="vicuna-7b", where="t.toml",
            tree=(1,) * 6, tau=2.5, engine="research-hf")


def test_exit_layer_moves_work_from_verify_to_draft() -> None:
    two, four = predict(CASE), predict(dataclasses.replace(CASE, options={"exit_layer": 4}))
    assert four.parts["draft"] > two.parts["draft"]
    assert four.parts["verify"] < two.parts["verify"]
    fewer = predict(dataclasses.replace(CASE, options={"drafted": 3}))
    assert fewer.parts["draft"] == pytest.approx(two.parts["draft"] / 2)


def test_bad_options_name_the_case() -> None:
    for options in ({"exit_layer": 32}, {"drafted": 7}):
        with pytest.raises(InputError, match="case 'k'"):
            predict(dataclasses.replace(CASE, options=options))
    with pytest.raises(InputError, match="chain"):
        predict(dataclasses.replace(CASE, tree=(2, 2)))
