"""Tiny models the executor tests share: a tiny Llama-style spec, a draft made of a target's
weights plus noise (and a random target paired with one), prompts that repeat their start (for
tests that collect traces and replay them against the executor), and a random Hugging Face Llama
folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from specscope.executor.loop import decode_autoregressive
from specscope.executor.targets import CachedModel, Model, wrap
from specscope.models.spec import ModelSpec
from specscope.models.torch import Transformer


def tiny_spec(name: str, vocab_size: int, n_layers: int = 2, max_seq_len: int = 128) -> ModelSpec:
    """A tiny Llama-style Transformer: width 32, 4 heads of 8 over 2 KV heads, MLP 48 (the
    shape `save_tiny_llama` saves)."""
    return ModelSpec(name=name, arch="transformer", n_layers=n_layers, d_model=32,
                     vocab_size=vocab_size, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
                     max_seq_len=max_seq_len)


def noisy_copy(model: torch.nn.Module, spec: ModelSpec, scale: float = 0.05,
               seed: int = 5) -> torch.nn.Module:
    """A draft: `model`'s weights in float64 plus `scale` relative noise (seeded), as a module
    of the same class."""
    copy = type(model)(spec).to(torch.float64)
    copy.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in copy.parameters():
            if p.ndim >= 2:
                p.add_(scale * p.std() * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return copy.eval()


def perturbed_pair(spec: ModelSpec, draft_name: str) -> tuple[CachedModel, CachedModel]:
    """Random float64 weights of `spec` (seed 0) as the target, and the same weights plus 5%
    relative noise as the draft, named `draft_name` (optimize-tree prices a draft source by
    its catalogue name)."""
    target = Transformer.random(spec, seed=0, dtype=torch.float64, std=0.2)
    return wrap(target), wrap(noisy_copy(target, spec, seed=1), draft_name)


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


def self_repeating_prompts(target: Model, count: int) -> list[list[int]]:
    """`count` prompts `start + continuation(start) + start` (5 random tokens, seeded, and the
    target's 8 greedy ones): their continuation tends to copy."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        start = rng.integers(0, target.vocab_size, 5).tolist()
        out.append(start + decode_autoregressive(target, start, 8).output + start)
    return out
