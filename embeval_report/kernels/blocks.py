"""Blocks of rows: the per-block moments record and the seeded assignment of rows to blocks, shared by the local
passes (:mod:`.moments`) and their Dask tasks (:mod:`.dask_engine`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .device import chunk_budget, chunk_rows


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

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(count, s, G, shift)``, the fields in order."""
        return self.count, self.s, self.G, self.shift

    def total(self, weights: np.ndarray | None = None) -> tuple[float, np.ndarray, np.ndarray]:
        """``(N, sum x, sum x x^T)`` for block weights (all ones by default)."""
        w = np.ones(len(self.count)) if weights is None else np.asarray(weights, float)
        return float(w @ self.count), np.tensordot(w, self.s, 1), np.tensordot(w, self.G, 1)

    def totals(self, W: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`total` for each row of the block weights ``W`` (replicates × blocks) at once, by one product
        with the blocks' moments (not one pass over them per replicate): ``(N (r,), s (r, d), G (r, d, d))``, the
        same sums as :meth:`total` row by row to rounding (another summation order)."""
        W = np.asarray(W, float)
        d = self.s.shape[1]
        return W @ self.count, W @ self.s, (W @ self.G.reshape(len(self.count), -1)).reshape(len(W), d, d)

    def replicate_totals(self, W: np.ndarray, d_total: int | None = None):
        """:meth:`totals` of the rows of ``W`` a chunk of replicates at a time, the chunk's moments within
        :data:`REPLICATE_BYTES`: yields ``(rows, (N, s, G))``."""
        d = d_total or self.s.shape[1]
        step = max(1, REPLICATE_BYTES // (8 * d * d))
        for r in range(0, len(W), step):
            yield slice(r, r + step), self.totals(W[r:r + step])


#: bytes of replicates' moment matrices :meth:`BlockMoments.replicate_totals` forms at once
REPLICATE_BYTES = 64 * 2**20


#: rows of one block wanted from each chunk: with fewer the per-block d x d products are small and slow (a set
#: of 10^6 x 768 in 56 blocks took three times its single-product time in the default chunks of 10,900 rows)
ROWS_PER_BLOCK = 4096


def block_chunk_rows(n: int, d: int, n_blocks: int, itemsize: int) -> int | None:
    """Rows per chunk of :func:`block_moments` with several blocks: about :data:`ROWS_PER_BLOCK` per block,
    within four chunk budgets (the chunk in its own dtype, and once more grouped by block); ``None`` (the
    default chunks, and the numbers they have always given) for one block or a set within one default chunk."""
    if n_blocks == 1 or chunk_rows(n, d * 8 * 4) >= n:
        return None
    return int(min(n, max(1, min(n_blocks * ROWS_PER_BLOCK, 2 * chunk_budget() // (d * itemsize)))))


def assign_blocks(n: int, n_groups: int, seed: int) -> np.ndarray:
    """Row -> group (block) by a seeded random permutation, sizes differing by at most one."""
    out = np.empty(n, dtype=np.int64)
    out[np.random.default_rng(seed).permutation(n)] = np.arange(n) % n_groups
    return out
