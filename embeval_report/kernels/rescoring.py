"""Re-scorings of a cosine k-NN search (see :class:`~.tiles.RunningTopK`): CSLS and mutual proximity, each scoring a
tile of cosines in float32 and the kept candidates exactly in float64."""
from __future__ import annotations

import functools
import hashlib

import numpy as np
import torch


class Csls:
    """2 cos(x, y) − r(y), the part of CSLS that ranks the columns of row x (see :class:`~.tiles.RunningTopK`)."""

    def __init__(self, r: np.ndarray, device):
        self.r32 = torch.as_tensor(r, dtype=torch.float32, device=device)
        self.r64 = torch.as_tensor(r, dtype=torch.float64, device=device)
        self.column = self.r64  # 2 cos - r(y) is linear in the cosine: searched exactly on bounded products

    def tile_scores(self, tile, col0: int, out):
        """The scores of a whole tile of cosines (corpus columns from ``col0``), pruned like products."""
        return torch.mul(tile, 2, out=out).sub_(self.r32[col0:col0 + tile.shape[1]])

    def exact(self, rows, cols, cos64):
        return 2 * cos64 - self.r64[cols]


def csls_key(r: np.ndarray) -> str:
    """The graph-cache key of the CSLS graph with the rows' r (float64): a digest of r, so a graph ranked by other r
    is never read for it."""
    return f"csls-r{hashlib.blake2b(np.asarray(r, dtype=np.float64).tobytes(), digest_size=6).hexdigest()}"


class SweptCsls:
    """CSLS whose r is the mean of the first ``neighborhood`` similarities of the cosine graph of the same sweep (the
    float64 mean of its float32 values, as :func:`~embeval_report.metrics.hubness_reduction.hubness_reduction_effect`
    takes it), ranked inside the set's collected sweep (:mod:`.swept_csls`); ``r`` is set when the sweep ends, and the
    graph is stored under :func:`csls_key` of it."""

    def __init__(self, neighborhood: int):
        self.neighborhood = int(neighborhood)
        self.r: np.ndarray | None = None

    def r_of(self, cosine_similarities: np.ndarray) -> np.ndarray:
        """r from the cosine graph's similarities (n, k >= neighborhood), as the hubness chapter computes it."""
        return np.array(cosine_similarities[:, :self.neighborhood]).astype(np.float64).mean(1)


class MutualProximity:
    """log MP(x, y) = log Φ(z_x) + log Φ(z_y) from the cosine (see :class:`~.tiles.RunningTopK`).

    ``moments``: the rows' cosine mean and sd ``(mu, sd)`` (:func:`~.pairs.cosine_mean_sd_rows`), or a function giving them,
    called when a sweep first scores (a graph the run's cache holds needs no pass over the set for them)."""

    def __init__(self, moments, device):
        self._moments, self.device = moments, device

    @functools.cached_property
    def _params(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        mu, sd = self._moments() if callable(self._moments) else self._moments
        sd = np.maximum(sd, 1e-12)
        return (torch.as_tensor(mu, dtype=torch.float32, device=self.device),
                torch.as_tensor(1.0 / sd, dtype=torch.float32, device=self.device),
                torch.as_tensor(mu, dtype=torch.float64, device=self.device),
                torch.as_tensor(sd, dtype=torch.float64, device=self.device))

    mu = property(lambda self: self._params[0])
    inv = property(lambda self: self._params[1])
    mu64 = property(lambda self: self._params[2])
    sd64 = property(lambda self: self._params[3])

    def scores(self, rows, cols, cos):
        a = torch.special.log_ndtr((cos - self.mu[rows]) * self.inv[rows])
        return a.add_(torch.special.log_ndtr((cos - self.mu[cols]) * self.inv[cols]))

    def floor(self, rows, kth):
        """log Φ(z_y) ≤ 0, so a cosine with log Φ(z_x) ≤ kth cannot beat kth: z_x ≤ Φ⁻¹(exp(kth))."""
        z = torch.special.ndtri(torch.exp(kth.double()))
        return (self.cosine_at(rows, z) - 1e-5).float()  # 1e-5: float32 rounding of the scores

    def column_z(self, kth):
        """Per row the z-score a column needs to reach ``kth`` (float64): log Φ(z_x) ≤ 0, so a column reaching it
        needs log Φ(z_y) ≥ kth, z_y ≥ Φ⁻¹(e^kth) = −Φ⁻¹(−expm1(kth)) (well conditioned where kth is near 0). Each
        caller adds the margin of its own scores' rounding: :meth:`column_floor` (float32 z-scores) and the collected
        sweep (float64 cosines, :func:`~.sweep._limit_block`)."""
        return -torch.special.ndtri(-torch.expm1(kth.double()))

    def cosine_at(self, idx, z):
        """The cosine (float64) at z-score ``z`` of rows ``idx``: μ + σ z."""
        return self.mu64[idx] + self.sd64[idx] * z

    def column_floor(self, kth):
        """Per row the column z-score at or below which no column can beat ``kth`` (:meth:`column_z`), less a margin
        of 1e-3 far above the float32 scores' rounding (the same float32 z_y as :meth:`scores`'); −inf where that is
        not finite."""
        z = self.column_z(kth) - 1e-3
        return torch.where(torch.isfinite(z), z, -torch.inf).float()

    def can_beat(self, cols, cos, column_floor):
        """Whether each entry's column z-score is above its row's :meth:`column_floor` (a necessary condition of
        beating the row's k-th score: in a 10,000-row sweep 1 in 12 of the entries above the rows' product floors)."""
        return (cos - self.mu[cols]) * self.inv[cols] > column_floor

    def exact(self, rows, cols, cos64):
        a = torch.special.log_ndtr((cos64 - self.mu64[rows]) / self.sd64[rows])
        return a + torch.special.log_ndtr((cos64 - self.mu64[cols]) / self.sd64[cols])
