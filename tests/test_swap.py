"""Model swap impact (issue 43): neighbour-list overlap, query results, the similarity scale and its threshold
map, against closed forms (a rotation changes nothing) and a brute-force reference."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ortho_group

from embeval_report.metrics.swap import neighbour_swap, query_swap, similarity_scale


def _brute_topk(X, k):
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = U @ U.T
    np.fill_diagonal(S, -np.inf)
    return np.argsort(-S, axis=1, kind="stable")[:, :k]


def test_a_rotation_changes_no_list_and_no_similarity():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((300, 12))
    B = A @ ortho_group.rvs(12, random_state=1)
    swap = neighbour_swap(A, B, np.arange(300), k=10, device="cpu")
    assert swap.changed_share == 0.0 and np.allclose(swap.overlap, 1.0)
    scale = similarity_scale(A, B, pairs=2000, device="cpu")
    assert scale.spearman == pytest.approx(1.0, abs=1e-6)  # float32 rows: ties broken by rounding
    np.testing.assert_allclose(scale.quantiles["A"], scale.quantiles["B"], atol=1e-6)


def test_overlap_against_brute_force_lists_in_different_dimensions():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((200, 8))
    B = np.hstack([A, 1.5 * rng.standard_normal((200, 24))])  # another model, another dimension
    swap = neighbour_swap(A, B, np.arange(200), k=5, device="cpu")
    la, lb = _brute_topk(A, 5), _brute_topk(B, 5)
    ref = np.array([len(set(a) & set(b)) / 5 for a, b in zip(la, lb)])
    np.testing.assert_allclose(swap.overlap, ref)
    assert swap.changed_share == pytest.approx((ref < 0.5).mean())
    assert 0 < swap.changed_share < 1


def test_threshold_map_keeps_the_share_of_pairs():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((120, 6)) + 1.0
    B = rng.standard_normal((120, 10)) + 0.3
    scale = similarity_scale(A, B, pairs=10 ** 9, device="cpu")  # every pair of a small set
    assert scale.pairs == 120 * 119 // 2
    iu = np.triu_indices(120, 1)

    def cos(X):
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        return (U @ U.T)[iu]

    ca, cb = cos(A), cos(B)
    for row in scale.thresholds.itertuples():
        share = (ca >= row[1]).mean()
        assert row[2] == pytest.approx(share)
        if 0 < share < 1:  # the same share of B's pairs lies at or above the carried threshold
            assert (cb >= row[3]).mean() == pytest.approx(share, abs=2 / len(cb))


def test_query_results_overlap():
    rng = np.random.default_rng(4)
    C = rng.standard_normal((100, 8))
    Q = rng.standard_normal((7, 8))
    same = query_swap(Q, C, Q, C, list("abcdefg"), k=10, device="cpu")
    assert list(same["query"]) == list("abcdefg") and (same["overlap"] == 1.0).all()
    other = query_swap(Q, C, Q, rng.standard_normal((100, 8)), list("abcdefg"), k=10, device="cpu")
    assert other["overlap"].mean() < 0.5
