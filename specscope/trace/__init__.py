"""Traces: what the target and each drafter did at every generated position, and what follows.

- `schema`: the schema-v1 `Trace`, parquet read/write, validation.
- `acceptance`: `AcceptanceModel`, positional acceptance vectors with confidence intervals.
- `replay`: exact replay of static draft trees (tokens per verification step).
- `synth`: synthetic traces with tunable, known behaviour.
"""

from specscope.trace.acceptance import AcceptanceModel
from specscope.trace.replay import ReplayResult, accepted_lengths, replay
from specscope.trace.schema import (
    SCHEMA,
    SCHEMA_VERSION,
    Trace,
    default_source,
    read_trace,
    resolve_source,
    sequence_sources,
    trace_sources,
    validate,
    write_trace,
)
from specscope.trace.synth import RankedBehaviour, SequenceBehaviour, synth_trace

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "AcceptanceModel",
    "RankedBehaviour",
    "ReplayResult",
    "SequenceBehaviour",
    "Trace",
    "accepted_lengths",
    "default_source",
    "read_trace",
    "replay",
    "resolve_source",
    "sequence_sources",
    "synth_trace",
    "trace_sources",
    "validate",
    "write_trace",
]
