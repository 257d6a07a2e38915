"""What a simulation is told to verify: `--tree`'s static tree or `--schedule`'s per-batch
trees, checked against the simulated target and drafter source.

A tree of the unnamed draft source ("draft", from `optimize-tree --acceptance`) is taken as the
simulated draft model's; a tree or schedule chosen for another target or drafter source is
refused in one line, and so is a tree larger than the step's token budget.
"""

from __future__ import annotations

from pathlib import Path

from specscope.errors import InputError
from specscope.schedule import Bucket, Schedule, ScheduleFile, read_schedule_file
from specscope.trace import draft_model
from specscope.tree import DEFAULT_SOURCE, Tree, TreeFile, read_tree_file


def given_tree(tree: Path | Tree | None, algo: str | None, target: str, source: str,
               has_trace: bool, token_budget: int) -> Tree | None:
    """The `--tree` file's tree (or the `Tree` given; `algo`: the file's method), checked."""
    if tree is None:
        if algo is not None:
            raise InputError("--algo picks a method of a --tree file; give --tree")
        return None
    found = TreeFile(tree) if isinstance(tree, Tree) else read_tree_file(tree, algo)
    where = f"--tree {tree}"
    _check_target(found.target, target, where)
    return _drafted_by(found.tree, found.source, source, has_trace, token_budget, where)


def check_schedule_pairing(policy: str, schedule: object) -> None:
    """`--policy schedule` and `--schedule FILE` come together or not at all (one line)."""
    if (schedule is not None) != (policy == "schedule"):
        raise InputError("--policy schedule reads its table from --schedule FILE (optimize-tree "
                         "--schedule -o); give both or neither")


def given_schedule(schedule: Path | Schedule | None, target: str, source: str,
                   has_trace: bool, token_budget: int) -> ScheduleFile | None:
    """The `--schedule` file's schedule and its recorded best constant (or the `Schedule`
    given), every tree checked."""
    if schedule is None:
        return None
    found = (ScheduleFile(schedule) if isinstance(schedule, Schedule)
             else read_schedule_file(schedule))
    where = f"--schedule {schedule}"
    _check_target(found.target, target, where)

    def checked(tree: Tree | None) -> Tree | None:
        return None if tree is None else _drafted_by(tree, found.source, source, has_trace,
                                                     token_budget, where)

    return ScheduleFile(Schedule(tuple(Bucket(b.batch, b.context, checked(b.tree))
                                       for b in found.schedule.buckets)),
                        found.target, found.source, checked(found.constant))


def _check_target(chosen_for: str | None, target: str, where: str) -> None:
    if chosen_for is not None and chosen_for != target:
        raise InputError(f"{where}: optimised for target {chosen_for}, simulating {target}")


def _drafted_by(tree: Tree, recorded: str | None, source: str, has_trace: bool,
                token_budget: int, where: str) -> Tree:
    """`tree` as drafted by `source`: a generic tree relabelled; a tree recorded for another
    source, holding nodes of another (without a trace to value them), or larger than
    `token_budget` refused."""
    if draft_model(source) is not None and set(tree.sources[1:]) <= {DEFAULT_SOURCE}:
        tree = Tree(tree.parents, tree.ranks, (tree.sources[0],) + (source,) * (tree.size - 1))
    elif recorded is not None and recorded != source:
        raise InputError(f"{where}: drafted by source {recorded}, simulating drafter source "
                         f"{source}")
    if not has_trace and set(tree.sources[1:]) - {source}:
        raise InputError(f"{where}: holds nodes of sources "
                         f"{sorted(set(tree.sources[1:]) - {source})}, simulating {source}")
    if tree.size > token_budget:
        raise InputError(f"{where}: {tree.size} tokens exceed --token-budget {token_budget}")
    return tree
