"""`LoopCosts`: the host seconds a speculative decode loop pays beyond its model forwards.

One record for every reader: `profile-hw` measures them in specscope's own loop
(`profiling.measure.measure_loop`) and writes them to a profile's `[speculation]` and
`[drafters]` sections, a `HardwareProfile` holds them (`loop`), an engine states its own or
carries a measured one to another host (`engine.py`), and `Pricing` charges them
(docs/hardware.md#pricing).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

LOOP_KEYS = {"step_us": "step", "level_us": "level", "node_us": "node",
             "dyspec_node_us": "dyspec_node", "stop_rule_us": "stop_rule",
             "accepted_us": "accepted", "verify_us": "verify", "tree_node_us": "tree_node",
             "sampled_verify_us": "sampled_verify", "cold_level_us": "draft_cold",
             "cold_verify_us": "verify_cold", "baseline_token_us": "baseline_token",
             "serve_step_us": "serve_step", "serve_row_us": "serve_row",
             "choose_step_us": "choose_step", "choose_row_us": "choose_row",
             "shared_row_us": "shared_row", "spec_row_us": "spec_row"}
"""TOML keys (µs) of a profile's `[speculation]` and an engine's `[loop]`, by field."""


FLAGS = ("pads_context", "level_per_row")
"""`LoopCosts` fields that say how the loop runs (TOML booleans), not what it costs."""


@dataclass(frozen=True)
class LoopCosts:
    """Host seconds a speculative loop pays beyond its forwards (`Pricing` reads these).

    step: a step's bookkeeping (commit, drafter updates); level: a draft-model level beyond its
    forward; node: a level's further node it proposes for (top-k, reranking); dyspec_node: the same
    in DySpec's live builder; stop_rule: SpecDec++'s stop check per drafted token; accepted: per
    accepted token (KV compaction); verify / sampled_verify: a verification's tensors and rule at
    temperature 0 / > 0; tree_node: per token verified (EAGLE-2's tree mask, position ids and
    retrieve indices built by Python per node of the verified tree); draft_cold / verify_cold: a
    forward's slowdown inside the loop (a CPU's caches); drafter: a model-free drafter's propose
    call per level; baseline_token: the plain autoregressive loop's host work per token beyond its
    forward; serve_step / serve_row: what specscope's continuous-batching server
    (`serving/server.py`) pays per step (scheduling, planning, the batch's inputs) and per sequence
    that does not speculate in it (its verdict, commit and drafter update) beyond its forwards and
    the terms above (`profiling.serving.measure_serving`); spec_row: what that server pays per
    sequence that speculates (its verdict, commit and drafter update), in place of the decode loop's
    `step` (None: not measured, it pays `step`; the single-sequence loop's figure does not carry
    over to the server's rows: 156 against 301 µs on an H100); choose_step / choose_row: what a
    policy that chooses each step's speculation from the step's prices (SmartSpec: the goodput of
    every length) spends choosing, per step and per running sequence, in that server; shared_row:
    what each sequence of that server pays per draft-model level it shares with other sequences' in
    one batched draft forward (its thread hands its nodes over and waits for its logits:
    `executor/batched_draft.py`) beyond `level`; pads_context: the loop's batched pass reads every
    row's keys up to the longest row's context (specscope's batched target under eager does: one
    tensor of B × longest), where a paged-attention engine reads each row's own; level_per_row: a
    batched draft-model level pays its host work (`level`, `draft_cold`) once per sequence, not once
    per level (specscope's server: each row's drafter proposes for its own nodes, in its own thread,
    around the one shared forward); step_per_row: a batched step pays `step` (or `spec_row`) once
    per speculating sequence, as specscope's server walks each row's verdict, commit and drafter
    update; false for an engine whose step runs once over the whole batch (`[loop] batched_step`:
    vLLM's and SGLang's rejection sampling and commit are batched tensor operations). """

    step: float = 0.0
    level: float = 0.0
    node: float = 0.0
    dyspec_node: float = 0.0
    stop_rule: float = 0.0
    accepted: float = 0.0
    verify: float = 0.0
    sampled_verify: float = 0.0
    tree_node: float = 0.0
    draft_cold: float = 0.0
    verify_cold: float = 0.0
    drafter: dict[str, float] = field(default_factory=dict)
    baseline_token: float = 0.0
    serve_step: float = 0.0
    serve_row: float = 0.0
    choose_step: float = 0.0
    choose_row: float = 0.0
    shared_row: float = 0.0
    spec_row: float | None = None
    pads_context: bool = False
    level_per_row: bool = False
    step_per_row: bool = True

    def carried(self, factor: float) -> LoopCosts:
        """These terms on a host `factor` times slower; the cold terms, cache effects of the
        host that measured them, stay behind (0)."""
        out = {f.name: getattr(self, f.name) * factor for f in fields(self)
               if f.name not in ("drafter", "draft_cold", "verify_cold", "spec_row",
                                 "step_per_row", *FLAGS)}
        spec_row = None if self.spec_row is None else self.spec_row * factor
        return LoopCosts(**out, drafter={k: v * factor for k, v in self.drafter.items()},
                         spec_row=spec_row, pads_context=self.pads_context,
                         level_per_row=self.level_per_row, step_per_row=self.step_per_row)

    @property
    def row_bookkeeping(self) -> float:
        """Host seconds specscope's batching server pays per speculating sequence each step:
        `spec_row` where the profile measured it, else the decode loop's `step`."""
        return self.step if self.spec_row is None else self.spec_row

    def verify_host(self, temperature: float) -> float:
        """Host seconds per verification at `temperature` (the greedy figure where nothing was
        measured at temperature > 0)."""
        if temperature > 0 and self.sampled_verify:
            return self.sampled_verify
        return self.verify


SERVER_TERMS = ("serve_step", "serve_row", "choose_step", "choose_row", "shared_row", "spec_row")
"""The terms of specscope's own batching server, not of a decode loop."""
LOOP_TERMS = tuple(f.name for f in fields(LoopCosts) if f.name not in (*FLAGS, *SERVER_TERMS))
"""Every term of a decode loop, by field name: what an engine may carry from a measured profile
(`engine.py`; specscope's server terms and flags describe specscope's server, not the engine)."""
