r"""CSLS ranked inside the set's collected sweep (:mod:`.sweep`), whose own cosine graph gives its r.

:math:`\mathrm{CSLS}(x, y) = 2\cos(x, y) - r_x - r_y`; row x ranks its columns by :math:`2\cos(x, y) - r_y`, with
:math:`r_y` the mean of the first k similarities of y's cosine list: known only when the sweep ends. So the sweep keeps,
beside the entries of its other lists, every entry whose score can still be among its row's k best for any r within
bounds set beforehand, and ranks them by the exact r at the end:

1. **Bounds on r** (:meth:`CslsInSweep.limit_block`, from the bfloat16 pass that sets the limits, each row's K entries
   of largest product scored in float64): any k of them bound the mean of the row's k largest cosines from below,
   :math:`r^-`; an entry outside them has a cosine of at most :math:`\tilde p_K + B + 2^{-7}\cdot 1.01\,|\tilde p_K|`
   (:math:`\tilde p_K`: the K-th largest bfloat16 product, B the products' bound and the rounding of their bfloat16
   output), so the i-th largest cosine is at most the larger of the i-th among the K and that edge: the mean of those
   is :math:`r^+`. Both with a margin of :data:`R_MARGIN` for the float32 rounding of the listed similarities.
2. **A lower bound on each row's k-th score** (:meth:`CslsInSweep.thresholds`): the k-th largest of
   :math:`2\cos - r^+_y` over the row's K entries, :math:`L_x`.
3. **The float32 pass** (:func:`~.sweep._keep`) keeps also every entry with :math:`\tilde p \ge L_x/2 - B_{32} +
   r^-_y/2`, read through the groups whose maximum reaches the least of that over their columns: the others cannot
   reach :math:`L_x` (their score is at most :math:`2(\tilde p + B_{32}) - r^-_y`).
4. **Per finished block** (:meth:`CslsInSweep.block`), an entry stays when its score's upper bound reaches the k-th
   largest of the lower bounds :math:`2(\tilde p - B_{32}) - r^+_y` of its row; those are scored in float64
   (cosines), and **at the end** (:meth:`CslsInSweep.lists`) ranked by :math:`2\cos - r_y` with the exact r (exact ties:
   the lower index), so the lists are those of a search with r known, proven.
"""
from __future__ import annotations

import numpy as np
import torch

from .candidates import _kth, _padded_cosines, _top_k
from .device import round_down, true_indices

#: margin (in cosine) of the bounds on r, far above the float32 rounding of the similarities r is the mean of (2^-24)
R_MARGIN = 1e-6
#: margin (in cosine) under the float32 keep test, for the rounding of its float32 sum
KEEP_MARGIN = 1e-6


class CslsInSweep:
    """The state of one :class:`~.rescoring.SweptCsls` plan ``(k, rescore)`` of a collected sweep of ``n`` rows whose
    plain plan ``cosine`` (its index among the sweep's lists) has at least ``rescore.neighborhood`` entries; ``K``:
    the entries a row's limits come from."""

    def __init__(self, n: int, k: int, rescore, cosine: int, K: int):
        self.k, self.rescore, self.cosine, self.nb = k, rescore, cosine, rescore.neighborhood
        self.cand = torch.zeros((n, K), dtype=torch.int64)
        self.cos = torch.full((n, K), -torch.inf, dtype=torch.float64)  # rows with fewer than K entries: -inf
        self.r_lo = torch.empty(n, dtype=torch.float64)
        self.r_hi = torch.empty(n, dtype=torch.float64)
        self.a32 = self.h32 = None
        self.found: dict = {}

    def limit_block(self, s: int, cand: torch.Tensor, cos64: torch.Tensor, p_K: torch.Tensor,
                    bound: torch.Tensor) -> None:
        """The bounds on r of the rows of block ``s`` (step 1) from their K entries of largest bfloat16 product
        ``cand`` (m, K), their float64 cosines, the K-th product ``p_K`` and the rows' bounds."""
        m, K = cand.shape
        top = torch.topk(cos64, self.nb, dim=1).values
        edge = p_K + p_K.abs() * (2.0**-7 * 1.01) + bound
        self.r_lo[s:s + m] = top.mean(1) - R_MARGIN
        self.r_hi[s:s + m] = torch.maximum(top, edge[:, None]).mean(1) + R_MARGIN
        self.cand[s:s + m, :K], self.cos[s:s + m, :K] = cand, cos64

    def thresholds(self, bound32: float) -> None:
        """Steps 2 and 3: ``a32`` per row and ``h32`` per column, float32, an entry kept when ``p >= a32 + h32``."""
        L = torch.topk(2 * self.cos - self.r_hi[self.cand], self.k, dim=1).values[:, -1]
        self.a32 = round_down(L / 2 - bound32 - KEEP_MARGIN, torch.float32)
        self.h32 = round_down(self.r_lo / 2, torch.float32)
        self.cand = self.cos = None
        self.bound32 = bound32

    def kept(self, rows: torch.Tensor, cols: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """Whether entries (global rows and columns, float32 products) pass the keep test (the same float32 sum as
        :func:`~.sweep._keep`'s)."""
        return p >= self.a32[rows] + self.h32[cols]

    def block(self, s: int, q64: torch.Tensor, r: torch.Tensor, c: torch.Tensor, p: torch.Tensor, corpus64) -> None:
        """Step 4 for the rows of block ``s`` (float64 rows ``q64``) from their kept entries (rows counted from s):
        the entries that can still be in a list, their float64 cosines kept until :meth:`lists`."""
        m = len(q64)
        keep = true_indices(self.kept(r + s, c, p))
        r, c, p = r[keep], c[keep], p[keep].double()
        order = torch.sort(r, stable=True).indices
        r, c, p = r[order], c[order], p[order]
        counts = torch.bincount(r, minlength=m)
        starts = torch.cumsum(counts, 0) - counts
        lo = 2 * (p - self.bound32) - self.r_hi[c]
        hi = 2 * (p + self.bound32) - self.r_lo[c]
        kth = _kth(r, lo, counts, starts, self.k) - 1e-12  # float64 rounding of the bounds
        keep = true_indices(hi >= kth[r])
        self.found[s] = _padded_cosines(r[keep], c[keep], q64, corpus64)

    def lists(self, out: list) -> tuple[np.ndarray, np.ndarray]:
        """The float64 CSLS lists of every row (exact ties: the lower index), with r of the cosine list in ``out``
        (its ``(indices, similarities)``), which is set on the plan's re-scoring."""
        r = self.rescore.r_of(out[self.cosine][1])
        self.rescore.r = r
        r64 = torch.from_numpy(r)
        n = len(r)
        idx, val = np.empty((n, self.k), dtype=np.int64), np.empty((n, self.k), dtype=np.float32)
        for s, (cand, cos64, valid) in sorted(self.found.items()):
            score = (2 * cos64 - r64[cand.clamp_max(n - 1)]).masked_fill(~valid, -torch.inf)
            i, v = _top_k(torch.where(valid, cand, torch.iinfo(torch.int64).max), score, self.k)
            idx[s:s + len(i)], val[s:s + len(i)] = i.numpy(), v.float().numpy()
        self.found = {}
        return idx, val
