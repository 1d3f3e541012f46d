"""The Gaussian-kernel MMD² of two samples with its jackknife standard error and permutation null, on the device."""
from __future__ import annotations

import warnings

import numpy as np
import torch

from ..errors import UndefinedMetricWarning


def _mmd2_from_kernel(K: torch.Tensor, m: int) -> float:
    n = K.shape[0] - m
    return float(K[:m, :m].sum() / (m * (m - 1)) + K[m:, m:].sum() / (n * (n - 1)) - 2 * K[:m, m:].sum() / (m * n))


def _jackknife_se(K: torch.Tensor, m: int) -> float:
    """Two-sample jackknife standard error of the unbiased MMD² (Arvesen 1969): leave each point out."""
    n = K.shape[0] - m
    if m < 3 or n < 3:
        warnings.warn(f"the MMD interval is undefined: its jackknife needs at least 3 rows per sample (got {m} and "
                      f"{n})", UndefinedMetricWarning, stacklevel=4)
        return float("nan")
    Kxx, Kyy, Kxy = K[:m, :m], K[m:, m:], K[:m, m:]
    A, B, C = Kxx.sum(), Kyy.sum(), Kxy.sum()
    rx, ry, cx, cy = Kxx.sum(1), Kyy.sum(1), Kxy.sum(1), Kxy.sum(0)
    tx = (A - 2 * rx) / ((m - 1) * (m - 2)) + B / (n * (n - 1)) - 2 * (C - cx) / ((m - 1) * n)
    ty = A / (m * (m - 1)) + (B - 2 * ry) / ((n - 1) * (n - 2)) - 2 * (C - cy) / (m * (n - 1))
    var = (m - 1) / m * ((tx - tx.mean()) ** 2).sum() + (n - 1) / n * ((ty - ty.mean()) ** 2).sum()
    return float(var.sqrt())


def mmd_statistics(X: np.ndarray, Y: np.ndarray, *, n_perm: int, bandwidth: float | None, seed: int, device
                   ) -> tuple[float, float, float, np.ndarray]:
    """The unbiased MMD² of ``X`` (m rows) against ``Y`` (n rows) with a Gaussian kernel of ``bandwidth`` (None: the
    median distance between distinct pooled points, 1 when that is 0), its two-sample jackknife standard error and
    ``n_perm`` values of it under random relabellings of the pooled sample (seeded): ``(mmd2, se, bandwidth, null)``.
    The pooled kernel matrix is formed (pass samples)."""
    m, n = len(X), len(Y)
    Z = torch.as_tensor(np.vstack([X, Y]), dtype=torch.float64, device=device)
    sq = (Z * Z).sum(1)
    D2 = (sq[:, None] + sq[None, :] - 2 * Z @ Z.T).clamp_min_(0)
    N = m + n
    if bandwidth is None:
        iu = torch.triu_indices(N, N, 1, device=device)
        med = float(np.median(np.sqrt(D2[iu[0], iu[1]].cpu().numpy())))
        bandwidth = med if med > 0 else 1.0
        del iu
    K = torch.exp(-D2 / (2 * bandwidth ** 2))
    del D2
    K.fill_diagonal_(0)
    stat = _mmd2_from_kernel(K, m)
    se = _jackknife_se(K, m)
    r = K.sum(1)
    T = float(r.sum())
    rng = np.random.default_rng(seed)
    null = np.empty(n_perm)
    step = max(1, min(n_perm, (64 * 2**20) // (8 * N)))
    for s in range(0, n_perm, step):
        b = min(step, n_perm - s)
        z = np.zeros((b, N))
        for row in range(b):
            z[row, rng.permutation(N)[:m]] = 1.0
        zt = torch.as_tensor(z, device=device)
        q = ((zt @ K) * zt).sum(1)
        zr = zt @ r
        sxy, syy = zr - q, T - 2 * zr + q
        null[s:s + b] = (q / (m * (m - 1)) + syy / (n * (n - 1)) - 2 * sxy / (m * n)).cpu().numpy()
    return stat, se, bandwidth, null
