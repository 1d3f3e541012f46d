"""Orthogonal Procrustes on a device: the centring, the SVD (float64) and the products where the rows are."""
from __future__ import annotations

import numpy as np
import torch

from .device import as_numpy, to_tensor


def cuda_device_of(*arrays) -> torch.device | None:
    """The device of the first CUDA tensor among ``arrays``, else None."""
    return next((x.device for x in arrays if isinstance(x, torch.Tensor) and x.is_cuda), None)


def _device_rows(X, dev: torch.device) -> torch.Tensor:
    """``X`` (numpy array or torch tensor) as a float64 (n, d) tensor on ``dev``: a tensor already there is used
    as it is, a numpy array is uploaded once."""
    if isinstance(X, torch.Tensor):
        if X.ndim != 2:
            raise ValueError(f"expected a 2-D array of shape (n, d), got shape {tuple(X.shape)}")
        return X.detach().to(device=dev, dtype=torch.float64)
    return to_tensor(as_numpy(X), dtype=torch.float64, device=dev)


def _pad(X: torch.Tensor, d: int) -> torch.Tensor:
    return X if X.shape[1] == d else torch.cat([X, X.new_zeros((X.shape[0], d - X.shape[1]))], dim=1)


def procrustes_on_device(A, B, center: bool, dev) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Rotate ``B`` onto ``A`` in torch on ``dev``: R = U Vᵀ from the SVD of BᵀA, as
    :func:`scipy.linalg.orthogonal_procrustes` ``(B, A)`` computes it (a smaller d zero-padded, both centred with
    ``center``); everything on the device, the results copied to the host once at the end. Returns
    ``(rotation, aligned B, target A, disparity)``."""
    dev = torch.device(dev)
    A, B = _device_rows(A, dev), _device_rows(B, dev)
    if A.shape[0] != B.shape[0]:
        raise ValueError(f"procrustes_align needs the same entities in both sets ({A.shape[0]} vs {B.shape[0]} rows)")
    d = max(A.shape[1], B.shape[1])
    A, B = _pad(A, d), _pad(B, d)
    if center:
        A, B = A - A.mean(0), B - B.mean(0)
    U, _, Vh = torch.linalg.svd(B.T @ A)
    R = U @ Vh
    aligned = B @ R
    na, nb = torch.linalg.norm(A), torch.linalg.norm(B)
    residual = ((A / na - aligned / nb) ** 2).sum()
    disparity = torch.where((na > 0) & (nb > 0), residual, torch.full_like(residual, float("nan")))
    return R.cpu().numpy(), aligned.cpu().numpy(), A.cpu().numpy(), disparity.item()
