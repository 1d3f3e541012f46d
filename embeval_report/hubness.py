r"""Hubness: do a few points crowd every nearest-neighbour list?

Implements seed 000 §217.1 (the k-occurrence :math:`N_k(x)`, its skewness, and the bands of
``diagnose_hubness``) with the standard measures of the hubness literature and of
scikit-hubness (``skhubness/analysis/estimation.py``, ``Hubness.score``; the same code lives on
in kiez's ``kiez/analysis/estimation.py``):

* :math:`N_k(x)` — how many of the other points have :math:`x` among their :math:`k` nearest
  neighbours (cosine similarity, the point itself excluded; Radovanović, Nanopoulos & Ivanović
  2010). Over all points :math:`\sum_x N_k(x) = nk`, so the mean is always :math:`k`.
* ``k_occurrence_skewness`` :math:`S_{N_k} = \mathbb E[(N_k-\mu)^3]/\sigma^3` (population moments,
  as ``scipy.stats.skew``; Radovanović et al. 2010). Verdict from the seed's bands.
* ``robin_hood_index`` :math:`H = \tfrac12 \sum_x |N_k(x) - \bar N_k| / \sum_x N_k(x)`: the share of
  neighbour slots that would have to move for every point to be a neighbour equally often
  (Feldbauer, Leodolter, Plant & Flexer 2018). The seed's code computes
  :math:`\sum_x \max(N_k(x)-\bar N_k, 0)/\sum_x N_k(x)`, the same number.
* ``k_occurrence_gini`` :math:`G = \sum_{x,y} |N_k(x) - N_k(y)| / (2 n \sum_x N_k(x))`
  (Feldbauer & Flexer 2019; scikit-hubness ``gini``).
* ``hub_occurrence``: the share of all :math:`nk` neighbour slots taken by hubs, hubs being the
  points with :math:`N_k \ge 2k` (scikit-hubness ``hub_size=2``).
* ``antihub_occurrence``: the share of points that are nobody's neighbour (:math:`N_k = 0`).
* ``hub_fraction_2sd``: the seed's own hub rule (``compute_hubness_metrics``, seed 000 line 619),
  the share of points with :math:`N_k > k + 2\,\mathrm{sd}(N_k)`.

Every measure is a function of the histogram of :math:`N_k` (:func:`histogram_measures`), which
makes the bootstrap cheap at any n. The seed computes its k-NN by Euclidean distance on the raw
vectors; here it is cosine (for unit-norm vectors the two neighbour lists are identical).

**Hubness reduction.** Two standard re-scorings of all pairs are computed exactly, block by block
(never an n x n matrix), and the k-occurrence recomputed from their neighbour lists:

* CSLS (Conneau, Lample, Ranzato, Denoyer & Jégou 2018):
  :math:`\mathrm{CSLS}(x,y) = 2\cos(x,y) - r(x) - r(y)`, with :math:`r(x)` the mean cosine of
  :math:`x` to its :math:`K` nearest neighbours;
* mutual proximity, Gaussian variant (Schnitzer, Flexer, Schedl & Widmer 2012):
  :math:`\mathrm{MP}(x,y) = \Phi\big(\tfrac{s_{xy}-\mu_x}{\sigma_x}\big)\,\Phi\big(\tfrac{s_{xy}-\mu_y}{\sigma_y}\big)`,
  the probability that :math:`y` is closer to :math:`x` than a random point is, and vice versa,
  where :math:`\mu_x, \sigma_x` are the mean and standard deviation of the cosine of :math:`x` to
  all other points (exact, from the sum and Gram matrix of the unit vectors).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator
import numpy as np
import pandas as pd
import torch
from scipy import stats as sps

from .display import escape
from .io import category_column
from .kernels import (as_numpy, block_moments, chunk_rows, iter_chunks, knn, neighbour_sets_overlap, resolve_device,
                      unit_rows)
from .plotting import PALETTE, WIDTH
from .results import Metric
from .thresholds import verdict

K_DEFAULT = 10
#: scikit-hubness default: a hub has N_k >= hub_size * k
HUB_SIZE = 2.0
SKHUBNESS = "scikit-hubness Hubness.score"

#: name -> (label, direction, LaTeX formula, reference, threshold quantity or None)
METRICS = {
    "k_occurrence_skewness": (
        "k-occurrence skewness", "lower", r"S_{N_k} = \mathbb{E}[(N_k - \mu_{N_k})^3] / \sigma_{N_k}^3",
        "Radovanović et al. 2010; seed 000 §217.1.1; verdict: diagnose_hubness bands (seed 000 line 619)",
        "k_occurrence_skewness"),
    "robin_hood_index": (
        "Robin Hood index", "lower", r"H = \tfrac12 \sum_x |N_k(x) - \bar N_k| \,/\, \sum_x N_k(x)",
        f"Feldbauer et al. 2018; {SKHUBNESS}; seed 000 compute_hubness_metrics", None),
    "k_occurrence_gini": (
        "Gini index of N_k", "lower", r"G = \sum_{x,y} |N_k(x) - N_k(y)| \,/\, (2n \sum_x N_k(x))",
        f"Feldbauer & Flexer 2019; {SKHUBNESS}", None),
    "hub_occurrence": (
        "Hub occurrence", "lower", r"\sum_{x: N_k(x) \ge 2k} N_k(x) \,/\, (nk)",
        f"Feldbauer et al. 2018; {SKHUBNESS}, hub_size = 2", None),
    "antihub_occurrence": (
        "Antihub occurrence", "lower", r"|\{x : N_k(x) = 0\}| \,/\, n",
        f"Feldbauer et al. 2018; {SKHUBNESS}", None),
    "hub_fraction_2sd": (
        "Hub fraction (seed rule k + 2 sd)", "lower", r"|\{x : N_k(x) > k + 2\,\mathrm{sd}(N_k)\}| \,/\, n",
        "seed 000 compute_hubness_metrics (line 619)", None),
}

#: valid range of each measure, used to clip interval ends
_BOUNDS = {"robin_hood_index": (0.0, 1.0), "k_occurrence_gini": (0.0, 1.0), "hub_occurrence": (0.0, 1.0),
           "antihub_occurrence": (0.0, 1.0), "hub_fraction_2sd": (0.0, 1.0)}

#: reading of the skewness bands, as the seed's diagnose_hubness prints them
SKEW_READING = {"healthy": "low hubness", "concerning": "moderate hubness", "problematic": "severe hubness"}


# ---------------------------------------------------------------------------------------------
# k-occurrence and its measures
# ---------------------------------------------------------------------------------------------

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

    Returns arrays of shape (B,) (or scalars for 1-D ``counts``) named as :data:`METRICS`, plus
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
    jackknife would need an n x n array. Returns ``(name -> (lo, hi), method text)``.
    """
    nk = np.asarray(nk, dtype=np.int64)
    if n_boot <= 0 or len(nk) < 3:
        return {}, ""
    values, counts = np.unique(nk, return_counts=True)
    names = set(METRICS)

    def statistic(v, C):
        return {name: x for name, x in histogram_measures(v, C, k, hub_size).items() if name in names}
    cis = histogram_bootstrap(values, counts, statistic, n_boot=n_boot, level=level, seed=seed)
    cis = {name: tuple(float(np.clip(x, *_BOUNDS.get(name, (-np.inf, np.inf)))) for x in ci)
           for name, ci in cis.items()}
    method = (f"{level:.0%} BCa bootstrap over points ({n_boot} resamples of the N_k values; "
              "the k-NN graph is held fixed)")
    return cis, method


# ---------------------------------------------------------------------------------------------
# The chapter's measurement
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HubnessResult:
    """Everything the hubness chapter shows about the cosine k-NN graph of the set."""

    n: int
    d: int
    k: int
    hub_size: float
    values: dict             # measure name -> point value (METRICS plus max_k_occurrence)
    metrics: dict            # metric name -> Metric
    k_occurrence: np.ndarray  # (n,) N_k of every point
    neighbors: np.ndarray    # (n, k) neighbour lists, most similar first
    similarities: np.ndarray  # (n, k) their cosine similarities
    centroid_cosine: np.ndarray  # (n,) cosine of each point to the mean of the unit vectors
    centroid_spearman: float  # Spearman ρ between N_k and centroid_cosine
    top_share: float         # share of the n·k slots taken by the 1 % of points with the largest N_k
    info: dict = field(default_factory=dict)

    @property
    def hubs(self) -> np.ndarray:
        """Indices of the hubs (``N_k >= hub_size * k``), largest N_k first."""
        idx = np.flatnonzero(self.k_occurrence >= self.hub_size * self.k)
        return idx[np.argsort(-self.k_occurrence[idx], kind="stable")]

    @property
    def antihubs(self) -> np.ndarray:
        """Indices of the antihubs (``N_k == 0``)."""
        return np.flatnonzero(self.k_occurrence == 0)


def _check_k(k: int, n_candidates: int, what: str = "points") -> int:
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


def measure_hubness(X, k: int = K_DEFAULT, *, hub_size: float = HUB_SIZE, n_boot: int = 1000, level: float = 0.95,
                    seed: int = 0, device="auto") -> HubnessResult:
    r"""Hubness of the cosine k-NN graph of ``X``, exact over all points, with bootstrap CIs.

    Parameters
    ----------
    X : array (n, d) or torch tensor (rows need not be normalised)
    k : neighbourhood size (seed 000's default 10)
    hub_size : hubs have :math:`N_k \ge` ``hub_size`` · k (scikit-hubness default 2)
    n_boot, level : bootstrap resamples and level of the CIs (0 disables them)
    seed, device : determinism and ``"auto" | "cpu" | "cuda"``

    The neighbour lists come from :func:`embeval_report.kernels.knn` (exact, chunked, GPU when
    present). Measures (all lower is better; see the module docstring for the formulas):
    ``k_occurrence_skewness`` (verdict: < 0.5 low, 0.5–1.5 moderate, ≥ 1.5 severe, seed 000
    ``diagnose_hubness``), ``robin_hood_index``, ``k_occurrence_gini``, ``hub_occurrence``,
    ``antihub_occurrence``, ``hub_fraction_2sd`` (the seed's k + 2 sd rule).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).standard_normal((2000, 100)) + 0.5  # a shifted cloud: a cone
    >>> r = measure_hubness(X, n_boot=0)
    >>> r.metrics["k_occurrence_skewness"].verdict
    'problematic'
    """
    X = as_numpy(X)
    n, d = X.shape
    k = _check_k(k, n - 1)
    dev = resolve_device(device)
    idx, sim = knn(X, k, metric="cosine", device=dev, desc="k-NN (cosine)")
    nk = k_occurrence(idx, n)
    values = occurrence_measures(nk, k, hub_size)
    cis, ci_method = occurrence_cis(nk, k, hub_size=hub_size, n_boot=n_boot, level=level, seed=seed)
    metrics = {}
    for name, (label, direction, formula, ref, quantity) in METRICS.items():
        lo, hi = cis.get(name, (None, None))
        metrics[name] = Metric(name=name, value=values[name], direction=direction, reference=ref,
                               ci_low=lo, ci_high=hi, verdict=verdict(quantity, values[name]) if quantity else None,
                               label=label, formula=formula, ci_method=ci_method)
    cc = centroid_cosines(X, device=dev)
    rho = float(sps.spearmanr(nk, cc)[0]) if nk.std() > 0 and cc.std() > 0 else float("nan")
    sd = float(nk.std())
    return HubnessResult(
        n=n, d=d, k=k, hub_size=hub_size, values=values, metrics=metrics, k_occurrence=nk, neighbors=idx,
        similarities=sim, centroid_cosine=cc, centroid_spearman=rho, top_share=top_slot_share(nk),
        info=dict(level=level, n_boot=n_boot, device=str(dev), metric="cosine", sd_k_occurrence=sd,
                  n_hubs=int((nk >= hub_size * k).sum()), n_antihubs=int((nk == 0).sum()),
                  seed_hub_threshold=k + 2 * sd, seed_antihub_threshold=max(0.0, k - 2 * sd),
                  n_hubs_2sd=int((nk > k + 2 * sd).sum()), n_antihubs_2sd=int((nk < max(0.0, k - 2 * sd)).sum())),
    )


def centroid_cosines(X, of=None, *, device="auto") -> np.ndarray:
    """Cosine of each row of ``X`` to the mean direction (mean of the unit-normalised rows) of
    ``of`` (default: ``X`` itself)."""
    dev = resolve_device(device)
    m = block_moments(X if of is None else of, transform=unit_rows, device=dev)
    _, s, _ = m.total()
    c = torch.as_tensor(s / max(np.linalg.norm(s), 1e-300), device=dev)
    out = np.empty(len(as_numpy(X)))
    for start, x in iter_chunks(X, device=dev):
        out[start:start + len(x)] = (unit_rows(x) @ c).cpu().numpy()
    return out


# ---------------------------------------------------------------------------------------------
# Hubness reduction: CSLS and mutual proximity, exact and chunked
# ---------------------------------------------------------------------------------------------

def _rescored_knn(X, k: int, rescore, *, device, desc: str | None, temporaries: int = 4
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of ``rescore(start, cos_block)`` over all other rows, block of query rows by block.

    ``cos_block`` is the (m, n) cosine of query rows ``start..start+m`` to every row (float32 on
    the device); ``rescore`` maps it to new scores (higher = closer). The row itself is excluded.
    Memory: ``temporaries`` float32 (m, n) blocks within :data:`embeval_report.kernels.CHUNK_BYTES`.
    """
    X = as_numpy(X)
    n = len(X)
    corpus = unit_rows(torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float32, device=device))
    rows = chunk_rows(n, n * 4 * temporaries)
    idx = np.empty((n, k), dtype=np.int64)
    val = np.empty((n, k), dtype=np.float32)
    for s, q in iter_chunks(X, device=device, dtype=torch.float32, rows=rows, desc=desc):
        scores = rescore(s, unit_rows(q) @ corpus.T)
        r = torch.arange(len(q), device=device)
        scores[r, r + s] = -torch.inf
        top = torch.topk(scores, k, dim=1)
        idx[s:s + len(q)] = top.indices.cpu().numpy()
        val[s:s + len(q)] = top.values.cpu().numpy()
    return idx, val


def csls_knn(X, k: int = K_DEFAULT, *, neighborhood: int = K_DEFAULT, r=None, device="auto"
             ) -> tuple[np.ndarray, np.ndarray]:
    r"""Exact k nearest neighbours under CSLS (Conneau et al. 2018), all pairs, chunked.

    :math:`\mathrm{CSLS}(x, y) = 2\cos(x, y) - r(x) - r(y)`, where :math:`r(x)` is the mean cosine of
    ``x`` to its ``neighborhood`` nearest neighbours (self excluded). ``r`` may be passed when
    already known (e.g. the means of a cosine k-NN pass). Returns ``(indices (n, k), CSLS scores)``.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    n = len(X)
    k = _check_k(k, n - 1)
    if r is None:
        _, sims = knn(X, _check_k(neighborhood, n - 1), metric="cosine", device=dev, desc="k-NN for CSLS r(x)")
        r = sims.astype(np.float64).mean(1)
    rt = torch.as_tensor(np.asarray(r), dtype=torch.float32, device=dev)

    def rescore(s, cos):
        return 2 * cos - rt[s:s + len(cos), None] - rt[None, :]
    return _rescored_knn(X, k, rescore, device=dev, desc="k-NN (CSLS)", temporaries=3)


def cosine_mean_sd(X, *, device="auto") -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of the cosine of each row to all *other* rows, exact.

    From the sum :math:`s` and Gram :math:`G` of the unit vectors :math:`u`:
    :math:`\mu_x = (u_x \cdot s - 1)/(n-1)`, :math:`\overline{c^2}_x = (u_x^\top G u_x - 1)/(n-1)`.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    n = len(X)
    N, s, G = block_moments(X, transform=unit_rows, device=dev).total()
    st, Gt = torch.as_tensor(s, device=dev), torch.as_tensor(G, device=dev)
    mu, sd = np.empty(n), np.empty(n)
    for start, x in iter_chunks(X, device=dev):
        u = unit_rows(x)
        m1 = ((u @ st) - 1) / (n - 1)
        m2 = (((u @ Gt) * u).sum(1) - 1) / (n - 1)
        mu[start:start + len(x)] = m1.cpu().numpy()
        sd[start:start + len(x)] = (m2 - m1 * m1).clamp_min(0).sqrt().cpu().numpy()
    return mu, sd


def mutual_proximity_knn(X, k: int = K_DEFAULT, *, device="auto") -> tuple[np.ndarray, np.ndarray]:
    r"""Exact k nearest neighbours under Gaussian mutual proximity (Schnitzer et al. 2012).

    :math:`\mathrm{MP}(x, y) = \Phi(z_x)\,\Phi(z_y)`, :math:`z_x = (\cos(x,y) - \mu_x)/\sigma_x`, with
    :math:`\mu_x, \sigma_x` the mean and sd of the cosine of ``x`` to all other rows
    (:func:`cosine_mean_sd`). Ranked by :math:`\log\Phi(z_x) + \log\Phi(z_y)` (no saturation at 1).
    Returns ``(indices (n, k), MP values)``.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    k = _check_k(k, len(X) - 1)
    mu, sd = cosine_mean_sd(X, device=dev)
    tiny = np.finfo(np.float32).tiny
    mu_t = torch.as_tensor(mu, dtype=torch.float32, device=dev)
    inv_t = torch.as_tensor(1.0 / np.maximum(sd, 1e-12), dtype=torch.float32, device=dev)

    def rescore(s, cos):
        m = len(cos)
        a = torch.special.log_ndtr((cos - mu_t[s:s + m, None]) * inv_t[s:s + m, None])
        return a.add_(torch.special.log_ndtr((cos - mu_t[None, :]) * inv_t[None, :]))
    idx, logmp = _rescored_knn(X, k, rescore, device=dev, desc="k-NN (mutual proximity)", temporaries=5)
    return idx, np.exp(logmp.astype(np.float64)).clip(tiny, 1).astype(np.float32)


REDUCTIONS = {
    "csls": ("CSLS", "Conneau et al. 2018: 2 cos(x, y) − r(x) − r(y), r = mean cosine to the k nearest neighbours"),
    "mutual_proximity": ("Mutual proximity (Gaussian)",
                         "Schnitzer et al. 2012: Φ(z_x) Φ(z_y), z = standardised cosine"),
}


def neighbour_overlap(a, b) -> float:
    """Mean share of each row's neighbour list that two k-NN graphs have in common."""
    return float(neighbour_sets_overlap(a, b).mean())


def label_agreement(neighbors, labels) -> float:
    """Share of (point, neighbour) pairs with the same label (pairs with a missing label skipped)."""
    neighbors = np.asarray(neighbors)
    codes, _ = pd.factorize(pd.Series(_per_row(labels, len(neighbors), "labels")), use_na_sentinel=True)
    own = np.repeat(codes[:, None], neighbors.shape[1], axis=1)
    other = codes[neighbors]
    ok = (own >= 0) & (other >= 0)
    return float((own[ok] == other[ok]).mean()) if ok.any() else float("nan")


@dataclass(frozen=True)
class ReductionEffect:
    """Hubness before and after each reduction: one table row per setting, and the N_k vectors."""

    table: pd.DataFrame      # setting, method, measures, CI of the skewness, overlap, label agreement
    k_occurrence: dict       # setting label -> N_k
    neighbors: dict          # setting label -> (n, k) neighbour lists
    ci_method: str


def hubness_reduction_effect(X, base: HubnessResult, methods=("csls", "mutual_proximity"), *, labels=None,
                             n_boot: int = 1000, level: float = 0.95, seed: int = 0, device="auto"
                             ) -> ReductionEffect:
    """Re-score all pairs with each hubness reduction and recompute N_k and its measures.

    ``base`` is the :func:`measure_hubness` result of the same ``X`` (its k and hub size are used;
    CSLS re-uses its neighbour similarities for r(x)). ``labels`` (optional) adds the share of
    neighbours with the same label, a check that the reduction keeps meaningful neighbours.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    k = base.k
    settings = {"cosine (original)": (None, base.neighbors)}
    for m in methods:
        if m == "csls":
            idx, _ = csls_knn(X, k, r=base.similarities.astype(np.float64).mean(1), device=dev)
        elif m == "mutual_proximity":
            idx, _ = mutual_proximity_knn(X, k, device=dev)
        else:
            raise ValueError(f"unknown hubness reduction {m!r}; expected one of {', '.join(REDUCTIONS)}")
        settings[REDUCTIONS[m][0]] = (m, idx)
    rows, nks, nbs, method_text = [], {}, {}, ""
    for label, (m, idx) in settings.items():
        nk = base.k_occurrence if m is None else k_occurrence(idx, len(X))
        vals = occurrence_measures(nk, k, base.hub_size)
        cis, method_text = occurrence_cis(nk, k, hub_size=base.hub_size, n_boot=n_boot, level=level, seed=seed)
        lo, hi = cis.get("k_occurrence_skewness", (None, None))
        row = dict(setting=label, method=m or "cosine", skewness=vals["k_occurrence_skewness"], skew_ci_low=lo,
                   skew_ci_high=hi, verdict=verdict("k_occurrence_skewness", vals["k_occurrence_skewness"]),
                   robin_hood_index=vals["robin_hood_index"], gini=vals["k_occurrence_gini"],
                   hub_occurrence=vals["hub_occurrence"], antihub_occurrence=vals["antihub_occurrence"],
                   max_k_occurrence=int(vals["max_k_occurrence"]), top1pct_share=top_slot_share(nk),
                   neighbour_overlap=neighbour_overlap(base.neighbors, idx))
        if labels is not None:
            row["label_agreement"] = label_agreement(idx, labels)
        rows.append(row)
        nks[label], nbs[label] = nk, idx
    return ReductionEffect(pd.DataFrame(rows), nks, nbs, method_text)


def reduction_display_table(effect: ReductionEffect) -> pd.DataFrame:
    """The before/after table as the report shows it."""
    t = effect.table
    out = pd.DataFrame({
        "setting": t["setting"], "skewness": t["skewness"], "95 % CI": _ci_column(t), "verdict": t["verdict"],
        "Robin Hood": t["robin_hood_index"], "antihubs %": 100 * t["antihub_occurrence"],
        "max N_k": t["max_k_occurrence"], "lists kept %": 100 * t["neighbour_overlap"]})
    if "label_agreement" in t:
        out["same label %"] = 100 * t["label_agreement"]
    return out


def _ci_column(t: pd.DataFrame) -> list[str]:
    return [("—" if pd.isna(lo) else f"{lo:.2f} – {hi:.2f}") for lo, hi in zip(t["skew_ci_low"], t["skew_ci_high"])]


def reduction_metrics(effect: ReductionEffect) -> list[Metric]:
    """The skewness after each reduction as recorded metrics (``k_occurrence_skewness_<method>``),
    without a verdict: they describe a what-if, not the set."""
    out = []
    for _, x in effect.table.iloc[1:].iterrows():
        name, ref = REDUCTIONS[x["method"]]
        out.append(Metric(name=f"k_occurrence_skewness_{x['method']}", value=x["skewness"], direction="lower",
                          reference=f"{ref}; skewness as k_occurrence_skewness", ci_low=x["skew_ci_low"],
                          ci_high=x["skew_ci_high"], label=f"k-occurrence skewness after {name}",
                          formula=r"S_{N_k}\ \text{of the re-scored k-NN graph}", ci_method=effect.ci_method))
    return out


# ---------------------------------------------------------------------------------------------
# Who the hubs are: tables by id and by group, query -> index hubness across kinds
# ---------------------------------------------------------------------------------------------

#: metadata columns shown next to hub ids, in this order, when present
META_COLUMNS = ("kind", "label", "frequency", "title", "name")
#: columns that name kinds of entity, for the query -> index analysis
KIND_COLUMNS = ("kind", "type", "group")


def _per_row(values, n: int, what: str) -> np.ndarray:
    """``values`` as an object array of one entry per row, or a ValueError naming ``what``."""
    arr = np.asarray(values, dtype=object)
    if arr.shape != (n,):
        raise ValueError(f"{what}: expected one value per vector ({n}), got shape {arr.shape}")
    return arr


def _meta_columns(metadata: pd.DataFrame | None) -> list[str]:
    if metadata is None:
        return []
    cols = [c for c in META_COLUMNS if c in metadata.columns]
    return cols or list(metadata.columns[:3])


def hub_table(result: HubnessResult, ids, metadata: pd.DataFrame | None = None, *, which: str = "hubs",
              n: int = 10) -> pd.DataFrame:
    """The ``n`` points with the largest (``which="hubs"``) or smallest (``"antihubs"``) N_k.

    Columns: rank, id, N_k, share of points that list it, cosine to the mean direction, and the
    metadata columns of :data:`META_COLUMNS` present. Antihubs are ordered by N_k, then by the
    cosine to the mean direction (most peripheral first). Strings are plain (tables escape them).
    """
    nk, cc = result.k_occurrence, result.centroid_cosine
    if which == "hubs":
        order = np.lexsort((-cc, -nk))
    elif which == "antihubs":
        order = np.lexsort((cc, nk))
    else:
        raise ValueError(f"which must be 'hubs' or 'antihubs', not {which!r}")
    order = order[:n]
    ids = np.asarray(ids, dtype=object)
    df = pd.DataFrame({"rank": np.arange(1, len(order) + 1), "id": [str(i) for i in ids[order]],
                       "N_k": nk[order], "listed by %": 100 * nk[order] / result.n,
                       "cos to mean direction": cc[order]})
    for col in _meta_columns(metadata):
        vals = metadata[col].to_numpy()[order]
        df[col] = [None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in vals]
    return df


def hubness_by_group(result: HubnessResult, groups, *, column: str = "group") -> pd.DataFrame:
    """Per group: size, mean N_k, share that are hubs / antihubs, share of all neighbour slots."""
    g = pd.Series(_per_row(groups, result.n, column)).fillna("(missing)").astype(str).to_numpy()
    nk = result.k_occurrence
    is_hub, is_anti = nk >= result.hub_size * result.k, nk == 0
    rows = []
    for name in sorted(set(g)):
        m = g == name
        rows.append({column: name, "n": int(m.sum()), "mean N_k": float(nk[m].mean()),
                     "hubs": int(is_hub[m].sum()), "hubs %": 100 * float(is_hub[m].mean()),
                     "antihubs": int(is_anti[m].sum()), "antihubs %": 100 * float(is_anti[m].mean()),
                     "share of slots %": 100 * float(nk[m].sum() / nk.sum())})
    return pd.DataFrame(rows)


def kind_column(metadata: pd.DataFrame | None, max_kinds: int = 4) -> str | None:
    """The metadata column naming kinds of entity (users, items, ...) with 2..``max_kinds`` values."""
    return category_column(metadata, KIND_COLUMNS, max_kinds)


@dataclass(frozen=True)
class CrossHubness:
    """Query -> index hubness between kinds of entity (e.g. items retrieved for users)."""

    column: str
    table: pd.DataFrame      # one row per (query kind, index kind)
    k_occurrence: dict       # (query kind, index kind) -> N_k over the index rows
    index_rows: dict         # (query kind, index kind) -> row numbers of the index kind
    query_direction_cosine: dict  # (query kind, index kind) -> cosine of each index row to the queries' mean direction
    ci_method: str


def cross_kind_hubness(X, kinds, k: int = K_DEFAULT, *, column: str = "kind", hub_size: float = HUB_SIZE,
                       n_boot: int = 1000, level: float = 0.95, seed: int = 0, device="auto") -> CrossHubness:
    """Hubness of k-NN retrieval from one kind of entity into another (scikit-hubness's query-vs-index
    setting): for queries of kind ``a`` and index rows of kind ``b != a``, :math:`N_k(y)` counts the
    queries with ``y`` among their k nearest (cosine) index rows; its mean is ``k · n_a / n_b``.
    Kinds with at most k rows are skipped. ``direction_spearman`` is the Spearman ρ between N_k and
    each index row's cosine to the mean direction of the queries (hubs where the queries crowd).
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    g = pd.Series(_per_row(kinds, len(X), column)).fillna("(missing)").astype(str).to_numpy()
    names = [x for x in sorted(set(g)) if (g == x).sum() > k]
    rows, nks, index_rows, qcos, method = [], {}, {}, {}, ""
    for a in names:
        for b in names:
            if a == b:
                continue
            qi, ii = np.flatnonzero(g == a), np.flatnonzero(g == b)
            idx, _ = knn(X[ii], k, queries=X[qi], metric="cosine", device=dev, desc=f"k-NN {a} -> {b}")
            nk = k_occurrence(idx, len(ii))
            vals = occurrence_measures(nk, k, hub_size)
            cis, method = occurrence_cis(nk, k, hub_size=hub_size, n_boot=n_boot, level=level, seed=seed)
            lo, hi = cis.get("k_occurrence_skewness", (None, None))
            qc = centroid_cosines(X[ii], X[qi], device=dev)
            rho = float(sps.spearmanr(nk, qc)[0]) if np.ptp(nk) > 0 and np.ptp(qc) > 0 else float("nan")
            rows.append({"queries": a, "index": b, "n queries": len(qi), "n index": len(ii),
                         "mean N_k": float(nk.mean()), "skewness": vals["k_occurrence_skewness"],
                         "skew_ci_low": lo, "skew_ci_high": hi,
                         "verdict": verdict("k_occurrence_skewness", vals["k_occurrence_skewness"]),
                         "robin_hood_index": vals["robin_hood_index"], "gini": vals["k_occurrence_gini"],
                         "antihub_occurrence": vals["antihub_occurrence"],
                         "max_k_occurrence": int(vals["max_k_occurrence"]),
                         "top_hub_reach": float(nk.max() / len(qi)), "top1pct_share": top_slot_share(nk),
                         "direction_spearman": rho})
            nks[(a, b)], index_rows[(a, b)], qcos[(a, b)] = nk, ii, qc
    return CrossHubness(column, pd.DataFrame(rows), nks, index_rows, qcos, method)


def cross_display_table(cross: CrossHubness) -> pd.DataFrame:
    """The query -> index table as the report shows it."""
    t = cross.table
    return pd.DataFrame({
        "queries → index": [f"{a} ({na:,}) → {b} ({nb:,})" for a, b, na, nb
                            in zip(t["queries"], t["index"], t["n queries"], t["n index"])],
        "mean N_k": t["mean N_k"], "skewness": t["skewness"], "95 % CI": _ci_column(t),
        "verdict": t["verdict"], "Robin Hood": t["robin_hood_index"],
        "never retrieved %": 100 * t["antihub_occurrence"], "top hub reach %": 100 * t["top_hub_reach"],
        "ρ(N_k, centrality)": t["direction_spearman"]})


def cross_hub_table(cross: CrossHubness, pair, ids, metadata: pd.DataFrame | None = None, n: int = 5) -> pd.DataFrame:
    """The ``n`` index rows of ``pair = (query kind, index kind)`` retrieved by the most queries."""
    nk, rows = cross.k_occurrence[pair], cross.index_rows[pair]
    order = np.argsort(-nk, kind="stable")[:n]
    n_q = int(cross.table.loc[(cross.table["queries"] == pair[0]) & (cross.table["index"] == pair[1]),
                              "n queries"].iloc[0])
    df = pd.DataFrame({"rank": np.arange(1, len(order) + 1),
                       "id": [str(i) for i in np.asarray(ids, dtype=object)[rows[order]]],
                       "N_k": nk[order], f"% of {pair[0]}s": 100 * nk[order] / n_q,
                       f"cos to {pair[0]} mean direction": cross.query_direction_cosine[pair][order]})
    for col in _meta_columns(metadata):
        if col == cross.column:
            continue
        vals = metadata[col].to_numpy()[rows[order]]
        df[col] = [None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in vals]
    return df


def frequency_association(k_occ, metadata: pd.DataFrame | None, rows=None, column: str = "frequency"
                          ) -> float | None:
    """Spearman ρ between N_k and a numeric metadata column (``None`` when absent or constant)."""
    if metadata is None or column not in metadata:
        return None
    f = pd.to_numeric(metadata[column], errors="coerce").to_numpy(float)
    f = f if rows is None else f[rows]
    nk = np.asarray(k_occ, float)
    ok = np.isfinite(f)
    if ok.sum() < 3 or np.ptp(f[ok]) == 0 or np.ptp(nk[ok]) == 0:
        return None
    return float(sps.spearmanr(nk[ok], f[ok])[0])


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _freq_text(metadata: pd.DataFrame | None, row: int, among) -> str:
    """", frequency F, rank R of N" for ``row`` among the rows ``among`` (empty without a frequency column)."""
    if metadata is None or "frequency" not in metadata:
        return ""
    f = pd.to_numeric(metadata["frequency"], errors="coerce").to_numpy(float)
    if not np.isfinite(f[row]):
        return ""
    g = f[among]
    rank = int((g[np.isfinite(g)] > f[row]).sum()) + 1
    return f", frequency {f[row]:,.0f}, rank {rank:,} of {len(g):,} by frequency"


def _ids_text(ids, rows, limit: int = 3) -> str:
    return ", ".join(f"**{escape(ids[i])}**" for i in rows[:limit])


def impact_callout(r: HubnessResult, cross: CrossHubness | None = None) -> dict:
    """Arguments ``kind``, ``text``, ``title`` of :func:`embeval_report.display.callout`: the business
    reading of seed 000 §217.1.2 with this set's numbers."""
    k, v = r.k, r.values
    text = ("In a recommender, hubs are the items shown to everyone regardless of taste, and antihubs are never "
            "shown however relevant they are: **popularity bias**, **long-tail invisibility** and lost discovery "
            "(seed 000 §217.1.2). ")
    severity = r.metrics["k_occurrence_skewness"].verdict
    if cross is not None and len(cross.table):
        w = cross.table.sort_values("skewness", ascending=False).iloc[0]
        a, b = escape(w["queries"]), escape(w["index"])
        text += (f"Here, retrieving {b}s for {a}s, {w['antihub_occurrence']:.1%} of the {b}s are in no {a}'s "
                 f"top {k}, the most retrieved {b} reaches {w['top_hub_reach']:.1%} of {a}s, and the 1 % most "
                 f"retrieved {b}s fill {w['top1pct_share']:.1%} of all slots.")
        severity = max(severity, w["verdict"], key=lambda x: {None: 0, "healthy": 0, "concerning": 1,
                                                              "problematic": 2}[x])
    else:
        text += (f"Here {v['antihub_occurrence']:.1%} of the entities are in nobody's top {k}, and the 1 % most "
                 f"listed fill {r.top_share:.1%} of all lists (1 % if even).")
    kind = {"problematic": "danger", "concerning": "warning"}.get(severity, "success")
    title = {"danger": "Hubness will show up as popularity bias", "warning": "Some hubness: watch for popularity bias",
             "success": "Little hubness"}[kind]
    return dict(kind=kind, title=title, text=text)


def _reduction_paragraph(red: ReductionEffect) -> str:
    t = red.table
    orig, rest = t.iloc[0], t.iloc[1:]
    has_labels = "label_agreement" in t

    def row_text(x):
        text = (f"{escape(x['setting'])} {x['skewness']:.2f} (Robin Hood {x['robin_hood_index']:.3f}, antihubs "
                f"{x['antihub_occurrence']:.1%}, {x['neighbour_overlap']:.0%} of each neighbour list kept")
        if has_labels and pd.notna(x["label_agreement"]):
            text += f", same-label neighbours {x['label_agreement']:.1%}"
        return text + ")"
    text = (f"**Reducing hubness.** Re-scoring all pairs and recomputing the neighbour lists moves the skewness "
            f"from {orig['skewness']:.2f} to " + "; ".join(row_text(x) for _, x in rest.iterrows()) + ".")
    if has_labels and pd.notna(orig["label_agreement"]):
        text += (f" Before, {orig['label_agreement']:.1%} of neighbours share their point's label; a reduction that "
                 "keeps that share removes hubs without losing meaningful neighbours.")
    better = rest[rest["skewness"] < orig["skewness"]]
    if len(better):
        best = better.sort_values("skewness").iloc[0]
        text += " " + (f"{escape(best['setting'])} brings the skewness into the low band: consider it (or re-ranking "
                       "the top candidates with it) in front of nearest-neighbour retrieval." if best["skewness"] < 0.5
                       else f"{escape(best['setting'])} helps most but does not reach the low band (< 0.5).")
    worse = rest[rest["skewness"] > orig["skewness"]]
    for _, x in worse.iterrows():
        why = (" It models each point's similarities to all others as a normal distribution; where they are far "
               "from normal (bounded by 1 and skewed inside a narrow cone, or mixing kinds of entity) its scores "
               "misrank and create new hubs." if x["method"] == "mutual_proximity" else "")
        text += f" {escape(x['setting'])} makes hubness *worse* on this set (skewness {x['skewness']:.2f}).{why}"
    return text


def narrative(r: HubnessResult, ids=None, metadata: pd.DataFrame | None = None,
              reduction: ReductionEffect | None = None, cross: CrossHubness | None = None) -> str:
    """Markdown paragraphs that say what this set's hubness numbers mean."""
    v, m, k = r.values, r.metrics, r.k
    ids = np.asarray(ids if ids is not None else [str(i) for i in range(r.n)], dtype=object)
    sk = m["k_occurrence_skewness"]
    reading = SKEW_READING.get(sk.verdict, "hubness")
    parts = [
        f"**{reading[0].upper() + reading[1:]}.** Over all {r.n:,} vectors, each point's {k} nearest neighbours "
        f"(cosine, itself excluded) give the k-occurrence $N_{{{k}}}(x)$, the number of lists a point appears in; "
        f"its mean is {k} by construction. Its skewness is {sk.text('.2f')}, in the seed's "
        f"*{reading}* band (< 0.5 low, 0.5–1.5 moderate, ≥ 1.5 severe). $N_{{{k}}}$ ranges from "
        f"{int(r.k_occurrence.min())} to {int(v['max_k_occurrence'])}: the most listed point is among the "
        f"{k} nearest neighbours of {v['max_k_occurrence'] / r.n:.1%} of the set."]
    nh, na = r.info["n_hubs"], r.info["n_antihubs"]
    hub_ids = r.hubs
    parts.append(
        f"**Concentration.** The 1 % of points with the largest $N_{{{k}}}$ fill {r.top_share:.1%} of the "
        f"{r.n * k:,} neighbour slots (an even spread would give 1 %). {nh:,} points ({nh / r.n:.1%}) are hubs "
        f"($N_{{{k}}} \\ge {r.hub_size:g}k = {r.hub_size * k:g}$) and take "
        f"{m['hub_occurrence'].text('.1%')} of all slots. The Robin Hood index is "
        f"{m['robin_hood_index'].text('.3f')}: that share of the slots would have to move from over- to "
        f"under-listed points to list every point equally often; the Gini index of $N_{{{k}}}$ is "
        f"{m['k_occurrence_gini'].text('.3f')}. At the other end, {na:,} points "
        f"({m['antihub_occurrence'].text('.1%')}) are antihubs, in nobody's {k}-NN list. The seed's own rule "
        f"($N_{{{k}}} > k + 2\\,\\mathrm{{sd}} = {r.info['seed_hub_threshold']:.1f}$) marks "
        f"{r.info['n_hubs_2sd']:,} points ({v['hub_fraction_2sd']:.1%}) as hubs.")

    who = []
    rho = r.centroid_spearman
    if np.isfinite(rho):
        who.append(
            f"The Spearman correlation between $N_{{{k}}}$ and a point's cosine to the set's mean direction is "
            f"{rho:.2f}: " + (
                "hubs are the points closest to the centre of the data, the classic mechanism of hubness in high "
                "dimension (Radovanović et al. 2010)." if rho >= 0.3 else
                "hubs are only weakly tied to the global mean direction here; they are more likely central "
                "within local regions (clusters or kinds of entity) than to the whole set." if rho >= 0 else
                "the most listed points are *not* near the mean direction."))
    if len(hub_ids):
        who.insert(0, f"The strongest hubs are {_ids_text(ids, hub_ids)}.")
    col = kind_column(metadata)
    if col is not None and len(hub_ids):
        g = metadata[col].astype(object).fillna("(missing)").astype(str).to_numpy()
        comp = pd.Series(g[hub_ids]).value_counts()
        base = pd.Series(g).value_counts(normalize=True)
        who.append("By " + escape(col) + ", the hubs are " + ", ".join(
            f"{c} {escape(name)} ({c / len(hub_ids):.0%} of hubs vs {base.get(name, 0):.0%} of the set)"
            for name, c in comp.items()) + ".")
    if metadata is not None and "frequency" in metadata:
        assoc = []
        groups = ([(None, None)] if col is None else
                  [(name, np.flatnonzero(metadata[col].astype(object).fillna("(missing)").astype(str).to_numpy() == name))
                   for name in sorted(metadata[col].dropna().astype(str).unique())])
        for name, rows in groups:
            rho_f = frequency_association(r.k_occurrence if rows is None else r.k_occurrence[rows], metadata, rows)
            if rho_f is not None:
                assoc.append((rho_f, f"{rho_f:.2f}" + ("" if name is None else f" among {escape(name)}s")))
        if assoc:
            who.append("Spearman ρ between $N_{" + str(k) + "}$ and the `frequency` column: "
                       + ", ".join(text for _, text in assoc)
                       + (" (near 0: being a hub is not explained by how often an entity occurs)."
                          if max(abs(x) for x, _ in assoc) < 0.2 else
                          "; where it is clearly positive, frequent entities are listed more often."))
    if who:
        parts.append("**Who the hubs are.** " + " ".join(who))

    if cross is not None and len(cross.table):
        worst = cross.table.sort_values("skewness", ascending=False).iloc[0]
        a, b = escape(worst["queries"]), escape(worst["index"])
        pair = (worst["queries"], worst["index"])
        top = cross.index_rows[pair][int(np.argmax(cross.k_occurrence[pair]))]
        parts.append(
            f"**Retrieval across kinds.** The lists above take neighbours from the whole set, all kinds together. "
            f"Retrieving {b}s for {a}s (each {a}'s {k} nearest {b}s, as a recommender does) gives skewness "
            f"{worst['skewness']:.2f}: {worst['antihub_occurrence']:.1%} of {b}s are never retrieved for any of "
            f"the {int(worst['n queries']):,} {a}s, the top {b} (**{escape(ids[top])}**{_freq_text(metadata, top, cross.index_rows[pair])}) "
            f"is in the lists of {worst['top_hub_reach']:.1%} of them, and the 1 % most retrieved {b}s fill "
            f"{worst['top1pct_share']:.1%} of all slots."
            + (f" The {b}s retrieved most are those closest to the mean direction of the {a}s (Spearman ρ = "
               f"{worst['direction_spearman']:.2f} between $N_{{{k}}}$ and that cosine): where the {a}s crowd, "
               f"for example pulled together by popular {b}s, the {b}s nearest that direction are shown to everyone."
               if worst["direction_spearman"] >= 0.3 else ""))

    if reduction is not None and len(reduction.table) > 1:
        parts.append(_reduction_paragraph(reduction))
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _distribution(ax, nk, color, label, marker="o"):
    values, counts = np.unique(nk, return_counts=True)
    ax.plot(values, counts, marker=marker, ms=3.5, lw=0.8, color=color, label=label, alpha=0.9)


def _occurrence_axis(axis, top: float) -> None:
    """Symmetric-log N_k axis (0 shown) with plain-number ticks 0, 1, 2, 5, 10, 20, 50, ..."""
    ticks = [0] + [m * 10 ** e for e in range(0, 8) for m in (1, 2, 5) if m * 10 ** e <= max(top, 1) * 1.05]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FixedFormatter([f"{t:,}" for t in ticks]))
    axis.set_minor_locator(NullLocator())


def k_occurrence_figure(r: HubnessResult, groups=None) -> plt.Figure:
    """Left: the N_k distribution on log axes with the mean k, the hub threshold and the seed's
    k + 2 sd rule. Right: N_k against the cosine to the mean direction (coloured by group)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.9))
    k = r.k
    _distribution(a, r.k_occurrence, PALETTE["data"], "points per value")
    a.axvline(k, color=PALETTE["muted"], ls="--", lw=1.1, label=f"mean = k = {k}")
    a.axvline(r.hub_size * k, color=PALETTE["reference"], ls="--", lw=1.1,
              label=f"hub threshold {r.hub_size:g}k = {r.hub_size * k:g}")
    a.axvline(r.info["seed_hub_threshold"], color=PALETTE["accent"], ls=":", lw=1.3,
              label=f"seed rule k + 2 sd = {r.info['seed_hub_threshold']:.1f}")
    a.set_xscale("symlog", linthresh=1.0)
    a.set_yscale("log")
    _occurrence_axis(a.xaxis, r.k_occurrence.max())
    a.set(xlabel=f"$N_{{{k}}}$: number of {k}-NN lists a point is in (symmetric log scale)",
          ylabel="Number of points (log scale)", xlim=(-0.2, None),
          title=f"k-occurrence distribution (skewness {r.values['k_occurrence_skewness']:.2f})")
    a.legend(loc="lower left", fontsize=8.5)
    colors = [PALETTE["data"], PALETTE["reference"], PALETTE["accent"], "#7b4ea3", "#2b8a8a", PALETTE["muted"]]
    if groups is not None:
        g = pd.Series(np.asarray(groups, dtype=object)).fillna("(missing)").astype(str).to_numpy()
        for name, c in zip(sorted(set(g))[:len(colors)], colors):
            s = g == name
            b.scatter(r.centroid_cosine[s], r.k_occurrence[s], s=5, alpha=0.45, color=c, label=str(name),
                      rasterized=True)
        b.legend(loc="upper left", fontsize=8.5, markerscale=2.5)
    else:
        b.scatter(r.centroid_cosine, r.k_occurrence, s=5, alpha=0.45, color=PALETTE["data"], rasterized=True)
    b.set_yscale("symlog", linthresh=1.0)
    _occurrence_axis(b.yaxis, r.k_occurrence.max())
    b.axhline(r.hub_size * k, color=PALETTE["reference"], ls="--", lw=1.1)
    b.set(xlabel="Cosine to the set's mean direction", ylabel=f"$N_{{{k}}}$ (symmetric log scale)",
          title=f"Hubs and the mean direction (Spearman ρ = {r.centroid_spearman:.2f})")
    return fig


def reduction_figure(effect: ReductionEffect, k: int) -> plt.Figure:
    """Left: share of points with N_k ≥ v before and after each reduction (log axes; a long flat tail
    is hubness). Right: Lorenz curves of N_k (share of neighbour slots held by the least-listed share
    of points)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.9))
    colors = [PALETTE["data"], PALETTE["reference"], PALETTE["accent"], "#7b4ea3"]
    markers = ["o", "s", "^", "D"]
    t = effect.table.set_index("setting")
    for (label, nk), c, mk in zip(effect.k_occurrence.items(), colors, markers):
        values, counts = np.unique(nk, return_counts=True)
        ccdf = np.cumsum(counts[::-1])[::-1] / len(nk)
        a.step(values, ccdf, where="post", color=c, lw=1.6, label=f"{label} (skew {t.loc[label, 'skewness']:.2f})")
        x = np.sort(nk).astype(float)
        lor = np.concatenate([[0.0], np.cumsum(x) / x.sum()])
        b.plot(np.linspace(0, 1, len(lor)), lor, color=c, lw=1.6,
               label=f"{label} (Gini {t.loc[label, 'gini']:.2f})")
    a.axvline(k, color=PALETTE["muted"], ls="--", lw=1.0)
    a.set_xscale("symlog", linthresh=1.0)
    a.set_yscale("log")
    _occurrence_axis(a.xaxis, max(int(nk.max()) for nk in effect.k_occurrence.values()))
    n = len(next(iter(effect.k_occurrence.values())))
    a.set(xlabel=f"$v$ (symmetric log scale; dashed: k = {k})", ylabel=f"Share of points with $N_{{{k}}} \\geq v$ (log)",
          ylim=(0.5 / n, 1.3), xlim=(-0.2, None), title="k-occurrence before and after hubness reduction")
    a.legend(loc="lower left", fontsize=8)
    b.plot([0, 1], [0, 1], color=PALETTE["muted"], ls=":", lw=1.1, label="every point listed equally often")
    b.set(xlabel="Share of points (sorted by $N_k$, least listed first)", ylabel="Share of neighbour slots",
          xlim=(0, 1), ylim=(0, 1), title="Lorenz curve of the k-occurrence")
    b.legend(loc="upper left", fontsize=8)
    return fig
