"""Model-free drafting: the target verifies tokens that no model drafted. Four published methods,
one `System` each, priced by one rule: a step is the drafter's host calls (the profile's or
engine's model-free drafter terms, `Pricing.level_s` with sources "ngram", "suffix",
"recycle"), one target forward over the verified tokens, and the loop's bookkeeping.

- Prompt lookup (Saxena 2023, apoorvumang/prompt-lookup-decoding; transformers'
  `prompt_lookup_num_tokens`): the last n-gram (up to 3 tokens) is matched in the prompt and
  the `num_tokens` tokens that followed it are copied as a chain; one "ngram" call per step,
  1 + num_tokens tokens verified.
- Token Recycling (Luo et al. 2024, arXiv:2408.08696): an adjacency matrix holds each token's
  top-k successors from earlier steps' logits; a breadth-first walk fills a static tree template
  (the case's `tree`, default the repo's "2.2.2": 80 nodes in 6 levels, 8/21/25/15/8/3); one
  "recycle" call per drafted level, 1 + Σ tree tokens verified.
- Lookahead decoding (Fu et al. 2024, arXiv:2402.02057, hao-ai-lab/LookaheadDecoding): one
  forward runs a lookahead branch of `window` W positions over N−1 Jacobi levels and a
  verification branch of up to `guesses` G n-grams of N−1 tokens from the n-gram pool. In
  `lade/decoding.py` (jacobi_greedy_search_multilevel, ALWAYS_FWD_ONE = 1) the steady-state
  forward holds the last token, W−1 tokens of level 0, W of each of levels 1..N−2 and G·(N−1)
  guess tokens: (W + G)·(N − 1) tokens (the blog's "W * (N - 1) + G * (N - 1)"; 120 for
  W = G = 15, N = 5). One "ngram" call per step (the pool lookup for the last token).
- REST (He et al. 2024, arXiv:2311.08252, FasterDecoding/REST): the last 16..2 tokens are looked
  up in a suffix array over a datastore on the host; the retrieved continuations form a trie of
  up to `num_draft` tokens (`datastore.search(..., choices=64)`), verified under a tree mask;
  1 + num_draft tokens verified. The lookup is a host cost: `retrieval_us` where a source states
  it per step, else the profile's "suffix" drafter call.

Approximated: every step drafts the full chain, tree or guess set (prompt lookup verifies only
the last token when nothing matches, lookahead may hold fewer than G guesses for a token, REST's
trie may be smaller than num_draft); the drafter's host work is specscope's own drafter's propose
call (an n-gram match over the context, a suffix match, a recycling-table walk), not the papers'
code (lookahead's pool update over W entries, REST's Rust suffix array over a datastore of
0.5–27 GB, TR's adjacency update from the verified logits' top-k are not priced apart); the
acceptance is the case's τ, at most what one step can yield (`System.most_tokens`): the chain
and the bonus (prompt lookup: num_tokens + 1), the template's levels and the bonus (Token
Recycling), a guess of N − 1 tokens and the bonus (lookahead: N), the trie's deepest path and the
bonus (REST: at most num_draft + 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from specscope.hw_profiles.pricing import Pricing
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import Prediction, pricing, target_model

NUM_TOKENS = 10
"""Prompt lookup's continuation length (the PLD README's "Continuation length = 10";
transformers' `prompt_lookup_num_tokens=10`)."""
TR_TREE = (8, 21, 25, 15, 8, 3)
"""Token Recycling's default template "2.2.2": 80 nodes in 6 levels (the repo's README)."""
WINDOW, NGRAM, GUESSES = 15, 5, 15
"""Lookahead's W, N, G for a 7B model (the blog's Table 1, run_mtbench.sh: LEVEL=5 WIN=15
GUESS=15)."""
NUM_DRAFT = 64
"""REST's most draft tokens in the trie (`--num-draft 64`)."""


def _costs(source: str) -> Callable[[Case], SystemCosts]:
    def costs(case: Case) -> SystemCosts:
        """The target as the case states it; no draft model, `source` drafts."""
        return SystemCosts(target_model(case), None, source)
    return costs


def _positive(case: Case, key: str, default: int) -> int:
    value = case.options.get(key, default)
    if value < 1:
        raise case.fail(f"{key} = {value} must be at least 1")
    return value


def _step(case: Case, source: str, calls: int, verified: int, depth: int, branches: bool,
          assumptions: Sequence[str], draft_s: float | None = None) -> Prediction:
    """A step of `calls` propose calls of `source` (or `draft_s` seconds), one target forward of
    `verified` tokens and the loop's bookkeeping, against autoregressive decoding."""
    c = _costs(source)(case)
    price: Pricing = pricing(case, c.target, None)
    price.check_chains(branches, f"system {case.system}'s draft of {verified} tokens")
    tokens = case.tokens_per_step
    parts = {"draft": calls * price.level_s(source) if draft_s is None else draft_s,
             "verify": price.verify_s(verified, depth),
             "bookkeeping": price.bookkeeping_for(tokens)}
    return Prediction(tokens_per_step=tokens, step_s=sum(parts.values()),
                      baseline_s=price.autoregressive_s, batch=case.batch, parts=parts,
                      assumptions=(f"{verified} tokens verified per step", *assumptions))


def _no_tree(case: Case, what: str) -> None:
    if case.tree:
        raise case.fail(f"system {case.system} takes no tree: {what}")


def predict_prompt_lookup(case: Case) -> Prediction:
    """One n-gram match, a chain of `num_tokens` copied tokens verified."""
    _no_tree(case, "give num_tokens (the chain's length)")
    k = _positive(case, "num_tokens", NUM_TOKENS)
    return _step(case, "ngram", 1, 1 + k, k, False, [
        f"a chain of {k} copied tokens every step; the match is one ngram propose call"])


def predict_token_recycling(case: Case) -> Prediction:
    """The static template walked over the adjacency matrix, one call per level."""
    tree = case.tree or TR_TREE
    return _step(case, "recycle", len(tree), 1 + sum(tree), len(tree), True, [
        f"template {','.join(map(str, tree))}: one recycle propose call per level"])


def lookahead_tokens(window: int, ngram: int, guesses: int) -> int:
    """Tokens of a steady-state lookahead forward: (W + G)·(N − 1) (module docstring)."""
    return (window + guesses) * (ngram - 1)


def predict_lookahead(case: Case) -> Prediction:
    """One forward of the lookahead and verification branches; one pool lookup."""
    _no_tree(case, "give window, ngram and guesses")
    w = _positive(case, "window", WINDOW)
    g = _positive(case, "guesses", GUESSES)
    n = case.options.get("ngram", NGRAM)
    if n < 2:
        raise case.fail(f"ngram = {n} must be at least 2")
    return _step(case, "ngram", 1, lookahead_tokens(w, n, g), n - 1, True, [
        f"W = {w}, N = {n}, G = {g}: all G guesses held; the pool lookup is one ngram propose "
        "call"])


def predict_rest(case: Case) -> Prediction:
    """One datastore lookup on the host, a trie of `num_draft` tokens verified."""
    _no_tree(case, "give num_draft (the trie's tokens)")
    k = _positive(case, "num_draft", NUM_DRAFT)
    retrieval = case.options.get("retrieval_us")
    if retrieval is not None and retrieval < 0:
        raise case.fail(f"retrieval_us = {retrieval:g} must not be negative")
    lookup = (f"datastore lookup {retrieval:g} us per step (stated)" if retrieval is not None
              else "datastore lookup priced as one suffix propose call")
    return _step(case, "suffix", 1, 1 + k, k, True, [f"a trie of {k} tokens every step", lookup],
                 draft_s=None if retrieval is None else retrieval * 1e-6)


def _most(key: str, default: int, extra: int, words: str
          ) -> Callable[[Case], tuple[float, str] | None]:
    """The most tokens a step yields: the system's option `key` (default `default`) + `extra`,
    described by `words` (formatted with the value)."""
    def most(case: Case) -> tuple[float, str] | None:
        value = case.options.get(key, default)
        return float(value + extra), words.format(value)
    return most


def _template(case: Case) -> tuple[float, str] | None:
    tree = case.tree or TR_TREE
    return len(tree) + 1.0, (f"template {','.join(map(str, tree))}: {len(tree)} levels + the "
                             "bonus token")


def _system(name: str, paper: str, source: str, predict: Callable[[Case], Prediction],
            options: Mapping[str, type | tuple[type, ...]],
            most: Callable[[Case], tuple[float, str] | None]) -> System:
    return System(name, paper, _costs(source), predict, options, most_tokens=most)


PROMPT_LOOKUP = _system(
    "prompt-lookup", "Saxena 2023, Prompt Lookup Decoding (github.com/apoorvumang/"
    "prompt-lookup-decoding; transformers prompt_lookup_num_tokens)", "ngram",
    predict_prompt_lookup, {"num_tokens": int},
    _most("num_tokens", NUM_TOKENS, 1, "a chain of num_tokens = {} copied tokens + the bonus"))
"""num_tokens: the copied chain's length (default `NUM_TOKENS`)."""
TOKEN_RECYCLING = _system(
    "token-recycling", "Luo et al. 2024, Turning Trash into Treasure: Accelerating Inference of "
    "Large Language Models with Token Recycling (arXiv:2408.08696)", "recycle",
    predict_token_recycling, {}, _template)
LOOKAHEAD = _system(
    "lookahead", "Fu et al. 2024, Break the Sequential Dependency of LLM Inference Using "
    "Lookahead Decoding (arXiv:2402.02057)", "ngram", predict_lookahead,
    {"window": int, "ngram": int, "guesses": int},
    _most("ngram", NGRAM, 0, "ngram = {}: a guess of N − 1 tokens + the bonus"))
"""window W, ngram N, guesses G (defaults `WINDOW`, `NGRAM`, `GUESSES`)."""
REST = _system(
    "rest", "He et al. 2024, REST: Retrieval-Based Speculative Decoding (NAACL 2024, "
    "arXiv:2311.08252)", "suffix", predict_rest,
    {"num_draft": int, "retrieval_us": (int, float)},
    _most("num_draft", NUM_DRAFT, 1, "a trie of num_draft = {} tokens + the bonus"))
"""num_draft: the trie's most tokens (default `NUM_DRAFT`); retrieval_us: the datastore lookup
per step where a source states it (default: the profile's suffix drafter call)."""

SYSTEMS = (PROMPT_LOOKUP, TOKEN_RECYCLING, LOOKAHEAD, REST)
