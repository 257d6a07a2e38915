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
- `names`: the names its options take (devices, dtypes, drafters, rules), without torch.

Its modules import torch; the rest of specscope does not need it. The package itself imports
nothing, so that `targets`, `runtime` and the models load without polars, PuLP, simpy or plotly
(the GPU image's `benchmarks/gpu_verify.py` runs that way); `drafters`, `methods`, `loop`,
`generate` and `collect` need polars through the trace and optimizer modules.
"""
