"""What `specscope validate` reports: per-configuration predictions against measurements, the
error summaries, which component carries each miss, and the recommendation.

Relative error = |predicted − measured| / measured. The miss of a configuration's tokens/s
splits exactly into its tokens/step miss and its step-time miss (log tokens/s = log tokens/step
− log step time): the larger names the carrier, "acceptance model" for tokens/step, else the
step phase whose predicted seconds are furthest from the measured ones: "cost model" (target
verification), "drafter overhead" (drafting: draft-model levels or model-free proposal calls),
"bookkeeping" (commit and drafter updates).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from rich import box
from rich.table import Table

from specscope.atomic import write_atomic
from specscope.optimizers.specdecpp import ThresholdPolicy
from specscope.tree import Tree
from specscope.validate.grid import BATCH_NOTE, Config

PARQUET_NAME = "validate.parquet"
"""File `-o DIR` writes: one row per configuration."""
PHASES = {"verify": "cost model", "draft": "drafter overhead", "bookkeeping": "bookkeeping"}
"""Step phases and the component each one's miss is charged to."""


@dataclass(frozen=True)
class Prediction:
    """A configuration predicted from the calibration half (seconds per step).

    tree: the tree the executor runs (static methods) or the method's tree on the trace; size:
    mean tokens per verification; policy: SpecDec++'s stop rule, run as predicted.
    """

    tree: Tree
    tokens_per_step: float
    draft_s: float
    verify_s: float
    bookkeeping_s: float
    size: float
    policy: ThresholdPolicy | None = None

    @property
    def step_s(self) -> float:
        """Seconds of one speculative step."""
        return self.draft_s + self.verify_s + self.bookkeeping_s

    @property
    def tokens_per_s(self) -> float:
        """Predicted tokens per second."""
        return self.tokens_per_step / self.step_s


@dataclass(frozen=True)
class Measured:
    """The executor's fastest pass over the held-out half (phase seconds summed over steps)."""

    steps: int
    tokens: int
    draft_s: float
    verify_s: float
    bookkeeping_s: float
    mean_tree_size: float
    accepted: list[list[int]]

    @property
    def decode_s(self) -> float:
        """Seconds decoding (prefill excluded)."""
        return self.draft_s + self.verify_s + self.bookkeeping_s


@dataclass(frozen=True)
class Fidelity:
    """The held-out half's own trace replayed: its tokens/step, and whether every step's
    accepted length equals the real run's."""

    tokens_per_step: float
    exact: bool


@dataclass(frozen=True)
class Outcome:
    """One configuration: predicted, measured and (greedy static trees) replayed."""

    config: Config
    predicted: Prediction
    measured: Measured
    fidelity: Fidelity | None = None

    @property
    def measured_tokens_per_step(self) -> float:
        """Generated tokens per verification step."""
        return self.measured.tokens / self.measured.steps

    @property
    def measured_tokens_per_s(self) -> float:
        """Generated tokens per second of decoding."""
        return self.measured.tokens / self.measured.decode_s

    @property
    def predicted_tokens_per_s(self) -> float:
        """Predicted tokens per second."""
        return self.predicted.tokens_per_s

    def phase_s(self, phase: str) -> tuple[float, float]:
        """(predicted, measured) seconds per step of `phase` (draft, verify, bookkeeping)."""
        return (getattr(self.predicted, f"{phase}_s"),
                getattr(self.measured, f"{phase}_s") / self.measured.steps)

    @property
    def miss(self) -> str:
        """The component carrying most of the tokens/s miss (module docstring)."""
        accept = abs(np.log(self.predicted.tokens_per_step / self.measured_tokens_per_step))
        step = abs(np.log(self.predicted.step_s * self.measured.steps / self.measured.decode_s))
        if accept >= step:
            return "acceptance model"
        phase = max(PHASES, key=lambda p: abs(np.subtract(*self.phase_s(p))))
        return PHASES[phase]

    def record(self) -> dict[str, Any]:
        """The flat row of the JSON `configs` list and the parquet table (times in ms)."""
        c, p, m = self.config, self.predicted, self.measured
        row: dict[str, Any] = {
            "config": c.label, "method": c.method, "drafter": c.drafter, "budget": c.budget,
            "temperature": c.temperature, "batch": c.batch,
            "predicted_tree_size": p.size, "measured_tree_size": m.mean_tree_size,
            "steps": m.steps, "tokens": m.tokens,
            "predicted_tokens_per_step": p.tokens_per_step,
            "measured_tokens_per_step": self.measured_tokens_per_step,
            "predicted_step_ms": 1e3 * p.step_s,
            "measured_step_ms": 1e3 * m.decode_s / m.steps,
            "predicted_tokens_per_s": self.predicted_tokens_per_s,
            "measured_tokens_per_s": self.measured_tokens_per_s,
        }
        for phase in PHASES:
            pred, meas = self.phase_s(phase)
            row |= {f"predicted_{phase}_ms": 1e3 * pred, f"measured_{phase}_ms": 1e3 * meas}
        for name in ("tokens_per_step", "tokens_per_s"):
            row[f"{name}_rel_err"] = rel_err(row[f"predicted_{name}"], row[f"measured_{name}"])
        row["step_time_rel_err"] = rel_err(row["predicted_step_ms"], row["measured_step_ms"])
        row["miss"] = self.miss
        f = self.fidelity
        row |= {
            "replay_tokens_per_step": None if f is None else f.tokens_per_step,
            "replay_rel_err": None if f is None else rel_err(f.tokens_per_step,
                                                             self.measured_tokens_per_step),
            "replay_exact": None if f is None else f.exact,
        }
        return row


def rel_err(predicted: float, measured: float) -> float:
    """|predicted − measured| / measured."""
    return abs(predicted - measured) / measured


def error_summary(errors: list[float]) -> dict[str, float | int | None]:
    """Median, 90th percentile and maximum of relative errors, and how many (None when none)."""
    if not errors:
        return {"median_rel_err": None, "p90_rel_err": None, "max_rel_err": None, "count": 0}
    e = np.asarray(errors, dtype=float)
    return {"median_rel_err": float(np.median(e)), "p90_rel_err": float(np.percentile(e, 90)),
            "max_rel_err": float(e.max()), "count": int(e.size)}


@dataclass(frozen=True)
class Validation:
    """A whole `validate` run: what ran where, one outcome per configuration, seconds spent
    compiling (setup_s) and in all (wall_s); host_costs: whether the profile carries measured
    drafter and bookkeeping host costs; machine_drift: see `compare.machine_drift`."""

    hardware: str
    model: str
    draft_model: str
    runtime: dict[str, str]
    threads: int
    prompts: str
    calibration_prompts: int
    held_out_prompts: int
    max_new: int
    passes: int
    outcomes: list[Outcome]
    setup_s: float
    wall_s: float
    host_costs: bool
    machine_drift: float | None = None
    """This machine's step time now over the profile's for the same shapes (None: not known)."""
    notes: list[str] = field(default_factory=lambda: [BATCH_NOTE])
    threads_reason: str = ""
    """Why `threads` (`Threads.reason`: --threads, the profile's, the small-model default)."""

    def records(self) -> list[dict[str, Any]]:
        """One flat row per configuration."""
        return [o.record() for o in self.outcomes]

    def frame(self) -> pl.DataFrame:
        """The per-configuration table (the parquet of `-o`)."""
        return pl.DataFrame(self.records(), infer_schema_length=None)

    def recommendation(self) -> dict[str, Any]:
        """The configuration predicted fastest and how the measured runs rank it."""
        rows = self.records()
        pick = max(rows, key=lambda r: r["predicted_tokens_per_s"])
        measured = sorted((r["measured_tokens_per_s"] for r in rows), reverse=True)
        return {
            "config": pick["config"],
            "predicted_tokens_per_s": pick["predicted_tokens_per_s"],
            "measured_tokens_per_s": pick["measured_tokens_per_s"],
            "measured_best_tokens_per_s": measured[0],
            "measured_best_config": max(rows, key=lambda r: r["measured_tokens_per_s"])["config"],
            "measured_rank": measured.index(pick["measured_tokens_per_s"]) + 1,
            "of": len(rows),
            "within_best": pick["measured_tokens_per_s"] / measured[0],
        }

    def to_dict(self) -> dict[str, Any]:
        """The `--json` document."""
        rows = self.records()
        replayed = [r for r in rows if r["replay_rel_err"] is not None]
        doc: dict[str, Any] = {
            "hardware": self.hardware, "model": self.model, "draft_model": self.draft_model,
            **self.runtime, "threads": self.threads, "threads_reason": self.threads_reason,
            "prompts": self.prompts,
            "calibration_prompts": self.calibration_prompts,
            "held_out_prompts": self.held_out_prompts, "max_new": self.max_new,
            "passes": self.passes, "setup_s": self.setup_s, "wall_s": self.wall_s,
            "profile_host_costs": self.host_costs, "machine_drift": self.machine_drift,
            "notes": self.notes, "configs": rows,
        }
        for name in ("tokens_per_step", "step_time", "tokens_per_s"):
            doc[name] = error_summary([r[f"{name}_rel_err"] for r in rows])
        doc["phases"] = {
            phase: error_summary([rel_err(r[f"predicted_{phase}_ms"], r[f"measured_{phase}_ms"])
                                  for r in rows if r[f"measured_{phase}_ms"] > 0])
            for phase in PHASES
        }
        doc["misses"] = {c: sum(r["miss"] == c for r in rows)
                         for c in ("acceptance model", *PHASES.values())}
        doc["replay_fidelity"] = error_summary([r["replay_rel_err"] for r in replayed]) | {
            "exact": sum(bool(r["replay_exact"]) for r in replayed)}
        doc["recommendation"] = self.recommendation()
        return doc


def write_table(validation: Validation, folder: Path) -> Path:
    """Write the per-configuration table to `folder`/validate.parquet, atomically."""
    frame = validation.frame()
    return write_atomic(Path(folder) / PARQUET_NAME, lambda tmp: frame.write_parquet(tmp))


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def config_table(doc: dict[str, Any]) -> Table:
    """Per configuration: predicted against measured tokens/step, step time and tokens/s (fits
    80 columns; `miss_table` says how far off and why)."""
    table = Table(title=f"validate {doc['model']} on {doc['hardware']} ({doc['runtime']}, "
                        f"{doc['device']}): {doc['held_out_prompts']} held-out prompts × "
                        f"{doc['max_new']} tokens", box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="τ: tokens per step · pred: predicted from the calibration half · "
                          "meas: measured on the held-out half")
    table.add_column("config", no_wrap=True)
    for col in ("τ", "step ms", "tok/s"):
        for which in ("pred", "meas"):
            table.add_column(f"{col}\n{which}", justify="right", no_wrap=True)
    for r in doc["configs"]:
        table.add_row(
            r["config"], f"{r['predicted_tokens_per_step']:.2f}",
            f"{r['measured_tokens_per_step']:.2f}", _ms(r["predicted_step_ms"]),
            _ms(r["measured_step_ms"]), f"{r['predicted_tokens_per_s']:.0f}",
            f"{r['measured_tokens_per_s']:.0f}")
    return table


def _ms(x: float) -> str:
    """Milliseconds to 3 or more significant figures, at most 2 decimals."""
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def miss_table(doc: dict[str, Any]) -> Table:
    """Per configuration: the tokens/s error, the component carrying the miss and the greedy
    replay check."""
    table = Table(title="miss per configuration", box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="replay: the held-out half's own greedy trace replayed, exact when "
                          "every step's accepted length matches the run's; its error in %")
    table.add_column("config", no_wrap=True)
    table.add_column("tok/s err %", justify="right", no_wrap=True)
    table.add_column("miss carried by", no_wrap=True)
    table.add_column("replay", no_wrap=True)
    for r in doc["configs"]:
        replay = "–" if r["replay_exact"] is None else (
            f"{'exact' if r['replay_exact'] else 'differs'} {_pct(r['replay_rel_err'])}%")
        table.add_row(r["config"], _pct(r["tokens_per_s_rel_err"]), r["miss"], replay)
    return table


def summary_table(doc: dict[str, Any]) -> Table:
    """Median, p90 and max relative error (%) of each predicted quantity and step phase."""
    table = Table(title="relative error on held-out prompts (%)")
    for col in ("quantity", "median", "p90", "max", "configs"):
        table.add_column(col, justify="left" if col == "quantity" else "right")
    rows = [(name, doc[name]) for name in ("tokens_per_step", "step_time", "tokens_per_s")]
    rows += [(f"{phase} time", s) for phase, s in doc["phases"].items()]
    rows.append(("replay fidelity (greedy)", doc["replay_fidelity"]))
    for name, s in rows:
        table.add_row(name, _pct(s["median_rel_err"]), _pct(s["p90_rel_err"]),
                      _pct(s["max_rel_err"]), str(s["count"]))
    return table


def drift_line(doc: dict[str, Any]) -> str | None:
    """One sentence on how fast the machine ran against its profile, or None when unknown."""
    drift = doc.get("machine_drift")
    if drift is None:
        return None
    return (f"machine drift: the profile's own {doc['model']} steps take {drift:.2f}× the time "
            f"they did when profiled" + (" (part of every step-time miss is the machine)"
                                          if abs(drift - 1) > 0.1 else ""))


def recommendation_line(doc: dict[str, Any]) -> str:
    """One sentence: the predicted best configuration and its measured rank."""
    r = doc["recommendation"]
    return (f"recommended: {r['config']} (predicted {r['predicted_tokens_per_s']:.0f} tokens/s); "
            f"measured {r['measured_tokens_per_s']:.0f} tokens/s, rank {r['measured_rank']} of "
            f"{r['of']}, {100 * r['within_best']:.1f}% of the measured best "
            f"({r['measured_best_config']}, {r['measured_best_tokens_per_s']:.0f} tokens/s)")
