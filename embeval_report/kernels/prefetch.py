"""Reading scattered rows of a memory-mapped set: the pages the rows lie on are asked of the OS at once
(``madvise(MADV_WILLNEED)``, read asynchronously and side by side) before the rows are gathered, instead of
being faulted in one at a time, each fault reading ahead the device's whole readahead window.

Measured on the development machine (readahead window 8 MiB), 19,791 distinct rows of a 1,000,000 x 768 float32
map, page cache dropped: the plain gather read the whole 3.07 GB file in 2.2 s; with the pages asked first it
read 0.14 GB in 0.44 s. A map of 10M rows is read 10 times over by the plain gather of such a sample."""
from __future__ import annotations

import ctypes
import mmap

import numpy as np

from .device import RowMap
from .libc import libc_function

#: ``madvise`` advice: the pages will be needed soon (the same value on Linux and macOS)
MADV_WILLNEED = getattr(mmap, "MADV_WILLNEED", 3)
#: ``madvise(address, length, advice)``; None where there is none (Windows): rows are read as before
_MADVISE = libc_function("madvise", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int))


def is_mapped(X) -> bool:
    """Whether the numpy array ``X`` lies in a memory-mapped file (``np.load(..., mmap_mode=...)`` or a view of one)."""
    while X is not None:
        if isinstance(X, (np.memmap, mmap.mmap)):
            return True
        X = getattr(X, "base", None)
    return False


def prefetch_rows(address: int, row_bytes: int, rows: np.ndarray) -> int:
    """Ask the OS for the pages of rows ``rows`` (row numbers) of the rows of ``row_bytes`` bytes each that start at
    ``address``, neighbouring pages in one request. Returns the number of requests (0 without madvise)."""
    if _MADVISE is None or len(rows) == 0:
        return 0
    page = mmap.PAGESIZE
    rows = np.asarray(rows, dtype=np.int64)
    if np.any(rows[1:] < rows[:-1]):  # the callers' rows are ascending already; repeated rows merge below
        rows = np.sort(rows)
    offsets = address + rows * row_bytes
    first, last = offsets // page, (offsets + row_bytes - 1) // page
    new = np.ones(len(first), dtype=bool)
    new[1:] = first[1:] > last[:-1] + 1  # a request starts where the pages of the rows before it end
    starts = np.flatnonzero(new)
    for a, b in zip(first[starts].tolist(), np.maximum.reduceat(last, starts).tolist()):
        _MADVISE(a * page, (b - a + 1) * page, MADV_WILLNEED)
    return len(starts)


def prefetch_array_rows(X, rows: np.ndarray) -> int:
    """:func:`prefetch_rows` for the rows ``rows`` of a C-contiguous memory-mapped array ``X`` (or of the array a
    :class:`~.device.RowMap` reads them from); nothing for an array in memory. Returns the number of requests."""
    if isinstance(X, RowMap):
        X = X.base
    if not isinstance(X, np.ndarray) or not is_mapped(X) or not X.flags.c_contiguous or X.ndim != 2:
        return 0
    return prefetch_rows(X.ctypes.data, X.strides[0], rows)


def read_rows(X, rows: np.ndarray) -> np.ndarray:
    """``np.asarray(X[rows])`` (``rows`` ascending: read in file order), a memory map's pages asked first
    (:func:`prefetch_array_rows`)."""
    prefetch_array_rows(X, rows)
    return np.asarray(X[rows])
