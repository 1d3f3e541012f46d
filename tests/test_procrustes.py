"""Procrustes alignment and k-NN overlap against SciPy and closed-form expectations."""
import numpy as np
import pytest
from scipy.spatial import procrustes as scipy_procrustes
from scipy.stats import ortho_group

from embeval_report.metrics.procrustes import aligned_cosines, knn_overlap, procrustes_align


def test_pure_rotation_gives_perfect_alignment_and_overlap():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((300, 10))
    B = A @ ortho_group.rvs(10, random_state=1) + 5.0  # rotated and shifted
    assert np.allclose(aligned_cosines(A, B), 1.0, atol=1e-9)
    assert procrustes_align(A, B).disparity == pytest.approx(0.0, abs=1e-12)
    assert np.all(knn_overlap(A, B - 5.0, k=7) == 1.0)


def test_disparity_matches_scipy_rotation_fit_when_scales_match():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((200, 6))
    B = A @ ortho_group.rvs(6, random_state=4) + 0.3 * rng.standard_normal((200, 6))
    # scipy.spatial.procrustes also fits a scale; with both sets Frobenius-normalised the rotation-only
    # residual is 2 - 2 Σ s_k, scipy's is 1 - (Σ s_k)^2
    fit = procrustes_align(A, B)
    _, _, scipy_disp = scipy_procrustes(A, B)
    s = 1 - fit.disparity / 2
    assert scipy_disp == pytest.approx(1 - s ** 2, rel=1e-9)


def test_independent_spaces_overlap_at_chance():
    rng = np.random.default_rng(5)
    n, k = 1000, 10
    overlap = knn_overlap(rng.standard_normal((n, 16)), rng.standard_normal((n, 16)), k=k)
    assert overlap.mean() == pytest.approx(k / (n - 1), abs=0.004)


def test_different_dimensions_are_padded():
    rng = np.random.default_rng(6)
    A = rng.standard_normal((100, 4))
    B = np.hstack([A, np.zeros((100, 2))])
    assert np.allclose(aligned_cosines(A, B), 1.0)
