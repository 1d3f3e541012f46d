"""Exact ranking kernels of retrieval and recommendation: the rank of every relevant pair in its query's ranking
of the whole corpus, and each query's top list, from blocked float32 products with every pair within the
float32 rounding bound of a relevant score re-scored in float64 (:func:`rank_relevant`); the float64 pair
scores they rest on (:class:`Space`, :func:`pair_scores`: products summed by a fixed tree, so a pair's score
does not depend on its batch); and the tie keys of trec_eval's order (:func:`tie_keys`).

Tile sizes: :data:`CPU_TILE_COLS` columns on the CPU within a chunk budget; on a GPU, :data:`GPU_TILE_COLS`
columns and as many query rows as :data:`GPU_MEMORY_SHARE` of the free device memory holds (:func:`tile_shape`,
which takes the free memory as an argument so that its sizing is tested without a GPU).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..progress import progress
from .device import as_numpy, chunk_rows, exact_matmul, resolve_device, to_tensor

METRICS_KIND = ("cosine", "dot")
TIES = ("trec_eval", "index")
#: documents kept per query for display
TOP_K = 10
#: float32 candidates kept per query beyond ``top_k``, re-ranked exactly
SPARE = 16
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
#: share of the free GPU memory a tile (query block x corpus columns) may take
GPU_MEMORY_SHARE = 0.3


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


def tile_shape(m: int, n: int, device: torch.device, free: int | None = None) -> tuple[int, int]:
    """Query rows and corpus columns of one tile of ``m`` queries against ``n`` documents (GPU: from ``free``
    bytes of device memory, read from the device when None)."""
    if device.type == "cuda":
        if free is None:
            free, _ = torch.cuda.mem_get_info(device)
        cols = min(n, GPU_TILE_COLS)
        return int(max(1, min(m, int(free * GPU_MEMORY_SHARE) // (cols * TILE_ELEMENT_BYTES)))), cols
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
    b, w = tile_shape(m, n, dev)
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
