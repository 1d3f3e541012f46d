r"""Remedy checks: what a geometry diagnostic costs the tasks of the same report, measured.

Anisotropy, hubness, poor uniformity and dimensional collapse are properties of the vectors; whether they cost
anything depends on what the vectors are used for. The check applies the diagnostic's standard remedy to the
set and re-scores every task of the run on the remedied vectors **with the same plan** (the task scorers of
:mod:`.scoring`: the same folds, held-out edges, negatives and samples), paired unit by unit with the task's own
numbers. A remedy that improves a task by more than the effect that matters (``--mde``) means the geometry costs
that task; one that does not means it is harmless here.

The remedies (seed 000 §217.0.9 and §217.0.12; the Anisotropy-correction chapter measures their effect on the
geometry itself, :mod:`.correction`):

* ``centring``: :math:`\tilde e = e - \mu` (also a hubness reduction: Suzuki et al. 2013; Hara et al. 2015);
* ``all-but-the-top``: :math:`\tilde e = (e - \mu) - \sum_{j \le D} (u_j^\top (e - \mu))\,u_j` (Mu, Bhat &
  Viswanath 2018), with the correction chapter's D (the removal that brings APCS closest to 0);
* ``whitening``: ZCA, :math:`\tilde e = (e - \mu)\,V \Lambda^{-1/2} V^\top` with eigenvalues floored at
  :data:`~.correction.WHITEN_FLOOR` of the largest (Su et al. 2021 for sentence embeddings).

Each is fitted once on the set and applied to every row the task reads, the set's own and any of the task's
inputs (a retrieval chapter's query vectors).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..kernels import as_numpy
from .correction import WHITEN_FLOOR
from .isotropy import PrincipalDirections, best_apcs_removal, no_variance

#: the remedies, in the order they are checked
REMEDIES = ("centring", "all-but-the-top", "whitening")
#: what each remedy is, in words (tables, narrative)
REMEDY_TEXT = {
    "centring": "the mean vector subtracted",
    "all-but-the-top": "centred, then the top D principal directions projected out (Mu et al. 2018)",
    "whitening": "centred and whitened (ZCA: every principal direction scaled to unit variance)",
}


@dataclass(frozen=True)
class Remedy:
    """A remedy fitted on one set: ``name``, its parameter in words (``"D = 2"``) and the row map."""

    name: str
    detail: str
    apply: Callable[[np.ndarray], np.ndarray]

    @property
    def label(self) -> str:
        return f"{self.name} ({self.detail})" if self.detail else self.name


def fit_remedy(X, name: str, *, removed: int | None = None, pcs: PrincipalDirections | None = None,
               device="auto") -> Remedy | None:
    """The remedy ``name`` (:data:`REMEDIES`) fitted on ``X``: its mean and principal directions. ``removed``:
    all-but-the-top's D (default: the removal that brings APCS closest to 0). ``None`` when the remedy leaves no
    variance (every row the same), so nothing can be scored on it.

    >>> X = np.array([[1.0, 0.0], [3.0, 2.0]])
    >>> fit_remedy(X, "centring").apply(X)
    array([[-1., -1.],
           [ 1.,  1.]], dtype=float32)
    """
    if name not in REMEDIES:
        raise ValueError(f"remedy must be one of {', '.join(REMEDIES)}, not {name!r}")
    X = as_numpy(X)
    pcs = pcs or PrincipalDirections.fit(X, device=device)
    scale = float(pcs.mean @ pcs.mean) + float(pcs.eigenvalues.clip(0).sum())
    mu = pcs.mean
    if name == "centring":
        if no_variance(pcs.eigenvalues, scale):
            return None
        return Remedy(name, "", lambda x: _rows(np.asarray(x, np.float64) - mu))
    if name == "all-but-the-top":
        D = best_apcs_removal(X, pcs=pcs, device=device) if removed is None else int(removed)
        if D is None or no_variance(pcs.eigenvalues[D:], scale):
            return None
        U = pcs.vectors[:, :D]

        def abtt(x):
            c = np.asarray(x, np.float64) - mu
            return _rows(c - (c @ U) @ U.T)
        return Remedy(name, f"D = {D}", abtt)
    if no_variance(pcs.eigenvalues, scale):
        return None
    lam = np.maximum(pcs.eigenvalues, WHITEN_FLOOR * max(pcs.eigenvalues[0], 1e-300))
    W = (pcs.vectors / np.sqrt(lam)) @ pcs.vectors.T
    return Remedy(name, "ZCA", lambda x: _rows((np.asarray(x, np.float64) - mu) @ W))


def _rows(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


def remedied_rows(X, remedy: Remedy, *, chunk: int = 65_536) -> np.ndarray:
    """``remedy`` applied to every row of ``X`` (float32), a chunk of rows at a time."""
    X = as_numpy(X)
    out = np.empty(X.shape, dtype=np.float32)
    for s in range(0, len(X), chunk):
        out[s:s + chunk] = remedy.apply(X[s:s + chunk])
    return out
