"""The GPU path runs on the GPU image: `benchmarks/gpu_run.sh --device cpu all` in a subprocess
that can import only the GPU image's packages (`benchmarks/gpu_image.txt`), the checkout and the
carried wheels (`.gpu-carry/`, made by `make gpu-carry`), with the oldest typer `pyproject.toml`
allows; and the pieces the runbook relies on."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch

from specscope.errors import InputError
from specscope.executor.runtime import Runtime, StepRunner
from specscope.executor.targets import CachedModel, SSMModel
from specscope.models.torch import Mamba2, Transformer
from specscope.models.zoo import zoo_specs
from specscope.tree import Tree

ROOT = Path(__file__).resolve().parents[1]
RUNBOOK = ROOT / "benchmarks" / "gpu_run.sh"
CARRY = ROOT / ".gpu-carry"
STAGES = ("env", "steps-8b", "compile", "steps-ssm", "e2e", "profile", "load", "validate",
          "steps-small", "summary")
NEVER_RUN = ("steps-8b", "compile", "steps-ssm", "e2e")
"""The issue-10 stages no GPU loan has run: a loan's first call runs them (issue 43)."""
FILES = ("env.json", "gpu_verify.json", "profile.toml", "validate.json", "load.json",
         "stages.json", "run.log", "summary.txt")
BLOCKER = '''"""Hides the packages named in $SPECSCOPE_BLOCKED (top-level modules, comma list) as
if they were not installed: `import` fails and `importlib.util.find_spec` finds nothing."""
import os
import sys
from importlib.machinery import PathFinder

_BLOCKED = frozenset(filter(None, os.environ.get("SPECSCOPE_BLOCKED", "").split(",")))


class _Hidden(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is None and name in _BLOCKED:
            return None
        return PathFinder.find_spec(name, path, target)


sys.meta_path[:] = [_Hidden if f is PathFinder else f for f in sys.meta_path]
'''


def norm(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def oldest_typer() -> str:
    """The lowest typer `pyproject.toml` allows ("typer>=X")."""
    found = re.search(r'"typer>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert found, "pyproject.toml names no typer>=X"
    return found.group(1)


def same_version(a: str, b: str) -> bool:
    """Equal release numbers, zeros padded (0.24 == 0.24.0)."""
    def parts(v: str) -> list[int]:
        out = [int(x) for x in re.findall(r"\d+", v)[:3]]
        return out + [0] * (3 - len(out))
    return parts(a) == parts(b)


def blocked_modules(carried: set[str]) -> list[str]:
    """Top-level modules installed here whose distributions are neither on the GPU image (nor
    what its packages need here: this machine's versions of them may need other packages than
    the image's) nor carried; the checkout itself runs from PYTHONPATH. A carried package's
    needs are its wheel's, not its installed namesake's (typer 0.29 here needs pydantic). What
    an allowed package vendors (setuptools/_vendor, on sys.path once setuptools is imported:
    inductor's C++ build imports its jaraco) comes with it."""
    image = {norm(line) for line in (ROOT / "benchmarks" / "gpu_image.txt").read_text()
             .splitlines() if line.strip() and not line.startswith("#")}
    installed = {norm(d.metadata["Name"]): d for d in importlib.metadata.distributions()}
    vendored: dict[str, list[str]] = {}  # a package -> the distributions in its _vendor folder
    for other, d in installed.items():
        folder = Path(str(d.locate_file("")))
        if folder.name == "_vendor":
            vendored.setdefault(norm(folder.parent.name), []).append(other)
    allowed, todo = set(carried), [name for name in installed if name in image]
    while todo:
        name = todo.pop()
        if name in allowed or name not in installed:
            continue
        allowed.add(name)
        todo += [norm(re.match(r"[A-Za-z0-9._-]+", req).group(0))
                 for req in installed[name].requires or [] if "extra ==" not in req]
        todo += vendored.get(name, [])
    return sorted(module for module, dists in importlib.metadata.packages_distributions().items()
                  if module != "specscope" and not any(norm(d) in allowed for d in dists))


def typer_wheel(folder: Path) -> Path:
    """The oldest supported typer's wheel: from `make gpu-carry`, else downloaded now."""
    version = oldest_typer()
    made = sorted((CARRY / "oldest").glob(f"typer-{version}*.whl"))
    if made:
        return made[0]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                           "-d", str(folder), f"typer=={version}"], capture_output=True,
                          text=True, check=False, timeout=300)
    wheels = sorted(folder.glob("typer-*.whl"))
    if done.returncode != 0 or not wheels:
        pytest.skip(f"typer=={version} is neither in .gpu-carry/oldest (make gpu-carry) nor "
                    f"downloadable here: {done.stderr.strip()[-300:]}")
    return wheels[0]


@pytest.fixture
def runbook(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """`gpu_run.sh --device cpu all` once, blocked and with the oldest typer."""
    tmp = tmp_path_factory.mktemp("gpu_run")
    carry, hooks, out = tmp / "carry", tmp / "hooks", tmp / "out"
    carry.mkdir()
    hooks.mkdir()
    carried = {"typer"}
    for wheel in sorted(CARRY.glob("*.whl")):
        if not wheel.name.startswith("typer-"):  # the CLI runs under the oldest typer here
            shutil.copy(wheel, carry)
            carried.add(norm(wheel.name.split("-")[0]))
    shutil.copy(typer_wheel(tmp), carry)
    if "polars" not in carried:  # no carried wheel: the installed polars stands for it
        carried |= {"polars", "polars-runtime-32"}
    blocked = blocked_modules(carried)
    (hooks / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    env.update(PYTHON=sys.executable, GPU_CARRY=str(carry), GPU_SITE=str(tmp / "site"),
               GPU_WORK=str(tmp / "work"), PYTHONPATH=str(hooks),
               SPECSCOPE_BLOCKED=",".join(blocked))
    start = time.perf_counter()
    proc = subprocess.run(["bash", str(RUNBOOK), "--device", "cpu", "all", str(out)], env=env,
                          capture_output=True, text=True, check=False, timeout=900)
    return SimpleNamespace(proc=proc, out=out, env=env, blocked=blocked, carried=carried,
                           wall=time.perf_counter() - start,
                           polars=sorted(carry.glob("polars-*.whl")))


@pytest.mark.slow
@pytest.mark.long
def test_cpu_mode_runs_every_stage_with_only_the_image_and_the_carried_packages(runbook):
    proc, out = runbook.proc, runbook.out
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    print(f"gpu_run.sh --device cpu all: {runbook.wall:.0f} s")
    assert {"pulp", "plotly", "ray", "pydantic"} <= set(runbook.blocked)
    assert "simpy" in runbook.carried and "simpy" not in runbook.blocked  # validate --load's
    assert ("polars" in runbook.blocked) is False  # carried (or, without a wheel, stood in for)
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    stages = json.loads((out / "stages.json").read_text())
    assert stages["device"] == "cpu"
    assert {k: v["status"] for k, v in stages["stages"].items()} == dict.fromkeys(STAGES, "done")

    env = json.loads((out / "env.json").read_text())
    typer = env["packages"]["typer"]
    assert same_version(typer["version"], oldest_typer()), typer
    assert typer["from"].startswith(runbook.env["GPU_SITE"])
    if runbook.polars:  # the carried wheel, not the installed polars
        version = runbook.polars[0].name.split("-")[1]
        assert env["packages"]["polars"]["version"] == version
        assert env["packages"]["polars"]["from"].startswith(runbook.env["GPU_SITE"])
    assert all(v.startswith("not importable") for k, v in env["absent"].items()), env["absent"]
    assert env["cli_generate"]["lossless"] is True
    assert set(env["imports"].values()) == {"ok"}, env["imports"]

    gv = json.loads((out / "gpu_verify.json").read_text())
    assert {(s["model"], s["runtime"]) for s in gv["steps"]} == {
        ("llama-3.2-1b/8", "eager"), ("tiny-code-draft", "compile"), ("tiny-code-draft", "eager"),
        ("tiny-code", "eager"), ("tiny-ssm", "eager"), ("tiny-hybrid", "eager")}
    assert all(s["ms"] > 0 and s["floor_ms"] > 0 for s in gv["steps"])
    assert [p["model"] for p in gv["prefill"]] == ["llama-3.2-1b/8"]
    assert {c["model"] for c in gv["commit"]} == {"tiny-ssm", "tiny-hybrid"}
    assert {(e["model"], e["drafter"]) for e in gv["e2e"]} == {("tiny-code", "draft"),
                                                              ("tiny-code", "ngram")}
    assert all(e["lossless"] for e in gv["e2e"])
    assert next(g for g in gv["groups"] if g["runtime"] == "compile")["setup_s"] > 0

    profile = tomllib.loads((out / "profile.toml").read_text())
    assert profile["fit"]["eager"]["points"] > 0
    validate = json.loads((out / "validate.json").read_text())
    assert validate["configs"] and validate["device"] == "cpu"
    assert not any(c["config"].startswith("ets/") for c in validate["configs"])
    assert any(note.startswith("ETS configurations skipped") for note in validate["notes"])
    load = json.loads((out / "load.json").read_text())
    assert list(load) == ["ngram", "draft"]
    for drafter, policies in (("ngram", 3), ("draft", 4)):  # dyspec with the draft model
        run = load[drafter]
        assert run["runtime"]["device"] == "cpu" and run["saturation_rate"] > 0, run
        assert len(run["cells"]) == policies * 2 and isinstance(run["ranking_agrees"], bool)
        assert run["throughput"]["count"] == policies * 2
    summary = (out / "summary.txt").read_text()
    assert summary.count("PASS") + summary.count("FAIL") == 9, summary
    assert "MISSING" not in summary, summary
    assert "validate --load (ngram, " in summary and "validate --load (draft, " in summary
    assert "stage summary: done" in (out / "run.log").read_text()
    used_outdir_needs_merge_and_merge_runs_only_what_is_asked(runbook)


def used_outdir_needs_merge_and_merge_runs_only_what_is_asked(runbook: SimpleNamespace) -> None:
    """(In the test above: one runbook run, whichever worker runs it.)"""
    run = ["bash", str(RUNBOOK), "--device", "cpu"]
    refused = subprocess.run([*run, "summary", str(runbook.out)], env=runbook.env,
                             capture_output=True, text=True, check=False, timeout=120)
    assert refused.returncode == 2 and "--merge" in refused.stderr
    again = subprocess.run([*run, "--merge", "all", str(runbook.out)], env=runbook.env,
                           capture_output=True, text=True, check=False, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:]
    assert again.stdout.count("already done (stages.json)") == len(STAGES) - 1
    fresh = runbook.out.parent / "again"
    copied = subprocess.run([*run, "--from", str(runbook.out), "summary", str(fresh)],
                            env=runbook.env, capture_output=True, text=True, check=False,
                            timeout=120)
    assert copied.returncode == 0, copied.stdout[-3000:]
    assert (fresh / "summary.txt").read_text().count("PASS") + (
        fresh / "summary.txt").read_text().count("FAIL") == 9


def test_bad_runbook_arguments_exit_2():
    for argv in (["--device", "tpu", "all", "x"], ["nosuchstage", "x"], ["all"],
                 ["--compile-mode", "reduce-overhead", "all", "x"]):
        done = subprocess.run(["bash", str(RUNBOOK), *argv], capture_output=True, text=True,
                              check=False, timeout=60)
        assert done.returncode == 2, (argv, done.stderr)


# ---- what the runbook relies on -----------------------------------------------------------------


def test_verify_call_runs_the_verification_with_inputs_built_once():
    spec = zoo_specs()["tiny-code-draft"]
    tree, tokens = Tree.from_parents([-1, 0, 0, 1, 3]), torch.tensor([3, 5, 7, 9, 11])
    for padded in (False, True):  # the exact eager pass; the padded static step (a bucket of 8)
        model = CachedModel(Transformer.random(spec), "m", spec.vocab_size, padded=padded,
                            max_len=64)
        model.prefill(torch.arange(12) % spec.vocab_size, 40)
        expected = model.verify(tokens, tree)
        got = model.verify_call(tokens, tree)()
        got = got[0, :tree.size] if padded else got
        torch.testing.assert_close(got, expected)
    ssm_spec = zoo_specs()["tiny-ssm"]
    for padded in (False, True):
        model = SSMModel(Mamba2.random(ssm_spec), "s", padded=padded)
        model.prefill(torch.arange(9) % ssm_spec.vocab_size, 40)
        expected = model.verify(tokens, tree)
        got = model.verify_call(tokens, tree)()
        torch.testing.assert_close(got[0][:tree.size] if padded else got[0], expected)


def test_compile_modes_are_checked_and_reach_the_step_runner():
    assert Runtime.resolve("cpu").compile_mode is None
    with pytest.raises(InputError, match="--compile-mode"):
        Runtime(torch.device("cpu"), torch.float32, "compile", "reduce-overhead")
    runner = StepRunner(lambda x: x + 1, Runtime(torch.device("cpu"), torch.float32, "eager",
                                                 "default"))
    call = runner.bind(torch.ones(3))
    assert torch.equal(call(), torch.full((3,), 2.0))


def test_cli_error_types_come_from_the_installed_typer():
    import typer

    from specscope.cli.compat import USAGE_ERRORS, NoArgsIsHelpError

    assert issubclass(NoArgsIsHelpError, Exception)
    assert getattr(typer, "TyperException", None) in (None, *USAGE_ERRORS)


@pytest.mark.slow
def test_loop_costs_run_with_a_draft_of_another_vocabulary():
    """profile-hw on cuda times llama-68m (32,000 tokens) drafting for tiny-code: the draft takes
    the target's vocabulary, or its tokens would index past the target's embedding."""
    import dataclasses

    from specscope.profiling.measure import measure_loop, prompt_tokens

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        draft = dataclasses.replace(zoo_specs()["tiny-code-draft"], vocab_size=32000)
        costs = measure_loop(draft, Runtime.cpu(), prompt_tokens(), 2, runs=1)
    finally:
        torch.set_num_threads(threads)
    assert costs.level >= 0 and set(costs.drafter) == {"ngram", "suffix", "recycle",
                                                                   "goose"}


def gpu_run_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """`benchmarks/gpu_run.py` imported (in sys.modules while the test runs: its dataclasses
    look their module up)."""
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # its gpu_summary beside it
    spec = importlib.util.spec_from_file_location("gpu_run_helper",
                                                  ROOT / "benchmarks" / "gpu_run.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_load_stage_keeps_each_drafters_result_and_records_a_failure(tmp_path, monkeypatch):
    """On cuda each drafter's `validate --load` runs as a subprocess: a failing one is recorded
    as its last stderr line, the other's result kept, and the stage exits non-zero."""
    helper = gpu_run_module(monkeypatch)
    result = {"hardware": "h100", "runtime": {"device": "cuda:0", "runtime": "graph"},
              "policies": ["none", "static"], "cells": [{}, {}], "wall_s": 3.0,
              "ranking_agrees": True,
              **{m: {"median_rel_err": 0.05, "max_rel_err": 0.1}
                 for m in ("throughput", "mean_tpot", "p99_ttft", "p99_latency")}}
    commands = {"ngram": [sys.executable, "-c", f"print({json.dumps(json.dumps(result))})"],
                "draft": [sys.executable, "-c", "import sys; sys.exit('specscope: error: no GPU')"]}
    monkeypatch.setattr(helper, "load_argv", lambda hw, drafter: commands[drafter])
    out = tmp_path / "load.json"
    assert helper.main(["load", "--hw", "h100", "--device", "cuda", "--out", str(out)]) == 1
    doc = json.loads(out.read_text())
    assert doc["ngram"] == result
    assert doc["draft"] == {"error": "RuntimeError: exit 1: specscope: error: no GPU"}
    lines = [helper.load_line(k, v) for k, v in doc.items()]
    assert "throughput 5.0% (max 10.0%)" in lines[0] and "ranking agrees True" in lines[0]
    assert lines[1] == "validate --load (draft): FAILED " + doc["draft"]["error"]


def test_the_cuda_stages_commands_parse_and_name_known_models(tmp_path, monkeypatch):
    """`--dry-run` of the cuda plan: every gpu_verify command parses (on this CPU, graph read as
    eager) and names catalogue or zoo models and known drafters; every CLI command parses, the
    `validate --load` ones the `load` stage runs per drafter (`gpu_run.load_argv`) included."""
    import importlib.util
    import shlex

    import typer

    from specscope.cli import app
    from specscope.names import DRAFTERS, LOAD_DRAFTERS

    done = subprocess.run(["bash", str(RUNBOOK), "--device", "cuda", "--dry-run", "all",
                           str(tmp_path / "out")], capture_output=True, text=True, check=True,
                          timeout=60)
    assert not (tmp_path / "out").exists()
    spec = importlib.util.spec_from_file_location("gpu_verify_plan",
                                                  ROOT / "benchmarks" / "gpu_verify.py")
    gv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gv)
    helper = gpu_run_module(monkeypatch)
    cli = typer.main.get_command(app)
    stages = [line[2:].split()[0] for line in done.stdout.splitlines() if line.startswith("# ")]
    assert stages == list(STAGES)
    commands = []
    for line in done.stdout.splitlines():
        argv = [] if line.startswith("#") else shlex.split(line.split(" > ")[0])
        if argv[1:3] and argv[1].endswith("gpu_run.py") and argv[2] == "load":
            hw = argv[argv.index("--hw") + 1]
            commands += [helper.load_argv(hw, drafter) for drafter in LOAD_DRAFTERS]
        elif argv:
            commands.append(argv)
    verify = clis = 0
    for argv in commands:
        if argv[1].endswith("gpu_verify.py"):
            args = ["cpu" if a == "cuda" else a.replace("graph", "eager") for a in argv[2:]]
            parsed, _ = gv.parse_args(args)
            for model in parsed.models if not parsed.e2e_only else []:
                gv.spec_of(model)
            assert all(d in DRAFTERS and m in zoo_specs() for m, d in parsed.e2e)
            verify += 1
        elif argv[1:3] == ["-m", "specscope"] and len(argv) > 4:
            name, *rest = argv[3:]
            ctx = cli.make_context("specscope", [name], resilient_parsing=True)
            command = cli.get_command(ctx, name)
            command.make_context(name, rest, parent=ctx)  # unknown options or bad values raise
            clis += 1
    assert verify == 8 and clis == 4 + len(LOAD_DRAFTERS)


def test_the_cli_runs_under_the_carried_typer(tmp_path):
    """The typer the runbook carries (the image's own is shadowed by it) parses, helps and turns a
    bad value into one line, exit 2."""
    wheels = sorted(CARRY.glob("typer-*.whl"))
    if not wheels:
        pytest.skip("no carried typer wheel: make gpu-carry")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                    "--target", str(site), str(wheels[0])], check=True, timeout=120)
    env = {**__import__("os").environ, "PYTHONPATH": f"{site}:{ROOT}"}

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "specscope", *argv], env=env,
                              capture_output=True, text=True, check=False, timeout=120)

    unknown = cli("--no-such-option")  # one line, exit 2
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    bad = cli("cost", "--hw", "h100", "--target", "llama-3.1-8b", "--batch", "x")
    assert bad.returncode == 2 and bad.stderr.startswith("specscope: error: ")
    assert "--runtime [eager|graph|compile]" in cli("generate", "--help").stdout
    shown = subprocess.run([sys.executable, "-c", "import typer; print(typer.__file__)"],
                           env=env, capture_output=True, text=True, check=True, timeout=60)
    assert shown.stdout.startswith(str(site))


def test_a_cuda_all_runs_the_never_run_stages_first_within_12_minutes(tmp_path):
    """The plan of one 15-minute loan (issue 43): `all` starts with env and the never-run
    stages and ends with the summary; by the stages' estimates the whole fits the default
    12-minute budget, and what does not fit (profile, load, validate, steps-small: the stages
    earlier loans ran) is left to a later call."""
    done = subprocess.run(["bash", str(RUNBOOK), "--device", "cuda", "--dry-run", "all",
                           str(tmp_path / "out")], capture_output=True, text=True, check=True,
                          timeout=60)
    heads = [line[2:] for line in done.stdout.splitlines() if line.startswith("# ")]
    stages = [h.split()[0] for h in heads]
    assert stages[:5] == ["env", *NEVER_RUN]
    estimate = {h.split()[0]: int(h.split("about ")[1].split()[0]) for h in heads}
    first = [s for s, h in zip(stages, heads, strict=True) if "later call" not in h]
    assert first == ["env", *NEVER_RUN, "summary"]
    assert sum(estimate[s] for s in first) <= 12 * 60
    assert all("later call" in heads[stages.index(s)]
               for s in ("profile", "load", "validate", "steps-small"))


def test_a_zero_budget_plans_every_stage(tmp_path):
    """--budget 0 switches the cuda `all` default budget off: no stage is left for later."""
    done = subprocess.run(["bash", str(RUNBOOK), "--device", "cuda", "--budget", "0", "--dry-run",
                           "all", str(tmp_path / "out")], capture_output=True, text=True,
                          check=True, timeout=60)
    heads = [line for line in done.stdout.splitlines() if line.startswith("# ")]
    assert len(heads) == 10 and not any("later call" in h for h in heads)
