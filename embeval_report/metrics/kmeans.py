"""k-means as the clustering chapter fits it: scikit-learn's KMeans (Lloyd) with its restarts kept, MiniBatchKMeans
for large sets, and the sweep over k warm-started from the neighbouring k (:mod:`.clustering` scores them)."""
from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.cluster._kmeans import _kmeans_single_lloyd, _tolerance
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics.pairwise import _euclidean_distances
from sklearn.utils import check_array, gen_batches
from sklearn.utils._openmp_helpers import _openmp_effective_n_threads
from sklearn.utils.extmath import row_norms

from ..context import current
from .labels import map_fits, threads

KMEANS_N_INIT = 10
#: MiniBatchKMeans above this many entities
MINIBATCH_THRESHOLD = 50_000
MINIBATCH_SIZE = 4096


def kmeans_fit(U, k: int, *, n_init: int = KMEANS_N_INIT, seed: int = 0,
               minibatch_threshold: int = MINIBATCH_THRESHOLD) -> tuple[np.ndarray, float, str]:
    """k-means labels, inertia and algorithm name (``MiniBatchKMeans`` above ``minibatch_threshold`` rows).

    Fewer distinct points than ``k`` (identical vectors) give fewer distinct clusters than ``k``;
    scikit-learn's warning about it is not repeated (the silhouette says so).
    """
    with threads(*U.shape), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if len(U) > minibatch_threshold:
            km = MiniBatchKMeans(n_clusters=k, n_init=n_init, random_state=seed, batch_size=MINIBATCH_SIZE).fit(U)
            return km.labels_.astype(np.int64), float(km.inertia_), f"MiniBatchKMeans (batch {MINIBATCH_SIZE})"
        km = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit(U)
    return km.labels_.astype(np.int64), float(km.inertia_), "KMeans (Lloyd)"


def _same_clustering(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether every cluster of ``a`` falls in one cluster of ``b`` (scikit-learn's ``_is_same_clustering``)."""
    pairs = np.unique(np.stack([a, b]), axis=1)
    return pairs.shape[1] == len(np.unique(a))


def kmeans_restarts(U, k: int, *, n_init: int = KMEANS_N_INIT, seed: int = 0
                    ) -> tuple[np.ndarray, float, np.ndarray, list[tuple[np.ndarray, float]]]:
    """``KMeans(k, n_init=n_init, random_state=seed)`` (Lloyd) with its restarts kept: the best partition's labels,
    inertia and centres, and every restart's ``(labels, inertia)``.

    The restarts are scikit-learn's own, in its order: each draws its k-means++ initialisation from one
    ``RandomState(seed)`` in turn (:class:`_Restarts`) and runs scikit-learn's Lloyd iterations, and a restart
    whose inertia is lower and whose partition differs is kept, so the best is bit for bit ``KMeans(n_init=
    n_init)``'s (tested on float32 and float64 rows, ties and repeated rows), and the other restarts, which
    scikit-learn computes and drops, come at no extra cost."""
    rng = np.random.RandomState(seed)
    restarts, best = [], None
    with threads(*U.shape), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fits = _Restarts(U, k)
        starts = fits.plusplus(rng, n_init)  # the generator's draws in scikit-learn's order
        for labels, inertia, centres in map_fits(fits.lloyd, starts, *U.shape):
            restarts.append((labels, inertia))
            if best is None or (inertia < best[1] and not _same_clustering(labels, best[0])):
                best = (labels, inertia, centres)
    return best[0], best[1], best[2], restarts


class _Restarts:
    """``KMeans(k, n_init=1, random_state=rng).fit(U)`` restart after restart, with what each fit would redo (the
    validated, centred copy of the rows, its tolerance and norms, and for float32 rows the norms of their float64
    chunks and, where the memory budget holds it (:meth:`~embeval_report.context.ComputeContext.fits`), their
    float64 copy) computed once.

    scikit-learn's k-means++ measures each candidate centre's squared distance to every row with float32 rows
    upcast to float64 chunk by chunk (``_euclidean_distances_upcast``: a copy and the norms of every chunk, for every
    centre of every restart: half the fit's time at 10,000 x 384). :meth:`_sq_distances` takes the same chunks
    from the one float64 copy and the same products in the same order, so every distance, every draw and every
    centre is scikit-learn's bit for bit; the Lloyd iterations are scikit-learn's ``_kmeans_single_lloyd``. The
    k-means++ starts draw from the generator one after the other, as scikit-learn's restarts do (Lloyd's
    iterations draw nothing); the Lloyd runs then go side by side where :func:`~.labels.map_fits` runs fits so
    (a small problem, each single-threaded as it is alone), with the same numbers."""

    def __init__(self, U, k: int):
        X = check_array(U, dtype=[np.float64, np.float32], order="C", copy=True)
        if len(X) < k:
            raise ValueError(f"n_samples={len(X)} should be >= n_clusters={k}.")
        self.k, self.tol = k, _tolerance(X, 1e-4)            # KMeans' default tol, of the rows before centring
        self.mean = X.mean(axis=0)
        X -= self.mean                                         # as KMeans.fit: distances of the centred rows
        self.X, self.weight = X, np.ones(len(X), dtype=X.dtype)
        self.norms = row_norms(X, squared=True)
        self.upcast = X.dtype == np.float32
        self.X64 = X.astype(np.float64) if self.upcast and current().fits(2 * X.nbytes) else None
        self._chunk_norms: dict[int, list] = {}
        self.n_threads = _openmp_effective_n_threads()

    def lloyd(self, start: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
        """Lloyd's iterations from the centres ``start`` (centred, as :meth:`plusplus` gives them): labels, inertia
        and centres (in the rows' own coordinates). No random draws: restarts may run side by side."""
        labels, inertia, centres, _ = _kmeans_single_lloyd(self.X, self.weight, start.copy(), max_iter=300,
                                                           tol=self.tol, n_threads=self.n_threads)
        return labels.astype(np.int64), float(inertia), centres + self.mean

    def plusplus(self, rng: np.random.RandomState, n_init: int) -> list[np.ndarray]:
        """``n_init`` starts of scikit-learn's greedy k-means++ (``_kmeans_plusplus``, unit weights), each step for
        step as ``n_init`` calls would take them. Its random draws do not depend on the rows (the first centre's
        index; for each further centre, uniforms that the current potential scales), so they are drawn first,
        restart after restart, by the same calls in the same order; then each step is taken for all restarts at
        once, which reads every chunk of the rows once a step rather than once a restart (the same products)."""
        X, w, n, k = self.X, self.weight, len(self.X), self.k
        trials = 2 + int(np.log(k))
        draws = [(rng.choice(n, p=w / w.sum()), [rng.uniform(size=trials) for _ in range(1, k)])
                 for _ in range(n_init)]
        centres = np.empty((n_init, k, X.shape[1]), dtype=X.dtype)
        centres[:, 0] = X[[first for first, _ in draws]]
        closest = self._sq_distances([np.array([first]) for first, _ in draws])
        pot = [dist @ w for dist in closest]
        for c in range(1, k):
            cands = []
            for r, (_, uniforms) in enumerate(draws):
                cand = np.searchsorted(np.cumsum(w * closest[r]), uniforms[c - 1] * pot[r])
                np.clip(cand, None, closest[r].size - 1, out=cand)
                cands.append(cand)
            for r, (cand, to_cand) in enumerate(zip(cands, self._sq_distances(cands))):
                np.minimum(closest[r], to_cand, out=to_cand)
                cand_pot = to_cand @ w.reshape(-1, 1)
                best = np.argmin(cand_pot)
                pot[r], closest[r] = cand_pot[best], to_cand[best]
                centres[r, c] = X[cand[best]]
        return list(centres)

    def _sq_distances(self, rows: list[np.ndarray]) -> list[np.ndarray]:
        """Squared distances of ``X[r]`` to every row for each ``r`` of ``rows`` (index arrays of one length), as
        scikit-learn's ``_euclidean_distances(X[r], X, Y_norm_squared=norms, squared=True)`` computes them: for
        float32 rows the same upcast chunks and products, chunk after chunk for all of ``rows``."""
        if not self.upcast:
            return [_euclidean_distances(self.X[r], self.X, Y_norm_squared=self.norms, squared=True) for r in rows]
        (n, d), m = self.X.shape, len(rows[0])
        batch = _upcast_batch(m, n, d)
        if batch not in self._chunk_norms:
            self._chunk_norms[batch] = [row_norms(self._chunk(s), squared=True)[None, :] for s in gen_batches(n, batch)]
        outs = [np.empty((m, n), dtype=np.float32) for _ in rows]
        parts = []
        for r, out in zip(rows, outs):
            for xs in gen_batches(m, batch):
                A = self.X[r[xs]].astype(np.float64)
                parts.append((A, row_norms(A, squared=True)[:, None], out, xs))
        for ys, YY in zip(gen_batches(n, batch), self._chunk_norms[batch]):
            Y = self._chunk(ys)
            for A, AA, out, xs in parts:
                D = -2 * (A @ Y.T)
                D += AA
                D += YY
                out[xs, ys] = D
        return [np.maximum(out, 0, out=out) for out in outs]

    def _chunk(self, rows: slice) -> np.ndarray:
        """Rows of the float32 rows as float64 (C-contiguous, as scikit-learn's upcast copy of a chunk)."""
        return self.X64[rows] if self.X64 is not None else self.X[rows].astype(np.float64)


def _upcast_batch(n_x: int, n_y: int, d: int) -> int:
    """The chunk rows of scikit-learn's ``_euclidean_distances_upcast`` for dense ``n_x`` x ``d`` against ``n_y`` x
    ``d`` (10 % more memory than the operands and the result, at least 10 MiB)."""
    maxmem = max(((n_x + n_y) * d + n_x * n_y) / 10, 10 * 2 ** 17)
    tmp = 2 * d
    return max(int((-tmp + math.sqrt(tmp ** 2 + 4 * maxmem)) / 2), 1)


#: how :func:`sweep_fits` fits each k (the chapter's caption)
SWEEP_METHOD = ("one k-means run (Lloyd) per k, started from the neighbouring k's centres: k + 1 adds a centre by a "
                "seeded greedy k-means++ step, k − 1 merges the two centres whose merge adds the least inertia; "
                "the true k is the headline fit")


def sweep_fits(U, k: int, clusters: np.ndarray, inertia: float, *, seed: int = 0) -> dict[int, tuple[np.ndarray, float]]:
    """``{k': (labels, inertia)}`` for k' from max(2, k − 2) to k + 3 (fewer than the rows), the true k being
    ``clusters``: each k' one k-means (Lloyd) run started from its neighbour towards k (:data:`SWEEP_METHOD`)."""
    U64 = np.asarray(U, dtype=np.float64)

    def chain(step: int) -> dict:  # k + 1, k + 2, ... (or k − 1, ...), each from the one before
        rng, fits, labels = np.random.default_rng([seed, 96, 3]), {}, clusters
        for kk in range(k + step, min(k + 4, len(U)) if step > 0 else max(2, k - 2) - 1, step):
            centres, sizes = _centres(U64, labels, kk - step)
            centres = _add_centre(U64, centres, rng) if step > 0 else _merge_closest(centres, sizes)
            km = KMeans(n_clusters=kk, init=centres, n_init=1).fit(U)
            labels = km.labels_.astype(np.int64)
            fits[kk] = (labels, float(km.inertia_))
        return fits

    with threads(*U.shape), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        up, down = map_fits(chain, (1, -1), *U.shape)  # the two chains side by side
    return {k: (clusters, inertia), **up, **down}


def _centres(U: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The mean row and the size of each cluster ``0 .. k - 1`` (an empty cluster keeps a zero centre)."""
    sizes = np.bincount(labels, minlength=k).astype(np.float64)
    sums = np.zeros((k, U.shape[1]))
    np.add.at(sums, labels, U)
    return sums / np.maximum(sizes, 1)[:, None], sizes


def _add_centre(U: np.ndarray, centres: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``centres`` and one more: of 2 + ⌊ln k⌋ rows drawn with probability proportional to their squared distance to
    the nearest centre, the one that lowers the summed squared distance most (scikit-learn's greedy k-means++)."""
    sq = (U * U).sum(1)
    d2 = np.clip(sq[:, None] - 2 * U @ centres.T + (centres * centres).sum(1)[None, :], 0, None).min(1)
    p = d2 / d2.sum() if d2.sum() > 0 else np.full(len(U), 1 / len(U))
    cand = rng.choice(len(U), 2 + int(np.log(len(centres) + 1)), p=p)
    to_cand = np.clip(sq[:, None] - 2 * U @ U[cand].T + sq[cand][None, :], 0, None)
    best = cand[int(np.minimum(d2[:, None], to_cand).sum(0).argmin())]
    return np.vstack([centres, U[best]])


def _merge_closest(centres: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``centres`` with the pair whose merge adds the least inertia (Ward: n_i n_j / (n_i + n_j) |c_i − c_j|²)
    replaced by their weighted mean."""
    d2 = ((centres[:, None, :] - centres[None, :, :]) ** 2).sum(-1)
    w = sizes[:, None] * sizes[None, :] / np.maximum(sizes[:, None] + sizes[None, :], 1)
    cost = np.where(np.triu(np.ones_like(d2, bool), 1), w * d2, np.inf)
    i, j = np.unravel_index(int(cost.argmin()), cost.shape)
    merged = (sizes[i] * centres[i] + sizes[j] * centres[j]) / max(sizes[i] + sizes[j], 1)
    keep = [c for c in range(len(centres)) if c not in (i, j)]
    return np.vstack([centres[keep], merged])
