"""`System`: what `reproduce`, `simulate` and `sweep` need of a seed system's mechanism.

A mechanism answers two questions about a `Case`:

- `costs(case)`: the cost models it deploys, `SystemCosts`: the target as verified (quantised,
  early-exiting, behind image tokens, at tp) and the drafter (a head, a long-context draft, a
  sub-draft, …; None when the target drafts for itself or nothing drafts), with what the
  mechanism does to acceptance. `simulate` and `sweep` serve these in place of plain catalogue
  cost models, so every system is simulated under load the same way.
- `predict(case)`: the case's `Prediction`, one decoding step at batch `case.batch`, for
  `reproduce`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from specscope.hw_profiles import CostModel
from specscope.systems.case import Case
from specscope.systems.step import Prediction


@dataclass(frozen=True)
class SystemCosts:
    """A system's deployment as cost models: `target` verifies, `drafter` drafts (None: no
    draft model; `source` is then the model-free source the simulator prices, or "none").

    acceptance_scale multiplies the drafter's acceptance (EasySpec's loss < 1, a judge's gain
    > 1); lossy marks acceptance beyond the target's distribution; prompt_tokens are tokens a
    request's prompt gains before decoding (a VLM's image tokens)."""

    target: CostModel
    drafter: CostModel | None
    source: str
    acceptance_scale: float = 1.0
    lossy: bool = False
    prompt_tokens: int = 0


@dataclass(frozen=True)
class System:
    """A mechanism: its case key, its paper, the case keys of its own (name → TOML type), its
    deployment (`costs`) and its price of a case (`predict`). `lossy` systems accept beyond
    the target's distribution."""

    name: str
    paper: str
    costs: Callable[[Case], SystemCosts]
    predict: Callable[[Case], Prediction]
    options: Mapping[str, type | tuple[type, ...]]
    lossy: bool = False
