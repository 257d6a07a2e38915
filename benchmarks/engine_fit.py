"""Fit vLLM's engine terms on its published batch-1 figures and print them (issue 27).

Run: .venv/bin/python benchmarks/engine_fit.py

The rows: vllm-project/vllm issue #20780's batch-1 table on an H100 (vLLM V1, CUDA graphs,
Llama-3.1-8B, MT-Bench): plain decoding's 7.07 ms per token, and EAGLE-1 / EAGLE-3 chains of
K = 2..7 with their TPOT and mean acceptance length (the twelve `examples/papers/engines.toml`
cases citing #20780). Three numbers are solved, in order:

1. `device_layer_ratio`: vLLM's fixed device time per layer over the graph runtime's (fitted on
   specscope's unfused Transformer), the one that makes the h100 price plain decoding at 7.07 ms;
2. `[loop] level_us` and `step_us`: least squares of each row's step time (τ × 7.07 ms / speedup,
   the bonus counted) less its forwards (the target verifying K + 1 tokens, K head forwards, all
   at that ratio) on K levels and one step.

Those twelve rows become the vLLM engine's calibration; the batch rows in
`examples/serving/batch-vllm-h100.toml` (another source) are what the terms are checked on.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from specscope.systems import head
from specscope.systems.reproduce import read_cases

ROWS = "examples/papers/engines.toml"
PLAIN_S = 7.07e-3
"""Plain decoding's TPOT in issue #20780's table (vanilla, batch 1)."""


def main() -> None:
    cases = [c for c in read_cases(ROWS) if "#20780" in c.source]
    context = int(cases[0].decode_context)
    costs = head.costs(cases[0])
    target, drafter = costs.target.under("graph"), costs.drafter.under("graph")
    ratio = brentq(lambda r: float(target.under(device_layer_ratio=r).forward_time(1, 1, context))
                   - PLAIN_S, 1e-3, 1.0)
    target, drafter = (m.under(device_layer_ratio=ratio) for m in (target, drafter))
    levels, rest = [], []
    for case in cases:
        k = len(case.tree)
        step = case.tokens_per_step * PLAIN_S / case.published_speedup
        forwards = (float(target.verify_time(k + 1, context, batch=1, depth=k))
                    + k * float(drafter.forward_time(1, 1, context)))
        levels.append(k)
        rest.append(step - forwards)
    design = np.column_stack([levels, np.ones(len(levels))])
    (level, step), *_ = np.linalg.lstsq(design, np.array(rest), rcond=None)
    hw = target.hw
    print(f"{len(cases)} rows of {ROWS} (#20780), context {context}, on {hw.name}")
    print(f"device_layer_ratio = {ratio:.3f}   (layer_us {target.runtime.layer_s * 1e6:.1f})")
    print(f"level_us = {level * 1e6:.0f}   step_us = {step * 1e6:.0f}")
    print(f"reference_layer_us = {hw.runtimes['eager'].host_layer_s / hw.host_speed * 1e6:.3f}"
          f"   ({hw.name}'s eager host time per layer)")
    residual = design @ np.array([level, step]) - np.array(rest)
    print("residual ms per row: " + ", ".join(f"{c.name.removeprefix('vllm-')} {r * 1e3:+.2f}"
                                              for c, r in zip(cases, residual, strict=True)))


if __name__ == "__main__":
    main()
