"""Fixtures every test module may use: the command line run in-process."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from specscope.cli import main

Run = Callable[..., tuple[int, str, str]]
"""`run(entry, *args)`: a console entry point's (exit status, stdout, stderr)."""
Cli = Callable[..., tuple[int, str, str]]
"""`cli(*args)`: `specscope ARGS...`'s (exit status, stdout, stderr)."""


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """Run a console entry point (`main`, `optimize_tree_main`) in-process."""

    def _run(entry: Callable[[list[str]], None], *args: object) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as exc:
            entry([str(a) for a in args])
        out, err = capsys.readouterr()
        return int(exc.value.code or 0), out, err

    return _run


@pytest.fixture
def cli(run: Run) -> Cli:
    """Run `specscope ARGS...` in-process."""
    return lambda *args: run(main, *args)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `long` first, so that `make test`'s two xdist workers start them at once
    instead of one worker ending on a two-minute test while the other idles."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
