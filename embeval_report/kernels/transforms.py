"""Row transforms as torch functions, and the passes that apply them chunk by chunk.

A *row transform* maps a chunk of rows (a float64 tensor on the run's device) to the same number of rows; the
moment passes (:func:`~.moments.block_moments`), :func:`apply_rows` and :class:`~.device.RowMap` take one. The
metric modules build them here from numpy parameters (a mean, principal directions, a whitening matrix), so
that no metric module handles a tensor itself.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..context import current
from . import dask_engine
from .dask_faults import falls_back
from .device import RowMap, as_numpy, cache_rows, iter_chunks, one_thread, resolve_device, unit_rows
from .moments import block_moments

Transform = Callable[[torch.Tensor], torch.Tensor]


def direction_remover(mean: np.ndarray, directions: np.ndarray, device) -> Transform:
    """``x -> (x - mean) - (x - mean) V Vᵀ`` with ``V = directions`` (d, D; orthonormal columns, D may be 0)."""
    mu = torch.as_tensor(mean, device=device)
    V = torch.as_tensor(directions, device=device)
    removing = directions.shape[1] > 0

    def transform(x: torch.Tensor) -> torch.Tensor:
        c = x - mu
        return c - (c @ V) @ V.T if removing else c
    return transform


def affine(mean: np.ndarray, W: np.ndarray, device) -> Transform:
    """``x -> (x - mean) W`` (whitening)."""
    W_t, mu = torch.as_tensor(W, device=device), torch.as_tensor(mean, device=device)
    return lambda x: (x - mu) @ W_t


def unit_halves(D: int) -> Transform:
    """``[a | b] -> [a/‖a‖ | b/‖b‖]`` for rows of two sets side by side, the first ``D`` columns the first set."""
    return lambda x: torch.cat([unit_rows(x[:, :D]), unit_rows(x[:, D:])], 1)


def split_squared_norms(mean: np.ndarray, D: int, device) -> Transform:
    """``[a | b] -> [‖a − μ_a‖², ‖b − μ_b‖²]`` (two columns), ``mean`` the joint column mean, ``D`` the first set's
    columns."""
    mu = torch.as_tensor(mean, device=device)

    def norms(x):
        c = x - mu
        return torch.stack([(c[:, :D] ** 2).sum(1), (c[:, D:] ** 2).sum(1)], 1)
    return norms


def seed_normalizer(eps: float, style: str) -> Transform:
    """Row normalisation as seed 004 does it: numpy ``z / (‖z‖ + eps)``, torch ``z / max(‖z‖, eps)``."""
    if style == "numpy":
        return lambda x: x / (x.norm(dim=1, keepdim=True) + eps)
    return lambda x: x / x.norm(dim=1, keepdim=True).clamp_min(eps)


def is_tensor(x) -> bool:
    """Whether ``x`` is a torch tensor (an API that returns what it was given)."""
    return isinstance(x, torch.Tensor)


def scalar_like(value: float, z: torch.Tensor) -> torch.Tensor:
    """``value`` as a 0-dim tensor of ``z``'s float dtype (float32 for an integer one) on ``z``'s device."""
    dtype = z.dtype if z.is_floating_point() else torch.float32
    return torch.tensor(float(value), dtype=dtype, device=z.device)


def apply_rows(X, transform: Transform, *, device="auto") -> np.ndarray | RowMap:
    """``transform`` applied to the rows of ``X`` chunk by chunk; float32 of the input's shape.

    When that copy would not fit in the memory budget (:meth:`~embeval_report.context.ComputeContext.fits`) the
    result is a :class:`~embeval_report.kernels.device.RowMap`: the same rows, computed where they are read.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    if not current().fits(X.shape[0] * X.shape[1] * 4):
        return RowMap(X, transform, dev)
    out = np.empty(X.shape, dtype=np.float32)
    rows = torch.from_numpy(out)
    step = cache_rows(len(X), X.shape[1] * 8 * 4, dev)
    for s, x in iter_chunks(X, device=dev):  # in cache-sized pieces (each row transformed alone: the same rows)
        with one_thread(dev):
            for p in range(0, len(x), step):
                piece = x[p:p + step]
                rows[s + p:s + p + len(piece)] = transform(piece).cpu()
    return out


def unit_vectors(X) -> np.ndarray:
    """L2-normalised rows, float32 for float32 input (k-means memory at large n), else float64."""
    X = np.asarray(X)
    return unit_rows(torch.as_tensor(X, dtype=torch.float32 if X.dtype == np.float32 else torch.float64)).numpy()


# ---------------------------------------------------------------------------------------------
# All-but-the-top: the unit rows after removing the mean and the top D directions, every D in one pass
# ---------------------------------------------------------------------------------------------

@falls_back
def removed_unit_moments(X, mean: np.ndarray, vectors: np.ndarray, removals: list[int], device
                         ) -> dict[int, tuple]:
    """The count, sum and Gram ``(N, s, G)`` of the unit rows after removing the mean and the D top directions
    (the first D columns of ``vectors``), for every D in ``removals``, from one pass over the rows: each chunk is
    corrected and normalised for every D in cache-sized pieces (row by row: the numbers of a
    :func:`~.moments.block_moments` pass per D, bit for bit). On the engine's cluster
    (:func:`~embeval_report.kernels.dask_engine.takes`) one such pass per D runs there."""
    if not removals:
        return {}
    removers = {D: direction_remover(mean, vectors[:, :D], device) for D in removals}
    if dask_engine.takes(X, device):
        return {D: block_moments(X, transform=lambda x, f=removers[D]: unit_rows(f(x)), device=device,
                                 desc=f"all-but-the-top D={D}").total() for D in removals}
    d = len(mean)
    moments = {D: (torch.zeros(d, dtype=torch.float64, device=device),
                   torch.zeros((d, d), dtype=torch.float64, device=device)) for D in removals}
    count = 0
    for _, x in iter_chunks(X, device=device, desc="all-but-the-top (every D, one pass)"):
        u = torch.empty_like(x)
        step = cache_rows(len(x), d * 8 * 4, device)
        for D, f in removers.items():
            with one_thread(device):  # the pieces' small products; the Gram below on every thread
                for p in range(0, len(x), step):
                    u[p:p + step] = unit_rows(f(x[p:p + step]))
            s, G = moments[D]
            s += u.sum(0)
            G += u.T @ u
        count += len(x)
    return {D: (float(count), s.cpu().numpy(), G.cpu().numpy()) for D, (s, G) in moments.items()}


def removed_unit_sums(X, mean: np.ndarray, vectors: np.ndarray, removals: list[int], device
                      ) -> dict[int, np.ndarray]:
    """The sum of the unit rows after removing the mean and the D top directions (the first D columns of
    ``vectors``), for every D in ``removals``, from one pass over the rows.

    With c the centred row and p = cV its top coordinates, the corrected row is r = c − p_D V_Dᵀ with
    ‖r‖² = ‖c‖² − ‖p_D‖² (V orthonormal), so Σ r/‖r‖ = Σ c w − V_D Σ p_D w with w = 1/‖r‖: one product
    of the chunk with every D's weights instead of a corrected copy of the chunk per D. Rows whose
    remainder is below 10⁻⁶ of their centred norm (where that difference would lose digits) are
    corrected and normalised explicitly.
    """
    top = max(removals, default=0)
    mu = torch.as_tensor(mean, device=device)
    V = torch.as_tensor(vectors[:, :top], device=device)
    sums = {D: torch.zeros(len(mean), dtype=torch.float64, device=device) for D in removals}
    for _, x in iter_chunks(X, device=device, desc="all-but-the-top (every D, one pass)"):
        c = x - mu
        P = c @ V
        full = (c * c).sum(1)
        left = torch.cat([full[:, None], full[:, None] - torch.cumsum(P * P, 1)], 1)  # ‖r‖² for D = 0..top
        tiny = torch.finfo(torch.float64).tiny
        W = torch.stack([left[:, D] for D in removals], 1).clamp_min(0).sqrt().clamp_min(tiny).reciprocal()
        exact = torch.stack([left[:, D] <= 1e-12 * full for D in removals], 1)
        W[exact] = 0.0
        CW = c.T @ W
        for col, D in enumerate(removals):
            sums[D] += CW[:, col] - (V[:, :D] @ (P[:, :D].T @ W[:, col]) if D else 0.0)
            rows = torch.nonzero(exact[:, col]).flatten()
            if len(rows):
                cr = c[rows]
                sums[D] += unit_rows(cr - (cr @ V[:, :D]) @ V[:, :D].T if D else cr).sum(0)
    return {D: s.cpu().numpy() for D, s in sums.items()}
