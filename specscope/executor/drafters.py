"""Drafters: candidate tokens for the nodes of a draft tree (ALGORITHMS.md, "Drafters").

Every drafter answers one question, batched over the nodes of one tree level: *given the
committed context and the path down to this node, which tokens might come next, best first, and
how likely is each?* (`propose`, returning DySpec's `Proposal` per `DraftNode`). Static trees,
chains, DySpec, SpecDec++ and Goose all grow their trees through it, level by level, so any
drafter works with any tree method.

- `DraftModelDrafter`: a small causal LM's top-k (or children drawn from it, for SpecInfer and
  Sequoia verification). One batched tree pass per level over the nodes drafted so far; its own
  KV cache (or SSM state) follows the committed text by compaction of the accepted path.
- `NgramDrafter` (prompt lookup): match the last 3, then 2, then 1 tokens in the context.
- `SuffixDrafter` (SuffixDecoding): suffix tries over this request's text and earlier responses.
- `RecycleDrafter` (Token Recycling): a vocab × 8 table of the target's top-8 next tokens.
- `GooseDrafter`: the n-gram spine candidate first, then recycling candidates.

Life cycle, driven by the executor and by trace collection: `start` (new request), then per step
`begin` (committed context; its last token is the root), `propose` (level by level), `update`
(target logits the step computed), `accept` (the accepted drafted tokens); `finish` (response
done).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch

from specscope.errors import InputError
from specscope.executor.targets import Model
from specscope.executor.verify import draw_children, probabilities
from specscope.optimizers.dyspec import DraftNode, Proposal
from specscope.tree import DEFAULT_SOURCE, ROOT_SOURCE, Tree

DRAFTERS = ("draft", "ngram", "suffix", "recycle", "goose")
"""Drafter names, as `--drafter` takes them."""
RECYCLE = "recycle"
"""Source name of the token-recycling drafter (Goose's branches)."""
ROOT = DraftNode(0, -1, -1, 0)
"""Node id 0 is the root of every step's tree (its token is the last committed one)."""


class Drafter:
    """Base of every drafter: step bookkeeping (the nodes seen this step) and no-op hooks."""

    source = DEFAULT_SOURCE

    def __init__(self) -> None:
        self.context: list[int] = []
        self.nodes: dict[int, DraftNode] = {}
        self.draft_probs: dict[int, torch.Tensor] = {}
        """The draft distribution q at each expanded node, for sampled drafts only."""

    @property
    def models(self) -> list[Model]:
        """The models this drafter runs (to compile or capture before decoding)."""
        return []

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        """A new request begins with `prompt`; `capacity` bounds the tokens it will hold."""

    def begin(self, context: Sequence[int]) -> None:
        """A new step over the committed `context`; its last token is the root (node id 0)."""
        self.context = list(context)
        self.nodes = {0: ROOT._replace(token=self.context[-1])}

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        """Up to k candidate tokens (best first) and their probabilities for each node; all
        nodes share one depth and their parents were passed before (or are the root)."""
        raise NotImplementedError

    def update(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        """The target computed `logits` (m, vocab) after each of `tokens` (m,)."""

    def accept(self, tokens: Sequence[int]) -> None:
        """The target accepted these drafted tokens (below the root) of this step's tree."""

    def finish(self, output: Sequence[int]) -> None:
        """The request ended with `output` (generated tokens)."""

    def path(self, node: int) -> list[int]:
        """Tokens from below the root down to `node` (empty for the root)."""
        out = []
        while node != 0:
            out.append(self.nodes[node].token)
            node = self.nodes[node].parent
        return out[::-1]

    def register(self, nodes: Sequence[DraftNode]) -> None:
        """Remember the nodes of this level (their parents are known already)."""
        for v in nodes:
            if v.id != 0:
                self.nodes[v.id] = v


# ---- draft model ------------------------------------------------------------------------------


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
        if sample not in (None, "with", "without"):
            raise InputError(f"draft sampling must be None, 'with' or 'without', got {sample!r}")
        if sample is not None and generator is None:
            raise InputError("sampled drafts need a torch.Generator")
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

    def begin(self, context: Sequence[int]) -> None:
        super().begin(context)
        self.draft_probs = {}
        self._forwarded = None

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        self.register(nodes)
        if self._forwarded is None:
            self._catch_up()
        if any(v.id not in self._index for v in nodes):
            self._forward(nodes)
        rows = self._logits[[self._index[v.id] for v in nodes]]
        out = []
        for v, q in zip(nodes, probabilities(rows, self.temperature), strict=True):
            if self.sample is None:
                top = q.topk(min(k, q.numel()))
                out.append((top.indices.tolist(), top.values.tolist()))
            else:
                q = q.cpu()  # drawn with a CPU generator, whatever the device
                kids = draw_children(q, k, self.sample == "with", self.generator)
                self.draft_probs[v.id] = q
                out.append((kids, q[kids].tolist()))
        return out

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


# ---- prompt lookup ----------------------------------------------------------------------------


class NgramDrafter(Drafter):
    """Prompt lookup: the tokens that followed earlier occurrences of the context's last n tokens.

    At a node, the longest n ≤ `max_n` whose n-gram occurred earlier (in the committed text or
    along the node's own path) decides; its occurrences (the most recent `occurrences`) vote:
    candidates are their next tokens, most recent first, scored by their share of the votes.
    Following rank 0 from a position (the proposal) mostly copies the continuation of the most
    recent match, at most `max_len` tokens deep.
    """

    source = "ngram"

    def __init__(self, max_n: int = 3, max_len: int = 10, occurrences: int = 64) -> None:
        super().__init__()
        self.max_n, self.max_len, self.occurrences = max_n, max_len, occurrences
        self._seq: list[int] = []
        self._ends: dict[tuple[int, ...], list[int]] = {}

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        self._seq, self._ends = [], {}
        self._extend(prompt)

    def begin(self, context: Sequence[int]) -> None:
        super().begin(context)
        self._extend(self.context[len(self._seq) :])

    def _extend(self, tokens: Sequence[int]) -> None:
        """Index the n-grams ending at each of `tokens`, appended to the committed text."""
        for token in tokens:
            self._seq.append(token)
            end = len(self._seq) - 1
            for n in range(1, self.max_n + 1):
                if end - n + 1 >= 0:
                    self._ends.setdefault(tuple(self._seq[end - n + 1 :]), []).append(end)

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        self.register(nodes)
        return [
            self._lookup(self.path(v.id), k) if v.depth < self.max_len else ([], [])
            for v in nodes
        ]

    def _lookup(self, tail: list[int], k: int) -> Proposal:
        seq, c = self._seq, len(self._seq)
        length = c + len(tail)

        def at(i: int) -> int:
            return seq[i] if i < c else tail[i - c]

        for n in range(min(self.max_n, length - 1), 0, -1):
            gram = tuple(at(i) for i in range(length - n, length))
            ends = [e for e in self._ends.get(gram, [])[-self.occurrences :] if e < length - 1]
            ends += [
                e
                for e in range(max(c, n - 1), length - 1)
                if all(at(e - n + 1 + j) == gram[j] for j in range(n))
            ]
            if ends:
                ends.sort(reverse=True)
                votes = Counter(at(e + 1) for e in ends)
                tokens = list(dict.fromkeys(at(e + 1) for e in ends))[:k]
                return tokens, [votes[t] / len(ends) for t in tokens]
        return [], []


# ---- suffix decoding --------------------------------------------------------------------------


class _TrieNode:
    __slots__ = ("children", "count", "depth")

    def __init__(self, depth: int) -> None:
        self.children: dict[int, _TrieNode] = _NO_CHILDREN
        self.count = 0
        self.depth = depth


_NO_CHILDREN: dict[int, _TrieNode] = {}
"""Shared by every childless node (most are), replaced by a node's own dict on its first child;
never written to."""


class SuffixTrie:
    """Every substring (up to `max_depth` tokens) of the sequences appended, with its count.

    Appending a token extends each suffix still shorter than `max_depth` by one node, so the
    trie grows in O(max_depth) per token; `close` ends a sequence (the next token starts anew).
    """

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.root = _TrieNode(0)
        self._open: list[_TrieNode] = []

    def append(self, token: int) -> None:
        """Add the suffixes ending at `token` of the current sequence."""
        grown = []
        for node in [*self._open, self.root]:
            child = node.children.get(token)
            if child is None:
                if node.children is _NO_CHILDREN:
                    node.children = {}
                child = node.children[token] = _TrieNode(node.depth + 1)
            child.count += 1
            if child.depth < self.max_depth:
                grown.append(child)
        self._open = grown

    def close(self) -> None:
        """End the current sequence."""
        self._open = []

    def match(self, text: Sequence[int]) -> _TrieNode | None:
        """The node of the longest suffix of `text` that has a continuation (so at most
        max_depth − 1 tokens: the trie stores strings up to max_depth).

        Having one is monotone in the suffix length (a continued occurrence of a suffix is a
        continued occurrence of each shorter one), so the length is found by bisection.
        """
        best, low, high = None, 1, min(self.max_depth - 1, len(text))
        while low <= high:
            m = (low + high) // 2
            node = self._find(text[len(text) - m :])
            if node is not None and node.children:
                best, low = node, m + 1
            else:
                high = m - 1
        return best

    def _find(self, tokens: Sequence[int]) -> _TrieNode | None:
        node: _TrieNode | None = self.root
        for token in tokens:
            node = node.children.get(token)
            if node is None:
                return None
        return node


class SuffixDrafter(Drafter):
    """SuffixDecoding: the most frequent continuations of the longest matching suffix.

    Two tries: this request's prompt and output so far, and earlier responses; the step uses the
    one whose greedy proposal has the larger expected length. From the matched node, a child is
    proposed while its path probability (product of count(child) / count(node)) stays ≥
    `min_prob`, at most floor(match length × `factor` + `offset`) tokens deep.
    """

    source = "suffix"

    def __init__(
        self, min_prob: float = 0.1, factor: float = 1.0, offset: float = 0.0, max_depth: int = 24
    ) -> None:
        super().__init__()
        self.min_prob, self.factor, self.offset = min_prob, factor, offset
        self.responses = SuffixTrie(max_depth)
        self.request = SuffixTrie(max_depth)
        self._seen = 0
        self._states: dict[tuple[int, int], tuple[_TrieNode, float, int]] = {}

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        self.request = SuffixTrie(self.responses.max_depth)
        for token in prompt:
            self.request.append(token)
        self._seen = len(prompt)

    def begin(self, context: Sequence[int]) -> None:
        super().begin(context)
        for token in self.context[self._seen :]:
            self.request.append(token)
        self._seen = len(self.context)
        self._states = {}

    def finish(self, output: Sequence[int]) -> None:
        for token in output:
            self.responses.append(token)
        self.responses.close()

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        self.register(nodes)
        out = []
        for v in nodes:
            state = self._states.get((v.parent, v.token)) or self._match(v.id)
            if state is None:
                out.append(([], []))
                continue
            node, prob, room = state
            tokens, probs = [], []
            if room > 0:
                for token, child in sorted(node.children.items(), key=lambda kv: -kv[1].count):
                    p = child.count / node.count
                    if len(tokens) == k or prob * p < self.min_prob:
                        break
                    tokens.append(token)
                    probs.append(p)
                    self._states[(v.id, token)] = (child, prob * p, room - 1)
            out.append((tokens, probs))
        return out

    def _match(self, node: int) -> tuple[_TrieNode, float, int] | None:
        text = self.context + self.path(node)
        best, best_value = None, 0.0
        for trie in (self.request, self.responses):
            found = trie.match(text)
            if found is None:
                continue
            room = int(found.depth * self.factor + self.offset)
            value = self._expected_length(found, room)
            if value > best_value:
                best, best_value = (found, 1.0, room), value
        return best

    def _expected_length(self, node: _TrieNode, room: int) -> float:
        """Σ path probabilities along the greedy proposal from `node`."""
        total, prob = 0.0, 1.0
        while room > 0 and node.children:
            child = max(node.children.values(), key=lambda c: c.count)
            prob *= child.count / node.count
            if prob < self.min_prob:
                break
            total += prob
            node, room = child, room - 1
        return total


# ---- token recycling --------------------------------------------------------------------------


class RecycleDrafter(Drafter):
    """Token Recycling: for each token, the target's top-`width` next tokens when it last saw it.

    The table (vocab × width, −1 = empty) is overwritten from every position whose target logits
    a step computed, tree nodes included, and is kept across requests.
    """

    source = RECYCLE

    def __init__(self, vocab_size: int, width: int = 8) -> None:
        super().__init__()
        self.table = np.full((vocab_size, width), -1, dtype=np.int64)
        self.scores = np.zeros((vocab_size, width), dtype=np.float64)

    def update(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        top = torch.softmax(logits.float(), dim=-1).topk(self.table.shape[1])
        rows = tokens.cpu().numpy()
        self.table[rows] = top.indices.cpu().numpy()
        self.scores[rows] = top.values.cpu().numpy()

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        self.register(nodes)
        out = []
        for v in nodes:
            token = self.context[-1] if v.id == 0 else v.token
            row, score = self.table[token, :k], self.scores[token, :k]
            filled = row >= 0
            out.append((row[filled].tolist(), score[filled].tolist()))
        return out


# ---- goose --------------------------------------------------------------------------------------


class GooseDrafter(Drafter):
    """Goose's two sources: a `spine` (n-gram: source "goose"; another drafter X: "goose:X")
    and recycling `branches`.

    As a single candidate list (static trees, DySpec, SpecDec++): the spine's top candidate,
    then the recycling candidates. The Goose method uses the two sources separately.
    """

    def __init__(self, spine: Drafter, branches: RecycleDrafter) -> None:
        super().__init__()
        self.spine, self.branches = spine, branches
        self.parts = (spine, branches)
        self.source = "goose" if isinstance(spine, NgramDrafter) else f"goose:{spine.source}"

    @property
    def models(self) -> list[Model]:
        return self.spine.models + self.branches.models

    def start(self, prompt: Sequence[int], capacity: int) -> None:
        for part in self.parts:
            part.start(prompt, capacity)

    def begin(self, context: Sequence[int]) -> None:
        super().begin(context)
        for part in self.parts:
            part.begin(context)

    def update(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        for part in self.parts:
            part.update(tokens, logits)

    def accept(self, tokens: Sequence[int]) -> None:
        for part in self.parts:
            part.accept(tokens)

    def finish(self, output: Sequence[int]) -> None:
        for part in self.parts:
            part.finish(output)

    def propose(self, nodes: Sequence[DraftNode], k: int) -> list[Proposal]:
        out = []
        spine = self.spine.propose(nodes, 1)
        branches = self.branches.propose(nodes, k)
        for (s_tok, s_prob), (b_tok, b_prob) in zip(spine, branches, strict=True):
            pairs = dict(zip(s_tok, s_prob, strict=True))
            for t, p in zip(b_tok, b_prob, strict=True):
                pairs.setdefault(t, p)
            out.append((list(pairs)[:k], list(pairs.values())[:k]))
        return out


def make_drafter(
    name: str,
    vocab_size: int,
    draft_model: Model | None = None,
    sample: str | None = None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> Drafter:
    """The drafter called `name` (one of `DRAFTERS`); "draft" needs `draft_model`."""
    if name == "draft":
        if draft_model is None:
            raise InputError("--drafter draft needs --draft-model")
        return DraftModelDrafter(draft_model, sample, temperature, generator)
    if sample is not None:
        raise InputError(f"sampled drafts need --drafter draft, not {name!r}")
    if name == "ngram":
        return NgramDrafter()
    if name == "suffix":
        return SuffixDrafter()
    if name == "recycle":
        return RecycleDrafter(vocab_size)
    if name == "goose":
        return GooseDrafter(NgramDrafter(), RecycleDrafter(vocab_size))
    raise InputError(f"--drafter: unknown drafter {name!r}; known: {', '.join(DRAFTERS)}")


def propose_chain(drafter: Drafter, root_token: int, max_len: int) -> tuple[list[int], list[float]]:
    """Follow the drafter's top candidate from the root, at most `max_len` tokens: its
    proposal (for n-gram and suffix drafters, the copied continuation). Call after `begin`."""
    tokens, probs = [], []
    node = DraftNode(0, -1, root_token, 0)
    while len(tokens) < max_len:
        ((cand, p),) = drafter.propose([node], 1)
        if not cand:
            break
        tokens.append(int(cand[0]))
        probs.append(float(p[0]))
        node = DraftNode(node.id + 1, node.id, tokens[-1], node.depth + 1)
    return tokens, probs
