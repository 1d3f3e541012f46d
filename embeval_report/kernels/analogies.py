"""Exact 3CosAdd and 3CosMul predictions for analogy questions, chunked over the questions."""
from __future__ import annotations

import numpy as np
import torch

from ..progress import progress
from .device import as_numpy, chunk_rows, resolve_device, unit_rows

#: Levy & Goldberg (2014) footnote: ε keeps the 3CosMul denominator away from zero
COSMUL_EPS = 1e-3


def solve_analogies(X, abc, *, n_candidates: int | None = None, exclude: tuple | None = None,
                    eps: float = COSMUL_EPS, device="auto", desc: str | None = "analogies"
                    ) -> tuple[np.ndarray, np.ndarray]:
    r"""Exact 3CosAdd and 3CosMul predictions for analogy questions, chunked over questions.

    Parameters
    ----------
    X : array (n, d)
    abc : int array (q, 3)
        Rows of a, b, c for each question a : b :: c : ?.
    n_candidates : the first rows of ``X`` that may be predicted (default all)
    exclude : ``(question index, row)`` arrays of candidates to skip (default: each question's
        own a, b, c rows)
    eps : 3CosMul's ε (Levy & Goldberg 2014 use 10⁻³; gensim's ``most_similar_cosmul`` 10⁻⁶)

    Returns
    -------
    (pred_3cosadd, pred_3cosmul) : int64 arrays (q,) of predicted rows; ``-1`` for a question
    whose every candidate is excluded.

    On unit vectors, 3CosAdd is :math:`\arg\max_x x^\top(\hat b - \hat a + \hat c)` and 3CosMul
    :math:`\arg\max_x s_b s_c / (s_a + \varepsilon)` with :math:`s_y = (1 + x^\top \hat y)/2`.
    Scores are float32 matrix products on ``device``; ties go to the lowest row. Chunks hold at
    most :func:`embeval_report.kernels.chunk_budget` bytes of scores.
    """
    X = as_numpy(X)
    abc = np.asarray(abc, dtype=np.int64).reshape(-1, 3)
    q = len(abc)
    m = len(X) if n_candidates is None else int(n_candidates)
    dev = resolve_device(device)
    if exclude is None:
        exclude = (np.repeat(np.arange(q), 3), abc.ravel())
    eq, er = (np.asarray(e, dtype=np.int64) for e in exclude)
    order = np.argsort(eq, kind="stable")
    eq, er = eq[order], er[order]
    U = unit_rows(_float32(X[:m], dev))
    Q = unit_rows(_float32(X[abc.ravel()], dev)).reshape(q, 3, -1)
    add = np.empty(q, dtype=np.int64)
    mul = np.empty(q, dtype=np.int64)
    rows = chunk_rows(q, m * 4 * 5)
    starts = range(0, q, rows)
    for s in progress(starts, desc=desc or "analogies", total=len(starts)) if desc else starts:
        a, b, c = Q[s:s + rows, 0], Q[s:s + rows, 1], Q[s:s + rows, 2]
        lo, hi = np.searchsorted(eq, [s, s + len(a)])
        mask_r = torch.as_tensor(eq[lo:hi] - s, device=dev)
        mask_c = torch.as_tensor(er[lo:hi], device=dev)
        scores = (b - a + c) @ U.T
        scores[mask_r, mask_c] = -torch.inf
        add[s:s + len(a)] = _argmax(scores)
        del scores
        sa, sb, sc = ((1 + y @ U.T) / 2 for y in (a, b, c))
        scores = sb * sc / (sa + eps)
        scores[mask_r, mask_c] = -torch.inf
        mul[s:s + len(a)] = _argmax(scores)
        del scores, sa, sb, sc
    return add, mul


def _float32(x: np.ndarray, device) -> torch.Tensor:
    """Rows as a float32 tensor on ``device`` (copied when read-only, e.g. a memory-mapped file)."""
    return torch.from_numpy(np.require(x, np.float32, ["C", "W"])).to(device)


def _argmax(scores: torch.Tensor) -> np.ndarray:
    """Row-wise argmax (lowest index on ties), ``-1`` where every candidate is excluded (or none exists)."""
    if scores.shape[1] == 0:
        return np.full(scores.shape[0], -1, dtype=np.int64)
    arg = scores.argmax(1)
    return torch.where(torch.isneginf(scores.amax(1)), -1, arg).cpu().numpy()
