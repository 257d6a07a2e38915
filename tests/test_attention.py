"""Tree attention in two parts equals the dense reference: over random trees, prefixes of 0 to 300
tokens and grouped-query shapes, in the kernels and through the whole Transformer; the static
step (padded, key-masked prefix) equals the exact-shape pass; prefill's causal path equals the
dense chain."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specscope.models.spec import ModelSpec
from specscope.models.torch import Transformer, attention
from specscope.models.torch.attention import dense_attention, split_attention
from specscope.tree import Tree

torch.set_num_threads(1)


def random_tree(rng: np.random.Generator, n: int) -> Tree:
    """A random tree of n nodes (each node's parent among the few nodes before it)."""
    return Tree.from_parents([-1] + [int(rng.integers(max(0, i - 4), i)) for i in range(1, n)])


def additive(allowed: np.ndarray) -> torch.Tensor:
    """The dense reference's (1, 1, n, s) mask: 0 where allowed, −inf elsewhere."""
    return torch.zeros(allowed.shape).masked_fill(~torch.from_numpy(allowed), float("-inf"))[
        None, None]


def tree_allowed(tree: Tree, prefix: int) -> np.ndarray:
    """(n, prefix + n): the whole prefix, then each node's ancestors-or-self."""
    allowed = np.ones((tree.size, prefix + tree.size), dtype=bool)
    allowed[:, prefix:] = tree.ancestor_mask
    return allowed


@pytest.fixture(params=["fused", "plain math"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test through SDPA's fused kernel and again through the plain-math fallback."""
    if request.param == "plain math":
        monkeypatch.setattr(attention, "_CPU_FLASH", None)
    return request.param


@pytest.mark.parametrize("prefix", [0, 1, 7, 64, 300])
@pytest.mark.parametrize(("heads", "kv_heads"), [(8, 2), (4, 4), (6, 1)])
def test_split_attention_equals_the_dense_reference(prefix: int, heads: int, kv_heads: int,
                                                    kernel: str) -> None:
    rng = np.random.default_rng(prefix * 31 + heads)
    g = torch.Generator().manual_seed(prefix + 7 * heads)
    for n in (1, 2, 9, 24):
        tree = random_tree(rng, n)
        q = torch.randn(2, heads, n, 16, generator=g)
        k = 3 * torch.randn(2, kv_heads, prefix + n, 16, generator=g)  # peaked softmaxes too
        v = torch.randn(2, kv_heads, prefix + n, 16, generator=g)
        expected = dense_attention(q, k, v, additive(tree_allowed(tree, prefix)))
        got = split_attention(q, k[:, :, :prefix], v[:, :, :prefix], k[:, :, prefix:],
                              v[:, :, prefix:], torch.from_numpy(tree.ancestor_mask.copy()))
        assert (got - expected).abs().max() <= 1e-5


@pytest.mark.parametrize("prefix", [0, 1, 40])
def test_a_key_masked_prefix_ignores_the_slots_it_masks(prefix: int, kernel: str) -> None:
    """The static step's form: the whole 64-slot cache read under `slot < prefix`; slots past it
    hold garbage (huge values) that must not leak, and an empty prefix must not make NaN."""
    g = torch.Generator().manual_seed(prefix)
    tree = random_tree(np.random.default_rng(prefix), 6)
    q = torch.randn(1, 6, tree.size, 16, generator=g)
    k = torch.randn(1, 2, 64 + tree.size, 16, generator=g)
    v = torch.randn(1, 2, 64 + tree.size, 16, generator=g)
    k[:, :, prefix:64], v[:, :, prefix:64] = 1e4, 1e4
    keys = torch.arange(64)[None] < prefix
    got = split_attention(q, k[:, :, :64], v[:, :, :64], k[:, :, 64:], v[:, :, 64:],
                          torch.from_numpy(tree.ancestor_mask.copy()), keys)
    live = torch.cat([torch.arange(prefix), torch.arange(64, 64 + tree.size)])
    expected = dense_attention(q, k[:, :, live], v[:, :, live],
                               additive(tree_allowed(tree, prefix)))
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


def dense_chain(model: Transformer, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of a prompt from an empty cache in one chain pass under the dense causal mask."""
    assert model.tree_attention == "dense"
    return model(tokens, torch.arange(tokens.shape[1]))


@pytest.mark.parametrize("prefix", [1, 40, 300])
def test_a_transformer_verifies_trees_alike_with_split_and_dense_attention(prefix: int) -> None:
    split, dense = pair(prefix)
    rng = np.random.default_rng(prefix)
    prompt = torch.as_tensor(rng.integers(0, SPEC.vocab_size, (1, prefix)))
    torch.testing.assert_close(split.prefill(prompt), dense_chain(dense, prompt), atol=1e-5,
                               rtol=0)
    for n in (1, 5, 17):
        tree = random_tree(rng, n)
        tokens = torch.as_tensor(rng.integers(0, SPEC.vocab_size, n))
        torch.testing.assert_close(split.forward_tree(tokens, tree, prefix),
                                   dense.forward_tree(tokens, tree, prefix), atol=1e-5, rtol=0)


def test_chunked_causal_prefill_equals_the_dense_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    split, dense = pair(3)
    prompt = torch.arange(350)[None] % SPEC.vocab_size
    expected = dense_chain(dense, prompt)
    monkeypatch.setattr("specscope.models.torch.transformer.PREFILL_CHUNK", 128)
    torch.testing.assert_close(split.prefill(prompt), expected, atol=1e-5, rtol=0)
    # the cache holds the same keys afterwards: the next token decodes alike
    pos = torch.tensor([350])
    torch.testing.assert_close(split(torch.tensor([[5]]), pos), dense(torch.tensor([[5]]), pos),
                               atol=1e-5, rtol=0)


def padded_step_inputs(tree: Tree, tokens: torch.Tensor, prefix: int, size: int,
                       scratch: int) -> tuple[torch.Tensor, ...]:
    """`Transformer.step` inputs for `tree` padded to `size` rows: padding rows see only
    themselves and write their keys to the `scratch` slot."""
    n = tree.size
    positions = torch.full((size,), prefix)
    positions[:n] += torch.from_numpy(tree.depths.astype(np.int64))
    slots = torch.full((size,), scratch)
    slots[:n] = prefix + torch.arange(n)
    block = torch.eye(size, dtype=torch.bool)
    block[:n, :n] = torch.from_numpy(tree.ancestor_mask.copy())
    padded = torch.zeros(1, size, dtype=torch.long)
    padded[0, :n] = tokens
    return padded, positions[None], slots[None], torch.tensor([prefix]), block[None]


@pytest.mark.parametrize("prefix", [0, 1, 57])
def test_the_static_step_with_padding_rows_equals_the_exact_tree_pass(prefix: int) -> None:
    rng = np.random.default_rng(prefix + 11)
    static, exact = pair(prefix + 5)
    prompt = torch.as_tensor(rng.integers(0, SPEC.vocab_size, (1, prefix)))
    for model in (static, exact):
        if prefix:
            model.prefill(prompt)
    scratch = SPEC.max_seq_len - 1
    for n, size in ((1, 1), (3, 4), (9, 16)):
        tree = random_tree(rng, n)
        tokens = torch.as_tensor(rng.integers(0, SPEC.vocab_size, n))
        got = static.step(*padded_step_inputs(tree, tokens, prefix, size, scratch))
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got[0, :n], exact.forward_tree(tokens, tree, prefix),
                                   atol=1e-5, rtol=0)
        live = slice(0, prefix + n)
        torch.testing.assert_close(static.kv_cache.kv[..., live, :],
                                   exact.kv_cache.kv[..., live, :], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_the_static_step_compiles_to_one_graph_equal_to_eager() -> None:
    """fullgraph (no break, no host read) and static shapes: the form CUDA graphs capture."""
    rng = np.random.default_rng(2)
    compiled, eager = pair(2)
    prompt = torch.as_tensor(rng.integers(0, SPEC.vocab_size, (1, 30)))
    for model in (compiled, eager):
        model.prefill(prompt)
    step = torch.compile(compiled.step, fullgraph=True, dynamic=False)
    tree = random_tree(rng, 6)
    tokens = torch.as_tensor(rng.integers(0, SPEC.vocab_size, 6))
    for prefix in (30, 33):
        inputs = padded_step_inputs(tree, tokens, prefix, 8, SPEC.max_seq_len - 1)
        # a new prefix length reuses the compiled graph
        with torch._dynamo.config.patch(error_on_recompile=prefix != 30):
            got = step(*inputs)
        torch.testing.assert_close(got, eager.step(*inputs), atol=1e-5, rtol=0)
        for model in (compiled, eager):
            model.compact(prefix, [0, 1, 3])
    torch.testing.assert_close(compiled.kv_cache.kv, eager.kv_cache.kv, atol=1e-5, rtol=0)
