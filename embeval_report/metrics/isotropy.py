r"""Isotropy: is the embedding set using the whole space?

Implements seed 000 §217.0 (condition number, participation ratio, APCS, dimensions for 90 %
of the variance, entropy effective dimension; Tables 217.1 and 217.2) and seed 001 §21.1.1
(top-10 variance ratio; the *Isotropy Benchmarks* box).

Everything is computed **exactly** from two d x d moment matrices gathered in one chunked
pass over the rows (:func:`embeval_report.kernels.block_moments`):

* the covariance :math:`\Sigma = \frac1n \tilde E^\top \tilde E` of the mean-centred vectors, whose
  eigenvalues :math:`\lambda_1 \ge \dots \ge \lambda_d` give the spectral metrics;
* the sum :math:`s = \sum_i u_i` and Gram :math:`G = \sum_i u_i u_i^\top` of the unit vectors
  :math:`u_i = e_i / \lVert e_i \rVert`, which give the mean and spread of the cosine over all
  :math:`n(n-1)` ordered pairs :math:`i \ne j` without forming an n x n matrix:

  .. math::
     \mathrm{APCS} = \frac{\lVert s\rVert^2 - n}{n(n-1)}, \qquad
     \overline{\cos^2} = \frac{\lVert G\rVert_F^2 - n}{n(n-1)}, \qquad
     \mathrm{sd} = \sqrt{\overline{\cos^2} - \mathrm{APCS}^2}.

Intervals come from a bootstrap over random blocks of rows, re-using the per-block moment
matrices (no second pass over the data), or — when those would not fit in memory (large d) —
from a delete-a-group jackknife (:class:`~embeval_report.stats.ResamplingPlan`).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import UndefinedMetricWarning
from ..io import iter_groups
from ..kernels import (
    as_numpy,
    block_moments,
    chunk_budget,
    column_mean,
    pair_cosines,
    random_pairs,
    resolve_device,
    unit_rows,
)
from ..kernels.device import RowMap, resident
from ..kernels.moments import resampled_moments
from ..kernels.moments_cache import digest, remembered
from ..kernels.prefetch import read_rows
from ..kernels.spectra import replicate_spectra
from ..kernels.transforms import apply_rows, direction_remover, removed_unit_moments, removed_unit_sums
from ..stats import PlannedIntervals, ResamplingPlan, bootstrap_weights
from .spec import MetricSpec, specs
from .thresholds import THRESHOLDS, worst

#: pairs drawn for the cosine histogram when no sample size is given
HISTOGRAM_PAIRS = 100_000
#: pairs drawn per setting by :func:`all_but_the_top_effect`
ABTT_PAIRS = 20_000

SPECS = specs(
    MetricSpec("condition_number", "Condition number κ", "lower", r"\kappa = \lambda_1 / \lambda_d",
               "seed 000 §217.0.5.2.1; verdict Table 217.2", range=(1.0, math.inf),
               bands=THRESHOLDS["condition_number"], chance=1.0, full_rank=True),
    MetricSpec("participation_ratio", "Participation ratio", "higher",
               r"\mathrm{PR} = (\sum_j \lambda_j)^2 / \sum_j \lambda_j^2", "seed 000 §217.0.5.2.2",
               range=(1.0, math.inf), unit="dimensions"),
    MetricSpec("participation_ratio_fraction", "Participation ratio / d", "higher", r"\mathrm{PR}/d",
               "seed 000 §217.0.5.2.2; verdict Table 217.2", range=(0.0, 1.0),
               bands=THRESHOLDS["participation_ratio_fraction"], chance=1.0, unit="fraction of d", full_rank=True),
    MetricSpec("apcs", "Mean pairwise cosine (APCS)", "lower", r"\mathrm{APCS} = \mathbb{E}_{i \ne j}[\cos(e_i, e_j)]",
               "seed 000 §217.0.5.2.3; verdict Table 217.2", range=(-1.0, math.inf), bands=THRESHOLDS["apcs"],
               chance=0.0),
    MetricSpec("apcs_std", "Std of pairwise cosine", "higher", r"\mathrm{sd}_{i \ne j}[\cos(e_i, e_j)]",
               "seed 000 §217.0.5.2.3 (isotropic: ≈ 1/√d)", range=(0.0, 1.0)),
    MetricSpec("dims_for_90pct_variance", "Dimensions for 90 % variance", "higher",
               r"\min\{k : \sum_{j \le k} \lambda_j \ge 0.9 \sum_j \lambda_j\}",
               "seed 000 §217.0.11; verdict Table 217.2 (as % of d)", range=(1, math.inf),
               bands=THRESHOLDS["dims_for_90pct_variance_fraction"], per_d=True, unit="dimensions", full_rank=True),
    MetricSpec("effective_dim_entropy", "Entropy effective dimension", "higher",
               r"\exp(-\sum_j p_j \ln p_j),\ p_j = \lambda_j / \sum_k \lambda_k",
               "seed 000 §217.0.11 (compute_isotropy_metrics)", range=(1.0, math.inf), unit="dimensions"),
    MetricSpec("top10_variance_ratio", "Top-10 variance ratio", "lower", r"\sum_{j \le 10} \lambda_j / \sum_j \lambda_j",
               "seed 001 §21.1.1; verdict Isotropy Benchmarks box", range=(0.0, 1.0),
               bands=THRESHOLDS["top10_variance_ratio"]),
)


def spectral_metrics(eigenvalues, d: int | None = None) -> dict[str, float]:
    """Spectral isotropy metrics from covariance eigenvalues (any order; negatives clipped to 0).

    ``condition_number`` is ``inf`` when the covariance is singular (smallest eigenvalue at or
    below ``1e-12 * λ1``, e.g. ``n <= d`` or collapsed dimensions).
    """
    lam = np.sort(np.clip(np.asarray(eigenvalues, float), 0, None))[::-1]
    d = len(lam) if d is None else d
    total = lam.sum()
    if total <= 0:
        return dict(condition_number=math.inf, participation_ratio=0.0, participation_ratio_fraction=0.0,
                    dims_for_90pct_variance=d, effective_dim_entropy=0.0, top10_variance_ratio=1.0)
    p = lam / total
    pr = total ** 2 / (lam ** 2).sum()
    nz = p[p > 0]
    return dict(
        condition_number=float(lam[0] / lam[-1]) if lam[-1] > 1e-12 * lam[0] else math.inf,
        participation_ratio=float(pr),
        participation_ratio_fraction=float(pr / d),
        dims_for_90pct_variance=int(min(np.searchsorted(np.cumsum(p), 0.9 - 1e-12) + 1, len(lam))),
        effective_dim_entropy=float(np.exp(-(nz * np.log(nz)).sum())),
        top10_variance_ratio=float(p[:10].sum()),
    )


def no_variance(eigenvalues, mean_sq_norm: float) -> bool:
    """Whether the covariance is zero up to rounding (all rows the same): total variance below 1e-12 of the
    raw second moment."""
    total = float(np.clip(eigenvalues, 0, None).sum())
    return total <= 1e-12 * (total + mean_sq_norm)


def cosine_moments(s: np.ndarray, G: np.ndarray, n: float, same_row_pairs: float | None = None
                   ) -> tuple[float, float]:
    """Mean and standard deviation of the cosine over all ordered pairs of distinct rows.

    ``s`` and ``G`` are the sum and Gram of the unit vectors. ``same_row_pairs`` is the number of
    ordered pairs that are one row with itself (``n``; more for a bootstrap replicate, where it is
    the sum of squared multiplicities); they are removed from numerator and denominator.
    """
    return cosine_moments_of_sums(float(s @ s), float((G * G).sum()), n, same_row_pairs)


def cosine_moments_of_sums(ss: float, gg: float, n: float, same_row_pairs: float | None = None
                           ) -> tuple[float, float]:
    r""":func:`cosine_moments` from :math:`s^\top s` and :math:`\lVert G\rVert_F^2`."""
    same = n if same_row_pairs is None else same_row_pairs
    denom = n * n - same
    mean = (ss - same) / denom
    mean_sq = (gg - same) / denom
    return float(mean), float(math.sqrt(max(mean_sq - mean * mean, 0.0)))


def covariance_from_moments(N: float, s: np.ndarray, G: np.ndarray) -> np.ndarray:
    """The 1/N covariance from row count, (shifted) row sum and (shifted) second-moment matrix."""
    m = s / N
    return G / N - np.outer(m, m)


@dataclass(frozen=True)
class IsotropyResult(PlannedIntervals):
    """Everything the isotropy chapter shows."""

    n: int
    d: int
    values: dict            # metric name -> point value
    metrics: dict           # metric name -> Metric (value, CI, verdict, reference)
    eigenvalues: np.ndarray  # covariance spectrum, descending
    mean_norm_share: float  # ‖mean‖² / (‖mean‖² + tr Σ): share of the raw second moment on the mean direction
    pair_cosines: np.ndarray  # a random sample of pairwise cosines (for the histogram)
    plan: ResamplingPlan
    info: dict = field(default_factory=dict)
    mean: np.ndarray | None = None        # column mean
    covariance: np.ndarray | None = None  # the 1/n covariance the spectrum comes from

    @property
    def ci_method(self) -> str:
        return self.plan.describe(self.info.get("level", 0.95))

    def directions(self) -> "PrincipalDirections":
        """The set's principal directions from the moments already summed here (no further pass over the rows)."""
        return PrincipalDirections.from_covariance(self.mean, self.covariance)


def covariance_moments(X, *, n_boot: int = 200, seed: int = 0, device="auto"):
    """``(plan, column mean, resampled covariance moments)`` as :func:`measure_isotropy` takes them. The run's
    moments cache (:mod:`~embeval_report.kernels.moments_cache`) gives this pass to every chapter that asks
    with the same set and seed (:func:`set_directions`; the collapse chapter when its plan is the same)."""
    X = as_numpy(X)
    dev = resolve_device(device)
    plan = ResamplingPlan.choose(*X.shape, n_boot)
    mean = column_mean(X, device=dev)
    return plan, mean, resampled_moments(plan, X, shift=mean, seed=seed, device=dev, desc="covariance")


def measure_isotropy(X, *, n_boot: int = 200, sample_size: int | None = None, level: float = 0.95,
                     seed: int = 0, device="auto") -> IsotropyResult:
    r"""Isotropy metrics of an embedding set with confidence intervals.

    Parameters
    ----------
    X : array (n, d) or torch tensor
    n_boot : bootstrap resamples for the CIs (0 disables them)
    sample_size : pairs sampled for the cosine histogram (default :data:`HISTOGRAM_PAIRS`); the metrics are exact
    seed, device : determinism and ``"auto" | "cpu" | "cuda"``

    Metrics (direction; reference): ``condition_number`` λ1/λd of the 1/n covariance (lower;
    seed 000 §217.0.5.2.1), ``participation_ratio`` (Σλ)²/Σλ² and ``participation_ratio_fraction``
    PR/d (higher; §217.0.5.2.2), ``apcs`` mean cosine over all pairs i≠j and ``apcs_std``
    (lower / spread; §217.0.5.2.3), ``dims_for_90pct_variance`` (higher), ``effective_dim_entropy``
    exp of the entropy of λ/Σλ (higher; §217.0.11), ``top10_variance_ratio`` (lower; seed 001
    §21.1.1). Verdicts from Table 217.2 and seed 001's benchmarks box (see :data:`SPECS`).

    Intervals: basic bootstrap over random row blocks, with the bias-corrected estimate beside
    the plug-in value; a delete-a-group jackknife when the per-block moments do not fit in
    memory; none (with the reason in each record's ``note``) for fewer than 3 rows.

    Examples
    --------
    >>> import numpy as np
    >>> r = measure_isotropy(np.random.default_rng(0).standard_normal((2000, 16)), n_boot=0)
    >>> round(r.values["apcs"], 2), r.metrics["apcs"].verdict
    (0.0, 'healthy')
    """
    X = as_numpy(X)
    n, d = X.shape
    if n < 2:
        raise ValueError("isotropy needs at least 2 vectors")
    dev = resolve_device(device)
    with resident(X, dev):  # on a GPU: the rows uploaded once for the three passes
        plan, mean, cov_m = covariance_moments(X, n_boot=n_boot, seed=seed, device=dev)
        cos_m = resampled_moments(plan, X, transform=unit_rows, seed=seed, device=dev, desc="cosine Gram")

    scale = float(mean @ mean)

    def compute(w=None):
        N, s, G = cov_m.total(w)
        eig = np.linalg.eigvalsh(covariance_from_moments(N, s, G))
        _, su, Gu = cos_m.total(w)
        same = float(cos_m.count @ (np.ones_like(cos_m.count) if w is None else w ** 2))
        return _moment_values(eig, d, scale, float(su @ su), float((Gu * Gu).sum()), N, same), eig

    values, eig = compute()
    if no_variance(eig, scale):
        warnings.warn("every vector is the same up to rounding: the covariance is zero, so the spectral metrics "
                      "(condition number, participation ratio, variance shares) are undefined",
                      UndefinedMetricWarning, stacklevel=2)
    eig = np.sort(eig)[::-1]
    names = list(values)
    cis, corrected = {}, {}
    if plan.active:
        if plan.method == "bootstrap" and dev.type in BATCHED_REPLICATES:
            reps = np.array([[v[k] for k in names] for v in _batched_replicates(plan, cov_m, cos_m, d, scale, seed,
                                                                                dev)])
        elif plan.method == "bootstrap":
            reps = np.array([[v[k] for k in names] for v in _host_replicates(X, plan, cov_m, cos_m, d, scale, seed)])
        else:
            reps = plan.replicates(lambda w: (lambda v: [v[k] for k in names])(compute(w)[0]), seed=seed)
        for i, k in enumerate(names):
            cis[k] = plan.interval(values[k], reps[:, i], level, SPECS[k].range)
            corrected[k] = plan.bias_corrected(values[k], reps[:, i], SPECS[k].range)
    method = plan.describe(level)
    notes = {k: "" if plan.active else plan.reason for k in SPECS}
    if not math.isfinite(values["condition_number"]):  # reported by its cause, never as evidence
        flat = d - int((eig > 1e-12 * max(eig[0], 1e-300)).sum())
        notes["condition_number"] = (f"undefined: {flat} of {d} directions carry no variance (the covariance is "
                                     "singular" + ("; n ≤ d" if n <= d else "; see Dimensional collapse") + ")")
    metrics = {k: SPECS[k].record(values[k], cis.get(k), ci_method=method, d=d, bias_corrected=corrected.get(k),
                                  note=notes[k], n=n) for k in SPECS}
    i, j = random_pairs(n, sample_size or HISTOGRAM_PAIRS, seed=seed)
    mean_sq = float(mean @ mean)
    return IsotropyResult(
        n=n, d=d, values=values, metrics=metrics, eigenvalues=eig,
        mean_norm_share=mean_sq / (mean_sq + float(np.clip(eig, 0, None).sum())),
        pair_cosines=pair_cosines(X, i, j, device=dev), plan=plan,
        info=dict(rank=int((eig > 1e-12 * max(eig[0], 1e-300)).sum()), level=level, pair_sample=len(i),
                  device=str(dev)),
        mean=mean, covariance=covariance_from_moments(*cov_m.total()),
    )


#: devices whose bootstrap replicates are computed all at once (:func:`_batched_replicates`)
BATCHED_REPLICATES = ("cuda",)


def _batched_replicates(plan, cov_m, cos_m, d: int, scale: float, seed: int, dev) -> list[dict]:
    """:func:`measure_isotropy`'s bootstrap replicates on ``dev`` at once (the replicates' moments as one product
    of the weights, ``bootstrap_weights``, the draws of ``plan.replicates``, with the blocks' moments, their
    spectra batched: :func:`~embeval_report.kernels.spectra.replicate_spectra`), the metrics read on the host.
    Equal to the one-replicate-at-a-time values to rounding."""
    host = replicate_spectra(bootstrap_weights(plan.units, plan.n_boot, seed), cov_m, cos_m, d, dev)
    return [_moment_values(e, d, scale, float(ss), float(g2), float(n_r), float(sm)) for e, n_r, ss, g2, sm in zip(*host)]


def covariance_replicate_spectra(X, plan: ResamplingPlan, mom, seed: int) -> np.ndarray:
    """The covariance spectra (ascending, one row per replicate) of the block bootstrap ``plan`` over the block
    moments ``mom`` (:func:`covariance_moments`), the replicates' moments a chunk at a time by one product
    (:meth:`~embeval_report.kernels.blocks.BlockMoments.replicate_totals`) and their spectra by a stacked
    ``eigvalsh``. The isotropy and collapse chapters resample the same moments with the same draws: the run's
    moments cache (:func:`~embeval_report.kernels.moments_cache.remembered`) gives the second chapter the first
    one's spectra (200 eigendecompositions of d x d, about 4 s at d = 384 on two cores)."""
    W = bootstrap_weights(plan.units, plan.n_boot, seed)

    def compute():
        out = np.empty((len(W), mom.s.shape[1]))
        for rows, (N, s, G) in mom.replicate_totals(W):
            m = s / N[:, None]
            out[rows] = stacked_eigvalsh(G / N[:, None, None] - m[:, :, None] * m[:, None, :])
        return (out,)

    what = f"covariance_replicate_spectra|{plan.units}|{plan.n_boot}|{seed}|{digest(mom.count, mom.s, mom.shift)}"
    return remembered(X, what, compute)[0]


def stacked_eigvalsh(M: np.ndarray) -> np.ndarray:
    """``np.linalg.eigvalsh`` of a stack of symmetric matrices, each decomposed single-threaded and the stack
    shared out over the cores (one Python thread each; LAPACK releases the GIL). OpenBLAS threads one 384 x 384
    decomposition poorly, and on a loaded machine its threads' waits made 40 of them take 27.8 s instead of
    1.1 s single-threaded; a single-threaded decomposition is also the same on a machine of any core count."""
    from concurrent.futures import ThreadPoolExecutor

    from ..threads import blas_threads
    from .labels import _cores

    parts = min(_cores(), len(M))
    with blas_threads(1):
        if parts < 2:
            return np.linalg.eigvalsh(M)
        pieces = np.array_split(M, parts)
        with ThreadPoolExecutor(parts) as pool:
            return np.concatenate(list(pool.map(np.linalg.eigvalsh, pieces)))


def _host_replicates(X, plan, cov_m, cos_m, d: int, scale: float, seed: int) -> list[dict]:
    """:func:`measure_isotropy`'s bootstrap replicates on the host, all at once: the covariance spectra from
    :func:`covariance_replicate_spectra`, the cosine sums from the replicates' moments by one product a chunk at
    a time. Equal to the one-replicate-at-a-time values to rounding (another order of summation)."""
    W = bootstrap_weights(plan.units, plan.n_boot, seed)
    eig = covariance_replicate_spectra(X, plan, cov_m, seed)
    N, same = W @ cov_m.count, (W * W) @ cos_m.count
    ss, gg = np.empty(len(W)), np.empty(len(W))
    for rows, (_, su, Gu) in cos_m.replicate_totals(W):
        ss[rows], gg[rows] = (su * su).sum(1), (Gu * Gu).sum((1, 2))
    return [_moment_values(*args) for args in zip(eig, [d] * len(W), [scale] * len(W), ss, gg, N, same)]


def _moment_values(eig: np.ndarray, d: int, scale: float, ss: float, gg: float, n: float, same: float) -> dict:
    """:func:`measure_isotropy`'s values of the set or one replicate: the spectral metrics of the covariance
    spectrum ``eig`` (NaN when no variance is left) and the cosine mean and sd from the unit rows' sums
    (:func:`cosine_moments_of_sums`)."""
    vals = spectral_metrics(eig, d)
    if no_variance(eig, scale):
        vals = {k: float("nan") for k in vals}
    vals["apcs"], vals["apcs_std"] = cosine_moments_of_sums(ss, gg, n, same)
    return vals


def isotropy_by_group(X, groups, *, min_size: int = 20, n_boot: int = 100, seed: int = 0, device="auto"
                      ) -> pd.DataFrame:
    """Isotropy metrics within each group of rows (groups smaller than ``min_size`` are skipped).

    A set can look healthy overall while one kind of entity (for example users, pulled toward
    popular items) has collapsed; this table shows it: one row per group with ``n``, ``APCS`` and
    its interval (``APCS ci_low``, ``APCS ci_high``), ``PR / d``, ``κ``, ``dims for 90 %`` and the
    worst of the group's verdicts.
    """
    X = as_numpy(X)
    rows = []
    for g, idx in iter_groups(groups):
        if len(idx) < min_size:
            continue
        m = measure_isotropy(X[idx], n_boot=n_boot, sample_size=1000, seed=seed, device=device).metrics
        rows.append({"group": g, "n": len(idx), "APCS": m["apcs"].value, "APCS ci_low": m["apcs"].ci_low,
                     "APCS ci_high": m["apcs"].ci_high, "PR / d": m["participation_ratio_fraction"].value,
                     "κ": m["condition_number"].value, "dims for 90 %": m["dims_for_90pct_variance"].value,
                     "verdict": worst(x.verdict for x in m.values())})
    return pd.DataFrame(rows, columns=["group", "n", "APCS", "APCS ci_low", "APCS ci_high", "PR / d", "κ",
                                       "dims for 90 %", "verdict"])


# ---------------------------------------------------------------------------------------------
# All-but-the-top (Mu, Bhat & Viswanath 2018): remove the mean and the top D principal directions
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PrincipalDirections:
    """Mean and covariance eigen-decomposition (descending) of an embedding set."""

    mean: np.ndarray
    eigenvalues: np.ndarray
    vectors: np.ndarray  # (d, d), column j = j-th principal direction

    @classmethod
    def fit(cls, X, *, device="auto") -> "PrincipalDirections":
        mean = column_mean(X, device=device)
        m = block_moments(X, shift=mean, device=device)
        return cls.from_covariance(mean, covariance_from_moments(*m.total()))

    @classmethod
    def from_covariance(cls, mean: np.ndarray, covariance: np.ndarray) -> "PrincipalDirections":
        lam, V = np.linalg.eigh(covariance)
        order = np.argsort(lam)[::-1]
        return cls(mean, lam[order], V[:, order])

    def remover(self, n_remove: int, device) -> "callable":
        """Row transform ``x -> (x - mean) - (x - mean) V_D V_D^T`` (:func:`~embeval_report.kernels.transforms.direction_remover`)."""
        return direction_remover(self.mean, self.vectors[:, :n_remove], device)


def set_directions(X, *, seed: int = 0, device="auto") -> PrincipalDirections:
    """The principal directions of ``X`` from the covariance moments of :func:`measure_isotropy`
    (:func:`covariance_moments`): the isotropy, uniformity and correction chapters share one pass. Equal to
    :meth:`PrincipalDirections.fit` up to the order of summation (sums per random block)."""
    _, mean, m = covariance_moments(X, seed=seed, device=device)
    return PrincipalDirections.from_covariance(mean, covariance_from_moments(*m.total()))


def all_but_the_top(X, n_remove: int = 1, *, pcs: PrincipalDirections | None = None, device="auto"
                    ) -> np.ndarray | RowMap:
    """Mean-centred ``X`` with its top ``n_remove`` principal components projected out.

    Mu, Bhat & Viswanath (2018), "All-but-the-Top"; seed 000 §217.0.12 ``remove_top_components``
    (the mean is not added back). Returns float32 of the input's shape (see :func:`apply_rows`);
    ``pcs``: the set's :class:`PrincipalDirections` when already fitted.
    """
    dev = resolve_device(device)
    pcs = pcs or PrincipalDirections.fit(X, device=dev)
    return apply_rows(X, pcs.remover(n_remove, dev), device=dev)


def default_removals(d: int) -> list[int]:
    """Numbers of components to compare: 0 (centring only), 1, 2, 3, 5, 10 and Mu et al.'s ≈ d/100."""
    return sorted({k for k in (0, 1, 2, 3, 5, 10, max(1, round(d / 100))) if k < d - 1})


#: the metric columns of :func:`all_but_the_top_effect`'s table
ABTT_COLUMNS = ("apcs", "apcs_std", "participation_ratio_fraction", "condition_number", "dims_for_90pct_variance",
                "top10_variance_ratio")


def all_but_the_top_effect(X, removals: list[int] | None = None, *, base: IsotropyResult | None = None,
                           pcs: PrincipalDirections | None = None, sample_size: int = ABTT_PAIRS, seed: int = 0,
                           spread: str = "exact", device="auto") -> tuple[pd.DataFrame, dict[int, np.ndarray]]:
    """Isotropy before and after all-but-the-top for several numbers of removed components.

    Returns a table with one row per setting (``original`` plus ``D`` = each entry of
    ``removals``, default :func:`default_removals`) and the metrics :data:`ABTT_COLUMNS`
    (``participation_ratio_fraction`` and ``condition_number`` over the d − D remaining
    directions), plus a sample of pairwise cosines for each setting (same pairs; key -1 is the
    original). Exact metrics; removing D components leaves the spectrum λ_{D+1..d}. The APCS of every
    setting is exact; its spread (``apcs_std``) is exact from each setting's cosine Gram (one d x d
    product over the rows per setting) with ``spread="exact"``, or the sd of the sampled pair
    cosines with ``spread="sampled"``, which makes the whole table one pass over the rows. A setting
    whose corrected vectors are all zero (every row the same) has undefined cosines: NaN, with an
    :class:`~embeval_report.errors.UndefinedMetricWarning`.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    n, d = X.shape
    removals = default_removals(d) if removals is None else removals
    pcs = pcs or PrincipalDirections.fit(X, device=dev)
    i, j = random_pairs(n, sample_size, seed=seed)
    base = base or measure_isotropy(X, n_boot=0, sample_size=sample_size, seed=seed, device=dev)
    rows = [dict(setting="original", removed=None, **{k: base.values[k] for k in ABTT_COLUMNS})]
    samples = {-1: base.pair_cosines}
    scale = float(pcs.mean @ pcs.mean) + float(pcs.eigenvalues.clip(0).sum())
    if spread not in ("exact", "sampled"):
        raise ValueError(f"spread must be 'exact' or 'sampled', not {spread!r}")
    sums = _unit_sums(X, pcs, removals, dev) if spread == "sampled" else None
    grams = (None if spread == "sampled" else
             removed_unit_moments(X, pcs.mean, pcs.vectors,
                                  [D for D in removals if not no_variance(pcs.eigenvalues[D:], scale)], dev))
    pair_rows, inverse = np.unique(np.concatenate([i, j]), return_inverse=True)
    pair_block = read_rows(X, pair_rows)  # the sampled pairs' rows, read once for every D
    pi, pj = inverse[:len(i)], inverse[len(i):]
    for D in removals:
        f = pcs.remover(D, dev)
        vals = spectral_metrics(pcs.eigenvalues[D:], d - D)
        if no_variance(pcs.eigenvalues[D:], scale):  # nothing left: the corrected rows are all zero
            warnings.warn(f"after removing the mean and {D} component(s) every vector is zero (the set has no "
                          "variance there): cosines are undefined", UndefinedMetricWarning, stacklevel=2)
            vals = {k: float("nan") for k in vals}
            vals["apcs"] = vals["apcs_std"] = float("nan")
            samples[D] = np.full(len(i), np.nan)
        else:
            samples[D] = pair_cosines(pair_block, pi, pj, transform=f, device=dev)
            if sums is None:
                N, s, G = grams[D]
                vals["apcs"], vals["apcs_std"] = cosine_moments(s, G, N)
            else:
                vals["apcs"] = float((sums[D] @ sums[D] - n) / (n * (n - 1)))
                vals["apcs_std"] = float(np.std(samples[D]))
        label = "mean removed" if D == 0 else f"mean + top {D} removed"
        rows.append(dict(setting=label, removed=D, **{k: vals[k] for k in ABTT_COLUMNS}))
    return pd.DataFrame(rows), samples


def _unit_sums(X, pcs: PrincipalDirections, removals: list[int], device) -> dict[int, np.ndarray]:
    """The sums of the unit rows after removing the mean and D top directions, every D in ``removals`` from one
    pass (:func:`~embeval_report.kernels.transforms.removed_unit_sums`), or from the run's moments cache when an
    earlier chapter made the same pass."""
    removals = list(removals)
    top = max(removals, default=0)
    what = (f"abtt_unit_sums|{removals}|{digest(pcs.mean, pcs.vectors[:, :top])}|{resolve_device(device).type}|"
            f"{chunk_budget()}")
    def one_pass():
        sums = removed_unit_sums(X, pcs.mean, pcs.vectors, removals, device)
        return (np.stack([sums[D] for D in removals]) if removals else np.zeros((0, len(pcs.mean))),)

    sums, = remembered(X, what, one_pass)
    return dict(zip(removals, sums))


def best_apcs_removal(X, *, pcs: PrincipalDirections | None = None, device="auto") -> int | None:
    """The number of top components (:func:`default_removals`) whose removal brings the APCS closest to 0,
    as :func:`best_removal` of :func:`all_but_the_top_effect` picks it, from one pass over the rows (no
    spectra, spreads or pair samples); ``None`` when no removal leaves any variance."""
    dev = resolve_device(device)
    X = as_numpy(X)
    n, d = X.shape
    removals = default_removals(d)
    pcs = pcs or PrincipalDirections.fit(X, device=dev)
    scale = float(pcs.mean @ pcs.mean) + float(pcs.eigenvalues.clip(0).sum())
    kept = [D for D in removals if not no_variance(pcs.eigenvalues[D:], scale)]
    if not kept:
        return None
    sums = _unit_sums(X, pcs, kept, dev)
    apcs = [abs(float((sums[D] @ sums[D] - n) / (n * (n - 1)))) for D in kept]
    finite = [(a, D) for a, D in zip(apcs, kept) if math.isfinite(a)]
    return min(finite, key=lambda t: t[0])[1] if finite else None


def best_removal(abtt: pd.DataFrame) -> int | None:
    """The number of removed components whose corrected set has the APCS closest to 0 (``None`` if undefined)."""
    t = abtt[abtt.removed.notna() & np.isfinite(abtt["apcs"])]
    return int(t.loc[t["apcs"].abs().idxmin(), "removed"]) if len(t) else None
