"""Sampled hubness: exact at m = n, unbiased lists, intervals that cover the exact skewness."""
import json

import numpy as np
import pytest
from scipy import stats

from embeval_report.kernels import knn
from embeval_report.metrics import hubness_sampled as hs


def cloud(n, d, seed, shift=0.4):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) + shift * rng.standard_normal(d)


def test_every_query_gives_the_exact_skewness():
    """With all n lists the power-sum formulas are the exact population moments (scipy.stats.skew)."""
    X = cloud(500, 12, 0)
    idx, _ = knn(X, 7, device="cpu", desc=None)
    nk = np.bincount(idx.ravel(), minlength=len(X))
    assert hs._skewness(nk, len(X), len(X), 7) == pytest.approx(stats.skew(nk), rel=1e-10)


def test_sampled_lists_are_the_full_graph_rows(monkeypatch, tmp_path):
    """Searched for the queries alone, and read from the graph once this space's exact graph is held (a
    memory-mapped set: the run's own): the graph's rows, in its order (exact duplicates: the query itself is
    dropped, not its twins)."""
    from embeval_report.kernels.graph_cache import clear_memory

    X = cloud(400, 10, 1).astype(np.float32)
    X[5] = X[9] = X[3]
    np.save(tmp_path / "vectors.npy", X)
    X = np.load(tmp_path / "vectors.npy", mmap_mode="r")
    queries = np.array([0, 3, 5, 9, 17, 399])
    clear_memory()
    searched = hs.sampled_lists(X, 6, queries, device="cpu")
    full, _ = knn(X, 6, device="cpu", desc=None)
    from embeval_report.kernels import neighbours as nb

    monkeypatch.setattr(nb, "_search", None)  # no second search: the graph's rows are read
    read = hs.sampled_lists(X, 6, queries, device="cpu")
    clear_memory()
    np.testing.assert_array_equal(searched, full[queries])
    np.testing.assert_array_equal(read, full[queries])


def test_intervals_cover_the_exact_skewness_at_about_their_rate():
    """50 seeds on a set small enough for the exact graph: 95 % intervals cover the exact value about 95 % of
    the time (the jackknife is slightly conservative), and the estimates centre on it."""
    X = cloud(2000, 30, 2)
    idx, _ = knn(X, 10, device="cpu", desc=None)
    exact = stats.skew(np.bincount(idx.ravel(), minlength=len(X)))
    runs = [hs.sampled_skewness(X, 10, 800, seed=s, device="cpu") for s in range(50)]
    est = np.array([r.value for r in runs])
    covered = np.mean([r.ci[0] <= exact <= r.ci[1] for r in runs])
    assert 0.88 <= covered <= 1.0, covered
    assert abs(est.mean() - exact) < 0.5 * est.std(), (est.mean(), exact, est.std())
    assert all(r.m == 800 and r.n == 2000 and "800 of 2,000 queries" in r.method for r in runs)


def test_too_few_or_too_many_queries_are_refused():
    X = cloud(50, 4, 3)
    for m in (2, 50):
        with pytest.raises(ValueError, match="3 <= m < n"):
            hs.sampled_skewness(X, 5, m)


def test_sampled_mode_through_the_cli(tmp_path):
    from embeval_report.cli import main

    X = cloud(600, 16, 4, shift=1.0).astype(np.float32)
    np.save(tmp_path / "v.npy", X)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "v.npy"), "--out", str(out), "--formats", "html", "--sample-size", "200",
                 "--chapters", "hubness,correction"]) == 0
    doc = json.loads((out / "metrics.json").read_text())["chapters"]
    skew = doc["hubness"]["metrics"]["k_occurrence_skewness"]
    assert list(doc["hubness"]["metrics"]) == ["k_occurrence_skewness"]
    assert skew["ci_low"] < skew["value"] < skew["ci_high"]
    record = json.loads((out / "results" / "hubness.json").read_text())["metrics"]["k_occurrence_skewness"]
    assert "200 of 600 queries" in record["ci_method"] and record["note"] == record["ci_method"]
    assert doc["correction"]["status"] == "ok"
    info = json.loads((out / "results" / "correction.json").read_text())["info"]
    assert all(row["antihub_occurrence"] is None or row["antihub_occurrence"] != row["antihub_occurrence"]
               for row in info["table"])  # NaN: not estimated from a sample
    html = (out / "report.html").read_text()
    assert "Sampled mode" in html and "Not computed in sampled mode" in html
