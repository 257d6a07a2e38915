"""`Schedule` (specscope/schedule.py): buckets of batch (and context) ranges, each a tree or no
speculation; a step looks its choice up as the engines do; the JSON form round-trips; gaps,
overlaps and malformed files are one-line refusals."""

from __future__ import annotations

import pytest

from specscope.errors import InputError
from specscope.schedule import Bucket, Schedule, merged
from specscope.tree import Tree


def test_merged_choices_look_up_as_engines_do() -> None:
    c4, c2 = Tree.chain(4), Tree.chain(2)
    choices = [(1, c4), (2, c4), (3, c4), (4, c2), (5, c2), (6, None), (7, None)]
    schedule = Schedule(tuple(merged(choices)))
    assert [b.batch for b in schedule.buckets] == [(1, 3), (4, 5), (6, 7)]
    assert [b.drafts for b in schedule.buckets] == [4, 2, 0]
    assert schedule.choice(2).size == 5 and schedule.choice(5).size == 3
    assert schedule.choice(7) is None and schedule.choice(500) is None  # the last range extends
    assert Schedule.from_dict(schedule.to_dict()).to_dict() == schedule.to_dict()


def test_context_buckets_split_a_batch_range() -> None:
    short, long = Bucket((1, 8), (0, 4095), Tree.chain(3)), Bucket((1, 8), (4096, 10**6), None)
    schedule = Schedule((short, long))
    assert schedule.choice(4, 100).size == 4 and schedule.choice(4, 8000) is None


@pytest.mark.parametrize(("data", "words"), [
    ({"schedule": []}, "a schedule is"),
    ({"schedule": [{"batch": [2, 4], "tree": None}]}, "cover 1..max"),
    ({"schedule": [{"batch": [1, 4], "tree": None}, {"batch": [4, 8], "tree": None}]},
     "without gaps or overlap"),
    ({"schedule": [{"batch": [1, "x"], "tree": None}]}, "is not [lo, hi]"),
    ({"schedule": [{"batch": [3, 1], "tree": None}]}, "lo <= hi"),
    ({"schedule": [{"batch": [1, 2]}]}, "needs batch and tree"),
])
def test_malformed_schedules_are_refused(data: dict, words: str) -> None:
    with pytest.raises(InputError, match=words.replace("[", r"\[").replace(".", r"\.")):
        Schedule.from_dict(data, "s.json")
