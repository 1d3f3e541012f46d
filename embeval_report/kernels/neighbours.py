"""Exact nearest neighbours by chunked matrix products, and neighbour-set comparison."""
from __future__ import annotations

import numpy as np
import torch

from .device import as_numpy, chunk_rows, iter_chunks, resolve_device, to_tensor, unit_rows


def knn(X, k: int, *, queries=None, metric: str = "cosine", exclude_self: bool = True, device="auto",
        desc: str | None = "k-NN") -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours by chunked matrix products and ``torch.topk``.

    ``metric``: ``"cosine"`` (returns similarities, descending), ``"dot"`` (inner products,
    descending) or ``"euclidean"`` (returns distances, ascending). Queries default to the rows
    of ``X`` themselves; then ``exclude_self`` drops each row's own index. Memory is bounded by
    :func:`~.device.chunk_budget` per block of query rows (no n x n matrix). Ties are broken by torch's
    top-k order. Returns ``(indices (m, k) int64, scores (m, k) float32)``.
    """
    if metric not in ("cosine", "dot", "euclidean"):
        raise ValueError(f"metric must be 'cosine', 'dot' or 'euclidean', not {metric!r}")
    dev = resolve_device(device)
    X = as_numpy(X)
    self_query = queries is None
    Q = X if self_query else as_numpy(queries)
    n = len(X)
    kk = k + (1 if self_query and exclude_self else 0)
    if kk > n:
        raise ValueError(f"k = {k} needs more than {n - (kk - k)} candidate neighbours")
    dtype = torch.float32
    corpus = to_tensor(X, dtype=dtype, device=dev)
    if metric == "cosine":
        corpus = unit_rows(corpus)
    sq = (corpus * corpus).sum(1) if metric == "euclidean" else None
    rows = chunk_rows(len(Q), n * 4 * 3)
    idx = np.empty((len(Q), k), dtype=np.int64)
    val = np.empty((len(Q), k), dtype=np.float32)
    for s, q in iter_chunks(Q, device=dev, dtype=dtype, rows=rows, desc=desc):
        if metric == "cosine":
            q = unit_rows(q)
        scores = q @ corpus.T
        if metric == "euclidean":
            scores = 2 * scores - sq[None, :] - (q * q).sum(1, keepdim=True)  # = -||q - x||^2
        if self_query and exclude_self:
            r = torch.arange(len(q), device=dev)
            scores[r, r + s] = -torch.inf
        top = torch.topk(scores, kk, dim=1)
        ti, tv = top.indices[:, :k], top.values[:, :k]
        if metric == "euclidean":
            tv = (-tv).clamp_min(0).sqrt()
        idx[s:s + len(q)] = ti.cpu().numpy()
        val[s:s + len(q)] = tv.cpu().numpy()
    return idx, val


def neighbour_sets_overlap(nb_a, nb_b) -> np.ndarray:
    """Per-row share :math:`|N_a(i) \\cap N_b(i)| / k` of two neighbour-index arrays of shape (n, k)."""
    nb_a, nb_b = np.asarray(nb_a), np.asarray(nb_b)
    both = np.sort(np.hstack([nb_a, nb_b]), axis=1)
    return (np.diff(both, axis=1) == 0).sum(1) / nb_a.shape[1]


def rescored_knn(X, k: int, rescore, *, device, desc: str | None, temporaries: int = 4
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of ``rescore(start, cos_block)`` over all other rows, block of query rows by block.

    ``cos_block`` is the (m, n) cosine of query rows ``start..start+m`` to every row (float32 on
    the device); ``rescore`` maps it to new scores (higher = closer). The row itself is excluded.
    Memory: ``temporaries`` float32 (m, n) blocks within :func:`~.device.chunk_budget`.
    """
    X = as_numpy(X)
    n = len(X)
    corpus = unit_rows(to_tensor(X, dtype=torch.float32, device=device))
    rows = chunk_rows(n, n * 4 * temporaries)
    idx = np.empty((n, k), dtype=np.int64)
    val = np.empty((n, k), dtype=np.float32)
    for s, q in iter_chunks(X, device=device, dtype=torch.float32, rows=rows, desc=desc):
        scores = rescore(s, unit_rows(q) @ corpus.T)
        r = torch.arange(len(q), device=device)
        scores[r, r + s] = -torch.inf
        top = torch.topk(scores, k, dim=1)
        idx[s:s + len(q)] = top.indices.cpu().numpy()
        val[s:s + len(q)] = top.values.cpu().numpy()
    return idx, val
