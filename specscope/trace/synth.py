"""Synthetic greedy traces with known, tunable acceptance behaviour (schema v1).

Every request has `length` true tokens drawn uniformly from the vocabulary; rows for every
(request, position, source). Sources draw their randomness from (seed, source name), so adding a
source leaves the others' rows unchanged, and sources are independent of one another.

Ranked sources (`draft:<model>`, `rasd:<model>` with a draft model's default, `recycle`),
`RankedBehaviour(top1, decay, depth_decay)`:
the true token's rank at position t is k ∈ 0..K−1 with probability

    top1 · decay^k · depth_decay^c · s,       rank −1 (not among the candidates) otherwise,

where c counts the consecutive positions right before t (same request) whose rank was in
0..K−1 (the deeper into a run of accepted positions, the lower the acceptance) and s is a per-row
confidence factor of mean 1 (uniform between 1 − β and 1 + β, β as large as keeps the
probabilities summing to ≤ 1). With depth_decay = 1 the ranks are independent and the positional
vector is exactly p[k] = top1 · decay^k. The draft's top-1 score is informative of acceptance, as
a real draft's top-1 probability is: it is 0.15 + 0.8 · (0.4 s' + 0.6 e) with s' the confidence
factor rescaled to [0, 1] and e ~ Beta(3, 2) when the true token is the top candidate (rank 0),
Beta(2, 3) otherwise, so P(rank == 0 | top-1 score) rises with the score, from about 0.1 at a
score of 0.2 to 0.95 at 0.9 (a calibrated predictor, DySpec's calibration or SpecDec++'s stopping
rule, has a real but imperfect signal to learn).

Sequence sources (`ngram`, `suffix`), `SequenceBehaviour(mean_match, no_match, max_len)`:
the context holds copies of stretches of the true text, as a real prompt lookup finds them. A
copy run of L tokens starting at position t gives match lengths L, L − 1, …, 1 at t, t+1, …,
t+L−1 (capped by the proposal length), so within a run match_len(t+1) ≥ match_len(t) − 1; run
lengths are geometric, P(L ≥ l) = q^(l−1) with q = mean_match / (1 + mean_match). Outside runs a
position has a proposal that does not match (match_len 0) or none. Run starts are tuned so that
the marginal is the same at every position: P(match_len ≥ j) = (1 − no_match) · q^j (before the
length cap) and P(no proposal) = no_match. A proposal holds min(max_len, positions left)
tokens: the first match_len copy the truth, the rest continue the copied text, which differs from
the truth at every later position and is the same for every position of one run (a proposal one
position later is this one shifted by one token). The candidate list is the proposal's first token.

Tokens and probabilities are consistent: cand_tokens are distinct and hold the true token exactly
at `rank`; cand_scores descend within [0, 1] and sum to ≤ 1; the target's argmax probability
`target_prob` (shared by all sources at a position) is the largest of cand_target_probs, which
sum to ≤ 1; context_len = prompt length + pos.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from specscope import __version__
from specscope.errors import InputError
from specscope.limits import check_memory
from specscope.names import SEQUENCE_SOURCES
from specscope.trace.schema import SCHEMA, SCHEMA_VERSION, Trace
from specscope.trace.sources import DRAFT_PREFIX, draft_model


@dataclass(frozen=True)
class RankedBehaviour:
    """Rank distribution of a ranked synthetic source (module docstring); probabilities."""

    top1: float = 0.6
    decay: float = 0.35
    depth_decay: float = 1.0

    def vector(self, k: int) -> np.ndarray:
        """p[k] = top1 · decay^k for ranks 0..k−1 at the start of a run (c = 0)."""
        return self.top1 * self.decay ** np.arange(k)


@dataclass(frozen=True)
class SequenceBehaviour:
    """Match-length distribution of a sequence synthetic source (module docstring)."""

    mean_match: float = 1.5
    no_match: float = 0.5
    max_len: int = 10

    @property
    def q(self) -> float:
        """Probability that a copy run continues one more token."""
        return self.mean_match / (1 + self.mean_match)


ROW_BYTES, CANDIDATE_BYTES = 190, 30
"""Peak memory of synthesis and writing per trace row (request × position × source), an
estimate: a row of the finished table, held twice while the sources are concatenated and sorted,
and the numpy arrays that make it, about `CANDIDATE_BYTES` per candidate (measured: 430 bytes a
row at k = 8, from 0.26 to 2.3 million rows)."""

DEFAULT_BEHAVIOUR: dict[str, RankedBehaviour | SequenceBehaviour] = {
    DRAFT_PREFIX: RankedBehaviour(top1=0.6, decay=0.35, depth_decay=0.97),
    "recycle": RankedBehaviour(top1=0.3, decay=0.5, depth_decay=0.99),
    "ngram": SequenceBehaviour(mean_match=3.0, no_match=0.4),
    "suffix": SequenceBehaviour(mean_match=3.0, no_match=0.7),
}


def synth_trace(
    requests: int,
    seed: int,
    sources: Sequence[str] = ("draft:llama-68m", "ngram", "recycle"),
    length: int = 256,
    k: int = 8,
    *,
    behaviour: Mapping[str, RankedBehaviour | SequenceBehaviour] | None = None,
    vocab: int = 32000,
    prompt_len: tuple[int, int] = (32, 512),
) -> Trace:
    """A valid greedy schema-v1 trace of `requests` × `length` positions × `sources` rows.

    behaviour overrides DEFAULT_BEHAVIOUR per source name; k is the candidate list length of
    ranked sources; prompt lengths are uniform in the inclusive range prompt_len. Deterministic
    for a seed.
    """
    if requests < 1 or length < 1 or k < 1 or vocab <= k + 1 or not sources:
        raise InputError("synth_trace: requests, length, k ≥ 1, vocab > k + 1 and a source needed")
    if not 0 <= prompt_len[0] <= prompt_len[1]:
        raise InputError(
            f"synth_trace: prompt_len must be (low, high), 0 ≤ low ≤ high: {prompt_len}"
        )
    if len(set(sources)) != len(sources):
        raise InputError(f"synth_trace: repeated source in {list(sources)}")
    rows = requests * length * len(sources)
    check_memory(rows * (ROW_BYTES + k * CANDIDATE_BYTES),
                 f"trace synth --requests {requests:,} × --length {length:,} × "
                 f"{len(sources)} sources ({rows:,} rows)")
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, vocab, (requests, length)).astype(np.int32)
    target_prob = rng.uniform(0.2, 1.0, (requests, length))
    prompt = rng.integers(prompt_len[0], prompt_len[1] + 1, requests)
    base = {
        "request_id": np.repeat(np.arange(requests, dtype=np.uint32), length),
        "pos": np.tile(np.arange(length, dtype=np.uint32), requests),
        "context_len": (prompt[:, None] + np.arange(length)).ravel().astype(np.uint32),
        "token": truth.ravel(),
        "target_prob": target_prob.ravel().astype(np.float32),
    }
    chosen = {s: _behaviour(s, behaviour or {}) for s in sources}
    frames = []
    for s, b in chosen.items():
        src_rng = np.random.default_rng([seed, zlib.crc32(s.encode())])
        if isinstance(b, SequenceBehaviour):
            cols = _sequence_rows(src_rng, b, truth, target_prob, vocab)
        else:
            cols = _ranked_rows(src_rng, b, truth, target_prob, k, vocab)
        frames.append(pl.DataFrame({**base, "source": [s] * truth.size, **cols}))
    df = (
        pl.concat(frames)
        .sort("request_id", "pos", maintain_order=True)
        .select(pl.col(c).cast(t) for c, t in SCHEMA.items())
    )
    metadata = {
        "schema_version": SCHEMA_VERSION,
        "target_model": "synthetic",
        "temperature": 0.0,
        "drafters": {s: {"kind": type(b).__name__, **asdict(b)} for s, b in chosen.items()},
        "prompt_set": f"synthetic(requests={requests}, length={length}, seed={seed})",
        "K": k,
        "vocab": vocab,
        "seed": seed,
        "specscope_version": __version__,
    }
    return Trace(df, metadata)


def _behaviour(
    source: str, overrides: Mapping[str, RankedBehaviour | SequenceBehaviour]
) -> RankedBehaviour | SequenceBehaviour:
    kind = DRAFT_PREFIX if draft_model(source) is not None else source
    if kind not in DEFAULT_BEHAVIOUR:
        raise InputError(f"synth_trace: source {source!r} is not one of draft:<model>, "
                         "rasd:<model>, recycle, ngram, suffix")
    b = overrides.get(source, DEFAULT_BEHAVIOUR[kind])
    expected = SequenceBehaviour if kind in SEQUENCE_SOURCES else RankedBehaviour
    if not isinstance(b, expected):
        raise InputError(f"synth_trace: source {source!r} needs a {expected.__name__}")
    if isinstance(b, RankedBehaviour) and not (
        0 <= b.top1 <= 1 and b.decay >= 0 and 0 <= b.depth_decay <= 1
    ):
        raise InputError(f"synth_trace: {source!r}: need 0 ≤ top1, depth_decay ≤ 1 and decay ≥ 0")
    if isinstance(b, SequenceBehaviour) and not (
        b.mean_match >= 0 and 0 <= b.no_match <= 1 and b.max_len >= 1
    ):
        raise InputError(
            f"synth_trace: {source!r}: need mean_match ≥ 0, no_match in [0, 1], max_len ≥ 1"
        )
    return b


def _ranked_rows(
    rng: np.random.Generator,
    b: RankedBehaviour,
    truth: np.ndarray,
    target_prob: np.ndarray,
    k: int,
    vocab: int,
) -> dict[str, pl.Series]:
    n_req, length = truth.shape
    p = b.vector(k)
    if p.sum() > 1 + 1e-12:
        raise InputError(f"synth_trace: top1 · decay^k sums to {p.sum():.3f} > 1 over {k} ranks")
    cum = np.cumsum(p)
    u, z = rng.random((2, n_req, length))
    rank = np.empty((n_req, length), dtype=np.int64)
    run = np.zeros(n_req, dtype=np.int64)
    # Sequential in position (the run length feeds back), vectorised over requests.
    for t in range(length):
        scale = b.depth_decay**run
        beta = np.minimum(1.0, 1.0 / np.maximum(scale * cum[-1], 1e-12) - 1.0)
        scale = scale * (1 + beta * (2 * z[:, t] - 1))
        r = (u[:, t, None] >= cum[None, :] * scale[:, None]).sum(axis=1)
        rank[:, t] = np.where(r < k, r, -1)
        run = np.where(r < k, run + 1, 0)

    # Distinct candidates, none the true token, then the true token placed at its rank.
    offsets = 1 + rng.integers(0, vocab - k, (n_req, length, 1)) + np.arange(k)
    cand = ((truth[..., None].astype(np.int64) + offsets) % vocab).astype(np.int32)
    hit = rank >= 0
    cand[hit, rank[hit]] = truth[hit]

    # The draft's top-1 score rises with the confidence factor and with whether the top candidate
    # is the true token; the rest share what is left.
    e = np.where(rank == 0, rng.beta(3.0, 2.0, rank.shape), rng.beta(2.0, 3.0, rank.shape))
    top = 0.15 + 0.8 * (0.4 * z + 0.6 * e)
    rest = _descending_shares(
        rng, (n_req, length, k - 1), (1 - top) * rng.uniform(0.5, 1.0, top.shape)
    )
    scores = np.concatenate([top[..., None], np.minimum(rest, top[..., None])], axis=-1)

    # The target's argmax (the true token) has target_prob; the others share the remainder.
    others = _descending_shares(
        rng, (n_req, length, k), (1 - target_prob) * rng.uniform(0.3, 1.0, target_prob.shape)
    )
    tprobs = np.minimum(others, 0.999 * target_prob[..., None])
    tprobs[hit, rank[hit]] = target_prob[hit]
    return {
        "cand_tokens": _lists(cand.reshape(-1, k)),
        "cand_scores": _lists(scores.reshape(-1, k).astype(np.float32)),
        "cand_target_probs": _lists(tprobs.reshape(-1, k).astype(np.float32)),
        "rank": pl.Series(rank.ravel(), dtype=pl.Int16),
        "proposal": _lists(np.zeros((rank.size, 1), dtype=np.int32), np.zeros(rank.size)),
        "match_len": pl.Series(np.zeros(rank.size), dtype=pl.Int16),
    }


def _sequence_rows(
    rng: np.random.Generator,
    b: SequenceBehaviour,
    truth: np.ndarray,
    target_prob: np.ndarray,
    vocab: int,
) -> dict[str, pl.Series]:
    n_req, length = truth.shape
    w, q = b.max_len, b.q
    in_run = (1 - b.no_match) * q  # stationary fraction of positions inside a copy run
    mean_run = 1 / (1 - q)
    start = in_run / (mean_run * (1 - in_run) + in_run)  # P(a run starts at a free position)
    # P(a free position outside a run has a (non-matching) proposal), so P(proposal) = 1 − no_match
    stray = (1 - b.no_match - in_run) / (1 - in_run)
    u_start, u_prop = rng.random((2, n_req, length))
    run_len = rng.geometric(1 - q, (n_req, length))
    offset = rng.integers(1, vocab, (n_req, length))  # how a copy differs from the truth
    m = np.zeros((n_req, length), dtype=np.int64)
    has = np.zeros((n_req, length), dtype=bool)
    segment = np.zeros((n_req, length), dtype=np.int64)  # position where the copy began
    remaining = np.zeros(n_req, dtype=np.int64)
    seg = np.zeros(n_req, dtype=np.int64)
    # Sequential in position (a run carries over), vectorised over requests. Position 0 starts
    # inside a run with the stationary probability (residual run lengths are geometric too).
    for t in range(length):
        free = remaining == 0
        remaining = np.where(free & (u_start[:, t] < (in_run if t == 0 else start)),
                             run_len[:, t], remaining)
        seg = np.where(free, t, seg)
        m[:, t] = remaining
        has[:, t] = (remaining > 0) | (free & (u_prop[:, t] < stray))
        segment[:, t] = seg
        remaining = np.maximum(remaining - 1, 0)
    left = length - np.arange(length)[None, :]
    plen = np.where(has, np.minimum(w, left), 0)
    m = np.minimum(m, plen)
    at = np.arange(length)[:, None] + np.arange(w)  # absolute position of proposal token j
    window = np.pad(truth, ((0, 0), (0, w)))[:, at]
    copy_offset = np.take_along_axis(offset, segment, axis=1)[..., None]
    wrong = (window.astype(np.int64) + copy_offset) % vocab
    proposal = np.where(np.arange(w) < m[..., None], window, wrong).astype(np.int32)
    first = proposal[..., 0]
    tp_first = np.where(
        m > 0,
        target_prob,
        0.999 * np.minimum(target_prob, 1 - target_prob) * rng.random(target_prob.shape),
    )
    ones = (plen > 0).ravel().astype(np.int64)
    return {
        "cand_tokens": _lists(first.reshape(-1, 1), ones),
        "cand_scores": _lists(rng.uniform(0.1, 1.0, (first.size, 1)).astype(np.float32), ones),
        "cand_target_probs": _lists(tp_first.reshape(-1, 1).astype(np.float32), ones),
        "rank": pl.Series(np.where(m > 0, 0, -1).ravel(), dtype=pl.Int16),
        "proposal": _lists(proposal.reshape(-1, w), plen.ravel()),
        "match_len": pl.Series(m.ravel(), dtype=pl.Int16),
    }


def _descending_shares(
    rng: np.random.Generator, shape: tuple[int, ...], total: np.ndarray
) -> np.ndarray:
    """Random nonnegative shares along the last axis, sorted descending, summing to `total`."""
    e = -np.sort(-rng.exponential(size=shape), axis=-1)
    return e / np.maximum(e.sum(axis=-1, keepdims=True), 1e-12) * total[..., None]


def _lists(values: np.ndarray, lengths: np.ndarray | None = None) -> pl.Series:
    """Rows of a 2-D array as a list column, row i cut to lengths[i] when given."""
    arr = pl.Series(values).arr.to_list()
    if lengths is None:
        return arr
    return (
        pl.DataFrame({"v": arr, "n": lengths})
        .select(pl.col("v").list.head(pl.col("n")))
        .to_series()
    )
