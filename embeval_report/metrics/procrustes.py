r"""Comparing two embedding spaces of the same entities: Procrustes alignment and k-NN overlap.

Embeddings are identified only up to an orthogonal transform (seed 000 §217.2.1.1):
:math:`(EQ)(EQ)^\top = EE^\top`. Two spaces are therefore compared after the orthogonal
Procrustes rotation :math:`R^* = \arg\min_{R^\top R = I} \lVert A - BR \rVert_F` (Schönemann
1966; SciPy's :func:`scipy.linalg.orthogonal_procrustes`), or through quantities that need no
alignment at all, such as the overlap of each entity's k nearest neighbours.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
from scipy.linalg import svd

from ..kernels import as_numpy, knn, neighbour_sets_overlap, resolve_device
from ..kernels.procrustes import cuda_device_of, procrustes_on_device
from ..threads import blas_threads


@dataclass(frozen=True)
class ProcrustesFit:
    """``aligned = (B - mean_B) @ R`` is ``B`` rotated onto the centred ``A``."""

    rotation: np.ndarray   # (d, d), orthogonal
    aligned: np.ndarray    # (n, d) centred B after rotation
    target: np.ndarray     # (n, d) centred A
    disparity: float       # ‖Â − B̂R‖²_F of the Frobenius-normalised centred matrices, in [0, 2]


def _pad(X: np.ndarray, d: int) -> np.ndarray:
    return X if X.shape[1] == d else np.hstack([X, np.zeros((len(X), d - X.shape[1]), X.dtype)])


def procrustes_align(A, B, *, center: bool = True, device="auto") -> ProcrustesFit:
    """Rotate ``B`` onto ``A`` (rows are the same entities, in the same order).

    Both are mean-centred first (``center``); a smaller dimension is zero-padded so sets of
    different d can be compared. ``disparity`` is the residual of the Frobenius-normalised
    matrices, :math:`2 - 2\\sum_k s_k` with :math:`s_k` the singular values of
    :math:`\\hat A^\\top \\hat B`, as :func:`scipy.spatial.procrustes` reports it for the
    rotation-only fit (0 = identical up to rotation; lower is better).

    ``device`` (``"auto"``, ``"cpu"``, ``"cuda"``; :func:`~embeval_report.kernels.resolve_device`): on the CPU the
    fit is NumPy and :func:`scipy.linalg.orthogonal_procrustes`. On a GPU (the resolved device, or either input
    a CUDA tensor, used where it is) the centring, the SVD (:func:`torch.linalg.svd`, float64) and the products
    run on the device, with no copy to the host until the result: equal to SciPy's to rounding. When the sets
    differ in d, the fit leaves the rotation free (up to an orthogonal transform) between the padded directions
    and those of the wider set the narrower one does not reach, and two SVD implementations may complete it
    differently: there the paths may differ, while ``aligned`` on ``A``'s own columns, the aligned rows' norms
    and cosines with ``target``, and ``disparity`` agree.
    """
    dev = resolve_device(device)
    on_gpu = cuda_device_of(A, B)
    if on_gpu is not None or dev.type == "cuda":
        return ProcrustesFit(*procrustes_on_device(A, B, center, on_gpu if on_gpu is not None else dev))
    A = as_numpy(A).astype(np.float64)
    B = as_numpy(B).astype(np.float64)
    if len(A) != len(B):
        raise ValueError(f"procrustes_align needs the same entities in both sets ({len(A)} vs {len(B)} rows)")
    d = max(A.shape[1], B.shape[1])
    A, B = _pad(A, d), _pad(B, d)
    if center:
        A, B = A - A.mean(0), B - B.mean(0)
    R = _rotation(B, A)
    aligned = B @ R
    na, nb = np.linalg.norm(A), np.linalg.norm(B)
    disparity = float(np.sum((A / na - aligned / nb) ** 2)) if na > 0 and nb > 0 else float("nan")
    return ProcrustesFit(R, aligned, A, disparity)


#: up to this many multiply-adds (n d^2), the cross product of :func:`_rotation` runs on one BLAS thread
ONE_THREAD_PRODUCT = 2_000_000_000


def _rotation(B: np.ndarray, A: np.ndarray) -> np.ndarray:
    """:func:`scipy.linalg.orthogonal_procrustes` ``(B, A)``'s rotation, step for step, its d x d SVD on one BLAS
    thread: threads only contend on so small a matrix (10x its CPU time on a busy machine). The n x d x d cross
    product also runs on one thread up to :data:`ONE_THREAD_PRODUCT` multiply-adds (a 13,000 x 384 set): OpenBLAS
    splits its long sum over its threads, so its rounding depended on the machine's core count, and two threads
    on a 5,000 x 64 set took 38-107 ms of CPU on a busy machine against 2 ms on one. Larger products keep the
    threads (there they pay)."""
    with blas_threads(1) if B.shape[0] * B.shape[1] * A.shape[1] <= ONE_THREAD_PRODUCT else nullcontext():
        M = (A.T @ B).T
    with blas_threads(1):
        u, _, vt = svd(M)
    return u @ vt


def row_cosines(A, B) -> np.ndarray:
    """Cosine similarity of each row of ``A`` with the same row of ``B``."""
    A, B = as_numpy(A).astype(np.float64), as_numpy(B).astype(np.float64)
    num = np.einsum("ij,ij->i", A, B)
    den = np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def aligned_cosines(A, B, *, center: bool = True) -> np.ndarray:
    """Per-entity cosine between ``A`` and ``B`` after Procrustes-aligning ``B`` onto ``A``."""
    fit = procrustes_align(A, B, center=center)
    return row_cosines(fit.target, fit.aligned)


def knn_overlap(A, B, k: int = 10, *, metric: str = "cosine", device="auto") -> np.ndarray:
    """Per-entity k-NN overlap :math:`|N^A_k(i) \\cap N^B_k(i)| / k` (self excluded; no alignment needed).

    Neighbours come from the exact chunked :func:`embeval_report.kernels.knn` in each space.
    Two spaces that differ by a rotation give 1 for every entity; independent random spaces
    give about :math:`k/(n-1)`.
    """
    na, _ = knn(A, k, metric=metric, device=device, desc="k-NN (space A)")
    nb, _ = knn(B, k, metric=metric, device=device, desc="k-NN (space B)")
    return neighbour_sets_overlap(na, nb)
