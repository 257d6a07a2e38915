"""The drafter contract: what a tree builder asks of a drafter and what it builds.

A builder (DySpec's greedy, EAGLE-2's beam, a static tree, RSD's beam search, STAND's sampler)
hands `Propose` the nodes it wants to extend; a drafter answers each with its candidate tokens
and their draft probabilities (`Proposal`). The result is a `DraftedTree`. Drafters, methods and
solvers all import it from here, so none of them depends on another for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from specscope.tree import Tree


class DraftNode(NamedTuple):
    """A node handed to `propose`: ids are stable within one build, the root is id 0."""

    id: int
    parent: int  # −1 for the root
    token: int  # the root's is the `root_token` given to `build`
    depth: int


Proposal = tuple[Sequence[int], Sequence[float]]
"""A node's candidate tokens, best first, and the draft's probability of each."""

Propose = Callable[[list[DraftNode]], Sequence[Proposal]]
"""One batched draft forward: a proposal for every node passed, in the same order."""


@dataclass(frozen=True, eq=False)
class DraftedTree:
    """A tree built by a builder (`DySpecPolicy.build`, RSD's beam search, ...).

    tokens[v] and scores[v] belong to tree node v (breadth-first order, tokens[0] the root token,
    scores[0] = 1); scores are the path scores f(v), the policy's estimate of the probability
    that v is accepted. forwards counts `propose` calls (draft forward passes); forwarded holds,
    per call, the nodes a draft model runs for it (the expanded nodes, their ancestors and the
    root), and expanded the nodes the call proposes candidates for, where the builder records
    them.
    """

    tree: Tree
    tokens: np.ndarray
    scores: np.ndarray
    forwards: int
    forwarded: tuple[int, ...] = ()
    expanded: tuple[int, ...] = ()
