"""The mixture-of-experts feed-forward of `Transformer`'s layers from `first_dense_layers` on.

Routing is Qwen3-MoE's with `norm_topk_prob` (and DeepSeek-V3's shared experts beside it): a
linear router's logits, a softmax over all `n_experts` of them (in at least float32), the top
`experts_per_token`, their probabilities renormalised to sum to 1 (which equals Mixtral's softmax
over the top-k logits). Each chosen expert is a SwiGLU of width `d_expert`; the shared experts,
one SwiGLU of total width `d_shared`, run on every token and are added unweighted.

Dispatch groups the step's (token, expert) pairs by expert and runs only the experts they touch,
each on its own tokens (`index_select`), so the work grows with the distinct experts the step's
tokens reach, as the pricing (`expected_experts`) assumes; no expert runs on tokens that did not
choose it. The outputs are put back in pair order (`index_copy_`, one write per pair) and summed
over each token's k experts in rank order, so a token's output does not depend on the other
tokens of the step and no atomic adds make it vary between runs. Knowing which experts are
touched reads the routing on the host: the layer runs eager, not under torch.compile or a CUDA
graph (`Transformer.step` refuses an MoE spec).
"""

from __future__ import annotations

import torch
from torch import nn

from specscope.models.spec import ModelSpec
from specscope.models.torch.layers import FeedForward


class MoEFeedForward(nn.Module):
    """Router (`gate`), routed experts (`experts`) and shared experts (`shared_experts`, when
    d_shared > 0): x (..., d_model) → (..., d_model)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.k = spec.experts_per_token
        self.gate = nn.Linear(spec.d_model, spec.n_experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(spec.d_model, spec.d_expert)
                                     for _ in range(spec.n_experts))
        self.shared_experts = FeedForward(spec.d_model, spec.d_shared) if spec.d_shared else None

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Experts (tokens, k) chosen for each row of x (tokens, d_model), best first, and their
        renormalised weights (tokens, k) in x's dtype."""
        logits = self.gate(x)
        probs = logits.to(torch.promote_types(x.dtype, torch.float32)).softmax(-1)
        weights, experts = probs.topk(self.k, dim=-1)
        return experts, (weights / weights.sum(-1, keepdim=True)).to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        experts, weights = self.route(x)
        pairs = experts.flatten()
        order = pairs.argsort(stable=True)
        counts = torch.bincount(pairs, minlength=len(self.experts)).tolist()
        rows = order // self.k
        out = x.new_empty(pairs.numel(), shape[-1])
        start = 0
        for expert, count in zip(self.experts, counts, strict=True):
            if count:
                index = order[start : start + count]
                out.index_copy_(0, index, expert(x.index_select(0, rows[start : start + count])))
                start += count
        y = (out.view(-1, self.k, shape[-1]) * weights[..., None]).sum(1)
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        return y.view(shape)
