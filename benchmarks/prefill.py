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
  70B at 128 and 2,048 input tokens, priced under the tensorrt-llm engine's runtime (compile),
  the LM head sharded and run at the last position only, as its context phase does.

The table's last lines summarise |ratio − 1| by group, runtime and prompt length. A last table
prices chunked prefill against the whole prompt (no measurement: a check of the pricing's own
consistency, since a chunk reads at least the context a whole prompt's tokens read).
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from specscope.hw_profiles import CostModel, load_profile
from specscope.hw_profiles.engine import load_engine
from specscope.models import get_model
from specscope.profiling.fit import H100_STEPS, load_steps

RESULTS = Path(__file__).parent / "results"
GPU_RUNS = {"h100": RESULTS / "gpu-run-h100", "h200": RESULTS / "gpu-run-h200"}
TRTLLM = "NVIDIA/TensorRT-LLM docs/source/performance.md, Low Latency (v0.5), batch 1"
TRTLLM_ROWS = [  # (hardware, model, tp, precision, input tokens, first-token ms)
    ("a100", "llama-2-7b", 1, "bf16", 128, 16.0), ("a100", "llama-2-7b", 1, "bf16", 2048, 133.0),
    ("a100", "llama-2-70b", 4, "bf16", 128, 47.0), ("a100", "llama-2-70b", 4, "bf16", 2048, 377.0),
    ("h100", "llama-2-7b", 1, "fp8", 128, 7.0), ("h100", "llama-2-7b", 1, "fp8", 2048, 36.0),
    ("h100", "llama-2-70b", 4, "fp8", 128, 26.0), ("h100", "llama-2-70b", 4, "fp8", 2048, 109.0)]
"""FP16 is priced as bf16 (the same tensor-core rate); the H100 rows' engines were built with
--enable_fp8 --fp8_kv_cache."""


@dataclass(frozen=True)
class Prompt:
    """One measured prompt and what it was run on."""

    group: str
    hw: str
    model: str
    runtime: str
    tokens: int
    measured_ms: float
    tp: int = 1
    precision: str = "bf16"
    engine: str = ""
    attention: str = "split"

    def predict_ms(self) -> float:
        """The prompt's forward priced on the shipped profile (and the engine's settings)."""
        hw = load_profile(self.hw)
        extra: dict = {}
        if self.engine:
            hw = dataclasses.replace(hw, shard_lm_head=True)
            extra = {"prompt_logits": "last", "kv_bits": 8 if self.precision == "fp8" else 16}
        model = CostModel(hw, get_model(self.model), tp=self.tp, runtime=self.runtime,
                          tree_attention=self.attention, precision=self.precision, **extra)
        return float(model.forward_time(1, self.tokens, 0)) * 1e3


def prompts() -> list[Prompt]:
    """Every prefill measurement: the h100 fit's, the runbook's held out, TensorRT-LLM's."""
    rows = [Prompt("h100 fit", "h100", r.model, r.runtime, r.n, r.ms, attention="dense")
            for r in load_steps(H100_STEPS) if r.phase == "prefill"]
    for hw, folder in GPU_RUNS.items():
        data = tomllib.loads((folder / "profile.toml").read_text())
        rows += [Prompt("gpu-run held out", hw, m["model"], m["runtime"], n, ms)
                 for m in data.get("measured", []) if m["context"] == 0 and m["batch"] == 1
                 for n, ms in zip(m["new_tokens"], m["time_ms"], strict=True)]
    engine = load_engine("tensorrt-llm")
    rows += [Prompt("TensorRT-LLM v0.5", hw, model, engine.target_runtime, n, ms, tp, precision,
                    "tensorrt-llm", engine.tree_attention)
             for hw, model, tp, precision, n, ms in TRTLLM_ROWS]
    return rows


def summary(rows: list[tuple[Prompt, float]], key) -> list[tuple[str, int, float, float]]:
    """(label, rows, median |ratio − 1|, median signed) per value of `key(prompt)`."""
    groups: dict[str, list[float]] = {}
    for prompt, ratio in rows:
        groups.setdefault(key(prompt), []).append(ratio - 1)
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
    rows = []
    for p in prompts():
        ratio = p.predict_ms() / p.measured_ms
        rows.append((p, ratio))
        table.add_row(p.group, p.hw, p.model, str(p.tp), p.precision, p.runtime, str(p.tokens),
                      f"{p.measured_ms:.2f}", f"{p.predict_ms():.2f}", f"{ratio:.2f}")
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
    runs = ", ".join(str(p.relative_to(RESULTS.parent.parent)) for p in GPU_RUNS.values())
    console.print(f"sources: {H100_STEPS.name} (h100 fit); {runs} (held out); {TRTLLM}")
    if args.output:
        args.output.write_text(console.export_text())


if __name__ == "__main__":
    main()
