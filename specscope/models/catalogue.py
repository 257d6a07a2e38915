"""The model catalogue: real architectures read from `data/catalogue.toml` (models are data)."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from specscope.errors import InputError
from specscope.models.spec import ModelSpec, spec_from_table
from specscope.models.zoo import zoo_report, zoo_specs

CATALOGUE_PATH = Path(__file__).parent / "data" / "catalogue.toml"
@cache
def _catalogue() -> tuple[dict[str, ModelSpec], dict[str, float]]:
    """Every catalogue spec and its published parameter count, by name."""
    with CATALOGUE_PATH.open("rb") as fh:
        data = tomllib.load(fh)
    specs: dict[str, ModelSpec] = {}
    published: dict[str, float] = {}
    for name, table in data.items():
        fields = dict(table)
        published[name] = float(fields.pop("params_published", 0.0))
        specs[name] = spec_from_table(name, fields, str(CATALOGUE_PATH))
    for name, spec in zoo_specs().items():
        specs[name] = spec
        published[name] = float(zoo_report(name).get("params", 0.0))
    return specs, published


def list_models() -> list[str]:
    """Names of every model in the catalogue, sorted."""
    return sorted(_catalogue()[0])


def get_model(name: str) -> ModelSpec:
    """The catalogue's `ModelSpec` for `name`; an unknown name raises `InputError` (lists all)."""
    specs = _catalogue()[0]
    if name not in specs:
        raise InputError(f"unknown model {name!r}; known models: {', '.join(list_models())}")
    return specs[name]


def published_params(name: str) -> float:
    """The parameter count the model's authors publish (a count, e.g. 6.74e9)."""
    get_model(name)
    return _catalogue()[1][name]
