"""Per-entity silhouettes (cosine distance) of several partitions of the same rows, by chunked products."""
from __future__ import annotations

import numpy as np
import torch

from .device import as_numpy, chunk_rows, resolve_device, unit_rows


def silhouettes(X, partitions: list[np.ndarray], *, device="auto") -> list[np.ndarray]:
    r"""Per-row silhouette :math:`s(i) = (b(i) - a(i)) / \max(a(i), b(i))` with distance :math:`1 - \cos`, for each
    partition of the rows of ``X``, given as cluster codes ``0 .. k − 1`` (each k at least 2 and at most n − 1).

    Exact, by chunked matrix products: each block of rows gets its distances to all rows once and sums them per
    cluster of every partition through a one-hot matrix (no n × n matrix); :math:`s(i) = 0` in a cluster of one
    (scikit-learn's convention)."""
    X = as_numpy(X)
    m = len(X)
    dev = resolve_device(device)
    parts = []
    for codes in partitions:
        k = int(codes.max()) + 1
        code_t = torch.as_tensor(codes, device=dev)
        onehot = torch.zeros(m, k, dtype=torch.float64, device=dev)
        onehot[torch.arange(m, device=dev), code_t] = 1.0
        parts.append((code_t, onehot, onehot.sum(0), torch.empty(m, dtype=torch.float64, device=dev)))
    if not parts:
        return []
    U = unit_rows(torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float64, device=dev))
    step = chunk_rows(m, m * 8 * 2)
    for s in range(0, m, step):
        u = U[s:s + step]
        r = torch.arange(len(u), device=dev)
        D = (1.0 - u @ U.T).clamp_(0.0, 2.0)
        D[r, r + s] = 0.0
        for code_t, onehot, sizes, out in parts:
            S = D @ onehot                                  # (chunk, k): summed distance to each cluster
            own = code_t[s:s + step]
            own_size = sizes[own]
            a = S[r, own] / (own_size - 1).clamp_min(1)
            S[r, own] = torch.inf
            b = (S / sizes).min(1).values
            sil = (b - a) / torch.maximum(a, b)
            out[s:s + step] = torch.where((own_size > 1) & torch.isfinite(sil), sil, torch.zeros_like(sil))
    return [out.cpu().numpy() for *_, out in parts]
