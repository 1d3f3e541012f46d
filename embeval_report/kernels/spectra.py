"""Batched spectra of resampled moments: many bootstrap replicates' eigenvalues or singular values at once on the
device, one copy to the host at the end."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .device import chunk_budget, chunk_rows, step_budget

#: CUDA streams a stack's eigendecompositions are spread over (:func:`batched_eigvalsh`), each driven from a thread
#: of its own: torch runs cuSOLVER's ``syevd`` once per matrix above 32 x 32, and each call waits on the host (the
#: device-to-host copies of the bootstrap grew with its replicates on an H200: 40 at 10, 72 at 40), so on one
#: stream the device idles between matrices (1.7 s for 200 replicates of 768 x 768). 1: one batched call, as
#: measured; ``make bench-gpu`` times 1, 4 and 8 streams (the same eigenvalues) before this changes.
EIG_STREAMS = 1


def batched_eigvalsh(A: torch.Tensor, streams: int | None = None) -> torch.Tensor:
    """The eigenvalues (ascending) of a stack ``A`` (B, d, d) of symmetric matrices, on their device: one batched
    ``torch.linalg.eigvalsh``; on a GPU with ``streams`` > 1 (default :data:`EIG_STREAMS`) the stack is cut into that
    many parts, each decomposed on a CUDA stream of its own from its own thread (the same per-matrix computation:
    the same eigenvalues), then one wait for all."""
    streams = EIG_STREAMS if streams is None else streams
    parts = min(max(1, streams), len(A))
    if parts <= 1 or A.device.type != "cuda":
        return torch.linalg.eigvalsh(A)
    out = torch.empty(A.shape[:-1], dtype=A.dtype, device=A.device)
    bounds = np.linspace(0, len(A), parts + 1).astype(int)
    main = torch.cuda.current_stream(A.device)
    side = [torch.cuda.Stream(A.device) for _ in range(parts)]

    def part(i: int) -> None:
        with torch.cuda.device(A.device), torch.cuda.stream(side[i]):
            side[i].wait_stream(main)  # the stack is made on the main stream
            a, b = bounds[i], bounds[i + 1]
            out[a:b] = torch.linalg.eigvalsh(A[a:b])

    with ThreadPoolExecutor(parts) as pool:
        list(pool.map(part, range(parts)))
    for s in side:
        main.wait_stream(s)
    return out


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
    step = chunk_rows(len(W), d * d * 8 * 3, step_budget(W.device))  # a GPU: all replicates in one step, if they fit
    for r in range(0, len(W), step):
        w = W[r:r + step]
        m = s[r:r + step] / N[r:r + step, None]
        cov = (w @ G).view(-1, d, d) / N[r:r + step, None, None] - m[:, :, None] * m[:, None, :]
        eig.append(batched_eigvalsh(cov))
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
