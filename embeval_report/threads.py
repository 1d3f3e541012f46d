"""Native thread pools limited for a block: small BLAS calls on one thread.

On a busy machine, OpenBLAS' and OpenMP's threads on a small product or decomposition spend their time waiting for
one another: a 5,000 x 64 x 64 product took 2 ms of CPU on one thread and 38-107 ms on two while other processes
ran. :func:`blas_threads` runs a block with fewer BLAS threads through one cached
:class:`threadpoolctl.ThreadpoolController` (``threadpool_limits`` looks up the loaded libraries on every call:
about 2 ms, as much as the work it limits). The cache is refreshed when a module was imported since, which is when
a new native library can have been loaded.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

_controller = None
_modules_seen = -1


def _current():
    """The cached controller, made again when modules were imported since it was made."""
    global _controller, _modules_seen
    if _controller is None or len(sys.modules) != _modules_seen:
        from threadpoolctl import ThreadpoolController

        _controller, _modules_seen = ThreadpoolController(), len(sys.modules)
    return _controller


@contextmanager
def blas_threads(limit: int = 1, user_api: str | None = "blas") -> Iterator[None]:
    """The block with at most ``limit`` threads in the BLAS libraries (``user_api="blas"``), in OpenMP's
    (``"openmp"``) or in both (``None``); the counts are restored after it. On one thread a matrix product or
    decomposition gives the same values on a machine of any core count."""
    with _current().limit(limits=limit, user_api=user_api):
        yield
