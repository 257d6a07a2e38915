"""`specscope adapt`: online drafter adaptation (OSD) over a stream of requests, against the same
stream never adapted, and the curve as the simulator's drift schedule."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from specscope.atomic import write_text_atomic
from specscope.cli.checks import Choices, Output, Range
from specscope.cli.common import (
    PROMPT_SOURCES,
    AsJson,
    CpuThreads,
    Force,
    OutputLen,
    Seed,
    ZooTarget,
    _emit,
    _progress,
    console,
)
from specscope.errors import InputError
from specscope.names import DEFAULT_DRAFT_MODEL, DEFAULT_OUTPUT_LEN

DEFAULT_STANDS_FOR = 250
"""Simulated requests one served request stands for: blocks of 4 served requests per drift
entry, so a 32-request run writes an 8-entry schedule."""


def adapt(
    target: ZooTarget,
    prompts: Annotated[str, typer.Option(help=f"Prompts to serve: {PROMPT_SOURCES}.")],
    drafter: Annotated[str, typer.Option(help="Who drafts: the draft model adapted online (a zoo "
                                              "Transformer; adapt runs no other kind).")] = (
        DEFAULT_DRAFT_MODEL),
    n: Annotated[int, typer.Option(min=1, help="Prompts to serve, in order.")] = 32,
    repeat: Annotated[int, typer.Option(min=1, help="Serve the n prompts this many times over "
                                             "(queries that come back).")] = 1,
    output_len: OutputLen = DEFAULT_OUTPUT_LEN,
    every: Annotated[int, typer.Option(min=1, help="Requests between two updates of the "
                                                   "draft.")] = 1,
    steps: Annotated[int, typer.Option(min=1, help="AdamW steps per update.")] = 4,
    lr: Annotated[float, typer.Option(help="AdamW learning rate."), Range(0, low_closed=False)
                  ] = 1e-4,
    loss: Annotated[str, typer.Option(help="Divergence between target and draft."),
                    Choices("specscope.names:ADAPT_LOSSES")] = "fkl",
    positions: Annotated[str, typer.Option(help="Distil where the draft was wrong (OSD) or at "
                                                "every served position."),
                         Choices("specscope.names:ADAPT_POSITIONS")] = "wrong",
    depth: Annotated[int, typer.Option(min=1, help="Drafts per step (a chain).")] = 4,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy)."),
                           Range(0)] = 0.0,
    rule: Annotated[str | None, typer.Option(help="Verification rule (default: greedy at "
                                                  "temperature 0, else deterministic)."),
                    Choices("specscope.names:RULES")] = None,
    seed: Seed = 0,
    threads: CpuThreads = None,
    stands_for: Annotated[int, typer.Option(help="Simulated requests one served request "
                                                 "stands for in the drift schedule (divides "
                                                 "1000).")] = DEFAULT_STANDS_FOR,
    relative_to: Annotated[str, typer.Option(help="Drift multipliers over the control's "
                                                  "acceptance on the same requests, or over "
                                                  "the first block's."),
                           Choices("specscope.names:DRIFT_RELATIVE_TO")] = "control",
    drift_out: Annotated[Path | None, typer.Option(help="Write the drift schedule here "
                                                        "(X,X,... for simulate --drift)."),
                         Output()] = None,
    as_json: AsJson = False,
    force: Force = False,
) -> None:
    """Serve a stream of requests while distilling the draft online (OSD), against the same
    stream never adapted; per-block acceptance and the simulator's drift schedule."""
    from specscope.executor.adapt import run_adapt
    from specscope.executor.distil import AdaptConfig
    from specscope.simulator.acceptance import DRIFT_PERIOD

    if not 1 <= stands_for <= DRIFT_PERIOD or DRIFT_PERIOD % stands_for:
        raise InputError(f"--stands-for must divide {DRIFT_PERIOD} (the simulator's requests "
                         f"per drift entry), got {stands_for}")
    config = AdaptConfig(every, steps, lr, loss, positions, depth)
    with _progress("serving") as bar:
        task = bar.add_task("serving", total=None)
        result = run_adapt(
            target, drafter, prompts, n, output_len, config, repeat=repeat,
            temperature=temperature, rule=rule, seed=seed, block=DRIFT_PERIOD // stands_for,
            relative_to=relative_to, threads=threads,
            progress=lambda done, total: bar.update(task, completed=done, total=total))
    doc = result.to_dict() | {"simulated_per_served": stands_for, "drift_period": DRIFT_PERIOD}
    if drift_out is not None:
        if result.drift is None:
            raise InputError(f"--drift-out {drift_out}: a block accepted no draft, so no "
                             "multiplier describes it; use a larger --stands-for divisor "
                             "(bigger blocks) or more requests")
        write_text_atomic(drift_out, ",".join(f"{m:g}" for m in result.drift) + "\n")
    if as_json:
        _emit(doc, True, None)
        return
    console.print(adapt_table(doc))
    if drift_out is not None:
        console.print(f"wrote {drift_out}: use it with specscope simulate --drift "
                      f"\"$(cat {drift_out})\"")


def adapt_table(doc: dict[str, Any]) -> Table:
    """Per-block acceptance of the adapted stream and its control, and the drift schedule."""
    table = Table(title=f"{doc['target']} · draft {doc['draft']} · {doc['prompts']} × "
                        f"{doc['repeat']} · {doc['rule']} · update every {doc['every']} of "
                        f"{doc['steps']} steps, lr {doc['lr']:g}, {doc['loss']} on "
                        f"{doc['positions']} positions")
    for col in ("requests", "acceptance adapted", "acceptance control", "tokens/step adapted",
                "tokens/step control", "drift"):
        table.add_column(col, justify="right")
    drift = doc["drift"] or [None] * len(doc["blocks"])
    for b, m in zip(doc["blocks"], drift, strict=True):
        table.add_row(f"{b['start']}–{b['stop'] - 1}", f"{b['adapted']:.3f}",
                      f"{b['control']:.3f}", f"{b['adapted_tokens_per_step']:.3f}",
                      f"{b['control_tokens_per_step']:.3f}", "–" if m is None else f"{m:.4f}")
    table.caption = (
        f"acceptance per node (P(child accepted | parent accepted)), chain of {doc['depth']}; "
        f"overall {doc['adapted_acceptance']:.3f} adapted, {doc['control_acceptance']:.3f} "
        f"control · lossless: {doc['lossless']}\ndrift relative to {doc['drift_relative_to']}; "
        f"one served request stands for {doc['simulated_per_served']} simulated requests "
        f"({doc['block']} per entry of {doc['drift_period']})")
    return table
