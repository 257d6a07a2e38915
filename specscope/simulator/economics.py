"""What a served configuration yields per GPU and per user, and what its tokens cost.

From a simulation's summary:

- `gpus`: the devices the deployment holds, tp × stages per replica, plus the draft model's own
  `draft_tp` when it runs on separate devices (`--draft-placement separate`), × replicas;
- tokens/s per GPU: throughput over `gpus` (the operator's axis);
- tokens/s per user: 1 / mean TPOT, one request's decoding speed (the user's axis);
- cost per million output tokens: `gpus` × the price of a GPU-hour over the throughput (and
  over the goodput: only the tokens of requests that met the stated TTFT and TPOT limits).

A Pareto front over configurations or rates keeps the points no other point beats on both
axes at once (`pareto`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def gpus(summary: Mapping[str, Any], stages: int = 1) -> int:
    """Devices the simulated deployment holds (module docstring)."""
    per_replica = summary["tp"] * stages
    if summary.get("draft_placement") == "separate" and summary.get("draft_tp"):
        per_replica += summary["draft_tp"]
    return per_replica * summary["replicas"]


def economics(summary: Mapping[str, Any], devices: int, gpu_hour_usd: float | None
              ) -> dict[str, Any]:
    """Per-GPU and per-user rates and, with `gpu_hour_usd`, the cost per million output tokens
    (of all, and of good, tokens) of a summary on `devices` GPUs."""
    throughput, goodput = summary["throughput_tok_s"], summary["goodput_tok_s"]
    tpot = summary.get("mean_tpot_ms")
    out: dict[str, Any] = {
        "gpus": devices,
        "tokens_per_s_per_gpu": None if throughput is None else throughput / devices,
        "goodput_per_gpu": None if goodput is None else goodput / devices,
        "tokens_per_s_per_user": None if not tpot else 1e3 / tpot,
        "gpu_hour_usd": gpu_hour_usd,
    }
    for key, rate in (("usd_per_million_tokens", throughput),
                      ("usd_per_million_good_tokens", goodput)):
        out[key] = (None if gpu_hour_usd is None or not rate
                    else devices * gpu_hour_usd / 3600 / rate * 1e6)
    return out


def pareto(points: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """For each (per GPU, per user) point, whether no other point is at least as good on both
    and better on one (a point missing either is off the front)."""
    def beats(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] >= b[0] and a[1] >= b[1] and a != b

    whole = [p for p in points if p[0] is not None and p[1] is not None]
    return [p[0] is not None and p[1] is not None and not any(beats(q, p) for q in whole)
            for p in points]
