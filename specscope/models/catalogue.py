"""The model catalogue: real architectures read from `data/catalogue.toml` (models are data)."""

from __future__ import annotations

import dataclasses
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from specscope.errors import InputError
from specscope.models.spec import ModelSpec

CATALOGUE_PATH = Path(__file__).parent / "data" / "catalogue.toml"
ARCHS = ("transformer", "ssm", "hybrid")
_SPEC_FIELDS = {f.name for f in dataclasses.fields(ModelSpec)} - {"name"}


def spec_from_table(name: str, table: dict[str, Any], where: str) -> ModelSpec:
    """Build and check one `ModelSpec` from a TOML table; `where` names the file for errors."""
    unknown = sorted(set(table) - _SPEC_FIELDS)
    if unknown:
        raise InputError(f"{where}: model {name!r} has unknown keys {unknown}")
    fields = dict(table)
    if "attn_layers" in fields:
        fields["attn_layers"] = tuple(fields["attn_layers"])
    try:
        spec = ModelSpec(name=name, **fields)
    except TypeError as exc:
        raise InputError(f"{where}: model {name!r}: {exc}") from None
    _check(spec, where)
    return spec


def _check(spec: ModelSpec, where: str) -> None:
    """Raise `InputError` when a spec is inconsistent (missing sizes for its architecture)."""
    bad = f"{where}: model {spec.name!r}"
    if spec.arch not in ARCHS:
        raise InputError(f"{bad}: arch {spec.arch!r} is not one of {list(ARCHS)}")
    if min(spec.n_layers, spec.d_model, spec.vocab_size) < 1:
        raise InputError(f"{bad}: n_layers, d_model and vocab_size must be positive")
    kinds = spec.layer_kinds
    if "attn" in kinds and min(spec.n_heads, spec.n_kv_heads, spec.head_dim) < 1:
        raise InputError(f"{bad}: attention layers need n_heads, n_kv_heads and head_dim")
    if "attn" in kinds and spec.n_heads % spec.n_kv_heads:
        raise InputError(f"{bad}: n_heads {spec.n_heads} is not a multiple of n_kv_heads")
    if "ssm" in kinds and min(spec.d_state, spec.ssm_heads, spec.ssm_head_dim) < 1:
        raise InputError(f"{bad}: Mamba-2 layers need d_state, ssm_heads and ssm_head_dim")
    if spec.arch == "transformer" and spec.d_ff < 1:
        raise InputError(f"{bad}: a transformer needs d_ff")
    if spec.arch == "hybrid" and not all(0 <= i < spec.n_layers for i in spec.attn_layers):
        raise InputError(f"{bad}: attn_layers must lie in 0..{spec.n_layers - 1}")
    if spec.weight_bits not in (16, 8, 4):
        raise InputError(f"{bad}: weight_bits {spec.weight_bits} is not 16, 8 or 4")


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
    from specscope.models.zoo import zoo_report, zoo_specs  # the zoo builds on this module

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
