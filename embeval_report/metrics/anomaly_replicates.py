"""The anomaly chapter's threshold-curve metrics for many bootstrap replicates at once.

:func:`curve_replicates` is :func:`~embeval_report.metrics.anomaly.curve_metrics` with one row of cumulative
counts per replicate: the same arithmetic on each row (integer counts, then row-wise sums of the same length in
the same order), so every replicate's value equals the one-replicate function's bit for bit; the partial AUC,
whose trapezoids stop at a row's own FPR limit, is summed over the replicates that stop at the same threshold
together (tested against the per-replicate loop).
"""
from __future__ import annotations

import numpy as np


def weighted_counts(ranked, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative weighted anomalies and normal rows flagged at each distinct threshold of ``ranked`` (an
    :class:`~embeval_report.metrics.anomaly.Ranked`) under each row of unit weights ``W`` (replicates x rows):
    ``(tp, fp)``, each (replicates, thresholds)."""
    Wo = np.take(np.asarray(W, np.float64), ranked.order, axis=1)  # row-major (W[:, order] is column-major)
    tp = np.take(np.cumsum(Wo * ranked.y, axis=1), ranked.ends, axis=1)
    fp = np.take(np.cumsum(Wo * (1 - ranked.y), axis=1), ranked.ends, axis=1)
    return tp, fp


class _RowSearch:
    """``searchsorted(side="right")`` in each row of a row-wise non-decreasing array of integer counts: one search
    of the rows laid end to end, shifted apart (exact integers, so the keys increase across rows)."""

    def __init__(self, sorted_rows: np.ndarray):
        r, self.T = sorted_rows.shape
        self.span = float(max(sorted_rows.max(initial=0.0), 0.0) + 2)
        self.shift = np.arange(r) * self.span
        self.keys = (sorted_rows + self.shift[:, None]).ravel()

    def count(self, limits: np.ndarray) -> np.ndarray:
        """Per row, the number of entries ``<= limits[row]``."""
        at = np.searchsorted(self.keys, np.clip(np.floor(limits), -1.0, self.span - 1) + self.shift, side="right")
        return at - np.arange(len(self.shift)) * self.T


def _partial_auc(fpr: np.ndarray, tpr: np.ndarray, terms: np.ndarray, max_fpr: float) -> np.ndarray:
    """The raw partial AUC of each row's ROC points (``anomaly._partial_auc``: np.trapezoid's terms, summed over
    each row's own points), the rows that stop at the same point summed together."""
    out = np.empty(len(fpr))
    stops = (fpr <= max_fpr).sum(1)  # searchsorted(side="right") of a non-decreasing row
    rows = np.arange(len(fpr))
    for stop in np.unique(stops):
        r = rows[stops == stop]
        if stop >= fpr.shape[1]:
            out[r] = terms[r].sum(1)
            continue
        x0, x1, y0, y1 = fpr[r, stop - 1], fpr[r, stop], tpr[r, stop - 1], tpr[r, stop]
        with np.errstate(invalid="ignore", divide="ignore"):  # np.interp's arithmetic on two points
            y_end = np.where(x0 == max_fpr, y0, (y1 - y0) / (x1 - x0) * (max_fpr - x0) + y0)
        out[r] = np.c_[terms[r, :stop - 1], (max_fpr - x0) * (y_end + y0) / 2.0].sum(1)
    return out


def _with_zero(M: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``np.c_[0, M / scale]`` (row-wise)."""
    out = np.empty((M.shape[0], M.shape[1] + 1))
    out[:, 0] = 0.0
    np.divide(M, scale[:, None], out=out[:, 1:])
    return out


def curve_replicates(tp: np.ndarray, fp: np.ndarray, *, cost_fn: float, cost_fp: float, targets: dict,
                     max_fpr: float) -> dict[str, np.ndarray]:
    """``curve_metrics`` of each row of cumulative integer counts (``tp``, ``fp``: replicates x thresholds, from
    :func:`weighted_counts` with integer weights) but McClish's standardisation: metric name -> (replicates,)
    values, NaN where a replicate lacks a class. ``targets`` the FPR targets (name suffix -> rate), ``max_fpr`` the
    partial AUC's."""
    P, N = tp[:, -1], fp[:, -1]
    ok = (P > 0) & (N > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        if not ok.all():
            tp, fp, P, N = tp[ok], fp[ok], P[ok], N[ok]
        fpr, tpr = _with_zero(fp, N), _with_zero(tp, P)
        terms = np.diff(fpr, axis=1) * (tpr[:, 1:] + tpr[:, :-1]) / 2.0  # np.trapezoid's
        flagged, rows = tp + fp, np.arange(len(tp))
        # a threshold that flags no drawn row (every row above it undrawn) adds no recall: its precision term is 0,
        # not 0/0 (which made the replicate NaN whenever the top-scored row was not drawn, ~40 % of them, dropped)
        precision = np.divide(tp, flagged, out=np.zeros_like(tp), where=flagged > 0)
        vals = {"roc_auc": terms.sum(1), "average_precision": np.sum(np.diff(tpr, axis=1) * precision, axis=1)}
        in_fp = _RowSearch(fp)
        for s, t in targets.items():  # the last threshold with fp <= t N (1 + 1e-12); none: recall 0
            i = in_fp.count(t * N * (1 + 1e-12)) - 1
            vals[f"detection_rate_at_fpr_{s}"] = np.where(i >= 0, tp[rows, i] / P, 0.0)
        vals["partial_auc_fpr_10pct"] = _partial_auc(fpr, tpr, terms, max_fpr)
        j = _RowSearch(flagged).count(P - 1)  # the first group reaching P rows (flagged < P - 1e-9 before it)
        before = j > 0
        prev_tp = np.where(before, tp[rows, j - 1], 0.0)
        prev_c = np.where(before, flagged[rows, j - 1], 0.0)
        size = flagged[rows, j] - prev_c
        share = np.where(size > 0, (tp[rows, j] - prev_tp) / np.where(size > 0, size, 1.0), 0.0)
        vals["precision_at_n"] = (prev_tp + (P - prev_c) * share) / P
        best = np.minimum(cost_fn * P, (cost_fn * (P[:, None] - tp) + cost_fp * fp).min(1))
        vals["expected_cost"] = best / (P + N)
        base = np.minimum(cost_fn * P, cost_fp * N)
        vals["cost_reduction_vs_baseline"] = np.where(base > 0, 1 - best / np.where(base > 0, base, 1.0), np.nan)
    out = {}
    for k, v in vals.items():
        out[k] = np.full(len(ok), np.nan)
        out[k][ok] = v
    return out


def km_median_replicates(durations, observed, W: np.ndarray) -> np.ndarray:
    """``anomaly.km_median(durations, observed, w)`` for each row ``w`` of integer unit weights ``W``: the
    weighted counts at risk and of events at every event time as exact products, a factor of exactly 1 where a
    row has no event (so each row's survival curve is its own, bit for bit)."""
    t, d = np.asarray(durations, float), np.asarray(observed, bool)
    W = np.asarray(W, float)
    times = np.unique(t[d])
    if len(times) == 0:
        return np.full(len(W), np.nan)
    at_risk = W @ (t[:, None] >= times).astype(float)
    events = W @ (d[:, None] & (t[:, None] == times)).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        S = np.cumprod(np.where(events > 0, 1 - events / at_risk, 1.0), axis=1)
    hit = S <= 0.5 + 1e-12  # first reached at an event time: S only falls there
    return np.where(hit.any(1), times[np.argmax(hit, axis=1)], np.nan)
