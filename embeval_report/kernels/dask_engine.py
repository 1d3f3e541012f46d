"""The decomposable passes as Dask tasks over row blocks: one machine's cores or a cluster of many.

Optional: ``dask[array]`` and ``distributed`` are imported only here and only when called; without them
every entry point raises one :class:`~embeval_report.errors.InputError` line naming
``pip install 'embeval-report[dask]'``. Dask is the engine (no scheduler of our own):

* :func:`connect` — a ``distributed.Client`` on a new ``LocalCluster`` or an existing scheduler;
* :func:`as_dask` — a dask array in row blocks from a NumPy/memmap array, a Zarr store path or a dask array;
* :func:`column_moments` — ``(n, column sums, Gram X^T X)`` in float64, the sufficient statistics of the
  mean, covariance, isotropy, collapse and whitening passes;
* :func:`row_norms`; :func:`ks_statistics` — the per-dimension two-sample KS statistic (column blocks);
* :func:`knn_blockwise` — exact k-NN by query blocks x corpus blocks merged with a top-k reduction, with the
  neighbour lists of :func:`~embeval_report.kernels.knn` (float32 candidates, float64 order, exact ties:
  the lower index first).

The workers must be able to import ``embeval_report`` (same version) and read a Zarr source by its path.
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import InputError

#: rows per block when the caller names none: a block pair's float32 product tile is 64 MiB at most
BLOCK_ROWS = 4096
#: extra float32 candidates per block pair re-scored in float64 (as :data:`~.neighbours.RERANK`)
RERANK = 4
INSTALL_HINT = "pip install 'embeval-report[dask]'"


def _require():
    """``(dask, dask.array, distributed)``, or one InputError line naming the extra to install."""
    try:
        import dask
        import dask.array as da
        import distributed
    except ImportError as exc:
        raise InputError(f"the Dask engine needs dask and distributed ({exc.name} is missing): {INSTALL_HINT}") from None
    return dask, da, distributed


def connect(scheduler: str | None = None, workers: int = 2):
    """A ``distributed.Client``: on a new ``LocalCluster`` of ``workers`` single-threaded worker processes
    on this machine when ``scheduler`` is None (closed with the client), else on the scheduler at that
    address (``tcp://HOST:PORT``). Close it with ``client.close()``."""
    _, _, distributed = _require()
    if scheduler is None:
        if int(workers) < 1:
            raise InputError(f"--dask-workers: expected a whole number of at least 1, got {workers}")
        return distributed.Client(n_workers=int(workers), threads_per_worker=1, processes=True,
                                  dashboard_address=None, set_as_default=False)
    try:
        return distributed.Client(scheduler, timeout="20s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise InputError(f"--scheduler {scheduler}: no Dask scheduler answered ({exc})") from None


def worker_count(client) -> int:
    """The number of workers the client's scheduler knows now."""
    return len(client.scheduler_info().get("workers", {}))


def as_dask(X, block_rows: int | None = None):
    """``X`` as a dask array of row blocks (``block_rows`` rows each, every column in one block).

    ``X``: a NumPy array or memmap, a dask array, a Zarr store path (``str``/``PathLike``) or
    ``{"zarr": path, "array": name}``.
    """
    _, da, _ = _require()
    if isinstance(X, dict) and "zarr" in X:
        X = da.from_zarr(os.fspath(X["zarr"]), component=X.get("array"))
    elif isinstance(X, (str, os.PathLike)):
        X = da.from_zarr(os.fspath(X))
    elif not isinstance(X, da.Array):
        X = np.asarray(X) if not isinstance(X, np.ndarray) else X
        X = da.from_array(X, chunks=(min(block_rows or BLOCK_ROWS, max(len(X), 1)), X.shape[1]))
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array of rows, got shape {X.shape}")
    if block_rows is not None:
        X = X.rechunk((int(block_rows), X.shape[1]))
    elif X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X


def _compute(client, *items):
    """Compute dask collections on ``client`` (None: Dask's default scheduler) and return NumPy results."""
    dask, _, _ = _require()
    if client is None:
        return dask.compute(*items)
    return tuple(client.gather(client.compute(list(items))))


def column_moments(X, *, client=None, block_rows: int | None = None) -> tuple[int, np.ndarray, np.ndarray]:
    """``(n, sum of the rows, X^T X)`` in float64, summed over row blocks (each block's partial products,
    then a tree reduction). Mean ``s / n``; covariance ``(G - s s^T / n) / (n - 1)``."""
    Xd = as_dask(X, block_rows).astype(np.float64)
    s, G = _compute(client, Xd.sum(axis=0), Xd.T @ Xd)
    return int(Xd.shape[0]), np.asarray(s, dtype=np.float64), np.asarray(G, dtype=np.float64)


def row_norms(X, *, client=None, block_rows: int | None = None) -> np.ndarray:
    """The float64 L2 norm of every row, block by block."""
    Xd = as_dask(X, block_rows)
    return np.asarray(_compute(client, Xd.map_blocks(_block_norms, dtype=np.float64, drop_axis=1))[0])


def _block_norms(block: np.ndarray) -> np.ndarray:
    return np.linalg.norm(np.asarray(block, dtype=np.float64), axis=1)


def ks_statistics(X, Y, *, client=None, columns: int = 16) -> np.ndarray:
    """The two-sample Kolmogorov–Smirnov statistic of every dimension of ``X`` against ``Y``
    (:func:`scipy.stats.ks_2samp`, as :func:`~embeval_report.metrics.two_sample.ks_dimensions`).

    Exact ECDFs need every row of a dimension at once, so this pass runs over column blocks of
    ``columns`` dimensions (all rows of both sets per task), not row blocks.
    """
    dask, _, _ = _require()
    Xd, Yd = as_dask(X), as_dask(Y)
    if Xd.shape[1] != Yd.shape[1]:
        raise ValueError(f"X has {Xd.shape[1]} dimensions, Y {Yd.shape[1]}")
    d = Xd.shape[1]
    xb = Xd.rechunk((Xd.shape[0], columns)).to_delayed()[0]
    yb = Yd.rechunk((Yd.shape[0], columns)).to_delayed()[0]
    parts = [dask.delayed(_ks_block)(x, y) for x, y in zip(xb, yb)]
    if client is None:
        out = dask.compute(*parts)
    else:
        out = client.gather(client.compute(parts))
    stat = np.concatenate(out) if out else np.empty(0)
    assert len(stat) == d
    return stat


def _ks_block(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy import stats

    return np.atleast_1d(np.asarray(stats.ks_2samp(x, y, axis=0).statistic, dtype=np.float64))


def _pair_candidates(qb, cb, q0: int, c0: int, k: int, metric: str, self_pair: bool):
    """One block pair: the ``k + RERANK`` best corpus rows of each query row by float32 product (exact ties:
    the lower index), with their float64 scores computed as :func:`~.neighbours.knn` computes them.
    Returns ``(global indices int64 (m, kk), float64 scores (m, kk))``."""
    import torch

    from .device import exact_matmul, unit_rows

    q64 = torch.from_numpy(np.ascontiguousarray(qb, dtype=np.float32)).double()
    c64 = torch.from_numpy(np.ascontiguousarray(cb, dtype=np.float32)).double()
    if metric == "cosine":
        q64, c64 = unit_rows(q64), unit_rows(c64)
    m, n = len(q64), len(c64)
    kk = min(k + RERANK, n - int(self_pair))
    if kk <= 0:
        return np.empty((m, 0), dtype=np.int64), np.empty((m, 0))
    with exact_matmul():
        tile = q64.float() @ c64.float().T
    if self_pair:
        tile.fill_diagonal_(-torch.inf)
    idx = torch.topk(tile, kk, dim=1).indices
    kth = tile.gather(1, idx).amin(1, keepdim=True)
    tied = ((tile >= kth).sum(1) > kk).nonzero().squeeze(1)  # ties at the k-th: keep the lower indices
    if len(tied):
        idx[tied] = torch.sort(tile[tied], dim=1, descending=True, stable=True).indices[:, :kk]
    exact = torch.bmm(c64[idx], q64[:, :, None])[:, :, 0]  # float64, as the local kernel's re-ranking
    return (idx + c0).numpy().astype(np.int64), exact.numpy()


def _merge_candidates(parts: list, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k reduction of one query block: its candidates from every corpus block, ordered by float64
    score, exact ties by the lower index (as :func:`~.neighbours.knn`)."""
    cand = np.concatenate([p[0] for p in parts], axis=1)
    exact = np.concatenate([p[1] for p in parts], axis=1)
    order = np.argsort(cand, axis=1, kind="stable")
    cand, exact = np.take_along_axis(cand, order, 1), np.take_along_axis(exact, order, 1)
    best = np.argsort(-exact, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(cand, best, 1), np.take_along_axis(exact, best, 1).astype(np.float32)


def knn_blockwise(X, k: int, metric: str = "cosine", *, exclude_self: bool = True, client=None,
                  block_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours of every row of ``X`` among its rows, as Dask tasks.

    Each (query block, corpus block) pair is one task (float32 products, ``k + 4`` candidates per row
    re-scored in float64); one task per query block merges its candidates with a top-k reduction.
    ``metric``: ``"cosine"`` (similarities, descending) or ``"dot"``; ``exclude_self`` drops each row's own
    index. The lists equal :func:`~embeval_report.kernels.knn`'s (exact ties: the lower index first).
    Returns ``(indices (n, k) int64, scores (n, k) float32)``.
    """
    dask, _, _ = _require()
    if metric not in ("cosine", "dot"):
        raise ValueError(f"knn_blockwise supports metric 'cosine' or 'dot', not {metric!r}")
    Xd = as_dask(X, block_rows)
    n = Xd.shape[0]
    if k < 1 or k + int(exclude_self) > n:
        raise ValueError(f"k = {k} needs more than {n - int(exclude_self)} candidate neighbours")
    blocks = Xd.to_delayed()[:, 0]
    starts = np.concatenate([[0], np.cumsum(Xd.chunks[0])]).astype(int)
    pair = dask.delayed(_pair_candidates, pure=True)
    merge = dask.delayed(_merge_candidates, pure=True)
    merged = [merge([pair(blocks[i], blocks[j], int(starts[i]), int(starts[j]), k, metric, exclude_self and i == j)
                     for j in range(len(blocks))], k)
              for i in range(len(blocks))]
    out = dask.compute(*merged) if client is None else client.gather(client.compute(merged))
    return (np.ascontiguousarray(np.concatenate([o[0] for o in out])),
            np.ascontiguousarray(np.concatenate([o[1] for o in out])))
