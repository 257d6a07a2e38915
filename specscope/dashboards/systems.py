"""The seed systems: each paper scenario predicted against what it published, and each one priced
again on every hardware profile (the systems' column of the hardware comparison).

Drawn from the scenario TOMLs in the results folder (`examples/papers/` holds the shipped ones;
`specscope demo` copies them into its folder)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import plotly.graph_objects as go

from specscope.dashboards.load import Results
from specscope.dashboards.style import Section, finish
from specscope.errors import InputError
from specscope.hw_profiles import load_profile
from specscope.hw_profiles.profile import list_profiles
from specscope.systems.reproduce import Reproduced, predict_case, summarise

REPRODUCE_GUIDE = (
    "Each row is one setup a paper published, priced by specscope's mechanism for that system "
    "from the same hardware, models, precision, batch, context, tree and measured mean accepted "
    "length τ. Look at the relative error: the mechanisms use physical terms (bytes, FLOPs, "
    "launch and host overheads of the profile's runtime), never a number fitted per case. "
    "Lossy systems (judge, arbitrage) accept beyond the target's distribution and are marked; "
    "setup “partial” means the paper did not state everything the price needs (assumptions in "
    "`specscope reproduce`)."
)
FAMILIES_GUIDE = (
    "The relative error of every published case, grouped by the system that prices it: a "
    "family whose median is far from 0 has a mechanism specscope does not price (the terms of "
    "each case, and where each engine's and host's numbers come from, are in `specscope "
    "reproduce`)."
)
HARDWARE_GUIDE = (
    "The same published setups priced again on every hardware profile (rows), at the runtime "
    "the case states when the profile prices it: which system pays where. A long-context draft "
    "gains most where attention over the prompt dominates the step; tree verification on "
    "4-bit targets gains least where compute is scarce (RTX 3090, laptops). Blank: the "
    "profile cannot run the case (reason on hover)."
)


def reproduce_section(results: Results) -> Section:
    """The reproduce table of the folder's scenarios."""
    title = "Seed systems against their papers (specscope reproduce)"
    if not results.scenarios:
        return Section("reproduce", title, REPRODUCE_GUIDE,
                       note="needs paper scenario TOMLs ([[case]] tables, examples/papers/)")
    rows = []
    for r in (Reproduced(case, predict_case(case)) for case in results.scenarios):
        case, p = r.case, r.prediction
        predicted, published = r.shown(2)
        rows.append((case.name, case.system + (" (lossy)" if p.lossy else ""), case.hw,
                     f"{p.tokens_per_step:.2f}", predicted, published, f"{r.rel_err:+.1%}",
                     case.setup))
    header = ["case", "system", "hw", "τ", "predicted", "published", "rel err", "setup"]
    fig = go.Figure(go.Table(header={"values": header, "align": "left"},
                             cells={"values": list(zip(*rows, strict=True)), "align": "left"}))
    files = tuple(sorted({results.name(Path(c.where)) for c in results.scenarios}))
    return Section("reproduce", title, REPRODUCE_GUIDE,
                   finish(fig, height=40 + 28 * len(rows)), files)


def families_section(results: Results) -> Section:
    """|relative error| of the folder's scenarios by system (family) and over all of them."""
    title = "Seed systems: error by family (specscope reproduce)"
    if not results.scenarios:
        return Section("families", title, FAMILIES_GUIDE,
                       note="needs paper scenario TOMLs ([[case]] tables, examples/papers/)")
    summaries = summarise([Reproduced(case, predict_case(case)) for case in results.scenarios])
    rows = [(s.group, s.cases, f"{s.median:.1%}", f"{s.p90:.1%}", f"{s.worst:.1%}", s.lossy)
            for s in summaries]
    fig = go.Figure(go.Table(
        header={"values": ["family", "cases", "median |err|", "p90", "worst", "lossy"],
                "align": "left"},
        cells={"values": list(zip(*rows, strict=True)), "align": "left"}))
    files = tuple(sorted({results.name(Path(c.where)) for c in results.scenarios}))
    return Section("families", title, FAMILIES_GUIDE, finish(fig, height=40 + 28 * len(rows)),
                   files)


def systems_hardware_section(results: Results) -> Section:
    """Every scenario's predicted speedup on every hardware profile."""
    title = "Seed systems per hardware (each paper's setup on every profile)"
    if not results.scenarios:
        return Section("systems-hardware", title, HARDWARE_GUIDE,
                       note="needs paper scenario TOMLs ([[case]] tables, examples/papers/)")
    chosen = [hw for hw in map(load_profile, list_profiles())
              if hw.kind == "gpu" or any(c.hw == hw.name for c in results.scenarios)]
    labels = [hw.name for hw in chosen]
    z, text = [], []
    for hw in chosen:
        row, hover = [], []
        for case in results.scenarios:
            runtime = case.runtime if case.runtime in hw.runtimes else None
            try:
                p = predict_case(dataclasses.replace(case, hw=hw.name, runtime=runtime))
                row.append(p.speedup)
                hover.append(f"{p.speedup:.2f}×")
            except InputError as exc:
                row.append(None)
                hover.append(str(exc).split(": ")[-1])
        z.append(row)
        text.append(hover)
    names = [f"{c.name}<br>{c.system}" for c in results.scenarios]
    fig = go.Figure(go.Heatmap(z=z, x=names, y=labels, text=text, texttemplate="%{text}",
                               colorscale="RdYlGn", zmid=1.0,
                               colorbar={"title": {"text": "speedup"}},
                               hovertemplate="%{y} · %{x}: %{text}<extra></extra>"))
    files = tuple(sorted({results.name(Path(c.where)) for c in results.scenarios}))
    return Section("systems-hardware", title, HARDWARE_GUIDE,
                   finish(fig, height=60 + 34 * len(labels)), files)
