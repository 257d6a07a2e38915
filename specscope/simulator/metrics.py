"""What a simulation measured: per-request latencies, the summary, the time series.

Per request (sequence): TTFT = first token − start (its arrival, or its parent's finish for a
forked sequence), end-to-end latency = finish − start, TPOT = (latency − TTFT) / (tokens − 1)
(undefined for one token), tokens, decoding steps and accepted drafts per step (the drafts it
kept: tokens − steps over steps).

Summary: throughput = generated tokens / makespan (first arrival to last finish); goodput =
tokens of the requests whose TPOT met `slo_tpot_ms` (a one-token request meets any TPOT limit)
and whose TTFT met `slo_ttft_ms`, over the same makespan, equal to the throughput without
limits; mean and p50/p90/p99 of TTFT, TPOT
and latency; accepted drafts per step over all steps; batch size and KV memory in use per step
(the time series, from the event log's step starts). Times are seconds inside, ms in the
summary's `_ms` fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from specscope.atomic import write_atomic, write_parquet_atomic
from specscope.json_out import strict_json
from specscope.simulator.entities import Request

QUANTILES = (0.5, 0.9, 0.99)


def request_table(requests: list[Request]) -> pl.DataFrame:
    """One row per sequence: ids, lengths (requested `output_len`, generated `tokens`),
    timestamps (s) and the derived latencies."""
    df = pl.DataFrame({
        "request": [r.id for r in requests],
        "group": [r.group.id for r in requests],
        "level": [r.level for r in requests],
        "replica": [r.group.replica for r in requests],
        "trace_request": [r.trace_row for r in requests],
        "prompt_len": [r.prompt_len for r in requests],
        "output_len": [r.output_len for r in requests],
        "tokens": [r.generated for r in requests],
        "steps": [r.steps for r in requests],
        "accepted": [r.accepted for r in requests],
        "start_s": [r.start_s for r in requests],
        "admitted_s": [r.admitted_s for r in requests],
        "prefill_done_s": [r.prefill_done_s for r in requests],
        "first_token_s": [r.first_token_s for r in requests],
        "finish_s": [r.finish_s for r in requests],
    }, schema_overrides={"trace_request": pl.Int64})
    return df.with_columns(
        ttft_s=pl.col("first_token_s") - pl.col("start_s"),
        latency_s=pl.col("finish_s") - pl.col("start_s"),
        tpot_s=pl.when(pl.col("tokens") > 1).then(
            (pl.col("finish_s") - pl.col("first_token_s")) / (pl.col("tokens") - 1)),
        mean_accepted=pl.col("accepted") / pl.col("steps"),
    )


def time_series(events: pl.DataFrame, capacity: float) -> pl.DataFrame:
    """Batch size and KV memory in use (bytes, and the fraction of the capacity) at every
    step's start, per replica."""
    return (events.filter(pl.col("event") == "step_start")
            .select("time_s", "replica", "batch", "kv_bytes")
            .with_columns(kv_occupancy=pl.col("kv_bytes") / capacity))


def summarise(requests: pl.DataFrame, series: pl.DataFrame, slo_tpot_ms: float | None,
              slo_ttft_ms: float | None = None) -> dict[str, Any]:
    """The summary (module docstring) as JSON-ready numbers; goodput counts the requests that
    met every stated limit (TPOT, TTFT)."""
    tokens = int(requests.get_column("tokens").sum())
    makespan = float(requests.get_column("finish_s").max() - requests.get_column("start_s").min())
    good = requests
    if slo_tpot_ms is not None:
        good = good.filter(pl.col("tpot_s").is_null()
                           | (pl.col("tpot_s") * 1e3 <= slo_tpot_ms))
    if slo_ttft_ms is not None:
        good = good.filter(pl.col("ttft_s") * 1e3 <= slo_ttft_ms)
    out: dict[str, Any] = {
        "requests": requests.height,
        "generated_tokens": tokens,
        "makespan_s": makespan,
        "throughput_tok_s": tokens / makespan if makespan > 0 else None,
        "goodput_tok_s": int(good.get_column("tokens").sum()) / makespan if makespan > 0
        else None,
        "slo_tpot_ms": slo_tpot_ms,
        "slo_ttft_ms": slo_ttft_ms,
        "slo_met": good.height / requests.height,
        "steps": int(requests.get_column("steps").sum()),
        "mean_accepted": float(requests.get_column("accepted").sum()
                               / requests.get_column("steps").sum()),
    }
    for name, column, scale, unit in (("ttft", "ttft_s", 1e3, "ms"), ("tpot", "tpot_s", 1e3, "ms"),
                                      ("latency", "latency_s", 1.0, "s")):
        values = requests.get_column(column).drop_nulls()
        out[f"mean_{name}_{unit}"] = _number(values.mean(), scale)
        for q in QUANTILES:
            out[f"p{round(q * 100)}_{name}_{unit}"] = _number(values.quantile(q, "linear"), scale)
    batch = series.get_column("batch")
    out |= {
        "mean_batch": _number(batch.mean()),
        "peak_batch": int(batch.max()) if batch.len() else 0,
        "peak_kv_bytes": _number(series.get_column("kv_bytes").max()),
        "peak_kv_occupancy": _number(series.get_column("kv_occupancy").max()),
    }
    return out


def _number(x: object, scale: float = 1.0) -> float | None:
    return None if x is None else float(x) * scale


def beside_paths(path: Path) -> list[Path]:
    """The time series and event log files written beside the per-request table `path`."""
    return [path.with_name(f"{path.stem}.{name}.parquet") for name in ("timeseries", "events")]


def write_metrics(path: str | Path, requests: pl.DataFrame, summary: dict[str, Any],
                  series: pl.DataFrame, events: pl.DataFrame) -> list[Path]:
    """Write the per-request table to `path` (parquet, the summary as JSON in its key-value
    metadata under `summary`), the time series and the event log beside it
    (`<stem>.timeseries.parquet`, `<stem>.events.parquet`), each atomically; the paths."""
    path = Path(path)
    meta = {"summary": strict_json(summary, None)}
    beside = list(zip(beside_paths(path), (series, events), strict=True))
    out = [write_atomic(p, lambda tmp, t=table: t.write_parquet(tmp)) for p, table in beside]
    return [write_parquet_atomic(path, requests, meta), *out]
