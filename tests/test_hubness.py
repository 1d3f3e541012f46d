"""Hubness against independent references: brute-force numpy k-NN, SciPy, hand-computed cases,
dense numpy CSLS / mutual proximity, and kiez's port of scikit-hubness (its values kept in
tests/reference/peers.json, live when installed).

scikit-hubness itself (0.21.2, the last PyPI release) pins scikit-learn==0.21.3 and imports
modules removed from scikit-learn long ago, so it cannot be installed next to this package;
kiez (0.5.0) carries the same ``Hubness.score`` measures ("adapted from skhubness"); it pins numpy<2,
so its values are made in the peer venv of tests/reference/ (the live check runs where it is importable).
"""
import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from scipy.special import log_ndtr

from embeval_report.chapters import hubness as ch
from embeval_report.errors import UndefinedMetricWarning
from embeval_report.kernels import neighbours
from embeval_report.metrics import hubness as hb
from embeval_report.metrics.thresholds import verdict
from embeval_report.present.display import Table
from embeval_report.stats import bootstrap_ci
from reference import inputs, make_fixtures
from reference.inputs import brute_knn, dense_cosine, shifted_cloud


def skhubness_reference(nk, k, hub_size=2.0):
    """scikit-hubness's Hubness.score formulas, written out naively (O(n^2) Gini). Its hub occurrence
    divides by k n, the number of slots of a complete k-NN graph (= sum of N_k only for such a graph)."""
    nk = np.asarray(nk, float)
    n = len(nk)
    hubs = nk >= hub_size * k
    return {"k_occurrence_skewness": stats.skew(nk),
            "robin_hood_index": 0.5 * np.abs(nk - nk.mean()).sum() / nk.sum(),
            "k_occurrence_gini": np.abs(nk[:, None] - nk[None, :]).sum() / (2 * n * nk.sum()),
            "hub_occurrence": nk[hubs].sum() / k / n,
            "antihub_occurrence": (nk == 0).mean()}


# ---------------------------------------------------------------------------------------------
# k-occurrence and its measures
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 5, 10])
def test_k_occurrence_equals_brute_force_numpy(k, monkeypatch):
    X = shifted_cloud(400, 30, seed=k)
    monkeypatch.setattr(neighbours, "chunk_rows", lambda n, row_bytes, budget=None: 37)
    r = hb.measure_hubness(X, k, n_boot=0)
    ref = brute_knn(dense_cosine(X), k)
    np.testing.assert_array_equal(np.sort(r.neighbors, 1), np.sort(ref, 1))
    np.testing.assert_array_equal(r.k_occurrence, np.bincount(ref.ravel(), minlength=len(X)))
    assert r.k_occurrence.sum() == k * len(X) and r.k == k
    assert r.values["max_k_occurrence"] == r.k_occurrence.max()
    for name, ref_value in skhubness_reference(r.k_occurrence, k).items():
        assert r.values[name] == pytest.approx(ref_value, rel=1e-12, abs=1e-15), name


def test_measures_match_scipy_skew_and_the_skhubness_formulas():
    rng = np.random.default_rng(3)
    for nk in (rng.poisson(10, 500), rng.negative_binomial(2, 0.15, 800), np.r_[np.zeros(40, int), rng.poisson(5, 60)]):
        m = hb.occurrence_measures(nk, k=10)
        assert m["k_occurrence_skewness"] == pytest.approx(stats.skew(nk), rel=1e-12)
        ref = skhubness_reference(nk, 10)
        ref["hub_occurrence"] *= 10 * len(nk) / nk.sum()  # these N_k are not a k-NN graph: slots = sum N_k
        for name, value in ref.items():
            assert m[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name
        sd = nk.std()
        assert m["hub_fraction_2sd"] == pytest.approx(np.mean(nk > nk.mean() + 2 * sd))


def test_hand_computed_cases():
    # N_k = 0, 0, 1, 2, 7 with k = 2 (sum 10 = n k): mean 2, sum |dev| = 10, ordered-pair |diff| sum = 64
    m = hb.occurrence_measures([0, 0, 1, 2, 7], k=2)
    assert m["robin_hood_index"] == pytest.approx(0.5)       # 0.5 * 10 / 10
    assert m["k_occurrence_gini"] == pytest.approx(0.64)     # 64 / (2 * 5 * 10)
    assert m["hub_occurrence"] == pytest.approx(0.7)         # hub (N_k >= 4): 7 of the 10 slots
    assert m["antihub_occurrence"] == pytest.approx(0.4)
    assert m["max_k_occurrence"] == 7
    # the seed's Robin Hood code, sum(max(N_k - mean, 0)) / sum(N_k), is the same number
    assert m["robin_hood_index"] == pytest.approx(np.maximum(np.array([0, 0, 1, 2, 7]) - 2, 0).sum() / 10)
    flat = hb.occurrence_measures(np.full(50, 10), k=10)
    assert flat["robin_hood_index"] == 0 and flat["k_occurrence_gini"] == 0 and flat["antihub_occurrence"] == 0
    assert flat["hub_occurrence"] == 0 and np.isnan(flat["k_occurrence_skewness"])
    # one point takes every slot: Gini (n-1)/n, Robin Hood (n-1)/n
    star = hb.occurrence_measures([0] * 9 + [90], k=10)
    assert star["k_occurrence_gini"] == pytest.approx(0.9) and star["robin_hood_index"] == pytest.approx(0.9)
    assert star["hub_occurrence"] == 1.0 and star["antihub_occurrence"] == 0.9


def test_histogram_measures_are_vectorised_over_histograms():
    values = np.array([0, 1, 3, 8])
    C = np.array([[1, 2, 3, 4], [0, 5, 5, 0], [4, 0, 0, 1]])
    batch = hb.histogram_measures(values, C, k=2)
    for b in range(len(C)):
        one = hb.occurrence_measures(np.repeat(values, C[b]), k=2)
        for name, x in one.items():
            assert batch[name][b] == pytest.approx(x, nan_ok=True), name


def check_against_kiez(ref):
    """kiez's ``hubness_score`` on the brute-force 10-NN lists (hubs: N_k >= 2 k; hub occurrence over k n slots)."""
    X, nbrs = inputs.hubness_case()
    r = hb.measure_hubness(X, inputs.HUBNESS_K, n_boot=0)
    np.testing.assert_array_equal(np.sort(r.neighbors, 1), np.sort(nbrs, 1))  # the lists the peer was given
    assert r.values["k_occurrence_skewness"] == pytest.approx(ref["k_skewness"], rel=1e-10)
    assert r.values["robin_hood_index"] == pytest.approx(ref["robinhood"], rel=1e-10)
    assert r.values["k_occurrence_gini"] == pytest.approx(ref["gini"], rel=1e-10)
    assert r.values["hub_occurrence"] == pytest.approx(ref["hub_occurrence"], rel=1e-10)
    assert r.values["antihub_occurrence"] == pytest.approx(ref["antihub_occurrence"], rel=1e-10)
    np.testing.assert_array_equal(np.sort(r.hubs), np.sort(ref["hubs"]))


def test_measures_match_kiez_port_of_scikit_hubness():
    """Drift check against the installed kiez (not in the test extra: it pins numpy<2; see tests/reference/)."""
    pytest.importorskip("kiez.analysis")
    check_against_kiez(make_fixtures.kiez_values())


def test_measures_match_kiez_fixture():
    """kiez's values kept in tests/reference/peers.json: runs in CI."""
    check_against_kiez(make_fixtures.fixture("kiez"))


def test_skewness_verdict_uses_the_seed_bands():
    assert verdict("k_occurrence_skewness", 0.49) == "healthy"
    assert verdict("k_occurrence_skewness", 0.5) == "concerning"
    assert verdict("k_occurrence_skewness", 1.49) == "concerning"
    assert verdict("k_occurrence_skewness", 1.6) == "problematic"
    assert verdict("k_occurrence_skewness", -0.2) == "healthy"


def test_bad_k_is_refused():
    X = shifted_cloud(5, 3)
    with pytest.raises(ValueError, match="k = 5 needs more than 5 other points"):
        hb.measure_hubness(X, 5, n_boot=0)
    with pytest.raises(ValueError, match="positive integer"):
        hb.measure_hubness(X, 0, n_boot=0)
    with pytest.raises(ValueError, match="out of range"):
        hb.k_occurrence([[0, 7]], 5)


# ---------------------------------------------------------------------------------------------
# Bootstrap
# ---------------------------------------------------------------------------------------------

def test_histogram_bca_matches_scipy_bca_on_the_raw_values():
    """The multinomial histogram bootstrap is the point bootstrap: compare with stats.bootstrap_ci."""
    nk = np.random.default_rng(11).negative_binomial(3, 0.25, 400)
    cis, method = hb.occurrence_cis(nk, 10, n_boot=8000, seed=1)
    assert "BCa" in method and "held fixed" in method
    M = nk.max() + 1

    def raw_stat(name):
        def f(x, axis=-1):
            x = np.moveaxis(x, axis, -1)
            lead = x.shape[:-1]
            x = x.reshape(-1, x.shape[-1]).astype(int)
            C = np.bincount((x + M * np.arange(len(x))[:, None]).ravel(), minlength=len(x) * M).reshape(len(x), M)
            return hb.histogram_measures(np.arange(M), C, 10)[name].reshape(lead)
        return f
    for name in ("k_occurrence_skewness", "robin_hood_index", "k_occurrence_gini"):
        lo, hi = bootstrap_ci(raw_stat(name), nk, n_boot=8000, seed=2)
        width = hi - lo
        assert cis[name][0] == pytest.approx(lo, abs=0.08 * width), name
        assert cis[name][1] == pytest.approx(hi, abs=0.08 * width), name


def test_cis_cover_the_estimate_and_respect_bounds():
    r = hb.measure_hubness(shifted_cloud(800, 50, seed=2), 10, n_boot=500)
    for name, m in r.metrics.items():
        assert m.ci_low <= m.value <= m.ci_high, name
        if name != "k_occurrence_skewness":
            assert 0 <= m.ci_low and m.ci_high <= 1
    assert hb.measure_hubness(shifted_cloud(50, 5), 3, n_boot=0).metrics["robin_hood_index"].ci_low is None


# ---------------------------------------------------------------------------------------------
# Hubness reduction
# ---------------------------------------------------------------------------------------------

def test_csls_equals_dense_numpy_reference(monkeypatch):
    X = shifted_cloud(300, 20, seed=7)
    k = 8
    S = dense_cosine(X)
    r = np.sort(np.where(np.eye(len(X), dtype=bool), -np.inf, S), axis=1)[:, ::-1][:, :10].mean(1)
    csls = 2 * S - r[:, None] - r[None, :]
    ref = brute_knn(csls, k)
    monkeypatch.setattr(neighbours, "chunk_rows", lambda n, row_bytes, budget=None: 41)
    idx, val = hb.csls_knn(X, k, neighborhood=10)
    np.testing.assert_allclose(val, np.take_along_axis(csls, ref, 1), atol=2e-5)
    assert (np.sort(idx, 1) == np.sort(ref, 1)).mean() > 0.999  # float32 near-ties aside
    # passing r gives the same lists
    idx2, _ = hb.csls_knn(X, k, r=r)
    assert (idx2 == idx).mean() > 0.999


def test_mutual_proximity_equals_dense_scipy_reference(monkeypatch):
    X = shifted_cloud(300, 20, seed=8)
    S = dense_cosine(X)
    off = ~np.eye(len(X), dtype=bool)
    mu = np.array([S[i, off[i]].mean() for i in range(len(X))])
    sd = np.array([S[i, off[i]].std() for i in range(len(X))])
    m2, s2 = hb.cosine_mean_sd(X)
    np.testing.assert_allclose(m2, mu, atol=1e-12)
    np.testing.assert_allclose(s2, sd, atol=1e-10)
    logmp = log_ndtr((S - mu[:, None]) / sd[:, None]) + log_ndtr((S - mu[None, :]) / sd[None, :])
    ref = brute_knn(logmp, 6)
    monkeypatch.setattr(neighbours, "chunk_rows", lambda n, row_bytes, budget=None: 53)
    idx, val = hb.mutual_proximity_knn(X, 6)
    np.testing.assert_allclose(val, stats.norm.cdf((np.take_along_axis(S, ref, 1) - mu[:, None]) / sd[:, None])
                               * stats.norm.cdf((np.take_along_axis(S, ref, 1) - mu[ref]) / sd[ref]), rtol=1e-4)
    assert (np.sort(idx, 1) == np.sort(ref, 1)).mean() > 0.999


def test_reductions_lower_skewness_on_a_hubby_set():
    X = shifted_cloud(1500, 100, seed=4)
    base = hb.measure_hubness(X, 10, n_boot=0)
    assert base.values["k_occurrence_skewness"] > 1.5
    labels = np.where(X[:, 0] > np.median(X[:, 0]), "a", "b")
    eff = hb.hubness_reduction_effect(X, base, labels=labels, n_boot=200)
    t = eff.table.set_index("method")
    assert t.loc["cosine", "neighbour_overlap"] == 1.0
    for m in ("csls", "mutual_proximity"):
        assert t.loc[m, "skewness"] < 0.6 * t.loc["cosine", "skewness"], m
        assert t.loc[m, "robin_hood_index"] < t.loc["cosine", "robin_hood_index"], m
        assert 0 < t.loc[m, "neighbour_overlap"] < 1
        assert t.loc[m, "skew_ci_low"] <= t.loc[m, "skewness"] <= t.loc[m, "skew_ci_high"]
    rec = hb.reduction_metrics(eff)
    assert [x.name for x in rec] == ["k_occurrence_skewness_csls", "k_occurrence_skewness_mutual_proximity"]
    assert all(x.verdict is None for x in rec)
    assert "same label %" in ch.reduction_display_table(eff)


def test_overlap_and_label_agreement_hand_cases():
    a = np.array([[1, 2, 3], [0, 2, 3]])
    b = np.array([[3, 2, 0], [1, 4, 5]])
    assert hb.neighbour_overlap(a, b) == pytest.approx((2 / 3 + 0) / 2)
    labels = np.array(["x", "x", "y", None], dtype=object)
    nb = np.array([[1, 2], [0, 3], [0, 1], [0, 1]])
    # pairs with a known label on both ends: (0,1) same, (0,2) diff, (1,0) same, (2,0) diff, (2,1) diff
    assert hb.label_agreement(nb, labels) == pytest.approx(2 / 5)


# ---------------------------------------------------------------------------------------------
# Who the hubs are, retrieval across kinds, narrative and figures
# ---------------------------------------------------------------------------------------------

def test_cross_kind_hubness_equals_brute_force():
    rng = np.random.default_rng(9)
    X = np.vstack([rng.standard_normal((120, 16)) + 1.0, rng.standard_normal((60, 16))]).astype(np.float32)
    kinds = np.array(["user"] * 120 + ["item"] * 60, dtype=object)
    cross = hb.cross_kind_hubness(X, kinds, 5, n_boot=100)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    users, items = np.flatnonzero(kinds == "user"), np.flatnonzero(kinds == "item")
    ref = np.argsort(-(U[users] @ U[items].T), axis=1)[:, :5]
    nk = np.bincount(ref.ravel(), minlength=len(items))
    np.testing.assert_array_equal(cross.k_occurrence[("user", "item")], nk)
    row = cross.table.set_index(["queries", "index"]).loc[("user", "item")]
    assert row["mean N_k"] == pytest.approx(5 * 120 / 60)
    assert row["skewness"] == pytest.approx(stats.skew(nk))
    assert row["antihub_occurrence"] == pytest.approx((nk == 0).mean())
    assert row["top_hub_reach"] == pytest.approx(nk.max() / 120)
    assert set(cross.table["queries"]) == {"user", "item"}


def demo_like(n=300, seed=0):
    X = shifted_cloud(n, 32, seed=seed)
    ids = np.array([f"id_{i}*<{i}>" for i in range(n)], dtype=object)
    meta = pd.DataFrame({"kind": np.where(np.arange(n) < n // 2, "user", "item"),
                         "label": np.array(["a", "b", "c"])[np.arange(n) % 3],
                         "frequency": np.arange(n), "title": [f'T{i} <x> & "q"' for i in range(n)]},
                        index=pd.Index(ids, name="id"))
    return X, ids, meta


def test_tables_narrative_and_figures_on_a_small_set():
    X, ids, meta = demo_like()
    r = hb.measure_hubness(X, 10, n_boot=100)
    hubs = hb.hub_table(r, ids, meta, which="hubs", n=5)
    assert list(hubs["N_k"]) == sorted(r.k_occurrence, reverse=True)[:5]
    assert {"kind", "label", "frequency", "title"} <= set(hubs.columns)
    anti = hb.hub_table(r, ids, meta, which="antihubs", n=5)
    assert list(anti["N_k"]) == sorted(r.k_occurrence)[:5]
    # tables escape user strings themselves: a raw id with markdown/HTML specials stays literal
    md = Table(hubs)._repr_markdown_()
    assert "&lt;" in md and "\\*" in md and "<x>" not in md
    groups = hb.hubness_by_group(r, meta["kind"], column="kind")
    assert groups["n"].sum() == len(X) and groups["share of slots %"].sum() == pytest.approx(100)
    assert ch.kind_column(meta) == "kind" and ch.kind_column(meta[["label"]]) is None
    eff = hb.hubness_reduction_effect(X, r, labels=meta["label"], n_boot=50)
    cross = hb.cross_kind_hubness(X, meta["kind"], 10, n_boot=50)
    text = ch.narrative(r, ids, meta, eff, cross)
    assert "skewness" in text and "id\\_" in text and "\\*&lt;" in text  # ids escaped for markdown and HTML
    assert "*<" not in text
    assert f"{r.values['k_occurrence_skewness']:.2f}" in text
    box = ch.impact_callout(r, cross)
    assert box["kind"] in ("success", "warning", "danger") and "§217.1.2" in box["text"]
    assert hb.cross_hub_table(cross, ("user", "item"), ids, meta, n=3).shape[0] == 3
    import matplotlib.pyplot as plt
    for fig in (ch.k_occurrence_figure(r, meta["kind"]), ch.k_occurrence_figure(r), ch.reduction_figure(eff, 10)):
        fig.savefig(__import__("io").BytesIO(), format="png")  # renders every label (mathtext included)
        plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Degenerate but valid sets: adapt k, warn what is undefined, skip with a reason
# ---------------------------------------------------------------------------------------------

class _Set:
    """The part of an EmbeddingSet that a precheck reads."""

    def __init__(self, X):
        self.vectors, self.n = np.asarray(X, np.float32), len(X)


def test_k_adapts_to_small_sets_and_tiny_sets_are_skipped():
    assert hb.usable_k(10, 5000) == 10 and hb.usable_k(10, 12) == 10 and hb.usable_k(10, 11) == 9
    assert hb.usable_k(10, 3) == 1 and hb.usable_k(10, 2) == 0  # kernels.neighbours.usable_k: the one clip of k
    X = np.random.default_rng(0).standard_normal((3, 2))
    r = hb.measure_hubness(X, hb.usable_k(10, 3))
    assert r.k == 1 and r.k_occurrence.sum() == 3 and np.isfinite(r.values["robin_hood_index"])
    eff = hb.hubness_reduction_effect(X, r, n_boot=50)
    assert len(eff.table) == 3
    text = ch.narrative(r, reduction=eff, k_requested=10)
    assert "$k = 1$ is used" in text and "nan" not in text
    assert "at least 3 vectors" in ch.precheck(_Set(X[:2]), None, None)
    assert ch.precheck(_Set(X), None, None) is None


def test_d_greater_than_n():
    X = np.random.default_rng(1).standard_normal((10, 50))
    r = hb.measure_hubness(X, hb.usable_k(10, 10), n_boot=200)
    assert r.k == 8 and r.k_occurrence.sum() == 80 and not r.all_ties
    assert all(m.value is not None for m in r.metrics.values())


def test_identical_rows_are_all_ties_undefined_and_skipped():
    X = np.tile(np.arange(1, 9, dtype=np.float32), (200, 1))
    with pytest.warns(UndefinedMetricWarning, match="ties broken arbitrarily"):
        r = hb.measure_hubness(X, 10)
    assert r.all_ties and all(np.isnan(m.value) and m.verdict is None and m.ci_low is None and "ties" in m.note
                              for m in r.metrics.values())
    assert np.isnan(r.centroid_spearman)
    assert "same direction" in ch.precheck(_Set(X), None, None)
    assert ch.precheck(_Set(X * np.arange(1, 201)[:, None]), None, None)  # scaled copies point the same way too


def test_equal_spacing_is_no_hubness_not_ties():
    """A regular polygon: every point's two nearest neighbours tie, but k = 2 lists both, so the lists are
    defined; every point is listed twice, so the skewness is 0/0 (warned) and the inequality measures 0."""
    a = np.linspace(0, 2 * np.pi, 8, endpoint=False)
    X = np.c_[np.cos(a), np.sin(a)]
    with pytest.warns(UndefinedMetricWarning, match="no spread"):
        r = hb.measure_hubness(X, 2, n_boot=100)
    assert not r.all_ties and (r.k_occurrence == 2).all()
    assert np.isnan(r.values["k_occurrence_skewness"]) and r.metrics["k_occurrence_skewness"].verdict is None
    assert r.values["robin_hood_index"] == 0 and r.values["k_occurrence_gini"] == 0
    text = ch.narrative(r)
    assert "undefined" in text and "nan" not in text
    import matplotlib.pyplot as plt
    plt.close(ch.k_occurrence_figure(r))


def test_one_class_labels_and_299_vs_1():
    X = np.random.default_rng(2).standard_normal((300, 8))
    r = hb.measure_hubness(X, 10, n_boot=0)
    one = hb.hubness_reduction_effect(X, r, labels=np.array(["a"] * 300), n_boot=0)
    assert (one.table["label_agreement"] == 1.0).all()
    rare = hb.hubness_reduction_effect(X, r, labels=np.array(["a"] * 299 + ["b"]), n_boot=0)
    assert rare.table["label_agreement"].between(0.99, 1.0).all()


def test_hub_captions_say_when_fewer_points_are_hubs():
    X = np.random.default_rng(3).standard_normal((12, 4))
    r = hb.measure_hubness(X, 10, n_boot=0)
    hubs, anti = ch._hub_captions(r, 10)
    assert "most listed points" in hubs and "least listed points" in anti and "0 of them are antihubs" in anti
