"""Medusa (Cai, Li, Geng, Peng, Lee, Chen and Dao 2024, "Medusa: Simple LLM Inference
Acceleration Framework with Multiple Decoding Heads", arXiv:2401.10774; FasterDecoding/Medusa).

K heads sit on the target's last hidden state. Head k (medusa/model/medusa_model.py) is
`medusa_num_layers` ResBlocks (a d × d linear with bias, SiLU, the residual) and its own LM head
(d × V, not shared with the target's). Drafting is not a sequence of draft-model levels: the
heads run inside the target's forward on the hidden states of every token it verifies
(`medusa_forward`), and the next step's candidates are read from the accepted token's head
logits by one top-k per head and the static tree's precomputed indices (`generate_candidates`).
So a step costs one verification of the case's tree (n = 1 + Σ widths tokens) with the K heads
on those n tokens, the host work of one top-k per head, and the loop's bookkeeping.

Priced: the heads as their linear operators only (`MLPHeadsCost`), K defaulting to the tree's
depth (Kangaroo's "591M" extra parameters for Medusa-1 on Vicuna-7B are 4 heads of one ResBlock
and a 32k × 4096 LM head; the 63-node tree is 4 deep), at 16 bits; they run inside the target's
forward, so they pay no per-forward fixed terms, and each operator pays one operator's share of
a decoder layer's per-layer device and host terms (as SpecEE's predictors do). The proposal's
host work is the loop's `level` per head (benchmarks/research_loops.py times Medusa's own loop:
52 µs a head on cpu-2core, the medusa-hf engine); the static tree needs no per-node ranking.
Approximated: SiLU and the residual add (elementwise, left out), typical acceptance's posterior
(the verification rule's host term stands for it).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from specscope.hw_profiles import CostModel
from specscope.models.ops import OpCost, layer_ops, linear_op
from specscope.models.spec import ModelSpec
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import Prediction, cost_model, pricing, target_model

Shapes = tuple[tuple[int, int], ...]
"""A head's linear layers as (d_in, d_out), applied in order."""


class MLPHeadsCost(CostModel):
    """Heads made of linear layers on the target's hidden states (Medusa's, Hydra's).

    `heads[k]` is head k's linear shapes; `active` the heads a forward runs (all by default);
    `inside` heads run inside another model's forward (Medusa's, in the target's): no per-forward
    fixed device or host term. Each linear operator pays one operator's share of a decoder
    layer's per-layer device and host terms."""

    def __init__(self, *args: Any, heads: Sequence[Shapes], inside: bool,
                 active: Sequence[int] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.heads, self.inside = tuple(heads), inside
        self.active = tuple(range(len(self.heads))) if active is None else tuple(active)
        self.op_share = 1 / len(layer_ops(CostModel.ops(self, 1, 1, 1)))

    def only(self, *heads: int) -> MLPHeadsCost:
        """This cost model (runtime and host ratio kept) running the heads `heads` only."""
        clone = copy.copy(self)
        clone.active = heads
        return clone

    @property
    def linears(self) -> list[tuple[int, int]]:
        return [shape for k in self.active for shape in self.heads[k]]

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        tokens = np.asarray(batch, dtype=float) * np.asarray(new_tokens, dtype=float)
        return [linear_op(f"head_linear_{i}", 1, tokens, d_in, d_out, 2.0, False)
                for i, (d_in, d_out) in enumerate(self.linears)]

    def memory_bytes(self, batch: int, tokens: int) -> float:
        """Every head's 16-bit weights (not the target's, which it shares); heads keep no
        cache."""
        return 2.0 * sum(d_in * d_out for head in self.heads for d_in, d_out in head)

    @property
    def device_layers(self) -> float:
        return len(self.linears) * self.op_share

    @property
    def host_layers(self) -> float:
        return self.device_layers

    def extras(self, ops: list[OpCost]) -> dict[str, np.ndarray]:
        out = super().extras(ops)
        if self.inside:
            out["overhead"] = out["overhead"] - self.runtime.step_s
        return out

    def host_time(self, context_len: Any) -> np.ndarray:
        r = self.runtime
        step = 0.0 if self.inside else r.host_step_s
        return np.broadcast_to(np.asarray((step + self.host_layers * r.host_layer_s)
                                          / self.hw.host_speed), np.shape(context_len))


def heads_spec(target: ModelSpec, what: str) -> ModelSpec:
    """The target's shapes under a name no profile measured (heads are priced by roofline)."""
    return dataclasses.replace(target, name=f"{target.name}/{what}", weight_bits=16)


def medusa_heads(target: ModelSpec, heads: int, layers: int) -> list[Shapes]:
    """Medusa-1's heads: `layers` ResBlocks (d → d) and an LM head (d → V) each."""
    d, v = target.d_model, target.vocab_size
    return [((d, d),) * layers + ((d, v),) for _ in range(heads)]


OPTIONS: dict[str, type | tuple[type, ...]] = {"heads": int, "medusa_layers": int}
"""heads: the Medusa heads K (default: the tree's depth, else `HEADS`); medusa_layers:
ResBlocks per head (default 1, Medusa-1's `medusa_num_layers`)."""


HEADS = 4
"""Heads without a tree to size them: Medusa-1's on Vicuna-7B (Kangaroo's "591M" extra
parameters are 4 heads of a ResBlock and a 32k × 4096 LM head)."""


def _options(case: Case) -> tuple[int, int]:
    heads = case.options.get("heads", len(case.tree) or HEADS)
    layers = case.options.get("medusa_layers", 1)
    if heads < len(case.tree):
        raise case.fail(f"heads = {heads}: a tree {len(case.tree)} levels deep needs at least "
                        f"{len(case.tree)} heads (head k drafts level k)")
    if layers < 1:
        raise case.fail(f"medusa_layers = {layers} must be at least 1")
    return heads, layers


def costs(case: Case) -> SystemCosts:
    """The target, and its Medusa heads."""
    heads, layers = _options(case)
    target = target_model(case)
    drafter = cost_model(case, heads_spec(target.model, f"medusa-{heads}"), cls=MLPHeadsCost,
                         heads=medusa_heads(target.model, heads, layers), inside=True)
    return SystemCosts(target, drafter, "medusa")


def predict(case: Case) -> Prediction:
    """One verification of the case's tree with the K heads on its n tokens inside the target's
    forward, the loop's level per head (each head's top-k and candidate gather, as
    benchmarks/research_loops.py measures Medusa's loop) and its bookkeeping."""
    if not case.tree:
        raise case.fail("system medusa needs a tree (tokens per level)")
    c = costs(case)
    price = pricing(case, c.target, c.drafter)
    n = 1 + sum(case.tree)
    tokens = case.tokens_per_step
    heads = len(c.drafter.heads)
    parts = {"draft": float(price.drafter.forward_time(case.batch, n, price.context_len))
             + heads * price.loop.level,
             "verify": price.verify_s(n, len(case.tree)),
             "bookkeeping": price.bookkeeping_for(tokens)}
    return Prediction(tokens_per_step=tokens, step_s=sum(parts.values()),
                      baseline_s=price.autoregressive_s, batch=case.batch, parts=parts,
                      assumptions=(f"{heads} Medusa heads (ResBlock + own 16-bit LM head) on the "
                                   f"{n} verified tokens inside the target's forward",
                                   "the loop's level of host work per head; static tree, no "
                                   "ranking"))


SYSTEM = System("medusa", "Cai et al. 2024, Medusa: Simple LLM Inference Acceleration Framework "
                "with Multiple Decoding Heads (arXiv:2401.10774)", costs, predict, OPTIONS)
