r"""Drift over time: later snapshots of the same entities compared with the baseline.

Implements the temporal drift framework of seed 000 §217.2.3 (per-interval metrics and the alert
levels of Table 217.3) and the distribution-drift tests of seed 000 §220.1
(``EmbeddingDriftDetector``, in :mod:`.two_sample`), in their standard forms.

**Alignment.** Every snapshot is aligned to the *baseline* (the manifest's ``vectors``), never
to the previous snapshot, so alignment errors do not accumulate (seed 000 §217.2.3.5). The
rotation :math:`R^*` is the orthogonal Procrustes solution fitted on the mean-centred entities
present in both sets (:func:`embeval_report.metrics.procrustes.procrustes_align`), refitted on the
80 % that moved least (:func:`stable_core_rotation`, so a group that truly moved does not bend the
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
make the samples paired, and the two-sample tests' error rates would no longer hold. The seed's
drift demo aligns consecutive snapshots; here all are aligned to the baseline.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..errors import UndefinedMetricWarning
from ..io.snapshots import MIN_MATCHED, Snapshot
from ..kernels import as_numpy, column_mean, resolve_device
from ..kernels import dask_engine
from ..kernels.moments import resampled_moments
from ..kernels.transforms import unit_halves
from ..stats import HypothesisTest, ResamplingPlan, bootstrap_weights, normal_ci, wilson_ci
from ..threads import blas_threads
from .isotropy import cosine_moments, covariance_from_moments, no_variance, spectral_metrics
from .procrustes import knn_overlap, procrustes_align, row_cosines
from .spec import MetricSpec, specs
from .thresholds import THRESHOLDS, verdict, worst  # noqa: F401  (THRESHOLDS: the drift API)
from .two_sample import ALPHA, DomainClassifier, KSDimensions, MMDTest, domain_classifier_auc, ks_dimensions, mmd_test
from .two_sample import benjamini_hochberg  # noqa: F401  (the drift API: embeval_report.drift.benjamini_hochberg)
from .drift_alerts import (ALERT_CHECKS, DRIFT_FLOOR, FLAT_RATIO, MIN_TREND_POINTS, SIGMA_FLOOR,  # noqa: F401
                           TOO_FEW_POINTS, alert_level, alert_reference, drift_by_group, drift_pattern,
                           anomalous_check, group_columns, group_drift_series, sigma_above_trend, trend_sigma)
from .drift_alerts import alert_level as _level  # noqa: F401  (the chapter's name for it)

#: neighbourhood size of the k-NN overlap (seed 003; seed 000's hubness default)
K_OVERLAP = 10
#: the anomaly rule d_i > mu + k sigma (seed 000 §217.2.3.2; its code uses k = 2)
ANOMALY_K = 2.0
#: rows per side of the MMD sample (seed 000 §220.1 and Evidently use 1000); the chapter's ``mmd_sample`` option
MMD_SAMPLE = 1000
#: rows per side for the domain classifier
CLASSIFIER_SAMPLE = 2500
#: a variance of the pair cosines below this share of their mean square is rounding (every pair equally similar)
NO_SPREAD = 1e-12
#: an aligned vector this close to its baseline vector (relative to the baseline's RMS norm) is the baseline
#: vector: the difference is the rotation's rounding (far below float32 precision), not drift
ROUNDING = 1e-9
#: share of entities left out of each refit of :func:`stable_core_rotation`, and the number of refits
TRIM, TRIM_ITERATIONS = 0.2, 3

SEED_FRAMEWORK = "seed 000 §217.2.3.2"
SEED_DETECTOR = "seed 000 §220.1"

#: The intersection is written \operatorname{\cap}: pandoc turns a bare \cap into Typst's ``sect``,
#: which Typst 0.13+ no longer knows.
SPECS = specs(
    MetricSpec("mean_drift", "Mean drift 1 − cos", "lower",
               r"\bar d = \frac1n \sum_i \left(1 - \cos(e^{(0)}_i, E^{(t)}_i R^*)\right)",
               f"{SEED_FRAMEWORK} (cosine form of its code); seed 003 cohort movement", range=(0.0, 2.0)),
    MetricSpec("drift_std", "Std of per-entity drift", "lower", r"\mathrm{sd}_i(d_i)", SEED_FRAMEWORK),
    MetricSpec("mean_l2_drift", "Mean L2 drift / RMS norm", "lower",
               r"\frac1n\sum_i \lVert e^{(0)}_i - \tilde e^{(t)}_i \rVert / \mathrm{RMS}\lVert e^{(0)} \rVert",
               f"{SEED_FRAMEWORK} (text's L2 form, relative)", range=(0.0, math.inf)),
    MetricSpec("mean_drift_ratio", "Mean drift / first interval's", "lower", r"\bar d_t / \bar d_1",
               "Table 217.3 (seed 000 §217.2.3.4), baseline = first interval"),
    MetricSpec("step_drift", "Drift since the previous snapshot", "lower",
               r"\frac1n \sum_i \left(1 - \cos(\tilde e^{(t-1)}_i, \tilde e^{(t)}_i)\right)",
               "both aligned to the baseline (seed 000 §217.2.3.5)"),
    MetricSpec("knn_overlap_baseline", f"k-NN overlap with the baseline (k = {K_OVERLAP})", "higher",
               rf"\frac1n\sum_i |N^{{(0)}}_{{{K_OVERLAP}}}(i) \operatorname{{\cap}} N^{{(t)}}_{{{K_OVERLAP}}}(i)| "
               rf"/ {K_OVERLAP}", "seed 003 (k-NN overlap)", range=(0.0, 1.0)),
    MetricSpec("pairwise_similarity_correlation", "Pairwise similarity correlation", "higher",
               r"\rho = \mathrm{corr}_{i \ne j}\left(\cos(e^{(0)}_i, e^{(0)}_j),\ \cos(e^{(t)}_i, e^{(t)}_j)\right)",
               SEED_FRAMEWORK, range=(-1.0, 1.0)),
    MetricSpec("anomalous_fraction", "Anomalous fraction", "lower", r"\frac1n\sum_i \mathbf 1[d_i > \mu_d + 2\sigma_d]",
               SEED_FRAMEWORK, range=(0.0, 1.0)),
    MetricSpec("procrustes_distance", "Procrustes distance", "lower",
               r"D_P = \lVert \hat E^{(0)} - \hat E^{(t)} R^* \rVert_F \in [0, \sqrt2]",
               "seed 000 §217.2.1.3 (centred, unit Frobenius norm)", range=(0.0, math.sqrt(2))),
    MetricSpec("procrustes_sigma_above_trend", "Procrustes distance, σ above trend", "lower",
               r"(D_P^{(t)} - \mathrm{mean}_{s<t} D_P^{(s)}) / \mathrm{sd}_{s<t} D_P^{(s)}",
               "Table 217.3 (seed 000 §217.2.3.4); trend as in the seed's detect_drift_events"),
    MetricSpec("mean_shift", "Mean shift / baseline spread", "lower",
               r"\lVert \bar e^{(t)} - \bar e^{(0)} \rVert / \sqrt{\mathrm{tr}\,\Sigma^{(0)}}",
               f"{SEED_DETECTOR} (mean_shift, relative)", range=(0.0, math.inf)),
    MetricSpec("isotropy_drift_apcs", "APCS change", "lower", r"\mathrm{APCS}^{(t)} - \mathrm{APCS}^{(0)}",
               f"{SEED_DETECTOR} (isotropy_drift, signed)"),
    MetricSpec("isotropy_drift_pr_fraction", "PR/d change", "higher", r"\mathrm{PR}^{(t)}/d - \mathrm{PR}^{(0)}/d",
               f"{SEED_DETECTOR} (isotropy drift)"),
    MetricSpec("mmd", "MMD² (unbiased, Gaussian kernel)", "lower",
               r"\widehat{\mathrm{MMD}}^2_u,\ k(x,y) = e^{-\lVert x-y \rVert^2 / 2\sigma^2},\ \sigma = \text{median distance}",
               "Gretton et al. 2012; seed 000 §220.1 (biased variant)"),
    MetricSpec("mmd_p_value", "MMD permutation p-value", "higher", r"(1 + \#\{b: T_b \ge T\}) / (1 + B)",
               "Gretton et al. 2012; Phipson & Smyth 2010", range=(0.0, 1.0)),
    MetricSpec("ks_rejected_fraction", "Dimensions with a changed distribution (KS + BH)", "lower",
               rf"\frac1d\#\{{j : p^{{\mathrm{{BH}}}}_j < {ALPHA:g}\}}",
               f"{SEED_DETECTOR} (KS per dimension); Benjamini & Hochberg 1995", range=(0.0, 1.0)),
    MetricSpec("ks_max_statistic", "Largest per-dimension KS statistic", "lower",
               r"\max_j \sup_x |F^{(0)}_j(x) - F^{(t)}_j(x)|", f"{SEED_DETECTOR} (max_ks_statistic)", range=(0.0, 1.0)),
    MetricSpec("domain_classifier_auc", "Domain-classifier AUC", "lower",
               r"\mathrm{AUC}(\text{baseline vs snapshot; 5-fold CV logistic regression})",
               "domain classifier (Evidently, deepchecks); 0.5 = no drift", range=(0.0, 1.0), chance=0.5),
    MetricSpec("matched_entities", "Entities in both", None, "", "entities matched by id"),
    MetricSpec("new_entities", "New entities", None, "", "population drift (seed 000 §217.2.3.1)"),
    MetricSpec("departed_entities", "Departed entities", None, "", "population drift (seed 000 §217.2.3.1)"),
)

#: the metrics that compare positions in one shared space (alignment, per-entity cosine drift, per-dimension and
#: two-sample tests): undefined (null, with :func:`dimension_note`) for a snapshot of another dimension; the
#: neighbourhood metrics (k-NN overlap, pairwise similarity correlation) and the isotropy changes, each set
#: measured in its own space, are kept
SHARED_SPACE = ("mean_drift", "drift_std", "mean_l2_drift", "mean_drift_ratio", "step_drift", "anomalous_fraction",
                "procrustes_distance", "procrustes_sigma_above_trend", "mean_shift", "mmd", "mmd_p_value",
                "ks_rejected_fraction", "ks_max_statistic", "domain_classifier_auc")


def dimension_note(name: str, d: int, d_baseline: int) -> str:
    """Why a shared-space metric of a snapshot of another dimension is null."""
    return (f"needs one shared space: snapshot {name} has d = {d}, the baseline d = {d_baseline} (positions, "
            "rotations and coordinates cannot be compared across dimensions)")


#: the moment statistics of :func:`_pair_statistics`, with block-bootstrap intervals
PAIR_STATISTICS = ("procrustes_distance", "mean_shift", "isotropy_drift_pr_fraction",
                   "pairwise_similarity_correlation", "isotropy_drift_apcs")


def _undefined(message: str) -> None:
    warnings.warn(message, UndefinedMetricWarning, stacklevel=3)


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


def stable_core_rotation(A, B, *, trim: float = TRIM, iterations: int = TRIM_ITERATIONS) -> np.ndarray:
    """Orthogonal Procrustes rotation of ``B`` onto ``A`` fitted on the entities that moved least.

    A least-squares rotation fitted on all entities is bent by a group that genuinely moved: it
    spreads part of that group's movement over everyone else (in the demo, a genre pulled toward
    another makes the *other* genre look drifted). This refits :func:`procrustes_align` ``iterations``
    times on the ``1 - trim`` share of entities with the smallest cosine residual (a trimmed,
    resistant fit in the spirit of Siegel & Benson 1982, and of the seed's "stable core" of the
    space, §217.2.2). The fit is not trimmed when fewer than 2 d entities would remain. A pure
    rotation is recovered exactly either way. When either set has no spread (every vector the same),
    the centred fit is undefined and the uncentred vectors are fitted instead. Returns the (D, D)
    rotation for the zero-padded ``B``.
    """
    A, B = as_numpy(A).astype(np.float64), as_numpy(B).astype(np.float64)
    D = max(A.shape[1], B.shape[1])
    center = _has_spread(A) and _has_spread(B)
    R = procrustes_align(A, B, center=center).rotation
    keep_n = int(math.floor(len(A) * (1 - trim)))
    if trim <= 0 or keep_n < 2 * D:
        return R
    A, Bp = _pad(A, D), _pad(B, D)
    for _ in range(iterations):
        residual = 1 - row_cosines(A, Bp @ R)
        keep = np.sort(np.argsort(residual, kind="stable")[:keep_n])
        R = procrustes_align(A[keep], B[keep], center=center).rotation
    return R


def _has_spread(M: np.ndarray) -> bool:
    """Whether the rows of ``M`` differ by more than rounding."""
    c = M - M.mean(0)
    return float((c * c).sum()) > NO_SPREAD * float((M * M).sum())


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
    bias_corrected: dict = field(default_factory=dict)  # metric name -> bootstrap bias-corrected estimate
    notes: dict = field(default_factory=dict)           # metric name -> why its value is undefined
    d: int | None = None                                # the snapshot's dimension


def _pair_statistics(A: np.ndarray, B: np.ndarray, *, n_boot: int, level: float, seed: int, dev,
                     dims: tuple[int, int] | None = None) -> tuple[dict, dict, dict, str]:
    """Moment-based statistics of the matched pair (A, B) and their intervals.

    From one chunked pass over ``[A | B]`` (covariance) and one over ``[A/|A| | B/|B|]`` (cosine
    Gram): the all-pairs cosine-similarity correlation, the Procrustes distance, the relative mean
    shift and the changes of APCS and PR/d, exactly, with no n x n matrix. Intervals: basic bootstrap
    over random blocks of entities, or a delete-a-group jackknife when the per-block moments would not
    fit in memory (:class:`~embeval_report.stats.ResamplingPlan`). With a Dask engine on (a ``--dask`` run)
    the passes run on its cluster (:func:`~embeval_report.kernels.dask_engine.shared`), the same numbers to
    rounding. ``dims``: the two sets' own dimensions when one was zero-padded to the other's (then the
    Procrustes distance and the mean shift, which need one shared space, are NaN, and each PR/d uses its set's
    own d). Returns values, intervals, bias-corrected estimates and the interval method in words.
    """
    n, D = A.shape
    d_a, d_b = dims or (D, D)
    shared = d_a == d_b
    AB = np.hstack([A, B])
    plan = ResamplingPlan.choose(n, 2 * D, n_boot)
    halves = unit_halves(D)
    with dask_engine.shared(AB, device=dev):  # on the run's Dask cluster: AB's row blocks sent once, three passes
        mean = column_mean(AB, device=dev)
        cov_m = resampled_moments(plan, AB, shift=mean, seed=seed, device=dev, desc="drift moments")
        cos_m = resampled_moments(plan, AB, transform=halves, seed=seed, device=dev, desc="cosine moments")

    def compute(w=None, totals=None) -> dict:
        N, s, G, Nc, su, Gu, same = totals or (*cov_m.total(w), *cos_m.total(w), float(
            cos_m.count @ (np.ones_like(cos_m.count) if w is None else w ** 2)))
        C = covariance_from_moments(N, s, G)
        Caa, Cbb, Cab = C[:D, :D], C[D:, D:], C[:D, D:]
        ta, tb = float(np.trace(Caa)), float(np.trace(Cbb))
        nuclear = float(np.linalg.svd(Cab, compute_uv=False).sum())
        mu = mean + s / N
        eig_a, eig_b = np.linalg.eigvalsh(Caa), np.linalg.eigvalsh(Cbb)
        # no spread (every vector the same up to rounding): these statistics are undefined
        spread_a, spread_b = not no_variance(eig_a, float(mu[:D] @ mu[:D])), not no_variance(eig_b, float(mu[D:] @ mu[D:]))
        both = spread_a and spread_b
        out = {"procrustes_distance": math.sqrt(max(0.0, 2 - 2 * nuclear / math.sqrt(ta * tb))) if both and shared
               else float("nan"),
               "mean_shift": float(np.linalg.norm(mu[D:] - mu[:D]) / math.sqrt(ta)) if spread_a and shared
               else float("nan"),
               "isotropy_drift_pr_fraction": spectral_metrics(eig_b, d_b)["participation_ratio_fraction"]
               - spectral_metrics(eig_a, d_a)["participation_ratio_fraction"] if both else float("nan")}
        denom = Nc * Nc - same
        sa, sb = su[:D], su[D:]
        Gaa, Gbb, Gab = Gu[:D, :D], Gu[D:, D:], Gu[:D, D:]
        ea, eb = (sa @ sa - same) / denom, (sb @ sb - same) / denom
        eaa, ebb, eab = ((Gaa * Gaa).sum() - same) / denom, ((Gbb * Gbb).sum() - same) / denom, \
            ((Gab * Gab).sum() - same) / denom
        va, vb = eaa - ea * ea, ebb - eb * eb
        out["pairwise_similarity_correlation"] = float((eab - ea * eb) / math.sqrt(va * vb)) \
            if va > NO_SPREAD * eaa and vb > NO_SPREAD * ebb else float("nan")
        out["isotropy_drift_apcs"] = cosine_moments(sb, Gbb, Nc, same)[0] - cosine_moments(sa, Gaa, Nc, same)[0]
        return out

    values = {k: float(np.clip(v, *SPECS[k].range)) for k, v in compute().items()}  # rounding past 1 or 0
    cis, corrected = {}, {}
    if plan.active:
        names = list(values)
        if plan.method == "bootstrap":  # all replicates' moments at once, one product a chunk of replicates at a time
            W = bootstrap_weights(plan.units, plan.n_boot, seed)
            same, reps = (W * W) @ cos_m.count, []
            for (rows, (N, s, G)), (_, (Nc, su, Gu)) in zip(cov_m.replicate_totals(W), cos_m.replicate_totals(W)):
                with blas_threads(1):  # small eigen/SVDs: threads only contend; same values
                    reps += [[v[k] for k in names]
                             for v in (compute(totals=t) for t in zip(N, s, G, Nc, su, Gu, same[rows]))]
            reps = np.array(reps)
        else:
            reps = plan.replicates(lambda w: (lambda v: [v[k] for k in names])(compute(w)), seed=seed)
        for i, k in enumerate(names):
            if math.isfinite(values[k]):
                cis[k] = plan.interval(values[k], reps[:, i], level, SPECS[k].range)
                corrected[k] = plan.bias_corrected(values[k], reps[:, i], SPECS[k].range)
    return values, cis, corrected, plan.describe(level) if plan.active else ""


#: why a moment statistic is undefined (NaN): no spread in the baseline or the snapshot
_UNDEFINED = dict.fromkeys(("procrustes_distance", "isotropy_drift_pr_fraction", "isotropy_drift_apcs"),
                           "the baseline or the snapshot has no variance over the entities in both (every vector the "
                           "same)")
_UNDEFINED.update(mean_shift="the baseline has no spread over the entities in both",
                  pairwise_similarity_correlation="the cosine similarities of the baseline or of the snapshot do "
                                                  "not vary (every pair equally similar)")


def _undefined_pair_statistics(values: dict, skip=()) -> dict:
    """Why each moment statistic that is NaN is undefined (metric name -> reason; not those in ``skip``)."""
    return {k: f"{SPECS[k].label} is undefined: {_UNDEFINED[k]}" for k in PAIR_STATISTICS
            if not math.isfinite(values[k]) and k not in skip}


def snapshot_drift(X, snapshot: Snapshot, **kw) -> SnapshotDrift:
    r"""All drift metrics of one snapshot against the baseline ``X`` (see the module docstring).

    Values: every metric of :data:`SPECS` (formula, direction and reference there) except the three
    that compare snapshots with each other (``mean_drift_ratio``, ``step_drift``,
    ``procrustes_sigma_above_trend``, set by :func:`measure_drift`). The distribution tests
    (``mmd``, ``mmd_p_value``, ``ks_*``, ``domain_classifier_auc``) compare independent halves.

    A moment statistic that is undefined for this input (no variance, e.g. identical rows) is NaN
    with an :class:`~embeval_report.errors.UndefinedMetricWarning` and its reason in ``notes``.
    Keyword arguments are those of :func:`measure_drift`.
    """
    r = _snapshot_drift(X, snapshot, **kw)[0]
    for reason in r.notes.values():
        _undefined(f"snapshot {snapshot.name}: {reason}")
    return r


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
    if X.shape[1] != Y.shape[1]:
        return _mismatched_snapshot(X, snapshot, k=k, n_boot=n_boot, level=level, seed=seed, dev=dev), None
    D = X.shape[1]
    A = X[index].astype(np.float64)
    R = stable_core_rotation(A, Y)
    B = Y.astype(np.float64) @ R
    n = len(index)
    rms = math.sqrt(float((A * A).sum(1).mean()))
    same = np.linalg.norm(A - B, axis=1) <= ROUNDING * rms
    B[same] = A[same]

    drift = np.clip(1.0 - row_cosines(A, B), 0.0, 2.0)
    l2 = np.linalg.norm(A - B, axis=1) / rms if rms > 0 else np.zeros(n)
    mu, sd = float(drift.mean()), float(drift.std())
    anomalous = (drift > mu + anomaly_k * sd) & (drift > DRIFT_FLOOR)
    overlap = knn_overlap(A, B, k=min(k, n - 1), device=dev)

    values = {"mean_drift": mu, "drift_std": sd, "mean_l2_drift": float(l2.mean()),
              "knn_overlap_baseline": float(overlap.mean()), "anomalous_fraction": float(anomalous.mean())}
    cis = {name: SPECS[name].clip(*normal_ci(float(x.mean()), float(x.std(ddof=1)) / math.sqrt(n), level))
           for name, x in (("mean_drift", drift), ("mean_l2_drift", l2), ("knn_overlap_baseline", overlap))}
    cis["anomalous_fraction"] = wilson_ci(int(anomalous.sum()), n, level)
    pair_values, pair_cis, corrected, pair_method = _pair_statistics(A, B, n_boot=n_boot, level=level, seed=seed,
                                                                     dev=dev)
    values.update(pair_values)
    cis.update(pair_cis)
    notes = _undefined_pair_statistics(pair_values)

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
    methods.update(dict.fromkeys(pair_values, pair_method))
    return SnapshotDrift(name=snapshot.name, slug=snapshot.slug, timestamp=snapshot.timestamp, index=index,
                         drift=drift, l2=l2, overlap=overlap, anomalous=anomalous, values=values, cis=cis,
                         mmd=mmd, ks=ks, classifier=clf, new_ids=np.asarray(snapshot.new_ids, dtype=object),
                         departed_ids=np.asarray(snapshot.departed_ids, dtype=object), ci_methods=methods,
                         bias_corrected=corrected, notes=notes, d=Y.shape[1]), B


def _mismatched_snapshot(X: np.ndarray, snapshot: Snapshot, *, k: int, n_boot: int, level: float, seed: int,
                         dev) -> SnapshotDrift:
    """A snapshot of another dimension than the baseline: only what needs no shared space (each entity's k-NN
    overlap, the pairwise similarity correlation, the APCS and PR/d changes, the population counts); every
    :data:`SHARED_SPACE` metric is NaN with :func:`dimension_note`, and no distribution test is run."""
    Y = as_numpy(snapshot.vectors)
    index = np.asarray(snapshot.index, dtype=np.int64)
    n, (d0, d1) = len(index), (X.shape[1], Y.shape[1])
    D = max(d0, d1)
    A, B = _pad(X[index].astype(np.float64), D), _pad(Y.astype(np.float64), D)  # zero columns change no cosine
    overlap = knn_overlap(A, B, k=min(k, n - 1), device=dev)
    nan = float("nan")
    values = dict.fromkeys(SHARED_SPACE, nan)
    values.update(knn_overlap_baseline=float(overlap.mean()), matched_entities=n,
                  new_entities=len(snapshot.new_ids), departed_entities=len(snapshot.departed_ids))
    cis = {"knn_overlap_baseline": SPECS["knn_overlap_baseline"].clip(
        *normal_ci(float(overlap.mean()), float(overlap.std(ddof=1)) / math.sqrt(n), level))}
    pair_values, pair_cis, corrected, pair_method = _pair_statistics(A, B, n_boot=n_boot, level=level, seed=seed,
                                                                     dev=dev, dims=(d0, d1))
    for name in ("pairwise_similarity_correlation", "isotropy_drift_apcs", "isotropy_drift_pr_fraction"):
        values[name] = pair_values[name]
        if name in pair_cis:
            cis[name] = pair_cis[name]
    notes = _undefined_pair_statistics(pair_values, skip=SHARED_SPACE)
    notes.update(dict.fromkeys(SHARED_SPACE, dimension_note(snapshot.name, d1, d0)))
    methods = {"knn_overlap_baseline": f"{level:.0%} normal approximation over the {n:,} entities"}
    methods.update(dict.fromkeys(("pairwise_similarity_correlation", "isotropy_drift_apcs",
                                  "isotropy_drift_pr_fraction"), pair_method))
    empty = np.array([])
    return SnapshotDrift(name=snapshot.name, slug=snapshot.slug, timestamp=snapshot.timestamp, index=index,
                         drift=np.full(n, nan), l2=np.full(n, nan), overlap=overlap, anomalous=np.zeros(n, bool),
                         values=values, cis=cis, mmd=MMDTest(nan, nan, nan, nan, nan, nan, nan, 0, 0, 0),
                         ks=KSDimensions(empty, empty, empty, empty.astype(bool), ALPHA),
                         classifier=DomainClassifier(nan, nan, nan, nan, 0, 0, 0),
                         new_ids=np.asarray(snapshot.new_ids, dtype=object),
                         departed_ids=np.asarray(snapshot.departed_ids, dtype=object), ci_methods=methods,
                         bias_corrected={k_: v for k_, v in corrected.items() if k_ in cis}, notes=notes,
                         d=d1)


def drift_tests(result: "DriftResult") -> list[HypothesisTest]:
    """Every hypothesis test of the drift measurements, for the report-wide correction: per snapshot the MMD
    permutation test and the per-dimension KS tests (one family per snapshot)."""
    out = []
    for s in result.snapshots:
        if s.d is not None and s.d != result.d:  # no shared space: no distribution test was run
            continue
        m = s.mmd
        out.append(HypothesisTest(name=f"MMD: {s.name}", test=f"kernel MMD² permutation test ({m.n_perm} permutations)",
                                  p_value=m.p_value, statistic=m.mmd2, n=f"{m.n_x:,} + {m.n_y:,} rows",
                                  null="baseline and snapshot vectors have the same distribution"))
        for j, (stat, p) in enumerate(zip(s.ks.statistics, s.ks.p_values)):
            out.append(HypothesisTest(name=f"KS dimension {j}: {s.name}", test="two-sample Kolmogorov–Smirnov, two-sided",
                                      p_value=float(p), statistic=float(stat),
                                      null="the dimension has the same distribution in baseline and snapshot",
                                      family=f"per-dimension KS, {s.name}"))
    return out


def drift_units(result: "DriftResult", ids) -> pd.DataFrame:
    """One row per baseline entity: its per-snapshot drift, L2 drift and k-NN overlap (columns named as the
    recorded per-snapshot metrics, ``mean_drift__<slug>``; missing where the entity is not in the snapshot), whose
    means are those metrics."""
    ids = np.asarray(ids, dtype=object)
    out = pd.DataFrame({"entity": ids})
    for s in result.snapshots:
        for name, x in (("mean_drift", s.drift), ("mean_l2_drift", s.l2), ("knn_overlap_baseline", s.overlap)):
            col = np.full(len(ids), np.nan)
            col[s.index] = x
            out[f"{name}__{s.slug}"] = col
    return out


# ---------------------------------------------------------------------------------------------
# All snapshots: alert levels (Table 217.3) and recorded metrics
# ---------------------------------------------------------------------------------------------

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


def _step_drift(prev: tuple[np.ndarray, np.ndarray | None] | None, cur: tuple[np.ndarray, np.ndarray | None]) -> float:
    if prev is None or prev[1] is None or cur[1] is None:  # no aligned vectors: a snapshot of another dimension
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
    verdicts (warning -> concerning, critical -> problematic; bands in :data:`ALERT_CHECKS`):

    * ``mean_drift``: its ratio to the first interval's mean drift. A single embedding set gives no
      noise floor for per-entity movement (that needs a second version under stable conditions), so
      the first snapshot serves as the natural variation, as the seed's "collect several periods under
      stable conditions" advises; with one snapshot the rule cannot be applied. Drift below
      :data:`DRIFT_FLOOR` counts as equal to it.
    * ``pairwise_similarity_correlation`` and ``anomalous_fraction``: their values;
    * ``procrustes_distance``: σ above the trend of the earlier snapshots (mean and sd of all earlier
      values, the seed's ``detect_drift_events`` rule); needs :data:`MIN_TREND_POINTS` (3) earlier snapshots, so it
      applies from the fourth snapshot on.

    A check whose value is undefined (NaN, see :func:`snapshot_drift`) raises no alert.
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

    for r in results:
        if r.d is not None and r.d != X.shape[1]:
            _undefined(f"{dimension_note(r.name, r.d, X.shape[1])}: its shared-space metrics are null")
    for name in PAIR_STATISTICS:
        where = [r.name for r in results if name in r.notes and not (r.d is not None and r.d != X.shape[1])]
        if where:
            _undefined(f"{next(r.notes[name] for r in results if r.name in where)} (snapshot"
                       f"{'s' if len(where) > 1 else ''} {', '.join(where)})")

    ref = results[0].values["mean_drift"]
    ratios = [max(r.values["mean_drift"], DRIFT_FLOOR) / max(ref, DRIFT_FLOOR)
              if math.isfinite(r.values["mean_drift"]) and math.isfinite(ref) else float("nan") for r in results]
    sigmas = sigma_above_trend([r.values["procrustes_distance"] for r in results])
    trend = [trend_sigma(z, i) for i, z in enumerate(sigmas)]  # the σ a long history would read (drift_alerts)
    low = [(r.cis.get("anomalous_fraction") or (None, None))[0] for r in results]
    rows, levels = [], []
    for i, r in enumerate(results):
        checks = {"mean_drift": verdict("drift_mean_ratio", ratios[i]) if i > 0 else None,
                  "pairwise_similarity_correlation": verdict("drift_pairwise_correlation",
                                                             r.values["pairwise_similarity_correlation"]),
                  "anomalous_fraction": anomalous_check(r.values["anomalous_fraction"], low[i]),
                  "procrustes_distance": None if sigmas[i] is None else verdict("drift_procrustes_sigma", trend[i])}
        level_i = worst(checks.values()) or "healthy"
        levels.append(level_i)
        rows.append({"snapshot": r.name, "timestamp": r.timestamp, "mean_drift": r.values["mean_drift"],
                     "mean_drift_ratio": ratios[i] if i > 0 else None, "step_drift": steps[i],
                     "pairwise_similarity_correlation": r.values["pairwise_similarity_correlation"],
                     "anomalous_fraction": r.values["anomalous_fraction"],
                     "anomalous_ci_low": low[i],
                     "procrustes_distance": r.values["procrustes_distance"], "procrustes_sigma": sigmas[i],
                     "procrustes_trend_sigma": trend[i],
                     **{f"check_{c}": v for c, v in checks.items()}, "verdict": level_i})
    alerts = pd.DataFrame(rows)
    pattern = drift_pattern(levels, ratios)

    values, metrics = {}, {}
    last = len(results) - 1
    for i, r in enumerate(results):
        per = dict(r.values, step_drift=steps[i], mean_drift_ratio=ratios[i] if i > 0 else None,
                   procrustes_sigma_above_trend=sigmas[i])
        notes = dict(r.notes)
        if i == 0:
            notes.setdefault("mean_drift_ratio", "the first snapshot is the reference (Table 217.3's natural variation)")
        if sigmas[i] is None:
            notes.setdefault("procrustes_sigma_above_trend",
                             TOO_FEW_POINTS if i < MIN_TREND_POINTS else
                             "the Procrustes distance of this or an earlier snapshot is undefined")
        for spec in SPECS.values():
            name = spec.name
            v = per.get(name)
            common = dict(ci_method=r.ci_methods.get(name, ""), bias_corrected=r.bias_corrected.get(name),
                          note=notes.get(name, ""))
            key = f"{name}__{r.slug}"
            values[key] = v
            metrics[key] = spec.record(v, r.cis.get(name), name=key, label=f"{spec.label} [{r.name}]",
                                       verdict=False, **common)
            if i == last:
                values[name] = v
                m = spec.record(v, r.cis.get(name), label=f"{spec.label} (latest: {r.name})", verdict=False, **common)
                if name in ALERT_CHECKS:
                    m = replace(m, verdict=alert_level(alerts.loc[i, f"check_{name}"]),
                                reference=alert_reference(name, alerts.loc[i], len(results)))
                metrics[name] = m
    return DriftResult(snapshots=results, values=values, metrics=metrics, alerts=alerts, reference_drift=ref,
                       pattern=pattern, n=len(X), d=X.shape[1],
                       info=dict(k=k, anomaly_k=anomaly_k, alpha=alpha, level=level, n_boot=n_boot, n_perm=n_perm,
                                 mmd_sample=mmd_sample, classifier_sample=classifier_sample, device=str(dev),
                                 **_mismatch_info(results, X.shape[1])))


def _mismatch_info(results: list[SnapshotDrift], d: int) -> dict:
    """``{"dimension_mismatch": [{name, d}]}`` for the snapshots of another dimension than the baseline's ``d``
    (an empty dict when there is none)."""
    other = [{"name": r.name, "d": int(r.d)} for r in results if r.d is not None and r.d != d]
    return {"dimension_mismatch": other} if other else {}


def headline_metrics(result: DriftResult) -> dict:
    """The latest snapshot's metrics under their bare names (the ones the Summary scorecard reads)."""
    return {k: m for k, m in result.metrics.items() if "__" not in k}
