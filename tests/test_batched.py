"""Batched targets (`BatchedModel`): many sequences' trees verified in one forward.

Each row's logits equal its own single-sequence verification, a row never reads another row's
keys, commit compacts its row only, a released row is reused cleanly, and greedy decoding through
the batch (sequences joining and leaving at different steps, prompts prefilled in chunks
interleaved with decoding steps) equals each prompt's own autoregressive output, for
Transformer (one forward, eager and the padded static step), SSM and hybrid targets.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_attention import random_tree
from tiny_pair import tiny_spec

from specscope.executor.batched import BatchedModel
from specscope.executor.batched_transformer import BatchedTransformer, batch_target
from specscope.executor.loop import decode_autoregressive
from specscope.executor.targets import Model, wrap
from specscope.executor.verify import greedy
from specscope.models.spec import ModelSpec
from specscope.models.torch import Hybrid, Mamba2, Transformer
from specscope.models.zoo import load_zoo_model, weights_path
from specscope.models.zoo.prompts import load_prompts
from specscope.tree import Tree

torch.set_num_threads(1)

V = 61
LLAMA = tiny_spec("tiny-llama", V, max_seq_len=96)
MAMBA = ModelSpec(name="tiny-mamba2", arch="ssm", n_layers=2, d_model=32, vocab_size=V,
                  d_state=16, ssm_heads=8, ssm_head_dim=8, ssm_groups=2)
HYBRID = ModelSpec(name="tiny-hyb", arch="hybrid", n_layers=3, d_model=32, vocab_size=V,
                   n_heads=4, n_kv_heads=2, head_dim=8, d_ff=40, d_state=8, ssm_heads=4,
                   ssm_head_dim=8, ssm_groups=2, conv_kernel=4, attn_layers=(1,),
                   max_seq_len=96)
CAPACITY = 80
CHUNK = 4
"""Prompt tokens a prefill call feeds."""


def llama() -> Transformer:
    return Transformer.random(LLAMA, seed=0, dtype=torch.float64, std=0.2)


def batched(rows: int, padded: bool) -> BatchedTransformer:
    return BatchedTransformer(llama(), "tiny-llama", rows, max_len=CAPACITY, padded=padded)


def single(prompt: list[int]) -> Model:
    """The single-sequence reference after `prompt` (exact shapes)."""
    model = wrap(llama())
    model.prefill(torch.tensor(prompt), CAPACITY)
    return model


def start(model: BatchedModel, row: int, prompt: list[int]) -> None:
    """Admit `prompt` into `row` and prefill all of it but its last token, `CHUNK` at a time."""
    model.admit(row, CAPACITY)
    body = prompt[:-1]
    for lo in range(0, len(body), CHUNK):
        model.prefill(row, torch.tensor(body[lo : lo + CHUNK]))


def tree_work(rng: np.random.Generator, sizes: list[int]) -> tuple[list[Tree], list[torch.Tensor]]:
    trees = [random_tree(rng, n) for n in sizes]
    return trees, [torch.as_tensor(rng.integers(0, V, t.size)) for t in trees]


@pytest.mark.parametrize("padded", [False, True])
def test_batched_verify_and_commit_equal_each_rows_own_over_rounds(padded: bool) -> None:
    """Rows with committed lengths 1, 8 and 22 and trees of different shapes (padded nodes
    present); row 1 is mid-prefill and row 4 free between them. Each round verifies, checks
    each row's logits against its own model, and commits a random path in both."""
    rng = np.random.default_rng(1)
    rows, lengths = [0, 2, 3], [2, 9, 23]
    prompts = [rng.integers(0, V, n).tolist() for n in lengths]
    model = batched(5, padded)
    for row, prompt in zip(rows, prompts, strict=True):
        start(model, row, prompt)
    model.admit(1, CAPACITY)
    model.prefill(1, torch.tensor(prompts[2][:5]))
    refs = [single(p) for p in prompts]
    for sizes in ([1, 5, 11], [7, 1, 3], [4, 9, 2]):
        trees, tokens = tree_work(rng, sizes)
        got = model.verify(rows, tokens, trees)
        for row, ref, x, tree, logits in zip(rows, refs, tokens, trees, got, strict=True):
            assert logits.shape == (tree.size, V)
            torch.testing.assert_close(logits, ref.verify(x, tree), atol=1e-9, rtol=0)
            path = tree.path(int(rng.integers(tree.size)))
            before = model.model.kv_cache.kv.clone()
            model.commit(row, path)
            ref.commit(x, path)
            assert model.committed(row) == ref.committed
            others = [r for r in range(model.model.kv_cache.kv.shape[2]) if r != row]
            assert torch.equal(model.model.kv_cache.kv[:, :, others], before[:, :, others])
    assert model.committed(1) == 5


def test_a_row_never_reads_another_rows_keys() -> None:
    rng = np.random.default_rng(2)
    rows = [0, 1, 2]
    model = batched(3, padded=False)
    for row, n in zip(rows, (6, 14, 10), strict=True):
        start(model, row, rng.integers(0, V, n).tolist())
    trees, tokens = tree_work(rng, [3, 6, 4])
    clean = model.verify(rows, tokens, trees)
    kv = model.model.kv_cache.kv
    for row in rows:
        others = [r for r in rows if r != row]
        saved = kv.clone()
        kv[:, :, others] += torch.randn(kv[:, :, others].shape, dtype=kv.dtype)
        got = model.verify(rows, tokens, trees)
        kv.copy_(saved)
        torch.testing.assert_close(got[row], clean[row], atol=1e-12, rtol=0)
        assert all(not torch.allclose(got[r], clean[r]) for r in others)  # the noise mattered


def test_a_released_row_is_reused_cleanly() -> None:
    rng = np.random.default_rng(3)
    model = batched(2, padded=False)
    start(model, 0, rng.integers(0, V, 30).tolist())
    start(model, 1, rng.integers(0, V, 12).tolist())
    trees, tokens = tree_work(rng, [5, 5])
    verdict = model.verify([0, 1], tokens, trees)
    model.commit(0, trees[0].path(int(trees[0].leaves[0])))
    assert verdict[0].shape == (5, V)
    model.release(0)
    prompt = rng.integers(0, V, 7).tolist()  # shorter: stale slots lie past its prefix
    start(model, 0, prompt)
    assert model.committed(0) == 6
    trees, tokens = tree_work(rng, [6, 2])
    got = model.verify([0, 1], tokens, trees)
    torch.testing.assert_close(got[0], single(prompt).verify(tokens[0], trees[0]), atol=1e-9,
                               rtol=0)


def ssm_target() -> Model:
    return wrap(Mamba2.random(MAMBA, seed=0, dtype=torch.float64, std=0.3))


def hybrid_target() -> Model:
    return wrap(Hybrid.random(HYBRID, seed=0, dtype=torch.float64, std=0.3))


def decode_batched(model: BatchedModel, prompts: list[list[int]], arrivals: list[int],
                   expected: list[list[int]], seed: int) -> list[list[int]]:
    """Greedy speculative decoding of `prompts` through `model`: prompt i arrives at step
    `arrivals[i]` and takes the lowest free row, its prompt prefilled one chunk a step between
    decoding steps; every running row's random tree (a node's token often the right one, read
    from `expected`) is verified in one call; a sequence leaves when it has its tokens."""
    rng = np.random.default_rng(seed)
    out: list[list[int]] = [[] for _ in prompts]
    free, waiting = list(range(model.rows)), list(range(len(prompts)))
    prefilling: dict[int, tuple[int, int]] = {}  # row -> (prompt, tokens fed)
    running: dict[int, int] = {}  # row -> prompt
    step = 0
    while waiting or prefilling or running:
        while free and waiting and arrivals[waiting[0]] <= step:
            row = free.pop(0)
            model.admit(row, CAPACITY)
            prefilling[row] = (waiting.pop(0), 0)
        for row, (i, fed) in list(prefilling.items()):
            body = prompts[i][:-1]
            if fed < len(body):
                model.prefill(row, torch.tensor(body[fed : fed + CHUNK]))
                fed += CHUNK
            prefilling[row] = (i, fed)
            if fed >= len(body):
                del prefilling[row]
                running[row] = i
        rows = sorted(running)
        trees, tokens = [], []
        for row in rows:
            i = running[row]
            done, root = len(out[i]), (out[i] or prompts[i])[-1]
            tree = random_tree(rng, int(rng.integers(1, 7)))
            guess = [expected[i][done + d - 1] if done + d - 1 < len(expected[i])
                     and rng.random() < 0.7 else int(rng.integers(V)) for d in tree.depths]
            guess[0] = root
            trees.append(tree)
            tokens.append(torch.tensor(guess))
        for row, tree, x, logits in zip(rows, trees, tokens, model.verify(rows, tokens, trees)
                                        if rows else [], strict=True):
            i = running[row]
            verdict = greedy(tree, x.tolist(), logits)
            model.commit(row, verdict.path)
            out[i] += [int(x[n]) for n in verdict.path[1:]] + [verdict.bonus]
            if len(out[i]) >= len(expected[i]):
                out[i] = out[i][: len(expected[i])]
                model.release(row)
                del running[row]
                free.append(row)
                free.sort()
        step += 1
    return out


@pytest.mark.parametrize("kind", ["transformer", "transformer-padded", "ssm", "hybrid"])
def test_greedy_decoding_through_the_batch_equals_each_prompts_autoregressive_output(
        kind: str) -> None:
    rng = np.random.default_rng(4)
    prompts = [rng.integers(0, V, int(n)).tolist() for n in rng.integers(2, 20, 6)]
    max_new = [int(n) for n in rng.integers(3, 16, 6)]
    reference = {"transformer": lambda: wrap(llama()), "transformer-padded": lambda: wrap(llama()),
                 "ssm": ssm_target, "hybrid": hybrid_target}[kind]
    ref = reference()
    expected = [decode_autoregressive(ref, p, n).output for p, n in zip(prompts, max_new,
                                                                         strict=True)]
    if kind.startswith("transformer"):
        model = batched(3, padded=kind.endswith("padded"))
    else:
        model = batch_target(reference(), 3)
    got = decode_batched(model, prompts, [0, 0, 1, 3, 4, 9], expected, seed=5)
    assert got == expected


@pytest.mark.skipif(not weights_path("tiny-code").is_file(), reason="zoo model tiny-code not "
                    "trained yet")
def test_the_trained_zoo_target_decodes_through_the_batch_as_it_does_alone() -> None:
    module, tokenizer = load_zoo_model("tiny-code", dtype=torch.float64)
    prompts = [tokenizer.encode(p)[-40:] for p in load_prompts("builtin:code-edit")[:4]]
    ref = wrap(module)
    expected = [decode_autoregressive(ref, p, 12).output for p in prompts]
    model = BatchedTransformer(module, "tiny-code", 2, max_len=CAPACITY)
    assert decode_batched(model, prompts, [0, 0, 2, 2], expected, seed=6) == expected
