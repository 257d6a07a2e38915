"""The one step pricer: what a speculative step costs on a profile, for every reader (optimizers,
simulator, systems, validate, sweeps).

A speculative step costs its drafted levels, one verification of the n tree tokens and the
loop's bookkeeping: step = Σ_levels t_level + t_verify(n) + t_step. A draft-model level is one
draft forward of a single token at the context length (draft levels of a small model at batch 1
are memory-bound, so a level of width w costs about the same; the executor measures the
difference; a tree's level forwards the nodes above it) plus the host's per-level work (tree
build, top-k: the loop's `level`, and `node` per further node the level proposes for) and the
forward's slowdown in a loop that alternates it with the target's (`draft_cold`); DySpec's live
builder pays `dyspec_node` per further node instead (its candidate heap), SpecDec++ `stop_rule`
per drafted token (its stop check); a model-free drafter's level (n-gram, suffix, recycling) is
one proposal call, `drafter[source]`; t_step is the loop's `step` (commit, drafter updates);
verification adds the loop's host work (the step's tensors, the rule: `verify`, or
`sampled_verify` at temperature > 0) to the target's forward, `tree_node` per token verified
(research code building the tree's mask and indices in Python), and `verify_cold` (the forward's
slowdown between the loop's drafting and bookkeeping). These are `LoopCosts` (`loop.py`): the
profile's own `loop`. Host costs a profile has not
measured count 0. Speedup compares tokens/s with autoregressive decoding (one target forward per
token) on the same hardware and context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from specscope.errors import InputError
from specscope.hw_profiles.cost import CostModel
from specscope.hw_profiles.deployment import Deployment
from specscope.hw_profiles.engine import Engine
from specscope.hw_profiles.loop import LoopCosts
from specscope.names import MODEL_FREE_SOURCES
from specscope.tree import Tree


@dataclass(frozen=True)
class Pricing:
    """Prices speculative steps of one (hardware, target, drafter, context, batch) on an engine's
    loop (None: the profile's own, as profile-hw measured it); `baseline` is the target as
    the autoregressive baseline runs it (None: `target`), on `baseline_engine`'s loop (None:
    the engine's own loop, as `pricing.deployed` always states one beside an engine).
    `draft_window` caps the tokens the draft keeps and reads (a StreamingLLM-style self-
    speculation's window, any draft with a bounded cache; None: the whole context)."""

    target: CostModel
    drafter: CostModel | None
    context_len: int
    batch: int = 1
    ssm_verify: str = "stree"
    temperature: float = 0.0
    engine: Engine | None = None
    baseline: CostModel | None = None
    baseline_engine: Engine | None = None
    draft_window: int | None = None

    @property
    def draft_context(self) -> int:
        """Tokens the draft attends to: the context, or its window when shorter."""
        return (self.context_len if self.draft_window is None
                else min(self.context_len, self.draft_window))

    def check_fits(self, tokens: int, devices: int | None = None) -> None:
        """Raise `InputError` unless the weights of target and drafter and the KV cache (or SSM
        state) of `batch` sequences of `tokens` tokens fit in the target's devices (its tp, or
        `devices` that hold its layers in sequence)."""
        models = [self.target, *([self.drafter] if self.drafter else [])]
        free = kv_capacity(models, devices)
        held = [tokens, min(tokens, self.draft_window or tokens)]
        need = sum(m.memory_bytes(self.batch, t) - m.memory_bytes(0, 0)
                   for m, t in zip(models, held, strict=False))
        if need > free:
            raise InputError(f"--hw {self.target.hw.name}: the KV cache of batch {self.batch} × "
                             f"{tokens} tokens needs {need / 1e9:.1f} GB, {free / 1e9:.1f} GB "
                             f"are left after the weights ({devices or self.target.tp} "
                             "device(s))")

    @cached_property
    def loop(self) -> LoopCosts:
        """The host terms of this engine's loop on the target's box."""
        hw = self.target.hw
        return hw.loop if self.engine is None else self.engine.loop_costs(hw)

    @cached_property
    def baseline_loop(self) -> LoopCosts:
        """The host terms of the baseline engine's loop on the target's box."""
        engine = self.baseline_engine or self.engine
        return self.loop if engine is None else engine.loop_costs(self.target.hw)

    def level_s(self, source: str, forwarded: int = 1, expanded: int = 1) -> float:
        """Seconds of one drafted level of `source`: a model-free drafter's propose call (the
        loop's `drafter`), or a draft-model forward of the `forwarded` nodes it runs (the
        parents and their ancestors) plus its host work for the `expanded` parents it proposes
        for."""
        if source in MODEL_FREE_SOURCES:
            return self.loop.drafter.get(source, 0.0)
        if self.drafter is None:
            return 0.0
        return self._forward_s(forwarded) + (expanded - 1) * self.loop.node

    def _forward_s(self, forwarded: int) -> float:
        """A draft-model level's forward of `forwarded` nodes and its per-call host work."""
        return self._memoised(("level", forwarded), lambda: float(self.drafter.forward_time(
            self.batch, forwarded, self.draft_context)) + self.level_host_s)

    @cached_property
    def _memo(self) -> dict[tuple, float]:
        """Prices already computed by shape (a tree search prices the same few shapes over
        and over; every input but the shape is a field of this frozen object)."""
        return {}

    def _memoised(self, key: tuple, price: Callable[[], float]) -> float:
        """`price()` the first time `key` is asked for, then that value."""
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = price()
        return found

    @cached_property
    def level_host_s(self) -> float:
        """Seconds a draft-model level pays beyond its forward: the host's work and the
        forward's slowdown in a loop that alternates it with the target's."""
        return self.loop.level + self.loop.draft_cold

    def dyspec_calls_s(self, source: str, forwarded: Sequence[int], expanded: Sequence[int]
                       ) -> float:
        """Seconds of DySpec's live propose calls, each forwarding `forwarded[i]` nodes and
        proposing for `expanded[i]` (`DraftedTree.forwarded`, `.expanded`)."""
        if source in MODEL_FREE_SOURCES or self.drafter is None:
            return sum(self.level_s(source) for _ in forwarded)
        node = self.loop.dyspec_node
        return sum(self._forward_s(f) + (e - 1) * node
                   for f, e in zip(forwarded, expanded, strict=True))

    @property
    def stop_rule_s(self) -> float:
        """Host seconds of SpecDec++'s stop check per drafted token."""
        return self.loop.stop_rule

    @property
    def bookkeeping_s(self) -> float:
        """Host seconds of one speculative step's bookkeeping (rule, commit, drafter updates)."""
        return self.loop.step

    @property
    def accepted_s(self) -> float:
        """Host seconds per accepted token (KV compaction); a step pays it per token it yields."""
        return self.loop.accepted

    def bookkeeping_for(self, tokens: float) -> float:
        """Host seconds of the bookkeeping of a step that yields `tokens`: the loop's `step`
        and `accepted` per token. Per token of output the accepted term is a constant, so it
        never changes which tree is best, only its speed."""
        return self.bookkeeping_s + self.accepted_s * tokens

    @cached_property
    def autoregressive_s(self) -> float:
        """Seconds per token of plain autoregressive decoding, as the baseline engine runs it."""
        model = self.baseline or self.target
        return (float(model.forward_time(self.batch, 1, self.context_len))
                + self.baseline_loop.baseline_token)

    @cached_property
    def verify_extra_s(self) -> float:
        """Seconds a verification pays beyond the target's forward: the host's work at this
        temperature, and the forward's slowdown inside the loop."""
        return self.loop.verify_host(self.temperature) + self.loop.verify_cold

    def verify_s(self, n: int, depth: int, leaves: int | None = None) -> float:
        """Seconds for the target to verify a tree of n tokens: its forward, `verify_extra_s`
        and the loop's `tree_node` per token."""
        return self._memoised(("verify", n, depth, leaves), lambda: float(
            self.target.verify_time(n, self.context_len, batch=self.batch, depth=depth,
                                    leaves=leaves, ssm_verify=self.ssm_verify)
        ) + self.verify_extra_s + n * self.loop.tree_node)

    def step_table(self, max_n: int, max_depth: int, source: str) -> np.ndarray:
        """Seconds of one step for every tree size n ≤ max_n (rows) and depth d (columns):
        d levels of `source` + one verification of n tokens + bookkeeping; row 0 is +inf (no
        tree has 0 nodes)."""
        sizes = np.arange(1, max_n + 1)
        table = np.full((max_n + 1, max_depth + 1), np.inf)
        for d in range(max_depth + 1):
            verify = self.target.verify_time(sizes, self.context_len, batch=self.batch, depth=d,
                                             ssm_verify=self.ssm_verify)
            table[1:, d] = (d * self.level_s(source) + np.asarray(verify, dtype=float)
                            + self.verify_extra_s + sizes * self.loop.tree_node
                            + self.bookkeeping_s)
        return table

    def check_chains(self, branches: bool, what: str) -> None:
        """`InputError` when this engine verifies chains only and `what` branches."""
        if branches and self.engine is not None and self.engine.tree_attention == "none":
            raise InputError(f"engine {self.engine.name} verifies chains only (tree_attention "
                             f"none); {what} branches")

    def tree_step_s(self, tree: Tree) -> float:
        """Seconds for one speculative step with this tree: one level per (depth, source) of its
        drafted nodes, the verification and the bookkeeping."""
        self.check_chains(tree.size > 1 and np.bincount(tree.parents[1:]).max() > 1,
                          f"a tree of {tree.size} tokens")
        verify = self.verify_s(tree.size, tree.depth, int(tree.leaves.size))
        return self.draft_s(tree) + verify + self.bookkeeping_s

    @property
    def draft_cache(self) -> bool:
        """Whether the engine's draft keeps its drafted levels in its KV cache
        (`Engine.draft_cache`)."""
        return self.engine is not None and self.engine.draft_cache

    def draft_s(self, tree: Tree) -> float:
        """Seconds drafting `tree`: one `level_s` per level of `draft_levels` (under the
        engine's `draft_cache`), summed in their sorted order, not a set's (string-hash) order,
        so every process gets the same float."""
        return sum(self.level_s(source, forwarded, expanded)
                   for (_, source), forwarded, expanded in draft_levels(tree, self.draft_cache))


def draft_levels(tree: Tree, draft_cache: bool, upto: int | None = None
                 ) -> list[tuple[tuple[int, str], int, int]]:
    """The levels drafting `tree`'s nodes (to depth `upto`; None: all), one per (depth, source)
    holding drafted nodes, sorted: ((depth, source), the nodes its draft-model forward runs,
    the distinct parents it proposes for). The forward runs the nodes above the level (root
    first), or with a `draft_cache` (the draft keeps its drafted levels in its KV cache) only
    those parents."""
    parents: dict[tuple[int, str], set[int]] = {}
    for v in range(1, tree.size):
        if upto is None or tree.depths[v] <= upto:
            parents.setdefault((int(tree.depths[v]), tree.sources[v]), set()).add(
                int(tree.parents[v]))
    above = np.cumsum(np.bincount(tree.depths, minlength=tree.depth + 1))
    return [((depth, source), len(expanded) if draft_cache else int(above[depth - 1]),
             len(expanded)) for (depth, source), expanded in sorted(parents.items())]


def deployed(deployment: Deployment, target: CostModel, drafter: CostModel | None,
             context_len: int, **options: float | str) -> Pricing:
    """`Pricing` of `target` and `drafter` as `deployment` runs them, at its batch.
    Under an engine: the target under the deployment's runtime and tree attention with the
    engine's layer ratios and prompt logits, the drafter under the draft runtime (by default the
    verified target's), the baseline as the baseline engine runs the target. Without one: the
    models as they stand, under a stated runtime, draft runtime and tree attention (a seed system
    deploys its models with split attention)."""
    batch = deployment.batch
    attention = deployment.tree_attention
    engine = deployment.engine
    if engine is None:
        stated = attention if "tree_attention" in deployment.stated else None
        if drafter is not None:
            drafter = drafter.under(deployment.draft_runtime, stated)
        return Pricing(target.under(deployment.runtime, stated), drafter, context_len, batch,
                       draft_window=deployment.draft_window, **options)
    verified = target.under(deployment.runtime, attention, engine.host_layer_ratio,
                            engine.device_layer_ratio, engine.prompt_logits)
    if drafter is not None:
        drafter = drafter.under(deployment.draft_runtime or verified.runtime.name, attention,
                                engine.host_layer_ratio, engine.device_layer_ratio,
                                engine.prompt_logits)
    base = deployment.baseline_engine
    assert base is not None  # `deployment()` reads one with every engine
    baseline = target.under(deployment.baseline_runtime, attention, base.host_layer_ratio,
                            base.device_layer_ratio, base.prompt_logits)
    return Pricing(verified, drafter, context_len, batch, engine=engine, baseline=baseline,
                   baseline_engine=base, draft_window=deployment.draft_window, **options)


def kv_capacity(models: list[CostModel], devices: int | None = None) -> float:
    """Bytes left for KV on the target's devices (its tp, or `devices`): their memory minus
    the weights of `models` (the target, and a colocated draft model). Weights that do not fit
    are an `InputError`."""
    target = models[0]
    devices = devices or target.tp
    memory = target.hw.memory_bytes * devices
    weights = sum(m.memory_bytes(0, 0) for m in models)
    if weights >= memory:
        names = " + ".join(m.model.name for m in models)
        raise InputError(f"--hw {target.hw.name}: the weights of {names} ({weights / 1e9:.1f} GB)"
                         f" do not fit in {memory / 1e9:.1f} GB ({devices} device(s))")
    return memory - weights
