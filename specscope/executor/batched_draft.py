"""A draft model shared by every row of the continuous-batching server, its levels batched.

Each row's `DraftModelDrafter` drafts from a `RowDraft`: a view of one row of a `BatchedModel`
of the draft model (`batch_target`: one forward for all rows of a Transformer). The rows draft
their trees concurrently, one thread each (`BatchedDraft.run`), and every forward a drafter
asks for (a level's nodes, or the catch-up of the tokens committed since its last step) waits
until every row still drafting has asked for its own or finished; then one batched `verify`
runs them all and each row goes on with its own logits. A level of B rows is thus one draft
forward of B sequences, as the simulator prices it (`simulator/pricing.py`), and each row's
logits are the ones its own single-sequence draft would give (`BatchedModel.verify`), so the
drafts, and the output, do not depend on what else shares the batch.

The threads only take turns: the batched forward runs in the calling thread, torch releases
the interpreter while it computes, and no two threads touch one row. They are a pool kept until
`close` (grown when more rows draft at once), so a step starts no thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

from specscope.executor.batched import BatchedModel
from specscope.executor.runtime import Runtime
from specscope.tree import Tree

T = TypeVar("T")


class BatchedDraft:
    """A draft `BatchedModel` whose rows' forwards are batched while `run` drafts them."""

    def __init__(self, model: BatchedModel) -> None:
        self.model = model
        self._cond = threading.Condition()
        self._drafting = 0
        self._pending: dict[int, tuple[torch.Tensor, Tree]] = {}
        self._done: dict[int, torch.Tensor] = {}
        self._running = False
        self._failed: BaseException | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._workers = 0

    def row(self, row: int) -> RowDraft:
        """The single-sequence view of `row`."""
        return RowDraft(self, row)

    def run(self, jobs: Sequence[Callable[[], T]]) -> list[T]:
        """Each job (one row's drafting) in its own thread, their forwards batched; the
        results in order. An exception in a job is raised here."""
        if len(jobs) <= 1:
            return [job() for job in jobs]
        results: list[T | None] = [None] * len(jobs)
        errors: list[BaseException] = []

        def work(i: int, job: Callable[[], T]) -> None:
            try:
                results[i] = job()
            except BaseException as exc:  # re-raised in the calling thread
                errors.append(exc)
            finally:
                with self._cond:
                    self._drafting -= 1
                    self._cond.notify_all()

        with self._cond:
            self._drafting, self._running, self._failed = len(jobs), True, None
        pool = self._pool_for(len(jobs))
        futures = [pool.submit(work, i, job) for i, job in enumerate(jobs)]
        try:
            self._serve()
        finally:
            with self._cond:
                self._running = False
                self._cond.notify_all()
            for future in futures:
                future.result()
        if errors:
            raise errors[0]
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the drafting threads (a later `run` starts a new pool)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._pool, self._workers = None, 0

    def _pool_for(self, rows: int) -> ThreadPoolExecutor:
        """The drafting threads, at least `rows` of them (a larger pool replaces a smaller)."""
        if self._pool is None or self._workers < rows:
            self.close()
            self._pool = ThreadPoolExecutor(max_workers=rows, thread_name_prefix="draft-row")
            self._workers = rows
        return self._pool

    def _serve(self) -> None:
        """Run a batched forward whenever every row still drafting waits on one."""
        with torch.no_grad():
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._drafting == 0 or (
                        self._pending and len(self._pending) == self._drafting))
                    if self._drafting == 0:
                        return
                    work, self._pending = self._pending, {}
                rows = sorted(work)
                try:
                    logits = self.model.verify(rows, [work[r][0] for r in rows],
                                               [work[r][1] for r in rows])
                except BaseException as exc:  # the waiting rows raise it too
                    with self._cond:
                        self._failed = exc
                        self._cond.notify_all()
                    raise
                with self._cond:
                    self._done.update(zip(rows, logits, strict=True))
                    self._cond.notify_all()

    def forward(self, row: int, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        """Row `row`'s verify: alone outside `run`, batched with the other rows inside it."""
        with self._cond:
            running = self._running
        if not running:
            return self.model.verify([row], [tokens], [tree])[0]
        with self._cond:
            self._pending[row] = (tokens, tree)
            self._cond.notify_all()
            self._cond.wait_for(lambda: row in self._done or self._failed is not None)
            if row not in self._done:
                raise RuntimeError(f"the batched draft forward failed: {self._failed}")
            return self._done.pop(row)


class RowDraft:
    """One row of a `BatchedDraft` as a single-sequence `Model` (what `DraftModelDrafter`
    drafts from)."""

    def __init__(self, batched: BatchedDraft, row: int) -> None:
        self.batched, self.row = batched, row
        model = batched.model
        self.name, self.vocab_size = model.name, model.vocab_size
        self.runtime: Runtime = model.runtime
        self._admitted = False

    @property
    def committed(self) -> int:
        return self.batched.model.committed(self.row)

    @property
    def setup_s(self) -> float:
        return 0.0

    def prepare(self, max_tree: int) -> None:
        """Nothing per row: the shared model is prepared once (`BatchedModel.prepare`)."""

    def prefill(self, prompt: torch.Tensor, capacity: int) -> torch.Tensor:
        model = self.batched.model
        if self._admitted:
            model.release(self.row)
        model.admit(self.row, capacity)
        self._admitted = True
        return model.prefill(self.row, prompt[:-1])

    def verify(self, tokens: torch.Tensor, tree: Tree) -> torch.Tensor:
        return self.batched.forward(self.row, tokens, tree)

    def commit(self, tokens: torch.Tensor, path: Sequence[int]) -> None:
        self.batched.model.commit(self.row, path)

    def decode(self, token: int) -> torch.Tensor:
        logits = self.verify(torch.tensor([token]), Tree.root())[0]
        self.commit(torch.tensor([token]), [0])
        return logits
