"""A core install, `pip install .` with no extras, runs the README's quickstart without torch.

The test builds a fresh venv, installs a copy of the package into it (`pyproject.toml`,
`README.md`, `specscope/`: not editable, so nothing of the checkout is imported), checks that none
of the executor extra's modules can be imported there, and runs the quickstart (the first ```sh
block after README's "## Quickstart" heading: continuations joined, comments, blank lines and `pip
install` lines dropped) with that venv's `specscope` on PATH, in a fresh folder whose `examples/`
holds links to the repository's; what it prints must be docs/quickstart.md's output. The quickstart
must finish in QUICKSTART_BUDGET_S all told: each command's timeout is what the budget has left.
Last, a command that needs the executor says so in one line there.

On the 2-core test machine, with pip's cache warm and other tests running beside it, the venv and
install took 34-53 s and the quickstart 4-6 s."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specscope.errors import EXECUTOR_MODULES

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART_HEADING = "## Quickstart"
OUTPUT_HEADING = "## Output"
QUICKSTART_PAGE = ROOT / "docs" / "quickstart.md"
QUICKSTART_BUDGET_S = 60.0
INSTALL_TIMEOUT_S = 600
PIP_INSTALL = re.compile(r"(python3? -m )?pip3? install\b")


def quickstart_commands(readme: str) -> list[str]:
    """The commands of the first ```sh block after the quickstart heading, in order."""
    found = re.search(rf"^{re.escape(QUICKSTART_HEADING)}[ \t]*$", readme, re.MULTILINE)
    assert found, f"README.md has no {QUICKSTART_HEADING!r} section"
    _, fence, after = readme[found.end():].partition("```sh\n")
    assert fence, f"README.md's {QUICKSTART_HEADING!r} section has no ```sh block"
    block = re.sub(r"[ \t]*\\\n[ \t]*", " ", after.partition("```")[0])
    lines = (line.strip() for line in block.splitlines())
    return [line for line in lines
            if line and not line.startswith("#") and not PIP_INSTALL.match(line)]


def quickstart_output(page: str) -> str:
    """The output docs/quickstart.md shows: the first ``` block after its output heading."""
    _, found, after = page.partition(f"{OUTPUT_HEADING}\n")
    assert found, f"docs/quickstart.md has no {OUTPUT_HEADING!r} section"
    _, fence, shown = after.partition("```\n")
    assert fence, f"docs/quickstart.md's {OUTPUT_HEADING!r} section shows no output"
    return shown.partition("```")[0]


def test_the_quickstart_parser_joins_continuations_and_drops_what_it_should() -> None:
    readme = ("# x\n\n## Quickstart (GPU)\n\n```sh\nspecscope nope\n```\n\n"
              f"{QUICKSTART_HEADING}\n\nSome words.\n\n```sh\n# a comment\npip install .\n"
              "python -m pip install 'specscope[executor]'\n\n"
              "specscope a --b 1 \\\n    --c 2 \\\n  --d\nspecscope e\n```\n\n"
              "```sh\nspecscope f\n```\n")
    assert quickstart_commands(readme) == ["specscope a --b 1 --c 2 --d", "specscope e"]


def _copy_package(into: Path) -> Path:
    """What `pip install .` reads of the checkout, copied under `into` (no build files, caches
    or other folders of the working tree)."""
    into.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, into / name)
    shutil.copytree(ROOT / "specscope", into / "specscope",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    return into


def _examples(folder: Path) -> None:
    """`folder/examples`: links to the repository's examples (the quickstart reads its vLLM
    metrics text there)."""
    examples = folder / "examples"
    examples.mkdir()
    for entry in (ROOT / "examples").iterdir():
        (examples / entry.name).symlink_to(entry)


@pytest.mark.slow
@pytest.mark.long
def test_a_core_install_runs_the_readme_quickstart_without_torch(tmp_path: Path) -> None:
    commands = quickstart_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert commands, "the quickstart has no commands"
    venv = tmp_path / "venv"
    bin_dir = venv / "bin"
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env.update(HOME=str(tmp_path / "home"), VIRTUAL_ENV=str(venv),
               PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         str(_copy_package(tmp_path / "package"))],
        env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    install_s = time.monotonic() - started
    assert done.returncode == 0, f"pip install . failed:\n{done.stderr[-3000:]}"
    print(f"core venv and install: {install_s:.1f} s")

    probe = ("import importlib.util, specscope; "
             f"print([m for m in {EXECUTOR_MODULES!r} if importlib.util.find_spec(m)]); "
             "print(specscope.__file__)")
    where = subprocess.run([str(bin_dir / "python"), "-c", probe], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert where.splitlines()[0] == "[]", f"the core install brought {where.splitlines()[0]}"
    assert Path(where.splitlines()[1]).resolve().is_relative_to(venv.resolve()), where
    for module in ("torch", "transformers"):
        tried = subprocess.run([str(bin_dir / "python"), "-c", f"import {module}"], env=env,
                               capture_output=True, text=True, timeout=60)
        assert tried.returncode != 0 and "ModuleNotFoundError" in tried.stderr

    folder = tmp_path / "quickstart"
    folder.mkdir()
    _examples(folder)
    started, printed = time.monotonic(), ""
    for i, command in enumerate(commands, 1):
        left = QUICKSTART_BUDGET_S - (time.monotonic() - started)
        assert left > 0, f"the quickstart took over {QUICKSTART_BUDGET_S:.0f} s by command {i}"
        try:
            done = subprocess.run(["bash", "-c", command], cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the quickstart ran past {QUICKSTART_BUDGET_S:.0f} s in command {i}: "
                        f"{command}")
        assert done.returncode == 0, (
            f"quickstart command {i} of {len(commands)} exited {done.returncode} in the core "
            f"install:\n  {command}\nstderr (last lines):\n"
            f"{os.linesep.join(done.stderr.splitlines()[-10:])}")
        printed += done.stdout
    print(f"quickstart: {time.monotonic() - started:.1f} s")
    page = QUICKSTART_PAGE.read_text(encoding="utf-8")
    assert printed == quickstart_output(page), "docs/quickstart.md shows another output"

    done = subprocess.run([str(bin_dir / "specscope"), "profile-hw", "--name", "box", "--quick"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr.strip().count("\n")) == (2, 0), done.stderr
    assert "needs the executor extra: pip install 'specscope[executor]'" in done.stderr
