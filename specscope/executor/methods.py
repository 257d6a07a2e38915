"""How each step's tree is grown, and the tree methods of `specscope generate` by name.

- `draft_static` / `fill_tree`: a fixed template filled level by level from the drafter(s);
- `draft_dyspec`, `draft_specdecpp`, `draft_goose`: the per-step policies on live draft output;
- `resolve_method`: a method name and budget to a `Method`, shaped by the acceptance stored with
  a zoo model or by a calibration trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

import numpy as np
import polars as pl

from specscope.draft import DraftedTree, DraftNode, Proposal
from specscope.errors import InputError
from specscope.executor.drafters import (
    RECYCLE,
    Drafter,
    GooseDrafter,
    propose_chain,
)
from specscope.executor.rsd import draft_sbs, matching_beam, sbs_widths
from specscope.executor.verify import Verdict
from specscope.names import DRAWN_METHODS, K
from specscope.optimizers.compare import TREE_METHODS, Setup
from specscope.optimizers.dyspec import DySpecPolicy
from specscope.optimizers.goose import (
    BRANCH_DEPTH,
    BUDGET_RANGE,
    GoosePolicy,
    Split,
    branch_paths,
    spine_allowances,
    spine_tree,
)
from specscope.optimizers.sequoia import SequoiaDP
from specscope.optimizers.specdecpp import (
    AUTHORS_THRESHOLD,
    MAX_LEN,
    MIN_LEN,
    ThresholdPolicy,
)
from specscope.optimizers.specdecpp_predictor import AcceptancePredictor, candidate_features
from specscope.optimizers.stand import data_driven_tree
from specscope.trace import AcceptanceModel, Trace
from specscope.tree import ROOT_SOURCE, Tree, read_tree_file

DYNAMIC_METHODS = ("dyspec", "specdecpp", "goose", *DRAWN_METHODS)
"""Methods that build each step's tree from live drafter output (rsd-s: RSD's Stochastic Beam
Search, `rsd.py`)."""
STATIC_METHODS = tuple(m for m in TREE_METHODS if m not in DYNAMIC_METHODS)
"""Static tree methods of `optimize-tree` (sequoia, ets, eagle2, best-first, kary, chain); its
dyspec and goose are run live here, per step."""
TRACE_METHODS = ("stand",)
"""Static trees chosen node by node from a calibration trace: STAND's most accepted nodes."""
CANDIDATES = K
"""Candidates per node a dynamic method asks for (the trace's K)."""
MAX_DEPTH = 12
"""Depth cap of the trees built from a budget."""
SPINE = "spine"
"""Source label of Goose's spine nodes (whatever drafter proposed them)."""



@dataclass(frozen=True)
class Method:
    """How a step's tree is grown: `build(drafter, root_token)`, at most `max_size` nodes.

    `origin` says where its shape or parameters came from (a file, a calibration pass, ...).
    `static` is True when every step uses the same tree (required by sampled-draft rules).
    """

    name: str
    build: Callable[[Drafter, int], DraftedTree]
    max_size: int
    origin: str
    static: bool = False
    observe: Callable[[DraftedTree, Verdict], None] | None = None
    """Called after every verification (a policy's running statistics)."""
    draws: str | None = None
    """"without" when the method draws each step's children from the draft's q itself, without
    replacement and in an order sampled-draft rules for such draws stay exact on (`rsd.py`)."""


def draft_static(drafter: Drafter, root_token: int, template: Tree) -> DraftedTree:
    """Fill `template` breadth-first: the r-th child of a node gets the node's r-th candidate.

    A node whose candidate is missing (the drafter had fewer) is left out with its subtree.
    Built node ids are tree indices, so the drafter's per-node records line up with the tree.
    """
    return fill_tree(template, root_token, lambda source: drafter)


def fill_tree(
    template: Tree,
    root_token: int,
    drafter_for: Callable[[str], Drafter],
    preset: Mapping[int, int] | None = None,
) -> DraftedTree:
    """Fill `template` level by level: node tokens from `preset` (template node → token) or
    from the drafter of the node's source, one proposal batch per (level, source)."""
    preset = preset or {}
    kids = template.children
    parents, ranks, sources = [-1], [-1], [ROOT_SOURCE]
    tokens, scores, depths = [root_token], [1.0], [0]
    built = {0: 0}
    level, forwards = [0], 0
    while level:
        wanted: dict[str, list[int]] = {}
        for v in level:
            for source in dict.fromkeys(template.sources[c] for c in kids[v] if c not in preset):
                wanted.setdefault(source, []).append(v)
        found: dict[tuple[int, str], Proposal] = {}
        for source, expand in wanted.items():
            nodes = [DraftNode(built[v], parents[built[v]], tokens[built[v]], depths[built[v]])
                     for v in expand]
            k = 1 + max(int(template.ranks[c]) for v in expand for c in kids[v]
                        if template.sources[c] == source)
            for v, proposal in zip(expand, drafter_for(source).propose(nodes, k), strict=True):
                found[v, source] = proposal
            forwards += 1
        nxt = []
        for v in level:
            for c in kids[v]:
                r = int(template.ranks[c])
                if c in preset:
                    token, prob = preset[c], 1.0
                else:
                    cand, probs = found[v, template.sources[c]]
                    if r >= len(cand):
                        continue
                    token, prob = int(cand[r]), float(probs[r])
                built[c] = len(parents)
                parents.append(built[v])
                ranks.append(r)
                sources.append(template.sources[c])
                tokens.append(token)
                scores.append(scores[built[v]] * prob)
                depths.append(depths[built[v]] + 1)
                nxt.append(c)
        level = nxt
    tree = Tree(np.array(parents), np.array(ranks), tuple(sources))
    return DraftedTree(tree, np.array(tokens), np.array(scores), forwards)


def draft_dyspec(drafter: Drafter, root_token: int, policy: DySpecPolicy) -> DraftedTree:
    """DySpec's greedy tree from the drafter's live probabilities, one proposal batch a level."""
    k = min(CANDIDATES, policy.budget - 1)
    return policy.build(lambda nodes: drafter.propose(nodes, k), root_token)


def draft_specdecpp(drafter: Drafter, root_token: int, policy: ThresholdPolicy) -> DraftedTree:
    """A chain of the drafter's top candidates, stopped by SpecDec++'s threshold rule."""
    tokens, scores, features = [root_token], [1.0], []
    node = DraftNode(0, -1, root_token, 0)
    while len(tokens) <= policy.max_len:
        ((cand, probs),) = drafter.propose([node], CANDIDATES)
        if not cand:
            break
        features.append(candidate_features(np.pad(probs, (0, CANDIDATES - len(probs))))[0])
        tokens.append(int(cand[0]))
        scores.append(scores[-1] * float(probs[0]))
        node = DraftNode(node.id + 1, node.id, int(cand[0]), node.depth + 1)
        if policy.should_stop(np.array(features)):
            break
    tree = Tree.chain(len(tokens) - 1, drafter.source)
    return DraftedTree(tree, np.array(tokens), np.array(scores), len(tokens) - 1)


def goose_template(split: Split, branch_p: np.ndarray, branch_source: str) -> Tree:
    """Goose's tree for a budget split: a spine chain, recycling branches shaped best-first
    under `branch_p` (the branch source's depth table) on the root and on spine nodes."""
    on_spine = spine_allowances(split.spine, split.spine_branches)
    return spine_tree(
        split.spine,
        branch_paths(branch_p, split.root_branches),
        [branch_paths(branch_p, n) for n in on_spine],
        SPINE,
        branch_source,
    )


def draft_goose(
    drafter: GooseDrafter,
    root_token: int,
    policy: GoosePolicy,
    template: Callable[[Split], Tree],
    budget: int | None = None,
) -> DraftedTree:
    """Goose's spine tree: the spine drafter's proposal under the root, recycling branches on
    the root and on spine nodes, split by the policy's running spine acceptance (`template`
    gives the shape of a split). `budget` None: the policy's 60–100 nodes by that acceptance."""
    size = budget or policy.total_budget(policy.acceptance)
    spine, _ = propose_chain(drafter.spine, root_token, policy.split(size, MAX_DEPTH).spine)
    tree = template(policy.split(size, len(spine)))
    preset, node = {}, 0
    for token in spine:
        node = next((c for c in tree.children[node] if tree.sources[c] == SPINE), None)
        if node is None:
            break
        preset[node] = token
    return fill_tree(tree, root_token, lambda source: drafter.branches, preset)



def rsd_s_method(budget: int, beam: int, delay: int = 0, origin: str = "") -> Method:
    """RSD-S: each step's tree drawn by Stochastic Beam Search, a single path of `delay` tokens
    and then `beam` sequences per level, at most `budget` nodes (root included)."""
    widths = sbs_widths(budget, beam, delay, MAX_DEPTH)
    return Method("rsd-s", partial(draft_sbs, widths=widths), 1 + sum(widths),
                  origin or f"stochastic beam search, beam {beam}, delay {delay}",
                  draws="without")


def static_method(name: str, tree: Tree, origin: str) -> Method:
    """Every step drafts `tree`."""
    return Method(name, partial(draft_static, template=tree), tree.size, origin, static=True)


def dyspec_method(budget: int) -> Method:
    """DySpec's greedy tree of `budget` nodes from the drafter's live probabilities."""
    policy = DySpecPolicy(budget, MAX_DEPTH)
    return Method("dyspec", partial(draft_dyspec, policy=policy), budget,
                  "dynamic: greedy on live draft probabilities")


def specdecpp_method(predictor: AcceptancePredictor, budget: int | None, origin: str,
                     threshold: float = AUTHORS_THRESHOLD) -> Method:
    """SpecDec++'s chain, stopped at `threshold` on `predictor`'s acceptance estimates."""
    max_len = MAX_LEN if budget is None else min(MAX_LEN, budget - 1)
    policy = ThresholdPolicy(predictor, threshold, min(MIN_LEN, max_len), max_len)
    return Method("specdecpp", partial(draft_specdecpp, policy=policy), max_len + 1, origin)


def goose_method(policy: GoosePolicy, branch_p: np.ndarray, budget: int | None,
                 origin: str) -> Method:
    """Goose's spine tree; `policy` follows the spine's acceptance from step to step."""
    template = cache(partial(goose_template, branch_p=branch_p, branch_source=RECYCLE))

    def observe(drafted: DraftedTree, verdict: Verdict) -> None:
        policy.update(sum(drafted.tree.sources[v] == SPINE for v in verdict.path[1:]))

    return Method("goose", partial(draft_goose, policy=policy, template=template, budget=budget),
                  budget or BUDGET_RANGE[1], origin, observe=observe)


def load_tree(path: str | Path, drafter: str, target: str) -> Tree:
    """A tree from a JSON file: a bare tree, or `optimize-tree -o` output (its best result),
    which must have been optimised for this `drafter` (its source's kind: `draft` for
    `draft:llama-68m`) and `target` where the file records them."""
    found = read_tree_file(path)
    kind = None if found.source is None else found.source.split(":")[0]
    if kind is not None and kind != drafter:
        raise InputError(f"--tree {path}: optimised for drafter source {found.source}, "
                         f"decoding with --drafter {drafter}")
    if found.target is not None and found.target != target:
        raise InputError(f"--tree {path}: optimised for target {found.target}, decoding "
                         f"{target}")
    return found.tree


@dataclass(frozen=True)
class MethodRequest:
    """What a method is shaped from: the budget (tree size, root included), the drafter, a
    calibration pass (`calibrate(drafters)` → a trace and a description of the pass) and the
    acceptance vector stored with a zoo model, when there is one."""

    budget: int | None
    drafter: Drafter
    calibrate: Callable[[Sequence[Drafter]], tuple[Trace, str]]
    stored: np.ndarray | None = None

    def acceptance(self) -> tuple[np.ndarray, str]:
        """The drafter's positional acceptance and where it came from: the stored vector, else a
        calibration pass."""
        if self.stored is not None:
            return self.stored, "acceptance stored with the model"
        trace, how = self.calibrate([self.drafter])
        return AcceptanceModel.from_trace(trace, self.drafter.source).p, how


def _chain(r: MethodRequest) -> Method:
    depth = min(r.budget - 1, MAX_DEPTH)
    return static_method("chain", Tree.chain(depth, r.drafter.source), f"chain of {depth}")


def _goose(r: MethodRequest) -> Method:
    if not isinstance(r.drafter, GooseDrafter):
        raise InputError("--algo goose needs a Goose drafter (spine and recycling branches)")
    trace, how = r.calibrate([r.drafter.spine, r.drafter.branches])
    spine_p = AcceptanceModel.from_trace(trace, r.drafter.spine.source).p
    branch_p = AcceptanceModel.from_trace(trace, r.drafter.branches.source,
                                          depth_dependent=True, max_depth=BRANCH_DEPTH).p
    return goose_method(GoosePolicy(float(spine_p[0])), branch_p, r.budget,
                        f"branch shapes and initial spine acceptance from {how}")


def _specdecpp(r: MethodRequest) -> Method:
    trace, how = r.calibrate([r.drafter])
    predictor = AcceptancePredictor.fit(_as_ranked(trace), r.drafter.source)
    return specdecpp_method(predictor, r.budget, f"predictor fitted on {how}")


def _stand(r: MethodRequest) -> Method:
    trace, how = r.calibrate([r.drafter])
    return static_method("stand", data_driven_tree(trace, r.drafter.source, r.budget, MAX_DEPTH),
                         f"stand tree: the most accepted nodes of a template replayed on {how}")


def _rsd_s(r: MethodRequest) -> Method:
    p, how = r.acceptance()
    beam = matching_beam(SequoiaDP(p, r.budget, MAX_DEPTH).tree(r.budget))
    return rsd_s_method(r.budget, beam, origin=f"stochastic beam search, beam {beam} (the "
                        f"Sequoia tree's size and depth, from {how})")


def _optimized(algo: str, r: MethodRequest) -> Method:
    """`optimize-tree`'s method `algo` on the drafter's acceptance, within the budget."""
    p, how = r.acceptance()
    ranks = np.atleast_2d(p).shape[1]
    size = min(r.budget, sum(ranks**d for d in range(MAX_DEPTH + 1)))  # one rank: a chain
    tree = TREE_METHODS[algo](Setup(p, r.drafter.source, None, MAX_DEPTH), size, MAX_DEPTH)
    return static_method(algo, tree, f"{algo} tree from {how}")


METHODS: dict[str, Callable[[MethodRequest], Method]] = {
    **{algo: partial(_optimized, algo) for algo in STATIC_METHODS},
    "chain": _chain,
    "dyspec": lambda r: dyspec_method(r.budget),
    "goose": _goose,
    "specdecpp": _specdecpp,
    "rsd-s": _rsd_s,
    "stand": _stand,
}
"""Every `generate --algo` method by name: the static trees of `optimize-tree`, shaped on the
drafter's acceptance, and the methods that grow each step's tree live or from a trace."""


def resolve_method(
    algo: str,
    budget: int | None,
    drafter: Drafter,
    calibrate: Callable[[Sequence[Drafter]], tuple[Trace, str]],
    stored: np.ndarray | None = None,
) -> Method:
    """The named method (`METHODS`) for `drafter` at `budget` (tree size, root included).

    Static methods shape their tree from the acceptance vector `stored` with the model when
    given, else from `calibrate([drafter])` (a trace and a description of the pass); SpecDec++
    fits its predictor, Goose its branch shapes and STAND its tree on the calibration trace too.
    """
    if algo not in METHODS:
        raise InputError(f"--algo: unknown method {algo!r}; known: {', '.join(METHODS)}")
    if budget is None and algo != "goose":
        raise InputError(f"--algo {algo} needs --budget")
    if budget is not None and budget < 2:
        raise InputError(f"--budget must be ≥ 2 (tree size counts the root), got {budget}")
    return METHODS[algo](MethodRequest(budget, drafter, calibrate, stored))


def _as_ranked(trace: Trace) -> Trace:
    """The trace with proposals cleared: a sequence drafter's chain is its top candidate
    followed, so its rows train SpecDec++'s predictor like a ranked drafter's."""
    df = trace.df.with_columns(
        proposal=pl.lit([], dtype=pl.List(pl.Int32)), match_len=pl.lit(0, dtype=pl.Int16)
    )
    return Trace(df, trace.metadata)


