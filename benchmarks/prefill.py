"""Prefill (a prompt's forward, context 0) priced against every prefill time this project holds.

Run `.venv/bin/python benchmarks/prefill.py [-o results/prefill.txt]`. Nothing here is fitted:
each row is priced by the shipped profile and runtime it names, and "ratio" is predicted /
measured time. Groups, by how independent they are of the profiles' prefill terms:

- h100 fit: the 8 eager prompts of specscope's own Transformer on an H100 that the h100
  profile's `prefill_*` terms were fitted on (hw_profiles/data/measured/h100-transformer.csv),
  llama-68m and llama-3.1-8b at 128-8,192 tokens, under the dense causal mask they ran with
  (every other prompt here is a flash causal prompt: `split`).
- gpu-run held out: the prompts `profile-hw --device cuda` timed on the runbook's H100 and H200
  (benchmarks/results/gpu-run-h100, -h200: tiny-code-draft, tiny-code, llama-68m at 511-512
  tokens, eager), priced on the shipped h100 and h200 profiles, which never saw them.
- TensorRT-LLM v0.5: batch-1 first-token latency of its Low Latency tables (docs/source/
  performance.md): A100 FP16 and H100 FP8 (weights, activations and KV cache), LLaMA 7B and
  70B at 128 and 2,048 input tokens, priced as the tensorrt-llm engine's deployment prices a
  prompt (its runtime, tree attention and prompt logits), the LM head split over the tp ranks.

The table's last lines summarise |ratio − 1| by group, runtime and prompt length. A last table
prices chunked prefill against the whole prompt (no measurement: how far the pricing's chunks
stand from its whole prompt, which docs/hardware.md#prefill discusses).
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from specscope.atomic import write_text_atomic
from specscope.hw_profiles import CostModel, HardwareProfile, load_profile
from specscope.hw_profiles.deployment import deployment
from specscope.hw_profiles.pricing import deployed
from specscope.models import get_model
from specscope.profiling.fit import H100_STEPS, load_steps, predict_ms
from specscope.validate.accuracy import GPU_RUNS

REPO = Path(__file__).resolve().parent.parent
TRTLLM = "NVIDIA/TensorRT-LLM docs/source/performance.md, Low Latency (v0.5), batch 1"
TRTLLM_ROWS = [  # (hardware, model, tp, precision, KV bits, input tokens, first-token ms)
    ("a100", "llama-2-7b", 1, "bf16", 16, 128, 16.0),
    ("a100", "llama-2-7b", 1, "bf16", 16, 2048, 133.0),
    ("a100", "llama-2-70b", 4, "bf16", 16, 128, 47.0),
    ("a100", "llama-2-70b", 4, "bf16", 16, 2048, 377.0),
    ("h100", "llama-2-7b", 1, "fp8", 8, 128, 7.0), ("h100", "llama-2-7b", 1, "fp8", 8, 2048, 36.0),
    ("h100", "llama-2-70b", 4, "fp8", 8, 128, 26.0),
    ("h100", "llama-2-70b", 4, "fp8", 8, 2048, 109.0)]
"""FP16 is priced as bf16 (the same tensor-core rate); the H100 rows' engines were built with
--enable_fp8 --fp8_kv_cache."""


@dataclass(frozen=True)
class Prompt:
    """One measured prompt, what it was run on, and its price (ms)."""

    group: str
    hw: str
    model: str
    runtime: str
    tokens: int
    measured_ms: float
    predicted_ms: float
    tp: int = 1
    precision: str = "bf16"
    attention: str = "split"


def _profile_prompts(group: str, hw: str, profile: HardwareProfile) -> list[Prompt]:
    """The single-sequence prompts (context 0) a profile's measured tables hold, each priced as
    a flash prompt on the shipped profile `hw` (the executor prefills with SDPA's causal
    kernel)."""
    shipped = load_profile(hw)
    out = []
    for table in profile.measured:
        if table.context != 0 or table.batch != 1:
            continue
        cost = CostModel(shipped, get_model(table.model), runtime=table.runtime)
        out += [Prompt(group, hw, table.model, table.runtime, int(n), float(t) * 1e3,
                       float(cost.forward_time(1, int(n), 0)) * 1e3)
                for n, t in zip(table.new_tokens, table.time_s, strict=True)]
    return out


def _engine_prompt(hw: str, model: str, tp: int, precision: str, kv_bits: int, tokens: int,
                   ms: float, engine: str = "tensorrt-llm") -> Prompt:
    """A published first-token latency, priced as the engine's deployment prices a prompt (its
    runtime, tree attention and prompt logits), the LM head split over the tp ranks."""
    dep = deployment(hw, target=model, engine=engine, tp=tp, precision=precision,
                     kv_bits=kv_bits)
    profile = dataclasses.replace(load_profile(hw), shard_lm_head=True)
    cost = deployed(dep, dep.target_cost(profile, get_model(model)), None, 0).target
    return Prompt("TensorRT-LLM v0.5", hw, model, dep.runtime, tokens, ms,
                  float(cost.forward_time(1, tokens, 0)) * 1e3, tp, precision,
                  dep.tree_attention)


def prompts() -> list[Prompt]:
    """Every prefill measurement, priced: the h100 fit's, the runbook's held out, TensorRT-LLM's."""
    h100 = load_profile("h100")
    rows = [Prompt("h100 fit", "h100", r.model, r.runtime, r.n, r.ms, predict_ms(h100, r),
                   attention="dense")
            for r in load_steps(H100_STEPS) if r.phase == "prefill"]
    for folder in GPU_RUNS:
        hw = folder.rsplit("-", 1)[-1]
        measured = load_profile(REPO / folder / "profile.toml")
        rows += _profile_prompts("gpu-run held out", hw, measured)
    rows += [_engine_prompt(*row) for row in TRTLLM_ROWS]
    return rows


def summary(rows: list[Prompt], key) -> list[tuple[str, int, float, float]]:
    """(label, rows, median |ratio − 1|, median signed) per value of `key(prompt)`."""
    groups: dict[str, list[float]] = {}
    for prompt in rows:
        groups.setdefault(key(prompt), []).append(prompt.predicted_ms / prompt.measured_ms - 1)
    return [(label, len(e), float(np.median(np.abs(e))), float(np.median(e)))
            for label, e in groups.items()]


def chunked(hw: str, runtime: str, model: str, tokens: int, chunk: int) -> tuple[float, float]:
    """(whole prompt ms, the same prompt in `chunk`-token forwards after their prefix ms)."""
    cost = CostModel(load_profile(hw), get_model(model), runtime=runtime)
    whole = float(cost.forward_time(1, tokens, 0)) * 1e3
    parts = sum(float(cost.forward_time(1, chunk, done)) for done in range(0, tokens, chunk))
    return whole, parts * 1e3


def main() -> None:
    """Print every prompt priced, then the summaries; `-o` also writes the text."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, help="also write the tables here")
    args = parser.parse_args()
    console = Console(width=120, record=True)
    table = Table("group", "hw", "model", "tp", "precision", "runtime", "tokens", "measured ms",
                  "specscope ms", "ratio", title="prefill: predicted against measured")
    rows = prompts()
    for p in rows:
        table.add_row(p.group, p.hw, p.model, str(p.tp), p.precision, p.runtime, str(p.tokens),
                      f"{p.measured_ms:.2f}", f"{p.predicted_ms:.2f}",
                      f"{p.predicted_ms / p.measured_ms:.2f}")
    console.print(table)
    keys = {"group": lambda p: p.group,
            "runtime": lambda p: f"{p.runtime} ({p.precision}, {p.attention})",
            "prompt": lambda p: "≤ 512 tokens" if p.tokens <= 512 else "2,048-8,192 tokens"}
    for name, key in keys.items():
        by = Table(name, "rows", "median |ratio − 1|", "median signed", title=f"by {name}")
        for label, n, med, signed in summary(rows, key):
            by.add_row(label, str(n), f"{med:.1%}", f"{signed:+.1%}")
        console.print(by)
    chunks = Table("hw", "runtime", "model", "tokens", "chunk", "whole ms", "chunked ms", "ratio",
                   title="chunked prefill priced against the whole prompt")
    for hw in ("h100", "a100"):
        for chunk in (512, 2048):
            whole, parts = chunked(hw, "graph", "llama-3.1-8b", 8192, chunk)
            chunks.add_row(hw, "graph", "llama-3.1-8b", "8192", str(chunk), f"{whole:.1f}",
                           f"{parts:.1f}", f"{parts / whole:.2f}")
    console.print(chunks)
    console.print(f"sources: {H100_STEPS.name} (h100 fit); {', '.join(GPU_RUNS)} (held out); "
                  f"{TRTLLM}")
    if args.output:
        write_text_atomic(args.output, console.export_text())


if __name__ == "__main__":
    main()
