"""Tree attention in two parts equals the dense reference: over random trees, prefixes of 0 to 300
tokens and grouped-query shapes, in the kernels and through the whole Transformer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specscope.models.spec import ModelSpec
from specscope.models.torch import Transformer
from specscope.models.torch.attention import dense_attention, split_attention
from specscope.tree import Tree

torch.set_num_threads(1)


def random_tree(rng: np.random.Generator, n: int) -> Tree:
    """A random tree of n nodes (each node's parent among the few nodes before it)."""
    return Tree.from_parents([-1] + [int(rng.integers(max(0, i - 4), i)) for i in range(1, n)])


def additive(tree: Tree, prefix: int) -> torch.Tensor:
    """The dense reference's (1, 1, n, prefix + n) mask: 0 where a node may attend, −inf else."""
    allowed = np.ones((tree.size, prefix + tree.size), dtype=bool)
    allowed[:, prefix:] = tree.ancestor_mask
    return torch.zeros(allowed.shape).masked_fill(~torch.from_numpy(allowed), float("-inf"))[
        None, None]


@pytest.mark.parametrize("prefix", [0, 1, 7, 64, 300])
@pytest.mark.parametrize(("heads", "kv_heads"), [(8, 2), (4, 4), (6, 1)])
def test_split_attention_equals_the_dense_reference(prefix: int, heads: int,
                                                    kv_heads: int) -> None:
    rng = np.random.default_rng(prefix * 31 + heads)
    g = torch.Generator().manual_seed(prefix + 7 * heads)
    for n in (1, 2, 9, 24):
        tree = random_tree(rng, n)
        q = torch.randn(2, heads, n, 16, generator=g)
        k = 3 * torch.randn(2, kv_heads, prefix + n, 16, generator=g)  # peaked softmaxes too
        v = torch.randn(2, kv_heads, prefix + n, 16, generator=g)
        expected = dense_attention(q, k, v, additive(tree, prefix))
        got = split_attention(q, k[:, :, :prefix], v[:, :, :prefix], k[:, :, prefix:],
                              v[:, :, prefix:], torch.from_numpy(tree.ancestor_mask.copy()))
        assert (got - expected).abs().max() <= 1e-5


SPEC = ModelSpec(name="tiny-llama", arch="transformer", n_layers=2, d_model=48, vocab_size=67,
                 n_heads=6, n_kv_heads=2, head_dim=8, d_ff=64, max_seq_len=400)


def pair(seed: int) -> tuple[Transformer, Transformer]:
    """The same random model twice: split and dense tree attention."""
    models = []
    for mode in ("split", "dense"):
        model = Transformer.random(SPEC, seed=seed, std=0.2)
        model.tree_attention = mode
        model.setup_caches(1, SPEC.max_seq_len)
        models.append(model)
    return models[0], models[1]


@pytest.mark.parametrize("prefix", [1, 40, 300])
def test_a_transformer_verifies_trees_alike_with_split_and_dense_attention(prefix: int) -> None:
    split, dense = pair(prefix)
    rng = np.random.default_rng(prefix)
    prompt = torch.as_tensor(rng.integers(0, SPEC.vocab_size, (1, prefix)))
    torch.testing.assert_close(split.prefill(prompt), dense.prefill(prompt), atol=1e-5, rtol=0)
    for n in (1, 5, 17):
        tree = random_tree(rng, n)
        tokens = torch.as_tensor(rng.integers(0, SPEC.vocab_size, n))
        torch.testing.assert_close(split.forward_tree(tokens, tree, prefix),
                                   dense.forward_tree(tokens, tree, prefix), atol=1e-5, rtol=0)


def test_chunked_prefill_equals_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    split, dense = pair(3)
    prompt = torch.arange(350)[None] % SPEC.vocab_size
    expected = dense.prefill(prompt)
    monkeypatch.setattr("specscope.models.torch.transformer.PREFILL_CHUNK", 128)
    torch.testing.assert_close(split.prefill(prompt), expected, atol=1e-5, rtol=0)
    # the cache holds the same keys afterwards: the next token decodes alike
    pos = torch.tensor([350])
    torch.testing.assert_close(split(torch.tensor([[5]]), pos), dense(torch.tensor([[5]]), pos),
                               atol=1e-5, rtol=0)
