"""Medusa: K MLP heads priced inside the target's forward; its published rows reproduce."""

import dataclasses
from pathlib import Path

import pytest

from specscope.errors import InputError
from specscope.systems.case import Case
from specscope.systems.medusa import predict
from specscope.systems.reproduce import reproduce

CASE = Case(name="m", system="medusa", hw="a100", target="vicuna-7b", where="t.toml",
            tree=(10, 28, 23, 2), tau=2.5, engine="research-hf")


def test_more_heads_cost_more_drafting() -> None:
    four = predict(CASE)
    six = predict(dataclasses.replace(CASE, options={"heads": 6}))
    assert six.parts["draft"] > four.parts["draft"]
    assert six.parts["verify"] == four.parts["verify"]


def test_draft_is_one_pass_not_levels() -> None:
    """The heads' cost depends on the heads, not on how the tree is spread over levels."""
    wide = predict(dataclasses.replace(CASE, tree=(60, 1, 1, 1)))
    assert wide.parts["draft"] == pytest.approx(predict(CASE).parts["draft"], rel=0.05)


def test_too_few_heads_names_the_case() -> None:
    with pytest.raises(InputError, match=r"case 'm'.*heads = 2"):
        predict(dataclasses.replace(CASE, options={"heads": 2}))


def test_rows_reproduce() -> None:
    rows = reproduce(Path("examples/papers/medusa.toml"))
    assert len(rows) == 3 and all(r.predicted_speedup > 1 for r in rows)
