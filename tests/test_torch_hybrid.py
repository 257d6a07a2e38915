"""The hybrid (Bamba-style) model: one tree pass equals decoding each path token by token, the
committed state equals replaying the path, and chunked prefill equals the training pass (its
speculative decoding through the executor: tests/test_ssm_executor.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specscope.models.spec import ModelSpec
from specscope.models.torch import Hybrid, Transformer
from specscope.models.zoo import zoo_specs
from specscope.tree import Tree

torch.set_num_threads(1)

V = 53
SPEC = ModelSpec(name="tiny-hyb", arch="hybrid", n_layers=3, d_model=32, vocab_size=V,
                 n_heads=4, n_kv_heads=2, head_dim=8, d_ff=40, d_state=8, ssm_heads=4,
                 ssm_head_dim=8, ssm_groups=2, conv_kernel=4, attn_layers=(1,), max_seq_len=256)


def tiny(seed: int = 0, dtype: torch.dtype = torch.float64) -> Hybrid:
    model = Hybrid.random(SPEC, seed=seed, dtype=dtype, std=0.3)
    model.setup_caches(1, SPEC.max_seq_len)
    return model


def decode_path(model: Hybrid, tokens: torch.Tensor, committed: int, state):
    """Logits after each token of `tokens`, decoded one at a time from `committed`, `state`."""
    out = []
    for i, token in enumerate(tokens):
        logits, state = model.decode(token.view(1), committed + i, state)
        out.append(logits)
    return torch.stack(out), state


@pytest.mark.parametrize("seed", [0, 1])
def test_one_tree_pass_equals_decoding_each_path(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 16))
    tree = Tree.from_parents([-1] + [int(rng.integers(max(0, i - 3), i)) for i in range(1, n)])
    model = tiny(seed)
    prompt = torch.as_tensor(rng.integers(0, V, (1, 7)))
    _, state = model.prefill(prompt)
    tokens = torch.as_tensor(rng.integers(0, V, n))
    logits, _ = model.verify_tree(tokens, tree, 7, state)
    for node in range(n):
        expected, _ = decode_path(model, tokens[tree.path(node)], 7, state)
        torch.testing.assert_close(logits[node], expected[-1], atol=1e-10, rtol=0)


@pytest.mark.parametrize(("dtype", "atol"), [(torch.float64, 1e-10), (torch.float32, 1e-5)],
                         ids=["float64", "float32"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_commit_equals_replaying_the_accepted_path(seed: int, dtype: torch.dtype,
                                                   atol: float) -> None:
    """Every node's path of a random tree (root only, shorter and longer than the conv window):
    the SSM state from the pass's record equals decoding the path token by token, and after the
    KV compaction the next tokens' logits equal the replayed model's."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 16))
    tree = Tree.from_parents([-1] + [int(rng.integers(max(0, i - 3), i)) for i in range(1, n)])
    tokens = torch.as_tensor(rng.integers(0, V, n))
    after = torch.as_tensor(rng.integers(0, V, 3))
    prompt = torch.as_tensor(rng.integers(0, V, (1, 2 + 3 * seed)))
    p = prompt.shape[1]
    model, reference = tiny(seed, dtype), tiny(seed, dtype)
    _, state = model.prefill(prompt)
    reference.prefill(prompt)
    for node in range(n):
        path = tree.path(node)
        _, record = model.verify_tree(tokens, tree, p, state)
        model.compact(p, path)
        committed = record.state(path)
        _, replayed = decode_path(reference, tokens[path], p, state)
        torch.testing.assert_close(committed.ssm, replayed.ssm, atol=atol, rtol=0)
        torch.testing.assert_close(committed.conv, replayed.conv, atol=atol, rtol=0)
        ours, _ = decode_path(model, after, p + len(path), committed)
        theirs, _ = decode_path(reference, after, p + len(path), replayed)
        torch.testing.assert_close(ours, theirs, atol=atol, rtol=0)


def test_chunked_prefill_equals_the_training_pass() -> None:
    model = tiny(2)
    tokens = torch.arange(150)[None] % V  # three prefill chunks
    expected = model.forward_sequence(tokens).detach()
    model.setup_caches(1, SPEC.max_seq_len)
    logits, _ = model.prefill(tokens)
    torch.testing.assert_close(logits, expected, atol=1e-10, rtol=0)


def test_random_init_is_seeded_and_the_layers_alternate_as_specified() -> None:
    a, b = Hybrid.random(SPEC, seed=3), Hybrid.random(SPEC, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert [block.kind for block in a.model.layers] == ["ssm", "attn", "ssm"]
    with pytest.raises(Exception, match="hybrid"):
        Hybrid(zoo_specs()["tiny-code"])
    with pytest.raises(Exception, match="transformer"):
        Transformer(SPEC)
