r"""Ranking each test edge among its negatives: batched scores, ranks under three tie policies,
rank metrics with their chance values, and the pooled AUC with DeLong's interval.

**Ranking protocol** (PyTorch-BigGraph's offline evaluation, seed 002). Each test edge
:math:`(u, v)` is scored against its own negatives :math:`(u, v'_1), \dots, (u, v'_m)` (the
destination corrupted), with :math:`s(u, v) = e_u^\top e_v` (``dot``), the cosine (``cosine``) or
:math:`-\lVert e_u - e_v \rVert_2` (``neg_l2``) (seed 000 Table 218.1). Its rank among the
:math:`N = 1 + m` candidates is, for the three tie policies of PyKEEN (Berrendorf et al. 2020):

.. math::
   r^{opt} = 1 + \#\{j : s_j > s\}, \qquad r^{pess} = 1 + \#\{j : s_j \ge s\}, \qquad
   r^{real} = \tfrac12 (r^{opt} + r^{pess}),

the realistic rank being the expected rank under random tie breaking (default; PBG counts ties
against the positive, i.e. pessimistic). *Filtered* ranks (Bordes et al. 2013) first remove the
negatives that are known edges of the graph (train or test, either direction, same relation).

Chance-adjusted values (Hoyt et al. 2022; PyKEEN ``AdjustedArithmeticMeanRankIndex`` etc.) use
the expectation under uniformly random ranking of each edge's :math:`N_i` candidates
(:func:`expected_metrics`, :func:`adjust`).

Scoring is batched matrix work in torch (GPU when present): the source vectors (B, d) and the
candidate vectors (B, 1 + m, d) of a chunk of test edges are gathered and multiplied with ``bmm``;
chunks keep memory within :data:`~embeval_report.kernels.CHUNK_BYTES`.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import special

from ..errors import UndefinedMetricWarning
from ..io.graph import SCORES
from ..kernels import as_numpy, resolve_device
from ..kernels.edge_ranks import placements as _placements
from ..kernels.edge_ranks import rank_candidates, ranks_of_scores
from ..stats import DEFAULT_LEVEL, normal_ci, wilson_ci
from .graph import KnownEdges

TIES = ("realistic", "optimistic", "pessimistic")
KS = (1, 10, 50)
SCORE_FORMULAS = {"dot": r"s(u,v) = e_u^\top e_v", "cosine": r"s(u,v) = e_u^\top e_v / (\lVert e_u\rVert \lVert e_v\rVert)",
                  "neg_l2": r"s(u,v) = -\lVert e_u - e_v \rVert_2"}
SCORE_NAMES = {"dot": "dot product", "cosine": "cosine similarity", "neg_l2": "negative Euclidean distance"}


# ---------------------------------------------------------------------------------------------
# Scoring and ranking (batched, torch)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ranks:
    """Optimistic and pessimistic ranks of each positive and its number of candidates (1 + negatives)."""

    optimistic: np.ndarray
    pessimistic: np.ndarray
    n_candidates: np.ndarray

    def get(self, ties: str = "realistic") -> np.ndarray:
        """Ranks under a tie policy: ``realistic`` (mean of the other two), ``optimistic``, ``pessimistic``."""
        if ties == "optimistic":
            return self.optimistic.astype(float)
        if ties == "pessimistic":
            return self.pessimistic.astype(float)
        if ties == "realistic":
            return 0.5 * (self.optimistic + self.pessimistic)
        raise ValueError(f"ties must be one of {TIES}, not {ties!r}")

    def take(self, idx) -> "Ranks":
        return Ranks(self.optimistic[idx], self.pessimistic[idx], self.n_candidates[idx])


@dataclass(frozen=True)
class CandidateScores:
    """Scores of every test edge's candidates and the raw and filtered ranks of its positive.

    ``scores`` (B, 1 + m) float32, column 0 the positive, NaN for padding (``None`` when not
    kept); ``removed`` (B, m) marks the negatives that are known edges (dropped by filtering).
    """

    raw: Ranks
    filtered: Ranks
    scores: np.ndarray | None
    removed: np.ndarray | None

    def ranks(self, filtered: bool = False) -> Ranks:
        return self.filtered if filtered else self.raw

    def pooled(self, filtered: bool = False, rows=None) -> tuple[np.ndarray, np.ndarray]:
        """Positive scores and the pooled scores of all (kept) negatives, optionally for some rows."""
        S = self.scores if rows is None else self.scores[rows]
        neg = S[:, 1:]
        keep = ~np.isnan(neg)
        if filtered and self.removed is not None:
            keep &= ~(self.removed if rows is None else self.removed[rows])
        return S[:, 0].astype(np.float64), neg[keep].astype(np.float64)


def ranks_from_scores(scores, valid=None) -> Ranks:
    """Ranks of column 0 of a score matrix (B, 1 + m) among the other columns (``valid`` (B, m) mask)."""
    return Ranks(*ranks_of_scores(scores, valid))


def score_candidates(X, src, candidates, *, score: str = "dot", known: KnownEdges | None = None, rel=None,
                     keep_scores: bool = True, device="auto", engine: str = "auto") -> CandidateScores:
    """Score each test edge's candidates and rank its positive, raw and filtered, in one batched pass.

    Parameters
    ----------
    X : (n, d) vectors
    src : (B,) source rows; candidates : (B, 1 + m) destination rows, column 0 the true
        destination, -1 = padding
    score : ``dot`` | ``cosine`` | ``neg_l2``
    known, rel : known edges and the relation code of each test edge; negatives that are known
        edges are dropped from the filtered ranks
    keep_scores : return the (B, 1 + m) float32 score matrix (needed for the AUC and the
        separation statistics; 4 (1 + m) bytes per test edge)
    engine : ``"torch"`` (gather + ``torch.bmm`` on the device), ``"numpy"`` (CPU only) or
        ``"auto"``: torch on a GPU, numpy on the CPU, where it is faster

    The source vectors (b, d) and candidate vectors (b, 1 + m, d) of a chunk of b test edges are
    gathered and multiplied as a batch, the positive in column 0 so that positive and negatives
    go through the same operation (exact ties stay ties); b keeps a chunk's temporaries within
    :data:`~embeval_report.kernels.CHUNK_BYTES`. Ranks, filtering (sorted-key search) and the
    score matrix are then computed on the device.
    """
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, not {score!r}")
    dev = resolve_device(device)
    if engine == "auto":
        engine = "numpy" if dev.type == "cpu" else "torch"
    if engine not in ("torch", "numpy") or (engine == "numpy" and dev.type != "cpu"):
        raise ValueError(f"engine must be 'auto', 'torch' or (on the CPU) 'numpy', not {engine!r}")
    X = as_numpy(X)
    src = np.asarray(src, np.int64)
    cand = np.asarray(candidates, np.int64)
    keys = known.keys if known is not None and len(known) else None
    rel = np.zeros(len(cand), np.int64) if rel is None else np.asarray(rel, np.int64)
    out, S, removed = rank_candidates(X, src, cand, score=score, keys=keys, rel=rel, keep_scores=keep_scores,
                                      dev=dev, engine=engine)
    return CandidateScores(Ranks(out["ro"], out["rp"], out["rn"]), Ranks(out["fo"], out["fp"], out["fn"]), S, removed)


def pair_scores(X, u, v, score: str = "dot") -> np.ndarray:
    """The score of each pair ``(u[i], v[i])`` (float64, small inputs)."""
    X = as_numpy(X).astype(np.float64)
    a, b = X[np.asarray(u)], X[np.asarray(v)]
    if score == "dot":
        return (a * b).sum(1)
    if score == "cosine":
        return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    if score == "neg_l2":
        return -np.linalg.norm(a - b, axis=1)
    raise ValueError(f"score must be one of {SCORES}, not {score!r}")


# ---------------------------------------------------------------------------------------------
# Rank metrics, their chance values, and intervals
# ---------------------------------------------------------------------------------------------

def rank_metrics(ranks, ks=KS) -> dict[str, float]:
    """``mean_rank``, ``mrr`` and ``hits_at_k`` of an array of ranks (seed 002's definitions)."""
    r = np.asarray(ranks, float)
    out = {"mean_rank": float(r.mean()), "mrr": float((1.0 / r).mean())}
    out.update({f"hits_at_{k}": float((r <= k).mean()) for k in ks})
    return out


def harmonic(n) -> np.ndarray:
    """Harmonic numbers :math:`H_n = \\sum_{i \\le n} 1/i` (exact for integer n, via digamma)."""
    return special.digamma(np.asarray(n, float) + 1) + np.euler_gamma


def chance_terms(n_candidates, name: str) -> np.ndarray:
    r"""Each test edge's expected ``name`` (``mean_rank``, ``mrr``, ``hits_at_k``) when its positive's rank is uniform
    on 1..N_i: :math:`(N_i + 1)/2`, :math:`H_{N_i}/N_i`, :math:`\min(k, N_i)/N_i`."""
    N = np.asarray(n_candidates, float)
    if name == "mean_rank":
        return (N + 1) / 2
    if name == "mrr":
        return harmonic(N) / N
    return np.minimum(int(name.rpartition("_")[2]), N) / N


def expected_metrics(n_candidates, ks=KS) -> dict[str, float]:
    """Expected ``mean_rank``, ``mrr``, ``hits_at_k`` when each positive's rank is uniform on 1..N_i."""
    return {name: float(chance_terms(n_candidates, name).mean())
            for name in ("mean_rank", "mrr", *(f"hits_at_{k}" for k in ks))}


def adjust(name: str, value: float, expected: dict, *, warn: bool = True) -> float:
    """Chance-adjusted index of a rank metric: 0 at the random expectation, 1 when perfect.

    ``mean_rank`` gives the AMRI :math:`1 - (MR - 1)/(E[MR] - 1)`; ``mrr`` and ``hits_at_k``
    give :math:`(x - E[x]) / (1 - E[x])` (Hoyt et al. 2022). Undefined (NaN, with an
    :class:`~embeval_report.errors.UndefinedMetricWarning` unless ``warn=False``) when chance is
    already perfect: every test edge has a single candidate (at most k for Hits@k).
    """
    e = expected[name]
    ok = e > 1 if name == "mean_rank" else e < 1
    if not ok:
        if warn:
            why = (f"every test edge has at most {name.rpartition('_')[2]} candidates, so random scores always hit"
                   if name.startswith("hits_at_") else
                   "every test edge is ranked among a single candidate, so random scores are already perfect")
            warnings.warn(f"chance-adjusted {name.replace('_', ' ')} is undefined: {why}", UndefinedMetricWarning,
                          stacklevel=2)
        return float("nan")
    return float(adjusted_index(name, value, e))


def adjusted_index(name: str, value, e):
    """:func:`adjust` of values and expectations (arrays: elementwise), NaN where chance is already perfect."""
    value, e = np.asarray(value, float), np.asarray(e, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "mean_rank":
            return np.where(e > 1, 1 - (value - 1) / (e - 1), np.nan)
        return np.where(e < 1, (value - e) / (1 - e), np.nan)


def rank_values(rk: Ranks, ties: str, ks=KS) -> tuple[dict, dict]:
    """:func:`rank_metrics` of the ranks under ``ties`` and their :func:`expected_metrics` under chance."""
    return rank_metrics(rk.get(ties), ks), expected_metrics(rk.n_candidates, ks)


def proportion_ci(hits, level: float = DEFAULT_LEVEL) -> tuple[float, float, str]:
    """Wilson interval of a share of test edges."""
    h = np.asarray(hits, bool)
    lo, hi = wilson_ci(int(h.sum()), len(h), level)
    return lo, hi, f"{level:.0%} Wilson interval over the {len(h):,} test edges"


def positive_placements(pos, neg, device="cpu") -> np.ndarray:
    r"""Each positive's share of the negatives it outscores, ties counting ½ (DeLong's placement values
    :math:`V_{10}`): their mean is the AUC. NaN for every positive without negatives."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if len(neg) == 0:
        return np.full(len(pos), np.nan)
    return _placements(pos, neg, resolve_device(device)) / len(neg)


def auc_delong(pos, neg, level: float = DEFAULT_LEVEL, *, device="cpu", warn: bool = True
               ) -> tuple[float, float, float]:
    r"""Exact AUC :math:`P(s^+ > s^-) + \tfrac12 P(s^+ = s^-)` over all positive–negative pairs and its
    DeLong et al. (1988) interval (normal, from the variances of the placement values), clipped to
    [0, 1]. Returns ``(auc, low, high)``; NaN where undefined (no positive or negative; no interval
    with fewer than two of either), with an :class:`~embeval_report.errors.UndefinedMetricWarning`
    unless ``warn=False``."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    P, N = len(pos), len(neg)
    if P == 0 or N == 0:
        if warn:
            warnings.warn(f"AUC undefined: {P} positive and {N} negative score(s)", UndefinedMetricWarning,
                          stacklevel=2)
        return float("nan"), float("nan"), float("nan")
    dev = resolve_device(device)
    v10 = positive_placements(pos, neg, dev)      # share of negatives below each positive
    v01 = 1.0 - _placements(neg, pos, dev) / P    # share of positives above each negative
    auc = float(v10.mean())
    if P < 2 or N < 2:
        if warn:
            warnings.warn(f"DeLong interval of the AUC undefined: it needs at least 2 positive and 2 negative scores "
                          f"(here {P} and {N})", UndefinedMetricWarning, stacklevel=2)
        return auc, float("nan"), float("nan")
    se = math.sqrt(v10.var(ddof=1) / P + v01.var(ddof=1) / N)
    lo, hi = normal_ci(auc, se, level)
    return auc, max(0.0, lo), min(1.0, hi)
