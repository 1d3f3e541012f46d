"""Anisotropy corrections against numpy / scikit-learn references."""
import numpy as np
import pytest
from sklearn.decomposition import PCA

from embeval_report.chapters.correction import display_table, narrative
from embeval_report.errors import UndefinedMetricWarning
from embeval_report.metrics.correction import compare_corrections, whiten
from embeval_report.metrics.hubness import measure_hubness
from embeval_report.metrics.isotropy import all_but_the_top, measure_isotropy


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


# ---------------------------------------------------------------------------------------------
# Degenerate but valid sets: what can be measured is, what cannot is NaN with the reason
# ---------------------------------------------------------------------------------------------

def test_identical_rows_show_the_original_and_say_the_corrections_are_undefined():
    X = np.tile(np.arange(1, 9, dtype=np.float32), (200, 1))
    with pytest.warns(UndefinedMetricWarning) as caught:
        c = compare_corrections(X, np.array(["a", "b"] * 100))
    texts = [str(w.message) for w in caught]
    assert any(t.startswith("whitened (ZCA ≡ PCA): no variance is left") for t in texts)
    assert any(t.startswith("original: ") and "ties" in t for t in texts)
    assert not any("component(s)" in t for t in texts)  # the search for D stays quiet
    assert c.removed == 0 and c.undefined == list(c.table["setting"][1:])
    assert c.table.loc[0, "apcs"] == pytest.approx(1.0) and c.table.iloc[1:].drop(columns="setting").isna().all().all()
    for m in c.metrics.values():
        assert m.value is not None and np.isnan(m.value) and "no variance is left" in m.note and m.verdict is None
    text = narrative(c)
    assert "undefined" in text and " nan" not in text
    assert (display_table(c).iloc[1:, 2] == "—").all()
    with pytest.warns(UndefinedMetricWarning, match="whitening is undefined"):
        assert not whiten(X).any()


def test_three_points_in_the_plane_with_an_adapted_k():
    X = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    with pytest.warns(UndefinedMetricWarning, match="whitened"):  # three whitened points: an equilateral triangle
        c = compare_corrections(X, k=1)
    assert c.k == 1 and np.isfinite(c.table.loc[:2, "apcs"]).all()
    assert np.isnan(c.table.loc[3, "k_occurrence_skewness"]) and "ties" in c.metrics["k_occurrence_skewness_after_whitening"].note
    assert c.table.loc[3, "apcs"] == pytest.approx(-0.5, abs=1e-5)
    text = narrative(c, k_requested=10)
    assert "k = 1" in text and " nan" not in text and "cannot be compared" in text


def test_d_greater_than_n_and_one_class():
    X = np.random.default_rng(1).standard_normal((10, 50)).astype(np.float32)
    c = compare_corrections(X, np.array(["a"] * 10), k=8)
    assert c.table.loc[0, "condition_number"] == np.inf
    assert c.metrics["condition_number_after_abtt"].note.startswith("infinite")
    assert c.metrics["condition_number_after_abtt"].to_json()["value"] is None
    assert c.table.loc[3, "participation_ratio_fraction"] == pytest.approx(9 / 50, abs=1e-3)  # rank n − 1 = 9
    assert (c.table["label_agreement"].dropna() == 1.0).all()
    assert " nan" not in narrative(c)


def test_chapters_state_the_adapted_k(tmp_path, capsys):
    """Both chapters on a 3 × 2 set, as their notebooks run them: k adapted, stated and recorded."""
    import json
    import warnings

    import matplotlib
    matplotlib.use("Agg")
    from embeval_report.chapters import correction, hubness, open_chapter
    np.save(tmp_path / "v.npy", np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32))
    reports = {}
    with warnings.catch_warnings():  # open_chapter installs the notebook's warning display
        for name, module in (("hubness", hubness), ("correction", correction)):
            ctx = open_chapter(name, str(tmp_path / "v.npy"), None, str(tmp_path / "results"), {})
            reports[name] = report = module.compute(ctx)
            for show in [f for f in module.__all__ if f.startswith("show_")]:
                getattr(module, show)(report)  # every cell of the notebook runs
            info = json.loads((tmp_path / "results" / f"{name}.json").read_text())["info"]
            assert info["k"] == 1 and info["k_requested"] == 10
            if name == "correction":
                assert any(w.startswith("whitened (ZCA ≡ PCA): every point") for w in info["warnings"])
    assert "Traceback" not in capsys.readouterr().out
    h = reports["hubness"]
    texts = [hubness.narrative(h.result, h.ids, h.metadata, h.reduction, h.cross, h.k_requested),
             correction.narrative(reports["correction"].comparison, 10)]
    assert "is used throughout this chapter" in texts[0] and "instead of the" in texts[1]
    assert not any(" nan" in t for t in texts)


def test_automatic_budget_samples_the_hubness_columns_with_intervals(monkeypatch):
    """Above AUTO_LIMIT rows (no --sample-size) every setting's hubness comes from the same sampled queries:
    the skewness carries a jackknife interval (table, recorded metric), the exact graph's value lies near it,
    and the table and captions say so."""
    import embeval_report.metrics.correction as corr

    X = cone(n=900, seed=3)
    exact = compare_corrections(X, k=8)
    assert exact.sampling is None and not exact.intervals
    monkeypatch.setattr(corr, "AUTO_LIMIT", 500)
    monkeypatch.setattr(corr, "AUTO_QUERIES", 450)
    c = compare_corrections(X, k=8)
    assert "450 of the 900 points" in c.sampling and "automatic budget above 500 rows" in c.sampling
    skew_ci = {s: ci for (s, col), ci in c.intervals.items() if col == "k_occurrence_skewness"}
    assert set(skew_ci) == set(c.table["setting"])
    for (_, row), (_, ref) in zip(c.table.iterrows(), exact.table.iterrows()):
        lo, hi = skew_ci[row["setting"]]
        assert lo < row["k_occurrence_skewness"] < hi
        assert lo - (hi - lo) < ref["k_occurrence_skewness"] < hi + (hi - lo)  # the exact value is near
        assert np.isnan(row["antihub_occurrence"]) and 0 < row["neighbour_overlap"] <= 1
    m = c.metrics["k_occurrence_skewness_after_abtt"]
    assert m.has_ci and "jackknife" in m.ci_method
    assert "N_k skewness CI" in display_table(c).columns


def test_sampled_uniformity_of_a_setting_carries_its_interval_and_note():
    """With --sample-size every setting's uniformity is sampled: the table shows its interval, the recorded
    metric carries it with a note."""
    c = compare_corrections(cone(n=700, seed=4), k=8, sample_size=300)
    uni = {s: ci for (s, col), ci in c.intervals.items() if col == "uniformity"}
    assert set(uni) == set(c.table["setting"])
    for _, row in c.table.iterrows():
        lo, hi = uni[row["setting"]]
        assert lo < row["uniformity"] < hi
    m = c.metrics["uniformity_after_whitening"]
    assert m.has_ci and "sampled pairs" in m.note
    assert "uniformity CI" in display_table(c).columns
