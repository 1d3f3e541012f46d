r"""Stability across training runs (seed 003; seed 000 §217.2).

Embeddings are identified only up to an orthogonal transform (seed 000 §217.2.1.1), so two
training runs of the same model are compared either through quantities that need no
alignment or after an orthogonal Procrustes rotation:

* **k-NN overlap** (seed 003 §1–2; Wendlandt, Kummerfeld & Mihalcea 2018):
  :math:`o_{rs}(i) = |N^r_k(i) \cap N^s_k(i)| / k` with :math:`N^r_k(i)` the k nearest
  neighbours of entity *i* by cosine in run *r* (itself excluded), averaged over the entities
  and over all pairs of runs (the main set counts as a run). Higher is better; two runs that
  differ by a rotation give 1, unrelated runs :math:`k/(n-1)` in expectation.
* **Aligned cosine** (seed 000 §217.2.1.3, "mean cosine after alignment"): after mean-centring
  both runs and rotating run *s* onto run *r* by :math:`R^* = \arg\min_{R^\top R = I}
  \lVert \tilde E_r - \tilde E_s R\rVert_F` (Schönemann 1966), the cosine of each entity with
  itself. The seed's code sums unnormalised products of Frobenius-scaled rows (≈ 0.001 for
  n = 1000, not a cosine); here each row is normalised, as the seed's formula says.
* **Procrustes disparity** :math:`\lVert \hat E_r - \hat E_s R^*\rVert_F^2 \in [0, 2]` of the
  Frobenius-normalised centred runs (SciPy's convention); the seed's *Procrustes distance*
  is its square root :math:`d_P \in [0, \sqrt 2]`. Lower is better.
* **Pairwise similarity correlation** :math:`\rho = \mathrm{corr}_{i \ne j}(\tilde e^r_i \cdot
  \tilde e^r_j,\ \tilde e^s_i \cdot \tilde e^s_j)` of the Gram entries of the centred runs
  (seed 000 line 619). The seed's code samples 1000 rows; here it is **exact over all
  pairs** from d x d moment matrices (no n x n matrix), see :mod:`.pair_moments`. It carries
  the verdict (stability guidelines of seed 000 §217.2.2, :data:`SPECS`).

Stability over training time is in :mod:`.training_stability`; the subsets (vocabularies,
frequency bins, kinds) in :mod:`.stability_subsets`. Heavy work goes through the shared
chunked kernels: :func:`embeval_report.kernels.knn` (exact top-k),
:func:`~embeval_report.kernels.block_moments` and :func:`.procrustes.procrustes_align`.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import pandas as pd

from ..errors import InputError, UndefinedMetricWarning
from ..io import EmbeddingSet
from ..io.runs import MAIN_LABEL, RunFile
from ..kernels import as_numpy, block_moments, knn, neighbour_sets_overlap, resolve_device
from ..kernels.neighbours import usable_k
from ..stats import DEFAULT_LEVEL, MIN_BLOCKS, ResamplingPlan
from .pair_moments import PairMoments, pair_replicates, similarity_correlation
from .procrustes import procrustes_align, row_cosines
from .spec import MetricSpec, specs
from .stability_subsets import (Grouping, SubsetStability, category_grouping, frequency_association,
                                quantile_grouping, stability_groupings, subset_stability, vocabulary_grouping)
from .thresholds import THRESHOLDS

__all__ = ["SPECS", "METRICS", "K_DEFAULT", "MAIN_LABEL", "MIN_ENTITIES", "PairMoments", "similarity_correlation",
           "RunInputs", "RunStabilityResult", "chance_overlap", "usable_k", "common_rows", "match_runs",
           "measure_run_stability", "least_stable", "SHARED_SPACE", "dimension_mismatch", "dimension_note",
           "Grouping", "SubsetStability", "vocabulary_grouping",
           "quantile_grouping", "category_grouping", "stability_groupings", "subset_stability",
           "frequency_association", "first_ids"]

K_DEFAULT = 10
#: fewest shared entities a k-NN overlap can be measured on (k = 1 among the n − 1 others, k ≤ n − 2)
MIN_ENTITIES = 3

REF_OVERLAP = ("seed 003 §1–2 (nearest-neighbour overlap, pairwise stability); Wendlandt, Kummerfeld & "
               "Mihalcea 2018")
REF_ALIGNED = "seed 000 §217.2.1.3 (mean cosine after alignment, rows normalised); Schönemann 1966"
REF_DISPARITY = "seed 000 §217.2.1.3 (its Procrustes distance is √disparity); SciPy procrustes convention"
REF_CORR = "seed 000 §217.2.1.3 (exact over all pairs); verdict: stability guidelines, seed 000 §217.2.2"

# Formulas write the intersection as \operatorname{\cap}: pandoc turns a bare \cap into Typst's
# ``sect``, which current Typst no longer knows, and the PDF would lose the chapter.
SPECS = specs(
    MetricSpec("knn_overlap", "k-NN overlap across runs", "higher",
               r"\frac{1}{|P|}\sum_{(r,s) \in P}\frac{1}{n}\sum_i \frac{|N^r_k(i) \operatorname{\cap} N^s_k(i)|}{k}",
               REF_OVERLAP, range=(0.0, 1.0)),
    MetricSpec("procrustes_aligned_cosine", "Aligned cosine (after Procrustes)", "higher",
               r"\frac{1}{|P|}\sum_{(r,s)}\frac1n\sum_i \cos(\tilde e^r_i, R^{*\top}_{rs}\tilde e^s_i)",
               REF_ALIGNED, range=(-1.0, 1.0), chance=0.0),
    MetricSpec("procrustes_disparity", "Procrustes disparity", "lower",
               r"\frac{1}{|P|}\sum_{(r,s)} \lVert \hat E_r - \hat E_s R^*_{rs} \rVert_F^2",
               REF_DISPARITY, range=(0.0, 2.0)),
    MetricSpec("pairwise_similarity_correlation", "Pairwise similarity correlation", "higher",
               r"\frac{1}{|P|}\sum_{(r,s)} \mathrm{corr}_{i \ne j}(\tilde e^r_i \cdot "
               r"\tilde e^r_j,\ \tilde e^s_i \cdot \tilde e^s_j)",
               REF_CORR, range=(-1.0, 1.0), bands=THRESHOLDS["pairwise_similarity_correlation"], chance=0.0),
)
#: the verdict bands of the pairwise similarity correlation (the stability guidelines)
CORRELATION_BANDS = SPECS["pairwise_similarity_correlation"].bands

#: the old name of :data:`SPECS` (iterating gives the metric names)
METRICS = SPECS
#: the metrics that compare positions in one shared space: null (with :func:`dimension_note`) when a run has
#: another dimension than the main set; the k-NN overlap and the similarity correlation are kept
SHARED_SPACE = ("procrustes_aligned_cosine", "procrustes_disparity")


def dimension_mismatch(labels, dims) -> list[dict]:
    """``[{name, d}]`` of the runs whose dimension differs from the first's (the main set's)."""
    return [{"name": str(lab), "d": int(d)} for lab, d in zip(labels[1:], dims[1:]) if d != dims[0]]


def dimension_note(mismatch: list[dict], d: int, what: str = "run") -> str:
    """Why a shared-space metric is null when some runs have another dimension than the main set's ``d``."""
    other = ", ".join(f"{m['name']} has d = {m['d']}" for m in mismatch)
    return (f"needs one shared space: {what} {other}, the main set d = {d} (a rotation cannot align spaces of "
            "different dimensions)")


def chance_overlap(n: int, k: int) -> float:
    """Expected k-NN overlap of two unrelated spaces: :math:`k/(n-1)`.

    Each list holds k of the n − 1 other entities; for independent uniformly random lists the
    intersection is hypergeometric with mean :math:`k \\cdot k/(n-1)`, i.e. a share of k/(n − 1).
    """
    return k / (n - 1)


def _check_k(k: int, n: int, what: str) -> None:
    if k < 1 or n < k + 2:
        raise InputError(f"{what}: k-NN overlap with k = {k} needs at least {k + 2} shared entities, found {n}")


def first_ids(ids, limit: int = 3) -> str:
    """The first ``limit`` ids as ``a, b, c, …`` (for coverage tables)."""
    ids = [str(x) for x in list(ids)[:limit + 1]]
    return ", ".join(ids[:limit]) + (", …" if len(ids) > limit else "")


# ---------------------------------------------------------------------------------------------
# The runs, matched by id
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunInputs:
    """The runs of a set matched by id: the main set plus every file of the ``runs`` field.

    ``vectors[r]`` holds run r's rows for the entities present in **every** run (``index`` =
    their rows in the main set, ``ids`` their ids); ``coverage`` is one row per run with its
    matched, missing and extra ids; ``excluded`` the main-set ids missing from some run.
    """

    labels: list
    vectors: list
    index: np.ndarray
    ids: np.ndarray
    coverage: pd.DataFrame
    excluded: np.ndarray
    matched: list = field(default_factory=list)


def common_rows(es: EmbeddingSet, files: list[RunFile]) -> np.ndarray:
    """Rows of the main set present in every run file (ascending)."""
    present = np.ones(es.n, dtype=bool)
    for f in files:
        mask = np.zeros(es.n, dtype=bool)
        mask[f.matched.index] = True
        present &= mask
    return np.flatnonzero(present)


def match_runs(es: EmbeddingSet, files: list[RunFile]) -> RunInputs:
    """The main set and the (validated, id-matched) run files restricted to the entities of every run."""
    rows = [{"run": MAIN_LABEL, "file": "(the evaluated set)", "dimension": es.d, "rows": es.n, "matched": es.n,
             "missing": 0, "extra": 0, "missing ids (first)": "", "extra ids (first)": ""}]
    for f in files:
        m = f.matched
        rows.append({"run": f.label, "file": f.path.replace("\\", "/").rsplit("/", 1)[-1],
                     "dimension": m.vectors.shape[1], "rows": len(m.vectors) + len(m.extra),
                     "matched": len(m.index), "missing": len(m.missing), "extra": len(m.extra),
                     "missing ids (first)": first_ids(m.missing), "extra ids (first)": first_ids(m.extra)})
    index = common_rows(es, files)
    present = np.zeros(es.n, dtype=bool)
    present[index] = True
    vectors = [np.asarray(es.vectors[index])]
    for f in files:
        pos = np.empty(es.n, dtype=np.int64)
        pos[f.matched.index] = np.arange(len(f.matched.index))
        vectors.append(f.matched.vectors[pos[index]])
    return RunInputs([MAIN_LABEL] + [f.label for f in files], vectors, index, es.ids[index], pd.DataFrame(rows),
                     es.ids[~present], [f.matched for f in files])


# ---------------------------------------------------------------------------------------------
# Across runs
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunStabilityResult:
    """Everything the across-runs chapter shows.

    ``overlap`` and ``aligned_cosine`` are per entity, averaged over all run pairs;
    ``overlap_by_pair`` is (pairs x n); ``pairs`` is the table of pair-level metrics.
    ``n_blocks`` are the bootstrap blocks (or jackknife groups) of ``plan``.
    """

    n: int
    k: int
    labels: list
    pair_index: list
    pairs: pd.DataFrame
    overlap: np.ndarray
    aligned_cosine: np.ndarray
    overlap_by_pair: np.ndarray
    values: dict
    metrics: dict
    chance: float
    n_blocks: int
    n_boot: int
    ci_method: str
    info: dict = field(default_factory=dict)
    plan: ResamplingPlan | None = None


def _plan(n: int, dims: list[int], n_boot: int) -> ResamplingPlan:
    """Bootstrap over random blocks of entities while two (2d x 2d) moment sets per block fit the budget."""
    return ResamplingPlan.choose(n, 2 * max(dims), n_boot, moment_sets=2)


def _describe(plan: ResamplingPlan, level: float) -> str:
    if plan.method == "bootstrap":
        return (f"{level:.0%} basic bootstrap over entities, {plan.n_boot} resamples of {plan.units} random blocks "
                "of entities (same resamples for every run pair)")
    if plan.method == "jackknife":
        why = ("too few entities for a block bootstrap" if plan.units < MIN_BLOCKS else
               "the per-block moments of a bootstrap would not fit in memory")
        return (f"{level:.0%} normal interval, delete-a-group jackknife over {plan.units} random groups of entities "
                f"(same groups for every run pair; {why})")
    return ""


def _interval(plan: ResamplingPlan, value: float, reps, level: float, bounds) -> tuple[tuple, float, str]:
    """``plan``'s interval and bias-corrected estimate, and why the interval is missing (``""`` if it is not)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UndefinedMetricWarning)
        ci = plan.interval(value, reps, level, bounds)
        corrected = plan.bias_corrected(value, reps, bounds)
    for w in caught:
        if not issubclass(w.category, UndefinedMetricWarning):
            warnings.warn(w.message, w.category, stacklevel=3)
    if all(math.isfinite(x) for x in ci):
        return ci, corrected, ""
    return ci, corrected, "too few entities for the statistic to stay defined when they are resampled"


def _warn_undefined(values: dict, shared: bool = True) -> None:
    """Warn for each headline value that is undefined on this input (say why; ``shared``: every run has the main
    set's dimension, else the Procrustes metrics are undefined for that reason, said by the caller)."""
    if shared and not math.isfinite(values["procrustes_disparity"]):
        warnings.warn("Procrustes disparity and aligned cosine are undefined: after mean-centring every entity "
                      "has the same vector in some run (no spread to align)", UndefinedMetricWarning, stacklevel=3)
    if not math.isfinite(values["pairwise_similarity_correlation"]):
        warnings.warn("Pairwise similarity correlation is undefined: the similarities between entities do not "
                      "vary in some run (identical or collinear rows)", UndefinedMetricWarning, stacklevel=3)


def measure_run_stability(runs, k: int = K_DEFAULT, *, labels=None, n_boot: int = 200, level: float = DEFAULT_LEVEL,
                          seed: int = 0, device="auto") -> RunStabilityResult:
    r"""Stability of R ≥ 2 runs of the same entities (rows in the same order in every run).

    Parameters
    ----------
    runs : list of arrays (n, d_r) or :class:`RunInputs`
    k : neighbours per entity (default 10, as seed 003)
    n_boot : block-bootstrap resamples for the CIs (0 disables them)

    Every pair of runs (r, s), r < s, is compared: per-entity k-NN overlap (cosine, self
    excluded; neighbours from the exact chunked :func:`~embeval_report.kernels.knn`, once per
    run), per-entity cosine after Procrustes-aligning s onto r (both mean-centred), the
    disparity, and the exact pairwise similarity correlation. Headline values are means over
    pairs (and entities). Confidence intervals: basic bootstrap over random blocks of entities
    (the same resampled entities for every pair; neighbour lists and rotations held fixed for
    the per-entity scores, the rotation re-fitted for the disparity); when the per-block moment
    matrices would not fit in memory (d above about 650) or there are fewer than 20 entities, a
    delete-a-group jackknife instead (:class:`~embeval_report.stats.ResamplingPlan`). The spread
    over pairs is reported separately in ``pairs`` (pairs share runs and are few, so they are
    not independent draws and are not used for the interval). Undefined values (no spread in a
    run) are NaN with an :class:`~embeval_report.errors.UndefinedMetricWarning`.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).standard_normal((200, 8))
    >>> Q = np.linalg.qr(np.random.default_rng(1).standard_normal((8, 8)))[0]
    >>> r = measure_run_stability([X, X @ Q], k=5, n_boot=0)
    >>> round(r.values["knn_overlap"], 6), round(r.values["procrustes_aligned_cosine"], 6)
    (1.0, 1.0)
    """
    if isinstance(runs, RunInputs):
        labels = labels or runs.labels
        runs = runs.vectors
    runs = [as_numpy(r) for r in runs]
    R = len(runs)
    if R < 2:
        raise InputError("runs: stability needs at least two runs (the main set and one more)")
    n = len(runs[0])
    if any(len(r) != n for r in runs):
        raise ValueError(f"every run must hold the same {n} entities, got {[len(r) for r in runs]} rows")
    _check_k(k, n, "runs")
    labels = list(labels) if labels is not None else [MAIN_LABEL] + [f"run {i}" for i in range(1, R)]
    dev = resolve_device(device)
    nbrs = [knn(r, k, device=dev, desc=f"k-NN ({lab})")[0] for r, lab in zip(runs, labels)]
    plan = _plan(n, [r.shape[1] for r in runs], n_boot)
    pair_index = list(combinations(range(R), 2))
    dims = [int(r.shape[1]) for r in runs]
    mismatch = dimension_mismatch(labels, dims)
    # the resampling weights (replicates x units), the same resamples / deleted groups for every pair
    weights = plan.replicates(lambda w: w, seed=seed) if plan.active else None
    overlaps, cosines, rows, reps = [], [], [], []
    for a, b in pair_index:
        ov = neighbour_sets_overlap(nbrs[a], nbrs[b])
        if dims[a] == dims[b]:
            fit = procrustes_align(runs[a], runs[b], device=dev)
            disparity = fit.disparity
            cs = row_cosines(fit.target, fit.aligned) if math.isfinite(fit.disparity) else np.full(n, np.nan)
        else:  # no shared space: no rotation aligns them
            disparity, cs = float("nan"), np.full(n, np.nan)
        point, rep = pair_replicates(runs[a], runs[b], plan, weights, seed=seed, device=dev)
        corr = point.correlation()
        overlaps.append(ov)
        cosines.append(cs)
        rows.append({"run A": labels[a], "run B": labels[b], "k-NN overlap": float(ov.mean()),
                     "aligned cosine": float(cs.mean()), "disparity": disparity,
                     "Procrustes distance": math.sqrt(max(disparity, 0.0)) if math.isfinite(disparity) else disparity,
                     "similarity correlation": corr,
                     "verdict": SPECS["pairwise_similarity_correlation"].verdict(corr)})
        if rep is not None:
            reps.append(rep)
    overlap_by_pair = np.array(overlaps, dtype=np.float32)
    per_entity = np.column_stack([overlap_by_pair.mean(0), np.mean(cosines, axis=0)])
    pairs = pd.DataFrame(rows)
    values = {"knn_overlap": float(per_entity[:, 0].mean()), "procrustes_aligned_cosine": float(per_entity[:, 1].mean()),
              "procrustes_disparity": float(pairs["disparity"].mean()),
              "pairwise_similarity_correlation": float(pairs["similarity correlation"].mean())}
    if mismatch:  # means over the pairs that share a space would mix subsets of pairs: none
        values.update(dict.fromkeys(SHARED_SPACE, float("nan")))
    _warn_undefined(values, shared=not mismatch)
    if mismatch:
        warnings.warn(f"{dimension_note(mismatch, dims[0])}: aligned cosine and Procrustes disparity are null",
                      UndefinedMetricWarning, stacklevel=2)
    replicates = {}
    if plan.active:
        ent = block_moments(per_entity, n_blocks=plan.units, seed=seed, device=dev)
        with np.errstate(invalid="ignore", divide="ignore"):
            ent_reps = (weights @ ent.s) / (weights @ ent.count)[:, None]
        pair_reps = np.mean(reps, axis=0)  # (replicates, 2): disparity, correlation averaged over pairs
        replicates = {"knn_overlap": ent_reps[:, 0], "procrustes_aligned_cosine": ent_reps[:, 1],
                      "procrustes_disparity": pair_reps[:, 0], "pairwise_similarity_correlation": pair_reps[:, 1]}
    ci_method = _describe(plan, level)
    metrics = {}
    for spec in SPECS.values():
        name = spec.name
        ci = corrected = None
        note = "" if plan.active else plan.reason
        if mismatch and name in SHARED_SPACE:
            note = dimension_note(mismatch, dims[0])
        elif not math.isfinite(values[name]):
            note = "undefined: no spread in some run"
        elif name in replicates:
            ci, corrected, note = _interval(plan, values[name], replicates[name], level, spec.range)
            if note:
                warnings.warn(f"{spec.label}: no interval, {note}", UndefinedMetricWarning, stacklevel=2)
        metrics[name] = spec.record(values[name], ci, ci_method=ci_method, bias_corrected=corrected, note=note)
    spread = {c: {"sd": float(pairs[c].std(ddof=1)) if len(pairs) > 1 else 0.0, "min": float(pairs[c].min()),
                  "max": float(pairs[c].max())}
              for c in ("k-NN overlap", "aligned cosine", "disparity", "similarity correlation")}
    return RunStabilityResult(n=n, k=k, labels=labels, pair_index=pair_index, pairs=pairs, overlap=per_entity[:, 0],
                              aligned_cosine=per_entity[:, 1], overlap_by_pair=overlap_by_pair, values=values,
                              metrics=metrics, chance=chance_overlap(n, k),
                              n_blocks=plan.units if plan.active else 1, n_boot=plan.n_boot, ci_method=ci_method,
                              info=dict(level=level, device=str(dev), spread=spread,
                                        dims=dims, **({"dimension_mismatch": mismatch} if mismatch else {})),
                              plan=plan)


def least_stable(result: RunStabilityResult, ids, metadata: pd.DataFrame | None = None, n: int = 10,
                 columns=("kind", "label", "frequency", "title")) -> pd.DataFrame:
    """The ``n`` entities with the smallest k-NN overlap (ties: smallest aligned cosine first).

    Strings are plain (tables escape them); ``metadata`` is indexed by id.
    """
    order = np.lexsort((result.aligned_cosine, result.overlap))[:n]
    ids = np.asarray(ids, dtype=object)
    df = pd.DataFrame({"rank": np.arange(1, len(order) + 1), "id": [str(i) for i in ids[order]],
                       "k-NN overlap": result.overlap[order].astype(float),
                       "aligned cosine": result.aligned_cosine[order].astype(float)})
    if metadata is not None:
        meta = metadata.reindex(ids[order])
        for col in [c for c in columns if c in meta.columns]:
            df[col] = [None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in meta[col]]
    return df
