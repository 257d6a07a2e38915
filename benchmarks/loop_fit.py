"""A speculative loop's host work per step, separated from its forwards and fitted to specscope's
`LoopCosts` terms (specscope/hw_profiles/loop.py): the pure parts of benchmarks/research_loops.py
(configurations and timed records, the least-squares fit per repeat, the tables) and its clocks
(`ForwardClock` around each forward, `layer_us` for a stack's decoder-layer issue time). Imports
neither specscope nor torch, so both of research_loops.py's environments run it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
from rich.table import Table

TERMS = {
    "EAGLE-2": ("step_us", "level_us", "node_us", "tree_node_us", "accepted_us"),
    "Medusa": ("step_us", "level_us", "tree_node_us", "accepted_us"),
    "HF assisted": ("step_us", "level_us", "accepted_us"),
}
"""Each loop's fitted terms, in the order of its records' regressors (`Record.x`: a
configuration's `Config.x`, then the tokens accepted per step as measured): step_us per step;
level_us per draft level (EAGLE: its depth + 1 draft forwards; Medusa: per head; HF: per drafted
token, as counted); node_us per further node a level forwards (EAGLE: depth × (top_k − 1));
tree_node_us per verified tree node (EAGLE's total_token, Medusa's tree size: the per-node Python
building the tree mask, position ids and retrieve indices); accepted_us per token accepted."""

AGREE = "agreeing"
"""A configuration whose LM head (and Medusa's heads' last layer) is zeroed: every logit ties, the
target always predicts token 0 and the drafts propose it, so drafted tokens are accepted (random
weights accept none); the forwards and the loop's operations are the same, the acceptance not."""


@dataclass(frozen=True)
class Config:
    """One configuration of a loop: its name, its regressors per step (`TERMS`' order, the
    accepted tokens left out: they are measured) and the arguments that build it."""

    loop: str
    name: str
    x: tuple[float, ...]
    args: dict


@dataclass(frozen=True)
class Record:
    """A configuration's timed run in one repeat: its regressors (`TERMS`), steps, mean tokens
    accepted per step (drafted tokens kept, the bonus token not counted) and the median seconds
    per step in forwards and host work."""

    loop: str
    config: str
    repeat: int
    x: tuple[float, ...]
    steps: int
    accepted: float
    forward_s: float
    host_s: float


# ---------------------------------------------------------------- fit and tables


def fit_terms(records: Sequence[Record], n_terms: int) -> tuple[np.ndarray, float]:
    """(terms in µs, RMS residual in µs) of host seconds per step ≈ x · terms, by least squares
    over `records` (one per configuration)."""
    x = np.array([r.x for r in records], dtype=float)
    y = np.array([r.host_s * 1e6 for r in records])
    if len(records) < n_terms or np.linalg.matrix_rank(x) < n_terms:
        raise ValueError(f"{len(records)} configurations of rank {np.linalg.matrix_rank(x)} "
                         f"cannot fit {n_terms} terms")
    terms, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = float(np.sqrt(np.mean((x @ terms - y) ** 2)))
    return terms, residual


@dataclass(frozen=True)
class Fit:
    """A loop's terms over repeats: median, min and max µs of each, median RMS residual (µs)."""

    loop: str
    names: tuple[str, ...]
    median: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    residual_us: float
    configs: int

    def predict_us(self, x: Sequence[float]) -> float:
        """Host µs per step the median terms give regressors `x`."""
        return float(np.dot(self.median, x))


def fit_repeats(records: Sequence[Record], loop: str) -> Fit:
    """`loop`'s terms fitted once per repeat over its configurations, summarised over repeats."""
    names = TERMS[loop]
    mine = [r for r in records if r.loop == loop]
    fits = [fit_terms([r for r in mine if r.repeat == k], len(names))
            for k in sorted({r.repeat for r in mine})]
    terms = np.array([t for t, _ in fits])
    return Fit(loop, names, tuple(np.median(terms, axis=0)), tuple(terms.min(axis=0)),
               tuple(terms.max(axis=0)), float(np.median([res for _, res in fits])),
               len({r.config for r in mine}))


def tables(records: Sequence[Record], layers_us: dict[str, float], reference_us: float,
           extras: dict[str, tuple[float, float, float]], title: str) -> list[Table]:
    """The terms table (each loop's fit, as ratios to its stack's layer µs `layers_us[loop]` and
    to specscope's layer `reference_us`, plus `extras`: "loop/term" → (median, low, high) µs
    measured outside the fit) and the per-configuration table."""
    fits = [fit_repeats(records, loop) for loop in TERMS if any(r.loop == loop for r in records)]
    terms = Table(title=title)
    for col in ("loop", "term", "µs median", "spread (min–max)", "× its layer",
                "× specscope layer", "n configs", "fit RMS µs"):
        terms.add_column(col, justify="left" if col in ("loop", "term") else "right")
    for fit in fits:
        layer = layers_us.get(fit.loop)
        for name, med, low, high in zip(fit.names, fit.median, fit.low, fit.high, strict=True):
            terms.add_row(fit.loop, name, f"{med:.1f}", f"{low:.1f}–{high:.1f}",
                          f"{med / layer:.2f}" if layer else "-", f"{med / reference_us:.2f}",
                          str(fit.configs), f"{fit.residual_us:.1f}")
    for key, (med, low, high) in extras.items():
        loop, name = key.split("/")
        layer = layers_us.get(loop)
        terms.add_row(loop, name, f"{med:.1f}", f"{low:.1f}–{high:.1f}",
                      f"{med / layer:.2f}" if layer else "-", f"{med / reference_us:.2f}", "-",
                      "-")
    per = Table(title="Per configuration (medians over repeats; predicted: the fit's median terms)")
    for col in ("loop", "configuration", "steps", "accepted/step", "forward ms/step",
                "host ms/step", "predicted host ms"):
        per.add_column(col, justify="left" if col in ("loop", "configuration") else "right")
    for fit in fits:
        mine = [r for r in records if r.loop == fit.loop]
        for config in dict.fromkeys(r.config for r in mine):
            rows = [r for r in mine if r.config == config]
            per.add_row(fit.loop, config, str(rows[0].steps),
                        f"{statistics.median(r.accepted for r in rows):.2f}",
                        f"{statistics.median(r.forward_s for r in rows) * 1e3:.3f}",
                        f"{statistics.median(r.host_s for r in rows) * 1e3:.3f}",
                        f"{fit.predict_us(rows[0].x) / 1e3:.3f}")
    return [terms, per]


# ---------------------------------------------------------------- timing


class ForwardClock:
    """Wraps module forwards with a perf_counter clock; `calls` holds (kind, start, end)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, float]] = []

    def wrap(self, module, kind: str) -> None:
        """Time every later call of `module`'s forward as `kind`."""
        inner = module.forward

        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = inner(*args, **kwargs)
            self.calls.append((kind, start, time.perf_counter()))
            return out

        module.forward = timed

    def steps(self, boundary: str = "target") -> tuple[int, float, float, dict[str, float]]:
        """(steps, median forward s per step, median host s per step, mean calls per step of
        each kind) over the intervals between successive `boundary` calls after the first two
        (the first: a prefill, or a step with the prompt); the last interval, which ends at no
        verification, is left out. Medians: a step the shared machine stalled does not count."""
        starts = [s for kind, s, _ in self.calls if kind == boundary]
        if len(starts) < 4:
            raise ValueError(f"{len(starts)} verifications: too few steps to time")
        forward, host = [], []
        for lo, hi in pairwise(starts[1:]):
            spent = sum(e - s for _, s, e in self.calls if lo <= s < hi)
            forward.append(spent)
            host.append(hi - lo - spent)
        inside = [kind for kind, s, _ in self.calls if starts[1] <= s < starts[-1]]
        steps = len(starts) - 2
        counts = {kind: inside.count(kind) / steps for kind in set(inside)}
        return steps, statistics.median(forward), statistics.median(host), counts


def layer_us(make_step: Callable[[int], Callable[[], None]], repeats: int) -> float:
    """Host µs per decoder layer: the slope of the fastest of `repeats` one-token steps over 2 and
    10 layers (benchmarks/engine_overheads.py's table 2)."""
    times = {}
    for layers in (2, 10):
        step = make_step(layers)
        for _ in range(3):
            step()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            step()
            best = min(best, time.perf_counter() - start)
        times[layers] = best
    return (times[10] - times[2]) / 8 * 1e6


def summary(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)
