"""The cosine silhouettes of kernels/silhouette.py (from each cluster's summed unit vector) against the definition
on the full matrix of distances, and against scikit-learn."""
import numpy as np
import pytest
from sklearn.metrics import silhouette_samples

from embeval_report.kernels import silhouette


def by_definition(X, codes):
    """s(i) from the n x n cosine distances (clipped to [0, 2], 0 to itself), cluster by cluster."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    U = X / np.maximum(norms, np.finfo(float).tiny)
    D = np.clip(1 - U @ U.T, 0, 2)
    np.fill_diagonal(D, 0)
    out = np.zeros(len(X))
    for i in range(len(X)):
        own = codes == codes[i]
        if own.sum() == 1:
            continue
        a = D[i, own].sum() / (own.sum() - 1)
        b = min(D[i, codes == c].mean() for c in np.unique(codes) if c != codes[i])
        out[i] = (b - a) / max(a, b) if max(a, b) > 0 else 0.0
    return out


def cases():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((120, 6)) + 0.3
    codes = rng.integers(0, 4, 120)
    codes[17] = 4                                    # a cluster of one: s = 0
    yield "gaussian", X, codes
    base = rng.standard_normal((6, 5))
    rows = rng.integers(0, 6, 90)
    yield "repeated rows", base[rows], rows % 3      # whole clusters of identical directions
    Z = X.copy()
    Z[[3, 40]] = 0                                   # zero rows: distance 1 to every other row
    yield "zero rows", Z, codes
    yield "scaled copies", np.vstack([X[:60], 5 * X[:60]]), np.r_[codes[:60], codes[:60]]


CASES = list(cases())


@pytest.mark.parametrize("chunk", [None, 7])
@pytest.mark.parametrize("name,X,codes", CASES, ids=[c[0] for c in CASES])
def test_silhouettes_equal_the_definition(name, X, codes, chunk, monkeypatch):
    if chunk:
        monkeypatch.setattr(silhouette, "chunk_rows", lambda n, row_bytes, budget=None: chunk)
    other = np.arange(len(X)) % 2
    got = silhouette.silhouettes(X, [codes, other], device="cpu")
    for values, c in zip(got, [codes, other]):
        np.testing.assert_allclose(values, by_definition(X, c), rtol=0, atol=1e-12)
        assert np.all(np.abs(values) <= 1)


def test_silhouettes_equal_sklearn_and_no_partition_gives_nothing():
    _, X, codes = CASES[0]
    for c in (codes, codes.astype(np.int32)):
        np.testing.assert_allclose(silhouette.silhouettes(X, [c], device="cpu")[0],
                                   silhouette_samples(X, codes, metric="cosine"), rtol=0, atol=1e-12)
    assert silhouette.silhouettes(X, [], device="cpu") == []
