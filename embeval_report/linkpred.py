r"""Link prediction and temporal link prediction from fixed vectors (seed 002; seed 000 §218.1–218.2, §219.2).

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

Metrics (seed 002's definitions): ``mean_rank`` :math:`\frac1B\sum_i r_i` (lower; best 1), ``mrr``
:math:`\frac1B\sum_i 1/r_i`, ``hits_at_k`` :math:`\frac1B\sum_i [r_i \le k]` for k = 1, 10, 50, and
``auc`` the probability that a random positive outscores a random negative, *any* negative of
any test edge (ties count ½), computed exactly over all pairs (PBG estimates it from random pairs).
Averages are over all test edges, each counting once, which is PBG's global average (its
per-bucket stats are sums divided by the total count); per-relation values are shown beside it.

Chance-adjusted (Hoyt et al. 2022; PyKEEN ``AdjustedArithmeticMeanRankIndex`` etc.), with the
expectation under uniformly random ranking of each edge's :math:`N_i` candidates:
:math:`\mathrm{AMRI} = 1 - \frac{\mathrm{MR} - 1}{\mathbb E[\mathrm{MR}] - 1}`,
:math:`\mathbb E[\mathrm{MR}] = \frac1B \sum_i \frac{N_i + 1}{2}`; adjusted MRR
:math:`\frac{\mathrm{MRR} - \mathbb E}{1 - \mathbb E}` with :math:`\mathbb E[\mathrm{MRR}] = \frac1B\sum_i H_{N_i}/N_i`;
adjusted Hits@k likewise with :math:`\mathbb E = \frac1B \sum_i \min(k, N_i)/N_i`. 0 = chance, 1 = perfect,
comparable across negative counts.

**Classification view** (EvalNE): logistic regression on edge features from the operators
Hadamard :math:`e_u \odot e_v`, average :math:`(e_u + e_v)/2`, weighted-L1 :math:`|e_u - e_v|`,
weighted-L2 :math:`(e_u - e_v)^2` (Grover & Leskovec 2016), trained on training edges against
random non-edges (1:1) and tested on the test edges against one negative each (1:1);
``probe_roc_auc`` and ``probe_average_precision`` (scikit-learn) of the best operator.

**Negative-sampling quality** (seed 000 §219.2): Cohen's d of positive vs negative scores with the
seed's quality bands, KS and Mann–Whitney tests (SciPy), and ``false_negative_rate``, the share of
negatives that are edges of the graph.

Scoring is batched matrix work in torch (GPU when present): the source vectors (B, d) and the
candidate vectors (B, 1 + m, d) of a chunk of test edges are gathered and multiplied with ``bmm``;
chunks keep memory within :data:`~embeval_report.kernels.CHUNK_BYTES`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from scipy import special, stats as sps

from .display import escape
from .graph import (HEURISTICS, SCORES, EdgeList, KnownEdges, LinkData, adjacency, build_link_data, format_time,
                    heuristic_scores, sample_non_edges)
from .kernels import as_numpy, chunk_rows, resolve_device, unit_rows
from .plotting import PALETTE, WIDTH
from .results import Metric
from .semantic import wilson_ci
from .stats import DEFAULT_LEVEL, bootstrap_ci, normal_ci, percentile_interval
from .thresholds import cohens_d_quality, verdict

TIES = ("realistic", "optimistic", "pessimistic")
KS = (1, 10, 50)
OPERATORS = ("hadamard", "average", "weighted_l1", "weighted_l2")
OPERATOR_LABELS = {"hadamard": "Hadamard e_u ⊙ e_v", "average": "Average (e_u + e_v)/2",
                   "weighted_l1": "Weighted-L1 |e_u − e_v|", "weighted_l2": "Weighted-L2 (e_u − e_v)²"}
SCORE_FORMULAS = {"dot": r"s(u,v) = e_u^\top e_v", "cosine": r"s(u,v) = e_u^\top e_v / (\lVert e_u\rVert \lVert e_v\rVert)",
                  "neg_l2": r"s(u,v) = -\lVert e_u - e_v \rVert_2"}
SCORE_NAMES = {"dot": "dot product", "cosine": "cosine similarity", "neg_l2": "negative Euclidean distance"}
#: LaTeX of each heuristic; C_uv are the common neighbours of u and v (no \cap: pandoc's Typst output of it
#: is a symbol name that current Typst no longer knows)
HEURISTIC_FORMULAS = {
    "common_neighbours": r"|C_{uv}|", "jaccard": r"|C_{uv}| / (|N(u)| + |N(v)| - |C_{uv}|)",
    "adamic_adar": r"\sum_{w \in C_{uv}} 1 / \log |N(w)|", "resource_allocation": r"\sum_{w \in C_{uv}} 1 / |N(w)|",
    "preferential_attachment": r"|N(u)| \cdot |N(v)|"}
HEURISTIC_SHORT = {"common_neighbours": "common neighbours", "jaccard": "Jaccard", "adamic_adar": "Adamic–Adar",
                   "resource_allocation": "resource allocation", "preferential_attachment": "preferential attachment"}
SEED_002 = "seed 002 (PBG offline evaluation)"
PYKEEN = "Hoyt et al. 2022; PyKEEN"
#: per-edge values are bootstrapped (BCa) up to this many test edges; beyond, the CLT interval is used
BCA_MAX = 2000
#: bytes per chunk of test edges when scoring on the CPU (cache-sized; the GPU uses kernels.CHUNK_BYTES)
CPU_CHUNK_BYTES = 8 * 2**20
#: largest sample for the KS / Mann-Whitney tests and the score histograms
TEST_SAMPLE = 200_000


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


def _rank_block(sc: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Optimistic rank, pessimistic rank and candidate count of column 0 among the valid other columns."""
    pos, neg = sc[:, :1], sc[:, 1:]
    gt = ((neg > pos) & valid).sum(1)
    ge = ((neg >= pos) & valid).sum(1)
    return 1 + gt, 1 + ge, 1 + valid.sum(1)


def ranks_from_scores(scores, valid=None) -> Ranks:
    """Ranks of column 0 of a score matrix (B, 1 + m) among the other columns (``valid`` (B, m) mask)."""
    sc = torch.as_tensor(np.asarray(scores, np.float64))
    v = torch.ones(sc.shape[0], sc.shape[1] - 1, dtype=torch.bool) if valid is None else torch.as_tensor(valid)
    o, p, n = _rank_block(sc, v)
    return Ranks(o.numpy(), p.numpy(), n.numpy())


def _chunk_scores_torch(Xt: torch.Tensor, src: torch.Tensor, cand: torch.Tensor, score: str) -> torch.Tensor:
    """Scores (b, c) of a chunk: gather (b, d) and (b, c, d) on the device, then ``bmm`` (or the L2 norm)."""
    xs = Xt.index_select(0, src)
    xc = Xt.index_select(0, cand.clamp_min(0).reshape(-1)).view(cand.shape[0], cand.shape[1], Xt.shape[1])
    if score == "neg_l2":
        return -(xc - xs[:, None, :]).norm(dim=2)
    return torch.bmm(xc, xs[:, :, None])[:, :, 0]


def _chunk_scores_numpy(X: np.ndarray, src: np.ndarray, cand: np.ndarray, score: str) -> np.ndarray:
    """The same in numpy: on a CPU, ``np.take`` + batched ``np.matmul`` is 2-3x faster than torch's
    ``index_select`` + ``bmm`` for these batched matrix-vector products (measured, see the benchmark)."""
    xs = X[src]
    xc = np.take(X, np.maximum(cand, 0), axis=0)
    if score == "neg_l2":
        return -np.linalg.norm(xc - xs[:, None, :], axis=2)
    return np.matmul(xc, xs[:, :, None])[:, :, 0]


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
    n, d = X.shape
    src = np.asarray(src, np.int64)
    cand = np.asarray(candidates, np.int64)
    B, c = cand.shape
    Xt = torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float32, device=dev)
    if score == "cosine":
        Xt = unit_rows(Xt)
    Xn = Xt.numpy() if engine == "numpy" else None
    keys = torch.as_tensor(known.keys, device=dev) if known is not None and len(known) else None
    rel = np.zeros(B, np.int64) if rel is None else np.asarray(rel, np.int64)
    out = {k: np.empty(B, np.int64) for k in ("ro", "rp", "rn", "fo", "fp", "fn")}
    S = np.empty((B, c), np.float32) if keep_scores else None
    removed = np.zeros((B, c - 1), bool) if keys is not None else None
    # on the CPU, chunks small enough for the gathered block to stay in cache are 2-3x faster
    rows = chunk_rows(B, c * d * 4 * (3 if score == "neg_l2" else 2) + c * 64,
                      CPU_CHUNK_BYTES if dev.type == "cpu" else None)
    for s in range(0, B, rows):
        ct = torch.as_tensor(cand[s:s + rows], device=dev)
        valid = ct[:, 1:] >= 0
        if engine == "numpy":
            sc = torch.from_numpy(_chunk_scores_numpy(Xn, src[s:s + rows], cand[s:s + rows], score))
        else:
            sc = _chunk_scores_torch(Xt, torch.as_tensor(src[s:s + rows], device=dev), ct, score)
        o, p, m = _rank_block(sc, valid)
        out["ro"][s:s + rows], out["rp"][s:s + rows], out["rn"][s:s + rows] = o.cpu(), p.cpu(), m.cpu()
        if keys is not None:
            u = torch.as_tensor(src[s:s + rows], device=dev)[:, None]
            v = ct[:, 1:].clamp_min(0)
            k = (torch.as_tensor(rel[s:s + rows], device=dev)[:, None] * n * n
                 + torch.minimum(u, v) * n + torch.maximum(u, v))
            i = torch.searchsorted(keys, k).clamp_max(len(keys) - 1)
            gone = (keys[i] == k) & valid
            removed[s:s + rows] = gone.cpu().numpy()
            o, p, m = _rank_block(sc, valid & ~gone)
        out["fo"][s:s + rows], out["fp"][s:s + rows], out["fn"][s:s + rows] = o.cpu(), p.cpu(), m.cpu()
        if S is not None:
            S[s:s + rows] = sc.cpu().numpy()
            if not bool(valid.all()):
                S[s:s + rows, 1:][~valid.cpu().numpy()] = np.nan
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


def expected_metrics(n_candidates, ks=KS) -> dict[str, float]:
    """Expected ``mean_rank``, ``mrr``, ``hits_at_k`` when each positive's rank is uniform on 1..N_i."""
    N = np.asarray(n_candidates, float)
    out = {"mean_rank": float(((N + 1) / 2).mean()), "mrr": float((harmonic(N) / N).mean())}
    out.update({f"hits_at_{k}": float((np.minimum(k, N) / N).mean()) for k in ks})
    return out


def adjust(name: str, value: float, expected: dict) -> float:
    """Chance-adjusted index of a rank metric: 0 at the random expectation, 1 when perfect.

    ``mean_rank`` gives the AMRI :math:`1 - (MR - 1)/(E[MR] - 1)`; ``mrr`` and ``hits_at_k``
    give :math:`(x - E[x]) / (1 - E[x])` (Hoyt et al. 2022).
    """
    e = expected[name]
    if name == "mean_rank":
        return float(1 - (value - 1) / (e - 1)) if e > 1 else float("nan")
    return float((value - e) / (1 - e)) if e < 1 else float("nan")


def mean_ci(values, level: float = DEFAULT_LEVEL, *, seed: int = 0) -> tuple[float, float, str]:
    """Interval for the mean of per-edge values: BCa bootstrap up to :data:`BCA_MAX` values, else the
    normal (CLT) interval mean ± z·sd/√n. Returns ``(low, high, method)``."""
    x = np.asarray(values, float)
    if len(x) < 2:
        return float("nan"), float("nan"), ""
    if len(x) <= BCA_MAX:
        lo, hi = bootstrap_ci(np.mean, x, level=level, n_boot=2000, seed=seed)
        return lo, hi, f"{level:.0%} BCa bootstrap over the {len(x):,} test edges"
    lo, hi = normal_ci(float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))), level)
    return lo, hi, f"{level:.0%} normal interval over the {len(x):,} test edges (mean ± z·sd/√n)"


def proportion_ci(hits, level: float = DEFAULT_LEVEL) -> tuple[float, float, str]:
    """Wilson interval of a share of test edges."""
    h = np.asarray(hits, bool)
    lo, hi = wilson_ci(int(h.sum()), len(h), level)
    return lo, hi, f"{level:.0%} Wilson interval over the {len(h):,} test edges"


def _placements(a: np.ndarray, b: np.ndarray, device) -> np.ndarray:
    """For each a_i: #{b < a_i} + ½ #{b = a_i} (sorted search on the device)."""
    bs = torch.sort(torch.as_tensor(b, dtype=torch.float64, device=device)).values
    at = torch.as_tensor(a, dtype=torch.float64, device=device)
    lo = torch.searchsorted(bs, at, right=False)
    hi = torch.searchsorted(bs, at, right=True)
    return (lo.double() + 0.5 * (hi - lo).double()).cpu().numpy()


def auc_delong(pos, neg, level: float = DEFAULT_LEVEL, *, device="cpu") -> tuple[float, float, float]:
    r"""Exact AUC :math:`P(s^+ > s^-) + \tfrac12 P(s^+ = s^-)` over all positive–negative pairs and its
    DeLong et al. (1988) interval (normal, from the variances of the placement values), clipped to
    [0, 1]. Returns ``(auc, low, high)``."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    P, N = len(pos), len(neg)
    if P == 0 or N == 0:
        return float("nan"), float("nan"), float("nan")
    dev = resolve_device(device)
    v10 = _placements(pos, neg, dev) / N          # share of negatives below each positive
    v01 = 1.0 - _placements(neg, pos, dev) / P    # share of positives above each negative
    auc = float(v10.mean())
    if P < 2 or N < 2:
        return auc, float("nan"), float("nan")
    se = math.sqrt(v10.var(ddof=1) / P + v01.var(ddof=1) / N)
    lo, hi = normal_ci(auc, se, level)
    return auc, max(0.0, lo), min(1.0, hi)


# ---------------------------------------------------------------------------------------------
# Negative-sampling quality (seed 000 §219.2)
# ---------------------------------------------------------------------------------------------

def cohens_d(pos, neg) -> float:
    r"""Cohen's d with the pooled standard deviation (Cohen 1988):
    :math:`d = (\bar x_+ - \bar x_-) / s_p`, :math:`s_p^2 = \frac{(n_+ - 1)s_+^2 + (n_- - 1)s_-^2}{n_+ + n_- - 2}`.
    (Seed 000 §219.2 divides by :math:`\sqrt{(\sigma_+^2 + \sigma_-^2)/2}` with population variances:
    :func:`cohens_d_seed`.)"""
    a, b = np.asarray(pos, float), np.asarray(neg, float)
    n1, n2 = len(a), len(b)
    if n1 + n2 < 3:
        return float("nan")
    ss = ((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()  # (n1-1)s1² + (n2-1)s2²
    sp2 = ss / (n1 + n2 - 2)
    return float((a.mean() - b.mean()) / math.sqrt(sp2)) if sp2 > 0 else float("nan")


def cohens_d_seed(pos, neg) -> float:
    """The seed's variant (§219.2): mean difference over :math:`\\sqrt{(\\sigma_+^2 + \\sigma_-^2)/2}` (ddof 0)."""
    a, b = np.asarray(pos, float), np.asarray(neg, float)
    return float((a.mean() - b.mean()) / (math.sqrt((a.var() + b.var()) / 2) + 1e-10))


def cohens_d_ci(d: float, n1: int, n2: int, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Normal interval of Cohen's d with the large-sample standard error of Hedges & Olkin (1985):
    :math:`\\sqrt{(n_1 + n_2)/(n_1 n_2) + d^2 / (2(n_1 + n_2))}`."""
    se = math.sqrt((n1 + n2) / (n1 * n2) + d * d / (2 * (n1 + n2)))
    return normal_ci(d, se, level)


@dataclass(frozen=True)
class NegativeQuality:
    """Separation of positive and negative scores, and how many negatives are really edges."""

    cohens_d: float
    d_ci: tuple
    d_seed: float
    quality: str
    pos_mean: float
    pos_sd: float
    neg_mean: float
    neg_sd: float
    ks_statistic: float
    ks_pvalue: float
    mw_auc: float
    mw_pvalue: float
    test_sample: int
    false_negative_rate: float
    fnr_ci: tuple
    n_negatives: int
    n_false: int
    potential_false_negatives: float
    recommendations: list = field(default_factory=list)


def negative_quality(pos, neg, *, n_false: int, n_negatives: int, auc: float, sampled: bool, strategy: str,
                     level: float = DEFAULT_LEVEL, seed: int = 0) -> NegativeQuality:
    """Seed 000 §219.2's analysis on the chapter's scores: Cohen's d and its quality band, KS and
    one-sided Mann–Whitney tests (on up to :data:`TEST_SAMPLE` scores per side), the false-negative
    rate (negatives that are edges of the graph; Wilson interval), the seed's score-based
    "potential false negatives" (negatives above the 25th percentile of positive scores), and the
    seed's recommendations."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    d = cohens_d(pos, neg)
    rng = np.random.default_rng([seed, 90, 4])
    ps = pos if len(pos) <= TEST_SAMPLE else rng.choice(pos, TEST_SAMPLE, replace=False)
    ns = neg if len(neg) <= TEST_SAMPLE else rng.choice(neg, TEST_SAMPLE, replace=False)
    ks = sps.ks_2samp(ps, ns)
    mw = sps.mannwhitneyu(ps, ns, alternative="greater")
    fnr = n_false / n_negatives if n_negatives else float("nan")
    quality = cohens_d_quality(d)
    recs = []
    if d < 1.0:
        recs.append("Cohen's d < 1.0: positive and negative scores overlap (seed, for training: \"Improve negative "
                    "sampling strategy\", \"Consider hard negative mining\"). In an evaluation the negatives are part "
                    "of the protocol, so read it as: the vectors separate true edges from these negatives only weakly.")
    if fnr > 0.1:
        recs.append(f"False-negative rate {fnr:.1%} > 10 %: many negatives are real edges (seed: \"verify ground "
                    "truth\"); report filtered ranks, which drop them.")
    if auc < 0.8:
        recs.append(f"AUC {auc:.3f} < 0.8: poor discriminative power (seed: \"review embedding model capacity\").")
    if sampled and strategy == "uniform" and d >= 1.5:
        recs.append("Uniform negatives are easy (seed 000 §218.1.2, \"Easy Negatives\"): a high separation may say "
                    "more about the negatives than about the embedding; re-run with harder negatives "
                    "(same-batch, degree-matched, or hard negatives given as a negatives file).")
    if not recs:
        recs.append("No seed rule is triggered: positives and negatives are well separated and few negatives are "
                    "real edges.")
    lo, hi = cohens_d_ci(d, len(pos), len(neg), level)
    flo, fhi = wilson_ci(n_false, n_negatives, level)
    return NegativeQuality(
        cohens_d=d, d_ci=(lo, hi), d_seed=cohens_d_seed(pos, neg), quality=quality, pos_mean=float(pos.mean()),
        pos_sd=float(pos.std(ddof=1)), neg_mean=float(neg.mean()), neg_sd=float(neg.std(ddof=1)),
        ks_statistic=float(ks.statistic), ks_pvalue=float(ks.pvalue),
        mw_auc=float(mw.statistic / (len(ps) * len(ns))), mw_pvalue=float(mw.pvalue), test_sample=int(min(len(ps), len(ns))),
        false_negative_rate=fnr, fnr_ci=(flo, fhi), n_negatives=int(n_negatives), n_false=int(n_false),
        potential_false_negatives=float((neg > np.percentile(pos, 25)).mean()), recommendations=recs)


# ---------------------------------------------------------------------------------------------
# Classification view: edge-operator probes (EvalNE)
# ---------------------------------------------------------------------------------------------

def edge_features(X, u, v, op: str) -> np.ndarray:
    """Edge features from the two end vectors: ``hadamard``, ``average``, ``weighted_l1``, ``weighted_l2``."""
    X = as_numpy(X)
    a, b = X[np.asarray(u)].astype(np.float64), X[np.asarray(v)].astype(np.float64)
    if op == "hadamard":
        return a * b
    if op == "average":
        return (a + b) / 2
    if op == "weighted_l1":
        return np.abs(a - b)
    if op == "weighted_l2":
        return (a - b) ** 2
    raise ValueError(f"operator must be one of {OPERATORS}, not {op!r}")


@dataclass(frozen=True)
class ProbeResult:
    """ROC-AUC and AP of each operator's logistic-regression probe and of the raw score, with curves."""

    table: pd.DataFrame
    curves: dict
    best: str
    n_train: int
    n_test: int
    ci_method: str


def average_precision(y, s, weights=None) -> np.ndarray:
    r"""Average precision :math:`\sum_k (R_k - R_{k-1}) P_k` over the distinct score thresholds (as
    scikit-learn's ``average_precision_score``), for one or several rows of case ``weights``
    (a bootstrap replicate is a row of resampling counts). Returns a scalar or an array per row."""
    y, s = np.asarray(y, float), np.asarray(s, float)
    order = np.argsort(-s, kind="stable")
    y, s = y[order], s[order]
    W = np.ones((1, len(y))) if weights is None else np.atleast_2d(np.asarray(weights, float))[:, order]
    last = np.r_[np.flatnonzero(np.diff(s) != 0), len(s) - 1]  # last index of each distinct score
    tp = np.cumsum(W * y, axis=1)[:, last]
    fp = np.cumsum(W * (1 - y), axis=1)[:, last]
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(tp + fp > 0, tp / (tp + fp), 0.0)  # no case above the threshold yet: recall step 0
        recall = tp / tp[:, -1:]
    ap = (np.diff(np.hstack([np.zeros((len(W), 1)), recall]), axis=1) * precision).sum(1)
    return float(ap[0]) if weights is None else ap


def _ap_ci(y, s, level, n_boot: int = 200, seed: int = 0) -> tuple[float, float]:
    """Stratified percentile bootstrap of the AP (positives and negatives resampled separately)."""
    rng = np.random.default_rng([seed, 90, 5])
    y = np.asarray(y)
    pos, neg = y == 1, y == 0
    W = np.zeros((n_boot, len(y)))
    for mask in (pos, neg):
        cols = np.flatnonzero(mask)
        draws = rng.integers(0, len(cols), (n_boot, len(cols))) + len(cols) * np.arange(n_boot)[:, None]
        W[:, cols] = np.bincount(draws.ravel(), minlength=n_boot * len(cols)).reshape(n_boot, len(cols))
    return percentile_interval(average_precision(y, s, W), level)


def operator_probes(X, train_pos, train_neg, test_pos, test_neg, *, score: str = "dot",
                    level: float = DEFAULT_LEVEL, seed: int = 0) -> ProbeResult:
    """Train a logistic-regression probe per operator on (train_pos vs train_neg) pairs and test it
    on (test_pos vs test_neg) pairs; each argument is a ``(u, v)`` pair of index arrays.

    Features are standardised (fitted on the training pairs); ``LogisticRegression(max_iter=1000)``.
    The raw ``score`` of the pairs is evaluated on the same test pairs for comparison. AUC intervals
    are DeLong's, AP intervals a stratified percentile bootstrap (200 resamples).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score, roc_curve
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y_tr = np.r_[np.ones(len(train_pos[0])), np.zeros(len(train_neg[0]))]
    y_te = np.r_[np.ones(len(test_pos[0])), np.zeros(len(test_neg[0]))]
    tr_u, tr_v = np.r_[train_pos[0], train_neg[0]], np.r_[train_pos[1], train_neg[1]]
    te_u, te_v = np.r_[test_pos[0], test_neg[0]], np.r_[test_pos[1], test_neg[1]]
    rows, curves = [], {}

    def add(name, label, s):
        auc, lo, hi = auc_delong(s[y_te == 1], s[y_te == 0], level)
        ap = float(average_precision_score(y_te, s))
        alo, ahi = _ap_ci(y_te, s, level, seed=seed)
        fpr, tpr, _ = roc_curve(y_te, s)
        prec, rec, _ = precision_recall_curve(y_te, s)
        curves[name] = dict(fpr=fpr, tpr=tpr, precision=prec, recall=rec, label=label)
        assert abs(auc - roc_auc_score(y_te, s)) < 1e-9
        rows.append({"name": name, "method": label, "ROC-AUC": auc, "ROC-AUC 95 % CI": _ci_text(lo, hi),
                     "average precision": ap, "AP 95 % CI": _ci_text(alo, ahi), "_auc_ci": (lo, hi),
                     "_ap_ci": (alo, ahi)})

    for op in OPERATORS:
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        clf.fit(edge_features(X, tr_u, tr_v, op), y_tr)
        add(op, f"probe: {OPERATOR_LABELS[op]}", clf.decision_function(edge_features(X, te_u, te_v, op)))
    add("score", f"raw score: {SCORE_NAMES[score]} (no training)", pair_scores(X, te_u, te_v, score))
    table = pd.DataFrame(rows)
    probes = table[table["name"] != "score"]
    best = str(probes.loc[probes["ROC-AUC"].idxmax(), "name"])
    return ProbeResult(table, curves, best, len(y_tr), len(y_te),
                       f"ROC-AUC: {level:.0%} DeLong interval; AP: {level:.0%} stratified percentile bootstrap "
                       f"(200 resamples); {len(test_pos[0]):,} test edges vs as many negatives (1:1)")


# ---------------------------------------------------------------------------------------------
# Heuristic baselines on the training graph
# ---------------------------------------------------------------------------------------------

def heuristic_ranks(train: EdgeList, n: int, src, candidates, valid=None, names=tuple(HEURISTICS)) -> dict[str, Ranks]:
    """Ranks of each positive among its candidates when scored by graph heuristics on ``train``."""
    A = adjacency(train, n)
    src = np.asarray(src, np.int64)
    cand = np.asarray(candidates)
    u = np.repeat(src, cand.shape[1])
    v = cand.clip(min=0).ravel()
    v_ok = np.ones(cand.shape[0] * (cand.shape[1] - 1), bool) if valid is None else np.asarray(valid)
    out = {}
    for name in names:
        S = heuristic_scores(A, u, v, name).reshape(cand.shape)
        out[name] = ranks_from_scores(S, (cand[:, 1:] >= 0) & v_ok.reshape(cand.shape[0], -1))
    return out


def _sample_rows(B: int, limit: int | None, seed: int) -> np.ndarray:
    if limit is None or B <= limit:
        return np.arange(B)
    return np.sort(np.random.default_rng([seed, 90, 6]).choice(B, limit, replace=False))


def baseline_table(data: LinkData, cs: CandidateScores, *, ties: str, filtered: bool, max_queries: int | None = 2000,
                   seed: int = 0, device="cpu") -> tuple[pd.DataFrame, int]:
    """The embedding and each heuristic ranked on the same test edges (a sample of at most
    ``max_queries``) with the same negatives, ties and filter setting."""
    rows = _sample_rows(len(data.test), max_queries, seed)
    keep = None if not filtered or cs.removed is None else ~cs.removed[rows]
    h = heuristic_ranks(data.train, data.n_entities, data.test.src[rows], data.candidates[rows], keep)
    out = []
    emb = cs.ranks(filtered).take(rows)
    for name, rk in [("embedding", emb)] + list(h.items()):
        r = rk.get(ties)
        v = rank_metrics(r)
        e = expected_metrics(rk.n_candidates)
        lo, hi, _ = mean_ci(1.0 / r, seed=seed)
        out.append({"method": "embedding (this set)" if name == "embedding" else HEURISTIC_SHORT[name], "name": name,
                    "MRR": v["mrr"], "MRR 95 % CI": _ci_text(lo, hi), "Hits@10": v["hits_at_10"],
                    "mean rank": v["mean_rank"], "AMRI": adjust("mean_rank", v["mean_rank"], e),
                    "ties in rank (share)": float((rk.optimistic != rk.pessimistic).mean())})
    return pd.DataFrame(out), len(rows)


# ---------------------------------------------------------------------------------------------
# The chapter's evaluation
# ---------------------------------------------------------------------------------------------

#: name -> (label, direction, LaTeX formula, reference, threshold quantity or None)
METRICS = {
    "mean_rank": ("Mean rank", "lower", r"\mathrm{MR} = \frac1B \sum_i r_i", SEED_002, None),
    "mrr": ("MRR", "higher", r"\mathrm{MRR} = \frac1B \sum_i 1/r_i", SEED_002, None),
    "hits_at_1": ("Hits@1", "higher", r"\frac1B \sum_i [r_i \le 1]", SEED_002, None),
    "hits_at_10": ("Hits@10", "higher", r"\frac1B \sum_i [r_i \le 10]", SEED_002, None),
    "hits_at_50": ("Hits@50", "higher", r"\frac1B \sum_i [r_i \le 50]", SEED_002, None),
    "auc": ("AUC (any positive vs any negative)", "higher", r"P(s^+ > s^-) + \tfrac12 P(s^+ = s^-)",
            f"{SEED_002}; verdict: checklist seed 000 §221.1 and rule §219.2", "link_prediction_auc"),
    "amri": ("Adjusted mean rank index (AMRI)", "higher",
             r"1 - \frac{\mathrm{MR} - 1}{\mathbb{E}[\mathrm{MR}] - 1}", PYKEEN + " (AMRI)", None),
    "adjusted_mrr": ("Adjusted MRR", "higher", r"\frac{\mathrm{MRR} - \mathbb{E}[\mathrm{MRR}]}{1 - \mathbb{E}[\mathrm{MRR}]}",
                     PYKEEN + " (adjusted MRR)", None),
    "adjusted_hits_at_10": ("Adjusted Hits@10", "higher", r"\frac{H_{10} - \mathbb{E}[H_{10}]}{1 - \mathbb{E}[H_{10}]}",
                            PYKEEN + " (adjusted Hits@k)", None),
    "probe_roc_auc": ("Probe ROC-AUC (best operator)", "higher", r"P(f(u,v)^+ > f(u',v')^-)",
                      "EvalNE edge operators + logistic regression; verdict: checklist seed 000 §221.1 and §219.2",
                      "link_prediction_auc"),
    "probe_average_precision": ("Probe average precision (best operator)", "higher", r"\sum_k (R_k - R_{k-1}) P_k",
                                "seed 000 §218.1.3; verdict: checklist seed 000 §221.1 (1:1 negatives)",
                                "link_prediction_average_precision"),
    "negative_score_cohens_d": ("Cohen's d, positive vs negative scores", "higher",
                                r"d = (\bar s_+ - \bar s_-) / s_p", "Cohen 1988; verdict: seed 000 §219.2 quality bands",
                                "negative_score_cohens_d"),
    "false_negative_rate": ("False-negative rate of the negatives", "lower",
                            r"\#\{(u, v') \in \text{negatives} : (u, v') \in E\} / \#\text{negatives}",
                            "seed 000 §219.2 (share of negatives that are edges of the graph)", None),
}


@dataclass(frozen=True)
class LinkPredictionResult:
    """Everything the link-prediction chapter shows."""

    values: dict
    metrics: dict
    protocol: dict
    tag: str
    expected: dict
    cs: CandidateScores
    ranks: np.ndarray
    n_candidates: np.ndarray
    tie_table: pd.DataFrame
    relation_table: pd.DataFrame
    quality: NegativeQuality
    probes: ProbeResult | None
    baselines: pd.DataFrame | None
    baseline_queries: int
    data: LinkData
    info: dict = field(default_factory=dict)


def protocol_tag(score: str, ties: str, filtered: bool, data: LinkData) -> str:
    """The short protocol label shown next to every number."""
    return f"{'filtered' if filtered else 'raw'}, {ties} ties, {data.n_negatives} negatives, {score}"


def _ci_text(lo, hi, fmt: str = ".3f") -> str:
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return "—"
    return f"{format(lo, fmt)} to {format(hi, fmt)}"


def _rank_values(rk: Ranks, ties: str, ks=KS) -> tuple[dict, dict]:
    r = rk.get(ties)
    v = rank_metrics(r, ks)
    e = expected_metrics(rk.n_candidates, ks)
    return v, e


def evaluate_link_prediction(X, data: LinkData, *, score: str = "dot", ties: str = "realistic", filtered: bool = False,
                             probe: bool = True, heuristics: bool = True, max_probe_edges: int = 20_000,
                             max_heuristic_queries: int | None = 2000, level: float = DEFAULT_LEVEL, seed: int = 0,
                             device="auto") -> LinkPredictionResult:
    """Rank every test edge against its negatives and compute the chapter's metrics.

    ``filtered`` chooses the headline ranks (both raw and filtered are always computed and shown);
    ``ties`` the tie policy (``realistic`` default). The probe trains on up to ``max_probe_edges``
    training edges and tests on as many test edges; the heuristics rank at most
    ``max_heuristic_queries`` test edges (``None``: all).
    """
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, not {ties!r}")
    dev = resolve_device(device)
    X = as_numpy(X)
    test = data.test
    cs = score_candidates(X, test.src, data.candidates, score=score, known=data.known, rel=data.test_rel, device=dev)
    rk = cs.ranks(filtered)
    r = rk.get(ties)
    values, expected = _rank_values(rk, ties)
    pos, neg = cs.pooled(filtered)
    auc, alo, ahi = auc_delong(pos, neg, level, device=dev)
    values["auc"] = auc
    for name in ("mean_rank", "mrr", "hits_at_10"):
        values["amri" if name == "mean_rank" else f"adjusted_{name}"] = adjust(name, values[name], expected)
    cis = {"auc": (alo, ahi, f"{level:.0%} DeLong interval (positives vs pooled negatives)")}
    cis["mean_rank"] = mean_ci(r, level, seed=seed)
    cis["mrr"] = mean_ci(1.0 / r, level, seed=seed)
    for k in KS:
        cis[f"hits_at_{k}"] = proportion_ci(r <= k, level)
    for name, adj in (("mean_rank", "amri"), ("mrr", "adjusted_mrr"), ("hits_at_10", "adjusted_hits_at_10")):
        lo, hi, how = cis[name]
        a, b = adjust(name, lo, expected), adjust(name, hi, expected)
        cis[adj] = (min(a, b), max(a, b), how + ", mapped through the (affine) chance adjustment")
    # negative-sampling quality on the raw negatives (what the sampler produced)
    n_neg = int((data.candidates[:, 1:] >= 0).sum())
    n_false = int(cs.removed.sum()) if cs.removed is not None else 0
    qpos, qneg = cs.pooled(False)
    quality = negative_quality(qpos, qneg, n_false=n_false, n_negatives=n_neg, auc=auc,
                               sampled=data.strategy is not None, strategy=data.strategy, level=level, seed=seed)
    values["negative_score_cohens_d"] = quality.cohens_d
    values["false_negative_rate"] = quality.false_negative_rate
    cis["negative_score_cohens_d"] = (*quality.d_ci, f"{level:.0%} normal interval, Hedges & Olkin standard error")
    cis["false_negative_rate"] = (*quality.fnr_ci, f"{level:.0%} Wilson interval over the {n_neg:,} negatives")
    probes = _run_probes(X, data, score=score, max_edges=max_probe_edges, level=level, seed=seed) if probe else None
    if probes is not None:
        b = probes.table.set_index("name").loc[probes.best]
        values["probe_roc_auc"], values["probe_average_precision"] = float(b["ROC-AUC"]), float(b["average precision"])
        cis["probe_roc_auc"] = (*b["_auc_ci"], probes.ci_method)
        cis["probe_average_precision"] = (*b["_ap_ci"], probes.ci_method)
    baselines, n_bq = (baseline_table(data, cs, ties=ties, filtered=filtered, max_queries=max_heuristic_queries,
                                      seed=seed) if heuristics else (None, 0))
    tag = protocol_tag(score, ties, filtered, data)
    metrics = {}
    for name, (label, direction, formula, ref, quantity) in METRICS.items():
        if name not in values:
            continue
        lo, hi, how = cis.get(name, (None, None, ""))
        extra = f" [{tag}]" if name not in ("probe_roc_auc", "probe_average_precision") else \
            f" [{OPERATOR_LABELS[probes.best]}, 1:1]"
        if name in ("negative_score_cohens_d", "false_negative_rate"):
            extra = f" [{score} score, raw negatives]"
        metrics[name] = Metric(name=name, value=values[name], direction=direction, reference=ref,
                               ci_low=lo, ci_high=hi, verdict=verdict(quantity, values[name]) if quantity else None,
                               label=label + extra, formula=formula, ci_method=how)
    protocol = dict(split=data.split, negatives=data.negatives, score=score, ties=ties, filtered=filtered,
                    n_test=len(test), n_train=len(data.train), n_negatives=data.n_negatives,
                    relations=data.relations, level=level, **data.notes)
    return LinkPredictionResult(
        values=values, metrics=metrics, protocol=protocol, tag=tag, expected=expected, cs=cs, ranks=r,
        n_candidates=rk.n_candidates, tie_table=tie_policy_table(cs), relation_table=relation_table(
            cs, data, ties=ties, filtered=filtered), quality=quality, probes=probes, baselines=baselines,
        baseline_queries=n_bq, data=data, info=dict(device=str(dev)))


def _run_probes(X, data: LinkData, *, score: str, max_edges: int, level: float, seed: int) -> ProbeResult | None:
    if len(data.train) < 10 or len(data.test) < 10:
        return None
    tr = _sample_rows(len(data.train), max_edges, seed)
    te = _sample_rows(len(data.test), max_edges, seed + 1)
    nu, nv = sample_non_edges(data.known, data.n_entities, len(tr), rel=data.train_rel[tr], seed=seed)
    cand = data.candidates[te]
    first = np.argmax(cand[:, 1:] >= 0, axis=1)  # the first negative of each test edge
    neg_v = cand[np.arange(len(te)), 1 + first]
    return operator_probes(X, (data.train.src[tr], data.train.dst[tr]), (nu, nv),
                           (data.test.src[te], data.test.dst[te]), (data.test.src[te], neg_v), score=score,
                           level=level, seed=seed)


def tie_policy_table(cs: CandidateScores) -> pd.DataFrame:
    """MR, MRR, Hits@10 and AMRI under each tie policy, raw and filtered."""
    rows = []
    for filt in (False, True):
        for ties in TIES:
            v, e = _rank_values(cs.ranks(filt), ties)
            rows.append({"ranks": "filtered" if filt else "raw", "ties": ties, "mean rank": v["mean_rank"],
                         "MRR": v["mrr"], "Hits@1": v["hits_at_1"], "Hits@10": v["hits_at_10"],
                         "AMRI": adjust("mean_rank", v["mean_rank"], e),
                         "mean candidates": float(cs.ranks(filt).n_candidates.mean())})
    return pd.DataFrame(rows)


def relation_table(cs: CandidateScores, data: LinkData, *, ties: str, filtered: bool) -> pd.DataFrame:
    """The metrics within each relation, then over all test edges (PBG's count-weighted global
    average) and the unweighted mean over relations (macro)."""
    rows = []
    names = data.relations or ["(all edges)"]
    for code, name in enumerate(names):
        idx = np.flatnonzero(data.test_rel == code)
        if not len(idx):
            continue
        rows.append(_group_row(name, cs, idx, ties, filtered))
    if len(rows) > 1:
        t = pd.DataFrame(rows)
        rows.append(_group_row("all test edges (PBG global average)", cs, np.arange(len(data.test)), ties, filtered))
        macro = {"relation": "mean over relations (macro)", "test edges": int(t["test edges"].sum())}
        macro.update({c: float(t[c].mean()) for c in t.columns if c not in ("relation", "test edges")})
        rows.append(macro)
    return pd.DataFrame(rows)


def _group_row(name, cs: CandidateScores, idx, ties, filtered) -> dict:
    rk = cs.ranks(filtered).take(idx)
    v, e = _rank_values(rk, ties)
    pos, neg = cs.pooled(filtered, idx)
    auc = auc_delong(pos, neg)[0]
    return {"relation": str(name), "test edges": len(idx), "mean rank": v["mean_rank"], "MRR": v["mrr"],
            "Hits@1": v["hits_at_1"], "Hits@10": v["hits_at_10"], "Hits@50": v["hits_at_50"], "AUC": auc,
            "AMRI": adjust("mean_rank", v["mean_rank"], e)}


# ---------------------------------------------------------------------------------------------
# Tables and narrative for the chapter
# ---------------------------------------------------------------------------------------------

def _fmt(m: Metric, fmt: str = ".3f") -> str:
    if m.ci_low is None or m.ci_high is None or not np.isfinite(m.ci_low):
        return format(m.value, fmt)
    return f"{format(m.value, fmt)} (95 % CI {format(m.ci_low, fmt)} to {format(m.ci_high, fmt)})"


def protocol_markdown(r: LinkPredictionResult) -> str:
    """The evaluation protocol in words: what every number in the chapter is conditioned on."""
    p, d = r.protocol, r.data
    filt = ("**filtered**: negatives that are known edges of the graph (train or test, either direction"
            + (", same relation" if d.relations else "") + ") are removed before ranking (Bordes et al. 2013)"
            if p["filtered"] else
            "**raw**: negatives are kept even when they are real edges (PyTorch-BigGraph's default; the filtered "
            "ranks are in the tie/filter table)")
    ties = {"realistic": "**realistic** ties: the mean of the optimistic and pessimistic rank, i.e. the expected rank "
                         "under random tie breaking (PyKEEN's recommended setting; PBG counts ties against the positive)",
            "optimistic": "**optimistic** ties: only strictly higher negatives count",
            "pessimistic": "**pessimistic** ties: negatives with an equal score count against the positive, as in PBG"}
    lines = [
        f"- **Test edges**: {d.split}; {p['n_test']:,} test edges, {p['n_train']:,} training edges"
        + (f" ({p['test_edges_also_in_edges']:,} test edges also listed in `edges` were removed from training)"
           if p.get("test_edges_also_in_edges") else "") + ".",
        f"- **Negatives**: {d.negatives}; a negative of $(u, v)$ is $(u, v')$ (destination corrupted).",
        f"- **Score**: {SCORE_NAMES[p['score']]}, ${SCORE_FORMULAS[p['score']]}$ (seed 000 Table 218.1); higher = more "
        "likely an edge.",
        f"- **Rank**: per query: each positive is ranked among its own {d.n_negatives} negatives only (rank 1 = best; "
        "seed 002), not in one pooled list; {}.".format(ties[p["ties"]]),
        f"- **Filter**: {filt}.",
        "- **Averaging**: over all test edges, each counting once (PBG's global average); per relation below."
        if d.relations else "- **Averaging**: over all test edges, each counting once (PBG's global average).",
        "- **AUC**: pooled, any positive against any negative (seed 002), exact over all pairs, ties ½.",
    ]
    return "\n".join(lines)


def narrative(r: LinkPredictionResult) -> str:
    """What the numbers say for this set (markdown)."""
    v, m, e = r.values, r.metrics, r.expected
    N = float(r.n_candidates.mean())
    parts = []
    amri = v["amri"]
    strength = ("a near-perfect signal" if amri > 0.95 else "a strong signal" if amri > 0.8 else
                "a moderate signal" if amri > 0.5 else "a weak signal" if amri > 0.1 else "no better than chance")
    parts.append(
        f"**The vectors rank true edges {'well above' if amri > 0.5 else 'above' if amri > 0.1 else 'about at'} "
        f"chance.** Among each test edge's "
        f"{N - 1:.0f} negatives the true destination has mean rank {_fmt(m['mean_rank'], '.1f')} and MRR "
        f"{_fmt(m['mrr'])}, against {e['mean_rank']:.1f} and {e['mrr']:.3f} for random scores; the adjusted "
        f"mean rank index is AMRI = {_fmt(m['amri'])} (0 = chance, 1 = perfect): {strength}. "
        f"Hits@10 = {v['hits_at_10']:.1%} (chance {e['hits_at_10']:.1%}), Hits@1 = {v['hits_at_1']:.1%}. "
        f"[{escape(r.tag)}]")
    auc_v = m["auc"].verdict
    parts.append(
        f"A random true edge outscores a random negative with probability AUC = {_fmt(m['auc'])}"
        + (f", which the seed's checklist (AUC > 0.9 on held-out edges) reads as **{auc_v}**." if auc_v else ".")
        + (" AUC and MRR answer different questions: AUC counts every positive–negative pair, MRR only how close to "
           "the top each true edge lands, so a high AUC with a low MRR means true edges beat most negatives but "
           "rarely all of them." if v["auc"] > 0.85 and v["mrr"] < 0.3 else ""))
    tt = r.tie_table
    raw = tt[(tt.ranks == "raw") & (tt.ties == r.protocol["ties"])].iloc[0]
    fil = tt[(tt.ranks == "filtered") & (tt.ties == r.protocol["ties"])].iloc[0]
    opt = tt[(tt.ranks == ("filtered" if r.protocol["filtered"] else "raw")) & (tt.ties == "optimistic")].iloc[0]
    pes = tt[(tt.ranks == ("filtered" if r.protocol["filtered"] else "raw")) & (tt.ties == "pessimistic")].iloc[0]
    q = r.quality
    parts.append(
        f"Raw and filtered ranks {'differ little' if abs(raw.MRR - fil.MRR) < 0.01 else 'differ'}: MRR {raw.MRR:.3f} raw "
        f"vs {fil.MRR:.3f} filtered, because {q.false_negative_rate:.2%} of the negatives ({q.n_false:,} of "
        f"{q.n_negatives:,}) are real edges of the graph. "
        + _ties_sentence(r.cs.ranks(r.protocol["filtered"]), opt.MRR, pes.MRR))
    rel = r.relation_table
    per = rel[~rel.relation.str.contains("average|macro")] if len(rel) > 1 else rel.iloc[:0]
    if len(per) > 1:
        lo, hi = per.loc[per.AMRI.idxmin()], per.loc[per.AMRI.idxmax()]
        text = (f"By relation, AMRI ranges from {lo.AMRI:.3f} ({escape(lo.relation)}, {int(lo['test edges']):,} test "
                f"edges) to {hi.AMRI:.3f} ({escape(hi.relation)}).")
        if lo.AMRI < 0:
            text += (f" **For {escape(lo.relation)} edges the vectors do worse than chance**: negatives outscore the true "
                     "destination. This happens when the negatives are drawn from every kind of entity and the "
                     "source's own kind sits in a shared direction (see the isotropy chapter): any entity of that kind "
                     "then beats the true destination. Type-consistent negatives (`negative_pool = \"destinations\"`, "
                     "corrupting only with entities that are destinations of the same relation, as PBG's entity types "
                     "do) separate this effect from the ranking quality.")
        parts.append(text)
    if r.baselines is not None and len(r.baselines) > 1:
        b = r.baselines
        emb = b[b.name == "embedding"].iloc[0]
        heur = b[b.name != "embedding"]
        best = heur.loc[heur.MRR.idxmax()]
        lead = emb.MRR - best.MRR
        parts.append(
            f"Against structure alone (on {r.baseline_queries:,} test edges, heuristics computed on the training "
            f"graph): the embedding's MRR is {emb.MRR:.3f}, the best heuristic ({HEURISTIC_SHORT[best['name']]}) "
            f"reaches {best.MRR:.3f}. "
            + ("The vectors clearly add information beyond the graph's local structure." if lead > 0.05 else
               "The vectors do about as well as a trivial structural score." if lead > -0.05 else
               "**A trivial structural score beats the vectors**: they miss structure that common neighbours capture."))
    if r.probes is not None:
        pt = r.probes.table.set_index("name")
        parts.append(
            f"As a classifier (1:1 negatives), the best edge operator is {OPERATOR_LABELS[r.probes.best]} with ROC-AUC "
            f"{_fmt(m['probe_roc_auc'])} and average precision {_fmt(m['probe_average_precision'])}; the untrained "
            f"{SCORE_NAMES[r.protocol['score']]} gives ROC-AUC {pt.loc['score', 'ROC-AUC']:.3f}. "
            + ("A trained probe doing much better means the information is there but the chosen score does not read "
               "it out." if pt.loc[r.probes.best, "ROC-AUC"] - pt.loc["score", "ROC-AUC"] > 0.05 else
               "The fixed score already reads out most of what a trained probe finds."))
    parts.append(
        f"Negative quality (seed 000 §219.2): Cohen's d between positive and negative scores is "
        f"{_fmt(m['negative_score_cohens_d'], '.2f')}, quality band **{q.quality.replace('_', ' ')}**.")
    return "\n\n".join(parts)


def _ties_sentence(rk: Ranks, mrr_opt: float, mrr_pess: float) -> str:
    share = float((rk.optimistic != rk.pessimistic).mean())
    if share == 0:
        return "No positive ties with any of its negatives, so the tie policy does not matter here."
    if abs(mrr_opt - mrr_pess) < 0.005:
        return (f"{share:.2%} of the test edges tie with some negative; the tie policy barely matters here (MRR "
                f"{mrr_opt:.4f} optimistic vs {mrr_pess:.4f} pessimistic).")
    return (f"**Ties matter**: {share:.1%} of the test edges tie with some negative, and MRR is {mrr_opt:.3f} optimistic "
            f"vs {mrr_pess:.3f} pessimistic; the realistic rank is the fair middle, and a number reported without its "
            "tie policy is ambiguous.")


def quality_table(q: NegativeQuality) -> pd.DataFrame:
    """Seed 000 Table 2 ("Negative Sampling Quality Metrics"), with tests and the false-negative rate."""
    rows = [("Positive score (mean ± sd)", f"{q.pos_mean:.3f} ± {q.pos_sd:.3f}"),
            ("Negative score (mean ± sd)", f"{q.neg_mean:.3f} ± {q.neg_sd:.3f}"),
            ("Separation (mean difference)", f"{q.pos_mean - q.neg_mean:.3f}"),
            ("Cohen's d (pooled sd)", f"{q.cohens_d:.3f} (95 % CI {q.d_ci[0]:.3f} to {q.d_ci[1]:.3f})"),
            ("Cohen's d, seed's variant (mean of the two variances)", f"{q.d_seed:.3f}"),
            ("Quality band (seed 000 §219.2)", q.quality.replace("_", " ")),
            (f"KS statistic (p-value; {q.test_sample:,} per side)", f"{q.ks_statistic:.3f} (p = {q.ks_pvalue:.2g})"),
            ("Mann–Whitney U / (n₊n₋) (one-sided p)", f"{q.mw_auc:.3f} (p = {q.mw_pvalue:.2g})"),
            ("False-negative rate (negatives that are edges)",
             f"{q.false_negative_rate:.2%} ({q.n_false:,} of {q.n_negatives:,}; 95 % CI "
             f"{q.fnr_ci[0]:.2%} to {q.fnr_ci[1]:.2%})"),
            ("Seed's potential false negatives (negatives above the 25th percentile of positives)",
             f"{q.potential_false_negatives:.1%}")]
    return pd.DataFrame(rows, columns=["quantity", "value"])


def probe_display_table(p: ProbeResult) -> pd.DataFrame:
    return p.table.drop(columns=["name", "_auc_ci", "_ap_ci"])


def baseline_display_table(b: pd.DataFrame) -> pd.DataFrame:
    return b.drop(columns=["name"])


def heuristic_definitions() -> str:
    """The heuristics' formulas (markdown), :math:`N(x)` the neighbours of x in the training graph."""
    return ("**Heuristics** ($N(x)$: neighbours of $x$ in the training graph, edges undirected; $C_{uv}$: the "
            "neighbours that $u$ and $v$ share): "
            + "; ".join(f"{HEURISTIC_SHORT[k]} ${f}$" for k, f in HEURISTIC_FORMULAS.items()) + ".")


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def rank_figure(r: LinkPredictionResult) -> plt.Figure:
    """Left: distribution of the ranks against uniform (chance). Right: Hits@k for every k."""
    ranks, N = r.ranks, r.n_candidates
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.6))
    top = int(N.max())
    n_bins = int(min(top, 50))
    edges = np.linspace(0.5, top + 0.5, n_bins + 1)
    a.hist(ranks, bins=edges, color=PALETTE["data"], alpha=0.8, label="this embedding set")
    # expected count per bin when every rank is uniform on 1..N_i
    expected = sum(np.clip(np.minimum(edges[1:], n + 0.5) - np.maximum(edges[:-1], 0.5), 0, None) / n * c
                   for n, c in zip(*np.unique(N, return_counts=True)))
    a.stairs(expected, edges, color=PALETTE["reference"], lw=1.4, label="random scores (uniform ranks)")
    a.set(xlabel="Rank of the true destination (1 = best)", ylabel="Test edges", title="Rank distribution",
          xlim=(0.5, top + 0.5))
    a.legend(fontsize=8.5)
    k = np.arange(1, top + 1)
    hits = np.searchsorted(np.sort(ranks), k, side="right") / len(ranks)
    b.plot(k, hits, color=PALETTE["data"], lw=1.8, label="this embedding set")
    b.plot(k, np.minimum(k, top) / top, color=PALETTE["reference"], ls="--", lw=1.2, label="random scores")
    for kk in KS:
        if kk <= top:
            b.axvline(kk, color=PALETTE["muted"], ls=":", lw=0.8)
    b.set(xscale="log", xlabel="k", ylabel="Hits@k (share of ranks ≤ k)", ylim=(0, 1.02), title="Hits@k for every k")
    b.legend(fontsize=8.5, loc="upper left")
    return fig


def probe_curves_figure(p: ProbeResult) -> plt.Figure:
    """ROC and precision–recall curves of every probe and of the raw score (1:1 test pairs)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    colors = dict(zip(OPERATORS, [PALETTE["data"], PALETTE["accent"], "#7b4ea3", "#2b8a8a"]), score=PALETTE["reference"])
    t = p.table.set_index("name")
    for name, c in p.curves.items():
        lw, alpha = (2.2, 1.0) if name in (p.best, "score") else (1.0, 0.6)
        short = "raw score" if name == "score" else name.replace("_", "-")
        a.plot(c["fpr"], c["tpr"], color=colors[name], lw=lw, alpha=alpha,
               label=f"{short} (AUC {t.loc[name, 'ROC-AUC']:.3f})")
        b.plot(c["recall"], c["precision"], color=colors[name], lw=lw, alpha=alpha,
               label=f"{short} (AP {t.loc[name, 'average precision']:.3f})")
    a.plot([0, 1], [0, 1], color=PALETTE["muted"], ls=":", lw=1, label="chance")
    a.set(xlabel="False-positive rate", ylabel="True-positive rate", title="ROC curves", xlim=(0, 1), ylim=(0, 1.01))
    b.axhline(0.5, color=PALETTE["muted"], ls=":", lw=1, label="chance (1:1)")
    b.set(xlabel="Recall", ylabel="Precision", title="Precision–recall curves", xlim=(0, 1), ylim=(0, 1.01))
    a.legend(fontsize=8, loc="lower right")
    b.legend(fontsize=8, loc="lower left")
    return fig


def separation_figure(r: LinkPredictionResult, seed: int = 0) -> plt.Figure:
    """Positive vs negative score distributions (histograms and empirical CDFs, KS distance)."""
    pos, neg = r.cs.pooled(False)
    rng = np.random.default_rng([seed, 90, 7])
    if len(neg) > TEST_SAMPLE:
        neg = rng.choice(neg, TEST_SAMPLE, replace=False)
    q = r.quality
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.5))
    lo, hi = np.percentile(np.r_[pos, neg], [0.5, 99.5])
    bins = np.linspace(lo, hi, 60)
    a.hist(neg, bins=bins, density=True, alpha=0.55, color=PALETTE["reference"], label="negatives")
    a.hist(pos, bins=bins, density=True, alpha=0.55, color=PALETTE["data"], label="positives (test edges)")
    a.axvline(q.neg_mean, color=PALETTE["reference"], ls="--", lw=1.2)
    a.axvline(q.pos_mean, color=PALETTE["data"], ls="--", lw=1.2)
    a.set(xlabel=f"Score ({SCORE_NAMES[r.protocol['score']]})", ylabel="Density",
          title=f"Score distributions (Cohen's d = {q.cohens_d:.2f})")
    a.legend(fontsize=8.5)
    for x, c, lab in ((neg, PALETTE["reference"], "negatives"), (pos, PALETTE["data"], "positives")):
        xs = np.sort(x)
        b.plot(xs, np.arange(1, len(xs) + 1) / len(xs), color=c, lw=1.6, label=lab)
    b.set(xlabel="Score", ylabel="Cumulative share", title=f"Empirical CDFs (KS = {q.ks_statistic:.3f})")
    b.legend(fontsize=8.5, loc="lower right")
    return fig


# ---------------------------------------------------------------------------------------------
# Temporal link prediction (seed 000 §218.2)
# ---------------------------------------------------------------------------------------------

TEMPORAL_METRICS = {
    "temporal_mrr": ("MRR after the cut", "higher", r"\frac1B \sum_{(u,v,t) : t \ge t_c} 1/r", SEED_002 + "; seed 000 §218.2",
                     None),
    "temporal_hits_at_10": ("Hits@10 after the cut", "higher", r"\frac1B \sum [r \le 10]", SEED_002, None),
    "temporal_auc": ("AUC after the cut", "higher", r"P(s^+ > s^-) + \tfrac12 P(s^+ = s^-)", SEED_002, None),
    "temporal_amri": ("AMRI after the cut", "higher", r"1 - \frac{\mathrm{MR} - 1}{\mathbb{E}[\mathrm{MR}] - 1}",
                      PYKEEN, None),
    "mrr_change_over_horizon": ("MRR change, first to last horizon", "higher",
                                r"\mathrm{MRR}_{\text{last bin}} - \mathrm{MRR}_{\text{first bin}}",
                                "seed 000 §218.2.5 (stability across horizons)", None),
    "random_split_mrr_gap": ("MRR gap, random split − temporal split", "lower",
                             r"\mathrm{MRR}_{\text{random}} - \mathrm{MRR}_{\text{temporal}}",
                             "seed 000 §218.2.5 (comparison to random splits)", None),
}


@dataclass(frozen=True)
class TemporalResult:
    """Everything the temporal chapter shows."""

    values: dict
    metrics: dict
    tag: str
    cut: float
    is_date: bool
    horizon: pd.DataFrame
    cuts: pd.DataFrame
    leakage: pd.DataFrame
    times: np.ndarray
    bin_edges: np.ndarray
    data: LinkData
    heuristic: str
    info: dict = field(default_factory=dict)


def _unit(is_date: bool, span: float) -> tuple[float, str]:
    if not is_date:
        return 1.0, "time units"
    return (86400.0, "days") if span >= 2 * 86400 else (3600.0, "hours")


def _bin_row(label, idx, cs: CandidateScores, ties, filtered, h: Ranks | None, hidx, level, seed) -> dict:
    rk = cs.ranks(filtered).take(idx)
    v, e = _rank_values(rk, ties)
    lo, hi, _ = mean_ci(1.0 / rk.get(ties), level, seed=seed)
    pos, neg = cs.pooled(filtered, idx)
    row = {"horizon": label, "test edges": len(idx), "MRR": v["mrr"], "MRR low": lo, "MRR high": hi,
           "Hits@10": v["hits_at_10"], "AUC": auc_delong(pos, neg)[0], "AMRI": adjust("mean_rank", v["mean_rank"], e),
           "chance MRR": e["mrr"]}
    if h is not None:
        row["heuristic MRR"] = rank_metrics(h.take(hidx).get(ties))["mrr"] if len(hidx) else float("nan")
    return row


def evaluate_temporal(X, edges: EdgeList, n_entities: int, *, train_fraction: float = 0.8, n_bins: int = 5,
                      cut_fractions=(0.5, 0.6, 0.7, 0.8, 0.9), score: str = "dot", ties: str = "realistic",
                      filtered: bool = False, n_negatives: int = 100, strategy: str = "uniform",
                      pool: str = "entities", heuristic: str = "adamic_adar", max_heuristic_queries: int | None = 2000,
                      level: float = DEFAULT_LEVEL, seed: int = 0, device="auto") -> TemporalResult:
    """Temporal link prediction: train strictly before a cut, test after it, by horizon.

    * the cut is the time of the ``train_fraction`` quantile edge (seed 000 §218.2.3); test edges are
      binned into ``n_bins`` equal-width horizons (time since the cut), and a sample of training
      edges is scored the same way as a "before the cut" reference;
    * the same protocol at each of ``cut_fractions`` (seed 000 §218.2.1, multiple horizons);
    * a seeded random split with the same test share, for the leakage comparison (§218.2.2).

    The vectors are fixed; only ``heuristic`` (on the graph before the cut) is re-fitted per split.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    if not edges.has_time:
        raise ValueError("evaluate_temporal needs timestamps")

    def run(data: LinkData):
        cs = score_candidates(X, data.test.src, data.candidates, score=score, known=data.known, rel=data.test_rel,
                              device=dev)
        rows = _sample_rows(len(data.test), max_heuristic_queries, seed)
        keep = None if not filtered or cs.removed is None else ~cs.removed[rows]
        h = heuristic_ranks(data.train, n_entities, data.test.src[rows], data.candidates[rows], keep, (heuristic,))
        return cs, rows, h[heuristic]

    kw = dict(n_negatives=n_negatives, strategy=strategy, pool=pool, seed=seed)
    data = build_link_data(edges, n_entities, split="temporal", test_fraction=1 - train_fraction, **kw)
    cs, hrows, hr = run(data)
    cut = data.cut
    dt = data.test.time - cut
    span = float(dt.max()) if len(dt) else 0.0
    scale, unit = _unit(edges.time_is_date, span)
    bin_edges = np.linspace(0, span, n_bins + 1) if span > 0 else np.array([0.0, 1.0])
    which = np.clip(np.searchsorted(bin_edges, dt, side="right") - 1, 0, len(bin_edges) - 2)
    hwhich = which[hrows]
    # a "before the cut" reference: training edges scored by the same protocol
    tr_rows = _sample_rows(len(data.train), len(data.test), seed + 2)
    ref = build_link_data(edges, n_entities, test=data.train.take(tr_rows), **kw)
    ref = replace(ref, train=data.train, train_rel=data.train_rel, known=data.known,
                  split="training edges before the cut")
    ref_cs = score_candidates(X, ref.test.src, ref.candidates, score=score, known=data.known, rel=ref.test_rel, device=dev)
    rows = [_bin_row("before the cut (training edges)", np.arange(len(ref.test)), ref_cs, ties, filtered, None, [],
                     level, seed)]
    for b in range(len(bin_edges) - 1):
        idx = np.flatnonzero(which == b)
        if not len(idx):
            continue
        label = f"{bin_edges[b] / scale:.0f}–{bin_edges[b + 1] / scale:.0f} {unit}"
        row = _bin_row(label, idx, cs, ties, filtered, hr, np.flatnonzero(hwhich == b), level, seed)
        row["mid"] = (bin_edges[b] + bin_edges[b + 1]) / 2 / scale
        rows.append(row)
    horizon = pd.DataFrame(rows)
    # several cuts
    cut_rows = []
    for f in cut_fractions:
        try:
            d_f = build_link_data(edges, n_entities, split="temporal", test_fraction=1 - f, **kw)
        except Exception:
            continue
        c_f, r_f, h_f = run(d_f)
        v, e = _rank_values(c_f.ranks(filtered), ties)
        cut_rows.append({"train share": f, "cut": format_time(d_f.cut, edges.time_is_date), "train edges": len(d_f.train),
                         "test edges": len(d_f.test), "MRR (embedding)": v["mrr"], "Hits@10": v["hits_at_10"],
                         "AUC": auc_delong(*c_f.pooled(filtered))[0],
                         f"MRR ({heuristic.replace('_', '–')}, graph before cut)": rank_metrics(h_f.get(ties))["mrr"]})
    # random split with the same test share (leakage comparison)
    rnd = build_link_data(edges, n_entities, split="random", test_fraction=1 - train_fraction, **kw)
    rcs, rrows, rh = run(rnd)
    rv, _ = _rank_values(rcs.ranks(filtered), ties)
    tv, te = _rank_values(cs.ranks(filtered), ties)
    h_t, h_r = rank_metrics(hr.get(ties))["mrr"], rank_metrics(rh.get(ties))["mrr"]
    leakage = pd.DataFrame([
        {"split": "temporal (train before the cut)", "test edges": len(data.test), "MRR (embedding)": tv["mrr"],
         f"MRR ({heuristic.replace('_', '–')} on train graph)": h_t},
        {"split": f"random {train_fraction:.0%}/{1 - train_fraction:.0%} (seed {seed})", "test edges": len(rnd.test),
         "MRR (embedding)": rv["mrr"], f"MRR ({heuristic.replace('_', '–')} on train graph)": h_r}])
    # metrics
    r = cs.ranks(filtered).get(ties)
    values = {"temporal_mrr": tv["mrr"], "temporal_hits_at_10": tv["hits_at_10"]}
    auc, alo, ahi = auc_delong(*cs.pooled(filtered), level, device=dev)
    values["temporal_auc"] = auc
    values["temporal_amri"] = adjust("mean_rank", tv["mean_rank"], te)
    cis = {"temporal_mrr": mean_ci(1.0 / r, level, seed=seed),
           "temporal_hits_at_10": proportion_ci(r <= 10, level),
           "temporal_auc": (alo, ahi, f"{level:.0%} DeLong interval")}
    lo, hi, how = mean_ci(r, level, seed=seed)
    a, b = adjust("mean_rank", lo, te), adjust("mean_rank", hi, te)
    cis["temporal_amri"] = (min(a, b), max(a, b), how + ", mapped through the chance adjustment")
    bins = horizon.iloc[1:]
    if len(bins) >= 2:
        first, last = bins.iloc[0], bins.iloc[-1]
        values["mrr_change_over_horizon"] = float(last.MRR - first.MRR)
        se = math.hypot((first["MRR high"] - first["MRR low"]) / (2 * 1.959964),
                        (last["MRR high"] - last["MRR low"]) / (2 * 1.959964))
        cis["mrr_change_over_horizon"] = (*normal_ci(values["mrr_change_over_horizon"], se, level),
                                          f"{level:.0%} normal interval from the two bins' independent intervals")
    rr = rcs.ranks(filtered).get(ties)
    values["random_split_mrr_gap"] = float(rv["mrr"] - tv["mrr"])
    se = math.sqrt((1 / r).var(ddof=1) / len(r) + (1 / rr).var(ddof=1) / len(rr))
    cis["random_split_mrr_gap"] = (*normal_ci(values["random_split_mrr_gap"], se, level),
                                   f"{level:.0%} normal interval (independent samples)")
    tag = protocol_tag(score, ties, filtered, data)
    metrics = {}
    for name, (label, direction, formula, ref_, quantity) in TEMPORAL_METRICS.items():
        if name not in values:
            continue
        lo, hi, how = cis.get(name, (None, None, ""))
        metrics[name] = Metric(name=name, value=values[name], direction=direction, reference=ref_, ci_low=lo,
                               ci_high=hi, verdict=verdict(quantity, values[name]) if quantity else None,
                               label=f"{label} [{tag}]", formula=formula, ci_method=how)
    return TemporalResult(values=values, metrics=metrics, tag=tag, cut=cut, is_date=edges.time_is_date,
                          horizon=horizon, cuts=pd.DataFrame(cut_rows), leakage=leakage, times=edges.time,
                          bin_edges=cut + bin_edges, data=data, heuristic=heuristic,
                          info=dict(unit=unit, scale=scale, heuristic_queries=len(hrows), device=str(dev)))


def temporal_protocol_markdown(t: TemporalResult) -> str:
    """The temporal protocol in words."""
    d = t.data
    return "\n".join([
        f"- **Cut**: {format_time(t.cut, t.is_date)}, the time of the edge at the "
        f"{len(d.train) / (len(d.train) + len(d.test)):.0%} quantile; {len(d.train):,} training edges are strictly "
        f"before it, {len(d.test):,} test edges at or after it (seed 000 §218.2.1). No random split is used.",
        f"- **Horizons**: the test edges are binned by time since the cut into {len(t.horizon) - 1} equal-width bins; "
        "the first row scores a sample of training edges the same way, as a reference.",
        f"- **Negatives**: {d.negatives}; **ranks**: {escape(t.tag)}.",
        f"- **Heuristic**: {HEURISTIC_SHORT[t.heuristic]} (${HEURISTIC_FORMULAS[t.heuristic]}$, $N(x)$ the neighbours "
        "of $x$, $C_{uv}$ those shared by $u$ and $v$) on the graph of edges before the cut "
        f"({t.info['heuristic_queries']:,} test edges).",
    ])


def temporal_narrative(t: TemporalResult) -> str:
    """What the temporal numbers say (markdown), including why random splits leak."""
    v, m = t.values, t.metrics
    h = t.horizon
    parts = [f"After the cut the vectors reach MRR {_fmt(m['temporal_mrr'])}, Hits@10 {v['temporal_hits_at_10']:.1%} and "
             f"AUC {_fmt(m['temporal_auc'])} (AMRI {v['temporal_amri']:.3f}). "
             f"On training edges before the cut, scored the same way, MRR is {h.iloc[0].MRR:.3f}."]
    if "mrr_change_over_horizon" in v:
        ch = m["mrr_change_over_horizon"]
        first, last = h.iloc[1], h.iloc[-1]
        sig = ch.ci_high < 0 or ch.ci_low > 0
        parts.append(
            f"From the first horizon ({escape(first.horizon)}) to the last ({escape(last.horizon)}) MRR moves from "
            f"{first.MRR:.3f} to {last.MRR:.3f}, a change of {_fmt(ch)}. "
            + (("**Performance decays with the horizon**: the later an edge forms, the less the vectors anticipate it, "
                "the signature of concept drift (seed 000 §218.2.5). Re-train or refresh the vectors more often than "
                "the span over which the drop appears." if ch.value < 0 else
                "Performance rises with the horizon.") if sig else
               "The change is within the noise: performance is stable across these horizons."))
    gap = m["random_split_mrr_gap"]
    lk = t.leakage
    hcol = [c for c in lk.columns if c.startswith("MRR (") and "embedding" not in c][0]
    parts.append(
        f"**Why random splits leak** (seed 000 §218.2.2). A random split puts future edges in training and past edges in "
        f"test: a model, or a structural heuristic, trained on that graph sees neighbourhoods that did not exist when "
        f"the test edges formed (direct leakage), and the graph's degree and clustering structure reflect its future "
        f"(structural leakage). Here a random split with the same test share gives MRR {lk.iloc[1]['MRR (embedding)']:.3f} "
        f"for the vectors against {lk.iloc[0]['MRR (embedding)']:.3f} under the temporal split (gap {_fmt(gap)}), and "
        f"{lk.iloc[1][hcol]:.3f} vs {lk.iloc[0][hcol]:.3f} for {HEURISTIC_SHORT[t.heuristic]} "
        "fitted on the training graph. "
        + ("The random split looks better: that optimism is what a random split would have reported. "
           if gap.value > 0 and gap.ci_low > 0 else "")
        + "The vectors themselves are fixed, so these numbers are honest only if they were trained on edges before the "
          "cut; the report cannot check that. If they were trained on all edges, every number here measures "
          "memorisation rather than prediction.")
    return "\n\n".join(parts)


def temporal_unavailable(edges: EdgeList | None) -> str:
    """Why the temporal chapter cannot run, and what would enable it (markdown)."""
    return ("The edge list has no `timestamp` column, so there is no past and future to separate. Add a `timestamp` "
            "column to `edges` (a number such as a Unix time, or a date/time such as `2024-03-05` or "
            "`2024-03-05T14:00`) with the time each edge formed; this chapter will then train before a cut and test "
            "after it, by horizon. The link-prediction chapter meanwhile uses a seeded random split"
            + (f" of the {len(edges):,} edges." if edges is not None else "."))


def horizon_figure(t: TemporalResult) -> plt.Figure:
    """Left: edges over time with the cut and the horizon bins. Right: MRR (and chance, heuristic) by horizon."""
    scale, unit = t.info["scale"], t.info["unit"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.7))
    x = (t.times - t.cut) / scale
    test_edges = (t.bin_edges - t.cut) / scale
    width = float(test_edges[1] - test_edges[0])
    back = -width * np.arange(int(np.ceil(-x.min() / width)) + 1)[::-1] if width > 0 else np.array([x.min(), 0.0])
    a.hist(x[x < 0], bins=back, color=PALETTE["muted"], alpha=0.8, label="training edges")
    a.hist(x[x >= 0], bins=test_edges, color=PALETTE["data"], alpha=0.8, label="test edges (horizon bins)")
    a.axvline(0, color=PALETTE["reference"], lw=1.5, label="cut")
    a.set(xlabel=f"Time relative to the cut ({unit})", ylabel="Edges", title="Edges over time")
    a.legend(fontsize=8.5, loc="lower left", framealpha=0.95)
    h = t.horizon.iloc[1:]
    ref = t.horizon.iloc[0]
    yerr = np.vstack([h.MRR - h["MRR low"], h["MRR high"] - h.MRR])
    b.errorbar(h["mid"], h.MRR, yerr=yerr, fmt="o-", color=PALETTE["data"], capsize=3, lw=1.8, label="vectors (95 % CI)")
    if "heuristic MRR" in h:
        b.plot(h["mid"], h["heuristic MRR"], "s--", color=PALETTE["accent"], lw=1.2,
               label=f"{t.heuristic.replace('_', '–')} (graph before cut)")
    b.plot(h["mid"], h["chance MRR"], ":", color=PALETTE["reference"], lw=1.2, label="random scores")
    b.axhline(ref.MRR, color=PALETTE["muted"], ls="--", lw=1, label="training edges (before cut)")
    b.set(xlabel=f"Horizon: time since the cut ({unit})", ylabel="MRR", title="MRR by horizon",
          ylim=(0, max(1e-3, float(np.nanmax(np.r_[h["MRR high"], ref.MRR]))) * 1.15))
    b.legend(fontsize=8, loc="best")
    return fig
