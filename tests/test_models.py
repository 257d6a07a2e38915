"""The model catalogue and the per-operator FLOPs/bytes table, checked against hand counts."""

import numpy as np
import pytest

from specscope.errors import InputError
from specscope.models import (
    ModelSpec,
    catalogue,
    forward_ops,
    get_model,
    kv_bytes_per_token,
    list_models,
    param_count,
    published_params,
    ssm_state_bytes,
    weight_bytes,
)
from specscope.models.spec import spec_from_table

REQUIRED = [
    "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "vicuna-7b",
    "vicuna-13b", "vicuna-33b", "mistral-7b", "qwen2.5-7b", "llama-68m", "llama-3.2-1b",
    "tinyllama-1.1b", "mamba2-2.7b", "bamba-9b",
]
ADDED = [
    "clip-vit-l-336", "qwen2.5-vl-vit", "llava-1.6-7b", "llava-1.6-13b", "qwen2.5-vl-3b",
    "qwen2.5-vl-7b", "longchat-13b-16k", "vicuna-7b-16k", "llama-3-8b-262k", "qwq-32b",
    "llama-3-8b", "llama-3-70b", "phi-3-mini",
]
VLMS = ["llava-1.6-7b", "llava-1.6-13b", "qwen2.5-vl-3b", "qwen2.5-vl-7b"]

TINY = ModelSpec(name="tiny", arch="transformer", n_layers=2, d_model=64, vocab_size=100,
                 n_heads=4, n_kv_heads=2, head_dim=16, d_ff=128)
TINY_SSM = ModelSpec(name="tiny-ssm", arch="ssm", n_layers=3, d_model=32, vocab_size=50,
                     d_state=8, ssm_heads=4, ssm_head_dim=16, ssm_groups=1, conv_kernel=4,
                     tie_embeddings=True)


def by_name(ops):
    return {op.op: op for op in ops}


def test_catalogue_holds_every_required_model_with_a_source():
    assert set(REQUIRED) <= set(list_models())
    for name in REQUIRED:
        spec = get_model(name)
        assert spec.name == name and spec.source
    assert get_model("mamba2-2.7b").layer_kinds == ("ssm",) * 64
    kinds = get_model("bamba-9b").layer_kinds
    assert kinds.count("attn") == 3 and kinds[9] == kinds[18] == kinds[27] == "attn"


@pytest.mark.parametrize("name", REQUIRED + ADDED)
def test_param_count_is_within_3_percent_of_the_published_size(name):
    assert param_count(get_model(name)) == pytest.approx(published_params(name), rel=0.03)


def test_param_count_of_a_tiny_transformer_by_hand():
    d, ff, v = 64, 128, 100
    attn = d * 64 + 2 * d * 32 + 64 * d + d  # q, k, v, o, norm
    mlp = 3 * d * ff + d
    assert param_count(TINY) == 2 * (attn + mlp) + 2 * v * d + d


def test_param_count_of_a_tiny_mamba2_by_hand():
    d, inner, n, h, k = 32, 64, 8, 4, 4
    in_proj = d * (2 * inner + 2 * n + h)
    conv = (inner + 2 * n) * (k + 1)
    layer = in_proj + conv + 3 * h + inner + inner * d + d
    assert param_count(TINY_SSM) == 3 * layer + 50 * d + d


def test_matmul_flops_are_2mkn():
    batch, new, context = 3, 5, 7
    m = batch * new
    ops = by_name(forward_ops(TINY, batch, new, context))
    assert ops["qkv_proj"].flops == 2 * (2 * m * 64 * (4 + 2 * 2) * 16)
    assert ops["o_proj"].flops == 2 * (2 * m * 64 * 64)
    assert ops["mlp_gate_up"].flops == 2 * (2 * m * 64 * 256)
    assert ops["mlp_down"].flops == 2 * (2 * m * 128 * 64)
    assert ops["lm_head"].flops == 2 * m * 64 * 100


def test_linear_flops_sum_to_two_flops_per_parameter_per_token():
    spec = get_model("llama-2-7b")
    ops = forward_ops(spec, 1, 1, 0)
    linear = sum(op.flops for op in ops if op.op.endswith(("proj", "gate_up", "down", "head")))
    non_linear = spec.vocab_size * spec.d_model + (2 * spec.n_layers + 1) * spec.d_model
    assert linear == pytest.approx(2 * (param_count(spec) - non_linear))


def test_attention_reads_the_whole_kv_cache_of_every_sequence():
    batch, new, context = 3, 5, 7
    att = by_name(forward_ops(TINY, batch, new, context))["attention"]
    row = 2 * 2 * 16 * 2  # K and V, 2 KV heads, head dim 16, 16-bit
    assert att.kv_bytes == 2 * batch * (context + 2 * new) * row
    assert att.flops == 2 * batch * 4 * new * (context + new) * (4 * 16 + 5)


def test_weight_bytes_follow_the_bit_width_and_group_scales():
    spec = get_model("llama-2-7b")
    dense = param_count(spec) - spec.vocab_size * spec.d_model - 65 * spec.d_model
    small = param_count(spec) - dense
    assert weight_bytes(spec, 16) == pytest.approx(2 * param_count(spec))
    assert weight_bytes(spec, 8) == pytest.approx(dense + 2 * small)
    assert weight_bytes(spec, 4, 32) == pytest.approx(dense * (0.5 + 4 / 32) + 2 * small)
    with pytest.raises(InputError, match="weight bits 3"):
        weight_bytes(spec, 3)


def test_cache_sizes_per_token_and_per_sequence():
    assert kv_bytes_per_token(get_model("llama-2-7b")) == 32 * 2 * 4096 * 2
    assert kv_bytes_per_token(get_model("llama-3.1-8b")) == 32 * 2 * 8 * 128 * 2
    assert kv_bytes_per_token(get_model("mamba2-2.7b")) == 0
    assert ssm_state_bytes(get_model("mamba2-2.7b")) == 64 * (80 * 64 * 128 + 5376 * 3) * 2
    assert kv_bytes_per_token(get_model("bamba-9b")) == 3 * 2 * 8 * 128 * 2


def test_ops_broadcast_over_new_tokens():
    spec = get_model("bamba-9b")
    n = np.arange(1, 9)
    vector = forward_ops(spec, 2, n, 100)
    for i, k in enumerate(n):
        scalar = forward_ops(spec, 2, int(k), 100)
        for a, b in zip(vector, scalar, strict=True):
            assert a.op == b.op
            assert np.broadcast_to(a.flops, n.shape)[i] == pytest.approx(b.flops)
            assert np.broadcast_to(a.bytes, n.shape)[i] == pytest.approx(b.bytes)


def test_naive_ssm_verification_unrolls_every_path():
    ops = by_name(forward_ops(TINY_SSM, 1, 9, 10, ssm_verify="naive", depth=2, leaves=4))
    stree = by_name(forward_ops(TINY_SSM, 1, 9, 10, ssm_verify="stree"))
    assert ops["ssm_in_proj"].tokens == 4 * 3
    assert ops["ssm_in_proj"].flops == pytest.approx(stree["ssm_in_proj"].flops * 12 / 9)
    assert ops["ssm_state_copy"].kv_bytes == pytest.approx(2 * 4 * ssm_state_bytes(TINY_SSM))
    assert "ssm_state_copy" not in stree
    with pytest.raises(InputError, match="depth and leaves"):
        forward_ops(TINY_SSM, 1, 9, 10, ssm_verify="naive")


def test_tensor_parallel_splits_heads_and_rejects_uneven_splits():
    full = by_name(forward_ops(get_model("llama-2-70b"), 1, 1, 0))
    half = by_name(forward_ops(get_model("llama-2-70b"), 1, 1, 0, tp=2))
    assert half["mlp_down"].weight_bytes == full["mlp_down"].weight_bytes / 2
    assert half["attention"].kv_bytes == full["attention"].kv_bytes / 2
    with pytest.raises(InputError, match="tp=3"):
        forward_ops(get_model("llama-2-7b"), 1, 1, 0, tp=3)


def test_unknown_model_raises_input_error_listing_known_names():
    with pytest.raises(InputError, match=r"unknown model 'llama-9'.*llama-2-7b"):
        get_model("llama-9")


def test_added_models_have_a_source_and_their_published_context():
    assert set(ADDED) <= set(list_models())
    for name in ADDED:
        assert get_model(name).source
    assert get_model("llama-3-8b-262k").max_seq_len == 262144
    assert get_model("llama-3-8b-262k").rope_theta == 283461213.0
    assert get_model("longchat-13b-16k").max_seq_len == get_model("vicuna-7b-16k").max_seq_len
    assert get_model("qwen2.5-vl-3b").tie_embeddings
    assert not get_model("qwen2.5-vl-7b").tie_embeddings


@pytest.mark.parametrize("name", VLMS)
def test_every_vlm_names_a_vision_encoder_in_the_catalogue(name):
    spec = get_model(name)
    encoder = get_model(spec.vision_encoder)
    assert encoder.arch == "transformer" and encoder.vocab_size == 1
    assert not encoder.vision_encoder and encoder.n_kv_heads == encoder.n_heads
    assert spec.image_tokens >= 1 and spec.image_patches >= spec.image_tokens


def test_vision_fields_default_to_a_text_model():
    for name in REQUIRED:
        spec = get_model(name)
        assert (spec.vision_encoder, spec.image_tokens, spec.image_patches) == ("", 0, 0)
    assert (get_model("qwen2.5-vl-7b").image_tokens, get_model("qwen2.5-vl-7b").image_patches
            ) == (256, 1024)
    assert get_model("llava-1.6-7b").image_tokens == 5 * 576


def test_a_vision_encoder_without_image_tokens_raises_input_error():
    table = {"arch": "transformer", "n_layers": 2, "d_model": 64, "vocab_size": 100,
             "n_heads": 4, "n_kv_heads": 4, "head_dim": 16, "d_ff": 128,
             "vision_encoder": "clip-vit-l-336", "image_patches": 576}
    with pytest.raises(InputError, match=r"model 'vlm'.*image_tokens"):
        spec_from_table("vlm", {**table, "image_tokens": 0}, "here.toml")
    with pytest.raises(InputError, match=r"model 'vlm'.*image_patches"):
        spec_from_table("vlm", {**table, "image_tokens": 576, "image_patches": 0}, "here.toml")
    assert spec_from_table("vlm", {**table, "image_tokens": 576}, "here.toml").image_tokens == 576


def test_an_unknown_vision_encoder_is_an_input_error_naming_the_model():
    specs = {"tiny": TINY, "vlm": ModelSpec(
        name="vlm", arch="transformer", n_layers=2, d_model=64, vocab_size=100, n_heads=4,
        n_kv_heads=2, head_dim=16, d_ff=128, vision_encoder="no-such-vit", image_tokens=4,
        image_patches=16)}
    with pytest.raises(InputError, match=r"model 'vlm'.*'no-such-vit'"):
        catalogue.check_vision_encoders(specs, "cat.toml")
    specs["no-such-vit"] = TINY
    catalogue.check_vision_encoders(specs, "cat.toml")
