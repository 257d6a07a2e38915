"""Targets that verify many sequences' draft trees in one forward (continuous batching).

A `BatchedModel` holds up to `rows` sequences, each in its own row: its own KV region (or
recurrent state), its own committed length. A sequence is admitted into a free row, prefilled
(in chunks the scheduler interleaves with decoding steps), verified together with the other
rows' trees in one forward (each row's tree padded to a shared size: padded nodes attend to
themselves only and are never accepted), committed row by row, and released when done. No row
ever reads another row's keys, values or state.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Protocol

import torch

from specscope.executor.runtime import Runtime
from specscope.executor.targets import Model, SSMModel, wrap
from specscope.tree import Tree


class BatchedModel(Protocol):
    """What the continuous-batching executor needs from a target."""

    name: str
    vocab_size: int
    rows: int
    """How many sequences it holds at most."""
    runtime: Runtime

    def prepare(self, max_tree: int) -> None:
        """Compile or capture every step shape up to `rows` rows of `max_tree` nodes now (every
        row free), so that decoding times exclude it; nothing under eager."""
        ...

    def admit(self, row: int, capacity: int) -> None:
        """Start a sequence in the free `row`; `capacity` bounds the tokens it will hold
        (prompt, output and one tree)."""
        ...

    def prefill(self, row: int, tokens: torch.Tensor) -> torch.Tensor:
        """Process the next chunk `tokens` (t,) of `row`'s prompt after what it holds; their
        logits (t, vocab). A prompt's chunks come in order; its last token is not prefilled
        (it is the root of the first step)."""
        ...

    def verify(self, rows: Sequence[int], tokens: Sequence[torch.Tensor],
               trees: Sequence[Tree]) -> list[torch.Tensor]:
        """One forward over every row of `rows`: row r's `tokens[i]` (n_i,) laid out as
        `trees[i]` (node 0: its last committed token); each row's logits (n_i, vocab)."""
        ...

    def commit(self, row: int, path: Sequence[int]) -> None:
        """Keep the accepted `path` (node indices, root first) of `row`'s last verified tree."""
        ...

    def committed(self, row: int) -> int:
        """Tokens `row` holds in its cache or state."""
        ...

    def release(self, row: int) -> None:
        """Free `row` for another sequence."""
        ...


class PerRowModel:
    """The reference `BatchedModel`: one single-sequence `Model` per row, each with its own KV
    cache or state, run one after another (`verify` is one call, not one forward).

    It is what a batched target is checked against, and the fallback for targets that run per
    row. A prompt's first chunk starts the row's sequence (`Model.prefill`); later chunks are
    verified as a chain and committed whole, which is what prefill computes.
    """

    def __init__(self, models: Sequence[Model]) -> None:
        self.models = list(models)
        first = self.models[0]
        self.name, self.vocab_size, self.runtime = first.name, first.vocab_size, first.runtime
        self.rows = len(self.models)
        self._capacity: dict[int, int] = {}
        self._started: set[int] = set()
        self._verified: dict[int, torch.Tensor] = {}

    @classmethod
    def replicate(cls, model: Model, rows: int) -> PerRowModel:
        """`rows` rows of `model`'s target (`model` itself is row 0)."""
        return cls([model, *(own_cache(model) for _ in range(rows - 1))])

    def prepare(self, max_tree: int) -> None:
        for model in self.models:
            model.prepare(max_tree)

    def admit(self, row: int, capacity: int) -> None:
        self._capacity[row] = capacity
        self._started.discard(row)

    def prefill(self, row: int, tokens: torch.Tensor) -> torch.Tensor:
        model = self.models[row]
        if row not in self._started:
            self._started.add(row)
            # Model.prefill leaves a prompt's last token out: give it one to leave
            return model.prefill(torch.cat([tokens, tokens[-1:]]), self._capacity[row])
        logits = model.verify(tokens, Tree.chain(tokens.numel() - 1))
        model.commit(tokens, range(tokens.numel()))
        return logits

    def verify(self, rows: Sequence[int], tokens: Sequence[torch.Tensor],
               trees: Sequence[Tree]) -> list[torch.Tensor]:
        out = []
        for row, t, tree in zip(rows, tokens, trees, strict=True):
            self._verified[row] = t
            out.append(self.models[row].verify(t, tree))
        return out

    def commit(self, row: int, path: Sequence[int]) -> None:
        self.models[row].commit(self._verified.pop(row), list(path))

    def committed(self, row: int) -> int:
        return self.models[row].committed

    def release(self, row: int) -> None:
        self._capacity.pop(row, None)
        self._started.discard(row)
        self._verified.pop(row, None)


def own_cache(model: Model) -> Model:
    """Another wrapper of `model`'s target with a cache or state of its own. An SSM's state
    lives in its wrapper, so the module is shared; KV caches live on the module
    (`setup_caches`), so a Transformer, hybrid or Hugging Face target gets a copy of it."""
    if isinstance(model, SSMModel):
        return SSMModel(model.model, model.name, model.ssm_verify, model.runtime)
    return wrap(copy.deepcopy(model.model), model.name, runtime=model.runtime)
