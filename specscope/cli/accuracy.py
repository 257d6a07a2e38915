"""`specscope accuracy`: the published sets and the committed validation runs as one page of
error tables, docs/accuracy.md (no torch)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from specscope.cli.checks import Output
from specscope.cli.common import AsJson, Force, _emit, _progress, _wrote, console
from specscope.errors import InputError


def accuracy(
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the page (with --json, the JSON) here; default: "
                               "ROOT/docs/accuracy.md, where a page this command wrote is "
                               "replaced (any other existing file needs --force)."),
        Output(resumes=True)] = None,  # an existing file: checked below (is it our page?)
    root: Annotated[Path, typer.Option(help="The repository checkout whose examples/ and "
                                            "benchmarks/results/ are read.")] = Path("."),
    check: Annotated[bool, typer.Option("--check", help="Write nothing; exit 1 when the page "
                                                        "differs from what would be "
                                                        "written.")] = False,
    as_json: AsJson = False,
    force: Force = False,
) -> None:
    """How accurate specscope's predictions are: every published set (examples/papers,
    examples/serving) priced against what its sources published, per family × engine ×
    hardware, and the committed validation runs (CPU, H100, H200) against real torch runs."""
    from specscope.atomic import write_text_atomic
    from specscope.outputs import check_output
    from specscope.validate.accuracy import PAGE, build_accuracy, is_page, render_page

    path = output if output is not None else root / PAGE
    if check and as_json:
        raise InputError("--check compares the Markdown page; drop --json")
    if not check and (output is not None or not as_json):
        check_output(path, "-o", force=force or (not as_json and is_page(path)))
    with _progress("reproducing") as bar:
        task = bar.add_task("reproducing", total=None)
        result = build_accuracy(root, lambda done, total: bar.update(task, completed=done,
                                                                     total=total))
    if as_json:
        _emit(result.to_dict(), True, output, result.headline())
        return
    page = render_page(result)
    if check:
        if not path.is_file() or path.read_text(encoding="utf-8", errors="replace") != page:
            state = "out of date" if path.is_file() else "missing"
            again = "specscope accuracy" + ("" if output is None else f" -o {output}")
            print(f"specscope: {path} is {state}; run `{again}` to write it", file=sys.stderr)
            raise typer.Exit(1)
        console.print(f"{path} is up to date", highlight=False, markup=False, soft_wrap=True)
        return
    write_text_atomic(path, page)
    _wrote(path, result.headline(), False)
