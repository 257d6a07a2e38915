"""The hybrid (Bamba-style) model: one tree pass equals decoding each path token by token, the
committed state equals replaying the path, chunked prefill equals the training pass, and
speculative decoding through the executor is lossless."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specscope.executor.drafters import make_drafter
from specscope.executor.loop import decode_autoregressive, decode_speculative
from specscope.executor.methods import static_method
from specscope.executor.targets import HybridModel, wrap
from specscope.models.spec import ModelSpec
from specscope.models.torch import Hybrid, Transformer
from specscope.models.zoo import load_zoo_model, weights_path, zoo_specs
from specscope.tree import Tree

torch.set_num_threads(1)

V = 53
SPEC = ModelSpec(name="tiny-hyb", arch="hybrid", n_layers=3, d_model=32, vocab_size=V,
                 n_heads=4, n_kv_heads=2, head_dim=8, d_ff=40, d_state=8, ssm_heads=4,
                 ssm_head_dim=8, ssm_groups=2, conv_kernel=4, attn_layers=(1,), max_seq_len=256)


def tiny(seed: int = 0) -> Hybrid:
    model = Hybrid.random(SPEC, seed=seed, dtype=torch.float64, std=0.3)
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


def test_commit_equals_replaying_the_accepted_path() -> None:
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3, 3, 4, 5, 6, 6, 10])
    tokens = torch.arange(tree.size) % V + 1
    after = torch.tensor([5, 9, 11])
    for node in (0, 2, 9, 12):  # paths shorter and longer than the conv window
        path = tree.path(node)
        model, reference = tiny(4), tiny(4)
        prompt = torch.arange(9)[None] % V
        _, state = model.prefill(prompt)
        reference.prefill(prompt)
        _, record = model.verify_tree(tokens, tree, 9, state)
        model.compact(9, path)
        committed = record.state(path)
        _, replayed = decode_path(reference, tokens[path], 9, state)
        torch.testing.assert_close(committed.ssm, replayed.ssm, atol=1e-10, rtol=0)
        torch.testing.assert_close(committed.conv, replayed.conv, atol=1e-10, rtol=0)
        ours, _ = decode_path(model, after, 9 + len(path), committed)
        theirs, _ = decode_path(reference, after, 9 + len(path), replayed)
        torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=0)


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


def zoo_or_random() -> tuple[Hybrid, str]:
    """tiny-hybrid's trained weights when they exist, else a seeded random model of its spec."""
    if weights_path("tiny-hybrid").is_file():
        return load_zoo_model("tiny-hybrid")[0], "tiny-hybrid"
    return Hybrid.random(zoo_specs()["tiny-hybrid"], seed=0, std=0.1), "tiny-hybrid (random)"


@pytest.mark.parametrize("drafter", ["ngram", "draft"])
def test_speculative_decoding_of_tiny_hybrid_is_lossless(drafter: str) -> None:
    model, name = zoo_or_random()
    target = wrap(model, name)
    assert isinstance(target, HybridModel)
    draft = wrap(load_zoo_model("tiny-code-draft")[0], "draft") if drafter == "draft" else None
    chosen = make_drafter(drafter, target.vocab_size, draft)
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3, 4])
    method = static_method("tree", tree, "test")
    rng = np.random.default_rng(0)
    for _ in range(3):
        start = rng.integers(0, target.vocab_size, 12).tolist()
        prompt = start + start  # repeats, so the n-gram drafter proposes something
        expected = decode_autoregressive(target, prompt, 24).output
        assert decode_speculative(target, chosen, method, prompt, 24).output == expected


def test_a_hybrid_drafts_for_another_target_losslessly() -> None:
    """As a draft model the hybrid catches up on committed tokens with empty commits."""
    target = wrap(Transformer.random(zoo_specs()["tiny-code"], seed=1, std=0.1), "target")
    draft = wrap(zoo_or_random()[0], "draft")
    chosen = make_drafter("draft", target.vocab_size, draft)
    method = static_method("chain", Tree.chain(3), "test")
    prompt = list(range(3, 40))
    expected = decode_autoregressive(target, prompt, 16).output
    assert decode_speculative(target, chosen, method, prompt, 16).output == expected
