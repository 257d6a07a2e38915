"""Tiny models the executor tests share: a random target with a perturbed copy as its draft,
prompts that repeat their start (for tests that collect traces and replay them against the
executor), and a random Hugging Face Llama folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from specscope.executor.targets import CachedModel, wrap
from specscope.models.spec import ModelSpec
from specscope.models.torch import Transformer


def perturbed_pair(spec: ModelSpec, draft_name: str) -> tuple[CachedModel, CachedModel]:
    """Random float64 weights of `spec` (seed 0) as the target, and the same weights plus 5%
    relative noise as the draft, named `draft_name` (optimize-tree prices a draft source by
    its catalogue name)."""
    target = Transformer.random(spec, seed=0, dtype=torch.float64, std=0.2)
    draft = Transformer.random(spec, seed=0, dtype=torch.float64, std=0.2)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in draft.parameters():
            if p.ndim >= 2:
                p.add_(0.05 * p.std() * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return wrap(target), wrap(draft, draft_name)


def save_tiny_llama(path: Path, vocab_size: int, layers: int) -> str:
    """A random LlamaForCausalLM (seed 0, width 32, `layers` layers) saved to `path`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, initializer_range=0.2)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


def repeating_prompts(vocab_size: int, count: int = 6) -> list[list[int]]:
    """`count` prompts of 16 tokens whose last 6 repeat their first 6 (seeded): n-gram and
    suffix drafters find matches."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        start = rng.integers(0, vocab_size, 6).tolist()
        out.append(start + rng.integers(0, vocab_size, 4).tolist() + start)
    return out
