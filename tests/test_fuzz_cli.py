"""No traceback reaches a user: every command, driven with a handful of malformed values for each
of its options, ends in one `specscope: error:` line and exit status 2 (or, where the value
happens to be valid, runs), within seconds, and writes nothing."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import get_args

import pytest
import typer
from conftest import Cli
from typer.core import TyperOption

from specscope.cli import COMMANDS
from specscope.cli.checks import Choices, Output, declared
from specscope.hw_profiles.profile import PROFILE_DIR_ENV

PAPERS = Path(__file__).parent.parent / "examples" / "papers"
SWEEP = 'hardware = ["h100"]\ntarget = ["llama-3.1-8b"]\ndrafter = ["ngram"]\nbudget = [4]\n'
COUNTS = '{"drafts": 10, "accepted_per_position": [5, 2]}'
CHAIN = '{"parents": [-1, 0], "ranks": [-1, 0], "sources": ["root", "draft"]}'
BASE: dict[str, tuple[str, ...]] = {
    "cost": ("--hw", "h100", "--target", "llama-3.1-8b"),
    "profile-hw": ("--name", "fuzz-box", "--quick"),
    "synth": ("-o", "{tmp}/t.parquet", "--requests", "2", "--length", "8"),
    "generate": ("--target", "tiny-code", "--drafter", "ngram", "--algo", "chain", "--budget",
                 "4", "--prompts", "builtin:sql", "--n", "1", "--output-len", "2", "--device",
                 "cpu"),
    "adapt": ("--target", "tiny-code", "--prompts", "builtin:sql", "--n", "1", "--output-len",
              "2"),
    "validate": ("--hw", "cpu-2core", "--target", "tiny-code", "--device", "cpu", "--quick"),
    "collect": ("--target", "tiny-code", "--prompts", "builtin:sql", "--n", "1", "--output-len",
                "2", "--drafter", "ngram", "-o", "{tmp}/c.parquet"),
    "train": ("--model", "tiny-code", "--steps", "1", "-o", "{tmp}/zoo"),
    "optimize-tree": ("--hw", "h100", "--target", "llama-3.1-8b", "--acceptance", "0.6,0.2",
                      "--budget", "8"),
    "export": ("{tmp}/tree.json", "--to", "vllm", "--target", "llama-3.1-8b"),
    "import": ("{tmp}/counts.json", "--from", "json", "-o", "{tmp}/acc.json"),
    "simulate": ("--hw", "h100", "--target", "llama-3.1-8b", "--acceptance", "0.5", "--rate",
                 "1", "--requests", "2", "--seed", "0"),
    "serve-bench": ("--target", "tiny-code", "--rate", "50", "--requests", "1", "--output-len", "2",
                    "--prompts", "builtin:sql", "--device", "cpu"),
    "sweep": ("{tmp}/s.toml", "-o", "{tmp}/s.parquet"),
    "reproduce": (str(PAPERS / "hydra.toml"),),
    "accuracy": ("--root", str(PAPERS.parents[1]), "-o", "{tmp}/accuracy.md"),
    "dashboard": ("{tmp}",),
    "demo": ("--quick", "-o", "{tmp}/demo"),
}
"""A valid invocation of each command, in a fresh folder {tmp}: the option under test is added
after it, and the last value of an option counts."""
GROUPS = {"synth": ("trace", "synth"), "import": ("trace", "import"), "train": ("zoo", "train")}
SKIP = {"--json", "--help", "--force", "--quick"}


def malformed(kind: object, *marks: object) -> list[str]:
    """A few values of an option's kind (with its marks) that no command may take."""
    kinds = {k for k in (*get_args(kind), kind) if k is not type(None)}
    if any(isinstance(m, Output) for m in marks):
        return ["{tmp}/a-file/x"]  # a parent that is a file
    if Path in kinds:
        return ["{tmp}/missing/x.json"]
    if float in kinds:
        return ["nan", "-inf"]
    if int in kinds:
        return ["abc", "-1"]
    if any(isinstance(m, Choices) for m in marks):
        return ["bogus-choice", ""]
    return ["", "@@ not,a,name"]


def cases() -> Iterator[tuple[str, tuple[str, ...]]]:
    """(command, arguments) for every option of every command and each malformed value."""
    for group, name, _, _ in COMMANDS:
        command = typer.main.get_command(group)
        command = command.commands[name] if isinstance(command, typer.core.TyperGroup) \
            else command
        marks_of = declared(command)
        for param in command.params:
            if not isinstance(param, TyperOption) or param.is_flag:
                continue
            option = max(param.opts, key=len)
            if option in SKIP:
                continue
            for value in malformed(*marks_of[param.name]):
                yield name, (option, value)


class Slow(BaseException):
    """The command ran past the limit a refusal must meet (not an `Exception`: the command
    line's last-resort handler must not catch it)."""


def _alarm(_: int, __: FrameType | None) -> None:
    raise Slow


CASES = list(cases())


@pytest.mark.parametrize("name, extra", CASES, ids=[f"{n}{' '.join(a)}" for n, a in CASES])
def test_malformed_values_are_one_line_never_a_traceback(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        extra: tuple[str, ...]) -> None:
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path / "profiles"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("a file, not a folder")
    (tmp_path / "s.toml").write_text(SWEEP)
    (tmp_path / "counts.json").write_text(COUNTS)
    (tmp_path / "tree.json").write_text(CHAIN)
    before = sorted(tmp_path.rglob("*"))
    args = [a.format(tmp=tmp_path) for a in (*GROUPS.get(name, (name,)), *BASE[name], *extra)]
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(30)
    try:
        code, _, err = cli(*args)
    except Slow:
        pytest.fail(f"specscope {' '.join(args)}: still running after 30 s (value taken?)")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert "Traceback" not in err and "internal error" not in err, err
    assert code == 2, f"exit {code}: {' '.join(args)}\n{err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("specscope: error:") and len(lines) <= 2, err
    assert sorted(tmp_path.rglob("*")) == before, "a refused command wrote files"
