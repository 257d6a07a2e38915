"""With the executor extra's modules hidden (torch, transformers, safetensors, tokenizers: what a
core `pip install .` lacks), every analytic command runs, every command's help shows, and every
command that needs the extra says so in one stderr line with exit status 2.

One subprocess hides the modules behind a meta path finder before specscope is imported, then
runs each command line in turn through the console entry point and reports (exit status,
stdout, stderr) as JSON. The commands that need the executor run as their help's example shows
them, so they follow renamed options; the analytic ones run cheap real cases in a fresh folder
whose `examples/` links to the repository's (`accuracy` runs from the repository root).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specscope.cli import COMMANDS, trace_app, zoo_app
from specscope.errors import EXECUTOR_MODULES

ROOT = Path(__file__).resolve().parent.parent
NEEDS_EXECUTOR = ("generate", "collect", "adapt", "profile-hw", "validate", "serve-bench",
                  "zoo train", "demo")
SWEEP = """seed = 0
mode = "analytic"

[acceptance]
"llama-68m" = [0.6, 0.2, 0.1]

[[grid]]
name = "tiny"
hardware = ["h100"]
target = ["llama-3.1-8b"]
drafter = ["llama-68m"]
method = ["sequoia", "chain"]
budget = [4, 8]
batch = [1]
"""
ANALYTIC_RUNS: tuple[tuple[str, str], ...] = (
    ("cost", "cost --hw h100 --target llama-3.1-8b --batch 8 --new-tokens 16 --runtime graph"),
    ("optimize-tree", "optimize-tree --hw h100 --target llama-3.1-8b --drafter llama-3.2-1b "
                      "--acceptance 0.6,0.2 --budget 8 --algo chain -o out/tree.json"),
    ("export", "export out/tree.json --to vllm --algo chain"),
    ("reproduce", "reproduce examples/papers/medusa.toml -o out/reproduce.json"),
    ("trace synth", "trace synth --requests 8 --length 64 --seed 1 -o out/synthetic.parquet"),
    ("trace import", "trace import metrics.txt --from vllm-metrics -o out/acceptance.json"),
    ("simulate", "simulate --hw h100 --target llama-3.1-8b --drafter llama-68m "
                 "--acceptance out/acceptance.json --policy smartspec --rate 4 --requests 40 "
                 "--seed 0"),
    ("sweep", "sweep sweep.toml -o out/sweep.parquet"),
    ("dashboard", "dashboard out -o report.html"),
    ("accuracy", "accuracy --check"),
)
"""Each analytic command and a cheap real run of it, in order (later runs read earlier outputs)."""

DRIVER = textwrap.dedent("""
    import contextlib, io, json, os, sys

    HIDDEN = {hidden!r}

    class Hide:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.partition(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Hide)
    from specscope.cli import main

    results = []
    for cwd, argv in json.loads(sys.argv[1]):
        os.chdir(cwd)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
        results.append((code, out.getvalue(), err.getvalue()))
    hidden = [m for m in HIDDEN if m in sys.modules]
    print(json.dumps({{"results": results, "imported": hidden}}))
""").format(hidden=EXECUTOR_MODULES)


def run_hidden(runs: list[tuple[Path, list[str]]]) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each `specscope ARGV` run in its folder, in one process
    whose executor modules are hidden."""
    done = subprocess.run([sys.executable, "-c", DRIVER,
                           json.dumps([(str(cwd), argv) for cwd, argv in runs])],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["imported"] == [], f"imported while hidden: {report['imported']}"
    return [tuple(result) for result in report["results"]]


NAMES = [f"trace {name}" if group is trace_app else f"zoo {name}" if group is zoo_app else name
         for group, name, _, _ in COMMANDS]
"""Every command's name as typed after `specscope`."""
EXAMPLES = {name: shlex.split(" ".join(line.rstrip("\\").strip() for line in lines))[1:]
            for name, (_, _, _, lines) in zip(NAMES, COMMANDS, strict=True)}


def test_every_command_is_either_analytic_or_needs_the_executor() -> None:
    assert sorted(NAMES) == sorted([*NEEDS_EXECUTOR, *(name for name, _ in ANALYTIC_RUNS)])


def test_the_driver_hides_the_executor_modules() -> None:
    probe = textwrap.dedent(DRIVER.partition("from specscope.cli import main")[0]) + (
        "import importlib\n"
        "for name in HIDDEN:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError as exc:\n"
        "        print(exc.name)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == list(EXECUTOR_MODULES)


@pytest.mark.slow
def test_without_the_executor_analytic_commands_run_and_the_others_name_the_extra(
        tmp_path: Path) -> None:
    from test_interop_import import vllm_metrics

    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "metrics.txt").write_text(vllm_metrics(), encoding="utf-8")
    (tmp_path / "sweep.toml").write_text(SWEEP, encoding="utf-8")
    helps = [(tmp_path, [*name.split(), "--help"]) for name in NAMES]
    analytic = [(ROOT if name == "accuracy" else tmp_path, shlex.split(line))
                for name, line in ANALYTIC_RUNS]
    executor = [(tmp_path / "executor", EXAMPLES[name]) for name in NEEDS_EXECUTOR]
    (tmp_path / "executor").mkdir()
    results = run_hidden([*helps, *analytic, *executor])

    for name, (code, out, err) in zip(NAMES, results, strict=False):
        assert (code, err) == (0, ""), f"{name} --help without the executor: {err}"
        assert out.startswith(f"Usage: specscope {name}"), out
    results = results[len(helps):]
    for (_, line), (code, _, err) in zip(ANALYTIC_RUNS, results, strict=False):
        assert code == 0, f"specscope {line} without the executor exited {code}: {err}"
    for name, (code, out, err) in zip(NEEDS_EXECUTOR, results[len(analytic):], strict=True):
        assert (code, out) == (2, ""), f"specscope {name}: {code} {out}{err}"
        assert err == (f"specscope: error: {name} needs the executor extra: pip install "
                       "'specscope[executor]' (no module named 'torch')\n"), err
    assert not list((tmp_path / "executor").iterdir()), "a refused command wrote files"
