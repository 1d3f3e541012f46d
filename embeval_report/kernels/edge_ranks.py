"""Ranks of each test edge's positive among its candidates: the batched scoring and counting of link prediction.

Each test edge's source vector and candidate vectors (column 0 the true destination, -1 padding) are gathered and
multiplied as a batch, so that the positive and the negatives go through the same operation (exact ties stay ties);
ranks, filtering (a sorted-key search of the known edges) and the score matrix follow on the device.
"""
from __future__ import annotations

import numpy as np
import torch

from .device import chunk_rows, unit_rows

#: bytes per chunk of test edges when scoring on the CPU (cache-sized; the GPU uses the device's chunk budget)
CPU_CHUNK_BYTES = 8 * 2**20


def rank_columns(sc: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Optimistic rank, pessimistic rank and candidate count of column 0 among the valid other columns (torch
    tensors, or numpy arrays: the same counts)."""
    pos, neg = sc[:, :1], sc[:, 1:]
    gt = ((neg > pos) & valid).sum(1)
    ge = ((neg >= pos) & valid).sum(1)
    return 1 + gt, 1 + ge, 1 + valid.sum(1)


def ranks_of_scores(scores, valid=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`rank_columns` of a score matrix (B, 1 + m) (``valid`` (B, m) mask; None: every column), in numpy: the
    same integer counts as torch's, without its thread pool (2,000 x 101 heuristic scores: 77 -> 2 ms CPU)."""
    sc = np.asarray(scores, np.float64)
    v = np.ones((sc.shape[0], sc.shape[1] - 1), bool) if valid is None else np.asarray(valid, bool)
    return tuple(np.asarray(t, np.int64) for t in rank_columns(sc, v))


def _chunk_scores_torch(Xt: torch.Tensor, src: torch.Tensor, cand: torch.Tensor, score: str) -> torch.Tensor:
    """Scores (b, c) of a chunk: gather (b, d) and (b, c, d) on the device, then ``bmm`` (or the L2 norm)."""
    xs = Xt.index_select(0, src)
    xc = Xt.index_select(0, cand.clamp_min(0).reshape(-1)).view(cand.shape[0], cand.shape[1], Xt.shape[1])
    if score == "neg_l2":
        return -(xc - xs[:, None, :]).norm(dim=2)
    return torch.bmm(xc, xs[:, :, None])[:, :, 0]


def _chunk_scores_numpy(X: np.ndarray, src: np.ndarray, cand: np.ndarray, score: str) -> np.ndarray:
    """The same in numpy: on a CPU, ``np.take`` + batched ``np.matmul`` is 2-3x faster than torch's
    ``index_select`` + ``bmm`` for these batched matrix-vector products (measured, see the benchmark)."""
    xs = X[src]
    xc = np.take(X, np.maximum(cand, 0), axis=0)
    if score == "neg_l2":
        return -np.linalg.norm(xc - xs[:, None, :], axis=2)
    return np.matmul(xc, xs[:, :, None])[:, :, 0]


def rank_candidates(X: np.ndarray, src: np.ndarray, cand: np.ndarray, *, score: str, keys: np.ndarray | None,
                    rel: np.ndarray, keep_scores: bool, dev: torch.device, engine: str
                    ) -> tuple[dict, np.ndarray | None, np.ndarray | None]:
    """Raw and filtered ranks of column 0 of ``cand`` (B, 1 + m) for sources ``src`` (B,) under ``score``; ``keys``:
    the sorted keys ``rel·n² + min(u, v)·n + max(u, v)`` of the known edges, whose negatives the filtered ranks drop
    (None: no filtering). ``engine``: ``"torch"`` or (CPU) ``"numpy"`` for the gathered products. Returns the six
    rank arrays (``ro``, ``rp``, ``rn`` raw optimistic, pessimistic, count; ``fo``, ``fp``, ``fn`` filtered), the
    float32 score matrix (``keep_scores``; NaN at padding) and the filtered-out mask."""
    n, d = X.shape
    B, c = cand.shape
    Xt = torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float32, device=dev)
    if score == "cosine":
        Xt = unit_rows(Xt)
    Xn = Xt.numpy() if engine == "numpy" else None
    out = {k: np.empty(B, np.int64) for k in ("ro", "rp", "rn", "fo", "fp", "fn")}
    S = np.empty((B, c), np.float32) if keep_scores else None
    removed = np.zeros((B, c - 1), bool) if keys is not None else None
    cpu_filter = keys is not None and dev.type == "cpu"
    if cpu_filter:  # the filter reads no vector: one search per block of rows, not one per small scoring chunk
        removed[:] = known_candidates(np.asarray(keys), src, cand, rel, n)
    keys = torch.as_tensor(keys, device=dev) if keys is not None and not cpu_filter else None
    # on the CPU, chunks small enough for the gathered block to stay in cache are 2-3x faster
    rows = chunk_rows(B, c * d * 4 * (3 if score == "neg_l2" else 2) + c * 64,
                      CPU_CHUNK_BYTES if dev.type == "cpu" else None)
    for s in range(0, B, rows):
        if engine == "numpy":  # scores, ranks and the filter in numpy: torch's per-op cost is most of a small chunk's
            _rank_chunk_numpy(Xn, src, cand, score, s, rows, out, S, removed if cpu_filter else None)
            continue
        ct = torch.as_tensor(cand[s:s + rows], device=dev)
        valid = ct[:, 1:] >= 0
        sc = _chunk_scores_torch(Xt, torch.as_tensor(src[s:s + rows], device=dev), ct, score)
        raw = filtered = rank_columns(sc, valid)
        if cpu_filter:
            filtered = rank_columns(sc, valid & ~torch.from_numpy(removed[s:s + rows]))
        elif keys is not None:
            u = torch.as_tensor(src[s:s + rows], device=dev)[:, None]
            v = ct[:, 1:].clamp_min(0)
            k = (torch.as_tensor(rel[s:s + rows], device=dev)[:, None] * n * n
                 + torch.minimum(u, v) * n + torch.maximum(u, v))
            i = torch.searchsorted(keys, k).clamp_max(len(keys) - 1)
            gone = (keys[i] == k) & valid
            removed[s:s + rows] = gone.cpu().numpy()
            filtered = rank_columns(sc, valid & ~gone)
        _store_chunk(out, S, s, [t.cpu() for t in raw], [t.cpu() for t in filtered],
                     None if S is None else sc.cpu().numpy(), valid.cpu().numpy())
    return out, S, removed


def _rank_chunk_numpy(X: np.ndarray, src: np.ndarray, cand: np.ndarray, score: str, s: int, rows: int, out: dict,
                     S: np.ndarray | None, removed: np.ndarray | None) -> None:
    """:func:`rank_candidates`' chunk ``s:s + rows`` with the numpy engine, all in numpy (the same scores, integer
    counts and NaN padding as through torch tensors): the raw and (``removed``: the known negatives, already found)
    filtered ranks into ``out``, the scores into ``S``."""
    c = cand[s:s + rows]
    sc = _chunk_scores_numpy(X, src[s:s + rows], c, score)
    valid = c[:, 1:] >= 0
    raw = rank_columns(sc, valid)
    filtered = raw if removed is None else rank_columns(sc, valid & ~removed[s:s + rows])
    _store_chunk(out, S, s, raw, filtered, sc, valid)


def _store_chunk(out: dict, S: np.ndarray | None, s: int, raw, filtered, scores: np.ndarray | None,
                 valid: np.ndarray) -> None:
    """One scored chunk (rows from ``s``) into :func:`rank_candidates`' outputs: the raw and filtered ranks (numpy
    arrays or CPU tensors) into ``out``, the scores into ``S`` (when kept) with NaN where ``valid`` is False."""
    rows = len(valid)
    for keys, ranks in (("ro", "rp", "rn"), raw), (("fo", "fp", "fn"), filtered):
        for k, r in zip(keys, ranks):
            out[k][s:s + rows] = r
    if S is not None:
        S[s:s + rows] = scores
        if not bool(valid.all()):
            S[s:s + rows, 1:][~valid] = np.nan


#: candidate keys per block of the CPU filter (:func:`known_candidates`; 8 MiB of int64)
FILTER_BLOCK = 2**20


def known_candidates(keys: np.ndarray, src: np.ndarray, cand: np.ndarray, rel: np.ndarray, n: int) -> np.ndarray:
    """Which negatives (columns 1: of ``cand``, padding excluded) are known edges: their key
    ``rel·n² + min(u, v)·n + max(u, v)`` found in the sorted ``keys`` (a numpy search, a block of rows at a time;
    the same mask as the device search of :func:`rank_candidates`)."""
    B, c = cand.shape
    out = np.zeros((B, c - 1), bool)
    step = max(1, FILTER_BLOCK // max(c - 1, 1))
    for s in range(0, B, step):
        u, v = src[s:s + step, None], cand[s:s + step, 1:]
        k = rel[s:s + step, None] * n * n + np.minimum(u, np.maximum(v, 0)) * n + np.maximum(u, np.maximum(v, 0))
        i = np.searchsorted(keys, k).clip(max=len(keys) - 1)
        out[s:s + step] = (keys[i] == k) & (v >= 0)
    return out


def placements(a: np.ndarray, b: np.ndarray, device) -> np.ndarray:
    """For each a_i: #{b < a_i} + ½ #{b = a_i} (sorted search on the device; on the CPU numpy's, whose sort of
    millions of float64 is about 5x torch's there: the same counts, so the same values bit for bit, NaN aside)."""
    an, bn = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if torch.device(device).type == "cpu" and not (np.isnan(an).any() or np.isnan(bn).any()):
        bs = np.sort(bn)
        lo = np.searchsorted(bs, an, "left")
        hi = lo.copy()  # past the values equal to a_i: searched again only where there is one
        tied = np.flatnonzero(bs[np.minimum(lo, len(bs) - 1)] == an) if len(bs) else lo[:0]
        hi[tied] = np.searchsorted(bs, an[tied], "right")
        return lo + 0.5 * (hi - lo)
    bs = torch.sort(torch.as_tensor(b, dtype=torch.float64, device=device)).values
    at = torch.as_tensor(a, dtype=torch.float64, device=device)
    lo = torch.searchsorted(bs, at, right=False)
    hi = torch.searchsorted(bs, at, right=True)
    return (lo.double() + 0.5 * (hi - lo).double()).cpu().numpy()
