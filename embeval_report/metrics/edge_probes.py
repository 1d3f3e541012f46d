r"""How well positive and negative scores separate, and edge-operator probes (the classification view).

**Negative-sampling quality** (seed 000 §219.2): Cohen's d of positive vs negative scores with the
seed's quality bands, KS and Mann–Whitney tests (SciPy), and the false-negative rate, the share of
negatives that are edges of the graph; :func:`negative_quality` also lists which of the seed's
rules the numbers trigger (:data:`RULES`).

**Hardness and suspected false negatives**: :func:`negative_hardness` tabulates the negatives by their rank
among their test edge's negatives; :func:`suspected_false_negatives` lists the negatives that score above most
positives (the 90th percentile of the positive scores).

**Classification view** (EvalNE): logistic regression on edge features from the operators
Hadamard :math:`e_u \odot e_v`, average :math:`(e_u + e_v)/2`, weighted-L1 :math:`|e_u - e_v|`,
weighted-L2 :math:`(e_u - e_v)^2` (Grover & Leskovec 2016), trained on training edges against
random non-edges (1:1) and tested on the test edges against one negative each (1:1);
ROC-AUC and average precision (scikit-learn) of each operator and of the raw score.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import UndefinedMetricWarning
from ..kernels import as_numpy
from ..stats import DEFAULT_LEVEL, cohens_d_ci, percentile_interval, wilson_ci
from .ranks import SCORE_NAMES, auc_delong, pair_scores
from .thresholds import COHENS_D_QUALITY, THRESHOLDS, cohens_d_quality

OPERATORS = ("hadamard", "average", "weighted_l1", "weighted_l2")
OPERATOR_LABELS = {"hadamard": "Hadamard e_u ⊙ e_v", "average": "Average (e_u + e_v)/2",
                   "weighted_l1": "Weighted-L1 |e_u − e_v|", "weighted_l2": "Weighted-L2 (e_u − e_v)²"}
#: largest sample for the KS / Mann-Whitney tests and the score histograms
TEST_SAMPLE = 200_000
#: seed 000 §219.2: above this false-negative rate, many negatives are real edges ("verify ground truth")
FALSE_NEGATIVE_RATE_LIMIT = 0.1
#: Cohen's d from which uniform negatives count as easy (the "good" edge of the §219.2 quality table)
EASY_NEGATIVES_D = dict((word, edge) for edge, word in COHENS_D_QUALITY)["good"]
#: seed 000 §219.2's rules, in the order they are checked (see :func:`negative_quality`)
RULES = ("weak_separation", "false_negatives", "poor_auc", "easy_negatives")


# ---------------------------------------------------------------------------------------------
# Negative-sampling quality (seed 000 §219.2)
# ---------------------------------------------------------------------------------------------

def cohens_d(pos, neg) -> float:
    r"""Cohen's d with the pooled standard deviation (Cohen 1988):
    :math:`d = (\bar x_+ - \bar x_-) / s_p`, :math:`s_p^2 = \frac{(n_+ - 1)s_+^2 + (n_- - 1)s_-^2}{n_+ + n_- - 2}`.
    (Seed 000 §219.2 divides by :math:`\sqrt{(\sigma_+^2 + \sigma_-^2)/2}` with population variances:
    :func:`cohens_d_seed`.)"""
    a, b = np.asarray(pos, float), np.asarray(neg, float)
    n1, n2 = len(a), len(b)
    if n1 + n2 < 3:
        return float("nan")
    ss = ((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()  # (n1-1)s1² + (n2-1)s2²
    sp2 = ss / (n1 + n2 - 2)
    return float((a.mean() - b.mean()) / math.sqrt(sp2)) if sp2 > 0 else float("nan")


def cohens_d_seed(pos, neg) -> float:
    """The seed's variant (§219.2): mean difference over :math:`\\sqrt{(\\sigma_+^2 + \\sigma_-^2)/2}` (ddof 0)."""
    a, b = np.asarray(pos, float), np.asarray(neg, float)
    return float((a.mean() - b.mean()) / (math.sqrt((a.var() + b.var()) / 2) + 1e-10))


@dataclass(frozen=True)
class NegativeQuality:
    """Separation of positive and negative scores, and how many negatives are really edges.

    ``rules`` lists the seed 000 §219.2 rules (:data:`RULES`) these numbers trigger; ``auc`` is the
    pooled AUC they were checked with.
    """

    cohens_d: float
    d_ci: tuple
    d_seed: float
    quality: str
    pos_mean: float
    pos_sd: float
    neg_mean: float
    neg_sd: float
    ks_statistic: float
    ks_pvalue: float
    mw_auc: float
    mw_pvalue: float
    test_sample: int
    false_negative_rate: float
    fnr_ci: tuple
    n_negatives: int
    n_false: int
    potential_false_negatives: float
    auc: float = float("nan")
    rules: tuple = ()


def _sd(x: np.ndarray) -> float:
    return float(x.std(ddof=1)) if len(x) > 1 else float("nan")


def negative_quality(pos, neg, *, n_false: int, n_negatives: int, auc: float, sampled: bool, strategy: str,
                     level: float = DEFAULT_LEVEL, seed: int = 0) -> NegativeQuality:
    """Seed 000 §219.2's analysis on the chapter's scores: Cohen's d and its quality band, KS and
    one-sided Mann–Whitney tests (on up to :data:`TEST_SAMPLE` scores per side), the false-negative
    rate (negatives that are edges of the graph; Wilson interval), the seed's score-based
    "potential false negatives" (negatives above the 25th percentile of positive scores), and the
    seed's rules that apply (:data:`RULES`): Cohen's d below the healthy band edge (weak
    separation), a false-negative rate above :data:`FALSE_NEGATIVE_RATE_LIMIT`, an AUC in the poor
    band, and sampled uniform negatives with d of at least :data:`EASY_NEGATIVES_D` (easy negatives)."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    d = cohens_d(pos, neg)
    if math.isnan(d):
        warnings.warn("Cohen's d of positive vs negative scores is undefined: neither the positive nor the negative "
                      "scores vary (pooled standard deviation 0)" if len(pos) + len(neg) >= 3 else
                      "Cohen's d needs at least 3 scores", UndefinedMetricWarning, stacklevel=2)
    rng = np.random.default_rng([seed, 90, 4])
    ps = pos if len(pos) <= TEST_SAMPLE else rng.choice(pos, TEST_SAMPLE, replace=False)
    ns = neg if len(neg) <= TEST_SAMPLE else rng.choice(neg, TEST_SAMPLE, replace=False)
    ks = sps.ks_2samp(ps, ns)
    mw = sps.mannwhitneyu(ps, ns, alternative="greater")
    fnr = n_false / n_negatives if n_negatives else float("nan")
    triggered = (d < THRESHOLDS["negative_score_cohens_d"].healthy, fnr > FALSE_NEGATIVE_RATE_LIMIT,
                 auc < THRESHOLDS["link_prediction_auc"].problematic,
                 sampled and strategy == "uniform" and d >= EASY_NEGATIVES_D)
    lo, hi = cohens_d_ci(d, len(pos), len(neg), level)
    flo, fhi = wilson_ci(n_false, n_negatives, level)
    return NegativeQuality(
        cohens_d=d, d_ci=(lo, hi), d_seed=cohens_d_seed(pos, neg), quality=cohens_d_quality(d),
        pos_mean=float(pos.mean()), pos_sd=_sd(pos), neg_mean=float(neg.mean()), neg_sd=_sd(neg),
        ks_statistic=float(ks.statistic), ks_pvalue=float(ks.pvalue),
        mw_auc=float(mw.statistic / (len(ps) * len(ns))), mw_pvalue=float(mw.pvalue), test_sample=int(min(len(ps), len(ns))),
        false_negative_rate=fnr, fnr_ci=(flo, fhi), n_negatives=int(n_negatives), n_false=int(n_false),
        potential_false_negatives=float((neg > np.percentile(pos, 25)).mean()), auc=float(auc),
        rules=tuple(r for r, hit in zip(RULES, triggered) if hit))


#: ranges of a negative's rank among its test edge's negatives (1 = the hardest) in the hardness table
HARDNESS_RANGES = ((1, 1), (2, 5), (6, 10), (11, 50), (51, None))
#: a negative scoring above this quantile of all positive scores ("above most positives") is a suspected
#: false negative; under random scores this share of the negatives is expected there by chance
SUSPECT_QUANTILE = 0.9
#: suspected false negatives listed by id
SUSPECTS_LISTED = 20


def negative_hardness(scores, removed=None, ranges=HARDNESS_RANGES) -> pd.DataFrame:
    r"""How hard the negatives are, by their rank among their own test edge's negatives (rank 1 = the
    highest-scoring, hardest negative of that edge): per rank range, the number of negatives, their mean
    score, the mean margin :math:`s_+ - s_-` to their positive, the share that outscore their positive
    (each one costs the positive a rank), and the share that are known edges of the graph (false
    negatives). ``scores`` (B, 1 + m), column 0 the positive, NaN padding; ``removed`` (B, m) known edges."""
    from scipy.stats import rankdata

    S = np.asarray(scores, np.float64)
    pos, neg = S[:, :1], S[:, 1:]
    valid = ~np.isnan(neg)
    rank = rankdata(np.where(valid, -neg, np.inf), axis=1, method="min")
    known = np.zeros(neg.shape, bool) if removed is None else np.asarray(removed, bool)
    rows = []
    top = int(rank[valid].max()) if valid.any() else 0
    for lo, hi in ranges:
        if lo > top:
            break
        m = valid & (rank >= lo) & (rank <= (hi if hi is not None else np.inf))
        k = int(m.sum())
        if not k:
            continue
        margin = np.broadcast_to(pos, neg.shape)[m] - neg[m]
        rows.append({"rank among negatives": f"{lo}" if lo == hi else f"{lo}–{hi}" if hi else f"≥ {lo}",
                     "negatives": k, "mean score": float(neg[m].mean()), "mean margin s₊ − s₋": float(margin.mean()),
                     "above their positive": float((margin < 0).mean()), "known edges": float(known[m].mean())})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class SuspectedNegatives:
    """Negatives scoring above the :data:`SUSPECT_QUANTILE` quantile of all positive scores.

    ``rows``: the test-edge row and negative column (into ``scores[:, 1:]``) of each, highest score first;
    ``beats`` the share of positive scores each exceeds; ``threshold`` the positive-score quantile;
    ``ci`` the Wilson interval of ``rate``.
    """

    threshold: float
    quantile: float
    n: int
    n_negatives: int
    rate: float
    ci: tuple
    rows: np.ndarray
    cols: np.ndarray
    scores: np.ndarray
    beats: np.ndarray
    known: np.ndarray


def suspected_false_negatives(scores, removed=None, *, quantile: float = SUSPECT_QUANTILE,
                              level: float = DEFAULT_LEVEL) -> SuspectedNegatives:
    """The negatives that score above ``quantile`` of the positive scores: candidates for unlabelled true edges
    (or, when many, a score that ranks these entities high for every source)."""
    S = np.asarray(scores, np.float64)
    pos, neg = S[:, 0], S[:, 1:]
    valid = ~np.isnan(neg)
    thr = float(np.quantile(pos, quantile))
    hit = valid & (neg > thr)
    r, c = np.nonzero(hit)
    sc = neg[r, c]
    order = np.argsort(-sc, kind="stable")
    r, c, sc = r[order], c[order], sc[order]
    ps = np.sort(pos)
    n_neg = int(valid.sum())
    lo, hi = wilson_ci(len(sc), n_neg, level)
    known = (np.zeros(len(r), bool) if removed is None else np.asarray(removed, bool)[r, c])
    return SuspectedNegatives(thr, quantile, int(len(sc)), n_neg, len(sc) / n_neg if n_neg else float("nan"), (lo, hi),
                              r, c, sc, np.searchsorted(ps, sc, side="left") / len(ps), known)


# ---------------------------------------------------------------------------------------------
# Classification view: edge-operator probes (EvalNE)
# ---------------------------------------------------------------------------------------------

def edge_features(X, u, v, op: str) -> np.ndarray:
    """Edge features from the two end vectors: ``hadamard``, ``average``, ``weighted_l1``, ``weighted_l2``."""
    X = as_numpy(X)
    return _operator(X[np.asarray(u)], X[np.asarray(v)], op)


def _operator(a: np.ndarray, b: np.ndarray, op: str) -> np.ndarray:
    """:func:`edge_features` of the end rows ``a`` and ``b`` (any float dtype): each operator evaluated in float64
    on the rows cast to float64 (the ufunc casts as it goes, without float64 copies of ``a`` and ``b``)."""
    if op not in OPERATORS:
        raise ValueError(f"operator must be one of {OPERATORS}, not {op!r}")
    if op == "hadamard":
        return np.multiply(a, b, dtype=np.float64)
    out = (np.add if op == "average" else np.subtract)(a, b, dtype=np.float64)
    if op == "average":
        out /= 2
    elif op == "weighted_l1":
        np.abs(out, out=out)
    else:
        np.square(out, out=out)
    return out


@dataclass(frozen=True)
class ProbeResult:
    """ROC-AUC and AP of each operator's logistic-regression probe and of the raw score, with curves."""

    table: pd.DataFrame
    curves: dict
    best: str
    n_train: int
    n_test: int
    ci_method: str


#: bootstrap rows of :func:`average_precision` evaluated at a time (its arrays are rows x cases)
_AP_ROWS = 25


def average_precision(y, s, weights=None) -> np.ndarray:
    r"""Average precision :math:`\sum_k (R_k - R_{k-1}) P_k` over the distinct score thresholds (as
    scikit-learn's ``average_precision_score``), for one or several rows of case ``weights``
    (a bootstrap replicate is a row of resampling counts). Returns a scalar or an array per row.

    Integer ``weights`` with 0/1 labels (resampling counts) are accumulated in integers, each class over its own
    cases: the same counts, hence the same value bit for bit, as the float cumulative sums."""
    y, s = np.asarray(y, float), np.asarray(s, float)
    order = np.argsort(-s, kind="stable")
    y, s = y[order], s[order]
    W = np.ones((1, len(y))) if weights is None else np.atleast_2d(np.asarray(weights))
    W = W if np.issubdtype(W.dtype, np.integer) or W.dtype == np.float64 else W.astype(float)
    last = np.r_[np.flatnonzero(np.diff(s) != 0), len(s) - 1]  # last index of each distinct score
    counted = np.issubdtype(W.dtype, np.integer) and bool(np.isin(y, (0.0, 1.0)).all())
    # counted: each class's cases (their columns of W in score order) and its count of cases up to each threshold
    classes = [(order[m], np.cumsum(m)[last]) for m in (y == 1, y == 0)] if counted else None
    ap = np.empty(len(W))
    # blocks of 2 or more rows (a lone row is summed in another order than a row of a matrix: the last bit differs)
    for rows in np.array_split(np.arange(len(W)), -(-len(W) // _AP_ROWS)):
        if counted:
            tp, fp = (_class_counts(W, rows, cols, upto) for cols, upto in classes)
        else:
            Wr = W[rows][:, order]
            tp, fp = np.cumsum(Wr * y, axis=1)[:, last], np.cumsum(Wr * (1 - y), axis=1)[:, last]
        cases = tp + fp
        empty = ~(cases > 0)  # no case above the threshold yet: recall step 0
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.divide(tp, cases, out=cases)
            recall = tp / tp[:, -1:]
        precision[empty] = 0.0
        step = np.empty_like(recall)  # R_k - R_{k-1}, R_0 = 0
        step[:, 0] = recall[:, 0]
        np.subtract(recall[:, 1:], recall[:, :-1], out=step[:, 1:])
        step *= precision
        ap[rows] = step.sum(1)
    return float(ap[0]) if weights is None else ap


def _class_counts(W: np.ndarray, rows: np.ndarray, cols: np.ndarray, upto: np.ndarray) -> np.ndarray:
    """The weight of one class's cases (``cols``, in score order) up to each threshold, for the ``rows`` of the
    integer weights ``W``, as floats: the integer cumulative sum over the class's cases (int32 when it fits, the same
    integers), read at the class's count of cases up to each threshold (``upto``)."""
    Wc = W[rows[:, None], cols]
    cum = np.zeros((len(rows), len(cols) + 1), np.int32 if int(Wc.sum(1).max(initial=0)) < 2**31 else np.int64)
    np.cumsum(Wc, axis=1, out=cum[:, 1:], dtype=cum.dtype)
    return cum[:, upto].astype(np.float64)


def _ap_draws(y, n_boot: int = 200, seed: int = 0) -> np.ndarray:
    """The resampling counts (``n_boot`` x cases) of :func:`_ap_ci`'s stratified bootstrap: positives and
    negatives resampled separately."""
    rng = np.random.default_rng([seed, 90, 5])
    y = np.asarray(y)
    W = np.zeros((n_boot, len(y)), np.int64)
    for mask in (y == 1, y == 0):
        cols = np.flatnonzero(mask)
        draws = rng.integers(0, len(cols), (n_boot, len(cols))) + len(cols) * np.arange(n_boot)[:, None]
        W[:, cols] = np.bincount(draws.ravel(), minlength=n_boot * len(cols)).reshape(n_boot, len(cols))
    return W


def _ap_ci(y, s, level, n_boot: int = 200, seed: int = 0, draws: np.ndarray | None = None) -> tuple[float, float]:
    """Stratified percentile bootstrap of the AP (positives and negatives resampled separately); ``draws``: the
    counts of :func:`_ap_draws` when already drawn for these labels."""
    W = _ap_draws(y, n_boot, seed) if draws is None else draws
    return percentile_interval(average_precision(y, s, W), level)


#: the operators' pipelines (fit, test scores, evaluation) run side by side, one per core (BLAS single-threaded),
#: while one operator's training features take at most this many bytes (two in memory at once, with their copies)
PARALLEL_FEATURE_BYTES = 256 * 2**20


def operator_probes(X, train_pos, train_neg, test_pos, test_neg, *, score: str = "dot",
                    level: float = DEFAULT_LEVEL, seed: int = 0) -> ProbeResult:
    """Train a logistic-regression probe per operator on (train_pos vs train_neg) pairs and test it
    on (test_pos vs test_neg) pairs; each argument is a ``(u, v)`` pair of index arrays.

    Features are standardised (fitted on the training pairs); ``LogisticRegression(max_iter=1000)``.
    The raw ``score`` of the pairs is evaluated on the same test pairs for comparison. AUC intervals
    are DeLong's, AP intervals a stratified percentile bootstrap (200 resamples).

    The operators are independent: below :data:`PARALLEL_FEATURE_BYTES` of training features they run side by side
    in threads (numpy, BLAS and the solver release the GIL), each with single-threaded BLAS and OpenMP, which gives
    the same numbers bit for bit as one after the other with threaded BLAS (tested): the fits' matrix products split
    their outputs, not their sums, among threads.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import precision_recall_curve, roc_curve
    from sklearn.pipeline import make_pipeline

    from .labels import Standardiser, map_threads

    y_tr = np.r_[np.ones(len(train_pos[0])), np.zeros(len(train_neg[0]))]
    y_te = np.r_[np.ones(len(test_pos[0])), np.zeros(len(test_neg[0]))]
    tr_u, tr_v = np.r_[train_pos[0], train_neg[0]], np.r_[train_pos[1], train_neg[1]]
    te_u, te_v = np.r_[test_pos[0], test_neg[0]], np.r_[test_pos[1], test_neg[1]]
    X = as_numpy(X)
    ends_tr, ends_te = (X[tr_u], X[tr_v]), (X[te_u], X[te_v])  # each operator's features come from these rows
    draws = _ap_draws(y_te, seed=seed)  # the same resamples for every operator, as drawn one by one before

    def test_scores(op):
        if op == "score":
            return pair_scores(X, te_u, te_v, score)
        # the scaler standardises the (temporary) features in place: the same numbers without a copy (and fits as
        # StandardScaler does, in fewer passes over the features: Standardiser)
        clf = make_pipeline(Standardiser(copy=False), LogisticRegression(max_iter=1000))
        clf.fit(_operator(*ends_tr, op), y_tr)
        return clf.decision_function(_operator(*ends_te, op))

    def evaluated(op):
        s = test_scores(op)
        label = (f"raw score: {SCORE_NAMES[score]} (no training)" if op == "score" else
                 f"probe: {OPERATOR_LABELS[op]}")
        auc, lo, hi = auc_delong(s[y_te == 1], s[y_te == 0], level)
        fpr, tpr, _ = roc_curve(y_te, s)
        prec, rec, _ = precision_recall_curve(y_te, s)
        # scikit-learn's average_precision_score is this step integral of this curve: the same value, one curve
        ap = float(max(0.0, -np.sum(np.diff(rec) * prec[:-1])))
        alo, ahi = _ap_ci(y_te, s, level, seed=seed, draws=draws)
        assert abs(auc - float(np.trapezoid(tpr, fpr))) < 1e-9  # DeLong's AUC is the ROC curve's area
        return ({"name": op, "method": label, "ROC-AUC": auc, "average precision": ap, "_auc_ci": (lo, hi),
                 "_ap_ci": (alo, ahi)}, dict(fpr=fpr, tpr=tpr, precision=prec, recall=rec, label=label))

    side_by_side = len(y_tr) * X.shape[1] * 8 <= PARALLEL_FEATURE_BYTES
    done = map_threads(evaluated, (*OPERATORS, "score"), parallel=side_by_side)
    table = pd.DataFrame([row for row, _ in done])
    curves = {row["name"]: curve for row, curve in done}
    probes = table[table["name"] != "score"]
    best = str(probes.loc[probes["ROC-AUC"].idxmax(), "name"])
    return ProbeResult(table, curves, best, len(y_tr), len(y_te),
                       f"ROC-AUC: {level:.0%} DeLong interval; AP: {level:.0%} stratified percentile bootstrap "
                       f"(200 resamples); {len(test_pos[0]):,} test edges vs as many negatives (1:1)")
