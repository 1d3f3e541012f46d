"""The blocked exact k-NN kernel and the shared neighbour graph, against float64 references."""
import numpy as np
import pytest
import torch

from embeval_report.context import CacheFolder, ComputeContext
from embeval_report.kernels import graph_cache, knn
from embeval_report.kernels import neighbours as nb


@pytest.fixture(autouse=True)
def _fresh_cache():
    graph_cache.clear_memory()
    yield
    graph_cache.clear_memory()


def _reference(X, Q, metric, drop_self):
    """float64 scores (higher = closer) of every query against every row."""
    X, Q = X.astype(np.float64), Q.astype(np.float64)
    if metric == "cosine":
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    S = -((Q[:, None, :] - X[None]) ** 2).sum(-1) if metric == "euclidean" else Q @ X.T
    if drop_self:
        np.fill_diagonal(S, -np.inf)
    return S


def _assert_exact(idx, val, S, k, metric, tol=1e-9):
    """Same neighbour sets as the float64 reference, except where the k-th and (k+1)-th reference
    scores tie (within ``tol``, float64 summation order); scores equal to float32 rounding."""
    order = np.argsort(-S, axis=1, kind="stable")
    ref_scores = np.take_along_axis(S, order, 1)
    for i in range(len(S)):
        if set(idx[i]) != set(order[i, :k]):
            gap = ref_scores[i, k - 1] - ref_scores[i, k]
            assert gap < tol * max(1.0, abs(ref_scores[i, k - 1])), (i, gap)
    got = np.take_along_axis(S, idx, 1)
    np.testing.assert_allclose(got, ref_scores[:, :k], atol=tol * np.abs(S[np.isfinite(S)]).max())
    expected = np.sqrt(-got) if metric == "euclidean" else got
    np.testing.assert_allclose(val, expected, rtol=1e-4, atol=1e-4)
    assert np.all(np.diff(val, axis=1) >= 0) if metric == "euclidean" else np.all(np.diff(val, axis=1) <= 0)


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("k", [1, 7, 90])
def test_blocked_knn_equals_a_float64_reference(metric, k, monkeypatch):
    rng = np.random.default_rng(k)
    X = (rng.standard_normal((1003, 12)) + rng.standard_normal(12)).astype(np.float32)  # a cone: hubs
    monkeypatch.setattr(nb, "CPU_TILE", (61, 130))  # many tiles, a ragged last one, padded groups
    idx, val = knn(X, k, metric=metric, device="cpu", desc=None)
    _assert_exact(idx, val, _reference(X, X, metric, True), k, metric)
    assert not (idx == np.arange(len(X))[:, None]).any()


def test_separate_queries_keep_themselves_and_match_the_reference(monkeypatch):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((777, 9)).astype(np.float32)
    Q = np.vstack([X[:50], rng.standard_normal((30, 9)).astype(np.float32)])
    monkeypatch.setattr(nb, "CPU_TILE", (16, 64))
    idx, val = knn(X, 5, queries=Q, device="cpu", desc=None)
    _assert_exact(idx, val, _reference(X, Q, "cosine", False), 5, "cosine")
    assert (idx[:50, 0] == np.arange(50)).all()


def test_exact_duplicates_are_each_others_first_neighbours(monkeypatch):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((500, 6)).astype(np.float32)
    X[400:] = X[:100]  # 100 duplicated rows
    monkeypatch.setattr(nb, "CPU_TILE", (32, 128))
    idx, val = knn(X, 3, device="cpu", desc=None)
    twin = np.r_[np.arange(400, 500), np.arange(100, 400), np.arange(0, 100)]
    assert (idx[np.r_[0:100, 400:500], 0] == twin[np.r_[0:100, 400:500]]).all()
    np.testing.assert_allclose(val[:100, 0], 1.0, atol=1e-6)


def test_global_matmul_precision_does_not_change_the_graph():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((600, 32)).astype(np.float32)
    exact = knn(X, 10, device="cpu", desc=None)
    graph_cache.clear_memory()
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        relaxed = knn(X, 10, device="cpu", desc=None)
        assert torch.get_float32_matmul_precision() == "medium"  # the caller's setting is restored
    finally:
        torch.set_float32_matmul_precision(before)
    np.testing.assert_array_equal(relaxed[0], exact[0])
    np.testing.assert_array_equal(relaxed[1], exact[1])


def test_one_graph_per_space_shared_through_the_folder(tmp_path, enter):
    rng = np.random.default_rng(6)
    X = rng.standard_normal((300, 8)).astype(np.float32)
    Y = X.copy()
    Y[0, 0] += 1.0  # another space: one changed coordinate
    events = []
    enter(graph_cache=CacheFolder(tmp_path, min_k=11, log=events.append))
    a = knn(X, 10, device="cpu", desc=None)
    b = knn(X.astype(np.float64), 11, device="cpu", desc=None)  # same float32 rows: the same space
    knn(Y, 10, device="cpu", desc=None)
    knn(X, 10, metric="euclidean", device="cpu", desc=None)
    assert [e["source"] for e in events] == ["computed", "cache", "computed", "computed"]
    assert events[0]["space"] == events[1]["space"] != events[2]["space"]
    np.testing.assert_array_equal(a[0], b[0][:, :10])
    graph_cache.clear_memory()  # a new chapter process: read from the folder
    c = knn(X, 10, device="cpu", desc=None)
    assert events[-1]["source"] == "cache"
    np.testing.assert_array_equal(a[0], c[0])
    graph_cache.clear_memory()
    knn(X, 12, device="cpu", desc=None)  # more neighbours than stored: computed again
    assert events[-1]["source"] == "computed"


def test_stored_graph_matches_a_direct_computation_at_every_k(enter):
    rng = np.random.default_rng(7)
    X = rng.standard_normal((400, 10)).astype(np.float32)
    enter(graph_cache=CacheFolder(min_k=30))
    shared = knn(X, 5, device="cpu", desc=None)
    direct = nb._search(X, X, [(5, None)], "cosine", True, torch.device("cpu"), None)[0][0]
    np.testing.assert_array_equal(shared[0], direct[0])
    np.testing.assert_array_equal(shared[1], direct[1])


def test_pruned_mutual_proximity_equals_the_dense_reference(monkeypatch):
    """Mutual proximity through the pruned blocked kernel (many small tiles) against dense numpy."""
    from scipy.special import log_ndtr

    from embeval_report.metrics.hubness_reduction import cosine_mean_sd, mutual_proximity_knn

    rng = np.random.default_rng(8)
    X = (rng.standard_normal((900, 10)) + 0.7 * rng.standard_normal(10)).astype(np.float32)
    monkeypatch.setattr(nb, "CPU_TILE", (50, 96))
    S = _reference(X, X, "cosine", True)
    mu, sd = cosine_mean_sd(X, device="cpu")
    logmp = log_ndtr((S - mu[:, None]) / sd[:, None]) + log_ndtr((S - mu[None, :]) / sd[None, :])
    idx, val = mutual_proximity_knn(X, 7, device="cpu")
    order = np.argsort(-logmp, axis=1, kind="stable")[:, :7]
    assert (np.sort(idx, 1) == np.sort(order, 1)).all(1).mean() > 0.995  # float32 scores: near-ties may swap
    np.testing.assert_allclose(np.log(val), np.take_along_axis(logmp, order, 1), rtol=1e-4, atol=1e-5)


def test_one_sweep_feeds_cosine_csls_mutual_proximity_and_the_potential(monkeypatch, enter):
    """One pass over small tiles yields the cosine, CSLS and mutual-proximity graphs (float64 order)
    and the rows' Gaussian potential, each against its dense float64 reference; each product is
    computed once and read from the cache afterwards."""
    from scipy.special import log_ndtr, logsumexp

    from embeval_report.metrics.hubness_reduction import cosine_mean_sd, reduced_knn

    rng = np.random.default_rng(11)
    X = (rng.standard_normal((700, 12)) + 0.8 * rng.standard_normal(12)).astype(np.float32)
    monkeypatch.setattr(nb, "CPU_TILE", (64, 160))
    events = []
    enter(graph_cache=CacheFolder(log=events.append))
    S = _reference(X, X, "cosine", True)
    k = 9
    r = np.sort(S, axis=1)[:, ::-1][:, :k].mean(1)
    got = reduced_knn(X, k, ("csls", "mutual_proximity"), r=r, with_cosine=True, device="cpu")
    assert sorted(e["source"] for e in events) == ["computed"] * 3
    _assert_exact(*got["cosine"], S, k, "cosine")
    csls = 2 * S - r[:, None] - r[None, :]
    _assert_exact(got["csls"][0], got["csls"][1], csls, k, "cosine")
    mu, sd = cosine_mean_sd(X, device="cpu")
    with np.errstate(divide="ignore"):
        logmp = log_ndtr((S - mu[:, None]) / sd[:, None]) + log_ndtr((S - mu[None, :]) / sd[None, :])
    order = np.argsort(-logmp, axis=1, kind="stable")
    assert (np.sort(got["mutual_proximity"][0], 1) == np.sort(order[:, :k], 1)).all()
    np.testing.assert_allclose(np.log(got["mutual_proximity"][1]), np.take_along_axis(logmp, order[:, :k], 1),
                               rtol=1e-6, atol=1e-6)
    U = X / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    D = ((U[:, None, :] - U[None]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    from embeval_report.kernels import swept_potential_rows
    np.testing.assert_allclose(swept_potential_rows(X, nb.SWEEP_POTENTIAL_T),
                               logsumexp(-nb.SWEEP_POTENTIAL_T * D, axis=1), rtol=1e-7)
    events.clear()
    again = reduced_knn(X, k, ("csls", "mutual_proximity"), r=r, with_cosine=True, device="cpu")
    assert [e["source"] for e in events] == ["cache"] * 3
    for name in got:
        np.testing.assert_array_equal(again[name][0], got[name][0])


def test_uniformity_reads_the_sweeps_exact_potential_beyond_its_budget():
    """After a k-NN sweep of the set, uniformity is exact at any size (here: a budget of 10 pairs) and
    equals the float64 all-pairs kernel to float32 rounding of the cosines."""
    from embeval_report.kernels import gaussian_potential_rows, unit_rows
    from embeval_report.metrics.uniformity import uniformity

    rng = np.random.default_rng(12)
    X = rng.standard_normal((500, 16)).astype(np.float32)
    sampled = uniformity(X, pair_budget=10, device="cpu")
    assert sampled.method == "sampled"
    reference = gaussian_potential_rows(X, 2.0, transform=unit_rows, device="cpu", desc=None)
    knn(X, 5, device="cpu", desc=None)
    swept = uniformity(X, pair_budget=10, device="cpu")
    assert swept.method == "exact" and swept.ci_low < swept.value < swept.ci_high
    from scipy.special import logsumexp
    assert abs(swept.value - (logsumexp(reference) - np.log(500 * 499))) < 1e-7
    assert uniformity(X, sample_size=200, device="cpu").method == "sampled"  # an asked-for sample stays sampled


def test_fast_precision_reranks_bfloat16_candidates_and_measures_its_recall(monkeypatch, enter):
    """--precision fast: candidates from bfloat16 products (here forced on the CPU), re-ranked exactly; the
    recall it reports equals the overlap with dense float64 lists of the same seeded queries, and the
    exact graph of the same space is a separate product."""
    from embeval_report.kernels import device

    rng = np.random.default_rng(13)
    X = (rng.standard_normal((1500, 24)) + 0.3).astype(np.float32)
    monkeypatch.setattr(device, "FAST_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(nb, "RECALL_QUERIES", 300)
    events = []
    enter(graph_cache=CacheFolder(log=events.append))
    with ComputeContext(precision="fast", graph_cache=CacheFolder(log=events.append)):
        idx, val = knn(X, 10, device="cpu", desc=None)
        recall, m = nb.fast_recall(X)
    assert events[-1]["metric"] == "cosine-fast" and m == 300
    S = _reference(X, X, "cosine", True)
    exact = np.argsort(-S, axis=1, kind="stable")[:, :10]
    rows = np.sort(np.random.default_rng(0).choice(len(X), 300, replace=False))
    assert recall == pytest.approx(nb.neighbour_sets_overlap(idx[rows], exact[rows]).mean())
    assert 0.98 <= recall <= 1.0
    np.testing.assert_allclose(val, np.take_along_axis(S, idx, 1), atol=1e-6)  # scores are exact for what is listed
    exact_graph = knn(X, 10, device="cpu", desc=None)
    assert events[-1] == {**events[-1], "metric": "cosine", "source": "computed"}
    assert nb.neighbour_sets_overlap(exact_graph[0], exact).mean() == pytest.approx(1.0, abs=1e-3)


def test_precision_setting_is_validated():
    from embeval_report.settings import ChapterSettings

    with pytest.raises(ValueError, match="precision"):
        ChapterSettings(precision="half")
    with pytest.raises(ValueError, match="precision"):
        ComputeContext(precision="half")
    assert ChapterSettings(precision="fast").to_params()["precision"] == "fast"
