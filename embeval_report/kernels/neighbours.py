"""Exact nearest neighbours by blocked matrix products, and neighbour-set comparison.

Candidates come from the fastest product the device has (:func:`~.device.exact_product`: bfloat16 inputs
on a CPU with AVX-512 BF16 or AMX, TF32 inputs on a GPU of compute capability 8.0+, else IEEE float32), each
within a proven bound of its float64 score (:func:`~.device.product_bound`); every corpus row the bound
cannot rule out is scored in float64, so the lists are the float64 top-k whichever product ran (exact ties:
the lower index first, however many rows tie).

* A plain search (:func:`~.candidates._collect`, :func:`~.candidates._collected_lists`) walks the corpus in column tiles of one product
  buffer, keeps per row a lower bound on its k-th product from 32-column group maxima (one strided max pass
  per tile) and keeps every entry within twice the bound of it; on the CPU query blocks run side by side on
  single-threaded workers.
* A sweep that also feeds re-scored graphs (CSLS, mutual proximity) or the all-pairs potential
  (:func:`~.tiles.sweep_tiles`, :class:`~.tiles.RunningTopK`, :class:`~.tiles.RowPotential`) runs on float32
  products; its plain graph keeps :data:`RERANK` extra candidates, proven complete by the float32 bound or
  searched again (:func:`~.candidates._bounded_lists`). The set's own sweep on the CPU computes only the upper
  triangle of the Gram and feeds each tile to both blocks (:func:`~.tiles.feed_views`), two tiles at a time on
  two workers (:func:`~.tiles.upper_triangle`). On a CPU with a bfloat16 product that sweep (the report's shared
  graph: cosine, mutual proximity, potential) merges nothing tile by tile: a bfloat16 pass sets each row's limit, the
  float32 pass keeps the entries above it, and the lists are scored in float64 (:mod:`.sweep`).

``benchmarks/bench_knn.py`` gives the ratios to faiss-cpu, the float32 GEMM and scikit-learn.
"""
from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch

from ..context import current
from ..progress import progress
from .candidates import (
    GROUP,
    RERANK,
    _Block,
    _bounded_lists,
    _collect,
    _collected_lists,
    _CorpusTiles,
    _exact_scores,
    _rescore_lists,
    _Rows64,
    _rows_to_padded,
    _top_k,
)
from . import device as _device
from .dask_engine import FileRows
from .device import (
    BF16,
    FP32,
    Product,
    as_numpy,
    candidate_dtype,
    chunk_rows,
    exact_product,
    mask_indices,
    product_bound,
    resolve_device,
    to_tensor,
    unit_rows,
)
from .graph_cache import cached_graph, cached_products, stored_product
from .graph_cache import folder as graph_folder
from .prefetch import read_rows
from .rescoring import MutualProximity, SweptCsls, csls_key
from . import sweep
from .tiles import RowPotential, RunningTopK, feed_views, first_columns, sweep_tiles, upper_triangle

#: candidates per row beyond k in a search whose candidates come from bfloat16 or TF32 products, proven
#: complete by their error bound (rows the pool cannot prove are searched again)
BOUND_POOL = 24
#: candidates per row beyond k when they come from bfloat16 products (``--precision fast``)
FAST_RERANK = 32
#: multiply-adds of the float64 products of a search up to which it takes one float64 product per block of rows
#: (:func:`_small_lists`): 5,000 x 5,000 x 64 is 1.6e9
SMALL_SEARCH_MACS = 4 * 10**9
#: queries whose exact lists measure the recall of a fast graph
RECALL_QUERIES = 1000
#: CPU tile shape (query rows x corpus columns): 32 MiB of float32, measured best on a 2-core machine
CPU_TILE = (2048, 4096)
#: CPU tile shape of a search that keeps entries from bfloat16 products (8 MiB; one per worker thread)
CPU_COLLECT_TILE = (1024, 4096)
#: query rows per sweep over a corpus larger than memory (each sweep reads and normalises the whole corpus), at most
#: :func:`lazy_query_rows`
LAZY_QUERY_ROWS = 16_384
#: share of the free GPU memory the tiles of a sweep may take, and how many tile-sized buffers a sweep holds at
#: once (the tile, a re-scored copy, float64 and boolean temporaries of the merges: with 2, the shared graph of
#: a 300,000 x 768 set with mutual proximity ran out of an H200's 140 GB)
GPU_TILE_SHARE = 0.4
GPU_TILE_COPIES = 6
#: corpus columns per GPU tile (None: whole rows). With whole rows a tile of 1M columns holds only 2,083 query rows
#: (480 blocks for 1M x 768 on an H200), and the per-block steps that wait for the device (the kept-entry pass
#: re-scores its rows in about 14 rounds) took most of the search: its device work was 0.33 s of 1.1 s at
#: 200,000 rows. Column tiles hold 30,000 rows (34 blocks), and each row's running threshold rises from tile to
#: tile as on the CPU: the shared graph with mutual proximity of 200,000 x 768 went from 3.6 to 3.0 s, the same lists
GPU_TILE_COLS: int | None = 65_536


def lazy_query_rows(width: int) -> int:
    """Query rows of one sweep over a corpus larger than memory: as many as a quarter of the memory budget holds at
    32 bytes a value (the block's float64 rows, their float32 candidate inputs and float64 bound temporaries), so a
    set of fewer than :data:`LAZY_QUERY_ROWS` rows is not held whole as queries. At the default budget it is
    :data:`LAZY_QUERY_ROWS` up to 2,048 dimensions."""
    return int(max(1, current().budget // 4 // (max(width, 1) * 8 * 4)))


def _tile_shape(n_queries: int, n: int, device: torch.device, *, free: int | None = None, itemsize: int = 4,
                product: Product | None = None) -> tuple[int, int]:
    """Query rows and corpus columns of one product tile of a search of ``n_queries`` rows against ``n``.

    GPU: :data:`GPU_TILE_COLS` corpus columns per tile (fewer: whole rows), as many query rows as
    :data:`GPU_TILE_SHARE` of the ``free`` device memory (read from the device when None) holds
    :data:`GPU_TILE_COPIES` times (the tile and the tile-sized temporaries of a sweep); when not even one whole
    row fits, one row and as many 32-column groups as fit. CPU: :data:`CPU_TILE` (:data:`CPU_COLLECT_TILE` for a
    kept-entry search of ``product`` bfloat16 products) within :func:`~.device.chunk_budget`.
    """
    if device.type == "cuda":  # rows from free device memory, not the CPU budget
        if free is None:
            free, _ = torch.cuda.mem_get_info(device)
        room = int(free * GPU_TILE_SHARE) // (itemsize * GPU_TILE_COPIES)  # elements of one tile
        if GPU_TILE_COLS is not None and n > GPU_TILE_COLS and room >= GPU_TILE_COLS:
            return int(max(1, min(n_queries, room // GPU_TILE_COLS))), GPU_TILE_COLS
        if room >= n:
            return int(max(1, min(n_queries, room // n))), n
        return 1, int(min(n, max(GROUP, room // GROUP * GROUP)))
    rows, cols = CPU_COLLECT_TILE if product is not None and product.dtype == torch.bfloat16 else CPU_TILE
    return min(rows, chunk_rows(n_queries, cols * itemsize * 2)), min(n, cols)


def knn(X, k: int, *, queries=None, metric: str = "cosine", exclude_self: bool = True, device="auto",
        desc: str | None = "k-NN", stats: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours by blocked matrix products (:func:`sweep_tiles`).

    ``metric``: ``"cosine"`` (returns similarities, descending), ``"dot"`` (inner products,
    descending) or ``"euclidean"`` (returns distances, ascending). Queries default to the rows
    of ``X`` themselves; then ``exclude_self`` drops each row's own index, and the graph is
    shared through :mod:`.graph_cache` (one computation per vector space per run; a cosine graph's
    sweep may also leave the rows' Gaussian potential there, see :func:`self_sweep`). Memory: one
    product tile (CPU: :data:`CPU_TILE` within :func:`~.device.chunk_budget`; GPU: sized from
    free device memory), never an n x n matrix.

    Candidates come from the fastest product the device has (:func:`~.device.exact_product`: bfloat16
    inputs on a CPU with native bfloat16, TF32 inputs on a recent GPU, else IEEE float32, whatever the
    global torch precision); each candidate product is within a proven bound of its float64 score
    (:func:`~.device.product_bound`), and every row that can still enter a list is scored in float64
    (:func:`_bounded_lists`), so the lists are the float64 top-k (exact ties: the lower index first),
    whichever product ran. ``stats`` (a dict) receives which product and sweep ran (when one ran: a graph
    read from the cache leaves it empty). Returns ``(indices (m, k) int64, scores (m, k) float32)``.
    """
    if metric not in ("cosine", "dot", "euclidean"):
        raise ValueError(f"metric must be 'cosine', 'dot' or 'euclidean', not {metric!r}")
    dev = resolve_device(device)
    X = np.ascontiguousarray(as_numpy(X), dtype=np.float32)
    drop_self = queries is None and exclude_self
    if k + drop_self > len(X):
        raise ValueError(f"k = {k} needs more than {len(X) - drop_self} candidate neighbours")
    if queries is None and metric == "cosine" and exclude_self:
        return self_sweep(X, {"cosine": (k, None)}, device=dev, desc=desc, stats=stats)["cosine"]
    product = exact_product(dev, metric)
    if queries is None:
        return cached_graph(X, k, metric, exclude_self, lambda kk: _search(
            X, X, [(kk, None)], metric, drop_self, dev, desc, product=product, stats=stats)[0][0])
    return _search(X, as_numpy(queries), [(k, None)], metric, False, dev, desc, product=product, stats=stats)[0][0]


#: t of the Gaussian potential a cosine self-sweep also sums (Wang & Isola's uniformity default)
SWEEP_POTENTIAL_T = 2.0


def potential_key(t: float) -> str:
    """The cache key of the rows' log Gaussian potential at ``t`` (see :func:`self_sweep`)."""
    return f"potential-t{float(t)!r}"


def sweeps_potential(dev: torch.device, rescored: bool = False) -> bool:
    """Whether a cosine self sweep also sums the rows' Gaussian potential (when the set's is not stored yet):
    when its products are float32 anyway (re-scored graphs in the sweep, or float32 is the device's fastest
    exact product), or when a graph-cache folder is in use (a report run, whose uniformity chapter reads it).
    Otherwise the graph alone takes the faster product (:func:`~.device.exact_product`) and uniformity
    computes the potential itself when asked."""
    return rescored or exact_product(dev) is FP32 or graph_folder() is not None


def self_sweep(X, graphs: dict, *, device, desc: str | None, potential: bool | None = None, stats=None) -> dict:
    r"""Every product of one sweep over the cosine Gram of ``X`` (all rows against all others), cached.

    ``graphs`` maps a name to ``(k, rescore)``: ``"cosine"`` with ``rescore = None`` is the plain
    cosine graph; a re-scoring (see :class:`RunningTopK`; with ``exact(rows, cols, cos64)`` for the
    float64 order) gives its own graph from the same tiles. ``potential`` (None: :func:`sweeps_potential`):
    the sweep also sums the rows' Gaussian potential
    :math:`\log\sum_{j\ne i} e^{-t\lVert u_i-u_j\rVert^2}` at :data:`SWEEP_POTENTIAL_T` from its float32
    products (about a fifth of a product's cost), which :func:`~.pairs.gaussian_potential_rows` then reads.
    A sweep without re-scored graphs or the potential takes the device's fastest exact product
    (:func:`~.device.exact_product`). Products already in :mod:`.graph_cache` are not recomputed; returns
    name -> (indices, scores). ``stats`` (a dict) receives the product that ran (see :func:`_search`).

    A :class:`~.rescoring.SweptCsls` graph (CSLS with r of this sweep's cosine graph) is ranked only where the sweep
    computes the cosine graph and is collected (:func:`~.sweep.collected_sweep`); it is stored under
    :func:`~.rescoring.csls_key` of its r (where a later search with that r finds it) and is absent from the result
    otherwise.
    """
    X = np.ascontiguousarray(as_numpy(X), dtype=np.float32)
    dev = resolve_device(device)

    fast = candidate_dtype(dev) != torch.float32
    swept = {name: graph for name, graph in graphs.items() if isinstance(graph[1], SweptCsls)}
    graphs = {name: graph for name, graph in graphs.items() if name not in swept}
    stored = {name: f"{name}-fast" if fast and rescore is None else name for name, (_, rescore) in graphs.items()}
    swept_found = {}

    def compute(missing: dict) -> dict:
        out = {}
        plain = [name for name in missing if name.endswith("-fast")]  # fast: a sweep of their own, then recall
        for name in plain:
            found, _ = _search(X, X, [(missing[name], None)], "cosine", True, dev, desc, product=None, stats=stats)
            out[name] = found[0]
            out[f"{name}-recall"] = (np.array(_recall(X, found[0][0], dev)),)
        names = [name for name in missing if name not in plain]
        for name in [name for name in names if linear_column(graphs[name][1]) is not None]:
            names.remove(name)  # a linear re-scoring (CSLS): a bounded search of its own on the fastest product
            found, _ = _search(X, X, [(missing[name], graphs[name][1])], "cosine", True, dev, desc,
                               product=exact_product(dev), stats=stats)
            out[name] = found[0]
        if names:
            plans = [(missing[name], graphs[name][1]) for name in names]
            rescored = any(rescore is not None for _, rescore in plans) or bool(swept) and _collects(X, plans, dev)
            pot = potential_key(SWEEP_POTENTIAL_T)
            wanted = sweeps_potential(dev, rescored) if potential is None else potential
            t = SWEEP_POTENTIAL_T if wanted and stored_product(X, pot) is None else None  # summed once per space
            product = FP32 if rescored or t is not None else exact_product(dev)
            cosine = max((missing[name] for name in names if graphs[name][1] is None), default=0)
            csls = {name: (max(k, cosine), rescore) for name, (k, rescore) in swept.items()
                    if rescore.neighborhood <= cosine}  # r from the cosine graph of this sweep
            collected = sweep.collected_sweep(X, plans + list(csls.values()), dev, desc, t, _Sweep) if (
                product is FP32 and _collects(X, plans, dev)) else None  # limits from bfloat16, then one float32 pass
            if collected is not None:
                found, rows = collected
                for name, lists in zip(csls, found[len(plans):]):
                    out[csls_key(swept[name][1].r)] = swept_found[name] = lists
                if stats is not None:
                    stats.update(product="bf16+fp32", searched_again=0, queries=len(X), sweep="collected",
                                 workers=min(2, torch.get_num_threads()))  # the triangle's workers (_Sweep.pair)
            else:
                found, rows = _search(X, X, plans, "cosine", True, dev, desc, potential_t=t, product=product,
                                      stats=stats)
            out |= dict(zip(names, found)) | ({pot: (rows,)} if t is not None else {})
        return out

    found = cached_products(X, {stored[name]: k for name, (k, _) in graphs.items()}, True, compute)
    return {name: found[stored[name]] for name in graphs} | {
        name: tuple(np.array(a[:, :swept[name][0]]) for a in lists) for name, lists in swept_found.items()}


def _collects(X: np.ndarray, plans: list, dev: torch.device) -> bool:
    """Whether a self sweep of ``plans`` takes :func:`~.sweep.collected_sweep`: on a CPU with a bfloat16 product,
    an in-memory set of at least :data:`~.sweep.COLLECT_MIN_ROWS` rows, plain or mutual-proximity plans."""
    return (dev.type == "cpu" and exact_product(dev) is BF16 and len(X) >= sweep.COLLECT_MIN_ROWS
            and current().fits(X.nbytes * 3)
            and all(r is None or isinstance(r, MutualProximity) for _, r in plans) and len(X) > 2)


def usable_k(k: int, n: int) -> int:
    """The largest neighbourhood size up to ``k`` that ``n`` points support: each point's list of k neighbours needs
    more than k others (k ≤ n − 2); 0 below 3 points. The one clip of k every chapter and the shared graph use.

    >>> usable_k(10, 5000), usable_k(10, 11), usable_k(10, 2)
    (10, 9, 0)
    """
    return max(0, min(int(k), n - 2))


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
    """The exact k nearest neighbours (cosine, self excluded) of the rows ``rows`` of ``X`` among all rows: the rows
    of this space's exact cosine graph when the run's cache holds it with k or more neighbours (the same lists: the
    float64 order, exact ties the lower index first), else searched for these rows only. Only a memory-mapped set
    (the run's own, whose graph the shared sweep made) is looked up: an array in memory would be read whole for
    its fingerprint on every call."""
    X = np.ascontiguousarray(as_numpy(X), dtype=np.float32)
    graph = stored_product(X, "cosine") if len(X) > 1 and FileRows.of(X) is not None else None
    if graph is not None and graph[0].shape[1] >= k:
        return np.array(graph[0][rows, :k])
    dev = resolve_device(device)
    (idx, _), = _search(X, read_rows(X, rows), [(k + 1, None)], "cosine", False, dev, desc,
                        product=exact_product(dev))[0]
    own = idx == rows[:, None]
    drop = np.where(own.any(1), own.argmax(1), k)  # the query itself, else the (k+1)-th
    keep = np.ones_like(idx, dtype=bool)
    keep[np.arange(len(idx)), drop] = False
    return idx[keep].reshape(len(idx), k)


def linear_column(rescore) -> torch.Tensor | None:
    """The column c of a re-scoring that ranks row x's columns by :math:`2\\cos(x, y) - c_y` (CSLS: c = r), read
    from its ``column`` attribute (float64, one value per corpus row), else None. Such a re-scoring is a product
    of the augmented rows :math:`[u_x, 1]\\cdot[2u_y, -c_y]`, so its exact search takes the kept-entry pass of a
    plain search (candidates from the fastest product, bounded, every entry that can enter scored in float64)."""
    return getattr(rescore, "column", None) if rescore is not None else None


def _search(X: np.ndarray, Q: np.ndarray, plans: list, metric: str, drop_self: bool, dev: torch.device,
            desc: str | None, potential_t: float | None = None, product: Product | None = FP32,
            stats: dict | None = None) -> tuple[list, np.ndarray | None]:
    """Top-k of every row of ``Q`` against ``X`` for each plan ``(k, rescore)`` (see :func:`knn`), all from
    one sweep, float64 order. ``product``: the candidate product (:mod:`.device`: ``FP32``, ``BF16``, ``TF32``).
    A single plain plan without the potential keeps every entry its error bound cannot rule out
    (:func:`_collected_lists`; on the CPU, query blocks run side by side on single-threaded workers, one per
    torch thread, each with its own tile); otherwise the products feed fixed pools (:func:`sweep_tiles`): the
    plain plans' lists are proven complete with the bound (:func:`_bounded_lists`), re-scored plans take
    :data:`RERANK` extra float32 candidates. ``product=None``: fast mode (bfloat16 products,
    :data:`FAST_RERANK` extra candidates, no proof: recall is measured). ``stats`` (a dict) receives the
    product's name, the pass and the number of rows searched again. Returns the plans' ``(indices, scores)``
    and, when ``potential_t`` is given (cosine self sweep, float32 products), the rows' log Gaussian potential."""
    if _small(X, Q, plans, metric, dev, potential_t, product):
        out = _small_lists(X, Q, plans[0][0], drop_self, dev)
        if stats is not None:
            stats.update(product="fp64", searched_again=0, queries=len(Q), sweep="small", workers=1)
        return [out], None
    search = _Sweep(X, Q, plans, metric, drop_self, dev, desc, potential_t, product)
    if _crowded(search):  # bfloat16 products would keep hundreds of entries a row: float32 keeps about k
        product = FP32
        search = _Sweep(X, Q, plans, metric, drop_self, dev, desc, potential_t, product, corpus64=search.corpus64)
    searched_again = search.run()
    if stats is not None:
        stats.update(product="bf16-fast" if product is None else product.name, searched_again=searched_again,
                     queries=len(Q), sweep="collect" if search.collect else "pool", workers=search.workers)
    return search.out, search.log_potential


def _crowded(search: _Sweep) -> bool:
    """Whether a kept-entry cosine search on bfloat16 products would keep so many entries a row
    (:func:`~.sweep.crowded`) that float32 products, which keep about k whatever the set, cost less: a set with a
    strong common direction, whose rows' nearest cosines crowd within a bfloat16 product's error of each other (one
    thread, CPU-seconds: 10,000 x 384 with mean cosine 0.88, bfloat16 2.29 against float32 1.01; 30,000 x 384, 21.9
    against 7.3; the same lists). Only with the corpus's products in memory; the lists do not depend on it."""
    return (search.product is BF16 and search.collect and search.metric == "cosine" and search.plans[0][1] is None
            and isinstance(search.corpus_t, torch.Tensor) and sweep.crowded(search, search.plans[0][0]))


def _small(X: np.ndarray, Q: np.ndarray, plans: list, metric: str, dev: torch.device, potential_t, product) -> bool:
    """Whether a search takes :func:`_small_lists`: one plain cosine plan of an exact search on the CPU, no
    potential, at most :data:`SMALL_SEARCH_MACS` multiply-adds in all, the device's own candidate product (not one
    a caller or :data:`~.device.CANDIDATES` forces: tests of the bounded products do), and the float64 corpus with
    a block of its products within the memory budget."""
    return (len(plans) == 1 and plans[0][1] is None and metric == "cosine" and dev.type == "cpu"
            and potential_t is None and _device.CANDIDATES is None and product is exact_product(dev)
            and current().fits(len(X) * X.shape[1] * 8 * 2 + min(len(Q), 64) * len(X) * 8 * 3)
            and len(Q) * len(X) * X.shape[1] <= SMALL_SEARCH_MACS)


def _small_lists(X: np.ndarray, Q: np.ndarray, k: int, drop_self: bool, dev: torch.device):
    r"""The float64 cosine top-k of every row of ``Q`` against ``X`` (exact ties: the lower index) of a small search:
    the float64 products of a block of rows against the whole corpus (one GEMM) choose the candidates, every entry
    within twice their error bound (:math:`d\,2^{-53}` per product of unit rows, a margin of 4) of the row's k-th,
    and those are scored as every search scores them (:func:`~.candidates._rescore_lists`), so the lists are those
    of the bounded search. A fixed cost of the bounded search's tiles and bfloat16 pass is spared: 5,000 x 64
    took about 1.2 s of CPU, the float64 product 0.04 s."""
    corpus64 = _Rows64(to_tensor(X, dtype=torch.float32, device=dev), True)
    C = corpus64[0:len(X)]
    margin = 8 * (X.shape[1] + 1) * 2.0**-53
    out = (np.empty((len(Q), k), dtype=np.int64), np.empty((len(Q), k), dtype=np.float32))
    rows = max(1, chunk_rows(len(Q), len(X) * 8 * 3))
    for s in range(0, len(Q), rows):
        q64 = unit_rows(to_tensor(Q[s:s + rows], dtype=torch.float32, device=dev).double())
        S = q64 @ C.T
        m = len(q64)
        if drop_self:
            S[torch.arange(m), torch.arange(s, s + m)] = -torch.inf
        kth = torch.topk(S, k, dim=1).values[:, -1]
        r, c = mask_indices(S >= (kth - margin)[:, None])
        cols, _, counts = _rows_to_padded(r, c, S[r, c], m)
        idx, val = _rescore_lists(k, cols, counts, q64, corpus64, None, "cosine")
        out[0][s:s + m], out[1][s:s + m] = idx.numpy(), val.float().numpy()
    return out


class _Sweep:
    """One search of :func:`_search` as named steps: which pass runs (:meth:`_choose_pass`), how the corpus and the
    tiles are laid out (:meth:`_lay_out`), each query block's inputs, consumers and lists (:meth:`inputs`,
    :meth:`consumers`, :meth:`finish`), and the order the blocks run in (:meth:`run`: side by side, the upper
    triangle of the Gram, or one after another)."""

    def __init__(self, X: np.ndarray, Q: np.ndarray, plans: list, metric: str, drop_self: bool, dev: torch.device,
                 desc: str | None, potential_t: float | None, product: Product | None, corpus64: _Rows64 | None = None,
                 tight: bool = False):
        if potential_t is not None and product is not FP32:
            raise ValueError("the swept potential needs float32 products")
        self.X, self.Q, self.plans, self.metric, self.drop_self = X, Q, plans, metric, drop_self
        self.dev, self.desc, self.potential_t, self.product = dev, desc, potential_t, product
        self.n = len(X)
        if corpus64 is None:
            corpus64 = _Rows64(to_tensor(X, dtype=torch.float32, device=dev), metric == "cosine")
        self.corpus64 = corpus64
        self._choose_pass()
        self._lay_out()
        self.out = [(np.empty((len(Q), k), dtype=np.int64), np.empty((len(Q), k), dtype=np.float32)) for k, _ in plans]
        self.log_potential = np.empty(len(Q)) if potential_t is not None else None
        self.pair = self.halves and self.threads > 1  # two workers take the triangle's tiles, half the threads each
        self.buffers = queue.SimpleQueue()
        for _ in range(2 if self.pair else self.workers):
            self.buffers.put(torch.empty(self.rows * self.cols, dtype=self.dtype, device=dev))
        self.n_avail = self.n - int(drop_self)
        #: hooks of :mod:`.sweep`: ``on_block(s, blk, entries)`` takes a kept-entry pass's entries of block s
        #: instead of its lists; ``on_tile(tile, s, t)`` sees each tile of the upper triangle before the potential
        #: and ``on_row(s, q64)`` is called when block s is finished
        self.on_block = self.on_tile = self.on_row = None
        self.tight = tight  # on_block takes each row's k largest products only (:func:`~.candidates._collect`)

    def _choose_pass(self) -> None:
        """Kept entries (one plain plan, or one linear re-scoring such as CSLS, on a product with a bound) or fixed
        pools; how the float64 scores are made; the candidate product's dtype, the extra candidates, the workers."""
        plans, metric, product = self.plans, self.metric, self.product
        column = linear_column(plans[0][1]) if len(plans) == 1 and metric == "cosine" else None
        self.collect = (product is not None and self.potential_t is None and len(plans) == 1
                        and (plans[0][1] is None or column is not None))
        if not self.collect:
            column = None
        self.scored = "linear" if column is not None else metric  # how the float64 scores are made (_exact_scores)
        self.sq64 = self.corpus64.squared_norms() if metric == "euclidean" else column
        self.width = self.X.shape[1] + int(self.sq64 is not None)
        self.dtype = torch.bfloat16 if product is None else product.dtype
        self.extra = FAST_RERANK if product is None else RERANK if product is FP32 else BOUND_POOL
        self.threads = torch.get_num_threads()
        self.workers = self.threads if self.collect and self.dev.type == "cpu" else 1

    def _lay_out(self) -> None:
        """The corpus as product columns (in memory; or, larger than memory, made where the sweep reads it, for as
        many queries at once as a tile allows), the tile shape, and whether the upper triangle alone is swept."""
        n, Q, dev, itemsize = self.n, self.Q, self.dev, self.dtype.itemsize
        if current().fits(n * self.width * itemsize):
            self.corpus_t, self.corpus_stats = self.corpus64.transposed(self.sq64, self.product)
            self.rows, self.cols = _tile_shape(len(Q), n, dev, itemsize=itemsize,
                                               product=self.product if self.collect else None)
        else:
            rows = min(len(Q), LAZY_QUERY_ROWS)
            cols = int(min(n, max(GROUP * 8, chunk_rows(n, rows * itemsize * 2))))
            rows = min(rows, lazy_query_rows(self.width))  # the tile's columns (so every number) as for uncapped rows
            self.corpus_t = _CorpusTiles(self.corpus64, self.product, self.sq64, desc=self.desc,
                                         tiles=-(-len(Q) // rows) * -(-n // cols))
            self.corpus_stats = self.corpus_t.stats()
            self.rows, self.cols = rows, cols
            self.workers = 1
        self.halves = (not self.collect and self.drop_self and Q is self.X and self.metric == "cosine"
                       and dev.type == "cpu" and isinstance(self.corpus_t, torch.Tensor)
                       and not any(getattr(r, "tile_scores", None) for _, r in self.plans))
        if self.halves:  # the upper triangle only (:meth:`symmetric`), in square tiles of query blocks
            self.cols = self.rows
        self.starts = range(0, len(Q), self.rows)

    def run(self) -> int:
        """Every block's lists (written to ``out``); returns the number of rows searched again."""
        with FP32.matmul() if self.product is None else self.product.matmul():
            if self.pair:
                with _threads_each(2, self.threads // 2) as pool:
                    return self.symmetric(pool)
            if self.halves:
                return self.symmetric(None)
            if self.workers > 1:
                with _threads_each(self.workers) as pool:
                    return sum(self._progress(pool.map(self.block, self.starts)))
            return sum(self.block(s) for s in self._progress(self.starts))

    def _progress(self, items):
        return progress(items, desc=self.desc, total=len(self.starts)) if self.desc else items

    def block(self, s: int) -> int:
        """The lists of query rows ``s:s + rows``; returns the number of rows searched again."""
        buffer = self.buffers.get()
        try:
            q64, q, blk = self.inputs(s)
            if self.collect and self.on_block is not None:
                self.on_block(s, blk, _collect(self.plans[0][0], blk, self.corpus_t, self.cols, buffer,
                                               slack=not self.tight))
                return 0
            if self.collect:  # one plain plan: kept entries instead of a fixed pool
                self.write(s, [_collected_lists(self.plans[0][0], blk, self.corpus64, self.sq64, self.corpus_t,
                                                self.scored, self.cols, buffer)])
                return 0
            tops, potential = self.consumers(s)
            sweep_tiles(q, self.corpus_t, tops, potential=potential, self_start=s if self.drop_self else None,
                        tile_cols=self.cols, buffer=buffer)
            return self.finish(s, q64, blk, tops, potential)
        finally:
            self.buffers.put(buffer)

    def inputs(self, s: int) -> tuple[torch.Tensor, torch.Tensor, _Block | None]:
        """The float64 rows of query block ``s``, its candidate-product inputs and its error bounds."""
        dev, product = self.dev, self.product
        q64 = to_tensor(self.Q[s:s + self.rows], dtype=torch.float32, device=dev).double()
        if self.metric == "cosine":
            q64 = unit_rows(q64)
        q = q64.float()
        qa64 = q64
        if self.sq64 is not None:  # the augmented rows [q, 1] against [2x, -|x|^2] or [2x, -c]
            q = torch.cat([q, torch.ones((len(q), 1), dtype=q.dtype, device=dev)], 1)
            qa64 = torch.cat([q64, torch.ones((len(q), 1), dtype=q64.dtype, device=dev)], 1)
        q = q.to(self.dtype) if product is None or product.bits == 24 else product.rounded(q).to(self.dtype)
        blk = None
        if product is not None:
            q_d = q.double()
            offset = (q64 * q64).sum(1) if self.metric == "euclidean" else 0.0
            bound = product_bound(q_d.norm(dim=1), (q_d - qa64).norm(dim=1), *self.corpus_stats, self.width, product,
                                  offset)
            blk = _Block(s, q64, q, bound, offset, self.drop_self)
        return q64, q, blk

    def consumers(self, s: int) -> tuple[list[RunningTopK], RowPotential | None]:
        """The running top-k of every plan and the potential (when summed) of query block ``s``."""
        m = min(self.rows, len(self.Q) - s)
        return ([RunningTopK(m, min(k + self.extra, self.n_avail), self.dev, rescore, self.dtype)
                 for k, rescore in self.plans],
                RowPotential(m, self.potential_t, self.dev) if self.potential_t is not None else None)

    def finish(self, s: int, q64: torch.Tensor, blk: _Block | None, tops: list[RunningTopK],
               potential: RowPotential | None) -> int:
        """The lists of query block ``s`` from its swept consumers (written to ``out``); returns the number of
        rows searched again."""
        again, found = 0, []
        for (k, rescore), top in zip(self.plans, tops):
            if rescore is None and blk is not None:
                top_i, score, more = _bounded_lists(k, top, blk, self.corpus64, self.sq64, self.corpus_t, self.metric,
                                                    self.product, self.cols, self.n_avail)
                again += more
            else:
                cand = top.indices
                exact = _exact_scores(self.corpus64, self.sq64, q64, cand, self.metric)
                if rescore is not None:
                    exact = rescore.exact(torch.arange(s, s + len(q64), device=self.dev)[:, None], cand, exact)
                top_i, score = _top_k(cand, exact, k)
            found.append((top_i, score))
        if potential is not None:
            self.log_potential[s:s + len(q64)] = potential.sums.log().cpu().numpy()
        if self.on_row is not None:
            self.on_row(s, q64)
        self.write(s, found)
        return again

    def write(self, s: int, found: list) -> None:
        for (top_i, score), (idx, val) in zip(found, self.out):
            if self.metric == "euclidean":
                score = (-score).clamp_min(0).sqrt()
            idx[s:s + len(top_i)] = top_i.cpu().numpy()
            val[s:s + len(top_i)] = score.float().cpu().numpy()

    def symmetric(self, pool) -> int:
        """Every block's lists and potential from the tiles of the Gram's upper triangle (the self sweep of an
        in-memory set on the CPU: half the products). Tile (s, t) of query blocks s <= t feeds block s's rows
        (:func:`~.tiles.feed_views`) and, for t > s, block t's rows through its transpose; block s is finished once its
        own row of tiles is done, as every column left of it came from the blocks before. The first columns
        (corpus columns 0, 1, ...) start every row's top-k, as in :func:`sweep_tiles`. ``pool``: two workers take
        the tiles side by side (:func:`~.tiles.upper_triangle`; every block gets the same calls in the same order)."""
        starts, rows, Q = self.starts, self.rows, self.Q
        held = {s: self.consumers(s) for s in starts}
        first = first_columns(held[0][0])
        given = {}

        def tile(i: int, j: int, buffer) -> None:
            s, t = starts[i], starts[j]
            if s == t:  # a row's first tile
                given[s] = self.inputs(s)
            q = given[s][1]
            m, w = len(q), min(rows, len(Q) - t)
            tile = buffer[:m * w].view(m, w)
            torch.matmul(q, self.corpus_t[:, t:t + w], out=tile)
            if t == s:
                tile.diagonal().fill_(-torch.inf)  # the rows themselves
            if self.on_tile is not None:
                self.on_tile(tile, s, t)
            tops, potential = held[s]
            feed_views(tops, tile, min(w, first) if t == 0 else 0, t, s)
            if t != s:
                feed_views(held[t][0], tile, min(m, first) if s == 0 else 0, s, t, transposed=True)
            if potential is not None:
                potential.add_tile(tile, held[t][1] if t != s else None)

        def finish_row(i: int) -> int:
            s = starts[i]
            q64, _, blk = given.pop(s)
            return self.finish(s, q64, blk, *held.pop(s))

        return upper_triangle(len(starts), tile, finish_row, self.buffers, pool,
                              rows=(lambda r: progress(r, desc=self.desc, total=len(starts))) if self.desc else None)


@contextmanager
def _threads_each(workers: int, each: int = 1):
    """A pool of ``workers`` threads whose torch operations, like this thread's, each run on ``each`` threads (the
    process's torch thread count is restored after the block): independent work side by side, without the
    synchronisation of every small operation across threads."""
    saved = torch.get_num_threads()
    torch.set_num_threads(each)
    try:
        with ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(each,)) as pool:
            yield pool
    finally:
        torch.set_num_threads(saved)


def neighbour_sets_overlap(nb_a, nb_b) -> np.ndarray:
    """Per-row share :math:`|N_a(i) \\cap N_b(i)| / k` of two neighbour-index arrays of shape (n, k)."""
    nb_a, nb_b = np.asarray(nb_a), np.asarray(nb_b)
    both = np.sort(np.hstack([nb_a, nb_b]), axis=1)
    return (np.diff(both, axis=1) == 0).sum(1) / nb_a.shape[1]
