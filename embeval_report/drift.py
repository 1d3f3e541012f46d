r"""Drift over time: later snapshots of the same entities compared with the baseline.

Implements the temporal drift framework of seed 000 §217.2.3 (per-interval metrics, the
four-panel dashboard of Figure 217.7 and the alert levels of Table 217.3) and the
distribution-drift tests of seed 000 §220.1 (``EmbeddingDriftDetector``), in their standard
forms.

**Alignment.** Every snapshot is aligned to the *baseline* (the manifest's ``vectors``), never
to the previous snapshot, so alignment errors do not accumulate (seed 000 §217.2.3.5). The
rotation :math:`R^*` is the orthogonal Procrustes solution fitted on the mean-centred entities
present in both sets (:func:`embeval_report.procrustes.procrustes_align`), refitted on the 80 %
that moved least (:func:`stable_core_rotation`, so a group that truly moved does not bend the
alignment onto everyone else); it is then applied to the *uncentred* snapshot,
:math:`\tilde E^{(t)} = E^{(t)} R^*`, so that a retrained model's arbitrary rotation is removed
while a translation of the whole space, which changes cosine similarities, still counts as drift.
Entities are matched by id; new and departed entities are counted and enter the distribution
tests, not the per-entity metrics.

**Per-entity drift** is the cosine drift :math:`d_i = 1 - \cos(e^{(0)}_i, \tilde e^{(t)}_i)`
(seed 003's cohort movement and the seed 000 code's ``1 - cos``); the seed 000 text's L2 form
:math:`\lVert e^{(0)}_i - \tilde e^{(t)}_i\rVert` is reported next to it, relative to the
baseline's root-mean-square vector norm.

**Distribution drift** (MMD, per-dimension KS tests, domain classifier) compares two
*independent* samples: the entities present in both sets are split at random into two halves,
one half contributes its baseline vectors (plus the departed entities), the other its aligned
snapshot vectors (plus the new entities). Comparing an entity with its own later self would
make the samples paired, and the two-sample tests' error rates would no longer hold.

Where the seed's code differs: its ``_compute_mmd`` is the biased V-statistic on the first
1000 rows with :math:`\gamma = 1/\mathrm{median}\,\lVert x-y\rVert^2`, reported as
:math:`\sqrt{\max(0,\mathrm{MMD}^2)}` without a test; here the unbiased
:math:`\mathrm{MMD}^2_u` (Gretton et al. 2012) on a seeded random sample, Gaussian kernel
:math:`\exp(-\lVert x-y\rVert^2 / 2\sigma^2)` with :math:`\sigma` the median pairwise distance,
and a permutation p-value. Its KS statistics are not tested for significance; here each
dimension's two-sample KS test is corrected for the d tests with Benjamini–Hochberg. Its drift
demo aligns consecutive snapshots; here all are aligned to the baseline.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from .display import escape
from .errors import InputError
from .io import load_matched, load_vectors
from .isotropy import GROUP_COLUMNS, cosine_moments, covariance_from_moments, spectral_metrics
from .kernels import as_numpy, block_moments, column_mean, resolve_device, unit_rows
from .plotting import PALETTE, WIDTH
from .procrustes import knn_overlap, procrustes_align, row_cosines
from .results import Metric, format_with_ci
from .stats import basic_interval, normal_ci, weighted_bootstrap
from .thresholds import SEVERITY, THRESHOLDS, verdict, worst

#: neighbourhood size of the k-NN overlap (seed 003; seed 000's hubness default)
K_OVERLAP = 10
#: the anomaly rule d_i > mu + k sigma (seed 000 §217.2.3.2; its code uses k = 2)
ANOMALY_K = 2.0
#: per-entity cosine drift at or below this is numerical noise (an angle of about 0.08°)
DRIFT_FLOOR = 1e-6
#: a spread of earlier Procrustes distances below this is numerical noise
SIGMA_FLOOR = 1e-6
#: rows per side of the MMD sample (seed 000 §220.1 and Evidently use 1000)
MMD_SAMPLE = 1000
#: rows per side for the domain classifier
CLASSIFIER_SAMPLE = 2500
#: significance level of the MMD permutation test and the KS + BH false discovery rate
ALPHA = 0.05
#: fewest entities present in both sets for the per-entity metrics
MIN_MATCHED = 20
#: memory allowed for the per-block moment matrices of the bootstrap
BOOTSTRAP_BYTES = 512 * 2**20
MIN_BLOCKS = 20

SEED_FRAMEWORK = "seed 000 §217.2.3.2"
SEED_DETECTOR = "seed 000 §220.1"


# ---------------------------------------------------------------------------------------------
# Snapshots
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    """One later version of the embedding set, matched to the baseline by id.

    ``vectors[r]`` is the snapshot's vector of baseline row ``index[r]``; ``new_vectors`` /
    ``new_ids`` are its entities absent from the baseline, ``departed_ids`` the baseline ids it
    lacks. ``slug`` is the metric-name suffix (``mean_drift__<slug>``).
    """

    name: str
    vectors: np.ndarray
    index: np.ndarray
    new_vectors: np.ndarray | None = None
    new_ids: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))
    departed_ids: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))
    timestamp: str | float | None = None
    slug: str = ""

    def __post_init__(self):
        if not self.slug:
            object.__setattr__(self, "slug", snapshot_slug(self.name))


def snapshot_slug(name: str) -> str:
    """Metric-name suffix of a snapshot name: lower case, runs of other characters -> ``_``.

    >>> snapshot_slug("2024-02"), snapshot_slug("March 2024 (v2)")
    ('2024_02', 'march_2024_v2')
    """
    return re.sub(r"[^0-9a-z]+", "_", str(name).lower()).strip("_")


def _time_key(ts):
    if ts is None:
        return None
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        return float(ts)
    try:
        return pd.Timestamp(str(ts)).value
    except (ValueError, TypeError):
        return None


def check_time_order(snapshots: list[Snapshot]) -> None:
    """Raise :class:`InputError` when the snapshots' timestamps are not in increasing list order."""
    keys = [(s, _time_key(s.timestamp)) for s in snapshots]
    keys = [(s, k) for s, k in keys if k is not None]
    if len({type(k) for _, k in keys}) > 1:
        return
    for (a, ka), (b, kb) in zip(keys, keys[1:]):
        if kb <= ka:
            raise InputError(f"manifest field `snapshots`: snapshot {b.name!r} (timestamp {b.timestamp}) is listed "
                             f"after {a.name!r} (timestamp {a.timestamp}); list the snapshots in time order, "
                             "earliest first, with distinct timestamps")


def load_snapshots(es) -> list[Snapshot]:
    """The ``snapshots`` of an embedding set, each loaded and matched to the baseline by id.

    Raises :class:`InputError` (naming the snapshot and file) for a missing field, two names with
    the same metric suffix, too few entities in common with the baseline, or timestamps out of
    order; the vectors themselves are validated by :func:`embeval_report.io.load_matched`.
    """
    entries = es.fields.get("snapshots") or []
    if not entries:
        raise InputError("manifest field `snapshots`: no snapshots given; list later versions as "
                         "`snapshots: [{name: ..., vectors: ..., timestamp: ...}]`")
    out, seen = [], {}
    for i, entry in enumerate(entries, 1):
        name = str(entry["name"])
        slug = snapshot_slug(name) or f"snapshot_{i}"
        if slug in seen:
            raise InputError(f"manifest field `snapshots`, item {i} ({name!r}): its name gives the same metric "
                             f"suffix {slug!r} as item {seen[slug][0]} ({seen[slug][1]!r}); give the snapshots "
                             "names that differ in letters or digits")
        seen[slug] = (i, name)
        path = Path(entry["vectors"])
        label = f"snapshot {name!r} ({path.name})"
        m = load_matched(path, es, label=label)
        if len(m.index) < MIN_MATCHED:
            raise InputError(f"{label}: only {len(m.index)} of its ids occur in the baseline; drift needs at least "
                             f"{MIN_MATCHED} entities present in both (are the ids the same kind as the baseline's?)")
        new_vectors, new_ids = None, np.array([], dtype=object)
        if len(m.extra):
            vectors, ids = load_vectors(path, name_for_errors=label)
            keep = pd.Index(np.asarray(ids, dtype=object)).isin(pd.Index(m.extra))
            new_vectors, new_ids = vectors[keep], np.asarray(ids, dtype=object)[keep]
        out.append(Snapshot(name=name, slug=slug, vectors=m.vectors, index=m.index, new_vectors=new_vectors,
                            new_ids=new_ids, departed_ids=np.asarray(m.missing, dtype=object),
                            timestamp=entry.get("timestamp")))
    check_time_order(out)
    return out


# ---------------------------------------------------------------------------------------------
# Two-sample tests
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


def _mmd2_from_kernel(K: torch.Tensor, m: int) -> float:
    n = K.shape[0] - m
    return float(K[:m, :m].sum() / (m * (m - 1)) + K[m:, m:].sum() / (n * (n - 1)) - 2 * K[:m, m:].sum() / (m * n))


def _jackknife_se(K: torch.Tensor, m: int) -> float:
    """Two-sample jackknife standard error of the unbiased MMD² (Arvesen 1969): leave each point out."""
    n = K.shape[0] - m
    if m < 3 or n < 3:
        return float("nan")
    Kxx, Kyy, Kxy = K[:m, :m], K[m:, m:], K[:m, m:]
    A, B, C = Kxx.sum(), Kyy.sum(), Kxy.sum()
    rx, ry, cx, cy = Kxx.sum(1), Kyy.sum(1), Kxy.sum(1), Kxy.sum(0)
    tx = (A - 2 * rx) / ((m - 1) * (m - 2)) + B / (n * (n - 1)) - 2 * (C - cx) / ((m - 1) * n)
    ty = A / (m * (m - 1)) + (B - 2 * ry) / ((n - 1) * (n - 2)) - 2 * (C - cy) / (m * (n - 1))
    var = (m - 1) / m * ((tx - tx.mean()) ** 2).sum() + (n - 1) / n * ((ty - ty.mean()) ** 2).sum()
    return float(var.sqrt())


def mmd_test(X, Y, *, n_perm: int = 500, bandwidth: float | None = None, alpha: float = ALPHA,
             level: float = 0.95, seed: int = 0, device="auto") -> MMDTest:
    r"""Kernel two-sample test: unbiased MMD² with a Gaussian kernel and a permutation p-value.

    .. math::
       \widehat{\mathrm{MMD}}^2_u = \frac{1}{m(m-1)}\sum_{i \ne j} k(x_i, x_j)
         + \frac{1}{n(n-1)}\sum_{i \ne j} k(y_i, y_j) - \frac{2}{mn}\sum_{i,j} k(x_i, y_j),
       \qquad k(x, y) = \exp\!\left(-\frac{\lVert x - y\rVert^2}{2\sigma^2}\right)

    (Gretton et al. 2012, eq. 3, Lemma 6). ``bandwidth`` σ defaults to the median heuristic, the
    median distance between distinct points of the pooled sample. The p-value is
    :math:`(1 + \#\{b : T_b \ge T\}) / (1 + B)` over ``n_perm`` random relabellings of the pooled
    sample (Phipson & Smyth 2010), exact for exchangeable samples. The interval is normal with a
    two-sample jackknife standard error. Lower is better (0: same distribution; the unbiased
    estimate can be slightly negative). The kernel matrix of the pooled sample is formed, so pass
    samples (the chapter uses :data:`MMD_SAMPLE` rows per side), not whole sets.
    """
    X, Y = as_numpy(X), as_numpy(Y)
    m, n = len(X), len(Y)
    if m < 2 or n < 2:
        raise ValueError(f"mmd_test needs at least 2 rows per sample (got {m} and {n})")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"mmd_test: the samples have {X.shape[1]} and {Y.shape[1]} columns")
    dev = resolve_device(device)
    Z = torch.as_tensor(np.vstack([X, Y]), dtype=torch.float64, device=dev)
    sq = (Z * Z).sum(1)
    D2 = (sq[:, None] + sq[None, :] - 2 * Z @ Z.T).clamp_min_(0)
    N = m + n
    if bandwidth is None:
        iu = torch.triu_indices(N, N, 1, device=dev)
        med = float(np.median(np.sqrt(D2[iu[0], iu[1]].cpu().numpy())))
        bandwidth = med if med > 0 else 1.0
        del iu
    K = torch.exp(-D2 / (2 * bandwidth ** 2))
    del D2
    K.fill_diagonal_(0)
    stat = _mmd2_from_kernel(K, m)
    se = _jackknife_se(K, m)
    r = K.sum(1)
    T = float(r.sum())
    rng = np.random.default_rng(seed)
    null = np.empty(n_perm)
    step = max(1, min(n_perm, (64 * 2**20) // (8 * N)))
    for s in range(0, n_perm, step):
        b = min(step, n_perm - s)
        z = np.zeros((b, N))
        for row in range(b):
            z[row, rng.permutation(N)[:m]] = 1.0
        zt = torch.as_tensor(z, device=dev)
        q = ((zt @ K) * zt).sum(1)
        zr = zt @ r
        sxy, syy = zr - q, T - 2 * zr + q
        null[s:s + b] = (q / (m * (m - 1)) + syy / (n * (n - 1)) - 2 * sxy / (m * n)).cpu().numpy()
    p = (1 + int((null >= stat - 1e-12 * abs(stat)).sum())) / (1 + n_perm) if n_perm else float("nan")
    lo, hi = normal_ci(stat, se, level) if np.isfinite(se) else (float("nan"), float("nan"))
    return MMDTest(mmd2=stat, p_value=p, ci_low=lo, ci_high=hi, std_error=se, bandwidth=float(bandwidth),
                   null_quantile=float(np.quantile(null, 1 - alpha)) if n_perm else float("nan"),
                   n_x=m, n_y=n, n_perm=n_perm)


def benjamini_hochberg(p_values, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Benjamini–Hochberg (1995) step-up: ``(rejected, adjusted p-values)`` at false discovery rate ``alpha``.

    Thin wrapper of :func:`statsmodels.stats.multitest.multipletests` (``method="fdr_bh"``).
    """
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(p_values, float)
    if p.size == 0:
        return np.zeros(0, bool), np.zeros(0)
    reject, adjusted, _, _ = multipletests(p, alpha=alpha, method="fdr_bh")
    return reject, adjusted


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


def ks_dimensions(X, Y, *, alpha: float = ALPHA) -> KSDimensions:
    """Two-sample Kolmogorov–Smirnov test of every dimension (:func:`scipy.stats.ks_2samp`, two-sided,
    ``method="auto"``), then Benjamini–Hochberg over the d tests at false discovery rate ``alpha``.

    The seed's detector reports the max and mean KS statistic over the dimensions without a test
    (seed 000 §220.1); the share of dimensions whose distribution changed significantly is Evidently's
    "ratio" drift method with the KS test.
    """
    from scipy import stats

    X, Y = as_numpy(X), as_numpy(Y)
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"ks_dimensions: the samples have {X.shape[1]} and {Y.shape[1]} columns")
    res = stats.ks_2samp(X, Y, axis=0)
    stat, p = np.atleast_1d(np.asarray(res.statistic, float)), np.atleast_1d(np.asarray(res.pvalue, float))
    reject, adjusted = benjamini_hochberg(p, alpha)
    return KSDimensions(stat, p, adjusted, reject, alpha)


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


def domain_classifier_auc(X, Y, *, folds: int = 5, level: float = 0.95, seed: int = 0) -> DomainClassifier:
    """Domain-classifier drift test: ROC AUC of a logistic regression telling ``X`` (label 0) from
    ``Y`` (label 1), from out-of-fold probabilities of a stratified ``folds``-fold cross-validation
    (scikit-learn; features standardised inside each fold).

    0.5 = indistinguishable, 1 = perfectly separable; lower is better. A linear classifier detects
    shifts of the mean and of linear projections, not every change of shape. Interval: normal with
    the Hanley–McNeil standard error, clipped to [0, 1]. Evidently's ``model()`` method and deepchecks'
    embedding drift use the same idea (Evidently flags AUC > 0.55).
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


# ---------------------------------------------------------------------------------------------
# Drift of one snapshot against the baseline
# ---------------------------------------------------------------------------------------------

def _pad(X: np.ndarray, d: int) -> np.ndarray:
    return X if X.shape[1] == d else np.hstack([X, np.zeros((len(X), d - X.shape[1]), X.dtype)])


def _halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng([seed, 80, 1]).permutation(n)
    return np.sort(perm[: n // 2]), np.sort(perm[n // 2:])


def _sample_rows(X: np.ndarray, size: int, rng) -> np.ndarray:
    return X if len(X) <= size else X[np.sort(rng.choice(len(X), size, replace=False))]


def _block_count(n: int, width: int) -> int:
    return int(min(64, n, BOOTSTRAP_BYTES // (2 * 8 * width * width)))


#: share of entities left out of each refit of :func:`stable_core_rotation`, and the number of refits
TRIM, TRIM_ITERATIONS = 0.2, 3


def stable_core_rotation(A, B, *, trim: float = TRIM, iterations: int = TRIM_ITERATIONS) -> np.ndarray:
    """Orthogonal Procrustes rotation of ``B`` onto ``A`` fitted on the entities that moved least.

    A least-squares rotation fitted on all entities is bent by a group that genuinely moved: it
    spreads part of that group's movement over everyone else (in the demo, a genre pulled toward
    another makes the *other* genre look drifted). This refits :func:`procrustes_align` ``iterations``
    times on the ``1 - trim`` share of entities with the smallest cosine residual (a trimmed,
    resistant fit in the spirit of Siegel & Benson 1982, and of the seed's "stable core" of the
    space, §217.2.2). The fit is not trimmed when fewer than 2 d entities would remain. A pure
    rotation is recovered exactly either way. Returns the (D, D) rotation for the zero-padded ``B``.
    """
    A, B = as_numpy(A).astype(np.float64), as_numpy(B).astype(np.float64)
    D = max(A.shape[1], B.shape[1])
    R = procrustes_align(A, B).rotation
    keep_n = int(math.floor(len(A) * (1 - trim)))
    if trim <= 0 or keep_n < 2 * D:
        return R
    A, Bp = _pad(A, D), _pad(B, D)
    for _ in range(iterations):
        residual = 1 - row_cosines(A, Bp @ R)
        keep = np.sort(np.argsort(residual, kind="stable")[:keep_n])
        R = procrustes_align(A[keep], B[keep]).rotation
    return R


@dataclass(frozen=True)
class SnapshotDrift:
    """Drift of one snapshot against the baseline (all per-entity arrays follow ``index``)."""

    name: str
    slug: str
    timestamp: str | float | None
    index: np.ndarray          # baseline rows present in both sets
    drift: np.ndarray          # 1 - cos after alignment, per entity
    l2: np.ndarray             # ||e0 - e~t|| / baseline RMS norm, per entity
    overlap: np.ndarray        # k-NN overlap with the baseline, per entity
    anomalous: np.ndarray      # bool: drift > mu + k sigma
    values: dict               # metric name (no suffix) -> value
    cis: dict                  # metric name -> (low, high)
    mmd: MMDTest
    ks: KSDimensions
    classifier: DomainClassifier
    new_ids: np.ndarray
    departed_ids: np.ndarray
    ci_methods: dict


def _pair_statistics(A: np.ndarray, B: np.ndarray, *, n_boot: int, level: float, seed: int, dev
                     ) -> tuple[dict, dict, str]:
    """Moment-based statistics of the matched pair (A, B) and their block-bootstrap intervals.

    From one chunked pass over ``[A | B]`` (covariance) and one over ``[A/|A| | B/|B|]`` (cosine
    Gram): the all-pairs cosine-similarity correlation, the Procrustes distance, the relative mean
    shift and the changes of APCS and PR/d, exactly, with no n x n matrix.
    """
    n, D = A.shape
    AB = np.hstack([A, B])
    blocks = _block_count(n, 2 * D) if n_boot else 1
    if blocks < MIN_BLOCKS:
        blocks, n_boot = 1, 0
    mean = column_mean(AB, device=dev)
    cov_m = block_moments(AB, shift=mean, n_blocks=blocks, seed=seed, device=dev, desc="drift moments")
    halves = lambda x: torch.cat([unit_rows(x[:, :D]), unit_rows(x[:, D:])], 1)  # noqa: E731
    cos_m = block_moments(AB, transform=halves, n_blocks=blocks, seed=seed, device=dev, desc="cosine moments")

    def compute(w=None) -> dict:
        N, s, G = cov_m.total(w)
        C = covariance_from_moments(N, s, G)
        Caa, Cbb, Cab = C[:D, :D], C[D:, D:], C[:D, D:]
        ta, tb = float(np.trace(Caa)), float(np.trace(Cbb))
        nuclear = float(np.linalg.svd(Cab, compute_uv=False).sum())
        mu = mean + s / N
        out = {"procrustes_distance": math.sqrt(max(0.0, 2 - 2 * nuclear / math.sqrt(ta * tb))) if ta > 0 and tb > 0
               else float("nan"),
               "mean_shift": float(np.linalg.norm(mu[D:] - mu[:D]) / math.sqrt(ta)) if ta > 0 else float("nan")}
        pr_a = spectral_metrics(np.linalg.eigvalsh(Caa), D)["participation_ratio_fraction"]
        pr_b = spectral_metrics(np.linalg.eigvalsh(Cbb), D)["participation_ratio_fraction"]
        out["isotropy_drift_pr_fraction"] = pr_b - pr_a
        Nc, su, Gu = cos_m.total(w)
        same = float(cos_m.count @ (np.ones_like(cos_m.count) if w is None else w ** 2))
        denom = Nc * Nc - same
        sa, sb = su[:D], su[D:]
        Gaa, Gbb, Gab = Gu[:D, :D], Gu[D:, D:], Gu[:D, D:]
        ea, eb = (sa @ sa - same) / denom, (sb @ sb - same) / denom
        eaa, ebb, eab = ((Gaa * Gaa).sum() - same) / denom, ((Gbb * Gbb).sum() - same) / denom, \
            ((Gab * Gab).sum() - same) / denom
        va, vb = eaa - ea * ea, ebb - eb * eb
        out["pairwise_similarity_correlation"] = float((eab - ea * eb) / math.sqrt(va * vb)) if va > 0 and vb > 0 \
            else float("nan")
        out["isotropy_drift_apcs"] = cosine_moments(sb, Gbb, Nc, same)[0] - cosine_moments(sa, Gaa, Nc, same)[0]
        return out

    values = compute()
    cis = {}
    if n_boot:
        names = list(values)
        reps = weighted_bootstrap(lambda w: (lambda v: [v[k] for k in names])(compute(w)), blocks, n_boot=n_boot,
                                  seed=seed)
        bounds = {"procrustes_distance": (0.0, math.sqrt(2)), "mean_shift": (0.0, np.inf),
                  "pairwise_similarity_correlation": (-1.0, 1.0)}
        cis = {k: basic_interval(values[k], reps[:, i], level, bounds.get(k, (-np.inf, np.inf)))
               for i, k in enumerate(names)}
    method = (f"{level:.0%} basic bootstrap, {n_boot} resamples of {blocks} random blocks of entities"
              if n_boot else "")
    return values, cis, method


def snapshot_drift(X, snapshot: Snapshot, **kw) -> SnapshotDrift:
    r"""All drift metrics of one snapshot against the baseline ``X`` (see the module docstring).

    Values (name; direction; reference):

    * ``mean_drift`` :math:`\bar d = \frac1n\sum_i (1 - \cos(e^{(0)}_i, \tilde e^{(t)}_i))` and
      ``drift_std`` (lower; seed 000 §217.2.3.2, cosine form of its code); ``mean_l2_drift``
      :math:`\frac1n\sum_i \lVert e^{(0)}_i - \tilde e^{(t)}_i\rVert / \mathrm{RMS}\lVert e^{(0)}\rVert`
      (the text's L2 form, relative);
    * ``knn_overlap_baseline``: mean :math:`|N^{(0)}_k(i) \cap N^{(t)}_k(i)|/k`, cosine, k = 10
      (higher; seed 003);
    * ``pairwise_similarity_correlation``: Pearson correlation of the cosine similarities of all pairs
      :math:`i \ne j` of entities, baseline vs snapshot (higher; seed 000 §217.2.3.2 with the cosine
      Gram, equal to its :math:`EE^\top` for unit vectors);
    * ``anomalous_fraction`` :math:`\frac1n\sum_i \mathbf 1[d_i > \mu_d + 2\sigma_d]` (lower);
    * ``procrustes_distance`` :math:`\lVert \hat E^{(0)} - \hat E^{(t)} R^*\rVert_F` of the centred,
      unit-Frobenius-norm matrices, in [0, √2] (lower; seed 000 §217.2.1.3);
    * ``mean_shift`` :math:`\lVert \bar e^{(t)} - \bar e^{(0)}\rVert / \sqrt{\mathrm{tr}\,\Sigma^{(0)}}`
      (lower; seed 000 §220.1, relative to the baseline's spread);
    * ``isotropy_drift_apcs``, ``isotropy_drift_pr_fraction``: change of APCS and PR/d (seed 000 §220.1);
    * ``mmd`` (unbiased MMD²) and ``mmd_p_value``, ``ks_rejected_fraction`` and ``ks_max_statistic``,
      ``domain_classifier_auc`` (lower): the distribution tests on independent halves;
    * ``new_entities``, ``departed_entities``, ``matched_entities``: the population change.

    Keyword arguments are those of :func:`measure_drift`.
    """
    return _snapshot_drift(X, snapshot, **kw)[0]


def _snapshot_drift(X, snapshot: Snapshot, *, k: int = K_OVERLAP, anomaly_k: float = ANOMALY_K,
                    n_boot: int = 200, mmd_sample: int = MMD_SAMPLE, n_perm: int = 500,
                    classifier_sample: int = CLASSIFIER_SAMPLE, alpha: float = ALPHA, level: float = 0.95,
                    seed: int = 0, device="auto") -> tuple[SnapshotDrift, np.ndarray]:
    """:func:`snapshot_drift` and the aligned snapshot vectors of the matched entities."""
    dev = resolve_device(device)
    X = as_numpy(X)
    Y = as_numpy(snapshot.vectors)
    index = np.asarray(snapshot.index, dtype=np.int64)
    if len(Y) != len(index):
        raise ValueError(f"snapshot {snapshot.name!r}: {len(Y)} vectors but {len(index)} matched indices")
    if len(index) < MIN_MATCHED:
        raise ValueError(f"snapshot {snapshot.name!r}: only {len(index)} entities in common with the baseline "
                         f"(at least {MIN_MATCHED} needed)")
    D = max(X.shape[1], Y.shape[1])
    A = _pad(X[index].astype(np.float64), D)
    R = stable_core_rotation(A, Y)
    B = _pad(Y.astype(np.float64), D) @ R
    n = len(index)

    drift = np.clip(1.0 - row_cosines(A, B), 0.0, 2.0)
    rms = math.sqrt(float((A * A).sum(1).mean()))
    l2 = np.linalg.norm(A - B, axis=1) / rms
    mu, sd = float(drift.mean()), float(drift.std())
    anomalous = (drift > mu + anomaly_k * sd) & (drift > DRIFT_FLOOR)
    kk = min(k, n - 1)
    overlap = knn_overlap(A, B, k=kk, device=dev)

    values = {"mean_drift": mu, "drift_std": sd, "mean_l2_drift": float(l2.mean()),
              "knn_overlap_baseline": float(overlap.mean()), "anomalous_fraction": float(anomalous.mean())}
    cis = {}
    z_se = lambda x: normal_ci(float(x.mean()), float(x.std(ddof=1)) / math.sqrt(len(x)), level)  # noqa: E731
    cis["mean_drift"], cis["mean_l2_drift"], cis["knn_overlap_baseline"] = z_se(drift), z_se(l2), z_se(overlap)
    cis["mean_drift"] = (max(cis["mean_drift"][0], 0.0), cis["mean_drift"][1])
    cis["knn_overlap_baseline"] = (max(cis["knn_overlap_baseline"][0], 0.0), min(cis["knn_overlap_baseline"][1], 1.0))
    from statsmodels.stats.proportion import proportion_confint
    cis["anomalous_fraction"] = tuple(float(x) for x in proportion_confint(int(anomalous.sum()), n, 1 - level,
                                                                            method="wilson"))
    pair_values, pair_cis, boot_method = _pair_statistics(A, B, n_boot=n_boot, level=level, seed=seed, dev=dev)
    values.update(pair_values)
    cis.update(pair_cis)

    # distribution drift on independent halves of the entities in both sets
    h0, h1 = _halves(n, seed)
    departed_rows = np.setdiff1d(np.arange(len(X)), index)
    base_pool = np.vstack([A[h0], _pad(X[departed_rows].astype(np.float64), D)])
    new = snapshot.new_vectors
    snap_pool = B[h1] if new is None or len(new) == 0 else np.vstack([B[h1], _pad(as_numpy(new).astype(np.float64),
                                                                                    D) @ R])
    rng = np.random.default_rng([seed, 80, 2])
    mmd = mmd_test(_sample_rows(base_pool, mmd_sample, rng), _sample_rows(snap_pool, mmd_sample, rng),
                   n_perm=n_perm, alpha=alpha, level=level, seed=seed, device=dev)
    ks = ks_dimensions(base_pool, snap_pool, alpha=alpha)
    clf = domain_classifier_auc(_sample_rows(base_pool, classifier_sample, rng),
                                _sample_rows(snap_pool, classifier_sample, rng), level=level, seed=seed)
    values.update(mmd=mmd.mmd2, mmd_p_value=mmd.p_value, ks_rejected_fraction=ks.rejected_fraction,
                  ks_max_statistic=float(ks.statistics.max()), domain_classifier_auc=clf.auc,
                  matched_entities=n, new_entities=len(snapshot.new_ids), departed_entities=len(snapshot.departed_ids))
    cis["mmd"] = (mmd.ci_low, mmd.ci_high)
    cis["domain_classifier_auc"] = (clf.ci_low, clf.ci_high)
    normal = f"{level:.0%} normal approximation over the {n:,} entities"
    methods = {"mean_drift": normal, "mean_l2_drift": normal, "knn_overlap_baseline": normal,
               "anomalous_fraction": f"{level:.0%} Wilson interval over {n:,} entities",
               "mmd": f"{level:.0%} normal interval, two-sample jackknife standard error",
               "domain_classifier_auc": f"{level:.0%} normal interval, Hanley–McNeil standard error"}
    for name in pair_values:
        methods[name] = boot_method
    return SnapshotDrift(name=snapshot.name, slug=snapshot.slug, timestamp=snapshot.timestamp, index=index,
                         drift=drift, l2=l2, overlap=overlap, anomalous=anomalous, values=values, cis=cis,
                         mmd=mmd, ks=ks, classifier=clf, new_ids=np.asarray(snapshot.new_ids, dtype=object),
                         departed_ids=np.asarray(snapshot.departed_ids, dtype=object), ci_methods=methods), B


# ---------------------------------------------------------------------------------------------
# All snapshots: alert levels (Table 217.3) and recorded metrics
# ---------------------------------------------------------------------------------------------

#: name -> (label, direction, LaTeX formula, reference). The intersection is written \operatorname{\cap}:
#: pandoc turns a bare \cap into Typst's ``sect``, which Typst 0.13+ no longer knows.
METRICS = {
    "mean_drift": ("Mean drift 1 − cos", "lower",
                   r"\bar d = \frac1n \sum_i \left(1 - \cos(e^{(0)}_i, E^{(t)}_i R^*)\right)",
                   f"{SEED_FRAMEWORK} (cosine form of its code); seed 003 cohort movement"),
    "drift_std": ("Std of per-entity drift", "lower", r"\mathrm{sd}_i(d_i)", SEED_FRAMEWORK),
    "mean_l2_drift": ("Mean L2 drift / RMS norm", "lower",
                      r"\frac1n\sum_i \lVert e^{(0)}_i - \tilde e^{(t)}_i \rVert / \mathrm{RMS}\lVert e^{(0)} \rVert",
                      f"{SEED_FRAMEWORK} (text's L2 form, relative)"),
    "mean_drift_ratio": ("Mean drift / first interval's", "lower", r"\bar d_t / \bar d_1",
                         "Table 217.3 (seed 000 §217.2.3.4), baseline = first interval"),
    "step_drift": ("Drift since the previous snapshot", "lower",
                   r"\frac1n \sum_i \left(1 - \cos(\tilde e^{(t-1)}_i, \tilde e^{(t)}_i)\right)",
                   "both aligned to the baseline (seed 000 §217.2.3.5)"),
    "knn_overlap_baseline": ("k-NN overlap with the baseline (k = 10)", "higher",
                             r"\frac1n\sum_i |N^{(0)}_{10}(i) \operatorname{\cap} N^{(t)}_{10}(i)| / 10", "seed 003 (k-NN overlap)"),
    "pairwise_similarity_correlation": (
        "Pairwise similarity correlation", "higher",
        r"\rho = \mathrm{corr}_{i \ne j}\left(\cos(e^{(0)}_i, e^{(0)}_j),\ \cos(e^{(t)}_i, e^{(t)}_j)\right)",
        SEED_FRAMEWORK),
    "anomalous_fraction": ("Anomalous fraction", "lower", r"\frac1n\sum_i \mathbf 1[d_i > \mu_d + 2\sigma_d]",
                           SEED_FRAMEWORK),
    "procrustes_distance": ("Procrustes distance", "lower",
                            r"D_P = \lVert \hat E^{(0)} - \hat E^{(t)} R^* \rVert_F \in [0, \sqrt2]",
                            "seed 000 §217.2.1.3 (centred, unit Frobenius norm)"),
    "procrustes_sigma_above_trend": ("Procrustes distance, σ above trend", "lower",
                                     r"(D_P^{(t)} - \mathrm{mean}_{s<t} D_P^{(s)}) / \mathrm{sd}_{s<t} D_P^{(s)}",
                                     "Table 217.3 (seed 000 §217.2.3.4); trend as in the seed's detect_drift_events"),
    "mean_shift": ("Mean shift / baseline spread", "lower",
                   r"\lVert \bar e^{(t)} - \bar e^{(0)} \rVert / \sqrt{\mathrm{tr}\,\Sigma^{(0)}}",
                   f"{SEED_DETECTOR} (mean_shift, relative)"),
    "isotropy_drift_apcs": ("APCS change", "lower", r"\mathrm{APCS}^{(t)} - \mathrm{APCS}^{(0)}",
                            f"{SEED_DETECTOR} (isotropy_drift, signed)"),
    "isotropy_drift_pr_fraction": ("PR/d change", "higher", r"\mathrm{PR}^{(t)}/d - \mathrm{PR}^{(0)}/d",
                                   f"{SEED_DETECTOR} (isotropy drift)"),
    "mmd": ("MMD² (unbiased, Gaussian kernel)", "lower",
            r"\widehat{\mathrm{MMD}}^2_u,\ k(x,y) = e^{-\lVert x-y \rVert^2 / 2\sigma^2},\ \sigma = \text{median distance}",
            "Gretton et al. 2012; seed 000 §220.1 (biased variant)"),
    "mmd_p_value": ("MMD permutation p-value", "higher", r"(1 + \#\{b: T_b \ge T\}) / (1 + B)",
                    "Gretton et al. 2012; Phipson & Smyth 2010"),
    "ks_rejected_fraction": ("Dimensions with a changed distribution (KS + BH)", "lower",
                             r"\frac1d\#\{j : p^{\mathrm{BH}}_j < 0.05\}",
                             f"{SEED_DETECTOR} (KS per dimension); Benjamini & Hochberg 1995"),
    "ks_max_statistic": ("Largest per-dimension KS statistic", "lower", r"\max_j \sup_x |F^{(0)}_j(x) - F^{(t)}_j(x)|",
                         f"{SEED_DETECTOR} (max_ks_statistic)"),
    "domain_classifier_auc": ("Domain-classifier AUC", "lower",
                              r"\mathrm{AUC}(\text{baseline vs snapshot; 5-fold CV logistic regression})",
                              "domain classifier (Evidently, deepchecks); 0.5 = no drift"),
    "matched_entities": ("Entities in both", "higher", "", "entities matched by id"),
    "new_entities": ("New entities", "lower", "", "population drift (seed 000 §217.2.3.1)"),
    "departed_entities": ("Departed entities", "lower", "", "population drift (seed 000 §217.2.3.1)"),
}

#: the Table 217.3 checks: metric -> threshold quantity in :data:`embeval_report.thresholds.THRESHOLDS`
ALERT_CHECKS = {"mean_drift": "drift_mean_ratio", "pairwise_similarity_correlation": "drift_pairwise_correlation",
                "anomalous_fraction": "drift_anomalous_fraction",
                "procrustes_distance": "drift_procrustes_sigma"}


@dataclass(frozen=True)
class DriftResult:
    """Everything the drift chapter shows."""

    snapshots: list            # SnapshotDrift, in time order
    values: dict               # recorded name -> value (``<metric>__<slug>`` and the latest's headline names)
    metrics: dict              # recorded name -> Metric
    alerts: pd.DataFrame       # one row per snapshot: the Table 217.3 checks and their levels
    reference_drift: float     # the first interval's mean drift, the "baseline" of Table 217.3
    pattern: str               # "stable", "gradual trend", "isolated spike", "regime shift"
    n: int
    d: int
    info: dict = field(default_factory=dict)


def sigma_above_trend(series, floor: float = SIGMA_FLOOR) -> list[float | None]:
    """z of each value against the mean and sd (ddof 1) of all earlier values; None without two earlier values.

    The seed's ``detect_drift_events`` rule (trailing mean and sd). An sd below ``floor`` is taken
    as ``floor``: Procrustes distances that differ by less are numerical noise.
    """
    out = []
    for t, x in enumerate(series):
        prev = np.asarray(series[:t], float)
        if len(prev) < 2 or not np.isfinite(x):
            out.append(None)
            continue
        out.append(float((x - prev.mean()) / max(float(prev.std(ddof=1)), floor)))
    return out


def drift_pattern(levels: list[str | None], ratios: list[float]) -> str:
    """The seed's response patterns (§217.2.3.4) from the per-snapshot alert levels and mean-drift ratios.

    ``"stable"``: no alert. ``"isolated spike"``: an alert followed by a snapshot without one.
    Alerts that persist to the latest snapshot are a ``"regime shift"`` when the snapshots before
    the first alert were flat (mean drift within 1.25x the first interval's) and a ``"gradual
    trend"`` when the drift was already rising before it.
    """
    alert = [SEVERITY[v] > 0 for v in levels]
    if not any(alert):
        return "stable"
    first = alert.index(True)
    if not all(alert[first:]):
        return "isolated spike"
    before = [r for r in ratios[:first] if r is not None and np.isfinite(r)]
    return "regime shift" if all(r < 1.25 for r in before) else "gradual trend"


def _step_drift(prev: tuple[np.ndarray, np.ndarray] | None, cur: tuple[np.ndarray, np.ndarray]) -> float:
    if prev is None:
        return float("nan")
    common, ia, ib = np.intersect1d(prev[0], cur[0], return_indices=True)
    if not len(common):
        return float("nan")
    D = max(prev[1].shape[1], cur[1].shape[1])
    return float(np.clip(1 - row_cosines(_pad(prev[1][ia], D), _pad(cur[1][ib], D)), 0, 2).mean())


def measure_drift(X, snapshots: list[Snapshot], *, k: int = K_OVERLAP, anomaly_k: float = ANOMALY_K,
                  n_boot: int = 200, mmd_sample: int = MMD_SAMPLE, n_perm: int = 500,
                  classifier_sample: int = CLASSIFIER_SAMPLE, alpha: float = ALPHA, level: float = 0.95,
                  seed: int = 0, device="auto") -> DriftResult:
    """Drift of every snapshot against the baseline ``X``, alert levels and the recorded metrics.

    Each metric of :func:`snapshot_drift` is recorded per snapshot as ``<metric>__<slug>`` and, for
    the latest snapshot, under its bare name (the headline). The headline carries the Table 217.3
    verdicts (warning -> concerning, critical -> problematic):

    * ``mean_drift``: against the first interval's mean drift (> 1.5x warning, > 2.5x critical). A
      single embedding set gives no noise floor for per-entity movement (that needs a second version
      under stable conditions), so the first snapshot serves as the natural variation, as the seed's
      "collect several periods under stable conditions" advises; with one snapshot the rule cannot
      be applied. Drift below :data:`DRIFT_FLOOR` counts as equal to it.
    * ``pairwise_similarity_correlation`` < 0.95 warning, < 0.90 critical;
    * ``anomalous_fraction`` > 5 % warning, > 10 % critical;
    * ``procrustes_distance``: σ above the trend of the earlier snapshots (mean and sd of all earlier
      values, the seed's ``detect_drift_events`` rule), > 2σ warning, > 3σ critical; needs two
      earlier snapshots, so it applies from the third snapshot on.
    """
    X = as_numpy(X)
    if not snapshots:
        raise ValueError("measure_drift needs at least one snapshot")
    dev = resolve_device(device)
    results, steps, prev = [], [], None
    for s in snapshots:
        r, aligned = _snapshot_drift(X, s, k=k, anomaly_k=anomaly_k, n_boot=n_boot, mmd_sample=mmd_sample,
                                     n_perm=n_perm, classifier_sample=classifier_sample, alpha=alpha, level=level,
                                     seed=seed, device=dev)
        cur = (r.index, aligned)
        steps.append(r.values["mean_drift"] if prev is None else _step_drift(prev, cur))
        prev = cur
        results.append(r)

    ref = results[0].values["mean_drift"]
    ratios = [max(r.values["mean_drift"], DRIFT_FLOOR) / max(ref, DRIFT_FLOOR) for r in results]
    sigmas = sigma_above_trend([r.values["procrustes_distance"] for r in results])
    rows, levels = [], []
    for i, r in enumerate(results):
        checks = {"mean_drift": verdict("drift_mean_ratio", ratios[i]) if i > 0 else None,
                  "pairwise_similarity_correlation": verdict("drift_pairwise_correlation",
                                                             r.values["pairwise_similarity_correlation"]),
                  "anomalous_fraction": verdict("drift_anomalous_fraction", r.values["anomalous_fraction"]),
                  "procrustes_distance": None if sigmas[i] is None else verdict("drift_procrustes_sigma", sigmas[i])}
        level_i = worst(checks.values()) or "healthy"
        levels.append(level_i)
        rows.append({"snapshot": r.name, "timestamp": r.timestamp, "mean_drift": r.values["mean_drift"],
                     "mean_drift_ratio": ratios[i] if i > 0 else None, "step_drift": steps[i],
                     "pairwise_similarity_correlation": r.values["pairwise_similarity_correlation"],
                     "anomalous_fraction": r.values["anomalous_fraction"],
                     "procrustes_distance": r.values["procrustes_distance"], "procrustes_sigma": sigmas[i],
                     **{f"check_{c}": v for c, v in checks.items()}, "verdict": level_i})
    alerts = pd.DataFrame(rows)
    pattern = drift_pattern(levels, ratios)

    values, metrics = {}, {}
    last = len(results) - 1
    for i, r in enumerate(results):
        per = dict(r.values, step_drift=steps[i], mean_drift_ratio=ratios[i] if i > 0 else None,
                   procrustes_sigma_above_trend=sigmas[i])
        for name, (label, direction, formula, ref_text) in METRICS.items():
            v = per.get(name)
            lo, hi = r.cis.get(name, (None, None))
            common = dict(direction=direction, formula=formula, ci_low=lo, ci_high=hi,
                          ci_method=r.ci_methods.get(name, ""))
            key = f"{name}__{r.slug}"
            values[key] = v
            metrics[key] = Metric(name=key, value=v, reference=ref_text, label=f"{label} [{r.name}]", **common)
            if i == last:
                vd, reference = None, ref_text
                if name in ALERT_CHECKS:
                    vd = _level(alerts.loc[i, f"check_{name}"])
                    reference = _alert_reference(name, alerts.loc[i], len(results))
                values[name] = v
                metrics[name] = Metric(name=name, value=v, reference=reference, verdict=vd,
                                       label=f"{label} (latest: {r.name})", **common)
    return DriftResult(snapshots=results, values=values, metrics=metrics, alerts=alerts, reference_drift=ref,
                       pattern=pattern, n=len(X), d=X.shape[1],
                       info=dict(k=k, anomaly_k=anomaly_k, alpha=alpha, level=level, n_boot=n_boot, n_perm=n_perm,
                                 mmd_sample=mmd_sample, classifier_sample=classifier_sample, device=str(dev)))


def headline_metrics(result: DriftResult) -> dict:
    """The latest snapshot's metrics under their bare names (the ones the Summary scorecard reads)."""
    return {k: m for k, m in result.metrics.items() if "__" not in k}


def _level(x) -> str | None:
    """A verdict read back from a DataFrame cell (pandas may turn ``None`` into NaN)."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _alert_reference(name: str, row: pd.Series, n_snapshots: int) -> str:
    bands = THRESHOLDS[ALERT_CHECKS[name]]
    text = f"{bands.table}: {bands.text}"
    if name == "mean_drift":
        if row["mean_drift_ratio"] is None or pd.isna(row["mean_drift_ratio"]):
            return text + "; not applicable with one snapshot (the first interval is the baseline)"
        return text + f"; here {row['mean_drift_ratio']:.2f}× the first interval's drift"
    if name == "procrustes_distance":
        if row["procrustes_sigma"] is None or pd.isna(row["procrustes_sigma"]):
            return text + f"; not applicable with {n_snapshots} snapshot(s) (needs ≥ 3)"
        return text + f"; here {row['procrustes_sigma']:.1f}σ above the earlier snapshots"
    return text


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def _pct(x) -> str:
    return "—" if x is None or pd.isna(x) else f"{100 * x:.1f} %"


def alert_table(result: DriftResult) -> pd.DataFrame:
    """Table 217.3 per snapshot: each check's value and the snapshot's worst level."""
    a = result.alerts
    word = {None: "", "healthy": "ok", "concerning": "warning", "problematic": "critical"}

    def cell(value, level, fmt):
        text, level = fmt(value), _level(level)
        return text if not level or level == "healthy" else f"{text} ({word[level]})"
    rows = []
    for i, r in a.iterrows():
        rows.append({
            "snapshot": r["snapshot"],
            "mean drift (× first)": cell(r["mean_drift"], r["check_mean_drift"],
                                         lambda v: f"{v:.4f}" + ("" if pd.isna(r["mean_drift_ratio"])
                                                                 else f" ({r['mean_drift_ratio']:.2f}×)")),
            "pairwise corr.": cell(r["pairwise_similarity_correlation"], r["check_pairwise_similarity_correlation"],
                                   lambda v: f"{v:.4f}"),
            "anomalous": cell(r["anomalous_fraction"], r["check_anomalous_fraction"], _pct),
            "Procrustes D_P (σ)": cell(r["procrustes_distance"], r["check_procrustes_distance"],
                                       lambda v: f"{v:.4f}" + ("" if r["procrustes_sigma"] is None
                                                               or pd.isna(r["procrustes_sigma"])
                                                               else f" ({r['procrustes_sigma']:+.1f}σ)")),
            "verdict": r["verdict"]})
    return pd.DataFrame(rows)


def neighbourhood_table(result: DriftResult) -> pd.DataFrame:
    """Per snapshot: population (in both, new, departed) and the entity-level metrics."""
    rows = []
    for r, (_, a) in zip(result.snapshots, result.alerts.iterrows()):
        v = r.values
        rows.append({"snapshot": r.name, "timestamp": "" if r.timestamp is None else str(r.timestamp),
                     "in both": int(v["matched_entities"]), "new": int(v["new_entities"]),
                     "departed": int(v["departed_entities"]), "mean drift": v["mean_drift"],
                     "since previous": a["step_drift"],
                     "L2 / RMS norm": v["mean_l2_drift"], "k-NN overlap": v["knn_overlap_baseline"]})
    df = pd.DataFrame(rows)
    return df.drop(columns="timestamp") if not df["timestamp"].astype(bool).any() else df


def distribution_table(result: DriftResult) -> pd.DataFrame:
    """Per snapshot: the distribution-drift tests and the moment changes."""
    rows = []
    for r in result.snapshots:
        v = r.values
        rows.append({"snapshot": r.name, "MMD²": v["mmd"], "MMD p": v["mmd_p_value"],
                     "KS dims changed": f"{int(r.ks.rejected.sum())} of {len(r.ks.rejected)}",
                     "max KS": v["ks_max_statistic"],
                     "domain AUC [95 % CI]": f"{v['domain_classifier_auc']:.3f} [{r.classifier.ci_low:.3f}, "
                                             f"{r.classifier.ci_high:.3f}]",
                     "mean shift": v["mean_shift"], "Δ APCS": v["isotropy_drift_apcs"],
                     "Δ PR/d": v["isotropy_drift_pr_fraction"]})
    return pd.DataFrame(rows)


#: metadata columns shown next to the ids of the entities that moved most
META_COLUMNS = ("kind", "label", "title", "name")


def movers_table(result: DriftResult, ids, metadata: pd.DataFrame | None = None, *, snapshot: int = -1,
                 n: int = 15) -> pd.DataFrame:
    """The ``n`` entities that moved most in one snapshot (default: the latest), by cosine drift."""
    r = result.snapshots[snapshot]
    order = np.argsort(-r.drift, kind="stable")[:n]
    rows = r.index[order]
    ids = np.asarray(ids, dtype=object)
    df = pd.DataFrame({"rank": np.arange(1, len(order) + 1), "id": [str(i) for i in ids[rows]],
                       "drift 1 − cos": r.drift[order], "k-NN overlap": r.overlap[order],
                       "anomalous": np.where(r.anomalous[order], "yes", "no")})
    if metadata is not None:
        for col in [c for c in META_COLUMNS if c in metadata.columns]:
            vals = metadata[col].to_numpy()[rows]
            df[col] = [None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in vals]
    return df


def group_columns(metadata: pd.DataFrame | None, max_groups: int = 12) -> list[str]:
    """Metadata columns to break drift down by: those of ``GROUP_COLUMNS`` with 2..``max_groups`` values."""
    if metadata is None:
        return []
    return [c for c in GROUP_COLUMNS if c in metadata and 2 <= metadata[c].nunique() <= max_groups]


def drift_by_group(result: DriftResult, metadata: pd.DataFrame | None, *, snapshot: int = -1) -> pd.DataFrame:
    """Per value of each group column: entities, mean drift, anomalous share and k-NN overlap in one snapshot."""
    r = result.snapshots[snapshot]
    rows = []
    for col in group_columns(metadata):
        g = metadata[col].astype(object).where(metadata[col].notna(), "(missing)").astype(str).to_numpy()[r.index]
        for name in sorted(set(g)):
            m = g == name
            rows.append({"column": col, "group": name, "entities": int(m.sum()), "mean drift": float(r.drift[m].mean()),
                         "anomalous %": 100 * float(r.anomalous[m].mean()),
                         "share of anomalies %": 100 * float(r.anomalous[m].sum() / max(r.anomalous.sum(), 1)),
                         "k-NN overlap": float(r.overlap[m].mean())})
    return pd.DataFrame(rows, columns=["column", "group", "entities", "mean drift", "anomalous %",
                                       "share of anomalies %", "k-NN overlap"])


def group_drift_series(result: DriftResult, metadata: pd.DataFrame | None) -> tuple[str, pd.DataFrame] | None:
    """Mean drift per group and snapshot for the group column whose groups differ most (None without one)."""
    best = None
    for col in group_columns(metadata):
        g = metadata[col].astype(object).where(metadata[col].notna(), "(missing)").astype(str).to_numpy()
        table = pd.DataFrame({r.name: pd.Series(r.drift).groupby(g[r.index]).mean() for r in result.snapshots})
        spread = float((table.max(0) / table.mean(0).clip(lower=DRIFT_FLOOR)).max())
        if best is None or spread > best[0]:
            best = (spread, col, table)
    return None if best is None else (best[1], best[2])


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

_LEVEL_WORD = {"healthy": "no alert", "concerning": "a warning", "problematic": "a critical alert"}
_PATTERN_TEXT = {
    "stable": "No snapshot raises a Table 217.3 alert: the space is stable over the period covered.",
    "isolated spike": ("**Pattern: isolated spike.** An alert is followed by a snapshot without one. The seed reads "
                       "isolated spikes as data-quality issues (missing features, pipeline delays, upstream "
                       "changes): check deployments and data sources around that snapshot."),
    "gradual trend": ("**Pattern: gradual trend.** Drift builds up steadily until it crosses the alert levels: "
                      "natural drift that calls for scheduled retraining; the drift per period sets how often."),
    "regime shift": ("**Pattern: sudden regime shift.** The space was stable, then drift jumped and the alerts "
                     "persist. The seed reads this as a major change (new item categories, a user population "
                     "shift, an algorithm change) that may need an architecture review as well as retraining."),
}


def _ci_text(r: SnapshotDrift, name: str, fmt: str) -> str:
    return format_with_ci(r.values[name], *r.cis.get(name, (None, None)), fmt)


def _ids_text(ids, limit: int = 3) -> str:
    ids = list(ids)
    shown = ", ".join(f"**{escape(i)}**" for i in ids[:limit])
    return shown + (f" and {len(ids) - limit:,} more" if len(ids) > limit else "")


def narrative(result: DriftResult, ids=None, metadata: pd.DataFrame | None = None) -> str:
    """Markdown paragraphs saying what the drift numbers mean for this set."""
    snaps, a = result.snapshots, result.alerts
    last, row = snaps[-1], a.iloc[-1]
    v = last.values
    names = ", ".join(escape(s.name) for s in snaps)
    n_alert = int((a["verdict"] != "healthy").sum())
    parts = [f"{len(snaps)} snapshot{'s' if len(snaps) > 1 else ''} ({names}) {'were' if len(snaps) > 1 else 'was'} "
             f"compared with the baseline of {result.n:,} vectors, each rotated onto the baseline (orthogonal "
             f"Procrustes on the entities present in both, never chained). {n_alert} of {len(snaps)} raise a "
             f"Table 217.3 alert; the latest, **{escape(last.name)}**, raises "
             f"{_LEVEL_WORD[row['verdict']]}."]

    lo, hi = last.cis["mean_drift"]
    text = (f"**Entities.** In {escape(last.name)} the mean cosine drift is {v['mean_drift']:.4f} (95 % CI "
            f"{lo:.4f}–{hi:.4f}; sd over entities {v['drift_std']:.4f})")
    if len(snaps) > 1:
        text += (f", {row['mean_drift_ratio']:.2f}× the first interval's {result.reference_drift:.4f} "
                 f"(warning above 1.5×, critical above 2.5×)")
    else:
        text += ("; the × baseline rule of Table 217.3 cannot be applied with a single snapshot, because the "
                 "first interval is what defines the natural variation")
    text += (f". {v['anomalous_fraction']:.1%} of the entities moved more than μ + 2σ (the seed expects 2–5 % "
             f"from natural variation; warning above 5 %, critical above 10 %).")
    by_group = drift_by_group(result, metadata) if metadata is not None else pd.DataFrame()
    if len(by_group) and last.anomalous.sum() >= 5:
        top = by_group.sort_values("share of anomalies %", ascending=False).iloc[0]
        share_of_set = 100 * top["entities"] / len(last.index)
        if top["share of anomalies %"] > 2 * share_of_set and top["share of anomalies %"] > 25:
            text += (f" The anomalies concentrate in {escape(top['column'])} = **{escape(top['group'])}**: "
                     f"{top['share of anomalies %']:.0f} % of them, from {share_of_set:.0f} % of the entities "
                     f"(mean drift {top['mean drift']:.4f} there against {v['mean_drift']:.4f} overall). "
                     "A drift confined to one group points to a change in that group (relabelled category, "
                     "shifted audience) rather than to retraining noise.")
    if ids is not None and len(last.index):
        top_rows = last.index[np.argsort(-last.drift)[:3]]
        text += f" The entities that moved most: {_ids_text(np.asarray(ids, dtype=object)[top_rows])}."
    parts.append(text)

    corr = v["pairwise_similarity_correlation"]
    reading = ("the relational structure holds" if corr > 0.95 else
               "the organisation of the space is changing: worth investigating" if corr >= 0.90 else
               "similar entities no longer stay similar: the structure has changed")
    parts.append(
        f"**Structure.** The cosine similarities of all pairs correlate at "
        f"{_ci_text(last, 'pairwise_similarity_correlation', '.4f')} with the baseline's ({reading}; warning "
        f"below 0.95, critical below 0.90), and on average {v['knn_overlap_baseline']:.1%} of each entity's "
        f"{result.info['k']} nearest neighbours are still among its {result.info['k']} nearest. The Procrustes "
        f"distance is {v['procrustes_distance']:.4f} (0 = identical up to rotation, √2 = unrelated)"
        + (f", {row['procrustes_sigma']:+.1f}σ against the earlier snapshots"
           + (f" (σ estimated from only {len(snaps) - 1} earlier values, so large multiples are common after a "
              "flat start; the seed's own rule uses a trailing window of 5)." if len(snaps) - 1 < 5 else ".")
           if row["procrustes_sigma"] is not None and pd.notna(row["procrustes_sigma"]) else
           f"; its Table 217.3 rule (σ above the trend) needs at least 3 snapshots and cannot be applied to "
           f"{len(snaps)}." if len(snaps) < 3 else "."))

    sig = v["mmd_p_value"] < result.info["alpha"]
    ks_n, d_ks = int(last.ks.rejected.sum()), len(last.ks.rejected)
    auc = last.classifier
    parts.append(
        f"**Distribution.** Comparing independent halves of the entities, the kernel two-sample test "
        f"{'rejects' if sig else 'does not reject'} equal distributions (MMD² = {v['mmd']:.2g}, p = "
        f"{v['mmd_p_value']:.2g} from {last.mmd.n_perm} permutations of {last.mmd.n_x:,} + {last.mmd.n_y:,} "
        f"sampled rows); {ks_n} of {d_ks} dimensions have a significantly changed distribution "
        f"(KS, Benjamini–Hochberg at 5 % FDR); a logistic-regression domain classifier separates baseline from "
        f"snapshot with AUC {auc.auc:.3f} (95 % CI {auc.ci_low:.3f}–{auc.ci_high:.3f}; 0.5 = indistinguishable). "
        f"The mean moved by {v['mean_shift']:.3f} of the baseline's spread; APCS changed by "
        f"{v['isotropy_drift_apcs']:+.3f} and PR/d by {v['isotropy_drift_pr_fraction']:+.1%}"
        + (" (the seed's detector alerts on an isotropy change above 0.1)." if abs(v["isotropy_drift_apcs"]) > 0.1
           else "."))

    new, gone = last.new_ids, last.departed_ids
    if len(new) or len(gone):
        parts.append(f"**Population.** {escape(last.name)} has {len(new):,} entities the baseline lacks"
                     + (f" (e.g. {_ids_text(new)})" if len(new) else "")
                     + f" and lacks {len(gone):,} of the baseline's"
                     + (f" (e.g. {_ids_text(gone)})" if len(gone) else "")
                     + ". New entities need inference or a cold-start policy; departed ones leave gaps in "
                       "neighbourhoods (seed 000 §217.2.3.1). They enter the distribution tests, not the "
                       "per-entity metrics.")
    parts.append(_PATTERN_TEXT[result.pattern])
    return "\n\n".join(parts)


def alert_callout(result: DriftResult) -> dict:
    """Arguments ``kind``, ``text``, ``title`` of :func:`embeval_report.display.callout` for the latest snapshot."""
    row = result.alerts.iloc[-1]
    fired = [METRICS[c][0] for c in ALERT_CHECKS if SEVERITY[_level(row[f"check_{c}"])] > 0]
    level = row["verdict"]
    kind = {"problematic": "danger", "concerning": "warning"}.get(level, "success")
    title = {"danger": "Critical drift", "warning": "Drift warning", "success": "No drift alert"}[kind]
    if fired:
        text = (f"In **{escape(row['snapshot'])}**: " + ", ".join(fired) + " beyond the Table 217.3 levels. "
                + _PATTERN_TEXT[result.pattern])
    else:
        text = (f"**{escape(row['snapshot'])}** stays within every Table 217.3 level that can be applied. These "
                "levels are the seed's starting point; calibrate them on your own history of stable periods.")
    return dict(kind=kind, title=title, text=text)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _plain(text) -> str:
    """A user string shown literally by matplotlib (no mathtext)."""
    return str(text).replace("$", r"\$")


def _time_axis(ax, result: DriftResult, *, label: bool = True, crowded: int = 6) -> np.ndarray:
    """Snapshots at x = 1..T, labelled by name (slanted when more than ``crowded``)."""
    x = np.arange(1, len(result.snapshots) + 1)
    slant = len(x) > crowded
    ax.set_xticks(x)
    ax.set_xticklabels([_plain(s.name) for s in result.snapshots], rotation=30 if slant else 0,
                       ha="right" if slant else "center")
    ax.set_xlim(0.5, len(x) + 0.5)
    if label:
        ax.set_xlabel("Time period (snapshot)")
    return x


def dashboard_figure(result: DriftResult) -> plt.Figure:
    """Figure 217.7: mean drift (± sd, alerts), structural consistency, anomalous fraction, Procrustes distance."""
    a = result.alerts
    fig, axes = plt.subplots(2, 2, figsize=(WIDTH, 7.0))
    (pa, pb), (pc, pd_) = axes
    x = _time_axis(pa, result, label=False)
    md, sd = a["mean_drift"].to_numpy(float), np.array([s.values["drift_std"] for s in result.snapshots])
    pa.fill_between(x, np.clip(md - sd, 0, None), md + sd, color=PALETTE["data"], alpha=0.2, label="± sd over entities")
    pa.plot(x, md, "o-", color=PALETTE["data"], label="mean drift 1 − cos")
    if len(x) > 1:
        for mult, ls in ((1.5, ":"), (2.5, "--")):
            pa.axhline(mult * max(result.reference_drift, DRIFT_FLOOR), color=PALETTE["muted"], ls=ls, lw=1,
                       label=f"{mult}× first interval")
    for xi, lv in zip(x, a["verdict"]):
        if SEVERITY[lv] > 0:
            pa.axvline(xi, color=PALETTE["problematic"], ls="--", lw=1, alpha=0.8)
    pa.set(ylabel="Mean drift (1 − cos)", title="A. Mean drift over time (red: alert)")
    # a wide band (drift concentrated in a few entities) would flatten the line: cut it at 2.5x the largest mean
    pa.set_ylim(0, max(2.5 * float(md.max()), 3.0 * max(result.reference_drift, DRIFT_FLOOR)))
    pa.legend(fontsize=8, loc="upper left")

    _time_axis(pb, result, label=False)
    pb.plot(x, a["pairwise_similarity_correlation"], "o-", color=PALETTE["accent"], label="pairwise similarity corr.")
    pb.plot(x, [s.values["knn_overlap_baseline"] for s in result.snapshots], "s--", color="#7b4ea3",
            label=f"k-NN overlap (k = {result.info['k']})")
    pb.axhline(0.95, color=PALETTE["concerning"], ls=":", lw=1.1, label="warning < 0.95")
    pb.axhline(0.90, color=PALETTE["problematic"], ls="--", lw=1.1, label="critical < 0.90")
    low = min(0.5, float(np.nanmin([a["pairwise_similarity_correlation"].min(),
                                    min(s.values["knn_overlap_baseline"] for s in result.snapshots)])) - 0.05)
    pb.set(ylabel="Correlation / overlap", ylim=(low, 1.05), title="B. Structural consistency")
    pb.legend(fontsize=8, loc="best")

    _time_axis(pc, result)
    pc.bar(x, 100 * a["anomalous_fraction"], color="#e08a2c", width=0.6, label="anomalous (d > μ + 2σ)")
    pc.axhline(5, color=PALETTE["concerning"], ls="--", lw=1.1, label="5 % (warning)")
    pc.axhline(10, color=PALETTE["problematic"], ls="--", lw=1.1, label="10 % (critical)")
    pc.set(ylabel="Anomalous entities (%)", title="C. Entity-level anomalies")
    pc.set_ylim(0, max(12.0, 100 * float(a["anomalous_fraction"].max()) * 1.15))
    pc.legend(fontsize=8, loc="upper left")

    _time_axis(pd_, result)
    dp = a["procrustes_distance"].to_numpy(float)
    pd_.plot(x, dp, "o-", color="#a0399a", label="Procrustes distance")
    lims = []
    for t in range(len(dp)):
        prev = dp[:t]
        if len(prev) >= 2:
            sd = max(float(prev.std(ddof=1)), SIGMA_FLOOR)
            lims.append((x[t], prev.mean() + 2 * sd, prev.mean() + 3 * sd))
    if lims:
        lx, l2, l3 = map(np.array, zip(*lims))
        pd_.scatter(lx, l2, marker="_", s=300, color=PALETTE["concerning"], label="trend + 2σ (warning)")
        pd_.scatter(lx, l3, marker="_", s=300, color=PALETTE["problematic"], label="trend + 3σ (critical)")
    pd_.set(ylabel="Procrustes distance $D_P$", title="D. Global structure shift")
    pd_.set_ylim(bottom=0)
    pd_.legend(fontsize=8, loc="upper left")
    return fig


def distribution_figure(result: DriftResult) -> plt.Figure:
    """MMD² against its permutation null, domain-classifier AUC with CI, share of dimensions changed."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(WIDTH, 3.4))
    snaps = result.snapshots
    x = _time_axis(a, result, crowded=2)
    a.plot(x, [s.mmd.mmd2 for s in snaps], "o-", color=PALETTE["data"], label="MMD²")
    a.errorbar(x, [s.mmd.mmd2 for s in snaps], yerr=np.abs(np.array([[s.mmd.mmd2 - s.mmd.ci_low, s.mmd.ci_high -
                                                                       s.mmd.mmd2] for s in snaps]).T),
               fmt="none", ecolor=PALETTE["data"], capsize=3)
    a.plot(x, [s.mmd.null_quantile for s in snaps], "_", ms=16, mew=2, color=PALETTE["reference"],
           label=f"{1 - result.info['alpha']:.0%} of permutations")
    a.axhline(0, color=PALETTE["muted"], lw=0.8)
    a.set(ylabel="Unbiased MMD²", title="Kernel two-sample test")
    a.legend(fontsize=8)
    _time_axis(b, result, crowded=2)
    auc = np.array([s.classifier.auc for s in snaps])
    err = np.array([[s.classifier.auc - s.classifier.ci_low, s.classifier.ci_high - s.classifier.auc] for s in snaps]).T
    b.errorbar(x, auc, yerr=err, fmt="o-", color=PALETTE["accent"], capsize=3, label="AUC (95 % CI)")
    b.axhline(0.5, color=PALETTE["muted"], ls="--", lw=1, label="0.5 = no drift")
    b.set(ylabel="Domain-classifier AUC", title="Domain classifier", ylim=(min(0.4, auc.min() - 0.05),
                                                                          max(0.75, auc.max() + 0.05)))
    b.legend(fontsize=8)
    _time_axis(c, result, crowded=2)
    c.bar(x, [100 * s.ks.rejected_fraction for s in snaps], width=0.6, color="#2b8a8a")
    c.set(ylabel="Dimensions changed (%)", title="Per-dimension KS, BH 5 % FDR", ylim=(0, 100))
    return fig


def entity_figure(result: DriftResult, metadata: pd.DataFrame | None = None) -> plt.Figure:
    """Left: per-entity drift of the latest snapshot with the μ + 2σ line. Right: mean drift per group
    over time (the group column whose groups differ most), when the metadata has one."""
    series = group_drift_series(result, metadata)
    fig, axes = plt.subplots(1, 2 if series else 1, figsize=(WIDTH, 3.6), squeeze=False)
    a = axes[0, 0]
    r = result.snapshots[-1]
    d = r.drift
    top = max(float(d.max()), DRIFT_FLOOR * 10)
    a.hist(d, bins=np.linspace(0, top, 60), color=PALETTE["data"], alpha=0.8)
    thr = float(d.mean() + result.info["anomaly_k"] * d.std())
    a.axvline(thr, color=PALETTE["problematic"], ls="--", lw=1.2, label=f"μ + 2σ = {thr:.4f}")
    a.set_yscale("log")
    a.set(xlabel="Per-entity drift 1 − cos", ylabel="Entities (log scale)",
          title=f"Per-entity drift in {_plain(r.name)} ({r.anomalous.mean():.1%} anomalous)")
    a.legend(fontsize=8)
    if series:
        col, table = series
        b = axes[0, 1]
        x = _time_axis(b, result)
        colors = plt.get_cmap("tab10").colors
        order = table.iloc[:, -1].sort_values(ascending=False).index
        for j, g in enumerate(order[:10]):
            b.plot(x, table.loc[g].to_numpy(float), "o-", ms=3.5, lw=1.4, color=colors[j % 10], label=_plain(g))
        b.set(ylabel="Mean drift 1 − cos", title=f"Mean drift by {_plain(col)}")
        b.set_ylim(bottom=0)
        b.legend(fontsize=7.5, ncol=2, loc="upper left")
    return fig


# ---------------------------------------------------------------------------------------------
# Demo side data
# ---------------------------------------------------------------------------------------------

#: the demo's monthly snapshots: (name, timestamp)
DEMO_MONTHS = (("2024-02", "2024-02-01"), ("2024-03", "2024-03-01"), ("2024-04", "2024-04-01"),
               ("2024-05", "2024-05-01"))
#: the planted drift: this genre's items and fans move toward the other genre
DEMO_DRIFT_FROM, DEMO_DRIFT_TO = "documentary", "drama"


def demo_snapshots(seed: int = 0, *, refresh: float = 0.1, pull: tuple[float, ...] = (0.0, 0.0, 0.3, 0.7),
                   fan_refresh: tuple[float, ...] = (0.1, 0.1, 0.5, 0.8),
                   n_new: tuple[int, ...] = (0, 15, 30, 45), n_departed: tuple[int, ...] = (0, 0, 20, 40),
                   mean_views: int = 40) -> list[tuple[str, str, pd.DataFrame]]:
    """Four monthly snapshots of the demo set, as ``(name, timestamp, table: id column, d0..d63)``.

    A documented variant of :func:`embeval_report.demo.streaming_embeddings`, whose baseline it
    reproduces (checked here). Each month, **natural variation**: every user's viewing history has a
    share ``refresh`` of its views replaced by fresh views drawn from the generator's viewing
    probabilities (binomial thinning plus Poisson(``refresh`` x 40) new views), so user vectors wobble
    while their distribution stays the same; the whole space gets an arbitrary rotation (a retrained
    model's coordinates). **Planted drift** from the third month: the documentary items and the
    documentary fans' tastes are pulled toward the drama genre's centre by ``pull`` (a catalogue and
    its audience drifting into docudrama), the fans renew a larger share ``fan_refresh`` of their
    history with the new tastes, and everyone who watched those items moves with them. **Population
    drift:** new items (drawn like the generator's items, not yet watched) appear from the second month
    and items retire from the third (no longer watched, dropped from the snapshot); both accumulate.
    """
    from .demo import GENRES, streaming_embeddings, streaming_world, unit_vectors

    world = streaming_world(seed=seed, mean_views=mean_views)
    items0, prefs = world.items, world.prefs
    counts0 = world.counts.astype(np.int64)
    _, meta = streaming_embeddings(seed=seed, mean_views=mean_views)
    genres = GENRES
    n_users, n_items, d = len(prefs), len(items0), items0.shape[1]
    target = unit_vectors(world.centres[[genres.index(DEMO_DRIFT_TO)]])[0]
    moving_items = world.item_genre == genres.index(DEMO_DRIFT_FROM)
    fans = world.user_genre == genres.index(DEMO_DRIFT_FROM)
    ids = meta["id"].to_numpy().astype(object)
    new_items, new_ids, retired = np.zeros((0, d)), [], np.zeros(0, dtype=np.int64)
    out = []
    for t, (name, stamp) in enumerate(DEMO_MONTHS):
        mrng = np.random.default_rng([seed, 80, t])
        items, p = items0.copy(), prefs.copy()
        if pull[t]:
            items[moving_items] = unit_vectors((1 - pull[t]) * items[moving_items] + pull[t] * target)
            p[fans] = unit_vectors((1 - pull[t]) * p[fans] + pull[t] * target)
        more = n_departed[t] - len(retired)
        if more > 0:
            retired = np.r_[retired, mrng.choice(np.setdiff1d(np.arange(n_items), retired), more, replace=False)]
        probs = world.view_probabilities(p, items, unavailable=retired)
        share = np.where(fans, fan_refresh[t], refresh)
        kept = mrng.binomial(counts0, (1 - share)[:, None])
        fresh = np.stack([mrng.multinomial(v, q) for v, q in zip(mrng.poisson(share * mean_views), probs)])
        counts = kept + fresh
        empty = counts.sum(1) == 0
        counts[empty] = counts0[empty]
        users = unit_vectors(counts @ items)
        extra = n_new[t] - len(new_ids)
        if extra > 0:
            genre = mrng.integers(0, len(genres), extra)
            new_items = np.vstack([new_items, unit_vectors(world.centres[genre] + 0.9 * mrng.standard_normal((extra, d)))])
            new_ids += [f"item_{n_items + len(new_ids) + j:05d}" for j in range(extra)]
        keep_items = np.setdiff1d(np.arange(n_items), retired)
        rows = np.vstack([users, items[keep_items], new_items])
        row_ids = np.r_[ids[:n_users], ids[n_users + keep_items], np.asarray(new_ids, dtype=object)]
        Q, _ = np.linalg.qr(mrng.standard_normal((d, d)))
        table = pd.DataFrame((rows @ Q).astype(np.float32), columns=[f"d{j}" for j in range(d)])
        table.insert(0, "id", row_ids)
        out.append((name, stamp, table))
    return out


def demo_side_data(folder, seed: int = 0) -> dict:
    """Write the demo's monthly snapshots (``snapshot_<month>.parquet``: an ``id`` column, then d0..d63)
    into ``folder``; return the manifest entries ``{"snapshots": [{name, vectors, timestamp}, ...]}``
    with paths relative to ``folder``. The baseline is :func:`embeval_report.demo.streaming_embeddings`
    with its defaults and ``seed``; :func:`demo_snapshots` describes the months and the planted drift.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, stamp, table in demo_snapshots(seed):
        path = f"snapshot_{name}.parquet"
        table.to_parquet(folder / path, index=False)
        entries.append({"name": name, "vectors": path, "timestamp": stamp})
    return {"snapshots": entries}
