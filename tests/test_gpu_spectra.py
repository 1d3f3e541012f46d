"""The bootstrap's eigendecompositions batched on the device (:mod:`~embeval_report.kernels.spectra`): the
replicates' covariances by one product of the weights with the blocks' moments, their spectra by one batched
``eigvalsh`` when the device's step budget (a fake GPU size here) holds them all, the same values as in chunks and as
one replicate at a time."""
import numpy as np
import pytest
import torch

from embeval_report.kernels import spectra
from embeval_report.metrics import isotropy as iso


def test_batched_eigvalsh_equals_one_matrix_at_a_time(device):
    rng = np.random.default_rng(70)
    A = rng.standard_normal((9, 40, 40))
    A = torch.as_tensor(A @ A.transpose(0, 2, 1), device=device)
    for streams in (1, 4, 20):
        got = spectra.batched_eigvalsh(A, streams=streams)
        for i in range(len(A)):
            torch.testing.assert_close(got[i], torch.linalg.eigvalsh(A[i]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("budget, calls", [(2**34, 1), (48 * 48 * 8 * 3 * 7, 8)])  # a GPU's share; 7 replicates
def test_replicates_are_decomposed_in_as_few_batched_calls_as_the_budget_allows(budget, calls, device, monkeypatch):
    """All 50 replicates in one batched eigvalsh when the step budget (on a GPU, a share of its free memory) holds
    their matrices; in chunks otherwise; the intervals equal the one-at-a-time bootstrap's to rounding."""
    rng = np.random.default_rng(71)
    X = (rng.standard_normal((5000, 48)) * np.linspace(0.2, 3.0, 48) + 0.3).astype(np.float32)
    one = iso.measure_isotropy(X, n_boot=50, device="cpu")
    sizes = []
    real = spectra.batched_eigvalsh
    monkeypatch.setattr(spectra, "batched_eigvalsh", lambda A, streams=None: (sizes.append(len(A)), real(A))[1])
    monkeypatch.setattr(spectra, "step_budget", lambda dev: budget)
    monkeypatch.setattr(iso, "BATCHED_REPLICATES", (torch.device(device).type,))
    batched = iso.measure_isotropy(X, n_boot=50, device=device)
    assert len(sizes) == calls and sum(sizes) == 50
    for name, m in one.metrics.items():
        b = batched.metrics[name]
        assert (b.ci_low, b.ci_high) == pytest.approx((m.ci_low, m.ci_high), rel=1e-9, abs=1e-12), name
