"""The shared chunked kernels against scikit-learn / numpy references."""
import numpy as np
import pytest
import torch
from sklearn.neighbors import NearestNeighbors

from embeval_report import kernels
from embeval_report.kernels import block_moments, knn, unit_rows


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_knn_matches_sklearn_brute_force(metric, device, monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 8)).astype(np.float32)
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 300 * 4 * 3 * 29)  # 29-row chunks
    idx, val = knn(X, 7, metric=metric, device=device)
    nn = NearestNeighbors(n_neighbors=8, metric=metric, algorithm="brute").fit(X)
    dist, ref = nn.kneighbors(X)
    np.testing.assert_array_equal(idx, ref[:, 1:])  # sklearn puts the point itself first
    expected = 1 - dist[:, 1:] if metric == "cosine" else dist[:, 1:]
    np.testing.assert_allclose(val, expected, atol=1e-4)


def test_knn_with_separate_queries_keeps_self():
    X = np.eye(4, dtype=np.float32) + 0.01
    idx, _ = knn(X, 1, queries=X[:2])
    assert idx[:, 0].tolist() == [0, 1]


def test_block_moments_sum_to_whole_set_moments(device):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((101, 5)).astype(np.float32)
    m = block_moments(X, n_blocks=7, seed=3, device=device)
    N, s, G = m.total()
    assert N == 101 and sorted(m.count) == sorted(np.bincount(np.arange(101) % 7))
    np.testing.assert_allclose(s, X.sum(0), rtol=1e-5)
    np.testing.assert_allclose(G, X.astype(np.float64).T @ X, rtol=1e-5)
    U = block_moments(X, transform=unit_rows, device=device).total()[1]
    np.testing.assert_allclose(U, (X / np.linalg.norm(X, axis=1, keepdims=True)).sum(0), rtol=1e-5)


def test_all_pairs_potential_and_uniformity_on_every_device(device, monkeypatch):
    """The exact all-pairs Gaussian potential (several square blocks) and uniformity against a dense float64
    numpy reference, on each device: the same numbers to float64 rounding."""
    from scipy.special import logsumexp

    from embeval_report.kernels import gaussian_potential_rows
    from embeval_report.metrics.uniformity import uniformity

    rng = np.random.default_rng(2)
    X = rng.standard_normal((230, 9)).astype(np.float32)
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 8 * 3 * 60 * 60)  # 60-row square blocks
    U = X / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    D = ((U[:, None, :] - U[None]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    want = logsumexp(-2.0 * D, axis=1)
    got = gaussian_potential_rows(X, 2.0, transform=unit_rows, device=device, desc=None)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    u = uniformity(X, device=device)
    assert u.method == "exact" and u.value == pytest.approx(logsumexp(want) - np.log(230 * 229), rel=1e-12)


@pytest.mark.parametrize("in_memory", [True, False])
def test_pair_cosines_equal_scipy_with_zero_rows_and_a_transform(in_memory, monkeypatch):
    """Cosines of given pairs against scipy's cosine distance, a zero row giving 0 (as unit rows do), through a
    row transform, with rows gathered directly (a set within the budget) or in one ascending read (beyond it);
    with each row's norm once (many pairs) or each pair's (few) the same numbers."""
    from scipy.spatial.distance import cosine

    from embeval_report.context import ComputeContext
    from embeval_report.kernels.pairs import pair_cosines

    rng = np.random.default_rng(3)
    X = rng.standard_normal((50, 7)).astype(np.float32)
    X[4] = 0.0
    i, j = rng.integers(0, 50, 400), rng.integers(0, 50, 400)
    i[:3], j[:3] = 4, [1, 4, 9]
    if not in_memory:
        monkeypatch.setattr(ComputeContext, "fits", lambda self, nbytes: False)
    got = pair_cosines(X, i, j, device="cpu")
    X64 = X.astype(np.float64)
    want = np.array([0.0 if not X64[a].any() or not X64[b].any() else 1 - cosine(X64[a], X64[b]) for a, b in zip(i, j)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    # fewer pairs than rows: each pair's norms, not each row's once; the same numbers, bit for bit
    np.testing.assert_array_equal(pair_cosines(X, i[:20], j[:20], device="cpu"), got[:20])
    shift = np.linspace(-1, 1, 7)
    moved = pair_cosines(X, i, j, transform=lambda rows: rows + torch.as_tensor(shift), device="cpu")
    Y = X64 + shift
    np.testing.assert_allclose(moved, [1 - cosine(Y[a], Y[b]) for a, b in zip(i, j)], rtol=0, atol=1e-14)


@pytest.mark.parametrize("metric", ["cosine", "euclidean", "linear"])
def test_scores_of_a_corpus_read_from_its_file_are_those_of_one_in_memory(metric, tmp_path, enter, monkeypatch):
    """A corpus beyond the budget scores its candidates from the distinct rows read once in file order (a memory
    map read ahead, not one random page per candidate): the same float64 scores, bit for bit, as the in-memory
    rows, with repeated candidates and every metric."""
    from embeval_report.kernels.candidates import _exact_scores, _Rows64

    rng = np.random.default_rng(4)
    X = rng.standard_normal((30000, 96)).astype(np.float32) * rng.uniform(0.2, 5, (30000, 1)).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    mapped = torch.from_numpy(np.load(tmp_path / "x.npy", mmap_mode="r"))
    unit = metric == "cosine"
    whole = _Rows64(torch.from_numpy(X), unit)
    enter(memory_budget=16 << 20)  # 30,000 x 96 float64 rows do not fit: read from the map
    read = _Rows64(mapped, unit)
    assert whole.whole is not None and read.whole is None
    q64 = torch.as_tensor(rng.standard_normal((40, 96)))
    cand = torch.as_tensor(rng.integers(0, 30000, (40, 300)))
    cand[:, :5] = 7  # one row a candidate of every query, five times
    sq64 = None if metric == "cosine" else torch.as_tensor(rng.uniform(0, 3, 30000))
    expected = _exact_scores(whole, sq64, q64, cand, metric)
    subsets = []
    real = _Rows64.subset
    monkeypatch.setattr(_Rows64, "subset", lambda self, rows: subsets.append(rows) or real(self, rows))
    got = _exact_scores(read, sq64, q64, cand, metric)
    assert torch.equal(got, expected)
    # the distinct rows of as many queries as a chunk of the budget holds (1 MiB: 4 queries' 300 float64 rows of
    # 96), read once each, in file order
    assert len(subsets) == 10
    for s, rows in zip(range(0, 40, 4), subsets):
        assert torch.equal(rows, torch.unique(cand[s:s + 4]))
