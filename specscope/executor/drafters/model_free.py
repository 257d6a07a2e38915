"""Drafters without a model: prompt lookup (n-gram), suffix tries and token recycling."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import torch

from specscope.draft import DraftNode, Proposal
from specscope.executor.drafters.base import Drafter

RECYCLE = "recycle"
"""Source name of the token-recycling drafter (Goose's branches)."""


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

    @contextmanager
    def extended(self, tokens: Sequence[int]) -> Iterator[None]:
        """The trie with `tokens` appended to the current sequence, exactly as it was again
        (counts, children and their order) on exit: lookups on text not committed yet."""
        opened, journal = self._open, []
        for token in tokens:
            journal += [(node, token, token not in node.children)
                        for node in [*self._open, self.root]]
            self.append(token)
        try:
            yield
        finally:
            for node, token, created in reversed(journal):
                node.children[token].count -= 1
                if created:
                    del node.children[token]
            self._open = opened

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
            state = (self._states.get((v.parent, v.token))
                     or self._match(self.context + self.path(v.id)))
            found = self._continuations(state, k)
            for token, p, child in found:
                self._states[(v.id, token)] = (child, state[1] * p, state[2] - 1)
            out.append(([t for t, _, _ in found], [p for _, p, _ in found]))
        return out

    def lookup(self, text: Sequence[int], k: int) -> Proposal:
        """What `propose` gives at the root of a step whose context is `text`: the context of
        the last `begin` (or `start`) followed by more tokens (a tree node's path), indexed for
        this lookup only. A function of the text alone, as trace collection sees it."""
        with self.request.extended(text[self._seen :]):
            found = self._continuations(self._match(list(text)), k)
        return [t for t, _, _ in found], [p for _, p, _ in found]

    def _continuations(
        self, state: tuple[_TrieNode, float, int] | None, k: int
    ) -> list[tuple[int, float, _TrieNode]]:
        """Up to k children (token, count share, node) of the state's trie node, most frequent
        first, while the path probability stays ≥ `min_prob` and the length cap leaves room."""
        if state is None:
            return []
        node, prob, room = state
        out: list[tuple[int, float, _TrieNode]] = []
        if room > 0:
            for token, child in sorted(node.children.items(), key=lambda kv: -kv[1].count):
                p = child.count / node.count
                if len(out) == k or prob * p < self.min_prob:
                    break
                out.append((token, p, child))
        return out

    def _match(self, text: Sequence[int]) -> tuple[_TrieNode, float, int] | None:
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
