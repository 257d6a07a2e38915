"""OSD's distillation (Liu et al. 2024, "Online Speculative Decoding"): what is kept of the
served requests and how the draft learns from it (`adapt.py` runs the stream).

The buffer (`ServedBuffer`, fed by `ServingDrafter` during serving) holds each served sequence
and, at the recorded positions, the target's distribution of the next token: the verification
pass's logits, taken from the serving run at no extra cost (the authors' code ran the teacher
again over the buffered text). Positions:

- "wrong" (default, the paper's choice): the position after the last accepted node of a step
  whose drafted children were all rejected. A step that accepts its whole chain adds nothing.
- "all": every verified position on the accepted path (a plain distillation on served text).

`Distiller.update` runs `steps` AdamW steps (one optimiser for the whole stream), each
full-batch over the buffer, on a divergence between the target's and the draft's next-token
distributions at those positions, softmax at temperature 1 whatever the serving temperature:
`fkl` KL(target ‖ draft) (the authors' online default, their soft cross-entropy), `rkl`
KL(draft ‖ target), `jsd` the Jensen–Shannon divergence (β = 0.5). Nothing is drawn at random.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specscope.draft import DraftedTree
from specscope.errors import InputError
from specscope.executor.drafters import DraftModelDrafter
from specscope.executor.targets import Model
from specscope.executor.verify import Verdict
from specscope.models.torch import Transformer
from specscope.names import ADAPT_LOSSES, ADAPT_POSITIONS


@dataclass(frozen=True)
class AdaptConfig:
    """How the draft adapts: an update every `every` requests of `steps` AdamW steps at `lr`
    with `loss` on the buffered `positions`; `depth` drafts a step (a chain)."""

    every: int = 1
    steps: int = 4
    lr: float = 1e-4
    loss: str = "fkl"
    positions: str = "wrong"
    depth: int = 4

    def check(self) -> None:
        """Raise `InputError` naming the first impossible option."""
        if self.every < 1:
            raise InputError(f"--every must be ≥ 1 request, got {self.every}")
        if self.steps < 0:
            raise InputError(f"--steps must be ≥ 0, got {self.steps}")
        if not self.lr > 0:
            raise InputError(f"--lr must be > 0, got {self.lr}")
        if self.loss not in ADAPT_LOSSES:
            raise InputError(f"--loss: unknown divergence {self.loss!r}; known: "
                             f"{', '.join(ADAPT_LOSSES)}")
        if self.positions not in ADAPT_POSITIONS:
            raise InputError(f"--positions must be one of {', '.join(ADAPT_POSITIONS)}, got "
                             f"{self.positions!r}")
        if self.depth < 1:
            raise InputError(f"--depth must be ≥ 1 draft, got {self.depth}")


@dataclass(frozen=True)
class Served:
    """One served request in the buffer: its tokens (prompt + output) and, at each recorded
    position i, the target's log-probabilities of the token after tokens[: i + 1]."""

    tokens: torch.Tensor
    rows: torch.Tensor
    target: torch.Tensor


class ServedBuffer:
    """What OSD keeps of the served requests: per finished request a `Served` (the target's
    distributions at the recorded `positions`, module docstring)."""

    def __init__(self, positions: str) -> None:
        self.positions = positions
        self.served: list[Served] = []
        self._prompt: list[int] = []
        self._rows: list[int] = []
        self._target: list[torch.Tensor] = []
        self._logits = torch.empty(0)

    def start(self, prompt: Sequence[int]) -> None:
        """A request begins with `prompt`."""
        self._prompt, self._rows, self._target = list(prompt), [], []

    def verified(self, logits: torch.Tensor) -> None:
        """The target's logits (n, vocab) of the step's tree (the prompt's, at prefill)."""
        self._logits = logits

    def observe(self, context: Sequence[int], drafted: DraftedTree, verdict: Verdict) -> None:
        """Record the step's positions; `context` is the committed text before the step."""
        path = verdict.path
        if self.positions == "wrong":
            nodes = path[-1:] if drafted.tree.children[path[-1]] else []
        else:
            nodes = path
        root = len(context) - 1
        for node in nodes:
            self._rows.append(root + int(drafted.tree.depths[node]))
            self._target.append(F.log_softmax(self._logits[node].float().cpu(), dim=-1))

    def finish(self, output: Sequence[int]) -> None:
        """The request ended with `output`: keep it when it recorded a position in its text."""
        tokens = torch.tensor([*self._prompt, *output])
        keep = [i for i, row in enumerate(self._rows) if row < tokens.numel()]
        if keep:
            self.served.append(Served(tokens, torch.tensor([self._rows[i] for i in keep]),
                                      torch.stack([self._target[i] for i in keep])))


class ServingDrafter(DraftModelDrafter):
    """A draft model's drafter that feeds a `ServedBuffer`: the target's logits of each step
    reach it through `update`, the step's verdict through `observe`, which the stream's
    `Method` calls after every verification."""

    def __init__(self, model: Model, positions: str, sample: str | None = None,
                 temperature: float = 0.0, generator: torch.Generator | None = None) -> None:
        super().__init__(model, sample, temperature, generator)
        self.buffer = ServedBuffer(positions)

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        super().start(prompt, capacity)
        self.buffer.start(prompt)

    def update(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        super().update(tokens, logits)
        self.buffer.verified(logits)

    def observe(self, drafted: DraftedTree, verdict: Verdict) -> None:
        """`Method.observe`: the step's verdict."""
        self.buffer.observe(self.context, drafted, verdict)

    def finish(self, output: Sequence[int]) -> None:
        super().finish(output)
        self.buffer.finish(output)


def divergence(loss: str, target_logp: torch.Tensor, draft_logits: torch.Tensor) -> torch.Tensor:
    """Summed divergence (nats) over rows between the target's log-probabilities and the
    draft's logits (rows, vocab): `fkl`, `rkl` or `jsd` (module docstring)."""
    draft_logp = F.log_softmax(draft_logits.float(), dim=-1)
    if loss == "fkl":
        return F.kl_div(draft_logp, target_logp, log_target=True, reduction="sum")
    if loss == "rkl":
        return F.kl_div(target_logp, draft_logp, log_target=True, reduction="sum")
    mixture = torch.logaddexp(target_logp, draft_logp) - math.log(2.0)
    return 0.5 * (F.kl_div(mixture, target_logp, log_target=True, reduction="sum")
                  + F.kl_div(mixture, draft_logp, log_target=True, reduction="sum"))


class Distiller:
    """The draft's trainable copy and its AdamW, kept for the whole stream."""

    def __init__(self, module: Transformer, config: AdaptConfig) -> None:
        self.module, self.config = module, config
        self.optimizer = torch.optim.AdamW(module.parameters(), lr=config.lr)

    def update(self, buffer: Sequence[Served]) -> float | None:
        """`config.steps` full-batch steps on `buffer`; the mean divergence per recorded
        position (nats) before the first step (None: nothing to learn from). The KV cache is
        reallocated at its size."""
        rows = sum(s.rows.numel() for s in buffer)
        if not rows or not self.config.steps:
            return None
        size = self.module.max_seq_len
        first = 0.0
        for step in range(self.config.steps):
            self.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for served in buffer:
                upto = int(served.rows.max()) + 1
                logits = self.module.forward_sequence(served.tokens[None, :upto])[0]
                part = divergence(self.config.loss, served.target, logits[served.rows]) / rows
                part.backward()
                total += float(part.detach())
            self.optimizer.step()
            first = total if step == 0 else first
        self.optimizer.zero_grad(set_to_none=True)
        self.module.setup_caches(1, size)
        return first
