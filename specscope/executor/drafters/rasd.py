"""RASD (Quan et al. 2025, "RASD: Retrieval-Augmented Speculative Decoding"): a draft model's
candidates augmented with retrieved continuations, pruned by the draft model's distribution and
fused with the draft's own candidates by longest-prefix matching.

The paper retrieves continuations of the context (prompt lookup or REST), keeps a retrieved
sequence only when the draft model ranks its first token among its top-k there (tree pruning),
and merges the kept retrieval tree with the draft model's tree along shared prefixes into one
tree for verification (tree fusion). Here, per node of any tree method (static trees, DySpec):

- retrieval: `SuffixDrafter.lookup` on the text up to the node, at most `RETRIEVED` tokens (the
  suffix trie's most frequent continuations, scored by their count share r);
- pruning (the paper's top-k rule): a node whose token was itself retrieved at its parent
  continues a retrieved sequence, so all its retrieval candidates are kept, as the later tokens
  of a kept sequence are in the paper; at any other node retrieval starts new sequences, and
  only candidates among the draft's top `prune_k` there are kept;
- fusion and ranking: the kept retrieval candidates first, in retrieval order, then the draft's
  top-k in its order; a token proposed by both is one candidate at its retrieval place (the
  longest-prefix merge, node by node along the path); at most k in all. Scores: r for a
  retrieval candidate, the draft's probability q for the others.

Following rank 0 from a node thus follows a retrieved continuation as deep as the tree goes,
one fresh lookup per node (after a retrieved token the longest match is usually the same match
one token longer); where retrieval has nothing, the node's candidates are the draft's top-k.
As in the paper, continuing a retrieved sequence costs no draft forward: a level runs the draft
model only for its nodes that start new sequences (pruning needs the draft's top-k there) or
ask for more candidates than retrieval has.

Approximations against the paper, both needed for the candidates at a node to be a function of
the text up to it (so a trace collected on the true prefix replays static trees exactly):
retrieval runs at every node (the paper retrieves once per step, at the root), so a node the
draft proposed off a retrieved path may start a new pruned sequence; and "continues a retrieved
sequence" is checked one level up (its token was among the retrieval candidates at its parent).
Below the root, with k ≤ prune_k, that is exactly "its token was a kept retrieval candidate"
(a retrieved token in the tree but not kept would have to be a draft candidate outside the draft's
top prune_k); at the root it means the last committed token was retrieved at its own position,
where the paper would prune. The retrieval source is SuffixDecoding's tries, not PLD or REST.
Measured (tiny-code + tiny-code-draft, builtin:code-edit, 8 prompts × 64 tokens, greedy, n = 16):
tokens per step 4.16 best-first / 3.53 DySpec with this rule, 3.45 / 3.19 with the paper's root
(always pruned), 2.63 / 2.61 pruning every retrieved token, 4.38 / 3.42 without pruning.
"""

from __future__ import annotations

from collections.abc import Sequence

from specscope.draft import DraftNode, Proposal
from specscope.errors import InputError
from specscope.executor.drafters.base import Composite
from specscope.executor.drafters.draft_model import DraftModelDrafter
from specscope.executor.drafters.model_free import SuffixDrafter

RASD = "rasd"
"""Drafter name; its trace source is `rasd:<draft model>` (priced as that draft model)."""
PRUNE_K = 8
"""A new retrieved sequence is kept when the draft ranks its first token in its top PRUNE_K."""
RETRIEVED = 8
"""Retrieval candidates looked up per node: a fixed number, so that the candidates at a node,
and the pruning of its children, do not depend on how many a tree method asks for."""


class RasdDrafter(Composite):
    """RASD's fused candidates (module docstring): a draft model's top-k and a suffix drafter's
    retrieved continuations, pruned by the draft's top `prune_k`. Top-k candidates only (no
    sampled drafts): deterministic given the text, for greedy and deterministic-candidate
    verification."""

    def __init__(
        self, draft: DraftModelDrafter, retrieval: SuffixDrafter, prune_k: int = PRUNE_K
    ) -> None:
        super().__init__()
        if draft.sample is not None:
            raise InputError("RASD fuses top-k candidates; its draft model cannot sample children")
        if prune_k < 1:
            raise InputError(f"RASD's pruning top-k must be ≥ 1, got {prune_k}")
        self.draft, self.retrieval, self.prune_k = draft, retrieval, prune_k
        self.parts = (draft, retrieval)
        self.source = f"{RASD}:{draft.model.name}"
        self._before_root: list[int] = []
        self._retrieved: dict[int, Proposal] = {}

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        self.draft.start(prompt, capacity)
        # `begin` looks the root's parent up on the text before the root, so the last prompt
        # token is indexed there, after that lookup
        self.retrieval.start(prompt[:-1], capacity)

    def begin(self, context: Sequence[int]) -> None:
        super().begin(context)
        self.draft.begin(context)
        self.retrieval.begin(self.context[:-1])
        self._before_root = list(self.retrieval.lookup(self.context[:-1], RETRIEVED)[0])
        self.retrieval.begin(self.context)
        self._retrieved = {}

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        self.register(nodes)
        self.draft.register(nodes)  # a later draft pass runs the skipped ones as ancestors
        need = [v for v in nodes if not self._continues(v) or len(self._retrieval(v.id)[0]) < k]
        drafted = dict(zip([v.id for v in need],
                           self.draft.propose(need, max(k, self.prune_k)) if need else [],
                           strict=True))
        return [self.fuse(v, drafted.get(v.id, ([], [])), k) for v in nodes]

    def fuse(self, node: DraftNode, drafted: Proposal, k: int) -> Proposal:
        """At most k fused candidates at `node` (the root, or a node passed to `propose`) and
        their scores, from the draft's top max(k, prune_k) there (`drafted`, best first; it
        may be empty where `node` continues a retrieved sequence with k candidates or more)."""
        tokens, scores = list(drafted[0]), list(drafted[1])
        top = set(tokens[: self.prune_k])
        continues = self._continues(node)
        fused = {t: r for t, r in zip(*self._retrieval(node.id), strict=True)
                 if continues or t in top}
        for t, q in zip(tokens[:k], scores[:k], strict=True):
            fused.setdefault(t, q)
        kept = list(fused.items())[:k]
        return [t for t, _ in kept], [p for _, p in kept]

    def _continues(self, node: DraftNode) -> bool:
        """Whether `node` continues a retrieved sequence: its token was retrieved at its
        parent (for the root, at the text before it)."""
        if node.id == 0:
            return self.context[-1] in self._before_root
        return node.token in self._retrieval(node.parent)[0]

    def _retrieval(self, node: int) -> Proposal:
        """The retrieval candidates at `node`: the suffix drafter's on the text up to it."""
        if node not in self._retrieved:
            self._retrieved[node] = self.retrieval.lookup(self.context + self.path(node),
                                                          RETRIEVED)
        return self._retrieved[node]
