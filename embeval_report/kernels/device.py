"""Where and how the kernels run: device choice, chunking, row transforms.

Every pairwise or Gram computation in the package goes through :mod:`embeval_report.kernels`,
so memory stays bounded (rows are processed in chunks; no n x n matrix is ever built) and the
same code runs on ``cpu`` and ``cuda``.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import torch

from ..context import current, resolve_device  # noqa: F401  (re-exported: kernels.resolve_device)
from ..progress import progress

#: bytes a single chunk of work may use under the default memory budget (256 MiB); a budget the user sets
#: (``--memory-budget``) gives a sixteenth of it instead (:func:`chunk_budget`)
CHUNK_BYTES = 256 * 2**20

#: devices where ``"fast"`` precision takes bfloat16 candidates (the CPU has no fast bfloat16 product here)
FAST_DEVICES = ("cuda",)


def candidate_dtype(device: torch.device) -> torch.dtype:
    """The dtype of the products that choose k-NN candidates on ``device``: bfloat16 under the ``"fast"`` precision
    of the compute context on a GPU (cosine graphs, then re-ranked exactly; their recall is measured by
    :func:`~.neighbours.fast_recall}`), float32 otherwise."""
    return torch.bfloat16 if current().precision == "fast" and device.type in FAST_DEVICES else torch.float32


def chunk_budget() -> int:
    """Bytes one chunk of work may use: a sixteenth of the context's memory budget when one was set, else
    :data:`CHUNK_BYTES` (read at call time: tests shrink it to force many chunks)."""
    import sys

    return int(current().share("chunk") or sys.modules[__name__].CHUNK_BYTES)


class RowMap:
    """The rows of ``base`` through a row-wise torch ``transform``, computed where they are read.

    What :func:`~embeval_report.metrics.isotropy.apply_rows` returns instead of a float32 copy when the copy
    would not fit in the memory budget (:mod:`.budget`): indexing rows (a slice or an index array) reads those
    rows of ``base`` (float64, on ``device``), transforms them and returns float32, as the copy holds them,
    so chunked kernels stream over it like over a memory map. Nothing else of an array is supported.
    """

    ndim = 2
    dtype = np.dtype(np.float32)

    def __init__(self, base, transform, device):
        self.base, self.transform, self.device = as_numpy(base), transform, torch.device(device)
        self.shape = (int(self.base.shape[0]), int(self.base.shape[1]))

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * 4

    def __getitem__(self, rows) -> np.ndarray:
        if isinstance(rows, tuple):
            raise TypeError("a RowMap is indexed by rows only (a slice or an index array)")
        x = to_tensor(np.atleast_2d(self.base[rows]), dtype=torch.float64, device=self.device)
        out = self.transform(x).to(torch.float32).cpu().numpy()
        return out[0] if np.ndim(rows) == 0 and not isinstance(rows, slice) else out


def as_numpy(X) -> np.ndarray:
    """Return a 2-D float array view of a numpy array or torch tensor (no copy when possible); a
    :class:`RowMap` is returned as it is."""
    if isinstance(X, RowMap):
        return X
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu().numpy()
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array of shape (n, d), got shape {X.shape}")
    return X


def chunk_rows(n_rows: int, row_bytes: int, budget: int | None = None) -> int:
    """Number of rows per chunk so that one chunk uses at most ``budget`` bytes (default :func:`chunk_budget`)."""
    budget = chunk_budget() if budget is None else budget
    return int(max(1, min(n_rows, budget // max(row_bytes, 1))))


def iter_chunks(X, *, device: torch.device, dtype=torch.float64, rows: int | None = None,
                desc: str | None = None) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, chunk)`` with ``chunk = X[start:start+rows]`` as a tensor on ``device``."""
    X = as_numpy(X)
    n, d = X.shape
    rows = rows or chunk_rows(n, d * 8 * 4)
    starts = range(0, n, rows)
    if desc:
        starts = progress(starts, desc=desc, total=len(starts))
    for s in starts:
        yield s, to_tensor(X[s:s + rows], dtype=dtype, device=device)


def to_tensor(a, *, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """``a`` (numpy, possibly a read-only memory map) as a contiguous tensor; kernels never write into it.

    To a GPU the rows travel in the narrower of their own and the target dtype (a float32 set asked
    for as float64 is uploaded as float32 and widened on the device, exactly) through pinned memory.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        if torch.device(device).type != "cuda":
            return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=device)
        host = torch.as_tensor(np.ascontiguousarray(a))
    if host.dtype.is_floating_point and dtype.is_floating_point and dtype.itemsize < host.dtype.itemsize:
        host = host.to(dtype)  # narrowing: on the host, fewer bytes to move
    return host.pin_memory().to(device, non_blocking=True).to(dtype)


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """L2-normalise rows (zero rows stay zero)."""
    return x / x.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)


@contextmanager
def exact_matmul():
    """Full float32 products inside the block, whatever the caller set globally.

    ``torch.set_float32_matmul_precision("high")`` (or ``allow_tf32``) would silently let float32
    products run in TF32/bf16 and change neighbour lists; the kernels compute under this guard
    (IEEE float32 on the CUDA and oneDNN backends) and restore the caller's settings afterwards.
    """
    backends = [torch.backends.cuda.matmul, torch.backends.mkldnn.matmul]
    if not all(hasattr(b, "fp32_precision") for b in backends):  # torch < 2.9: the legacy switches
        precision, tf32 = torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(precision)
            torch.backends.cuda.matmul.allow_tf32 = tf32
        return
    saved = [b.fp32_precision for b in backends]
    for b in backends:
        b.fp32_precision = "ieee"
    try:
        yield
    finally:
        for b, value in zip(backends, saved):
            b.fp32_precision = value
