"""The command line's help reads like click's: values named, choices listed from the library's own
constants, an example per command that runs; `--version`; help renders without torch."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

from specscope import __version__
from specscope.cli import COMMANDS, app, main, optimize_tree_main
from specscope.executor.collect import COLLECT_DRAFTERS
from specscope.executor.drafters import DRAFTERS
from specscope.executor.methods import DYNAMIC_METHODS, STATIC_METHODS, TRACE_METHODS
from specscope.executor.runtime import DEVICES, DTYPES
from specscope.executor.verify import RULES
from specscope.hw_profiles.cost import TREE_ATTENTION
from specscope.models.ops import SSM_VERIFY, WEIGHT_BITS
from specscope.models.zoo.train import ORDER
from specscope.names import RUNTIMES
from specscope.optimizers.compare import METHOD_NAMES
from specscope.simulator.policies import POLICIES
from specscope.simulator.run import PLACEMENTS
from specscope.simulator.scheduler import ROUTERS
from specscope.simulator.workload import ARRIVALS, WORKLOADS
from specscope.sweeps.engines import ENGINES


def _paths(group: typer.core.TyperGroup, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in group.commands.items():
        if isinstance(command, typer.core.TyperGroup):
            yield from _paths(command, (*prefix, name))
        else:
            yield (*prefix, name)


PATHS = sorted(_paths(typer.main.get_command(app)))


def _run(entry, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        entry(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def _help(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = _run(main, *path, "--help", capsys=capsys)
    assert code == 0, err
    return out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(main, "--version", capsys=capsys)
    assert (code, out, err) == (0, f"specscope {__version__}\n", "")


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_help_names_values_and_shows_an_example(path: tuple[str, ...],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(path, capsys)
    assert out.startswith(f"Usage: specscope {' '.join(path)} [OPTIONS]")
    assert not re.search(r"<(bool|str|int|float|path)>", out)
    assert not re.search(r"[\u2500-\u257f\U0001f000-\U0001faff]", out)  # no panels, no emoji
    options = [line.split()[0] for line in out.splitlines() if line.startswith("  -")]
    valued = [line for line in out.splitlines()
              if re.match(r"  (-\w, )?--[\w-]+ [^\s/]", line)]
    assert "--help" in options and valued  # every command has a valued option
    example = out.split("Example:\n", 1)[1].splitlines()
    assert example[0].startswith(f"    specscope {' '.join(path)} ")
    assert all(len(line) <= 80 for line in example)  # fits a terminal, never rewrapped


def test_flags_are_bare_and_valued_options_named(capsys: pytest.CaptureFixture[str]) -> None:
    out = _help(("generate",), capsys)
    assert "  --verify-lossless / --no-verify-lossless\n" in out
    assert re.search(r"^  --json {2,}Print JSON\.", out, re.M)
    for shown in ("--target NAME", "--n N", "--output-len N", "--temperature T", "--tree PATH"):
        assert f"  {shown} " in out
    out = _help(("simulate",), capsys)
    for shown in ("--hw NAME", "--rate REQ/S", "--acceptance P1,P2,..|FILE",
                  "-o, --output PATH",
                  "--prompt-len DIST"):
        assert f"  {shown} " in out
    assert "uniform:A:B" in out
    assert "Usage: specscope sweep [OPTIONS] CONFIG\n" in _help(("sweep",), capsys)


CHOICES = [
    ("cost", "--runtime", RUNTIMES),
    ("cost", "--tree-attention", TREE_ATTENTION),
    ("cost", "--weight-bits", WEIGHT_BITS),
    ("optimize-tree", "--algo", (*METHOD_NAMES, "all")),
    ("simulate", "--policy", POLICIES),
    ("simulate", "--router", ROUTERS),
    ("simulate", "--workload", WORKLOADS),
    ("simulate", "--arrivals", ARRIVALS),
    ("simulate", "--draft-placement", PLACEMENTS),
    ("sweep", "--backend", ENGINES),
    ("generate", "--drafter", (*DRAFTERS, "MODEL")),
    ("generate", "--device", DEVICES),
    ("generate", "--dtype", DTYPES),
    ("generate", "--rule", RULES),
    ("generate", "--ssm-verify", SSM_VERIFY),
    ("generate", "--runtime", RUNTIMES),
    ("collect", "--drafter", (*COLLECT_DRAFTERS, "MODEL")),
    ("profile-hw", "--device", ("cpu", "cuda", "auto")),
    ("profile-hw", "--runtime", RUNTIMES),
    ("zoo train", "--model", (*ORDER, "all")),
]


@pytest.mark.parametrize(("command", "option", "values"), CHOICES,
                         ids=[f"{c}{o}" for c, o, _ in CHOICES])
def test_choice_options_list_the_library_values(command: str, option: str, values,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The values the executor, simulator and optimizers check are the ones help lists."""
    listed = f"  {option} [{'|'.join(map(str, values))}]"
    assert listed in _help(tuple(command.split()), capsys)


def test_generate_lists_the_methods_the_executor_runs(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    shown = re.search(r"--algo \[([^\]]+)\]", _help(("generate",), capsys))
    assert shown and set(shown[1].split("|")) == {*STATIC_METHODS, *TRACE_METHODS,
                                                  *DYNAMIC_METHODS}


@pytest.mark.parametrize(("args", "needle"), [
    (["cost", "--hw", "h100", "--target", "llama-3.1-8b", "--runtime", "warp"], "warp"),
    (["cost", "--hw", "h100", "--target", "llama-3.1-8b", "--tree-attention", "sparse"], "sparse"),
    (["sweep", "examples/sweep.toml", "--backend", "spark"], "--backend"),
    (["simulate", "--hw", "h100", "--target", "llama-3.1-8b", "--rate", "1", "--requests", "2",
      "--seed", "0", "--acceptance", "0.5", "--policy", "psychic"], "psychic"),
])
def test_bad_choices_stay_one_line_from_the_library(args: list[str], needle: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(main, *args, capsys=capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_optimize_tree_script_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(optimize_tree_main, "--help", capsys=capsys)
    assert code == 0 and out.startswith("Usage: optimize-tree [OPTIONS]")
    assert "\n    optimize-tree --hw h100 " in out and "--budgets [" not in out


def test_top_level_help_lists_commands_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(main, "--help", capsys=capsys)
    assert code == 0 and "--version" in out and "optimize-tree" in out and "╭" not in out


@pytest.mark.parametrize("args", [[], ["trace"], ["zoo"]], ids=repr)
def test_a_group_alone_prints_its_help(args: list[str], capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    code, out, err = _run(main, *args, capsys=capsys)
    assert (code, err) == (0, "") and out.startswith(f"Usage: {' '.join(['specscope', *args])} ")


def test_help_renders_without_torch() -> None:
    """Listing the executor's choices must not import torch (help stays fast)."""
    script = ("import contextlib, io, sys\nfrom specscope.cli import main\n"
              f"for path in {PATHS!r}:\n"
              "    with contextlib.redirect_stdout(io.StringIO()):\n"
              "        with contextlib.suppress(SystemExit):\n"
              "            main([*path, '--help'])\n"
              "assert 'torch' not in sys.modules, 'torch imported'\n")
    subprocess.run([sys.executable, "-c", script], check=True)


def _example(path: tuple[str, ...]) -> list[str]:
    """The arguments of `path`'s example (`COMMANDS`), continuation lines joined."""
    start = f"specscope {' '.join(path)} "
    lines = next(lines for _, _, _, lines in COMMANDS if lines[0].startswith(start))
    return shlex.split(" ".join(line.rstrip("\\") for line in lines))[1:]


@pytest.mark.parametrize("path", [("cost",), ("optimize-tree",), ("trace", "synth"),
                                  ("simulate",)], ids=" ".join)
def test_quick_examples_run(path: tuple[str, ...], tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """The examples that need no torch and take seconds run as written."""
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(main, *_example(path), capsys=capsys)
    assert code == 0, err
