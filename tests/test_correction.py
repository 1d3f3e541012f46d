"""Anisotropy corrections against numpy / scikit-learn references."""
import numpy as np
import pytest
from sklearn.decomposition import PCA

from embeval_report.correction import compare_corrections, display_table, narrative, whiten
from embeval_report.hubness import measure_hubness
from embeval_report.isotropy import all_but_the_top, measure_isotropy


def cone(n=600, d=12, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)) * np.linspace(2, 0.2, d) + 3.0).astype(np.float32)


def test_zca_whitening_gives_identity_covariance_and_is_symmetric():
    X = cone()
    Y = whiten(X, method="zca")
    np.testing.assert_allclose(np.cov(Y, rowvar=False, bias=True), np.eye(X.shape[1]), atol=1e-4)
    C = np.cov(X.astype(np.float64), rowvar=False, bias=True)
    lam, V = np.linalg.eigh(C)
    ref = (X - X.mean(0)) @ (V / np.sqrt(lam)) @ V.T  # Σ^{-1/2}, seed 000 whiten_embeddings
    np.testing.assert_allclose(Y, ref, atol=1e-3)


def test_pca_whitening_matches_sklearn_up_to_sign_and_ddof():
    X = cone(seed=1)
    n = len(X)
    ours = whiten(X, method="pca")
    ref = PCA(whiten=True, svd_solver="full").fit_transform(X.astype(np.float64)) * np.sqrt(n / (n - 1))
    np.testing.assert_allclose(np.abs(ours), np.abs(ref), atol=2e-3)
    # ZCA and PCA whitening differ by a rotation: every cosine is the same
    z = whiten(X, method="zca")
    cos = lambda A: (A / np.linalg.norm(A, axis=1, keepdims=True)) @ (A / np.linalg.norm(A, axis=1, keepdims=True)).T
    np.testing.assert_allclose(cos(ours[:50]), cos(z[:50]), atol=1e-4)


def test_comparison_rows_equal_direct_measurements():
    X = cone(seed=2)
    labels = np.repeat(["a", "b", "c"], 200)
    c = compare_corrections(X, labels, k=5, removed=2)
    assert list(c.table["setting"]) == ["original", "centred", "all-but-the-top (D = 2)", "whitened (ZCA ≡ PCA)"]
    ab = measure_isotropy(all_but_the_top(X, 2), n_boot=0)
    assert c.table.loc[2, "apcs"] == pytest.approx(ab.values["apcs"], abs=1e-6)
    assert c.table.loc[0, "k_occurrence_skewness"] == pytest.approx(
        measure_hubness(X, 5, n_boot=0).values["k_occurrence_skewness"])
    assert c.table.loc[3, "participation_ratio_fraction"] == pytest.approx(1.0, abs=1e-3)
    assert c.table.loc[0, "neighbour_overlap"] == 1.0 and c.table.loc[0, "apcs"] > 0.5
    assert set(c.metrics) >= {"apcs_after_abtt", "uniformity_after_whitening", "label_agreement_after_abtt"}
    assert all(m.verdict is None for m in c.metrics.values())
    assert "same label" in narrative(c) and "k-NN kept" in display_table(c).columns
