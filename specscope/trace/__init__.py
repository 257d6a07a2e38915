"""Traces: what the target and each drafter did at every generated position, and what follows.

- `schema`: the schema-v1 `Trace`, parquet read/write, validation.
- `acceptance`: `AcceptanceModel`, positional acceptance vectors with confidence intervals.
- `replay`: exact replay of static draft trees (tokens per verification step).
- `synth`: synthetic traces with tunable, known behaviour.
- `sources`: sources and the drafters priced for them (`--source`, `--drafter`).
"""

from specscope.trace.acceptance import AcceptanceModel
from specscope.trace.replay import ReplayResult, accepted_lengths, replay
from specscope.trace.schema import (
    SCHEMA,
    SCHEMA_VERSION,
    Trace,
    read_trace,
    sequence_sources,
    trace_sources,
    validate,
    write_trace,
)
from specscope.trace.sources import (
    Drafting,
    default_source,
    draft_model,
    drafting,
    resolve_source,
    source_of,
)
from specscope.trace.synth import RankedBehaviour, SequenceBehaviour, synth_trace

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "AcceptanceModel",
    "Drafting",
    "RankedBehaviour",
    "ReplayResult",
    "SequenceBehaviour",
    "Trace",
    "accepted_lengths",
    "default_source",
    "draft_model",
    "drafting",
    "read_trace",
    "replay",
    "resolve_source",
    "sequence_sources",
    "source_of",
    "synth_trace",
    "trace_sources",
    "validate",
    "write_trace",
]
