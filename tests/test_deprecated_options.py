"""Old option spellings (`cli/deprecated.py`) keep working for one release: each is rewritten to
its successor before click parses, with exactly one warning line on stderr, and the new
spelling warns of nothing. The cheap commands run; the ones that load models are parsed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from conftest import Run
from typer.core import TyperOption

from specscope.cli import app, main, optimize_tree_main
from specscope.cli.deprecated import DEPRECATED, REMOVED_IN, rewrite, upgrade

ROOT = typer.main.get_command(app)
VALUES = {"--output-len": "8", "--to": "vllm", "--backend": "local", "--output": "out/x"}
"""A value each successor takes (else a name)."""


def _command(path: str) -> typer.core.TyperCommand:
    command = ROOT
    for word in path.split():
        command = command.commands[word]
    return command


def _warning(path: str, old: str) -> str:
    return (f"{path} {old} is deprecated; use {DEPRECATED[path, old]} (removed in "
            f"{REMOVED_IN})")


@pytest.mark.parametrize(("path", "old"), sorted(DEPRECATED), ids=" ".join)
@pytest.mark.parametrize("joined", [False, True], ids=["spaced", "equals"])
def test_every_old_spelling_becomes_its_successor_with_one_warning(path: str, old: str,
                                                                   joined: bool) -> None:
    new = DEPRECATED[path, old]
    value = VALUES.get(new, "tiny-code")
    given = [f"{old}={value}"] if joined else [old, value]
    argv, warned = upgrade(ROOT, [*path.split(), *given, *given])  # twice: one warning
    expected = [f"{new}={value}"] if joined else [new, value]
    assert argv == [*path.split(), *expected, *expected]
    assert warned == [_warning(path, old)]
    command = _command(path)
    ctx = command.make_context(path, argv[len(path.split()):], resilient_parsing=True)
    param = next(p for p in command.params if isinstance(p, TyperOption) and new in p.opts)
    assert ctx.params[param.name] is not None  # click took the value under the new name


def test_values_options_and_what_follows_a_double_dash_are_left_alone() -> None:
    generate = _command("generate")
    argv, warned = rewrite("generate", generate, ["--prompts", "--model", "--model", "x",
                                                  "--", "--max-new"])
    assert argv == ["--prompts", "--model", "--target", "x", "--", "--max-new"]
    assert warned == [_warning("generate", "--model")]
    # another command's old spelling is not this one's: `export --target` is current
    assert upgrade(ROOT, ["export", "t.json", "--target", "x"]) == (
        ["export", "t.json", "--target", "x"], [])
    assert upgrade(ROOT, ["zoo", "train", "--model", "tiny-code"]) == (
        ["zoo", "train", "--model", "tiny-code"], [])


def test_an_entry_waits_for_its_rename(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table entry whose new option the command lacks yet (or whose old one it still has)
    rewrites nothing: the old spelling reaches click as it is."""
    monkeypatch.setitem(DEPRECATED, ("generate", "--prompts"), "--prompt-set")
    monkeypatch.setitem(DEPRECATED, ("generate", "--n"), "--target")
    args = ["--prompts", "builtin:sql", "--n", "2"]
    assert rewrite("generate", _command("generate"), args) == (args, [])


def _tree(folder: Path) -> Path:
    tree = folder / "tree.json"
    tree.write_text('{"parents": [-1, 0], "ranks": [-1, 0], "sources": ["root", "draft"]}')
    return tree


def _sweep(folder: Path) -> Path:
    config = folder / "s.toml"
    config.write_text('[acceptance]\nngram = [0.45]\n\n[[grid]]\nhardware = ["h100"]\n'
                      'target = ["llama-3.1-8b"]\ndrafter = ["ngram"]\nmethod = ["chain"]\n'
                      'budget = [4]\n')
    return config


CHEAP = [
    (("cost", "--hw", "h100", "--target", "llama-2-7b",
      "--model", "llama-3.1-8b", "--json"), "cost", "--model"),
    (("cost", "--hw", "h100", "--target", "llama-3.1-8b", "--draft", "llama-68m", "--json"),
     "cost", "--draft"),
    (("optimize-tree", "--hw", "h100", "--target", "llama-2-7b",
      "--acceptance", "0.6,0.2", "--budget", "8", "--export",
      "vllm", "--json"), "optimize-tree", "--export"),
    (("export", "{tree}", "--engine", "vllm", "--target", "llama-3.1-8b", "--drafter",
      "llama-3.2-1b", "--json"),
     "export", "--engine"),
    (("sweep", "{sweep}", "--engine", "local", "-o", "{dir}/s.parquet", "--json"), "sweep",
     "--engine"),
]
"""Commands that take a second or two: each run with its old spelling, then its new one."""


@pytest.mark.parametrize(("args", "path", "old"), CHEAP, ids=[f"{p} {o}" for _, p, o in CHEAP])
def test_old_spellings_run_and_warn_once_new_ones_never(run: Run, tmp_path: Path,
                                                        args: tuple[str, ...], path: str,
                                                        old: str) -> None:
    filled = [a.format(tree=_tree(tmp_path), sweep=_sweep(tmp_path), dir=tmp_path)
              for a in args]
    code, out, err = run(main, *filled)
    assert code == 0, err
    assert err.splitlines() == [f"specscope: warning: {_warning(path, old)}"]
    (tmp_path / "s.parquet").unlink(missing_ok=True)
    current = [DEPRECATED.get((path, a), a) for a in filled]
    code, again, err = run(main, *current)
    assert code == 0 and "warning" not in err, err
    assert _steady(json.loads(again)) == _steady(json.loads(out))  # the value was kept


VOLATILE = frozenset({"run_id", "wall_s"})


def _steady(doc: object) -> object:
    """`doc` without what differs from run to run (a sweep's run id and wall time, times
    measured on this machine)."""
    if isinstance(doc, dict):
        return {k: _steady(v) for k, v in doc.items() if k not in VOLATILE}
    return [_steady(v) for v in doc] if isinstance(doc, list) else doc


def test_the_optimize_tree_script_takes_old_spellings_too(run: Run) -> None:
    code, _, err = run(optimize_tree_main, "--hw", "h100", "--target", "llama-2-7b",
                       "--acceptance", "0.6,0.2",
                       "--budget", "8", "--export", "vllm", "--json")
    assert code == 0, err
    assert err.splitlines() == [
        f"optimize-tree: warning: {_warning('optimize-tree', '--export')}"]
