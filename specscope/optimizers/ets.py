"""The ETS integer program (2025) on draft trees: choose the kept nodes of a candidate pool.

ETS keeps part of a large search tree by solving a 0/1 program with PuLP + CBC. specscope uses
the same form on draft trees. Every pool node v has a binary x_v (the root is fixed to 1) and
the program is

    maximise   Σ_v f(v)·x_v − λ_kv·(Σ_v x_v)/|pool| + λ_cov·(Σ_g c_g)/|groups|
    subject to x_v ≤ x_parent(v)                    a kept node keeps its ancestors
               x_v ≤ x_sibling(v)                   rank k only after rank k−1 (same parent, source)
               Σ_v x_v ≤ budget                     tokens in the verification pass, root included
               Σ_v x_v · kv_bytes_per_token ≤ kv_budget_bytes     (optional)
               c_g ≤ Σ_{v∈g} x_v, c_g binary        a group counts once one of its nodes is kept

f(v) is the node score of `Tree.node_scores` (the probability that v is accepted). The sibling
constraint restricts the program to Sequoia's tree space, where a node verifies its top-b
candidates of a source: that is what a drafter proposes, and it makes the program comparable
with the DP. The λ_kv term is ETS's KV-cache cost (shared prefixes are paid once); the coverage
term rewards keeping several drafter sources (default groups) or user-defined token groups. The
depth cap is enforced by the pool itself, which holds no node below it.

The pool of a (request, source) is best-first (`best_first_tree`, `pool_factor` times the
request's share of the budget) united with the DP-optimal tree of the size the exact allocation
gives that source (Sequoia's DP per source, then a knapsack over sources and requests). So the
pool provably contains an optimum of the program without side terms: with the authors' defaults
λ_kv = λ_cov = 0 ETS must reach the DP's value, and `ets_gap` exposes that cross-check. What
ETS adds is what the DP cannot express: a KV-byte budget, coverage of sources or groups, and
`ets_batch`, one verification budget shared by the requests of a batch in one program.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from specscope.errors import InputError
from specscope.optimizers.baselines import best_first_tree
from specscope.optimizers.sequoia import SequoiaDP
from specscope.tree import ROOT_SOURCE, Acceptance, Tree, acceptance_table

if TYPE_CHECKING:  # imported where the program is solved: the GPU image has no PuLP
    import pulp

PULP_MISSING = ("ETS solves an integer program with PuLP and its CBC solver, which is not "
                "installed here (pip install 'pulp>=3.3.1,<4')")


def pulp_available() -> bool:
    """Whether PuLP is installed here (ETS needs it; nothing else does), without importing it."""
    return importlib.util.find_spec("pulp") is not None


def _pulp() -> ModuleType:
    """The `pulp` module, or a one-line `InputError` where it is not installed."""
    try:
        import pulp
    except ImportError as exc:
        raise InputError(PULP_MISSING) from exc
    return pulp

NodeKey = tuple[str, tuple[int, ...]]
"""A pool node by its drafter source and child ranks from the root (0-based)."""

Groups = Mapping[NodeKey, Hashable] | Callable[[str, tuple[int, ...]], Hashable | None]
"""Coverage groups: node → group name (None or absent: in no group)."""

RequestAcceptance = Acceptance | Mapping[str, Acceptance]
"""One request's acceptance: a vector, a depth table, or a mapping source → either."""


@dataclass(frozen=True)
class _Side:
    """The terms and constraints the DP cannot express (zero/None: the pure program)."""

    kv_penalty: float = 0.0
    coverage: float = 0.0
    kv_budget_bytes: float | None = None
    kv_bytes_per_token: float | None = None
    groups: Groups | None = None
    time_limit_s: float | None = None

    def __post_init__(self) -> None:
        if self.kv_penalty < 0 or self.coverage < 0:
            raise InputError(
                f"kv_penalty and coverage must be ≥ 0, got {self.kv_penalty} and {self.coverage}"
            )
        if (self.kv_budget_bytes is None) != (self.kv_bytes_per_token is None):
            raise InputError("kv_budget_bytes and kv_bytes_per_token must be given together")
        if self.kv_bytes_per_token is not None and self.kv_bytes_per_token <= 0:
            raise InputError(f"kv_bytes_per_token must be > 0, got {self.kv_bytes_per_token}")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise InputError(f"time_limit_s must be > 0, got {self.time_limit_s}")


def _tables(p: RequestAcceptance, source: str) -> dict[str, np.ndarray]:
    """One request's acceptance as source → 2-D table."""
    if isinstance(p, Mapping):
        if not p:
            raise InputError("p: the mapping source → acceptance is empty")
        return {str(s): acceptance_table(v, f"p[{s!r}]") for s, v in p.items()}
    return {source: acceptance_table(p, "p")}


def _check(n_requests: int, total: int, max_depth: int | None) -> None:
    if n_requests < 1:
        raise InputError("ps: at least one request is required")
    if total < n_requests:
        what = "budget" if n_requests == 1 else f"total_budget (for {n_requests} requests)"
        raise InputError(
            f"{what} must be ≥ {n_requests} (every tree keeps its root), got {total}"
        )
    if max_depth is not None and max_depth < 0:
        raise InputError(f"max_depth must be ≥ 0, got {max_depth}")


def _depth_cap(n_requests: int, total: int, max_depth: int | None) -> int:
    """The deepest a node can be: one request drafting every node the others leave it."""
    capacity = total - n_requests
    return capacity if max_depth is None else min(max_depth, capacity)


def _allocate(columns: Sequence[np.ndarray], capacity: int) -> list[int]:
    """Units k_j per part maximising Σ_j columns[j][k_j] subject to Σ_j k_j ≤ capacity.

    columns[j][k] is part j's value with exactly k units (−inf where impossible, finite at 0).
    Ties go to fewer units.
    """
    best = np.zeros(capacity + 1)  # best[t]: the parts so far with at most t units
    choices = []
    for col in columns:
        at_most = np.maximum.accumulate(col[: capacity + 1])
        new, arg = np.full(capacity + 1, -np.inf), np.zeros(capacity + 1, dtype=np.int64)
        for k, value in enumerate(at_most):
            cand = best[: capacity + 1 - k] + value
            better = cand > new[k:]
            new[k:][better] = cand[better]
            arg[k:][better] = k
        best = new
        choices.append(arg)
    units, t = [], capacity
    for arg in reversed(choices):
        units.append(int(arg[t]))
        t -= units[-1]
    return units[::-1]


def _node_keys(tree: Tree) -> list[NodeKey]:
    """(source, rank path) of every node of `tree`, in its order (the root: (root, ()))."""
    paths: list[tuple[int, ...]] = [()]
    for i in range(1, tree.size):
        paths.append((*paths[tree.parents[i]], int(tree.ranks[i])))
    return list(zip(tree.sources, paths, strict=True))


def _tree_from_keys(keys: Iterable[NodeKey]) -> Tree:
    """The tree of the root and these nodes (ancestor-closed within each source)."""
    ordered = sorted({k for k in keys if k[1]}, key=lambda k: (len(k[1]), k))
    index: dict[NodeKey, int] = {}
    parents, ranks, sources = [-1], [-1], [ROOT_SOURCE]
    for src, path in ordered:
        index[src, path] = len(parents)
        parents.append(0 if len(path) == 1 else index[src, path[:-1]])
        ranks.append(path[-1])
        sources.append(src)
    return Tree.from_parents(parents, ranks, sources)


def _dp_trees(
    requests: Sequence[dict[str, np.ndarray]], total: int, max_depth: int | None
) -> list[list[Tree]]:
    """The exact optimum: per request, one DP tree per source, sizes from a joint knapsack.

    Every request keeps its root, so total − B drafted nodes are shared among all (request,
    source) parts; a part drafting k nodes is worth the best G − 1 of a (k+1)-node tree.
    """
    capacity = total - len(requests)
    cap = _depth_cap(len(requests), total, max_depth)
    dps: dict[tuple[tuple[int, ...], bytes], SequoiaDP] = {}  # one DP per distinct table

    def dp_of(table: np.ndarray) -> SequoiaDP:
        key = (table.shape, table.tobytes())
        if key not in dps:
            dps[key] = SequoiaDP(table, capacity + 1, cap)
        return dps[key]

    solved = [[(src, dp_of(table)) for src, table in tables.items()] for tables in requests]
    flat = [dp for parts in solved for _, dp in parts]
    columns = [dp.table[1:, dp.depth] - 1.0 for dp in flat]
    units = iter(_allocate(columns, capacity))
    trees = []
    for parts in solved:
        row = []
        for src, dp in parts:
            k = next(units)
            # The smallest tree reaching the best value with at most k drafted nodes.
            size = 1 + int(np.argmax(dp.table[1 : k + 2, dp.depth]))
            row.append(dp.tree(size, source=src))
        trees.append(row)
    return trees


def _pools(
    requests: Sequence[dict[str, np.ndarray]],
    total: int,
    max_depth: int | None,
    pool_factor: int,
) -> list[Tree]:
    """Candidate tree per request: best-first pools united with the DP optimum's nodes."""
    if pool_factor < 1:
        raise InputError(f"pool_factor must be ≥ 1, got {pool_factor}")
    cap = _depth_cap(len(requests), total, max_depth)
    share = pool_factor * (total // len(requests))
    pools = []
    for tables, dp_trees in zip(requests, _dp_trees(requests, total, max_depth), strict=True):
        keys: set[NodeKey] = set()
        for (src, table), dp_tree in zip(tables.items(), dp_trees, strict=True):
            keys.update(_node_keys(best_first_tree(table, share, cap, src)))
            keys.update(_node_keys(dp_tree))
        pools.append(_tree_from_keys(keys))
    return pools


def _group_of(groups: Groups | None) -> Callable[[str, tuple[int, ...]], Hashable | None]:
    """Groups as a function of (source, rank path); by default each drafter source."""
    if groups is None:
        return lambda src, path: src
    if isinstance(groups, Mapping):
        return lambda src, path: groups.get((src, path))
    return groups


def _program(
    requests: Sequence[dict[str, np.ndarray]],
    pools: Sequence[Tree],
    total: int,
    side: _Side,
) -> tuple[pulp.LpProblem, list[list[pulp.LpVariable]]]:
    """The integer program over every request's pool (see the module docstring)."""
    pulp = _pulp()
    prob = pulp.LpProblem("ets", pulp.LpMaximize)
    pool_size = sum(pool.size for pool in pools)
    group_of = _group_of(side.groups)
    objective: list[tuple[pulp.LpVariable, float]] = []
    members: dict[tuple[int, Hashable], list[pulp.LpVariable]] = {}
    xs = []
    for r, (tables, pool) in enumerate(zip(requests, pools, strict=True)):
        keys, scores = _node_keys(pool), pool.node_scores(tables)
        x = [prob.add_variable(f"x_{r}_{i}", cat=pulp.LpBinary) for i in range(len(keys))]
        index = {key: i for i, key in enumerate(keys)}
        prob += x[0] == 1, f"root_{r}"
        for i, (src, path) in enumerate(keys[1:], start=1):
            parent = 0 if len(path) == 1 else index[src, path[:-1]]
            prob += x[i] <= x[parent]
            if path[-1] > 0:
                prob += x[i] <= x[index[src, (*path[:-1], path[-1] - 1)]]
            group = group_of(src, path)
            if group is not None:
                members.setdefault((r, group), []).append(x[i])
        objective += [(v, f - side.kv_penalty / pool_size) for v, f in zip(x, scores, strict=True)]
        xs.append(x)
    every = [v for x in xs for v in x]
    prob += pulp.lpSum(every) <= total, "budget"
    if side.kv_budget_bytes is not None:
        prob += pulp.lpSum(every) * side.kv_bytes_per_token <= side.kv_budget_bytes, "kv_bytes"
    if side.coverage > 0 and members:
        for g, kept in enumerate(members.values()):
            c = prob.add_variable(f"c_{g}", cat=pulp.LpBinary)
            prob += c <= pulp.lpSum(kept), f"cover_{g}"
            objective.append((c, side.coverage / len(members)))
    prob.setObjective(pulp.LpAffineExpression(objective))
    return prob, xs


def _solve(
    requests: Sequence[dict[str, np.ndarray]],
    total: int,
    max_depth: int | None,
    pool_factor: int,
    side: _Side,
) -> list[Tree]:
    _check(len(requests), total, max_depth)
    if side.kv_budget_bytes is not None and (
        side.kv_budget_bytes < len(requests) * side.kv_bytes_per_token
    ):
        raise InputError(
            f"kv_budget_bytes={side.kv_budget_bytes} cannot hold the {len(requests)} root "
            f"token(s) at {side.kv_bytes_per_token} bytes each"
        )
    pulp = _pulp()
    pools = _pools(requests, total, max_depth, pool_factor)
    prob, xs = _program(requests, pools, total, side)
    # CBC's default cutoff increment discards improvements below ~1e-5, which deep nodes'
    # scores are; 0 keeps the solve exact.
    cbc = pulp.PULP_CBC_CMD(msg=False, timeLimit=side.time_limit_s, options=["increment 0"])
    prob.solve(cbc)
    if prob.sol_status != pulp.LpSolutionOptimal:
        limit = "" if side.time_limit_s is None else f" within time_limit_s={side.time_limit_s}"
        raise InputError(
            f"ETS: CBC found no proven optimum{limit} (status {pulp.LpStatus[prob.status]})"
        )
    return [
        _tree_from_keys(key for key, v in zip(_node_keys(pool), x, strict=True) if v.varValue > 0.5)
        for pool, x in zip(pools, xs, strict=True)
    ]


def ets_tree(
    p: RequestAcceptance,
    budget: int,
    max_depth: int | None = None,
    source: str = "draft",
    kv_penalty: float = 0.0,
    coverage: float = 0.0,
    pool_factor: int = 4,
    kv_budget_bytes: float | None = None,
    kv_bytes_per_token: float | None = None,
    time_limit_s: float | None = None,
    groups: Groups | None = None,
) -> Tree:
    """The ETS-optimal tree of at most `budget` nodes (root included) and depth ≤ max_depth.

    `p` is a vector over ranks, a depth × rank table, or a mapping drafter source → either
    (`source` names the nodes when p is not a mapping). As in Sequoia's tree space, a node keeps
    the top-b candidates of each source. `kv_penalty` (λ_kv) charges each kept node 1/|pool|;
    `coverage` (λ_cov) rewards each covered group, split equally among groups (by default the
    drafter sources; `groups` maps (source, rank path) → group instead).
    `kv_budget_bytes` with `kv_bytes_per_token` caps the tree's KV bytes. With λ_kv = λ_cov = 0
    the value equals the DP optimum (`ets_gap`). Bad input, or no proven optimum within
    `time_limit_s`, is an `InputError`.
    """
    side = _Side(kv_penalty, coverage, kv_budget_bytes, kv_bytes_per_token, groups, time_limit_s)
    return _solve([_tables(p, source)], budget, max_depth, pool_factor, side)[0]


def ets_batch(
    ps: Sequence[RequestAcceptance],
    total_budget: int,
    max_depth: int | None = None,
    source: str = "draft",
    kv_penalty: float = 0.0,
    coverage: float = 0.0,
    pool_factor: int = 4,
    kv_budget_bytes: float | None = None,
    kv_bytes_per_token: float | None = None,
    time_limit_s: float | None = None,
    groups: Groups | None = None,
) -> list[Tree]:
    """One tree per request, sharing one verification budget, solved jointly in one program.

    `total_budget` counts every request's tree tokens (roots included); each request keeps at
    least its root. A request with a strong drafter gets more nodes than one with a weak drafter,
    which is where the joint allocation beats `equal_split`. KV bytes, the λ_kv charge and the
    coverage groups (per request) are over the whole batch; each request's pool is
    `pool_factor` times its equal share. Other arguments as in `ets_tree`.
    """
    side = _Side(kv_penalty, coverage, kv_budget_bytes, kv_bytes_per_token, groups, time_limit_s)
    return _solve([_tables(p, source) for p in ps], total_budget, max_depth, pool_factor, side)


def dp_batch(
    ps: Sequence[RequestAcceptance],
    total_budget: int,
    max_depth: int | None = None,
    source: str = "draft",
) -> list[Tree]:
    """The exact joint optimum of `ets_batch` without side terms, by the DP (the reference).

    Sequoia's DP per (request, source), then a knapsack over the drafted nodes.
    """
    requests = [_tables(p, source) for p in ps]
    _check(len(requests), total_budget, max_depth)
    return [
        _tree_from_keys(k for tree in trees for k in _node_keys(tree))
        for trees in _dp_trees(requests, total_budget, max_depth)
    ]


def dp_tree(
    p: RequestAcceptance, budget: int, max_depth: int | None = None, source: str = "draft"
) -> Tree:
    """The DP-optimal tree of at most `budget` nodes (several sources: the best split of them)."""
    return dp_batch([p], budget, max_depth, source)[0]


def equal_split(
    ps: Sequence[RequestAcceptance],
    total_budget: int,
    max_depth: int | None = None,
    source: str = "draft",
) -> list[Tree]:
    """The usual batch policy, for comparison: each request's DP tree at total_budget // B."""
    _check(len(ps), total_budget, max_depth)
    return [dp_tree(p, total_budget // len(ps), max_depth, source) for p in ps]


def ets_gap(
    p: RequestAcceptance,
    budget: int,
    max_depth: int | None = None,
    source: str = "draft",
    pool_factor: int = 4,
    time_limit_s: float | None = None,
) -> float:
    """Built-in cross-check: G(ETS without side terms) − G(DP optimum); 0 up to CBC's tolerance."""
    ets = ets_tree(p, budget, max_depth, source, pool_factor=pool_factor,
                   time_limit_s=time_limit_s)
    ref = dp_tree(p, budget, max_depth, source)
    tables = _tables(p, source)
    return ets.expected_tokens(tables) - ref.expected_tokens(tables)


def candidate_pool(
    p: RequestAcceptance,
    budget: int,
    max_depth: int | None = None,
    source: str = "draft",
    pool_factor: int = 4,
) -> Tree:
    """The candidate tree `ets_tree` chooses from (to inspect it, or to define `groups`)."""
    _check(1, budget, max_depth)
    return _pools([_tables(p, source)], budget, max_depth, pool_factor)[0]
