"""Per-step speculation policies of the simulator, by name (`POLICIES[name](setup)`)."""

from collections.abc import Callable

from specscope.simulator.policies.base import Policy, PolicySetup
from specscope.simulator.policies.dyspec import DySpec
from specscope.simulator.policies.ets_batch import ETSBatch
from specscope.simulator.policies.smartspec import SmartSpec
from specscope.simulator.policies.specdecpp import SpecDecPP

POLICIES: dict[str, Callable[[PolicySetup], Policy]] = {
    DySpec.name: DySpec,
    SpecDecPP.name: SpecDecPP,
    SmartSpec.name: SmartSpec,
    ETSBatch.name: ETSBatch,
}
