"""The C library's functions the kernels call directly (``madvise`` in :mod:`.prefetch`, ``malloc_trim`` in
:mod:`.heap`), where the platform has them."""
from __future__ import annotations

import ctypes
import ctypes.util


def libc_function(name: str, argtypes: tuple, restype=ctypes.c_int):
    """The C library's function ``name`` with its signature (errno kept for :func:`ctypes.get_errno`), or None
    where there is none (Windows; a C library without it, such as ``malloc_trim`` outside glibc)."""
    try:
        f = getattr(ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    f.argtypes, f.restype = argtypes, restype
    return f
