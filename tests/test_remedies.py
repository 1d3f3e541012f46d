"""Remedy checks (issue 42): the remedies against their closed forms, and which ones a report checks."""
import numpy as np
import pytest

from embeval_report.chapters import remedies as chapter
from embeval_report.chapters.registry import discover
from embeval_report.metrics.remedies import fit_remedy, remedied_rows


@pytest.fixture(scope="module")
def cone():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((400, 12)) * np.linspace(3, 0.2, 12) + 4.0).astype(np.float32)


def test_centring_abtt_and_whitening_against_their_closed_forms(cone):
    X = cone.astype(np.float64)
    mu = X.mean(0)
    np.testing.assert_allclose(remedied_rows(cone, fit_remedy(cone, "centring")), X - mu, atol=1e-4)
    # all-but-the-top (Mu et al. 2018): centred, then the top D principal directions projected out
    U = np.linalg.svd(X - mu, full_matrices=False)[2][:2].T
    abtt = fit_remedy(cone, "all-but-the-top", removed=2)
    assert abtt.detail == "D = 2"
    np.testing.assert_allclose(remedied_rows(cone, abtt), (X - mu) - (X - mu) @ U @ U.T, atol=1e-4)
    # ZCA whitening: the remedied set's covariance is the identity (no eigenvalue here is under the floor)
    Y = remedied_rows(cone, fit_remedy(cone, "whitening")).astype(np.float64)
    np.testing.assert_allclose(np.cov(Y.T, bias=True), np.eye(12), atol=1e-3)
    # a set of one repeated row leaves nothing to score on
    assert fit_remedy(np.ones((5, 3), np.float32), "centring") is None


def test_each_flagged_diagnostic_gets_its_standard_remedy_unless_all_are_asked_for():
    chapters = discover()
    flagged = {"isotropy": ["apcs"], "hubness": ["k_skewness"]}
    # anisotropy: centring and all-but-the-top (a dominant direction centring keeps); hubness: centring
    assert chapter._checked(flagged, chapters, "standard") == ["centring", "all-but-the-top"]
    assert chapter._checked({"hubness": ["k_skewness"]}, chapters, "standard") == ["centring"]
    assert chapter._checked({**flagged, "collapse": ["x"]}, chapters, "standard") == ["centring", "all-but-the-top",
                                                                                       "whitening"]
    assert chapter._checked(flagged, chapters, "all") == ["centring", "all-but-the-top", "whitening"]
    assert [o.name for o in chapter.CHAPTER.options] == ["mde", "remedies"]
