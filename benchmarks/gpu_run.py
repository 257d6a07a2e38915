"""Helpers of the GPU runbook `benchmarks/gpu_run.sh` (see there): what the shell cannot say
well. Imports nothing heavy at the top, so `record` and `done` answer in a blink.

  python benchmarks/gpu_run.py env --out FILE [--cli FILE] [--site DIR] [--imports A.py,B.py]
  python benchmarks/gpu_run.py profile --out FILE        (CPU mode: a small profile-hw grid)
  python benchmarks/gpu_run.py validate --hw HW --out FILE   (CPU mode: a small validate)
  python benchmarks/gpu_run.py load --hw HW --device D --out FILE   (validate --load per drafter)
  python benchmarks/gpu_run.py record OUTDIR STAGE STATUS [--device D] [--rc N] [--wall S]
  python benchmarks/gpu_run.py done OUTDIR STAGE         (exit 0 when stages.json says done)
  python benchmarks/gpu_run.py summary OUTDIR            (the issue-10 GPU checks)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("torch", "triton", "numpy", "scipy", "typer", "rich", "polars", "simpy", "pyarrow",
            "safetensors", "transformers", "tokenizers", "pandas")
"""Versions env.json records (each: version and where it was imported from)."""
ABSENT = ("pulp", "plotly", "ray")
"""Packages the GPU image lacks and the runbook does not carry: the GPU path must not need them."""
STAGES_FILE = "stages.json"


# ---- env ---------------------------------------------------------------------------------------


def env(out: Path, cli: Path | None, site: str | None, scripts: Sequence[str] = ()) -> int:
    """Versions of the interpreter, torch, CUDA, the driver and the packages, nvidia-smi's
    report, what the carried site holds, the CLI's `generate` run, and whether each of
    `scripts` (benchmark files) imports; written to `out`. Non-zero when one does not."""
    import importlib
    import importlib.metadata
    import importlib.util

    import torch

    packages = {}
    for name in PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            packages[name] = {"version": None, "error": _first_line(exc)}
            continue
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = getattr(module, "__version__", "?")
        packages[name] = {"version": version, "from": str(Path(module.__file__).parent)}
    absent = {}
    for name in ABSENT:
        try:
            importlib.import_module(name)
            absent[name] = "importable"
        except ImportError as exc:
            absent[name] = f"not importable ({_first_line(exc)})"
    cuda = torch.cuda.is_available()
    gpu = {}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        gpu = {"name": props.name, "capability": f"{props.major}.{props.minor}",
               "memory_gib": round(props.total_memory / 2**30, 1),
               "count": torch.cuda.device_count()}
    smi = shutil.which("nvidia-smi")
    doc = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": os.environ.get("GPU_RUN_DEVICE", "cuda" if cuda else "cpu"),
        "python": sys.version.split()[0], "executable": sys.executable,
        "platform": platform.platform(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "cuda_available": cuda, "gpu": gpu,
        "driver": _run([smi, "--query-gpu=driver_version", "--format=csv,noheader"]) if smi
        else None,
        "nvidia_smi": _run([smi]) if smi else "nvidia-smi: not found",
        "packages": packages, "absent": absent,
        "carried": sorted(p.name for p in Path(site).iterdir() if p.suffix == ".dist-info")
        if site and Path(site).is_dir() else [],
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "imports": {},
    }
    for i, script in enumerate(scripts):  # module-level code only: what a run needs to start
        spec = importlib.util.spec_from_file_location(f"_gpu_run_import_{i}", script)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
            doc["imports"][script] = "ok"
        except Exception as exc:  # recorded: what the image would lack
            doc["imports"][script] = f"{type(exc).__name__}: {_first_line(exc)}"
    if cli is not None and cli.exists():
        try:
            run = json.loads(cli.read_text())
            doc["cli_generate"] = {k: run.get(k) for k in (
                "target", "drafter", "method", "speedup", "lossless", "mismatches",
                "tokens_per_s", "ar_tokens_per_s", "setup_s", "runtime", "device", "dtype",
                "threads") if k in run}
        except json.JSONDecodeError as exc:
            doc["cli_generate"] = {"error": f"not JSON: {exc}"}
    _write_json(out, doc)
    print(f"python {doc['python']}, torch {doc['torch']} (CUDA {doc['cuda']}), "
          f"typer {packages['typer']['version']}, polars {packages['polars']['version']}"
          + (f", {gpu['name']}, driver {doc['driver']}" if gpu else ", no GPU"))
    failed = {k: v for k, v in doc["imports"].items() if v != "ok"}
    for script, error in failed.items():
        print(f"{script} does not import: {error}")
    return 1 if failed else 0


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=60)
    return (done.stdout or done.stderr).strip()


def _write_json(path: Path, doc: object) -> None:
    from specscope.atomic import write_text_atomic

    write_text_atomic(path, json.dumps(doc, indent=1, default=str) + "\n")


# ---- CPU-mode profile and validate -------------------------------------------------------------


def cpu_profile(out: Path) -> None:
    """`profile-hw --device cpu` on a small grid (one tiny model, eager): the same measuring,
    fitting and writing code as the GPU's `profile-hw --device cuda --quick`."""
    from specscope.profiling.calibrate import Grid, profile_hw

    grid = Grid(("tiny-code-draft",), (1, 2, 4, 8), (32, 128), (1, 2), (64,), (32,),
                "tiny-code-draft", draft_levels=2, repeats=3, loop_runs=1, wake_gaps=(0.05,),
                serve_batches=(1,))
    result = profile_hw("gpu-run-cpu", "cpu", ["eager"], quick=True, threads=1, output=out,
                        grid=grid, command="benchmarks/gpu_run.py profile (small CPU grid)")
    for fit in result.fits.values():
        print(f"{fit.runtime}: held-out error median {fit.heldout_median_rel_err:.1%}")
    print(f"wrote {result.path} in {result.wall_s:.0f} s")


def cpu_validate(hw: str, out: Path) -> None:
    """`validate --device cpu --quick` with 4 + 4 prompts of 16 new tokens: the same predicting,
    running and reporting code as the GPU's validate (ETS skipped with a note without PuLP)."""
    import torch

    from specscope.validate.compare import Sizes, ValidateRequest, run_validate
    from specscope.validate.grid import QUICK
    from specscope.validate.report import summary_table

    torch.set_num_threads(1)
    result = run_validate(ValidateRequest(hw=hw, model="tiny-code", device="cpu", threads=1,
                                          configs=QUICK, sizes=Sizes(4, 16, 1, recheck=1)))
    doc = result.to_dict()
    _write_json(out, doc)
    from rich.console import Console

    Console(width=120).print(summary_table(doc))
    for note in doc["notes"]:
        print(f"note: {note}")


# ---- validate --load ---------------------------------------------------------------------------


LOAD_TIMEOUT_S = 220
"""Seconds one drafter's run may take on cuda: the stage is cut at 480, so a hung first
drafter still leaves the second its turn."""


def load_argv(hw: str, drafter: str) -> list[str]:
    """The cuda command of one drafter: `validate --load --quick` on tiny-code, graph runtime."""
    return [sys.executable, "-m", "specscope", "validate", "--load", "--hw", hw, "--model",
            "tiny-code", "--device", "cuda", "--runtime", "graph", "--quick", "--drafter",
            drafter, "--json"]


def _load_one(hw: str, device: str, drafter: str) -> dict:
    """One drafter's `validate --load` result: on cuda the CLI's (a subprocess, so a failure is
    its one line); on a CPU the same code called directly on the smallest sizes that still
    run the probe, two rates and every default policy (a few seconds)."""
    if device == "cuda":
        done = subprocess.run(load_argv(hw, drafter), capture_output=True, text=True,
                              check=False, timeout=LOAD_TIMEOUT_S)
        sys.stderr.write(done.stderr[-4000:])  # into run.log: a traceback's end, if any
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
            raise RuntimeError(f"exit {done.returncode}: {lines[-1]}")
        return json.loads(done.stdout)
    import torch

    from specscope.validate.load import LoadRequest, LoadSizes, default_policies, run_load_validate

    torch.set_num_threads(1)
    return run_load_validate(LoadRequest(
        hw=hw, model="tiny-code", device="cpu", drafter=drafter,
        policies=default_policies(drafter), threads=1,
        sizes=LoadSizes(requests=4, output_len=8, fractions=(0.5, 2.0), max_batch=2)))


def load(hw: str, device: str, out: Path) -> int:
    """`validate --load` on tiny-code with each drafter it runs (`names.LOAD_DRAFTERS`) into
    `out`: one object per drafter, written after each, so a cut run keeps the first; non-zero
    when one failed."""
    from specscope.names import LOAD_DRAFTERS

    doc = json.loads(out.read_text()) if out.exists() else {}
    failed = 0
    for drafter in LOAD_DRAFTERS:
        try:
            doc[drafter] = _load_one(hw, device, drafter)
            print(_load_line(drafter, doc[drafter]))
        except Exception as exc:  # recorded: the other drafter still runs
            doc[drafter] = {"error": f"{type(exc).__name__}: {_first_line(exc)}"}
            print(f"validate --load --drafter {drafter} failed: {doc[drafter]['error']}")
            failed += 1
        _write_json(out, doc)
    return 1 if failed else 0


# ---- stages.json -------------------------------------------------------------------------------


def record(outdir: Path, stage: str, status: str, device: str, rc: int | None,
           wall: float | None) -> None:
    """Set `stage`'s status (and exit code and seconds) in OUTDIR/stages.json."""
    path = outdir / STAGES_FILE
    doc = json.loads(path.read_text()) if path.exists() else {"stages": {}}
    doc["device"] = device
    entry = doc["stages"].get(stage, {})
    entry.update(status=status, at=datetime.datetime.now(datetime.UTC).isoformat(
        timespec="seconds"))
    if rc is not None:
        entry["rc"] = rc
    if wall is not None:
        entry["wall_s"] = wall
    doc["stages"][stage] = entry
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def is_done(outdir: Path, stage: str) -> bool:
    path = outdir / STAGES_FILE
    if not path.exists():
        return False
    return json.loads(path.read_text())["stages"].get(stage, {}).get("status") == "done"


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


def _load_line(drafter: str, v: dict) -> str:
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
    lines += [_load_line(k, v) for k, v in (_read(outdir, "load.json") or {}).items()]
    text = "\n".join(lines) + "\n"
    tmp = outdir / ".summary.txt.tmp"
    tmp.write_text(text)
    tmp.replace(outdir / "summary.txt")
    return text


# ---- main --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    options = {  # subcommand: its arguments, (name, type, default); a "--" name is optional
        "env": [("--out", Path, ...), ("--cli", Path, None), ("--site", str, None),
                ("--imports", str, "")],
        "profile": [("--out", Path, ...)],
        "validate": [("--hw", str, ...), ("--out", Path, ...)],
        "load": [("--hw", str, ...), ("--device", str, "cuda"), ("--out", Path, ...)],
        "record": [("outdir", Path, ...), ("stage", str, ...), ("status", str, ...),
                   ("--device", str, "cuda"), ("--rc", int, None), ("--wall", float, None)],
        "done": [("outdir", Path, ...), ("stage", str, ...)],
        "summary": [("outdir", Path, ...)],
    }
    for what, arguments in options.items():
        p = sub.add_parser(what)
        for name, kind, default in arguments:
            if not name.startswith("--"):
                p.add_argument(name, type=kind)
            elif default is ...:
                p.add_argument(name, type=kind, required=True)
            else:
                p.add_argument(name, type=kind, default=default)
    args = parser.parse_args(argv)
    actions: dict[str, Callable[[], object]] = {
        "env": lambda: env(args.out, args.cli, args.site,
                           [s for s in args.imports.split(",") if s]),
        "profile": lambda: cpu_profile(args.out),
        "validate": lambda: cpu_validate(args.hw, args.out),
        "load": lambda: load(args.hw, args.device, args.out),
        "record": lambda: record(args.outdir, args.stage, args.status, args.device, args.rc,
                                 args.wall),
        "summary": lambda: print(summary(args.outdir), end=""),
    }
    if args.what == "done":
        return 0 if is_done(args.outdir, args.stage) else 1
    code = actions[args.what]()
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
