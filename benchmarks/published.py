"""Print specscope's cost-model predictions beside published batch-1 LLM figures.

Run `.venv/bin/python benchmarks/published.py`. Every row names its source; "ratio" is predicted /
published (above 1: specscope predicts more tokens/s, or a longer time, than was measured).

Groups:
- gpt-fast A100 (fit): the 13 rows the a100 profile was calibrated on
  (docs/hardware.md#measured-data).
- gpt-fast A100 (held out): later rows of the same README on the same 330 W machine, never fitted.
- lmdeploy A100: TurboMind fp16 static batch-1 generation, output tokens / request time.
lmdeploy ran its own kernels and collectives on A100s not reported as power-limited, so its rows
test how far the gpt-fast calibration (330 W) transfers to other software. Engines that split the
lm_head over tensor-parallel ranks are priced so. First-token (prefill) figures, TensorRT-LLM's
among them, are in benchmarks/prefill.py.

No batch-1 decode figure for H100 or H200 with a citable table was found with the project's
search tools (NVIDIA's H100 tables are large-batch throughput or FP8 first-token latency, which
this cost model does not price), so the h100/h200 profiles stay uncompared here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from specscope.hw_profiles import CostModel, load_profile
from specscope.models import get_model
from specscope.profiling.fit import GPTFAST_A100, load_published

GPTFAST = "github.com/pytorch-labs/gpt-fast README (A100-80GB, 330 W), batch 1"
GPTFAST_NEW = "github.com/meta-pytorch/gpt-fast README, Llama-3.1 and TP+quantization tables"
LMDEPLOY = "github.com/InternLM/lmdeploy docs/en/benchmark/a100_fp16.md (v0.1.0a1), batch 1"


@dataclass(frozen=True)
class Figure:
    """One published figure: decode tok/s or generation tok/s."""

    group: str
    source: str
    model: str
    metric: str
    published: float
    weight_bits: int = 16
    tp: int = 1
    prompt: int = 5
    output: int = 200
    engine_shards_lm_head: bool = False


def figures() -> list[Figure]:
    """Every published figure this script compares against."""
    rows = [Figure("gpt-fast A100 (fit)", GPTFAST, r.model, "decode tok/s", r.tokens_per_s,
                   r.weight_bits, r.tp) for r in load_published(GPTFAST_A100) if r.tokens_per_s]
    held = [("llama-3.1-70b", 8, 1, 18.04), ("llama-3.1-8b", 16, 2, 149.10),
            ("llama-3.1-8b", 16, 4, 217.21), ("llama-3.1-8b", 16, 8, 276.01),
            ("llama-3.1-70b", 16, 2, 16.03), ("llama-3.1-70b", 16, 4, 37.45),
            ("llama-3.1-70b", 16, 8, 58.78), ("llama-2-70b", 8, 8, 80.44),
            ("llama-2-70b", 4, 8, 90.77), ("llama-3.1-70b", 8, 8, 75.58)]
    rows += [Figure("gpt-fast A100 (held out)", GPTFAST_NEW, m, "decode tok/s", v, b, tp)
             for m, b, tp, v in held]
    lmdeploy = [("llama-2-7b", 1, 128, 128, 102.21), ("llama-2-7b", 1, 128, 2048, 98.92),
                ("llama-2-7b", 1, 2048, 2048, 93.78), ("llama-2-13b", 1, 128, 128, 56.58),
                ("llama-2-13b", 1, 128, 2048, 55.29), ("llama-2-13b", 1, 2048, 2048, 52.12),
                ("llama-2-70b", 4, 128, 128, 33.63), ("llama-2-70b", 4, 128, 2048, 32.38),
                ("llama-2-70b", 4, 2048, 2048, 31.90)]
    rows += [Figure("lmdeploy A100", LMDEPLOY, m, "generate tok/s", v, 16, tp, p, o, True)
             for m, tp, p, o, v in lmdeploy]
    return rows


def predict(fig: Figure) -> float:
    """specscope's value of a figure on the a100 profile, in the figure's unit."""
    hw = load_profile("a100")
    if fig.engine_shards_lm_head:
        hw = dataclasses.replace(hw, shard_lm_head=True)
    model = CostModel(hw, get_model(fig.model), fig.weight_bits, fig.tp, group_size=32)
    if fig.metric == "decode tok/s":
        return 1.0 / model.forward_time(1, 1, fig.prompt + fig.output)
    decode = model.forward_time(1, 1, fig.prompt + np.arange(fig.output - 1))
    return fig.output / (model.forward_time(1, fig.prompt, 0) + float(np.sum(decode)))


def main() -> None:
    """Print the comparison table, one line per figure, and each group's median |error|."""
    head = (f"{'group':25s} {'model':14s} {'bits':>4s} {'tp':>2s} {'prompt/out':>10s} "
            f"{'metric':15s} {'published':>10s} {'specscope':>10s} {'ratio':>6s}")
    print(head)
    print("-" * len(head))
    errors: dict[str, list[float]] = {}
    sources: dict[str, str] = {}
    for fig in figures():
        pred = predict(fig)
        ratio = pred / fig.published
        errors.setdefault(fig.group, []).append(abs(ratio - 1))
        sources[fig.group] = fig.source
        shape = f"{fig.prompt}/{fig.output}"
        print(f"{fig.group:25s} {fig.model:14s} {fig.weight_bits:4d} {fig.tp:2d} {shape:>10s} "
              f"{fig.metric:15s} {fig.published:10.2f} {pred:10.2f} {ratio:6.2f}")
    print()
    for group, errs in errors.items():
        print(f"{group:25s} median |ratio - 1| = {np.median(errs):.1%}   source: {sources[group]}")
    print("\nNo citable batch-1 decode table for H100/H200 was found: h100 is fitted on this "
          "project's own H100 rows\n(python -m specscope.profiling.fit h100), h200 is scaled "
          "from it.")


if __name__ == "__main__":
    main()
