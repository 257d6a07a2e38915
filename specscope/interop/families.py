"""The trees an engine can run, and the best of them on the same acceptance and hardware.

specscope's optimizers choose among all trees of a budget. An engine runs a narrower family:

- `chain`: L drafts, each the top candidate of the one above (transformers' assisted and
  prompt-lookup generation, every engine's draft-model and n-gram proposers);
- `topk`: SGLang's EAGLE tree, set by (steps s, top-k k, draft tokens N). At step 1 the draft
  proposes the root's top k; at each further step every node of the beam (the k best of the
  step before, by cumulative draft probability) proposes its top k, and the k best of those k²
  become the next beam; of all k + (s − 1)k² candidates the N − 1 best are verified with the
  root (`sglang.py` cites the code). Valued here with the positional acceptance standing for
  the draft's probabilities, as `dyspec`'s and `eagle2`'s score trees;
- `levels`: vLLM's `speculative_token_tree` (≤ 0.20.2), drafted level by level with every
  node at depth d − 1 taking its top b_d tokens: a per-level branching (b_1, …, b_D);
- `paths`: TensorRT-LLM's `eagle_choices`, a static tree of paths of child ranks in which each
  node's children are its top ranks (`contiguous`): every tree the DP builds.

`best_*` return the family's best tree by predicted speedup under the optimizers' one scoring
(`optimizers.scoring.score_tree`), each search exact over its family. A family is a subset of
all trees, so the export's unconstrained optimum (`document.py`) is the best of the methods
compared, the DP over every size up to the budget, and the family's own best.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from specscope.errors import InputError
from specscope.optimizers.compare import Setup
from specscope.optimizers.scoring import Score, score_tree
from specscope.tree import ROOT_SOURCE, Tree, acceptance_table


def _score(setup: Setup, algo: str, tree: Tree, replay: bool = True) -> Score:
    """`tree` scored as the optimizers score it; `replay=False` skips the exact replay over
    the trace, which the predicted speedup does not use (a search replays only its winner)."""
    return score_tree(algo, tree, setup.value(tree), setup.pricing,
                      setup.trace if replay else None)


def _beats(score: Score, best: Score | None) -> bool:
    """Whether `score` is faster than `best` beyond rounding (equals keep the earlier, cheaper
    setting)."""
    return best is None or score.speedup > best.speedup * (1 + 1e-12)


def _best(setup: Setup, algo: str, trees: Iterable[Tree]) -> Score:
    """The highest predicted speedup among `trees` (the first of equals: callers list the
    cheaper setting first), replayed over the trace."""
    best: Score | None = None
    for tree in trees:
        scored = _score(setup, algo, tree, replay=False)
        if _beats(scored, best):
            best = scored
    if best is None:
        raise InputError(f"{algo}: no tree of this family fits the budget")
    return _score(setup, algo, best.tree)


def depth_limit(budget: int, max_depth: int | None) -> int:
    """The deepest draft a budget of `budget` nodes allows under the depth cap."""
    return max(0, budget - 1 if max_depth is None else min(budget - 1, max_depth))


def best_chain(setup: Setup, budget: int) -> Score:
    """The best chain of at most `budget` nodes (at least one draft when the budget allows)."""
    cap = depth_limit(budget, setup.max_depth)
    return _best(setup, "chain", (Tree.chain(length, setup.source)
                                  for length in range(min(1, cap), cap + 1)))


@dataclass(frozen=True)
class TopK:
    """SGLang's tree setting: draft steps, top-k per step, tokens verified (root included)."""

    steps: int
    topk: int
    tokens: int

    @property
    def candidates(self) -> int:
        """Nodes drafted: k at the first step, k² at every further step."""
        return self.topk + (self.steps - 1) * self.topk**2


def topk_tree(p: np.ndarray, setting: TopK, source: str) -> Tree:
    """The tree SGLang verifies for `setting` when the draft's probabilities are the
    positional acceptance `p` (a vector, or a depth table whose last row repeats): the
    `tokens − 1` best of the beam search's candidates by cumulative score (module docstring).
    Ties keep the earlier candidate, so every node comes after its parent."""
    table = acceptance_table(p, "acceptance")

    def rate(depth: int, rank: int) -> float:
        row = table[min(depth, table.shape[0]) - 1]
        return float(row[rank]) if rank < row.size else 0.0

    # candidate: (score, order, parent candidate or -1, rank, depth)
    candidates: list[tuple[float, int, int, int, int]] = []
    beam: list[int] = []
    for step in range(1, setting.steps + 1):
        parents = [(-1, 1.0)] if step == 1 else [(c, candidates[c][0]) for c in beam]
        made = []
        for parent, score in parents:
            for rank in range(setting.topk):
                made.append(len(candidates))
                candidates.append((score * rate(step, rank), len(candidates), parent, rank, step))
        beam = heapq.nsmallest(setting.topk, made, key=lambda c: (-candidates[c][0], c))
    kept = sorted(heapq.nsmallest(setting.tokens - 1, range(len(candidates)),
                                  key=lambda c: (-candidates[c][0], c)))
    index = {c: i + 1 for i, c in enumerate(kept)}
    parents = [-1] + [0 if candidates[c][2] < 0 else index[candidates[c][2]] for c in kept]
    ranks = [-1] + [candidates[c][3] for c in kept]
    return Tree.from_parents(parents, ranks, [ROOT_SOURCE] + [source] * len(kept))


def topk_settings(budget: int, max_depth: int | None, max_topk: int,
                  valid: Callable[[TopK], bool] = lambda s: True) -> list[TopK]:
    """Every (steps, top-k, tokens) that fits `budget` nodes and the depth cap, cheapest first."""
    cap = depth_limit(budget, max_depth)
    out = []
    for steps in range(1, cap + 1):
        for topk in range(1, max_topk + 1):
            most = min(budget, TopK(steps, topk, 0).candidates + 1)
            for tokens in range(2, most + 1):
                setting = TopK(steps, topk, tokens)
                if valid(setting):
                    out.append(setting)
    return out


def best_topk(setup: Setup, budget: int, max_topk: int,
              valid: Callable[[TopK], bool] = lambda s: True) -> tuple[TopK, Score]:
    """SGLang's best (steps, top-k, tokens) within `budget` nodes, and its scored tree; steps
    trimmed to the tree's depth (the same tree, fewer draft forwards)."""
    p = np.asarray(setup.p)
    best: tuple[TopK, Score] | None = None
    seen: dict[Tree, Score] = {}
    for setting in topk_settings(budget, setup.max_depth, max_topk, valid):
        tree = topk_tree(p, setting, setup.source)
        scored = seen.get(tree)
        if scored is None:
            scored = seen[tree] = _score(setup, "sglang", tree, replay=False)
        if _beats(scored, best and best[1]):
            best = (setting, scored)
    if best is None:
        raise InputError(f"--budget {budget}: SGLang's tree needs at least 2 tokens")
    setting, scored = best[0], _score(setup, "sglang", best[1].tree)
    trimmed = TopK(max(1, scored.tree.depth), setting.topk, setting.tokens)
    return (trimmed if valid(trimmed) else setting), scored


def level_tree(branching: tuple[int, ...], source: str) -> Tree:
    """Every node at depth d − 1 with children of ranks 0..b_d − 1 (vLLM's tree drafting),
    laid out breadth-first, parent-major, as `Tree` orders nodes."""
    parents, ranks = [-1], [-1]
    level = [0]
    for b in branching:
        start = len(parents)
        for parent in level:
            parents += [parent] * b
            ranks += range(b)
        level = list(range(start, len(parents)))
    return Tree(np.array(parents), np.array(ranks), (ROOT_SOURCE,) + (source,) * (len(parents) - 1))


def best_levels(setup: Setup, budget: int) -> tuple[tuple[int, ...], Score]:
    """The best per-level branching within `budget` nodes and the depth cap, and its tree.

    Exact: a depth-first search over branchings (each b_d at most the acceptance's ranks:
    children past them are never accepted and only cost) that skips the extensions of a
    branching when even their best case, every further level adding its reach times the
    largest row sum of p, over this tree's own step time (an extension drafts and verifies
    more), cannot beat the best found."""
    table = acceptance_table(np.asarray(setup.p), "acceptance")
    cap = depth_limit(budget, setup.max_depth)
    widest = float(table.sum(axis=1).max())
    pricing = setup.pricing
    found: list[tuple[tuple[int, ...], Score]] = []

    def visit(branching: tuple[int, ...], width: int, nodes: int, reach: float) -> None:
        scored = _score(setup, "levels", level_tree(branching, setup.source), replay=False)
        if branching and _beats(scored, found[0][1] if found else None):
            found[:] = [(branching, scored)]
        depth = len(branching)
        if depth == cap or nodes >= budget - 1:
            return
        tokens = scored.expected_tokens + reach * sum(widest**j for j in range(1, cap - depth + 1))
        step = scored.step_time_s - pricing.accepted_s * scored.expected_tokens
        bound = tokens / (step + pricing.accepted_s * tokens) * pricing.autoregressive_s
        if found and bound <= found[0][1].speedup:
            return
        row = table[min(depth + 1, table.shape[0]) - 1]
        for b in range(1, min(row.size, (budget - 1 - nodes) // width) + 1):
            visit((*branching, b), width * b, nodes + width * b, reach * float(row[:b].sum()))

    if cap < 1:
        raise InputError(f"--budget {budget}: a tree needs at least 2 nodes")
    visit((), 1, 0, 1.0)
    branching, best = found[0]
    return branching, _score(setup, "levels", best.tree)


def contiguous(tree: Tree) -> str | None:
    """Why `tree` is not a single-source tree whose every node's children hold ranks
    0..c − 1 (a static tree of paths an EAGLE-style engine drafts top-c per node), or None."""
    sources = set(tree.sources) - {ROOT_SOURCE}
    if len(sources) > 1:
        return f"it mixes sources {sorted(sources)}"
    for children in tree.children:
        ranks = sorted(int(tree.ranks[c]) for c in children)
        if ranks != list(range(len(ranks))):
            return f"a node's children hold ranks {ranks}, not 0..{len(ranks) - 1}"
    return None


def best_paths(setup: Setup, budget: int, unconstrained: Score, dp: Score) -> Score:
    """The best static tree of paths: the DP's (`best_any_size`, whose children are always each
    node's top ranks), or the unconstrained best's tree when it is one (`contiguous`) and
    scores higher as a static tree (a policy's row, SpecDec++'s, is valued as the chain it
    reports)."""
    found = dp
    if contiguous(unconstrained.tree) is None and unconstrained.tree.size <= budget:
        static = _score(setup, "paths", unconstrained.tree)
        if static.speedup > found.speedup:
            return static
    return found
