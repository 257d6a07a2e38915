"""Helpers of the GPU runbook `benchmarks/gpu_run.sh` (see there): what the shell cannot say
well. Imports nothing heavy at the top, so `record` and `done` answer in a blink.

  python benchmarks/gpu_run.py env --out FILE [--cli FILE] [--site DIR] [--imports A.py,B.py]
  python benchmarks/gpu_run.py profile --out FILE        (CPU mode: a small profile-hw grid)
  python benchmarks/gpu_run.py validate --hw HW --out FILE   (CPU mode: a small validate)
  python benchmarks/gpu_run.py load --hw HW --device D --out FILE   (validate --load per drafter)
  python benchmarks/gpu_run.py record OUTDIR STAGE STATUS [--device D] [--rc N] [--wall S]
  python benchmarks/gpu_run.py done OUTDIR STAGE         (exit 0 when stages.json says done)
  python benchmarks/gpu_run.py summary OUTDIR            (the issue-10 GPU checks:
                                                          benchmarks/gpu_summary.py)
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
from collections.abc import Callable, Sequence
from pathlib import Path

from gpu_summary import STAGES_FILE, load_line, summary  # beside this file, on sys.path

PACKAGES = ("torch", "triton", "numpy", "scipy", "typer", "rich", "polars", "simpy", "pyarrow",
            "safetensors", "transformers", "tokenizers", "pandas")
"""Versions env.json records (each: version and where it was imported from)."""
ABSENT = ("pulp", "plotly", "ray")
"""Packages the GPU image lacks and the runbook does not carry: the GPU path must not need them."""


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
    return [sys.executable, "-m", "specscope", "validate", "--load", "--hw", hw, "--target",
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
            print(load_line(drafter, doc[drafter]))
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
