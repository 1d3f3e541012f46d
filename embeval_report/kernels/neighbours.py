"""Exact nearest neighbours by blocked matrix products, and neighbour-set comparison.

The top-k kernel (:func:`blocked_top_k`) never runs ``topk`` over whole rows: it walks the
corpus in column tiles of one preallocated product buffer, keeps each query row's running k
best, and merges in only the 32-wide column groups whose maximum beats the row's current k-th
score. After the first tile almost every group is pruned by one ``amax`` pass, so the cost is
the matrix product itself (see ``benchmarks/bench_knn.py`` for the ratio to the GEMM bound).
:func:`knn` keeps :data:`RERANK` extra float32 candidates per row and orders them by their float64
score, so its lists are the float64 top-k (exact ties: the lower index first).
"""
from __future__ import annotations

import numpy as np
import torch

from ..progress import progress
from .device import as_numpy, chunk_rows, exact_matmul, resolve_device, to_tensor, unit_rows
from .graph_cache import cached_graph

#: columns per pruning group: a group is merged only when its maximum beats the running k-th score
GROUP = 32
#: rows are merged in buckets by their number of groups above the k-th score (at most 4, 5 to 8, more),
#: so a few rows with many such groups do not set the merge width of all
HIT_BUCKETS = (4, 8)
#: columns of the first tile whose plain top-k seeds each row's running threshold
FIRST_COLUMNS = 256
#: extra float32 candidates per row re-scored in float64, so near-ties that float32 rounding cannot
#: order are ordered exactly (ties in float64: the lower index first)
RERANK = 4
#: CPU tile shape (query rows x corpus columns): 32 MiB of float32, measured best on a 2-core machine
CPU_TILE = (2048, 4096)


def _tile_shape(n_queries: int, n: int, device: torch.device) -> tuple[int, int]:
    """Query rows and corpus columns of one product tile within the memory budget."""
    if device.type == "cuda":  # whole corpus rows per tile; rows from free device memory, not the CPU budget
        free, _ = torch.cuda.mem_get_info(device)
        return int(max(1, min(n_queries, int(free * 0.4) // (n * 4 * 2)))), n
    rows, cols = CPU_TILE
    return min(rows, chunk_rows(n_queries, cols * 4 * 2)), min(n, cols)


def _query_blocks(n_queries: int, n: int, device: torch.device, desc: str | None):
    """Block starts (with progress when ``desc``), tile rows and columns, and the one product buffer of a
    search of ``n_queries`` rows against ``n``."""
    rows, cols = _tile_shape(n_queries, n, device)
    buffer = torch.empty(rows * cols, dtype=torch.float32, device=device)
    starts = range(0, n_queries, rows)
    return (progress(starts, desc=desc, total=len(starts)) if desc else starts), rows, cols, buffer


def blocked_top_k(q: torch.Tensor, corpus_t: torch.Tensor, k: int, *, self_start: int | None = None,
                  tile_cols: int | None = None, buffer: torch.Tensor | None = None, rescore=None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of ``q @ corpus_t`` per row, descending, without a full-row ``topk``.

    ``q`` (m, d) and ``corpus_t`` (d, n) are float32 on one device. ``self_start``: query row i is
    corpus column ``self_start + i`` and is excluded. Rows are processed against ``tile_cols``
    corpus columns at a time (one product into ``buffer``). Per tile, only rows with a 32-column
    group whose maximum is strictly above their current k-th score are merged, and of those rows
    only the (at most k) groups with the largest maxima; so the work beyond the product is one
    ``amax`` pass plus a small merge. Exact ties at the k-th place are kept in no set order
    (:func:`knn` orders its candidates by float64 score, then index).

    ``rescore`` ranks by a re-scoring that increases with the product for every pair instead:
    ``rescore.scores(rows, cols, products)`` gives the scores (``rows``: query numbers counted from
    ``self_start``, or 0) and ``rescore.floor(rows, kth)`` a product at or below which no column can
    score above ``kth``; groups whose maximum is at or below it are skipped.
    """
    m, n = len(q), corpus_t.shape[1]
    dev = q.device
    W = n if tile_cols is None else min(tile_cols, n)
    if buffer is None or buffer.numel() < m * W:
        buffer = torch.empty(m * W, dtype=q.dtype, device=dev)
    best_v = torch.full((m, k), -torch.inf, dtype=q.dtype, device=dev)
    best_i = torch.zeros((m, k), dtype=torch.int64, device=dev)
    rows = torch.arange(m, device=dev)
    base = self_start or 0

    def merge(at, values, column):  # rows ``at`` keep the top-k of their best and ``values`` (at ``column(pos)``)
        top = torch.topk(torch.cat([best_v[at], values], 1), k, dim=1)
        pos = top.indices
        new = pos >= k
        best_i[at] = torch.where(new, column((pos - k).clamp_min(0)), best_i[at].gather(1, pos.clamp_max(k - 1)))
        best_v[at] = top.values

    def merge_columns(at, values, cols):  # candidates with explicit column numbers (re-scored when asked)
        if rescore is not None:
            values = rescore.scores(base + at, cols, values)
        merge(at, values, lambda p: cols.gather(1, p))

    for j in range(0, n, W):
        w = min(W, n - j)
        tile = buffer[:m * w].view(m, w)
        torch.matmul(q, corpus_t[:, j:j + w], out=tile)
        if self_start is not None and self_start < j + w and j < self_start + m:  # the tile holds own columns
            own = rows + self_start - j
            inside = (own >= 0) & (own < w)
            tile[rows[inside], own[inside]] = -torch.inf
        first = 0
        if j == 0:  # the running top-k starts from the first columns
            first = min(w, max(FIRST_COLUMNS, k))
            merge_columns(rows, tile[:, :first], torch.arange(first, device=dev).expand(m, -1))
        full = first + (w - first) // GROUP * GROUP
        if full > first:
            groups = tile[:, first:full].view(m, (full - first) // GROUP, GROUP)
            group_max = groups.amax(2)
            limit = best_v[:, -1:] if rescore is None else rescore.floor(base + rows, best_v[:, -1])[:, None]
            hits = (group_max > limit).sum(1)
            # a tile value in the merged top-k lies in a group beating the row's k-th score, and (plain
            # products) in one of the row's k groups with the largest maxima (else k larger maxima outrank it)
            bounds = [0, *HIT_BUCKETS, full - first]
            for low, high in zip(bounds, bounds[1:]):
                at = ((hits > low) & (hits <= high)).nonzero().squeeze(1)
                if len(at) == 0:
                    continue
                take = int(hits[at].max()) if rescore is not None else min(k, int(hits[at].max()))
                chosen = torch.topk(group_max[at], take, dim=1).indices
                values = groups[at[:, None], chosen].view(len(at), -1)
                if rescore is None:
                    merge(at, values,
                          lambda p, chosen=chosen: j + first + chosen.gather(1, p // GROUP) * GROUP + p % GROUP)
                else:
                    cols = j + first + chosen[:, :, None] * GROUP + torch.arange(GROUP, device=dev)
                    merge_columns(at, values, cols.view(len(at), -1))
        if full < w:  # the last columns, fewer than a group
            merge_columns(rows, tile[:, full:w], (j + full + torch.arange(w - full, device=dev)).expand(m, -1))
    return best_i, best_v


def knn(X, k: int, *, queries=None, metric: str = "cosine", exclude_self: bool = True, device="auto",
        desc: str | None = "k-NN") -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours by blocked matrix products (:func:`blocked_top_k`).

    ``metric``: ``"cosine"`` (returns similarities, descending), ``"dot"`` (inner products,
    descending) or ``"euclidean"`` (returns distances, ascending). Queries default to the rows
    of ``X`` themselves; then ``exclude_self`` drops each row's own index, and the graph is
    shared through :mod:`.graph_cache` (one computation per vector space per run). Memory: one
    product tile (CPU: :data:`CPU_TILE` within :func:`~.device.chunk_budget`; GPU: sized from
    free device memory), never an n x n matrix. Candidates come from full float32 products whatever
    the global torch precision (:func:`~.device.exact_matmul`) and are ordered by their float64
    score, so the lists are the float64 top-k (exact ties: the lower index first).
    Returns ``(indices (m, k) int64, scores (m, k) float32)``.
    """
    if metric not in ("cosine", "dot", "euclidean"):
        raise ValueError(f"metric must be 'cosine', 'dot' or 'euclidean', not {metric!r}")
    dev = resolve_device(device)
    X = np.ascontiguousarray(as_numpy(X), dtype=np.float32)
    drop_self = queries is None and exclude_self
    if k + drop_self > len(X):
        raise ValueError(f"k = {k} needs more than {len(X) - drop_self} candidate neighbours")
    if queries is None:
        return cached_graph(X, k, metric, exclude_self,
                            lambda kk: _search(X, X, kk, metric, drop_self, dev, desc))
    return _search(X, as_numpy(queries), k, metric, False, dev, desc)


def _search(X: np.ndarray, Q: np.ndarray, k: int, metric: str, drop_self: bool, dev: torch.device,
            desc: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of every row of ``Q`` against ``X`` (see :func:`knn`): float32 candidates, float64 order."""
    n = len(X)
    corpus64 = to_tensor(X, dtype=torch.float32, device=dev).double()  # uploaded as float32, widened on the device
    if metric == "cosine":
        corpus64 = unit_rows(corpus64)
    corpus = corpus64.float()
    if metric == "euclidean":  # rank by 2 q.x - |x|^2 (= |q|^2 - |q - x|^2): one product with an extra column
        sq64 = (corpus64 * corpus64).sum(1)
        corpus = torch.cat([2 * corpus, -sq64.float()[:, None]], 1)
    corpus_t = corpus.T.contiguous()
    kk = min(k + RERANK, n - int(drop_self))
    starts, rows, cols, buffer = _query_blocks(len(Q), n, dev, desc)
    idx = np.empty((len(Q), k), dtype=np.int64)
    val = np.empty((len(Q), k), dtype=np.float32)
    with exact_matmul():
        for s in starts:
            q64 = to_tensor(Q[s:s + rows], dtype=torch.float32, device=dev).double()
            if metric == "cosine":
                q64 = unit_rows(q64)
            q = q64.float()
            if metric == "euclidean":
                q = torch.cat([q, torch.ones((len(q), 1), dtype=q.dtype, device=dev)], 1)
            cand, _ = blocked_top_k(q, corpus_t, kk, self_start=s if drop_self else None, tile_cols=cols,
                                    buffer=buffer)
            exact = torch.bmm(corpus64[cand], q64[:, :, None])[:, :, 0]  # float64 scores of the candidates
            if metric == "euclidean":
                exact = 2 * exact - sq64[cand] - (q64 * q64).sum(1, keepdim=True)  # -|q - x|^2
            cand, order = cand.sort(1)  # ties in the float64 score: the lower index first
            exact = exact.gather(1, order)
            best = torch.sort(exact, dim=1, descending=True, stable=True).indices[:, :k]
            top, score = cand.gather(1, best), exact.gather(1, best)
            if metric == "euclidean":
                score = (-score).clamp_min(0).sqrt()
            idx[s:s + len(q)] = top.cpu().numpy()
            val[s:s + len(q)] = score.float().cpu().numpy()
    return idx, val


def neighbour_sets_overlap(nb_a, nb_b) -> np.ndarray:
    """Per-row share :math:`|N_a(i) \\cap N_b(i)| / k` of two neighbour-index arrays of shape (n, k)."""
    nb_a, nb_b = np.asarray(nb_a), np.asarray(nb_b)
    both = np.sort(np.hstack([nb_a, nb_b]), axis=1)
    return (np.diff(both, axis=1) == 0).sum(1) / nb_a.shape[1]


def top_k_products(queries, corpus, k: int, *, exclude_self: bool = False, device="auto",
                   desc: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of the plain products ``queries @ corpus.T`` per query row (rows used as given).

    For re-scorings that are a product of augmented rows, e.g. CSLS: ``[2u_x, -1] . [u_y, r_y]`` =
    ``2 cos(x, y) - r(y)``. ``exclude_self`` needs the queries to be the corpus rows in order.
    """
    dev = resolve_device(device)
    return _search(np.ascontiguousarray(as_numpy(corpus), dtype=np.float32), as_numpy(queries), k, "dot",
                   exclude_self, dev, desc)


def rescored_knn(X, k: int, rescore, *, device, desc: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of all other rows under a re-scoring of the cosine that increases with it for every pair.

    ``rescore`` has ``scores(rows, cols, cos)`` and ``floor(rows, kth)`` (see :func:`blocked_top_k`);
    the cosines come from the same blocked products as :func:`knn`, and only the column groups that
    can beat a row's current k-th score are re-scored. Returns ``(indices (n, k), scores (n, k) float32)``.
    """
    X = as_numpy(X)
    n = len(X)
    corpus = unit_rows(to_tensor(X, dtype=torch.float32, device=device))
    corpus_t = corpus.T.contiguous()
    starts, rows, cols, buffer = _query_blocks(n, n, device, desc)
    idx = np.empty((n, k), dtype=np.int64)
    val = np.empty((n, k), dtype=np.float32)
    with exact_matmul():
        for s in starts:
            ti, tv = blocked_top_k(corpus[s:s + rows], corpus_t, k, self_start=s, tile_cols=cols, buffer=buffer,
                                   rescore=rescore)
            idx[s:s + len(ti)] = ti.cpu().numpy()
            val[s:s + len(ti)] = tv.cpu().numpy()
    return idx, val
