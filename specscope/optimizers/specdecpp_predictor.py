"""SpecDec++'s acceptance predictor: features of a drafted token from the draft's candidate
scores, and the logistic regression from them to "the drafted top-1 token is accepted", with its
held-out log-loss and calibration. `specdecpp` stops drafting by a threshold on its estimates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy.optimize import minimize
from scipy.special import expit, log_expit

from specscope.errors import InputError
from specscope.trace import Trace, resolve_source, sequence_sources

FEATURES = ("top1", "entropy", "margin")
"""Predictor features of one drafted token, in column order (see `candidate_features`)."""
_CALIBRATION_BINS = 10


def candidate_features(scores: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """Features (N, len(FEATURES)) of drafted tokens from their candidate scores (N, K).

    `scores` holds the draft's probabilities of its candidates, best first, zero-padded to K
    columns. Top-1 probability and margin say how sure the draft is of the token it drafts; the
    entropy of the scores renormalised over the candidates says how spread its belief is. A row of
    zeros (no candidates) has all features 0. The executor computes the same features from the
    draft's top-K probabilities, so the predictor applies to live drafting unchanged.
    """
    s = np.clip(np.atleast_2d(np.asarray(scores, dtype=np.float64)), 0.0, None)
    top = np.pad(s[:, :2], ((0, 0), (0, max(0, 2 - s.shape[1]))))
    total = s.sum(axis=1, keepdims=True)
    q = s / np.where(total > 0, total, 1.0)
    entropy = -np.sum(np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0)), 0.0), axis=1)
    return np.column_stack([top[:, 0], entropy, top[:, 0] - top[:, 1]])


def ranked_source(trace: Trace, source: str | None) -> str:
    """`source` (the default source when None) checked to be a ranked drafter (one with
    candidate scores per position), which is what SpecDec++'s chain drafts from."""
    source = resolve_source(trace, source)
    if source in sequence_sources(trace):
        raise InputError(
            f"{trace.name}: SpecDec++ drafts top-1 chains from a ranked drafter source "
            f"(draft:<model>, recycle); {source!r} is a sequence source"
        )
    return source


def source_rows(trace: Trace, source: str) -> pl.DataFrame:
    """The source's rows (request_id, pos, rank) sorted by request and position, with their
    candidate features as columns named after FEATURES."""
    rows = trace.df.filter(pl.col("source") == source).sort("request_id", "pos")
    k = int(rows.get_column("cand_scores").list.len().max() or 0)
    score = pl.col("cand_scores").list
    scores = rows.select(
        score.get(i, null_on_oob=True).fill_null(0.0).cast(pl.Float64).alias(str(i))
        for i in range(k)
    ).to_numpy()
    feats = candidate_features(scores.reshape(rows.height, k))
    return rows.select("request_id", "pos", "rank").with_columns(
        pl.Series(name, feats[:, j]) for j, name in enumerate(FEATURES)
    )


def _logits(
    coef: np.ndarray, mean: np.ndarray, scale: np.ndarray, features: np.ndarray
) -> np.ndarray:
    """Logistic-regression logits of features (N, len(FEATURES)), standardised by (mean, scale);
    coef holds the weights, then the intercept."""
    f = np.asarray(features, dtype=np.float64).reshape(-1, len(FEATURES))
    return ((f - mean) / scale) @ coef[:-1] + coef[-1]


def _log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(np.where(y, np.log(p), np.log1p(-p))))


@dataclass(frozen=True, eq=False)
class AcceptancePredictor:
    """Logistic regression of "the drafted top-1 token is accepted" on `FEATURES`.

    Fitted on a random split of requests; the held-out requests measure it: `log_loss` against
    `base_log_loss` (always predicting the training base rate), and `calibration` (equal-width
    bins of predicted probability: rows, mean predicted, observed rate) with its weighted mean
    absolute gap `calibration_error`.
    """

    source: str
    coef: np.ndarray  # weights of the standardised features, then the intercept
    mean: np.ndarray
    scale: np.ndarray
    train_requests: int
    holdout_requests: int
    base_rate: float
    log_loss: float
    base_log_loss: float
    calibration: pl.DataFrame

    @classmethod
    def fit(
        cls,
        trace: Trace,
        source: str | None = None,
        seed: int = 0,
        holdout: float = 0.25,
        l2: float = 1e-3,
    ) -> AcceptancePredictor:
        """Fit on a `1 − holdout` share of the requests (chosen by `seed`), measure on the rest.

        The loss is the mean log-loss plus l2/2 · |w|² on the standardised weights (not the
        intercept), minimised by L-BFGS with its exact gradient.
        """
        source = ranked_source(trace, source)
        if not 0 < holdout < 1:
            raise InputError(f"acceptance predictor: holdout must be in (0, 1), got {holdout}")
        rows = source_rows(trace, source)
        ids = np.unique(rows.get_column("request_id").to_numpy())
        if ids.size < 2:
            raise InputError(
                f"{trace.name}: the acceptance predictor needs ≥ 2 requests (one held out), "
                f"got {ids.size}"
            )
        n_hold = min(ids.size - 1, max(1, round(holdout * ids.size)))
        held = np.random.default_rng(seed).permutation(ids)[:n_hold]
        test = np.isin(rows.get_column("request_id").to_numpy(), held)
        x = rows.select(FEATURES).to_numpy()
        y = rows.get_column("rank").to_numpy() == 0
        mean = x[~test].mean(axis=0)
        scale = x[~test].std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        design = np.column_stack([(x[~test] - mean) / scale, np.ones(int((~test).sum()))])
        target = y[~test].astype(np.float64)
        penalty = np.r_[np.full(len(FEATURES), l2), 0.0]

        def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
            eta = design @ w
            value = np.mean(np.logaddexp(0.0, eta) - target * eta) + 0.5 * penalty @ (w * w)
            grad = design.T @ (expit(eta) - target) / target.size + penalty * w
            return float(value), grad

        w = minimize(loss, np.zeros(design.shape[1]), jac=True, method="L-BFGS-B").x
        base_rate = float(target.mean())
        p, y_test = expit(_logits(w, mean, scale, x[test])), y[test]
        return cls(
            source=source,
            coef=w,
            mean=mean,
            scale=scale,
            train_requests=ids.size - n_hold,
            holdout_requests=n_hold,
            base_rate=base_rate,
            log_loss=_log_loss(p, y_test),
            base_log_loss=_log_loss(np.full(p.size, base_rate), y_test),
            calibration=_calibration(p, y_test),
        )

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Acceptance probability of each drafted token from its features (N, len(FEATURES))."""
        return expit(_logits(self.coef, self.mean, self.scale, features))

    def log_predict(self, features: np.ndarray) -> np.ndarray:
        """log of `predict`, exact where the probability underflows."""
        return log_expit(_logits(self.coef, self.mean, self.scale, features))

    @property
    def calibration_error(self) -> float:
        """Held-out expected calibration error: Σ_bins rows/N · |mean predicted − observed|."""
        c = self.calibration
        gap = (c.get_column("predicted") - c.get_column("observed")).abs()
        return float((gap * c.get_column("rows")).sum() / c.get_column("rows").sum())


def _calibration(p: np.ndarray, y: np.ndarray) -> pl.DataFrame:
    return (
        pl.DataFrame({"p": p, "y": y.astype(np.float64)})
        .with_columns(bin=(pl.col("p") * _CALIBRATION_BINS).floor().clip(0, _CALIBRATION_BINS - 1))
        .group_by("bin")
        .agg(rows=pl.len(), predicted=pl.col("p").mean(), observed=pl.col("y").mean())
        .sort("bin")
        .select(
            low=pl.col("bin") / _CALIBRATION_BINS,
            high=(pl.col("bin") + 1) / _CALIBRATION_BINS,
            rows="rows",
            predicted="predicted",
            observed="observed",
        )
    )
