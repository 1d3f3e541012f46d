r"""Model swap impact: what switching an index from model A's vectors to model B's changes for its users.

Two models' vectors of the same ids (their dimensions may differ) are compared where users meet them:

* **Neighbour lists** (:func:`neighbour_swap`): per shared id, the overlap of its top-k cosine neighbours among
  the shared ids under A and under B, :math:`|N_A(i) \cap N_B(i)| / k`, its distribution, and the share of ids
  whose list changes by more than half (overlap below 0.5).
* **Query results** (:func:`query_swap`): with queries, per query the overlap of its top-k results in A and B.
* **The similarity scale** (:func:`similarity_scale`): cosines of the same seeded pairs of ids under A and B, their
  quantiles, Spearman's :math:`\rho` between the two, and the quantile map that carries a threshold of A to the
  value of B that admits the same share of pairs: :math:`t_B = F_B^{-1}(F_A(t_A))`. A filter "similarity ≥ 0.7"
  tuned on A keeps a different share of pairs under B unless it is moved to :math:`t_B`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..kernels import as_numpy, knn, neighbour_sets_overlap, pair_cosines

#: quantiles of the overlap and of the cosine scale that the tables show
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
#: thresholds of A carried to B
THRESHOLDS = (0.3, 0.5, 0.7, 0.8, 0.9)
#: seeded pairs of ids for the similarity scale
SCALE_PAIRS = 100_000
#: an id's list "changes by more than half" below this overlap
HALF = 0.5


@dataclass(frozen=True)
class NeighbourSwap:
    """Per shared id, the overlap of its top-k lists under A and B (``overlap``, in ``ids`` order); with every id's
    list, each id's k-occurrence (how many lists hold it) under A and under B."""

    k: int
    ids: np.ndarray
    overlap: np.ndarray
    occurrence_a: np.ndarray | None = None
    occurrence_b: np.ndarray | None = None

    @property
    def changed_share(self) -> float:
        """The share of ids whose top-k list changes by more than half (overlap < 0.5)."""
        return float((self.overlap < HALF).mean()) if len(self.overlap) else float("nan")

    def summary(self) -> pd.DataFrame:
        """Mean and quantiles of the overlap, and the share of lists changed by more than half."""
        q = np.quantile(self.overlap, QUANTILES) if len(self.overlap) else [np.nan] * len(QUANTILES)
        return pd.DataFrame([{"ids": len(self.ids), "k": self.k, "mean overlap": float(np.mean(self.overlap)),
                              **{f"q{int(100 * p)}": float(v) for p, v in zip(QUANTILES, q)},
                              "changed by more than half": self.changed_share}])


    def histogram(self) -> pd.DataFrame:
        """How many ids keep 0, 1, …, k of their k neighbours: ``kept``, ``overlap`` (kept / k) and ``ids``."""
        kept = np.rint(self.overlap * self.k).astype(int)
        counts = np.bincount(kept, minlength=self.k + 1) if self.k else np.zeros(1, int)
        return pd.DataFrame({"kept": np.arange(len(counts)), "overlap": np.arange(len(counts)) / max(self.k, 1),
                             "ids": counts})


def neighbour_swap(A, B, ids, *, k: int = 10, rows=None, device="auto") -> NeighbourSwap:
    """The top-k cosine neighbour lists under ``A`` and under ``B`` (the same ids, row for row; the dimensions may
    differ), exact (:func:`~embeval_report.kernels.knn`: chunked, never an n × n matrix), and their overlap per id:
    of every row, or of ``rows`` only (indices; their neighbours are still sought among every row)."""
    A, B = as_numpy(A), as_numpy(B)
    if len(A) != len(B):
        raise ValueError(f"A and B need the same rows (the shared ids): {len(A)} vs {len(B)}")
    k = min(k, len(A) - 1)
    ids = np.asarray(ids, dtype=object)
    if k < 1:
        return NeighbourSwap(0, ids[:0], np.zeros(0))
    if rows is None:
        ia, _ = knn(A, k, device=device, desc="neighbours under A")
        ib, _ = knn(B, k, device=device, desc="neighbours under B")
        return NeighbourSwap(k, ids, neighbour_sets_overlap(ia, ib), np.bincount(ia.ravel(), minlength=len(A)),
                             np.bincount(ib.ravel(), minlength=len(B)))
    rows = np.asarray(rows, dtype=np.int64)
    lists = []
    for X, name in ((A, "A"), (B, "B")):
        found, _ = knn(X, k + 1, queries=np.asarray(X[rows]), device=device, desc=f"neighbours under {name}")
        lists.append(_without_self(found, rows, k))
    return NeighbourSwap(k, ids[rows], neighbour_sets_overlap(*lists))


def mean_cosines(X, *, chunk: int = 65_536) -> np.ndarray:
    r"""Each row's mean cosine to the other rows, :math:`c_i = u_i\cdot(\sum_j u_j - u_i)/(n-1)` (unit rows
    :math:`u`; a zero row counts as cosine 0); their mean is the mean pairwise cosine (the APCS of the rows).
    Two passes over the rows in chunks: never an n × n matrix."""
    X = as_numpy(X)
    n = len(X)
    total = np.zeros(X.shape[1])
    for s in range(0, n, chunk):
        total += _unit(X[s:s + chunk]).sum(0)
    out = np.empty(n)
    for s in range(0, n, chunk):
        U = _unit(X[s:s + chunk])
        out[s:s + chunk] = (U @ total - (U * U).sum(1)) / max(n - 1, 1)
    return out


def _unit(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    norm = np.linalg.norm(X, axis=1, keepdims=True)
    return np.divide(X, norm, out=np.zeros_like(X), where=norm > 0)


def _without_self(found: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """Each row's k + 1 neighbours without the row itself (where it is not among them, the last one dropped)."""
    is_self = found == rows[:, None]
    is_self[~is_self.any(1), -1] = True
    return found[~is_self].reshape(len(found), k)


def query_swap(QA, CA, QB, CB, query_ids, *, k: int = 10, own=None, device="auto") -> pd.DataFrame:
    """Per query, the overlap of its top-k results among the corpus under A (``QA`` against ``CA``) and under B
    (``QB`` against ``CB``; the corpus rows in the same id order). ``own``: per query, the corpus row of its own
    document (-1: none), left out of its results (a retrieval set's ``exclude_self``)."""
    n = len(as_numpy(CA))
    drop = own is not None
    k = min(k, n - 1 if drop else n)
    lists = []
    for Q, C, name in ((QA, CA, "A"), (QB, CB, "B")):
        found, _ = knn(C, k + drop, queries=Q, device=device, desc=f"queries under {name}")
        lists.append(_without_self(found, np.asarray(own, dtype=np.int64), k) if drop else found)
    return pd.DataFrame({"query": np.asarray(query_ids, dtype=object), "overlap": neighbour_sets_overlap(*lists)})


@dataclass(frozen=True)
class SimilarityScale:
    """Cosines of the same pairs under A and B: their quantiles, rank correlation and the threshold map."""

    pairs: int
    spearman: float
    quantiles: pd.DataFrame    # quantile, A, B
    thresholds: pd.DataFrame   # threshold in A, share of pairs at or above it, the same share's threshold in B


def similarity_scale(A, B, *, pairs: int = SCALE_PAIRS, seed: int = 0, thresholds=THRESHOLDS,
                     device="auto") -> SimilarityScale:
    """The cosine scale of ``A`` against ``B`` over the same seeded pairs of distinct rows (see the module
    docstring); at most :data:`SCALE_PAIRS` pairs, all pairs of a small set."""
    A, B = as_numpy(A), as_numpy(B)
    n = len(A)
    if n < 2:
        raise ValueError("the similarity scale needs at least 2 shared ids")
    total = n * (n - 1) // 2
    if total <= pairs:
        i, j = np.triu_indices(n, 1)
    else:
        rng = np.random.default_rng([seed, 43])
        i = rng.integers(0, n, pairs)
        j = (i + rng.integers(1, n, pairs)) % n
    ca, cb = pair_cosines(A, i, j, device=device), pair_cosines(B, i, j, device=device)
    q = pd.DataFrame({"quantile": QUANTILES, "A": np.quantile(ca, QUANTILES), "B": np.quantile(cb, QUANTILES)})
    rows = []
    for t in thresholds:
        share = float((ca >= t).mean())
        rows.append({"threshold in A": t, "pairs at or above": share,
                     "same share in B": float(np.quantile(cb, 1 - share)) if 0 < share < 1 else np.nan})
    rho = float(sps.spearmanr(ca, cb).statistic) if len(ca) > 2 else float("nan")
    return SimilarityScale(len(ca), rho, q, pd.DataFrame(rows))
