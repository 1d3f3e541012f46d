r"""The k-occurrence :math:`N_k` and the hubness measures computed from it, with their bootstrap.

Seed 000 §217.1 (the k-occurrence, its skewness and the bands of ``diagnose_hubness``) with the
standard measures of scikit-hubness (``skhubness/analysis/estimation.py``, ``Hubness.score``; the
same code lives on in kiez's ``kiez/analysis/estimation.py``); see :mod:`.hubness` for the
definitions. Every measure is a function of the histogram of :math:`N_k`
(:func:`histogram_measures`), which makes the bootstrap cheap at any n.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..kernels import neighbour_sets_overlap
from ..kernels.neighbours import usable_k  # noqa: F401  (the one clip of k: hubness.usable_k)
from .spec import MetricSpec, specs
from .thresholds import THRESHOLDS

K_DEFAULT = 10
#: scikit-hubness default: a hub has N_k >= hub_size * k
HUB_SIZE = 2.0
SKHUBNESS = "scikit-hubness Hubness.score"

SPECS = specs(
    MetricSpec("k_occurrence_skewness", "k-occurrence skewness", "lower",
               r"S_{N_k} = \mathbb{E}[(N_k - \mu_{N_k})^3] / \sigma_{N_k}^3",
               "Radovanović et al. 2010; seed 000 §217.1.1; verdict: diagnose_hubness bands (seed 000 line 619)",
               bands=THRESHOLDS["k_occurrence_skewness"]),
    MetricSpec("robin_hood_index", "Robin Hood index", "lower",
               r"H = \tfrac12 \sum_x |N_k(x) - \bar N_k| \,/\, \sum_x N_k(x)",
               f"Feldbauer et al. 2018; {SKHUBNESS}; seed 000 compute_hubness_metrics", range=(0.0, 1.0)),
    MetricSpec("k_occurrence_gini", "Gini index of N_k", "lower",
               r"G = \sum_{x,y} |N_k(x) - N_k(y)| \,/\, (2n \sum_x N_k(x))",
               f"Feldbauer & Flexer 2019; {SKHUBNESS}", range=(0.0, 1.0)),
    MetricSpec("hub_occurrence", "Hub occurrence", "lower", r"\sum_{x: N_k(x) \ge 2k} N_k(x) \,/\, (nk)",
               f"Feldbauer et al. 2018; {SKHUBNESS}, hub_size = 2", range=(0.0, 1.0)),
    MetricSpec("antihub_occurrence", "Antihub occurrence", "lower", r"|\{x : N_k(x) = 0\}| \,/\, n",
               f"Feldbauer et al. 2018; {SKHUBNESS}", range=(0.0, 1.0)),
    MetricSpec("hub_fraction_2sd", "Hub fraction (seed rule k + 2 sd)", "lower",
               r"|\{x : N_k(x) > k + 2\,\mathrm{sd}(N_k)\}| \,/\, n", "seed 000 compute_hubness_metrics (line 619)",
               range=(0.0, 1.0)),
)

#: the pre-0.1 view ``name -> (label, direction, formula, reference, threshold quantity or None)``, derived from
#: :data:`SPECS` for old imports (``embeval_report.hubness.METRICS``)
METRICS = {s.name: (s.label, s.direction, s.formula, s.reference, s.name if s.bands else None) for s in SPECS.values()}


def k_occurrence(neighbors, n: int) -> np.ndarray:
    """:math:`N_k(x)` for ``x = 0..n-1``: how often each index appears in the rows of ``neighbors``.

    ``neighbors`` is an (m, k) integer array of neighbour lists (negative entries, "no neighbour",
    are ignored, as scikit-hubness does for incomplete approximate lists).
    """
    nb = np.asarray(neighbors).ravel()
    nb = nb[nb >= 0]
    if nb.size and nb.max() >= n:
        raise ValueError(f"neighbour index {int(nb.max())} out of range for {n} points")
    return np.bincount(nb, minlength=n).astype(np.int64)


def histogram_measures(values, counts, k: int, hub_size: float = HUB_SIZE) -> dict[str, np.ndarray]:
    """Every hubness measure from the histogram of :math:`N_k` (vectorised over histograms).

    Parameters
    ----------
    values : (m,) distinct k-occurrence values, ascending
    counts : (m,) or (B, m) how many points have each value (B histograms, e.g. bootstrap replicates)
    k, hub_size : neighbourhood size; hubs have ``N_k >= hub_size * k``

    Returns arrays of shape (B,) (or scalars for 1-D ``counts``) named as :data:`SPECS`, plus
    ``max_k_occurrence``. ``hub_occurrence`` is computed as :math:`\\sum_{hubs} N_k / \\sum_x N_k`, which
    equals scikit-hubness's :math:`\\sum_{hubs} N_k / (k\\,n_{queries})` on a complete k-NN graph and
    stays a share for a resampled histogram.
    """
    v = np.asarray(values, float)
    C = np.asarray(counts, float)
    single = C.ndim == 1
    C = np.atleast_2d(C)
    n = C.sum(1)
    total = C @ v
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = total / n
        c = v[None, :] - mean[:, None]
        m2 = (C * c * c).sum(1) / n
        m3 = (C * c ** 3).sum(1) / n
        skew = np.where(m2 > 0, m3 / np.where(m2 > 0, m2, 1.0) ** 1.5, np.nan)
        robin = 0.5 * (C * np.abs(c)).sum(1) / total
        # sum over ordered pairs of |v_a - v_b| in O(m): for each value, the mass and sum of the values below it
        below = np.cumsum(C, 1) - C
        below_sum = np.cumsum(C * v, 1) - C * v
        gini = (C * (v * below - below_sum)).sum(1) / (n * total)
        hub = (C * v * (v >= hub_size * k)).sum(1) / total
        anti = (C * (v == 0)).sum(1) / n
        sd = np.sqrt(m2)
        frac2sd = (C * (v[None, :] > (mean + 2 * sd)[:, None])).sum(1) / n
    vmax = np.array([v[np.flatnonzero(row)[-1]] if row.any() else np.nan for row in C])
    out = {"k_occurrence_skewness": skew, "robin_hood_index": robin, "k_occurrence_gini": gini,
           "hub_occurrence": hub, "antihub_occurrence": anti, "hub_fraction_2sd": frac2sd,
           "max_k_occurrence": vmax}
    return {name: (float(x[0]) if single else x) for name, x in out.items()}


def occurrence_measures(nk, k: int, hub_size: float = HUB_SIZE) -> dict[str, float]:
    """The hubness measures of one k-occurrence vector (see :func:`histogram_measures`).

    Examples
    --------
    >>> m = occurrence_measures([0, 0, 1, 2, 7], k=2)
    >>> m["robin_hood_index"], m["k_occurrence_gini"], m["antihub_occurrence"], m["hub_occurrence"]
    (0.5, 0.64, 0.4, 0.7)
    """
    values, counts = np.unique(np.asarray(nk, dtype=np.int64), return_counts=True)
    return histogram_measures(values, counts, k, hub_size)


def histogram_bootstrap(values, counts, statistic, *, n_boot: int = 1000, level: float = 0.95, seed: int = 0,
                        method: str = "BCa") -> dict[str, tuple[float, float]]:
    r"""Bootstrap intervals of statistics of a histogram, resampling the *points* it counts.

    Resampling n points with replacement is drawing the histogram from
    :math:`\mathrm{Multinomial}(n, \text{counts}/n)`, so a replicate costs O(distinct values), not O(n).
    ``statistic(values, C)`` maps histograms ``C`` (B, m) to ``{name: (B,) array}``. ``method="BCa"``
    gives Efron's bias-corrected and accelerated interval (Efron & Tibshirani 1993, §14.3), as
    :func:`scipy.stats.bootstrap` computes it: bias correction from the share of replicates below the
    estimate (ties count half), acceleration from the jackknife, which for a histogram has one
    leave-one-out value per distinct value, weighted by its count. Falls back to the percentile
    interval where BCa is undefined (all replicates on one side). ``method="percentile"`` skips it.
    """
    values = np.asarray(values)
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    rng = np.random.default_rng(seed)
    reps = statistic(values, rng.multinomial(n, counts / n, size=n_boot))
    est = statistic(values, counts[None, :])
    jack = statistic(values, counts[None, :] - np.eye(len(values), dtype=np.int64)) if method == "BCa" else None
    out = {}
    for name, theta in reps.items():
        theta = theta[np.isfinite(theta)]
        t0 = float(est[name][0])
        if theta.size < 2 or not np.isfinite(t0):
            out[name] = (float("nan"), float("nan"))
            continue
        lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
        if method == "BCa":
            p0 = ((theta < t0).mean() + (theta <= t0).mean()) / 2
            tj = jack[name]
            ok = np.isfinite(tj)
            if 0 < p0 < 1 and ok.any():
                z0 = sps.norm.ppf(p0)
                c = counts[ok].astype(float)  # sums over the n leave-one-out values, grouped by value
                tbar = np.average(tj[ok], weights=c)
                den = 6 * (c @ (tbar - tj[ok]) ** 2) ** 1.5
                a = float(c @ (tbar - tj[ok]) ** 3 / den) if den > 0 else 0.0
                za = sps.norm.ppf([lo_q, hi_q])
                lo_q, hi_q = sps.norm.cdf(z0 + (z0 + za) / (1 - a * (z0 + za)))
        lo, hi = np.quantile(theta, [lo_q, hi_q])
        out[name] = (float(lo), float(hi))
    return out


def occurrence_cis(nk, k: int, *, hub_size: float = HUB_SIZE, n_boot: int = 1000, level: float = 0.95,
                   seed: int = 0) -> tuple[dict[str, tuple[float, float]], str]:
    """BCa bootstrap intervals of the hubness measures, resampling points' :math:`N_k` values.

    The k-NN graph is held fixed: the interval covers the sampling variation of which points the
    set contains, not the change of the neighbour lists a different sample would cause. The
    resampling runs on the histogram of :math:`N_k` (:func:`histogram_bootstrap`): the same
    bootstrap as :func:`embeval_report.stats.bootstrap_ci` on the n values (tested against it), whose
    jackknife would need an n x n array. Interval ends are clipped to each measure's range
    (:data:`SPECS`). Returns ``(name -> (lo, hi), method text)``; no intervals (``{}``, ``""``)
    for ``n_boot = 0`` or fewer than 3 points.
    """
    nk = np.asarray(nk, dtype=np.int64)
    if n_boot <= 0 or len(nk) < 3:
        return {}, ""
    values, counts = np.unique(nk, return_counts=True)

    def statistic(v, C):
        return {name: x for name, x in histogram_measures(v, C, k, hub_size).items() if name in SPECS}
    cis = histogram_bootstrap(values, counts, statistic, n_boot=n_boot, level=level, seed=seed)
    cis = {name: tuple(float(np.clip(x, *SPECS[name].range)) for x in ci) for name, ci in cis.items()}
    method = (f"{level:.0%} BCa bootstrap over points ({n_boot} resamples of the N_k values; "
              "the k-NN graph is held fixed)")
    return cis, method


def check_k(k: int, n_candidates: int, what: str = "points") -> int:
    """``k`` as an int, or a ValueError when it is not a positive integer below ``n_candidates``."""
    if int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, not {k!r}")
    if k >= n_candidates:
        raise ValueError(f"k = {k} needs more than {k} other {what}; the set has {n_candidates}")
    return int(k)


def top_slot_share(nk, fraction: float = 0.01) -> float:
    """Share of all neighbour slots taken by the ``fraction`` of points with the largest :math:`N_k`
    (at least one point)."""
    nk = np.sort(np.asarray(nk))[::-1]
    m = max(1, int(math.ceil(fraction * len(nk))))
    total = nk.sum()
    return float(nk[:m].sum() / total) if total else float("nan")


def per_row(values, n: int, what: str) -> np.ndarray:
    """``values`` as an object array of one entry per row, or a ValueError naming ``what``."""
    arr = np.asarray(values, dtype=object)
    if arr.shape != (n,):
        raise ValueError(f"{what}: expected one value per vector ({n}), got shape {arr.shape}")
    return arr


def neighbour_overlap(a, b) -> float:
    """Mean share of each row's neighbour list that two k-NN graphs have in common."""
    return float(neighbour_sets_overlap(a, b).mean())


def label_agreement(neighbors, labels, rows=None) -> float:
    """Share of (point, neighbour) pairs with the same label (pairs with a missing label skipped).

    ``neighbors`` lists the neighbours of every point, or of the points ``rows`` (sampled queries)."""
    neighbors = np.asarray(neighbors)
    n = len(neighbors) if rows is None else len(labels)
    codes, _ = pd.factorize(pd.Series(per_row(labels, n, "labels")), use_na_sentinel=True)
    own = np.repeat((codes if rows is None else codes[rows])[:, None], neighbors.shape[1], axis=1)
    other = codes[neighbors]
    ok = (own >= 0) & (other >= 0)
    return float((own[ok] == other[ok]).mean()) if ok.any() else float("nan")
