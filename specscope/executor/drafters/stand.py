"""STAND (Song et al. 2025): n-gram drafting from the target's own next-token distributions.

STAND ("Accelerated Test-Time Scaling with Model-Free Speculative Sampling", STochastic Adaptive
N-gram Drafting) needs no draft model. It keeps, per n-gram context, a compact distribution of
the next token learned from the target's probabilities during decoding (not only the token that
followed, as prompt lookup does); under sampling it drafts a node's children by Gumbel-top-k from
that distribution, verified with the without-replacement rule (`sequoia` in verify.py), and
under greedy decoding its top-k are deterministic candidates. Its tree is data-driven: the nodes
most often accepted on calibration prompts (`specscope.optimizers.stand`, `--algo stand`).

The table. After a generated token x_i the target's distribution P_i of x_{i+1} is known (at
the sampling temperature; at temperature 1 for greedy decoding): what the target itself emits
there. Inside the prompt, text the target did not write, P_i is its guess at text it had not
seen yet, so a prompt position contributes the token that followed instead (a point mass; on
code-edit prompts, chain 8: 1.90 tokens per step with the prompt's logits, 3.61 with its tokens).
P_i's top-`width` probabilities are merged into the entry of every context g = x_{i-n+1..i},
n = 1..`max_n`. An entry keeps the
number c of observations merged and, for at most `width` tokens, the probability mass m(t)
accumulated since t entered it: a merge adds the observation's probabilities, then keeps the
`width` tokens of largest mass (ties: the smaller token id); an evicted token's mass is
forgotten. A node uses the entry of the longest context ending at it that has one (backing off to
shorter ones). Candidates are the kept tokens by decreasing mass, scored m(t)/c (the average
target probability of t after g); the sampling distribution is q(t) = m(t)/Σm.

Exact replay (`trace.replay`) needs a node's candidates to depend on its text alone. Inside a
step the target's distributions at the root and along the path are not known yet, whereas trace
collection, drafting each position from the true prefix, would know them. So for a node whose
text has T tokens, position i contributes P_i when i ≤ T − 2 − `horizon`, and otherwise the point
mass at x_{i+1} (the token that followed it, which the text holds). For trees at most `horizon`
deep every P_i this uses was committed before the step, so the executor and `collect` draft the
same candidates. specscope's choices, not taken from the paper: orders 1..3 with back-off, width
8 (the trace's K), the horizon, and a table per request (the paper shares it across the
trajectories of one problem; specscope's requests are unrelated prompts).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specscope.draft import DraftNode, Proposal
from specscope.errors import InputError
from specscope.executor.drafters.base import Drafter, check_sampling
from specscope.executor.verify import draw_children, probabilities

STAND = "stand"
"""Source name of the STAND drafter."""
HORIZON = 12
"""Default `horizon`: the depth of the executor's deepest static trees (methods.MAX_DEPTH)."""


class _Entry:
    """One context's observations: their count and the accumulated mass of the kept tokens."""

    __slots__ = ("count", "mass")

    def __init__(self, count: int = 0, mass: dict[int, float] | None = None) -> None:
        self.count = count
        self.mass = {} if mass is None else mass

    def copy(self) -> _Entry:
        return _Entry(self.count, dict(self.mass))

    def merge(self, tokens: Sequence[int], probs: Sequence[float], width: int) -> None:
        """Add one observation (sparse probabilities), keep the `width` heaviest tokens."""
        self.count += 1
        for t, p in zip(tokens, probs, strict=True):
            self.mass[t] = self.mass.get(t, 0.0) + p
        if len(self.mass) > width:
            self.mass = dict(self.ranked()[:width])

    def ranked(self) -> list[tuple[int, float]]:
        """(token, mass) by decreasing mass, ties by token id."""
        return sorted(self.mass.items(), key=lambda kv: (-kv[1], kv[0]))


class StandDrafter(Drafter):
    """STAND's drafter (module docstring): top-k of the n-gram table's distribution, or children
    drawn from it by Gumbel-top-k ("without", for `sequoia` verification) or i.i.d. ("with",
    for `specinfer`), q kept in `draft_probs`."""

    source = STAND

    def __init__(
        self,
        vocab_size: int,
        max_n: int = 3,
        width: int = 8,
        horizon: int = HORIZON,
        sample: str | None = None,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        check_sampling(sample, generator, "STAND")
        if max_n < 1 or width < 1 or horizon < 0:
            raise InputError(f"STAND needs max_n ≥ 1, width ≥ 1 and horizon ≥ 0, got {max_n}, "
                             f"{width}, {horizon}")
        self.vocab_size, self.max_n, self.width, self.horizon = vocab_size, max_n, width, horizon
        self.sample, self.temperature, self.generator = sample, temperature, generator
        self._prompt: list[int] = []
        self._dists: list[tuple[list[int], list[float]]] = []
        """What position i contributes, for every committed position learned so far: the top
        `width` of P_i, or the next token of the prompt."""
        self._table: dict[tuple[int, ...], _Entry] = {}
        self._merged = 0
        """Positions 0.._merged − 1 are in `_table`."""

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        self._prompt, self._dists, self._table, self._merged = list(prompt), [], {}, 0

    def learn(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        first = len(self._dists)
        inside = max(0, min(len(tokens), len(self._prompt) - 1 - first))
        self._dists += [([t], [1.0]) for t in self._prompt[first + 1 : first + 1 + inside]]
        if inside < len(tokens):
            top = probabilities(logits[inside:], self.temperature).topk(
                min(self.width, logits.shape[-1]))
            for tokens_i, probs_i in zip(top.indices.tolist(), top.values.tolist(), strict=True):
                kept = [(t, p) for t, p in zip(tokens_i, probs_i, strict=True) if p > 0]
                self._dists.append(([t for t, _ in kept], [p for _, p in kept]))

    def begin(self, context: Sequence[int]) -> None:
        super().begin(context)
        self.draft_probs = {}
        end = min(len(self.context) - 1 - self.horizon, len(self._dists))
        for i in range(self._merged, end):
            for n in range(1, min(self.max_n, i + 1) + 1):
                gram = tuple(self.context[i - n + 1 : i + 1])
                self._table.setdefault(gram, _Entry()).merge(*self._dists[i], self.width)
        self._merged = max(self._merged, end)

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        self.register(nodes)
        out: list[Proposal] = []
        for v in nodes:
            entry = self.entry(self.context + self.path(v.id))
            if entry is None:
                out.append(([], []))
                continue
            ranked = entry.ranked()
            if self.sample is None:
                out.append(([t for t, _ in ranked[:k]], [m / entry.count for _, m in ranked[:k]]))
                continue
            mass = torch.tensor([m for _, m in ranked], dtype=torch.float64)
            q = torch.zeros(self.vocab_size, dtype=torch.float64)
            q[[t for t, _ in ranked]] = mass / mass.sum()
            kids = draw_children(q, k, self.sample == "with", self.generator)
            self.draft_probs[v.id] = q
            out.append((kids, q[kids].tolist()))
        return out

    def entry(self, text: Sequence[int]) -> _Entry | None:
        """The entry of the longest context ending `text` that has one, as the table stands for
        a node whose text is `text` (module docstring); None when no context has one."""
        end = len(text)
        for n in range(min(self.max_n, end), 0, -1):
            gram = tuple(text[end - n :])
            base = self._table.get(gram)
            entry = None
            for i in range(max(self._merged, n - 1), end - 1):
                if tuple(text[i - n + 1 : i + 1]) != gram:
                    continue
                entry = entry or (base.copy() if base else _Entry())
                if i <= end - 2 - self.horizon and i < len(self._dists):
                    entry.merge(*self._dists[i], self.width)
                else:
                    entry.merge([text[i + 1]], [1.0], self.width)
            entry = entry or base
            if entry is not None and entry.count:
                return entry
        return None
