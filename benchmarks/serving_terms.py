"""Re-measure a profile's batching-server terms against its own fit (issue 25).

Run: OMP_NUM_THREADS=1 .venv/bin/python benchmarks/serving_terms.py [--hw cpu-2core] [--write]

`profile-hw` measures the server's terms right after fitting the steps (`serving.measure_serving`:
serve_step, serve_row, choose_step, choose_row, shared_row). This measures them again, on the
same code, against an existing profile: its fit prices the steps and its own [[measured]]
tables re-time the machine around each phase, so the drift since the profile was measured is
divided out. It prints the terms in µs; `--write` replaces them in the profile's file (every
other field stays as profile-hw wrote it). The shipped cpu-2core's server terms were written so
on 2026-11-26, when shared_row was added.
"""

from __future__ import annotations

import argparse
import re

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
    parser.add_argument("--write", action="store_true", help="replace the terms in the file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    hw = load_profile(args.hw)
    loop = measure_serving(hw, Runtime.cpu(), then=profile_points(hw))
    keys = {field: key for key, field in LOOP_KEYS.items() if field in SERVER_TERMS}
    for field, key in keys.items():
        print(f"{key} = {getattr(loop, field) * 1e6:.4g}")
    if args.write:
        path = profile_path(args.hw)
        text = path.read_text(encoding="utf-8")
        for field, key in keys.items():
            text, count = re.subn(rf"(?m)^{key} = \S+", f"{key} = {getattr(loop, field) * 1e6:.4g}",
                                  text)
            if count != 1:
                raise SystemExit(f"{path}: no single {key} line to replace")
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
