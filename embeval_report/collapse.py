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
per-block moments (a block bootstrap, as in :mod:`embeval_report.isotropy`).

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

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from .isotropy import bootstrap_blocks, covariance_from_moments, spectral_metrics
from .kernels import as_numpy, block_moments, chunk_rows, column_mean, knn, resolve_device
from .plotting import PALETTE, WIDTH
from .results import Metric
from .stats import basic_interval, bootstrap_ci, percentile_interval, weighted_bootstrap
from .thresholds import THRESHOLDS, verdict

#: RankMe's ε (Garrido et al. 2023, "1e-7 for float32")
RANKME_EPS = 1e-7
#: default relative cut for a dead dimension and the seed's absolute cut
DEAD_THRESHOLD = 0.01
SEED_ABSOLUTE_THRESHOLD = 0.01
#: rows sampled for the k-NN of the intrinsic-dimension estimators
ID_SAMPLE_SIZE = 20_000
#: neighbourhood sizes shown in the MLE-versus-k diagnostic
MLE_K_GRID = (5, 10, 15, 20, 30, 40, 50)

#: name -> (label, direction, LaTeX formula, reference, threshold quantity or None)
METRICS = {
    "effective_rank": (
        "Effective rank", "higher",
        r"\exp(-\sum_k p_k \ln p_k),\ p_k = \sigma_k / \sum_j \sigma_j,\ \sigma = \mathrm{sv}(\tilde E)",
        "Roy & Vetterli 2007; verdict: seed 001 §21.1.3 collapse rule (< 30 % of d)", "effective_rank_fraction"),
    "stable_rank": (
        "Stable rank", "higher",
        r"\lVert \tilde E \rVert_F^2 / \lVert \tilde E \rVert_2^2 = \sum_k \sigma_k^2 / \sigma_1^2",
        "Rudelson & Vershynin 2007 (seed 001 §21.1.3 codes (Σσ)²/Σσ² instead)", None),
    "rankme": (
        "RankMe", "higher",
        r"\exp(-\sum_k p_k \ln p_k),\ p_k = \sigma_k(E) / \lVert \sigma(E) \rVert_1 + \varepsilon",
        "Garrido et al. 2023 (uncentred E, ε = 1e-7)", None),
    "dead_dimensions": (
        "Dead dimensions", "lower", None,
        "seed 001 §21.1.3 (relative cut); verdict: its collapse rule (> 10 % of d)", "dead_dimension_fraction"),
    "intrinsic_dim_twonn": (
        "Intrinsic dimension (TwoNN)", "higher",
        r"\hat m:\ -\ln(1 - F(\mu_i)) = \hat m \ln \mu_i,\ \mu_i = r_2(i) / r_1(i)",
        "Facco et al. 2017 (least-squares fit through the origin, largest 10 % of μ discarded)", None),
    "intrinsic_dim_mle": (
        "Intrinsic dimension (MLE)", "higher",
        r"\hat m = \Big[\tfrac1n \sum_i \tfrac{1}{k-1} \sum_{j<k} \ln \tfrac{T_k(x_i)}{T_j(x_i)}\Big]^{-1}",
        "Levina & Bickel 2005, local estimates combined by MacKay & Ghahramani 2005 (mean of inverses)", None),
}

_SPECTRAL = ("effective_rank", "stable_rank", "rankme", "dead_dimensions")


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
    Xt = torch.as_tensor(np.asarray(X, np.float64), device=dev)
    it = torch.as_tensor(idx, device=dev)
    out = np.empty(idx.shape)
    step = chunk_rows(len(X), k * X.shape[1] * 8 * 2)
    for s in range(0, len(X), step):
        diff = Xt[it[s:s + step]] - Xt[s:s + step, None, :]
        out[s:s + step] = torch.sort(diff.norm(dim=2), dim=1).values.cpu().numpy()
    return out


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
    ``k + 2`` distinct rows remain (``k`` is lowered to fit small sets first).
    """
    X = as_numpy(X)
    n = len(X)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, sample_size, replace=False)) if sample_size and n > sample_size else np.arange(n)
    S = np.ascontiguousarray(X[rows])
    _, first = np.unique(S, axis=0, return_index=True)
    S = S[np.sort(first)]
    m = len(S)
    k = min(k, m - 2)
    if k < 3:
        return None
    kmax = min(max(k, max(MLE_K_GRID)), m - 1)
    D = neighbour_distances(S, kmax, device=device)
    log_mu = np.sort(np.log(D[:, 1] / D[:, 0]))
    inv = mle_inverse_local(D, k)
    mu = np.exp(log_mu)
    twonn = float(twonn_dimension(mu, discard_fraction))
    mle = float(mle_dimension(inv))
    if n_boot:
        twonn_ci = bootstrap_ci(lambda a, axis=-1: twonn_dimension(a, discard_fraction, axis=axis), mu,
                                level=level, n_boot=n_boot, seed=seed, method="percentile")
        mle_ci = bootstrap_ci(lambda a, axis=-1: mle_dimension(a, axis=axis), inv, level=level, n_boot=n_boot,
                              seed=seed, method="percentile")
        ci_method = f"{level:.0%} percentile bootstrap over the {m:,} sampled points, {n_boot} resamples"
    else:
        twonn_ci = mle_ci = (None, None)
        ci_method = ""
    with np.errstate(divide="ignore"):
        local = 1.0 / inv
    return IntrinsicDimension(
        twonn=twonn, twonn_ci=twonn_ci, mle=mle, mle_ci=mle_ci, k=k, discard_fraction=discard_fraction,
        n_rows=m, n_sampled=len(rows), n_duplicates=len(rows) - m, log_mu=log_mu,
        mle_by_k={kk: float(mle_dimension(mle_inverse_local(D, kk))) for kk in sorted({*MLE_K_GRID, k}) if kk <= kmax},
        local_mle=local, ci_method=ci_method)


# ---------------------------------------------------------------------------------------------
# The chapter's measurement
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CollapseResult:
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
    n_blocks: int
    n_boot: int
    info: dict = field(default_factory=dict)

    @property
    def collapse_detected(self) -> bool:
        """Seed 001 §21.1.3's rule: dead ratio > 0.1 or effective rank < 0.3 d."""
        return self.values["dead_dimensions"] / self.d > 0.1 or self.values["effective_rank"] < 0.3 * self.d


def _spectra(N: float, s: np.ndarray, G: np.ndarray, shift: np.ndarray, n: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Covariance eigenvalues, centred and raw singular values, per-coordinate variances."""
    C = covariance_from_moments(N, s, G)
    lam = np.sort(np.linalg.eigvalsh(C))[::-1]
    lam[lam <= lam[0] * len(lam) * np.finfo(float).eps] = 0.0  # numerical zeros of a rank-deficient set
    raw = G + np.outer(s, shift) + np.outer(shift, s) + N * np.outer(shift, shift)  # sum_i x_i x_i^T
    mu2 = np.sort(np.linalg.eigvalsh(raw))[::-1][:min(n, len(lam))]
    mu2[mu2 <= mu2[0] * len(lam) * np.finfo(float).eps] = 0.0
    return lam, np.sqrt(N * lam), np.sqrt(mu2), np.diag(C).copy()


def measure_collapse(X, *, dead_threshold: float = DEAD_THRESHOLD, dead_reference: str = "mean", k: int = 20,
                     sample_size: int | None = None, n_boot: int = 200, level: float = 0.95, seed: int = 0,
                     device="auto") -> CollapseResult:
    r"""Dimension-collapse metrics and intrinsic dimension of an embedding set, with CIs.

    Parameters
    ----------
    X : array (n, d) or torch tensor
    dead_threshold, dead_reference : a coordinate is dead when its variance is below
        ``dead_threshold`` x the mean (or median) per-coordinate variance; see :func:`dead_dimensions`
    k : neighbours for the MLE intrinsic dimension
    sample_size : rows sampled for the intrinsic-dimension k-NN (default 20 000); spectral metrics
        are exact over all rows
    n_boot : bootstrap resamples (0 disables CIs); seed, device as elsewhere

    Metrics (direction; reference): ``effective_rank`` (higher; Roy & Vetterli 2007, centred),
    ``stable_rank`` (higher; ‖Ẽ‖F²/‖Ẽ‖2²), ``rankme`` (higher; Garrido et al. 2023, uncentred),
    ``dead_dimensions`` (lower; seed 001 §21.1.3), ``intrinsic_dim_twonn`` (Facco et al. 2017) and
    ``intrinsic_dim_mle`` (Levina & Bickel 2005 / MacKay & Ghahramani). Verdicts from seed 001
    §21.1.3's collapse rule on effective rank / d and dead dimensions / d; none for the others.

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
    blocks, n_boot_spec = bootstrap_blocks(n, d, n_boot)
    mean = column_mean(X, device=dev)
    mom = block_moments(X, shift=mean, n_blocks=blocks, seed=seed, device=dev, desc="second moments")

    def compute(w=None):
        N, s, G = mom.total(w)
        lam, sv, raw_sv, var = _spectra(N, s, G, mean, n)
        dead, cut = dead_dimensions(var, dead_threshold, dead_reference)
        vals = dict(effective_rank=effective_rank(sv), stable_rank=stable_rank(sv), rankme=rankme(raw_sv),
                    dead_dimensions=dead)
        return vals, spectral_metrics(lam, d)["participation_ratio"], (sv, raw_sv, var, cut)

    values, pr, (sv, raw_sv, var, cut) = compute()
    cis, pr_ci = {}, (None, None)
    spec_method = ""
    if n_boot_spec:
        names = list(values)
        reps = weighted_bootstrap(lambda w: (lambda v: [v[0][k_] for k_ in names] + [v[1]])(compute(w)), blocks,
                                  n_boot=n_boot_spec, seed=seed)
        for i, name in enumerate(names):
            if name == "dead_dimensions":  # a count: percentile interval of the resampled counts
                cis[name] = percentile_interval(reps[:, i], level)
            else:
                cis[name] = basic_interval(values[name], reps[:, i], level, (1.0, float(d)))
        pr_ci = basic_interval(pr, reps[:, -1], level, (1.0, float(d)))
        spec_method = (f"{level:.0%} basic bootstrap (percentile for the count), {n_boot_spec} resamples of "
                       f"{blocks} random row blocks")
    ident = intrinsic_dimension(X, k=k, sample_size=sample_size or ID_SAMPLE_SIZE, n_boot=n_boot,
                                level=level, seed=seed, device=dev)
    if ident is not None:
        values["intrinsic_dim_twonn"] = ident.twonn
        values["intrinsic_dim_mle"] = ident.mle
        cis["intrinsic_dim_twonn"], cis["intrinsic_dim_mle"] = ident.twonn_ci, ident.mle_ci

    ref_word = {"mean": "the mean", "median": "the median"}.get(dead_reference)
    dead_formula = (rf"\#\{{j : \mathrm{{Var}}(e_{{\cdot j}}) < {dead_threshold:g} \cdot "
                    rf"\mathrm{{{dead_reference}}}_l \mathrm{{Var}}(e_{{\cdot l}})\}}" if ref_word else
                    rf"\#\{{j : \mathrm{{Var}}(e_{{\cdot j}}) < {dead_threshold:g}\}}")
    metrics = {}
    for name, (label, direction, formula, ref, quantity) in METRICS.items():
        if name not in values:
            continue
        v = values[name]
        q = v / d if quantity else None
        lo, hi = cis.get(name, (None, None))
        method = (ident.ci_method if name.startswith("intrinsic") else spec_method) if lo is not None else ""
        metrics[name] = Metric(name=name, value=v, direction=direction, reference=ref, ci_low=lo, ci_high=hi,
                               verdict=verdict(quantity, q) if quantity in THRESHOLDS else None, label=label,
                               formula=formula or dead_formula, ci_method=method)
    return CollapseResult(
        n=n, d=d, values=values, metrics=metrics, singular_values=sv, raw_singular_values=raw_sv, variances=var,
        dead_threshold=dead_threshold, dead_reference=dead_reference, dead_cut=cut,
        participation_ratio=(pr, *pr_ci), intrinsic=ident, n_blocks=blocks, n_boot=n_boot_spec,
        info=dict(
            stable_rank_seed001=stable_rank_seed001(sv),
            rank=int((sv > 0).sum()),
            dead_by_reference={ref_: dead_dimensions(var, dead_threshold, ref_)[0] for ref_ in ("mean", "median")},
            dead_seed_absolute=dead_dimensions(var * n / max(n - 1, 1), SEED_ABSOLUTE_THRESHOLD, "absolute")[0],
            mean_norm_share=float(mean @ mean / (mean @ mean + var.sum())),
            level=level, device=str(dev)),
    )


def dimension_table(r: CollapseResult) -> pd.DataFrame:
    """Every dimension estimate side by side: value, CI, share of d, what it measures."""
    def row(name, what, v, lo=None, hi=None, ref=""):
        return {"estimate": name, "value": v, "95 % CI": "—" if lo is None else f"{lo:.1f} – {hi:.1f}",
                "% of d": v / r.d * 100, "what it counts": what, "reference": ref}
    m = r.metrics
    rows = [row("Nominal dimension d", "coordinates stored", float(r.d)),
            row("Participation ratio", "linear: equal-variance directions (centred)", *r.participation_ratio,
                ref="seed 000 §217.0.5.2.2")]
    for name, what in (("effective_rank", "linear: entropy of centred singular values"),
                       ("rankme", "linear: entropy of raw singular values (mean included)"),
                       ("stable_rank", "linear: total variance / top direction's variance"),
                       ("intrinsic_dim_twonn", "nonlinear: local, from 2 nearest neighbours"),
                       ("intrinsic_dim_mle", f"nonlinear: local, from {r.intrinsic.k if r.intrinsic else '–'} "
                                             "nearest neighbours")):
        if name in m:
            rows.append(row(m[name].label, what, m[name].value, m[name].ci_low, m[name].ci_high, m[name].reference))
    return pd.DataFrame(rows)


def dead_dimension_table(r: CollapseResult) -> pd.DataFrame:
    """Dead-coordinate counts under the three cuts (the chapter's, the median-relative, the seed's absolute)."""
    var_unbiased = r.variances * r.n / max(r.n - 1, 1)
    rows = []
    for label, ref, thr, v in ((f"< {r.dead_threshold:g} × mean variance (this chapter)", "mean", r.dead_threshold,
                                r.variances),
                               (f"< {r.dead_threshold:g} × median variance", "median", r.dead_threshold, r.variances),
                               (f"< {SEED_ABSOLUTE_THRESHOLD:g} absolute, unbiased variance (seed 001 code)",
                                "absolute", SEED_ABSOLUTE_THRESHOLD, var_unbiased)):
        count, cut = dead_dimensions(v, thr, ref)
        rows.append({"rule": label, "variance cut": cut, "dead dimensions": count, "% of d": count / r.d * 100})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def collapse_callout(r: CollapseResult) -> dict:
    """Arguments ``kind``, ``text``, ``title`` of :func:`embeval_report.display.callout` for the box that
    states seed 001's collapse rule for this set."""
    er, dead = r.values["effective_rank"], r.values["dead_dimensions"]
    reasons = []
    if dead / r.d > 0.1:
        reasons.append(f"{dead} of {r.d} dimensions ({dead / r.d:.0%}) are dead (> 10 %)")
    if er < 0.3 * r.d:
        reasons.append(f"the effective rank {er:.1f} is below 30 % of d ({0.3 * r.d:.1f})")
    if reasons:
        text = "; ".join(reasons) + "."
        return dict(kind="danger", title="Collapse detected (seed 001 §21.1.3 rule)", text=text[0].upper() + text[1:])
    return dict(kind="success", title="No collapse by seed 001 §21.1.3's rule",
                text=f"Dead dimensions {dead} of {r.d} (≤ 10 %) and effective rank {er:.1f} ≥ 30 % of d "
                     f"({0.3 * r.d:.1f}). The rule is coarse: read the spectrum and the intrinsic dimension below.")


def narrative(r: CollapseResult) -> str:
    """Markdown paragraphs that say what this set's collapse and intrinsic-dimension numbers mean."""
    v, m, d = r.values, r.metrics, r.d
    er, sr, rk = v["effective_rank"], v["stable_rank"], v["rankme"]
    pr = r.participation_ratio[0]
    parts = []
    rule = ("above the seed's 30 % collapse line" if er >= 0.3 * d else "below the seed's 30 % collapse line")
    parts.append((
        f"**How much of d is used.** Over all {r.n:,} vectors the centred spectrum has effective rank "
        f"{m['effective_rank'].text('.1f')}, {er / d:.0%} of the nominal d = {d} and {rule}. "
        f"The variance itself is {'concentrated' if pr < 0.5 * d else 'spread out'}: the participation ratio "
        f"is {pr:.1f} ({pr / d:.0%} of d) and the stable rank {m['stable_rank'].text('.1f')}, so the top direction "
        f"alone carries {1 / sr:.0%} of the variance. The three count directions differently: the effective rank "
        "weights each by its singular value σ (a standard deviation), the participation ratio by σ² (a variance), "
        "the stable rank by σ²/σ₁², so on a decaying spectrum stable rank ≤ PR and the effective rank is "
        "usually the largest. "
        + ("A large effective rank with a small PR means that almost every direction carries *some* spread "
           "while a few directions carry most of the variance: anisotropy rather than a collapse to a subspace."
           if er >= 0.3 * d and pr < 0.2 * d else
           "All three agree that the set uses few of its dimensions." if er < 0.3 * d else "")).rstrip())
    gap = rk - er
    parts.append(
        f"RankMe, computed on the *uncentred* vectors as Garrido et al. define it, is {m['rankme'].text('.1f')}. "
        + (f"It is {abs(gap):.1f} below the centred effective rank: the mean vector ({r.info['mean_norm_share']:.0%} "
           "of the raw second moment) is one large extra singular value that concentrates the uncentred spectrum."
           if gap < -0.05 * d else
           "It is close to the centred effective rank, so the mean vector does not distort the spectrum much."
           if abs(gap) <= 0.05 * d else
           f"It exceeds the centred effective rank by {gap:.1f}: the mean direction adds a comparably sized "
           "singular value rather than dominating."))
    dead = v["dead_dimensions"]
    seed_abs = r.info["dead_seed_absolute"]
    ref_word = "mean" if r.dead_reference == "mean" else r.dead_reference
    dead_txt = (f"**Dead dimensions.** {dead} of {d} coordinates have variance below {r.dead_threshold:g} × the "
                f"{ref_word} per-coordinate variance (cut {r.dead_cut:.3g})"
                if r.dead_reference != "absolute" else
                f"**Dead dimensions.** {dead} of {d} coordinates have variance below {r.dead_cut:g}")
    dead_txt += (": no coordinate is unused." if dead == 0 else
                 f" ({dead / d:.0%}); " + ("more than the seed's 10 % limit." if dead / d > 0.1 else
                                           "within the seed's 10 % limit."))
    if seed_abs != dead:
        dead_txt += (f" The seed's absolute rule (unbiased variance < 0.01) would count {seed_abs}: it depends on "
                     f"the scale of the vectors (the median coordinate variance here is {np.median(r.variances):.3g}), "
                     "which is why this chapter uses a relative cut.")
    parts.append(dead_txt)
    if r.intrinsic is None:
        parts.append("**Intrinsic dimension** was not estimated: too few distinct vectors for a neighbourhood.")
        return "\n\n".join(parts)
    ident = r.intrinsic
    mean_id = (ident.twonn + ident.mle) / 2
    if mean_id < 0.5 * pr:
        reading = ("much lower than the linear participation ratio: locally the vectors lie on a curved "
                   f"(or clustered) manifold of about {mean_id:.0f} dimensions that bends through ≈ {pr:.0f} linear "
                   "directions. Linear tools (PCA truncation, linear probes) need many more dimensions than the "
                   "data's degrees of freedom; neighbourhood structure is what carries the information.")
    elif mean_id > 1.5 * pr:
        reading = ("higher than the linear participation ratio: the variance sits in a few directions, but "
                   "locally the points spread in many low-variance directions (small-scale noise or fine "
                   "structure). The PR understates how many directions nearest-neighbour search actually sees.")
    else:
        reading = ("comparable to the linear participation ratio: to first order the set fills a roughly flat "
                   "subspace, and the linear measures describe its dimension well.")
    agree = abs(ident.twonn - ident.mle) <= 0.25 * mean_id
    parts.append(
        f"**Intrinsic dimension.** TwoNN gives {m['intrinsic_dim_twonn'].text('.1f')} and the MLE (k = {ident.k}) "
        f"{m['intrinsic_dim_mle'].text('.1f')}, on {ident.n_rows:,} "
        + ("sampled " if ident.n_sampled < r.n else "") + "distinct vectors"
        + (f" ({ident.n_duplicates:,} exact duplicate{'s' if ident.n_duplicates > 1 else ''} removed)"
           if ident.n_duplicates else "")
        + f". That is {mean_id / d:.0%} of d and {reading} "
        + ("The two estimators agree." if agree else
           "The two estimators disagree by more than 25 %: TwoNN looks at the smallest scale (two neighbours), "
           f"the MLE at {ident.k} neighbours, so the dimension changes with scale (see the MLE-versus-k curve).")
        + (" Both estimators are known to underestimate when the true dimension is above about 10–20 with a "
           "few thousand points, so treat the values as lower bounds." if mean_id > 8 else ""))
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def variance_spectrum_figure(r: CollapseResult) -> plt.Figure:
    """Sorted per-coordinate variances with the dead cut (left); normalised singular values (right)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.9))
    v = np.sort(r.variances)[::-1]
    rank = np.arange(1, len(v) + 1)
    dead = v < r.dead_cut
    floor = max(v[v > 0].min() if (v > 0).any() else 1e-12, 1e-12 * max(v.max(), 1e-300))
    a.semilogy(rank, np.clip(v, floor, None), color=PALETTE["data"], lw=1.6, label="per-coordinate variance")
    if dead.any():
        a.scatter(rank[dead], np.clip(v[dead], floor, None), s=14, color=PALETTE["problematic"], zorder=3,
                  label=f"dead ({dead.sum()})")
    a.axhline(r.dead_cut, color=PALETTE["problematic"], ls="--", lw=1.2,
              label=f"dead cut ({r.dead_threshold:g} × {r.dead_reference})" if r.dead_reference != "absolute"
              else f"dead cut ({r.dead_cut:g})")
    a.axhline(SEED_ABSOLUTE_THRESHOLD * (r.n - 1) / r.n, color=PALETTE["muted"], ls=":", lw=1.2,
              label="seed's absolute cut (0.01)")
    a.set(xlabel="Coordinate (sorted by variance)", ylabel="Variance (log scale)",
          title="Per-dimension variance")
    a.legend(loc="lower left", fontsize=8.5)
    sv = r.singular_values
    raw = r.raw_singular_values
    k = np.arange(1, len(sv) + 1)
    p = sv / sv.sum()
    b.semilogy(k[p > 0], p[p > 0], color=PALETTE["data"], lw=1.8, label="centred (effective rank)")
    q = raw / raw.sum()
    kr = np.arange(1, len(q) + 1)
    b.semilogy(kr[q > 0], q[q > 0], color=PALETTE["accent"], lw=1.4, ls="-.", label="uncentred (RankMe)")
    b.axhline(1 / len(sv), color=PALETTE["reference"], ls="--", lw=1.2, label="all equal (1/d)")
    er = r.values["effective_rank"]
    b.axvline(er, color=PALETTE["muted"], ls=":", lw=1)
    b.annotate(f"effective rank {er:.1f}", (er, b.get_ylim()[0]), xytext=(4, 8), textcoords="offset points",
               fontsize=8.5, color="#333")
    b.set(xlabel="Singular value rank k", ylabel=r"$\sigma_k / \sum_j \sigma_j$ (log scale)",
          title="Singular value spectrum")
    b.legend(loc="upper right", fontsize=8.5)
    return fig


def dimension_comparison_figure(r: CollapseResult) -> plt.Figure:
    """Every dimension estimate with its CI on one axis from 0 to d."""
    t = dimension_table(r)
    m = r.metrics
    lows = [None, r.participation_ratio[1]] + [m[n].ci_low for n in ("effective_rank", "rankme", "stable_rank",
                                                                      "intrinsic_dim_twonn", "intrinsic_dim_mle")
                                               if n in m]
    highs = [None, r.participation_ratio[2]] + [m[n].ci_high for n in ("effective_rank", "rankme", "stable_rank",
                                                                        "intrinsic_dim_twonn", "intrinsic_dim_mle")
                                                if n in m]
    fig, ax = plt.subplots(figsize=(WIDTH, 0.42 * len(t) + 1.2))
    y = np.arange(len(t))[::-1]
    for yi, (_, row), lo, hi in zip(y, t.iterrows(), lows, highs):
        kind = row["what it counts"].split(":")[0]
        color = (PALETTE["muted"] if row["estimate"].startswith("Nominal") else
                 PALETTE["accent"] if kind == "nonlinear" else PALETTE["data"])
        if lo is not None and hi is not None:
            ax.plot([lo, hi], [yi, yi], color=color, lw=3, alpha=0.45, solid_capstyle="round")
        ax.plot(row["value"], yi, "o", color=color, ms=7)
        ax.annotate(f"{row['value']:.1f}", (row["value"], yi), xytext=(7, 5), textcoords="offset points",
                    fontsize=8.5)
    ax.set_yticks(y, t["estimate"])
    ax.axvline(r.d, color=PALETTE["muted"], ls=":", lw=1)
    ax.axvline(0.3 * r.d, color=PALETTE["problematic"], ls="--", lw=1,
               label="30 % of d (seed 001 effective-rank rule)")
    ax.set(xlim=(0, r.d * 1.08), xlabel="Dimensions",
           title="Linear (blue) and nonlinear (green) dimension estimates")
    ax.legend(loc="lower right", fontsize=8.5)
    return fig


def estimator_diagnostics_figure(r: CollapseResult) -> plt.Figure:
    """TwoNN fit of −ln(1 − F) on ln μ (left) and the MLE estimate against k (right)."""
    ident = r.intrinsic
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.7))
    x = ident.log_mu
    N = len(x)
    keep = int(N * (1 - ident.discard_fraction))
    y = -np.log(1 - np.arange(1, N + 1) / (N + 1e-9))
    step = max(1, N // 3000)
    a.scatter(x[keep::step], y[keep::step], s=5, color=PALETTE["muted"], alpha=0.5,
              label=f"discarded (largest {ident.discard_fraction:.0%})")
    a.scatter(x[:keep:step], y[:keep:step], s=5, color=PALETTE["data"], alpha=0.6, label="fitted")
    grid = np.linspace(0, x[keep - 1], 50)
    a.plot(grid, ident.twonn * grid, color=PALETTE["reference"], lw=1.6, label=f"slope = {ident.twonn:.1f}")
    a.set(xlabel=r"$\ln(r_2 / r_1)$", ylabel=r"$-\ln(1 - F)$", title="TwoNN fit (straight line = good fit)",
          xlim=(0, x[keep - 1] * 1.5), ylim=(0, y[keep - 1] * 1.5))
    a.legend(loc="upper left", fontsize=8.5)
    ks = sorted(ident.mle_by_k)
    b.plot(ks, [ident.mle_by_k[k] for k in ks], "o-", color=PALETTE["accent"], label="MLE")
    if ident.mle_ci[0] is not None:
        b.errorbar([ident.k], [ident.mle], yerr=[[ident.mle - ident.mle_ci[0]], [ident.mle_ci[1] - ident.mle]],
                   color=PALETTE["accent"], capsize=4, lw=1.5)
    b.axhline(ident.twonn, color=PALETTE["reference"], ls="--", lw=1.2, label="TwoNN")
    b.axhline(r.participation_ratio[0], color=PALETTE["data"], ls=":", lw=1.2, label="participation ratio")
    b.set(xlabel="Neighbours k", ylabel="Intrinsic dimension", title="MLE against neighbourhood size",
          ylim=(0, None))
    b.legend(loc="best", fontsize=8.5)
    return fig
