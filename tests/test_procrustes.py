"""Procrustes alignment and k-NN overlap against SciPy and closed-form expectations."""
import numpy as np
import pytest
import torch
from scipy.linalg import orthogonal_procrustes
from scipy.spatial import procrustes as scipy_procrustes
from scipy.stats import ortho_group

from embeval_report.kernels.procrustes import procrustes_on_device
from embeval_report.metrics.procrustes import ProcrustesFit, aligned_cosines, knn_overlap, procrustes_align


def _procrustes_torch(A, B, center, dev) -> ProcrustesFit:
    """The device path of :func:`procrustes_align` (:func:`~embeval_report.kernels.procrustes.procrustes_on_device`)."""
    return ProcrustesFit(*procrustes_on_device(A, B, center, dev))


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


def _orthogonal(W: np.ndarray) -> bool:
    return np.allclose(W.T @ W, np.eye(len(W)), atol=1e-10)


@pytest.mark.parametrize("dims", [(7, 7), (7, 5), (5, 7)], ids=["same-d", "B-narrower", "A-narrower"])
def test_torch_path_matches_scipy(device, dims):
    """The torch fit (what a GPU runs) against the SciPy one on a rotated, noisy, shifted set; with different d the
    zero-padded narrower set leaves the rotation's block on the padded directions free (any orthogonal completion,
    which two SVD implementations may choose differently): there the paths agree up to an orthogonal transform."""
    dA, dB = dims
    rng = np.random.default_rng(11)
    n, d = 300, max(dims)
    X = rng.standard_normal((n, d)) * np.linspace(2.0, 0.5, d)
    A = X[:, :dA] + 3.0
    B = (X @ ortho_group.rvs(d, random_state=12))[:, :dB] + 0.1 * rng.standard_normal((n, dB)) - 1.0
    ref = procrustes_align(A, B, device="cpu")
    fit = _procrustes_torch(torch.as_tensor(A, device=device), B, True, torch.device(device))
    for got in (fit.rotation, fit.aligned, fit.target):
        assert isinstance(got, np.ndarray) and got.dtype == np.float64
    assert isinstance(fit.disparity, float)
    assert fit.disparity == pytest.approx(ref.disparity, abs=1e-10) and 0 < ref.disparity < 2
    np.testing.assert_allclose(fit.target, ref.target, rtol=0, atol=1e-10)
    R, R0 = fit.rotation, ref.rotation
    assert _orthogonal(R)
    if dB < d:  # B's padded rows of R: free up to a left orthogonal transform; aligned = B R does not see them
        np.testing.assert_allclose(R[:dB], R0[:dB], rtol=0, atol=1e-10)
        W = R[dB:] @ R0[dB:].T
        assert _orthogonal(W)
        np.testing.assert_allclose(R[dB:], W @ R0[dB:], rtol=0, atol=1e-10)
        np.testing.assert_allclose(fit.aligned, ref.aligned, rtol=0, atol=1e-10)
    elif dA < d:  # A's padded columns of R (and of aligned): free up to a right orthogonal transform
        np.testing.assert_allclose(R[:, :dA], R0[:, :dA], rtol=0, atol=1e-10)
        W = R0[:, dA:].T @ R[:, dA:]
        assert _orthogonal(W)
        np.testing.assert_allclose(R[:, dA:], R0[:, dA:] @ W, rtol=0, atol=1e-10)
        np.testing.assert_allclose(fit.aligned[:, :dA], ref.aligned[:, :dA], rtol=0, atol=1e-10)
        np.testing.assert_allclose(fit.aligned[:, dA:], ref.aligned[:, dA:] @ W, rtol=0, atol=1e-10)
    else:
        np.testing.assert_allclose(R, R0, rtol=0, atol=1e-10)
        np.testing.assert_allclose(fit.aligned, ref.aligned, rtol=0, atol=1e-10)


def test_torch_path_edge_cases(device):
    """No spread gives a NaN disparity, as on the CPU; a row mismatch raises the same error."""
    dev = torch.device(device)
    A = np.ones((20, 3))
    assert np.isnan(_procrustes_torch(A, np.random.default_rng(0).standard_normal((20, 3)), True, dev).disparity)
    with pytest.raises(ValueError, match="same entities"):
        _procrustes_torch(np.zeros((5, 3)), np.zeros((6, 3)), True, dev)


def test_cpu_device_is_the_scipy_path():
    """``device="cpu"`` (and ``"auto"`` without a GPU) is the NumPy/SciPy fit, bit for bit."""
    rng = np.random.default_rng(13)
    A, B = rng.standard_normal((50, 4)), rng.standard_normal((50, 3))
    fit = procrustes_align(A, B, device="cpu")
    Ap, Bp = A - A.mean(0), np.hstack([B, np.zeros((50, 1))])
    Bp = Bp - Bp.mean(0)
    R, _ = orthogonal_procrustes(Bp, Ap)
    assert np.array_equal(fit.rotation, R) and np.array_equal(fit.aligned, Bp @ R) and np.array_equal(fit.target, Ap)
    if not torch.cuda.is_available():
        auto = procrustes_align(A, B)
        assert np.array_equal(auto.rotation, R) and auto.disparity == fit.disparity


def test_rotation_is_scipys_orthogonal_procrustes_bit_for_bit():
    """procrustes_align's rotation (SciPy's steps; a small set's cross product and every SVD on one BLAS thread)
    equals SciPy's on one thread, padded or not, whatever this machine's core count."""
    from threadpoolctl import threadpool_limits

    from embeval_report.metrics.procrustes import _rotation

    rng = np.random.default_rng(3)
    for n, d in [(50, 3), (400, 64), (130, 17), (5000, 64)]:
        A, B = rng.normal(size=(n, d)), rng.normal(size=(n, d))
        B[:, -1] = 0.0  # a zero-padded column
        with threadpool_limits(1):
            reference = orthogonal_procrustes(B, A)[0]
        assert np.array_equal(_rotation(B, A), reference)
