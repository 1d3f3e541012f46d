"""Chunked matrix kernels in torch: GPU when present, BLAS on the CPU otherwise.

Every pairwise or Gram computation in the package goes through here, so memory stays
bounded (rows are processed in chunks; no n x n matrix is ever built) and the same code
runs on ``cpu`` and ``cuda``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from .progress import progress

#: bytes a single chunk of work may use (about 256 MiB); chunk sizes derive from it
CHUNK_BYTES = 256 * 2**20


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Map ``"auto" | "cpu" | "cuda"`` to a torch device (``auto`` = cuda when available)."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but torch sees no CUDA device; use 'auto' or 'cpu'")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', not {device!r}")
    return torch.device(device)


def as_numpy(X) -> np.ndarray:
    """Return a 2-D float array view of a numpy array or torch tensor (no copy when possible)."""
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu().numpy()
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array of shape (n, d), got shape {X.shape}")
    return X


def chunk_rows(n_rows: int, row_bytes: int, budget: int | None = None) -> int:
    """Number of rows per chunk so that one chunk uses at most ``budget`` bytes (default :data:`CHUNK_BYTES`)."""
    budget = CHUNK_BYTES if budget is None else budget
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
        yield s, torch.as_tensor(np.ascontiguousarray(X[s:s + rows]), dtype=dtype, device=device)


def unit_rows(x: torch.Tensor) -> torch.Tensor:
    """L2-normalise rows (zero rows stay zero)."""
    return x / x.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)


@dataclass(frozen=True)
class BlockMoments:
    """First and second moments of a row set, kept per block of rows.

    Rows are assigned to ``n_blocks`` blocks by a seeded random permutation. Block ``b``
    keeps ``count[b]``, ``s[b] = sum_i x_i`` and ``G[b] = sum_i x_i x_i^T`` (over its rows,
    after subtracting ``shift`` for numerical stability). Whole-set statistics are the
    sums over blocks; a bootstrap replicate re-weights blocks with multinomial counts,
    so resampling costs O(blocks * d^2) instead of a pass over the data.
    """

    count: np.ndarray  # (B,)
    s: np.ndarray      # (B, d)
    G: np.ndarray      # (B, d, d)
    shift: np.ndarray  # (d,)

    def total(self, weights: np.ndarray | None = None) -> tuple[float, np.ndarray, np.ndarray]:
        """``(N, sum x, sum x x^T)`` for block weights (all ones by default)."""
        w = np.ones(len(self.count)) if weights is None else np.asarray(weights, float)
        return float(w @ self.count), np.tensordot(w, self.s, 1), np.tensordot(w, self.G, 1)


def column_mean(X, *, device="auto") -> np.ndarray:
    """Column mean of ``X`` in one chunked float64 pass."""
    dev = resolve_device(device)
    X = as_numpy(X)
    acc = torch.zeros(X.shape[1], dtype=torch.float64, device=dev)
    for _, x in iter_chunks(X, device=dev):
        acc += x.sum(0)
    return (acc / len(X)).cpu().numpy()


def block_moments(X, *, transform=None, shift: np.ndarray | None = None, n_blocks: int = 1,
                  seed: int = 0, device="auto", desc: str | None = None) -> BlockMoments:
    """Accumulate :class:`BlockMoments` of ``transform(X) - shift`` in one chunked pass.

    ``transform`` maps a chunk of rows (float64 tensor on the device) to new rows, for example
    :func:`unit_rows`; ``shift`` is subtracted afterwards (pass the column mean to keep the
    covariance of a strongly shifted set free of cancellation error). Accumulation is float64
    and exact: the result does not depend on the chunk size.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    n, d = X.shape
    n_blocks = int(max(1, min(n_blocks, n)))
    block_of = np.empty(n, dtype=np.int64)
    block_of[np.random.default_rng(seed).permutation(n)] = np.arange(n) % n_blocks
    shift = np.zeros(d) if shift is None else np.asarray(shift, float)
    shift_t = torch.as_tensor(shift, device=dev)
    count = torch.zeros(n_blocks, dtype=torch.float64, device=dev)
    S = G = None
    for start, x in iter_chunks(X, device=dev, desc=desc):
        if transform is not None:
            x = transform(x)
        x = x - shift_t
        if S is None:
            S = torch.zeros(n_blocks, x.shape[1], dtype=torch.float64, device=dev)
            G = torch.zeros(n_blocks, x.shape[1], x.shape[1], dtype=torch.float64, device=dev)
        b = torch.as_tensor(block_of[start:start + len(x)], device=dev)
        if n_blocks == 1:
            count[0] += len(x)
            S[0] += x.sum(0)
            G[0] += x.T @ x
            continue
        count.index_add_(0, b, torch.ones(len(x), dtype=torch.float64, device=dev))
        S.index_add_(0, b, x)
        for blk in torch.unique(b).tolist():
            xb = x[b == blk]
            G[blk] += xb.T @ xb
    return BlockMoments(count.cpu().numpy(), S.cpu().numpy(), G.cpu().numpy(), shift)


def random_pairs(n: int, n_pairs: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n_pairs`` index pairs ``(i, j)`` drawn uniformly from all ordered pairs with ``i != j``."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, n_pairs)
    j = (i + rng.integers(1, n, n_pairs)) % n
    return i, j


def pair_cosines(X, i: np.ndarray, j: np.ndarray, *, transform=None, device="auto") -> np.ndarray:
    """Cosine similarity of rows ``X[i]`` and ``X[j]`` (after ``transform`` of the rows, if given)."""
    X = as_numpy(X)
    dev = resolve_device(device)
    out = np.empty(len(i))
    step = chunk_rows(len(i), X.shape[1] * 8 * 4)
    for s in range(0, len(i), step):
        a = torch.as_tensor(X[i[s:s + step]], dtype=torch.float64, device=dev)
        b = torch.as_tensor(X[j[s:s + step]], dtype=torch.float64, device=dev)
        if transform is not None:
            a, b = transform(a), transform(b)
        out[s:s + step] = (unit_rows(a) * unit_rows(b)).sum(1).cpu().numpy()
    return out


def knn(X, k: int, *, queries=None, metric: str = "cosine", exclude_self: bool = True, device="auto",
        desc: str | None = "k-NN") -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours by chunked matrix products and ``torch.topk``.

    ``metric``: ``"cosine"`` (returns similarities, descending), ``"dot"`` (inner products,
    descending) or ``"euclidean"`` (returns distances, ascending). Queries default to the rows
    of ``X`` themselves; then ``exclude_self`` drops each row's own index. Memory is bounded by
    :data:`CHUNK_BYTES` per block of query rows (no n x n matrix). Ties are broken by torch's
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
    corpus = torch.as_tensor(np.ascontiguousarray(X), dtype=dtype, device=dev)
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


def gaussian_potential_rows(X, t: float = 2.0, *, transform=None, device="auto",
                            desc: str | None = "all-pairs potential") -> np.ndarray:
    r"""Per-row log Gaussian potential over all other rows, exact, block by block.

    Returns ``L`` with :math:`L_i = \log \sum_{j \ne i} \exp(-t \lVert x_i - x_j \rVert^2)`
    (float64, shape (n,)), where the rows are ``transform(X)`` (e.g. :func:`unit_rows`) when a
    transform is given. The all-pairs log sum over ordered pairs is ``logsumexp(L)``.

    The transformed rows are kept on the device once (n x d float64); the pairs are visited in
    square blocks of the upper triangle (each unordered pair once, credited to both rows), so
    memory is O(n d + B^2) with B^2 bounded by :data:`CHUNK_BYTES`, never n x n. Each block is
    exponentiated once after subtracting its maximum; a block where some row or column would
    underflow (only for large ``t`` or unnormalised rows) is redone with ``torch.logsumexp``.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    n = len(X)
    Z = torch.empty(X.shape, dtype=torch.float64, device=dev)
    for s, x in iter_chunks(X, device=dev):
        Z[s:s + len(x)] = transform(x) if transform is not None else x
    tsq = t * (Z * Z).sum(1)
    out = torch.full((n,), -torch.inf, dtype=torch.float64, device=dev)
    B = int(max(1, min(n, np.sqrt(CHUNK_BYTES // (8 * 3)))))
    starts = range(0, n, B)
    if desc:
        starts = progress(starts, desc=desc, total=len(starts))

    def log_potential(a, b):  # -t ||z_a - z_b||^2 for the block (a, b), diagonal excluded
        L = (Z[a:a + B] @ Z[b:b + B].T).mul_(2.0 * t).sub_(tsq[a:a + B, None]).sub_(tsq[None, b:b + B])
        L.clamp_max_(0.0)
        if a == b:
            L.fill_diagonal_(-torch.inf)
        return L

    for a in starts:
        ra = slice(a, min(a + B, n))
        for b in range(a, n, B):
            rb = slice(b, min(b + B, n))
            L = log_potential(a, b)
            m = L.max()
            if not torch.isfinite(m):  # a single row: no pair
                continue
            E = L.sub_(m).exp_()
            rows, cols = E.sum(1), E.sum(0)
            if bool((rows == 0).any()) or (a != b and bool((cols == 0).any())):
                L = log_potential(a, b)
                rows, cols = torch.logsumexp(L, 1), torch.logsumexp(L, 0)
            else:
                rows, cols = rows.log_().add_(m), cols.log_().add_(m)
            out[ra] = torch.logaddexp(out[ra], rows)
            if a != b:
                out[rb] = torch.logaddexp(out[rb], cols)
    return out.cpu().numpy()
