"""`specscope reproduce`: each paper's scenario priced by its system, against what it published.

A case's prediction is its system's `Prediction`; its baseline is autoregressive decoding of the
same target, or (`baseline`) that target speculated by a head or a draft model at the case's
`baseline_tau` on the same tree. The relative error compares the predicted speedup with the
published one (or, for a case that published tokens/s, the predicted tokens/s).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specscope.errors import InputError
from specscope.hw_profiles import load_profile
from specscope.hw_profiles.deployment import engine_sources
from specscope.hw_profiles.engine import DEFAULT_ENGINE
from specscope.systems.case import (
    Case,
    case_from_table,
    check_tokens,
    read_case_tables,
    tree_tokens,
)
from specscope.systems.registry import SYSTEMS
from specscope.systems.step import Prediction, with_prefill


@dataclass(frozen=True)
class Reproduced:
    """One case, its prediction and the published figure it is compared with."""

    case: Case
    prediction: Prediction

    @property
    def predicted_speedup(self) -> float:
        return self.prediction.speedup

    @property
    def compared(self) -> str:
        """"speedup", or "tokens/s" for a case that published only a rate."""
        return "speedup" if self.case.published_speedup is not None else "tokens/s"

    @property
    def figures(self) -> tuple[float, float]:
        """(predicted, published) of what the paper published (`compared`)."""
        if self.case.published_speedup is not None:
            return self.predicted_speedup, self.case.published_speedup
        return self.prediction.tokens_per_s, self.case.published_tokens_per_s

    def shown(self, digits: int) -> tuple[str, str]:
        """(predicted, published) as text with their unit, `digits` after the point for a
        rate (speedups always 2)."""
        predicted, published = self.figures
        if self.compared == "speedup":
            return f"{predicted:.2f}×", f"{published:.2f}×"
        return f"{predicted:,.{digits}f} tok/s", f"{published:,.{digits}f} tok/s"

    @property
    def rel_err(self) -> float:
        """(predicted − published) / published, on what the paper published."""
        predicted, published = self.figures
        return predicted / published - 1.0

    @property
    def terms_ms(self) -> dict[str, float]:
        """The terms that carry the prediction, in ms: the target's verification ("target"),
        drafting, the loop's bookkeeping, every other phase together, and the baseline's time
        per token, so a miss can be traced to one of them."""
        parts = dict(self.prediction.parts)
        target = parts.pop("verify", 0.0) + parts.pop("target", 0.0)
        draft = parts.pop("draft", 0.0)
        book = parts.pop("bookkeeping", 0.0)
        return {"target": target * 1e3, "draft": draft * 1e3, "bookkeeping": book * 1e3,
                "other": sum(parts.values()) * 1e3,
                "baseline": self.prediction.baseline_s * 1e3}

    def to_dict(self) -> dict[str, Any]:
        """The `--json` record of this case."""
        case, p = self.case, self.prediction
        return {
            "name": case.name, "system": case.system, "hw": case.hw, "target": case.target,
            "engine": case.engine, "baseline_engine": case.baseline_engine,
            "draft": case.draft, "predicted_speedup": self.predicted_speedup,
            "published_speedup": case.published_speedup,
            "predicted_tokens_per_s": p.tokens_per_s,
            "published_tokens_per_s": case.published_tokens_per_s,
            "compared": self.compared, "rel_err": self.rel_err,
            "tokens_per_step": p.tokens_per_step, "step_ms": p.step_s * 1e3,
            "baseline": case.baseline, "baseline_ms_per_token": p.baseline_s * 1e3,
            "parts_ms": {k: v * 1e3 for k, v in p.parts.items()},
            "lossy": p.lossy, "setup": case.setup, "source": case.source,
            "assumptions": list(p.assumptions),
        }


def read_cases(path: str | Path) -> list[Case]:
    """Every case of a scenario TOML, or of every `*.toml` in a folder (sorted by name)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.toml"))
        if not files:
            raise InputError(f"{path}: no scenario files (*.toml)")
    elif path.is_file():
        files = [path]
    else:
        raise InputError(f"{path}: no such scenario file or folder")
    cases, names = [], set()
    for file in files:
        where = str(file)
        for table in read_case_tables(file):
            system = SYSTEMS.get(str(table.get("system")))
            if system is None:
                raise InputError(f"{where}: case {table.get('name')!r}: unknown system "
                                 f"{table.get('system')!r}; known: {', '.join(SYSTEMS)}")
            case = case_from_table(table, where, system.options)
            if case.name in names:
                raise case.fail("the name is used by another case")
            names.add(case.name)
            cases.append(case)
    return cases


ANCHOR_ROUNDS = 6
"""Fixed-point rounds solving τ from a batch-1 anchor: the step depends on τ only through the
loop's per-accepted-token bookkeeping and a timed prefill's share per token, both small against
the step, so the rounds converge at once."""


def timed(case: Case, prefill: tuple[float, float] | None = None) -> Prediction:
    """The system's prediction of `case`, with the batch's prefill when its source timed whole
    requests (`timed_prefill`): `prefill` where already priced (it does not depend on τ), else
    the system's `prefill_s`."""
    system = SYSTEMS[case.system]
    prediction = system.predict(case)
    if not case.timed_prefill:
        return prediction
    return with_prefill(prediction, case, *(prefill or system.prefill_s(case)))


def anchored(case: Case) -> Case:
    """The case with τ solved from its batch-1 `anchor_speedup` (a speedup is τ over the step
    time, times the baseline's time per token), or as it is without one. An anchor that needs
    τ below 1 (slower than this setup's speculation at τ = 1 can be) or above the most tokens a
    step yields (`System.most_tokens`) is an `InputError`: no τ reproduces it."""
    if case.anchor_speedup is None:
        return case
    one = dataclasses.replace(case, batch=1, tau_includes_bonus=True)
    prefill = SYSTEMS[case.system].prefill_s(one) if case.timed_prefill else None
    for _ in range(ANCHOR_ROUNDS):
        p = timed(one, prefill)
        needed = case.anchor_speedup * p.step_s / p.baseline_s
        one = dataclasses.replace(one, tau=max(1.0, needed))
    if needed < 1.0 - 1e-9:
        raise case.fail(f"the anchor speedup {case.anchor_speedup:g} needs τ = {needed:.3g}, "
                        f"less than the 1 token every step yields (at τ = 1 this setup "
                        f"already predicts {p.speedup:.2f}× at batch 1)")
    most = SYSTEMS[case.system].most_tokens(case)
    if most is not None and needed > most[0] + 1e-9:
        where = "the tree's" if case.tree else "the"
        raise case.fail(f"the anchor speedup {case.anchor_speedup:g} needs τ = {needed:.3g}, "
                        f"more than {where} {most[0]:g} tokens a step can give ({most[1]})")
    return dataclasses.replace(case, tau=one.tau, tau_includes_bonus=True)


def predict_case(case: Case) -> Prediction:
    """The case's prediction against its baseline; any bad input names the case."""
    try:
        check_tokens(case, case.tokens_per_step, SYSTEMS[case.system].most_tokens(case))
        if case.baseline != "autoregressive" and case.baseline_tau is not None:
            base_tokens = dataclasses.replace(case, tau=case.baseline_tau).tokens_per_step
            check_tokens(case, base_tokens, tree_tokens(case),
                         f"baseline_tau = {case.baseline_tau:g}")
        case = anchored(case)
        prediction = timed(case)
        if case.baseline == "autoregressive":
            return prediction
        base = dataclasses.replace(case, system=case.baseline, tau=case.baseline_tau,
                                   options={})
        per_token = timed(base).seconds_per_token
    except InputError as exc:
        message = str(exc)
        raise (exc if message.startswith(case.where) else case.fail(message)) from None
    return dataclasses.replace(prediction, baseline_s=per_token, assumptions=(
        *prediction.assumptions, f"baseline: {case.baseline} at τ = {case.baseline_tau:g}"))


def predict_cases(cases: list[Case], progress: Callable[[int, int], None] | None = None
                  ) -> list[Reproduced]:
    """Every case predicted, in order; `progress(done, total)` after each."""
    rows = []
    for case in cases:
        rows.append(Reproduced(case, predict_case(case)))
        if progress is not None:
            progress(len(rows), len(cases))
    return rows


def reproduce(path: str | Path) -> list[Reproduced]:
    """Every case under `path` (a TOML file or a folder of them), predicted."""
    return predict_cases(read_cases(path))


@dataclass(frozen=True)
class ErrorSummary:
    """|relative error| over a group of cases: count, median, p90 and worst, and how many
    are lossy."""

    group: str
    cases: int
    median: float
    p90: float
    worst: float
    lossy: int


def provenance(rows: list[Reproduced]) -> list[str]:
    """Where every engine and host parameter the cases priced comes from, one line each
    (engine key: source, or "assumed: …"; a profile's host and its speed)."""
    lines = []
    engines = sorted({n for r in rows for n in (r.case.engine or DEFAULT_ENGINE,
                                                 r.case.baseline_engine) if n})
    for name in engines:
        lines += [f"engine {name}: {key}: {text}" for key, text in engine_sources(name).items()]
    for hw in sorted({r.case.hw for r in rows}):
        profile = load_profile(hw)
        host = (f"{profile.host_cpu}, single-thread speed {profile.host_speed:g} "
                f"({profile.host_source})" if profile.host_source
                else "not stated: speed 1, the host its runtimes were measured on")
        lines.append(f"host of {hw}: {host}")
    return lines


def summarise(rows: list[Reproduced], by: str = "system") -> list[ErrorSummary]:
    """One summary per value of `by` ("system": the family; "engine": the stack the case ran,
    specscope when it names none), then one over every case ("all")."""
    def key(r: Reproduced) -> str:
        return r.case.system if by == "system" else r.case.engine or DEFAULT_ENGINE

    groups: dict[str, list[Reproduced]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    out = []
    for name, members in [*sorted(groups.items()), ("all", rows)]:
        errors = np.abs([r.rel_err for r in members])
        out.append(ErrorSummary(name, len(members), float(np.median(errors)),
                                float(np.percentile(errors, 90)), float(errors.max()),
                                sum(r.prediction.lossy for r in members)))
    return out
