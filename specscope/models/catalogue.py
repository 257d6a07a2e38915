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
    check_vision_encoders(specs, str(CATALOGUE_PATH))
    return specs, published


def check_vision_encoders(specs: dict[str, ModelSpec], where: str) -> None:
    """Raise `InputError` when a model's `vision_encoder` names no spec in `specs`, or names a
    model that itself has a vision encoder."""
    for name, spec in specs.items():
        if not spec.vision_encoder:
            continue
        encoder = specs.get(spec.vision_encoder)
        if encoder is None:
            raise InputError(f"{where}: model {name!r} names vision_encoder "
                             f"{spec.vision_encoder!r}, which is not in the catalogue")
        if encoder.vision_encoder:
            raise InputError(f"{where}: model {name!r} names vision_encoder "
                             f"{spec.vision_encoder!r}, which has a vision encoder itself")


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
