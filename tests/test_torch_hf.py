"""The Hugging Face adapter: tree verification is lossless, unusable attention is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specscope.errors import InputError
from specscope.models.torch.hf import HFCausalLM
from specscope.tree import Tree

VOCAB = 53


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> str:
    """A tiny random LlamaForCausalLM (grouped-query attention) saved to a folder."""
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_logits_equal_sequential_decoding_of_each_path(llama_dir: str, attn: str) -> None:
    model = HFCausalLM(llama_dir, attn_implementation=attn)
    rng = np.random.default_rng(0)
    n = 14
    tree = Tree.from_parents([-1] + [int(rng.integers(0, i)) for i in range(1, n)])
    prompt = torch.as_tensor(rng.integers(0, VOCAB, (1, 7)))
    tokens = torch.as_tensor(rng.integers(0, VOCAB, n))
    committed = prompt.shape[1]
    model.prefill(prompt)

    tree_logits = model.forward_tree(tokens, tree, committed)

    assert tree_logits.std() > 0.1
    for node in range(n):
        for k, v in enumerate(tree.path(node)):
            logits = model(tokens[v].view(1, 1), torch.tensor([committed + k]))
        torch.testing.assert_close(tree_logits[node], logits[0, 0], atol=1e-4, rtol=0)


def test_compact_then_continue_equals_the_plain_model(llama_dir: str) -> None:
    model = HFCausalLM(llama_dir)
    rng = np.random.default_rng(1)
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3, 3, 4, 5, 6, 6, 10])
    prompt = torch.as_tensor(rng.integers(0, VOCAB, (1, 6)))
    tokens = torch.as_tensor(rng.integers(0, VOCAB, tree.size))
    after = torch.as_tensor(rng.integers(0, VOCAB, (1, 3)))
    accepted = tree.path(12)
    committed = prompt.shape[1]

    model.prefill(prompt)
    model.forward_tree(tokens, tree, committed)
    model.compact(committed, accepted)
    got = model(after, torch.arange(committed + len(accepted), committed + len(accepted) + 3))

    sequence = torch.cat([prompt, tokens[accepted][None], after], dim=1)
    with torch.no_grad():
        expected = model.model(sequence, use_cache=False).logits[:, -3:]
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_refuses_attention_that_ignores_custom_masks(llama_dir: str) -> None:
    for attn in ("flash_attention_2", "flash_attention_3", "flex_attention"):
        with pytest.raises(InputError, match="ignores custom masks"):
            HFCausalLM(llama_dir, attn_implementation=attn)


def test_refuses_a_missing_folder(tmp_path) -> None:
    with pytest.raises(InputError, match="not a model folder"):
        HFCausalLM(tmp_path / "absent")
