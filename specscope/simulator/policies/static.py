"""The fixed policies: `none` (autoregressive decoding) and `static` (the same tree every step).

`static` verifies `PolicySetup.tree` for every request at every step, drafting one level per
depth: the tree `optimize-tree` chose (`--tree FILE`, `--algo` to pick one of the file's
methods). Neither learns from outcomes.
"""

from __future__ import annotations

from specscope.errors import InputError
from specscope.simulator.policies.base import Policy, PolicySetup, Speculation, StepView


class NoSpeculation(Policy):
    """Autoregressive decoding: every request decodes one token per step."""

    name = "none"

    def __init__(self, setup: PolicySetup) -> None:
        self._none = Speculation.none()

    def plan(self, view: StepView) -> list[Speculation]:
        """The root alone for every slot."""
        return [self._none] * len(view.slots)


class StaticTree(Policy):
    """The same draft tree for every request at every step."""

    name = "static"

    def __init__(self, setup: PolicySetup) -> None:
        if setup.tree is None:
            raise InputError("--policy static needs --tree FILE (a tree or optimize-tree output)")
        self._spec = Speculation.of(setup.tree)

    def plan(self, view: StepView) -> list[Speculation]:
        """The setup's tree for every slot."""
        return [self._spec] * len(view.slots)
