"""Re-measure a profile's batching-server terms against its own fit (issue 25).

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/serving_terms.py [--hw cpu-2core] [--runs 5]
     [--write]

`profile-hw` measures the server's terms right after fitting the steps (`serving.measure_serving`:
serve_step, serve_row, spec_row, choose_step, choose_row, shared_row). This measures them again,
on the same code, against an existing profile: its fit prices the steps and its own [[measured]]
tables re-time the machine around each phase, so the drift since the profile was measured is
divided out. On a shared 2-core VM one run's terms move by ±150 µs (spec_row 137-408 µs over
four runs on 2026-11-26: the drift is re-timed only around each phase), so it measures `--runs`
times and keeps each term's median. It prints every run's terms and the medians in µs;
`--write` replaces them in the profile's file (every other field stays as profile-hw wrote it;
a term the file lacks goes after the last server term). The shipped cpu-2core's server terms
were written so on 2026-11-26, when shared_row was added, and again that day, with five runs,
when spec_row was.
"""

from __future__ import annotations

import argparse
import dataclasses
import re

import numpy as np
import torch

from specscope.executor.runtime import Runtime
from specscope.hw_profiles import load_profile
from specscope.hw_profiles.loop import LOOP_KEYS, SERVER_TERMS
from specscope.hw_profiles.profile import profile_path
from specscope.profiling.drift import profile_points
from specscope.profiling.serving import measure_serving


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hw", default="cpu-2core")
    parser.add_argument("--runs", type=int, default=5, help="measurements (medians kept)")
    parser.add_argument("--write", action="store_true", help="replace the terms in the file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    hw = load_profile(args.hw)
    keys = {field: key for key, field in LOOP_KEYS.items() if field in SERVER_TERMS}
    runs = []
    for run in range(args.runs):
        runs.append(measure_serving(hw, Runtime.cpu(), then=profile_points(hw)))
        print(f"run {run + 1}: " + ", ".join(f"{key} {getattr(runs[-1], field) * 1e6:.4g}"
                                            for field, key in keys.items()))
    medians = {field: float(np.median([getattr(r, field) for r in runs])) for field in keys}
    loop = dataclasses.replace(runs[0], **medians)
    for field, key in keys.items():
        print(f"{key} = {getattr(loop, field) * 1e6:.4g}")
    if args.write:
        path = profile_path(args.hw)
        text = path.read_text(encoding="utf-8")
        for field, key in keys.items():
            line = f"{key} = {getattr(loop, field) * 1e6:.4g}"
            text, count = re.subn(rf"(?m)^{key} = \S+", line, text)
            if count == 0:
                text, count = re.subn(r"(?m)^(shared_row_us = .*)$", rf"\1\n{line}", text)
            if count != 1:
                raise SystemExit(f"{path}: no single {key} line to replace")
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
