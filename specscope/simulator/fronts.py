"""The Pareto front of a deployment under load: goodput per GPU (tokens/s per GPU of the
requests that met the stated TTFT and TPOT limits; all tokens without limits) against tokens/s
per user, over a ladder of arrival rates, for each choice a run serves (`simulate --front`).

Every rate of the ladder (the run's `--rate` × each multiple) is simulated on its own arrivals
(the same seed); a speculative run brings plain decoding of the same arrivals, and a schedule
run its best constant too (`run.CHOICE_KEYS`). Each (choice, rate) is one point; a point is on
its choice's front and on the overall front when no point of the same set is at least as good
on both axes and better on one (`economics.pareto`). Raising the rate trades per-user speed
for per-GPU throughput, so most of a choice's points are on its own front; the overall front
says which choice to run at each trade-off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from specscope.errors import InputError
from specscope.simulator.economics import pareto
from specscope.simulator.run import SimulateRequest, run_simulation

FRONT_KEYS = ("throughput_tok_s", "goodput_tok_s", "tokens_per_s_per_gpu", "goodput_per_gpu",
              "tokens_per_s_per_user", "mean_tpot_ms", "mean_ttft_ms", "usd_per_million_tokens",
              "usd_per_million_good_tokens")
"""What each point of the front reports."""


def serving_front(req: SimulateRequest, multiples: Sequence[float],
                  progress: Callable[[int, int], None] | None = None,
                  base: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per (choice, rate) of `req` at `req.rate` × each of `multiples`: `FRONT_KEYS`,
    and whether the point is on its choice's front and on the overall one. `base`: the
    summary of `req` itself (multiple 1), when the caller has run it already."""
    if not multiples or any(not m > 0 for m in multiples):
        raise InputError(f"--front: rate multiples must be > 0, got {list(multiples)}")
    rows: list[dict[str, Any]] = []
    ladder = sorted(set(multiples))
    for i, multiple in enumerate(ladder):
        summary = base if multiple == 1 and base is not None else run_simulation(
            dataclasses.replace(req, rate=req.rate * multiple)).summary
        for choice, values in _choices(summary).items():
            rows.append({"choice": choice, "rate": req.rate * multiple,
                         **{k: values.get(k) for k in FRONT_KEYS}})
        if progress:
            progress(i + 1, len(ladder))
    points = [(r["goodput_per_gpu"], r["tokens_per_s_per_user"]) for r in rows]
    for row, overall in zip(rows, pareto(points), strict=True):
        row["on_front"] = overall
    for choice in {r["choice"] for r in rows}:
        mine = [r for r in rows if r["choice"] == choice]
        for row, own in zip(mine, pareto([(r["goodput_per_gpu"],
                                           r["tokens_per_s_per_user"]) for r in mine]),
                            strict=True):
            row["on_choice_front"] = own
    return rows


def _choices(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The runs a summary holds by choice: a schedule run's three, else the policy's own and
    plain decoding's where it was compared."""
    if "choices" in summary:
        return summary["choices"]
    out = {summary["policy"]: summary}
    if "plain" in summary:
        out["none"] = summary["plain"]
    return out
