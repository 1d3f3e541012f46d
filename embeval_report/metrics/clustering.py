r"""Clustering alignment: do the natural groups of the space match the labels?

Implements seed 000 §218.4 (``evaluate_clustering``) with the standard protocol. Labels as in
node classification (:func:`~embeval_report.metrics.labels.prepare_labels`).

* k-means with k = the number of classes on the **L2-normalised** vectors (so it groups by
  direction, as cosine similarity does), ``n_init = 10``, seeded; ``MiniBatchKMeans`` (batch 4096,
  also ``n_init = 10``) above :data:`MINIBATCH_THRESHOLD` entities.
* ``ari``: adjusted Rand index (Hubert & Arabie 1985), 1 for identical partitions and 0 in
  expectation for a random one (it can be negative). ``nmi``: mutual information normalised by the
  arithmetic mean of the two entropies (scikit-learn's default; equal to the V-measure), in
  [0, 1] but *not* corrected for chance. ``ami``: the chance-adjusted version (Vinh, Epps &
  Bailey 2010).
* ``silhouette`` (Rousseeuw 1987) :math:`s(i) = (b(i) - a(i))/\max(a(i), b(i))` with the cosine
  distance :math:`1 - \cos`, of the k-means partition; ``label_silhouette``: the same for the
  classes themselves. Computed exactly within a seeded sample of at most ``silhouette_sample``
  entities (the chapter option, default :data:`SILHOUETTE_SAMPLE`; as
  ``sklearn.metrics.silhouette_score(sample_size=…)``), from each cluster's summed unit vector in torch
  (:func:`~embeval_report.kernels.silhouette.silhouettes`: no n x n matrix). The seed uses the Euclidean distance on the raw vectors. Undefined (fewer than
  two groups among the sampled entities, e.g. identical vectors) → NaN with an
  :class:`~embeval_report.errors.UndefinedMetricWarning`.
* Uncertainty: ARI / NMI / AMI carry a percentile bootstrap over the entities, the k-means partition held fixed
  (:func:`partition_bootstrap`); the spread of the ``n_init`` restarts of the fit (each from its own k-means++
  start; the headline is the one of lowest inertia, as scikit-learn keeps it) is kept beside it as the
  algorithmic variability. With ``MiniBatchKMeans`` the interval is the range over :data:`N_SEED_RUNS_LARGE`
  further fits with other seeds. The silhouettes carry a percentile bootstrap over the sampled entities (their
  per-entity values held fixed).

The seed sweeps k from (true k − 2) to (true k + 3) and picks the k with the best ARI for its
t-SNE figure; here the headline uses the true k and the sweep is a side table and figure, each k one Lloyd run
warm-started from its neighbour towards the true k (:data:`SWEEP_METHOD`).
"""
from __future__ import annotations

import math
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_mutual_info_score, adjusted_rand_score, normalized_mutual_info_score
from threadpoolctl import threadpool_limits

from ..errors import InputError, UndefinedMetricWarning
from ..kernels import as_numpy
from ..kernels.silhouette import silhouettes
from ..kernels.transforms import unit_vectors
from ..stats import bootstrap_ci, bootstrap_weights, percentile_interval
from .kmeans import (KMEANS_N_INIT, MINIBATCH_SIZE, MINIBATCH_THRESHOLD, SWEEP_METHOD, kmeans_fit,  # noqa: F401
                     kmeans_restarts, sweep_fits)
from .labels import N_FOLDS, LabelSet, OnLabels, _cores, as_labelset, aside, per_group, threads
from .scoring import PreparedBoot
from .spec import MetricSpec, specs

N_SEED_RUNS = 20  # MiniBatchKMeans (at most N_SEED_RUNS_LARGE of them); with Lloyd, not 0: the fit's restarts
#: seed runs above MINIBATCH_THRESHOLD entities (each run is a full pass over the data)
N_SEED_RUNS_LARGE = 10
#: silhouettes are computed within a seeded sample of at most this many entities (default of the
#: ``silhouette_sample`` chapter option)
SILHOUETTE_SAMPLE = 10_000
#: points drawn in the 2-D projection figure (t-SNE runs on this sample: 1,000 points take a third of the time
#: of 2,000, 6.5 against 17 CPU-seconds at d = 384, and still show the classes' layout)
PROJECTION_SAMPLE = {"pca": 5000, "tsne": 1000}
#: t-SNE's iterations (scikit-learn's default 1,000; the first 250 exaggerated): on 1,000 points of 384-d text-like
#: vectors 500 reach the same KL divergence (2.637 against 2.631) in half the time (4.3 against 9.0 CPU-seconds)
TSNE_ITERATIONS = 500
#: Barnes-Hut angle of the t-SNE map (scikit-learn's default 0.5; its documentation recommends 0.2-0.8): the map is a
#: figure only (no number is computed from it), and on 1,000 points of the 10,000 x 384 benchmark set 0.8 took 4.2
#: against 9.2 CPU-seconds at the same KL divergence (2.628 against 2.639) and trustworthiness (0.527 against 0.528);
#: on the demo 3.1 against 3.5 s, KL 0.708 against 0.699, trustworthiness 0.987 both, the same layout (the clustering
#: chapter's compute at 10,000 x 384: 17.4 -> 11.7 CPU-seconds; every recorded number the same)
TSNE_ANGLE = 0.8
#: Kaufman & Rousseeuw's (1990) reading of an average silhouette: (lower edge, reading), checked top-down with ">"
SILHOUETTE_READINGS = ((0.7, "strong structure"), (0.5, "reasonable structure"),
                       (0.25, "weak structure that could be artificial"), (-math.inf, "no substantial structure"))

SEED_CL = "seed 000 §218.4"

SPECS = specs(
    MetricSpec("ari", "Adjusted Rand index (ARI)", "higher",
               r"\mathrm{ARI} = \frac{\sum_{ij}\binom{n_{ij}}{2} - E}{\tfrac12[\sum_i\binom{a_i}{2} + \sum_j\binom{b_j}{2}] - E},"
               r"\ E = \frac{\sum_i\binom{a_i}{2}\sum_j\binom{b_j}{2}}{\binom n2}",
               f"Hubert & Arabie 1985; {SEED_CL}; scikit-learn adjusted_rand_score (0 = chance, 1 = identical)",
               range=(-0.5, 1.0), chance=0.0),
    MetricSpec("nmi", "Normalized mutual information (NMI)", "higher",
               r"\mathrm{NMI} = \frac{I(Y;K)}{\tfrac12[H(Y) + H(K)]}",
               f"{SEED_CL}; scikit-learn normalized_mutual_info_score (arithmetic mean; not chance-corrected)",
               range=(0.0, 1.0)),
    MetricSpec("ami", "Adjusted mutual information (AMI)", "higher",
               r"\mathrm{AMI} = \frac{I(Y;K) - \mathbb{E}[I]}{\tfrac12[H(Y) + H(K)] - \mathbb{E}[I]}",
               "Vinh, Epps & Bailey 2010; scikit-learn adjusted_mutual_info_score (0 = chance)",
               range=(-1.0, 1.0), chance=0.0),
    MetricSpec("silhouette", "Silhouette of the k-means clusters (cosine)", "higher",
               r"s(i) = \frac{b(i) - a(i)}{\max(a(i), b(i))},\ d = 1 - \cos",
               f"Rousseeuw 1987; {SEED_CL} (seed: Euclidean); scikit-learn silhouette_score(metric='cosine')",
               range=(-1.0, 1.0)),
    MetricSpec("label_silhouette", "Silhouette of the label classes (cosine)", "higher",
               r"s(i)\text{ with the classes as clusters},\ d = 1 - \cos",
               "Rousseeuw 1987; scikit-learn silhouette_score(metric='cosine') on the labels", range=(-1.0, 1.0)),
)


def silhouette_values(X, labels, *, device="auto") -> np.ndarray:
    r"""Per-entity silhouette :math:`s(i) = (b(i) - a(i)) / \max(a(i), b(i))` with cosine distance.

    :math:`a(i)` is the mean distance :math:`1 - \cos` to the other members of :math:`i`'s cluster,
    :math:`b(i)` the smallest mean distance to another cluster (Rousseeuw 1987); :math:`s(i) = 0`
    in a cluster of one (scikit-learn's convention). Exact, from each cluster's summed unit vector
    (the distances of row i to a cluster C add up to |C| − u_i · Σ_C u_j: an n x k product, no n x n
    matrix; :func:`~embeval_report.kernels.silhouette.silhouettes`). Matches
    ``sklearn.metrics.silhouette_samples(X, labels, metric="cosine")`` to 1e-12.
    """
    return silhouette_values_many(X, [labels], device=device)[0]


def silhouette_values_many(X, labelings, *, device="auto") -> list[np.ndarray]:
    """:func:`silhouette_values` of several partitions of the same rows (the unit rows made once; the same numbers
    as one call per partition, bit for bit)."""
    m = len(X)
    partitions = []
    for labels in labelings:
        codes, _ = pd.factorize(pd.Series(np.asarray(labels, dtype=object)), sort=True)
        if len(codes) != m:
            raise ValueError(f"labels: expected {m} values, got {len(codes)}")
        k = int(codes.max()) + 1 if m else 0
        if not 2 <= k <= m - 1:
            raise ValueError(f"the silhouette needs 2 ≤ number of clusters ≤ n − 1; got {k} clusters for n = {m}")
        partitions.append(codes)
    return silhouettes(X, partitions, device=device)


def silhouette_defined(labels) -> bool:
    """Whether the silhouette of a partition is defined: 2 ≤ number of groups ≤ n − 1."""
    return 2 <= len(np.unique(labels)) <= len(labels) - 1


#: unit vectors closer than this (max abs coordinate difference) count as one direction (float32 rounding)
SAME_DIRECTION_TOL = 1e-6


def silhouette_undefined(U, codes) -> str:
    """Why the silhouette of partition ``codes`` of the unit vectors ``U`` is undefined ("" when it is defined):
    fewer than 2 or more than n − 1 groups, or every vector pointing in the same direction (every distance
    0, so :math:`s(i) = 0/0`)."""
    m = len(codes)
    if m >= 2 and np.abs(np.asarray(U) - np.asarray(U)[0]).max() <= SAME_DIRECTION_TOL:
        return f"all {m:,} entities it is computed on point in the same direction, so every distance is 0"
    if not silhouette_defined(codes):
        return f"it needs 2 to n − 1 groups, and the {m:,} entities it is computed on fall into {len(np.unique(codes))}"
    return ""


def _sample_silhouettes(U, partitions, device) -> list[tuple[np.ndarray, str]]:
    """Per-entity silhouettes of the sampled entities ``U`` in each of ``partitions`` (``(codes, what)`` pairs), in
    one call: ``(values, "")``, or NaN and the reason with an :class:`UndefinedMetricWarning`."""
    whys = [silhouette_undefined(U, codes) for codes, _ in partitions]
    values = iter(silhouette_values_many(U, [codes for (codes, _), why in zip(partitions, whys) if not why],
                                         device=device))
    out = []
    for (codes, what), why in zip(partitions, whys):
        if why:
            warnings.warn(f"The silhouette of {what} is undefined: {why}.", UndefinedMetricWarning, stacklevel=3)
        out.append((np.full(len(codes), np.nan), why) if why else (next(values), ""))
    return out


def match_clusters(contingency: np.ndarray) -> np.ndarray:
    """One-to-one matching of clusters (columns) to classes (rows) maximising the entities matched
    (Hungarian algorithm); ``out[j]`` is the class of cluster ``j`` (−1 when unmatched)."""
    rows, cols = linear_sum_assignment(-np.asarray(contingency, float))
    out = np.full(contingency.shape[1], -1, dtype=np.int64)
    out[cols] = rows
    return out


@dataclass(frozen=True)
class ClusteringResult(OnLabels):
    """Everything the clustering chapter shows."""

    labels: LabelSet
    k: int
    values: dict                 # metric name -> point value (+ cluster_accuracy, inertia, …)
    metrics: dict                # ari, nmi, ami, silhouette, label_silhouette -> Metric
    clusters: np.ndarray         # k-means cluster of each labelled entity (primary run)
    contingency: np.ndarray      # C x k counts (rows: classes, columns: clusters)
    matching: np.ndarray         # class index matched to each cluster
    seed_runs: pd.DataFrame      # seed, ari, nmi, ami, inertia of the runs with other seeds
    sweep: pd.DataFrame | None   # k, ari, nmi, ami, silhouette, inertia around the true k
    sample: np.ndarray           # positions (into labels.rows) of the silhouette sample
    silhouettes: np.ndarray      # per sampled entity, k-means partition (NaN when undefined)
    label_silhouettes: np.ndarray  # per sampled entity, label classes (NaN when undefined)
    algorithm: str
    level: float
    info: dict = field(default_factory=dict)


def sample_positions(n: int, size: int | None, seed: int, salt: int) -> np.ndarray:
    """Sorted positions of a seeded sample of at most ``size`` of ``n`` entities (all when ``size`` is None)."""
    if size is None or n <= size:
        return np.arange(n)
    return np.sort(np.random.default_rng([seed, 96, salt]).choice(n, int(size), replace=False))


def _partition_scores(y, clusters) -> dict[str, float]:
    return {"ari": float(adjusted_rand_score(y, clusters)), "nmi": float(normalized_mutual_info_score(y, clusters)),
            "ami": float(adjusted_mutual_info_score(y, clusters))}


@dataclass(frozen=True)
class ClusterPlan:
    """The clustering protocol, fixed before any vector is read: the labelled entities, their ids, k (the number
    of classes), the k-means settings and seed, and the seeded sample the silhouettes are computed within."""

    labels: LabelSet
    ids: np.ndarray
    n_init: int
    seed: int
    minibatch_threshold: int
    sample: np.ndarray       # positions (into labels.rows) of the silhouette sample

    @property
    def k(self) -> int:
        return self.labels.n_classes


def cluster_plan(labels: LabelSet, ids=None, *, n_init: int = KMEANS_N_INIT,
                 silhouette_sample: int | None = SILHOUETTE_SAMPLE, seed: int = 0,
                 minibatch_threshold: int = MINIBATCH_THRESHOLD) -> ClusterPlan:
    """The plan of :func:`evaluate_clustering` (``ids``: the set's ids; row numbers as text when ``None``)."""
    if labels.n <= labels.n_classes:
        raise InputError(f"metadata column '{labels.column}': clustering needs more labelled entities ({labels.n}) "
                         f"than classes ({labels.n_classes})")
    unit_ids = (np.asarray(ids, dtype=object)[labels.rows] if ids is not None else labels.rows).astype(str)
    return ClusterPlan(labels, unit_ids, n_init, seed, minibatch_threshold,
                       sample_positions(labels.n, silhouette_sample, seed, 1))


def cluster_units(X, plan: ClusterPlan, *, device="auto", silhouettes: bool = True) -> pd.DataFrame:
    """k-means (k = the plan's classes) on the L2-normalised vectors of the plan's entities: one row per entity
    with ``entity``, ``label`` (class name), ``y`` (its code), ``cluster``, and its cosine ``silhouette`` in the
    k-means partition and ``label_silhouette`` in the classes (NaN outside the silhouette sample, or where
    undefined; NaN throughout with ``silhouettes=False``, for a caller that reads the partition only). ``attrs``:
    ``inertia``, ``algorithm`` and why each silhouette is undefined ("" when defined)."""
    ls = plan.labels
    U = unit_vectors(as_numpy(X)[ls.rows])
    y, sample = ls.codes, plan.sample
    restarts = []
    if ls.n > plan.minibatch_threshold:
        clusters, inertia, algorithm = kmeans_fit(U, plan.k, n_init=plan.n_init, seed=plan.seed,
                                                  minibatch_threshold=plan.minibatch_threshold)
    else:  # the same partition as kmeans_fit's, with the restarts it drops
        clusters, inertia, _, runs = kmeans_restarts(U, plan.k, n_init=plan.n_init, seed=plan.seed)
        algorithm = "KMeans (Lloyd)"
        restarts = [dict(restart=i + 1, inertia=inert, **_partition_scores(y, c)) for i, (c, inert) in enumerate(runs)]
    per_sil, per_lab = np.full(ls.n, np.nan), np.full(ls.n, np.nan)
    sil_why = lab_why = "not computed"
    if silhouettes:
        (sil, sil_why), (lab_sil, lab_why) = _sample_silhouettes(
            U[sample], [(clusters[sample], "the k-means clusters"), (y[sample], f"the '{ls.column}' classes")],
            device)
        per_sil[sample], per_lab[sample] = sil, lab_sil
    units = pd.DataFrame({"entity": plan.ids, "label": np.asarray(ls.classes, dtype=object)[y], "y": y,
                          "cluster": clusters, "silhouette": per_sil, "label_silhouette": per_lab})
    units.attrs.update(inertia=inertia, algorithm=algorithm, silhouette_why=sil_why, label_silhouette_why=lab_why,
                       restarts=restarts)
    return units


def partition_ari(units: pd.DataFrame) -> float:
    """ARI of the clusters with the classes (scikit-learn ``adjusted_rand_score``)."""
    return float(adjusted_rand_score(units["y"], units["cluster"]))


def partition_nmi(units: pd.DataFrame) -> float:
    """NMI of the clusters with the classes (scikit-learn ``normalized_mutual_info_score``, arithmetic mean)."""
    return float(normalized_mutual_info_score(units["y"], units["cluster"]))


def partition_ami(units: pd.DataFrame) -> float:
    """AMI of the clusters with the classes (scikit-learn ``adjusted_mutual_info_score``)."""
    return float(adjusted_mutual_info_score(units["y"], units["cluster"]))


def weighted_partition_scores(units: pd.DataFrame, W: np.ndarray) -> dict[str, np.ndarray]:
    r"""ARI, NMI and AMI of the clusters with the classes when the entities carry the weights of each row of
    ``W`` (resamples × entities, the counts of bootstrap draws), all rows at once from the weighted contingency
    tables :math:`n_{ij}` (row sums :math:`a_i`, column sums :math:`b_j`, total :math:`n`):
    :math:`\mathrm{ARI}` by Hubert & Arabie's formula, :math:`I = \sum_{ij} \frac{n_{ij}}n \log\frac{n\,n_{ij}}{a_i b_j}`,
    :math:`\mathrm{NMI} = I / \tfrac12(H_Y + H_K)`, :math:`\mathrm{AMI} = (I - E[I]) / (\tfrac12(H_Y + H_K) - E[I])`
    with the expected mutual information :math:`E[I]` of the unweighted table held fixed (its change over
    resamples is of order :math:`E[I]/\sqrt n`, far below the spread of :math:`I`; computing it per resample
    costs ~50 ms). With ``W`` all ones the three equal scikit-learn's to rounding."""
    return _weighted_scores(_partition_terms(units), W)


SCORES = ("ari", "nmi", "ami")


def _partition_terms(units: pd.DataFrame, metric: str | None = None) -> tuple:
    """What :func:`_weighted_scores` reads of a unit table, once: the (class, cluster) one-hot, the shape of the
    contingency table, the expected mutual information of the unweighted table (only when AMI is asked for) and the
    scores asked for (``metric``; ``None``: all three)."""
    from scipy import sparse
    from sklearn.metrics.cluster import contingency_matrix
    from sklearn.metrics.cluster._expected_mutual_info_fast import expected_mutual_information

    wanted = SCORES if metric is None else (metric,)
    y, c = units["y"].to_numpy(np.int64), units["cluster"].to_numpy(np.int64)
    ky, kc = int(y.max()) + 1, int(c.max()) + 1
    onehot = sparse.csr_matrix((np.ones(len(y)), (np.arange(len(y)), y * kc + c)), shape=(len(y), ky * kc))
    emi = (float(expected_mutual_information(contingency_matrix(y, c, sparse=True), len(y)))
           if "ami" in wanted else None)
    return onehot.T.tocsr(), ky, kc, emi, wanted


def _weighted_scores(terms: tuple, W: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`weighted_partition_scores` from :func:`_partition_terms`: the scores it asks for only."""
    onehot_t, ky, kc, emi, wanted = terms
    N = np.asarray(onehot_t @ np.asarray(W, float).T).T.reshape(len(W), ky, kc)
    a, b, n = N.sum(2), N.sum(1), N.sum((1, 2))
    out = {}

    def comb2(x):
        return (x * (x - 1) / 2).sum(-1)

    with np.errstate(divide="ignore", invalid="ignore"):
        if "ari" in wanted:
            s_ij, s_a, s_b, s_n = comb2(N.reshape(len(W), -1)), comb2(a), comb2(b), n * (n - 1) / 2
            expected = s_a * s_b / s_n
            top = (s_a + s_b) / 2
            out["ari"] = np.where(top == expected, 1.0, (s_ij - expected) / (top - expected))
        if "nmi" in wanted or "ami" in wanted:
            p = N / n[:, None, None]
            outer = a[:, :, None] * b[:, None, :] / n[:, None, None] ** 2
            mi = np.where(N > 0, p * np.log(np.where(N > 0, p, 1.0) / np.where(N > 0, outer, 1.0)), 0.0).sum((1, 2))
            mi = np.clip(mi, 0.0, None)

            def entropy(m):
                q = m / n[:, None]
                return -np.where(m > 0, q * np.log(np.where(m > 0, q, 1.0)), 0.0).sum(1)

            mean_h = (entropy(a) + entropy(b)) / 2
            if "nmi" in wanted:
                out["nmi"] = np.where(mean_h > 0, mi / mean_h, 1.0)
            if "ami" in wanted:
                denom = mean_h - emi
                denom = np.where(denom < 0, np.minimum(denom, -np.finfo(float).eps),
                                 np.maximum(denom, np.finfo(float).eps))
                out["ami"] = np.where(mean_h > 0, (mi - emi) / denom, 1.0)
    return out


#: ``partition_boot(units, W, metric=m)``: one of :func:`weighted_partition_scores`'s scores (``"ari"``, ``"nmi"`` or
#: ``"ami"``), the only one computed, bit for bit the same; a :class:`~.scoring.PreparedBoot` (``partial(partition_boot,
#: metric=m)`` reads its table once: the one-hot and the expected mutual information made once per table)
partition_boot = PreparedBoot(_partition_terms, lambda terms, W: _weighted_scores(terms, W)[terms[-1][0]])


def partition_bootstrap(units: pd.DataFrame, n_boot: int, seed: int, *, chunk: int = 100) -> dict[str, np.ndarray]:
    """ARI, NMI and AMI of the clusters with the classes over ``n_boot`` bootstrap resamples of the entities
    (:func:`~embeval_report.stats.bootstrap_weights`, seeded), the partition held fixed: all resamples at once from
    their weighted contingency tables (:func:`weighted_partition_scores`), ``chunk`` resamples at a time."""
    W = bootstrap_weights(len(units), n_boot, seed)
    parts = [weighted_partition_scores(units, W[s:s + chunk]) for s in range(0, n_boot, chunk)]
    return {name: np.concatenate([p[name] for p in parts]) for name in ("ari", "nmi", "ami")}


def evaluate_clustering(X, labels, *, n_init: int = KMEANS_N_INIT, n_seed_runs: int = N_SEED_RUNS,
                        silhouette_sample: int | None = SILHOUETTE_SAMPLE, sweep: bool = True,
                        minibatch_threshold: int = MINIBATCH_THRESHOLD, min_class_size: int = N_FOLDS,
                        n_boot: int = 1000, level: float = 0.95, seed: int = 0, device="auto",
                        column: str = "label", plan: ClusterPlan | None = None,
                        units: pd.DataFrame | None = None) -> ClusteringResult:
    r"""k-means with k = number of classes on the L2-normalised vectors, scored against the labels.

    Parameters
    ----------
    X : array (n, d) or torch tensor
    labels : one label per row (missing allowed) or a :class:`LabelSet` (classes smaller than
        ``min_class_size`` dropped, as in the node-classification chapter)
    n_init : k-means restarts per run (the best inertia is kept)
    n_seed_runs : 0: no ARI / NMI / AMI intervals. Otherwise their interval is the range over the fit's ``n_init``
        restarts (Lloyd, :func:`kmeans_restarts`), or above ``minibatch_threshold`` entities over this many further
        MiniBatchKMeans fits with seeds ``seed + 1 …`` (at most :data:`N_SEED_RUNS_LARGE`)
    silhouette_sample : silhouettes within a seeded sample of at most this many entities (``None``: all)
    sweep : also run k from max(2, C − 2) to C + 3 (the seed's range), each k warm-started from its neighbour
        (:data:`SWEEP_METHOD`)
    plan, units : the plan (:func:`cluster_plan`; from the arguments above when ``None``) and the scored entities
        (:func:`cluster_units`; computed when ``None``): the headline numbers are their aggregates

    Metrics (higher is better; no seed threshold, so no verdict): ``ari``, ``nmi``, ``ami``,
    ``silhouette`` (k-means partition) and ``label_silhouette`` (classes), cosine distance.
    Reference: seed 000 §218.4; scikit-learn ``adjusted_rand_score``,
    ``normalized_mutual_info_score``, ``adjusted_mutual_info_score``, ``silhouette_score``.
    """
    X = as_numpy(X)
    if plan is None:
        plan = cluster_plan(as_labelset(labels, len(X), min_class_size, column), n_init=n_init,
                            silhouette_sample=silhouette_sample, seed=seed, minibatch_threshold=minibatch_threshold)
    ls, k, n_init, seed, minibatch_threshold = plan.labels, plan.k, plan.n_init, plan.seed, plan.minibatch_threshold
    if units is None:
        units = cluster_units(X, plan, device=device)
    U, y, sample = unit_vectors(X[ls.rows]), ls.codes, plan.sample
    clusters, inertia, algorithm = units["cluster"].to_numpy(np.int64), units.attrs["inertia"], units.attrs["algorithm"]
    values = _partition_scores(y, clusters)
    values["inertia"] = inertia
    restarts = units.attrs.get("restarts") or []
    replicates = None
    if n_seed_runs and restarts:  # Lloyd: a bootstrap over the entities; the restarts' spread beside it
        seed_runs = pd.DataFrame(restarts, columns=["restart", "inertia", "ari", "nmi", "ami"])
        n_seed_runs = len(seed_runs)
        replicates = partition_bootstrap(units, n_boot, seed) if n_boot else None
        seed_method = (f"{level:.0%} percentile bootstrap over the {ls.n:,} entities ({n_boot} resamples; the k-means "
                       "partition held fixed, AMI's expected mutual information that of the whole table)"
                       if n_boot else "")
        spread = f"{seed_runs['ari'].min():.3f}–{seed_runs['ari'].max():.3f}"
        interval_over = (f"{n_boot:,} bootstrap resamples of the entities, the partition held fixed; over the fit's "
                         f"{n_seed_runs} k-means restarts ARI ranged {spread}")
    else:  # MiniBatchKMeans: further fits with other seeds
        if ls.n > minibatch_threshold:
            n_seed_runs = min(n_seed_runs, N_SEED_RUNS_LARGE)
        runs = []
        for r in range(1, n_seed_runs + 1):
            c, inert, _ = kmeans_fit(U, k, n_init=n_init, seed=seed + r, minibatch_threshold=minibatch_threshold)
            runs.append(dict(seed=seed + r, inertia=inert, **_partition_scores(y, c)))
        seed_runs = pd.DataFrame(runs, columns=["seed", "inertia", "ari", "nmi", "ami"])
        seed_method = (f"{level:.0%} range (percentiles) over {n_seed_runs} k-means runs with seeds {seed + 1}–"
                       f"{seed + n_seed_runs}, n_init = {n_init} each: algorithmic variability, entities fixed")
        interval_over = f"{n_seed_runs} k-means runs with other seeds"
    sil, lab_sil = units["silhouette"].to_numpy()[sample], units["label_silhouette"].to_numpy()[sample]
    sil_why, lab_why = units.attrs["silhouette_why"], units.attrs["label_silhouette_why"]
    values["silhouette"], values["label_silhouette"] = float(sil.mean()), float(lab_sil.mean())
    cont = np.zeros((k, k), dtype=np.int64)
    np.add.at(cont, (y, clusters), 1)
    matching = match_clusters(cont)
    values["cluster_accuracy"] = float(cont[matching, np.arange(k)].sum() / ls.n)
    sample_text = (f"all {ls.n:,} entities" if len(sample) == ls.n else
                   f"a seeded random sample of {len(sample):,} of the {ls.n:,} entities")
    seed_method = seed_method if n_seed_runs >= 2 or replicates is not None else ""
    boot_method = (f"{level:.0%} percentile bootstrap over the entities of {sample_text} ({n_boot} resamples; "
                   "per-entity silhouettes held fixed)")
    metrics = {}
    for spec in SPECS.values():
        name, note = spec.name, ""
        if name in ("ari", "nmi", "ami"):
            ci = (percentile_interval(replicates[name], level) if replicates is not None
                  else percentile_interval(seed_runs[name], level) if n_seed_runs >= 2 and not restarts else None)
            method = seed_method
        else:
            per, why = (sil, sil_why) if name == "silhouette" else (lab_sil, lab_why)
            ci = bootstrap_ci(np.mean, per, level=level, n_boot=n_boot, seed=seed, method="percentile") \
                if n_boot and len(per) > 1 and not why else None
            method = boot_method if n_boot else ""
            note = f"undefined: {why}" if why else ""
        metrics[name] = spec.record(values[name], ci, ci_method=method, note=note)
    sweep_table = _k_sweep(U, y, k, clusters, inertia, values["silhouette"], sample, seed, device) if sweep else None
    return ClusteringResult(
        labels=ls, k=k, values=values, metrics=metrics, clusters=clusters, contingency=cont, matching=matching,
        seed_runs=seed_runs, sweep=sweep_table, sample=sample, silhouettes=sil, label_silhouettes=lab_sil,
        algorithm=algorithm, level=level,
        info=dict(n_entities=ls.n, n_classes=k, n_missing=ls.n_missing, dropped_classes=ls.dropped,
                  algorithm=algorithm, n_init=n_init, n_seed_runs=n_seed_runs, interval_runs=seed_method,
                  interval_over=interval_over, interval_label=f"{level:.0%} CI".replace("%", " %") if restarts
                  else "seed range",
                  sweep_method=SWEEP_METHOD if sweep else None, normalised="L2 (unit vectors)",
                  silhouette_sample=int(len(sample)), silhouette_distance="cosine (1 - cos)",
                  minibatch_threshold=minibatch_threshold, seed=seed, inertia=inertia,
                  cluster_accuracy=values["cluster_accuracy"]))


def _k_sweep(U, y, k, clusters, inertia, silhouette, sample, seed, device) -> pd.DataFrame:
    """Scores for k from max(2, C − 2) to C + 3 (the seed's range; the true k is the main fit), each k warm-started
    from its neighbour towards the true k (:data:`SWEEP_METHOD`): one Lloyd run per k instead of ``n_init``
    seeded k-means++ restarts, and every k's silhouette in one call.

    The silhouette of a k whose clusters it is undefined for is NaN (no warning: the sweep is a side table).
    """
    fits = sweep_fits(U, k, clusters, inertia, seed=seed)
    ks = sorted(fits)
    defined = [kk for kk in ks if kk != k and not silhouette_undefined(U[sample], fits[kk][0][sample])]
    sils = dict(zip(defined, silhouette_values_many(U[sample], [fits[kk][0][sample] for kk in defined], device=device)))
    rows = []
    for kk in ks:
        c, inert = fits[kk]
        sil = silhouette if kk == k else float(sils[kk].mean()) if kk in sils else float("nan")
        rows.append(dict(k=kk, **_partition_scores(y, c), silhouette=sil, inertia=inert))
    return pd.DataFrame(rows)


def clustering_by_group(X, labels, groups, *, column: str = "kind", min_class_size: int = N_FOLDS,
                        silhouette_sample: int | None = SILHOUETTE_SAMPLE, seed: int = 0, device="auto",
                        label_column: str = "label") -> pd.DataFrame:
    """k-means alignment within each group of entities (one seeded run each, no intervals, no sweep)."""
    def evaluate(Xg, yg):
        return evaluate_clustering(Xg, yg, n_seed_runs=0, silhouette_sample=silhouette_sample, sweep=False, n_boot=0,
                                   min_class_size=min_class_size, seed=seed, device=device, column=label_column)

    def summarise(r):
        v = r.values
        return {"evaluated": r.n, "k": r.k, "ARI": v["ari"], "NMI": v["nmi"], "AMI": v["ami"],
                "matched %": 100 * v["cluster_accuracy"], "silhouette (clusters)": v["silhouette"],
                "silhouette (labels)": v["label_silhouette"]}
    return per_group(X, labels, groups, column, evaluate, summarise)


def partition_agreement(clusters, other) -> dict[str, float]:
    """ARI and NMI between the k-means clusters and another column (e.g. ``kind``), missing values skipped."""
    other = pd.Series(np.asarray(other, dtype=object))
    ok = other.notna().to_numpy()
    if ok.sum() < 2:
        return {"ari": float("nan"), "nmi": float("nan")}
    o = other[ok].astype(str).to_numpy()
    return {"ari": float(adjusted_rand_score(o, clusters[ok])),
            "nmi": float(normalized_mutual_info_score(o, clusters[ok]))}


@dataclass(frozen=True)
class Projection:
    """2-D coordinates of a sample of the labelled entities, for the figures."""

    method: str                # "pca" | "tsne"
    positions: np.ndarray      # positions into the LabelSet's rows
    coords: np.ndarray         # (m, 2)
    explained: tuple | None    # PCA: share of variance of the two axes
    protocol: str = ""         # t-SNE: its settings in words (the figure's caption)


def project(X, labels: LabelSet, *, method: str = "pca", sample_size: int | None = None, seed: int = 0,
            device="auto", in_thread: bool = False) -> Projection:
    """PCA (of all the unit vectors, exact via the covariance) or t-SNE (cosine, on a seeded sample; scikit-learn's
    Barnes-Hut t-SNE with :data:`TSNE_ITERATIONS` iterations and angle :data:`TSNE_ANGLE`, :func:`tsne_protocol`).

    The sample (``PROJECTION_SAMPLE[method]`` by default) only bounds what is drawn and, for
    t-SNE, the cost: t-SNE is O(m log m) per iteration and distorts global distances, PCA is linear
    and keeps them. Vectors that are all the same (no variance) get the origin for every point.
    ``in_thread``: called from :func:`project_aside`'s thread, which leaves the process's BLAS threads alone.
    """
    from .isotropy import PrincipalDirections

    X = as_numpy(X)
    size = sample_size or PROJECTION_SAMPLE.get(method)
    if method not in PROJECTION_SAMPLE:
        raise ValueError(f"method must be 'pca' or 'tsne', not {method!r}")
    pos = sample_positions(labels.n, size, seed, 2)
    if method == "pca":
        U = unit_vectors(X[labels.rows])
        pcs = PrincipalDirections.fit(U, device=device)
        V = np.zeros((U.shape[1], 2))
        V[:, :min(2, U.shape[1])] = pcs.vectors[:, :2]
        lam = np.clip(pcs.eigenvalues, 0, None)
        total = lam.sum()
        share = np.zeros(2)
        share[:min(2, len(lam))] = lam[:2] / total if total > 0 else 0.0
        return Projection("pca", pos, (U[pos] - pcs.mean) @ V, tuple(float(x) for x in share))
    from sklearn.manifold import TSNE
    V = X[labels.rows[pos]].astype(np.float64)
    if len(np.unique(V, axis=0)) < 2:  # t-SNE cannot spread identical points
        return Projection("tsne", pos, np.zeros((len(pos), 2)), None)
    perplexity = float(min(30.0, max(2.0, (len(pos) - 1) / 3)))
    init = "pca" if V.shape[1] >= 2 else "random"
    with nullcontext() if in_thread else threads(*V.shape):
        coords = TSNE(n_components=2, perplexity=perplexity, init=init, metric="cosine", random_state=seed,
                      max_iter=TSNE_ITERATIONS, angle=TSNE_ANGLE).fit_transform(V)
    return Projection("tsne", pos, coords, None, tsne_protocol(perplexity, init))


def tsne_protocol(perplexity: float, init: str = "pca") -> str:
    """The t-SNE map's settings in words (scikit-learn's ``TSNE``; the figure's caption)."""
    return (f"cosine distance, perplexity {perplexity:g}, {init.upper() if init == 'pca' else init} initialisation, "
            f"{TSNE_ITERATIONS} iterations (the first 250 exaggerated), Barnes–Hut angle {TSNE_ANGLE:g}")


def project_aside(X, labels: LabelSet, **kw) -> Callable[[], Projection]:
    """:func:`project` started now in a thread of its own, collected by calling the function returned.

    On two or more cores the t-SNE map (about 5 s of one core at 1,000 points) is made while k-means runs,
    which at the sizes where it runs single-threaded (:func:`~.labels.threads`) leaves a core idle: the
    clustering chapter of 10,000 x 384 took 21.4 s of CPU, 6.9 s of it t-SNE. The thread runs OpenMP
    single-threaded (its own setting) and leaves the process's BLAS threads to the caller (a limit set there
    is process-wide); t-SNE's coordinates do not depend on the BLAS thread count (tested), so they are those
    of :func:`project` called in turn (:func:`~.labels.aside`). On one core it is :func:`project` called now."""
    def run() -> Projection:
        with threadpool_limits(1, user_api="openmp"):
            return project(X, labels, in_thread=True, **kw)

    return aside(run) if _cores() >= 2 else aside(project, X, labels, **kw)
