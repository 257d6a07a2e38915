"""Every vocabulary of specscope's options, defined once and importable without torch or polars
(`specscope ... --help` lists them; the modules that use them import them from here)."""

DEVICES = ("cpu", "cuda", "auto")
"""`--device` choices; auto is cuda when a GPU is visible, else cpu."""
PROFILE_DEVICES = ("cpu", "cuda")
"""`profile-hw --device` choices: a profile measures one real device."""
DTYPE_NAMES = ("float32", "bfloat16", "float16")
"""`--dtype` choices: the dtype of weights, caches and activations."""
RUNTIMES = ("eager", "graph", "compile")
"""How steps run, and what a profile prices: eager operators, CUDA graphs, torch.compile."""
LAYERSKIP = "layerskip"
"""The layer-skip drafter, and its source name whatever its mode."""
DRAFTERS = ("draft", "ngram", "suffix", "recycle", "goose", "stand", "rasd", LAYERSKIP)
"""Drafter names, as `--drafter` takes them."""
COLLECT_DRAFTERS = ("draft", "ngram", "suffix", "recycle", "stand", "rasd", LAYERSKIP)
"""Drafters `collect` can trace (Goose is traced as its parts, ngram and recycle)."""
DRAFT_MODEL_DRAFTERS = ("draft", "rasd")
"""Drafters that run a draft model (`--draft-model`)."""
DEFAULT_DRAFT_MODEL = "tiny-code-draft"
"""The draft model loaded when none is named: the zoo's."""
K = 8
"""Candidates recorded per position and drafter in a trace, and asked of a drafter per node."""
HOST_DRAFTERS = ("ngram", "suffix", "recycle", "goose")
"""Model-free drafters whose per-step host time a profile measures (`[drafters]` `<name>_us`)."""
SEQUENCE_SOURCES = ("ngram", "suffix")
"""Source names of the sequence drafters (they fill `proposal` and `match_len`)."""
MTP_DRAFTER = "mtp"
"""`--drafter mtp`: the target's own multi-token-prediction layer drafts (priced as
`models.catalogue.mtp_spec`; its trace source is `draft:mtp`)."""
MODEL_FREE_SOURCES = frozenset({*SEQUENCE_SOURCES, "recycle", "stand"})
"""Drafter sources that need no model forward (prompt lookup, suffix match, token recycling,
STAND's n-gram table)."""
RULES = ("greedy", "deterministic", "specinfer", "sequoia", "rsd", "traversal")
"""Verification rule names, as `generate(rule=...)` takes them (rsd is sequoia's rule under the
name of Recursive Speculative Decoding, whose verification it is)."""
DRAWN_METHODS = ("rsd-s",)
"""Methods of `generate` that draw each step's tree from the draft's distribution (RSD-S's
Stochastic Beam Search); `optimize-tree` has no counterpart."""
ADAPT_LOSSES = ("fkl", "rkl", "jsd")
"""`adapt --loss` choices: the divergence OSD distils the draft with (`executor/distil.py`)."""
ADAPT_POSITIONS = ("wrong", "all")
"""`adapt --positions` choices: which served positions the draft is distilled on."""
DRIFT_RELATIVE_TO = ("control", "first")
"""`adapt --relative-to` choices: what the drift schedule divides each block's acceptance by."""
PROMPT_SET_SIZES = {"stdlib-code": 64, "code-edit": 64, "docstring": 64, "sql": 64}
"""Built-in prompt sets (`--prompts builtin:NAME`, `models/zoo/prompts.py`) and how many prompts
each holds."""
SERVED_POLICIES = ("none", "static", "dyspec", "specdecpp", "smartspec", "schedule")
"""Speculation policies `serve-bench` runs for real (the simulator's names; `serving/planners`)."""
LOAD_POLICIES = ("none", "static", "dyspec", "smartspec", "schedule")
"""Policies `validate --load` compares (specdecpp's predictor needs a trace of its own)."""
LOAD_DRAFTERS = ("ngram", "draft")
"""Drafters `validate --load` runs: a sequence drafter on the host, a draft model."""
EXPORT_ENGINES = ("vllm", "sglang", "tensorrt-llm", "transformers")
"""Engines `optimize-tree --to` and `specscope export --to` write configurations for."""
IMPORT_FORMATS = ("vllm-metrics", "sglang-log", "json")
"""What `trace import --from` reads: vLLM's Prometheus text, SGLang's decode log, plain counts."""
DEFAULT_OUTPUT_LEN = 64
"""Output tokens per request of the commands that run real models (generate, adapt, collect,
serve-bench) when `--output-len` is not given."""
DEFAULT_BUDGET = 16
"""Tree size n (root included) of a run that needs one and was given no `--budget`: a static
method's tree, or the most a dynamic policy grows per step."""
SERVED_MAX_BATCH = 4
"""Sequences per step of `serve-bench`'s continuous-batching executor when `--max-batch` is not
given."""
