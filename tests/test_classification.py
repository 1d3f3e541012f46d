"""Node classification and clustering alignment against scikit-learn on the same folds, labels and
samples (cross_val_score / cross_val_predict, sklearn.metrics), planted structure, and label edge cases."""
import json

import matplotlib

matplotlib.use("Agg")

import nbformat
import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA
from sklearn.dummy import DummyClassifier
from sklearn.metrics import (adjusted_mutual_info_score, adjusted_rand_score, f1_score, normalized_mutual_info_score,
                             silhouette_samples, silhouette_score)
from sklearn.model_selection import StratifiedKFold, StratifiedShuffleSplit, cross_val_predict, cross_val_score

from embeval_report.chapters.registry import chapter as declared
from embeval_report.chapters import clustering as cl_chapter  # noqa: E402
from embeval_report.chapters import node_classification as nc_chapter  # noqa: E402
from embeval_report.metrics import classification as mcl  # noqa: E402
from embeval_report.metrics import clustering as mclu  # noqa: E402
from embeval_report.errors import InputError
from embeval_report.chapters.node_classification import exclusion_text
from embeval_report.metrics import clustering as clu
from embeval_report.kernels import silhouette
from embeval_report.resources import notebooks_dir


def blobs(n_per=60, n_classes=4, d=16, sep=6.0, noise=1.0, seed=0, names=None):
    """Well-separated Gaussian classes around random directions (far from the origin, so cosine sees them)."""
    rng = np.random.default_rng(seed)
    centres = sep * rng.standard_normal((n_classes, d))
    y = np.repeat(np.arange(n_classes), n_per)
    X = centres[y] + noise * rng.standard_normal((len(y), d))
    names = names or [f"class{c}" for c in range(n_classes)]
    return X.astype(np.float32), np.array([names[c] for c in y], dtype=object)


@pytest.fixture(scope="module")
def noisy():
    """Overlapping classes of unequal size: the probe is good but not perfect."""
    rng = np.random.default_rng(3)
    sizes = [90, 60, 40, 30]
    y = np.repeat(np.arange(4), sizes)
    centres = 1.2 * rng.standard_normal((4, 10))
    X = centres[y] + rng.standard_normal((len(y), 10))
    return X, np.array(["w", "x", "y", "z"], dtype=object)[y]


@pytest.fixture(scope="module")
def noisy_result(noisy):
    X, y = noisy
    return mcl.evaluate_node_classification(X, y, train_fractions=(0.3, 0.7), n_repeats=3, seed=4)


# ---------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------

def test_missing_labels_are_excluded_and_counted():
    labels = ["a", None, "b", np.nan, "a", "", "  ", "b"] * 5
    ls = mcl.prepare_labels(labels, min_class_size=2)
    assert ls.n_missing == 20 and ls.n == 20 and ls.n_total == 40
    assert set(ls.classes) == {"a", "b"}
    assert all(labels[r] in ("a", "b") for r in ls.rows)
    assert "20 of 40 entities have no `label`" in exclusion_text(ls)


def test_numeric_labels_compare_as_text_and_pandas_na():
    s = pd.Series([1.0, 2.0, None, 1.0, 2.0, 1.0], dtype=object)
    ls = mcl.prepare_labels(s, min_class_size=2)
    assert ls.classes == ("1", "2") and ls.n_missing == 1
    ls2 = mcl.prepare_labels(pd.array(["a", pd.NA, "b", "a", "b"], dtype="string"), min_class_size=2)
    assert ls2.n_missing == 1 and ls2.classes == ("a", "b")


def test_rare_classes_are_dropped_with_a_note():
    labels = ["big"] * 20 + ["mid"] * 8 + ["rare"] * 3 + ["solo"]
    ls = mcl.prepare_labels(labels, min_class_size=5)
    assert ls.classes == ("big", "mid")  # largest class first
    assert ls.dropped == {"rare": 3, "solo": 1}
    assert ls.n == 28 and set(np.asarray(labels, dtype=object)[ls.rows]) == {"big", "mid"}
    text = exclusion_text(ls)
    assert "2 classes with fewer than 5 members" in text and "rare (3)" in text and "4 entities" in text


@pytest.mark.parametrize("labels, message", [
    (["only"] * 30, "only one class ('only', 30 entities)"),
    ([None] * 10, "no entity has a label (all 10 values are missing)"),
    (["a"] * 30 + ["b"] * 2, "smaller classes: 'b' (2)"),
])
def test_unusable_labels_raise_input_error(labels, message):
    with pytest.raises(InputError, match="metadata column 'label'") as e:
        mcl.prepare_labels(labels)
    assert message in str(e.value)
    X = np.random.default_rng(0).standard_normal((len(labels), 4))
    with pytest.raises(InputError):
        mcl.evaluate_node_classification(X, labels)
    with pytest.raises(InputError):
        mclu.evaluate_clustering(X, labels)


def test_label_length_must_match_vectors():
    with pytest.raises(InputError, match="expected one label per vector \\(5\\)"):
        mcl.prepare_labels(["a", "b"], n=5)


# ---------------------------------------------------------------------------------------------
# Node classification against scikit-learn on the same folds
# ---------------------------------------------------------------------------------------------

def test_fold_scores_equal_cross_val_score(noisy, noisy_result):
    X, y = noisy
    r = noisy_result
    cv = StratifiedKFold(5, shuffle=True, random_state=4)
    probe = r.folds[r.folds.model == "probe"]
    for scoring, col in (("accuracy", "accuracy"), ("f1_micro", "micro_f1"), ("f1_macro", "macro_f1")):
        ref = cross_val_score(mcl.make_probe(seed=4), X, y, cv=cv, scoring=scoring)
        np.testing.assert_allclose(probe[col].to_numpy(), ref, atol=1e-12)
        assert r.values[col] == pytest.approx(ref.mean())
        assert r.values[col + "_std"] == pytest.approx(ref.std(ddof=1))
    maj = cross_val_score(DummyClassifier(strategy="most_frequent"), X, y, cv=cv, scoring="accuracy")
    assert r.values["majority_accuracy"] == pytest.approx(maj.mean())
    assert r.values["majority_accuracy"] == pytest.approx(90 / 220, abs=0.01)
    strat = [f1_score(y[te], DummyClassifier(strategy="stratified", random_state=4 + f).fit(X[tr], y[tr]).predict(X[te]),
                      average="macro") for f, (tr, te) in enumerate(cv.split(X, y))]
    assert r.values["stratified_macro_f1"] == pytest.approx(np.mean(strat))
    assert r.values["chance_accuracy_expected"] == pytest.approx(sum((s / 220) ** 2 for s in (90, 60, 40, 30)))
    assert r.values["micro_f1"] == pytest.approx(r.values["accuracy"])  # one label per entity


def test_t_interval_matches_scipy(noisy_result):
    r = noisy_result
    acc = r.folds[r.folds.model == "probe"]["accuracy"].to_numpy()
    lo, hi = stats.t.interval(0.95, len(acc) - 1, loc=acc.mean(), scale=stats.sem(acc))
    m = r.metrics["accuracy"]
    assert (m.ci_low, m.ci_high) == (pytest.approx(lo), pytest.approx(hi))
    assert "Student-t" in m.ci_method and m.verdict is None and m.direction == "higher"
    assert set(r.metrics) == {"accuracy", "micro_f1", "macro_f1"}


def test_out_of_fold_predictions_and_per_class_f1(noisy, noisy_result):
    X, y = noisy
    r = noisy_result
    cv = StratifiedKFold(5, shuffle=True, random_state=4)
    oof = cross_val_predict(mcl.make_probe(seed=4), X, y, cv=cv)
    np.testing.assert_array_equal(np.asarray(r.labels.classes, dtype=object)[r.predictions], oof)
    ref = dict(zip(r.labels.classes, f1_score(y, oof, labels=list(r.labels.classes), average=None)))
    for _, row in r.per_class.iterrows():
        assert row["F1"] == pytest.approx(ref[row["class"]])
    assert r.confusion.sum() == len(y) and np.trace(r.confusion) == (oof == y).sum()
    pairs = mcl.confused_pairs(r, top=3)
    assert len(pairs) <= 3 and (pairs["share of the true class %"].diff().dropna() <= 0).all()


def test_learning_curve_matches_manual_splits(noisy, noisy_result):
    X, y = noisy
    r = noisy_result
    codes = r.labels.codes
    split = StratifiedShuffleSplit(n_splits=3, train_size=0.3, random_state=4)
    ref = [np.mean(mcl.make_probe(seed=4).fit(X[tr], codes[tr]).predict(X[te]) == codes[te])
           for tr, te in split.split(X, codes)]
    got = r.learning[r.learning.train_fraction == 0.3]["accuracy"].to_numpy()
    np.testing.assert_allclose(got, ref)
    s = r.learning_summary
    assert list(s["train_fraction"]) == [0.3, 0.7] and list(s["repeats"]) == [3, 3]
    assert s.loc[0, "accuracy_std"] == pytest.approx(np.std(ref, ddof=1))
    assert list(nc_chapter.learning_display_table(r)["training entities"]) == [66, 154]


def test_folds_and_curve_from_one_pool_equal_them_one_after_the_other(noisy, noisy_result, monkeypatch):
    """probe_fits runs the folds' and the curve's fits in one pool, longest first: the folds' predictions and the
    curve of evaluate_node_classification fitting them one after the other, bit for bit; so is a forced big problem
    (the folds on threaded BLAS, the curve's sampled fits after them)."""
    X, y = noisy
    plan = mcl.probe_plan(mcl.as_labelset(y, len(X), 5, "label"), seed=4)
    units, learning = mcl.probe_fits(X, plan, train_fractions=(0.3, 0.7), n_repeats=3)
    pd.testing.assert_frame_equal(units, mcl.probe_units(X, plan))
    pd.testing.assert_frame_equal(learning, noisy_result.learning)
    r = mcl.evaluate_node_classification(X, y, train_fractions=(0.3, 0.7), n_repeats=3, seed=4, plan=plan,
                                         units=units, learning=learning)
    assert r.values == noisy_result.values and r.info == noisy_result.info
    curve_only = mcl.probe_fits(X, plan, folds=False, train_fractions=(0.3, 0.7), n_repeats=3)
    assert curve_only[0] is None
    pd.testing.assert_frame_equal(curve_only[1], learning)
    monkeypatch.setattr(mcl, "small_problem", lambda n, d: n < 150)  # the folds' problem big, the curve's small
    separate = mcl.probe_fits(X, plan, train_fractions=(0.3, 0.7), n_repeats=3, curve_entities=100)
    pd.testing.assert_frame_equal(separate[0], units)
    assert list(separate[1]["n_train"]) == [30] * 3 + [70] * 3


def test_fold_scores_equal_scikit_learn_bit_for_bit():
    """Accuracy and micro/macro-F1 from the class counts: scikit-learn's values exactly, absent classes included."""
    from sklearn.metrics import accuracy_score, f1_score

    rng = np.random.default_rng(11)
    for trial in range(300):
        C, n = int(rng.integers(2, 30)), int(rng.integers(1, 300))
        y = rng.integers(0, C if trial % 4 else max(1, C // 3), n)  # every 4th: most classes absent
        p = np.zeros(n, int) if trial % 5 == 0 else np.where(rng.random(n) < rng.random(), y, rng.integers(0, C, n))
        labels = np.arange(C)
        assert mcl.fold_scores(y, p, C) == {
            "accuracy": accuracy_score(y, p),
            "micro_f1": f1_score(y, p, labels=labels, average="micro", zero_division=0),
            "macro_f1": f1_score(y, p, labels=labels, average="macro", zero_division=0)}


def test_learning_curve_on_a_stated_sample_above_curve_entities(noisy, noisy_result):
    """Above ``curve_entities`` each split is a stratified sample of that many entities: trained on the fraction of
    it, scored on the rest of it (manual StratifiedShuffleSplit with those sizes); the cross-validation is unchanged,
    and the chapter says so next to the curve."""
    X, y = noisy
    r = mcl.evaluate_node_classification(X, y, train_fractions=(0.3, 0.7), n_repeats=3, seed=4, curve_entities=100)
    codes = r.labels.codes
    split = StratifiedShuffleSplit(n_splits=3, train_size=30, test_size=70, random_state=4)
    ref = [np.mean(mcl.make_probe(seed=4).fit(X[tr], codes[tr]).predict(X[te]) == codes[te])
           for tr, te in split.split(X, codes)]
    np.testing.assert_allclose(r.learning[r.learning.train_fraction == 0.3]["accuracy"].to_numpy(), ref)
    assert list(r.learning_summary["n_train"]) == [30, 70] and r.info["curve_sample"] == 100
    assert r.values == noisy_result.values and np.array_equal(r.predictions, noisy_result.predictions)
    assert noisy_result.info["curve_sample"] is None  # 220 entities, under the default 5,000: every entity
    assert "a stratified sample of 100 of the 220 entities" in nc_chapter.classification_narrative(r)
    fig = nc_chapter.learning_curve_figure(r)  # x: the share of all 220 entities trained on
    np.testing.assert_allclose(np.asarray(fig.axes[0].lines[0].get_xdata(), float), [30 / 220, 70 / 220])


def test_fraction_too_small_for_every_class_is_skipped():
    X, y = blobs(n_per=6, n_classes=4)
    r = mcl.evaluate_node_classification(X, y, train_fractions=(0.1, 0.5), n_repeats=2)
    assert list(r.learning_summary["train_fraction"]) == [0.5]  # 10 % of 24 cannot hold 4 classes


def test_planted_classes_are_decoded_and_random_labels_are_not():
    X, y = blobs(n_per=50, n_classes=4)
    r = mcl.evaluate_node_classification(X, y, train_fractions=(0.1,), n_repeats=2)
    assert r.values["accuracy"] >= 0.99 and r.values["macro_f1"] >= 0.99
    assert r.learning_summary.loc[0, "accuracy_mean"] >= 0.95
    assert nc_chapter.decodability(r) == "almost perfectly"
    rng = np.random.default_rng(1)
    y_rand = rng.choice(["p", "q", "r"], len(X), p=[0.5, 0.3, 0.2])
    r0 = mcl.evaluate_node_classification(X, y_rand, train_fractions=())
    assert abs(r0.values["accuracy"] - r0.values["majority_accuracy"]) < 0.1
    assert nc_chapter.decodability(r0) == "not detectably"


def test_stratified_subsample_above_max_entities():
    X, y = blobs(n_per=75, n_classes=4)
    r = mcl.evaluate_node_classification(X, y, train_fractions=(), max_entities=200, seed=2)
    assert r.n == 200 and r.labels.sampled_from == 300
    assert sorted(r.labels.counts) == [50, 50, 50, 50]
    assert "stratified random sample of 200 of the 300" in exclusion_text(r.labels)


def test_by_group_runs_its_own_probe_and_reports_unusable_groups():
    X, y = blobs(n_per=40, n_classes=2)
    groups = np.array(["user"] * 40 + ["item"] * 40, dtype=object)  # each group holds one class only
    groups[::4] = "mixed"
    y2 = y.copy()
    t = mcl.node_classification_by_group(X, y2, groups, column="kind", seed=0)
    assert list(t["kind"]) == ["item", "mixed", "user"]
    mixed = t[t.kind == "mixed"].iloc[0]
    ref = mcl.evaluate_node_classification(X[groups == "mixed"], y2[groups == "mixed"], train_fractions=())
    assert mixed["accuracy"] == pytest.approx(ref.values["accuracy"])
    assert "only one class" in t[t.kind == "user"].iloc[0]["note"]


def test_narrative_and_tables_escape_labels(noisy):
    X, _ = noisy
    y = np.array(["a_b*", "<i>x</i>", "$y$", "z"] * 55, dtype=object)
    r = mcl.evaluate_node_classification(X, y, train_fractions=(0.5,), n_repeats=2)
    text = nc_chapter.classification_narrative(r)
    assert "<i>" not in text and "&lt;i&gt;" in text
    assert "5-fold stratified cross-validation" in text and f"{r.values['accuracy']:.3f}" in text
    t = nc_chapter.summary_table(r)
    assert list(t["model"])[0].startswith("logistic") and "accuracy 95% CI" in t
    for fig in (nc_chapter.learning_curve_figure(r), nc_chapter.confusion_figure(r)):
        fig.canvas.draw()
        assert fig.axes
    rec = nc_chapter.classification_record(r)
    json.dumps(rec, default=str)
    assert rec["baselines"]["majority"]["accuracy"] == r.values["majority_accuracy"]


@pytest.mark.parametrize("cores", [1, 2])
def test_aside_runs_with_the_callers_context_and_reraises(cores, monkeypatch):
    """labels.aside: the result of the call, in the caller's context variables (the chapter's compute context), in
    another thread on two cores (in turn on one), and the call's exception raised when collected."""
    import contextvars
    import threading
    from embeval_report.metrics import labels as mlab

    monkeypatch.setattr(mlab, "_cores", lambda: cores)
    var = contextvars.ContextVar("var", default="unset")
    var.set("caller")
    got = mlab.aside(lambda a, b=0: (a + b, var.get(), threading.get_ident()), 1, b=2)()
    assert got[:2] == (3, "caller") and (got[2] != threading.get_ident()) == (cores == 2)

    def fails():
        raise ValueError("inside")
    if cores == 2:
        done = mlab.aside(fails)
        with pytest.raises(ValueError, match="inside"):
            done()
    else:
        with pytest.raises(ValueError, match="inside"):
            mlab.aside(fails)


def test_fits_side_by_side_equal_one_after_the_other(noisy, monkeypatch):
    """The probe's fits run two at a time (each single-threaded) for a small problem: the same predictions, scores and
    learning curve as one after the other, and every fit that hits max_iter is counted."""
    from embeval_report.metrics import labels as mlab

    X, y = noisy
    monkeypatch.setattr(mlab, "_cores", lambda: 2)
    side = mcl.evaluate_node_classification(X, y, train_fractions=(0.3, 0.7), n_repeats=2, max_iter=3)
    monkeypatch.setattr(mlab, "_cores", lambda: 1)
    seq = mcl.evaluate_node_classification(X, y, train_fractions=(0.3, 0.7), n_repeats=2, max_iter=3)
    np.testing.assert_array_equal(side.predictions, seq.predictions)
    pd.testing.assert_frame_equal(side.learning, seq.learning)
    assert side.values == seq.values
    assert side.info["not_converged_fits"] == seq.info["not_converged_fits"] == 5 + 4


# ---------------------------------------------------------------------------------------------
# Clustering alignment against sklearn.metrics
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("chunk", [None, 7])
def test_silhouette_values_equal_sklearn(chunk, monkeypatch):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((90, 6)) + 0.3
    labels = rng.integers(0, 4, 90)
    labels[17] = 9  # a singleton cluster: s = 0 by convention
    if chunk:
        monkeypatch.setattr(silhouette, "chunk_rows", lambda n, row_bytes, budget=None: chunk)
    got = mclu.silhouette_values(X, labels, device="cpu")
    ref = silhouette_samples(X, labels, metric="cosine")
    np.testing.assert_allclose(got, ref, atol=1e-10)
    assert got[17] == 0
    with pytest.raises(ValueError, match="2 ≤ number of clusters"):
        mclu.silhouette_values(X, np.zeros(90))


@pytest.fixture(scope="module")
def noisy_clusters(noisy):
    X, y = noisy
    return mclu.evaluate_clustering(X, y, n_seed_runs=4, silhouette_sample=150, n_boot=200, seed=1, device="cpu")


def test_clustering_scores_equal_sklearn(noisy, noisy_clusters):
    X, y = noisy
    r = noisy_clusters
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    ref = KMeans(n_clusters=4, n_init=10, random_state=1).fit_predict(U)
    assert adjusted_rand_score(ref, r.clusters) == pytest.approx(1.0)
    names = y[r.labels.rows]
    assert r.values["ari"] == pytest.approx(adjusted_rand_score(names, r.clusters))
    assert r.values["nmi"] == pytest.approx(normalized_mutual_info_score(names, r.clusters))
    assert r.values["ami"] == pytest.approx(adjusted_mutual_info_score(names, r.clusters))
    s = r.sample
    assert len(s) == 150 and len(np.unique(s)) == 150
    assert r.values["silhouette"] == pytest.approx(silhouette_score(U[s], r.clusters[s], metric="cosine"), abs=1e-10)
    assert r.values["label_silhouette"] == pytest.approx(silhouette_score(U[s], names[s], metric="cosine"), abs=1e-10)
    assert "sample of 150 of the 220" in r.metrics["silhouette"].ci_method
    assert r.metrics["silhouette"].ci_low < r.values["silhouette"] < r.metrics["silhouette"].ci_high
    assert all(m.verdict is None for m in r.metrics.values())
    assert set(r.metrics) == {"ari", "nmi", "ami", "silhouette", "label_silhouette"}


def test_restarts_and_the_ari_interval(noisy, noisy_clusters):
    """The fit's 10 restarts are kept: the one of lowest inertia is KMeans(n_init=10)'s partition bit for bit, every
    restart is a converged k-means partition (its inertia the squared distances to its cluster means, every row
    nearest its own cluster's mean), and their ARI range is stated. The interval is a bootstrap over the entities."""
    X, y = noisy
    r = noisy_clusters
    U = mclu.unit_vectors(X[r.labels.rows])
    with mclu.threads(*U.shape):  # the threads the package fits with (the inertia's sum depends on them)
        km = KMeans(4, n_init=10, random_state=1).fit(U)
    best, inertia, _, restarts = mclu.kmeans_restarts(U, 4, seed=1)
    np.testing.assert_array_equal(best, km.labels_)
    assert inertia == km.inertia_ and np.array_equal(r.clusters, km.labels_)
    assert len(restarts) == 10 and min(i for _, i in restarts) == inertia
    U64 = U.astype(np.float64)
    for labels, inert in restarts:
        means = np.array([U64[labels == c].mean(0) for c in range(4)])
        d2 = ((U64[:, None, :] - means[None]) ** 2).sum(-1)
        assert inert == pytest.approx(d2[np.arange(len(U)), labels].sum(), rel=1e-5)
        assert (d2[np.arange(len(U)), labels] <= d2.min(1) + 1e-6).all()
    names = y[r.labels.rows]
    aris = [adjusted_rand_score(names, labels) for labels, _ in restarts]
    np.testing.assert_allclose(r.seed_runs["ari"], aris)
    assert f"restarts ARI ranged {min(aris):.3f}–{max(aris):.3f}" in r.info["interval_over"]
    # the interval: scikit-learn's ARI and NMI of each bootstrap resample (entities repeated by their weights)
    from embeval_report.stats import bootstrap_weights
    W = bootstrap_weights(len(names), 200, 1).astype(int)
    idx = [np.repeat(np.arange(len(names)), w) for w in W]
    for name, fn in (("ari", adjusted_rand_score), ("nmi", normalized_mutual_info_score)):
        lo, hi = np.quantile([fn(names[i], r.clusters[i]) for i in idx], [0.025, 0.975])
        assert (r.metrics[name].ci_low, r.metrics[name].ci_high) == (pytest.approx(lo), pytest.approx(hi))
    assert "percentile bootstrap over the 220 entities (200 resamples" in r.metrics["ari"].ci_method


def test_restarts_equal_kmeans_n_init_on_harder_sets():
    """KMeans(n_init=10)'s partition and inertia, bit for bit, on overlapping clusters where the restarts differ."""
    rng = np.random.default_rng(11)
    for n, d, k, seed in ((600, 20, 6, 0), (900, 48, 9, 3)):
        X = (0.3 * rng.standard_normal((k, d)))[rng.integers(0, k, n)] + rng.standard_normal((n, d))
        U = mclu.unit_vectors(X.astype(np.float32))
        best, inertia, _, restarts = mclu.kmeans_restarts(U, k, seed=seed)
        with mclu.threads(*U.shape):
            km = KMeans(k, n_init=10, random_state=seed).fit(U)
        np.testing.assert_array_equal(best, km.labels_)
        assert inertia == km.inertia_ and len({round(i, 3) for _, i in restarts}) > 1


def test_sweep_is_warm_started_and_scored_like_sklearn(noisy, noisy_clusters):
    """Each k of the sweep is a converged k-means partition with k clusters (every row nearest its own cluster's
    mean), and its row holds scikit-learn's ARI, NMI and cosine silhouette of that partition."""
    X, y = noisy
    r = noisy_clusters
    U = mclu.unit_vectors(X[r.labels.rows])
    U64, s, names = U.astype(np.float64), r.sample, y[r.labels.rows]
    fits = mclu.sweep_fits(U, r.k, r.clusters, r.values["inertia"], seed=1)
    assert sorted(fits) == list(r.sweep["k"]) == [2, 3, 4, 5, 6, 7]
    for row in r.sweep.itertuples():
        labels, inertia = fits[row.k]
        assert len(np.unique(labels)) == row.k and inertia == row.inertia
        means = np.array([U64[labels == c].mean(0) for c in range(row.k)])
        d2 = ((U64[:, None, :] - means[None]) ** 2).sum(-1)
        assert (d2[np.arange(len(U)), labels] <= d2.min(1) + 1e-6).all()
        assert row.ari == pytest.approx(adjusted_rand_score(names, labels), abs=1e-12)
        assert row.nmi == pytest.approx(normalized_mutual_info_score(names, labels), abs=1e-12)
        assert row.silhouette == pytest.approx(silhouette_score(U[s], labels[s], metric="cosine"), abs=1e-10)
    assert "neighbouring k" in r.info["sweep_method"]


def test_sweep_covers_the_seeds_range(noisy_clusters):
    sw = noisy_clusters.sweep
    assert list(sw["k"]) == [2, 3, 4, 5, 6, 7]
    assert sw.loc[sw.k == 4, "ari"].item() == pytest.approx(noisy_clusters.values["ari"])


def test_planted_clusters_align_and_random_labels_do_not():
    X, y = blobs(n_per=50, n_classes=5, seed=2)
    r = mclu.evaluate_clustering(X, y, n_seed_runs=2, sweep=False, n_boot=100)
    assert r.values["ari"] == pytest.approx(1.0) and r.values["nmi"] == pytest.approx(1.0)
    assert r.values["cluster_accuracy"] == 1.0 and r.values["silhouette"] > 0.5
    assert "reproduce the classes almost exactly" in cl_chapter.clustering_narrative(r)
    rng = np.random.default_rng(0)
    aris = [mclu.evaluate_clustering(X, rng.choice(["a", "b", "c"], len(X)), n_seed_runs=0, sweep=False,
                                    n_boot=0, seed=s).values["ari"] for s in range(4)]
    assert abs(np.mean(aris)) < 0.02  # E[ARI] = 0 for a random labelling


def test_minibatch_above_threshold():
    X, y = blobs(n_per=50, n_classes=3, seed=4)
    r = mclu.evaluate_clustering(X, y, n_seed_runs=0, sweep=False, n_boot=0, minibatch_threshold=100)
    assert r.algorithm.startswith("MiniBatchKMeans") and r.values["ari"] > 0.95


def test_matching_and_contingency():
    cont = np.array([[0, 8, 2], [9, 1, 0], [1, 0, 7]])
    np.testing.assert_array_equal(mclu.match_clusters(cont), [1, 0, 2])
    X, y = blobs(n_per=30, n_classes=3, seed=6)
    r = mclu.evaluate_clustering(X, y, n_seed_runs=0, sweep=False, n_boot=0)
    t = cl_chapter.contingency_table(r)
    assert t["entities"].tolist() == [30, 30, 30]
    assert t.drop(columns=["class", "entities"]).to_numpy().sum() == 90


def test_partition_agreement_and_by_group():
    X, y = blobs(n_per=40, n_classes=4, seed=7)
    kinds = np.where(np.isin(y, ["class0", "class1"]), "user", "item").astype(object)
    r = mclu.evaluate_clustering(X, y, n_seed_runs=0, sweep=False, n_boot=0)
    agree = mclu.partition_agreement(r.clusters, kinds[r.labels.rows])
    assert agree["ari"] == pytest.approx(adjusted_rand_score(kinds, r.clusters))
    t = mclu.clustering_by_group(X, y, kinds, column="kind")
    assert list(t["kind"]) == ["item", "user"] and (t["ARI"] > 0.95).all() and (t["k"] == 2).all()


def test_pca_projection_matches_sklearn_pca(noisy, noisy_clusters):
    X, _ = noisy
    p = mclu.project(X, noisy_clusters.labels, method="pca", device="cpu")
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    ref = PCA(2).fit(U)
    Z = ref.transform(U)
    for j in range(2):
        assert abs(np.corrcoef(p.coords[:, j], Z[p.positions, j])[0, 1]) == pytest.approx(1.0, abs=1e-8)
    np.testing.assert_allclose(p.explained, ref.explained_variance_ratio_, rtol=1e-8)


def test_clustering_narrative_figures_and_record(noisy, noisy_clusters):
    X, y = noisy
    r = noisy_clusters
    kinds = np.where(np.arange(len(y)) % 2, "user", "item")
    ka = mclu.partition_agreement(r.clusters, kinds[r.labels.rows])
    text = cl_chapter.clustering_narrative(r, probe_accuracy=0.9, probe_majority=0.4, kind_agreement=ka,
                                    kind_column="kind")
    assert "ARI 0 in expectation" in text and "Decodable versus clustered" in text
    assert "bootstrap resamples of the entities, the partition held fixed" in text  # the interval says what it is over
    proj = mclu.project(X, r.labels, method="tsne", sample_size=80, seed=0)
    assert proj.coords.shape == (80, 2)
    assert f"Barnes–Hut angle {mclu.TSNE_ANGLE:g}" in proj.protocol and f"{mclu.TSNE_ITERATIONS} iterations" in proj.protocol
    for fig in (cl_chapter.projection_figure(r, proj, kinds), cl_chapter.contingency_figure(r), cl_chapter.sweep_figure(r)):
        fig.canvas.draw()
    json.dumps(cl_chapter.clustering_record(r, kind_agreement=ka, column="kind"), default=str)


@pytest.mark.parametrize("case", ["plain", "offset", "constant", "float32", "nan", "weights"])
def test_standardiser_fits_as_standard_scaler_bit_for_bit(case):
    """The probes' scaler: StandardScaler's mean_, var_, scale_, n_samples_seen_ and transform, bit for bit (its fast
    path on float64 rows without NaN; scikit-learn's own fit for anything else)."""
    from sklearn.preprocessing import StandardScaler
    from embeval_report.metrics.labels import Standardiser
    rng = np.random.default_rng(3)
    X = {"plain": rng.standard_normal((301, 17)), "offset": 3 * rng.standard_normal((2000, 40)) + 1e3,
         "constant": np.c_[np.ones(60), rng.standard_normal(60), np.full(60, -0.0), np.full(60, 1e-300)],
         "float32": rng.standard_normal((50, 3)).astype(np.float32),
         "nan": np.where(rng.random((80, 4)) < 0.1, np.nan, rng.standard_normal((80, 4))),
         "weights": rng.standard_normal((40, 3))}[case]
    w = rng.random(len(X)) if case == "weights" else None
    a, b = StandardScaler().fit(X, sample_weight=w), Standardiser().fit(X, sample_weight=w)
    for name in ("mean_", "var_", "scale_", "n_samples_seen_"):
        va, vb = getattr(a, name), getattr(b, name)
        assert type(va) is type(vb) and np.array_equal(va, vb, equal_nan=True), name
        assert np.array_equal(np.signbit(va), np.signbit(vb)), name
    assert b.n_features_in_ == a.n_features_in_
    assert np.array_equal(a.transform(X), b.transform(X), equal_nan=True)


def test_recorded_probe_reads_the_node_classification_results(tmp_path, noisy_result):
    from embeval_report.chapters.recorder import Recorder
    assert cl_chapter.recorded_probe(tmp_path) is None
    rec = Recorder("node_classification", tmp_path)
    rec.add(*noisy_result.metrics.values())
    rec.note(**nc_chapter.classification_record(noisy_result))
    got = cl_chapter.recorded_probe(tmp_path)
    assert got == {"accuracy": noisy_result.values["accuracy"], "majority": noisy_result.values["majority_accuracy"]}


# ---------------------------------------------------------------------------------------------
# Notebooks
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("file, name, title, order", [
    ("94_node_classification.ipynb", "node_classification", "Node classification", 94),
    ("96_clustering.ipynb", "clustering", "Clustering alignment", 96),
])
def test_notebook_metadata(file, name, title, order):
    nb = nbformat.read(notebooks_dir() / file, as_version=4)
    nbformat.validate(nb)
    spec = declared(name)
    assert nb.metadata["embeval"]["name"] == name and spec.notebook.name == file
    assert (spec.title, spec.order, spec.requires) == (title, order, ("metadata.label",))
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert ["parameters"] in tags and ["remove-input"] in tags
    setup = [c for c in nb.cells if c.cell_type == "code"][1].source
    assert f'open_chapter("{name}", source, prepared, results_dir, settings)' in setup


def test_chapters_end_to_end(tmp_path):
    """Both chapters through the CLI on a small set with a kind column, rare and missing labels."""
    from embeval_report.cli import main
    X, y = blobs(n_per=30, n_classes=3, d=8, seed=9, names=["a<b>", "c_d", "e"])
    y = y.astype(object)
    y[:2] = None
    y[2:5] = "rare"
    ids = [f"e{i}" for i in range(len(y))]
    np.save(tmp_path / "v.npy", X)
    pd.DataFrame({"id": ids, "label": y, "kind": np.where(np.arange(len(y)) % 3, "user", "item")}).to_csv(
        tmp_path / "meta.csv", index=False)
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    (tmp_path / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nmetadata: meta.csv\n")
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--chapters", "node_classification,clustering",
                 "--formats", "html"]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    nc, cl = doc["chapters"]["node_classification"], doc["chapters"]["clustering"]
    assert nc["status"] == "ok" and cl["status"] == "ok", (nc, cl)
    assert nc["metrics"]["accuracy"]["value"] > 0.9 and cl["metrics"]["ari"]["value"] > 0.9
    info = json.loads((out / "results" / "node_classification.json").read_text())["info"]
    assert info["n_missing"] == 2 and info["dropped_classes"] == {"rare": 3}
    html = (out / "report.html").read_text()
    assert "a&lt;b&gt;" in html


# ---------------------------------------------------------------------------------------------
# Degenerate but valid inputs: skipped with the reason, adapted, or null with the reason
# ---------------------------------------------------------------------------------------------

from types import SimpleNamespace  # noqa: E402

from embeval_report.errors import ChapterSkipped, UndefinedMetricWarning  # noqa: E402
from embeval_report.metrics import classification as ncm  # noqa: E402
from embeval_report.metrics.labels import label_problem  # noqa: E402
from embeval_report.settings import ChapterSettings  # noqa: E402

REASON = "needs at least 2 classes with at least 5 members"


@pytest.mark.parametrize("labels, counts", [
    (["a"] * 300, "1 class in all; sizes 'a': 300"),
    (["a"] * 299 + ["b"], "2 classes in all; sizes 'a': 299, 'b': 1"),
    (["a", "a", "b"], "no class has that many (2 classes in all; sizes 'a': 2, 'b': 1)"),
    ([f"t{i // 3}" for i in range(30)] + ["x"] * 5, "only 1 class has that many (11 classes in all; sizes 'x': 5,"),
])
def test_label_problem_names_the_rule_and_the_counts(labels, counts):
    reason = label_problem(labels)
    assert reason.startswith(REASON) and counts in reason, reason
    meta = pd.DataFrame({"label": labels})
    es = SimpleNamespace(metadata=meta, n=len(labels), vectors=np.zeros((len(labels), 2), np.float32))
    for chapter in (nc_chapter, cl_chapter):
        assert chapter.precheck(es, None, ChapterSettings()) == reason


def test_label_problem_without_any_label_and_for_usable_labels():
    assert "all 4 values of the metadata column 'label' are missing" in label_problem([None, "", np.nan, " "])
    assert label_problem(["a"] * 5 + ["b"] * 5 + ["rare"]) is None
    es = SimpleNamespace(metadata=None, n=3)
    assert nc_chapter.precheck(es, None, ChapterSettings()) is None  # the registry reports the missing input


@pytest.mark.parametrize("chapter", [nc_chapter, cl_chapter], ids=["node_classification", "clustering"])
def test_compute_skips_with_the_reason_as_a_second_line_of_defence(chapter):
    labels = ["a"] * 299 + ["b"]
    es = SimpleNamespace(metadata=pd.DataFrame({"label": labels}), n=300, vectors=np.ones((300, 4), np.float32))
    ctx = SimpleNamespace(es=es, side=None, settings=ChapterSettings(), sample_size=None, seed=0, level=0.95, device="cpu")
    with pytest.raises(ChapterSkipped, match=REASON) as e:
        chapter.compute(ctx)
    assert "'a': 299, 'b': 1" in str(e.value)


def test_identical_rows_give_a_null_silhouette_with_the_reason():
    X = np.tile(np.arange(1, 9, dtype=np.float32), (200, 1))
    y = np.array(["a"] * 100 + ["b"] * 100, dtype=object)
    with pytest.warns(UndefinedMetricWarning, match="silhouette of the k-means clusters is undefined"):
        r = mclu.evaluate_clustering(X, y, n_seed_runs=2, n_boot=50, device="cpu")
    assert np.isnan(r.values["silhouette"]) and np.isnan(r.values["label_silhouette"])
    for name in ("silhouette", "label_silhouette"):
        m = r.metrics[name]
        assert m.to_json()["value"] is None and not m.has_ci and "same direction" in m.note
    assert r.values["ari"] == 0.0 and r.metrics["ari"].to_json()["value"] == 0.0
    assert r.sweep["silhouette"].isna().all()
    text = cl_chapter.clustering_narrative(r)
    assert "is undefined" in text and "nan" not in text
    for fig in (cl_chapter.contingency_figure(r), cl_chapter.sweep_figure(r),
                cl_chapter.projection_figure(r, mclu.project(X, r.labels, method="tsne", seed=0))):
        fig.canvas.draw()
    p = ncm.evaluate_node_classification(X, y, train_fractions=(0.5,), n_repeats=2)
    assert p.values["accuracy"] == pytest.approx(p.values["majority_accuracy"])
    assert nc_chapter.decodability(p) == "not detectably" and "nan" not in nc_chapter.classification_narrative(p)


def test_one_k_means_cluster_in_the_silhouette_sample_is_undefined():
    X, y = blobs(n_per=20, n_classes=2, seed=3)
    with pytest.warns(UndefinedMetricWarning, match="fall into 1"):
        r = mclu.evaluate_clustering(X, y, n_seed_runs=0, sweep=False, n_boot=0, silhouette_sample=1)
    assert np.isnan(r.values["silhouette"]) and r.metrics["silhouette"].to_json()["value"] is None


def test_more_dimensions_than_entities():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((10, 50)).astype(np.float32)
    y = np.array(["a"] * 5 + ["b"] * 5, dtype=object)
    r = ncm.evaluate_node_classification(X, y)
    assert r.n == 10 and 0 <= r.values["accuracy"] <= 1 and r.metrics["accuracy"].has_ci
    assert set(r.learning_summary["train_fraction"]) < set(ncm.TRAIN_FRACTIONS)  # too-small fractions skipped
    c = mclu.evaluate_clustering(X, y, n_seed_runs=3, n_boot=100, device="cpu")
    assert list(c.sweep["k"]) == [2, 3, 4, 5] and np.isfinite(c.values["silhouette"])
    proj = mclu.project(X, c.labels, method="tsne", seed=0)
    assert proj.coords.shape == (10, 2)
    pca = mclu.project(X, c.labels, method="pca", device="cpu")
    assert pca.coords.shape == (10, 2) and sum(pca.explained) <= 1 + 1e-9


def test_labels_missing_for_most_rows():
    X, _ = blobs(n_per=100, n_classes=3, seed=8)
    y = np.full(len(X), None, dtype=object)
    y[:6], y[150:156] = "p", "q"
    r = ncm.evaluate_node_classification(X, y)
    assert r.n == 12 and r.labels.n_missing == 288
    assert "288 of 300 entities have no `label`" in nc_chapter.classification_narrative(r)
    c = mclu.evaluate_clustering(X, y, n_seed_runs=2, n_boot=50)
    assert c.n == 12 and c.k == 2


def test_many_classes_with_few_members():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((300, 16)).astype(np.float32)
    y = np.array([f"c{i // 5}" for i in range(300)], dtype=object)
    r = ncm.evaluate_node_classification(X, y)
    assert r.labels.n_classes == 60 and r.confusion.shape == (60, 60)
    assert list(r.learning_summary["train_fraction"]) == [0.3, 0.5, 0.7]  # 10 % and 90 % cannot hold 60 classes
    c = mclu.evaluate_clustering(X, y, n_seed_runs=2, n_boot=50)
    assert c.k == 60 and list(c.sweep["k"]) == list(range(58, 64))
    for fig in (nc_chapter.confusion_figure(r), cl_chapter.contingency_figure(c),
                cl_chapter.projection_figure(c, mclu.project(X, c.labels, method="pca", device="cpu"))):
        fig.canvas.draw()
    assert len(nc_chapter.by_group_table(ncm.node_classification_by_group(X, y, np.repeat(["u", "i"], 150)))) == 2


def test_degenerate_sets_through_the_cli(tmp_path):
    """Identical rows: both chapters ok, the silhouette null with the reason shown; one class: both skipped."""
    from embeval_report.cli import main
    for name, X, labels in (("identical", np.tile(np.arange(1, 9, dtype=np.float32), (60, 1)), ["a", "b"] * 30),
                            ("one-class", np.random.default_rng(0).standard_normal((40, 4)), ["a"] * 40)):
        folder = tmp_path / name
        folder.mkdir()
        ids = [f"e{i}" for i in range(len(X))]
        np.save(folder / "v.npy", np.asarray(X, np.float32))
        pd.DataFrame({"id": ids, "label": labels}).to_csv(folder / "meta.csv", index=False)
        (folder / "ids.txt").write_text("\n".join(ids))
        (folder / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nmetadata: meta.csv\n")
        out = folder / "out"
        assert main(["run", str(folder / "m.yaml"), "--out", str(out), "--chapters",
                     "node_classification,clustering", "--formats", "html"]) == 0
        chapters = json.loads((out / "metrics.json").read_text())["chapters"]
        nc, cl = chapters["node_classification"], chapters["clustering"]
        html = (out / "report.html").read_text()
        if name == "identical":
            assert nc["status"] == "ok" and cl["status"] == "ok", (nc, cl)
            assert cl["metrics"]["silhouette"]["value"] is None
            assert "silhouette of the k-means clusters is undefined" in html
            warns = json.loads((out / "results" / "clustering.json").read_text())["info"]["warnings"]
            assert any("same direction" in w for w in warns)
        else:
            for ch in (nc, cl):
                assert ch["status"] == "skipped" and ch["reason"].startswith(REASON), ch
        assert not any(s in html for s in ("Traceback", "ValueError", "InputError"))
