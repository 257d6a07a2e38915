"""Hierarchical speculation on quantised targets (SpecMQuant's HierSpec: Zhang et al. 2025,
"Speculative Decoding Meets Quantization: Compatibility Evaluation and Hierarchical Framework
Design", arXiv:2505.22179).

A 4-bit target reads a quarter of the bytes per token, but a tree of n tokens costs it
dequantisation per tile of tokens and low-bit GEMMs that leave the memory-bound regime sooner
(the cost model's `dequant` term and its GEMM efficiency by token count, per profile): tree
verification eats the memory saving. HierSpec keeps the tree away from the target: an
EAGLE-style head drafts trees that an intermediate model (the case's `draft`) verifies
(ordinary tree speculation, τ_inner tokens per inner step), and the intermediate's output, a
chain of at least `chain` tokens, is verified by the quantised target in one forward, which
yields the case's τ tokens.

One outer step = k = ⌈chain / τ_inner⌉ inner steps (head levels + the intermediate's tree
verification), which hand the target k·τ_inner tokens, + one target verification of those
tokens and one more + bookkeeping. When the intermediate is the target itself (same model and
bits) its output needs no second verification: the step is plain tree speculation with τ_inner.

Approximated: the inner steps and the chain are the means at τ_inner, and the intermediate is
priced at the case's context for the whole chain; the head drafts for the intermediate (EAGLE
heads are trained per model).
"""

from __future__ import annotations

import dataclasses
import math

from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case, check_tokens, tree_tokens
from specscope.systems.head import head_model
from specscope.systems.step import (
    Prediction,
    cost_model,
    pricing,
    speculative,
    target_model,
    tree_step,
)

OPTIONS = {"intermediate_bits": int, "inner_tau": (int, float), "chain": int}
"""intermediate_bits: the intermediate's weight bits (default: the case's weight_bits);
inner_tau: tokens per inner step of head + intermediate, bonus counted as the case counts it;
chain: the fewest tokens the intermediate hands the target (default `CHAIN`): it runs inner
steps until it has drafted at least that many."""
CHAIN = 6
"""The authors' `--spec-min-draft-length` (SpecMQuant's run_hierspec.sh)."""


def _intermediate(case: Case) -> tuple[str, int | None]:
    """The intermediate model (the case's draft; default the target) and its weight bits."""
    return case.draft or case.target, case.options.get("intermediate_bits", case.weight_bits)


def _inner_case(case: Case) -> Case:
    """The inner loop as a case of its own: the head's tree verified by the intermediate, at
    `inner_tau` (default: the case's `baseline_tau`, the head's τ on the target, else its
    `tau`: a head accepts alike on sibling models)."""
    name, bits = _intermediate(case)
    tau = case.options.get("inner_tau", case.baseline_tau or case.tau)
    return dataclasses.replace(case, target=name, weight_bits=bits, tau=float(tau), options={})


def _is_target(case: Case) -> bool:
    name, bits = _intermediate(case)
    return name == case.target and bits == case.weight_bits


def costs(case: Case) -> SystemCosts:
    """The quantised target, verifying chains; the drafter the simulator sees is the
    intermediate (its own inner tree speculation is folded into `predict`'s price only)."""
    target = target_model(case)
    if _is_target(case):
        return SystemCosts(target, head_model(case, target.model), "head")
    name, bits = _intermediate(case)
    inner = cost_model(case, name, weight_bits=bits, act_bits=case.act_bits,
                       quant_lm_head=False)
    return SystemCosts(target, inner, f"draft:{name}")


def predict(case: Case) -> Prediction:
    """One outer step (module docstring) against autoregressive decoding of the target."""
    if not case.tree:
        raise case.fail("system hierspec needs a tree (the head's tokens per level)")
    inner_case = _inner_case(case)
    check_tokens(case, inner_case.tokens_per_step, tree_tokens(case),
                 f"the inner τ = {inner_case.tau:g} (head + intermediate)")
    inner_target = target_model(inner_case)
    inner_price = pricing(case, inner_target, head_model(case, inner_target.model))
    if _is_target(case):
        return speculative(inner_case, inner_price, "head", assumptions=[
            "intermediate = target: plain tree speculation of the head on the target"])
    least = int(case.options.get("chain", CHAIN))
    if least < 1:
        raise case.fail("system hierspec needs chain ≥ 1 (tokens handed to the target)")
    inner = tree_step(inner_price, case.tree, "head")
    inner_steps = math.ceil(least / inner_case.tokens_per_step)
    chain = inner_steps * inner_case.tokens_per_step
    outer = pricing(case, target_model(case), None)
    n = round(chain) + 1
    check_tokens(case, case.tokens_per_step, (float(n), f"the chain of {chain:g} tokens "
                                              f"{inner_steps} inner steps hand the target + "
                                              "the bonus"))
    parts = {"draft": inner_steps * inner["draft"],
             "intermediate": inner_steps * (inner["verify"] + inner["bookkeeping"]),
             "verify": outer.verify_s(n, n - 1), "bookkeeping": outer.bookkeeping_s}
    name, bits = _intermediate(case)
    return Prediction(
        tokens_per_step=case.tokens_per_step, step_s=sum(parts.values()),
        baseline_s=outer.autoregressive_s, batch=case.batch, parts=parts,
        assumptions=(f"{inner_steps} head + {name} (W{bits or 16}) steps of τ "
                     f"{inner_case.tokens_per_step:g} hand the target a chain of {chain:.1f}",
                     "quantised models keep 16-bit LM heads (GPTQ/Marlin)"))


SYSTEM = System("hierspec", "Zhang et al. 2025, Speculative Decoding Meets Quantization: "
                "Compatibility Evaluation and Hierarchical Framework Design (arXiv:2505.22179)",
                costs, predict, OPTIONS, most_tokens=lambda case: None)
"""The case's tree is the head's, verified by the intermediate: `predict` holds the inner τ to it
and the case's τ to the chain the inner steps hand the target (+ the bonus)."""
