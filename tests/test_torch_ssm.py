"""Our Mamba-2: same logits as transformers' Mamba-2; recurrent, chunked and tree forms agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Mamba2Config, Mamba2ForCausalLM

from specscope.errors import InputError
from specscope.models.spec import ModelSpec
from specscope.models.torch.layers import load_checkpoint
from specscope.models.torch.ssm import CHUNK, Mamba2, SSMState, TreeRecord, tree_layout
from specscope.tree import Tree

SPEC = ModelSpec(
    name="tiny-mamba2",
    arch="ssm",
    n_layers=2,
    d_model=32,
    vocab_size=61,
    norm_eps=1e-5,
    d_state=16,
    ssm_heads=8,
    ssm_head_dim=8,
    ssm_groups=2,
    conv_kernel=4,
)
WITH_MLP = ModelSpec(**{**SPEC.__dict__, "d_ff": 40, "conv_kernel": 3, "ssm_groups": 1})


def tiny_model(spec: ModelSpec = SPEC, seed: int = 0, dtype=torch.float64) -> Mamba2:
    return Mamba2.random(spec, seed=seed, dtype=dtype, std=0.3)


def steps(model: Mamba2, tokens: torch.Tensor, state: SSMState) -> tuple[torch.Tensor, SSMState]:
    """Logits of tokens (b, t) fed one at a time through the recurrence."""
    logits = []
    for t in range(tokens.shape[1]):
        out, state = model.step(tokens[:, t], state)
        logits.append(out)
    return torch.stack(logits, dim=1), state


def assert_states_close(a: SSMState, b: SSMState, atol: float) -> None:
    torch.testing.assert_close(a.conv, b.conv, atol=atol, rtol=0)
    torch.testing.assert_close(a.ssm, b.ssm, atol=atol, rtol=0)


@pytest.mark.parametrize("tied", [False, True])
def test_logits_equal_hf_mamba2(tmp_path, tied: bool) -> None:
    spec = ModelSpec(**{**SPEC.__dict__, "tie_embeddings": tied})
    config = Mamba2Config(
        vocab_size=spec.vocab_size,
        hidden_size=spec.d_model,
        num_hidden_layers=spec.n_layers,
        num_heads=spec.ssm_heads,
        head_dim=spec.ssm_head_dim,
        expand=spec.d_inner // spec.d_model,
        state_size=spec.d_state,
        n_groups=spec.ssm_groups,
        conv_kernel=spec.conv_kernel,
        layer_norm_epsilon=spec.norm_eps,
        tie_word_embeddings=tied,
        chunk_size=8,
        initializer_range=0.3,
    )
    torch.manual_seed(0)
    hf = Mamba2ForCausalLM(config).eval()
    hf.save_pretrained(tmp_path)
    ours = Mamba2(spec)
    load_checkpoint(ours, tmp_path)
    assert set(ours.state_dict()) == set(hf.state_dict())

    prompt = torch.randint(0, spec.vocab_size, (2, 21), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(prompt, use_cache=False).logits
    got, _ = ours.prefill(prompt)
    assert expected.std() > 0.1
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("spec", [SPEC, WITH_MLP], ids=["mamba2", "with-mlp"])
def test_chunked_prefill_and_steps_equal_the_recurrence(spec: ModelSpec) -> None:
    model = tiny_model(spec)
    tokens = torch.as_tensor(np.random.default_rng(5).integers(0, spec.vocab_size, (2, CHUNK + 30)))
    expected, final = steps(model, tokens, model.new_state(2))

    full, state = model.prefill(tokens)
    torch.testing.assert_close(full, expected, atol=1e-10, rtol=0)
    assert_states_close(state, final, atol=1e-10)

    head, state = model.prefill(tokens[:, :37])
    tail, state = steps(model, tokens[:, 37:], state)
    torch.testing.assert_close(torch.cat([head, tail], dim=1), expected, atol=1e-10, rtol=0)
    assert_states_close(state, final, atol=1e-10)


@pytest.mark.parametrize(
    ("spec", "dtype", "atol"),
    [(SPEC, torch.float64, 1e-10), (SPEC, torch.float32, 1e-4), (WITH_MLP, torch.float64, 1e-10)],
    ids=["float64", "float32", "with-mlp"],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_tree_verifiers_equal_sequential_decoding_of_each_path(
    spec: ModelSpec, dtype: torch.dtype, atol: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(10, 21))
    tree = Tree.from_parents([-1] + [int(rng.integers(0, i)) for i in range(1, n)])
    model = tiny_model(spec, seed, dtype)
    _, state = model.prefill(torch.as_tensor(rng.integers(0, spec.vocab_size, (1, 6))))
    tokens = torch.as_tensor(rng.integers(0, spec.vocab_size, n))

    stree, _ = model.verify_tree_stree(tokens, tree, state)
    naive, _ = model.verify_tree_naive(tokens, tree, state)

    assert stree.shape == naive.shape == (n, spec.vocab_size)
    torch.testing.assert_close(stree, naive, atol=atol, rtol=0)
    for node in range(n):
        logits, _ = steps(model, tokens[tree.path(node)][None], state)
        torch.testing.assert_close(stree[node], logits[0, -1], atol=atol, rtol=0)


def test_advance_equals_stepping_through_the_accepted_path() -> None:
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3, 3, 4, 5, 6, 6, 10])
    model = tiny_model(WITH_MLP, seed=4)
    _, state = model.prefill(torch.arange(5)[None])
    tokens = torch.as_tensor(np.random.default_rng(5).integers(0, WITH_MLP.vocab_size, tree.size))
    before = SSMState(state.conv.clone(), state.ssm.clone())

    model.verify_tree_stree(tokens, tree, state)
    model.verify_tree_naive(tokens, tree, state)
    for node in (0, 2, 9, 12):  # paths shorter and longer than the conv window
        path = tokens[tree.path(node)]
        expected = steps(model, path[None], state)[1]
        assert_states_close(model.advance(state, path), expected, atol=1e-10)
    assert_states_close(state, before, atol=0)


@pytest.mark.parametrize(("dtype", "atol"), [(torch.float64, 1e-10), (torch.float32, 1e-5)],
                         ids=["float64", "float32"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_committing_from_the_verification_record_equals_replaying_the_path(
    seed: int, dtype: torch.dtype, atol: float
) -> None:
    """Every node's path of a random tree, root-only and shorter than the conv window included:
    the state from either verifier's record equals stepping the recurrence through the path."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 20))
    tree = Tree.from_parents([-1] + [int(rng.integers(max(0, i - 3), i)) for i in range(1, n)])
    model = tiny_model(WITH_MLP if seed % 2 else SPEC, seed, dtype)
    _, state = model.prefill(torch.as_tensor(rng.integers(0, SPEC.vocab_size, (1, 2 + seed))))
    tokens = torch.as_tensor(rng.integers(0, SPEC.vocab_size, n))
    records = [model.verify_tree_stree(tokens, tree, state)[1],
               model.verify_tree_naive(tokens, tree, state)[1]]
    for node in range(n):
        path = tree.path(node)
        replayed = steps(model, tokens[path][None], state)[1]
        for record in records:
            assert_states_close(record.state(path), replayed, atol=atol)


def test_static_verification_of_a_padded_tree_equals_stree_on_the_real_nodes() -> None:
    """Padding nodes (mask rows holding only themselves) change neither the real nodes' logits
    nor the states their record commits."""
    tree = Tree.from_parents([-1, 0, 0, 1, 1, 2])
    model = tiny_model(WITH_MLP, seed=2)
    _, state = model.prefill(torch.arange(9)[None] % WITH_MLP.vocab_size)
    tokens = torch.arange(tree.size) + 4
    expected, record = model.verify_tree_stree(tokens, tree, state)
    layout = tree_layout(tree, WITH_MLP.conv_kernel, "cpu", size=8)
    assert layout.mask[6:].equal(torch.eye(8, dtype=torch.bool)[6:])
    padded = torch.cat([tokens, torch.tensor([7, 7])])[None]
    logits, *parts = model.verify_static(padded, layout.mask, layout.conv_index, state.conv,
                                         state.ssm)
    torch.testing.assert_close(logits[: tree.size], expected, atol=1e-10, rtol=0)
    static = TreeRecord.of_tree(parts, layout.conv_index, state.ssm)
    for node in (0, 3, 5):
        assert_states_close(static.state(tree.path(node)), record.state(tree.path(node)), 1e-10)


def test_random_init_is_seeded_and_refuses_other_archs() -> None:
    a, b = Mamba2.random(SPEC, seed=3), Mamba2.random(SPEC, seed=3)
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    assert all(torch.equal(x, y) for x, y in pairs)
    assert torch.all(a.backbone.layers[0].mixer.A_log.exp() >= 1)
    with pytest.raises(InputError, match="arch 'ssm'"):
        Mamba2(ModelSpec(**{**SPEC.__dict__, "arch": "transformer"}))
