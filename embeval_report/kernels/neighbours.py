"""Exact nearest neighbours by blocked matrix products, and neighbour-set comparison.

The top-k kernel (:class:`RunningTopK` fed by :func:`sweep_tiles`) never runs ``topk`` over whole rows: it walks the
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
from ..context import current
from .device import as_numpy, candidate_dtype, chunk_rows, exact_matmul, resolve_device, to_tensor, unit_rows
from .graph_cache import cached_graph, cached_products, stored_product

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
#: candidates per row beyond k when they come from bfloat16 products (``--precision fast``)
FAST_RERANK = 32
#: queries whose exact lists measure the recall of a fast graph
RECALL_QUERIES = 1000
#: CPU tile shape (query rows x corpus columns): 32 MiB of float32, measured best on a 2-core machine
CPU_TILE = (2048, 4096)
#: query rows per sweep over a corpus larger than memory (each sweep reads and normalises the whole corpus)
LAZY_QUERY_ROWS = 16_384


def _tile_shape(n_queries: int, n: int, device: torch.device) -> tuple[int, int]:
    """Query rows and corpus columns of one product tile within the memory budget."""
    if device.type == "cuda":  # whole corpus rows per tile; rows from free device memory, not the CPU budget
        free, _ = torch.cuda.mem_get_info(device)
        return int(max(1, min(n_queries, int(free * 0.4) // (n * 4 * 2)))), n
    rows, cols = CPU_TILE
    return min(rows, chunk_rows(n_queries, cols * 4 * 2)), min(n, cols)


def _query_blocks(n_queries: int, n: int, device: torch.device, desc: str | None, dtype=torch.float32):
    """Block starts (with progress when ``desc``), tile rows and columns, and the one product buffer of a
    search of ``n_queries`` rows against ``n``."""
    rows, cols = _tile_shape(n_queries, n, device)
    buffer = torch.empty(rows * cols, dtype=dtype, device=device)
    starts = range(0, n_queries, rows)
    return (progress(starts, desc=desc, total=len(starts)) if desc else starts), rows, cols, buffer


class RunningTopK:
    """One consumer of the product tiles: each query row's running top-k, merged without full-row ``topk``.

    ``rescore`` ranks by a re-scoring that increases with the product for every pair instead, in one
    of two ways:

    * ``rescore.tile_scores(tile, col0, out)`` writes the scores of a whole tile (corpus columns from
      ``col0``) into ``out``: for cheap re-scorings (CSLS), which are then pruned like products;
    * otherwise ``rescore.scores(rows, cols, products)`` gives the scores elementwise (``rows``: query
      numbers counted from the sweep's ``self_start``, or 0, broadcastable to ``products`` like
      ``cols``) and ``rescore.floor(rows, kth)`` a product at or below which no column can score above
      ``kth``: groups whose maximum is at or below it are skipped, and in the others only the products
      above it are re-scored (for costly re-scorings: mutual proximity).
    """

    def __init__(self, m: int, k: int, device: torch.device, rescore=None, dtype=torch.float32):
        self.k = k
        self.tile_scores = getattr(rescore, "tile_scores", None)
        self.scorer = rescore if self.tile_scores is None else None  # elementwise re-scoring, pruned by a floor
        self.values = torch.full((m, k), -torch.inf, dtype=dtype, device=device)
        self.indices = torch.zeros((m, k), dtype=torch.int64, device=device)

    def _merge(self, at, values, column):  # rows ``at`` keep the top-k of their best and ``values`` (at ``column(pos)``)
        k = self.k
        top = torch.topk(torch.cat([self.values[at], values], 1), k, dim=1)
        pos = top.indices
        new = pos >= k
        self.indices[at] = torch.where(new, column((pos - k).clamp_min(0)),
                                       self.indices[at].gather(1, pos.clamp_max(k - 1)))
        self.values[at] = top.values

    def merge_columns(self, at, values, cols, base: int, floor=None):
        """Merge candidates with explicit column numbers ``cols`` (re-scored when asked; products at or
        below the rows' ``floor`` cannot beat their k-th score and are not re-scored)."""
        if self.scorer is not None:
            rows = base + at
            if floor is None:
                values = self.scorer.scores(rows[:, None], cols, values)
            else:
                r, c = (values > floor[:, None]).nonzero(as_tuple=True)
                scored = torch.full_like(values, -torch.inf)
                scored[r, c] = self.scorer.scores(rows[r], cols[r, c], values[r, c])
                values = scored
        self._merge(at, values, lambda p: cols.gather(1, p))

    def merge_groups(self, rows, groups, group_max, offset: int, base: int):
        """Merge the 32-column ``groups`` (tile columns from ``offset``) that can beat each row's k-th score.

        A tile value in the merged top-k lies in a group beating the row's k-th score, and (plain
        products) in one of the row's k groups with the largest maxima (else k larger maxima outrank it).
        """
        kth = self.values[:, -1]
        limit = kth if self.scorer is None else self.scorer.floor(base + rows, kth)
        hits = (group_max > limit[:, None]).sum(1)
        bounds = [0, *HIT_BUCKETS, group_max.shape[1]]
        dev = group_max.device
        for low, high in zip(bounds, bounds[1:]):
            at = ((hits > low) & (hits <= high)).nonzero().squeeze(1)
            if len(at) == 0:
                continue
            take = int(hits[at].max()) if self.scorer is not None else min(self.k, int(hits[at].max()))
            chosen = torch.topk(group_max[at], take, dim=1).indices
            values = groups[at[:, None], chosen].view(len(at), -1)
            if self.scorer is None:
                self._merge(at, values, lambda p, chosen=chosen: offset + chosen.gather(1, p // GROUP) * GROUP + p % GROUP)
            else:
                cols = offset + chosen[:, :, None] * GROUP + torch.arange(GROUP, device=dev)
                self.merge_columns(at, values, cols.view(len(at), -1), base, limit[at])


class RowPotential:
    r"""One consumer of cosine tiles: per row :math:`\sum_j \exp(-t\lVert u_i-u_j\rVert^2) = \sum_j e^{2t(\cos-1)}`.

    Row sums of each tile in float32 (pairwise summation), accumulated across tiles in float64;
    it exponentiates the tile in place, so it runs after the top-k consumers.
    """

    def __init__(self, m: int, t: float, device: torch.device):
        self.t = float(t)
        self.sums = torch.zeros(m, dtype=torch.float64, device=device)

    def add_tile(self, tile: torch.Tensor) -> None:
        self.sums += torch.exp(tile.sub_(1.0).clamp_max_(0.0).mul_(2.0 * self.t), out=tile).sum(1)


def sweep_tiles(q: torch.Tensor, corpus_t: torch.Tensor, consumers: list[RunningTopK], *,
                potential: RowPotential | None = None, self_start: int | None = None, tile_cols: int | None = None,
                buffer: torch.Tensor | None = None) -> None:
    """One pass over the products ``q @ corpus_t``, tile by tile, feeding every consumer.

    ``q`` (m, d) and ``corpus_t`` (d, n) are float32 on one device. ``self_start``: query row i is
    corpus column ``self_start + i`` and is excluded. Rows are processed against ``tile_cols``
    corpus columns at a time (one product into ``buffer``); per tile the 32-column group maxima are
    computed once and shared by the top-k consumers that prune on products (each merges only the
    groups that can beat its rows' k-th scores; a consumer whose re-scoring transforms whole tiles
    prunes its own scores), then ``potential`` (if any) sums the tile.
    """
    m, n = len(q), corpus_t.shape[1]
    dev = q.device
    W = n if tile_cols is None else min(tile_cols, n)
    if buffer is None or buffer.numel() < m * W:
        buffer = torch.empty(m * W, dtype=q.dtype, device=dev)
    rows = torch.arange(m, device=dev)
    base = self_start or 0
    scratch = (torch.empty(m * W, dtype=q.dtype, device=dev)
               if any(c.tile_scores for c in consumers) else None)
    for j in range(0, n, W):
        w = min(W, n - j)
        tile = buffer[:m * w].view(m, w)
        torch.matmul(q, corpus_t[:, j:j + w], out=tile)
        if self_start is not None and self_start < j + w and j < self_start + m:  # the tile holds own columns
            own = rows + self_start - j
            inside = (own >= 0) & (own < w)
            tile[rows[inside], own[inside]] = -torch.inf
        first = min(w, max(FIRST_COLUMNS, *(c.k for c in consumers))) if j == 0 else 0
        full = first + (w - first) // GROUP * GROUP
        group_max = None  # of the products: computed once, shared by the consumers that prune on products
        for c in consumers:
            scores = tile if c.tile_scores is None else c.tile_scores(tile, j, scratch[:m * w].view(m, w))
            if first:  # the running top-k starts from the first columns
                c.merge_columns(rows, scores[:, :first], torch.arange(first, device=dev).expand(m, -1), base)
            if full > first:
                groups = scores[:, first:full].view(m, (full - first) // GROUP, GROUP)
                if scores is not tile:
                    c.merge_groups(rows, groups, groups.amax(2), j + first, base)
                else:
                    group_max = groups.amax(2) if group_max is None else group_max
                    c.merge_groups(rows, groups, group_max, j + first, base)
            if full < w:  # the last columns, fewer than a group
                cols = (j + full + torch.arange(w - full, device=dev)).expand(m, -1)
                c.merge_columns(rows, scores[:, full:w], cols, base)
        if potential is not None:
            potential.add_tile(tile)


def knn(X, k: int, *, queries=None, metric: str = "cosine", exclude_self: bool = True, device="auto",
        desc: str | None = "k-NN") -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours by blocked matrix products (:func:`sweep_tiles`).

    ``metric``: ``"cosine"`` (returns similarities, descending), ``"dot"`` (inner products,
    descending) or ``"euclidean"`` (returns distances, ascending). Queries default to the rows
    of ``X`` themselves; then ``exclude_self`` drops each row's own index, and the graph is
    shared through :mod:`.graph_cache` (one computation per vector space per run; a cosine graph's
    sweep also leaves the rows' Gaussian potential there, see :func:`self_sweep`). Memory: one
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
    if queries is None and metric == "cosine" and exclude_self:
        return self_sweep(X, {"cosine": (k, None)}, device=dev, desc=desc)["cosine"]
    if queries is None:
        return cached_graph(X, k, metric, exclude_self,
                            lambda kk: _search(X, X, [(kk, None)], metric, drop_self, dev, desc)[0][0])
    return _search(X, as_numpy(queries), [(k, None)], metric, False, dev, desc)[0][0]


#: t of the Gaussian potential every cosine self-sweep also sums (Wang & Isola's uniformity default)
SWEEP_POTENTIAL_T = 2.0


def potential_key(t: float) -> str:
    """The cache key of the rows' log Gaussian potential at ``t`` (see :func:`self_sweep`)."""
    return f"potential-t{float(t)!r}"


def self_sweep(X, graphs: dict, *, device, desc: str | None) -> dict:
    r"""Every product of one sweep over the cosine Gram of ``X`` (all rows against all others), cached.

    ``graphs`` maps a name to ``(k, rescore)``: ``"cosine"`` with ``rescore = None`` is the plain
    cosine graph; a re-scoring (see :class:`RunningTopK`; with ``exact(rows, cols, cos64)`` for the
    float64 order) gives its own graph from the same tiles. The sweep also sums the rows' Gaussian
    potential :math:`\log\sum_{j\ne i} e^{-t\lVert u_i-u_j\rVert^2}` at :data:`SWEEP_POTENTIAL_T`
    (about a fifth of a product's cost), which :func:`~.pairs.gaussian_potential_rows` then reads.
    Products already in :mod:`.graph_cache` are not recomputed; returns name -> (indices, scores).
    """
    X = np.ascontiguousarray(as_numpy(X), dtype=np.float32)
    dev = resolve_device(device)

    fast = candidate_dtype(dev) != torch.float32
    stored = {name: f"{name}-fast" if fast and rescore is None else name for name, (_, rescore) in graphs.items()}

    def compute(missing: dict) -> dict:
        out = {}
        plain = [name for name in missing if name.endswith("-fast")]  # fast: a sweep of their own, then recall
        for name in plain:
            found, _ = _search(X, X, [(missing[name], None)], "cosine", True, dev, desc, dtype=candidate_dtype(dev))
            out[name] = found[0]
            out[f"{name}-recall"] = (np.array(_recall(X, found[0][0], dev)),)
        names = [name for name in missing if name not in plain]
        if names:
            pot = potential_key(SWEEP_POTENTIAL_T)
            t = None if stored_product(X, pot) is not None else SWEEP_POTENTIAL_T  # summed once per space
            found, rows = _search(X, X, [(missing[name], graphs[name][1]) for name in names], "cosine", True, dev,
                                  desc, potential_t=t)
            out |= dict(zip(names, found)) | ({pot: (rows,)} if t is not None else {})
        return out

    found = cached_products(X, {stored[name]: k for name, (k, _) in graphs.items()}, True, compute)
    return {name: found[stored[name]] for name in graphs}


def fast_recall(X) -> tuple[float, int] | None:
    """``(recall, queries)`` of this set's fast cosine graph against exact lists, if one was computed in this
    run (``--precision fast``): the mean share of the exact k nearest neighbours of :data:`RECALL_QUERIES`
    seeded rows that the fast lists hold."""
    item = stored_product(np.ascontiguousarray(as_numpy(X), dtype=np.float32), "cosine-fast-recall")
    return None if item is None else (float(item[0][0]), int(item[0][1]))


def _recall(X: np.ndarray, lists: np.ndarray, dev: torch.device) -> tuple[float, int]:
    """Recall of ``lists`` (n, k) against the exact lists of up to :data:`RECALL_QUERIES` seeded rows."""
    rows = np.sort(np.random.default_rng(0).choice(len(X), min(RECALL_QUERIES, len(X)), replace=False))
    exact = query_lists(X, rows, lists.shape[1], device=dev)
    return float(neighbour_sets_overlap(lists[rows], exact).mean()), len(rows)


def query_lists(X, rows: np.ndarray, k: int, *, device, desc: str | None = None) -> np.ndarray:
    """The exact k nearest neighbours (cosine, self excluded) of the rows ``rows`` of ``X`` among all rows."""
    X = np.ascontiguousarray(as_numpy(X), dtype=np.float32)
    (idx, _), = _search(X, X[rows], [(k + 1, None)], "cosine", False, resolve_device(device), desc)[0]
    own = idx == rows[:, None]
    drop = np.where(own.any(1), own.argmax(1), k)  # the query itself, else the (k+1)-th
    keep = np.ones_like(idx, dtype=bool)
    keep[np.arange(len(idx)), drop] = False
    return idx[keep].reshape(len(idx), k)


class _Rows64:
    """The float64 (unit, for cosine) rows of a float32 corpus, made on demand chunk by chunk, so no
    float64 copy of the whole corpus is held (a 2M x 768 set would need 12 GB for it)."""

    def __init__(self, X32: torch.Tensor, unit: bool):
        self.X32, self.unit = X32, unit
        self.step = chunk_rows(len(X32), X32.shape[1] * 8 * 4)
        self.norms = (torch.cat([X32[s:s + self.step].double().norm(dim=1) for s in range(0, len(X32), self.step)])
                      .clamp_min(torch.finfo(torch.float64).tiny) if unit else None)

    def __getitem__(self, idx) -> torch.Tensor:
        rows = self.X32[idx].double()
        return rows / self.norms[idx].unsqueeze(-1) if self.unit else rows  # as unit_rows, row by row

    def squared_norms(self) -> torch.Tensor:
        return torch.cat([(r * r).sum(1) for r in self._chunks()])

    def _chunks(self):
        for s in range(0, len(self.X32), self.step):
            yield self[s:s + self.step]

    def transposed(self, dtype, sq64=None) -> torch.Tensor:
        """The (d, n) float32 corpus the products read (euclidean: ``[2x, -|x|^2]`` rows), in ``dtype``."""
        d = self.X32.shape[1] + int(sq64 is not None)
        out = torch.empty((d, len(self.X32)), dtype=dtype, device=self.X32.device)
        for s, r in zip(range(0, len(self.X32), self.step), self._chunks()):
            r = r.float()
            if sq64 is not None:
                r = torch.cat([2 * r, -sq64[s:s + len(r)].float()[:, None]], 1)
            out[:, s:s + len(r)] = r.T.to(dtype)
        return out


class _CorpusTiles:
    """The transposed corpus of :meth:`_Rows64.transposed`, made tile by tile where :func:`sweep_tiles` reads
    it (``corpus_t[:, j:j + w]``): for a corpus whose transposed copy would not fit in the memory budget (a
    10M x 768 set: 30 GB). The same values; each query block reads the corpus once more."""

    def __init__(self, corpus64: _Rows64, dtype, sq64=None, *, desc: str | None = None, tiles: int = 0):
        self.corpus64, self.dtype, self.sq64 = corpus64, dtype, sq64
        self.shape = (corpus64.X32.shape[1] + int(sq64 is not None), len(corpus64.X32))
        self._ticks = iter(progress(range(tiles), desc=f"{desc} (corpus tiles)", total=tiles)) if desc else None

    def __getitem__(self, key) -> torch.Tensor:
        _, cols = key
        if self._ticks is not None:
            next(self._ticks, None)
        r = self.corpus64[cols].float()
        if self.sq64 is not None:
            r = torch.cat([2 * r, -self.sq64[cols].float()[:, None]], 1)
        return r.T.to(self.dtype).contiguous()


def _search(X: np.ndarray, Q: np.ndarray, plans: list, metric: str, drop_self: bool, dev: torch.device,
            desc: str | None, potential_t: float | None = None, dtype=torch.float32) -> tuple[list, np.ndarray | None]:
    """Top-k of every row of ``Q`` against ``X`` for each plan ``(k, rescore)`` (see :func:`knn`), all from
    one sweep: candidates from ``dtype`` products (float32; bfloat16 with :data:`FAST_RERANK` extra
    candidates in fast mode), float64 order. Returns the plans' ``(indices, scores)`` and, when
    ``potential_t`` is given (cosine self sweep), the rows' log Gaussian potential."""
    n = len(X)
    corpus64 = _Rows64(to_tensor(X, dtype=torch.float32, device=dev), metric == "cosine")
    sq64 = corpus64.squared_norms() if metric == "euclidean" else None
    width = X.shape[1] + int(sq64 is not None)
    extra = RERANK if dtype == torch.float32 else FAST_RERANK
    if current().fits(n * width * dtype.itemsize):
        corpus_t = corpus64.transposed(dtype, sq64)
        starts, rows, cols, buffer = _query_blocks(len(Q), n, dev, desc, dtype)
    else:  # larger than memory: made where the sweep reads it, for as many queries at once as a tile allows
        rows = min(len(Q), LAZY_QUERY_ROWS)
        cols = int(min(n, max(GROUP * 8, chunk_rows(n, rows * dtype.itemsize * 2))))
        starts, buffer = range(0, len(Q), rows), torch.empty(rows * cols, dtype=dtype, device=dev)
        corpus_t = _CorpusTiles(corpus64, dtype, sq64, desc=desc, tiles=len(starts) * -(-n // cols))
    out = [(np.empty((len(Q), k), dtype=np.int64), np.empty((len(Q), k), dtype=np.float32)) for k, _ in plans]
    log_potential = np.empty(len(Q)) if potential_t is not None else None
    with exact_matmul():
        for s in starts:
            q64 = to_tensor(Q[s:s + rows], dtype=torch.float32, device=dev).double()
            if metric == "cosine":
                q64 = unit_rows(q64)
            q = q64.float()
            if metric == "euclidean":
                q = torch.cat([q, torch.ones((len(q), 1), dtype=q.dtype, device=dev)], 1)
            q = q.to(dtype)
            tops = [RunningTopK(len(q), min(k + extra, n - int(drop_self)), dev, rescore, dtype) for k, rescore in plans]
            potential = RowPotential(len(q), potential_t, dev) if potential_t is not None else None
            sweep_tiles(q, corpus_t, tops, potential=potential, self_start=s if drop_self else None, tile_cols=cols,
                        buffer=buffer)
            for (k, rescore), top, (idx, val) in zip(plans, tops, out):
                cand = top.indices
                exact = torch.bmm(corpus64[cand], q64[:, :, None])[:, :, 0]  # float64 scores of the candidates
                if metric == "euclidean":
                    exact = 2 * exact - sq64[cand] - (q64 * q64).sum(1, keepdim=True)  # -|q - x|^2
                if rescore is not None:
                    exact = rescore.exact(torch.arange(s, s + len(q), device=dev)[:, None], cand, exact)
                cand, order = cand.sort(1)  # ties in the float64 score: the lower index first
                exact = exact.gather(1, order)
                best = torch.sort(exact, dim=1, descending=True, stable=True).indices[:, :k]
                top_i, score = cand.gather(1, best), exact.gather(1, best)
                if metric == "euclidean":
                    score = (-score).clamp_min(0).sqrt()
                idx[s:s + len(q)] = top_i.cpu().numpy()
                val[s:s + len(q)] = score.float().cpu().numpy()
            if potential is not None:
                log_potential[s:s + len(q)] = potential.sums.log().cpu().numpy()
    return out, log_potential


def neighbour_sets_overlap(nb_a, nb_b) -> np.ndarray:
    """Per-row share :math:`|N_a(i) \\cap N_b(i)| / k` of two neighbour-index arrays of shape (n, k)."""
    nb_a, nb_b = np.asarray(nb_a), np.asarray(nb_b)
    both = np.sort(np.hstack([nb_a, nb_b]), axis=1)
    return (np.diff(both, axis=1) == 0).sum(1) / nb_a.shape[1]
