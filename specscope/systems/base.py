"""`System`: what `reproduce`, `simulate` and `sweep` need of a seed system's mechanism.

A mechanism answers two questions about a `Case`:

- `costs(case)`: the cost models it deploys, `SystemCosts`: the target as verified (quantised,
  early-exiting, behind image tokens, at tp) and the drafter (a head, a long-context draft, a
  sub-draft, …; None when the target drafts for itself or nothing drafts), with what the
  mechanism does to acceptance. `simulate` and `sweep` serve these in place of plain catalogue
  cost models, so every system is simulated under load the same way.
- `predict(case)`: the case's `Prediction`, one decoding step at batch `case.batch`, for
  `reproduce`.
- `prefill_s(case)`: the batch's prompt forwards, which `reproduce` adds to a case whose source
  timed whole requests (`timed_prefill`).
- `most_tokens(case)`: the most tokens one step can yield and what bounds it, which `reproduce`
  holds the case's τ (and an anchor's solved τ) to. By default the case's tree
  (`case.tree_tokens`: d drafted levels + the bonus); systems whose step is not the case's tree
  state their own (a model-free chain's length, none where τ is not the case's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from specscope.hw_profiles import CostModel
from specscope.systems.case import Case, tree_tokens
from specscope.systems.step import Prediction, pricing


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
    the target's distribution; `most_tokens` bounds τ (module docstring)."""

    name: str
    paper: str
    costs: Callable[[Case], SystemCosts]
    predict: Callable[[Case], Prediction]
    options: Mapping[str, type | tuple[type, ...]]
    lossy: bool = False
    prompts: Callable[[Case], tuple[float, float]] | None = None
    most_tokens: Callable[[Case], tuple[float, str] | None] = tree_tokens

    def prefill_s(self, case: Case) -> tuple[float, float]:
        """Seconds of the batch's prompt forwards: (autoregressive, speculative). The
        system's own `prompts` where its prompt differs (a VLM's images), else the target as
        the baseline runs it over the prompt, and the target and the drafter as the system
        deploys them on the case's engine."""
        if self.prompts is not None:
            return self.prompts(case)
        c = self.costs(case)
        price = pricing(case, c.target, c.drafter)
        prompt = case.context + c.prompt_tokens
        plain = float((price.baseline or price.target).forward_time(case.batch, prompt, 0))
        ours = float(price.target.forward_time(case.batch, prompt, 0))
        if price.drafter is not None:
            ours += float(price.drafter.forward_time(case.batch, case.context, 0))
        return plain, ours
