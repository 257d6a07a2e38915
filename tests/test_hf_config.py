"""Hugging Face config.json -> ModelSpec (`specscope.models.hf_config`) for every supported family,
against configs written from the published ones (tests/data/configs), the catalogue entries they
equal, and one-line refusals of what cannot be priced."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from specscope.errors import InputError
from specscope.models import ModelSpec, get_model, published_params
from specscope.models.hf_config import llama_spec, spec_from_config

CONFIGS = Path(__file__).parent / "data" / "configs"
IN_CATALOGUE = ["llama-3.1-8b", "qwen3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b",
                "deepseek-v3", "gpt-oss-20b", "gpt-oss-120b"]
MOE = ["mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-20b",
       "gpt-oss-120b"]


def parsed(name: str) -> ModelSpec:
    return spec_from_config(CONFIGS / name)


def config(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / name / "config.json").read_text())


def written(tmp_path: Path, cfg: dict[str, Any], folder: str = "model") -> Path:
    path = tmp_path / folder / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    return path


def test_every_test_config_names_its_source() -> None:
    for folder in CONFIGS.iterdir():
        assert "huggingface.co/" in (folder / "SOURCE.md").read_text(), folder


@pytest.mark.parametrize("name", IN_CATALOGUE)
def test_a_published_config_gives_its_catalogue_entry(name: str) -> None:
    spec = parsed(name)
    assert spec.name == name and spec.source.startswith("Hugging Face config ")
    assert dataclasses.replace(spec, name=name, source=get_model(name).source) == get_model(name)


def test_dense_families_read_heads_rope_and_context() -> None:
    llama = parsed("llama-3.1-8b")
    assert (llama.n_heads, llama.n_kv_heads, llama.head_dim, llama.d_ff) == (32, 8, 128, 14336)
    assert (llama.rope_theta, llama.norm_eps, llama.max_seq_len) == (500000.0, 1e-5, 131072)
    assert not llama.moe and not llama.mla and llama.sliding_layers == ()
    qwen = parsed("qwen3-8b")
    assert (qwen.head_dim, qwen.n_layers, qwen.tie_embeddings) == (128, 36, False)


def test_qwen3_moe_and_mixtral_route_every_layer() -> None:
    qwen = parsed("qwen3-30b-a3b")
    assert (qwen.n_experts, qwen.experts_per_token, qwen.d_expert) == (128, 8, 768)
    assert (qwen.first_dense_layers, qwen.d_ff, qwen.d_shared) == (0, 0, 0)
    assert parsed("qwen3-235b-a22b").d_expert == 1536
    mixtral = parsed("mixtral-8x7b")  # intermediate_size is the experts' width
    assert (mixtral.n_experts, mixtral.experts_per_token, mixtral.d_expert) == (8, 2, 14336)
    assert mixtral.d_ff == 0 and mixtral.sliding_layers == ()


def test_deepseek_reads_latent_attention_shared_experts_and_mtp() -> None:
    v3 = parsed("deepseek-v3")
    assert (v3.kv_lora_rank, v3.q_lora_rank, v3.qk_nope_head_dim, v3.qk_rope_head_dim,
            v3.v_head_dim) == (512, 1536, 128, 64, 128)
    assert (v3.n_heads, v3.n_kv_heads, v3.head_dim) == (128, 128, 192)
    assert (v3.first_dense_layers, v3.d_ff, v3.n_experts, v3.experts_per_token) == (
        3, 18432, 256, 8)
    assert (v3.d_expert, v3.d_shared, v3.mtp_layers) == (2048, 2048, 1)
    lite = parsed("deepseek-v2-lite")  # q_lora_rank null: a plain query projection
    assert (lite.q_lora_rank, lite.d_shared, lite.first_dense_layers, lite.mtp_layers) == (
        0, 2 * 1408, 1, 0)
    assert (lite.n_experts, lite.experts_per_token, lite.d_ff) == (64, 6, 10944)


def test_gpt_oss_reads_experts_and_sliding_layers() -> None:
    small, large = parsed("gpt-oss-20b"), parsed("gpt-oss-120b")
    assert (small.n_experts, large.n_experts, small.experts_per_token) == (32, 128, 4)
    assert (small.d_expert, small.d_ff, small.head_dim, small.n_kv_heads) == (2880, 0, 64, 8)
    assert small.sliding_window == 128
    assert small.sliding_layers == tuple(range(0, 24, 2))
    assert large.sliding_layers == tuple(range(0, 36, 2))


@pytest.mark.parametrize("name", MOE)
def test_moe_catalogue_shapes_hold_their_published_totals(name: str) -> None:
    """A hand count (attention, every expert, routers, embeddings; no biases or MTP layers)
    reproduces the published total, so the shapes are the published ones."""
    s = get_model(name)
    d = s.d_model
    if s.mla:
        q = d * s.q_lora_rank + s.q_lora_rank * s.n_heads * s.head_dim if s.q_lora_rank \
            else d * s.n_heads * s.head_dim
        kv = d * (s.kv_lora_rank + s.qk_rope_head_dim) + s.kv_lora_rank * s.n_heads * (
            s.qk_nope_head_dim + s.v_head_dim)
        attn = q + kv + s.n_heads * s.v_head_dim * d
    else:
        attn = 2 * d * s.n_heads * s.head_dim + 2 * d * s.n_kv_heads * s.head_dim
    moe = 3 * d * (s.n_experts * s.d_expert + s.d_shared) + d * s.n_experts
    layers = s.n_layers * attn + s.first_dense_layers * 3 * d * s.d_ff + (
        s.n_layers - s.first_dense_layers) * moe
    total = layers + s.vocab_size * d * (1 if s.tie_embeddings else 2)
    assert total == pytest.approx(published_params(name), rel=0.01)


def test_get_model_takes_a_config_path_or_its_folder() -> None:
    folder = "tests/data/configs/qwen3-30b-a3b"
    by_file, by_folder = get_model(f"{folder}/config.json"), get_model(folder)
    assert by_file == by_folder
    assert dataclasses.replace(by_file, source="") == dataclasses.replace(
        get_model("qwen3-30b-a3b"), source="")
    assert published_params(folder) == 0.0


def test_get_model_refuses_an_unknown_name_or_a_missing_path() -> None:
    with pytest.raises(InputError, match=r"unknown model 'llama-9'; known models: .*llama-2-7b.*"
                                         r"config\.json"):
        get_model("llama-9")
    with pytest.raises(InputError, match=r"unknown model 'no/such': no such folder or file"):
        get_model("no/such")


def one_line_error(path: Path) -> str:
    with pytest.raises(InputError) as exc:
        spec_from_config(path)
    message = str(exc.value)
    assert "\n" not in message and str(path) in message
    return message


def test_an_unknown_architecture_is_one_line_naming_the_supported_ones(tmp_path: Path) -> None:
    cfg = {**config("llama-3.1-8b"), "architectures": ["FalconForCausalLM"], "model_type": "falcon"}
    message = one_line_error(written(tmp_path, cfg))
    assert "FalconForCausalLM" in message and "GptOssForCausalLM" in message


def test_missing_keys_are_named_together(tmp_path: Path) -> None:
    cfg = config("deepseek-v3")
    del cfg["kv_lora_rank"], cfg["hidden_size"]
    message = one_line_error(written(tmp_path, cfg))
    assert "'hidden_size', 'kv_lora_rank'" in message and "DeepseekV3ForCausalLM" in message


@pytest.mark.parametrize("value", ["4096", True, 4096.5, [4096]])
def test_a_non_numeric_value_is_one_line(tmp_path: Path, value: object) -> None:
    cfg = {**config("mixtral-8x7b"), "hidden_size": value}
    assert "'hidden_size'" in one_line_error(written(tmp_path, cfg))


@pytest.mark.parametrize(("text", "words"), [("{not json", "not JSON"),
                                             ("[1, 2]", "not a JSON object"),
                                             ("\udcff", "not UTF-8")])
def test_malformed_json_is_one_line(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert words in one_line_error(path)


def test_a_missing_or_unreadable_file_is_one_line(tmp_path: Path) -> None:
    assert "no such model config" in one_line_error(tmp_path / "config.json")
    assert "no such model config" in one_line_error(tmp_path / "empty" / "config.json")
    (tmp_path / "odd" / "config.json").mkdir(parents=True)  # a folder named config.json
    with pytest.raises(InputError, match=r"odd/config\.json: a folder, not a model config$"):
        spec_from_config(tmp_path / "odd")


def test_qwen3_moe_sparse_layers_other_than_a_tail_are_refused(tmp_path: Path) -> None:
    cfg = config("qwen3-30b-a3b")
    leading = spec_from_config(written(tmp_path, {**cfg, "mlp_only_layers": [0, 1]}, "lead"))
    assert (leading.first_dense_layers, leading.d_ff) == (2, 6144)
    message = one_line_error(written(tmp_path, {**cfg, "decoder_sparse_step": 2}, "step"))
    assert "decoder_sparse_step 2" in message
    assert "not every layer from some first one on" in one_line_error(
        written(tmp_path, {**cfg, "mlp_only_layers": [5]}, "middle"))


def test_a_malformed_layer_types_list_is_refused(tmp_path: Path) -> None:
    cfg = config("gpt-oss-20b")
    assert "layer_types must list" in one_line_error(
        written(tmp_path, {**cfg, "layer_types": ["full_attention"] * 3}))


def test_rope_theta_may_sit_in_rope_parameters(tmp_path: Path) -> None:
    cfg = config("llama-3.1-8b")
    del cfg["rope_theta"]
    cfg["rope_parameters"] = {"rope_theta": 250000.0, "rope_type": "default"}
    assert spec_from_config(written(tmp_path, cfg)).rope_theta == 250000.0


def test_llama_spec_runs_only_plain_llama_folders(tmp_path: Path) -> None:
    assert llama_spec(tmp_path) is None  # no config.json
    plain = {k: v for k, v in config("llama-3.1-8b").items() if k != "rope_scaling"}
    spec = llama_spec(written(tmp_path, plain, "plain").parent)
    assert spec is not None and spec.name == "plain" and spec.d_ff == 14336
    assert llama_spec(CONFIGS / "llama-3.1-8b") is None  # RoPE scaling: not reproduced exactly
    assert llama_spec(CONFIGS / "mixtral-8x7b") is None
    biased = written(tmp_path, {**plain, "attention_bias": True}, "biased")
    assert llama_spec(biased.parent) is None
    with pytest.raises(InputError, match="'num_hidden_layers'"):
        llama_spec(written(tmp_path, {**plain, "num_hidden_layers": "32"}, "bad").parent)


def test_mistral_slides_every_layer_and_a_qwen_window_is_refused(tmp_path: Path) -> None:
    base = {k: v for k, v in config("llama-3.1-8b").items() if k != "rope_scaling"}
    mistral = {**base, "architectures": ["MistralForCausalLM"], "model_type": "mistral",
               "sliding_window": 4096}
    spec = spec_from_config(written(tmp_path, mistral, "mistral"))
    assert spec.sliding_window == 4096 and spec.sliding_layers == tuple(range(32))
    qwen = {**base, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "use_sliding_window": True}
    assert "use_sliding_window" in one_line_error(written(tmp_path, qwen, "qwen"))
