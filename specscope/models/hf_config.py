"""`ModelSpec` from a Hugging Face model's `config.json` (no weights needed), so that any model of a
supported family can be priced; and `llama_spec`, which says whether specscope's own torch
`Transformer` reproduces a Llama folder exactly.

Families: Llama, Mistral, Qwen2 and Qwen3 (dense, grouped-query attention), Qwen3-MoE and Mixtral
(mixture of experts), DeepSeek-V2/V3 (latent attention, shared experts, dense first layers,
multi-token-prediction layers) and gpt-oss (experts, sliding-window layers). Whatever is wrong with
a config (an unsupported architecture, a missing key, a value that is not a number) is one
`InputError` line naming the file.

A Llama folder whose config needs nothing the `Transformer` lacks (no RoPE scaling, no biases,
SiLU MLP) loads into specscope's `Transformer`, so it runs under every runtime (eager, CUDA graph,
compiled) with split tree attention; other folders go through the Hugging Face adapter, eager.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specscope.errors import InputError
from specscope.files import read_json
from specscope.models.spec import ModelSpec, spec_from_table

ARCHITECTURES = {  # model_type -> (its architectures entry, the family that reads it)
    "llama": ("LlamaForCausalLM", "llama"),
    "mistral": ("MistralForCausalLM", "mistral"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
    "mixtral": ("MixtralForCausalLM", "mixtral"),
    "deepseek_v2": ("DeepseekV2ForCausalLM", "deepseek"),
    "deepseek_v3": ("DeepseekV3ForCausalLM", "deepseek"),
    "gpt_oss": ("GptOssForCausalLM", "gpt_oss"),
}
MODEL_TYPES = {arch: model_type for model_type, (arch, _) in ARCHITECTURES.items()}
SUPPORTED = ", ".join(MODEL_TYPES)

# What transformers' configuration classes default to when a config omits the key:
# (rope_theta, rms_norm_eps, max_position_embeddings, head_dim; 0: hidden_size / heads)
DEFAULTS = {
    "llama": (10000.0, 1e-6, 2048, 0),
    "mistral": (10000.0, 1e-6, 131072, 0),
    "qwen2": (10000.0, 1e-6, 32768, 0),
    "qwen3": (10000.0, 1e-6, 32768, 128),
    "qwen3_moe": (10000.0, 1e-6, 32768, 128),
    "mixtral": (1e6, 1e-5, 131072, 0),
    "deepseek_v2": (10000.0, 1e-6, 2048, 0),
    "deepseek_v3": (10000.0, 1e-6, 4096, 0),
    "gpt_oss": (150000.0, 1e-5, 131072, 64),
}

# Keys every config of a family must hold (the others have the defaults above)
REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
            "intermediate_size")
FAMILY_REQUIRED = {
    "llama": (), "mistral": (), "qwen2": (), "qwen3": (),
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "mixtral": ("num_local_experts", "num_experts_per_tok"),
    "deepseek": ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                 "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "gpt_oss": ("num_local_experts", "sliding_window", "layer_types"),
}


def spec_from_config(path: str | Path) -> ModelSpec:
    """The `ModelSpec` a Hugging Face model folder's (or a `config.json` path's) config states,
    named after the folder; an `InputError` line naming the file for anything it cannot price."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    config = _load(path)
    return _build(config, _model_type(config, path), path)


def llama_spec(folder: str | Path) -> ModelSpec | None:
    """The `ModelSpec` of a Llama folder that specscope's `Transformer` reproduces exactly, or None
    when the folder has no config.json, holds another architecture or a Llama variant the
    `Transformer` does not reproduce (RoPE scaling, attention or MLP biases, an activation other
    than SiLU)."""
    path = Path(folder) / "config.json"
    if not path.exists():
        return None
    config = _load(path)
    if _family(config) != "llama":
        return None
    rope = config.get("rope_parameters") or {}  # transformers ≥ 5; older ones: rope_theta
    if (config.get("rope_scaling") or rope.get("rope_type", "default") != "default"
            or config.get("attention_bias") or config.get("mlp_bias")
            or config.get("hidden_act", "silu") != "silu"):
        return None
    return _build(config, "llama", path)


def _load(path: Path) -> dict[str, Any]:
    """The JSON object in `path`, a model config."""
    config = read_json(path, "model config")
    if not isinstance(config, dict):
        raise InputError(f"{path}: not a JSON object (a Hugging Face config.json is expected)")
    return config


def _family(config: dict[str, Any]) -> str | None:
    """The model_type of the first supported entry of `architectures` (a config without them:
    of a supported `model_type`), or None: architectures stated and none supported is another
    model, whatever its model_type says."""
    architectures = config.get("architectures") or ()
    for arch in architectures:
        if isinstance(arch, str) and arch in MODEL_TYPES:
            return MODEL_TYPES[arch]
    if architectures:
        return None
    model_type = config.get("model_type")
    return model_type if isinstance(model_type, str) and model_type in ARCHITECTURES else None


def _model_type(config: dict[str, Any], path: Path) -> str:
    """`_family(config)`, or an `InputError` naming what the config declares."""
    model_type = _family(config)
    if model_type is None:
        stated = config.get("architectures") or config.get("model_type")
        raise InputError(f"{path}: architectures {stated!r} is not supported (supported "
                         f"architectures: {SUPPORTED})")
    return model_type


class _Reader:
    """Typed reads of one config's keys, each failure one `InputError` line naming the file."""

    def __init__(self, config: dict[str, Any], path: Path) -> None:
        self.config, self.path = config, path

    def fail(self, problem: str) -> InputError:
        """The one line of this config's `problem`."""
        return InputError(f"{self.path}: {problem} (supported architectures: {SUPPORTED})")

    def require(self, keys: tuple[str, ...], arch: str) -> None:
        """Raise when any of `keys` is missing (or null), naming them all."""
        missing = [key for key in keys if self.config.get(key) is None]
        if missing:
            raise self.fail(f"a {arch} config needs key(s) {', '.join(map(repr, missing))}")

    def number(self, key: str, default: float | None = None) -> float:
        """`key`'s value as a number (`default` when missing or null)."""
        value = self.config.get(key)
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(f"key {key!r} is {value!r}, not a number")
        return value

    def integer(self, key: str, default: int | None = None) -> int:
        """`key`'s value as a whole number (`default` when missing or null)."""
        value = self.number(key, None if default is None else float(default))
        if value != int(value):
            raise self.fail(f"key {key!r} is {value!r}, not a whole number")
        return int(value)

    def integers(self, key: str) -> list[int]:
        """`key`'s value as a list of whole numbers (empty when missing or null)."""
        value = self.config.get(key) or []
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self.fail(f"key {key!r} is {value!r}, not a list of layer numbers")
        return value


def _build(config: dict[str, Any], model_type: str, path: Path) -> ModelSpec:
    """The checked spec of a config of a supported `model_type`."""
    read = _Reader(config, path)
    arch, family = ARCHITECTURES[model_type]
    read.require(REQUIRED + FAMILY_REQUIRED[family], arch)
    rope_theta, eps, max_len, head_dim = DEFAULTS[model_type]
    rope = config.get("rope_parameters")  # transformers ≥ 5 keeps rope_theta there
    theta = _Reader(rope, path) if isinstance(rope, dict) and "rope_theta" in rope else read
    heads = read.integer("num_attention_heads")
    d_model = read.integer("hidden_size")
    n_layers = read.integer("num_hidden_layers")
    fields: dict[str, Any] = {
        "arch": "transformer",
        "n_layers": n_layers,
        "d_model": d_model,
        "vocab_size": read.integer("vocab_size"),
        "n_heads": heads,
        "n_kv_heads": read.integer("num_key_value_heads", heads),
        "head_dim": read.integer("head_dim", head_dim or d_model // max(heads, 1)),
        "d_ff": read.integer("intermediate_size"),
        "rope_theta": float(theta.number("rope_theta", rope_theta)),
        "norm_eps": float(read.number("rms_norm_eps", eps)),
        "tie_embeddings": bool(config.get("tie_word_embeddings", False)),
        "max_seq_len": read.integer("max_position_embeddings", max_len),
        "source": f"Hugging Face config {path}",
    }
    fields.update(_FAMILY_FIELDS[family](read, n_layers, fields["d_ff"]))
    return spec_from_table(path.parent.resolve().name, fields, str(path))


def _dense(read: _Reader, n_layers: int, d_ff: int) -> dict[str, Any]:
    """Llama, Qwen2 and Qwen3: nothing beyond the common keys; a Qwen config that turns its
    sliding window on is refused (its layers from max_window_layers on would slide)."""
    if read.config.get("use_sliding_window"):
        raise read.fail("use_sliding_window true is not priced (only gpt-oss's layer_types "
                        "and Mistral's all-layer window are)")
    return {}


def _mistral(read: _Reader, n_layers: int, d_ff: int) -> dict[str, Any]:
    """Mistral: a sliding_window, when set, limits every layer's attention."""
    window = read.integer("sliding_window", 0)
    return {"sliding_window": window, "sliding_layers": tuple(range(n_layers)) if window else ()}


def _mixtral(read: _Reader, n_layers: int, d_ff: int) -> dict[str, Any]:
    """Mixtral: every layer's MLP is routed experts of width intermediate_size."""
    return {**_mistral(read, n_layers, d_ff), "d_ff": 0, "d_expert": d_ff,
            "n_experts": read.integer("num_local_experts"),
            "experts_per_token": read.integer("num_experts_per_tok")}


def _qwen3_moe(read: _Reader, n_layers: int, d_ff: int) -> dict[str, Any]:
    """Qwen3-MoE: layer i is sparse when not in mlp_only_layers and (i + 1) is a multiple of
    decoder_sparse_step; only a run of dense layers then sparse ones to the end is priced."""
    step = read.integer("decoder_sparse_step", 1)
    dense = set(read.integers("mlp_only_layers"))
    if step < 1:
        raise read.fail(f"decoder_sparse_step {step} is not a positive whole number")
    sparse = [i for i in range(n_layers) if i not in dense and (i + 1) % step == 0]
    first = n_layers - len(sparse)
    if sparse != list(range(first, n_layers)):
        raise read.fail(f"sparse layers {sparse} (decoder_sparse_step {step}, mlp_only_layers "
                        f"{sorted(dense)}) are not every layer from some first one on, the only "
                        "mixture-of-experts layout priced")
    return {"d_ff": d_ff if first else 0, "first_dense_layers": first,
            "n_experts": read.integer("num_experts"),
            "experts_per_token": read.integer("num_experts_per_tok"),
            "d_expert": read.integer("moe_intermediate_size")}


def _deepseek(read: _Reader, n_layers: int, d_ff: int) -> dict[str, Any]:
    """DeepSeek-V2/V3: latent attention; the first first_k_dense_replace layers dense (width
    intermediate_size), the others routed experts beside n_shared_experts always-on ones of
    width moe_intermediate_size; num_nextn_predict_layers multi-token-prediction layers."""
    freq = read.integer("moe_layer_freq", 1)
    if freq != 1:
        raise read.fail(f"moe_layer_freq {freq}: only every layer from first_k_dense_replace "
                        "on being a mixture of experts (moe_layer_freq 1) is priced")
    first = read.integer("first_k_dense_replace", 0)
    d_expert = read.integer("moe_intermediate_size")
    nope, rope = read.integer("qk_nope_head_dim"), read.integer("qk_rope_head_dim")
    return {"n_kv_heads": read.integer("num_attention_heads"), "head_dim": nope + rope,
            "kv_lora_rank": read.integer("kv_lora_rank"),
            "q_lora_rank": read.integer("q_lora_rank", 0),
            "qk_nope_head_dim": nope, "qk_rope_head_dim": rope,
            "v_head_dim": read.integer("v_head_dim"),
            "d_ff": d_ff if first else 0, "first_dense_layers": first,
            "n_experts": read.integer("n_routed_experts"),
            "experts_per_token": read.integer("num_experts_per_tok"), "d_expert": d_expert,
            "d_shared": read.integer("n_shared_experts", 0) * d_expert,
            "mtp_layers": read.integer("num_nextn_predict_layers", 0)}


def _gpt_oss(read: _Reader, n_layers: int, d_ff: int) -> dict[str, Any]:
    """gpt-oss: every layer's MLP is routed experts of width intermediate_size; the layers
    layer_types marks "sliding_attention" attend to the last sliding_window tokens."""
    kinds = read.config["layer_types"]
    if not isinstance(kinds, list) or len(kinds) != n_layers or not set(kinds) <= {
            "sliding_attention", "full_attention"}:
        raise read.fail(f"layer_types must list 'sliding_attention' or 'full_attention' for "
                        f"each of the {n_layers} layers")
    per_token = "num_experts_per_tok" if "num_experts_per_tok" in read.config else \
        "experts_per_token"
    read.require((per_token,), "GptOssForCausalLM")
    return {"d_ff": 0, "d_expert": d_ff, "n_experts": read.integer("num_local_experts"),
            "experts_per_token": read.integer(per_token),
            "sliding_window": read.integer("sliding_window"),
            "sliding_layers": tuple(i for i, kind in enumerate(kinds)
                                    if kind == "sliding_attention")}


_FAMILY_FIELDS = {
    "llama": _dense, "qwen2": _dense, "qwen3": _dense, "mistral": _mistral, "mixtral": _mixtral,
    "qwen3_moe": _qwen3_moe, "deepseek": _deepseek, "gpt_oss": _gpt_oss,
}
