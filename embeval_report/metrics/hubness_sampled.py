r"""Hubness of a set too large for its exact k-NN graph: the k-occurrence skewness from sampled queries.

Every point's k nearest neighbours are exact, but only for ``m`` queries drawn without
replacement from the ``n`` points (seeded), each searched against the full corpus. With
:math:`c_x` the number of sampled lists that contain :math:`x`, the power sums of the k-occurrence
:math:`N_k(x) = \sum_q a_{qx}` over all n lists are estimated without bias by falling factorials
(sampling without replacement keeps an ordered pair of distinct queries with probability
:math:`m^{\underline 2}/n^{\underline 2}`, a triple with :math:`m^{\underline 3}/n^{\underline 3}`):

.. math::
    \sum_x N_k(x) = nk, \quad
    \widehat{\textstyle\sum_x N_k(x)^2} = nk + \tfrac{n^{\underline 2}}{m^{\underline 2}} \textstyle\sum_x c_x^{\underline 2},
    \quad
    \widehat{\textstyle\sum_x N_k(x)^3} = nk + 3\tfrac{n^{\underline 2}}{m^{\underline 2}} \textstyle\sum_x c_x^{\underline 2}
    + \tfrac{n^{\underline 3}}{m^{\underline 3}} \textstyle\sum_x c_x^{\underline 3},

and the skewness :math:`S_{N_k} = \mu_3/\sigma^3` (population moments, as the exact chapter) is
the plug-in of these sums (a ratio estimator: consistent, bias of order 1/m). Its interval is the
delete-a-group jackknife over :data:`GROUPS` random groups of the sampled queries (Kott 2001),
with the finite-population factor :math:`1 - m/n`. The measures that need every point's
:math:`N_k` (Robin Hood, Gini, hub and antihub occurrence) have no such estimator and are not
reported from a sample.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..kernels import as_numpy, resolve_device
from ..kernels.neighbours import query_lists
from ..stats import DEFAULT_LEVEL, jackknife_interval
from .hubness_measures import check_k

#: groups of sampled queries for the jackknife interval
GROUPS = 20


@dataclass(frozen=True)
class SampledSkewness:
    """The k-occurrence skewness estimated from ``m`` sampled queries of ``n``."""

    value: float
    ci: tuple[float, float]
    n: int
    m: int
    k: int
    counts: np.ndarray     # c_x: how many sampled lists contain each point (length n)
    queries: np.ndarray    # the sampled query rows

    @property
    def method(self) -> str:
        return (f"estimated from {self.m:,} of {self.n:,} queries (seeded, without replacement) against the full set: "
                f"unbiased power sums of N_k, jackknife over {GROUPS} query groups with finite-population factor")


def _skewness(counts: np.ndarray, n: int, m: int, k: int) -> float:
    """Plug-in skewness of N_k from the sampled counts (see the module docstring)."""
    c = counts.astype(np.float64)
    f2, f3 = float((c * (c - 1)).sum()), float((c * (c - 1) * (c - 2)).sum())
    p2 = f2 * n * (n - 1) / (m * (m - 1))
    p3 = f3 * n * (n - 1) * (n - 2) / (m * (m - 1) * (m - 2))
    s2, s3 = n * k + p2, n * k + 3 * p2 + p3
    var = s2 / n - k * k
    mu3 = s3 / n - 3 * k * s2 / n + 2 * k ** 3
    return mu3 / var ** 1.5 if var > 0 else float("nan")


def sampled_lists(X, k: int, queries: np.ndarray, *, device="auto") -> np.ndarray:
    """The exact k nearest neighbours (cosine, self excluded) of the rows ``queries`` among all rows."""
    return query_lists(X, queries, k, device=resolve_device(device), desc="k-NN (sampled queries)")


def sample_queries(n: int, m: int, seed: int) -> np.ndarray:
    """``m`` distinct query rows of ``n``, seeded, in increasing order."""
    if not 3 <= m < n:
        raise ValueError(f"sampled hubness needs 3 <= m < n queries; got m = {m} for n = {n}")
    return np.sort(np.random.default_rng(seed).choice(n, m, replace=False))


def sampled_skewness(X, k: int, m: int, *, level: float = DEFAULT_LEVEL, seed: int = 0,
                     device="auto") -> SampledSkewness:
    """k-occurrence skewness of ``X`` from ``m`` sampled queries, with its jackknife interval.

    Needs ``3 <= m < n``; cost m x n x d instead of n x n x d. Examples
    --------
    >>> X = np.random.default_rng(0).standard_normal((3000, 30)) + 0.5
    >>> r = sampled_skewness(X, 10, 600)
    >>> r.ci[0] < r.value < r.ci[1]
    True
    """
    X = as_numpy(X)
    n = len(X)
    k = check_k(k, n - 1)
    queries = sample_queries(n, m, seed)
    lists = sampled_lists(X, k, queries, device=resolve_device(device))
    value, ci, counts = skewness_with_interval(lists, n, level=level, seed=seed)
    return SampledSkewness(value, ci, n, m, k, counts, queries)


def skewness_with_interval(lists: np.ndarray, n: int, *, level: float = DEFAULT_LEVEL, seed: int = 0
                           ) -> tuple[float, tuple[float, float], np.ndarray]:
    """The skewness estimate from the exact k-NN ``lists`` of ``m`` sampled queries among ``n`` points, its
    delete-a-group jackknife interval with the finite-population factor, and the counts :math:`c_x`."""
    m, k = lists.shape
    counts = np.bincount(lists.ravel(), minlength=n)
    value = _skewness(counts, n, m, k)
    group = np.random.default_rng(seed + 1).permutation(m) % min(GROUPS, m)
    loo = []
    for g in range(group.max() + 1):
        out = lists[group == g]
        rest = counts - np.bincount(out.ravel(), minlength=n)
        loo.append(_skewness(rest, n, m - len(out), k))
    lo, hi = jackknife_interval(value, loo, level)
    if math.isfinite(lo):  # finite-population correction of the jackknife standard error
        half = math.sqrt(1 - m / n)
        lo, hi = value - (value - lo) * half, value + (hi - value) * half
    return value, (lo, hi), counts
