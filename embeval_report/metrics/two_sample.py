r"""Two-sample drift tests: kernel MMD with a permutation p-value, per-dimension KS tests with the
Benjamini–Hochberg correction, and a domain classifier's AUC (seed 000 §220.1, in their standard forms).

Each test compares two *independent* samples ``X`` (baseline) and ``Y`` (later version). Where the
seed's ``EmbeddingDriftDetector`` differs: its ``_compute_mmd`` is the biased V-statistic on the
first 1000 rows with :math:`\gamma = 1/\mathrm{median}\,\lVert x-y\rVert^2`, reported as
:math:`\sqrt{\max(0,\mathrm{MMD}^2)}` without a test; here the unbiased :math:`\mathrm{MMD}^2_u`
(Gretton et al. 2012), Gaussian kernel :math:`\exp(-\lVert x-y\rVert^2 / 2\sigma^2)` with
:math:`\sigma` the median pairwise distance, and a permutation p-value. Its KS statistics are not
tested for significance; here each dimension's two-sample KS test is corrected for the d tests with
Benjamini–Hochberg.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import as_numpy, dask_engine, resolve_device
from ..kernels.dask_faults import falls_back
from ..kernels.mmd import mmd_statistics
from ..stats import adjust_pvalues, hanley_mcneil_se, normal_ci

#: significance level of the MMD permutation test and the KS + BH false discovery rate
ALPHA = 0.05


# ---------------------------------------------------------------------------------------------
# Kernel two-sample test (MMD)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MMDTest:
    """Unbiased MMD² with a permutation p-value and a jackknife normal interval."""

    mmd2: float
    p_value: float
    ci_low: float
    ci_high: float
    std_error: float
    bandwidth: float       # sigma of the Gaussian kernel
    null_quantile: float   # (1 - alpha) quantile of the permutation distribution
    n_x: int
    n_y: int
    n_perm: int


def mmd_test(X, Y, *, n_perm: int = 500, bandwidth: float | None = None, alpha: float = ALPHA,
             level: float = 0.95, seed: int = 0, device="auto") -> MMDTest:
    r"""Kernel two-sample test: unbiased MMD² with a Gaussian kernel and a permutation p-value.

    .. math::
       \widehat{\mathrm{MMD}}^2_u = \frac{1}{m(m-1)}\sum_{i \ne j} k(x_i, x_j)
         + \frac{1}{n(n-1)}\sum_{i \ne j} k(y_i, y_j) - \frac{2}{mn}\sum_{i,j} k(x_i, y_j),
       \qquad k(x, y) = \exp\!\left(-\frac{\lVert x - y\rVert^2}{2\sigma^2}\right)

    (Gretton et al. 2012, eq. 3, Lemma 6). ``bandwidth`` σ defaults to the median heuristic, the
    median distance between distinct points of the pooled sample (1 when every point is the same).
    The p-value is :math:`(1 + \#\{b : T_b \ge T\}) / (1 + B)` over ``n_perm`` random relabellings
    of the pooled sample (Phipson & Smyth 2010), exact for exchangeable samples. The interval is
    normal with a two-sample jackknife standard error. Lower is better (0: same distribution; the
    unbiased estimate can be slightly negative). The kernel matrix of the pooled sample is formed,
    so pass samples (the drift chapter uses the ``mmd_sample`` option, 1000 rows per side), not
    whole sets.
    """
    X, Y = as_numpy(X), as_numpy(Y)
    m, n = len(X), len(Y)
    if m < 2 or n < 2:
        raise ValueError(f"mmd_test needs at least 2 rows per sample (got {m} and {n})")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"mmd_test: the samples have {X.shape[1]} and {Y.shape[1]} columns")
    stat, se, bandwidth, null = mmd_statistics(X, Y, n_perm=n_perm, bandwidth=bandwidth, seed=seed,
                                               device=resolve_device(device))
    p = (1 + int((null >= stat - 1e-12 * abs(stat)).sum())) / (1 + n_perm) if n_perm else float("nan")
    lo, hi = normal_ci(stat, se, level) if np.isfinite(se) else (float("nan"), float("nan"))
    return MMDTest(mmd2=stat, p_value=p, ci_low=lo, ci_high=hi, std_error=se, bandwidth=float(bandwidth),
                   null_quantile=float(np.quantile(null, 1 - alpha)) if n_perm else float("nan"),
                   n_x=m, n_y=n, n_perm=n_perm)


# ---------------------------------------------------------------------------------------------
# Per-dimension Kolmogorov–Smirnov tests with Benjamini–Hochberg
# ---------------------------------------------------------------------------------------------

def benjamini_hochberg(p_values, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Benjamini–Hochberg (1995) step-up: ``(rejected, adjusted p-values)`` at false discovery rate ``alpha``.

    The correction :func:`ks_dimensions` applies to its d tests, kept under this name for callers of
    the drift API; it is :func:`embeval_report.stats.adjust_pvalues` with ``method="bh"``
    (statsmodels ``multipletests``, ``fdr_bh``).
    """
    return adjust_pvalues(p_values, "bh", alpha)


@dataclass(frozen=True)
class KSDimensions:
    """Per-dimension two-sample KS tests with the Benjamini–Hochberg correction."""

    statistics: np.ndarray
    p_values: np.ndarray
    p_adjusted: np.ndarray
    rejected: np.ndarray
    alpha: float

    @property
    def rejected_fraction(self) -> float:
        return float(self.rejected.mean()) if self.rejected.size else float("nan")


@falls_back
def ks_dimensions(X, Y, *, alpha: float = ALPHA) -> KSDimensions:
    """Two-sample Kolmogorov–Smirnov test of every dimension (:func:`scipy.stats.ks_2samp`, two-sided,
    ``method="auto"``), then Benjamini–Hochberg over the d tests at false discovery rate ``alpha``.

    The seed's detector reports the max and mean KS statistic over the dimensions without a test
    (seed 000 §220.1); the share of dimensions whose distribution changed significantly is Evidently's
    "ratio" drift method with the KS test. With a Dask engine on and a sample of more than one chunk of rows,
    the tests run on its cluster over column blocks (:func:`~embeval_report.kernels.dask_engine.ks_statistics`,
    identical numbers).
    """
    from scipy import stats

    X, Y = as_numpy(X), as_numpy(Y)
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"ks_dimensions: the samples have {X.shape[1]} and {Y.shape[1]} columns")
    if dask_engine.takes_columns(X, Y):
        stat, p = dask_engine.ks_statistics(X, Y, client=dask_engine.engine_client(), pvalues=True)
    else:
        res = stats.ks_2samp(X, Y, axis=0)
        stat, p = np.atleast_1d(np.asarray(res.statistic, float)), np.atleast_1d(np.asarray(res.pvalue, float))
    reject, adjusted = benjamini_hochberg(p, alpha)
    return KSDimensions(stat, p, adjusted, reject, alpha)


# ---------------------------------------------------------------------------------------------
# Domain classifier
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DomainClassifier:
    """Cross-validated AUC of a classifier telling the two samples apart."""

    auc: float
    ci_low: float
    ci_high: float
    std_error: float
    n_x: int
    n_y: int
    folds: int


def domain_classifier_auc(X, Y, *, folds: int = 5, level: float = 0.95, seed: int = 0) -> DomainClassifier:
    """Domain-classifier drift test: ROC AUC of a logistic regression telling ``X`` (label 0) from
    ``Y`` (label 1), from out-of-fold probabilities of a stratified ``folds``-fold cross-validation
    (scikit-learn; features standardised inside each fold).

    0.5 = indistinguishable, 1 = perfectly separable; lower is better. A linear classifier detects
    shifts of the mean and of linear projections, not every change of shape. Interval: normal with
    the Hanley–McNeil standard error (:func:`embeval_report.stats.hanley_mcneil_se`), clipped to
    [0, 1]. Evidently's ``model()`` method and deepchecks' embedding drift use the same idea
    (Evidently flags AUC > 0.55).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, Y = as_numpy(X), as_numpy(Y)
    m, n = len(X), len(Y)
    folds = int(min(folds, m, n))
    if folds < 2:
        raise ValueError(f"domain_classifier_auc needs at least 2 rows per sample (got {m} and {n})")
    data = np.vstack([X, Y]).astype(np.float64)
    y = np.r_[np.zeros(m, int), np.ones(n, int)]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    cv = StratifiedKFold(folds, shuffle=True, random_state=seed)
    score = cross_val_predict(model, data, y, cv=cv, method="predict_proba")[:, 1]
    auc = float(roc_auc_score(y, score))
    se = hanley_mcneil_se(auc, n, m)
    lo, hi = normal_ci(auc, se, level)
    return DomainClassifier(auc, max(lo, 0.0), min(hi, 1.0), se, m, n, folds)
