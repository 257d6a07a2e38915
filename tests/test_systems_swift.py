"""SWIFT: skipping more layers makes the self-draft cheaper; a bad ratio names the case."""

import dataclasses

import pytest

from specscope.errors import InputError
from specscope.systems.case import Case
from specscope.systems.swift import costs, kept_share, predict

CASE = Case(name="s", system="swift", hw="a100", target="llama-2-13b", where="t.toml",
            tree=(1, 1, 1, 1), tau=2.5, engine="research-hf")


def test_skip_ratio_sets_the_draft() -> None:
    assert kept_share(CASE, 40) == pytest.approx(1 - 0.45 * 38 / 40)
    assert costs(CASE).drafter.model.n_layers == round(40 * (1 - 0.45 * 38 / 40))
    more = predict(dataclasses.replace(CASE, options={"skip_ratio": 0.7}))
    assert more.parts["draft"] < predict(CASE).parts["draft"]
    assert more.parts["verify"] == predict(CASE).parts["verify"]


def test_bad_ratio_names_the_case() -> None:
    with pytest.raises(InputError, match=r"case 's'.*skip_ratio"):
        predict(dataclasses.replace(CASE, options={"skip_ratio": 1.0}))
