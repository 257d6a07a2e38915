"""The model catalogue: real architectures read from `data/catalogue.toml` (models are data)."""

from __future__ import annotations

import dataclasses
import tomllib
from functools import cache
from pathlib import Path

from specscope.errors import InputError
from specscope.models.hf_config import spec_from_config
from specscope.models.spec import ModelSpec, spec_from_table
from specscope.models.zoo import zoo_report, zoo_specs
from specscope.names import MTP_DRAFTER

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
    """The `ModelSpec` for `name`: a catalogue model, or a Hugging Face model folder or config.json
    path (a name with a path separator, ending in .json, or naming a folder), so that any model
    of a family `spec_from_config` reads is priced; anything else raises `InputError`."""
    specs = _catalogue()[0]
    if name in specs:
        return specs[name]
    path = Path(name)
    if path.is_dir() or name.endswith(".json") or any(sep in name for sep in ("/", "\\")):
        if not path.exists():
            raise InputError(f"unknown model {name!r}: no such folder or file (a model is a "
                             "catalogue name or a Hugging Face folder or config.json path)")
        return _config_spec(path, path.stat().st_mtime_ns)
    raise InputError(f"unknown model {name!r}; known models: {', '.join(list_models())}; or "
                     "give a path to a Hugging Face folder or its config.json")


@cache
def _config_spec(path: Path, mtime_ns: int) -> ModelSpec:
    """`spec_from_config` of `path` as it was at `mtime_ns`: read once however often a command
    (or a sweep's every cell) names it."""
    return spec_from_config(path)


MTP_SUFFIX = "/mtp"
"""`mtp_spec` names a target's MTP module `<target>/mtp`."""


def mtp_spec(target: ModelSpec) -> ModelSpec:
    """The module `--drafter mtp` runs: one of `target`'s multi-token-prediction layers, reused
    for every drafted level as SGLang's NEXTN and vLLM's mtp run DeepSeek-V3's single layer.

    DeepSeek-V3's MTP module (arXiv:2412.19437 §2.2; vLLM's deepseek_mtp.py) normalises the
    token's embedding and the target's last hidden state, concatenates them and projects 2d → d
    (eh_proj, 16-bit: `fused_inputs`), runs one decoder layer of the target's kind (latent
    attention over its own cache of the whole context, the routed and shared experts: layer
    n_layers is past the first dense ones) and ends in the target's final norm and LM head. Its
    embedding and head are counted as the checkpoint stores them (the 14B module beside the
    671B main model holds its own copies). A target declaring no MTP layer is an `InputError`."""
    if target.mtp_layers < 1:
        raise InputError(f"--drafter mtp drafts with the target's multi-token-prediction layers; "
                         f"{target.name} declares none (num_nextn_predict_layers 0)")
    return dataclasses.replace(target, name=target.name + MTP_SUFFIX, n_layers=1,
                               first_dense_layers=0, mtp_layers=0, sliding_layers=(),
                               attn_layers=(), fused_inputs=2, vision_encoder="",
                               image_tokens=0, image_patches=0)


def is_head(name: str | None) -> bool:
    """Whether `name` is a catalogue head: a model drafting on its target's features
    (`ModelSpec.fused_inputs` > 0), which engines serve by a method of its own (EAGLE)."""
    return name is not None and name in _catalogue()[0] and get_model(name).fused_inputs > 0


def drafter_spec(model: str | None, target: ModelSpec, kept_layers: float | None = None,
                 source: str = "") -> ModelSpec | None:
    """The spec priced as the drafter: the catalogue's `model` (a head, `fused_inputs` > 0,
    only for a target of its width), or the target's MTP module (`mtp_spec`) for
    `MTP_DRAFTER`; for a self-speculative `source` running the share
    `kept_layers` of the target's layers (layerskip), `target` with that share of its layers
    (rounded, at least one), embeddings and LM head whole; None when neither."""
    if kept_layers is None:
        if model == MTP_DRAFTER:
            return mtp_spec(target)
        spec = None if model is None else get_model(model)
        if spec is not None and spec.fused_inputs and spec.d_model != target.d_model:
            raise InputError(f"draft {model} is a head drafting on the features of a target "
                             f"of width {spec.d_model}; {target.name}'s is {target.d_model}")
        return spec
    if target.arch != "transformer":
        raise InputError(f"source {source!r} drafts with some of a Transformer's layers; "
                         f"target {target.name} is {target.arch!r}; pass --drafter")
    layers = max(1, round(kept_layers * target.n_layers))
    return dataclasses.replace(target, name=f"{target.name}[{layers}/{target.n_layers} layers]",
                               n_layers=layers)


def published_params(name: str) -> float:
    """The parameter count the model's authors publish (a count, e.g. 6.74e9); 0 for a model
    read from a Hugging Face config, which states none."""
    get_model(name)
    return _catalogue()[1].get(name, 0.0)
