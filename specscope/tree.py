"""Draft trees: the object every optimizer returns and every executor verifies.

A `Tree` of size n holds n nodes in breadth-first order. Node 0 is the root (the last committed
token); node i > 0 has a parent with a smaller index, a `rank` (0-based rank of its token among
the parent's candidates from its drafter) and a `source` (which drafter proposed it). Depth counts
drafted levels below the root, so a chain of four drafts has n = 5 and depth 4.

Expected tokens per step under a positional acceptance vector p (docs/methods.md#notation): a node
reached by child ranks (k_1..k_d) is accepted with probability f = p[k_1]·…·p[k_d], and G = Σ_v
f(v), the root contributing the bonus token.

A tree file is JSON: a bare tree (`Tree.to_dict`) or `optimize-tree --json`/`-o` output, whose
results each carry a tree (`read_tree_file`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from specscope.errors import InputError
from specscope.files import read_json
from specscope.json_out import strict_json

ROOT_SOURCE = "root"
DEFAULT_SOURCE = "draft"

Acceptance = np.ndarray | Sequence[float] | Sequence[Sequence[float]]
"""A positional vector p[k] (rank k, 0-based) or a depth table p[d-1][k]."""


@dataclass(frozen=True, eq=False)
class Tree:
    """A draft tree in breadth-first order; see the module docstring for the conventions."""

    parents: np.ndarray
    ranks: np.ndarray
    sources: tuple[str, ...]

    def __post_init__(self) -> None:
        parents = np.asarray(self.parents, dtype=np.int64).reshape(-1)
        ranks = np.asarray(self.ranks, dtype=np.int64).reshape(-1)
        sources = tuple(str(s) for s in self.sources)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "ranks", ranks)
        object.__setattr__(self, "sources", sources)
        parents.setflags(write=False)
        ranks.setflags(write=False)
        depths = _validate(parents, ranks, sources)
        depths.setflags(write=False)
        object.__setattr__(self, "_node_depths", depths)

    # ---- construction -------------------------------------------------------------------

    @classmethod
    def root(cls) -> Tree:
        """The tree of the root alone (plain autoregressive decoding: n = 1, G = 1)."""
        return cls(np.array([-1]), np.array([-1]), (ROOT_SOURCE,))

    @classmethod
    def chain(cls, length: int, source: str = DEFAULT_SOURCE) -> Tree:
        """A chain of `length` drafts, each the top-ranked candidate of the one above."""
        if length < 0:
            raise InputError(f"chain length must be ≥ 0, got {length}")
        parents = np.arange(-1, length)
        ranks = np.r_[-1, np.zeros(length, dtype=np.int64)]
        return cls(parents, ranks, (ROOT_SOURCE,) + (source,) * length)

    @classmethod
    def from_parents(
        cls,
        parents: Sequence[int],
        ranks: Sequence[int] | None = None,
        sources: Sequence[str] | None = None,
    ) -> Tree:
        """Build a tree from parents in any topological order, reordered breadth-first.

        Siblings are ordered by (source, rank). Missing ranks default to the order of siblings,
        missing sources to "draft".
        """
        par = np.asarray(parents, dtype=np.int64).reshape(-1)
        n = par.size
        if n == 0 or par[0] != -1:
            raise InputError("tree: node 0 must be the root (parent -1)")
        if np.any(par[1:] < 0) or np.any(par[1:] >= np.arange(1, n)):
            raise InputError("tree: parents must come before their children (topological order)")
        if ranks is None:
            rk = np.full(n, -1, dtype=np.int64)
            seen: dict[int, int] = {}
            for i in range(1, n):
                rk[i] = seen.get(int(par[i]), 0)
                seen[int(par[i])] = rk[i] + 1
        else:
            rk = np.asarray(ranks, dtype=np.int64).reshape(-1)
        src = [ROOT_SOURCE] + [DEFAULT_SOURCE] * (n - 1) if sources is None else list(sources)
        if rk.size != n or len(src) != n:
            raise InputError(f"tree: {n} parents but {rk.size} ranks and {len(src)} sources")
        depth = _depths(par)
        # Breadth-first: order by depth, then by the parent's new position, then (source, rank).
        order = [0]
        new_index = {0: 0}
        for d in range(1, int(depth.max()) + 1):
            level = [i for i in range(n) if depth[i] == d]
            level.sort(key=lambda i: (new_index[int(par[i])], src[i], rk[i]))
            for i in level:
                new_index[i] = len(order)
                order.append(i)
        new_par = [-1] + [new_index[int(par[i])] for i in order[1:]]
        return cls(np.array(new_par), rk[order], tuple(src[i] for i in order))

    @classmethod
    def from_rank_paths(
        cls, paths: Iterable[Sequence[int]], source: str = DEFAULT_SOURCE
    ) -> Tree:
        """Build a single-source tree from the rank paths (0-based) of its non-root nodes.

        Every prefix of a path must itself be a path (the set must be ancestor-closed).
        """
        keys = {tuple(int(k) for k in p) for p in paths}
        keys.discard(())
        ordered = sorted(keys, key=lambda p: (len(p), p))
        index = {(): 0}
        parents, ranks = [-1], [-1]
        for p in ordered:
            if p[:-1] not in index:
                raise InputError(f"tree: path {list(p)} has no parent path {list(p[:-1])}")
            index[p] = len(parents)
            parents.append(index[p[:-1]])
            ranks.append(p[-1])
        return cls.from_parents(parents, ranks, [ROOT_SOURCE] + [source] * (len(parents) - 1))

    # ---- structure -----------------------------------------------------------------------

    @property
    def size(self) -> int:
        """n: tokens in the verification pass, the root included."""
        return int(self.parents.size)

    def __len__(self) -> int:
        return self.size

    @property
    def depths(self) -> np.ndarray:
        """Depth of every node (root 0); computed once, by validation."""
        return self._node_depths

    @property
    def depth(self) -> int:
        """d: drafted levels below the root."""
        return int(self.depths[-1])

    @cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """Children of every node, in index order."""
        kids: list[list[int]] = [[] for _ in range(self.size)]
        for i in range(1, self.size):
            kids[self.parents[i]].append(i)
        return tuple(tuple(k) for k in kids)

    @property
    def leaves(self) -> np.ndarray:
        """Indices of nodes without children."""
        return np.array([i for i, k in enumerate(self.children) if not k], dtype=np.int64)

    @cached_property
    def ancestor_mask(self) -> np.ndarray:
        """Boolean (n, n): mask[i, j] is True when j is an ancestor of i or i itself."""
        n = self.size
        mask = np.zeros((n, n), dtype=bool)
        mask[0, 0] = True
        for i in range(1, n):
            mask[i] = mask[self.parents[i]]
            mask[i, i] = True
        mask.setflags(write=False)
        return mask

    def path(self, node: int) -> list[int]:
        """Node indices from the root down to `node`, both included."""
        out = [node]
        while out[-1] != 0:
            out.append(int(self.parents[out[-1]]))
        return out[::-1]

    def paths(self) -> list[list[int]]:
        """Root-to-node paths of every node."""
        return [self.path(i) for i in range(self.size)]

    def rank_paths(self) -> list[tuple[int, ...]]:
        """Each drafted node's child ranks from the root down (`from_rank_paths`' input): how
        engines write a static tree."""
        return [tuple(int(self.ranks[v]) for v in self.path(node)[1:])
                for node in range(1, self.size)]

    @property
    def is_chain(self) -> bool:
        """Whether every drafted node is the top-ranked child of the one above."""
        return self.depth == self.size - 1 and not self.ranks[1:].any()

    # ---- acceptance ----------------------------------------------------------------------

    def node_scores(self, p: Acceptance | Mapping[str, Acceptance]) -> np.ndarray:
        """f(v) for every node: the product of positional acceptances along its path (root 1).

        `p` is a vector over ranks, a depth × rank table (depths past the last row use the last
        row), or a mapping from source name to either. Ranks past the vector's end score 0.
        """
        tables = (
            {s: acceptance_table(v, s) for s, v in p.items()}
            if isinstance(p, Mapping)
            else None
        )
        single = None if tables is not None else acceptance_table(p, "p")
        f = np.ones(self.size)
        depths = self.depths
        for i in range(1, self.size):
            if tables is None:
                table = single
            else:
                table = tables.get(self.sources[i])
                if table is None:
                    raise InputError(f"no acceptance vector for source {self.sources[i]!r}")
            row = table[min(depths[i], table.shape[0]) - 1]
            r = self.ranks[i]
            f[i] = f[self.parents[i]] * (row[r] if r < row.size else 0.0)
        return f

    def expected_tokens(self, p: Acceptance | Mapping[str, Acceptance]) -> float:
        """G: expected tokens per verification step (accepted drafts + the bonus token)."""
        return float(self.node_scores(p).sum())

    # ---- serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict[str, list]:
        """{"parents": [...], "ranks": [...], "sources": [...]} with plain Python values."""
        return {
            "parents": self.parents.tolist(),
            "ranks": self.ranks.tolist(),
            "sources": list(self.sources),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Sequence]) -> Tree:
        """Inverse of `to_dict`; a missing or malformed field is an `InputError`."""
        if not isinstance(data, Mapping):
            raise InputError("tree: expected an object with parents, ranks and sources")
        missing = [k for k in ("parents", "ranks", "sources") if k not in data]
        if missing:
            raise InputError(f"tree: missing field {', '.join(missing)}")
        parents, ranks, sources = data["parents"], data["ranks"], data["sources"]
        if not all(isinstance(v, list) for v in (parents, ranks, sources)):
            raise InputError("tree: parents, ranks and sources must be lists")
        if not (len(parents) == len(ranks) == len(sources)):
            raise InputError("tree: parents, ranks and sources differ in length")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (*parents, *ranks)):
            raise InputError("tree: parents and ranks must be integers")
        if not all(isinstance(v, str) for v in sources):
            raise InputError("tree: sources must be strings")
        try:
            arrays = np.array(parents, dtype=np.int64), np.array(ranks, dtype=np.int64)
        except OverflowError:
            raise InputError("tree: parents and ranks must fit 64-bit integers") from None
        return cls(*arrays, sources)

    def to_json(self) -> str:
        """JSON text of `to_dict`."""
        return strict_json(self.to_dict(), None)

    @classmethod
    def from_json(cls, text: str) -> Tree:
        """Inverse of `to_json`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"tree: not JSON ({exc.msg} at line {exc.lineno})") from None
        return cls.from_dict(data)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Tree)
            and np.array_equal(self.parents, other.parents)
            and np.array_equal(self.ranks, other.ranks)
            and self.sources == other.sources
        )

    def __hash__(self) -> int:
        return hash((self.parents.tobytes(), self.ranks.tobytes(), self.sources))

    def __repr__(self) -> str:
        return f"Tree(n={self.size}, depth={self.depth}, sources={sorted(set(self.sources[1:]))})"


def _depths(parents: np.ndarray) -> np.ndarray:
    """Depth of every node of a topologically ordered parent array (root 0)."""
    depth = np.zeros(parents.size, dtype=np.int64)
    for i in range(1, parents.size):
        depth[i] = depth[parents[i]] + 1
    return depth


def _validate(parents: np.ndarray, ranks: np.ndarray, sources: tuple[str, ...]) -> np.ndarray:
    """Raise `InputError` for a malformed tree; return the node depths it computed."""
    n = parents.size
    if n == 0:
        raise InputError("tree: empty (the root is required)")
    if ranks.size != n or len(sources) != n:
        raise InputError(f"tree: {n} parents but {ranks.size} ranks and {len(sources)} sources")
    if parents[0] != -1:
        raise InputError(f"tree: node 0 must be the root (parent -1), got parent {parents[0]}")
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    idx = np.arange(1, n)
    bad = np.flatnonzero((parents[1:] < 0) | (parents[1:] >= idx))
    if bad.size:
        i = int(bad[0]) + 1
        raise InputError(f"tree: node {i} has parent {parents[i]}; parents must precede children")
    bad = np.flatnonzero(ranks[1:] < 0)
    if bad.size:
        raise InputError(f"tree: node {int(bad[0]) + 1} has negative rank")
    depth = _depths(parents)
    bad = np.flatnonzero(np.diff(depth) < 0)
    if bad.size:
        raise InputError(f"tree: node {int(bad[0]) + 1} breaks breadth-first order")
    seen: set[tuple[int, str, int]] = set()
    for i in range(1, n):
        key = (int(parents[i]), sources[i], int(ranks[i]))
        if key in seen:
            raise InputError(
                f"tree: node {i} repeats rank {ranks[i]} of source {sources[i]!r} under node "
                f"{parents[i]}"
            )
        seen.add(key)
    return depth


def acceptance_table(p: Acceptance, name: str = "acceptance") -> np.ndarray:
    """A positional vector or depth table as a 2-D float array, checked to be probabilities."""
    table = np.asarray(p, dtype=np.float64)
    if table.ndim == 1:
        table = table[None, :]
    if table.ndim != 2 or table.shape[1] == 0:
        raise InputError(f"{name}: expected a vector or a depth × rank table")
    if not np.all(np.isfinite(table)) or table.min() < 0 or table.max() > 1:
        raise InputError(f"{name}: entries must lie in [0, 1]")
    if np.any(table.sum(axis=1) > 1 + 1e-9):
        raise InputError(f"{name}: entries sum over 1 (they are marginal probabilities)")
    return table


def scaled_acceptance(p: np.ndarray, scale: float) -> np.ndarray:
    """Positional acceptance (last axis: ranks) times `scale`, renormalised where a row's sum
    would pass 1 (a drift schedule's or a system's change of acceptance)."""
    scaled = np.asarray(p, dtype=np.float64) * scale
    return scaled / np.maximum(1.0, scaled.sum(axis=-1, keepdims=True))


@dataclass(frozen=True)
class TreeFile:
    """A tree read from a JSON file, with what `optimize-tree` recorded about it (None for a
    bare tree): the target and drafter source it was optimised for, its method, its predicted
    speedup and the file's best one, and the drafter it priced."""

    tree: Tree
    target: str | None = None
    source: str | None = None
    algo: str | None = None
    speedup: float | None = None
    best_speedup: float | None = None
    drafter: str | None = None


OPTIMIZED_KEYS = ("target", "source")
"""What an optimize-tree file states its trees were chosen for: the model they are verified by
and the source that drafts them."""


def read_tree_file(path: str | Path, algo: str | None = None) -> TreeFile:
    """A tree from a JSON file: a bare tree (`Tree.to_dict`), `optimize-tree --json` / `-o`
    output, whose best result is taken, or the result of method `algo`, or an engine's
    configuration (`export`, `optimize-tree --to`), whose tree it verifies."""
    path = Path(path)
    data = read_json(path, "tree file")
    if isinstance(data, dict) and {"engine", "config", "tree"} <= set(data):
        if algo is not None:
            raise InputError(f"--algo {algo}: {path} holds one engine configuration's tree")
        _check_names(data, path)
        verified = data["tree"]  # optimize-tree --to keeps the scored tree, export the tree
        if isinstance(verified, dict) and "tree" in verified:
            verified = verified["tree"]
        return TreeFile(_tree(verified, path), data.get("target"), data.get("source"), None,
                        _number(data.get("predicted")), _number(data.get("unconstrained")),
                        data.get("drafter"))
    if not (isinstance(data, dict) and "results" in data):
        if algo is not None:
            raise InputError(f"--algo {algo}: {path} holds one bare tree, not optimize-tree "
                             "output")
        return TreeFile(_tree(data, path))
    results = data["results"]
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise InputError(f"{path}: optimize-tree output's results must be a list of objects")
    if not results:
        raise InputError(f"{path}: optimize-tree output without results")
    missing = [key for key in OPTIMIZED_KEYS if key not in data]
    if missing:  # without them no check can tell what the trees were chosen for
        raise InputError(f"{path}: optimize-tree output without its {', '.join(missing)} (the "
                         f"file was cut or edited); write it again with optimize-tree -o")
    _check_names(data, path)
    chosen = results[0] if algo is None else next(
        (r for r in results if r.get("algo") == algo), None)
    if chosen is None:
        raise InputError(f"--algo {algo}: not in {path} (methods: "
                         f"{', '.join(str(r.get('algo')) for r in results)})")
    return TreeFile(_tree(chosen.get("tree"), path), data.get("target"), data.get("source"),
                    chosen.get("algo"), _speedup(chosen), _speedup(results[0]),
                    data.get("drafter"))


def _check_names(data: dict, path: Path) -> None:
    """The names a tree file records (what its trees were chosen for) are strings, if present."""
    for key in ("target", "source", "drafter"):
        value = data.get(key)
        if value is not None and not (isinstance(value, str) and value):
            raise InputError(f"{path}: {key} must be a non-empty string, got {value!r:.40}")


def _speedup(result: object) -> float | None:
    """A result's recorded speedup, when it records a number."""
    return _number(result.get("speedup") if isinstance(result, dict) else None)


def _number(value: object) -> float | None:
    """`value` as a float when it is a number (not a bool), else None."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def _tree(data: object, path: Path) -> Tree:
    try:
        return Tree.from_dict(data)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
