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
    hydra,
    judge,
    kangaroo,
    longspec,
    medusa,
    model_free,
    mtp,
    s2d,
    specdecpp,
    specee,
    swift,
    vispec,
)
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case, parse_options

SYSTEMS: dict[str, System] = {s.name: s for s in (
    draft_model.SYSTEM,
    head.SYSTEM,
    mtp.SYSTEM,
    hierspec.SYSTEM,
    specee.SYSTEM,
    easyspec.SYSTEM,
    longspec.SYSTEM,
    vispec.SYSTEM,
    judge.SYSTEM,
    arbitrage.SYSTEM,
    s2d.SYSTEM,
    fastdraft.SYSTEM,
    *model_free.SYSTEMS,
    medusa.SYSTEM,
    hydra.SYSTEM,
    swift.SYSTEM,
    kangaroo.SYSTEM,
    specdecpp.SYSTEM,
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


def deploy(system: str, hw: str, target: str, *, draft: str | None = None,
           weight_bits: int | None = None, tp: int = 1, runtime: str | None = None,
           images: int = 0, options: dict[str, Any] | None = None,
           where: str = "--system") -> SystemCosts:
    """The cost models `system` deploys for a target (and draft) on a profile: what `cost`,
    `simulate` and `sweep` serve in place of plain catalogue cost models."""
    if system not in SYSTEMS:
        raise InputError(f"{where}: unknown system {system!r}; known: {', '.join(SYSTEMS)}")
    case = Case(name=system, system=system, hw=hw, target=target, where=where, draft=draft,
                weight_bits=weight_bits, tp=tp, runtime=runtime, images=images,
                options=dict(options or {}))
    return SYSTEMS[system].costs(case)
