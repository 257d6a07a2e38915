"""The fixed policies: `none` (autoregressive decoding) and `static` (the same tree every step).

`static` verifies `PolicySetup.tree` for every request at every step, drafting one level per
depth: the tree `optimize-tree` chose (`--tree FILE`, `--algo` to pick one of the file's
methods). Neither learns from outcomes. Both are `FixedPolicy`s: the server takes their one
`speculation` for the whole batch instead of asking them each step, which is what makes them
cheap to simulate.
"""

from __future__ import annotations

from specscope.errors import InputError
from specscope.simulator.policies.base import Policy, PolicySetup, Speculation, StepView


class FixedPolicy(Policy):
    """A policy that verifies one `speculation` for every request at every step and learns
    nothing from outcomes (it keeps `Policy.observe`)."""

    speculation: Speculation

    def plan(self, view: StepView) -> list[Speculation]:
        """The one speculation for every slot."""
        return [self.speculation] * len(view.slots)


class NoSpeculation(FixedPolicy):
    """Autoregressive decoding: every request decodes one token per step."""

    name = "none"

    def __init__(self, setup: PolicySetup) -> None:
        self.speculation = Speculation.none()


class StaticTree(FixedPolicy):
    """The same draft tree for every request at every step."""

    name = "static"

    def __init__(self, setup: PolicySetup) -> None:
        if setup.tree is None:
            raise InputError("--policy static needs --tree FILE (a tree or optimize-tree output)")
        self.speculation = Speculation.of(setup.tree)
