"""State-space and hybrid zoo targets through the executor: with STree verification and commits
taken from the verification's own record, greedy speculative decoding equals autoregressive
decoding token for token, with the n-gram drafter and with the zoo's draft model.

tiny-ssm runs with its trained weights. tiny-hybrid runs with its trained weights when they are
in the zoo, else as a seeded random model built from its zoo spec (losslessness does not depend
on the weights; the test's id says which). A random model agrees with no drafter, so for it a
perturbed copy of itself drafts too, which makes deep paths accepted and committed. Models run
in float64, so that a tree pass and a one-token pass give the same argmax. Each prompt is a short
piece of code, the target's own continuation of it, and the piece again, so that the n-gram
drafter finds a continuation to copy.
"""

from __future__ import annotations

from functools import cache

import pytest
import torch

from specscope.executor.drafters import make_drafter
from specscope.executor.loop import GenerateResult, decode_autoregressive, speculative_generate
from specscope.executor.methods import static_method
from specscope.executor.targets import HybridModel, Model, SSMModel, wrap
from specscope.models.torch import Hybrid
from specscope.models.zoo import load_zoo_model, load_zoo_tokenizer, weights_path, zoo_specs
from specscope.tree import Tree

torch.set_num_threads(1)

HYBRID_TRAINED = weights_path("tiny-hybrid").is_file()
RANDOM_HYBRID = "tiny-hybrid (random)"
TARGETS = ("tiny-ssm", "tiny-hybrid" if HYBRID_TRAINED else RANDOM_HYBRID)
STARTS = (
    "def add(a, b):\n    return a + b\n\n\ndef",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def",
    "import os\n\n\ndef read(path):\n    with open(path) as f:\n",
)
MAX_NEW = 24
TREE = Tree.from_parents([-1, 0, 0, 1, 1, 2, 3, 4])  # 8 nodes, depth 4

needs_zoo = pytest.mark.skipif(
    not (weights_path("tiny-ssm").is_file() and weights_path("tiny-code-draft").is_file()),
    reason="zoo models tiny-ssm and tiny-code-draft not trained yet")


@cache
def target(name: str) -> Model:
    """The wrapped zoo target `name` in float64 (see the module docstring for tiny-hybrid)."""
    if name == RANDOM_HYBRID:
        return wrap(random_hybrid(), name)
    return wrap(load_zoo_model(name, dtype=torch.float64)[0], name)


def random_hybrid(noise: float = 0.0) -> Hybrid:
    """tiny-hybrid's spec with seeded random weights, plus relative noise on its matrices."""
    model = Hybrid.random(zoo_specs()["tiny-hybrid"], seed=0, dtype=torch.float64, std=0.1)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.add_(noise * p.std() * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


@cache
def zoo_draft() -> Model:
    return wrap(load_zoo_model("tiny-code-draft", dtype=torch.float64)[0], "tiny-code-draft")


@cache
def prompts(name: str) -> list[list[int]]:
    """`start + continuation(start) + start` for each of `STARTS`."""
    tokenizer = load_zoo_tokenizer()
    starts = [tokenizer.encode(text) for text in STARTS]
    return [s + decode_autoregressive(target(name), s, MAX_NEW).output + s for s in starts]


def decode(name: str, drafter_name: str, draft: Model | None = None) -> GenerateResult:
    """Every prompt decoded autoregressively and speculatively (8-node tree), compared."""
    model = target(name)
    drafter = make_drafter(drafter_name, model.vocab_size, draft)
    return speculative_generate(model, drafter, static_method("tree", TREE, "test"),
                                prompts(name), MAX_NEW, verify_lossless=True, threads=1)


@needs_zoo
@pytest.mark.parametrize("drafter", ["ngram", "draft"])
@pytest.mark.parametrize("name", TARGETS)
def test_stree_speculative_decoding_of_a_zoo_target_is_lossless(name: str, drafter: str) -> None:
    assert isinstance(target(name), HybridModel if name.startswith("tiny-hybrid") else SSMModel)
    result = decode(name, drafter, zoo_draft() if drafter == "draft" else None)
    assert result.lossless and result.new_tokens == len(STARTS) * MAX_NEW
    if name != RANDOM_HYBRID:
        assert result.accepted.max() >= 2  # paths past the root's first child were committed


def test_a_random_hybrid_is_lossless_when_its_drafts_run_deep() -> None:
    result = decode(RANDOM_HYBRID, "draft", wrap(random_hybrid(noise=0.05), "perturbed copy"))
    assert result.lossless
    assert result.accepted.max() == TREE.depth  # whole root-to-leaf paths were committed
