"""For the dashboard tests: a results folder built in seconds by the library's own runs (a
synthetic trace, optimize-tree output for two hardware profiles, simulations of two policies at
two arrival rates, optionally a small real validate run on this CPU, and the repository's
measured benchmark JSON), and the check that a page loads nothing from the network."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from plotly.offline import get_plotlyjs

from specscope.atomic import write_text_atomic
from specscope.hw_profiles.deployment import deployment
from specscope.optimizers.run import OptimizeRequest, run_optimize
from specscope.simulator.fronts import serving_front
from specscope.simulator.metrics import write_metrics
from specscope.simulator.run import SimulateRequest, run_simulation
from specscope.trace import synth_trace, write_trace

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
HARDWARE = ("h100", "cpu-2core")
POLICIES = ("none", "static")
RATES = (2.0, 16.0)
FRONT = (0.5, 1.0, 4.0)
"""Multiples of the first rate the static run's front serves (the economics section)."""


def build_results(folder: Path, validate: bool = False) -> Path:
    """Write the results folder (module docstring) and return it; `validate` adds a real
    three-prompt validate run of tiny-code on this CPU (about 10 s)."""
    folder.mkdir(parents=True, exist_ok=True)
    trace = synth_trace(requests=16, seed=0, length=128)
    trace_path = write_trace(trace, folder / "trace.parquet")
    for hw in HARDWARE:
        result = run_optimize(OptimizeRequest(
            deployment=deployment(hw, target="llama-2-7b"),
            trace_path=trace_path, budgets=[4, 8, 16, 32], algos="sequoia,dyspec,kary,chain"))
        write_text_atomic(folder / f"trees-{hw}.json", json.dumps(result.to_dict(), indent=2))
    for policy in POLICIES:
        for rate in RATES:
            request = SimulateRequest(
                deployment=deployment("h100", target="llama-2-7b"),
                trace=trace, policy=policy, rate=rate, requests=24, seed=0,
                tree=folder / "trees-h100.json" if policy == "static" else None,
                gpu_hour_usd=2.5)
            run = run_simulation(request)
            if policy == "static" and rate == RATES[0]:  # the economics section's front
                run.summary["front"] = serving_front(request, FRONT)
            write_metrics(folder / "simulate" / f"{policy}-{rate:g}.parquet", run.requests,
                          run.summary, run.timeseries, run.events)
    if validate:
        _validate(folder / "validate")
    shutil.copytree(BENCHMARKS, folder / "benchmarks", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.txt"))
    return folder


def _validate(folder: Path) -> None:
    """A real validate run (two configurations, three held-out prompts × 16 tokens): its
    parquet table and its JSON document, as `validate -o` and `--json` write them."""
    from specscope.validate.compare import Sizes, ValidateRequest, run_validate
    from specscope.validate.grid import Config
    from specscope.validate.report import write_table

    run = run_validate(ValidateRequest(
        hw="cpu-2core", model="tiny-code", device="cpu",
        configs=(Config("sequoia", "draft", 8, 0.0), Config("chain", "ngram", 6, 0.0)),
        sizes=Sizes(3, 16, 1, recheck=1)))
    write_table(run, folder)
    write_text_atomic(folder / "validate.json", json.dumps(run.to_dict(), indent=2))


def external_references(page: str) -> list[str]:
    """Every place the page outside the embedded plotly.js could load from the network: script
    src, link href, img/iframe/source src, CSS url(...), and any http(s) URL at all."""
    assert page.count(get_plotlyjs()) == 1, "plotly.js must be embedded exactly once"
    rest = page.replace(get_plotlyjs(), "")
    patterns = (r"<script[^>]*\bsrc\s*=", r"<link[^>]*\bhref\s*=",
                r"<(?:img|iframe|source|embed|object)[^>]*\b(?:src|data)\s*=",
                r"url\(\s*['\"]?(?!data:)", r"@import", r"https?://")
    return [m.group(0) for p in patterns for m in re.finditer(p, rest, flags=re.IGNORECASE)]
