"""SpecDec++ (Huang et al. 2024): adaptive candidate length by a threshold on predicted rejection.

After each drafted token i the drafter decides: stop and verify, or draft another. SpecDec++
casts this as a Markov decision process and shows that the optimal policy is a threshold: stop
once the predicted probability that at least one drafted token is rejected reaches h,

    1 − Π_{j≤i} â_j ≥ h,        drafted length L in [2, min(20, budget − 1)] (authors' bounds),

where â_j estimates the acceptance of drafted token j. The paper trains a small head on the
draft's hidden state; specscope fits a logistic regression (`AcceptancePredictor`) on features
of the draft's candidate scores in the trace (top-1 probability, entropy of the renormalised
scores, top-1 − top-2 margin), labelled by whether the drafted top-1 token is the true one
(rank 0), and reports its held-out log-loss and calibration.

Replay of the policy over a trace (`specdecpp`). Per request, a step starting at position pos
drafts a chain; â_i comes from the features of row (request, pos + i − 1, source), the features
the drafter gives on the true prefix. That is exact while every earlier draft of the step was
accepted. After the first rejection the real drafter would be off the true prefix and would see
other features; this cannot change the step's outcome (the step ends at the first rejection), only
its stop decision, i.e. its drafted length and so its cost, for which the true-prefix features are
an approximation. The step accepts the leading drafted positions with rank 0 (at most L), yields
accepted + 1 tokens (the bonus; the last step of a request yields only the positions left) and
costs the chain's step time L · t_draft + t_verify(L + 1) from `Pricing`. Positions past a
request's end (drafted but never verified as accepted) and missing rows use the mean predicted
acceptance for the stop decision; missing rows count as rejections, as in `trace.replay`.

Hardware awareness: h is chosen per (hardware, target, drafter) by minimising the replayed time
per token (a grid over (0, 1), then a finer grid around the best), because the best trade-off
between draft cost and verification cost differs between, say, an H100 (verifying 20 tokens costs
little more than 1) and a CPU (past its compute knee every verified token costs more).

Why the maximum length is chosen with h. The threshold form is optimal when a step costs
c1 per drafted token plus a verification c2 that does not depend on the drafted length (the
paper's model). Where verification cost grows non-linearly with the length (a CPU: flat up to
its compute knee, then a near-constant cost per token), a single threshold over [2, 20] cannot
express "draft 4 unless unsure": the drafted lengths scatter around 4 into the expensive 5+,
and the best threshold loses to the fixed chain of 4 (by 0.3–3.5% on synthetic traces, with a
weak or a good predictor).
Choosing the maximum length L_max ≤ min(20, budget − 1) jointly with h restores the family's
reach: (h → 1, L_max = L) never stops early (Π â stays above 1 − h) and is the fixed chain of L,
so the search, up to its grid, is never slower than the best fixed chain on the trace it replays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from specscope.errors import InputError
from specscope.hw_profiles.pricing import Pricing
from specscope.optimizers.specdecpp_predictor import (
    FEATURES,
    AcceptancePredictor,
    source_rows,
)
from specscope.trace import Trace, accepted_lengths
from specscope.tree import Tree

MIN_LEN, MAX_LEN = 2, 20
"""The authors' bounds on the drafted length."""
AUTHORS_THRESHOLD = 0.7
"""The authors' threshold h."""
THRESHOLD_OPTION = "--specdecpp-threshold"

_COARSE = np.round(np.arange(0.02, 0.99, 0.02), 6)
_FINE_HALF_WIDTH, _FINE_STEP = 0.02, 0.001



def check_threshold(threshold: float) -> float:
    """`threshold` as a float if it lies strictly in (0, 1), else an InputError naming the
    option (h = 0 would always stop at the minimum length, h = 1 never before the maximum)."""
    h = float(threshold)
    if not 0 < h < 1:
        raise InputError(f"{THRESHOLD_OPTION} must lie strictly between 0 and 1, got {threshold}")
    return h


def _stop_lengths(log_p: np.ndarray, threshold: float, min_len: int, max_len: int) -> np.ndarray:
    """The stop rule on cumulative log Π_{j≤i} â_j (…, ≥ max_len), i = 1 first.

    Π â only falls as tokens are added, so the first i with log Π ≤ log(1 − h) is one more than
    the number of i above that bound: one comparison per entry, no search.
    """
    above = np.count_nonzero(log_p[..., :max_len] > np.log1p(-threshold), axis=-1)
    return np.clip(above + 1, min_len, max_len)


def stop_length(log_a: np.ndarray, threshold: float, min_len: int, max_len: int) -> int:
    """The drafted length the stop rule gives when drafted token i has the log acceptance
    estimate log_a[i − 1], i = 1 first (â = 1 past the estimates given)."""
    log_a = np.asarray(log_a, dtype=np.float64)[:max_len]
    log_p = np.cumsum(np.r_[log_a, np.zeros(max_len - log_a.size)])
    return int(_stop_lengths(log_p, threshold, min_len, max_len))


@dataclass(frozen=True)
class ThresholdPolicy:
    """SpecDec++'s per-step stop rule, for the executor.

    Draft at least `min_len` and at most `max_len` tokens; in between, stop after drafted token i
    once 1 − Π_{j≤i} â_j ≥ threshold, â_j = predictor.predict(features of drafted token j).
    """

    predictor: AcceptancePredictor
    threshold: float
    min_len: int = MIN_LEN
    max_len: int = MAX_LEN

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        if not 1 <= self.min_len <= self.max_len:
            raise InputError(
                f"SpecDec++ length bounds need 1 ≤ min ≤ max, got [{self.min_len}, {self.max_len}]"
            )

    def should_stop(self, features: np.ndarray) -> bool:
        """Whether to stop drafting after the tokens whose features (i, len(FEATURES)) are given,
        drafted token 1 first."""
        log_a = self.predictor.log_predict(features)[: self.max_len]
        return stop_length(log_a, self.threshold, self.min_len, self.max_len) <= log_a.size


@dataclass(frozen=True, eq=False)
class SpecDecPPResult:
    """SpecDec++ replayed over a trace on one pricing (times in seconds).

    The policy drafts between min_len and max_len tokens (max_len chosen with the threshold unless
    given); length_hist[L] counts steps that drafted L tokens; fixed_lengths[L] is the time per
    token of the fixed chain of L drafts on the same trace and pricing, L = 2…min(20, budget − 1);
    authors_time_per_token_s is the authors' setting (h = 0.7, lengths 2…min(20, budget − 1)).
    `tree` (the most frequent chain) and `mean_verified` (mean n = L + 1) are what a common table
    of static trees shows for this dynamic policy.
    """

    source: str
    threshold: float
    chosen: bool  # True when the threshold was chosen by minimising time per token
    min_len: int
    max_len: int
    time_per_token_s: float
    tokens_per_step: float
    length_hist: np.ndarray
    fixed_lengths: dict[int, float]
    authors_time_per_token_s: float
    autoregressive_s: float
    predictor: AcceptancePredictor

    @property
    def steps(self) -> int:
        """Verification steps over the whole trace."""
        return int(self.length_hist.sum())

    @property
    def mean_drafted(self) -> float:
        """Mean drafted length L per step."""
        return float(np.arange(self.length_hist.size) @ self.length_hist / self.steps)

    @property
    def mean_verified(self) -> float:
        """Mean tokens per verification pass n = L + 1 (the root included)."""
        return self.mean_drafted + 1

    @property
    def most_frequent_length(self) -> int:
        """The drafted length used by the most steps (the shortest among ties)."""
        return int(np.argmax(self.length_hist))

    @property
    def tree(self) -> Tree:
        """The chain of the most frequent drafted length."""
        return Tree.chain(self.most_frequent_length, self.source)

    @property
    def best_fixed_length(self) -> int:
        """The fixed chain length with the least time per token (the shortest among ties)."""
        return min(self.fixed_lengths, key=lambda n: (self.fixed_lengths[n], n))

    @property
    def gain_over_best_fixed(self) -> float:
        """Best fixed chain's time per token over the policy's (> 1: the policy is faster)."""
        return self.fixed_lengths[self.best_fixed_length] / self.time_per_token_s

    @property
    def tokens_per_s(self) -> float:
        """Predicted tokens per second."""
        return 1.0 / self.time_per_token_s

    @property
    def speedup(self) -> float:
        """Predicted tokens/s over autoregressive tokens/s on the same hardware."""
        return self.autoregressive_s / self.time_per_token_s

    @property
    def policy(self) -> ThresholdPolicy:
        """The stop rule with this threshold and bounds, for the executor."""
        return ThresholdPolicy(self.predictor, self.threshold, self.min_len, self.max_len)


class _Replay:
    """The policy's replay over one trace and pricing: what does not depend on (h, max_len) is
    computed once, and many (h, max_len) pairs are walked together."""

    def __init__(
        self, trace: Trace, pricing: Pricing, predictor: AcceptancePredictor, max_len: int
    ) -> None:
        source = predictor.source
        self.max_len = max_len
        # Drafts a chain of max_len accepts if a step starts at (request, pos); −1 past the end.
        self.accepted = accepted_lengths(trace, Tree.chain(max_len, source))
        self.ends = np.count_nonzero(self.accepted >= 0, axis=1)
        rows = source_rows(trace, source)
        log_a = predictor.log_predict(rows.select(FEATURES).to_numpy())
        ids = np.unique(trace.df.get_column("request_id").to_numpy())
        fill = float(np.log(np.mean(np.exp(log_a))))
        dense = np.full((ids.size, self.accepted.shape[1] + max_len), fill)
        r = np.searchsorted(ids, rows.get_column("request_id").to_numpy())
        dense[r, rows.get_column("pos").to_numpy()] = log_a
        # log_p[r, pos, i − 1] = log Π_{j≤i} â_j for a step starting at (r, pos)
        self.log_p = np.cumsum(sliding_window_view(dense, max_len, axis=1)[:, :-1], axis=-1)
        self.step_s = np.array(
            [pricing.tree_step_s(Tree.chain(n, source)) for n in range(max_len + 1)]
        )
        # a policy checks its stop rule after every drafted token; a fixed chain does not
        self.checked_s = self.step_s + np.arange(max_len + 1) * pricing.stop_rule_s

    def lengths(self, thresholds: Sequence[float]) -> np.ndarray:
        """Drafted lengths (H, requests, positions) under each threshold, bounds [2, max_len]."""
        return np.stack(
            [_stop_lengths(self.log_p, h, MIN_LEN, self.max_len) for h in thresholds]
        ).astype(np.int8)

    def walk(self, lengths: np.ndarray, which: np.ndarray, caps: np.ndarray) -> np.ndarray:
        """Steps per drafted length (C, max_len + 1) of candidate c drafting
        min(lengths[which[c]], caps[c]) tokens, every request walked from position 0.

        Vectorised over (candidate, request) pairs; each pass advances every unfinished pair by
        one step: accepted = min(chain acceptance at pos, L), next pos = pos + accepted + 1.
        """
        n_req, width = self.accepted.shape
        bins = self.max_len + 1
        cand = np.repeat(np.arange(which.size), n_req)
        req = np.tile(np.arange(n_req), which.size)
        keep = self.ends[req] > 0
        cand, req = cand[keep], req[keep]
        base, cap, end = (which[cand] * n_req + req) * width, caps[cand], self.ends[req]
        acc, flat = self.accepted.reshape(-1), lengths.reshape(-1)
        pos = np.zeros(cand.size, dtype=np.int64)
        hist = np.zeros(which.size * bins, dtype=np.int64)
        while cand.size:
            drafted = np.minimum(flat[base + pos], cap)
            hist += np.bincount(cand * bins + drafted, minlength=hist.size)
            pos += np.minimum(acc[req * width + pos], drafted) + 1
            live = pos < end
            cand, req, base, cap, end, pos = (a[live] for a in (cand, req, base, cap, end, pos))
        return hist.reshape(which.size, bins)

    def time_per_token(self, hist: np.ndarray, policy: bool = True) -> np.ndarray:
        """Seconds per token of each row of `walk`'s histogram (every request's positions are
        generated, so the tokens are the trace's positions whatever the policy); `policy`
        False prices fixed chains (no stop check)."""
        return hist @ (self.checked_s if policy else self.step_s) / self.ends.sum()


def specdecpp(
    trace: Trace,
    source: str | None,
    pricing: Pricing,
    budget: int | None = None,
    threshold: float | None = None,
    seed: int = 0,
    max_len: int | None = None,
) -> SpecDecPPResult:
    """SpecDec++ on `trace`'s ranked `source` priced by `pricing` (module docstring).

    Fits the acceptance predictor (request split by `seed`) and replays the threshold policy.
    Drafted lengths lie in [2, max_len] with max_len ≤ min(20, budget − 1) (the authors'
    bounds). What is not given is chosen to minimise time per token: with `threshold` None, h on
    a grid of step 0.02 over (0, 1) × every max_len (or the given one), then h on a grid of step
    0.001 within ±0.02 of the best at the best max_len; with a threshold given (it must lie in
    (0, 1)), max_len alone. Ties go to the smaller h, then the smaller max_len. Choosing max_len
    matters where the step cost is not linear in the drafted length (a CPU past its compute
    knee): there the single threshold over [2, 20], optimal for linear costs, can lose to a fixed
    chain, while (h → 1, max_len = L) is that fixed chain. The fixed chains of every length
    2…min(20, budget − 1) are replayed on the same trace and pricing for comparison.
    """
    if threshold is not None:
        threshold = check_threshold(threshold)
    bound = MAX_LEN if budget is None else min(MAX_LEN, budget - 1)
    if bound < MIN_LEN:
        raise InputError(
            f"--budget {budget}: SpecDec++ drafts at least {MIN_LEN} tokens, so the budget "
            f"(tree size, root included) must be ≥ {MIN_LEN + 1}"
        )
    if max_len is not None and not MIN_LEN <= max_len <= bound:
        raise InputError(f"SpecDec++ max length must lie in [{MIN_LEN}, {bound}], got {max_len}")
    predictor = AcceptancePredictor.fit(trace, source, seed)
    rep = _Replay(trace, pricing, predictor, bound)

    # One batched walk: the authors' setting, every fixed chain (a never-stopping policy capped
    # at L), and every (h, max_len) of the grid; a max_len above the longest draft under h is
    # the same policy as that longest draft, so it is skipped.
    fixed = np.arange(MIN_LEN, bound + 1)
    grid = _COARSE if threshold is None else np.array([threshold])
    thresholds = np.r_[AUTHORS_THRESHOLD, grid]
    never_stop = np.full((1, *rep.accepted.shape), bound, dtype=np.int8)
    stack = np.concatenate([rep.lengths(thresholds), never_stop])
    longest = stack.max(axis=(1, 2))
    caps = fixed if max_len is None else np.array([max_len])
    grid_h, grid_cap = np.array(
        [(i, c) for i in range(1, thresholds.size) for c in caps if c <= max(longest[i], caps[0])]
    ).T
    which = np.r_[0, np.full(fixed.size, thresholds.size), grid_h]
    hist = rep.walk(stack, which, np.r_[bound, fixed, grid_cap])
    checked, plain = rep.time_per_token(hist), rep.time_per_token(hist, policy=False)
    authors, fixed_times = checked[0], plain[1 : 1 + fixed.size]
    grid_times = checked[1 + fixed.size :]
    best = min(range(grid_times.size), key=lambda c: (grid_times[c], grid_h[c], grid_cap[c]))
    h, cap = float(thresholds[grid_h[best]]), int(grid_cap[best])
    if threshold is None:
        fine = np.round(np.arange(h - _FINE_HALF_WIDTH, h + _FINE_HALF_WIDTH + 1e-9, _FINE_STEP), 6)
        fine = np.unique(np.r_[h, fine[(fine > 0) & (fine < 1)]])
        fine_times = rep.time_per_token(
            rep.walk(rep.lengths(fine), np.arange(fine.size), np.full(fine.size, cap))
        )
        h = float(fine[np.argmin(fine_times)])
    hist = rep.walk(rep.lengths([h]), np.array([0]), np.array([cap]))
    return SpecDecPPResult(
        source=predictor.source,
        threshold=h,
        chosen=threshold is None,
        min_len=MIN_LEN,
        max_len=cap,
        time_per_token_s=float(rep.time_per_token(hist)[0]),
        tokens_per_step=float(rep.ends.sum() / hist.sum()),
        length_hist=hist[0, : cap + 1],
        fixed_lengths={int(n): float(t) for n, t in zip(fixed, fixed_times, strict=True)},
        authors_time_per_token_s=float(authors),
        autoregressive_s=pricing.autoregressive_s,
        predictor=predictor,
    )
