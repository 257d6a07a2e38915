"""Per-step speculation policies by name (`specscope simulate --policy NAME`).

A policy is built from a `PolicySetup` (`POLICIES[name](setup)`); add one by subclassing
`Policy` (`base.py`) and adding a line here.
"""

from __future__ import annotations

from collections.abc import Callable

from specscope.simulator.policies.base import Policy, PolicySetup
from specscope.simulator.policies.dyspec import DySpec
from specscope.simulator.policies.ets_batch import ETSBatch
from specscope.simulator.policies.schedule import ScheduledTree
from specscope.simulator.policies.smartspec import SmartSpec
from specscope.simulator.policies.specdecpp import SpecDecPP
from specscope.simulator.policies.static import NoSpeculation, StaticTree

POLICIES: dict[str, Callable[[PolicySetup], Policy]] = {
    NoSpeculation.name: NoSpeculation,
    StaticTree.name: StaticTree,
    ScheduledTree.name: ScheduledTree,
    DySpec.name: DySpec,
    SpecDecPP.name: SpecDecPP,
    SmartSpec.name: SmartSpec,
    ETSBatch.name: ETSBatch,
}
