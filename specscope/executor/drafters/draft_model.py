"""A small causal LM drafting top-k candidates, or children drawn from its distribution."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch

from specscope.draft import DraftNode, Proposal
from specscope.executor.drafters.base import Drafter, check_sampling
from specscope.executor.targets import Model
from specscope.executor.verify import draw_children, probabilities
from specscope.tree import ROOT_SOURCE, Tree


class DraftModelDrafter(Drafter):
    """A small causal LM (any `Model`: Transformer, Hugging Face or Mamba-2) drafting top-k
    candidates, or children drawn from its distribution.

    sample: None (top-k, deterministic candidates), "with" or "without" replacement (children
    drawn from q at `temperature`; q of every expanded node is kept in `draft_probs` for
    SpecInfer or Sequoia verification).
    """

    def __init__(
        self,
        model: Model,
        sample: str | None = None,
        temperature: float = 0.0,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        check_sampling(sample, generator, "draft model")
        self.model, self.sample, self.temperature = model, sample, temperature
        self.generator = generator
        self.source = f"draft:{model.name}"
        self._forwarded: Tree | None = None
        self._index: dict[int, int] = {}
        self._tokens = torch.empty(0, dtype=torch.long)
        self._logits = torch.empty(0)

    @property
    def models(self) -> list[Model]:
        return [self.model]

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        self.model.prefill(torch.tensor(prompt), capacity)

    def truth_logits(self, truth: Sequence[int]) -> torch.Tensor:
        """The draft's logits (len(truth) − 1, vocab) after every token of `truth` but the
        last, each given the true prefix: trace collection's one forward over a sequence."""
        return self.model.prefill(torch.tensor(truth), len(truth))

    def truth_proposals(self, truth: Sequence[int], prompt_len: int,
                        length: int) -> list[list[int]] | None:
        """Per generated position, the chain drafted from the true prefix when the drafter is a
        sequence source in traces (DEL); None for a ranked draft, whose top-k replays trees."""
        return None

    def begin(self, context: Sequence[int]) -> None:
        super().begin(context)
        self.draft_probs = {}
        self._forwarded = None

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        if self.sample is not None:
            out = []
            for q in self.distributions(nodes):
                kids = draw_children(q, k, self.sample == "with", self.generator)
                out.append((kids, q[kids].tolist()))
            return out
        out = []
        for q in probabilities(self._rows(nodes), self.temperature):
            top = q.topk(min(k, q.numel()))
            out.append((top.indices.tolist(), top.values.tolist()))
        return out

    def distributions(self, nodes: Sequence[DraftNode]) -> list[torch.Tensor]:
        """The draft's distribution q at each node (float64 on the CPU, tempered), kept in
        `draft_probs`: what sampled drafts draw from and sampled-draft rules verify against."""
        # on the CPU: children are drawn with a CPU generator, whatever the device
        probs = probabilities(self._rows(nodes), self.temperature).cpu()
        for v, q in zip(nodes, probs, strict=True):
            self.draft_probs[v.id] = q
        return list(probs)

    def _rows(self, nodes: Sequence[DraftNode]) -> torch.Tensor:
        """The draft's logits after each node (forwarding the nodes not run yet)."""
        self.register(nodes)
        if self._forwarded is None:
            self._catch_up()
        if any(v.id not in self._index for v in nodes):
            self._forward(nodes)
        return self._logits[[self._index[v.id] for v in nodes]]

    def accept(self, tokens: Sequence[int]) -> None:
        if self._forwarded is None:
            return
        path, node = [0], 0
        kids = self._forwarded.children
        for token in tokens:
            node = next((c for c in kids[node] if int(self._tokens[c]) == token), -1)
            if node < 0:
                break
            path.append(node)
        self.model.commit(self._tokens, path)

    def _catch_up(self) -> None:
        """Run the committed tokens the draft has not seen, and the root, as one chain."""
        pending = torch.tensor(self.context[self.model.committed :])
        logits = self.model.verify(pending, Tree.chain(pending.numel() - 1))
        self.model.commit(pending, list(range(pending.numel() - 1)))
        self._set_forwarded(Tree.root(), [0], pending[-1:], logits[-1:])

    def _forward(self, nodes: Sequence[DraftNode]) -> None:
        """One batched pass over `nodes` and their ancestors, after the committed prefix."""
        keep = {0}
        for v in nodes:
            u = v.id
            while u not in keep:
                keep.add(u)
                u = self.nodes[u].parent
        ids = sorted(keep, key=lambda u: (0, 0) if u == 0 else (self.nodes[u].depth, u))
        index = {u: i for i, u in enumerate(ids)}
        parents = [-1] + [index[self.nodes[u].parent] for u in ids[1:]]
        seen: Counter[int] = Counter()
        ranks = [-1]
        for p in parents[1:]:
            ranks.append(seen[p])
            seen[p] += 1
        tree = Tree(np.array(parents), np.array(ranks), (ROOT_SOURCE,) + (self.source,) * (
            len(ids) - 1))
        tokens = torch.tensor([self.context[-1]] + [self.nodes[u].token for u in ids[1:]])
        self._set_forwarded(tree, ids, tokens, self.model.verify(tokens, tree))

    def _set_forwarded(
        self, tree: Tree, ids: Sequence[int], tokens: torch.Tensor, logits: torch.Tensor
    ) -> None:
        self._forwarded, self._tokens, self._logits = tree, tokens, logits
        self._index = {u: i for i, u in enumerate(ids)}
