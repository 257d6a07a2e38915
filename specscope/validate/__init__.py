"""Real torch runs: drafters, verification rules, the speculative executor, trace collection.

- `targets`: one interface (`Model`) over Transformer, Mamba-2 and Hugging Face models.
- `drafters`: draft model, prompt lookup, suffix decoding, token recycling, Goose.
- `verify`: greedy and the three lossless sampling rules.
- `executor`: the decoding loop and `generate` (`specscope generate`).
- `collect`: traces of real models (`specscope collect`).

Importing this package imports torch; the rest of specscope does not need it.
"""

from specscope.validate.collect import collect, collect_tokens
from specscope.validate.executor import (
    GenerateResult,
    Method,
    PhaseTimes,
    RequestRun,
    generate,
    speculative_generate,
)

__all__ = [
    "GenerateResult",
    "Method",
    "PhaseTimes",
    "RequestRun",
    "collect",
    "collect_tokens",
    "generate",
    "speculative_generate",
]
