"""What stock Hugging Face decoding costs the host beyond its forwards, on this CPU: the source of
the `hf-eager` engine's `baseline_token_us` (specscope/hw_profiles/data/engines/hf-eager.toml).

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

import torch
from executor import fastest_ms  # benchmarks/executor.py (scripts run from benchmarks/)
from rich.console import Console
from rich.table import Table
from transformers import LlamaConfig, LlamaForCausalLM

from specscope.models import get_model
from specscope.models.spec import ModelSpec
from specscope.models.torch.transformer import Transformer

console = Console(width=120)


def tiny_spec(layers: int, d_model: int = 64) -> ModelSpec:
    """llama-68m's architecture at `layers` layers and width `d_model`."""
    base = get_model("llama-68m")
    return dataclasses.replace(base, name=f"tiny-{layers}", n_layers=layers, d_model=d_model,
                               n_heads=4, n_kv_heads=4, head_dim=d_model // 4,
                               d_ff=4 * d_model, vocab_size=512, max_seq_len=512)


def hf_model(spec: ModelSpec) -> LlamaForCausalLM:
    """A random-weight transformers Llama of `spec`'s shape."""
    config = LlamaConfig(vocab_size=spec.vocab_size, hidden_size=spec.d_model,
                         intermediate_size=spec.d_ff, num_hidden_layers=spec.n_layers,
                         num_attention_heads=spec.n_heads, num_key_value_heads=spec.n_kv_heads,
                         max_position_embeddings=spec.max_seq_len, rms_norm_eps=spec.norm_eps,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


@torch.inference_mode()
def per_token(tokens: int, repeats: int) -> tuple[float, float]:
    """(generate, hand loop) seconds per generated token of a 2-layer tiny Llama."""
    model = hf_model(tiny_spec(2))
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


@torch.inference_mode()
def per_layer(repeats: int) -> tuple[float, float]:
    """(transformers, specscope) host seconds per decoder layer of a one-token cached forward."""
    times = {}
    for layers in (2, 10):
        spec = tiny_spec(layers)
        hf = hf_model(spec)
        out = hf(torch.arange(1, 33).unsqueeze(0), use_cache=True)
        cache = out.past_key_values
        token = torch.tensor([[7]])

        def hf_step(hf=hf, cache=cache, token=token) -> None:
            hf(token, past_key_values=cache, use_cache=True)
            if hasattr(cache, "crop"):  # a Cache grows in place; legacy tuples do not
                cache.crop(-1)

        ours = Transformer(spec).eval()
        ours.setup_caches(1, 64)
        ours.prefill(torch.arange(1, 33).unsqueeze(0))
        pos = torch.tensor([32])

        def our_step(ours=ours, token=token, pos=pos) -> None:
            ours(token, pos)

        times[layers] = (fastest_ms(hf_step, repeats * 5) / 1e3,
                          fastest_ms(our_step, repeats * 5) / 1e3)
    return tuple((times[10][i] - times[2][i]) / 8 for i in (0, 1))


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
