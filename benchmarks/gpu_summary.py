"""The GPU runbook's summary (`benchmarks/gpu_run.py summary OUTDIR`): issue 10's GPU checks,
pass or fail, from the files a run wrote (`gpu_verify.json`, `env.json`, `stages.json`), and a
line each for its profile, validate and validate --load results. Imports nothing heavy."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

STAGES_FILE = "stages.json"


# ---- summary -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subjects:
    """The models and sizes the checks read: the GPU items' own, or the CPU mode's stand-ins."""

    large: str
    compiled: str
    static: str
    draft: str
    ssm: str
    short: int
    long: int
    prefill: int
    e2e_model: str = "tiny-code"


SUBJECTS = {"cuda": Subjects("llama-3.1-8b", "llama-3.1-8b", "graph", "llama-68m", "mamba2-2.7b",
                             256, 8192, 8192),
            "cpu": Subjects("llama-3.2-1b/8", "tiny-code-draft", "eager", "tiny-code-draft",
                            "tiny-ssm", 64, 256, 256)}
"""The checks' subjects: the GPU items', or the CPU mode's stand-ins (its compiled model is the
smallest, and a CPU has no graph runtime)."""


@dataclass(frozen=True)
class Check:
    name: str
    limit: str
    value: float | None
    ok: bool | None
    detail: str = ""


def _steps(data: dict, model: str, context: int | None = None) -> list[dict]:
    return [s for s in data.get("steps", []) if s["model"] == model
            and (context is None or s["context"] == context)]


def _ratio_check(name: str, limit: float, rows: list[dict], what: str) -> Check:
    if not rows:
        return Check(name, f"≤ {limit:.2f}×", None, None, f"no {what} row")
    r = rows[0]
    value = r["ms"] / r["floor_ms"]
    return Check(name, f"≤ {limit:.2f}×", value, value <= limit,
                 f"{r['ms']:.3f} ms, floor {r['floor_ms']:.3f} ms")


def checks(gv: dict, s: Subjects) -> list[Check]:
    """The issue-10 GPU items, read from a gpu_verify.json (`gv`)."""
    out = []
    for model, runtime, limit in ((s.compiled, "compile", 1.15), (s.large, s.static, 1.45)):
        rows = [r for r in _steps(gv, model, s.short) if r["runtime"] == runtime and r["n"] == 1]
        out.append(_ratio_check(f"{model} {runtime} n=1 ctx {s.short} / byte floor", limit,
                                rows, f"{runtime} n=1 context {s.short}"))
    long = _steps(gv, s.large, s.long)
    ratios = {}
    for runtime in {r["runtime"] for r in long}:
        t = {r["n"]: r["ms"] for r in long if r["runtime"] == runtime}
        if 1 in t and 64 in t:
            ratios[runtime] = (t[64], t[64] / t[1])
    name = f"{s.large} t(64)/t(1) at ctx {s.long}, faster runtime"
    if ratios:
        runtime = min(ratios, key=lambda k: ratios[k][0])
        value = ratios[runtime][1]
        out.append(Check(name, "≤ 1.20×", value, value <= 1.20, f"{runtime}"))
    else:
        out.append(Check(name, "≤ 1.20×", None, None, f"no n=1 and n=64 rows at {s.long}"))
    pre = [p for p in gv.get("prefill", []) if p["model"] == s.large and p["tokens"] == s.prefill]
    name = f"{s.large} prefill of {s.prefill} tokens"
    out.append(Check(name, "≤ 200 ms", pre[0]["ms"] if pre else None,
                     pre[0]["ms"] <= 200 if pre else None, "" if pre else "no prefill row"))
    level = [r for r in _steps(gv, s.draft) if r["n"] == 1]
    name = f"{s.draft} draft level (n=1, fastest runtime and context)"
    best = min(level, key=lambda r: r["ms"]) if level else None
    out.append(Check(name, "≤ 0.30 ms", best["ms"] if best else None,
                     best["ms"] <= 0.30 if best else None,
                     f"{best['runtime']}, ctx {best['context']}" if best else "no n=1 row"))
    ssm = [r for r in _steps(gv, s.ssm) if r["n"] <= 16]
    name = f"{s.ssm} verification n ≤ 16 / byte floor (worst n, faster runtime)"
    worst = {}
    for runtime in {r["runtime"] for r in ssm}:
        rows = [r for r in ssm if r["runtime"] == runtime]
        worst[runtime] = max(r["ms"] / r["floor_ms"] for r in rows)
    if worst:
        runtime = min(worst, key=worst.get)
        out.append(Check(name, "≤ 4.00×", worst[runtime], worst[runtime] <= 4.0, runtime))
    else:
        out.append(Check(name, "≤ 4.00×", None, None, "no rows"))
    commit = [c for c in gv.get("commit", []) if c["model"] == s.ssm and c["n"] <= 16]
    name = f"{s.ssm} commit / verification, n ≤ 16 (worst)"
    value = max((c["commit_ms"] / c["verify_ms"] for c in commit), default=None)
    out.append(Check(name, "≤ 10%", value, value <= 0.10 if value is not None else None,
                     "" if commit else "no commit rows"))
    e2e = [e for e in gv.get("e2e", []) if e["model"] == s.e2e_model and e["drafter"] == "draft"]
    name = f"{s.e2e_model} draft-model tree-8 speedup (best runtime)"
    best = max(e2e, key=lambda e: e["speedup"]) if e2e else None
    out.append(Check(name, "≥ 1.00×", best["speedup"] if best else None,
                     best["speedup"] >= 1.0 if best else None,
                     best["runtime"] if best else "no e2e row"))
    rows = gv.get("e2e", [])
    lossless = [e for e in rows if e.get("dtype") == "float32"]
    kept = sum(bool(e["lossless"]) for e in lossless)
    out.append(Check("end to end lossless in float32 (every run)", "all runs",
                     kept / len(lossless) if lossless else None,
                     kept == len(lossless) if lossless else None,
                     f"{kept} of {len(lossless)} runs"))
    return out


def _fmt(c: Check) -> str:
    if c.value is None:
        value = "—"
    elif c.limit.endswith("×"):
        value = f"{c.value:.2f}×"
    elif c.limit.endswith("%") or c.limit == "all runs":
        value = f"{c.value:.1%}"
    elif c.limit.endswith("ms"):
        value = f"{c.value:.3f} ms"
    else:
        value = f"{c.value:.3g}"
    verdict = {True: "PASS", False: "FAIL", None: "MISSING"}[c.ok]
    return f"{verdict:8} {c.name:62} {value:>12}  ({c.limit}) {c.detail}"


def _read(outdir: Path, name: str) -> dict | None:
    """OUTDIR's file `name` (JSON, or TOML by its suffix), or None where it is missing."""
    path = outdir / name
    if not path.exists():
        return None
    return tomllib.loads(path.read_text()) if path.suffix == ".toml" else json.loads(
        path.read_text())


def _env_line(e: dict) -> str:
    gpu, packages = e.get("gpu") or {}, e["packages"]
    return (f"{gpu.get('name', 'no GPU')}, driver {e.get('driver')}, torch {e.get('torch')} "
            f"(CUDA {e.get('cuda')}), python {e.get('python')}, typer "
            f"{packages['typer']['version']}, polars {packages['polars']['version']}")


def _validate_line(v: dict) -> str:
    rec = v.get("recommendation") or {}
    return (f"validate ({v.get('hardware')}, {v.get('device')} {v.get('runtime')}): step time "
            f"median error {v['step_time']['median_rel_err']:.1%}, tokens/s "
            f"{v['tokens_per_s']['median_rel_err']:.1%}; recommended {rec.get('config')}; "
            f"notes: {'; '.join(v.get('notes', []))}")


def load_line(drafter: str, v: dict) -> str:
    """A drafter's load figures: per metric median and max |relative error|, the ranking."""
    if "error" in v:
        return f"validate --load ({drafter}): FAILED {v['error']}"

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{x:.1%}"

    metrics = ", ".join(f"{m} {pct(v.get(m, {}).get('median_rel_err'))} (max "
                        f"{pct(v.get(m, {}).get('max_rel_err'))})"
                        for m in ("throughput", "mean_tpot", "p99_ttft", "p99_latency"))
    runtime = v.get("runtime") or {}
    return (f"validate --load ({drafter}, {v.get('hardware')}, {runtime.get('device')} "
            f"{runtime.get('runtime')}, {len(v.get('cells', []))} cells, policies "
            f"{','.join(v.get('policies', []))}, {v.get('wall_s', 0):.0f} s): median |error| "
            f"{metrics}; ranking agrees {v.get('ranking_agrees')}")


def _profile_line(p: dict) -> str:
    fits = ", ".join(f"{k} held-out median {f['heldout_median_rel_err']:.1%}"
                     for k, f in p.get("fit", {}).items())
    return f"profile {p.get('name')}: {fits}"


def summary(outdir: Path) -> str:
    """The checks as text (also written to OUTDIR/summary.txt)."""
    stages = _read(outdir, STAGES_FILE) or {"stages": {}}
    device = stages.get("device") or os.environ.get("GPU_RUN_DEVICE", "cuda")
    subjects = SUBJECTS["cuda" if device == "cuda" else "cpu"]
    env_doc, gv = _read(outdir, "env.json"), _read(outdir, "gpu_verify.json")
    lines = [f"GPU runbook summary ({device}), {outdir}"]
    lines += [_env_line(env_doc)] if env_doc else []
    lines.append("stages: " + ", ".join(f"{k} {v['status']}"
                                        + (f" ({v['wall_s']:.0f} s)" if "wall_s" in v else "")
                                        for k, v in stages["stages"].items() if k != "summary"))
    if device != "cuda":
        lines.append(f"CPU mode: the checks read the CPU stand-ins ({subjects.large} for the 8B, "
                     f"{subjects.draft} for llama-68m, {subjects.ssm} for mamba2-2.7b) against "
                     "the GPU limits, to exercise them; only a cuda run answers the items.")
    if gv:
        lines.append(f"copy rate {gv['copy_GBps']:.1f} GB/s; compile mode "
                     f"{gv.get('compile_mode')}")
        lines += [_fmt(c) for c in checks(gv, subjects)]
    else:
        lines.append("MISSING  gpu_verify.json (no step, prefill or e2e rows)")
    for name, line in (("validate.json", _validate_line), ("profile.toml", _profile_line)):
        doc = _read(outdir, name)
        lines += [line(doc)] if doc else []
    lines += [load_line(k, v) for k, v in (_read(outdir, "load.json") or {}).items()]
    text = "\n".join(lines) + "\n"
    tmp = outdir / ".summary.txt.tmp"
    tmp.write_text(text)
    tmp.replace(outdir / "summary.txt")
    return text
