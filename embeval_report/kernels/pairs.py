"""Pair kernels: random pairs, cosines of given pairs, distances to given neighbours, cosines to one direction and
the rows' cosine mean and spread, and the exact all-pairs Gaussian potential."""
from __future__ import annotations

import numpy as np
import torch

from ..context import current
from ..progress import progress
from . import dask_engine
from .dask_faults import falls_back
from .device import (as_numpy, cache_rows, chunk_budget, chunk_rows, iter_chunks, one_thread, resolve_device,
                     to_tensor, unit_rows)
from .graph_cache import stored_product
from .neighbours import potential_key
from .prefetch import read_rows


def random_pairs(n: int, n_pairs: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n_pairs`` index pairs ``(i, j)`` drawn uniformly from all ordered pairs with ``i != j``."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, n_pairs)
    j = (i + rng.integers(1, n, n_pairs)) % n
    return i, j


def gather_rows(X, *index_arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """``X[idx]`` for each index array, read in one ascending gather of their distinct rows (a row drawn twice is
    read once); the pages of a memory-mapped set's rows are asked of the OS first, all at once
    (:func:`~.prefetch.prefetch_array_rows`), instead of one fault and readahead window per row."""
    idx = np.concatenate([np.asarray(a, dtype=np.int64) for a in index_arrays])
    rows, inverse = np.unique(idx, return_inverse=True)
    block = read_rows(X, rows)
    bounds = np.cumsum([0] + [len(a) for a in index_arrays])
    return tuple(block[inverse[bounds[k]:bounds[k + 1]]] for k in range(len(index_arrays)))


def pair_cosines(X, i: np.ndarray, j: np.ndarray, *, transform=None, device="auto") -> np.ndarray:
    """Cosine similarity of rows ``X[i]`` and ``X[j]`` (after ``transform`` of the rows, if given), float64.

    A set in memory on the CPU is gathered by torch from a view of its rows, in cache-sized pieces on one thread
    (:func:`~.device.one_thread`: 1e6 pairs of 384-d rows took 23.5 CPU-s on two threads, 2.8 on one, on a loaded
    machine); without a transform and with at least as many pairs as rows, each row's norm is computed once instead
    of once per pair (the same float64 norm of the same row: the same numbers)."""
    X = as_numpy(X)
    dev = resolve_device(device)
    out = np.empty(len(i))
    direct = isinstance(X, np.ndarray) and current().fits(X.nbytes)  # in memory: one gather per side
    step = (cache_rows(len(i), X.shape[1] * 16, dev) if direct  # a piece's two float64 rows stay in cache
            else chunk_rows(len(i), X.shape[1] * 8 * 4))
    tiny = torch.finfo(torch.float64).tiny
    rows = to_tensor(X, dtype=None) if direct and dev.type == "cpu" else None  # a view of the set's rows
    norms = _row_norms(rows, dev) if rows is not None and transform is None and 2 * len(i) >= len(X) else None
    if rows is not None:
        I, J = (torch.as_tensor(np.ascontiguousarray(v, dtype=np.int64)) for v in (i, j))
    with one_thread(dev):
        for s in range(0, len(i), step):
            if rows is not None:
                ia, ib = I[s:s + step], J[s:s + step]
                a, b = torch.index_select(rows, 0, ia).double(), torch.index_select(rows, 0, ib).double()
            else:
                a, b = ((X[i[s:s + step]], X[j[s:s + step]]) if direct
                        else gather_rows(X, i[s:s + step], j[s:s + step]))
                a = torch.as_tensor(a, device=dev).double()
                b = torch.as_tensor(b, device=dev).double()
            if transform is not None:
                a, b = transform(a), transform(b)
            dots = torch.einsum("ij,ij->i", a, b)  # zero rows: 0 / tiny / tiny = 0, as unit rows give
            if norms is not None:
                out[s:s + step] = dots.div_(norms[ia]).div_(norms[ib]).numpy()
            else:
                out[s:s + step] = dots.div_(a.norm(dim=1).clamp_min_(tiny)).div_(b.norm(dim=1).clamp_min_(tiny)
                                                                               ).cpu().numpy()
    return out


def _row_norms(rows: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """Each row's float64 norm (at least the smallest normal float64), in cache-sized pieces."""
    norms = torch.empty(len(rows), dtype=torch.float64)
    step = cache_rows(len(rows), rows.shape[1] * 16, dev)
    with one_thread(dev):
        for s in range(0, len(rows), step):
            torch.linalg.vector_norm(rows[s:s + step].double(), dim=1, out=norms[s:s + step])
    return norms.clamp_min_(torch.finfo(torch.float64).tiny)


def swept_potential_rows(X, t: float) -> np.ndarray | None:
    """The rows' log Gaussian potential of the unit rows of ``X`` at ``t`` if a cosine k-NN sweep of this
    set (:func:`~.neighbours.self_sweep`) already computed it in this run, else None. The set is looked up by its
    fingerprint (:func:`~.graph_cache.fingerprint`, read a piece at a time), never by a float32 copy of it."""
    stored = stored_product(as_numpy(X), potential_key(t)) if len(X) > 1 else None
    return None if stored is None else np.array(stored[0], dtype=np.float64)


@falls_back
def gaussian_potential_rows(X, t: float = 2.0, *, transform=None, device="auto",
                            desc: str | None = "all-pairs potential") -> np.ndarray:
    r"""Per-row log Gaussian potential over all other rows, exact, block by block.

    Returns ``L`` with :math:`L_i = \log \sum_{j \ne i} \exp(-t \lVert x_i - x_j \rVert^2)`
    (float64, shape (n,)), where the rows are ``transform(X)`` (e.g. :func:`unit_rows`) when a
    transform is given. The all-pairs log sum over ordered pairs is ``logsumexp(L)``.

    The transformed rows are kept on the device once (n x d float64); the pairs are visited in
    square blocks of the upper triangle (each unordered pair once, credited to both rows), so
    memory is O(n d + B^2) with B^2 bounded by :func:`~.device.chunk_budget`, never n x n. Each block is
    exponentiated once after subtracting its maximum; a block where some row or column would
    underflow (only for large ``t`` or unnormalised rows) is redone with ``torch.logsumexp``.

    For unit rows (``transform=unit_rows``) the rows computed by a cosine k-NN sweep of the same set
    (:func:`~.neighbours.self_sweep`, float32 products) are read from :mod:`.graph_cache` when present.
    When the engine's cluster takes the pass (:func:`~.dask_engine.takes`: a memory-mapped set of more than one
    block, on the CPU), it runs there as (row block x column block) tasks, the same numbers to rounding.
    """
    dev = resolve_device(device)
    X = as_numpy(X)
    n = len(X)
    stored = swept_potential_rows(X, t) if transform is unit_rows else None
    if stored is not None:
        return stored
    if dask_engine.takes(X, dev, _square_block(n)):
        return dask_engine.potential_rows(X, t, transform=transform, block=_square_block(n))
    Z = torch.empty(X.shape, dtype=torch.float64, device=dev)
    for s, x in iter_chunks(X, device=dev):
        Z[s:s + len(x)] = transform(x) if transform is not None else x
    tsq = t * (Z * Z).sum(1)
    out = torch.full((n,), -torch.inf, dtype=torch.float64, device=dev)
    B = _square_block(n)
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


def _square_block(n: int) -> int:
    """Rows of a square block of :func:`gaussian_potential_rows`: three float64 B x B tiles fit one chunk budget."""
    return int(max(1, min(n, np.sqrt(chunk_budget() // (8 * 3)))))


def neighbour_distances(X, idx: np.ndarray, device) -> np.ndarray:
    """Ascending float64 Euclidean distances ``‖x_i − x_j‖`` of every row i to its neighbours ``idx[i]`` (no Gram
    expansion, so small distances carry no cancellation error). Pieces of rows whose differences stay in cache, on
    one CPU thread (the pieces' small operations on two threads took 7.7 instead of 0.6 CPU-s at 10,000 x 384,
    k = 50; the same distances)."""
    Xt = torch.as_tensor(np.asarray(X, np.float64), device=device)
    it = torch.as_tensor(idx, device=device)
    k, d = idx.shape[1], Xt.shape[1]
    out = np.empty(idx.shape)
    step = cache_rows(len(X), k * d * 8 * 2, device)  # each piece's differences in cache
    with one_thread(Xt.device):
        for s in range(0, len(X), step):
            diff = torch.index_select(Xt, 0, it[s:s + step].reshape(-1)).view(-1, k, d).sub_(Xt[s:s + step, None, :])
            out[s:s + step] = torch.sort(torch.linalg.vector_norm(diff, dim=2), dim=1).values.cpu().numpy()
    return out


def direction_cosines(X, direction: np.ndarray, *, device) -> np.ndarray:
    """Cosine of each row of ``X`` to the unit vector ``direction``, chunk by chunk."""
    c = torch.as_tensor(direction, device=device)
    out = np.empty(len(as_numpy(X)))
    for start, x in iter_chunks(X, device=device):
        out[start:start + len(x)] = (unit_rows(x) @ c).cpu().numpy()
    return out


def cosine_mean_sd_rows(X, s: np.ndarray, G: np.ndarray, *, device) -> tuple[np.ndarray, np.ndarray]:
    r"""Mean and standard deviation of the cosine of each row to all *other* rows, from the sum :math:`s` and Gram
    :math:`G` of the unit rows :math:`u`: :math:`\mu_x = (u_x \cdot s - 1)/(n-1)`,
    :math:`\overline{c^2}_x = (u_x^\top G u_x - 1)/(n-1)`."""
    n = len(as_numpy(X))
    st, Gt = torch.as_tensor(s, device=device), torch.as_tensor(G, device=device)
    mu, sd = np.empty(n), np.empty(n)
    for start, x in iter_chunks(X, device=device):
        u = unit_rows(x)
        m1 = ((u @ st) - 1) / (n - 1)
        m2 = (((u @ Gt) * u).sum(1) - 1) / (n - 1)
        mu[start:start + len(x)] = m1.cpu().numpy()
        sd[start:start + len(x)] = (m2 - m1 * m1).clamp_min(0).sqrt().cpu().numpy()
    return mu, sd
