"""Sequoia's dynamic program (Chen et al. 2024): the best static tree for a positional vector.

Tree space (the paper's): a node with b children holds its top-b candidates, ranks 1..b. A node
reached by child ranks (k_1..k_d) scores f = Π p_{k_i}; G(T) = Σ_v f(v). Recurrence over
T[m, l, b] = best G of an m-node tree with at most l levels whose root has exactly b children:

    T[1, l, 0] = 1
    T[m, l, b] = max_{1≤y≤m−1} T[y, l, b−1] + p_b · M[m−y, l−1],   M[m, l] = max_b T[m, l, b]

(b = 1 is the same formula with T[y, l, 0] finite only at y = 1). 0 · (−inf) counts as −inf, so
zeros in p and non-monotone vectors are exact.

Speed: for one (level, b) the max over y for every m at once is a max-plus convolution,
computed block by block over a strided Toeplitz view with a reused buffer, touching only the
finite ranges of both operands. Only values are kept; the argmax split of a (level, m, b) is
recomputed on demand while rebuilding a tree (n of them, O(n) each), which makes the solve 3×
faster than carrying argmaxes. A depth-independent vector needs one bottom-up pass for every
depth cap and stops at a fixed point; a depth table p[depth−1][rank] makes a subtree's value
depend on its absolute depth, so each cap needs its own pass (D passes instead of one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from specscope.errors import InputError
from specscope.tree import ROOT_SOURCE, Acceptance, Tree, acceptance_table

NEG = -np.inf
_BLOCK = 96  # rows of the (m, y) triangle handled per numpy call


@dataclass(frozen=True)
class _Level:
    """One bottom-up step: T[b][m] for every child count b, and what it was computed from."""

    t: np.ndarray  # (B+1, N+1) best G of an m-node subtree whose root has exactly b children
    best: np.ndarray  # (N+1,) max over b
    n_children: np.ndarray  # (N+1,) argmax b
    p: np.ndarray  # acceptance of this level's children, by rank

    def split(self, child: np.ndarray, m: int, b: int) -> int:
        """y of T[m][b]: nodes kept by the root and its first b−1 subtrees (argmax, on demand)."""
        y = np.arange(1, m)
        vals = self.t[b - 1, y] + _scale(self.p[b - 1], child[m - y])
        return int(y[np.argmax(vals)])


def _scale(p: float, values: np.ndarray) -> np.ndarray:
    """p · values with 0 · (−inf) = −inf: an impossible subtree stays impossible."""
    finite = np.isfinite(values)
    return np.where(finite, p * np.where(finite, values, 0.0), NEG)


def _maxplus(a: np.ndarray, s: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """out[m] = max_y a[y] + s[m−y] over y ≥ 0, m−y ≥ 0; −inf where no term is finite."""
    size = a.size
    out = np.full(size, NEG)
    fa, fs = np.flatnonzero(np.isfinite(a)), np.flatnonzero(np.isfinite(s))
    if fa.size == 0 or fs.size == 0:
        return out
    ylo, yhi, slo, shi = fa[0], fa[-1], fs[0], fs[-1]
    mlo, mhi = ylo + slo, min(yhi + shi, size - 1)
    # Toeplitz view: window[m, size−1−y] = s[m−y] (−inf padding where m−y < 0)
    padded = np.concatenate([np.full(size - 1, NEG), s])
    window = as_strided(padded, (size, size), (padded.itemsize,) * 2, writeable=False)
    for m0 in range(mlo, mhi + 1, _BLOCK):
        m1 = min(m0 + _BLOCK, mhi + 1)
        y1 = min(m1, yhi + 1)  # y in [ylo, y1); column c of the slice holds y = y1−1−c
        block = buf[: (m1 - m0) * (y1 - ylo)].reshape(m1 - m0, y1 - ylo)
        np.add(a[ylo:y1][::-1], window[m0:m1, size - y1 : size - ylo], out=block)
        block.max(axis=1, out=out[m0:m1])
    return out


def _level_step(child: np.ndarray, p: np.ndarray) -> _Level:
    """Best subtrees one level taller, given the best subtrees `child` one level below."""
    size = child.size
    n_ranks = min(p.size, size - 2)
    t = np.full((n_ranks + 1, size), NEG)
    t[0, 1] = 1.0
    buf = np.empty(_BLOCK * size)
    for b in range(1, n_ranks + 1):
        t[b] = _maxplus(t[b - 1], _scale(p[b - 1], child), buf)
        if not np.isfinite(t[b]).any():
            t = t[: b + 1]
            break
    n_children = t.argmax(axis=0).astype(np.int32)
    return _Level(t, t[n_children, np.arange(size)], n_children, p)


def _leaf(size: int) -> _Level:
    """Subtrees of one level: the single node (m = 1, G = 1)."""
    t = np.full((1, size), NEG)
    t[0, 1] = 1.0
    return _Level(t, t[0], np.zeros(size, dtype=np.int32), np.zeros(0))


def _check(p: Acceptance, budget: int, max_depth: int | None) -> tuple[np.ndarray, int]:
    table = acceptance_table(p, "p")
    if budget < 1:
        raise InputError(f"budget must be ≥ 1 (tree size counts the root), got {budget}")
    if max_depth is not None and max_depth < 0:
        raise InputError(f"max depth must be ≥ 0, got {max_depth}")
    depth = budget - 1 if max_depth is None else min(max_depth, budget - 1)
    return table, depth


def _row(table: np.ndarray, depth: int) -> np.ndarray:
    """Acceptance of children at `depth` (1 = children of the root)."""
    return table[min(depth, table.shape[0]) - 1]


def _pass(table: np.ndarray, size: int, cap: int) -> list[_Level]:
    """Bottom-up levels for one depth cap; levels[j] describes subtrees rooted at depth cap−j.

    A depth-independent vector stops early at a fixed point (a level that improves nothing
    means no taller tree ever helps), so the list can be shorter than cap + 1.
    """
    levels = [_leaf(size)]
    for j in range(1, cap + 1):
        level = _level_step(levels[-1].best, _row(table, cap - j + 1))
        if table.shape[0] == 1 and np.array_equal(level.best, levels[-1].best):
            break
        levels.append(level)
    return levels


class SequoiaDP:
    """The solved DP for one acceptance input: the value table and trees for any (n, d) in it."""

    def __init__(self, p: Acceptance, max_budget: int, max_depth: int | None = None) -> None:
        self.p, self.depth = _check(p, max_budget, max_depth)
        self.size = max_budget + 1
        self._passes: dict[int, list[_Level]] = {}
        self.table = np.full((self.size, self.depth + 1), NEG)
        """T[n][d]: best G over trees of exactly n nodes and depth ≤ d (−inf: none exists)."""
        if self.p.shape[0] == 1:
            levels = self._levels(self.depth)
            for d in range(self.depth + 1):
                self.table[:, d] = levels[min(d, len(levels) - 1)].best
        else:
            for cap in range(self.depth + 1):
                self.table[:, cap] = _pass(self.p, self.size, cap)[-1].best

    def _levels(self, cap: int) -> list[_Level]:
        key = self.depth if self.p.shape[0] == 1 else cap  # one pass serves every cap in 1-D
        if key not in self._passes:
            self._passes[key] = _pass(self.p, self.size, key)
        levels = self._passes[key]
        return levels[: cap + 1] if self.p.shape[0] == 1 else levels

    def tree(self, n: int, max_depth: int | None = None, source: str = "draft") -> Tree:
        """The optimal tree of exactly n nodes and depth ≤ max_depth (default: the solve's cap)."""
        cap = self.depth if max_depth is None else min(max_depth, self.depth)
        if not 1 <= n < self.size:
            raise InputError(f"budget {n} outside the solved range 1..{self.size - 1}")
        if not np.isfinite(self.table[n, cap]):
            raise InputError(
                f"no tree of {n} nodes fits depth ≤ {cap} with {self.p.shape[1]} ranks"
            )
        levels = self._levels(cap)
        parents, ranks = [-1], [-1]
        stack = [(len(levels) - 1, n, 0)]  # (level index, subtree size, node index)
        while stack:
            j, m, node = stack.pop()
            b = int(levels[j].n_children[m])
            for rank in range(b, 0, -1):
                y = levels[j].split(levels[j - 1].best, m, rank)
                parents.append(node)
                ranks.append(rank - 1)
                stack.append((j - 1, m - y, len(parents) - 1))
                m = y
        sources = [ROOT_SOURCE] + [source] * (len(parents) - 1)
        return Tree.from_parents(parents, ranks, sources)


def value_table(p: Acceptance, max_budget: int, max_depth: int | None = None) -> np.ndarray:
    """T[n][d]: best expected tokens/step over trees of exactly n nodes and depth ≤ d.

    Shape (max_budget+1, D+1) with D = max_depth (or max_budget−1 when None); −inf where no
    tree exists (n = 0, or n > 1 with d = 0).
    """
    return SequoiaDP(p, max_budget, max_depth).table


def optimal_tree(
    p: Acceptance, budget: int, max_depth: int | None = None, source: str = "draft"
) -> Tree:
    """The DP-optimal tree of exactly `budget` nodes and depth ≤ `max_depth` (None: unlimited)."""
    return SequoiaDP(p, budget, max_depth).tree(budget, source=source)
