"""The one statistics layer: intervals, resampling and multiple testing.

Every interval in a report comes from here, and every function says which method it uses
(the ``method`` strings are shown next to the numbers).

* Resampling: :func:`bootstrap_ci` (SciPy's BCa), :func:`weighted_bootstrap` (units or random
  blocks of rows re-weighted through multinomial counts, for statistics of per-unit sufficient
  statistics), :func:`grouped_jackknife` (delete-one-group, when a bootstrap cannot be held in
  memory), :func:`jackknife_interval`.
* Turning replicates into intervals: :func:`percentile_interval`, :func:`basic_interval` and the
  bootstrap :func:`bias_corrected` estimate that goes beside a basic interval.
* Analytic intervals: :func:`normal_ci`, :func:`t_interval`, :func:`wilson_ci`,
  :func:`cohens_d_ci`, :func:`hanley_mcneil_se`; DeLong's test of two correlated AUCs, :func:`delong_paired`.
* :func:`mean_ci` — the interval of a mean of per-unit values (BCa, or the CLT for many units).
* :func:`adjust_pvalues` — Holm / Benjamini–Hochberg through statsmodels ``multipletests``;
  :class:`HypothesisTest` — one test a chapter ran, recorded for the report-wide correction.
* Power of a mean over units (or of paired differences): :func:`minimum_detectable_effect` and
  :func:`required_units`, through statsmodels' ``TTestPower`` (one-sample / paired t-test).

Undefined cases (fewer than two values, no spread) emit
:class:`~embeval_report.errors.UndefinedMetricWarning` and return NaN, never a silent NaN.
"""
from __future__ import annotations

import gc
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy
from scipy import stats

from .context import current
from .errors import UndefinedMetricWarning

DEFAULT_LEVEL = 0.95
#: resamples of :func:`mean_ci`'s BCa bootstrap, and the size up to which it is used (CLT beyond)
MEAN_CI_RESAMPLES = 2000
BCA_MAX = 5000
#: values (resamples × sample size) of one vectorised call of :func:`bootstrap_ci`: bounds its memory (unbatched,
#: a BCa interval over 5 000 values held about 0.5 GB); an even number of resamples per call draws the same
#: stream, so the interval does not depend on it
BOOTSTRAP_VALUES = 1_000_000

NAN2 = (float("nan"), float("nan"))


def undefined(message: str) -> tuple[float, float]:
    """Warn that an interval is undefined (:class:`UndefinedMetricWarning`) and return ``(nan, nan)``."""
    warnings.warn(message, UndefinedMetricWarning, stacklevel=3)
    return NAN2


# ---------------------------------------------------------------------------------------------
# Replicates -> intervals
# ---------------------------------------------------------------------------------------------

def percentile_interval(replicates, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates (NaN replicates ignored)."""
    r = np.asarray(replicates, float)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return NAN2
    a = (1 - level) / 2
    lo, hi = np.quantile(r, [a, 1 - a])
    return float(lo), float(hi)


def basic_interval(estimate: float, replicates, level: float = DEFAULT_LEVEL,
                   bounds: tuple[float, float] = (-np.inf, np.inf)) -> tuple[float, float]:
    """Basic (reverse-percentile) bootstrap interval ``[2θ̂ − q_hi, 2θ̂ − q_lo]``, clipped to ``bounds``.

    Unlike the percentile interval it corrects first-order bias (Davison & Hinkley 1997, §5.2),
    which matters for eigenvalue-based statistics: resampling spreads the sample spectrum the
    same way sampling does, so the percentile interval would sit on the wrong side of the
    estimate. The interval need not contain the plug-in estimate when the bias is large; report
    :func:`bias_corrected` beside it.
    """
    lo, hi = percentile_interval(replicates, level)
    a, b = 2 * estimate - hi, 2 * estimate - lo
    return float(np.clip(a, *bounds)), float(np.clip(b, *bounds))


def bias_corrected(estimate: float, replicates, bounds: tuple[float, float] = (-np.inf, np.inf)) -> float:
    r"""Bootstrap bias-corrected estimate :math:`2\hat\theta - \bar\theta^*` (Efron & Tibshirani 1993, §10.6).

    The centre a basic interval is built around: shown beside the plug-in value wherever a
    basic interval may exclude it. NaN when no replicate is finite.
    """
    r = np.asarray(replicates, float)
    r = r[np.isfinite(r)]
    if r.size == 0 or not math.isfinite(estimate):
        return float("nan")
    return float(np.clip(2 * estimate - r.mean(), *bounds))


# ---------------------------------------------------------------------------------------------
# Resampling
# ---------------------------------------------------------------------------------------------

def weighted_bootstrap(statistic: Callable[[np.ndarray], np.ndarray | float], n_units: int, *,
                       n_boot: int = 200, seed: int = 0, batch: int = 0) -> np.ndarray:
    """Replicates of ``statistic(weights)`` for multinomial unit weights.

    ``weights`` has length ``n_units`` and sums to ``n_units`` (unit ``u`` drawn ``weights[u]``
    times), the classical nonparametric bootstrap over units (Efron & Tibshirani 1993, ch. 6).
    Units are rows, or random blocks of rows (a block bootstrap). Returns ``(n_boot, ...)``.

    ``batch`` > 0: ``statistic`` takes the weights of up to ``batch`` replicates at once, ``(r, n_units)``, and
    returns ``(r, ...)`` (a statistic vectorised over replicates); the same weights, drawn in the same order.
    """
    if batch <= 0:
        return np.array([statistic(w) for w in bootstrap_weights(n_units, n_boot, seed)])
    parts = [statistic(W) for W in _weight_batches(n_units, n_boot, seed, batch)]
    return np.concatenate(parts) if parts else np.array([])


def _weight_batches(n_units: int, n_boot: int, seed: int, rows: int):
    """:func:`bootstrap_weights` ``rows`` replicates at a time (one stream: the same weights however split)."""
    rng = np.random.default_rng(seed)
    p = np.full(n_units, 1.0 / n_units)
    for start in range(0, n_boot, rows):
        yield rng.multinomial(n_units, p, size=min(rows, n_boot - start)).astype(float).reshape(-1, n_units)


def bootstrap_weights(n_units: int, n_boot: int, seed: int = 0) -> np.ndarray:
    """The multinomial unit weights of :func:`weighted_bootstrap`'s replicates, one row per replicate
    ``(n_boot, n_units)``, for statistics computed for all replicates at once (e.g. on a GPU)."""
    return next(_weight_batches(n_units, n_boot, seed, n_boot)) if n_boot > 0 else np.empty((0, n_units))


def grouped_jackknife(statistic_without: Callable[[int], np.ndarray | float], n_groups: int) -> np.ndarray:
    """Delete-one-group jackknife replicates: ``statistic_without(g)`` for every group ``g``.

    The caller computes the statistic with group ``g`` left out (for moment statistics: the
    total moments minus the group's, one group in memory at a time). Returns ``(n_groups, ...)``.
    """
    return np.array([statistic_without(g) for g in range(n_groups)])


def jackknife_interval(estimate: float, leave_out, level: float = DEFAULT_LEVEL,
                       bounds: tuple[float, float] = (-np.inf, np.inf)) -> tuple[float, float]:
    r"""Normal interval with the jackknife standard error of ``G`` leave-one-out values.

    :math:`\widehat{\mathrm{se}}^2 = \frac{G-1}{G}\sum_g (\hat\theta_{(g)} - \bar\theta_{(\cdot)})^2`
    (Efron & Tibshirani 1993, ch. 11; delete-a-group form, Kott 2001), centred on ``estimate``.
    """
    loo = np.asarray(leave_out, float)
    loo = loo[np.isfinite(loo)]
    g = loo.size
    if g < 2 or not math.isfinite(estimate):
        return undefined("jackknife interval undefined: fewer than two finite leave-out values")
    se = math.sqrt((g - 1) / g * float(np.sum((loo - loo.mean()) ** 2)))
    lo, hi = normal_ci(estimate, se, level)
    return float(np.clip(lo, *bounds)), float(np.clip(hi, *bounds))


def bootstrap_ci(statistic: Callable, *samples, level: float = DEFAULT_LEVEL, n_boot: int = 1000,
                 seed: int = 0, method: str = "BCa", paired: bool = False) -> tuple[float, float]:
    """Bootstrap CI of ``statistic(*samples)`` via :func:`scipy.stats.bootstrap`.

    ``statistic`` must accept ``axis`` (vectorised), like ``np.mean``. Falls back to the
    percentile method when BCa is undefined (for example a constant sample).
    """
    data = tuple(np.asarray(s, float) for s in samples)
    if min(len(s) for s in data) < 2:
        return undefined("bootstrap interval undefined: fewer than two values")
    rng = np.random.default_rng(seed)
    kw = dict(confidence_level=level, n_resamples=n_boot, random_state=rng, paired=paired,
              vectorized=True)
    if len(data) == 1 or paired:  # one stream of draws: batches of an even size draw the same resamples
        kw["batch"] = max(2, 2 * (BOOTSTRAP_VALUES // (2 * len(data[0]))))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SciPy's DegenerateDataWarning: handled by the fallback
        try:
            res = stats.bootstrap(data, statistic, method=method, **kw)
            lo, hi = res.confidence_interval
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise ValueError
        except Exception:
            res = stats.bootstrap(data, statistic, method="percentile", **kw)
            lo, hi = res.confidence_interval
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return undefined("bootstrap interval undefined: the statistic is not finite on the resamples")
    return float(lo), float(hi)


def mean_ci(values, level: float = DEFAULT_LEVEL, *, seed: int = 0, units: str = "units"
            ) -> tuple[float, float, str]:
    """Interval of the mean of per-unit values, with the method in words.

    BCa bootstrap (:data:`MEAN_CI_RESAMPLES` resamples) up to :data:`BCA_MAX` values, the normal
    (CLT) interval mean ± z·sd/√n beyond; a constant sample gives the degenerate interval at its
    value. ``units`` names what the values are over ("test edges", "entities", ...).
    """
    x = np.asarray(values, float)
    if len(x) < 2:
        return (*undefined(f"the interval of a mean needs at least 2 {units}; there is {len(x)}"), "")
    if np.ptp(x) == 0:
        return float(x[0]), float(x[0]), "constant values: no spread to resample"
    if len(x) <= BCA_MAX:
        lo, hi = (_mean_bca(x, level, MEAN_CI_RESAMPLES, seed) if _BCA_STEPS_OF_THIS_SCIPY
                  else bootstrap_ci(np.mean, x, level=level, n_boot=MEAN_CI_RESAMPLES, seed=seed))
        return lo, hi, f"{level:.0%} BCa bootstrap over the {len(x):,} {units} ({MEAN_CI_RESAMPLES} resamples)"
    lo, hi = normal_ci(float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))), level)
    return lo, hi, f"{level:.0%} normal interval over the {len(x):,} {units} (mean ± z·sd/√n)"


#: :func:`_mean_bca` repeats the steps of SciPy 1.17's ``bootstrap``; with another SciPy, mean_ci calls SciPy's own
_BCA_STEPS_OF_THIS_SCIPY = scipy.__version__.split(".")[:2] == ["1", "17"]


def _mean_bca(x: np.ndarray, level: float, n_boot: int, seed: int) -> tuple[float, float]:
    """:func:`bootstrap_ci` of ``np.mean`` of ``x`` (BCa), bit for bit: the steps of :func:`scipy.stats.bootstrap`
    (SciPy 1.17: the same draws, batches, statistic and quantiles; tests/test_stats.py compares the two), but the
    jackknife's leave-one-out rows made by one selection per batch instead of an index array and a gather (the bulk
    of the interval's time at a few thousand values). Where BCa is undefined, SciPy's percentile interval from the
    same generator, as :func:`bootstrap_ci`."""
    from scipy.special import ndtr, ndtri

    n = len(x)
    rng = np.random.default_rng(seed)
    batch = max(2, 2 * (BOOTSTRAP_VALUES // (2 * n)))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theta_b = np.concatenate([np.mean(x[rng.integers(0, n, size=(min(batch, n_boot - k), n), dtype="int64")],
                                          axis=-1) for k in range(0, n_boot, batch)])
        alpha = (1 - level) / 2
        theta_hat = np.expand_dims(np.mean(x, axis=-1), axis=-1)
        z0 = ndtri((np.count_nonzero(theta_b < theta_hat, axis=-1) + np.count_nonzero(theta_b <= theta_hat, axis=-1))
                   .astype(theta_hat.dtype) / (2 * n_boot))
        cols = np.arange(n - 1)
        theta_i = np.concatenate([np.mean(np.where(cols < np.arange(k, min(k + batch, n))[:, None], x[:-1], x[1:]),
                                          axis=-1) for k in range(0, n, batch)])
        U = (n - 1.0) * (np.mean(theta_i, axis=-1, keepdims=True) - theta_i)
        a_hat = 1 / 6 * (np.sum(U**3, axis=-1) / float(n)**3) / (np.sum(U**2, axis=-1) / float(n)**2)**(3 / 2)
        z_alpha = float(ndtri(alpha))
        num1, num2 = z0 + z_alpha, z0 - z_alpha
        interval = np.stack((ndtr(z0 + num1 / (1 - a_hat * num1)), ndtr(z0 + num2 / (1 - a_hat * num2))), axis=-1)
        lo, hi = stats.quantile(theta_b, interval, axis=-1)
        if not (np.isfinite(lo) and np.isfinite(hi)):
            res = stats.bootstrap((x,), np.mean, method="percentile", confidence_level=level, n_resamples=n_boot,
                                  random_state=rng, paired=False, vectorized=True, batch=batch)
            lo, hi = res.confidence_interval
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return undefined("bootstrap interval undefined: the statistic is not finite on the resamples")
    return float(lo), float(hi)


# ---------------------------------------------------------------------------------------------
# Resampling plans for statistics of row moments (isotropy, collapse, stability)
# ---------------------------------------------------------------------------------------------

#: memory allowed for per-block d x d moment matrices; below MIN_BLOCKS blocks the jackknife is used
RESAMPLING_BYTES = 512 * 2**20
MAX_BLOCKS = 64
MIN_BLOCKS = 20


@dataclass(frozen=True)
class ResamplingPlan:
    """How intervals of a moment statistic are obtained for a set of ``n`` rows in ``d`` dimensions.

    ``method``: ``"bootstrap"`` over ``units`` random row blocks (their d x d moments fit in
    memory), ``"jackknife"`` deleting one of ``units`` random groups at a time (when they do not:
    one group's moments in memory at a time), or ``"none"`` (``reason`` says why).
    """

    method: str
    units: int
    n_boot: int
    reason: str = ""

    @classmethod
    def choose(cls, n: int, d: int, n_boot: int, *, moment_sets: int = 2, budget: int | None = None
               ) -> "ResamplingPlan":
        """The plan for ``moment_sets`` d x d moment matrices per block within ``budget`` bytes
        (default :data:`RESAMPLING_BYTES`)."""
        budget = (current().share("resampling") or RESAMPLING_BYTES) if budget is None else budget
        if n_boot <= 0:
            return cls("none", 1, 0, "intervals not requested")
        if n < 3:
            return cls("none", 1, 0, f"{n} rows are too few for any interval")
        blocks = int(min(MAX_BLOCKS, n, budget // (moment_sets * 8 * d * d)))
        if blocks >= MIN_BLOCKS:
            return cls("bootstrap", blocks, n_boot)
        return cls("jackknife", int(min(MIN_BLOCKS, n)), 0)

    @property
    def active(self) -> bool:
        return self.method != "none"

    def weights(self, g: int) -> np.ndarray:
        """Leave-group-``g``-out unit weights (jackknife)."""
        w = np.ones(self.units)
        w[g] = 0.0
        return w

    def replicates(self, statistic: Callable[[np.ndarray | None], np.ndarray], *, seed: int = 0) -> np.ndarray:
        """``statistic(unit weights)`` per bootstrap resample or jackknife deletion, shape ``(R, ...)``."""
        if self.method == "bootstrap":
            return weighted_bootstrap(statistic, self.units, n_boot=self.n_boot, seed=seed)
        if self.method == "jackknife":
            return grouped_jackknife(lambda g: statistic(self.weights(g)), self.units)
        raise ValueError(f"no replicates: {self.reason}")

    def interval(self, estimate: float, replicates, level: float = DEFAULT_LEVEL,
                 bounds: tuple[float, float] = (-np.inf, np.inf), kind: str = "basic") -> tuple[float, float]:
        """Basic (or ``kind="percentile"``) bootstrap interval, or the jackknife normal interval."""
        if self.method == "jackknife":
            return jackknife_interval(estimate, replicates, level, bounds)
        if kind == "percentile":
            return percentile_interval(replicates, level)
        return basic_interval(estimate, replicates, level, bounds)

    def bias_corrected(self, estimate: float, replicates, bounds: tuple[float, float] = (-np.inf, np.inf)) -> float:
        """Bootstrap bias-corrected estimate, or the jackknife's (Quenouille) ``Gθ̂ − (G−1) mean θ̂_(g)``."""
        if self.method == "jackknife":
            r = np.asarray(replicates, float)
            r = r[np.isfinite(r)]
            if r.size < 2 or not math.isfinite(estimate):
                return float("nan")
            return float(np.clip(r.size * estimate - (r.size - 1) * r.mean(), *bounds))
        return bias_corrected(estimate, replicates, bounds)

    def describe(self, level: float = DEFAULT_LEVEL, *, percentile_for: str = "") -> str:
        """The interval method in words, for captions and ``ci_method``."""
        if self.method == "bootstrap":
            extra = f" (percentile for {percentile_for})" if percentile_for else ""
            return f"{level:.0%} basic bootstrap{extra}, {self.n_boot} resamples of {self.units} random row blocks"
        if self.method == "jackknife":
            return (f"{level:.0%} normal interval, delete-a-group jackknife over {self.units} random row groups "
                    "(the per-block moments of a bootstrap would not fit in memory)")
        return ""


class PlannedIntervals:
    """Mixin for a result with a ``plan: ResamplingPlan`` field: ``n_blocks`` (row blocks of a
    bootstrap, or groups of a jackknife) and ``n_boot`` (bootstrap resamples; 0 otherwise)."""

    @property
    def n_blocks(self) -> int:
        return self.plan.units

    @property
    def n_boot(self) -> int:
        return self.plan.n_boot


# ---------------------------------------------------------------------------------------------
# Analytic intervals
# ---------------------------------------------------------------------------------------------

def weighted_pearson(x, y, W) -> np.ndarray:
    """Pearson's r of ``x`` and ``y`` under each row of unit weights ``W`` (draws × units: the r of the sample that
    holds unit i ``W[k, i]`` times); ``x``, ``y`` one value per unit, or one row per draw. NaN where a side is
    constant."""
    W = np.asarray(W, float)
    total, held = W.sum(1, keepdims=True), W > 0
    x, y = (np.broadcast_to(np.asarray(v, float), W.shape) for v in (x, y))
    constant = np.zeros(len(W), bool)
    for v in (x, y):
        constant |= np.where(held, v, np.inf).min(1) == np.where(held, v, -np.inf).max(1)
    dx = x - (W * x).sum(1, keepdims=True) / total
    dy = y - (W * y).sum(1, keepdims=True) / total
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (W * dx * dy).sum(1) / np.sqrt((W * dx * dx).sum(1) * (W * dy * dy).sum(1))
    return np.where(constant, np.nan, r)


def weighted_ranks(x, W) -> np.ndarray:
    """The rank of each unit's ``x`` in each draw of unit weights ``W`` (draws × units): what ``rankdata`` gives
    its copies in the sample that holds unit i ``W[k, i]`` times (tied values share their mean rank)."""
    x, W = np.asarray(x, float), np.asarray(W, float)
    order = np.argsort(x, kind="stable")
    new = np.r_[True, np.diff(x[order]) != 0]  # the first unit of each run of tied values
    group = np.add.reduceat(W[:, order], np.flatnonzero(new), axis=1)
    mean_rank = np.cumsum(group, axis=1) - group + (group + 1) / 2
    ranks = np.empty_like(W)
    ranks[:, order] = mean_rank[:, np.cumsum(new) - 1]
    return ranks


def weighted_spearman(x, y, W) -> np.ndarray:
    """Spearman's ρ of ``x`` and ``y`` under each row of unit weights ``W`` (:func:`weighted_ranks`,
    :func:`weighted_pearson`): the ρ of each bootstrap sample, all at once."""
    return weighted_pearson(weighted_ranks(x, W), weighted_ranks(y, W), W)


def normal_ci(estimate: float, std_error: float, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Analytic normal-approximation interval ``estimate ± z * std_error``."""
    z = stats.norm.ppf(0.5 + level / 2)
    return float(estimate - z * std_error), float(estimate + z * std_error)


def t_interval(values, level: float = DEFAULT_LEVEL, bounds=(0.0, 1.0)) -> tuple[float, float]:
    """Student-t interval of the mean of ``values``: mean ± t_{k−1} sd/√k (clipped to ``bounds``)."""
    v = np.asarray(values, float)
    k = len(v)
    if k < 2:
        return undefined(f"t interval undefined for {k} value(s)")
    half = stats.t.ppf(0.5 + level / 2, k - 1) * v.std(ddof=1) / math.sqrt(k)
    return float(np.clip(v.mean() - half, *bounds)), float(np.clip(v.mean() + half, *bounds))


def wilson_ci(successes: int, n: int, level: float = DEFAULT_LEVEL) -> tuple[float | None, float | None]:
    """Wilson score interval for a proportion (statsmodels ``proportion_confint``); ``None`` if n = 0."""
    from statsmodels.stats.proportion import proportion_confint

    if n <= 0:
        return None, None
    lo, hi = proportion_confint(successes, n, alpha=1 - level, method="wilson")
    # exact 0 / 1 at the ends (statsmodels leaves rounding residue such as 1e-17)
    return (0.0 if successes == 0 else float(lo)), (1.0 if successes == n else float(hi))


def cohens_d_ci(d: float, n1: int, n2: int, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Normal interval of Cohen's d with the large-sample standard error of Hedges & Olkin (1985):
    :math:`\\sqrt{(n_1 + n_2)/(n_1 n_2) + d^2 / (2(n_1 + n_2))}`."""
    se = math.sqrt((n1 + n2) / (n1 * n2) + d * d / (2 * (n1 + n2)))
    return normal_ci(d, se, level)


def hanley_mcneil_se(auc: float, n_pos: int, n_neg: int) -> float:
    r"""Standard error of an AUC (Hanley & McNeil 1982, eq. 2):

    .. math:: \mathrm{SE}^2 = \frac{A(1-A) + (n_1 - 1)(Q_1 - A^2) + (n_0 - 1)(Q_2 - A^2)}{n_1 n_0},
       \quad Q_1 = \frac{A}{2-A},\ Q_2 = \frac{2A^2}{1+A}.

    At A = 0.5 it equals the exact null variance of the Mann–Whitney AUC, :math:`(n_1+n_0+1)/(12 n_1 n_0)`.
    """
    A = float(auc)
    q1, q2 = A / (2 - A), 2 * A * A / (1 + A)
    var = (A * (1 - A) + (n_pos - 1) * (q1 - A * A) + (n_neg - 1) * (q2 - A * A)) / (n_pos * n_neg)
    return math.sqrt(max(var, 0.0))


def delong_paired(a, b, y) -> tuple[float, float, float]:
    r"""DeLong, DeLong & Clarke-Pearson's (1988) test of two correlated ROC-AUCs (two detectors' scores ``a`` and
    ``b`` of the same rows, labels ``y`` 1/0): ``(A_a - A_b, z, two-sided p)``.

    Per detector the placement values :math:`V_{10}(x_i) = \tfrac1N\sum_j \psi(x_i, y_j)` of the P positives and
    :math:`V_{01}(y_j) = \tfrac1P\sum_i \psi(x_i, y_j)` of the N negatives (:math:`\psi` = 1, ½, 0 for >, =, <),
    computed from midranks (Sun & Xu 2014); :math:`S = S_{10}/P + S_{01}/N` from their covariances over the
    rows, :math:`z = (A_a - A_b)/\sqrt{S_{aa} + S_{bb} - 2 S_{ab}}`. Two identical rankings: difference 0, p 1;
    fewer than two positives or negatives: NaN."""
    y = np.asarray(y, float)
    pos, neg = y == 1, y == 0
    P, N = int(pos.sum()), int(neg.sum())
    if P < 2 or N < 2:
        return float("nan"), float("nan"), float("nan")
    v10, v01 = [], []
    for s in (np.asarray(a, float), np.asarray(b, float)):
        both = stats.rankdata(np.concatenate([s[pos], s[neg]]))
        v10.append((both[:P] - stats.rankdata(s[pos])) / N)            # share of negatives below each positive
        v01.append(1.0 - (both[P:] - stats.rankdata(s[neg])) / P)      # share of positives above each negative
    auc = [float(v.mean()) for v in v10]
    S = np.cov(np.vstack(v10)) / P + np.cov(np.vstack(v01)) / N
    var = float(S[0, 0] + S[1, 1] - 2 * S[0, 1])
    diff = auc[0] - auc[1]
    if var <= 1e-15:
        return diff, (0.0 if abs(diff) < 1e-12 else math.copysign(math.inf, diff)), (1.0 if abs(diff) < 1e-12 else 0.0)
    z = diff / math.sqrt(var)
    return diff, z, float(2 * stats.norm.sf(abs(z)))


# ---------------------------------------------------------------------------------------------
# Multiple testing
# ---------------------------------------------------------------------------------------------

#: names accepted by :func:`adjust_pvalues`, as statsmodels calls them
CORRECTIONS = {"holm": "holm", "bh": "fdr_bh", "fdr_bh": "fdr_bh", "bonferroni": "bonferroni"}


def adjust_pvalues(p_values, method: str = "holm", alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """``(rejected, adjusted p-values)`` through :func:`statsmodels.stats.multitest.multipletests`.

    ``method``: ``"holm"`` (family-wise error, Holm 1979) or ``"bh"`` (false discovery rate,
    Benjamini & Hochberg 1995); NaN p-values are left out and stay NaN.
    """
    from statsmodels.stats.multitest import multipletests

    if method not in CORRECTIONS:
        raise ValueError(f"method must be one of {', '.join(CORRECTIONS)}, not {method!r}")
    p = np.asarray(p_values, float)
    reject, adjusted = np.zeros(p.shape, bool), np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        # statsmodels' Holm runs gc.collect() on every call (0.1-0.5 s over a large heap, with nothing to free):
        # the heap is frozen meanwhile, unless the caller has frozen objects of its own
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            r, a, _, _ = multipletests(p[ok], alpha=alpha, method=CORRECTIONS[method])
        finally:
            if freeze:
                gc.unfreeze()
        reject[ok], adjusted[ok] = r, a
    return reject, adjusted


@dataclass(frozen=True)
class HypothesisTest:
    """One hypothesis test a chapter ran, recorded (``ctx.rec.test(...)``) so the rigor chapter can adjust
    every p-value of the report together (Holm and Benjamini–Hochberg across all chapters).

    ``name`` is unique within the chapter (``"mmd: snapshot 2"``); ``test`` names the test and its
    sidedness (``"Mann–Whitney U, one-sided (greater)"``); ``null`` states the null hypothesis in words;
    ``n`` the sample sizes in words (``"500 + 500 rows"``); ``family`` groups many tests of one question
    (``"per-dimension KS, snapshot 2"``) so the report can summarise them.
    """

    name: str
    test: str
    p_value: float
    statistic: float | None = None
    n: str = ""
    null: str = ""
    family: str = ""

    def __post_init__(self):
        p = float(self.p_value)
        if not (math.isnan(p) or 0.0 <= p <= 1.0):
            raise ValueError(f"test {self.name}: p-value must lie in [0, 1], not {p}")

    def to_record(self) -> dict:
        """The JSON record (``results/<chapter>.json`` under ``"tests"``); NaN becomes ``None``."""
        def num(x):
            return None if x is None or not math.isfinite(float(x)) else float(x)

        return dict(name=self.name, test=self.test, p_value=num(self.p_value), statistic=num(self.statistic),
                    n=self.n, null=self.null, family=self.family)


#: the test whose power :func:`minimum_detectable_effect` and :func:`required_units` state
POWER_TEST = "two-sided one-sample (paired) t-test, statsmodels TTestPower"


def _power_inputs(sd: float, alpha: float, power: float) -> float:
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must lie in (0, 1), not {alpha} and {power}")
    if not np.isfinite(sd) or sd < 0:
        raise ValueError(f"sd must be a finite non-negative number, not {sd}")
    return float(sd)


def minimum_detectable_effect(sd: float, n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true shift of a mean over ``n`` units (or of ``n`` paired differences) with standard
    deviation ``sd`` that a two-sided one-sample t-test at level ``alpha`` detects with probability
    ``power``: ``d · sd`` with Cohen's d_z solved by statsmodels ``TTestPower``.

    For large n this is the familiar (z₁₋α/₂ + z_power) · sd / √n; the t form is exact for normal
    units and slightly larger for small n. (Seed 001 §21.5.1 writes the two-sample z form with 2 σ²/n;
    a mean over one set of units, or a paired comparison, is one-sample.) NaN, with an
    :class:`UndefinedMetricWarning`, for fewer than two units; 0 when ``sd`` is 0.
    """
    from statsmodels.stats.power import TTestPower

    sd = _power_inputs(sd, alpha, power)
    if n < 2:
        warnings.warn(f"a minimum detectable effect needs at least 2 units, got {n}", UndefinedMetricWarning,
                      stacklevel=2)
        return float("nan")
    if sd == 0:
        return 0.0
    d = TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power, alternative="two-sided")
    return float(np.ravel(d)[0]) * sd  # statsmodels returns a scalar or a 1-element array, by solver path


def required_units(effect: float, sd: float, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """Units (or pairs) a two-sided one-sample t-test needs to detect a true shift ``effect`` of a mean
    whose units have standard deviation ``sd`` with probability ``power`` at level ``alpha``
    (statsmodels ``TTestPower``, rounded up; at least 2). ``effect`` is in the metric's units."""
    from statsmodels.stats.power import TTestPower

    sd = _power_inputs(sd, alpha, power)
    if not np.isfinite(effect) or effect == 0:
        raise ValueError(f"effect must be a finite non-zero shift, not {effect}")
    if sd == 0:
        return 2
    test, d = TTestPower(), abs(effect) / sd
    enough = lambda n: test.power(d, n, alpha, alternative="two-sided") >= power - 1e-9  # noqa: E731
    if d > 1e6 or enough(2):  # a large effect against a small (or rounding-noise) spread: two units already have
        return 2              # the power (statsmodels' root finder returns NaN there)
    n = float(np.ravel(test.solve_power(effect_size=d, nobs=None, alpha=alpha, power=power,
                                        alternative="two-sided"))[0])
    if not np.isfinite(n):  # no root found: the smallest whole n with the power, by doubling and bisection
        hi = 4
        while not enough(hi):
            if hi > 2**40:
                raise ValueError(f"no sample size reaches power {power} for effect {effect} and sd {sd}")
            hi *= 2
        lo = hi // 2
        while hi - lo > 1:
            lo, hi = (lo, (lo + hi) // 2) if enough((lo + hi) // 2) else ((lo + hi) // 2, hi)
        return hi
    low = max(2, math.floor(n))  # the root is found to a tolerance: the smallest whole n that has the power
    return low if enough(low) else low + 1
