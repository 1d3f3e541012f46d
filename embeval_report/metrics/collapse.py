r"""Dimension collapse and intrinsic dimension: how much of the nominal d does the set use?

Implements seed 001 §21.1.3 (``detect_dimension_collapse``: dead dimensions, effective rank,
stable rank and its collapse rule) with the standard definitions, RankMe (Garrido et al. 2023),
and two nonlinear intrinsic-dimension estimators, TwoNN (Facco et al. 2017) and the MLE of
Levina & Bickel (2005), compared with the linear participation ratio of the isotropy chapter.

**Spectra without an SVD of the n x d matrix.** The singular values of the mean-centred matrix
:math:`\tilde E` are :math:`\sigma_k = \sqrt{n \lambda_k}` with :math:`\lambda_k` the eigenvalues of
the 1/n covariance; those of the raw matrix :math:`E` (RankMe) are the square roots of the
eigenvalues of :math:`E^\top E`. Both d x d matrices come from one chunked pass
(:func:`embeval_report.kernels.block_moments`), and the confidence intervals re-weight its
per-block moments (a block bootstrap, as in :mod:`embeval_report.metrics.isotropy`, or a delete-a-group jackknife when
the per-block moments would not fit in memory: :class:`~embeval_report.stats.ResamplingPlan`).

**Where seed 001's code differs** (catalog App. C.3, C.7):

* *stable rank*: the seed codes :math:`(\sum\sigma)^2/\sum\sigma^2`; the conventional stable
  (numerical) rank is :math:`\lVert A\rVert_F^2/\lVert A\rVert_2^2 = \sum\sigma_k^2/\sigma_1^2`
  (Rudelson & Vershynin 2007). The seed's quantity is kept as ``stable_rank_seed001`` (info).
* *effective rank*: the seed cites "Roy & Bhattacharya 2007"; the definition it codes is Roy &
  Vetterli (2007), used here unchanged.
* *dead dimensions*: the seed counts coordinates with (unbiased) variance below an absolute 0.01,
  which depends on the scale of the vectors (unit vectors in d = 128 have per-coordinate variance
  about 1/128 < 0.01, so every coordinate would be "dead"). Here the cut is relative: 1 % of the
  mean per-coordinate variance by default. The median, the other natural reference, breaks
  exactly in the seed's own example (206 of 256 coordinates dead: the median coordinate is dead,
  so nothing falls below 1 % of it); both alternatives are reported for comparison.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import UndefinedMetricWarning
from ..kernels import as_numpy, column_mean, knn, resolve_device
from ..kernels.neighbours import usable_k
from ..kernels.pairs import neighbour_distances as exact_distances
from ..kernels.moments import resampled_moments
from ..stats import MIN_BLOCKS, PlannedIntervals, ResamplingPlan, bootstrap_ci, bootstrap_weights
from .isotropy import (covariance_from_moments, covariance_replicate_spectra, no_variance, spectral_metrics,
                       stacked_eigvalsh)
from .spec import MetricSpec, specs
from .thresholds import THRESHOLDS

#: RankMe's ε (Garrido et al. 2023, "1e-7 for float32")
RANKME_EPS = 1e-7
#: default relative cut for a dead dimension and the seed's absolute cut
DEAD_THRESHOLD = 0.01
SEED_ABSOLUTE_THRESHOLD = 0.01
#: rows sampled for the k-NN of the intrinsic-dimension estimators
ID_SAMPLE_SIZE = 20_000
#: neighbourhood sizes shown in the MLE-versus-k diagnostic
MLE_K_GRID = (5, 10, 15, 20, 30, 40, 50)
#: the smallest neighbourhood the MLE is computed with (fewer distinct rows: not estimated)
MIN_K = 3

#: seed 001 §21.1.3's collapse rule: effective rank below a share of d, or more than a share of dead dimensions
RANK_RULE, DEAD_RULE = THRESHOLDS["effective_rank_fraction"], THRESHOLDS["dead_dimension_fraction"]


def _percent(share: float) -> str:
    """``0.3`` -> ``"30 %"`` (how the references state the rule)."""
    return f"{share * 100:g} %"


SPECS = specs(
    MetricSpec("effective_rank", "Effective rank", "higher",
               r"\exp(-\sum_k p_k \ln p_k),\ p_k = \sigma_k / \sum_j \sigma_j,\ \sigma = \mathrm{sv}(\tilde E)",
               f"Roy & Vetterli 2007; verdict: seed 001 §21.1.3 collapse rule (< {_percent(RANK_RULE.healthy)} of d)",
               range=(1.0, math.inf), bands=RANK_RULE, per_d=True, unit="dimensions", full_rank=True),
    MetricSpec("stable_rank", "Stable rank", "higher",
               r"\lVert \tilde E \rVert_F^2 / \lVert \tilde E \rVert_2^2 = \sum_k \sigma_k^2 / \sigma_1^2",
               "Rudelson & Vershynin 2007 (seed 001 §21.1.3 codes (Σσ)²/Σσ² instead)", range=(1.0, math.inf),
               unit="dimensions"),
    MetricSpec("rankme", "RankMe", "higher",
               r"\exp(-\sum_k p_k \ln p_k),\ p_k = \sigma_k(E) / \lVert \sigma(E) \rVert_1 + \varepsilon",
               "Garrido et al. 2023 (uncentred E, ε = 1e-7)", range=(1.0, math.inf), unit="dimensions"),
    MetricSpec("dead_dimensions", "Dead dimensions", "lower", "",  # formula: the cut in use (see dead_formula)
               f"seed 001 §21.1.3 (relative cut); verdict: its collapse rule (> {_percent(DEAD_RULE.healthy)} of d)",
               range=(0.0, math.inf), bands=DEAD_RULE, per_d=True, unit="dimensions"),
    MetricSpec("intrinsic_dim_twonn", "Intrinsic dimension (TwoNN)", "higher",
               r"\hat m:\ -\ln(1 - F(\mu_i)) = \hat m \ln \mu_i,\ \mu_i = r_2(i) / r_1(i)",
               "Facco et al. 2017 (least-squares fit through the origin, largest 10 % of μ discarded)",
               range=(0.0, math.inf), unit="dimensions"),
    MetricSpec("intrinsic_dim_mle", "Intrinsic dimension (MLE)", "higher",
               r"\hat m = \Big[\tfrac1n \sum_i \tfrac{1}{k-1} \sum_{j<k} \ln \tfrac{T_k(x_i)}{T_j(x_i)}\Big]^{-1}",
               "Levina & Bickel 2005, local estimates combined by MacKay & Ghahramani 2005 (mean of inverses)",
               range=(0.0, math.inf), unit="dimensions"),
)


def dead_formula(threshold: float = DEAD_THRESHOLD, reference: str = "mean") -> str:
    """LaTeX of the dead-dimension count for a cut relative to the mean or median variance, or absolute."""
    if reference in ("mean", "median"):
        return (rf"\#\{{j : \mathrm{{Var}}(e_{{\cdot j}}) < {threshold:g} \cdot "
                rf"\mathrm{{{reference}}}_l \mathrm{{Var}}(e_{{\cdot l}})\}}")
    return rf"\#\{{j : \mathrm{{Var}}(e_{{\cdot j}}) < {threshold:g}\}}"


# ---------------------------------------------------------------------------------------------
# Spectrum-level definitions
# ---------------------------------------------------------------------------------------------

def _entropy_rank(p: np.ndarray) -> float:
    nz = p[p > 0]
    return float(np.exp(-(nz * np.log(nz)).sum()))


def effective_rank(singular_values) -> float:
    r"""Effective rank :math:`\exp(-\sum_k p_k \ln p_k)`, :math:`p_k = \sigma_k / \sum_j \sigma_j`.

    Roy & Vetterli (2007), "The effective rank: a measure of effective dimensionality" (EUSIPCO).
    Higher is better; 1 for a rank-one matrix, ``len(σ)`` when all singular values are equal.
    Zero singular values contribute nothing (``0 ln 0 = 0``). In this chapter σ are the singular
    values of the mean-centred embedding matrix.
    """
    s = np.clip(np.asarray(singular_values, float), 0, None)
    return _entropy_rank(s / s.sum()) if s.sum() > 0 else 0.0


def stable_rank(singular_values) -> float:
    r"""Stable (numerical) rank :math:`\lVert A\rVert_F^2 / \lVert A\rVert_2^2 = \sum_k \sigma_k^2 / \sigma_1^2`.

    Rudelson & Vershynin (2007). In [1, rank A]; higher is better. A single dominant direction
    drives it towards 1 however many other directions carry some variance.
    """
    s = np.asarray(singular_values, float)
    top = s.max() if s.size else 0.0
    return float((s ** 2).sum() / top ** 2) if top > 0 else 0.0


def stable_rank_seed001(singular_values) -> float:
    r"""Seed 001 §21.1.3's ``stable_rank`` as coded: :math:`(\sum_k \sigma_k)^2 / \sum_k \sigma_k^2`.

    Not the conventional stable rank (that is :func:`stable_rank`); it is the participation
    ratio of the singular values. Kept for comparison with the seed's numbers only.
    """
    s = np.asarray(singular_values, float)
    q = (s ** 2).sum()
    return float(s.sum() ** 2 / q) if q > 0 else 0.0


def rankme(singular_values, eps: float = RANKME_EPS) -> float:
    r"""RankMe :math:`\exp(-\sum_{k=1}^{\min(n,d)} p_k \ln p_k)`, :math:`p_k = \sigma_k/\lVert\sigma\rVert_1 + \varepsilon`.

    Garrido, Balestriero, Najman & LeCun (2023), "RankMe: assessing the downstream performance of
    pretrained self-supervised representations by their rank" (ICML), Eq. 1 with ε = 1e-7. σ are
    the singular values of the *uncentred* embedding matrix (pass all min(n, d) of them; ε makes
    zero singular values count a little). Higher is better. Some implementations (e.g. reptrix)
    use squared singular values (PCA explained-variance ratios) instead and give other numbers.
    """
    s = np.clip(np.asarray(singular_values, float), 0, None)
    if s.sum() <= 0:
        return 0.0
    p = s / s.sum() + eps
    return float(np.exp(-(p * np.log(p)).sum()))


def dead_dimensions(variances, threshold: float = DEAD_THRESHOLD, reference: str = "mean") -> tuple[int, float]:
    """Count coordinates whose variance is below a cut; returns ``(count, cut)``.

    ``reference="mean"`` (default): cut = ``threshold`` x the mean per-coordinate variance;
    ``"median"``: ``threshold`` x the median; ``"absolute"``: cut = ``threshold`` itself (seed 001
    §21.1.3 as coded, with ``threshold=0.01`` on the unbiased variance). Lower is better. The count
    is coordinate-wise: a collapsed set whose live subspace is rotated away from the axes has no
    dead coordinates, which the spectral ranks catch instead.
    """
    v = np.asarray(variances, float)
    if reference == "mean":
        cut = threshold * v.mean()
    elif reference == "median":
        cut = threshold * np.median(v)
    elif reference == "absolute":
        cut = threshold
    else:
        raise ValueError(f"reference must be 'mean', 'median' or 'absolute', not {reference!r}")
    return int((v < cut).sum()), float(cut)


# ---------------------------------------------------------------------------------------------
# Intrinsic dimension from neighbour distances
# ---------------------------------------------------------------------------------------------

def twonn_dimension(mu, discard_fraction: float = 0.1, *, axis: int = -1):
    r"""TwoNN estimate from ratios :math:`\mu_i = r_2(i)/r_1(i)` (Facco et al. 2017).

    Under local uniformity μ is Pareto with shape m, so :math:`-\ln(1 - F(\mu)) = m \ln \mu`. The
    estimate is the least-squares slope through the origin of :math:`y_i = -\ln(1 - i/N)` on
    :math:`\ln \mu_{(i)}` over the ``1 - discard_fraction`` smallest ratios (the paper's fit, as in
    scikit-dimension's ``TwoNN()``; the largest ratio is always left out, where F = 1). Vectorised
    over ``axis`` for the bootstrap.
    """
    mu = np.sort(np.asarray(mu, float), axis=axis)
    mu = np.moveaxis(mu, axis, -1)
    N = mu.shape[-1]
    keep = min(int(N * (1 - discard_fraction)), N - 1)  # F = N/N would give -ln 0
    if keep < 2:
        raise ValueError(f"TwoNN needs at least 2 ratios after discarding; got {N}")
    x = np.log(mu[..., :keep])
    y = -np.log(1 - np.arange(1, keep + 1) / N)
    return (x * y).sum(-1) / (x * x).sum(-1)


def mle_inverse_local(distances, k: int) -> np.ndarray:
    r"""Inverse local MLE dimension :math:`\frac{1}{k-1}\sum_{j<k} \ln(T_k/T_j)` per point.

    ``distances``: (n, >= k) ascending distances to the nearest neighbours (self excluded, all
    positive). Levina & Bickel (2005), Eq. 8; the local dimension is the reciprocal.
    """
    T = np.asarray(distances, float)[:, :k]
    return np.log(T[:, -1:] / T[:, :-1]).sum(1) / (k - 1)


def mle_dimension(inverse_local, *, axis: int = -1):
    """Global MLE: reciprocal of the mean inverse local estimate (MacKay & Ghahramani 2005).

    Averaging inverses is the maximum-likelihood combination of the local estimates (Levina &
    Bickel's arithmetic mean of the local estimates is biased upwards); scikit-dimension's
    ``MLE().fit(X, comb="mle")`` is the same estimator. Vectorised over ``axis``.
    """
    return 1.0 / np.mean(inverse_local, axis=axis)


@dataclass(frozen=True)
class IntrinsicDimension:
    """TwoNN and MLE estimates on a row sample, with their diagnostics."""

    twonn: float
    twonn_ci: tuple[float, float]
    mle: float
    mle_ci: tuple[float, float]
    k: int
    discard_fraction: float
    n_rows: int          # rows the estimators used (after sampling and removing duplicates)
    n_sampled: int       # rows sampled before removing duplicates
    n_duplicates: int    # exact duplicate rows removed from the sample
    log_mu: np.ndarray   # ln(r2/r1) per row, ascending (TwoNN diagnostic)
    mle_by_k: dict       # k -> global MLE estimate
    local_mle: np.ndarray  # per-row local MLE at k (may contain inf)
    ci_method: str


def neighbour_distances(X, k: int, *, device="auto") -> np.ndarray:
    """Ascending float64 Euclidean distances of every row to its ``k`` nearest other rows.

    Neighbours come from the shared exact :func:`embeval_report.kernels.knn` (float32, on the
    mean-centred rows); their distances are then recomputed from the input rows in float64
    (``‖x_i − x_j‖``, no Gram expansion), so the small distances the estimators divide by carry no
    cancellation error.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    Xc = (X - X.mean(0, dtype=np.float64)).astype(np.float32)
    idx, _ = knn(Xc, k, metric="euclidean", device=dev, desc="k-NN (intrinsic dimension)")
    return exact_distances(X, idx, dev)


def _undefined(value: float, message: str) -> float:
    """``value``, or NaN with an :class:`UndefinedMetricWarning` when it is not finite."""
    if math.isfinite(value):
        return value
    warnings.warn(message, UndefinedMetricWarning, stacklevel=3)
    return float("nan")


def _estimate(X, *, k: int, sample_size: int | None, discard_fraction: float, n_boot: int, level: float, seed: int,
              device) -> tuple[IntrinsicDimension | None, str]:
    """:func:`intrinsic_dimension` and, when it returns ``None``, the reason in words."""
    X = as_numpy(X)
    n = len(X)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, sample_size, replace=False)) if sample_size and n > sample_size else np.arange(n)
    S = np.ascontiguousarray(X[rows])
    _, first = np.unique(S, axis=0, return_index=True)
    S = S[np.sort(first)]
    m = len(S)
    k = usable_k(k, m)
    if k < MIN_K:
        among = f" among the {len(rows):,} sampled" if len(rows) < n else ""
        return None, (f"only {m} distinct vector{'s' if m != 1 else ''}{among}; the neighbour-based estimators need "
                      f"at least {MIN_K + 2} ({MIN_K} neighbours for the MLE, plus 2)")
    kmax = min(max(k, max(MLE_K_GRID)), m - 1)
    D = neighbour_distances(S, kmax, device=device)
    log_mu = np.sort(np.log(D[:, 1] / D[:, 0]))
    inv = mle_inverse_local(D, k)
    mu = np.exp(log_mu)
    with np.errstate(divide="ignore", invalid="ignore"):
        twonn = _undefined(float(twonn_dimension(mu, discard_fraction)),
                           "TwoNN intrinsic dimension is undefined: every point's second-nearest neighbour is as near "
                           "as its nearest (all ratios r2/r1 are 1)")
        mle = _undefined(float(mle_dimension(inv)),
                         f"MLE intrinsic dimension is undefined: every point's {k} nearest neighbours are at the same "
                         "distance")
        twonn_ci = mle_ci = (None, None)
        ci_method = ""
        if n_boot:
            if math.isfinite(twonn):
                twonn_ci = bootstrap_ci(lambda a, axis=-1: twonn_dimension(a, discard_fraction, axis=axis), mu,
                                        level=level, n_boot=n_boot, seed=seed, method="percentile")
            if math.isfinite(mle):
                mle_ci = bootstrap_ci(lambda a, axis=-1: mle_dimension(a, axis=axis), inv, level=level,
                                      n_boot=n_boot, seed=seed, method="percentile")
            ci_method = f"{level:.0%} percentile bootstrap over the {m:,} sampled points, {n_boot} resamples"
        local = 1.0 / inv
        by_k = {kk: float(mle_dimension(mle_inverse_local(D, kk))) for kk in sorted({*MLE_K_GRID, k}) if kk <= kmax}
    return IntrinsicDimension(
        twonn=twonn, twonn_ci=twonn_ci, mle=mle, mle_ci=mle_ci, k=k, discard_fraction=discard_fraction,
        n_rows=m, n_sampled=len(rows), n_duplicates=len(rows) - m, log_mu=log_mu, mle_by_k=by_k,
        local_mle=local, ci_method=ci_method), ""


def intrinsic_dimension(X, *, k: int = 20, sample_size: int | None = ID_SAMPLE_SIZE, discard_fraction: float = 0.1,
                        n_boot: int = 200, level: float = 0.95, seed: int = 0, device="auto"
                        ) -> IntrinsicDimension | None:
    """TwoNN and MLE intrinsic dimension of the rows of ``X`` (Euclidean distances).

    At most ``sample_size`` rows are drawn without replacement (seeded; all rows when ``n`` is
    smaller or ``sample_size`` is None); exact duplicate rows are then collapsed to one, since a zero
    distance makes ``ln(r2/r1)`` and ``ln(T_k/T_j)`` infinite (scikit-dimension drops such points
    with a warning; removing the copies keeps the point once). Neighbours are searched within the
    sample. CIs: percentile bootstrap over the sampled points with their neighbourhoods held fixed
    (``n_boot`` resamples); they do not include the choice of the row sample or the estimators'
    bias (both underestimate when the intrinsic dimension is high). Returns ``None`` when fewer than
    ``k + 2`` distinct rows remain (``k`` is lowered to fit small sets first, down to 3). An estimate
    that is undefined (every neighbour at the same distance) is NaN, with an
    :class:`~embeval_report.errors.UndefinedMetricWarning`.
    """
    return _estimate(X, k=k, sample_size=sample_size, discard_fraction=discard_fraction, n_boot=n_boot, level=level,
                     seed=seed, device=device)[0]


# ---------------------------------------------------------------------------------------------
# The chapter's measurement
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CollapseResult(PlannedIntervals):
    """Everything the collapse chapter shows."""

    n: int
    d: int
    values: dict                 # metric name -> point value
    metrics: dict                # metric name -> Metric
    singular_values: np.ndarray  # of the mean-centred matrix, descending (length d)
    raw_singular_values: np.ndarray  # of the uncentred matrix, descending (length min(n, d))
    variances: np.ndarray        # per-coordinate variance (1/n), coordinate order
    dead_threshold: float        # relative factor (or the absolute cut when dead_reference="absolute")
    dead_reference: str
    dead_cut: float              # the variance cut actually applied
    participation_ratio: tuple   # (value, ci_low, ci_high), from the same spectrum
    intrinsic: IntrinsicDimension | None
    plan: ResamplingPlan         # how the spectral intervals were obtained
    info: dict = field(default_factory=dict)

    @property
    def no_variance(self) -> bool:
        """Every vector is the same (up to rounding): the centred spectrum is zero."""
        return bool(self.info.get("no_variance"))

    @property
    def collapse_detected(self) -> bool:
        """Seed 001 §21.1.3's rule: dead ratio > 0.1 or effective rank < 0.3 d (a set without variance has
        collapsed completely). The effective-rank part assumes n > d (not estimable on fewer vectors)."""
        if self.no_variance:
            return True
        return (self.values["dead_dimensions"] / self.d > DEAD_RULE.healthy
                or (self.n > self.d and self.values["effective_rank"] < RANK_RULE.healthy * self.d))


def _spectra(N: float, s: np.ndarray, G: np.ndarray, shift: np.ndarray, n: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Covariance eigenvalues, centred and raw singular values, per-coordinate variances."""
    C = covariance_from_moments(N, s, G)
    raw = G + np.outer(s, shift) + np.outer(shift, s) + N * np.outer(shift, shift)  # sum_i x_i x_i^T
    return _from_spectra(N, np.linalg.eigvalsh(C), np.linalg.eigvalsh(raw), np.diag(C).copy(), n)


def _from_spectra(N: float, eig: np.ndarray, raw_eig: np.ndarray, var: np.ndarray, n: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_spectra` from the ascending spectra of the covariance and of the raw second moment."""
    lam = np.sort(eig)[::-1]
    lam[lam <= lam[0] * len(lam) * np.finfo(float).eps] = 0.0  # numerical zeros of a rank-deficient set
    mu2 = np.sort(raw_eig)[::-1][:min(n, len(lam))]
    mu2[mu2 <= mu2[0] * len(lam) * np.finfo(float).eps] = 0.0
    return lam, np.sqrt(N * lam), np.sqrt(mu2), var


def _replicate_spectra(X, plan: ResamplingPlan, mom, shift: np.ndarray, n: int, seed: int):
    """:func:`_spectra` of each bootstrap replicate of ``plan``, all at once: the covariance spectra shared with
    the isotropy chapter (:func:`~.isotropy.covariance_replicate_spectra`), the raw second moments' by a stacked
    ``eigvalsh``, the replicates' moments by one product a chunk at a time. Equal to one replicate at a time to
    rounding (another order of summation)."""
    W = bootstrap_weights(plan.units, plan.n_boot, seed)
    eig = covariance_replicate_spectra(X, plan, mom, seed)
    outer = np.outer(shift, shift)
    for rows, (N, s, G) in mom.replicate_totals(W):
        m = s / N[:, None]
        var = np.diagonal(G, axis1=1, axis2=2) / N[:, None] - m * m
        raw = G + s[:, :, None] * shift[None, None, :] + shift[None, :, None] * s[:, None, :] + N[:, None, None] * outer
        for N_r, e, r, v in zip(N, eig[rows], stacked_eigvalsh(raw), var):
            yield N_r, _from_spectra(N_r, e, r, v.copy(), n)


def resampling_plan(n: int, d: int, n_boot: int) -> ResamplingPlan:
    """The plan of the spectral intervals: a block bootstrap of the d x d second moments, a delete-a-group
    jackknife when the per-block moments do not fit in memory, none below ``MIN_BLOCKS`` rows (a spectrum
    of so few rows has no useful resampled interval). The same plan as the isotropy chapter's covariance
    moments (:func:`~embeval_report.metrics.isotropy.covariance_moments`), so that one pass over the set serves
    both through the run's moments cache (above 724 dimensions a plan of its own took a second full pass: 211 s
    of a 10M x 768 run)."""
    plan = ResamplingPlan.choose(n, d, n_boot)
    if plan.method == "jackknife" and n < MIN_BLOCKS:
        return ResamplingPlan("none", 1, 0, f"{n} rows are too few for a resampled interval of a spectrum "
                                            f"(at least {MIN_BLOCKS} needed)")
    return plan


def measure_collapse(X, *, dead_threshold: float = DEAD_THRESHOLD, dead_reference: str = "mean", k: int = 20,
                     sample_size: int | None = None, id_rows: int = ID_SAMPLE_SIZE, n_boot: int = 200,
                     level: float = 0.95, seed: int = 0, device="auto") -> CollapseResult:
    r"""Dimension-collapse metrics and intrinsic dimension of an embedding set, with CIs.

    Parameters
    ----------
    X : array (n, d) or torch tensor
    dead_threshold, dead_reference : a coordinate is dead when its variance is below
        ``dead_threshold`` x the mean (or median) per-coordinate variance; see :func:`dead_dimensions`
    k : neighbours for the MLE intrinsic dimension
    sample_size : the row budget of sampled estimates (``--sample-size``); here it caps ``id_rows``; spectral
        metrics are exact over all rows
    id_rows : rows sampled for the intrinsic-dimension k-NN (default 20 000)
    n_boot : bootstrap resamples (0 disables CIs); seed, device as elsewhere

    Metrics (direction; reference, see :data:`SPECS`): ``effective_rank`` (higher; Roy & Vetterli
    2007, centred), ``stable_rank`` (higher; ‖Ẽ‖F²/‖Ẽ‖2²), ``rankme`` (higher; Garrido et al. 2023,
    uncentred), ``dead_dimensions`` (lower; seed 001 §21.1.3), ``intrinsic_dim_twonn`` (Facco et al.
    2017) and ``intrinsic_dim_mle`` (Levina & Bickel 2005 / MacKay & Ghahramani). Verdicts from seed
    001 §21.1.3's collapse rule on effective rank / d and dead dimensions / d; none for the others.

    Intervals (:func:`resampling_plan`): basic bootstrap over random row blocks (percentile for the
    dead-dimension count) with the bias-corrected estimate beside the plug-in value, a
    delete-a-group jackknife for large d, none for fewer than 20 rows (the reason in each record's
    ``note``). When every vector is the same the centred spectrum is zero: effective rank, stable
    rank, dead dimensions (relative cut) and the participation ratio are undefined (NaN, with an
    :class:`~embeval_report.errors.UndefinedMetricWarning`); RankMe of the uncentred vectors is 1.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).standard_normal((3000, 16))
    >>> r = measure_collapse(X, n_boot=0)
    >>> round(r.values["stable_rank"]), r.values["dead_dimensions"], r.metrics["effective_rank"].verdict
    (14, 0, 'healthy')
    """
    X = as_numpy(X)
    n, d = X.shape
    if n < 2:
        raise ValueError("dimension collapse needs at least 2 vectors")
    dev = resolve_device(device)
    plan = resampling_plan(n, d, n_boot)
    mean = column_mean(X, device=dev)
    mom = resampled_moments(plan, X, shift=mean, seed=seed, device=dev, desc="second moments")
    scale = float(mean @ mean)
    centred = ("effective_rank", "stable_rank") + (("dead_dimensions",) if dead_reference != "absolute" else ())

    def compute(w=None, spectra=None):
        lam, sv, raw_sv, var = _spectra(*mom.total(w), mean, n) if spectra is None else spectra
        dead, cut = dead_dimensions(var, dead_threshold, dead_reference)
        vals = dict(effective_rank=effective_rank(sv), stable_rank=stable_rank(sv), rankme=rankme(raw_sv),
                    dead_dimensions=dead)
        pr = spectral_metrics(lam, d)["participation_ratio"]
        if no_variance(lam, scale):
            vals.update(dict.fromkeys(centred, float("nan")))
            pr = float("nan")
        return vals, pr, (sv, raw_sv, var, cut)

    values, pr, (sv, raw_sv, var, cut) = compute()
    flat = bool(np.isnan(pr))
    if flat:
        warnings.warn("every vector is the same up to rounding: the centred spectrum is zero, so the effective rank, "
                      "stable rank, participation ratio and the dead-dimension count (a cut relative to the variance) "
                      "are undefined", UndefinedMetricWarning, stacklevel=2)
    names = list(values)
    bounds = (1.0, float(d))
    cis, corrected, pr_ci = {}, {}, (None, None)
    if plan.active:
        def replicate(v):
            return [v[0][k_] for k_ in names] + [v[1]]

        reps = (np.array([replicate(compute(spectra=sp)) for _, sp in _replicate_spectra(X, plan, mom, mean, n, seed)])
                if plan.method == "bootstrap" else plan.replicates(lambda w: replicate(compute(w)), seed=seed))
        for i, name in enumerate(names):
            if name == "dead_dimensions":  # a count: percentile interval of the resampled counts
                cis[name] = plan.interval(values[name], reps[:, i], level, (0.0, float(d)), kind="percentile")
            else:
                cis[name] = plan.interval(values[name], reps[:, i], level, bounds)
                corrected[name] = plan.bias_corrected(values[name], reps[:, i], bounds)
        pr_ci = plan.interval(pr, reps[:, -1], level, bounds)
    spec_method = plan.describe(level, percentile_for="the count")
    ident, id_reason = _estimate(X, k=k, sample_size=min(id_rows, sample_size or id_rows), discard_fraction=0.1,
                                 n_boot=n_boot, level=level, seed=seed, device=dev)
    if ident is not None:
        values["intrinsic_dim_twonn"] = ident.twonn
        values["intrinsic_dim_mle"] = ident.mle
        cis["intrinsic_dim_twonn"], cis["intrinsic_dim_mle"] = ident.twonn_ci, ident.mle_ci

    metrics = {}
    for name, spec in zip(SPECS, SPECS.values()):
        if name not in values:
            continue
        if name == "dead_dimensions":
            spec = replace(spec, formula=dead_formula(dead_threshold, dead_reference))
        intrinsic = name.startswith("intrinsic")
        metrics[name] = spec.record(values[name], cis.get(name), ci_method=ident.ci_method if intrinsic else spec_method,
                                    d=d, bias_corrected=corrected.get(name),
                                    note="" if intrinsic or plan.active else plan.reason, n=n)
    info = dict(
        stable_rank_seed001=stable_rank_seed001(sv),
        rank=int((sv > 0).sum()),
        dead_by_reference={ref_: dead_dimensions(var, dead_threshold, ref_)[0] for ref_ in ("mean", "median")},
        dead_seed_absolute=dead_dimensions(var * n / max(n - 1, 1), SEED_ABSOLUTE_THRESHOLD, "absolute")[0],
        mean_norm_share=float(mean @ mean / (mean @ mean + var.sum())),
        level=level, device=str(dev), intrinsic_k_requested=k)
    if flat:
        info["no_variance"] = True
    if ident is None:
        info["intrinsic_dimension_skipped"] = id_reason
    return CollapseResult(
        n=n, d=d, values=values, metrics=metrics, singular_values=sv, raw_singular_values=raw_sv, variances=var,
        dead_threshold=dead_threshold, dead_reference=dead_reference, dead_cut=cut,
        participation_ratio=(pr, *pr_ci), intrinsic=ident, plan=plan, info=info)
