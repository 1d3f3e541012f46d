"""The decomposable passes as Dask tasks over row blocks: one machine's cores or a cluster of many.

Optional: ``dask[array]`` and ``distributed`` are imported only here and only when called; without them
every entry point raises one :class:`~embeval_report.errors.InputError` line naming
``pip install 'embeval-report[dask]'``. Dask is the engine (no scheduler of our own):

* :func:`connect` — a ``distributed.Client`` on a new ``LocalCluster`` or an existing scheduler;
* :func:`as_dask` — a dask array in row blocks from a NumPy array, a memory map (its tasks read their rows from
  the file), a Zarr store or a dask array;
* :func:`column_moments` — ``(n, column sums, Gram X^T X)`` in float64, the sufficient statistics of the
  mean, covariance, isotropy, collapse and whitening passes;
* :func:`row_norms`; :func:`ks_statistics` — the per-dimension two-sample KS statistic and p-value (column
  blocks);
* :func:`knn_blockwise` — exact k-NN by query blocks x corpus blocks merged with a top-k reduction, with the
  neighbour lists of :func:`~embeval_report.kernels.knn` (float32 candidates, float64 order, exact ties:
  the lower index first);
* :func:`block_moments`, :func:`column_mean`, :func:`potential_rows` — the kernels' passes of the same names
  (:func:`~.moments.block_moments`, :func:`~.moments.column_mean`, :func:`~.pairs.gaussian_potential_rows`)
  as tasks, the same numbers to rounding.

**The engine of a run.** The compute context names a scheduler
(:attr:`~embeval_report.context.ComputeContext.scheduler`: the runner passes its address to every chapter);
the kernels then send a pass to it when :func:`takes` says so: the pass runs on the CPU, its rows
are more than one chunk and the workers read them themselves — from the file of a memory map
(:class:`FileRows`: a task carries the path, never the rows), from a Zarr store, or from the row blocks
an in-memory array was sent in once by :func:`shared`.

The workers must be able to import ``embeval_report`` (same version). They read a file or Zarr source by its
path where they can open it; where they cannot (a cluster that shares no disk with this machine), the rows are
sent to them in row blocks, each read and sent in turn, so no process holds the whole set: the runner sends the
graph's rows, and each chapter's process sends the set once for its passes.

**A lost cluster.** A scheduler that stops answering, or workers that die again and again under one task
(``KilledWorker``), end the pass with one line naming the cluster (:class:`ClusterLost`) and turn the engine off
in this process; a pass marked :func:`falls_back` then runs here instead when its rows fit the memory budget
(said in a warning), else the chapter fails with that line (:mod:`.dask_faults`).
"""
from __future__ import annotations

import os
import warnings
from contextlib import contextmanager, suppress

import numpy as np

from ..context import current
from ..errors import InputError
from .dask_faults import LOST, ClusterLost, check_scheduler, fits, guarded

#: rows per block when the caller names none: a block pair's float32 product tile is 64 MiB at most
BLOCK_ROWS = 4096
#: extra float32 candidates per block pair re-scored in float64 (as :data:`~.neighbours.RERANK`)
RERANK = 4
INSTALL_HINT = "pip install 'embeval-report[dask]'"
#: seconds a chapter's process waits for the run's scheduler to answer (the runner's first connection: 20 s)
CHAPTER_CONNECT_TIMEOUT = "5s"


def _require():
    """``(dask, dask.array, distributed)``, or one InputError line naming the extra to install."""
    try:
        import dask
        import dask.array as da
        import distributed
    except ImportError as exc:
        raise InputError(f"the Dask engine needs dask and distributed ({exc.name} is missing): {INSTALL_HINT}") from None
    return dask, da, distributed


def connect(scheduler: str | None = None, workers: int = 2, *, timeout: str = "20s"):
    """A ``distributed.Client``: on a new ``LocalCluster`` of ``workers`` single-threaded worker processes
    on this machine when ``scheduler`` is None (closed with the client), else on the scheduler at that
    address (``tcp://HOST:PORT``; it has ``timeout`` to answer). Close it with ``client.close()``."""
    _, _, distributed = _require()
    quiet_cluster_logs()
    if scheduler is None:
        if int(workers) < 1:
            raise InputError(f"--dask-workers: expected a whole number of at least 1, got {workers}")
        return distributed.Client(n_workers=int(workers), threads_per_worker=1, processes=True,
                                  dashboard_address=None, set_as_default=False)
    check_scheduler(scheduler)
    try:
        return distributed.Client(scheduler, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise InputError(f"--scheduler {scheduler}: no Dask scheduler answered ({exc})") from None


def quiet_cluster_logs() -> None:
    """Keep distributed's log lines (a LocalCluster's scheduler and nannies log here) off the run's stderr: a
    worker restarted, a cluster closing; what the run must know reaches it as an exception, said in one line."""
    import logging

    for name in ["distributed", *logging.root.manager.loggerDict]:  # distributed's config sets some one by one
        if name.split(".")[0] == "distributed":
            logging.getLogger(name).setLevel(logging.CRITICAL)


def worker_count(client) -> int:
    """The number of workers the client's scheduler knows now."""
    return len(client.scheduler_info().get("workers", {}))


#: this process's connections: a client per scheduler address (None: it did not answer), the in-memory arrays
#: sent by :func:`shared` and the files the workers were found to read
_engine: dict = {"clients": {}, "shared": {}, "readable": {}}


def _address() -> str | None:
    """The scheduler of the compute context in force, unless it did not answer (see :func:`engine_client`)."""
    address = current().scheduler
    return None if address is None or address in LOST or (
        address in _engine["clients"] and _engine["clients"][address] is None) else address


def engine_client():
    """The client of the context's scheduler, connected once per process at the first pass sent (None: no engine).

    A scheduler that does not answer (a chapter re-run by hand after its run's LocalCluster is gone) turns
    the engine off with a warning: the passes then run in this process, with the same numbers."""
    address = _address()
    if address is not None and address not in _engine["clients"]:
        try:
            _engine["clients"][address] = connect(address, timeout=CHAPTER_CONNECT_TIMEOUT)
        except InputError as exc:
            warnings.warn(f"{exc}; the passes run in this process instead", RuntimeWarning, stacklevel=2)
            _engine["clients"][address] = None
    return None if address is None else _engine["clients"][address]


class FileRows:
    """The rows of a C-ordered array stored in a file (``path``, byte ``offset``, ``shape``, ``dtype``: the
    data of a ``.npy``), read where they are indexed through a read-only memory map opened at the first read.

    What a task carries instead of a memory-mapped array, whose pickle would copy all its bytes: a worker
    reads only the rows of its own block, from the file."""

    ndim = 2

    def __init__(self, path: str | os.PathLike, offset: int, shape: tuple[int, int], dtype, *, read_only: bool = True):
        self.path, self.offset = os.fspath(path), int(offset)
        self.shape, self.dtype = (int(shape[0]), int(shape[1])), np.dtype(dtype)
        self.read_only = read_only  # False: the map they came from may be written through (mode "r+" or "w+")
        self._map = None

    @classmethod
    def of(cls, X) -> "FileRows | None":
        """The rows of ``X`` when it is a file's memory map (or a C-contiguous view of one, such as
        ``np.asarray`` of it or a row range), else None (also for a copy-on-write map, whose rows may differ
        from its file's)."""
        if not isinstance(X, np.ndarray) or X.ndim != 2 or not X.flags.c_contiguous or X.size == 0:
            return None
        root = X
        while isinstance(root.base, np.ndarray):
            root = root.base
        if not isinstance(root, np.memmap) or root.filename is None or root.mode == "c":
            return None
        return cls(root.filename, root.offset + X.ctypes.data - root.ctypes.data, X.shape, X.dtype,
                   read_only=root.mode == "r")

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        if self._map is None:
            self._map = np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.offset, shape=self.shape)
        return np.asarray(self._map[key])

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_map": None}

    def __dask_tokenize__(self):
        return ("FileRows", self.path, self.offset, self.shape, self.dtype.str)


def _zarr_source(X) -> dict | None:
    """``{"zarr": folder, "array": name}`` of a Zarr array stored in a local folder, else None."""
    if type(X).__module__.split(".")[0] != "zarr":
        return None
    root = getattr(getattr(X, "store", None), "root", None)
    return None if root is None else {"zarr": os.fspath(root), "array": getattr(X, "path", "") or None}


def _shared_key(X) -> tuple | None:
    return (X.__array_interface__["data"][0], X.shape, X.strides, X.dtype.str) if isinstance(X, np.ndarray) else None


def _source(X):
    """Where the workers read the rows of ``X`` from: its :func:`shared` blocks, a :class:`FileRows`, a Zarr
    source, or None (rows only this process holds)."""
    if _shared_key(X) in _engine["shared"]:
        return _engine["shared"][_shared_key(X)]
    return FileRows.of(X) or _zarr_source(X)


def readable(source, client) -> bool:
    """Whether every worker of ``client`` can open and read ``source``'s file (always, for other sources); asked
    once per file and process."""
    if not isinstance(source, FileRows):
        return True
    seen, key = _engine["readable"], (client.scheduler.address, source.path)
    if key not in seen:
        with guarded(client):
            seen[key] = all(client.run(_can_read, source.path).values())
    return seen[key]


def _can_read(path: str) -> bool:
    """Whether this process can open ``path`` and read from it (run on each worker by :func:`readable`)."""
    try:
        with open(path, "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False


def _send_rows(X, client) -> None:
    """Send the rows of ``X`` (a file's memory map that the workers cannot read: a cluster without this machine's
    disk) to the workers in row blocks of one chunk, each read here and scattered in turn (never a copy of the whole
    set in this process), once: this process's later passes over ``X`` use them as :func:`shared` blocks, and they
    are released when it ends."""
    step = _chunk_rows(X)
    starts = list(range(0, len(X), step))
    with guarded(client):
        blocks = [client.scatter(np.ascontiguousarray(X[s:s + step])) for s in starts]
    _engine["shared"][_shared_key(X)] = (blocks, [*starts, len(X)])


def _chunk_rows(X) -> int:
    """Rows of one chunk of ``X`` as the local passes read it (:func:`~.device.iter_chunks`)."""
    from .device import chunk_rows

    return chunk_rows(X.shape[0], X.shape[1] * 8 * 4)


def takes(X, device, rows: int | None = None) -> bool:
    """Whether a pass over the rows of ``X`` runs on the engine's cluster: the compute context names a scheduler,
    the pass would run on the CPU (a GPU's pass stays on its GPU), ``X`` has more than ``rows`` rows (default:
    one chunk, :func:`~.device.chunk_rows`) and the workers can have them (:func:`_source`): they read a file
    themselves, or, when they cannot open it (no shared disk), its row blocks are sent to them from here once
    (:func:`_send_rows`)."""
    if _address() is None:
        return False
    from .device import resolve_device

    if resolve_device(device).type != "cpu" or getattr(X, "ndim", 0) != 2:
        return False
    if X.shape[0] <= (_chunk_rows(X) if rows is None else rows):
        return False
    source = _source(X)
    if source is None or engine_client() is None:
        return False
    if not readable(source, engine_client()):  # workers without this machine's disk: the rows go to them
        _send_rows(X, engine_client())
    return True



def takes_columns(*arrays) -> bool:
    """Whether a whole-column pass over these 2-D arrays (:func:`ks_statistics`) runs on the engine's cluster:
    an engine is on and one of them has more than one chunk of rows (the arrays are sent in column blocks)."""
    if _address() is None:
        return False
    return any(len(a) > _chunk_rows(a) for a in arrays) and engine_client() is not None


@contextmanager
def shared(*arrays, device="cpu", client=None, rows: int | None = None):
    """Within the block, the passes over these in-memory arrays run on the cluster too (see :func:`takes`):
    each array larger than one chunk of rows (``rows``) is scattered to the workers once, in row blocks of that
    many rows, read and sent one at a time (never a copy of the whole array here), and released at the end.
    ``client``: send to its cluster whatever the context says (the runner's graph of a file the workers cannot
    read). Without an engine (or on a GPU) nothing happens."""
    from .device import resolve_device

    on = (client is not None or _address() is not None) and resolve_device(device).type == "cpu"
    big = [X for X in arrays if on and _shared_key(X) is not None and X.ndim == 2 and len(X) > (rows or _chunk_rows(X))
           and _shared_key(X) not in _engine["shared"]]
    client = client or (engine_client() if big else None)
    keys = []
    try:
        with guarded(client):
            for X in big if client is not None else ():
                step = rows or _chunk_rows(X)
                starts = list(range(0, len(X), step))
                blocks = [client.scatter(np.ascontiguousarray(X[s:s + step])) for s in starts]
                keys.append(_shared_key(X))
                _engine["shared"][keys[-1]] = (blocks, [*starts, len(X)])
    except ClusterLost as exc:  # nothing sent: the passes run here, where the rows fit
        for key in keys:
            _engine["shared"].pop(key, None)
        keys = []
        if not fits(*big):
            raise
        warnings.warn(f"{exc}; the passes were computed in this process instead (the same numbers to rounding)",
                      RuntimeWarning, stacklevel=3)
    try:
        yield
    finally:
        for key in keys:
            sent = _engine["shared"].pop(key, None)
            if sent is not None:
                with suppress(Exception):  # a cluster lost meanwhile holds nothing more
                    client.cancel(sent[0])


def as_dask(X, block_rows: int | None = None):
    """``X`` as a dask array of row blocks (``block_rows`` rows each, every column in one block).

    ``X``: a NumPy array, a dask array, a Zarr store path (``str``/``PathLike``), ``{"zarr": path, "array":
    name}``, a Zarr array or a memory map (or :class:`FileRows`): the tasks of a file read their own rows from
    it; an in-memory array travels in the graph.
    """
    _, da, _ = _require()
    if not isinstance(X, (dict, str, os.PathLike, da.Array, FileRows)):
        X = _zarr_source(X) or FileRows.of(X) or np.asarray(X)  # a file's rows are read by the workers, not pickled
    if isinstance(X, dict) and "zarr" in X:
        X = da.from_zarr(os.fspath(X["zarr"]), component=X.get("array"))
    elif isinstance(X, (str, os.PathLike)):
        X = da.from_zarr(os.fspath(X))
    elif not isinstance(X, da.Array):
        X = da.from_array(X, chunks=(min(block_rows or BLOCK_ROWS, max(len(X), 1)), X.shape[1]),
                          meta=np.empty((0, X.shape[1]), X.dtype))
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
    with guarded(client):
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


def ks_statistics(X, Y, *, client=None, columns: int = 16, pvalues: bool = False):
    """The two-sample Kolmogorov–Smirnov statistic of every dimension of ``X`` against ``Y``
    (:func:`scipy.stats.ks_2samp`, as :func:`~embeval_report.metrics.two_sample.ks_dimensions`); with
    ``pvalues``, ``(statistics, p-values)``, both as scipy gives them.

    Exact ECDFs need every row of a dimension at once, so this pass runs over column blocks of
    ``columns`` dimensions (all rows of both sets per task), not row blocks. With a client, an in-memory
    array is scattered in those column blocks (not sent inside the graph).
    """
    dask, _, _ = _require()
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X has {X.shape[1]} dimensions, Y {Y.shape[1]}")
    d = X.shape[1]
    parts = [dask.delayed(_ks_block)(x, y)
             for x, y in zip(_column_blocks(X, columns, client), _column_blocks(Y, columns, client))]
    out = _compute(client, *parts)
    stat, p = (np.concatenate([o[i] for o in out]) if out else np.empty(0) for i in (0, 1))
    assert len(stat) == d
    return (stat, p) if pvalues else stat


def _column_blocks(X, columns: int, client) -> list:
    """Blocks of ``columns`` whole columns of ``X``: scattered by ``client`` when only this process holds
    ``X``, else tasks of its dask array."""
    if client is not None and isinstance(X, np.ndarray) and FileRows.of(X) is None:
        return client.scatter([np.ascontiguousarray(X[:, j:j + columns]) for j in range(0, X.shape[1], columns)])
    Xd = as_dask(X)
    return list(Xd.rechunk((Xd.shape[0], columns)).to_delayed()[0])


def _ks_block(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from scipy import stats

    res = stats.ks_2samp(x, y, axis=0)
    return tuple(np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in (res.statistic, res.pvalue))


def _pair_candidates(qb, cb, q0: int, c0: int, k: int, metric: str, self_pair: bool):
    """One block pair: the ``k + RERANK`` best corpus rows of each query row by float32 product (exact ties:
    the lower index), with their float64 scores computed as :func:`~.neighbours.knn` computes them.
    Returns ``(global indices int64 (m, kk), float64 scores (m, kk))``."""
    import torch

    from .device import exact_matmul, unit_rows

    # float32 rows as float64 copies (writable: the blocks may be read-only maps)
    q64 = torch.from_numpy(np.asarray(qb, dtype=np.float32).astype(np.float64))
    c64 = torch.from_numpy(np.asarray(cb, dtype=np.float32).astype(np.float64))
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
    index. The lists equal :func:`~embeval_report.kernels.knn`'s (exact ties: the lower index first). Rows sent
    by :func:`shared` are read from their blocks on the workers (``block_rows`` None).
    Returns ``(indices (n, k) int64, scores (n, k) float32)``.
    """
    dask, _, _ = _require()
    if metric not in ("cosine", "dot"):
        raise ValueError(f"knn_blockwise supports metric 'cosine' or 'dot', not {metric!r}")
    sent = _source(X) if block_rows is None else None
    if isinstance(sent, tuple):  # rows sent by :func:`shared`: the blocks as sent
        blocks, starts = sent[0], np.asarray(sent[1], dtype=int)
    else:
        Xd = as_dask(X, block_rows)
        blocks = Xd.to_delayed()[:, 0]
        starts = np.concatenate([[0], np.cumsum(Xd.chunks[0])]).astype(int)
    n = int(starts[-1])
    if k < 1 or k + int(exclude_self) > n:
        raise ValueError(f"k = {k} needs more than {n - int(exclude_self)} candidate neighbours")
    pair = dask.delayed(_pair_candidates, pure=True)
    merge = dask.delayed(_merge_candidates, pure=True)
    merged = [merge([pair(blocks[i], blocks[j], int(starts[i]), int(starts[j]), k, metric, exclude_self and i == j)
                     for j in range(len(blocks))], k)
              for i in range(len(blocks))]
    out = _compute(client, *merged)
    return (np.ascontiguousarray(np.concatenate([o[0] for o in out])),
            np.ascontiguousarray(np.concatenate([o[1] for o in out])))


# ---------------------------------------------------------------------------------------------
# The kernels' passes as tasks (what :func:`takes` sends)
# ---------------------------------------------------------------------------------------------

def _row_blocks(X, rows: int) -> tuple[list, list[int]]:
    """``(blocks, bounds)``: the row blocks of ``X`` as task inputs — the :func:`shared` ones as they were
    sent, else ``rows`` rows each, read by the workers from the source (:func:`as_dask`) — and their
    row bounds (``len(blocks) + 1`` of them)."""
    source = _source(X)
    if isinstance(source, tuple):
        return source
    Xd = as_dask(X if source is None else source, rows)
    return list(Xd.to_delayed()[:, 0]), [0, *np.cumsum(Xd.chunks[0]).tolist()]


def _summed(client, parts: list) -> tuple:
    """The element-wise sum of the tasks' results (tuples of arrays), added here in task order (the same
    numbers at every run) as each is fetched."""
    dask, _, _ = _require()
    with guarded(client):
        if client is None:
            results = iter(dask.compute(*parts))
        else:
            futures = client.compute(parts)
            results = (f.result() for f in futures)
        total = None
        for part in results:
            total = part if total is None else tuple(a + b for a, b in zip(total, part))
    return total


def block_moments(X, *, transform=None, shift: np.ndarray | None = None, n_blocks: int = 1, seed: int = 0,
                  client=None):
    """:func:`~.moments.block_moments` of ``X`` as Dask tasks over row ranges (float64, on the workers' CPU).

    Each task reads its rows, applies ``transform`` (it must pickle: a module function such as
    :func:`~.device.unit_rows`, or a closure such as those of
    :meth:`~embeval_report.metrics.isotropy.PrincipalDirections.remover`), subtracts ``shift`` and returns the
    partial ``(count, S, G)`` of the blocks its rows belong to; the row -> block assignment
    (:func:`~.blocks.assign_blocks`) is made here once and each task gets its slice. The partials are summed
    here. ``client``: default the engine's. Returns a :class:`~.blocks.BlockMoments`.
    """
    from .blocks import BlockMoments, assign_blocks, block_chunk_rows

    dask, _, _ = _require()
    n, d = X.shape
    n_blocks = int(max(1, min(n_blocks, n)))
    shift = np.zeros(d) if shift is None else np.asarray(shift, float)
    block_of = assign_blocks(n, n_blocks, seed).astype(np.int16 if n_blocks <= 2**15 else np.int32)
    rows = block_chunk_rows(n, d, n_blocks, np.dtype(X.dtype).itemsize) or _chunk_rows(X)
    blocks, bounds = _row_blocks(X, rows)
    task = dask.delayed(_moment_partials)
    parts = [task(b, block_of[s:e], n_blocks, transform, shift) for b, s, e in zip(blocks, bounds, bounds[1:])]
    count, S, G = _summed(client or engine_client(), parts)
    return BlockMoments(count, S, G, shift)


def _moment_partials(block, block_of: np.ndarray, n_blocks: int, transform, shift: np.ndarray) -> tuple:
    """One row range's ``(count, S, G)`` per block, float64 (zeros for blocks without rows here)."""
    import torch

    x = torch.from_numpy(np.array(block, dtype=np.float64))
    b, order = torch.sort(torch.from_numpy(block_of.astype(np.int64)), stable=True)
    blocks, sizes = torch.unique_consecutive(b, return_counts=True)
    shift_t = torch.from_numpy(np.array(shift, dtype=np.float64))
    count, S, G = np.zeros(n_blocks), None, None
    for blk, rows in zip(blocks.tolist(), torch.split(x[order], sizes.tolist())):
        rows = (transform(rows) if transform is not None else rows) - shift_t
        if S is None:  # ``transform`` may change the width
            w = rows.shape[1]
            S, G = torch.zeros(n_blocks, w, dtype=torch.float64), torch.zeros(n_blocks, w, w, dtype=torch.float64)
        count[blk] += len(rows)
        S[blk] += rows.sum(0)
        G[blk] += rows.T @ rows
    return count, S.numpy(), G.numpy()


def column_mean(X, *, client=None) -> np.ndarray:
    """:func:`~.moments.column_mean` of ``X`` (float64) as Dask tasks over row ranges of one chunk."""
    dask, _, _ = _require()
    blocks, _ = _row_blocks(X, _chunk_rows(X))
    (total,) = _summed(client or engine_client(), [dask.delayed(_column_sum)(b) for b in blocks])
    return total / X.shape[0]


def _column_sum(block) -> tuple[np.ndarray]:
    return (np.asarray(block, dtype=np.float64).sum(0),)


def potential_rows(X, t: float = 2.0, *, transform=None, block: int, client=None) -> np.ndarray:
    r""":func:`~.pairs.gaussian_potential_rows` of ``X`` as Dask tasks:
    :math:`L_i = \log \sum_{j \ne i} \exp(-t \lVert z_i - z_j \rVert^2)` of the rows ``z = transform(x)``.

    One task per row block of ``block`` rows transforms it; one task per pair of blocks ``(a, b >= a)``
    (each unordered pair of rows once) returns the log-sum-exp of each of its rows and, for ``b > a``, of each
    of its columns; one task per block merges the partials of its rows with ``np.logaddexp.reduce``. A task
    holds one ``block x block`` tile, never the n x n matrix.
    """
    dask, _, _ = _require()
    blocks, _ = _row_blocks(X, block)
    z = [dask.delayed(_transformed)(b, transform, t) for b in blocks]
    pair = dask.delayed(_potential_pair, nout=2)
    parts: list[list] = [[] for _ in z]
    for a in range(len(z)):
        for b in range(a, len(z)):
            rows, cols = pair(z[a], z[b], t, a == b)
            parts[a].append(rows)
            if b != a:
                parts[b].append(cols)
    merged = [dask.delayed(_logaddexp)(p) for p in parts]
    return np.concatenate(_compute(client or engine_client(), *merged))


def _transformed(block, transform, t: float) -> tuple[np.ndarray, np.ndarray]:
    """A row block's float64 rows after ``transform`` and ``t`` times their squared norms."""
    import torch

    x = torch.from_numpy(np.array(block, dtype=np.float64))
    Z = transform(x) if transform is not None else x
    return Z.numpy(), (t * (Z * Z).sum(1)).numpy()


def _potential_pair(za: tuple, zb: tuple, t: float, same: bool) -> tuple[np.ndarray, np.ndarray | None]:
    r"""The log-sum-exp over the tile of rows ``za`` x rows ``zb`` of each row and (``same`` False) each
    column, of :math:`-t \lVert z_a - z_b \rVert^2` (the diagonal excluded when ``same``)."""
    import torch

    (Za, ta), (Zb, tb) = ([torch.as_tensor(v) for v in z] for z in (za, zb))
    L = (Za @ Zb.T).mul_(2.0 * t).sub_(ta[:, None]).sub_(tb[None, :])
    L.clamp_max_(0.0)
    if same:
        L.fill_diagonal_(-torch.inf)
    return torch.logsumexp(L, 1).numpy(), None if same else torch.logsumexp(L, 0).numpy()


def _logaddexp(parts: list) -> np.ndarray:
    return np.logaddexp.reduce(np.stack(parts), axis=0)
