"""Batched spectra of resampled moments: many bootstrap replicates' eigenvalues or singular values at once on the
device, one copy to the host at the end."""
from __future__ import annotations

import numpy as np
import torch

from .device import chunk_budget, chunk_rows


def replicate_spectra(W: np.ndarray, cov_m, cos_m, d: int, device) -> tuple[np.ndarray, ...]:
    """The bootstrap replicates of a set's covariance and cosine moments on ``device`` at once, without a trip to
    the host per replicate: the replicates' moments as one product of the weights ``W`` (replicates × blocks) with
    the blocks' moments (``cov_m``, ``cos_m``: per-block ``count``, ``s``, ``G``), their covariance spectra by one
    batched ``eigvalsh`` (float64). Returns, per replicate, ``(eigenvalues (r, d), N, ‖Σu‖², ‖Σ uuᵀ‖²_F, Σw²n)``."""
    W = torch.as_tensor(W, device=device)
    blocks = W.shape[1]

    def up(a):
        return torch.as_tensor(np.asarray(a, float), device=device)

    N, s, G = W @ up(cov_m.count), W @ up(cov_m.s), up(cov_m.G).reshape(blocks, -1)
    su, Gu = W @ up(cos_m.s), up(cos_m.G).reshape(blocks, -1)
    same = (W * W) @ up(cos_m.count)
    eig, gg = [], []
    step = chunk_rows(len(W), d * d * 8 * 3)
    for r in range(0, len(W), step):
        w = W[r:r + step]
        m = s[r:r + step] / N[r:r + step, None]
        cov = (w @ G).view(-1, d, d) / N[r:r + step, None, None] - m[:, :, None] * m[:, None, :]
        eig.append(torch.linalg.eigvalsh(cov))
        gg.append(((w @ Gu) ** 2).sum(1))
    return tuple(t.cpu().numpy() for t in (torch.cat(eig), N, (su * su).sum(1), torch.cat(gg), same))


def weighted_nuclear_norms(W: np.ndarray, Gab: np.ndarray, device) -> np.ndarray:
    """For each row w of ``W`` (replicates × blocks): the nuclear norm of ``Σ_b w_b Gab[b]`` (``Gab``: blocks ×
    da × db), batched on ``device``."""
    G = torch.as_tensor(Gab, device=device)
    da, db = Gab.shape[1:]
    step = max(1, chunk_budget() // (8 * da * db * 2))
    nuc = np.empty(len(W))
    for s0 in range(0, len(W), step):
        Wt = torch.as_tensor(W[s0:s0 + step], device=device)
        M = torch.einsum("rb,bij->rij", Wt, G)
        M = M.transpose(1, 2) @ M if db <= da else M @ M.transpose(1, 2)
        # nuclear norm = Σ sqrt(eig(MᵀM)): a symmetric eigensolve is ~3x cheaper than an SVD
        nuc[s0:s0 + step] = torch.linalg.eigvalsh(M).clamp_min(0).sqrt().sum(1).cpu().numpy()
    return nuc
