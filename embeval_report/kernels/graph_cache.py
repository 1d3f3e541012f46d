"""One k-NN graph per vector space per run: computed once, then read by every chapter.

:func:`~.neighbours.knn` asks this cache before computing the self-query graph of a set. Graphs
are keyed by a fingerprint of the float32 rows (so a corrected space, another run or another
snapshot gets its own) plus the metric, and stored with at least ``min_k`` neighbours, so a
chapter asking for k and one asking for k + 1 share one computation. Within a process the last
graphs stay in memory; when the runner names a folder (its prepared cache), each graph is also
written there as two ``.npy`` files that the next chapter's process memory-maps.
"""
from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from pathlib import Path
from typing import Callable

import numpy as np

#: bytes of graphs kept in memory per process (least recently used dropped first)
MEMORY_BYTES = 512 * 2**20

_folder: Path | None = None
_min_k = 0
_log: Callable[[dict], None] | None = None
_memory: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()


def use_graph_cache(folder: str | os.PathLike | None, *, min_k: int = 0,
                    log: Callable[[dict], None] | None = None) -> None:
    """Store graphs in ``folder`` (None: memory only), with at least ``min_k`` neighbours each;
    ``log(event)`` receives ``{"space", "metric", "k", "source": "computed" | "cache"}`` per request."""
    global _folder, _min_k, _log
    _folder = None if folder is None else Path(folder)
    _min_k, _log = int(min_k), log


def clear_memory() -> None:
    """Forget the graphs held in this process (the folder, if any, is left as it is)."""
    _memory.clear()


def fingerprint(X32: np.ndarray) -> str:
    """Hex digest of the shape and float32 bytes of a set: the identity of its vector space."""
    h = hashlib.blake2b(digest_size=12)
    h.update(np.asarray(X32.shape, dtype=np.int64).tobytes())
    h.update(memoryview(np.ascontiguousarray(X32, dtype=np.float32)).cast("B"))
    return h.hexdigest()


def cached_graph(X32: np.ndarray, k: int, metric: str, exclude_self: bool,
                 compute: Callable[[int], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` neighbours of the self-query graph of ``X32``, computed by ``compute(k_stored)`` only
    when neither memory nor the folder holds this space's graph with at least ``k`` neighbours."""
    space = fingerprint(X32)
    key = f"{space}-{metric}-{'others' if exclude_self else 'all'}"
    graph = _memory.get(key) or _read(key)
    source = "cache"
    if graph is None or graph[0].shape[1] < k:
        stored = min(max(k, _min_k), len(X32) - int(exclude_self))
        graph = compute(stored)
        _write(key, graph)
        source = "computed"
    _remember(key, graph)
    if _log is not None:
        _log({"space": space, "metric": metric, "k": int(k), "source": source})
    idx, val = graph
    return np.array(idx[:, :k]), np.array(val[:, :k])


def _remember(key: str, graph) -> None:
    _memory[key] = graph
    _memory.move_to_end(key)
    while len(_memory) > 1 and sum(i.nbytes + v.nbytes for i, v in _memory.values()) > MEMORY_BYTES:
        _memory.popitem(last=False)


def _read(key: str):
    if _folder is None or not (_folder / f"{key}.idx.npy").is_file():
        return None
    return (np.load(_folder / f"{key}.idx.npy", mmap_mode="r"), np.load(_folder / f"{key}.val.npy", mmap_mode="r"))


def _write(key: str, graph) -> None:
    if _folder is None:
        return
    _folder.mkdir(parents=True, exist_ok=True)
    for part, array in zip(("val", "idx"), graph[::-1]):  # indices last: their presence marks a complete graph
        tmp = _folder / f"{key}.{part}.tmp.npy"
        np.save(tmp, array)
        os.replace(tmp, _folder / f"{key}.{part}.npy")
