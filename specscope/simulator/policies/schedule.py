"""`schedule`: each step verifies the tree a schedule holds for the running batch size, as
vLLM's `num_speculative_tokens_per_batch_size` and TensorRT-LLM's `draft_len_schedule` pick a
draft length per step (`optimize-tree --schedule` writes one).

The batch is the step's running requests; a schedule with context ranges looks each request up
at its own context (vLLM's proposed context axis, RFC #48627, states no per-request rule: an
approximation). A bucket without a tree decodes plainly. Nothing is learnt from outcomes.
"""

from __future__ import annotations

from specscope.errors import InputError
from specscope.simulator.policies.base import Policy, PolicySetup, Speculation, StepView
from specscope.tree import Tree


class ScheduledTree(Policy):
    """The schedule's tree for the running batch size (and each request's context)."""

    name = "schedule"

    def __init__(self, setup: PolicySetup) -> None:
        if setup.schedule is None:
            raise InputError("--policy schedule needs --schedule FILE (optimize-tree --schedule "
                             "-o)")
        self._schedule = setup.schedule
        self._by_batch = all(b.context is None for b in setup.schedule.buckets)
        # One Speculation per bucket, built once: each step looks a bucket's index up
        by_tree: dict[Tree | None, Speculation] = {}
        for b in setup.schedule.buckets:
            if b.tree not in by_tree:
                by_tree[b.tree] = Speculation.none() if b.tree is None else Speculation.of(b.tree)
        self._specs = [by_tree[b.tree] for b in setup.schedule.buckets]

    def plan(self, view: StepView) -> list[Speculation]:
        """Each slot's tree at the batch's size and the slot's context."""
        batch = len(view.slots)
        index = self._schedule.index
        if self._by_batch:  # one choice for the whole step
            return [self._specs[index(batch)]] * batch
        return [self._specs[index(batch, slot.context_len)] for slot in view.slots]
