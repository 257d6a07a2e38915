"""docs/tour.md, the tour of the commands the README points to, runs as written.

The tour block is read from docs/tour.md as it is today (backslash continuations joined, comments
and the `. .venv/bin/activate` line dropped) and every line runs with this interpreter's
environment on PATH, as a user runs it from the repository root after `make demo`. Only lines that
need what this machine may lack are skipped: those after the block's "# on a GPU" comment, those
with `--device cuda`, and `zoo train` (hours).

Lines are grouped into chains by the files they share: a line joins the chain of every earlier line
whose output it names, to read it or to write it again (a word equal to the value an earlier line
gave `-o`, `--output`, `--drift-out` or `--name`). Each chain runs in order in its own fresh folder
holding only a link to the repository's `examples/`, which the tour reads, so xdist can run chains
side by side; a line that reads an earlier output under another spelling finds nothing and fails,
it is never skipped. HOME and the profile directory point into the folder, so `profile-hw --name
mybox` writes nothing outside it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from specscope.hw_profiles.profile import PROFILE_DIR_ENV

ROOT = Path(__file__).resolve().parent.parent
TOUR_HEADING = "# A short tour"
TOUR = ROOT / "docs" / "tour.md"
GPU_COMMENT = "# on a GPU"
OUTPUT_FLAGS = ("-o", "--output", "--drift-out", "--name")
LINE_TIMEOUT_S = 600


def tour_block(readme: str) -> list[str]:
    """The raw lines of the first ```sh block after the tour heading."""
    _, found, after = readme.partition(TOUR_HEADING)
    assert found, f"docs/tour.md has no {TOUR_HEADING!r} heading"
    _, found, block = after.partition("```sh\n")
    assert found, "docs/tour.md has no ```sh block"
    return block.partition("\n```")[0].splitlines()


def tour_commands(readme: str) -> list[str]:
    """The tour's commands a CPU-only machine runs, in order."""
    commands: list[str] = []
    pending = ""
    for raw in tour_block(readme):
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        if line.startswith(GPU_COMMENT):
            break
        if not line or line.startswith("#") or line.startswith(". .venv/bin/activate"):
            continue
        if "--device cuda" in line or " zoo train" in line:
            continue
        commands.append(line)
    return commands


def chains(commands: list[str]) -> list[list[tuple[int, str]]]:
    """The commands (numbered from 1) grouped by the outputs they share, each group in order."""
    groups: list[list[int]] = []
    owner: dict[str, int] = {}  # an output -> the group that wrote it
    for i, command in enumerate(commands):
        words = [w for word in shlex.split(command, comments=True)
                 for w in (word.split("=", 1) if word.startswith("--") else [word])]
        joined = sorted({owner[w] for w in words if w in owner})
        if not joined:
            groups.append([])
            joined = [len(groups) - 1]
        into = joined[0]
        for other in joined[1:]:
            groups[into] += groups[other]
            groups[other] = []
            owner = {out: into if g == other else g for out, g in owner.items()}
        groups[into].append(i)
        owner.update({value: into for flag, value in pairwise(words)
                      if flag in OUTPUT_FLAGS})
    return [[(i + 1, commands[i]) for i in sorted(g)] for g in groups if g]


COMMANDS = tour_commands(TOUR.read_text(encoding="utf-8"))
CHAINS = chains(COMMANDS)


def test_the_parser_joins_continuations_and_skips_what_it_should() -> None:
    readme = (f"{TOUR_HEADING}\n\n```sh\n. .venv/bin/activate\n# a comment\n"
              "specscope a \\\n    --b 1   # said\nspecscope zoo train --model all\n"
              "specscope c --device cuda\n\n"
              f"{GPU_COMMENT}: more\nspecscope d\n```\n\n```sh\nspecscope e\n```\n")
    assert tour_commands(readme) == ["specscope a --b 1   # said"]


def test_lines_that_read_an_earlier_output_join_its_chain() -> None:
    commands = ["a -o x.parquet", "b --hw h100", "c --name box", "d --trace x.parquet -o t.json",
                "e --hw box --tree=t.json", "f --trace x.parquet"]
    assert [[i for i, _ in chain] for chain in chains(commands)] == [[1, 3, 4, 5, 6], [2]]
    assert [[i for i, _ in chain] for chain in chains(["a -o x", "b -o y", "c x y"])] == [
        [1, 2, 3]]
    # a second write of the same file runs where the first did, so its refusal is seen
    assert [[i for i, _ in chain] for chain in chains(["a -o t", "b", "c --output=t"])] == [
        [1, 3], [2]]


def test_the_tour_has_its_commands_and_every_one_runs_in_one_chain() -> None:
    assert len(COMMANDS) >= 10, "docs/tour.md lost its commands"
    assert sorted(i for chain in CHAINS for i, _ in chain) == list(range(1, len(COMMANDS) + 1))


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("chain", CHAINS, ids=[f"command{chain[0][0]}" for chain in CHAINS])
def test_every_tour_line_runs_in_a_fresh_folder(chain: list[tuple[int, str]], tmp_path: Path
                                                ) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "HOME": str(tmp_path / "home"),
           PROFILE_DIR_ENV: str(tmp_path / "profiles"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for i, command in chain:
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=LINE_TIMEOUT_S)
        assert done.returncode == 0, (
            f"tour command {i} of the {len(COMMANDS)} run here exited "
            f"{done.returncode}:\n  {command}\n"
            f"stderr (last lines):\n{os.linesep.join(done.stderr.splitlines()[-10:])}")
