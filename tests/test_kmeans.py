"""k-means restarts (metrics/kmeans.py) bit for bit against scikit-learn's KMeans: its k-means++ draws, distances,
centres, partitions and inertias, on float32 and float64 rows, ties, repeated rows and chunked distances."""
import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.cluster._kmeans import _kmeans_plusplus
from sklearn.metrics.pairwise import _euclidean_distances

from embeval_report.kernels.transforms import unit_vectors
from embeval_report.metrics import kmeans as km
from embeval_report.metrics.labels import threads


def _sets():
    rng = np.random.default_rng(11)
    out = []
    for n, d, k in ((600, 20, 6), (900, 48, 9)):  # overlapping clusters: the restarts differ
        X = (0.3 * rng.standard_normal((k, d)))[rng.integers(0, k, n)] + rng.standard_normal((n, d))
        out.append((f"overlap{n}", X, k))
    base = rng.standard_normal((40, 8))
    out.append(("repeated rows", base[rng.integers(0, 40, 500)], 12))      # every row 12 times or so: ties
    out.append(("fewer points than k", base[rng.integers(0, 5, 200)], 8))   # 5 distinct rows, k = 8
    grid = np.array([[x, y] for x in range(6) for y in range(6)], float) + 1.0
    out.append(("grid ties", np.repeat(grid, 3, axis=0), 7))                # equal distances everywhere
    out.append(("2,000 x 48", rng.standard_normal((2000, 48)) + 0.2, 16))   # two upcast chunks
    return out


SETS = _sets()


@pytest.mark.filterwarnings("ignore:Number of distinct clusters")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,X,k", SETS, ids=[s[0] for s in SETS])
def test_restarts_equal_kmeans_bit_for_bit(name, X, k, dtype):
    """The best partition, its inertia and centres are KMeans(n_init=10)'s; every restart is KMeans(n_init=1)'s
    with the generator where the previous one left it."""
    U = unit_vectors(X.astype(dtype))
    for seed in (0, 7):
        best, inertia, centres, restarts = km.kmeans_restarts(U, k, seed=seed)
        with threads(*U.shape):
            ref = KMeans(k, n_init=10, random_state=seed).fit(U)
            rng = np.random.RandomState(seed)
            one = [KMeans(k, n_init=1, random_state=rng).fit(U) for _ in range(10)]
        np.testing.assert_array_equal(best, ref.labels_)
        assert inertia == ref.inertia_ and centres.dtype == ref.cluster_centers_.dtype
        np.testing.assert_array_equal(centres, ref.cluster_centers_)
        for (labels, inert), r in zip(restarts, one, strict=True):
            np.testing.assert_array_equal(labels, r.labels_)
            assert inert == r.inertia_


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_plusplus_and_distances_are_sklearns(dtype):
    """k-means++ draws the same centres from the same generator, and the squared distances equal scikit-learn's
    ``_euclidean_distances`` to the bit, also where the candidates span several upcast chunks (very wide rows)."""
    rng = np.random.default_rng(2)
    for n, d, k in ((500, 30, 10), (30, 200_000, 8)):  # the second: 3 rows per chunk, 4 candidates per centre
        X = rng.standard_normal((n, d)).astype(dtype)
        fits = km._Restarts(X, k)
        for rows in ([np.array([3])], [np.array([0, 5, 5, n - 1]), np.array([1, 2, 3, 4])], [np.arange(min(n, 9))]):
            for r, got in zip(rows, fits._sq_distances(rows), strict=True):
                ref = _euclidean_distances(fits.X[r], fits.X, Y_norm_squared=fits.norms, squared=True)
                assert got.dtype == ref.dtype
                np.testing.assert_array_equal(got, ref)
        if d < 1000:  # three restarts' starts at once, as three calls one after the other draw them
            mine = fits.plusplus(np.random.RandomState(4), 3)
            rng = np.random.RandomState(4)
            for start in mine:
                theirs, _ = _kmeans_plusplus(fits.X, k, fits.norms, fits.weight, rng)
                np.testing.assert_array_equal(start, theirs)
    assert km._upcast_batch(4, 30, 200_000) < 4  # the wide case did span chunks of candidates


def test_restarts_reject_fewer_rows_than_k():
    with pytest.raises(ValueError, match="n_samples=3 should be >= n_clusters=4"):
        km.kmeans_restarts(np.eye(3), 4)


def test_restarts_side_by_side_equal_one_after_the_other(monkeypatch):
    """The Lloyd runs go two at a time on two cores and one after the other on one: the same restarts."""
    from embeval_report.metrics import labels as mlab

    _, X, k = SETS[1]
    U = unit_vectors(X.astype(np.float32))
    monkeypatch.setattr(mlab, "_cores", lambda: 2)
    side = km.kmeans_restarts(U, k, seed=3)
    monkeypatch.setattr(mlab, "_cores", lambda: 1)
    seq = km.kmeans_restarts(U, k, seed=3)
    np.testing.assert_array_equal(side[0], seq[0])
    assert side[1] == seq[1] and np.array_equal(side[2], seq[2])
    for (a, ia), (b, ib) in zip(side[3], seq[3], strict=True):
        np.testing.assert_array_equal(a, b)
        assert ia == ib


def test_restarts_where_the_budget_holds_no_float64_copy(monkeypatch):
    """Without room for the float64 copy the chunks are upcast where they are read: the same restarts."""
    from types import SimpleNamespace

    _, X, k = SETS[-1]
    U = unit_vectors(X.astype(np.float32))
    with_copy = km.kmeans_restarts(U, k, seed=1)
    monkeypatch.setattr(km, "current", lambda: SimpleNamespace(fits=lambda nbytes: False))
    assert km._Restarts(U, k).X64 is None
    without = km.kmeans_restarts(U, k, seed=1)
    with threads(*U.shape):
        ref = KMeans(k, n_init=10, random_state=1).fit(U)
    for got in (with_copy, without):
        np.testing.assert_array_equal(got[0], ref.labels_)
        assert got[1] == ref.inertia_
