"""`ModelSpec` from a local Hugging Face folder's `config.json`, for the architectures that
specscope's own torch models implement exactly.

A Llama folder whose config needs nothing the `Transformer` lacks (no RoPE scaling, no biases,
SiLU MLP) loads into specscope's `Transformer`, so it runs under every runtime (eager, CUDA graph,
compiled) with split tree attention; other folders go through the Hugging Face adapter, eager.
"""

from __future__ import annotations

from pathlib import Path

from specscope.errors import InputError, first_line
from specscope.files import read_json
from specscope.models.spec import ModelSpec

LLAMA_ARCHITECTURES = ("LlamaForCausalLM",)


def llama_spec(folder: str | Path) -> ModelSpec | None:
    """The `ModelSpec` of a Llama folder that specscope's `Transformer` reproduces exactly, or None
    when the folder holds another architecture or a Llama variant it does not (RoPE scaling,
    attention or MLP biases, an activation other than SiLU)."""
    path = Path(folder) / "config.json"
    if not path.exists():
        return None
    config = read_json(path, "model config")
    if not isinstance(config, dict):
        raise InputError(f"{path}: not a JSON object")
    if not (set(config.get("architectures") or ()) & set(LLAMA_ARCHITECTURES)
            or config.get("model_type") == "llama"):
        return None
    rope = config.get("rope_parameters") or {}  # transformers ≥ 5; older ones: rope_theta
    if (config.get("rope_scaling") or rope.get("rope_type", "default") != "default"
            or config.get("attention_bias") or config.get("mlp_bias")
            or config.get("hidden_act", "silu") != "silu"):
        return None
    try:
        return _spec(config, Path(folder))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path}: a Llama config needs {first_line(exc)} as a number") from None


def _spec(config: dict, folder: Path) -> ModelSpec:
    """The spec a checked Llama config states."""
    rope = config.get("rope_parameters") or {}
    heads = int(config["num_attention_heads"])
    d_model = int(config["hidden_size"])
    return ModelSpec(
        name=folder.name,
        arch="transformer",
        n_layers=int(config["num_hidden_layers"]),
        d_model=d_model,
        vocab_size=int(config["vocab_size"]),
        n_heads=heads,
        n_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or d_model // heads),
        d_ff=int(config["intermediate_size"]),
        rope_theta=float(rope.get("rope_theta", config.get("rope_theta", 10000.0))),
        norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        max_seq_len=int(config.get("max_position_embeddings", 2048)),
        source=f"Hugging Face folder {folder}",
    )
