"""Exchange with serving engines: export (an engine's configuration of a tree) and trace import
(an engine's counters as acceptance)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specscope.cli.checks import Choices, Needs, Output
from specscope.cli.common import AsJson, EngineVersion, ExportMethod, Force, _emit, console
from specscope.errors import InputError

FromSGLang = Needs(("source_format",), ("sglang-log",))
"""Marks the options that describe the SGLang run a decode log comes from."""


def export(
    tree: Annotated[Path, typer.Argument(help="A tree JSON, or optimize-tree --json / -o "
                                              "output (its best result).")],
    engine: Annotated[str, typer.Option("--to", help="The serving engine to configure."),
                      Choices("specscope.names:EXPORT_ENGINES")],
    export_method: ExportMethod = None,
    algo: Annotated[str | None, typer.Option(help="Method of the tree file to use.")] = None,
    target: Annotated[str | None, typer.Option(help="Served model (default: the tree file's; "
                                                    "a catalogue name or a model id).")] = None,
    drafter: Annotated[str | None, typer.Option(help="Draft model served (default: the "
                                                     "tree's source's, else the drafter the "
                                                     "file records); a head's Hugging Face id "
                                                     "for a head method.")] = None,
    engine_version: EngineVersion = None,
    as_json: AsJson = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write JSON here."),
                      Output(inputs=("tree",))] = None,
    force: Force = False,
) -> None:
    """An engine's configuration verifying a given tree, when the engine can express it
    (optimize-tree --to solves for the best it can)."""
    from specscope.interop.document import tree_export
    from specscope.tables import export_lines

    doc = tree_export(tree, engine, export_method, algo, target, drafter, engine_version)
    if _emit(doc, as_json, output, f"{engine} {doc['method']} configuration of {tree}"):
        return
    for line in export_lines(doc):
        console.print(line, soft_wrap=True, highlight=False)


def trace_import(
    file: Annotated[Path, typer.Argument(help="What the engine wrote: vLLM's /metrics text, "
                                              "SGLang's server log, or a JSON of counts.")],
    source_format: Annotated[str, typer.Option("--from", help="Its format."),
                             Choices("specscope.names:IMPORT_FORMATS")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the acceptance "
                                                "JSON here (else print it)."),
                      Output(inputs=("file", "trace"))] = None,
    target: Annotated[str | None, typer.Option(help="vllm-metrics: the target's model_name "
                                                    "label, read when several models served."),
                      Needs(("source_format",), ("vllm-metrics",))] = None,
    trace: Annotated[Path | None, typer.Option(help="A trace whose ranks below the top give "
                                                    "the lower ranks' ratios (a chain "
                                                    "engine never verifies them).")] = None,
    source: Annotated[str | None, typer.Option(help="The trace's source (default: its "
                                                    "first draft model's)."),
                      Needs(("trace",), ())] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="sglang-log: the run's "
                                                          "--speculative-num-steps."),
                     FromSGLang] = None,
    topk: Annotated[int | None, typer.Option(min=1, help="sglang-log: the run's "
                                                         "--speculative-eagle-topk."),
                    FromSGLang] = None,
    draft_tokens: Annotated[int | None, typer.Option(
        min=2, help="sglang-log: the run's --speculative-num-draft-tokens (default with top-k "
                    "1: steps + 1)."), FromSGLang] = None,
    force: Force = False,
) -> None:
    """Acceptance from an engine's counters, with counts and intervals: what --acceptance
    FILE.json takes in optimize-tree, simulate and serve-bench."""
    from specscope.interop.families import TopK
    from specscope.interop.trace_import import import_file
    from specscope.trace import AcceptanceModel, read_trace

    setting = None
    if steps is not None and topk is not None:
        if topk > 1 and draft_tokens is None:
            raise InputError("--topk > 1 needs --draft-tokens (the run's "
                             "--speculative-num-draft-tokens)")
        setting = TopK(steps, topk, draft_tokens or steps + 1)
    lower = None if trace is None else AcceptanceModel.from_trace(read_trace(trace), source)
    doc = import_file(file, source_format, target, lower, setting)
    summary = (f"acceptance of {doc['source']} from {file} ({source_format}): p = "
               f"{', '.join(f'{x:.3f}' for x in doc['acceptance'])}; mean accepted length "
               f"{doc['mean_accepted_length']:.2f}")
    _emit(doc, True, output, summary)
