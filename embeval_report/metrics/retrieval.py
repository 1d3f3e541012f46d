r"""Retrieval metrics (seed 001 §21.2): the exact rank of every judged relevant document in the
full-corpus ranking of its query, and trec_eval's per-query metrics with their means over queries.

**Ranking.** Each query ranks the whole corpus by cosine similarity (``metric="cosine"``) or by
the inner product (``"dot"``); with ``exclude_self`` a document whose id equals the query id is
left out of that query's ranking (BEIR's ``ignore_identical_ids``; a judgement of it is dropped and
counted, since it could never be retrieved). The *score* of a (query, document) pair is its float64
inner product of the float64 (unit, for cosine) vectors, summed as a fixed pairwise tree
(:func:`pair_scores`): bitwise the same for the same two vectors whatever the batch, so duplicate
documents tie exactly. The rank of document :math:`d` for query :math:`q` is

.. math:: r_q(d) = 1 + \#\{d' : s(q,d') > s(q,d)\} + \#\{d' : s(q,d') = s(q,d),\ d' \text{ before } d\},

**tie policy** ``ties="trec_eval"`` (default): among equal scores the document with the
lexicographically *larger* id comes first (trec_eval sorts by score, then by ``docno``
descending — ``strcmp`` on UTF-8 bytes, the same as Python's ``str`` order; pytrec_eval inherits
it), so ranks agree with trec_eval and pytrec_eval even on tied scores (ranx may order ties
otherwise); ``ties="index"``: the lower corpus row first (the order of
:func:`~embeval_report.kernels.knn`).

**Metrics** (trec_eval semantics; grade ``>= 1`` relevant, 0 judged non-relevant). For a query
with :math:`R_q \ge 1` relevant documents: ``recall_at_k`` (k = 1, 5, 10, 100) the share of them
ranked within k (trec_eval ``recall_k``); ``r_cap_at_10`` found within 10 over
:math:`\min(10, R_q)` (BEIR's capped recall); ``precision_at_k`` (k = 1, 5, 10) found over k, always
k (``P_k``); ``hit_rate_at_10`` whether any is within 10 (``success_10``); ``map`` average precision
over the whole ranking, :math:`\frac1{R_q}\sum_{d} P@r_q(d)` (``map``); ``map_at_100`` the same sum
cut at rank 100, still over :math:`R_q` (``map_cut_100``; seed 001's MAP@K instead divides by the
relevant documents found within K, which inflates it and is not computed here); ``mrr``
:math:`1/\min_d r_q(d)` uncut (``recip_rank``) and ``mrr_at_10`` (0 beyond rank 10);
``ndcg_at_10`` :math:`\mathrm{DCG}@10/\mathrm{IDCG}@10` with linear gain :math:`g` (the grade) and
discount :math:`\log_2(r + 1)`, the ideal list built from *all* the query's judged grades
(``ndcg_cut_10``; Järvelin & Kekäläinen 2002), and ``ndcg_at_10_exp`` the same with gain
:math:`2^g - 1` (Burges et al. 2005; seed 001 §21.2.5's formula; ranx ``ndcg_burges``).
Each mean is over the evaluated queries; queries whose judgements hold no relevant document are
excluded and counted (``protocol["n_without_relevant"]``), as are queries without judgements.
Each mean has a seeded bootstrap interval over queries (:func:`~embeval_report.stats.mean_ci`).

**Exact ranks without a score matrix** (:func:`rank_relevant`). No (queries x corpus) matrix is
built: query blocks are multiplied with corpus tiles in float32 (IEEE, TF32 off; GPU when present)
and, per tile, each document is placed among the query's sorted relevant scores (a comparison
loop for up to :data:`LOOP_SLOTS` relevant documents per query, ``searchsorted`` beyond; when few
documents lie above a block's lowest relevant scores, only those are placed): documents whose
float32 product is farther than the rounding bound
:math:`t_q = 2(d + 4)\,2^{-24}\lVert q\rVert\max_j\lVert c_j\rVert` from every relevant score are
certainly above or below each of them (the float32 product of d terms is within
:math:`(d + 2)\,2^{-24}\lVert q\rVert\lVert c\rVert` of the exact one); the few within the bound are
re-scored exactly (:func:`pair_scores`) and compared with the tie policy, as the relevant
documents are among themselves. The same tiles keep each query's running float32 top
``top_k + 16``, re-ranked exactly; when the 16 spare candidates cannot prove the list (a float32
near-tie at its end) that query's list comes from an exact scan. Memory: one tile of
:func:`~embeval_report.kernels.chunk_budget` bytes (GPU: a share of free memory), the float32
corpus on the device and two float64 numbers per vector; the exact re-scoring reads the input rows
(float64 on the CPU), so a memory-mapped input stays on disk.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from ..errors import InputError
from ..io.files import as_ids, check_unique
from ..io.qrels import qrels_frame
from ..kernels import as_numpy, chunk_rows, resolve_device
from ..kernels.device import exact_matmul, to_tensor
from ..progress import progress
from ..stats import DEFAULT_LEVEL, mean_ci
from .linkpred import record_metrics
from .spec import MetricSpec, specs

METRICS_KIND = ("cosine", "dot")
TIES = ("trec_eval", "index")
RECALL_KS = (1, 5, 10, 100)
PRECISION_KS = (1, 5, 10)
#: documents kept per query for display
TOP_K = 10
#: float32 candidates kept per query beyond ``top_k``, re-ranked exactly
SPARE = 16
#: unit of the bootstrap intervals
UNIT = "queries"
#: bytes per element of a (query block x corpus tile) in the counting pass
TILE_ELEMENT_BYTES = 48
#: a tile is placed whole when more than 1 / DENSE_SHARE of its documents lie above the lowest relevant score
DENSE_SHARE = 4
#: most relevant documents of a query in a block for which tiles are placed by a comparison loop
LOOP_SLOTS = 16
#: corpus columns per tile on the CPU (cache-friendly) and on a GPU
CPU_TILE_COLS = 4096
GPU_TILE_COLS = 262_144

_U32 = 2.0 ** -24


def _found(k):
    return r"|\{d \in \mathrm{rel}(q) : r_q(d) \le %d\}|" % k


_Q = r"\frac{1}{|Q|}\sum_{q \in Q}"
_NDCG = (r"%s \frac{\sum_{i \le 10} %s / \log_2(i + 1)}{\sum_{i \le 10} %s / \log_2(i + 1)}")


def _ref(section: str, trec: str) -> str:
    return f"seed 001 §{section}; trec_eval {trec} (pytrec_eval, ranx)"


SPECS = specs(
    *(MetricSpec(f"recall_at_{k}", f"Recall@{k}", "higher", rf"{_Q} \frac{{{_found(k)}}}{{R_q}}",
                 _ref("21.2.1", f"recall_{k}"), range=(0, 1)) for k in RECALL_KS),
    MetricSpec("r_cap_at_10", "Capped recall@10", "higher", rf"{_Q} \frac{{{_found(10)}}}{{\min(10, R_q)}}",
               "seed 001 §21.2.1; BEIR R_cap@10 (Thakur et al. 2021)", range=(0, 1)),
    *(MetricSpec(f"precision_at_{k}", f"Precision@{k}", "higher", rf"{_Q} \frac{{{_found(k)}}}{{{k}}}",
                 _ref("21.2.2", f"P_{k}"), range=(0, 1)) for k in PRECISION_KS),
    MetricSpec("hit_rate_at_10", "Hit rate@10", "higher", rf"{_Q} [\min_{{d \in \mathrm{{rel}}(q)}} r_q(d) \le 10]",
               _ref("21.2.1", "success_10"), range=(0, 1)),
    MetricSpec("map", "MAP", "higher",
               rf"{_Q} \frac{{1}}{{R_q}} \sum_{{d \in \mathrm{{rel}}(q)}} P@r_q(d)", _ref("21.2.3", "map"), range=(0, 1)),
    MetricSpec("map_at_100", "MAP@100", "higher",
               rf"{_Q} \frac{{1}}{{R_q}} \sum_{{d \in \mathrm{{rel}}(q),\, r_q(d) \le 100}} P@r_q(d)",
               _ref("21.2.3", "map_cut_100"), range=(0, 1)),
    MetricSpec("mrr", "MRR", "higher", rf"{_Q} \frac{{1}}{{\min_{{d \in \mathrm{{rel}}(q)}} r_q(d)}}",
               _ref("21.2.4", "recip_rank"), range=(0, 1)),
    MetricSpec("mrr_at_10", "MRR@10", "higher",
               rf"{_Q} \frac{{[\rho_q \le 10]}}{{\rho_q}},\ \rho_q = \min_{{d \in \mathrm{{rel}}(q)}} r_q(d)",
               "seed 001 §21.2.4; ranx mrr@10 (MS MARCO MRR@10)", range=(0, 1)),
    MetricSpec("ndcg_at_10", "nDCG@10 (linear gain)", "higher", _NDCG % (_Q, "g_{q,i}", "g^*_{q,i}"),
               _ref("21.2.5", "ndcg_cut_10") + "; Järvelin & Kekäläinen 2002", range=(0, 1)),
    MetricSpec("ndcg_at_10_exp", "nDCG@10 (exponential gain)", "higher",
               _NDCG % (_Q, "(2^{g_{q,i}} - 1)", "(2^{g^*_{q,i}} - 1)"),
               "seed 001 §21.2.5 (its gain 2^rel - 1); Burges et al. 2005; ranx ndcg_burges@10", range=(0, 1)),
)
METRICS = tuple(SPECS)


# ---------------------------------------------------------------------------------------------
# Exact pair scores
# ---------------------------------------------------------------------------------------------

def tree_sum(p: np.ndarray) -> np.ndarray:
    """Row sums of a 2-D float64 array as a fixed pairwise tree (zero-padded to a power of two):
    elementwise additions only, so a row's sum depends on its values alone, not on the batch."""
    p = np.asarray(p, np.float64)
    width = p.shape[1]
    size = 1 << max(0, (width - 1).bit_length())
    if size != width:
        p = np.concatenate([p, np.zeros((len(p), size - width))], axis=1)
    while p.shape[1] > 1:
        h = p.shape[1] // 2
        p = p[:, :h] + p[:, h:]
    return p[:, 0] if width else np.zeros(len(p))


def row_norms(X: np.ndarray, rows: int | None = None) -> np.ndarray:
    """float64 L2 norm of each row of ``X`` (by :func:`tree_sum`, chunked)."""
    n, d = X.shape
    rows = rows or chunk_rows(n, max(d, 1) * 8 * 4)
    out = np.empty(n)
    for s in range(0, n, rows):
        x = np.asarray(X[s:s + rows], np.float64)
        out[s:s + rows] = np.sqrt(tree_sum(x * x))
    return out


@dataclass(frozen=True)
class Space:
    """Vectors as the ranking sees them: the input rows, the float64 divisor of each row (its norm
    for cosine, zero rows kept zero; 1 for dot), and the norm of each scaled row."""

    X: np.ndarray
    scale: np.ndarray
    norm: np.ndarray  # of the scaled rows

    @classmethod
    def of(cls, X, metric: str) -> "Space":
        X = as_numpy(X)
        nrm = row_norms(X)
        if metric == "cosine":
            return cls(X, np.where(nrm > 0, nrm, 1.0), (nrm > 0).astype(float))
        return cls(X, np.ones(len(X)), nrm)

    def rows64(self, idx) -> np.ndarray:
        return np.asarray(self.X[idx], np.float64) / self.scale[idx, None]

    def float32_t(self, device: torch.device) -> torch.Tensor:
        """The vectors as float32 on ``device``, transposed to (d, n) (converted in chunks)."""
        n, d = self.X.shape
        out = torch.empty((d, n), dtype=torch.float32, device=device)
        rows = chunk_rows(n, max(d, 1) * 8 * 3)
        for s in range(0, n, rows):
            out[:, s:s + rows] = to_tensor(self.rows64(np.arange(s, min(n, s + rows))).astype(np.float32),
                                           dtype=torch.float32, device=device).T
        return out


def pair_scores(Q: Space, C: Space, qi, ci) -> np.ndarray:
    """The exact score of each pair ``(qi[p], ci[p])``: float64 products of the float64 (scaled)
    vectors, summed by :func:`tree_sum` (bitwise reproducible; chunked)."""
    qi, ci = np.asarray(qi, np.int64), np.asarray(ci, np.int64)
    d = Q.X.shape[1]
    out = np.empty(len(qi))
    rows = chunk_rows(len(qi), max(d, 1) * 8 * 6)
    for s in range(0, len(qi), rows):
        out[s:s + rows] = tree_sum(Q.rows64(qi[s:s + rows]) * C.rows64(ci[s:s + rows]))
    return out


def tie_keys(doc_ids, ties: str) -> np.ndarray:
    """Position of each document among equal scores (smaller first): ``trec_eval`` — ids in
    descending lexical order; ``index`` — the corpus row."""
    if ties == "index":
        return np.arange(len(doc_ids), dtype=np.int64)
    if ties != "trec_eval":
        raise ValueError(f"ties must be one of {TIES}, not {ties!r}")
    ids = np.asarray(doc_ids, dtype=object)
    order = np.argsort(ids, kind="stable")[::-1]
    keys = np.empty(len(ids), np.int64)
    keys[order] = np.arange(len(ids))
    return keys


# ---------------------------------------------------------------------------------------------
# Ranks of the relevant documents (blocked, exact)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RelevantRanks:
    """The exact rank and score of each relevant (query, document) pair, and each query's top list.

    ``top_rows`` (m, top_k) corpus rows in rank order (-1 where the corpus has fewer documents),
    ``top_scores`` their scores (NaN there); ``n_rescored`` pairs whose float32 product fell within
    the rounding bound of a relevant score and were re-scored exactly; ``n_top_scans`` queries whose
    top list needed an exact scan of the corpus.
    """

    ranks: np.ndarray
    scores: np.ndarray
    top_rows: np.ndarray
    top_scores: np.ndarray
    n_rescored: int
    n_top_scans: int


def _tile_shape(m: int, n: int, device: torch.device) -> tuple[int, int]:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cols = min(n, GPU_TILE_COLS)
        return int(max(1, min(m, int(free * 0.3) // (cols * TILE_ELEMENT_BYTES)))), cols
    cols = min(n, CPU_TILE_COLS)
    return chunk_rows(m, cols * TILE_ELEMENT_BYTES), cols


def rank_relevant(queries, corpus, pair_query, pair_doc, *, metric: str = "cosine", ties: str = "trec_eval",
                  doc_ids=None, exclude=None, top_k: int = TOP_K, device="auto",
                  desc: str | None = "retrieval ranks") -> RelevantRanks:
    """Exact rank of each relevant pair in its query's full-corpus ranking (see the module docstring).

    ``queries`` (m, d), ``corpus`` (n, d); ``pair_query`` / ``pair_doc`` (p,) the query and corpus
    row of each relevant pair (distinct pairs); ``doc_ids`` the corpus ids (needed for
    ``ties="trec_eval"``); ``exclude`` (m,) the corpus row left out of each query's ranking, -1 for
    none. Grade-0 and unjudged documents need no entry: every other document is ranked against the
    relevant ones. Returns :class:`RelevantRanks` (ranks 1-based, aligned with the pairs).
    """
    if metric not in METRICS_KIND:
        raise ValueError(f"metric must be one of {METRICS_KIND}, not {metric!r}")
    if ties == "trec_eval" and doc_ids is None:
        raise ValueError("ties='trec_eval' orders equal scores by document id: pass doc_ids")
    dev = resolve_device(device)
    Qs, Cs = Space.of(queries, metric), Space.of(corpus, metric)
    (m, d), n = Qs.X.shape, len(Cs.X)
    if Cs.X.shape[1] != d:
        raise ValueError(f"queries have {d} dimensions but the corpus has {Cs.X.shape[1]}")
    if n == 0:
        raise ValueError("the corpus is empty")
    pq, pd_ = np.asarray(pair_query, np.int64), np.asarray(pair_doc, np.int64)
    if len(pq) != len(pd_):
        raise ValueError("pair_query and pair_doc differ in length")
    excl = np.full(m, -1, np.int64) if exclude is None else np.asarray(exclude, np.int64)
    if len(pq) and (excl[pq] == pd_).any():
        raise ValueError("a relevant pair names the document excluded from its query's ranking")
    tk = tie_keys(np.arange(n) if ties == "index" else doc_ids, ties)
    if len(tk) != n:
        raise ValueError(f"{len(tk)} document ids for {n} corpus vectors")
    # the relevant pairs, their exact scores, sorted by (query, score) for searchsorted
    r64 = pair_scores(Qs, Cs, pq, pd_)
    order = np.lexsort((r64, pq))
    sq, sd, sr = pq[order], pd_[order], r64[order]
    q_start = np.searchsorted(sq, np.arange(m + 1))
    slot = np.arange(len(sq)) - q_start[sq]
    # relevant documents ahead of each other under the tie policy
    o2 = np.lexsort((tk[pd_], -r64, pq))
    before = np.empty(len(pq), np.int64)
    before[o2] = np.arange(len(pq)) - np.searchsorted(pq[o2], pq[o2])
    cmax = float(Cs.norm.max()) * (1 + 1e-12)
    qnorm = Qs.norm * (1 + 1e-12)
    tol = 2.0 * (d + 4) * _U32 * qnorm * cmax + 1e-30
    C32t = Cs.float32_t(dev)
    tk_t = torch.as_tensor(tk, device=dev)
    b, w = _tile_shape(m, n, dev)
    kk = min(top_k + SPARE, n)
    higher = np.zeros(len(sq), np.int64)
    top_rows = np.full((m, top_k), -1, np.int64)
    top_scores = np.full((m, top_k), np.nan)
    n_rescored = n_scans = 0
    starts = range(0, m, b)
    with exact_matmul():
        for s in (progress(starts, desc=desc, total=len(starts)) if desc else starts):
            e = min(m, s + b)
            res = _rank_block(Qs, Cs, C32t, tk_t, tk, s, e, sq, sd, sr, q_start, slot, excl, tol, w, kk, top_k, dev)
            higher[q_start[s]:q_start[e]] = res[0]
            top_rows[s:e], top_scores[s:e] = res[1], res[2]
            n_rescored += res[3]
            n_scans += res[4]
    ranks = np.empty(len(pq), np.int64)
    ranks[order] = 1 + higher
    ranks += before
    return RelevantRanks(ranks, r64, top_rows, top_scores, int(n_rescored), int(n_scans))


def _rank_block(Qs, Cs, C32t, tk_t, tk, s, e, sq, sd, sr, q_start, slot, excl, tol, w, kk, top_k, dev):
    """Ranks of the relevant pairs of queries ``s:e`` (numbers of documents above each, in the
    pairs' sorted order) and their top lists; see :func:`rank_relevant`."""
    b = e - s
    n = C32t.shape[1]
    p0, p1 = q_start[s], q_start[e]
    loc, col, sl = sq[p0:p1] - s, sd[p0:p1], slot[p0:p1]
    R = max(1, int(sl.max()) + 1) if p1 > p0 else 1
    r64 = np.full((b, R), np.inf)
    r64[loc, sl] = sr[p0:p1]
    rtk = np.zeros((b, R), np.int64)
    rtk[loc, sl] = tk[col]
    r32_t = torch.as_tensor(r64.astype(np.float32), device=dev)  # +inf padding; non-decreasing per row
    r64_t = torch.as_tensor(r64, device=dev)
    rtk_t = torch.as_tensor(rtk, device=dev)
    tol_t = torch.as_tensor(tol[s:e, None].astype(np.float32), device=dev)
    q32 = to_tensor(Qs.rows64(np.arange(s, e)).astype(np.float32), dtype=torch.float32, device=dev)
    ex = excl[s:e]
    hist = torch.zeros((b, R + 2), dtype=torch.int64, device=dev)
    exact_higher = torch.zeros((b, R), dtype=torch.int64, device=dev)
    top_v = torch.full((b, kk), -torch.inf, dtype=torch.float32, device=dev)
    top_i = torch.full((b, kk), -1, dtype=torch.int64, device=dev)
    ones = torch.ones((b, min(w, n)), dtype=torch.int64, device=dev)
    floor = r32_t[:, :1] - tol_t  # (b, 1): the lowest relevant score less the bound (+inf: no relevant)
    n_rescored = 0
    for j in range(0, n, w):
        wj = min(w, n - j)
        S = q32 @ C32t[:, j:j + wj]
        inside = (ex >= j) & (ex < j + wj)
        if inside.any():  # the query's own document is not ranked
            S[torch.as_tensor(np.flatnonzero(inside), device=dev), torch.as_tensor(ex[inside] - j, device=dev)] = -torch.inf
        at = (S > top_v[:, -1:]).any(1).nonzero()[:, 0]  # rows with a document above their running k-th
        if len(at):
            v, i = torch.topk(S[at], min(kk, wj), dim=1)
            v, pos = torch.topk(torch.cat([top_v[at], v], 1), kk, dim=1)
            top_i[at] = torch.cat([top_i[at], i + j], 1).gather(1, pos)
            top_v[at] = v
        here = (col >= j) & (col < j + wj)
        if here.any():  # relevant documents: ranked among themselves exactly, not counted here
            S[torch.as_tensor(loc[here], device=dev), torch.as_tensor(col[here] - j, device=dev)] = -torch.inf
        keep = S >= floor  # below the floor a document is certainly below every relevant one: bucket 0
        n_keep = int(keep.sum())
        if n_keep == 0:
            continue
        if n_keep * DENSE_SHARE > S.numel():  # most documents: place the whole tile
            lo, near = _place(S, r32_t, tol_t)
            hist.scatter_add_(1, torch.where(near, R + 1, lo), ones[:, :wj])
            near_r, near_c = near.nonzero(as_tuple=True)
        else:  # a few: place only those above the floor
            kr, kc = keep.nonzero(as_tuple=True)
            v, seq, t = S[kr, kc][:, None], r32_t[kr], tol_t[kr]
            lo = torch.searchsorted(seq, v - t)[:, 0]
            near = torch.searchsorted(seq, v + t, right=True)[:, 0] > lo
            hist.view(-1).index_add_(0, kr * (R + 2) + torch.where(near, R + 1, lo), torch.ones_like(lo))
            near_r, near_c = kr[near], kc[near]
        # near: some relevant score within the rounding bound, so compared exactly
        if len(near_r):
            rr, cc = near_r.cpu().numpy(), near_c.cpu().numpy()
            n_rescored += len(rr)
            step = chunk_rows(len(rr), Cs.X.shape[1] * 8 * 6 + R * 8 * 4)
            for a in range(0, len(rr), step):
                r_, c_ = rr[a:a + step], cc[a:a + step] + j
                sc = torch.as_tensor(pair_scores(Qs, Cs, r_ + s, c_), device=dev)[:, None]
                rt = torch.as_tensor(r_, device=dev)
                ref = r64_t[rt]
                above = (sc > ref) | ((sc == ref) & (tk_t[torch.as_tensor(c_, device=dev)][:, None] < rtk_t[rt]))
                exact_higher.index_add_(0, rt, above.long())
    # documents above slot i: those placed above it in float32 (bucket > i) plus the exact ones
    above = hist[:, :R + 1].flip(1).cumsum(1).flip(1)[:, 1:] + exact_higher
    higher = above.cpu().numpy()[loc, sl]
    rows, scores, scans = _exact_top(Qs, Cs, tk, s, top_i.cpu().numpy(), top_v.cpu().numpy(), ex, tol[s:e], top_k)
    return higher, rows, scores, n_rescored, scans


def _place(S, r32_t, tol_t):
    """For each product: the number of relevant scores certainly below it (``lo``, int64), and whether
    one lies within the bound (``near``). A comparison loop for a few relevant documents per query
    (much faster than a batched ``searchsorted``), ``searchsorted`` for many."""
    R = r32_t.shape[1]
    xl, xh = S - tol_t, S + tol_t
    if R > LOOP_SLOTS:
        lo = torch.searchsorted(r32_t, xl)
        return lo, torch.searchsorted(r32_t, xh, right=True) > lo
    lo = torch.zeros(S.shape, dtype=torch.uint8, device=S.device)
    hi = torch.zeros_like(lo)
    for i in range(R):
        ri = r32_t[:, i:i + 1]
        lo += xl > ri
        hi += xh >= ri
    return lo.long(), hi > lo


def _exact_top(Qs, Cs, tk, s, cand, cand32, ex, tol, top_k):
    """Exact top lists from the float32 candidates (re-scored, ordered by the tie policy); a query
    whose spare candidates cannot prove its list gets an exact scan of the corpus."""
    b, kk = cand.shape
    n = len(Cs.X)
    valid = (cand >= 0) & np.isfinite(cand32)
    rr, cc = np.nonzero(valid)
    s64 = np.full(cand.shape, -np.inf)
    s64[rr, cc] = pair_scores(Qs, Cs, rr + s, cand[rr, cc])
    key = np.where(valid, tk[np.maximum(cand, 0)], np.iinfo(np.int64).max)
    order = np.lexsort((key, -s64), axis=1)
    o_rows = np.take_along_axis(cand, order, 1)
    o_s = np.take_along_axis(s64, order, 1)
    eligible = n - (ex >= 0)
    k = min(top_k, kk)
    rows = np.full((b, top_k), -1, np.int64)
    scores = np.full((b, top_k), np.nan)
    rows[:, :k], scores[:, :k] = o_rows[:, :k], o_s[:, :k]
    scans = 0
    for r in range(b):
        n_ok = min(top_k, eligible[r])
        rows[r, n_ok:], scores[r, n_ok:] = -1, np.nan
        if eligible[r] <= kk or n_ok == 0:
            continue
        if float(cand32[r, -1]) + tol[r] < o_s[r, n_ok - 1]:  # no document outside the candidates can reach the list
            continue
        scans += 1
        rows[r, :n_ok], scores[r, :n_ok] = _scan_top(Qs, Cs, tk, s + r, ex[r], n_ok)
    return rows, scores, scans


def _scan_top(Qs, Cs, tk, q, ex, k):
    """The exact top k of one query by a scan of every document (the rare fallback)."""
    n, d = Cs.X.shape
    step = chunk_rows(n, max(d, 1) * 8 * 6)
    best_s, best_r = np.empty(0), np.empty(0, np.int64)
    for a in range(0, n, step):
        c = np.arange(a, min(n, a + step))
        c = c[c != ex]
        sc = pair_scores(Qs, Cs, np.full(len(c), q), c)
        s_all, r_all = np.concatenate([best_s, sc]), np.concatenate([best_r, c])
        o = np.lexsort((tk[r_all], -s_all))[:k]
        best_s, best_r = s_all[o], r_all[o]
    return best_r, best_s


# ---------------------------------------------------------------------------------------------
# Per-query metrics from ranks (trec_eval semantics)
# ---------------------------------------------------------------------------------------------

def per_query_metrics(judged: pd.DataFrame) -> pd.DataFrame:
    """trec_eval's per-query metrics from the ranks of the judged documents.

    ``judged``: one row per judgement with columns ``query_id``, ``relevance`` (int grade) and
    ``rank`` (the document's 1-based rank in the query's full ranking; may be NaN for grade 0,
    which needs none). Returns one row per query with at least one relevant document (order of
    first appearance): ``query_id``, ``n_judged``, ``n_relevant``, ``first_relevant_rank`` and every
    metric of :data:`METRICS`.
    """
    codes, uniques = pd.factorize(judged["query_id"], sort=False)
    nq = len(uniques)
    g = judged["relevance"].to_numpy(np.int64)
    rel = g >= 1
    rank = judged["rank"].to_numpy(np.float64)[rel]
    if not np.isfinite(rank).all() or (rank < 1).any():
        raise ValueError("every relevant judgement needs a rank >= 1")
    rc, rr, rg = codes[rel], rank.astype(np.int64), g[rel]
    n_judged = np.bincount(codes, minlength=nq)
    R = np.bincount(rc, minlength=nq)
    keep = R > 0
    Rf = np.maximum(R, 1).astype(float)

    def per_q(weights, c=rc):
        return np.bincount(c, weights=np.asarray(weights, float), minlength=nq)

    out = {"query_id": np.asarray(uniques, dtype=object), "n_judged": n_judged, "n_relevant": R}
    first = np.full(nq, np.iinfo(np.int64).max)
    np.minimum.at(first, rc, rr)
    out["first_relevant_rank"] = first
    found = {k: per_q(rr <= k) for k in sorted(set(RECALL_KS) | set(PRECISION_KS))}
    for k in RECALL_KS:
        out[f"recall_at_{k}"] = found[k] / Rf
    out["r_cap_at_10"] = found[10] / np.minimum(10, np.maximum(R, 1))
    for k in PRECISION_KS:
        out[f"precision_at_{k}"] = found[k] / k
    out["hit_rate_at_10"] = (found[10] > 0).astype(float)
    o = np.lexsort((rr, rc))
    c_s, r_s = rc[o], rr[o]
    prec = (np.arange(len(o)) - np.searchsorted(c_s, c_s) + 1) / r_s  # P@r at the j-th relevant document
    out["map"] = per_q(prec, c_s) / Rf
    out["map_at_100"] = per_q(prec * (r_s <= 100), c_s) / Rf
    out["mrr"] = 1.0 / first
    out["mrr_at_10"] = np.where(first <= 10, 1.0 / first, 0.0)
    disc = np.where(rr <= 10, 1.0 / np.log2(rr + 1.0), 0.0)
    o = np.lexsort((-rg, rc))
    c_i, g_i = rc[o], rg[o]
    pos = np.arange(len(o)) - np.searchsorted(c_i, c_i) + 1
    idisc = np.where(pos <= 10, 1.0 / np.log2(pos + 1.0), 0.0)
    for name, gain in (("ndcg_at_10", lambda x: x.astype(float)), ("ndcg_at_10_exp", lambda x: 2.0 ** x - 1)):
        ideal = per_q(gain(g_i) * idisc, c_i)
        out[name] = per_q(gain(rg) * disc) / np.where(ideal > 0, ideal, 1.0)
    frame = pd.DataFrame(out)[keep].reset_index(drop=True)
    return frame[["query_id", "n_judged", "n_relevant", "first_relevant_rank", *METRICS]]


# ---------------------------------------------------------------------------------------------
# The chapter's evaluation
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RetrievalResult:
    """Everything the retrieval chapter shows.

    ``values`` metric name -> mean over the evaluated queries; ``metrics`` name ->
    :class:`~embeval_report.metrics.spec.Metric` with its bootstrap interval; ``per_query`` one row
    per evaluated query (:func:`per_query_metrics`); ``relevant`` one row per relevant judgement
    (``query_id``, ``doc_id``, ``relevance``, ``score``, ``rank``); ``top`` each evaluated query's top
    list in long form (``query_id``, ``rank``, ``doc_id``, ``score``, ``relevance`` — the grade, ``<NA>``
    when unjudged); ``excluded_queries`` the judged queries without a relevant document;
    ``protocol`` the settings and counts; ``tag`` the short protocol label.
    """

    values: dict
    metrics: dict
    per_query: pd.DataFrame
    relevant: pd.DataFrame
    top: pd.DataFrame
    excluded_queries: list
    protocol: dict
    tag: str
    info: dict = field(default_factory=dict)


def protocol_tag(metric: str, n_docs: int, exclude_self: bool, ties: str) -> str:
    return (f"{metric}, exact ranking of {n_docs:,} documents, {'trec_eval' if ties == 'trec_eval' else 'row-order'}"
            f" ties{', own document excluded' if exclude_self else ''}")


def evaluate_retrieval(queries, corpus, qrels, *, query_ids, doc_ids, metric: str = "cosine",
                       exclude_self: bool = False, ties: str = "trec_eval", top_k: int = TOP_K,
                       level: float = DEFAULT_LEVEL, seed: int = 0, device="auto", label: str = "qrels",
                       desc: str | None = "retrieval ranks") -> RetrievalResult:
    """Rank the corpus for every judged query and compute the chapter's metrics.

    ``queries`` (m, d) and ``corpus`` (n, d) vectors with their ids ``query_ids`` / ``doc_ids``;
    ``qrels`` the judgements (a table from :func:`~embeval_report.io.qrels.read_qrels`, or a mapping
    ``{query_id: {doc_id: grade}}``; checked against the ids, ``label`` naming them in messages).
    ``metric`` ``"cosine"`` or ``"dot"``; ``exclude_self`` leaves each query's own id out of its
    ranking; ``ties`` the tie policy (module docstring). Means get ``level`` bootstrap intervals
    over queries (seeded by ``seed``). Raises :class:`~embeval_report.errors.InputError` when no
    judged query has a relevant document.
    """
    if metric not in METRICS_KIND:
        raise ValueError(f"metric must be one of {METRICS_KIND}, not {metric!r}")
    Q, C = as_numpy(queries), as_numpy(corpus)
    qids, dids = as_ids(query_ids, "query ids"), as_ids(doc_ids, "document ids")
    for ids, X, what in ((qids, Q, "query"), (dids, C, "corpus")):
        if len(ids) != len(X):
            raise InputError(f"{len(ids)} {what} ids for {len(X)} {what} vectors; expected one id per vector")
        check_unique(ids, f"{what} ids")
        if not np.isfinite(X).all():
            raise InputError(f"{what} vectors: row {int(np.argmax(~np.isfinite(X).all(1))) + 1} holds a "
                             "non-finite value; expected finite numbers")
    judged = qrels_frame(qrels, query_ids=qids, doc_ids=dids, label=label)
    qrow = pd.Index(qids).get_indexer(judged["query_id"].to_numpy(dtype=object))
    drow = pd.Index(dids).get_indexer(judged["doc_id"].to_numpy(dtype=object))
    own = pd.Index(dids).get_indexer(qids) if exclude_self else np.full(len(qids), -1)
    self_judged = own[qrow] == drow
    judged, qrow, drow = judged[~self_judged].reset_index(drop=True), qrow[~self_judged], drow[~self_judged]
    grade = judged["relevance"].to_numpy(np.int64)
    n_rel = np.bincount(qrow[grade >= 1], minlength=len(qids))
    has_judgement = np.bincount(qrow, minlength=len(qids)) > 0
    evaluated = np.flatnonzero(n_rel > 0)
    excluded = [str(qids[i]) for i in np.flatnonzero(has_judgement & (n_rel == 0))]
    if len(evaluated) == 0:
        raise InputError(f"{label}: no judged query has a relevant document (relevance >= 1)"
                         f"{' once each query’s own document is excluded' if self_judged.any() else ''}; "
                         "expected at least one")
    local = np.full(len(qids), -1, np.int64)
    local[evaluated] = np.arange(len(evaluated))
    is_rel = grade >= 1
    rk = rank_relevant(Q[evaluated], C, local[qrow[is_rel]], drow[is_rel], metric=metric, ties=ties, doc_ids=dids,
                       exclude=own[evaluated], top_k=top_k, device=device, desc=desc)
    judged = judged.assign(rank=np.nan, score=np.nan)
    judged.loc[is_rel, "rank"] = rk.ranks
    judged.loc[is_rel, "score"] = rk.scores
    # queries in the order of their vectors
    ordered = judged.assign(_q=qrow).sort_values("_q", kind="stable")
    per_query = per_query_metrics(ordered[ordered["_q"].isin(evaluated)])
    values = {name: float(per_query[name].mean()) for name in METRICS}
    cis = {name: mean_ci(per_query[name].to_numpy(), level, seed=seed, units=UNIT) for name in METRICS}
    tag = protocol_tag(metric, len(dids), exclude_self, ties)
    metrics = record_metrics(SPECS, values, cis, metric)  # the label names the score; the protocol holds the rest
    relevant = judged[is_rel][["query_id", "doc_id", "relevance", "score", "rank"]].reset_index(drop=True)
    relevant["rank"] = relevant["rank"].astype(np.int64)
    top = _top_frame(qids[evaluated], rk, dids, judged)
    protocol = dict(metric=metric, ties=ties, exclude_self=exclude_self, level=level, seed=seed, top_k=top_k,
                    n_docs=len(dids), n_queries=len(qids), n_judged_queries=int(has_judgement.sum()),
                    n_evaluated=len(evaluated), n_without_relevant=len(excluded),
                    n_unjudged=int((~has_judgement).sum()), n_judgements=int(len(judged)),
                    n_relevant_judgements=int(is_rel.sum()), self_judgements_dropped=int(self_judged.sum()))
    info = dict(device=str(resolve_device(device)), rescored_pairs=rk.n_rescored, top_list_scans=rk.n_top_scans)
    return RetrievalResult(values=values, metrics=metrics, per_query=per_query, relevant=relevant, top=top,
                           excluded_queries=excluded, protocol=protocol, tag=tag, info=info)


def _top_frame(qids, rk: RelevantRanks, dids, judged: pd.DataFrame) -> pd.DataFrame:
    m, k = rk.top_rows.shape
    ok = rk.top_rows >= 0
    r, c = np.nonzero(ok)
    top = pd.DataFrame({"query_id": np.asarray(qids, dtype=object)[r], "rank": c + 1,
                        "doc_id": np.asarray(dids, dtype=object)[rk.top_rows[r, c]], "score": rk.top_scores[r, c]})
    grades = judged.set_index(["query_id", "doc_id"])["relevance"]
    idx = pd.MultiIndex.from_arrays([top["query_id"], top["doc_id"]])
    top["relevance"] = pd.array(grades.reindex(idx).to_numpy(), dtype="Int64")
    return top


def cutoff_curves(result: RetrievalResult, max_k: int = 100) -> pd.DataFrame:
    """Mean recall@k and precision@k over the evaluated queries for k = 1..``max_k`` (from the exact ranks)."""
    pq = result.per_query.set_index("query_id")
    rel = result.relevant[result.relevant["rank"] <= max_k]
    hits = np.zeros((len(pq), max_k + 1))
    np.add.at(hits, (pq.index.get_indexer(rel["query_id"]), rel["rank"].to_numpy()), 1)
    found = hits.cumsum(1)[:, 1:]
    k = np.arange(1, max_k + 1)
    return pd.DataFrame({"k": k, "recall": (found / pq["n_relevant"].to_numpy()[:, None]).mean(0),
                         "precision": (found / k).mean(0)})
