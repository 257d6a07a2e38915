"""Every seed system by its case key (`system = "..."` in a scenario)."""

from __future__ import annotations

from typing import Any

from specscope.errors import InputError
from specscope.systems import (
    arbitrage,
    draft_model,
    easyspec,
    fastdraft,
    head,
    hierspec,
    judge,
    longspec,
    s2d,
    specee,
    vispec,
)
from specscope.systems.base import System
from specscope.systems.case import parse_options

SYSTEMS: dict[str, System] = {s.name: s for s in (
    draft_model.SYSTEM,
    head.SYSTEM,
    hierspec.SYSTEM,
    specee.SYSTEM,
    easyspec.SYSTEM,
    longspec.SYSTEM,
    vispec.SYSTEM,
    judge.SYSTEM,
    arbitrage.SYSTEM,
    s2d.SYSTEM,
    fastdraft.SYSTEM,
)}
"""The systems `reproduce`, `simulate` and `sweep` know."""
SYSTEM_NAMES = tuple(SYSTEMS)


def system_options(system: str | None, text: str | None,
                   option: str = "--system-options") -> dict[str, Any]:
    """The options of `system` given as `key=value,...` on the command line, checked."""
    if system is None:
        if text:
            raise InputError(f"{option} needs --system")
        return {}
    if system not in SYSTEMS:
        raise InputError(f"--system: unknown system {system!r}; known: {', '.join(SYSTEMS)}")
    return parse_options(text or "", SYSTEMS[system].options, system, option)
