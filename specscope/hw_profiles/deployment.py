"""A `Deployment`: what runs where, as the user stated it, resolved once.

One frozen object says which target and drafter run on which hardware profile under which
engine, with each model's runtime, the tree attention, precision, tensor and pipeline
parallelism, the draft's window and vocabulary, and the batch. `deployment(...)` builds it from
the options every pricing command shares (or from a paper's case, or a sweep's cell) and is the
only place that reads an engine file and resolves what the engine implies: the runtimes, the
tree attention, the baseline the speedup divides by, the draft model's devices and the
scheduler's batch limit. Pricing, the simulator, the optimizers, sweeps and `reproduce` read
the resolved fields and never consult an engine themselves, as vLLM builds its `VllmConfig` (and
`SpeculativeConfig`) once in the entrypoint and hands it down.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from specscope.errors import InputError
from specscope.hw_profiles.cost import CostModel
from specscope.hw_profiles.engine import DEFAULT_ENGINE, Engine, load_engine
from specscope.hw_profiles.profile import HardwareProfile
from specscope.models.catalogue import MTP_SUFFIX
from specscope.models.spec import ModelSpec

TREE_ATTENTION_DEFAULT = "split"
"""Tree attention when neither the command nor an engine states one."""
MIN_DRAFT_VOCAB = 1024
"""The smallest reduced draft vocabulary (`--draft-vocab`) priced. A reduced vocabulary only
makes the draft's LM head cheaper; the acceptance a command is given was measured with the
vocabulary the draft really had, so the reduction is honest only where it keeps nearly every
token the target writes (EAGLE-3's reduced vocabularies keep 32,000 of 128,256). A vocabulary
must also hold every token a step drafts (a node's candidates are distinct tokens). Below a
thousand tokens neither holds for any real tokenizer (a byte-level BPE's alphabet alone is 256
tokens), so the floor is 1,024, or the draft's own vocabulary where that is smaller; a
vocabulary above the draft's own is not a reduction of it and is refused too."""


@dataclass(frozen=True)
class Deployment:
    """One deployment, resolved (module docstring). None in a model or runtime field keeps what
    the caller's cost models already hold (the catalogue model, the profile's runtime).

    hw: the hardware profile (a shipped name or a TOML path); target / drafter: as stated (None:
    the trace's or the command's default); engine: the engine file read (None: the models as
    they stand on the profile's own loop); baseline_engine: whose autoregressive loop the
    speedup divides by; runtime / draft_runtime / baseline_runtime: the target's, the draft's
    and the baseline's runtime (None: as the cost models hold it; a draft with none runs the
    verified target's); tree_attention: how verification attention runs
    (`cost.TREE_ATTENTION`);
    draft_tp: the draft model's devices; max_batch: the server's limit as stated (None:
    `max_batch_for`); stated: which of tree_attention and draft_tp the options gave (a stated
    tree attention applies without an engine too; a stated draft tp needs a draft model); ep:
    the target's expert-parallel degree; precision / expert_precision / kv_bits: the target's
    number formats (`specscope.models.precision`); routing_skew / routing_row_exponent: an MoE
    target's measured routing statistics (`ModelSpec`; None: the model's own)."""

    hw: str
    target: str | ModelSpec | None = None
    drafter: str | None = None
    engine: Engine | None = None
    baseline_engine: Engine | None = None
    runtime: str | None = None
    draft_runtime: str | None = None
    baseline_runtime: str | None = None
    tree_attention: str = TREE_ATTENTION_DEFAULT
    weight_bits: int | None = None
    tp: int = 1
    draft_tp: int = 1
    stages: int = 1
    offload: float = 0.0
    draft_window: int | None = None
    draft_vocab: int | None = None
    batch: int = 1
    max_batch: int | None = None
    stated: frozenset[str] = frozenset()
    ep: int = 1
    precision: str = "bf16"
    expert_precision: str | None = None
    kv_bits: int = 16
    routing_skew: float | None = None
    routing_row_exponent: float | None = None

    @property
    def engine_name(self) -> str | None:
        """The engine's name as stated (None: no engine, the profile's own loop)."""
        return None if self.engine is None else self.engine.name

    def max_batch_for(self, speculating: bool) -> int | None:
        """Sequences a server runs in one step: as stated, else the engine scheduler's default
        (SGLang's lower limit while speculating), else None (the caller's own default)."""
        if self.max_batch is not None:
            return self.max_batch
        return None if self.engine is None else self.engine.default_batch(speculating)

    def routed(self, spec: ModelSpec) -> ModelSpec:
        """`spec` with the routing statistics the options state (itself when none are)."""
        stated = {k: v for k, v in (("routing_skew", self.routing_skew),
                                    ("routing_row_exponent", self.routing_row_exponent))
                  if v is not None}
        if stated and not spec.moe:
            raise InputError(f"--{next(iter(stated)).replace('_', '-')}: {spec.name} is dense, "
                             "it routes no tokens")
        return dataclasses.replace(spec, **stated) if stated else spec

    def target_cost(self, profile: HardwareProfile, spec: ModelSpec, **extra: Any) -> CostModel:
        """The target's cost model as deployed: its weights, runtime, tree attention, devices
        (tp, stages, ep), offloading, number formats and routing statistics; `extra` adds
        CostModel's other options (group_size)."""
        spec = self.routed(spec)
        return CostModel(profile, spec, weight_bits=self.weight_bits, runtime=self.runtime,
                         tree_attention=self.tree_attention, offload=self.offload, tp=self.tp,
                         stages=self.stages, ep=self.ep, precision=self.precision,
                         expert_precision=self.expert_precision, kv_bits=self.kv_bits, **extra)

    def draft_cost(self, profile: HardwareProfile, spec: ModelSpec | None) -> CostModel | None:
        """The draft model's cost model as deployed (None: the source drafts without one): on
        its `draft_tp` devices, under the target's runtime and tree attention until
        `pricing.deployed` applies the draft runtime. The target's MTP module
        (`catalogue.mtp_spec`) runs where the target's layers run: its tp and expert
        parallelism, its weight bits, linear-layer precision and KV cache (FP8 checkpoints
        quantise the MTP layer with the rest; `expert_precision` is left to the target's
        experts, as NVFP4 checkpoints keep the MTP layer out of FP4)."""
        if spec is not None and spec.name.endswith(MTP_SUFFIX):
            spec = self.routed(spec) if spec.moe else spec
            return CostModel(profile, spec, weight_bits=self.weight_bits, runtime=self.runtime,
                             tree_attention=self.tree_attention, tp=self.tp, ep=self.ep,
                             precision=self.precision, kv_bits=self.kv_bits)
        return None if spec is None else CostModel(
            profile, spec, runtime=self.runtime, tree_attention=self.tree_attention,
            tp=self.draft_tp)

    def check_system(self, system: str | None) -> None:
        """Refuse expert parallelism or number formats beside a seed `system`, which deploys
        its own models (16-bit, no expert parallelism)."""
        stated = [o for o, v in (("--ep", self.ep > 1), ("--precision", self.precision != "bf16"),
                                 ("--expert-precision", self.expert_precision),
                                 ("--kv-bits", self.kv_bits != 16),
                                 ("--routing-skew", self.routing_skew is not None),
                                 ("--routing-row-exponent",
                                  self.routing_row_exponent is not None)) if v]
        if system is not None and stated:
            raise InputError(f"{stated[0]} prices the plain target; --system {system} deploys "
                             "its own models (16-bit, no expert parallelism)")

    def draft_spec(self, spec: ModelSpec | None) -> ModelSpec | None:
        """The priced draft model `spec` (None: the source drafts without one) with the draft
        options: its vocabulary replaced by `draft_vocab` (an EAGLE-3 head's reduced one; a new
        name, so no measured table of the full-vocabulary model prices it). The window and tp
        act on its pricing; any of them stated for a model-free source is an `InputError`."""
        stated = [o for o, v in (("--draft-window", self.draft_window),
                                 ("--draft-vocab", self.draft_vocab),
                                 ("--draft-tp", "draft_tp" in self.stated and self.draft_tp > 1))
                  if v]
        if spec is None:
            if stated:
                raise InputError(f"{stated[0]} prices a draft model; this source drafts "
                                 "without one")
            return None
        mtp = [o for o in stated if o != "--draft-window"]
        if spec.name.endswith(MTP_SUFFIX) and mtp:
            raise InputError(f"{mtp[0]}: --drafter mtp runs the target's own layer on the "
                             "target's devices over its whole vocabulary")
        if self.draft_vocab is None or self.draft_vocab == spec.vocab_size:
            return spec
        least = min(MIN_DRAFT_VOCAB, spec.vocab_size)
        if not least <= self.draft_vocab <= spec.vocab_size:
            raise InputError(f"--draft-vocab {self.draft_vocab}: a reduced draft vocabulary "
                             f"lies in {least:,}..{spec.vocab_size:,} ({spec.name}'s own is "
                             f"{spec.vocab_size:,} tokens; below {least:,} no acceptance "
                             "measured on a real vocabulary carries)")
        return dataclasses.replace(spec, name=f"{spec.name}/vocab-{self.draft_vocab}",
                                   vocab_size=self.draft_vocab)


def deployment(hw: str, *, target: str | ModelSpec | None = None, drafter: str | None = None,
               engine: str | None = None, runtime: str | None = None,
               draft_runtime: str | None = None, tree_attention: str | None = None,
               baseline_engine: str | None = None, weight_bits: int | None = None, tp: int = 1,
               draft_tp: int | None = None, stages: int = 1, offload: float = 0.0,
               draft_window: int | None = None, draft_vocab: int | None = None,
               batch: int = 1, max_batch: int | None = None, ep: int = 1,
               precision: str = "bf16", expert_precision: str | None = None,
               kv_bits: int = 16, routing_skew: float | None = None,
               routing_row_exponent: float | None = None) -> Deployment:
    """The `Deployment` of these options, every engine-implied setting resolved here:

    - an engine (or, without one, a stated baseline engine, which needs specscope's own engine
      file to divide by) is read once; its target runtime stands where no `runtime` is stated,
      its draft runtime where no `draft_runtime` is, and its tree attention where none is stated
      ("none", chains only, prices as split);
    - the baseline runs the engine's baseline engine (or `baseline_engine`), under the target's
      runtime when that is the engine itself, else under its own;
    - a draft model runs on `draft_tp` devices, else the target's under an engine that shards it
      so (vLLM, SGLang, gpt-fast: `Engine.draft_at_target_tp`), else one.

    A count below 1, an offloaded fraction outside [0, 1] or a draft sharded over more devices
    than the deployment has (`draft_tp` > tp × stages) is an `InputError` naming its option; a
    draft vocabulary outside `MIN_DRAFT_VOCAB`..the draft's own is refused where the draft is
    priced (`Deployment.draft_spec`).
    """
    for option, value in (("--batch", batch), ("--tp", tp), ("--stages", stages),
                          ("--draft-window", draft_window), ("--draft-tp", draft_tp),
                          ("--draft-vocab", draft_vocab), ("--max-batch", max_batch),
                          ("--ep", ep)):
        if value is not None and value < 1:
            raise InputError(f"{option} must be ≥ 1, got {value}")
    if not 0 <= offload <= 1:
        raise InputError(f"--offload must be within [0, 1], got {offload}")
    if routing_row_exponent is not None and not 0 < routing_row_exponent <= 1:
        raise InputError(f"--routing-row-exponent must lie in (0, 1], got "
                         f"{routing_row_exponent}")
    if draft_tp is not None and draft_tp > tp * stages:
        raise InputError(f"--draft-tp {draft_tp}: the deployment has {tp * stages} device"
                         f"{'s' if tp * stages > 1 else ''} (--tp {tp} × --stages {stages}); "
                         "a draft is sharded over at most those")
    if engine is None and baseline_engine is not None:
        engine = DEFAULT_ENGINE
    read = None if engine is None else load_engine(engine)
    attention = tree_attention or (TREE_ATTENTION_DEFAULT if read is None
                                   else read.tree_attention)
    if attention == "none":
        attention = TREE_ATTENTION_DEFAULT
    base = baseline_runtime = None
    if read is not None:
        base = (load_engine(baseline_engine) if baseline_engine
                else read if read.baseline == read.name else load_engine(read.baseline))
        runtime = runtime or read.target_runtime
        draft_runtime = draft_runtime or read.draft_runtime
        baseline_runtime = runtime if base is read else base.target_runtime
    sharded = read is not None and read.draft_at_target_tp
    return Deployment(hw=hw, target=target, drafter=drafter, engine=read, baseline_engine=base,
                      runtime=runtime, draft_runtime=draft_runtime,
                      baseline_runtime=baseline_runtime, tree_attention=attention,
                      weight_bits=weight_bits,
                      tp=tp, draft_tp=draft_tp or (tp if sharded else 1), stages=stages,
                      offload=offload, draft_window=draft_window, draft_vocab=draft_vocab,
                      batch=batch, max_batch=max_batch, ep=ep, precision=precision,
                      expert_precision=expert_precision, kv_bits=kv_bits,
                      routing_skew=routing_skew, routing_row_exponent=routing_row_exponent,
                      stated=frozenset(k for k, v in (("tree_attention", tree_attention),
                                                       ("draft_tp", draft_tp)) if v is not None))


def engine_sources(name: str) -> dict[str, str]:
    """Where each stated value of engine `name` comes from (its `[sources]`)."""
    return load_engine(name).sources
