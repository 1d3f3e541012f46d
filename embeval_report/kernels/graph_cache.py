"""One k-NN graph per vector space per run: computed once, then read by every chapter.

:func:`~.neighbours.knn` asks this cache before computing the self-query graph of a set. Graphs
are keyed by a fingerprint of the float32 rows (so a corrected space, another run or another
snapshot gets its own) plus the product (the cosine graph, a re-scored graph, the row potentials of
the same sweep), and graphs are stored with at least ``min_k`` neighbours, so a
chapter asking for k and one asking for k + 1 share one computation. Within a process the last
graphs stay in memory; when the runner names a folder (its prepared cache), each graph is also
written there as ``.npy`` files that the next chapter's process memory-maps.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Callable

import numpy as np
import xxhash

from ..context import current

#: bytes of graphs kept in memory per process (least recently used dropped first)
MEMORY_BYTES = 512 * 2**20

#: bytes of a memory-mapped set read from its file at a time by :func:`fingerprint`
READ_BYTES = 4 * 2**20

#: fingerprints of memory-mapped sets in this process, by their file's identity and state (see :func:`fingerprint`)
_file_prints: dict[tuple, str] = {}

#: graphs held in this process, per cache (a run's folder, or none): one run never reads another's graphs as its own
_memory: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()


def _settings():
    """The run's graph cache (:attr:`~embeval_report.context.ComputeContext.graph_cache`): its folder (None: memory
    only), the smallest k a graph is stored with, and ``log(event)``, told ``{"space", "metric", "k", "source":
    "computed" | "cache"}`` per request."""
    return current().graph_cache


def folder():
    """The folder graphs are stored in (a report run's prepared cache), or None when they are kept in memory only."""
    return _settings().folder


def clear_memory() -> None:
    """Forget the graphs held in this process (the folder, if any, is left as it is)."""
    _memory.clear()


def fingerprint(X32: np.ndarray) -> str:
    """Hex digest (XXH3, 128 bits: 17 GB/s against blake2b's 1 GB/s, so an in-memory set of 3 GB costs 0.2 s
    instead of 3 s per call) of the shape and float32 bytes of a set: the identity of its vector space.

    ``X32``: float32 rows, or any rows as float32 (another dtype, a view with strides, a
    :class:`~.device.RowMap`): those are digested :data:`READ_BYTES` of rows at a time, with the digest of their
    float32 copy, never copied whole (a row map was copied row by row for its key: 2.95 GiB at 300k x 768).

    The float32 rows of a memory map are read from its file, :data:`READ_BYTES` at a time, not through the map:
    its pages would stay in this process's resident memory (the runner's peak in ``run.json``) after the pass. A
    read-only map's digest is remembered in the process until its file changes (size, modification time or inode),
    so a chapter that asks several caches about the run's set reads it once."""
    from .dask_engine import FileRows

    h = xxhash.xxh3_128()
    h.update(np.asarray(X32.shape, dtype=np.int64).tobytes())
    rows = FileRows.of(X32) if isinstance(X32, np.ndarray) and X32.dtype == np.float32 else None
    if rows is None:
        whole = isinstance(X32, np.ndarray) and X32.dtype == np.float32 and X32.flags.c_contiguous
        step = len(X32) if whole else max(1, READ_BYTES // max(4 * X32.shape[1], 1))
        for s in range(0, len(X32), step):  # anything else as float32 rows, a piece at a time: never a copy of
            h.update(memoryview(np.ascontiguousarray(X32[s:s + step], dtype=np.float32)).cast("B"))  # the set
        return h.hexdigest()
    if not rows.read_only:  # this process may write the rows through its map: read them each time
        return _file_digest(h, rows, X32.nbytes)
    st = os.stat(rows.path)
    key = (os.path.realpath(rows.path), rows.offset, X32.shape, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _file_prints:
        _file_prints[key] = _file_digest(h, rows, X32.nbytes)
    return _file_prints[key]


def _file_digest(h, rows, nbytes: int) -> str:
    """``h`` updated with ``nbytes`` of the file behind ``rows`` from its offset, read :data:`READ_BYTES` at a time."""
    left, buffer = nbytes, bytearray(min(READ_BYTES, nbytes))
    with open(rows.path, "rb") as f:
        f.seek(rows.offset)
        while left:
            got = f.readinto(memoryview(buffer)[:min(left, len(buffer))])
            if not got:
                raise OSError(f"{rows.path}: ended {left:,} bytes before the memory-mapped rows")
            h.update(memoryview(buffer)[:got])
            left -= got
    return h.hexdigest()


def cached_products(X32: np.ndarray, wants: dict[str, int], exclude_self: bool,
                    compute: Callable[[dict[str, int]], dict[str, tuple]]) -> dict[str, tuple]:
    """The products of one sweep over the self-query Gram of ``X32``, from the cache where it holds them.

    ``wants`` maps a product key to k: a neighbour graph (``"cosine"``, ``"mutual_proximity"``, ...)
    wants its first k neighbours, a row array (k = 0, e.g. ``"potential-t2.0"``) is taken whole.
    ``compute(missing)`` gets the keys neither memory nor the folder holds (graphs with at least
    ``max(k, min_k)`` neighbours) and computes them in one pass; they are stored and returned with the rest.
    ``compute`` may return further products of the same pass (not in ``wants``): they are stored too.
    """
    space = fingerprint(X32)
    suffix = "others" if exclude_self else "all"
    found, missing = {}, {}
    for name, k in wants.items():
        item = _memory.get(_held(f"{space}-{name}-{suffix}")) or _read(f"{space}-{name}-{suffix}")
        if item is None or (k and item[0].shape[1] < k):
            missing[name] = min(max(k, _settings().min_k), len(X32) - int(exclude_self)) if k else 0
        else:
            found[name] = item
    computed = compute(missing) if missing else {}
    for name, item in computed.items():
        _write(f"{space}-{name}-{suffix}", item)
    for name, item in computed.items():
        if name not in wants:
            _remember(f"{space}-{name}-{suffix}", item)
    out = {}
    for name, k in wants.items():
        item = computed.get(name) or found[name]
        _remember(f"{space}-{name}-{suffix}", item)
        log = _settings().log
        if log is not None:
            log({"space": space, "metric": name, "k": int(k),
                  "source": "computed" if name in computed else "cache"})
        out[name] = tuple(np.array(a[:, :k]) if k else np.array(a) for a in item)
    return out


def stored_product(X32: np.ndarray, name: str, exclude_self: bool = True) -> tuple | None:
    """A product of this space held in memory or the folder (e.g. the potential of a cosine sweep), or None."""
    key = f"{fingerprint(X32)}-{name}-{'others' if exclude_self else 'all'}"
    item = _memory.get(_held(key)) or _read(key)
    if item is not None:
        _remember(key, item)
    return item


def cached_graph(X32: np.ndarray, k: int, metric: str, exclude_self: bool,
                 compute: Callable[[int], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` neighbours of the self-query graph of ``X32``, computed by ``compute(k_stored)`` only
    when neither memory nor the folder holds this space's graph with at least ``k`` neighbours."""
    return cached_products(X32, {metric: k}, exclude_self, lambda missing: {metric: compute(missing[metric])})[metric]


def _held(key: str) -> tuple:
    """The memory key of a graph: the run's cache folder (None: memory only) and the graph's key."""
    return (_settings().folder, key)


def _remember(key: str, item) -> None:
    held = _held(key)
    _memory[held] = item
    _memory.move_to_end(held)
    limit = current().share("graphs") or MEMORY_BYTES
    while len(_memory) > 1 and sum(a.nbytes for it in _memory.values() for a in it) > limit:
        _memory.popitem(last=False)


def _read(key: str):
    _folder = _settings().folder
    if _folder is None or not (_folder / f"{key}.0.npy").is_file():
        return None
    parts, i = [], 0
    try:
        while (_folder / f"{key}.{i}.npy").is_file():
            parts.append(np.load(_folder / f"{key}.{i}.npy", mmap_mode="r", allow_pickle=False))
            i += 1
    except (OSError, ValueError, EOFError) as exc:  # a damaged entry: said, removed, computed again
        from ..errors import notice

        notice(f"prepared cache: neighbour graph {_folder / f'{key}.{i}.npy'} is unreadable ({exc}); computing it again")
        for part in _folder.glob(f"{key}.*.npy"):
            part.unlink(missing_ok=True)
        return None
    return tuple(parts)


def _write(key: str, item) -> None:
    _folder = _settings().folder
    if _folder is None:
        return
    _folder.mkdir(parents=True, exist_ok=True)
    for i in reversed(range(len(item))):  # part 0 last: its presence marks a complete product
        tmp = _folder / f"{key}.{i}.tmp.npy"
        np.save(tmp, item[i])
        os.replace(tmp, _folder / f"{key}.{i}.npy")
