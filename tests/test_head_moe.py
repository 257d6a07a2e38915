"""An EAGLE head of a mixture-of-experts or latent-attention target is a dense Llama layer
(`specscope.systems.head.head_spec`): its MLP `head_ff` wide, none of the target's experts; a
dense target's head is priced as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specscope.errors import InputError
from specscope.hw_profiles import load_profile
from specscope.models import get_model
from specscope.models.spec import ModelSpec
from specscope.systems.head import MOE_HEAD_FF, HeadCost, head_spec
from specscope.systems.reproduce import reproduce

CASE = ('[[case]]\nname = "c"\nsystem = "head"\nhw = "h200"\nengine = "sglang"\n'
        'target = "qwen3-30b-a3b"\ntp = 2\nbatch = 8\nvocab = 32000\ntree = "1,1,1"\ntau = 2.5\n'
        'tau_includes_bonus = true\npublished_speedup = 1.5\n')


def _llama_layer(d: int, heads: int, kv: int, head_dim: int, ff: int, vocab: int) -> ModelSpec:
    """A one-layer dense Llama model written out by hand, as SpecForge's head configs state it."""
    return ModelSpec(name="by-hand", arch="transformer", n_layers=1, d_model=d, vocab_size=vocab,
                     n_heads=heads, n_kv_heads=kv, head_dim=head_dim, d_ff=ff)


def _priced(spec: ModelSpec, tp: int, batch: int, tokens: int) -> list[tuple[str, float, float]]:
    """(operator, weight bytes, flops) of one head forward on h200."""
    cost = HeadCost(load_profile("h200"), spec, tp=tp, runtime="graph")
    return [(op.op, float(op.weight_bytes), float(op.flops))
            for op in cost.ops(batch, tokens, 512)]


def test_an_moe_targets_head_is_a_dense_layer_of_its_published_width() -> None:
    target = get_model("qwen3-30b-a3b")
    head = head_spec(target, 32000, 12288)
    assert not head.moe and not head.mla and head.n_layers == 1
    assert (head.d_model, head.n_heads, head.n_kv_heads, head.head_dim, head.d_ff) == (
        2048, 32, 4, 128, 12288)  # configs/qwen3-30B-A3B-eagle3.json
    by_hand = _llama_layer(2048, 32, 4, 128, 12288, 32000)
    for tokens in (1, 4, 8):
        assert _priced(head, 2, 8, tokens) == _priced(by_hand, 2, 8, tokens)
    names = {op for op, _, _ in _priced(head, 2, 8, 8)}
    assert not {n for n in names if "expert" in n or "router" in n}


def test_an_moe_heads_weight_reads_do_not_grow_with_its_tokens() -> None:
    head = head_spec(get_model("qwen3-235b-a22b"), 32000)
    assert head.d_ff == MOE_HEAD_FF * 4096 == 24576  # configs/qwen3-235B-A22B-eagle3.json
    one, many = (sum(w for _, w, _ in _priced(head, 8, 8, n)) for n in (1, 8))
    assert many == pytest.approx(one, rel=0.01)  # only the embedding rows of its tokens
    moe = dataclasses.replace(head, n_experts=128, experts_per_token=8, d_expert=1536, d_ff=0)
    one, many = (sum(w for _, w, _ in _priced(moe, 8, 8, n)) for n in (1, 8))
    assert many > 1.5 * one  # a one-layer MoE, as the head was priced before, reads more experts


def test_a_latent_attention_targets_head_attends_as_plain_multi_head_attention() -> None:
    target = get_model("deepseek-v3")
    head = head_spec(target)
    assert not head.mla and not head.moe and head.mtp_layers == 0
    assert (head.n_heads, head.n_kv_heads, head.head_dim) == (target.n_heads, target.n_heads,
                                                               target.head_dim)
    assert head.d_ff == MOE_HEAD_FF * target.d_model


def test_a_dense_targets_head_is_priced_as_before() -> None:
    for name, vocab in (("llama-3.1-70b", 32000), ("llama-3.1-8b", None)):
        target = get_model(name)
        before = dataclasses.replace(
            target, name=f"{target.name}/head" + ("" if vocab is None else f"-vocab-{vocab}"),
            n_layers=1, arch="transformer", attn_layers=(), tie_embeddings=False, weight_bits=16,
            vision_encoder="", image_tokens=0, image_patches=0,
            vocab_size=vocab or target.vocab_size)
        assert head_spec(target, vocab) == before
        assert _priced(head_spec(target, vocab), 4, 8, 4) == _priced(before, 4, 8, 4)


def test_a_case_sets_the_heads_width_and_a_bad_one_names_the_case(tmp_path: Path) -> None:
    path = tmp_path / "moe.toml"
    path.write_text(CASE + "head_ff = 12288\n")
    row = reproduce(path)[0]
    assert "dense Llama shape (d_model 2048, MLP 12288)" in row.prediction.assumptions[0]
    path.write_text(CASE + "head_ff = 6144\n")
    narrow = reproduce(path)[0].prediction
    assert narrow.parts["draft"] < row.prediction.parts["draft"]
    assert narrow.parts["verify"] == row.prediction.parts["verify"]
    path.write_text(CASE + "head_ff = 0\n")
    with pytest.raises(InputError, match="head_ff = 0 must be positive"):
        reproduce(path)
