"""The model zoo: tiny code models trained by specscope itself, shipped with their weights.

`tiny-code` (Llama-style target, 3.7 M parameters), `tiny-code-draft` (its 0.4 M-parameter
drafter, distilled from it), `tiny-ssm` (Mamba-2 target of the same size) and `tiny-hybrid`
(Mamba-2 layers with two attention layers, Bamba-style) share one byte-level
BPE tokenizer and were trained on the Python standard library (`data.py`), so real speculative
decoding runs on a laptop CPU with drafters that agree with their targets often. Specs and
training reports live in `zoo.toml`; `train.py` reproduces the weights.

This module imports no torch at import time (`zoo_specs` feeds the catalogue, which must load
without it); `load_zoo_model` imports the torch models when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from specscope.errors import InputError
from specscope.files import read_toml
from specscope.models.spec import ModelSpec, spec_from_table

if TYPE_CHECKING:
    import torch

    from specscope.models.torch import Hybrid, Mamba2, Transformer
    from specscope.models.zoo.tokenizer import ZooTokenizer

ZOO_DIR = Path(__file__).parent
ZOO_TOML = "zoo.toml"
ZOO_SOURCE = "specscope zoo, trained by specscope zoo train"
ORDER = ("tiny-code", "tiny-ssm", "tiny-hybrid", "tiny-code-draft")
"""The zoo's models in training order (`zoo train --model all`): targets before the draft that
learns from them."""


def read_zoo_tables(directory: Path = ZOO_DIR) -> dict[str, dict[str, Any]]:
    """The raw TOML table of every zoo model in `directory`: spec fields plus `training`."""
    return read_toml(Path(directory) / ZOO_TOML, "zoo description")


def zoo_specs(directory: Path = ZOO_DIR) -> dict[str, ModelSpec]:
    """The `ModelSpec` of every zoo model, by name."""
    where = str(Path(directory) / ZOO_TOML)
    return {
        name: spec_from_table(name, {k: v for k, v in table.items() if k != "training"}, where)
        for name, table in read_zoo_tables(directory).items()
    }


def zoo_report(name: str, directory: Path = ZOO_DIR) -> dict[str, Any]:
    """The training report of zoo model `name` (empty before it has been trained)."""
    tables = read_zoo_tables(directory)
    if name not in tables:
        raise InputError(f"unknown zoo model {name!r}; zoo models: {', '.join(sorted(tables))}")
    return dict(tables[name].get("training", {}))


def weights_path(name: str, directory: Path = ZOO_DIR) -> Path:
    """Where zoo model `name` keeps its safetensors weights."""
    return Path(directory) / f"{name}.safetensors"


def load_zoo_tokenizer(directory: Path = ZOO_DIR) -> ZooTokenizer:
    """The tokenizer every zoo model shares."""
    from specscope.models.zoo.tokenizer import TOKENIZER_FILE, ZooTokenizer

    return ZooTokenizer.load(Path(directory) / TOKENIZER_FILE)


def load_zoo_model(
    name: str, dtype: torch.dtype | None = None, directory: Path = ZOO_DIR
) -> tuple[Transformer | Mamba2 | Hybrid, ZooTokenizer]:
    """Zoo model `name` with its trained weights (in `dtype`, default float32), eval mode, on CPU.

    Returns (model, tokenizer). Weights are stored in float16 and converted on load.
    """
    import torch

    from specscope.models.torch import Hybrid, Mamba2, Transformer, load_checkpoint

    specs = zoo_specs(directory)
    if name not in specs:
        raise InputError(f"unknown zoo model {name!r}; zoo models: {', '.join(sorted(specs))}")
    spec = specs[name]
    path = weights_path(name, directory)
    if not path.is_file():
        raise InputError(
            f"{path}: no weights for {name}; "
            f"run specscope zoo train --model {name}"
        )
    cls = {"transformer": Transformer, "ssm": Mamba2, "hybrid": Hybrid}[spec.arch]
    model = cls.random(spec, dtype=dtype or torch.float32)
    load_checkpoint(model, path)
    return model.eval(), load_zoo_tokenizer(directory)
