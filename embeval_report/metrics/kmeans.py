"""k-means as the clustering chapter fits it: scikit-learn's KMeans (Lloyd) with its restarts kept, MiniBatchKMeans
for large sets, and the sweep over k warm-started from the neighbouring k (:mod:`.clustering` scores them)."""
from __future__ import annotations

import warnings

import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.exceptions import ConvergenceWarning

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

    The restarts are ``n_init`` fits of one restart each that share one ``RandomState(seed)``: scikit-learn's fit
    draws each restart's k-means++ initialisation from that generator in turn and keeps a restart whose inertia is
    lower and whose partition differs, so the best is bit for bit ``KMeans(n_init=n_init)``'s (tested), and the
    other restarts, which scikit-learn computes and drops, come at no extra cost."""
    rng = np.random.RandomState(seed)
    restarts, best = [], None
    with threads(*U.shape), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for _ in range(n_init):
            km = KMeans(n_clusters=k, n_init=1, random_state=rng).fit(U)
            labels, inertia = km.labels_.astype(np.int64), float(km.inertia_)
            restarts.append((labels, inertia))
            if best is None or (inertia < best[1] and not _same_clustering(labels, best[0])):
                best = (labels, inertia, km.cluster_centers_)
    return best[0], best[1], best[2], restarts


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
