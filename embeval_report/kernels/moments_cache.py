"""Passes over the run's vector set made once per run and read by every chapter that asks again.

The isotropy, uniformity and collapse chapters (and the correction chapter, on sets it measures whole)
each need the column mean, the block second moments and the principal directions of the same set; at
10^7 rows each of those passes takes minutes. :func:`remembered` keeps what such a pass returns, keyed by
the identity of the set and a description of the pass, and hands it to the next chapter's process.

Only a set memory-mapped whole from a file (the runner's prepared ``vectors.npy``, or a ``.npy`` a user
maps) has an identity that outlives a process: its file's real path, size and modification time, and the
offset, shape and dtype of the map. Anything else (an array in memory, a slice, a sample) is computed every
time, as before. Small results stay in memory per process; when the runner names a folder (next to the
prepared set) every result is also written there as an ``.npz`` the next chapter reads.
"""
from __future__ import annotations

import hashlib
import os
import zipfile
from typing import Callable

import numpy as np

from ..context import current

#: results of at most this many bytes are also kept in this process's memory
MEMORY_ITEM_BYTES = 2**20

_memory: dict[tuple, tuple[np.ndarray, ...]] = {}


def _settings():
    """The run's moments cache (:attr:`~embeval_report.context.ComputeContext.moments_cache`): its folder (None:
    small results in memory only) and ``log(event)``, told ``{"pass", "source": "computed" | "cache"}`` for each
    pass over the run's set."""
    return current().moments_cache


def space_of(X) -> str | None:
    """The identity of a set memory-mapped whole from a file (the map itself or a plain-array view of all of
    it, as :func:`~.device.as_numpy` makes), or ``None`` for any other array."""
    m = X
    while isinstance(getattr(m, "base", None), np.ndarray):  # up to the map made from the file
        m = m.base
    if not isinstance(m, np.memmap) or not getattr(m, "filename", None) or not isinstance(X, np.ndarray):
        return None
    whole = (X.shape == m.shape and X.dtype == m.dtype and X.flags.c_contiguous and m.flags.c_contiguous
             and X.__array_interface__["data"][0] == m.__array_interface__["data"][0])
    try:
        st = os.stat(m.filename)
    except OSError:
        return None
    if not whole or m.offset + m.nbytes != st.st_size:  # a slice or a view of part of the file
        return None
    return (f"{os.path.realpath(m.filename)}|{st.st_size}|{st.st_mtime_ns}|{m.offset}|{m.shape}|"
            f"{m.dtype.str}")


def digest(*arrays) -> str:
    """A short digest of arrays' shapes, dtypes and bytes (a pass's parameters, e.g. a shift)."""
    h = hashlib.blake2b(digest_size=12)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.shape}{a.dtype.str}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def remembered(X, what: str, compute: Callable[[], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """``compute()`` (a tuple of arrays) for the pass ``what`` over ``X``, from the cache when an earlier
    call with the same set and the same ``what`` left it there."""
    space = space_of(X)
    if space is None:
        return compute()
    key = hashlib.blake2b(f"{space}|{what}".encode(), digest_size=16).hexdigest()
    held = (_settings().folder, key)  # in memory per cache (a run's folder, or none)
    if held in _memory:
        item = tuple(np.array(a) for a in _memory[held])  # the caller's own copies
    else:
        item = _read(key)
    source = "computed" if item is None else "cache"
    if item is None:
        item = tuple(np.asarray(a) for a in compute())
        _write(key, item)
    if held not in _memory and sum(a.nbytes for a in item) <= MEMORY_ITEM_BYTES:
        _memory[held] = tuple(np.array(a) for a in item)
    log = _settings().log
    if log is not None:
        log({"pass": what, "source": source})
    return item


def _read(key: str) -> tuple[np.ndarray, ...] | None:
    _folder = _settings().folder
    if _folder is None or not (_folder / f"{key}.npz").is_file():
        return None
    try:
        with np.load(_folder / f"{key}.npz", allow_pickle=False) as z:
            return tuple(z[f"a{i}"] for i in range(len(z.files)))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        from ..errors import notice  # a damaged entry: said, removed, computed again

        notice(f"prepared cache: moments {_folder / f'{key}.npz'} is unreadable ({exc}); computing them again")
        (_folder / f"{key}.npz").unlink(missing_ok=True)
        return None


def _write(key: str, item: tuple[np.ndarray, ...]) -> None:
    _folder = _settings().folder
    if _folder is None:
        return
    _folder.mkdir(parents=True, exist_ok=True)
    tmp = _folder / f"{key}.tmp.npz"
    np.savez(tmp, **{f"a{i}": a for i, a in enumerate(item)})
    os.replace(tmp, _folder / f"{key}.npz")
