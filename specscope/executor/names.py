"""The names the executor's options take, importable without torch (`specscope ... --help` lists
them; the modules that use them import them from here)."""

DEVICES = ("cpu", "cuda", "auto")
"""`--device` choices; auto is cuda when a GPU is visible, else cpu."""
PROFILE_DEVICES = ("cpu", "cuda")
"""`profile-hw --device` choices: a profile measures one real device."""
DTYPE_NAMES = ("float32", "bfloat16", "float16")
"""`--dtype` choices: the dtype of weights, caches and activations."""
DRAFTERS = ("draft", "ngram", "suffix", "recycle", "goose")
"""Drafter names, as `--drafter` takes them."""
COLLECT_DRAFTERS = ("draft", "ngram", "suffix", "recycle")
"""Drafters `collect` can trace (Goose is traced as its parts, ngram and recycle)."""
RULES = ("greedy", "deterministic", "specinfer", "sequoia")
"""Verification rule names, as `generate(rule=...)` takes them."""
