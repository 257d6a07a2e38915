"""Hydra (Ankner, Parthasarathy, Mahabaleshwarkar, Chen, Mahajan and Rozenblum 2024, "Hydra:
Sequentially-Dependent Draft Heads for Medusa Decoding", arXiv:2402.05109; zankner/Hydra).

Unlike Medusa's heads, Hydra's are sequentially dependent: head k reads the base model's hidden
state and the token embeddings of the k tokens drafted before it on the path
(hydra/model/hydra_heads/prefix_mlp_head.py, `_grounded_proposal`). So drafting the tree takes
one call of head k per level, on the level's expanded paths, with one top-k per path in Python,
before the target verifies the tree. Head k (0-based) is a ResBlock from (k + 2)·d to d (its
linear and its residual projection, both (k + 2)·d × d), `mlp_layers` − 1 ResBlocks d × d and its
own LM head (d × V). Hydra++ (`arch = "prefix-mlp"`, the README's recipe: 4 heads, 4 MLP layers)
first runs one decoder layer of the target's shape (its own KV cache) over the hidden states of
the tokens the last step accepted: the prefix attention.

Priced: each level is head k on the level's expanded paths (`parents`, default every node of
the level above: the widths give no more), as a call of its own (`medusa.MLPHeadsCost`, the
runtime's per-forward terms paid), plus a draft level's host work and one per-node host term
per further path (its top-k); the prefix layer on round(τ) tokens at the context; then the
tree's verification and the loop's bookkeeping. Approximated: SiLU, residual adds and embedding
look-ups (elementwise or gathers), the prefix layer's tokens taken as the mean accepted τ.
"""

from __future__ import annotations

from typing import Any

from specscope.hw_profiles import CostModel
from specscope.models.ops import OpCost
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case, parse_tree
from specscope.systems.head import head_spec
from specscope.systems.medusa import MLPHeadsCost, Shapes, heads_spec
from specscope.systems.step import Prediction, cost_model, pricing, target_model

ARCHS = ("mlp", "prefix-mlp")
OPTIONS: dict[str, type | tuple[type, ...]] = {"arch": str, "mlp_layers": int, "parents": str}
"""arch: "mlp" (Hydra) or "prefix-mlp" (Hydra++, default); mlp_layers: ResBlocks per head
(default 1 for mlp, 4 for prefix-mlp, the README's Hydra++ recipe); parents: expanded paths per
level, "1,10,10,1" (default: the widths of the level above)."""


class PrefixLayerCost(CostModel):
    """One decoder layer of the target's shape over hidden states: no embedding, no LM head."""

    def ops(self, batch: Any, new_tokens: Any, context_len: Any, **ssm: Any) -> list[OpCost]:
        return [op for op in super().ops(batch, new_tokens, context_len, **ssm)
                if op.op not in ("embedding", "lm_head")]


def hydra_heads(d: int, vocab: int, heads: int, layers: int) -> list[Shapes]:
    """Grounded Hydra heads: head k a ResBlock (k + 2)·d → d with its residual projection,
    `layers` − 1 ResBlocks d → d, and an LM head d → V."""
    return [(((k + 2) * d, d), ((k + 2) * d, d), *(((d, d),) * (layers - 1)), (d, vocab))
            for k in range(heads)]


HEADS = 4
"""Heads without a tree to size them (the README's Hydra++ recipe)."""


def _options(case: Case) -> tuple[str, int, tuple[int, ...]]:
    arch = case.options.get("arch", "prefix-mlp")
    if arch not in ARCHS:
        raise case.fail(f"arch = {arch!r} must be one of {', '.join(ARCHS)}")
    layers = case.options.get("mlp_layers", 4 if arch == "prefix-mlp" else 1)
    if layers < 1:
        raise case.fail(f"mlp_layers = {layers} must be at least 1")
    expanded = (1, *case.tree[:-1])
    if "parents" in case.options:
        parents = parse_tree(case.options["parents"], f"{case.where}: case {case.name!r}")
        if len(parents) != len(case.tree) or any(
                p > w for p, w in zip(parents, expanded, strict=True)):
            raise case.fail(f"parents {case.options['parents']!r} must give one count per level, "
                            "each at most the width of the level above (1 for the first)")
        expanded = parents
    return arch, layers, expanded


def costs(case: Case) -> SystemCosts:
    """The target and its Hydra heads (the prefix layer is priced in `predict`)."""
    _, layers, _ = _options(case)
    target = target_model(case)
    d, vocab = target.model.d_model, target.model.vocab_size
    heads = len(case.tree) or HEADS
    drafter = cost_model(case, heads_spec(target.model, f"hydra-{heads}"), cls=MLPHeadsCost,
                         heads=hydra_heads(d, vocab, heads, layers), inside=False)
    return SystemCosts(target, drafter, "hydra")


def predict(case: Case) -> Prediction:
    """The prefix layer (Hydra++), one head call per level on its expanded paths, the tree's
    verification and the loop's bookkeeping."""
    if not case.tree:
        raise case.fail("system hydra needs a tree (tokens per level)")
    arch, layers, expanded = _options(case)
    c = costs(case)
    price = pricing(case, c.target, c.drafter)
    heads = price.drafter
    assert isinstance(heads, MLPHeadsCost)
    draft = sum(float(heads.only(k).forward_time(case.batch, p, price.context_len))
                + price.level_host_s + (p - 1) * price.loop.node
                for k, p in enumerate(expanded))
    tokens = case.tokens_per_step
    parts = {"draft": draft}
    if arch == "prefix-mlp":
        layer = cost_model(case, head_spec(c.target.model), cls=PrefixLayerCost)
        prefix = pricing(case, c.target, layer).drafter  # on the engine, as the heads are
        parts["prefix"] = float(prefix.forward_time(case.batch, max(1, round(tokens)),
                                                    price.context_len))
    n = 1 + sum(case.tree)
    parts["verify"] = price.verify_s(n, len(case.tree))
    parts["bookkeeping"] = price.bookkeeping_for(tokens)
    return Prediction(tokens_per_step=tokens, step_s=sum(parts.values()),
                      baseline_s=price.autoregressive_s, batch=case.batch, parts=parts,
                      assumptions=(f"{len(case.tree)} grounded Hydra heads ({arch}, {layers} MLP "
                                   f"layers), one call per level on {','.join(map(str, expanded))} "
                                   "paths, one top-k per path",))


SYSTEM = System("hydra", "Ankner et al. 2024, Hydra: Sequentially-Dependent Draft Heads for "
                "Medusa Decoding (arXiv:2402.05109)", costs, predict, OPTIONS)
