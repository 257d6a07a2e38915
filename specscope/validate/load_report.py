"""What `specscope validate --load` reports: simulated against measured serving, cell by cell
(policy × arrival rate), the error summaries per metric, and whether the simulator ranks the
policies as the real runs do.

Relative error = (simulated − measured) / measured, signed in the cells; the summaries take
its absolute value. Ranking: the policies ordered by throughput (highest first) at the highest
rate and by mean TPOT (lowest first) at the lowest rate, simulated against measured
(`RANKINGS`); each metric's summary also says whether its own ordering agrees at both ends of
the ladder. Two policies whose real runs do not separate them (their means differ by no more
than their repeats' half-ranges together: a cell's `spread`) are tied, and the simulation may
order a tied pair either way; it agrees when it orders every pair the real runs separate as they
do. With one real run per cell nothing is tied.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
from rich.table import Table

from specscope.atomic import write_atomic
from specscope.validate.report import _pct, error_summary

LOAD_PARQUET = "validate_load.parquet"
"""File `validate --load -o DIR` writes: one row per cell."""
METRICS = {
    "throughput": ("throughput_tok_s", True),
    "mean_tpot": ("mean_tpot_ms", False),
    "p99_ttft": ("p99_ttft_ms", False),
    "p99_latency": ("p99_latency_s", False),
}
"""Compared metrics: the summary key (`simulator/metrics.py`) and whether higher is better."""
RANKINGS = (("throughput", "highest"), ("mean_tpot", "lowest"))
"""The ranking checks: by throughput at the highest rate, by mean TPOT at the lowest."""


def cell(policy: str, rate: float, fraction: float, drift: float | None,
         simulated: dict[str, Any], measured: dict[str, Any],
         spread: dict[str, float] | None = None) -> dict[str, Any]:
    """One policy × rate: the compared metrics simulated and measured (the mean of the real
    runs; `spread`, each metric's half-range over them, 0 where absent), and their signed
    relative errors (`err_<metric>`)."""
    keys = [key for key, _ in METRICS.values()] + ["mean_batch", "mean_accepted"]
    spread = spread or {}
    out: dict[str, Any] = {"policy": policy, "rate": rate, "rate_fraction": fraction,
                           "drift": drift,
                           "simulated": {k: simulated.get(k) for k in keys},
                           "measured": {k: measured.get(k) for k in keys},
                           "spread": {k: float(spread.get(k, 0.0)) for k, _ in METRICS.values()}}
    for name, (key, _) in METRICS.items():
        s, m = simulated.get(key), measured.get(key)
        out[f"err_{name}"] = None if s is None or not m else (s - m) / m
    return out


def _row(cells: Sequence[dict[str, Any]], metric: str, at: str, side: str
         ) -> list[dict[str, Any]]:
    """The cells at the `at` ("lowest"/"highest") rate with a `side` value of `metric`, best
    first by it."""
    rates = sorted({c["rate"] for c in cells})
    rate = rates[0] if at == "lowest" else rates[-1]
    key, higher = METRICS[metric]
    row = [c for c in cells if c["rate"] == rate and c[side][key] is not None]
    return sorted(row, key=lambda c: c[side][key], reverse=higher)


def ranking(cells: Sequence[dict[str, Any]], metric: str, at: str, side: str) -> list[str]:
    """Policies at the `at` ("lowest"/"highest") rate, best first by `metric` on `side`
    ("simulated"/"measured")."""
    return [c["policy"] for c in _row(cells, metric, at, side)]


def _tied(a: dict[str, Any], b: dict[str, Any], key: str) -> bool:
    """Whether the real runs leave the two cells' `key` unseparated (module docstring)."""
    spread = a.get("spread", {}).get(key, 0.0) + b.get("spread", {}).get(key, 0.0)
    return abs(a["measured"][key] - b["measured"][key]) <= spread


def measured_ranking(cells: Sequence[dict[str, Any]], metric: str, at: str) -> str:
    """The measured ranking as text, neighbours the real runs do not separate joined by ≈."""
    key = METRICS[metric][0]
    row = _row(cells, metric, at, "measured")
    if not row:
        return ""
    text = row[0]["policy"]
    for a, b in itertools.pairwise(row):
        text += f" {'≈' if _tied(a, b, key) else '>'} {b['policy']}"
    return text


def agrees(cells: Sequence[dict[str, Any]], metric: str, at: str) -> bool:
    """Whether the simulation orders every pair of policies the real runs separate by `metric`
    at `at` as the real runs do (tied pairs either way; module docstring)."""
    key, higher = METRICS[metric]
    row = _row(cells, metric, at, "measured")
    if {c["policy"] for c in row} != set(ranking(cells, metric, at, "simulated")):
        return False
    for a, b in itertools.combinations(row, 2):  # a is measured better than (or as good as) b
        if _tied(a, b, key):
            continue
        sa, sb = a["simulated"][key], b["simulated"][key]
        if (sa < sb) if higher else (sa > sb):
            return False
    return True


def summary(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per metric: median, p90 and max |relative error| over the cells and whether its ranking
    agrees at both ends; the ranking checks (`RANKINGS`) and `ranking_agrees`, all of them."""
    out: dict[str, Any] = {}
    for name in METRICS:
        errors = [abs(c[f"err_{name}"]) for c in cells if c[f"err_{name}"] is not None]
        out[name] = {**error_summary(errors),
                     "ranking_agrees": all(agrees(cells, name, at)
                                           for at in ("lowest", "highest"))}
    checks = [{"metric": metric, "rate": at,
               "simulated": ranking(cells, metric, at, "simulated"),
               "measured": ranking(cells, metric, at, "measured"),
               "measured_ties": measured_ranking(cells, metric, at),
               "agrees": agrees(cells, metric, at)} for metric, at in RANKINGS]
    out["rankings"] = checks
    out["ranking_agrees"] = all(c["agrees"] for c in checks)
    return out


def frame(cells: Sequence[dict[str, Any]]) -> pl.DataFrame:
    """One row per cell, nested values flattened (`sim_<key>`, `real_<key>`)."""
    rows = []
    for c in cells:
        row = {k: v for k, v in c.items() if k not in ("simulated", "measured")}
        row |= {f"sim_{k}": v for k, v in c["simulated"].items()}
        row |= {f"real_{k}": v for k, v in c["measured"].items()}
        rows.append(row)
    return pl.DataFrame(rows)


def write_cells(cells: Sequence[dict[str, Any]], folder: Path) -> Path:
    """`LOAD_PARQUET` in `folder`, written atomically."""
    table = frame(cells)
    return write_atomic(Path(folder) / LOAD_PARQUET, lambda tmp: table.write_parquet(tmp))


def cell_table(doc: dict[str, Any]) -> Table:
    """Every cell: simulated / measured and the signed error of each metric."""
    table = Table(title=f"validate --load {doc['model']} on {doc['hardware']} ({doc['drafter']}"
                        f", max batch {doc['max_batch']}, {doc['requests']} requests × "
                        f"{doc['output_len']} tokens per cell{_saturation(doc)})")
    for column in ("policy", "rate", "drift"):
        table.add_column(column, justify="right")
    for name in METRICS:
        table.add_column(f"{name} sim / real", justify="right")
        table.add_column("err", justify="right")
    for c in doc["cells"]:
        row = [c["policy"], f"{c['rate']:.2f} ({c['rate_fraction']:.2g}×)",
               "–" if c["drift"] is None else f"{c['drift']:.2f}"]
        for name, (key, _) in METRICS.items():
            s, m, e = c["simulated"][key], c["measured"][key], c[f"err_{name}"]
            row += [f"{_fmt(s)} / {_fmt(m)}", "–" if e is None else f"{e:+.1%}"]
        table.add_row(*row)
    return table


def summary_table(doc: dict[str, Any]) -> Table:
    """Median, p90 and max |relative error| per metric, and the ranking checks."""
    table = Table(title="simulated against measured under load: |relative error|")
    for column in ("metric", "median", "p90", "max", "cells", "ranking agrees"):
        table.add_column(column, justify="right")
    for name in METRICS:
        m = doc[name]
        table.add_row(name, _pct(m["median_rel_err"]), _pct(m["p90_rel_err"]),
                      _pct(m["max_rel_err"]), str(m["count"]), str(m["ranking_agrees"]))
    return table


def ranking_lines(doc: dict[str, Any]) -> list[str]:
    """One line per ranking check."""
    return [f"ranking by {r['metric']} at the {r['rate']} rate: simulated "
            f"{' > '.join(r['simulated'])}, measured "
            f"{r.get('measured_ties') or ' > '.join(r['measured'])} "
            f"({'agrees' if r['agrees'] else 'differs'})" for r in doc["rankings"]]


def _saturation(doc: dict[str, Any]) -> str:
    rate = doc["saturation_rate"]
    return "" if rate is None else f"; saturation {rate:.2f} req/s"


def _fmt(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"

