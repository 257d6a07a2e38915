"""A Transformer target that verifies many sequences' trees in one forward (`BatchedModel`).

The model's KV cache gets a batch dimension: row r of the cache is sequence r's, its committed
tokens in consecutive slots 0..committed−1 (`Transformer.compact` moves a row's accepted path
there, in that row only). `verify` lays every row's tree out as the single-sequence static step
does, padded to a shared node count: row r's node i sits at position committed_r + depth(i) in
slot committed_r + i and attends to its row's slots below committed_r (a per-row key mask) and to
its ancestors; a padded node attends to itself only and writes one scratch slot past every row's
capacity. One pass of `Transformer.forward_rows` (eager) or `Transformer.step` (compile, graph)
runs the whole batch, so no row reads another's keys and each row's logits are its own
single-sequence ones.

Under eager the pass covers cache rows min(rows)..max(rows) with exact sizes (nodes padded to the
largest tree, the prefix read up to the longest committed length). Under compile or graph it
covers rows 0..B−1, B the power-of-two bucket of max(rows) + 1, and nodes the bucket of the
largest tree: one compiled or captured step per (B, nodes) pair, each reading the whole cache
under the key mask. Rows between those verified (free, or still prefilling) run as padding, so
the pass costs what its highest row implies: admit sequences to the lowest free rows. Prompt
chunks run eager (`Transformer.prefill` into one row), as `CachedModel.prefill` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from specscope.errors import InputError
from specscope.executor.batched import BatchedModel, PerRowModel
from specscope.executor.runtime import Runtime, StepRunner, bucket
from specscope.executor.targets import CachedModel, Model
from specscope.models.torch import Transformer
from specscope.tree import Tree


class BatchedTransformer:
    """`rows` sequences of one `Transformer` in the rows of its KV cache (which it takes over:
    the module must not run single sequences meanwhile)."""

    def __init__(self, model: Transformer, name: str, rows: int, runtime: Runtime | None = None,
                 max_len: int | None = None, padded: bool | None = None) -> None:
        """`max_len` (default: the spec's `max_seq_len`) bounds each row's tokens; every
        compiled or captured step reads that many slots of each row. `padded` (default: unless
        eager) runs the padded static step even under eager, which is how tests check that
        padding changes nothing."""
        if rows < 1:
            raise InputError(f"{name}: a batched target needs at least 1 row, got {rows}")
        self.model, self.name, self.rows = model, name, rows
        self.vocab_size = model.spec.vocab_size
        self.runtime = runtime or Runtime.cpu()
        self.max_len = max_len or model.spec.max_seq_len
        static = padded if padded is not None else self.runtime.kind != "eager"
        self._step = StepRunner(model.step, self.runtime) if static else None
        # a scratch slot past every row's capacity; static steps may pad the batch to a bucket
        model.setup_caches(rows if self._step is None else bucket(rows), self.max_len + 1)
        self._committed = [0] * rows
        self._capacity: dict[int, int] = {}

    @property
    def setup_s(self) -> float:
        """Seconds spent compiling or capturing steps so far."""
        return 0.0 if self._step is None else self._step.setup_s

    def prepare(self, max_tree: int) -> None:
        """Compile or capture every (batch, nodes) bucket up to `rows` rows of `max_tree` nodes
        now, so that decoding times exclude it (every row must be free)."""
        if self._step is None:
            return
        sizes = sorted({bucket(n) for n in range(1, max_tree + 1)})
        for row in range(self.rows):
            self.admit(row, self.max_len)
        for b in sorted({bucket(r) for r in range(1, self.rows + 1)}):
            rows = range(min(b, self.rows))
            for size in sizes:
                self.verify(rows, [torch.zeros(size, dtype=torch.long)] * len(rows),
                            [Tree.chain(size - 1)] * len(rows))
        for row in range(self.rows):
            self.release(row)

    def admit(self, row: int, capacity: int) -> None:
        if row in self._capacity or not 0 <= row < self.rows:
            raise ValueError(f"row {row} is not a free row of {self.rows}")
        if capacity > self.max_len:
            raise InputError(f"{self.name}: {capacity} tokens exceed the {self.max_len}-token "
                             "rows of the batched cache")
        self._capacity[row] = capacity
        self._committed[row] = 0

    def prefill(self, row: int, tokens: torch.Tensor) -> torch.Tensor:
        start = self._committed[row]
        if start + tokens.numel() > self._capacity[row]:
            raise InputError(f"{self.name}: row {row}'s prompt exceeds its "
                             f"{self._capacity[row]}-token capacity")
        logits = self.model.prefill(tokens[None].to(self.runtime.device), start, row)[0]
        self._committed[row] += tokens.numel()
        return logits

    def verify(self, rows: Sequence[int], tokens: Sequence[torch.Tensor],
               trees: Sequence[Tree]) -> list[torch.Tensor]:
        lo, hi = min(rows), max(rows) + 1
        n = max(tree.size for tree in trees)
        if self._step is not None:
            lo, hi, n = 0, bucket(hi), bucket(n)
        inputs = self._inputs(range(lo, hi), dict(zip(rows, zip(tokens, trees, strict=True),
                                                      strict=True)), n)
        if self._step is None:
            prefix = max(self._committed[r] for r in rows)
            logits = self.model.forward_rows(*inputs, prefix, lo)
        else:
            logits = self._step(*inputs)
        return [logits[r - lo, : tree.size] for r, tree in zip(rows, trees, strict=True)]

    def _inputs(self, span: range, work: dict[int, tuple[torch.Tensor, Tree]],
                n: int) -> tuple[torch.Tensor, ...]:
        """The pass's inputs on the device for cache rows `span`, `n` nodes each: tokens,
        positions, slots (b, n), committed lengths (b,) and block masks (b, n, n). Rows of
        `span` without work, and nodes past a row's tree, are padding."""
        b, scratch = len(span), self.model.max_seq_len - 1
        tokens = torch.zeros(b, n, dtype=torch.long)
        positions = torch.zeros(b, n, dtype=torch.long)
        slots = torch.full((b, n), scratch)
        committed = torch.zeros(b, dtype=torch.long)
        block = torch.eye(n, dtype=torch.bool).repeat(b, 1, 1)
        for i, row in enumerate(span):
            if row not in work:
                continue
            x, tree = work[row]
            size, c = tree.size, self._committed[row]
            if c + size > self._capacity[row]:
                raise InputError(f"{self.name}: row {row}'s tree of {size} nodes after {c} "
                                 f"tokens exceeds its {self._capacity[row]}-token capacity")
            tokens[i, :size] = x
            positions[i] = c
            positions[i, :size] += torch.from_numpy(tree.depths.astype(np.int64))
            slots[i, :size] = torch.arange(c, c + size)
            committed[i] = c
            block[i, :size, :size] = torch.from_numpy(tree.ancestor_mask.copy())
        device = self.runtime.device
        return tuple(t.to(device) for t in (tokens, positions, slots, committed, block))

    def commit(self, row: int, path: Sequence[int]) -> None:
        if path:
            self.model.compact(self._committed[row], path, row)
            self._committed[row] += len(path)

    def committed(self, row: int) -> int:
        return self._committed[row]

    def release(self, row: int) -> None:
        self._capacity.pop(row, None)
        self._committed[row] = 0


def batch_target(target: Model, rows: int, max_len: int | None = None) -> BatchedModel:
    """The batched form of a loaded target: `BatchedTransformer` over a specscope Transformer
    (its module's cache taken over: `target` must not decode meanwhile), else `PerRowModel`
    (SSM and hybrid targets, Hugging Face models: one wrapper per row, run one after another)."""
    if isinstance(target, CachedModel) and isinstance(target.model, Transformer):
        return BatchedTransformer(target.model, target.name, rows, target.runtime, max_len)
    return PerRowModel.replicate(target, rows)
