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
    b, w = tile_shape(m, n, dev)
    ranking = _Ranking(Qs, Cs, Cs.float32_t(dev), torch.as_tensor(tk, device=dev), tk,
                       _SortedPairs(sq, sd, sr, q_start, slot), excl, tol, w, min(top_k + SPARE, n), top_k, dev)
    higher = np.zeros(len(sq), np.int64)
    top_rows = np.full((m, top_k), -1, np.int64)
    top_scores = np.full((m, top_k), np.nan)
    n_rescored = n_scans = 0
    starts = range(0, m, b)
    with exact_matmul():
        for s in (progress(starts, desc=desc, total=len(starts)) if desc else starts):
            e = min(m, s + b)
            res = ranking.block(s, e)
            higher[q_start[s]:q_start[e]] = res.higher
            top_rows[s:e], top_scores[s:e] = res.rows, res.scores
            n_rescored += res.rescored
            n_scans += res.scans
    ranks = np.empty(len(pq), np.int64)
    ranks[order] = 1 + higher
    ranks += before
    return RelevantRanks(ranks, r64, top_rows, top_scores, int(n_rescored), int(n_scans))


@dataclass(frozen=True)
class _SortedPairs:
    """The relevant (query, document) pairs sorted by (query, score): query rows ``q``, corpus rows ``d``, exact
    scores ``r``; ``q_start[i]`` the first pair of query i, ``slot`` each pair's place among its query's pairs."""

    q: np.ndarray
    d: np.ndarray
    r: np.ndarray
    q_start: np.ndarray
    slot: np.ndarray


@dataclass
class _Block:
    """One block of queries ``s:e`` being swept: its relevant pairs as padded (b, R) tables (``r32``/``r64`` their
    scores, +inf padding, non-decreasing per row; ``rtk`` their tie keys; ``loc``, ``col``, ``sl`` each pair's row
    in the block, corpus column and slot), the rounding bound per query, and what the sweep accumulates: the
    float32 placement histogram, the exact counts, the running top list and the number re-scored."""

    s: int
    q32: torch.Tensor
    ex: np.ndarray
    loc: np.ndarray
    col: np.ndarray
    sl: np.ndarray
    r32: torch.Tensor
    r64: torch.Tensor
    rtk: torch.Tensor
    tol: torch.Tensor
    hist: torch.Tensor
    exact_higher: torch.Tensor
    top_v: torch.Tensor
    top_i: torch.Tensor
    rescored: int = 0

    @property
    def slots(self) -> int:
        return self.r32.shape[1]


@dataclass(frozen=True)
class _BlockRanks:
    """What :meth:`_Ranking.block` returns: the number of documents above each relevant pair (in the pairs' sorted
    order), the block's exact top lists and scores, the pairs re-scored exactly and the queries scanned."""

    higher: np.ndarray
    rows: np.ndarray
    scores: np.ndarray
    rescored: int
    scans: int


@dataclass(frozen=True)
class _Ranking:
    """What every query block of :func:`rank_relevant` shares: the query and corpus spaces, the corpus as float32
    columns on the device (``C32t``), the documents' tie keys (``tk`` and on the device ``tk_t``), the sorted
    relevant pairs, each query's excluded document and rounding bound, the tile width ``w``, the candidates kept
    per query ``kk`` and the top list's length."""

    Qs: Space
    Cs: Space
    C32t: torch.Tensor
    tk_t: torch.Tensor
    tk: np.ndarray
    pairs: _SortedPairs
    excl: np.ndarray
    tol: np.ndarray
    w: int
    kk: int
    top_k: int
    dev: torch.device

    def block(self, s: int, e: int) -> _BlockRanks:
        """Ranks of the relevant pairs of queries ``s:e`` and their top lists: one sweep of the corpus in tiles."""
        blk = self._start(s, e)
        n = self.C32t.shape[1]
        ones = torch.ones((e - s, min(self.w, n)), dtype=torch.int64, device=self.dev)
        for j in range(0, n, self.w):
            self._tile(blk, j, min(self.w, n - j), ones)
        return self._finish(blk, e)

    def _start(self, s: int, e: int) -> _Block:
        """The block's relevant pairs as padded tables, its float32 rows and empty accumulators."""
        b, p, dev = e - s, self.pairs, self.dev
        p0, p1 = p.q_start[s], p.q_start[e]
        loc, col, sl = p.q[p0:p1] - s, p.d[p0:p1], p.slot[p0:p1]
        R = max(1, int(sl.max()) + 1) if p1 > p0 else 1
        r64 = np.full((b, R), np.inf)
        r64[loc, sl] = p.r[p0:p1]
        rtk = np.zeros((b, R), np.int64)
        rtk[loc, sl] = self.tk[col]
        return _Block(
            s=s, q32=to_tensor(self.Qs.rows64(np.arange(s, e)).astype(np.float32), dtype=torch.float32, device=dev),
            ex=self.excl[s:e], loc=loc, col=col, sl=sl,
            r32=torch.as_tensor(r64.astype(np.float32), device=dev),  # +inf padding; non-decreasing per row
            r64=torch.as_tensor(r64, device=dev), rtk=torch.as_tensor(rtk, device=dev),
            tol=torch.as_tensor(self.tol[s:e, None].astype(np.float32), device=dev),
            hist=torch.zeros((b, R + 2), dtype=torch.int64, device=dev),
            exact_higher=torch.zeros((b, R), dtype=torch.int64, device=dev),
            top_v=torch.full((b, self.kk), -torch.inf, dtype=torch.float32, device=dev),
            top_i=torch.full((b, self.kk), -1, dtype=torch.int64, device=dev))

    def _tile(self, blk: _Block, j: int, wj: int, ones: torch.Tensor) -> None:
        """Corpus columns ``j:j + wj``: their float32 products update the top lists, then every document that may
        be above a relevant one is placed among them (in float32, or exactly when within the bound)."""
        dev = self.dev
        S = blk.q32 @ self.C32t[:, j:j + wj]
        inside = (blk.ex >= j) & (blk.ex < j + wj)
        if inside.any():  # the query's own document is not ranked
            S[torch.as_tensor(np.flatnonzero(inside), device=dev),
              torch.as_tensor(blk.ex[inside] - j, device=dev)] = -torch.inf
        self._update_top(blk, S, j, wj)
        here = (blk.col >= j) & (blk.col < j + wj)
        if here.any():  # relevant documents: ranked among themselves exactly, not counted here
            S[torch.as_tensor(blk.loc[here], device=dev), torch.as_tensor(blk.col[here] - j, device=dev)] = -torch.inf
        floor = blk.r32[:, :1] - blk.tol  # (b, 1): the lowest relevant score less the bound (+inf: no relevant)
        keep = S >= floor  # below the floor a document is certainly below every relevant one: bucket 0
        n_keep = int(keep.sum())
        if n_keep == 0:
            return
        near_r, near_c = self._place_tile(blk, S, keep, n_keep, ones[:, :wj])
        if len(near_r):  # near: some relevant score within the rounding bound, so compared exactly
            self._rescore_near(blk, near_r.cpu().numpy(), near_c.cpu().numpy(), j)

    def _update_top(self, blk: _Block, S: torch.Tensor, j: int, wj: int) -> None:
        """Merge the tile's best candidates into the rows' running top lists (rows with a document above their
        running k-th only)."""
        at = (S > blk.top_v[:, -1:]).any(1).nonzero()[:, 0]
        if len(at):
            v, i = torch.topk(S[at], min(self.kk, wj), dim=1)
            v, pos = torch.topk(torch.cat([blk.top_v[at], v], 1), self.kk, dim=1)
            blk.top_i[at] = torch.cat([blk.top_i[at], i + j], 1).gather(1, pos)
            blk.top_v[at] = v

    @staticmethod
    def _place_tile(blk: _Block, S: torch.Tensor, keep: torch.Tensor, n_keep: int, ones: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Count the tile's documents above the floor into the histogram of relevant slots they are certainly above
        (bucket R + 1: within the bound of one); returns the (row, column) of those within the bound."""
        R = blk.slots
        if n_keep * DENSE_SHARE > S.numel():  # most documents: place the whole tile
            lo, near = _place(S, blk.r32, blk.tol)
            blk.hist.scatter_add_(1, torch.where(near, R + 1, lo), ones)
            return near.nonzero(as_tuple=True)
        kr, kc = keep.nonzero(as_tuple=True)  # a few: place only those above the floor
        v, seq, t = S[kr, kc][:, None], blk.r32[kr], blk.tol[kr]
        lo = torch.searchsorted(seq, v - t)[:, 0]
        near = torch.searchsorted(seq, v + t, right=True)[:, 0] > lo
        blk.hist.view(-1).index_add_(0, kr * (R + 2) + torch.where(near, R + 1, lo), torch.ones_like(lo))
        return kr[near], kc[near]

    def _rescore_near(self, blk: _Block, rr: np.ndarray, cc: np.ndarray, j: int) -> None:
        """Compare the documents within the bound of a relevant score with each relevant one exactly (float64, ties
        by the tie keys), in memory-bounded pieces."""
        dev = self.dev
        blk.rescored += len(rr)
        step = chunk_rows(len(rr), self.Cs.X.shape[1] * 8 * 6 + blk.slots * 8 * 4)
        for a in range(0, len(rr), step):
            r_, c_ = rr[a:a + step], cc[a:a + step] + j
            sc = torch.as_tensor(pair_scores(self.Qs, self.Cs, r_ + blk.s, c_), device=dev)[:, None]
            rt = torch.as_tensor(r_, device=dev)
            ref = blk.r64[rt]
            above = (sc > ref) | ((sc == ref) & (self.tk_t[torch.as_tensor(c_, device=dev)][:, None] < blk.rtk[rt]))
            blk.exact_higher.index_add_(0, rt, above.long())

    def _finish(self, blk: _Block, e: int) -> _BlockRanks:
        """Documents above each relevant slot: those placed above it in float32 (bucket > slot) plus the exact
        ones; the block's exact top lists from its candidates."""
        R = blk.slots
        above = blk.hist[:, :R + 1].flip(1).cumsum(1).flip(1)[:, 1:] + blk.exact_higher
        higher = above.cpu().numpy()[blk.loc, blk.sl]
        rows, scores, scans = _exact_top(self.Qs, self.Cs, self.tk, blk.s, blk.top_i.cpu().numpy(),
                                         blk.top_v.cpu().numpy(), blk.ex, self.tol[blk.s:e], self.top_k)
        return _BlockRanks(higher, rows, scores, blk.rescored, scans)


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
