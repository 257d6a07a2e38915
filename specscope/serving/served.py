"""One sequence the continuous-batching server has admitted: what the server and the policies'
planners share about it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specscope.executor.drafters import Drafter
from specscope.simulator.entities import Request


@dataclass(eq=False)
class Served:
    """One admitted sequence: its simulator `Request`, row, prompt, drafter and output, and the
    time of each generated token (s from the run's start)."""

    request: Request
    row: int
    prompt: list[int]
    drafter: Drafter
    output: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    prompt_logits: list[torch.Tensor] = field(default_factory=list)

    @property
    def context(self) -> list[int]:
        """Committed tokens: the prompt and the output so far."""
        return self.prompt + self.output
