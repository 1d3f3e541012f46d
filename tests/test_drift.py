"""Drift over time against independent references: brute force, closed forms, SciPy, statsmodels, scikit-learn;
degenerate inputs (identical rows, zero drift, one snapshot, tiny sets, d > n) never fail the chapter."""
import itertools
import json
import math
import re
import statistics
import warnings

import nbformat
import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.linalg import orthogonal_procrustes
from scipy.spatial import procrustes as scipy_procrustes
from scipy.spatial.distance import cdist, pdist
from scipy.stats import false_discovery_control, ks_2samp, ortho_group
from sklearn.metrics.pairwise import cosine_similarity
from sklearn.neighbors import NearestNeighbors
from statsmodels.stats.multitest import multipletests

from embeval_report.chapters.registry import chapter as declared
from embeval_report.chapters import drift as chapter
from embeval_report.errors import InputError, UndefinedMetricWarning
from embeval_report.io import load_source
from embeval_report.io.snapshots import Snapshot, load_snapshots, snapshot_slug
from embeval_report.metrics import drift as dr
from embeval_report.metrics import two_sample as ts
from embeval_report.metrics.isotropy import measure_isotropy
from embeval_report.metrics.thresholds import verdict
from embeval_report.resources import notebooks_dir
from embeval_report.stats import hanley_mcneil_se

FAST = dict(n_boot=0, n_perm=99, device="cpu")


def clustered(n=300, d=12, groups=4, seed=0, spread=0.6):
    """Unit vectors around ``groups`` random centres, and each row's group."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((groups, d))
    g = rng.integers(0, groups, n)
    X = centres[g] + spread * rng.standard_normal((n, d))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float64), g


def unit(M):
    return M / np.linalg.norm(M, axis=1, keepdims=True)


def snap(name, Y, index=None, **kw):
    return Snapshot(name=name, vectors=Y, index=np.arange(len(Y)) if index is None else index, **kw)


# --------------------------------------------------------------------------- unchanged snapshots


def test_unchanged_and_rotated_snapshots_show_no_drift_and_no_alert():
    X, _ = clustered(300, 12, seed=1)
    Q1, Q2, Q3 = (ortho_group.rvs(12, random_state=s) for s in (2, 3, 4))
    r = dr.measure_drift(X, [snap("same", X.copy()), snap("rotated", X @ Q1), snap("rotated again", X @ Q2),
                             snap("rotated thrice", X @ Q3)], n_boot=50, n_perm=99, device="cpu")
    for s in r.snapshots:
        v = s.values
        assert v["mean_drift"] == pytest.approx(0, abs=1e-12) and v["mean_l2_drift"] == pytest.approx(0, abs=1e-6)
        assert v["knn_overlap_baseline"] == 1.0
        assert v["pairwise_similarity_correlation"] == pytest.approx(1, abs=1e-12)
        assert v["procrustes_distance"] == pytest.approx(0, abs=1e-6)
        assert v["anomalous_fraction"] == 0 and v["mean_shift"] == pytest.approx(0, abs=1e-12)
        assert v["isotropy_drift_apcs"] == pytest.approx(0, abs=1e-12)
        assert v["mmd_p_value"] > 0.05 and v["ks_rejected_fraction"] == 0
        assert s.classifier.ci_low <= 0.5 <= s.classifier.ci_high
    assert list(r.alerts["verdict"]) == ["healthy"] * 4 and r.pattern == "stable"
    m = r.metrics
    assert m["mean_drift"].verdict == "healthy" and m["pairwise_similarity_correlation"].verdict == "healthy"
    assert m["anomalous_fraction"].verdict == "healthy" and m["procrustes_distance"].verdict == "healthy"
    # the seed's rule on the recorded distances: equal up to rounding, so the sd is floored at SIGMA_FLOOR
    d = [s.values["procrustes_distance"] for s in r.snapshots]
    z = (d[3] - statistics.mean(d[:3])) / max(statistics.stdev(d[:3]), dr.SIGMA_FLOOR)
    assert abs(z) < 0.1 and r.values["procrustes_sigma_above_trend"] == pytest.approx(z, rel=1e-9, abs=1e-12)


def test_metric_names_per_snapshot_and_headline():
    X, _ = clustered(200, 8, seed=4)
    rng = np.random.default_rng(5)
    snaps = [snap(name, unit(X + 0.02 * rng.standard_normal(X.shape))) for name in ("2024-02", "March 2024 (v2)")]
    r = dr.measure_drift(X, snaps, **FAST)
    contract = ("mean_drift", "knn_overlap_baseline", "pairwise_similarity_correlation", "anomalous_fraction",
                "procrustes_distance", "mmd", "ks_rejected_fraction", "domain_classifier_auc")
    for name in contract:
        assert f"{name}__2024_02" in r.metrics and f"{name}__march_2024_v2" in r.metrics
        assert r.values[name] == r.values[f"{name}__march_2024_v2"]  # the headline is the latest snapshot
        assert r.metrics[f"{name}__2024_02"].verdict is None  # verdicts only on the headline
    assert set(r.metrics) == set(r.values)
    # Table 217.3's sigma rule needs three earlier snapshots: with two snapshots it is not applied
    assert r.metrics["procrustes_distance"].verdict is None and "needs ≥ 4" in r.metrics["procrustes_distance"].reference
    assert "n/a (fewer than 3" in r.metrics["procrustes_distance"].reference
    one = dr.measure_drift(X, snaps[:1], **FAST)
    assert one.metrics["mean_drift"].verdict is None and "one snapshot" in one.metrics["mean_drift"].reference
    assert snapshot_slug("2024-02") == "2024_02" and snapshot_slug(" A/B test ") == "a_b_test"


# --------------------------------------------------------------------------- planted drift


def test_planted_group_drift_is_detected_and_attributed():
    X, g = clustered(600, 16, groups=4, seed=6, spread=0.5)
    rng = np.random.default_rng(7)
    target = unit(X[g == 1].mean(0, keepdims=True))[0]

    def month(pull, i):
        Y = X.copy()
        Y[g == 0] = unit((1 - pull) * Y[g == 0] + pull * target)
        Y = unit(Y + 0.01 * rng.standard_normal(Y.shape))
        return snap(f"m{i}", Y @ ortho_group.rvs(16, random_state=10 + i))

    r = dr.measure_drift(X, [month(0, 1), month(0, 2), month(0, 3), month(0.5, 4)], n_boot=0, n_perm=199, device="cpu")
    first, last = r.snapshots[0], r.snapshots[-1]
    assert r.alerts["verdict"].tolist()[:3] == ["healthy", "healthy", "healthy"]
    assert r.metrics["mean_drift"].verdict == "problematic" and r.values["mean_drift_ratio"] > 2.5
    assert r.metrics["procrustes_distance"].verdict == "problematic"
    assert r.pattern == "regime shift"
    # sigma above trend: the seed's rule (trailing mean, sample sd) on the recorded distances, here well above the
    # noise floor, so a factor sqrt(2) in sigma (a population sd, say) would fail
    d = [s.values["procrustes_distance"] for s in r.snapshots]
    assert statistics.stdev(d[:3]) > 10 * dr.SIGMA_FLOOR
    assert r.values["procrustes_sigma_above_trend"] == pytest.approx(
        (d[3] - statistics.mean(d[:3])) / statistics.stdev(d[:3]), rel=1e-9)
    # the third snapshot has only two earlier values: no σ, and the table and metric say why
    assert r.values["procrustes_sigma_above_trend__m3"] is None
    assert r.metrics["procrustes_sigma_above_trend__m3"].note == "n/a (fewer than 3 earlier snapshots)"
    assert "σ n/a (fewer than 3)" in chapter.alert_table(r).iloc[2]["Procrustes D_P (σ)"]
    # the stable-core alignment attributes the movement to the group that moved
    moved = g[last.index] == 0
    assert last.drift[moved].mean() > 20 * last.drift[~moved].mean()
    assert last.anomalous[~moved].sum() == 0 and last.anomalous[moved].sum() > 10  # mu + 2 sigma: the group's extremes
    assert last.values["mmd_p_value"] < 0.01 and last.values["ks_rejected_fraction"] > 0.3
    assert last.values["domain_classifier_auc"] > 0.6 and last.classifier.ci_low > 0.5
    assert first.values["mmd_p_value"] > 0.05 and first.values["ks_rejected_fraction"] == 0
    groups = dr.drift_by_group(r, pd.DataFrame({"label": np.array(["a", "b", "c", "d"])[g]}))
    assert groups.sort_values("mean drift").iloc[-1]["group"] == "a"
    movers = chapter.movers_table(r, np.array([f"e{i}" for i in range(len(X))]), n=10)
    assert all(g[int(i[1:])] == 0 for i in movers["id"])


def test_stable_core_rotation_recovers_the_rotation_a_moved_group_would_bend():
    X, g = clustered(400, 10, groups=5, seed=8)
    Q = ortho_group.rvs(10, random_state=9)
    Y = X.copy()
    Y[g == 0] = unit(Y[g == 0] + 1.5 * np.eye(10)[0])  # one group (about 20 %... at most the trimmed share) moves
    assert (g == 0).mean() < dr.TRIM
    R = dr.stable_core_rotation(X, Y @ Q)
    np.testing.assert_allclose(R, Q.T, atol=1e-10)
    plain = orthogonal_procrustes(Y @ Q - (Y @ Q).mean(0), X - X.mean(0))[0]
    assert np.abs(plain - Q.T).max() > 1e-3  # least squares over everyone is bent
    r = dr.snapshot_drift(X, snap("s", Y @ Q), **FAST)
    expected = 1 - np.einsum("ij,ij->i", X, Y)  # true per-entity movement (unit rows)
    np.testing.assert_allclose(r.drift, np.clip(expected, 0, 2), atol=1e-10)
    assert r.values["mean_drift"] == pytest.approx(expected.mean(), abs=1e-10)
    assert r.values["mean_l2_drift"] == pytest.approx(np.linalg.norm(X - Y, axis=1).mean(), abs=1e-9)
    mu, sd = r.drift.mean(), r.drift.std()
    np.testing.assert_array_equal(r.anomalous, (r.drift > mu + 2 * sd) & (r.drift > dr.DRIFT_FLOOR))


# --------------------------------------------------------------------------- pair statistics vs brute force


def test_pair_statistics_match_brute_force():
    X, g = clustered(120, 9, seed=11)
    rng = np.random.default_rng(12)
    Y = unit(X + 0.3 * rng.standard_normal(X.shape) + 0.2)
    Q = ortho_group.rvs(9, random_state=13)
    r = dr.snapshot_drift(X, snap("s", Y @ Q), n_boot=100, n_perm=9, device="cpu")
    iu = np.triu_indices(len(X), 1)
    rho = np.corrcoef(cosine_similarity(X)[iu], cosine_similarity(Y)[iu])[0, 1]
    v = r.values
    assert v["pairwise_similarity_correlation"] == pytest.approx(rho, abs=1e-10)
    fit_disp = scipy_procrustes(X, Y @ Q)[2]  # scipy's also fits a scale: 1 - (sum s_k)^2
    s = math.sqrt(1 - fit_disp)
    assert v["procrustes_distance"] == pytest.approx(math.sqrt(2 - 2 * s), abs=1e-9)
    iso_x, iso_y = measure_isotropy(X, n_boot=0), measure_isotropy(Y, n_boot=0)
    assert v["isotropy_drift_apcs"] == pytest.approx(iso_y.values["apcs"] - iso_x.values["apcs"], abs=1e-10)
    assert v["isotropy_drift_pr_fraction"] == pytest.approx(
        iso_y.values["participation_ratio_fraction"] - iso_x.values["participation_ratio_fraction"], abs=1e-9)
    R = dr.stable_core_rotation(X, Y @ Q)
    B = Y @ Q @ R
    spread = math.sqrt(((X - X.mean(0)) ** 2).sum(1).mean())
    assert v["mean_shift"] == pytest.approx(np.linalg.norm(B.mean(0) - X.mean(0)) / spread, abs=1e-10)
    for name in ("pairwise_similarity_correlation", "procrustes_distance", "mean_shift"):
        lo, hi = r.cis[name]
        assert lo < v[name] < hi


def test_knn_overlap_matches_sklearn_neighbour_sets():
    X, _ = clustered(150, 8, seed=14)
    Y = unit(X + 0.15 * np.random.default_rng(15).standard_normal(X.shape))
    r = dr.snapshot_drift(X, snap("s", Y), **FAST)

    def sets(M):
        nn = NearestNeighbors(n_neighbors=11, metric="cosine").fit(M)
        return [set(row[1:]) for row in nn.kneighbors(M, return_distance=False)]
    expected = np.array([len(a & b) / 10 for a, b in zip(sets(X), sets(Y))])
    np.testing.assert_allclose(r.overlap, expected)


# --------------------------------------------------------------------------- MMD


def brute_mmd2(X, Y, sigma):
    k = lambda A, B: np.exp(-cdist(A, B, "sqeuclidean") / (2 * sigma ** 2))  # noqa: E731
    m, n = len(X), len(Y)
    Kxx, Kyy = k(X, X), k(Y, Y)
    return ((Kxx.sum() - np.trace(Kxx)) / (m * (m - 1)) + (Kyy.sum() - np.trace(Kyy)) / (n * (n - 1))
            - 2 * k(X, Y).mean())


def test_mmd_matches_brute_force_estimator_bandwidth_and_jackknife():
    rng = np.random.default_rng(16)
    X, Y = rng.standard_normal((7, 3)), rng.standard_normal((9, 3)) + 0.5
    t = ts.mmd_test(X, Y, n_perm=0, device="cpu")
    sigma = np.median(pdist(np.vstack([X, Y])))
    assert t.bandwidth == pytest.approx(sigma, rel=1e-12)
    assert t.mmd2 == pytest.approx(brute_mmd2(X, Y, sigma), abs=1e-12)
    loo_x = [brute_mmd2(np.delete(X, i, 0), Y, sigma) for i in range(len(X))]
    loo_y = [brute_mmd2(X, np.delete(Y, j, 0), sigma) for j in range(len(Y))]
    var = sum((len(v) - 1) / len(v) * ((np.array(v) - np.mean(v)) ** 2).sum() for v in (loo_x, loo_y))
    assert t.std_error == pytest.approx(math.sqrt(var), rel=1e-9)
    assert ts.mmd_test(X, Y, bandwidth=2.0, n_perm=0).mmd2 == pytest.approx(brute_mmd2(X, Y, 2.0), abs=1e-12)


def test_mmd_permutation_p_value_approaches_the_exact_permutation_p():
    rng = np.random.default_rng(17)
    X, Y = rng.standard_normal((4, 2)), rng.standard_normal((4, 2)) + 1.0
    Z = np.vstack([X, Y])
    sigma = np.median(pdist(Z))
    observed = brute_mmd2(X, Y, sigma)
    splits = [brute_mmd2(Z[list(c)], Z[[i for i in range(8) if i not in c]], sigma)
              for c in itertools.combinations(range(8), 4)]
    exact = np.mean(np.array(splits) >= observed - 1e-12)
    t = ts.mmd_test(X, Y, n_perm=4000, seed=1, device="cpu")
    assert t.p_value == pytest.approx(exact, abs=0.02)


def test_mmd_test_keeps_its_level_and_detects_a_shift():
    rejections = sum(ts.mmd_test(np.random.default_rng([s, 1]).standard_normal((60, 5)),
                                 np.random.default_rng([s, 2]).standard_normal((60, 5)), n_perm=199, seed=s,
                                 device="cpu").p_value < 0.05 for s in range(40))
    assert rejections <= 4  # alpha = 0.05: about 2 of 40 expected
    shifted = [ts.mmd_test(np.random.default_rng([s, 1]).standard_normal((60, 5)),
                           np.random.default_rng([s, 2]).standard_normal((60, 5)) + np.r_[1.0, 0, 0, 0, 0],
                           n_perm=199, seed=s, device="cpu").p_value for s in range(10)]
    assert all(p < 0.05 for p in shifted)


# --------------------------------------------------------------------------- KS + Benjamini-Hochberg


def test_benjamini_hochberg_hand_example_statsmodels_and_scipy():
    reject, adj = ts.benjamini_hochberg([0.01, 0.02, 0.03, 0.2], 0.05)
    assert reject.tolist() == [True, True, True, False]
    np.testing.assert_allclose(adj, [0.04, 0.04, 0.04, 0.2])
    p = np.random.default_rng(18).uniform(0, 0.2, 50) ** 2
    reject, adj = ts.benjamini_hochberg(p, 0.05)
    ref_reject, ref_adj, _, _ = multipletests(p, alpha=0.05, method="fdr_bh")
    np.testing.assert_array_equal(reject, ref_reject)
    np.testing.assert_allclose(adj, ref_adj)
    np.testing.assert_allclose(adj, false_discovery_control(p, method="bh"))


def test_ks_dimensions_match_scipy_per_column():
    rng = np.random.default_rng(19)
    X, Y = rng.standard_normal((80, 4)), rng.standard_normal((70, 4)) + [0, 0, 0.8, 0]
    r = ts.ks_dimensions(X, Y)
    for j in range(4):
        ref = ks_2samp(X[:, j], Y[:, j])
        assert r.statistics[j] == pytest.approx(ref.statistic) and r.p_values[j] == pytest.approx(ref.pvalue)
    assert r.rejected.tolist() == [False, False, True, False]


def test_ks_bh_keeps_its_level_and_detects_a_shift():
    any_rejection = sum(ts.ks_dimensions(np.random.default_rng([s, 3]).standard_normal((100, 10)),
                                         np.random.default_rng([s, 4]).standard_normal((100, 10))).rejected.any()
                        for s in range(40))
    assert any_rejection <= 4  # BH controls the family-wise error under the global null at alpha
    shift = np.r_[np.full(3, 0.8), np.zeros(7)]
    r = ts.ks_dimensions(np.random.default_rng(5).standard_normal((200, 10)),
                         np.random.default_rng(6).standard_normal((200, 10)) + shift)
    assert r.rejected[:3].all() and not r.rejected[3:].any()


# --------------------------------------------------------------------------- domain classifier


def test_hanley_mcneil_equals_the_exact_null_variance_at_one_half():
    for n1, n0 in ((10, 10), (50, 80), (1000, 700)):
        assert hanley_mcneil_se(0.5, n1, n0) == pytest.approx(math.sqrt((n1 + n0 + 1) / (12 * n1 * n0)), rel=1e-12)
    assert hanley_mcneil_se(1.0, 30, 30) == 0.0


def test_domain_classifier_is_at_chance_on_one_distribution_and_separates_a_shift():
    aucs = [ts.domain_classifier_auc(np.random.default_rng([s, 5]).standard_normal((150, 6)),
                                     np.random.default_rng([s, 6]).standard_normal((150, 6)), seed=s).auc
            for s in range(10)]
    assert abs(np.mean(aucs) - 0.5) < 0.03
    same = ts.domain_classifier_auc(np.random.default_rng(7).standard_normal((300, 6)),
                                    np.random.default_rng(8).standard_normal((300, 6)))
    assert same.ci_low <= 0.5 <= same.ci_high
    shifted = ts.domain_classifier_auc(np.random.default_rng(7).standard_normal((300, 6)),
                                       np.random.default_rng(8).standard_normal((300, 6)) + 1.0)
    assert shifted.auc > 0.9 and shifted.ci_low > 0.85


# --------------------------------------------------------------------------- alert levels and patterns


def test_table_217_3_bands():
    assert [verdict("drift_mean_ratio", x) for x in (1.2, 2.0, 3.0)] == ["healthy", "concerning", "problematic"]
    assert [verdict("drift_pairwise_correlation", x) for x in (0.97, 0.92, 0.85)] == [
        "healthy", "concerning", "problematic"]
    assert [verdict("drift_anomalous_fraction", x) for x in (0.03, 0.07, 0.2)] == [
        "healthy", "concerning", "problematic"]
    assert [verdict("drift_procrustes_sigma", x) for x in (1.0, 2.5, math.inf)] == [
        "healthy", "concerning", "problematic"]


def test_sigma_above_trend_and_patterns():
    # σ needs at least 3 earlier values (a spread of two says nothing): None for the first three
    z = dr.sigma_above_trend([1.0, 1.2, 1.4, 2.0, 1.3])
    assert z[:3] == [None, None, None]
    assert z[3] == pytest.approx((2.0 - 1.2) / np.std([1.0, 1.2, 1.4], ddof=1))
    assert z[4] == pytest.approx((1.3 - 1.4) / np.std([1.0, 1.2, 1.4, 2.0], ddof=1))
    assert dr.sigma_above_trend([0.1, 0.1, 0.1, 0.1 + 1e-9])[3] == pytest.approx(1e-3)  # numerical noise floor
    assert dr.sigma_above_trend([0.1, 0.1, 0.9]) == [None, None, None]  # the +204σ of two flat points: no value
    h, c, p = "healthy", "concerning", "problematic"
    assert dr.drift_pattern([h, h, h], [1, 1.1, 1.2]) == "stable"
    assert dr.drift_pattern([h, p, h], [1, 3, 1]) == "isolated spike"
    assert dr.drift_pattern([h, h, c, p], [1, 1.05, 2, 4]) == "regime shift"
    assert dr.drift_pattern([h, h, c, p], [1, 1.4, 1.8, 2.6]) == "gradual trend"


# --------------------------------------------------------------------------- files and errors


def write_set(folder, X, ids, snapshots):
    np.save(folder / "vectors.npy", X.astype(np.float32))
    (folder / "ids.txt").write_text("\n".join(ids) + "\n")
    manifest = {"vectors": "vectors.npy", "ids": "ids.txt", "snapshots": snapshots}
    (folder / "m.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return folder / "m.yaml"


def table(ids, V):
    df = pd.DataFrame(V.astype(np.float32), columns=[f"d{j}" for j in range(V.shape[1])])
    df.insert(0, "id", ids)
    return df


def test_load_snapshots_matches_ids_and_reports_population(tmp_path):
    X, _ = clustered(60, 6, seed=20)
    ids = [f"e{i:03d}" for i in range(60)]
    order = np.random.default_rng(21).permutation(np.arange(5, 60))  # e000..e004 departed, rows shuffled
    new = unit(np.random.default_rng(22).standard_normal((3, 6)))
    table(np.r_[np.array(ids)[order], ["n1", "n2", "n3"]], np.vstack([X[order], new])).to_parquet(
        tmp_path / "s1.parquet", index=False)
    table(ids, X).to_csv(tmp_path / "s0.csv", index=False)
    es = load_source(write_set(tmp_path, X, ids, [{"name": "Jan", "vectors": "s0.csv", "timestamp": "2024-01-01"},
                                                   {"name": "Feb", "vectors": "s1.parquet", "timestamp": "2024-02-01"}]))
    s0, s1 = load_snapshots(es)
    assert s1.slug == "feb" and list(s1.departed_ids) == ids[:5] and list(s1.new_ids) == ["n1", "n2", "n3"]
    np.testing.assert_allclose(s1.vectors, X[s1.index], atol=1e-6)
    np.testing.assert_allclose(s1.new_vectors, new, atol=1e-6)
    r = dr.measure_drift(es.vectors, [s0, s1], **FAST)
    assert r.values["new_entities"] == 3 and r.values["departed_entities"] == 5 and r.values["matched_entities"] == 55
    assert r.values["mean_drift"] == pytest.approx(0, abs=1e-10)


def test_bad_snapshots_raise_input_errors_that_name_them(tmp_path):
    X, _ = clustered(40, 4, seed=23)
    ids = [f"e{i}" for i in range(40)]
    table(ids, X).to_csv(tmp_path / "a.csv", index=False)
    table([f"x{i}" for i in range(30)] + ids[:10], X).to_csv(tmp_path / "few.csv", index=False)
    cases = {
        "same metric suffix": [{"name": "2024-02", "vectors": "a.csv"}, {"name": "2024/02", "vectors": "a.csv"}],
        "only 10 of its ids": [{"name": "few", "vectors": "few.csv"}],
        "time order": [{"name": "b", "vectors": "a.csv", "timestamp": "2024-03-01"},
                       {"name": "c", "vectors": "a.csv", "timestamp": "2024-02-01"}],
    }
    for message, snaps in cases.items():
        es = load_source(write_set(tmp_path, X, ids, snaps))
        with pytest.raises(InputError, match=message):
            load_snapshots(es)
    np.save(tmp_path / "short.npy", X[:30].astype(np.float32))
    es = load_source(write_set(tmp_path, X, ids, [{"name": "short", "vectors": "short.npy"}]))
    with pytest.raises(InputError, match="snapshot 'short'.*30 rows"):
        load_snapshots(es)


# --------------------------------------------------------------------------- demo, notebook, typesetting


def test_demo_side_data_plants_a_detectable_genre_drift(demo_data):
    from embeval_report.demo import streaming_embeddings
    from embeval_report.demo.drift import DEMO_DRIFT_FROM

    manifest = yaml.safe_load(demo_data.read_text())  # write_demo's, with the drift module's side data
    assert [e["name"] for e in manifest["snapshots"]] == ["2024-02", "2024-03", "2024-04", "2024-05"]
    es = load_source(demo_data)
    np.testing.assert_array_equal(es.vectors, streaming_embeddings(seed=0)[0])
    snaps = load_snapshots(es)
    assert [len(s.new_ids) for s in snaps] == [0, 15, 30, 45] and [len(s.departed_ids) for s in snaps] == [0, 0, 20, 40]
    r = dr.measure_drift(es.vectors, snaps, n_boot=0, n_perm=99, device="cpu")
    # 2024-04: mean drift above 1.5x the first (warning); its σ above trend has only two earlier values: n/a
    assert r.alerts["verdict"].tolist() == ["healthy", "healthy", "concerning", "problematic"]
    assert r.values["procrustes_sigma_above_trend__2024_04"] is None
    assert r.metrics["mean_drift"].verdict == "problematic" and r.pattern == "regime shift"
    groups = dr.drift_by_group(r, es.metadata)
    top = groups[groups["column"] == "label"].sort_values("mean drift").iloc[-1]
    assert top["group"] == DEMO_DRIFT_FROM and top["share of anomalies %"] > 90
    first, last = r.snapshots[0], r.snapshots[-1]
    assert first.values["ks_rejected_fraction"] == 0 and first.values["mmd_p_value"] > 0.05
    assert last.values["mmd_p_value"] < 0.05 and last.classifier.ci_low > 0.5


def test_notebook_metadata():
    nb = nbformat.read(notebooks_dir() / "80_drift.ipynb", as_version=4)
    nbformat.validate(nb)
    spec = declared("drift")
    assert nb.metadata["embeval"]["name"] == "drift" and spec.notebook.name == "80_drift.ipynb"
    assert (spec.title, spec.order, spec.requires) == ("Drift over time", 80, ("snapshots",))
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert ["parameters"] in tags and ["remove-input"] in tags


def test_formulas_typeset_in_typst(tmp_path):
    pypandoc = pytest.importorskip("pypandoc")
    typst = pytest.importorskip("typst")
    text = "\n\n".join(f"${s.formula}$" for s in dr.SPECS.values() if s.formula)
    (tmp_path / "f.typ").write_text(pypandoc.convert_text(text, "typst", format="markdown"))
    typst.compile(str(tmp_path / "f.typ"))


# --------------------------------------------------------------------------- old import path (public API)


# --------------------------------------------------------------------------- degenerate inputs


def test_bands_are_what_the_chapter_quotes():
    assert chapter.RATIO is dr.THRESHOLDS["drift_mean_ratio"] and chapter.SIGMA.table.startswith("Table 217.3")
    assert (chapter.CORRELATION.healthy, chapter.ANOMALOUS.problematic) == (0.95, 0.10)


def test_identical_rows_give_undefined_metrics_with_reasons_not_a_crash():
    X = np.tile(np.random.default_rng(41).standard_normal(8), (200, 1))
    Q = ortho_group.rvs(8, random_state=42)
    snaps = [snap("same", X.copy()), snap("rotated", X @ Q), snap("same again", X.copy())]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = dr.measure_drift(X, snaps, n_boot=50, n_perm=99, device="cpu")
    undefined = [str(w.message) for w in caught if issubclass(w.category, UndefinedMetricWarning)]
    assert any("Procrustes distance is undefined" in m and "same, rotated, same again" in m for m in undefined)
    assert any("Pairwise similarity correlation is undefined" in m for m in undefined)
    assert len(undefined) == 4  # one per undefined metric, naming the snapshots
    for s in r.snapshots:
        # the rotation of a set without spread is still removed (uncentred fit): no entity moved
        assert s.values["mean_drift"] == pytest.approx(0, abs=1e-12) and s.values["anomalous_fraction"] == 0
        # rounding of the rotation is not drift: the two-sample tests see equal samples
        assert s.values["ks_rejected_fraction"] == 0 and s.values["mmd_p_value"] > 0.05
        for name in ("procrustes_distance", "pairwise_similarity_correlation", "mean_shift",
                     "isotropy_drift_pr_fraction"):
            assert math.isnan(s.values[name]) and s.notes[name]
    m = r.metrics
    assert m["procrustes_distance"].value is not None and math.isnan(m["procrustes_distance"].value)
    assert m["procrustes_distance"].verdict is None and "undefined" in m["procrustes_distance"].reference
    assert m["pairwise_similarity_correlation"].verdict is None and m["pairwise_similarity_correlation"].note
    assert r.values["procrustes_sigma_above_trend"] is None and m["procrustes_sigma_above_trend"].note
    assert list(r.alerts["verdict"]) == ["healthy"] * 3 and r.pattern == "stable"
    assert set(m["procrustes_distance"].to_json()) == {"value", "ci_low", "ci_high", "verdict", "direction",
                                                        "reference"}
    assert m["procrustes_distance"].to_json()["value"] is None
    text = chapter.narrative(r, np.array([f"e{i}" for i in range(200)]))
    assert "undefined" in text
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)
    for fig in (chapter.dashboard_figure(r), chapter.distribution_figure(r), chapter.entity_figure(r)):
        fig.canvas.draw()
    for t in (chapter.alert_table(r), chapter.neighbourhood_table(r), chapter.distribution_table(r)):
        assert not t.astype(str).apply(lambda c: c.str.fullmatch(r"nan")).any().any()


def test_zero_drift_single_snapshot_has_no_ratio_or_trend_and_says_why():
    X, _ = clustered(120, 8, seed=43)
    r = dr.measure_drift(X, [snap("copy", X.copy())], n_boot=50, n_perm=99, device="cpu")
    v, m = r.values, r.metrics
    assert v["mean_drift"] == pytest.approx(0, abs=1e-12) and v["drift_std"] == pytest.approx(0, abs=1e-12)
    assert v["anomalous_fraction"] == 0 and v["pairwise_similarity_correlation"] <= 1.0
    assert v["mean_drift_ratio"] is None and "reference" in m["mean_drift_ratio"].note
    assert v["procrustes_sigma_above_trend"] is None and "fewer than 3" in m["procrustes_sigma_above_trend"].note
    assert m["mean_drift"].verdict is None and m["procrustes_distance"].verdict is None
    assert r.alerts["verdict"].tolist() == ["healthy"] and r.pattern == "stable"
    text = chapter.narrative(r)
    assert "cannot be applied with a single snapshot" in text and not re.search(r"\bnan\b", text, re.IGNORECASE)
    assert chapter.alert_callout(r)["kind"] == "success"
    chapter.dashboard_figure(r).canvas.draw()


def test_tiny_sets_twenty_matched_and_d_greater_than_n():
    rng = np.random.default_rng(44)
    X = unit(rng.standard_normal((20, 6)))
    r = dr.measure_drift(X, [snap("s", unit(X + 0.1 * rng.standard_normal(X.shape)))], n_perm=99, device="cpu")
    s = r.snapshots[0]
    assert s.values["matched_entities"] == 20 and s.mmd.n_x == 10 and s.classifier.folds == 5
    assert all(math.isfinite(s.values[k]) for k in dr.PAIR_STATISTICS) and s.cis["procrustes_distance"][0] <= \
        s.values["procrustes_distance"]
    X = rng.standard_normal((30, 50))  # d > n
    snaps = [snap(f"m{i}", X + 0.1 * (i + 1) * rng.standard_normal(X.shape)) for i in range(4)]
    r = dr.measure_drift(X, snaps, n_perm=99, device="cpu")
    assert all(math.isfinite(r.values[k]) for k in ("mean_drift", "procrustes_distance", "mmd",
                                                      "pairwise_similarity_correlation", "domain_classifier_auc"))
    assert r.values["procrustes_sigma_above_trend"] is not None
    with pytest.raises(ValueError, match="at least 20"):
        dr.snapshot_drift(X[:10], snap("few", X[:10]))


def test_a_baseline_under_twenty_rows_is_valid_input_and_the_chapter_skips_it(tmp_path):
    from types import SimpleNamespace

    from embeval_report.cli import main
    from embeval_report.chapters.registry import resolve_settings

    X = np.random.default_rng(45).standard_normal((3, 2))
    ids = [f"e{i}" for i in range(3)]
    table(ids, X).to_csv(tmp_path / "s.csv", index=False)
    es = load_source(write_set(tmp_path, X, ids, [{"name": "s", "vectors": "s.csv"}]))
    snaps = load_snapshots(es)  # every baseline entity matched: not an id mismatch
    reason = chapter.precheck(es, SimpleNamespace(snapshots=snaps), None)
    assert "at least 20" in reason and "only 3" in reason
    big = SimpleNamespace(n=30)
    assert chapter.precheck(big, SimpleNamespace(snapshots=[snap("s", np.zeros((30, 2)))]), None) is None
    with pytest.raises(ValueError, match="mmd_sample"):  # below 2 rows per side: refused as input (exit 2)
        resolve_settings(options={"mmd_sample": 1})
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--chapters", "drift", "--formats", "html"]) == 0
    doc = json.loads((out / "metrics.json").read_text())["chapters"]["drift"]
    assert doc["status"] == "skipped" and "at least 20" in doc["reason"]


# --------------------------------------------------------------------------- another dimension (issue 26.7)


def _pr_fraction(M):
    lam = np.linalg.eigvalsh(np.cov(M, rowvar=False))
    return lam.sum() ** 2 / (lam ** 2).sum() / M.shape[1]


def test_a_snapshot_of_another_dimension_keeps_neighbourhoods_and_nulls_the_shared_space_metrics():
    """8-d baseline vs a 5-d snapshot: no cosine drift, Procrustes or per-dimension test (null, with the reason);
    k-NN overlap and the pairwise similarity correlation kept, checked against sklearn and numpy."""
    X, _ = clustered(200, 8, seed=50)
    P = np.random.default_rng(51).standard_normal((8, 5))
    Y = unit(X @ P)
    r = dr.measure_drift(X, [snap("same", X.copy()), snap("small", Y)], n_boot=50, n_perm=99, device="cpu")
    assert r.info["dimension_mismatch"] == [{"name": "small", "d": 5}]
    m, v = r.metrics, r.values
    for name in dr.SHARED_SPACE:
        rec = m[f"{name}__small"].to_record()
        assert rec["value"] is None and "d = 5" in rec["note"] and "baseline d = 8" in rec["note"], name
        assert rec["verdict"] is None
    # kept: neighbourhoods (sklearn's exact cosine neighbours, self excluded) ...
    k = 10
    nb = [NearestNeighbors(n_neighbors=k + 1, metric="cosine").fit(M).kneighbors(M, return_distance=False)[:, 1:]
          for M in (X, Y)]
    expected = np.mean([len(set(a) & set(b)) / k for a, b in zip(*nb)])
    assert v["knn_overlap_baseline__small"] == pytest.approx(expected, abs=1e-12)
    # ... the correlation of all pairwise cosines (i != j) ...
    off = ~np.eye(len(X), dtype=bool)
    rho = np.corrcoef(cosine_similarity(X)[off], cosine_similarity(Y)[off])[0, 1]
    assert v["pairwise_similarity_correlation__small"] == pytest.approx(rho, abs=1e-9)
    # ... and the isotropy changes, each set in its own space (PR / its own d)
    assert v["isotropy_drift_pr_fraction__small"] == pytest.approx(_pr_fraction(Y) - _pr_fraction(X), abs=1e-9)
    # the same-dimension snapshot is untouched, and no test is recorded for the other one
    assert v["mean_drift__same"] == pytest.approx(0, abs=1e-12) and v["procrustes_distance__same"] is not None
    names = {t.name for t in dr.drift_tests(r)}
    assert "MMD: same" in names and not any(n.endswith(": small") for n in names)
    assert r.alerts["check_procrustes_distance"].isna().all() or r.alerts["check_procrustes_distance"].iloc[1] is None
    # the chapter states it and shows no NaN
    text = chapter.narrative(r, np.array([f"e{i}" for i in range(200)]))
    assert "**Dimensions.**" in text and "**small** (d = 5)" in text and "baseline has d = 8" in text
    assert "not defined for small" in text and not re.search(r"\bnan\b", text, re.IGNORECASE)
    for t in (chapter.alert_table(r), chapter.neighbourhood_table(r), chapter.distribution_table(r)):
        assert not t.astype(str).apply(lambda c: c.str.contains(r"\bnan\b", case=False)).any().any()
    assert chapter.distribution_table(r).iloc[1]["KS dims changed"] == "— (d = 5)"
    for fig in (chapter.dashboard_figure(r), chapter.distribution_figure(r)):
        fig.canvas.draw()


def test_snapshots_of_the_baselines_dimension_state_no_mismatch():
    X, _ = clustered(120, 8, seed=52)
    r = dr.measure_drift(X, [snap("a", unit(X + 0.05))], **FAST)
    assert "dimension_mismatch" not in r.info and chapter.dimension_text(r) == ""
    assert all(r.values[f"{n}__a"] is not None for n in ("mean_drift", "procrustes_distance", "ks_rejected_fraction"))


# --------------------------------------------------------------------------- calibrated alerts (issue 42 item 6)

def test_sigma_above_a_short_trend_is_read_as_the_sigma_of_a_long_history():
    """With 3 earlier values the sd is itself a guess: a stable series is 2σ above its trend about 11 % of the time
    (Student's t, 2 df), not 2.3 %. The bands read the σ of a long history with the same tail probability."""
    from scipy import stats

    assert dr.trend_sigma(None, 3) is None and dr.trend_sigma(2.0, 1) is None
    # the prediction interval: z / sqrt(1 + 1/m) is Student's t with m - 1 df
    assert dr.trend_sigma(2.0, 3) == pytest.approx(stats.norm.isf(stats.t.sf(2.0 / math.sqrt(4 / 3), 2)))
    assert dr.trend_sigma(5.2, 3) == pytest.approx(2.0, abs=0.05)   # at m = 3, 5.2σ reads as the warning's 2σ
    assert dr.trend_sigma(2.0, 10_000) == pytest.approx(2.0, abs=0.01)  # a long history: the σ itself
    rng = np.random.default_rng(0)  # stable series of 4 values: the warning fires at its nominal rate
    series = rng.standard_normal((20_000, 4))
    raw = np.array([dr.sigma_above_trend(list(s))[3] for s in series])
    calibrated = np.array([dr.trend_sigma(z, 3) for z in raw])
    assert 0.09 < (raw > 2).mean() < 0.13                   # the seed's rule on z alone
    assert abs((calibrated > 2).mean() - stats.norm.sf(2)) < 0.005


@pytest.mark.parametrize("seed", [0, 4])
def test_steady_snapshots_give_no_alert(seed):
    """Snapshots with natural variation only (noise and a rotation each month): no Table 217.3 alert. Before, seed 4
    was a warning (the anomalous fraction, d > μ + 2σ, flags 4-5 % of the entities of any right-skewed drift: 5.2 %
    in the first month, over the 5 % edge) and seed 0 critical (the last month 4.7σ above a trend of 3 values)."""
    rng = np.random.default_rng(seed)
    X, _ = clustered(600, 16, groups=6, seed=seed, spread=1.0)
    snaps = [snap(f"m{t}", (X + 0.01 * rng.standard_normal(X.shape)) @ ortho_group.rvs(16, random_state=t))
             for t in range(4)]
    r = dr.measure_drift(X, snaps, n_boot=0, n_perm=19, device="cpu")
    assert r.alerts["verdict"].tolist() == ["healthy"] * 4
    assert r.values["anomalous_fraction"] > 0.02  # the rule still flags its natural share ...
    assert "low end of its 95 % interval" in r.metrics["anomalous_fraction"].reference  # ... read with its interval
    assert dr.anomalous_check(0.052, 0.037) == "healthy" and dr.anomalous_check(0.08, 0.06) == "concerning"
    assert dr.anomalous_check(0.2, 0.16) == "problematic" and dr.anomalous_check(0.07, None) == "concerning"


def test_the_drift_finding_names_the_group_that_moved():
    from embeval_report.chapters.findings import ChapterResults

    metrics = {"mean_drift": {"value": 0.08, "verdict": "problematic", "label": "Mean drift", "reference": "r"}}
    groups = [{"column": "label", "group": "drama", "entities": 100, "mean drift": 0.46},
              {"column": "label", "group": "comedy", "entities": 500, "mean drift": 0.005}]
    [f] = chapter.findings(ChapterResults("drift", "Drift", metrics, {"by_group": groups}))
    assert "“drama” (label)" in f.title and f.evidence["group"] == "drama" and f.effect == "drift"
    assert f.sentence.startswith("Schedule a retraining") and "5.8× the whole set's" in f.sentence
    even = [dict(g, **{"mean drift": 0.08}) for g in groups]  # no group moved more than the others: none named
    [f] = chapter.findings(ChapterResults("drift", "Drift", metrics, {"by_group": even}))
    assert "most of all" not in f.title and "group" not in f.evidence


def test_demo_snapshots_drawn_once_each_call_its_own_copy():
    """The drift and the monitoring side data both read the snapshots: drawn once per arguments, and a caller
    that changes its tables changes no other caller's."""
    from embeval_report.demo.drift import _demo_snapshots, demo_snapshots

    first = demo_snapshots(0)
    hits = _demo_snapshots.cache_info().hits
    first[0][2].iloc[0, 1] = 99.0
    second = demo_snapshots(0)
    assert _demo_snapshots.cache_info().hits == hits + 1
    assert second[0][2].iloc[0, 1] != 99.0 and second[0][2] is not first[0][2]
    assert [n for n, _, _ in second] == ["2024-02", "2024-03", "2024-04", "2024-05"]
