"""Real torch runs: the decoding loop, drafters, verification rules, trace collection.

- `targets`: one interface (`Model`) over Transformer, Mamba-2, hybrid and Hugging Face models.
- `runtime`: device, dtype, eager / CUDA-graph / compiled steps, timing.
- `drafters`: draft model, prompt lookup, suffix decoding, token recycling, Goose.
- `verify`: greedy and the three lossless sampling rules.
- `methods`: how each step's tree is grown (static, DySpec, SpecDec++, Goose), by name.
- `loop`: the decoding loop with per-phase timing (`speculative_generate`).
- `generate`: `specscope generate` from names, with its calibration pass.
- `collect`: traces of real models (`specscope collect`).
- `zoo_acceptance`: the acceptance vector stored with each zoo target.

Importing this package imports torch; the rest of specscope does not need it.
"""

from specscope.executor.collect import collect, collect_tokens
from specscope.executor.generate import generate
from specscope.executor.loop import GenerateResult, PhaseTimes, RequestRun, speculative_generate
from specscope.executor.methods import Method

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
