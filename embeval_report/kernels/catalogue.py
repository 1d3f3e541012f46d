r"""Exact top-k recommendation lists over a whole catalogue (the ranking of
:mod:`embeval_report.metrics.recommendation`, whose docstring states the method): float32 user blocks
against the catalogue with training items masked, candidates re-scored exactly, exact scans where the
spare candidates cannot prove a list; the baselines' exact-score ranking and their seeded random scores."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from .device import chunk_rows, exact_matmul, resolve_device, to_tensor
from .ranking import GPU_MEMORY_SHARE, Space, pair_scores

SCORES = ("dot", "cosine")
K = 10
#: float32 candidates kept per user beyond k, re-ranked exactly
SPARE = 16
_U32 = 2.0 ** -24


# ---------------------------------------------------------------------------------------------
# Ranking the catalogue
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ranked:
    """One recommender's lists: ``top`` (users, k) local item indices in rank order (-1 past the
    eligible items), ``first_rank`` the full-catalogue rank of each user's best test item;
    ``n_scans`` users whose list needed an exact scan, ``n_rescored`` items re-scored for ranks."""

    top: np.ndarray
    first_rank: np.ndarray
    n_scans: int = 0
    n_rescored: int = 0


def block_rows(n_users: int, n_items: int, device: torch.device, free: int | None = None) -> int:
    """Users scored at a time against the whole catalogue (GPU: from ``free`` bytes of device memory, read from the
    device when None; 16 bytes per score and working copy)."""
    if device.type == "cuda":
        if free is None:
            free, _ = torch.cuda.mem_get_info(device)
        return int(max(1, min(n_users, int(free * GPU_MEMORY_SHARE) // max(n_items * 16, 1))))
    return chunk_rows(n_users, max(n_items, 1) * 16)


def _csr_rows(m: sp.csr_matrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(local row within ``rows``, column) of every stored entry of the given rows."""
    sub = m[rows]
    return np.repeat(np.arange(len(rows)), np.diff(sub.indptr)), sub.indices.astype(np.int64)


def _best_test(scores_of, test: sp.csr_matrix, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each user's best test item (highest exact score; ties: lower item) and its score."""
    r, c = _csr_rows(test, users)
    s = scores_of(r, c)
    order = np.lexsort((c, -s, r))
    first = order[np.searchsorted(r[order], np.arange(len(users)))]
    return c[first], s[first]


def rank_catalogue(user_vectors, item_vectors, train: sp.csr_matrix, test: sp.csr_matrix, *, score: str = "dot",
                   k: int = K, device="auto") -> Ranked:
    """Exact top-``k`` lists over the whole catalogue and the rank of each user's first test item
    (see the module docstring). ``user_vectors`` (u, d) aligned with the rows of ``train`` / ``test``
    (u x n, CSR), ``item_vectors`` (n, d) the catalogue."""
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, not {score!r}")
    dev = resolve_device(device)
    Us, Is = Space.of(user_vectors, score), Space.of(item_vectors, score)
    nu, n = len(Us.X), len(Is.X)
    d = Us.X.shape[1]
    tol = 2 * (d + 4) * _U32 * Us.norm * (float(Is.norm.max()) if n else 0.0)
    items_t = Is.float32_t(dev)
    kk = min(n, k + SPARE)
    top = np.full((nu, k), -1, np.int64)
    first_rank = np.zeros(nu, np.int64)
    n_scans = n_rescored = 0
    rows = block_rows(nu, n, dev)
    with exact_matmul():
        for s in range(0, nu, rows):
            idx = np.arange(s, min(nu, s + rows))
            q = to_tensor(Us.rows64(idx).astype(np.float32), dtype=torch.float32, device=dev)
            S = q @ items_t
            tr_r, tr_c = _csr_rows(train, idx)
            S[torch.as_tensor(tr_r, device=dev), torch.as_tensor(tr_c, device=dev)] = -torch.inf
            v32, cand = torch.topk(S, kk, dim=1)
            v32, cand = v32.cpu().numpy().astype(np.float64), cand.cpu().numpy()
            eligible = n - np.diff(train.indptr)[idx]
            # exact re-scoring of the candidates, order (score desc, item asc)
            valid = np.isfinite(v32)
            rr, cc = np.nonzero(valid)
            s64 = np.full(cand.shape, -np.inf)
            s64[rr, cc] = pair_scores(Us, Is, idx[rr], cand[rr, cc])
            key = np.where(valid, cand, np.iinfo(np.int64).max)
            order = np.lexsort((key, -s64), axis=1)
            o_c, o_s = np.take_along_axis(cand, order, 1), np.take_along_axis(s64, order, 1)
            for b in range(len(idx)):
                m = int(min(k, eligible[b]))
                if m == 0:
                    continue
                top[s + b, :m] = o_c[b, :m]
                if eligible[b] > kk and v32[b, -1] + tol[s + b] >= o_s[b, m - 1]:
                    n_scans += 1
                    top[s + b, :m] = _scan(Us, Is, s + b, train, m)
            # rank of the best test item
            best_c, best_s = _best_test(lambda r_, c_: pair_scores(Us, Is, idx[r_], c_), test, idx)
            t = torch.as_tensor(tol[idx], device=dev)[:, None]
            gap = S.double() - torch.as_tensor(best_s, device=dev)[:, None]  # masked items: -inf
            above = (gap > t).sum(1)
            nr, nc = (gap.abs() <= t).nonzero(as_tuple=True)
            del gap
            nr, nc = nr.cpu().numpy(), nc.cpu().numpy()
            n_rescored += len(nr)
            ex = pair_scores(Us, Is, idx[nr], nc)
            ahead = (ex > best_s[nr]) | ((ex == best_s[nr]) & (nc < best_c[nr]))
            first_rank[idx] = above.cpu().numpy() + np.bincount(nr[ahead], minlength=len(idx)) + 1
    return Ranked(top, first_rank, n_scans, n_rescored)


def _scan(Us: Space, Is: Space, u: int, train: sp.csr_matrix, k: int) -> np.ndarray:
    """The exact top k of one user by scoring every eligible item (the rare fallback)."""
    n = len(Is.X)
    cols = np.setdiff1d(np.arange(n), train.indices[train.indptr[u]:train.indptr[u + 1]])
    s = pair_scores(Us, Is, np.full(len(cols), u), cols)
    return cols[np.lexsort((cols, -s))[:k]]


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def random_scores(users: np.ndarray, items: np.ndarray, seed: int = 0) -> np.ndarray:
    """A uniform pseudo-random score in [0, 1) for each (user, item) pair, from a seeded hash:
    the same pair gets the same score however the users are blocked."""
    with np.errstate(over="ignore"):
        key = _splitmix(np.asarray(users, np.uint64) * np.uint64(0x100000001B3) + np.uint64(seed) * np.uint64(7919))
        return (_splitmix(key ^ np.asarray(items, np.uint64)) >> np.uint64(11)).astype(np.float64) / 2.0 ** 53


def rank_by(score_block, n_items: int, train: sp.csr_matrix, test: sp.csr_matrix, *, k: int = K) -> Ranked:
    """Top-``k`` lists and first-test ranks for a recommender whose scores are exact and computed by
    ``score_block(users) -> (len(users), n_items)`` float64 (the baselines). Ties: lower item first."""
    nu = train.shape[0]
    top = np.full((nu, k), -1, np.int64)
    first_rank = np.zeros(nu, np.int64)
    rows = chunk_rows(nu, max(n_items, 1) * 24)
    cols = np.arange(n_items)
    for s in range(0, nu, rows):
        idx = np.arange(s, min(nu, s + rows))
        S = np.asarray(score_block(idx), np.float64).copy()
        tr_r, tr_c = _csr_rows(train, idx)
        S[tr_r, tr_c] = -np.inf
        eligible = n_items - np.diff(train.indptr)[idx]
        kk = min(k, n_items)
        part = np.argpartition(-S, kk - 1, axis=1)[:, :kk] if kk < n_items else np.tile(cols, (len(idx), 1))
        ps = np.take_along_axis(S, part, 1)
        # exact ties at the boundary: take every item tied with the k-th score, then order
        kth = np.sort(ps, axis=1)[:, 0]
        for b in range(len(idx)):
            m = int(min(k, eligible[b]))
            if m == 0:
                continue
            cand = np.flatnonzero(S[b] >= kth[b])
            o = cand[np.lexsort((cand, -S[b, cand]))][:m]
            top[s + b, :m] = o
        best_c, best_s = _best_test(lambda r_, c_: S[r_, c_], test, np.arange(len(idx)))
        above = (S > best_s[:, None]) | ((S == best_s[:, None]) & (cols[None, :] < best_c[:, None]))
        first_rank[idx] = above.sum(1) + 1
    return Ranked(top, first_rank)
