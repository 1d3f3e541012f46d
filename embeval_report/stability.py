r"""Stability across training runs and over training time (seed 003; seed 000 §217.2).

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
  pairs** from d x d moment matrices (no n x n matrix), see :func:`similarity_correlation`.
  It carries the verdict: > 0.95 healthy, 0.85–0.95 concerning, < 0.85 problematic
  (seed 000 §217.2.2).

Over training time (seed 003 §3, §5) checkpoints ("tranches") of one or more runs are compared
between consecutive tranches and with the final one, the same runs are compared with each other
at each tranche, and each entity's movement :math:`1 - \cos(v_{t-1}, v_t)` after alignment is
grouped by the tranche in which the entity first appears (its cohort).

Heavy work goes through the shared chunked kernels: :func:`embeval_report.kernels.knn` (exact
top-k), :func:`~embeval_report.kernels.block_moments` (moment matrices for the exact
correlation and the block bootstrap) and :func:`embeval_report.procrustes.procrustes_align`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from scipy import stats as sstats
from statsmodels.stats.multitest import multipletests

from .display import escape
from .errors import InputError
from .hubness import kind_column
from .io import EmbeddingSet, MatchedVectors, _read_ids_file, load_matched
from .kernels import CHUNK_BYTES, as_numpy, block_moments, column_mean, knn, neighbour_sets_overlap, resolve_device
from .plotting import PALETTE, WIDTH
from .procrustes import procrustes_align, row_cosines
from .results import Metric
from .stats import DEFAULT_LEVEL, basic_interval, bootstrap_ci, normal_ci, weighted_bootstrap
from .thresholds import THRESHOLDS, verdict

K_DEFAULT = 10
#: memory allowed for the per-block moment matrices of one pair of runs (block bootstrap)
BOOTSTRAP_BYTES = 512 * 2**20
MAX_BLOCKS, MIN_BLOCKS = 64, 20
#: per-entity means of up to this many values get a BCa bootstrap CI; larger ones the normal interval
BCA_MAX = 5000
MAIN_LABEL = "main set"

REF_OVERLAP = ("seed 003 §1–2 (nearest-neighbour overlap, pairwise stability); Wendlandt, Kummerfeld & "
               "Mihalcea 2018")
REF_ALIGNED = "seed 000 §217.2.1.3 (mean cosine after alignment, rows normalised); Schönemann 1966"
REF_DISPARITY = "seed 000 §217.2.1.3 (its Procrustes distance is √disparity); SciPy procrustes convention"
REF_CORR = "seed 000 §217.2.1.3 (exact over all pairs); verdict: stability guidelines, seed 000 §217.2.2"
REF_TRANCHE = "seed 003 §3 (stability over training time)"
REF_MOVEMENT = "seed 003 §5 (word cohort movement), after Procrustes alignment"

# Formulas write the intersection as \operatorname{\cap}: pandoc turns a bare \cap into Typst's
# ``sect``, which current Typst no longer knows, and the PDF would lose the chapter.

#: name -> (label, direction, LaTeX formula, reference, threshold quantity or None)
METRICS = {
    "knn_overlap": ("k-NN overlap across runs", "higher",
                    r"\frac{1}{|P|}\sum_{(r,s) \in P}\frac{1}{n}\sum_i \frac{|N^r_k(i) \operatorname{\cap} N^s_k(i)|}{k}",
                    REF_OVERLAP, None),
    "procrustes_aligned_cosine": ("Aligned cosine (after Procrustes)", "higher",
                                  r"\frac{1}{|P|}\sum_{(r,s)}\frac1n\sum_i \cos(\tilde e^r_i, R^{*\top}_{rs}\tilde e^s_i)",
                                  REF_ALIGNED, None),
    "procrustes_disparity": ("Procrustes disparity", "lower",
                             r"\frac{1}{|P|}\sum_{(r,s)} \lVert \hat E_r - \hat E_s R^*_{rs} \rVert_F^2",
                             REF_DISPARITY, None),
    "pairwise_similarity_correlation": ("Pairwise similarity correlation", "higher",
                                        r"\frac{1}{|P|}\sum_{(r,s)} \mathrm{corr}_{i \ne j}(\tilde e^r_i \cdot "
                                        r"\tilde e^r_j,\ \tilde e^s_i \cdot \tilde e^s_j)",
                                        REF_CORR, "pairwise_similarity_correlation"),
}

#: the training-time chapter's headline numbers: name -> (label, direction, formula, reference)
TRAINING_METRICS = {
    "tranche_knn_overlap_last": ("k-NN overlap, last two tranches", "higher",
                                 r"\frac1n\sum_i |N^{T-1}_k(i) \operatorname{\cap} N^{T}_k(i)| / k", REF_TRANCHE),
    "tranche_movement_last": ("Movement at the last tranche", "lower",
                              r"\frac1n\sum_i \big(1 - \cos(R^{*\top} \tilde v^{T-1}_i, \tilde v^{T}_i)\big)",
                              REF_MOVEMENT),
    "tranche_knn_overlap_first_to_final": ("k-NN overlap, first vs final tranche", "higher",
                                           r"\frac1n\sum_i |N^{1}_k(i) \operatorname{\cap} N^{T}_k(i)| / k", REF_TRANCHE),
    "tranche_cross_run_knn_overlap_final": ("k-NN overlap across runs at the final tranche", "higher",
                                            r"\frac{1}{|P|}\sum_{(r,s)}\frac1n\sum_i |N^{r,T}_k(i) \operatorname{\cap} "
                                            r"N^{s,T}_k(i)| / k", REF_TRANCHE),
}


def chance_overlap(n: int, k: int) -> float:
    """Expected k-NN overlap of two unrelated spaces: :math:`k/(n-1)`.

    Each list holds k of the n − 1 other entities; for independent uniformly random lists the
    intersection is hypergeometric with mean :math:`k \\cdot k/(n-1)`, i.e. a share of k/(n − 1).
    """
    return k / (n - 1)


def _check_k(k: int, n: int, what: str) -> None:
    if k < 1 or n < k + 2:
        raise InputError(f"{what}: k-NN overlap with k = {k} needs at least {k + 2} shared entities, found {n}")


# ---------------------------------------------------------------------------------------------
# Exact pairwise similarity correlation and the block bootstrap of pair statistics
# ---------------------------------------------------------------------------------------------

def _block_count(n: int, width: int) -> int:
    """Blocks for the bootstrap, bounded by the memory of the (width x width) per-block moment matrices."""
    return int(min(MAX_BLOCKS, n, BOOTSTRAP_BYTES // (2 * 8 * width * width)))


@dataclass(frozen=True)
class PairMoments:
    """Per-block moments of two centred runs ``A`` (n x da) and ``B`` (n x db) of the same entities.

    Rows go to blocks by the seeded permutation of :func:`~embeval_report.kernels.block_moments`.
    Kept per block b: ``count``; ``sa``, ``sb`` (row sums); ``Gab = Σ a bᵀ``; the Frobenius
    Gram matrices ``Kaa[b, c] = ⟨Σ_b a aᵀ, Σ_c a aᵀ⟩`` (and ``Kbb``, ``Kab``) that give
    ``‖Σ_b w_b G_b‖²_F = wᵀKw``; and the scalars ``qa = Σ‖a‖²``, ``qb``, ``qaa = Σ‖a‖⁴``,
    ``qbb``, ``qab = Σ‖a‖²‖b‖²``. Centring is at the full-sample means.
    """

    count: np.ndarray
    sa: np.ndarray
    sb: np.ndarray
    Gab: np.ndarray
    Kaa: np.ndarray
    Kbb: np.ndarray
    Kab: np.ndarray
    q: np.ndarray  # (B, 5): qa, qb, qaa, qbb, qab

    @classmethod
    def gather(cls, A, B, *, n_blocks: int = 1, seed: int = 0, device="auto") -> "PairMoments":
        dev = resolve_device(device)
        A, B = as_numpy(A), as_numpy(B)
        if len(A) != len(B):
            raise ValueError(f"the two runs must hold the same entities ({len(A)} vs {len(B)} rows)")
        da = A.shape[1]
        X = np.hstack([A, B])
        mean = column_mean(X, device=dev)
        m = block_moments(X, shift=mean, n_blocks=n_blocks, seed=seed, device=dev)
        mu = torch.as_tensor(mean, device=dev)

        def norms(x):
            c = x - mu
            na, nb = (c[:, :da] ** 2).sum(1), (c[:, da:] ** 2).sum(1)
            return torch.stack([na, nb], 1)

        q = block_moments(X, transform=norms, shift=np.zeros(2), n_blocks=n_blocks, seed=seed, device=dev)
        G = m.G
        Gaa, Gbb = G[:, :da, :da], G[:, da:, da:]
        flat = lambda M: M.reshape(len(M), -1)  # noqa: E731
        return cls(count=m.count, sa=m.s[:, :da], sb=m.s[:, da:], Gab=G[:, :da, da:].copy(),
                   Kaa=flat(Gaa) @ flat(Gaa).T, Kbb=flat(Gbb) @ flat(Gbb).T,
                   Kab=flat(G[:, :da, da:]) @ flat(G[:, :da, da:]).T,
                   q=np.column_stack([q.s[:, 0], q.s[:, 1], q.G[:, 0, 0], q.G[:, 1, 1], q.G[:, 0, 1]]))

    def _weights(self, w) -> tuple[np.ndarray, bool]:
        W = np.ones(len(self.count)) if w is None else np.asarray(w, float)
        return np.atleast_2d(W), W.ndim == 1

    def correlation(self, w: np.ndarray | None = None):
        r"""Pearson correlation of the Gram entries over all ordered pairs of distinct rows.

        With row weights (block multiplicities) ``w``, sums over pairs :math:`i \ne j` are
        :math:`\sum_{ij} w_i w_j x_{ij} - \sum_i w_i^2 x_{ii}`, and
        :math:`\sum_{ij} w_i w_j (a_i\cdot a_j)(b_i \cdot b_j) = \lVert A^\top W B\rVert_F^2`.
        ``w``: block weights (B,), or (r, B) for r replicates at once (returns an array).
        """
        W, single = self._weights(w)
        W2 = W * W
        q = W2 @ self.q
        N = (W @ self.count) ** 2 - W2 @ self.count
        sa, sb = W @ self.sa, W @ self.sb
        Sx, Sy = (sa * sa).sum(1) - q[:, 0], (sb * sb).sum(1) - q[:, 1]
        quad = lambda K: np.einsum("rb,bc,rc->r", W, K, W)  # noqa: E731
        Sxx, Syy, Sxy = quad(self.Kaa) - q[:, 2], quad(self.Kbb) - q[:, 3], quad(self.Kab) - q[:, 4]
        den = (N * Sxx - Sx * Sx) * (N * Syy - Sy * Sy)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(den > 0, (N * Sxy - Sx * Sy) / np.sqrt(np.clip(den, 1e-300, None)), np.nan)
        return float(out[0]) if single else out

    def disparity(self, w: np.ndarray | None = None, *, device="auto"):
        """Rotation-only Procrustes disparity ``2 − 2 Σ s_k(AᵀWB) / (‖A‖_W ‖B‖_W)`` of the weighted rows.

        ``w``: block weights (B,), or (r, B) for r replicates (batched singular values in torch).
        """
        W, single = self._weights(w)
        dev = resolve_device(device)
        G = torch.as_tensor(self.Gab, device=dev)
        da, db = self.Gab.shape[1:]
        step = max(1, CHUNK_BYTES // (8 * da * db * 2))
        nuc = np.empty(len(W))
        for s0 in range(0, len(W), step):
            Wt = torch.as_tensor(W[s0:s0 + step], device=dev)
            M = torch.einsum("rb,bij->rij", Wt, G)
            M = M.transpose(1, 2) @ M if db <= da else M @ M.transpose(1, 2)
            # nuclear norm = Σ sqrt(eig(MᵀM)): a symmetric eigensolve is ~3x cheaper than an SVD
            nuc[s0:s0 + step] = torch.linalg.eigvalsh(M).clamp_min(0).sqrt().sum(1).cpu().numpy()
        na, nb = W @ self.q[:, 0], W @ self.q[:, 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where((na > 0) & (nb > 0), 2.0 - 2.0 * nuc / np.sqrt(np.clip(na * nb, 1e-300, None)), np.nan)
        return float(out[0]) if single else out


def similarity_correlation(A, B, *, device="auto") -> float:
    r"""Exact pairwise similarity correlation of two runs of the same entities (rows in the same order).

    :math:`\rho = \mathrm{corr}_{i \ne j}(\tilde a_i \cdot \tilde a_j,\ \tilde b_i \cdot \tilde b_j)` over
    all pairs of distinct entities, with :math:`\tilde a, \tilde b` the mean-centred rows (seed 000
    §217.2.1.3, ``procrustes_similarity``; its code uses a 1000-row sample). Invariant to rotations
    and to the scale of either run, so no alignment is needed. Computed from d x d moment matrices
    in one chunked pass (O(n d²), no n x n matrix). Higher is better; 1 = the same geometry.
    """
    return PairMoments.gather(A, B, device=device).correlation()


# ---------------------------------------------------------------------------------------------
# Across runs
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


def _unique_labels(paths: list[str], taken=(MAIN_LABEL,)) -> list[str]:
    names = [Path(p).name for p in paths]
    out, seen = [], set(taken)
    for i, nm in enumerate(names, 1):
        lab = nm if names.count(nm) == 1 and nm not in seen else f"run {i}: {nm}"
        seen.add(lab)
        out.append(lab)
    return out


def _examples(ids, limit: int = 3) -> str:
    ids = [str(x) for x in list(ids)[:limit + 1]]
    return ", ".join(ids[:limit]) + (", …" if len(ids) > limit else "")


def load_runs(es: EmbeddingSet, paths: list | None = None, *, k: int = K_DEFAULT) -> RunInputs:
    """Load the ``runs`` files of ``es`` and match their rows to the main set by id.

    A file with its own ids (csv/parquet id column, npz/pt ``ids``, word2vec words) is matched
    by them; one without (``.npy``) must list the main set's entities in its order. Ids the file
    lacks or adds are reported in ``coverage``; stability is computed on the entities present in
    every run.
    """
    paths = list(paths if paths is not None else es.fields.get("runs") or [])
    if not paths:
        raise InputError("manifest field 'runs': expected a list of vectors files of other training runs")
    labels = _unique_labels(paths)
    matched = [load_matched(p, es, label=f"runs: {lab}") for p, lab in zip(paths, labels)]
    present = np.ones(es.n, dtype=bool)
    rows = [{"run": MAIN_LABEL, "file": "(the evaluated set)", "dimension": es.d, "rows": es.n, "matched": es.n,
             "missing": 0, "extra": 0, "missing ids (first)": "", "extra ids (first)": ""}]
    for lab, m, path in zip(labels, matched, paths):
        mask = np.zeros(es.n, dtype=bool)
        mask[m.index] = True
        present &= mask
        rows.append({"run": lab, "file": Path(path).name, "dimension": m.vectors.shape[1],
                     "rows": len(m.vectors) + len(m.extra), "matched": len(m.index), "missing": len(m.missing),
                     "extra": len(m.extra), "missing ids (first)": _examples(m.missing),
                     "extra ids (first)": _examples(m.extra)})
    index = np.flatnonzero(present)
    _check_k(k, len(index), "runs")
    vectors = [np.asarray(es.vectors[index])]
    for m in matched:
        pos = np.empty(es.n, dtype=np.int64)
        pos[m.index] = np.arange(len(m.index))
        vectors.append(m.vectors[pos[index]])
    return RunInputs([MAIN_LABEL] + labels, vectors, index, es.ids[index], pd.DataFrame(rows),
                     es.ids[~present], matched)


@dataclass(frozen=True)
class RunStabilityResult:
    """Everything the across-runs chapter shows.

    ``overlap`` and ``aligned_cosine`` are per entity, averaged over all run pairs;
    ``overlap_by_pair`` is (pairs x n); ``pairs`` is the table of pair-level metrics.
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
    the per-entity scores, the rotation re-fitted for the disparity). The spread over pairs is
    reported separately in ``pairs`` (pairs share runs and are few, so they are not
    independent draws and are not used for the interval).

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
    width = max(r.shape[1] for r in runs) * 2
    blocks = _block_count(n, width) if n_boot else 1
    if blocks < MIN_BLOCKS:
        blocks, n_boot = 1, 0
    pair_index = list(combinations(range(R), 2))
    # the bootstrap's block weights (n_boot, blocks), the same resamples for every pair
    weights = weighted_bootstrap(lambda w: w, blocks, n_boot=n_boot, seed=seed) if n_boot else None
    overlaps, cosines, rows, reps = [], [], [], []
    for a, b in pair_index:
        ov = neighbour_sets_overlap(nbrs[a], nbrs[b])
        fit = procrustes_align(runs[a], runs[b])
        cs = row_cosines(fit.target, fit.aligned)
        mom = PairMoments.gather(runs[a], runs[b], n_blocks=blocks, seed=seed, device=dev)
        corr = mom.correlation()
        overlaps.append(ov)
        cosines.append(cs)
        rows.append({"run A": labels[a], "run B": labels[b], "k-NN overlap": float(ov.mean()),
                     "aligned cosine": float(cs.mean()), "disparity": fit.disparity,
                     "Procrustes distance": math.sqrt(max(fit.disparity, 0.0)),
                     "similarity correlation": corr, "verdict": verdict("pairwise_similarity_correlation", corr)})
        if n_boot:
            reps.append(np.column_stack([mom.disparity(weights, device=dev), mom.correlation(weights)]))
    overlap_by_pair = np.array(overlaps, dtype=np.float32)
    per_entity = np.column_stack([overlap_by_pair.mean(0), np.mean(cosines, axis=0)])
    pairs = pd.DataFrame(rows)
    values = {"knn_overlap": float(per_entity[:, 0].mean()), "procrustes_aligned_cosine": float(per_entity[:, 1].mean()),
              "procrustes_disparity": float(pairs["disparity"].mean()),
              "pairwise_similarity_correlation": float(pairs["similarity correlation"].mean())}
    cis = {}
    if n_boot:
        ent = block_moments(per_entity, n_blocks=blocks, seed=seed, device=dev)
        ent_reps = (weights @ ent.s) / (weights @ ent.count)[:, None]
        pair_reps = np.mean(reps, axis=0)  # (n_boot, 2): disparity, correlation averaged over pairs
        cis["knn_overlap"] = basic_interval(values["knn_overlap"], ent_reps[:, 0], level, (0.0, 1.0))
        cis["procrustes_aligned_cosine"] = basic_interval(values["procrustes_aligned_cosine"], ent_reps[:, 1], level,
                                                          (-1.0, 1.0))
        cis["procrustes_disparity"] = basic_interval(values["procrustes_disparity"], pair_reps[:, 0], level, (0.0, 2.0))
        cis["pairwise_similarity_correlation"] = basic_interval(values["pairwise_similarity_correlation"],
                                                                pair_reps[:, 1], level, (-1.0, 1.0))
    ci_method = (f"{level:.0%} basic bootstrap over entities, {n_boot} resamples of {blocks} random blocks of "
                 "entities (same resamples for every run pair)" if n_boot else "")
    metrics = {}
    for name, (label, direction, formula, ref, quantity) in METRICS.items():
        lo, hi = cis.get(name, (None, None))
        metrics[name] = Metric(name=name, value=values[name], direction=direction, reference=ref, ci_low=lo,
                               ci_high=hi, verdict=verdict(quantity, values[name]) if quantity else None,
                               label=label, formula=formula, ci_method=ci_method)
    spread = {c: {"sd": float(pairs[c].std(ddof=1)) if len(pairs) > 1 else 0.0, "min": float(pairs[c].min()),
                  "max": float(pairs[c].max())}
              for c in ("k-NN overlap", "aligned cosine", "disparity", "similarity correlation")}
    return RunStabilityResult(n=n, k=k, labels=labels, pair_index=pair_index, pairs=pairs, overlap=per_entity[:, 0],
                              aligned_cosine=per_entity[:, 1], overlap_by_pair=overlap_by_pair, values=values,
                              metrics=metrics, chance=chance_overlap(n, k), n_blocks=blocks, n_boot=n_boot,
                              ci_method=ci_method, info=dict(level=level, device=str(dev), spread=spread,
                                                             dims=[int(r.shape[1]) for r in runs]))


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


# ---------------------------------------------------------------------------------------------
# Vocabulary-restricted stability (named id subsets and metadata bins)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Grouping:
    """Named subsets of the compared entities (positions into the per-entity arrays)."""

    name: str
    subsets: dict
    disjoint: bool
    notes: list = field(default_factory=list)


def vocabulary_grouping(es: EmbeddingSet, index: np.ndarray, entries: list | None = None) -> Grouping | None:
    """The ``vocabularies`` field as a :class:`Grouping` over the compared entities (rows ``index``).

    Ids unknown to the set, or missing from some run, are counted in ``notes``; a vocabulary
    none of whose ids is compared raises :class:`InputError` naming its file.
    """
    entries = entries if entries is not None else es.fields.get("vocabularies")
    if not entries:
        return None
    pos = pd.Index(es.ids[index])
    known = pd.Index(es.ids)
    subsets, notes, seen = {}, [], set()
    for i, e in enumerate(entries, 1):
        name = str(e["name"])
        if name in seen:
            raise InputError(f"manifest field 'vocabularies', item {i}: duplicate name {name!r}")
        seen.add(name)
        label = f"vocabularies: {name} ({Path(e['ids']).name})"
        ids = pd.unique(_read_ids_file(Path(e["ids"]), label))
        at = pos.get_indexer(ids)
        unknown = int((known.get_indexer(ids) < 0).sum())
        not_compared = int((at < 0).sum()) - unknown
        if not (at >= 0).any():
            raise InputError(f"{label}: none of its {len(ids)} ids is among the {len(pos)} entities compared "
                             f"(first ids: {_examples(ids)})")
        subsets[name] = np.sort(at[at >= 0])
        if unknown or not_compared:
            notes.append(f"Vocabulary “{name}”: {len(ids)} ids, {unknown} not in the embedding set, "
                         f"{not_compared} missing from some run; {len(subsets[name])} compared")
    members = np.concatenate(list(subsets.values()))
    return Grouping("vocabulary", subsets, disjoint=len(members) == len(np.unique(members)), notes=notes)


def quantile_grouping(values, *, column: str = "frequency", q: int = 4) -> Grouping | None:
    """Quantile bins of a numeric column (e.g. frequency quartiles); ``None`` when it cannot be binned."""
    s = pd.to_numeric(pd.Series(np.asarray(values, dtype=object)), errors="coerce")
    ok = s.notna().to_numpy()
    if ok.sum() < 2 * q or s[ok].nunique() < 2:
        return None
    bins = pd.qcut(s[ok], q, duplicates="drop")
    rows = np.flatnonzero(ok)
    subsets = {}
    for j, cat in enumerate(bins.cat.categories, 1):
        members = rows[(bins == cat).to_numpy()]
        lo, hi = s[ok][(bins == cat).to_numpy()].agg(["min", "max"])
        subsets[f"Q{j}: {_num(lo)} – {_num(hi)}"] = members
    if len(subsets) < 2:
        return None
    notes = [f"{int((~ok).sum())} entities without a “{column}” value are left out"] if (~ok).any() else []
    return Grouping(f"{column} {'quartile' if len(subsets) == 4 else 'quantile bin'}", subsets, True, notes)


def category_grouping(values, *, column: str) -> Grouping | None:
    """One subset per value of a categorical column (missing values left out)."""
    s = pd.Series(np.asarray(values, dtype=object))
    ok = s.notna().to_numpy()
    cats = sorted(s[ok].astype(str).unique())
    if len(cats) < 2:
        return None
    sv = s.astype(str).to_numpy()
    return Grouping(column, {c: np.flatnonzero(ok & (sv == c)) for c in cats}, True)


def _num(x) -> str:
    x = float(x)
    return f"{x:,.0f}" if x == int(x) else f"{x:,.3g}"


def stability_groupings(es: EmbeddingSet, index: np.ndarray, *, frequency_column: str = "frequency",
                        q: int = 4) -> list[Grouping]:
    """Subsets to compare: the ``vocabularies``, quantile bins of ``frequency_column`` and a kind column."""
    out = []
    voc = vocabulary_grouping(es, index)
    if voc is not None:
        out.append(voc)
    meta = es.metadata
    if meta is not None:
        rows = meta.iloc[index]
        if frequency_column in rows.columns:
            g = quantile_grouping(rows[frequency_column].to_numpy(), column=frequency_column, q=q)
            if g is not None:
                out.append(g)
        col = kind_column(meta)
        if col is not None:
            g = category_grouping(rows[col].to_numpy(), column=col)
            if g is not None:
                out.append(g)
    return out


def mean_ci(x, *, level: float = DEFAULT_LEVEL, seed: int = 0) -> tuple[float, float, str]:
    """CI of a mean: BCa bootstrap up to :data:`BCA_MAX` values, the normal interval beyond."""
    x = np.asarray(x, float)
    if len(x) < 2:
        return float("nan"), float("nan"), ""
    if np.ptp(x) == 0:
        return float(x[0]), float(x[0]), "constant values: no spread to resample"
    if len(x) <= BCA_MAX:
        lo, hi = bootstrap_ci(np.mean, x, level=level, n_boot=1000, seed=seed)
        return lo, hi, f"{level:.0%} BCa bootstrap over entities (1000 resamples)"
    lo, hi = normal_ci(float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))), level)
    return lo, hi, f"{level:.0%} normal interval (mean ± z·sd/√n over entities)"


@dataclass(frozen=True)
class SubsetStability:
    """Per-subset stability and the tests of whether the subsets differ."""

    table: pd.DataFrame
    tests: pd.DataFrame
    notes: list


def subset_stability(result: RunStabilityResult, groupings: list[Grouping], *, alpha: float = 0.05,
                     level: float = DEFAULT_LEVEL, seed: int = 0) -> SubsetStability:
    """Stability restricted to each subset, and whether subsets differ.

    Restriction follows seed 003 §4: neighbours come from the whole shared vocabulary and the
    per-entity overlap (averaged over run pairs) is averaged over the subset's entities. Tests
    on the per-entity overlap: Kruskal–Wallis across the subsets of a grouping when they are
    disjoint, then two-sided Mann–Whitney U for every pair of subsets (each subset against the
    rest of the entities when subsets overlap), Holm-corrected within the grouping
    (statsmodels ``multipletests``). The effect size is the probability of superiority
    :math:`A = U / (n_1 n_2)` (0.5 = no difference).
    """
    rows, tests, notes = [], [], []
    x = result.overlap.astype(float)
    c = result.aligned_cosine.astype(float)
    for g in groupings:
        notes += g.notes
        usable = {name: idx for name, idx in g.subsets.items() if len(idx) > 0}
        for name, idx in usable.items():
            lo, hi, _ = mean_ci(x[idx], level=level, seed=seed)
            rows.append({"grouping": g.name, "subset": name, "n": len(idx), "k-NN overlap": float(x[idx].mean()),
                         "95 % CI": "—" if not np.isfinite(lo) else f"{lo:.3f} – {hi:.3f}",
                         "median": float(np.median(x[idx])), "aligned cosine": float(c[idx].mean()),
                         "share < 0.5": float((x[idx] < 0.5).mean())})
        testable = {k_: v for k_, v in usable.items() if len(v) >= 2}
        if len(testable) < 2 and g.disjoint:
            continue
        comparisons = []
        if g.disjoint:
            h, p = sstats.kruskal(*[x[v] for v in testable.values()])
            tests.append({"grouping": g.name, "comparison": f"all {len(testable)} subsets (Kruskal–Wallis H)",
                          "n₁": sum(len(v) for v in testable.values()), "n₂": None, "statistic": float(h),
                          "effect A": None, "p": float(p), "p (Holm)": float(p), "differs": bool(p < alpha)})
            for (a, ia), (b, ib) in combinations(testable.items(), 2):
                comparisons.append((f"{a} vs {b}", x[ia], x[ib]))
        else:
            everyone = np.arange(len(x))
            for a, ia in testable.items():
                rest = np.setdiff1d(everyone, ia)
                if len(rest) >= 2:
                    comparisons.append((f"{a} vs the rest", x[ia], x[rest]))
        if not comparisons:
            continue
        ps, part = [], []
        for label, u, v in comparisons:
            res = sstats.mannwhitneyu(u, v, alternative="two-sided")
            ps.append(float(res.pvalue))
            part.append({"grouping": g.name, "comparison": f"{label} (Mann–Whitney U)", "n₁": len(u), "n₂": len(v),
                         "statistic": float(res.statistic), "effect A": float(res.statistic) / (len(u) * len(v)),
                         "p": float(res.pvalue)})
        reject, p_holm, _, _ = multipletests(ps, alpha=alpha, method="holm")
        for r, ph, rej in zip(part, p_holm, reject):
            r.update({"p (Holm)": float(ph), "differs": bool(rej)})
        tests += part
    return SubsetStability(pd.DataFrame(rows), pd.DataFrame(tests), notes)


def frequency_association(result: RunStabilityResult, metadata: pd.DataFrame | None, index,
                          column: str = "frequency") -> dict | None:
    """Spearman correlation between a frequency column and each entity's k-NN overlap (``None`` without one)."""
    if metadata is None or column not in metadata.columns:
        return None
    f = pd.to_numeric(metadata[column].iloc[np.asarray(index)], errors="coerce").to_numpy(float)
    ok = np.isfinite(f)
    if ok.sum() < 10 or np.unique(f[ok]).size < 2:
        return None
    res = sstats.spearmanr(f[ok], result.overlap[ok])
    return {"column": column, "rho": float(res.statistic), "p": float(res.pvalue), "n": int(ok.sum())}


# ---------------------------------------------------------------------------------------------
# Over training time: tranches
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Checkpoint:
    """One tranche of one run, matched to the main set by id."""

    name: str
    order: object
    run: str
    file: str
    matched: MatchedVectors


def _sort_orders(entries: list[dict], run: str) -> list:
    """Sort keys of one run's tranches: all given orders (numbers, or dates/strings) or list position."""
    given = ["order" in e for e in entries]
    where = f"manifest field 'tranches' (run {run!r})"
    if not any(given):
        return list(range(len(entries)))
    if not all(given):
        missing = [e["name"] for e, g in zip(entries, given) if not g]
        raise InputError(f"{where}: 'order' is given for some tranches but not for {', '.join(missing)}; "
                         "give it for every tranche of a run or for none (then list order is used)")
    orders = [e["order"] for e in entries]
    if all(isinstance(o, (int, float)) for o in orders):
        keys = [float(o) for o in orders]
    elif all(isinstance(o, str) for o in orders):
        parsed = pd.to_datetime(pd.Series(orders), errors="coerce")
        if parsed.isna().any():
            bad = orders[int(np.flatnonzero(parsed.isna().to_numpy())[0])]
            raise InputError(f"{where}: 'order' {bad!r} is not a number or a date; expected numbers or dates")
        keys = list(parsed)
    else:
        raise InputError(f"{where}: 'order' mixes numbers and text ({', '.join(map(repr, orders))}); "
                         "expected all numbers or all dates")
    if len(set(keys)) < len(keys):
        dup = next(o for o, k_ in zip(orders, keys) if keys.count(k_) > 1)
        raise InputError(f"{where}: two tranches have the same order {dup!r}")
    return keys


def load_tranches(es: EmbeddingSet, entries: list | None = None) -> dict[str, list[Checkpoint]]:
    """The ``tranches`` of ``es`` grouped by run (default run ``"run"``), each run sorted by order."""
    entries = entries if entries is not None else es.fields.get("tranches")
    if not entries:
        raise InputError("manifest field 'tranches': expected a list of {name, vectors, order?, run?} checkpoints")
    by_run: dict[str, list[dict]] = {}
    for i, e in enumerate(entries, 1):
        by_run.setdefault(str(e.get("run", "run")), []).append(dict(e, _item=i))
    out = {}
    for run, items in by_run.items():
        names = [str(e["name"]) for e in items]
        dup = {nm for nm in names if names.count(nm) > 1}
        if dup:
            raise InputError(f"manifest field 'tranches' (run {run!r}): duplicate tranche name(s) "
                             f"{', '.join(sorted(dup))}")
        keys = _sort_orders(items, run)
        ordered = [e for _, e in sorted(zip(keys, items), key=lambda t: t[0])]
        out[run] = [Checkpoint(str(e["name"]), e.get("order", j), run, Path(e["vectors"]).name,
                               load_matched(e["vectors"], es,
                                            label=f"tranches, item {e['_item']} ({e['name']}): {Path(e['vectors']).name}"))
                    for j, e in enumerate(ordered)]
    if not any(len(v) >= 2 for v in out.values()) and not _shared_tranche_names(out):
        raise InputError("manifest field 'tranches': need at least two checkpoints of one run (to follow training) "
                         "or the same tranche name in two runs (to compare runs)")
    return out


def _shared_tranche_names(runs: dict[str, list[Checkpoint]]) -> list[str]:
    """Tranche names present in at least two runs, in training order."""
    count: dict[str, int] = {}
    first_step: dict[str, int] = {}
    for cps in runs.values():
        for j, cp in enumerate(cps):
            count[cp.name] = count.get(cp.name, 0) + 1
            first_step[cp.name] = min(first_step.get(cp.name, j), j)
    return sorted([nm for nm, c in count.items() if c >= 2], key=lambda nm: first_step[nm])


def _rows_of(cp: Checkpoint, n_ref: int) -> np.ndarray:
    pos = np.full(n_ref, -1, dtype=np.int64)
    pos[cp.matched.index] = np.arange(len(cp.matched.index))
    return pos


def compare_spaces(A, B, k: int = K_DEFAULT, *, device="auto") -> tuple[np.ndarray, np.ndarray, float]:
    """Per-entity k-NN overlap and aligned cosine of ``B`` rotated onto ``A``, and their similarity correlation."""
    dev = resolve_device(device)
    ov = neighbour_sets_overlap(knn(A, k, device=dev, desc=None)[0], knn(B, k, device=dev, desc=None)[0])
    fit = procrustes_align(A, B)
    return ov, row_cosines(fit.target, fit.aligned), similarity_correlation(A, B, device=dev)


@dataclass(frozen=True)
class TrainingResult:
    """Everything the training-time chapter shows."""

    k: int
    runs: list
    coverage: pd.DataFrame     # one row per checkpoint
    transitions: pd.DataFrame  # consecutive tranches, one row per (run, step)
    to_final: pd.DataFrame     # each tranche vs its run's final tranche
    cross_run: pd.DataFrame    # the runs compared with each other at each shared tranche name
    movement: pd.DataFrame     # long: run, row, cohort, cohort_step, tranche, step, movement, overlap
    cohorts: pd.DataFrame      # cohort x transition: n, mean movement, CI
    values: dict
    metrics: dict
    info: dict = field(default_factory=dict)


def measure_training_stability(es: EmbeddingSet, runs: dict[str, list[Checkpoint]] | None = None, k: int = K_DEFAULT,
                               *, n_boot: int = 200, level: float = DEFAULT_LEVEL, seed: int = 0,
                               device="auto") -> TrainingResult:
    r"""Stability over training time from the checkpoints ("tranches") of one or more runs.

    For each run, with its checkpoints in training order: k-NN overlap, aligned cosine and the
    similarity correlation between consecutive checkpoints (on the entities present in both) and
    between each checkpoint and the run's final one; the movement
    :math:`1 - \cos(R^{*\top}\tilde v^{t-1}_i, \tilde v^t_i)` of each entity between consecutive
    checkpoints after Procrustes alignment (mean-centred), grouped by its cohort, the checkpoint
    in which it first appears (seed 003 §5). Runs that share a tranche name are also compared with
    each other at that tranche (seed 003 §3) with :func:`measure_run_stability`.
    """
    runs = runs if runs is not None else load_tranches(es)
    dev = resolve_device(device)
    n_ref = es.n
    cov_rows, trans_rows, final_rows, moves = [], [], [], []
    for run, cps in runs.items():
        first_seen = np.full(n_ref, -1)
        for j, cp in enumerate(cps):
            new = cp.matched.index[first_seen[cp.matched.index] < 0]
            first_seen[new] = j
            cov_rows.append({"run": run, "tranche": cp.name, "order": str(cp.order), "file": cp.file,
                             "entities": len(cp.matched.index), "new": len(new),
                             "not yet present": len(cp.matched.missing), "extra ids": len(cp.matched.extra),
                             "extra ids (first)": _examples(cp.matched.extra)})
        pos = [_rows_of(cp, n_ref) for cp in cps]
        final = len(cps) - 1
        for j in range(1, len(cps)):
            common = np.flatnonzero((pos[j - 1] >= 0) & (pos[j] >= 0))
            row = {"run": run, "from": cps[j - 1].name, "to": cps[j].name, "step": j, "n": len(common)}
            if len(common) < k + 2:
                trans_rows.append(row)
                continue
            A, B = cps[j].matched.vectors[pos[j][common]], cps[j - 1].matched.vectors[pos[j - 1][common]]
            ov, cs, corr = compare_spaces(A, B, k, device=dev)
            trans_rows.append(dict(row, **{"k-NN overlap": float(ov.mean()), "aligned cosine": float(cs.mean()),
                                           "movement": float((1 - cs).mean()), "similarity correlation": corr}))
            moves.append(pd.DataFrame({"run": run, "row": common, "cohort": [cps[c].name for c in first_seen[common]],
                                       "cohort_step": first_seen[common], "tranche": cps[j].name, "step": j,
                                       "movement": 1.0 - cs, "overlap": ov}))
        for j in range(len(cps) - 1):
            common = np.flatnonzero((pos[j] >= 0) & (pos[final] >= 0))
            row = {"run": run, "tranche": cps[j].name, "step": j, "final": cps[final].name, "n": len(common)}
            if len(common) >= k + 2:
                A, B = cps[final].matched.vectors[pos[final][common]], cps[j].matched.vectors[pos[j][common]]
                ov, cs, corr = compare_spaces(A, B, k, device=dev)
                row.update({"k-NN overlap": float(ov.mean()), "aligned cosine": float(cs.mean()),
                            "similarity correlation": corr})
                if j == 0:
                    moves.append(pd.DataFrame({"run": run, "row": common, "cohort": None, "cohort_step": -1,
                                               "tranche": "first→final", "step": -1, "movement": 1.0 - cs,
                                               "overlap": ov}))
            final_rows.append(row)
    cross_rows = []
    for name in _shared_tranche_names(runs):
        members = [(run, cp) for run, cps in runs.items() for cp in cps if cp.name == name]
        present = np.ones(n_ref, dtype=bool)
        for _, cp in members:
            present &= _rows_of(cp, n_ref) >= 0
        common = np.flatnonzero(present)
        row = {"tranche": name, "step": next(j for cps in runs.values() for j, cp in enumerate(cps) if cp.name == name),
               "runs": len(members), "n": len(common)}
        if len(common) >= k + 2:
            vecs = [cp.matched.vectors[_rows_of(cp, n_ref)[common]] for _, cp in members]
            r = measure_run_stability(vecs, k, labels=[run for run, _ in members], n_boot=n_boot, level=level,
                                      seed=seed, device=dev)
            m = r.metrics
            row.update({"k-NN overlap": m["knn_overlap"].value, "ci_low": m["knn_overlap"].ci_low,
                        "ci_high": m["knn_overlap"].ci_high, "aligned cosine": m["procrustes_aligned_cosine"].value,
                        "similarity correlation": m["pairwise_similarity_correlation"].value,
                        "verdict": m["pairwise_similarity_correlation"].verdict, "_metric": m["knn_overlap"]})
        cross_rows.append(row)
    movement = (pd.concat(moves, ignore_index=True) if moves else
                pd.DataFrame(columns=["run", "row", "cohort", "cohort_step", "tranche", "step", "movement", "overlap"]))
    cohorts = cohort_table(movement, level=level, seed=seed)
    cross = pd.DataFrame(cross_rows)
    values, metrics = _training_metrics(runs, movement, cross, level, seed)
    return TrainingResult(k=k, runs=list(runs), coverage=pd.DataFrame(cov_rows), transitions=pd.DataFrame(trans_rows),
                          to_final=pd.DataFrame(final_rows),
                          cross_run=cross.drop(columns=["_metric"], errors="ignore"), movement=movement,
                          cohorts=cohorts, values=values, metrics=metrics,
                          info=dict(level=level, device=str(dev), n_reference=n_ref))


def cohort_table(movement: pd.DataFrame, *, level: float = DEFAULT_LEVEL, seed: int = 0) -> pd.DataFrame:
    """Mean movement per (cohort, transition), pooled over runs, with a CI (see :func:`mean_ci`)."""
    mv = movement[movement["step"] >= 1]
    rows = []
    for (cs, step), grp in mv.groupby(["cohort_step", "step"], sort=True):
        lo, hi, _ = mean_ci(grp["movement"].to_numpy(), level=level, seed=seed)
        rows.append({"cohort": grp["cohort"].iloc[0], "cohort_step": int(cs), "tranche": grp["tranche"].iloc[0],
                     "step": int(step), "n": len(grp), "mean movement": float(grp["movement"].mean()),
                     "ci_low": lo, "ci_high": hi, "median movement": float(grp["movement"].median()),
                     "k-NN overlap": float(grp["overlap"].mean())})
    return pd.DataFrame(rows)


def _training_metrics(runs, movement: pd.DataFrame, cross: pd.DataFrame, level: float, seed: int):
    values, metrics = {}, {}

    def add(name, x, extra_ci=None):
        label, direction, formula, ref = TRAINING_METRICS[name]
        if extra_ci is not None:
            m = extra_ci
            metrics[name] = Metric(name=name, value=m.value, direction=direction, reference=ref, ci_low=m.ci_low,
                                   ci_high=m.ci_high, label=label, formula=formula, ci_method=m.ci_method)
        else:
            lo, hi, how = mean_ci(x, level=level, seed=seed)
            metrics[name] = Metric(name=name, value=float(np.mean(x)), direction=direction, reference=ref,
                                   ci_low=lo if np.isfinite(lo) else None, ci_high=hi if np.isfinite(hi) else None,
                                   label=label, formula=formula, ci_method=how)
        values[name] = metrics[name].value

    if len(movement):
        last = movement[movement["step"] >= 1]
        last_step = last.groupby("run")["step"].transform("max")
        last = last[last["step"] == last_step]
        if len(last):
            add("tranche_knn_overlap_last", last["overlap"].to_numpy())
            add("tranche_movement_last", last["movement"].to_numpy())
        ff = movement[movement["step"] == -1]
        if len(ff):
            add("tranche_knn_overlap_first_to_final", ff["overlap"].to_numpy())
    if len(cross) and "_metric" in cross and cross["_metric"].notna().any():
        row = cross[cross["_metric"].notna()].sort_values("step").iloc[-1]
        add("tranche_cross_run_knn_overlap_final", None, extra_ci=row["_metric"])
    return values, metrics


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _p(p: float) -> str:
    """``= 0.012`` / ``< 1e-300`` (a p-value that underflowed to 0 is not 0)."""
    return "< 1e-300" if p < 1e-300 else f"= {p:.2g}"


def _excludes(m: Metric) -> bool:
    return m.ci_low is not None and m.ci_high is not None and not m.ci_low <= m.value <= m.ci_high


_BAND_TEXT = {"healthy": "above 0.95: excellent stability, the choice of seed has minimal impact",
              "concerning": "between 0.85 and 0.95: acceptable for most applications; consider averaging across seeds",
              "problematic": "below 0.85: problematic; investigate the sources of instability"}


def coverage_text(inputs: RunInputs) -> str:
    """One paragraph on how the runs' ids matched the main set (missing and extra ids)."""
    cov = inputs.coverage.iloc[1:]
    issues = cov[(cov["missing"] > 0) | (cov["extra"] > 0)]
    n_all = len(inputs.ids) + len(inputs.excluded)
    if not len(issues):
        return (f"Every run holds all {n_all:,} entities of the main set (matched by id), so all of them are "
                "compared.")
    parts = []
    for _, r in issues.iterrows():
        bits = []
        if r["missing"]:
            bits.append(f"lacks {r['missing']:,} of the main set's ids (e.g. {escape(r['missing ids (first)'])})")
        if r["extra"]:
            bits.append(f"has {r['extra']:,} ids the main set does not (e.g. {escape(r['extra ids (first)'])})")
        parts.append(f"**{escape(r['run'])}** " + " and ".join(bits))
    return ("Rows are matched by id. " + "; ".join(parts) + f". Stability is computed on the {len(inputs.ids):,} "
            f"entities present in every run; {len(inputs.excluded):,} main-set entities missing from some run "
            "are left out (listed in the coverage table), and extra ids have no counterpart to compare with.")


def narrative(r: RunStabilityResult, inputs: RunInputs | None = None, subsets: SubsetStability | None = None,
              freq: dict | None = None, ids=None) -> str:
    """Markdown paragraphs that say what this set's stability numbers mean."""
    m, v = r.metrics, r.values
    R, P = len(r.labels), len(r.pair_index)
    corr = m["pairwise_similarity_correlation"]
    sp = r.info["spread"]
    parts = []
    head = {"healthy": "**The model is stable across training runs.**",
            "concerning": "**The model is moderately stable across training runs.**",
            "problematic": "**The model is unstable across training runs.**"}.get(corr.verdict, "")
    parts.append(
        f"{head} The pairwise similarity correlation, the correlation between the similarity of every pair of "
        f"entities in one run and in another, is {corr.text('.3f')} on average over the {P} pair{'s' if P > 1 else ''} of "
        f"{R} runs (the main set and {R - 1} other{'s' if R > 2 else ''}); the seed's stability guideline reads "
        f"this as {_BAND_TEXT.get(corr.verdict, 'no band')}. This metric carries the chapter's verdict "
        "(seed 000 §217.2.2); the other metrics have no published bands and are read against their chance level "
        "and their ceiling of 1." + (f" Across pairs it ranges from {sp['similarity correlation']['min']:.3f} to "
                                     f"{sp['similarity correlation']['max']:.3f}." if P > 1 else ""))
    ov = m["knn_overlap"]
    ratio = v["knn_overlap"] / r.chance if r.chance > 0 else float("inf")
    local = ("so local neighbourhoods are essentially reproducible" if v["knn_overlap"] >= 0.9 else
             "so most of each neighbour list survives a retrain" if v["knn_overlap"] >= 0.6 else
             "so a large part of each neighbour list changes when the model is retrained" if v["knn_overlap"] >= 0.3
             else "so neighbour lists are mostly different from one run to the next")
    parts.append(
        f"Locally, an entity keeps on average {v['knn_overlap']:.1%} of its {r.k} nearest neighbours from one run to "
        f"another: k-NN overlap {ov.text('.3f')}, {ratio:,.0f} times the {r.chance:.4f} (= k/(n − 1)) expected if the runs "
        f"were unrelated, {local}. "
        + (f"Pairs of runs range from {sp['k-NN overlap']['min']:.3f} to {sp['k-NN overlap']['max']:.3f}. "
           if P > 1 else "")
        + f"{(r.overlap < 0.5).mean():.1%} of the entities keep fewer than half of their neighbours.")
    if corr.verdict == "healthy" and v["knn_overlap"] < 0.6:
        parts.append("Note the contrast: the global geometry is reproducible (high correlation), but the top of each "
                     "neighbour list is not. Applications that read only the nearest few neighbours (recommendations, "
                     "'similar items') will see their lists change between retrains even though the space as a whole "
                     "is stable.")
    parts.append(
        f"After Procrustes alignment (mean-centring and the best rotation of one run onto the other), an entity's "
        f"vector has cosine {m['procrustes_aligned_cosine'].text('.3f')} with its counterpart on average, and the residual "
        f"disparity is {m['procrustes_disparity'].text('.4f')} (Procrustes distance "
        f"$d_P$ = {math.sqrt(max(v['procrustes_disparity'], 0)):.3f} on a scale from 0, identical up to rotation, "
        "to √2)." + (" The disparity's interval lies above the value: the fitted rotation has d(d − 1)/2 free "
                     "parameters and adapts to the sample, so the in-sample disparity is biased low; the basic "
                     "bootstrap interval corrects for that bias." if _excludes(m["procrustes_disparity"]) else ""))
    if ids is not None and len(r.overlap):
        worst = np.lexsort((r.aligned_cosine, r.overlap))[:3]
        parts.append("The least stable entities are " + ", ".join(
            f"{escape(ids[i])} (overlap {r.overlap[i]:.2f})" for i in worst) + " (table below).")
    if freq is not None:
        direction = ("more frequent entities are more stable, as seed 003 expects" if freq["rho"] > 0.1 else
                     "more frequent entities are less stable" if freq["rho"] < -0.1 else
                     "stability hardly depends on frequency")
        parts.append(f"Across entities, k-NN overlap and `{escape(freq['column'])}` have Spearman ρ = {freq['rho']:.2f} "
                     f"(p {_p(freq['p'])}, n = {freq['n']:,}): {direction}.")
    if subsets is not None and len(subsets.table):
        parts.append(subset_text(subsets))
        worst = subsets.table.loc[subsets.table["k-NN overlap"].idxmin()]
        if corr.verdict == "healthy" and worst["k-NN overlap"] < 0.5:
            parts.append(f"The healthy verdict is a whole-set average: entities in “{escape(worst['subset'])}” "
                         f"({escape(worst['grouping'])}, n = {worst['n']:,}) keep only {worst['k-NN overlap']:.1%} of "
                         "their neighbours between runs, so their nearest-neighbour lists are largely reshuffled by "
                         "a retrain.")
    if inputs is not None:
        parts.append(coverage_text(inputs))
    if corr.verdict in ("concerning", "problematic"):
        parts.append("Remedies the seed lists (§217.2.2): deterministic algorithms where available, averaging "
                     "embeddings across several seeds, more training data or epochs to reduce optimisation "
                     "variance, and consensus approaches that keep the stable core of the space.")
    return "\n\n".join(parts)


def notes_text(s: SubsetStability) -> str:
    """The subset coverage notes as markdown (user strings escaped)."""
    return " ".join(escape(n) + "." for n in s.notes)


def subset_text(s: SubsetStability) -> str:
    """What the subset comparison shows, one sentence per grouping."""
    out = []
    for g, t in s.table.groupby("grouping", sort=False):
        hi, lo = t.loc[t["k-NN overlap"].idxmax()], t.loc[t["k-NN overlap"].idxmin()]
        tests = s.tests[s.tests["grouping"] == g] if len(s.tests) else s.tests
        sig = tests[tests["differs"] & tests["comparison"].str.contains("Mann")] if len(tests) else tests
        kw = tests[tests["comparison"].str.contains("Kruskal")] if len(tests) else tests
        text = (f"By {escape(g)}, k-NN overlap ranges from {lo['k-NN overlap']:.3f} ({escape(lo['subset'])}, "
                f"n = {lo['n']:,}) to {hi['k-NN overlap']:.3f} ({escape(hi['subset'])}, n = {hi['n']:,})")
        if len(kw):
            text += f"; Kruskal–Wallis p {_p(kw['p'].iloc[0])}"
        if len(tests):
            text += (f"; {len(sig)} of {int(tests['comparison'].str.contains('Mann').sum())} pairwise comparisons "
                     "differ after Holm correction." if len(sig) else "; no pairwise difference survives Holm "
                     "correction.")
        else:
            text += "."
        out.append(text)
    return " ".join(out)


def training_narrative(r: TrainingResult) -> str:
    """Markdown paragraphs on the training-time trajectory and the cohorts."""
    parts = []
    t = r.transitions
    n_runs = len(r.runs)
    n_cp = len(r.coverage)
    parts.append(f"{n_cp} checkpoints of {n_runs} run{'s' if n_runs > 1 else ''} "
                 f"({', '.join(escape(x) for x in r.runs)}) are compared, with neighbourhoods of k = {r.k}.")
    if "k-NN overlap" in t and t["k-NN overlap"].notna().any() and "tranche_movement_last" in r.metrics:
        tt = t.dropna(subset=["k-NN overlap"])
        first, last = tt.groupby("run").head(1), tt.groupby("run").tail(1)
        rising = (last["k-NN overlap"].mean() - first["k-NN overlap"].mean()) if len(tt) > len(first) else 0.0
        trend = ("rises" if rising > 0.02 else "falls" if rising < -0.02 else "stays about level")
        parts.append(
            f"Between consecutive checkpoints the k-NN overlap {trend} from {first['k-NN overlap'].mean():.3f} "
            f"(first transition) to {last['k-NN overlap'].mean():.3f} (last)"
            + (", averaged over runs" if n_runs > 1 else "")
            + (": the neighbourhoods consolidate as training proceeds." if rising > 0.02 else
               ": neighbourhoods keep changing late in training." if rising < -0.02 else ".")
            + f" At the last transition entities move by 1 − cos = {r.metrics['tranche_movement_last'].text('.4f')} "
              f"on average after alignment and keep {r.values['tranche_knn_overlap_last']:.1%} of their neighbours"
            + ("; training has largely settled." if r.values["tranche_knn_overlap_last"] >= 0.8 else
               "; the space is still moving at the end of training, so a later checkpoint could give different "
               "neighbours." if r.values["tranche_knn_overlap_last"] < 0.5 else "."))
    if "tranche_knn_overlap_first_to_final" in r.values:
        parts.append(f"The first checkpoint shares {r.values['tranche_knn_overlap_first_to_final']:.1%} of each "
                     "entity's neighbours with the final one (entities present in both).")
    c = r.cross_run
    if len(c) and "k-NN overlap" in c and c["k-NN overlap"].notna().any():
        cc = c.dropna(subset=["k-NN overlap"])
        parts.append(
            f"Across runs (seed 003 §3), the k-NN overlap between runs at the same tranche goes from "
            f"{cc['k-NN overlap'].iloc[0]:.3f} ({escape(cc['tranche'].iloc[0])}) to {cc['k-NN overlap'].iloc[-1]:.3f} "
            f"({escape(cc['tranche'].iloc[-1])})"
            + (": independent runs converge to more similar neighbourhoods as training proceeds."
               if cc["k-NN overlap"].iloc[-1] > cc["k-NN overlap"].iloc[0] + 0.02 else
               ": runs do not become more alike with training." if len(cc) > 1 else "."))
    co = r.cohorts
    if len(co) and co["cohort_step"].nunique() > 1:
        last_step = co["step"].max()
        at = co[co["step"] == last_step].sort_values("cohort_step")
        if len(at) > 1:
            early, late = at.iloc[0], at.iloc[-1]
            ratio = late["mean movement"] / early["mean movement"] if early["mean movement"] > 0 else float("inf")
            verdict_txt = ("Entities introduced early have become anchors: they move much less than later arrivals, "
                           "as the age-of-acquisition hypothesis of seed 003 §5 predicts." if ratio > 1.5 else
                           "Early and late cohorts move by similar amounts: no anchoring of early entities is visible."
                           if ratio > 0.67 else "Later cohorts move less than early ones.")
            parts.append(
                f"At the last transition (to {escape(late['tranche'])}), entities first seen in "
                f"{escape(early['cohort'])} move by {early['mean movement']:.4f} on average (n = {early['n']:,}), "
                f"those first seen in {escape(late['cohort'])} by {late['mean movement']:.4f} (n = {late['n']:,}). "
                + verdict_txt)
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Display tables
# ---------------------------------------------------------------------------------------------

def pair_display_table(r: RunStabilityResult) -> pd.DataFrame:
    """The per-pair metrics as shown in the report."""
    return r.pairs


def verdict_callout(r: RunStabilityResult) -> dict:
    """Arguments for :func:`embeval_report.display.callout`: the verdict and the band it came from."""
    m = r.metrics["pairwise_similarity_correlation"]
    kind = {"healthy": "success", "concerning": "warning", "problematic": "danger"}.get(m.verdict, "note")
    text = (f"Pairwise similarity correlation {m.text('.3f')}: **{m.verdict or 'no verdict'}** "
            f"({THRESHOLDS['pairwise_similarity_correlation'].text}; "
            f"{THRESHOLDS['pairwise_similarity_correlation'].table}). k-NN overlap {r.values['knn_overlap']:.3f} "
            f"against {r.chance:.4f} by chance.")
    return {"kind": kind, "title": "Stability verdict", "text": text}


def _ci_text(lo, hi, fmt: str = ".3f") -> str:
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return "—"
    return f"{format(lo, fmt)} – {format(hi, fmt)}"


def transitions_display_table(t: TrainingResult) -> pd.DataFrame:
    """Consecutive-tranche comparisons as shown in the report."""
    return t.transitions.drop(columns=["step"], errors="ignore")


def to_final_display_table(t: TrainingResult) -> pd.DataFrame:
    """Each tranche against its run's final tranche, as shown in the report."""
    return t.to_final.drop(columns=["step"], errors="ignore")


def cross_run_display_table(t: TrainingResult) -> pd.DataFrame:
    """Runs compared with each other at each shared tranche, as shown in the report."""
    c = t.cross_run
    if not len(c) or "k-NN overlap" not in c:
        return c
    out = c[["tranche", "runs", "n", "k-NN overlap"]].copy()
    out["95 % CI"] = [_ci_text(lo, hi) for lo, hi in zip(c["ci_low"], c["ci_high"])]
    for col in ("aligned cosine", "similarity correlation", "verdict"):
        out[col] = c[col]
    return out


def cohort_display_table(t: TrainingResult) -> pd.DataFrame:
    """Cohort movement as shown in the report."""
    co = t.cohorts
    if not len(co):
        return co
    return pd.DataFrame({"cohort (first seen)": co["cohort"], "movement into": co["tranche"], "n": co["n"],
                         "mean 1 − cos": co["mean movement"],
                         "95 % CI": [_ci_text(lo, hi, ".4f") for lo, hi in zip(co["ci_low"], co["ci_high"])],
                         "median 1 − cos": co["median movement"], "k-NN overlap": co["k-NN overlap"]})


def subset_tests_table(s: SubsetStability) -> pd.DataFrame:
    """The subset tests as shown in the report."""
    if not len(s.tests):
        return s.tests
    t = s.tests.copy()
    t["differs"] = np.where(t["differs"], "yes", "no")
    return t


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def distribution_figure(r: RunStabilityResult) -> plt.Figure:
    """Histograms of per-entity k-NN overlap (with chance and mean) and aligned cosine."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.6))
    edges = np.linspace(0, 1, min(r.k, 40) * 2 + 2) if r.k <= 40 else 40
    a.hist(r.overlap, bins=edges, color=PALETTE["data"], alpha=0.8)
    a.axvline(r.values["knn_overlap"], color=PALETTE["data"], ls="--", lw=1.3,
              label=f"mean {r.values['knn_overlap']:.3f}")
    a.axvline(r.chance, color=PALETTE["reference"], ls=":", lw=1.6, label=f"chance k/(n−1) = {r.chance:.4f}")
    a.set(xlabel=f"k-NN overlap (share of the {r.k} neighbours kept), mean over run pairs", ylabel="Entities",
          xlim=(-0.02, 1.02), title="Neighbourhood overlap per entity")
    a.legend(loc="upper left", fontsize=8.5)
    lo = float(min(np.quantile(r.aligned_cosine, 0.001), 0.9))
    b.hist(r.aligned_cosine, bins=60, range=(lo, 1.0), color=PALETTE["accent"], alpha=0.8)
    b.axvline(r.values["procrustes_aligned_cosine"], color=PALETTE["accent"], ls="--", lw=1.3,
              label=f"mean {r.values['procrustes_aligned_cosine']:.3f}")
    b.set(xlabel="Cosine with the same entity in the other run, after alignment", ylabel="Entities",
          title="Aligned cosine per entity")
    b.legend(loc="upper left", fontsize=8.5)
    return fig


def pair_heatmap(r: RunStabilityResult) -> plt.Figure:
    """Run x run matrices of k-NN overlap and pairwise similarity correlation."""
    R = len(r.labels)
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 0.55 * R + 2.4))
    short = [lab if len(lab) <= 18 else lab[:16] + "…" for lab in r.labels]
    for ax, col, title in zip(axes, ("k-NN overlap", "similarity correlation"),
                              ("k-NN overlap", "Pairwise similarity correlation")):
        M = np.full((R, R), np.nan)
        for (a, b), val in zip(r.pair_index, r.pairs[col]):
            M[a, b] = M[b, a] = val
        vals = r.pairs[col].to_numpy()
        vmin = float(min(vals.min(), 0.8 if col != "k-NN overlap" else vals.min()))
        im = ax.imshow(M, cmap="viridis", vmin=vmin, vmax=1.0)
        for i in range(R):
            for j in range(R):
                if i != j:
                    ax.text(j, i, f"{M[i, j]:.3f}", ha="center", va="center", fontsize=8,
                            color="white" if M[i, j] < vmin + 0.6 * (1 - vmin) else "black")
        ax.set_xticks(range(R), short, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(R), short, fontsize=8)
        ax.grid(False)
        ax.set_title(title)
        fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def subset_figure(r: RunStabilityResult, groupings: list[Grouping], max_panels: int = 3) -> plt.Figure:
    """Box plots of per-entity k-NN overlap within each subset, one panel per grouping."""
    gs = [g for g in groupings if any(len(v) for v in g.subsets.values())][:max_panels]
    fig, axes = plt.subplots(1, max(1, len(gs)), figsize=(WIDTH, 3.8), squeeze=False)
    for ax, g in zip(axes[0], gs):
        names = [nm for nm, idx in g.subsets.items() if len(idx)]
        data = [r.overlap[g.subsets[nm]] for nm in names]
        ax.boxplot(data, showmeans=True, widths=0.6, medianprops={"color": PALETTE["reference"]},
                   meanprops={"marker": "D", "markerfacecolor": PALETTE["data"], "markeredgecolor": "white"})
        ax.set_xticks(range(1, len(names) + 1),
                      [(nm if len(nm) <= 18 else nm[:16] + "…").replace(": ", "\n") + f"\n(n={len(d):,})"
                       for nm, d in zip(names, data)], fontsize=7.5 if len(names) > 3 else 8)
        ax.axhline(r.chance, color=PALETTE["muted"], ls=":", lw=1)
        ax.set(ylabel="k-NN overlap per entity", ylim=(-0.03, 1.03), title=f"By {g.name}")
    return fig


def trajectory_figure(t: TrainingResult) -> plt.Figure:
    """k-NN overlap and aligned cosine along training: consecutive tranches, vs final, across runs."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    colors = [PALETTE["data"], PALETTE["accent"], "#7b4ea3", "#2b8a8a", PALETTE["reference"]]
    names_by_step: dict[int, str] = {}
    for i, run in enumerate(t.runs):
        c = colors[i % len(colors)]
        tr = t.transitions[t.transitions["run"] == run].dropna(subset=["k-NN overlap"]) \
            if "k-NN overlap" in t.transitions else pd.DataFrame()
        tf = t.to_final[t.to_final["run"] == run].dropna(subset=["k-NN overlap"]) \
            if "k-NN overlap" in t.to_final else pd.DataFrame()
        suffix = f" ({run})" if len(t.runs) > 1 else ""
        if len(tr):
            a.plot(tr["step"], tr["k-NN overlap"], "o-", color=c, label="consecutive tranches" + suffix)
            b.plot(tr["step"], tr["aligned cosine"], "o-", color=c, label="consecutive tranches" + suffix)
            names_by_step.update(dict(zip(tr["step"], tr["to"])))
        if len(tf):
            a.plot(tf["step"], tf["k-NN overlap"], "s--", color=c, alpha=0.75, label="vs final tranche" + suffix)
            b.plot(tf["step"], tf["aligned cosine"], "s--", color=c, alpha=0.75, label="vs final tranche" + suffix)
            names_by_step.update(dict(zip(tf["step"], tf["tranche"])))
    cr = t.cross_run.dropna(subset=["k-NN overlap"]) if "k-NN overlap" in t.cross_run else pd.DataFrame()
    if len(cr):
        a.errorbar(cr["step"], cr["k-NN overlap"],
                   yerr=[(cr["k-NN overlap"] - cr["ci_low"]).fillna(0), (cr["ci_high"] - cr["k-NN overlap"]).fillna(0)],
                   fmt="^-", color="#333", capsize=3, label="across runs, same tranche")
        b.plot(cr["step"], cr["aligned cosine"], "^-", color="#333", label="across runs, same tranche")
        names_by_step.update(dict(zip(cr["step"], cr["tranche"])))
    steps = sorted(names_by_step)
    for ax, ylabel in ((a, f"k-NN overlap (k = {t.k})"), (b, "Aligned cosine")):
        ax.set_xticks(steps, [names_by_step[s] if len(str(names_by_step[s])) <= 12 else str(names_by_step[s])[:11] + "…"
                              for s in steps], rotation=20, fontsize=8)
        ax.set(xlabel="Tranche (consecutive: the later of the two)", ylabel=ylabel)
    a.set(ylim=(0, 1.02), title="Neighbourhood stability along training")
    b.set(title="Aligned cosine along training")
    a.legend(fontsize=7.5, loc="lower right")
    return fig


def cohort_figure(t: TrainingResult) -> plt.Figure:
    """Mean movement 1 − cos between consecutive tranches, one line per cohort (first tranche seen)."""
    co = t.cohorts
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    colors = plt.get_cmap("viridis")(np.linspace(0.05, 0.85, max(1, co["cohort_step"].nunique() if len(co) else 1)))
    for c, (cs, grp) in zip(colors, co.groupby("cohort_step", sort=True) if len(co) else []):
        grp = grp.sort_values("step")
        a.errorbar(grp["step"], grp["mean movement"],
                   yerr=[(grp["mean movement"] - grp["ci_low"]).fillna(0), (grp["ci_high"] - grp["mean movement"]).fillna(0)],
                   fmt="o-", color=c, capsize=3, label=f"first seen: {grp['cohort'].iloc[0]}")
    if len(co):
        steps = sorted(co["step"].unique())
        names = dict(zip(co["step"], co["tranche"]))
        a.set_xticks(steps, [str(names[s]) for s in steps], rotation=20, fontsize=8)
        a.legend(fontsize=8)
        a.set_yscale("log") if (co["mean movement"] > 0).all() and co["mean movement"].max() / max(
            co["mean movement"].min(), 1e-12) > 20 else None
    a.set(xlabel="Tranche (movement from the previous one)", ylabel="Mean movement 1 − cos",
          title="Cohort movement along training")
    mv = t.movement[t.movement["step"] >= 1]
    if len(mv):
        last = mv[mv["step"] == mv["step"].max()]
        groups = [(nm, g["movement"].to_numpy()) for nm, g in last.groupby("cohort_step", sort=True)]
        labels = [str(last[last["cohort_step"] == cs]["cohort"].iloc[0]) for cs, _ in groups]
        b.boxplot([g for _, g in groups], showfliers=False, widths=0.6,
                  medianprops={"color": PALETTE["reference"]})
        b.set_xticks(range(1, len(groups) + 1), [f"{lab}\n(n={len(g):,})" for lab, (_, g) in zip(labels, groups)],
                     fontsize=8)
        b.set(xlabel="Cohort (tranche first seen)", ylabel="Movement 1 − cos",
              title=f"Movement into {last['tranche'].iloc[0]}, by cohort")
    return fig


# ---------------------------------------------------------------------------------------------
# Demo side data
# ---------------------------------------------------------------------------------------------

def _write_table(path: Path, ids, X, dtype=np.float32) -> None:
    df = pd.DataFrame(np.asarray(X, dtype), columns=[f"d{j}" for j in range(X.shape[1])])
    df.insert(0, "id", list(ids))
    df.to_parquet(path, index=False)


def demo_side_data(folder, seed: int = 0) -> dict:
    """Write the demo's stability side data into ``folder``; return the manifest entries (paths relative).

    Generator (a documented variant of :func:`embeval_report.demo.streaming_embeddings`, replayed
    with the same seed): each **run** r re-trains the item vectors with run-specific noise whose
    scale shrinks with the item's view count, :math:`\\sigma_i = 0.1 / \\sqrt{1 + c_i/5}` per
    component (popular items are pinned down by many views, niche items barely), re-normalises
    them, recomputes every user as the view-weighted mean of the same views, and applies a random
    rotation (runs are identified only up to rotation). Runs 1–3 are ``.npy`` in the manifest's id
    order; run 4 is a parquet table with an ``id`` column that lacks 8 retired items and adds 3
    new ones, so the report has missing and extra ids to show.

    **Tranches**: two runs (``A`` ends in the main set, ``B`` in run 1) with checkpoints
    ``tranche 1..3`` before the final one. Items launch in waves by popularity (the 60 % most
    viewed in tranche 1, the next 25 % in tranche 2, the rest in tranche 3); a checkpoint holds
    the final vectors plus noise that shrinks with the time since the item arrived, users are
    recomputed from views of the items available so far (a user without such views is absent).
    Checkpoints are stored as float16 parquet tables to keep the demo small.

    **Vocabularies**: ``popular items`` (the 100 most viewed) and ``niche items`` (items with no
    views at all).
    """
    from scipy.stats import ortho_group

    from .demo import streaming_embeddings, streaming_world, unit_vectors

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vectors, meta = streaming_embeddings(seed=seed)
    world = streaming_world(seed=seed)
    items, counts = world.items, world.counts
    n_users = counts.shape[0]
    ids = meta["id"].to_numpy()
    item_ids = ids[n_users:]
    views = counts.sum(0)
    dim = items.shape[1]
    rng = np.random.default_rng([seed, 70])
    sigma = 0.1 / np.sqrt(1.0 + views / 5.0)

    def run_vectors(noise_items):
        its = unit_vectors(items + noise_items)
        return its, world.user_vectors(counts, its)

    (folder / "runs").mkdir(exist_ok=True)
    run_paths, run_finals = [], []
    for r in range(1, 5):
        its, us = run_vectors(sigma[:, None] * rng.standard_normal(items.shape))
        Q = ortho_group.rvs(dim, random_state=rng.integers(2**31))
        X = (np.vstack([us, its]) @ Q).astype(np.float32)
        run_finals.append((its, Q))
        if r < 4:
            path = f"runs/run_{r}.npy"
            np.save(folder / path, X)
        else:
            retired = rng.choice(np.arange(n_users, len(ids)), 8, replace=False)
            keep = np.setdiff1d(np.arange(len(ids)), retired)
            new = unit_vectors(rng.standard_normal((3, dim))).astype(np.float32)
            path = f"runs/run_{r}.parquet"
            _write_table(folder / path, list(ids[keep]) + [f"item_{len(item_ids) + j:05d}" for j in range(3)],
                         np.vstack([X[keep], new]))
        run_paths.append(path)

    # tranches: item launch waves by popularity rank
    rank = np.argsort(np.argsort(-views, kind="stable"), kind="stable")
    wave = np.where(rank < 0.6 * len(views), 0, np.where(rank < 0.85 * len(views), 1, 2))
    shrink = (1.0, 0.55, 0.3)  # noise multiplier by checkpoints since arrival
    (folder / "tranches").mkdir(exist_ok=True)
    tranche_entries = []
    finals = {"A": (items, np.eye(dim), "vectors.npy"), "B": (run_finals[0][0], run_finals[0][1], run_paths[0])}
    for run, (final_items, Q_final, final_path) in finals.items():
        for t in range(3):
            present = wave <= t
            age = np.clip(t - wave, 0, 2)
            noise = (sigma * 2.5 * np.take(shrink, age))[:, None] * rng.standard_normal(items.shape)
            its = unit_vectors(final_items + noise)
            user_counts = counts[:, present]
            has_views = user_counts.sum(1) > 0
            us = world.user_vectors(user_counts[has_views], its[present])
            Q = ortho_group.rvs(dim, random_state=rng.integers(2**31))
            X = np.vstack([us, its[present]]) @ Q
            rows = list(ids[:n_users][has_views]) + list(item_ids[present])
            path = f"tranches/run_{run}_tranche_{t + 1}.parquet"
            _write_table(folder / path, rows, X, np.float16)
            tranche_entries.append({"name": f"tranche {t + 1}", "vectors": path, "order": t + 1, "run": run})
        tranche_entries.append({"name": "final", "vectors": final_path, "order": 4, "run": run})

    popular = item_ids[np.argsort(-views, kind="stable")[:100]]
    niche = item_ids[views == 0]
    (folder / "vocabularies").mkdir(exist_ok=True)
    (folder / "vocabularies" / "popular_items.txt").write_text("\n".join(popular) + "\n")
    (folder / "vocabularies" / "niche_items.txt").write_text("\n".join(niche) + "\n")
    return {"runs": run_paths, "tranches": tranche_entries,
            "vocabularies": [{"name": "popular items", "ids": "vocabularies/popular_items.txt"},
                             {"name": "niche items", "ids": "vocabularies/niche_items.txt"}]}
