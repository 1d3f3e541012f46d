"""Uncertainty: bootstrap and analytic confidence intervals.

Two bootstrap forms cover the package:

* :func:`bootstrap_ci` — SciPy's BCa bootstrap of a statistic of one or more samples
  (``scipy.stats.bootstrap``), for per-item scores such as per-query metrics.
* :func:`weighted_bootstrap` — resampling of *units* (rows, or random blocks of rows) through
  multinomial count weights, for statistics computed from per-unit sufficient statistics
  (moment matrices), where re-running the statistic on resampled data would be too costly.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from scipy import stats

DEFAULT_LEVEL = 0.95


def percentile_interval(replicates, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates (NaN replicates ignored)."""
    r = np.asarray(replicates, float)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return float("nan"), float("nan")
    a = (1 - level) / 2
    lo, hi = np.quantile(r, [a, 1 - a])
    return float(lo), float(hi)


def basic_interval(estimate: float, replicates, level: float = DEFAULT_LEVEL,
                   bounds: tuple[float, float] = (-np.inf, np.inf)) -> tuple[float, float]:
    """Basic (reverse-percentile) bootstrap interval ``[2θ̂ − q_hi, 2θ̂ − q_lo]``, clipped to ``bounds``.

    Unlike the percentile interval it corrects first-order bias (Davison & Hinkley 1997, §5.2),
    which matters for eigenvalue-based statistics: resampling spreads the sample spectrum the
    same way sampling does, so the percentile interval would sit on the wrong side of the
    estimate. The interval need not contain the plug-in estimate when the bias is large.
    """
    lo, hi = percentile_interval(replicates, level)
    a, b = 2 * estimate - hi, 2 * estimate - lo
    return float(np.clip(a, *bounds)), float(np.clip(b, *bounds))


def weighted_bootstrap(statistic: Callable[[np.ndarray], np.ndarray | float], n_units: int, *,
                       n_boot: int = 200, seed: int = 0) -> np.ndarray:
    """Replicates of ``statistic(weights)`` for multinomial unit weights.

    ``weights`` has length ``n_units`` and sums to ``n_units`` (unit ``u`` drawn ``weights[u]``
    times), the classical nonparametric bootstrap over units (Efron & Tibshirani 1993, ch. 6).
    Returns an array of shape ``(n_boot, ...)``.
    """
    rng = np.random.default_rng(seed)
    p = np.full(n_units, 1.0 / n_units)
    return np.array([statistic(rng.multinomial(n_units, p).astype(float)) for _ in range(n_boot)])


def bootstrap_ci(statistic: Callable, *samples, level: float = DEFAULT_LEVEL, n_boot: int = 1000,
                 seed: int = 0, method: str = "BCa", paired: bool = False) -> tuple[float, float]:
    """Bootstrap CI of ``statistic(*samples)`` via :func:`scipy.stats.bootstrap`.

    ``statistic`` must accept ``axis`` (vectorised), like ``np.mean``. Falls back to the
    percentile method when BCa is undefined (for example a constant sample).
    """
    data = tuple(np.asarray(s, float) for s in samples)
    if min(len(s) for s in data) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    kw = dict(confidence_level=level, n_resamples=n_boot, random_state=rng, paired=paired,
              vectorized=True)
    with np.errstate(all="ignore"):
        try:
            res = stats.bootstrap(data, statistic, method=method, **kw)
            lo, hi = res.confidence_interval
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise ValueError
        except Exception:
            res = stats.bootstrap(data, statistic, method="percentile", **kw)
            lo, hi = res.confidence_interval
    return float(lo), float(hi)


def normal_ci(estimate: float, std_error: float, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Analytic normal-approximation interval ``estimate ± z * std_error``."""
    z = stats.norm.ppf(0.5 + level / 2)
    return float(estimate - z * std_error), float(estimate + z * std_error)
