"""Our Llama-style Transformer: same logits as transformers' Llama, lossless tree verification."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specscope.models.spec import ModelSpec
from specscope.models.torch.layers import load_checkpoint
from specscope.models.torch.transformer import Transformer
from specscope.tree import Tree

SPEC = ModelSpec(
    name="tiny-llama",
    arch="transformer",
    n_layers=2,
    d_model=32,
    vocab_size=61,
    n_heads=4,
    n_kv_heads=2,
    head_dim=8,
    d_ff=48,
    rope_theta=500.0,
    norm_eps=1e-5,
    max_seq_len=64,
)


def llama_config(spec: ModelSpec) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.d_model,
        intermediate_size=spec.d_ff,
        num_hidden_layers=spec.n_layers,
        num_attention_heads=spec.n_heads,
        num_key_value_heads=spec.n_kv_heads,
        head_dim=spec.head_dim,
        rms_norm_eps=spec.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        tie_word_embeddings=spec.tie_embeddings,
        max_position_embeddings=spec.max_seq_len,
        initializer_range=0.2,
    )


def tiny_model(seed: int = 0, dtype: torch.dtype = torch.float64) -> Transformer:
    model = Transformer.random(SPEC, seed=seed, dtype=dtype, std=0.2)
    model.setup_caches(max_batch_size=2)
    return model


@pytest.mark.parametrize(
    ("n_kv_heads", "tied"), [(2, False), (4, False), (1, True)], ids=["gqa", "mha", "mqa-tied"]
)
def test_logits_equal_hf_llama_both_ways(tmp_path, n_kv_heads: int, tied: bool) -> None:
    spec = ModelSpec(**{**SPEC.__dict__, "n_kv_heads": n_kv_heads, "tie_embeddings": tied})
    torch.manual_seed(0)
    hf = LlamaForCausalLM(llama_config(spec)).eval()
    hf.save_pretrained(tmp_path)
    ours = Transformer(spec)
    load_checkpoint(ours, tmp_path)
    ours.setup_caches(max_batch_size=2)
    assert set(ours.state_dict()) == set(hf.state_dict())
    if tied:
        assert ours.lm_head.weight is ours.model.embed_tokens.weight

    prompt = torch.randint(0, spec.vocab_size, (2, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(prompt).logits
    got = ours.prefill(prompt)
    assert expected.std() > 0.1  # logits vary enough for the comparison to mean something
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)

    back = LlamaForCausalLM(llama_config(spec)).eval()
    back.load_state_dict(ours.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(back(prompt).logits, expected, atol=1e-6, rtol=0)


def test_prefill_then_decode_equals_one_prefill() -> None:
    model = tiny_model()
    tokens = torch.randint(0, SPEC.vocab_size, (2, 12), generator=torch.Generator().manual_seed(2))
    full = model.prefill(tokens)
    model.prefill(tokens[:, :5])
    steps = [model(tokens[:, t : t + 1], torch.tensor([t])) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full[:, 5:], atol=1e-10, rtol=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_logits_equal_sequential_decoding_of_each_path(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(10, 21))
    tree = Tree.from_parents([-1] + [int(rng.integers(0, i)) for i in range(1, n)])
    model = tiny_model(seed)
    prompt = torch.as_tensor(rng.integers(0, SPEC.vocab_size, (1, 9)))
    tokens = torch.as_tensor(rng.integers(0, SPEC.vocab_size, n))
    model.prefill(prompt)
    committed = prompt.shape[1]

    tree_logits = model.forward_tree(tokens, tree, committed)

    for node in range(n):
        path = tree.path(node)
        for k, v in enumerate(path):
            logits = model(tokens[v].view(1, 1), torch.tensor([committed + k]))
        torch.testing.assert_close(tree_logits[node], logits[0, 0], atol=1e-10, rtol=0)


def test_compact_then_continue_equals_sequential_decoding() -> None:
    rng = np.random.default_rng(7)
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3, 3, 4, 5, 6, 6, 10])
    model, reference = tiny_model(3), tiny_model(3)
    prompt = torch.as_tensor(rng.integers(0, SPEC.vocab_size, (1, 8)))
    tokens = torch.as_tensor(rng.integers(0, SPEC.vocab_size, tree.size))
    after = torch.as_tensor(rng.integers(0, SPEC.vocab_size, (1, 4)))
    accepted = tree.path(12)  # [0, 1, 3, 6, 10, 12]: slots with gaps between them
    committed = prompt.shape[1]

    model.prefill(prompt)
    model.forward_tree(tokens, tree, committed)
    model.compact(committed, accepted)
    start = committed + len(accepted)
    got = [model(after[:, t : t + 1], torch.tensor([start + t])) for t in range(after.shape[1])]

    sequence = torch.cat([prompt, tokens[accepted][None], after], dim=1)
    reference.prefill(sequence[:, :1])
    expected = [
        reference(sequence[:, t : t + 1], torch.tensor([t])) for t in range(1, sequence.shape[1])
    ]
    torch.testing.assert_close(
        torch.cat(got, dim=1), torch.cat(expected[-after.shape[1] :], dim=1), atol=1e-10, rtol=0
    )


def test_random_init_is_seeded_and_ties_weights() -> None:
    spec = ModelSpec(**{**SPEC.__dict__, "tie_embeddings": True})
    a = Transformer.random(spec, seed=5)
    b = Transformer.random(spec, seed=5)
    c = Transformer.random(spec, seed=6)
    assert a.lm_head.weight is a.model.embed_tokens.weight
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    assert all(torch.equal(x, y) for x, y in pairs)
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)
    assert a.lm_head.weight.dtype == torch.float32


def test_the_training_pass_equals_prefill_and_its_gradient_matches_finite_differences() -> None:
    """`forward_sequence` (what training calls) writes each layer's keys into the one shared
    cache tensor; autograd must still see a correct gradient through every layer."""
    model = tiny_model(4)
    tokens = torch.randint(0, SPEC.vocab_size, (2, 12), generator=torch.Generator().manual_seed(4))
    expected = model.prefill(tokens)
    logits = model.forward_sequence(tokens)
    torch.testing.assert_close(logits, expected, atol=1e-10, rtol=0)

    weight = model.model.layers[0].self_attn.q_proj.weight  # the first layer: through all others
    direction = torch.randn(weight.shape, generator=torch.Generator().manual_seed(5),
                            dtype=weight.dtype)
    logits.square().mean().backward()
    eps = 1e-6
    with torch.no_grad():
        weight += eps * direction
        up = model.forward_sequence(tokens).square().mean()
        weight -= 2 * eps * direction
        down = model.forward_sequence(tokens).square().mean()
    slope = (weight.grad * direction).sum()
    assert abs(slope) > 1e-2  # a slope worth comparing
    assert abs((up - down) / (2 * eps) - slope) < 1e-6 * abs(slope)
