r"""Anomaly and fraud detection (seed 001 §21.4.3): how well anomaly scores separate the labelled
anomalies from the normal rows, and what acting on them would cost.

**Detectors.** A detector gives every row a score, higher = more anomalous. Without scores of the
user's own detector the embeddings are scored by four baselines, all in the cosine geometry (unit
rows), fitted on every row of the set (labelled or not):

* ``knn_distance`` — cosine distance :math:`1 - \cos(u_i, u_{(k)})` to the k-th nearest other row, from
  the shared exact k-NN graph (:func:`~embeval_report.kernels.knn`; Ramaswamy et al. 2000, PyOD's
  ``KNN(method="largest")``);
* ``centroid_distance`` — Euclidean distance :math:`\lVert u_i - \bar u\rVert` of the unit row to the mean
  unit row (the same order as :math:`1 - \cos(u_i, \bar u)`);
* ``lof`` — the Local Outlier Factor (Breunig et al. 2000) of the same k-NN graph with cosine distances,
  :math:`\mathrm{LOF}(i) = \frac1k\sum_{j \in N_k(i)} \mathrm{lrd}(j) / \mathrm{lrd}(i)`,
  :math:`\mathrm{lrd}(i) = 1 / (\frac1k \sum_{j \in N_k(i)} \max(d_k(j), d(i, j)) + 10^{-10})`, exactly
  scikit-learn's ``LocalOutlierFactor`` (``-negative_outlier_factor_``) computed from the shared graph;
* ``isolation_forest`` — scikit-learn's ``IsolationForest`` (Liu et al. 2008; seeded), score
  ``-score_samples`` (the paper's :math:`s(x, n) \in (0, 1]`).

**Metrics** over the labelled rows (:math:`P` anomalies, :math:`N` normal rows; a row is *flagged* at
threshold :math:`t` when its score is :math:`\ge t`, so tied scores are flagged together):
``roc_auc`` the area under the ROC curve (= the Mann–Whitney probability that an anomaly outscores a
normal row, ties counting one half; scikit-learn ``roc_auc_score``); ``average_precision``
:math:`\sum_t (R_t - R_{t-1}) P_t` over the distinct thresholds (no interpolation; scikit-learn
``average_precision_score``), beside its chance level, the prevalence :math:`P / (P + N)`
(``average_precision_baseline``); ``detection_rate_at_fpr_1pct`` (and ``_0_1pct``, ``_5pct``) the
recall at the lowest threshold whose false-positive rate is at most the target (the threshold and
the FPR actually reached are kept; no false positive at all is allowed when the target is below
:math:`1/N`); ``partial_auc_fpr_10pct`` :math:`\int_0^{0.1} \mathrm{TPR}\,d\mathrm{FPR}` (raw, in
[0, 0.1], ROC linearly interpolated at 0.1) and ``partial_auc_fpr_10pct_mcclish`` its McClish (1989)
standardisation :math:`\frac12(1 + \frac{A - 0.005}{0.1 - 0.005})` (0.5 at chance, 1 perfect;
scikit-learn ``roc_auc_score(max_fpr=0.1)``); ``precision_at_n`` the share of anomalies among the
:math:`n = P` top-scored rows (R-precision; a tied group straddling the cut counts at its anomaly
share); ``expected_cost`` the mean cost per labelled row at the cost-optimal threshold,
:math:`\min_t [c_{FN}\,\mathrm{FN}(t) + c_{FP}\,\mathrm{FP}(t)] / (P + N)` over all thresholds, flagging
nothing and flagging everything included (in-sample optimal, so optimistic), and
``cost_reduction_vs_baseline`` :math:`1 - \text{cost} / \min(c_{FN} P, c_{FP} N)` against the cheaper
policy that needs no scores (seed 001 compares with flagging nothing only).

**Intervals**: a nonparametric bootstrap over the labelled rows
(:func:`~embeval_report.stats.weighted_bootstrap`, percentile intervals): each resample re-draws the
rows, re-picks every threshold (FPR target, cost optimum) and recomputes every metric, so the
intervals include the threshold's own uncertainty. The same resamples serve every detector, so
differences between detectors are paired.

**Time to detection** (with ``event`` and ``timestamp`` columns): an event is detected at the first
timestamp of one of its rows flagged at the detector's 1 %-FPR threshold; its time to detection is that
time minus its onset (its earliest row). An undetected event is censored at the end of the observation
(the latest timestamp of the labelled rows), and the Kaplan–Meier estimate gives the median
(``time_to_detection_median``; undefined when fewer than half the events are ever detected), with a
bootstrap interval over events.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pandas as pd

from ..errors import InputError
from ..kernels import as_numpy, knn
from ..kernels.neighbours import usable_k
from ..stats import DEFAULT_LEVEL, percentile_interval, weighted_bootstrap
from .anomaly_replicates import curve_replicates, km_median_replicates, weighted_counts
from .scoring import PreparedBoot
from .spec import MetricSpec, specs

BASELINES = ("knn_distance", "centroid_distance", "lof", "isolation_forest")
BASELINE_LABELS = {"knn_distance": "k-NN distance", "centroid_distance": "centroid distance",
                   "lof": "LOF", "isolation_forest": "isolation forest"}
#: false-positive-rate targets of the detection rates: metric suffix -> target
FPR_TARGETS = {"0_1pct": 0.001, "1pct": 0.01, "5pct": 0.05}
#: the FPR limit of the partial AUC
MAX_FPR = 0.1
#: the alert threshold of time to detection: the detector's threshold at this FPR target
ALERT_FPR = 0.01
#: bootstrap resamples, and the fewer used beyond LARGE labelled rows
N_BOOT = 1000
N_BOOT_LARGE = 200
LARGE = 200_000
#: trees of the isolation forest
N_TREES = 100
#: added to the mean reachability distance, as scikit-learn does (duplicate points)
LOF_EPS = 1e-10
UNIT = "labelled rows"

_CURVE_METRICS = ("roc_auc", "average_precision", *(f"detection_rate_at_fpr_{s}" for s in FPR_TARGETS),
                  "partial_auc_fpr_10pct", "partial_auc_fpr_10pct_mcclish", "precision_at_n", "expected_cost",
                  "cost_reduction_vs_baseline")
_REF = "seed 001 §21.4.3"

SPECS = specs(
    MetricSpec("roc_auc", "ROC-AUC", "higher", r"P(s_{a} > s_{n}) + \tfrac12 P(s_{a} = s_{n})",
               "Hanley & McNeil 1982; scikit-learn roc_auc_score", range=(0, 1), chance=0.5),
    MetricSpec("average_precision", "Average precision", "higher",
               r"\sum_t (R_t - R_{t-1})\, P_t", "scikit-learn average_precision_score (no interpolation)",
               range=(0, 1)),
    MetricSpec("average_precision_baseline", "Average precision of chance (prevalence)", "lower",
               r"P / (P + N)", "the expected average precision of random scores", range=(0, 1)),
    *(MetricSpec(f"detection_rate_at_fpr_{s}", f"Detection rate at {t:.1%} FPR".replace(".0%", "%"), "higher",
                 rf"\mathrm{{TPR}}(t^*),\ t^* = \min\{{t : \mathrm{{FPR}}(t) \le {t:g}\}}",
                 f"{_REF} detection_rate_at_false_positive_rate (threshold-based: tied scores flagged together)",
                 range=(0, 1)) for s, t in FPR_TARGETS.items()),
    MetricSpec("partial_auc_fpr_10pct", "Partial AUC, FPR ≤ 10 % (raw)", "higher",
               r"\int_0^{0.1} \mathrm{TPR}\, d\,\mathrm{FPR}", "McClish 1989 (raw area, in [0, 0.1])", range=(0, 0.1)),
    MetricSpec("partial_auc_fpr_10pct_mcclish", "Partial AUC, FPR ≤ 10 % (McClish)", "higher",
               r"\tfrac12\left(1 + \frac{A_{0.1} - 0.005}{0.1 - 0.005}\right)",
               "McClish 1989; scikit-learn roc_auc_score(max_fpr=0.1)", range=(0, 1), chance=0.5),
    MetricSpec("precision_at_n", "Precision at n = #anomalies", "higher",
               r"|\{\text{anomalies among the } P \text{ top-scored rows}\}| / P",
               "R-precision (PyOD precision_n_scores; ties at the cut counted at their anomaly share)", range=(0, 1)),
    MetricSpec("expected_cost", "Expected cost per row (optimal threshold)", "lower",
               r"\min_t \frac{c_{FN}\,\mathrm{FN}(t) + c_{FP}\,\mathrm{FP}(t)}{P + N}",
               f"{_REF} cost_sensitive_evaluation; Drummond & Holte 2006", range=(0, math.inf)),
    MetricSpec("cost_reduction_vs_baseline", "Cost reduction vs no-score policy", "higher",
               r"1 - \frac{\min_t\, [c_{FN}\mathrm{FN}(t) + c_{FP}\mathrm{FP}(t)]}{\min(c_{FN} P,\ c_{FP} N)}",
               f"{_REF} (its baseline flags nothing; here the cheaper of flagging nothing or everything)",
               range=(-math.inf, 1)),
    MetricSpec("time_to_detection_median", "Median time to detection", "lower",
               r"\min\{t : \hat S_{KM}(t) \le 0.5\}",
               f"{_REF} time_to_detection; Kaplan & Meier 1958 (undetected events censored)", range=(0, math.inf)),
    MetricSpec("events_detected", "Share of events detected", "higher", r"|\{e : \text{detected}\}| / |E|",
               f"{_REF} time_to_detection detection_rate", range=(0, 1)),
    MetricSpec("roc_auc_difference", "ROC-AUC difference", "higher", r"\mathrm{AUC}_a - \mathrm{AUC}_b",
               "paired bootstrap over the labelled rows", range=(-1, 1)),
)
METRICS = tuple(SPECS)


def slug(name: str) -> str:
    """A detector name as a metric-name suffix (lower case, ``[a-z0-9_]``)."""
    s = re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_")
    return s or "detector"


# ---------------------------------------------------------------------------------------------
# Baseline detectors
# ---------------------------------------------------------------------------------------------

def _unit(X) -> np.ndarray:
    X = np.asarray(as_numpy(X), np.float64)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(n > 0, n, 1.0)


def neighbour_graph(X, k: int, *, device="auto") -> tuple[np.ndarray, np.ndarray]:
    """``(indices (n, k), cosine distances (n, k))`` of each row's k nearest other rows (the shared graph)."""
    idx, sim = knn(X, k, metric="cosine", exclude_self=True, device=device, desc=None)
    return np.asarray(idx)[:, :k], 1.0 - np.asarray(sim, np.float64)[:, :k]


def knn_distance_scores(dist: np.ndarray) -> np.ndarray:
    """Cosine distance to the k-th nearest other row (``dist`` from :func:`neighbour_graph`)."""
    return np.asarray(dist[:, -1], np.float64)


def lof_scores(idx: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """Local Outlier Factor from a k-NN graph (module docstring; scikit-learn's definition)."""
    kdist = dist[:, -1]
    reach = np.maximum(kdist[idx], dist)
    lrd = 1.0 / (reach.mean(1) + LOF_EPS)
    return (lrd[idx] / lrd[:, None]).mean(1)


def centroid_distance_scores(X) -> np.ndarray:
    """Euclidean distance of each unit row to the mean unit row."""
    U = _unit(X)
    return np.linalg.norm(U - U.mean(0), axis=1)


def isolation_forest_scores(X, *, seed: int = 0, n_estimators: int = N_TREES) -> np.ndarray:
    """Isolation-forest anomaly score of the unit rows (scikit-learn, ``-score_samples``)."""
    from sklearn.ensemble import IsolationForest

    U = _unit(X)
    forest = IsolationForest(n_estimators=n_estimators, random_state=seed).fit(U)
    return -forest.score_samples(U)


def baseline_scores(X, k: int, *, seed: int = 0, device="auto", graph=None) -> dict[str, np.ndarray]:
    """Every baseline's score of every row: name -> (n,) float64 (see :data:`BASELINES`). ``graph``: the
    :func:`neighbour_graph` of ``X`` at that k, when the caller has it already."""
    n = len(X)
    if n < 3:
        raise InputError(f"the embedding baselines need at least 3 vectors; the set has {n}")
    k = max(1, usable_k(k, n))
    idx, dist = neighbour_graph(X, k, device=device) if graph is None else graph
    return {"knn_distance": knn_distance_scores(dist), "centroid_distance": centroid_distance_scores(X),
            "lof": lof_scores(idx, dist), "isolation_forest": isolation_forest_scores(X, seed=seed)}


# ---------------------------------------------------------------------------------------------
# Threshold curves and the metrics read from them
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ranked:
    """A detector's labelled scores sorted once (descending): ``order`` the row order, ``ends`` the last
    sorted position of each distinct score, ``thresholds`` those scores (descending)."""

    order: np.ndarray
    ends: np.ndarray
    thresholds: np.ndarray
    y: np.ndarray  # labels in sorted order

    @classmethod
    def of(cls, scores, y) -> "Ranked":
        s = np.asarray(scores, np.float64)
        order = np.argsort(-s, kind="stable")
        ss = s[order]
        ends = np.r_[np.flatnonzero(np.diff(ss) != 0), len(ss) - 1] if len(ss) else np.zeros(0, np.int64)
        return cls(order, ends, ss[ends], np.asarray(y, np.float64)[order])

    def counts(self, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Cumulative (weighted) anomalies and normal rows flagged at each distinct threshold."""
        w = np.ones(len(self.order)) if weights is None else np.asarray(weights, np.float64)[self.order]
        tp = np.cumsum(w * self.y)[self.ends]
        fp = np.cumsum(w * (1 - self.y))[self.ends]
        return tp, fp


def roc_points(tp, fp) -> tuple[np.ndarray, np.ndarray]:
    """``(fpr, tpr)`` with (0, 0) prepended (NaN when a class is absent)."""
    P, N = (tp[-1], fp[-1]) if len(tp) else (0.0, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.r_[0.0, fp / N], np.r_[0.0, tp / P]


def roc_auc(tp, fp) -> float:
    """The area under the ROC curve (trapezoids) from the cumulative counts of :meth:`Ranked.counts`; NaN when
    a class is absent."""
    if not len(tp) or tp[-1] <= 0 or fp[-1] <= 0:
        return float("nan")
    fpr, tpr = roc_points(tp, fp)
    return float(np.trapezoid(tpr, fpr))


def average_precision(tp, fp) -> float:
    """:math:`\\sum_t (R_t - R_{t-1}) P_t` over the distinct thresholds of :meth:`Ranked.counts`' cumulative counts;
    NaN when a class is absent; a threshold flagging no weighted row (none above it drawn) adds no recall: 0."""
    if not len(tp) or tp[-1] <= 0 or fp[-1] <= 0:
        return float("nan")
    flagged, recall = np.asarray(tp + fp, np.float64), tp / tp[-1]
    precision = np.divide(tp, flagged, out=np.zeros_like(flagged), where=flagged > 0)
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def _detection(tp, fp, target: float) -> tuple[float, int]:
    """Recall at the lowest threshold with FPR <= target, and that threshold's position (-1: flag nothing)."""
    N, P = fp[-1], tp[-1]
    ok = fp <= target * N * (1 + 1e-12)
    if not ok.any():
        return 0.0, -1
    i = int(np.flatnonzero(ok)[-1])
    return float(tp[i] / P), i


def _partial_auc(fpr, tpr, max_fpr: float) -> float:
    stop = int(np.searchsorted(fpr, max_fpr, side="right"))
    if stop >= len(fpr):
        x, y = fpr, tpr
    else:
        y_end = np.interp(max_fpr, [fpr[stop - 1], fpr[stop]], [tpr[stop - 1], tpr[stop]])
        x, y = np.r_[fpr[:stop], max_fpr], np.r_[tpr[:stop], y_end]
    return float(np.trapezoid(y, x))


def mcclish(raw: float, max_fpr: float = MAX_FPR) -> float:
    """McClish's standardisation of a raw partial AUC over FPR in [0, ``max_fpr``] (0.5 chance, 1 perfect)."""
    lo, hi = 0.5 * max_fpr ** 2, max_fpr
    return 0.5 * (1 + (raw - lo) / (hi - lo))


def _precision_at_n(tp, fp) -> float:
    P = tp[-1]
    n = P
    flagged = tp + fp
    j = int(np.searchsorted(flagged, n - 1e-9))  # first group reaching n rows
    prev_tp, prev_c = (tp[j - 1], flagged[j - 1]) if j > 0 else (0.0, 0.0)
    size = flagged[j] - prev_c
    share = (tp[j] - prev_tp) / size if size > 0 else 0.0
    return float((prev_tp + (n - prev_c) * share) / n)


def _costs(tp, fp, cost_fn: float, cost_fp: float) -> np.ndarray:
    """Total cost of flagging nothing, then of each threshold in turn."""
    P = tp[-1]
    return np.r_[cost_fn * P, cost_fn * (P - tp) + cost_fp * fp]


def curve_metrics(tp, fp, *, cost_fn: float, cost_fp: float) -> dict:
    """Every metric of :data:`_CURVE_METRICS` from the cumulative counts at the distinct thresholds
    (``tp``/``fp`` from :meth:`Ranked.counts`); NaN when a class is absent."""
    P, N = (float(tp[-1]), float(fp[-1])) if len(tp) else (0.0, 0.0)
    if P <= 0 or N <= 0:
        return dict.fromkeys(_CURVE_METRICS, float("nan"))
    fpr, tpr = roc_points(tp, fp)
    out = {"roc_auc": roc_auc(tp, fp), "average_precision": average_precision(tp, fp)}
    for s, t in FPR_TARGETS.items():
        out[f"detection_rate_at_fpr_{s}"] = _detection(tp, fp, t)[0]
    raw = _partial_auc(fpr, tpr, MAX_FPR)
    out["partial_auc_fpr_10pct"], out["partial_auc_fpr_10pct_mcclish"] = raw, mcclish(raw)
    out["precision_at_n"] = _precision_at_n(tp, fp)
    costs = _costs(tp, fp, cost_fn, cost_fp)
    best = float(costs.min())
    out["expected_cost"] = best / (P + N)
    base = min(cost_fn * P, cost_fp * N)
    out["cost_reduction_vs_baseline"] = 1 - best / base if base > 0 else float("nan")
    return out


def units_roc_auc(units: pd.DataFrame) -> float:
    """ROC-AUC of a unit table's ``knn_distance`` scores against its ``label`` column (1 anomaly, 0 normal; the
    anomaly chapter's units): the number :func:`evaluate_detectors` records for those scores, bit for bit."""
    return roc_auc(*_unit_ranks(units).counts())


def units_average_precision(units: pd.DataFrame) -> float:
    """Average precision of a unit table's ``knn_distance`` scores (see :func:`units_roc_auc`)."""
    return average_precision(*_unit_ranks(units).counts())


def _unit_ranks(units: pd.DataFrame) -> Ranked:
    return Ranked.of(units["knn_distance"].to_numpy(np.float64), units["label"].to_numpy(np.float64))


def _weighted_curve(r: Ranked, W: np.ndarray):
    """Recall, false-positive rate and precision (0 before the first flagged row) at every threshold under each
    row of unit weights ``W`` (draws × units), of the table sorted once (``r``); and which rows hold both classes."""
    tp, fp = weighted_counts(r, W)  # counts: exact
    P, N, flagged, zero = tp[:, -1:], fp[:, -1:], tp + fp, np.zeros((len(tp), 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.c_[zero, tp / P], np.c_[zero, fp / N], np.where(flagged > 0, tp / np.maximum(flagged, 1e-300), 0.0),
                (P[:, 0] > 0) & (N[:, 0] > 0))


def _curve_value(average_precision: bool, r: Ranked, W: np.ndarray) -> np.ndarray:
    recall, fpr, precision, ok = _weighted_curve(r, W)
    return np.where(ok, np.sum(np.diff(recall, axis=1) * precision, axis=1) if average_precision else
                    np.trapezoid(recall, fpr, axis=1), np.nan)


#: :func:`units_roc_auc`, :func:`units_average_precision` under each row of unit weights ``W`` (the table sorted once)
units_roc_auc_weighted, units_average_precision_weighted = (PreparedBoot(_unit_ranks, partial(_curve_value, False)),
                                                            PreparedBoot(_unit_ranks, partial(_curve_value, True)))


# ---------------------------------------------------------------------------------------------
# Operating points and curves for display
# ---------------------------------------------------------------------------------------------

def operating_points(r: Ranked, *, cost_fn: float, cost_fp: float) -> pd.DataFrame:
    """One row per FPR target and for the cost optimum: the threshold used (``inf``: flag nothing), rows
    flagged, anomalies caught, false positives, recall, FPR and precision reached."""
    tp, fp = r.counts()
    P, N = tp[-1], fp[-1]
    rows = []

    def row(name, i):
        t, f = (0.0, 0.0) if i < 0 else (tp[i], fp[i])
        rows.append({"operating point": name, "threshold": math.inf if i < 0 else float(r.thresholds[i]),
                     "flagged": int(t + f), "anomalies caught": int(t), "false positives": int(f),
                     "recall": t / P, "FPR": f / N, "precision": t / (t + f) if t + f else float("nan")})

    for s, target in FPR_TARGETS.items():
        row(f"FPR ≤ {target:.1%}".replace(".0%", "%"), _detection(tp, fp, target)[1])
    costs = _costs(tp, fp, cost_fn, cost_fp)
    row("cost optimum", int(np.argmin(costs)) - 1)
    return pd.DataFrame(rows)


def pr_points(r: Ranked) -> tuple[np.ndarray, np.ndarray]:
    """``(recall, precision)`` at the distinct thresholds (the step function average precision sums)."""
    tp, fp = r.counts()
    return tp / tp[-1], tp / (tp + fp)


def cost_curve(r: Ranked, pc: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""Drummond & Holte's (2006) cost curve: the normalised expected cost of the best threshold,
    :math:`\min_t [(1 - \mathrm{TPR}_t)\,\mathrm{PC} + \mathrm{FPR}_t\,(1 - \mathrm{PC})]`, at each probability
    cost :math:`\mathrm{PC} = p\,c_{FN} / (p\,c_{FN} + (1 - p)\,c_{FP})` (flagging nothing and everything
    included). Returns ``(pc, cost)``."""
    tp, fp = r.counts()
    fpr, tpr = roc_points(tp, fp)
    pc = np.linspace(0, 1, 201) if pc is None else np.asarray(pc, float)
    lines = (1 - tpr)[:, None] * pc[None, :] + fpr[:, None] * (1 - pc[None, :])
    return pc, lines.min(0)


def probability_cost(prevalence: float, cost_fn: float, cost_fp: float) -> float:
    """The probability cost :math:`\\mathrm{PC}(+)` of a prevalence and cost pair (Drummond & Holte 2006)."""
    a, b = prevalence * cost_fn, (1 - prevalence) * cost_fp
    return a / (a + b) if a + b > 0 else float("nan")


# ---------------------------------------------------------------------------------------------
# Time to detection
# ---------------------------------------------------------------------------------------------

def kaplan_meier(durations, observed, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """Kaplan–Meier survival estimate: ``(times, S)`` at each distinct observed (event) time, S just after it.
    Censored durations tied with an event time count as at risk at that time (the usual convention)."""
    t = np.asarray(durations, float)
    d = np.asarray(observed, bool)
    w = np.ones(len(t)) if weights is None else np.asarray(weights, float)
    times = np.unique(t[d & (w > 0)])
    if len(times) == 0:
        return times, times
    at_risk = np.array([w[t >= u].sum() for u in times])
    events = np.array([w[d & (t == u)].sum() for u in times])
    return times, np.cumprod(1 - events / at_risk)


def km_median(durations, observed, weights=None) -> float:
    """The Kaplan–Meier median: the first event time at which S(t) <= 0.5 (NaN when S stays above)."""
    times, S = kaplan_meier(durations, observed, weights)
    hit = np.flatnonzero(S <= 0.5 + 1e-12)
    return float(times[hit[0]]) if len(hit) else float("nan")


@dataclass(frozen=True)
class DetectionTimes:
    """Per event: onset, first alert (NaN if none), duration (alert − onset, or censoring time) and whether
    it was detected; ``unit`` of the times; ``threshold`` the alert threshold."""

    events: pd.DataFrame
    unit: str
    threshold: float
    end: float

    @property
    def median(self) -> float:
        e = self.events
        return km_median(e["duration"], e["detected"])


def detection_times(scores, event, time, labelled: np.ndarray, threshold: float, unit: str) -> DetectionTimes:
    """Time to detection of each event (module docstring) for one detector's scores and alert threshold.

    ``scores``, ``event`` (object, ``None`` for no event), ``time`` (float) and ``labelled`` (bool) are
    per row; the observation ends at the latest time of a labelled row."""
    s = np.asarray(scores, float)
    ev = np.asarray(event, dtype=object)
    t = np.asarray(time, float)
    has = np.array([e is not None for e in ev])
    known = np.isfinite(t) & (labelled | has)
    end = float(t[known].max())
    rows = []
    names = pd.unique(pd.Series(ev[has], dtype=object))
    for name in names:
        m = has & (ev == name)
        onset = float(t[m].min())
        flagged = m & (s >= threshold)
        alert = float(t[flagged].min()) if flagged.any() else float("nan")
        detected = bool(flagged.any())
        rows.append({"event": str(name), "rows": int(m.sum()), "onset": onset, "first_alert": alert,
                     "detected": detected, "duration": (alert if detected else end) - onset,
                     "rows_flagged": int(flagged.sum())})
    return DetectionTimes(pd.DataFrame(rows), unit, float(threshold), end)


# ---------------------------------------------------------------------------------------------
# The chapter's evaluation
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DetectorResult:
    """One detector's evaluation: ``values`` metric -> value, ``cis`` metric -> (low, high), the sorted
    scores (``ranked``), its operating points, and its time to detection (when events exist)."""

    name: str
    label: str
    source: str          # "baseline" or the scores file
    values: dict
    cis: dict
    ranked: Ranked
    points: pd.DataFrame
    scores: np.ndarray    # labelled rows, in row order
    ttd: DetectionTimes | None = None


@dataclass(frozen=True)
class AnomalyResult:
    """Everything the anomaly chapter shows: the detectors (primary first), the recorded metrics
    (name -> :class:`~embeval_report.metrics.spec.Metric`), paired differences, counts and settings."""

    detectors: list
    primary: str
    metrics: dict
    differences: pd.DataFrame
    protocol: dict
    labels: np.ndarray     # labelled rows' labels, row order
    info: dict = field(default_factory=dict)


def _replicates(ranked: list[Ranked], y: np.ndarray, *, cost_fn, cost_fp, n_boot, seed) -> np.ndarray:
    """(n_boot, detectors, metrics) bootstrap replicates: the same row resamples for every detector, a batch of
    resamples at a time (:func:`~.anomaly_replicates.curve_replicates`: each equal to :func:`curve_metrics`)."""
    def stat(W):
        out = np.empty((len(W), len(ranked), len(_CURVE_METRICS)))
        for d, r in enumerate(ranked):
            m = curve_replicates(*weighted_counts(r, W), cost_fn=cost_fn, cost_fp=cost_fp, targets=FPR_TARGETS,
                                 max_fpr=MAX_FPR)
            m["partial_auc_fpr_10pct_mcclish"] = mcclish(m["partial_auc_fpr_10pct"])
            out[:, d] = np.column_stack([m[k] for k in _CURVE_METRICS])
        return out

    return weighted_bootstrap(stat, len(y), n_boot=n_boot, seed=seed, batch=max(1, 2**21 // max(len(y), 1)))


def _ttd_replicates(events: pd.DataFrame, n_boot: int, seed: int) -> np.ndarray:
    dur, obs = events["duration"].to_numpy(float), events["detected"].to_numpy(bool)
    return weighted_bootstrap(lambda W: np.column_stack([km_median_replicates(dur, obs, W), W @ obs / W.sum(1)]),
                              len(events), n_boot=n_boot, seed=seed, batch=max(1, 2**22 // len(events)))


def evaluate_detectors(scores: dict, labels, *, cost_fn: float = 10_000.0, cost_fp: float = 100.0,
                       events=None, primary: str | None = None, sources: dict | None = None,
                       level: float = DEFAULT_LEVEL, seed: int = 0, n_boot: int | None = None) -> AnomalyResult:
    """Evaluate every detector on the labelled rows.

    ``scores`` name -> (n,) scores of every row (higher = more anomalous); ``labels`` (n,) 1/0/NaN
    (NaN unlabelled); ``events`` optional ``(event, time, unit)`` per row (see
    :func:`~embeval_report.io.anomaly_scores.event_columns`); ``primary`` the detector whose metrics
    are recorded under the plain names (default: the first); ``sources`` name -> where its scores come
    from. Raises :class:`InputError` without labelled rows of both classes.
    """
    if not scores:
        raise ValueError("no detector scores to evaluate")
    if cost_fn <= 0 or cost_fp <= 0:
        raise InputError(f"costs must be positive: cost_fn = {cost_fn}, cost_fp = {cost_fp}")
    y_all = np.asarray(labels, float)
    lab = np.isfinite(y_all)
    y = y_all[lab]
    P, N = int((y == 1).sum()), int((y == 0).sum())
    if P == 0 or N == 0:
        raise InputError(f"the labelled rows are all {'normal' if P == 0 else 'anomalies'} ({len(y):,} row(s)); "
                         "expected both anomalies (1) and normal rows (0)")
    names = list(scores)
    primary = primary or names[0]
    names.remove(primary)
    names.insert(0, primary)
    sources = sources or {}
    ranked = {}
    for name in names:
        s = np.asarray(scores[name], float)
        if s.shape != y_all.shape:
            raise ValueError(f"detector {name}: {s.shape[0]} scores for {len(y_all)} rows")
        if not np.isfinite(s[lab]).all():
            raise InputError(f"detector {name}: non-finite score for a labelled row; expected finite numbers")
        ranked[name] = Ranked.of(s[lab], y)
    n_boot = n_boot if n_boot is not None else (N_BOOT if len(y) <= LARGE else N_BOOT_LARGE)
    reps = _replicates([ranked[n] for n in names], y, cost_fn=cost_fn, cost_fp=cost_fp, n_boot=n_boot, seed=seed)
    ci_method = f"{level:.0%} percentile bootstrap over the {len(y):,} {UNIT} ({n_boot} resamples)"
    ev = None
    if events is not None:
        ev_name, ev_time, ev_unit = events
        ev = (np.asarray(ev_name, dtype=object), np.asarray(ev_time, float), ev_unit)
    detectors = []
    for d, name in enumerate(names):
        r = ranked[name]
        tp, fp = r.counts()
        values = curve_metrics(tp, fp, cost_fn=cost_fn, cost_fp=cost_fp)
        values["average_precision_baseline"] = P / (P + N)
        cis = {k: percentile_interval(reps[:, d, j], level) for j, k in enumerate(_CURVE_METRICS)}
        ttd = None
        if ev is not None:
            _, i = _detection(tp, fp, ALERT_FPR)
            thr = math.inf if i < 0 else float(r.thresholds[i])
            ttd = detection_times(np.asarray(scores[name], float), ev[0], ev[1], lab, thr, ev[2])
            if len(ttd.events):
                values["time_to_detection_median"] = ttd.median
                values["events_detected"] = float(ttd.events["detected"].mean())
                if len(ttd.events) >= 2:
                    tr = _ttd_replicates(ttd.events, n_boot, seed)
                    cis["time_to_detection_median"] = percentile_interval(tr[:, 0], level)
                    cis["events_detected"] = percentile_interval(tr[:, 1], level)
        detectors.append(DetectorResult(name, BASELINE_LABELS.get(name, name), sources.get(name, "baseline"), values,
                                        cis, r, operating_points(r, cost_fn=cost_fn, cost_fp=cost_fp),
                                        np.asarray(scores[name], float)[lab], ttd))
    differences = _differences(detectors, reps, level)
    metrics = _record(detectors, differences, ci_method, level)
    protocol = dict(n_rows=int(len(y_all)), n_labelled=int(len(y)), n_anomalies=P, n_normal=N,
                    n_unlabelled=int((~lab).sum()), prevalence=P / (P + N), cost_fn=float(cost_fn),
                    cost_fp=float(cost_fp), n_boot=int(n_boot), level=level, seed=seed, ci_method=ci_method,
                    alert_fpr=ALERT_FPR, events=None if ev is None else int(len(detectors[0].ttd.events)),
                    time_unit=None if ev is None else ev[2])
    return AnomalyResult(detectors, primary, metrics, differences, protocol, y)


def _differences(detectors: list, reps: np.ndarray, level: float) -> pd.DataFrame:
    """ROC-AUC of each user detector minus each baseline (paired bootstrap), when user detectors exist."""
    j = _CURVE_METRICS.index("roc_auc")
    users = [(i, d) for i, d in enumerate(detectors) if d.source != "baseline"]
    bases = [(i, d) for i, d in enumerate(detectors) if d.source == "baseline"]
    rows = []
    for i, a in users:
        for b_i, b in bases:
            lo, hi = percentile_interval(reps[:, i, j] - reps[:, b_i, j], level)
            rows.append({"detector": a.name, "baseline": b.name,
                         "difference": a.values["roc_auc"] - b.values["roc_auc"], "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows, columns=["detector", "baseline", "difference", "ci_low", "ci_high"])


def _record(detectors: list, differences: pd.DataFrame, ci_method: str, level: float) -> dict:
    """name -> Metric: the primary detector under the plain names, every detector as ``name__<detector>``."""
    metrics = {}
    for i, d in enumerate(detectors):
        for name in METRICS:
            if name not in d.values or name == "roc_auc_difference":
                continue
            spec = SPECS[name]
            ci = d.cis.get(name)
            note = ""
            v = d.values[name]
            if name == "time_to_detection_median" and not np.isfinite(v):
                note = "fewer than half the events were ever detected: the median is not reached"
                v, ci = None, None
            how = ci_method if name != "time_to_detection_median" and name != "events_detected" else (
                f"{level:.0%} percentile bootstrap over events")
            if name == "average_precision_baseline":
                ci, how = None, ""
            key = f"{name}__{slug(d.name)}"
            metrics[key] = spec.record(v, ci, ci_method=how, name=key, label=f"{spec.label} [{d.label}]",
                                       verdict=False, note=note)
            if i == 0:
                metrics[name] = spec.record(v, ci, ci_method=how, label=f"{spec.label} [{d.label}]", verdict=False,
                                            note=note)
    spec = SPECS["roc_auc_difference"]
    for row in differences.itertuples(index=False):
        key = f"roc_auc_difference__{slug(row.detector)}_vs_{slug(row.baseline)}"
        metrics[key] = spec.record(row.difference, (row.ci_low, row.ci_high), ci_method=ci_method + ", paired",
                                   name=key, label=f"ROC-AUC, {row.detector} − {BASELINE_LABELS[row.baseline]}",
                                   verdict=False)
    return metrics


def chance_test(scores, y) -> tuple[float, float]:
    """One-sided Mann–Whitney U test that anomalies score higher than normal rows: ``(AUC, p-value)``
    (SciPy ``mannwhitneyu``, ``alternative="greater"``, normal approximation with tie correction for
    large samples). The U statistic over :math:`P N` is the ROC-AUC."""
    from scipy.stats import mannwhitneyu

    s, y = np.asarray(scores, float), np.asarray(y, float)
    a, b = s[y == 1], s[y == 0]
    res = mannwhitneyu(a, b, alternative="greater")
    return float(res.statistic) / (len(a) * len(b)), float(res.pvalue)
