"""What stock Hugging Face decoding costs the host beyond its forwards, on this CPU, and its decoder
layer against specscope's: the source of the research engines' `host_layer_ratio`
(specscope/hw_profiles/data/engines/); benchmarks/research_loops.py, which shares its model
builders, now measures their loop terms, hf-eager's `baseline_token_us` among them.

Run: .venv/bin/python benchmarks/engine_overheads.py [--tokens 64] [--repeats 7] [--threads 1]

Two tables, each the fastest of --repeats runs after a warm-up, one thread (host work, not compute):

1. Per generated token: `model.generate` (greedy, min_new_tokens = max_new_tokens so every run
   decodes the same length) against a hand-written loop of the same model's cached forwards and
   an argmax. The difference is generate's own work per token (logits processors, stopping
   criteria, cache and input bookkeeping), the host time a Spec-Bench-style baseline pays beyond
   its forward.
2. Per decoder layer: one cached forward of one token through transformers' LlamaModel and
   specscope's Transformer at 2 and 10 layers of a tiny shape (d = 64, so the time is operator
   dispatch); the slope is each stack's host issue time per layer, and their ratio says how far
   specscope's eager runtime (fitted on its own Transformer) stands for Hugging Face's.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

import torch
from rich.console import Console
from rich.table import Table
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

# benchmarks/research_loops.py imports this module in .venv-research, which has transformers but
# not specscope: what needs specscope (or benchmarks/executor.py, which imports it) imports it
# where it is used.

console = Console(width=120)

TINY = {"vocab_size": 512, "heads": 4, "ff_mult": 4, "max_seq_len": 512, "norm_eps": 1e-6}
"""The tiny shape both stacks are timed at: llama-68m's architecture at width d (so the time is
operator dispatch), 4 heads, a 512-token vocabulary."""


def tiny_spec(layers: int, d_model: int = 64):
    """llama-68m's architecture at `layers` layers and width `d_model` (a specscope ModelSpec)."""
    from specscope.models import get_model

    base = get_model("llama-68m")
    return dataclasses.replace(base, name=f"tiny-{layers}", n_layers=layers, d_model=d_model,
                               n_heads=TINY["heads"], n_kv_heads=TINY["heads"],
                               head_dim=d_model // TINY["heads"], d_ff=TINY["ff_mult"] * d_model,
                               vocab_size=TINY["vocab_size"], max_seq_len=TINY["max_seq_len"],
                               norm_eps=TINY["norm_eps"])


def tiny_llama_config(layers: int, d_model: int = 64) -> LlamaConfig:
    """transformers' LlamaConfig of `tiny_spec(layers, d_model)`'s shape (no specscope needed)."""
    return LlamaConfig(vocab_size=TINY["vocab_size"], hidden_size=d_model,
                       intermediate_size=TINY["ff_mult"] * d_model, num_hidden_layers=layers,
                       num_attention_heads=TINY["heads"], num_key_value_heads=TINY["heads"],
                       max_position_embeddings=TINY["max_seq_len"], rms_norm_eps=TINY["norm_eps"],
                       tie_word_embeddings=False)


def hf_model(layers: int, d_model: int = 64) -> LlamaForCausalLM:
    """A random-weight transformers Llama of `tiny_llama_config(layers, d_model)`."""
    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_llama_config(layers, d_model)).eval()


def hf_layer_step(layers: int) -> Callable[[], None]:
    """One cached forward of one token through a `layers`-layer tiny transformers Llama after a
    32-token prefill (the cache cropped back after each call), for timing."""
    model = hf_model(layers)
    cache = DynamicCache()
    with torch.inference_mode():
        model(torch.arange(1, 33).unsqueeze(0), past_key_values=cache, use_cache=True)
    token = torch.tensor([[7]])

    @torch.inference_mode()
    def step() -> None:
        model(token, past_key_values=cache, use_cache=True)
        cache.crop(-1)

    return step


def specscope_layer_step(layers: int) -> Callable[[], None]:
    """The same through specscope's Transformer of `tiny_spec(layers)`."""
    from specscope.models.torch.transformer import Transformer

    ours = Transformer(tiny_spec(layers)).eval()
    ours.setup_caches(1, 64)
    with torch.inference_mode():
        ours.prefill(torch.arange(1, 33).unsqueeze(0))
    token, pos = torch.tensor([[7]]), torch.tensor([32])

    @torch.inference_mode()
    def step() -> None:
        ours(token, pos)

    return step


@torch.inference_mode()
def per_token(tokens: int, repeats: int) -> tuple[float, float]:
    """(generate, hand loop) seconds per generated token of a 2-layer tiny Llama."""
    from executor import fastest_ms  # benchmarks/executor.py (scripts run from benchmarks/)

    model = hf_model(2)
    prompt = torch.arange(1, 33).unsqueeze(0)

    def generate() -> None:
        model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                       pad_token_id=0)

    def loop() -> None:
        out = model(prompt, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(tokens - 1):
            out = model(token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)

    return fastest_ms(generate, repeats) / 1e3 / tokens, fastest_ms(loop, repeats) / 1e3 / tokens


def per_layer(repeats: int) -> tuple[float, float]:
    """(transformers, specscope) host seconds per decoder layer of a one-token cached forward:
    loop_fit.layer_us's slope over 2 and 10 layers, as research_loops.py measures it."""
    from loop_fit import layer_us

    return (layer_us(hf_layer_step, repeats * 5) * 1e-6,
            layer_us(specscope_layer_step, repeats * 5) * 1e-6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generate, loop = per_token(args.tokens, args.repeats)
    table = Table(title=f"Host time per generated token (2-layer tiny Llama, {args.tokens} "
                  f"tokens, {args.threads} thread)")
    for col in ("generate µs", "hand loop µs", "generate's own work µs", "ratio"):
        table.add_column(col, justify="right")
    table.add_row(f"{generate * 1e6:.0f}", f"{loop * 1e6:.0f}",
                  f"{(generate - loop) * 1e6:.0f}", f"{generate / loop:.2f}")
    console.print(table)
    hf, ours = per_layer(args.repeats)
    table = Table(title="Host issue time per decoder layer, one cached token (slope 2 → 10 "
                  "layers)")
    for col in ("transformers µs", "specscope µs", "ratio"):
        table.add_column(col, justify="right")
    table.add_row(f"{hf * 1e6:.1f}", f"{ours * 1e6:.1f}", f"{hf / ours:.2f}")
    console.print(table)
    console.print(f"torch {torch.__version__}, transformers "
                  f"{__import__('transformers').__version__}")


if __name__ == "__main__":
    main()
