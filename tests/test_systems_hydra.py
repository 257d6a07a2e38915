"""Hydra: one head call per level; Hydra++'s prefix layer and deeper MLPs cost more."""

import dataclasses
from pathlib import Path

import pytest

from specscope.errors import InputError
from specscope.systems.case import Case
from specscope.systems.hydra import predict
from specscope.systems.reproduce import reproduce

CASE = Case(name="h", system="hydra", hw="a100", target="vicuna-7b", where="t.toml",
            tree=(10, 28, 23, 2), tau=3.0, engine="research-hf",
            options={"arch": "mlp", "mlp_layers": 1, "parents": "1,10,10,1"})


def test_levels_and_prefix_cost() -> None:
    base = predict(CASE)
    deeper = predict(dataclasses.replace(CASE, tree=(10, 28, 23, 2, 2),
                                         options={**CASE.options, "parents": "1,10,10,1,1"}))
    assert deeper.parts["draft"] > base.parts["draft"]
    plus = predict(dataclasses.replace(CASE, options={**CASE.options, "arch": "prefix-mlp"}))
    assert "prefix" in plus.parts and "prefix" not in base.parts
    more = predict(dataclasses.replace(CASE, options={**CASE.options, "parents": "1,10,28,23"}))
    assert more.parts["draft"] > base.parts["draft"]


def test_bad_options_name_the_case() -> None:
    for options, message in (({"arch": "lstm"}, "arch"), ({"parents": "1,10"}, "parents")):
        with pytest.raises(InputError, match=f"case 'h'.*{message}"):
            predict(dataclasses.replace(CASE, options=options))


def test_rows_reproduce() -> None:
    assert len(reproduce(Path("examples/papers/hydra.toml"))) == 9
