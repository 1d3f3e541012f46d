r"""Statistics of two runs of the same entities from d x d moment matrices (no n x n matrix).

The exact pairwise similarity correlation and the rotation-only Procrustes disparity of two
mean-centred runs ``A`` (n x da) and ``B`` (n x db) both follow from a few moment matrices of
the joint rows ``[a_i, b_i]`` gathered in one chunked pass
(:func:`~embeval_report.kernels.block_moments`). Kept per block of rows, the same moments give
bootstrap replicates by re-weighting the blocks; when the per-block matrices would not fit in
memory, a delete-a-group jackknife holds one group's moments at a time
(:class:`~embeval_report.stats.ResamplingPlan`,
:class:`~embeval_report.kernels.moments.GroupedMoments`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import as_numpy, block_moments, column_mean, resolve_device
from ..kernels.moments import GroupedMoments
from ..kernels.spectra import weighted_nuclear_norms
from ..kernels.transforms import split_squared_norms
from ..stats import ResamplingPlan
from ..threads import blas_threads


def _joint(A, B, dev):
    """``X = [A, B]``, ``da``, the column mean, and the row transform giving ``‖a − μ_a‖², ‖b − μ_b‖²``."""
    A, B = as_numpy(A), as_numpy(B)
    if len(A) != len(B):
        raise ValueError(f"the two runs must hold the same entities ({len(A)} vs {len(B)} rows)")
    da = A.shape[1]
    X = np.hstack([A, B])
    mean = column_mean(X, device=dev)
    return X, da, mean, split_squared_norms(mean, da, dev)


@dataclass(frozen=True)
class PairMoments:
    """Per-block moments of two centred runs ``A`` (n x da) and ``B`` (n x db) of the same entities.

    Rows go to blocks by the seeded permutation of :func:`~embeval_report.kernels.block_moments`.
    Kept per block b: ``count``; ``sa``, ``sb`` (row sums); ``Gab = Σ a bᵀ``; the Frobenius
    Gram matrices ``Kaa[b, c] = ⟨Σ_b a aᵀ, Σ_c a aᵀ⟩`` (and ``Kbb``, ``Kab``) that give
    ``‖Σ_b w_b G_b‖²_F = wᵀKw``; and the scalars ``qa = Σ‖a‖²``, ``qb``, ``qaa = Σ‖a‖⁴``,
    ``qbb``, ``qab = Σ‖a‖²‖b‖²``. Centring is at the full-sample means.
    """

    count: np.ndarray
    sa: np.ndarray
    sb: np.ndarray
    Gab: np.ndarray
    Kaa: np.ndarray
    Kbb: np.ndarray
    Kab: np.ndarray
    q: np.ndarray  # (B, 5): qa, qb, qaa, qbb, qab

    @classmethod
    def from_moments(cls, count, s, G, qs, qG, da: int) -> "PairMoments":
        """From per-block joint moments ``(count, s, G)`` of ``[a, b]`` and ``(qs, qG)`` of the squared norms."""
        Gaa, Gbb, Gab = G[:, :da, :da], G[:, da:, da:], G[:, :da, da:]
        flat = lambda M: M.reshape(len(M), -1)  # noqa: E731
        with blas_threads(1):  # B x B products: BLAS threads only contend (the same values)
            K = [flat(M) @ flat(M).T for M in (Gaa, Gbb, Gab)]
        return cls(count=np.asarray(count, float), sa=s[:, :da], sb=s[:, da:], Gab=Gab.copy(), Kaa=K[0], Kbb=K[1],
                   Kab=K[2], q=np.column_stack([qs[:, 0], qs[:, 1], qG[:, 0, 0], qG[:, 1, 1], qG[:, 0, 1]]))

    @classmethod
    def from_totals(cls, totals, norm_totals, da: int) -> "PairMoments":
        """One block from whole-set (or leave-a-group-out) totals ``(N, s, G)`` and those of the squared norms."""
        (N, s, G), (_, qs, qG) = totals, norm_totals
        return cls.from_moments([N], s[None], G[None], qs[None], qG[None], da)

    @classmethod
    def gather(cls, A, B, *, n_blocks: int = 1, seed: int = 0, device="auto") -> "PairMoments":
        dev = resolve_device(device)
        X, da, mean, norms = _joint(A, B, dev)
        m = block_moments(X, shift=mean, n_blocks=n_blocks, seed=seed, device=dev)
        q = block_moments(X, transform=norms, shift=np.zeros(2), n_blocks=n_blocks, seed=seed, device=dev)
        return cls.from_moments(m.count, m.s, m.G, q.s, q.G, da)

    def _weights(self, w) -> tuple[np.ndarray, bool]:
        W = np.ones(len(self.count)) if w is None else np.asarray(w, float)
        return np.atleast_2d(W), W.ndim == 1

    def correlation(self, w: np.ndarray | None = None):
        r"""Pearson correlation of the Gram entries over all ordered pairs of distinct rows.

        With row weights (block multiplicities) ``w``, sums over pairs :math:`i \ne j` are
        :math:`\sum_{ij} w_i w_j x_{ij} - \sum_i w_i^2 x_{ii}`, and
        :math:`\sum_{ij} w_i w_j (a_i\cdot a_j)(b_i \cdot b_j) = \lVert A^\top W B\rVert_F^2`.
        ``w``: block weights (B,), or (r, B) for r replicates at once (returns an array).
        """
        W, single = self._weights(w)
        W2 = W * W
        q = W2 @ self.q
        N = (W @ self.count) ** 2 - W2 @ self.count
        sa, sb = W @ self.sa, W @ self.sb
        Sx, Sy = (sa * sa).sum(1) - q[:, 0], (sb * sb).sum(1) - q[:, 1]
        quad = lambda K: np.einsum("rb,bc,rc->r", W, K, W)  # noqa: E731
        Sxx, Syy, Sxy = quad(self.Kaa) - q[:, 2], quad(self.Kbb) - q[:, 3], quad(self.Kab) - q[:, 4]
        den = (N * Sxx - Sx * Sx) * (N * Syy - Sy * Sy)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(den > 0, (N * Sxy - Sx * Sy) / np.sqrt(np.clip(den, 1e-300, None)), np.nan)
        return float(out[0]) if single else out

    def disparity(self, w: np.ndarray | None = None, *, device="auto"):
        """Rotation-only Procrustes disparity ``2 − 2 Σ s_k(AᵀWB) / (‖A‖_W ‖B‖_W)`` of the weighted rows.

        ``w``: block weights (B,), or (r, B) for r replicates (batched singular values in torch).
        """
        W, single = self._weights(w)
        nuc = weighted_nuclear_norms(W, self.Gab, resolve_device(device))
        na, nb = W @ self.q[:, 0], W @ self.q[:, 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where((na > 0) & (nb > 0), 2.0 - 2.0 * nuc / np.sqrt(np.clip(na * nb, 1e-300, None)), np.nan)
        return float(out[0]) if single else out


def similarity_correlation(A, B, *, device="auto") -> float:
    r"""Exact pairwise similarity correlation of two runs of the same entities (rows in the same order).

    :math:`\rho = \mathrm{corr}_{i \ne j}(\tilde a_i \cdot \tilde a_j,\ \tilde b_i \cdot \tilde b_j)` over
    all pairs of distinct entities, with :math:`\tilde a, \tilde b` the mean-centred rows (seed 000
    §217.2.1.3, ``procrustes_similarity``; its code uses a 1000-row sample). Invariant to rotations
    and to the scale of either run, so no alignment is needed. Computed from d x d moment matrices
    in one chunked pass (O(n d²), no n x n matrix). Higher is better; 1 = the same geometry.
    """
    return PairMoments.gather(A, B, device=device).correlation()


def pair_replicates(A, B, plan: ResamplingPlan, weights: np.ndarray | None, *, seed: int = 0, device="auto"
                    ) -> tuple[PairMoments, np.ndarray | None]:
    """Whole-set :class:`PairMoments` of two runs and the ``(replicates, 2)`` disparity and correlation
    of the resamples ``weights`` (rows of unit weights from ``plan.replicates``; ``None`` without a plan).

    Bootstrap: per-block moments re-weighted, every replicate at once. Jackknife: the set without
    one group at a time (only that group's moments in memory).
    """
    dev = resolve_device(device)
    if plan.method != "jackknife":
        mom = PairMoments.gather(A, B, n_blocks=plan.units if plan.active else 1, seed=seed, device=dev)
        if weights is None or not plan.active:
            return mom, None
        return mom, np.column_stack([mom.disparity(weights, device=dev), mom.correlation(weights)])
    X, da, mean, norms = _joint(A, B, dev)
    gm = GroupedMoments(X, shift=mean, n_groups=plan.units, seed=seed, device=dev)
    gq = GroupedMoments(X, transform=norms, shift=np.zeros(2), n_groups=plan.units, seed=seed, device=dev)
    reps = []
    for w in weights:
        pm = PairMoments.from_totals(gm.total(w), gq.total(w), da)
        reps.append([pm.disparity(device=dev), pm.correlation()])
    return PairMoments.from_totals(gm.total(), gq.total(), da), np.array(reps, float)
