"""Anomaly-detection metrics against independent references: scikit-learn (roc_auc_score,
average_precision_score, roc_auc_score(max_fpr=...), roc_curve, LocalOutlierFactor, NearestNeighbors),
statsmodels' Kaplan–Meier (SurvfuncRight), seed 001 §21.4.3's printed example and its procedure as
written, hand-computed cases (ties, costs, precision@n, time to detection), the input readers' one-line
errors, and one end-to-end report."""
import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from embeval_report.errors import InputError
from embeval_report.io.anomaly_scores import anomaly_labels, anomaly_scores_frame, event_columns, read_anomaly_scores
from embeval_report.metrics import anomaly as an

CONTRACT = ("roc_auc", "average_precision", "average_precision_baseline", "detection_rate_at_fpr_0_1pct",
            "detection_rate_at_fpr_1pct", "detection_rate_at_fpr_5pct", "partial_auc_fpr_10pct",
            "partial_auc_fpr_10pct_mcclish", "precision_at_n", "expected_cost", "cost_reduction_vs_baseline",
            "time_to_detection_median")


def _metrics(scores, y, cost_fn=10.0, cost_fp=1.0):
    tp, fp = an.Ranked.of(scores, y).counts()
    return an.curve_metrics(tp, fp, cost_fn=cost_fn, cost_fp=cost_fp)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_curve_metrics_match_scikit_learn(seed, ties):
    rng = np.random.default_rng(seed)
    y = (rng.random(2000) < 0.04).astype(float)
    s = rng.standard_normal(2000) + 1.3 * y
    if ties:
        s = np.round(s, 1)
    m = _metrics(s, y)
    assert m["roc_auc"] == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert m["average_precision"] == pytest.approx(average_precision_score(y, s), abs=1e-12)
    assert m["partial_auc_fpr_10pct_mcclish"] == pytest.approx(roc_auc_score(y, s, max_fpr=0.1), abs=1e-12)
    # the raw area is sklearn's standardised value mapped back
    raw = 0.005 + (2 * roc_auc_score(y, s, max_fpr=0.1) - 1) * (0.1 - 0.005)
    assert m["partial_auc_fpr_10pct"] == pytest.approx(raw, abs=1e-12)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    for suffix, target in an.FPR_TARGETS.items():
        assert m[f"detection_rate_at_fpr_{suffix}"] == pytest.approx(tpr[fpr <= target].max(), abs=1e-12)


def test_hand_computed_case():
    s = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    y = np.array([1, 0, 1, 0, 0, 0])
    m = _metrics(s, y, cost_fn=10, cost_fp=1)
    assert m["roc_auc"] == pytest.approx(7 / 8)
    assert m["average_precision"] == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)
    assert m["precision_at_n"] == pytest.approx(0.5)
    # flag nothing costs 20; the best threshold 0.7 costs one false alarm; the cheaper trivial policy flags all (4)
    assert m["expected_cost"] == pytest.approx(1 / 6)
    assert m["cost_reduction_vs_baseline"] == pytest.approx(1 - 1 / 4)
    r = an.Ranked.of(s, y)
    tp, fp = r.counts()
    assert an._detection(tp, fp, 0.25) == (1.0, 2)   # FPR 1/4 allowed: threshold 0.7 catches both
    assert an._detection(tp, fp, 0.1) == (0.5, 0)    # no false positive allowed: threshold 0.9
    pts = an.operating_points(r, cost_fn=10, cost_fp=1).set_index("operating point")
    assert pts.loc["cost optimum", "threshold"] == 0.7 and pts.loc["cost optimum", "false positives"] == 1


def test_ties_are_flagged_together():
    # the top group of three holds one of the two anomalies: precision@2 counts 2/3 of that group's share
    s, y = np.array([1.0, 1.0, 1.0, 0.0]), np.array([1, 0, 0, 1])
    m = _metrics(s, y)
    assert m["precision_at_n"] == pytest.approx((2 * (1 / 3)) / 2)
    # no threshold between the tied rows: at FPR <= 1/3 nothing can be flagged
    assert m["detection_rate_at_fpr_5pct"] == 0.0
    assert m["roc_auc"] == pytest.approx(roc_auc_score(y, s))


def test_seed_example_detection_rate_and_cost():
    """Seed 001 §21.4.3's example: 'Detection rate at 1% FPR: 24.2%'; its fixed threshold 0.5 saves 23.0 %,
    and the cost-optimal threshold can only save more."""
    np.random.seed(42)
    labels = (np.random.random(10000) < 0.01).astype(int)
    scores = np.random.random(10000)
    scores[labels == 1] += 0.3
    scores = np.clip(scores, 0, 1)
    # the seed's procedure as written
    order = np.argsort(scores)[::-1]
    P = labels.sum()
    N = len(labels) - P
    tp = fp = 0
    for lab in labels[order]:
        if lab == 1:
            tp += 1
        else:
            fp += 1
            if fp >= int(0.01 * N):
                break
    assert round(tp / P, 3) == 0.242
    m = _metrics(scores, labels, cost_fn=10000, cost_fp=100)
    assert m["detection_rate_at_fpr_1pct"] == pytest.approx(tp / P)
    pred = scores > 0.5
    fixed = ((pred & (labels == 0)).sum() * 100 + (~pred & (labels == 1)).sum() * 10000)
    assert round(1 - fixed / (P * 10000), 3) == 0.230
    assert m["expected_cost"] * len(labels) <= fixed


def test_baselines_match_scikit_learn():
    from sklearn.neighbors import LocalOutlierFactor, NearestNeighbors

    rng = np.random.default_rng(3)
    X = np.vstack([rng.standard_normal((150, 8)) + 3, rng.standard_normal((10, 8))]).astype(np.float32)
    k = 7
    idx, dist = an.neighbour_graph(X, k, device="cpu")
    U = X.astype(np.float64) / np.linalg.norm(X, axis=1, keepdims=True)
    d_ref, _ = NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(U).kneighbors(U)
    np.testing.assert_allclose(an.knn_distance_scores(dist), d_ref[:, -1], atol=2e-6)
    lof = LocalOutlierFactor(n_neighbors=k, metric="cosine", algorithm="brute").fit(U)
    np.testing.assert_allclose(an.lof_scores(idx, dist), -lof.negative_outlier_factor_, rtol=2e-4)
    # centroid distance orders rows as 1 - cos(u, mean direction)
    c = an.centroid_distance_scores(X)
    mu = U.mean(0)
    assert np.array_equal(np.argsort(c), np.argsort(1 - U @ mu / np.linalg.norm(mu)))
    s = an.baseline_scores(X, k, seed=0, device="cpu")
    assert set(s) == set(an.BASELINES) and all(v.shape == (len(X),) for v in s.values())
    np.testing.assert_array_equal(s["isolation_forest"], an.baseline_scores(X, k, seed=0, device="cpu")[
        "isolation_forest"])


def test_kaplan_meier_matches_statsmodels():
    from statsmodels.duration.survfunc import SurvfuncRight

    rng = np.random.default_rng(5)
    for _ in range(5):
        t = rng.integers(1, 20, 40).astype(float)
        d = rng.random(40) < 0.6
        sf = SurvfuncRight(t, d.astype(int))
        np.testing.assert_allclose(an.kaplan_meier(t, d)[1], sf.surv_prob)
        assert an.km_median(t, d) == sf.quantile(0.5)
    assert np.isnan(an.km_median([1, 2, 3], [True, False, False]))  # S stays above 0.5


def test_time_to_detection_hand_case():
    # event A: rows at t=0 (missed), 3 (flagged) -> 3; event B: t=5, 9, none flagged -> censored at end 20 - 5
    scores = np.array([0.1, 0.9, 0.2, 0.3, 0.0, 0.5])
    event = np.array(["A", "A", "B", "B", None, None], dtype=object)
    time = np.array([0.0, 3.0, 5.0, 9.0, 20.0, 1.0])
    dt = an.detection_times(scores, event, time, np.ones(6, bool), threshold=0.8, unit="days")
    e = dt.events.set_index("event")
    assert e.loc["A", "duration"] == 3 and e.loc["A", "detected"]
    assert e.loc["B", "duration"] == 15 and not e.loc["B", "detected"]
    assert dt.median == 3.0  # S drops to 1/2 at t = 3


def test_evaluation_records_contract_and_paired_differences():
    rng = np.random.default_rng(0)
    n = 400
    y = np.r_[np.ones(20), np.zeros(n - 20), np.full(50, np.nan)]
    good = np.r_[rng.normal(2, 1, 20), rng.normal(0, 1, n - 20), rng.normal(0, 1, 50)]
    base = {b: rng.standard_normal(len(y)) for b in an.BASELINES}
    ev = np.array([f"e{i % 4}" if i < 20 else None for i in range(len(y))], dtype=object)
    t = rng.uniform(0, 100, len(y))
    res = an.evaluate_detectors({"mine": good, **base}, y, events=(ev, t, "days"), sources={"mine": "f.csv"},
                                n_boot=200)
    for name in CONTRACT:
        assert name in res.metrics, name
        assert f"{name}__mine" in res.metrics and f"{name}__lof" in res.metrics
    m = res.metrics["roc_auc"]
    assert m.value == pytest.approx(roc_auc_score(y[:n], good[:n])) and m.ci_low <= m.value <= m.ci_high
    assert res.protocol["n_unlabelled"] == 50 and res.protocol["n_anomalies"] == 20
    assert set(res.differences["baseline"]) == set(an.BASELINES)
    assert "roc_auc_difference__mine_vs_knn_distance" in res.metrics
    again = an.evaluate_detectors({"mine": good, **base}, y, n_boot=200)
    assert again.metrics["roc_auc"].ci_low == res.metrics["roc_auc"].ci_low  # seeded
    with pytest.raises(InputError, match="all normal"):
        an.evaluate_detectors({"mine": good}, np.zeros(len(y)))
    auc, p = an.chance_test(good[:n], y[:n])
    assert auc == pytest.approx(roc_auc_score(y[:n], good[:n])) and p < 1e-6


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------

def _meta(values, column="is_anomaly", **extra):
    ids = [f"u{i}" for i in range(len(values))]
    return pd.DataFrame({column: values, **extra}, index=pd.Index(ids, name="id"))


def test_labels_are_read_and_bad_values_named():
    col, y = anomaly_labels(_meta([1, 0, np.nan, 1.0]))
    assert col == "is_anomaly" and np.array_equal(y, [1, 0, np.nan, 1], equal_nan=True)
    col, y = anomaly_labels(_meta(["true", "No", "", "1"], column="anomaly"))
    assert col == "anomaly" and np.array_equal(y, [1, 0, np.nan, 1], equal_nan=True)
    with pytest.raises(InputError, match=r"id 'u1', column 'is_anomaly': 'maybe' is not a 0/1 label"):
        anomaly_labels(_meta(["1", "maybe"]))
    with pytest.raises(InputError, match="is not a 0/1 label"):
        anomaly_labels(_meta([0, 2]))


def test_event_columns():
    ev, t, unit = event_columns(_meta([1, 1, 0], event=["r1", "r1", ""],
                                      timestamp=["2024-01-01", "2024-01-03", "2024-01-02"]))
    assert unit == "days" and list(t) == [0, 2, 1] and list(ev) == ["r1", "r1", None]
    ev, t, unit = event_columns(_meta([1, 0], event=["r", None], timestamp=[5, 7]))
    assert unit == "timestamp units" and list(t) == [5, 7]
    assert event_columns(_meta([1, 0])) is None
    with pytest.raises(InputError, match="column 'event' needs a 'timestamp' column"):
        event_columns(_meta([1, 0], event=["r", ""]))
    with pytest.raises(InputError, match="id 'u0', column 'timestamp': 'soon' is neither a number nor a date"):
        event_columns(_meta([1, 0], event=["r", ""], timestamp=["soon", "2024-01-01"]))
    with pytest.raises(InputError, match="id 'u1', column 'timestamp': blank, but the row belongs to event 'r'"):
        event_columns(_meta([1, 1], event=["r", "r"], timestamp=["2024-01-01", ""]))


@pytest.mark.parametrize("text, message", [
    ("id,score\nu0,0.5\nu1,high\n", r"row 2 \(id 'u1'\), column 'score': 'high' is not a number"),
    ("id,score\nu0,0.5\nu0,0.7\n", r"rows 1 and 2, column 'id': id 'u0' appears twice"),
    ("id,score\nu0,0.5\nx9,0.7\n", r"row 2, column 'id': id 'x9' matches no vector id"),
    ("id,score\nu0,0.5\nu1,\n", r"row 2 \(id 'u1'\), column 'score': empty value"),
    ("id,score\nu0,0.5\nu1,inf\n", r"row 2 \(id 'u1'\), column 'score': 'inf' is not finite"),
    ("id\nu0\n", "expected a header row with an id column and at least one score column"),
])
def test_scores_file_errors(tmp_path, text, message):
    path = tmp_path / "scores.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        read_anomaly_scores(path, ["u0", "u1", "u2"])
    assert "\n" not in str(err.value) and "scores.csv" in str(err.value)


def test_scores_file_reads_several_detectors_and_needs_every_labelled_id(tmp_path):
    path = tmp_path / "s.tsv"
    path.write_text("id\trules\tmodel\nu1\t3\t0.2\nu0\t1\t0.9\n")
    frame = read_anomaly_scores(path, ["u0", "u1", "u2"], labels=np.array([1, 0, np.nan]))
    assert list(frame.columns) == ["rules", "model"] and frame.loc["u0", "model"] == 0.9
    with pytest.raises(InputError, match=r"1 labelled id\(s\) have no score \('u2'\)"):
        anomaly_scores_frame(pd.DataFrame({"id": ["u0", "u1"], "s": [1, 2]}), ["u0", "u1", "u2"],
                             labels=np.array([1, 0, 0]))


# ---------------------------------------------------------------------------------------------
# The chapter in a report
# ---------------------------------------------------------------------------------------------

def _set(tmp_path, labels=None):
    rng = np.random.default_rng(0)
    n, n_bad = 300, 15
    X = rng.standard_normal((n, 16)) + 4 * np.eye(16)[rng.integers(0, 4, n)]
    X[:n_bad] = rng.standard_normal((n_bad, 16))  # off the four clusters
    ids = [f"r{i:03d}" for i in range(n)]
    np.save(tmp_path / "v.npy", X.astype(np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    y = np.r_[np.ones(n_bad, int), np.zeros(n - n_bad, int)] if labels is None else labels
    stamps = pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 90, n), unit="D")
    pd.DataFrame({"id": ids, "is_anomaly": y, "event": [f"e{i % 3}" if i < n_bad else "" for i in range(n)],
                  "timestamp": stamps.strftime("%Y-%m-%d")}).to_csv(tmp_path / "meta.csv", index=False)
    pd.DataFrame({"id": ids, "score": rng.standard_normal(n) + 1.5 * (np.arange(n) < n_bad)}).to_csv(
        tmp_path / "scores.csv", index=False)
    (tmp_path / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nmetadata: meta.csv\nanomaly_scores: scores.csv\n")
    return tmp_path / "m.yaml"


def test_anomaly_chapter_in_a_report(tmp_path):
    from embeval_report.cli import main

    m = _set(tmp_path)
    out = tmp_path / "report"
    assert main(["run", str(m), "--out", str(out), "--formats", "html", "--chapters", "anomaly",
                 "--device", "cpu", "--set", "cost_fn=50", "--set", "cost_fp=1"]) == 0
    chapter = json.loads((out / "metrics.json").read_text())["chapters"]["anomaly"]
    for name in CONTRACT:
        assert name in chapter["metrics"], name
    for name in ("roc_auc", "average_precision", "detection_rate_at_fpr_1pct", "expected_cost"):
        v = chapter["metrics"][name]
        assert v["ci_low"] <= v["value"] <= v["ci_high"], name
    assert chapter["metrics"]["roc_auc__knn_distance"]["value"] > 0.9  # the off-cluster rows are found
    results = json.loads((out / "results" / "anomaly.json").read_text())
    # each detector against chance, and your detector against each baseline (DeLong), adjusted report-wide
    assert len(results["tests"]) == 1 + len(an.BASELINES) + len(an.BASELINES)
    assert sum(t["test"].startswith("DeLong") for t in results["tests"]) == len(an.BASELINES)
    assert results["info"]["protocol"]["cost_fn"] == 50
    html = (out / "report.html").read_text()
    for words in ("Detectors compared", "Operating points", "Time to detection", "ROC-AUC difference",
                  "The evaluation protocol", "k-NN distance"):
        assert words in html, words


def test_one_class_is_skipped_with_its_reason(tmp_path):
    from embeval_report.chapters import anomaly as chapter
    from embeval_report.io import load_source

    m = _set(tmp_path, labels=np.zeros(300, int))
    (tmp_path / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nmetadata: meta.csv\n")
    reason = chapter.precheck(load_source(m), None, None)
    assert "no anomaly (1)" in reason


# ---------------------------------------------------------------------------------------------
# The task scorer: the vectors' k-NN distance per labelled row
# ---------------------------------------------------------------------------------------------

def _labelled_set(folder, spread: float, seed: int = 5):
    """300 normal rows around three centres, 30 anomalies at ``spread`` times fixed directions from them (the
    only rows that ``spread`` moves), and 40 unlabelled entities rated in pairs (annotations)."""
    from scored_reports import annotations_text, write_set

    rng = np.random.default_rng(seed)
    d, n, p, n_o = 8, 300, 30, 40
    centres = 3 * rng.standard_normal((3, d))
    normal = centres[rng.integers(0, 3, n)] + 0.5 * rng.standard_normal((n, d))
    anomalies = centres[rng.integers(0, 3, p)] + spread * rng.standard_normal((p, d))
    O = 2 * rng.standard_normal((n_o, d))
    X = np.r_[normal, anomalies, O]
    ids = [f"r{i:03d}" for i in range(n + p)] + [f"o{i:02d}" for i in range(n_o)]
    meta = pd.DataFrame({"id": ids, "is_anomaly": [0] * n + [1] * p + [""] * n_o})
    files = {"ann.csv": annotations_text(X, ids, range(n + p, n + p + n_o))}
    return write_set(folder, X, ids, meta, files, {"annotations": "ann.csv", "annotation_level": "ordinal"}), X


def test_scorer_aggregates_are_the_recorded_numbers(tmp_path):
    """ROC-AUC and average precision of the unit table are the chapter's numbers for the k-NN-distance baseline,
    bit for bit (also read back from results/units/anomaly.csv); unlabelled rows are no units."""
    from scored_reports import recorded, run_report, scorer_units

    from embeval_report.report.pairing import ModelReport

    m, _ = _labelled_set(tmp_path / "set", spread=1.5)
    out = run_report(m, tmp_path / "report", ["anomaly"], "A")
    rec = recorded(out, "anomaly")
    units, plan, scorer = scorer_units(m, "anomaly")
    assert len(units) == 330 and plan.k == 10 and list(units["label"].unique()) == [0, 1]
    values = scorer.values(units)
    assert set(values) == {"roc_auc__knn_distance", "average_precision__knn_distance"}
    table = ModelReport.open(out).units["anomaly"]
    for metric, v in values.items():
        assert v == rec["metrics"][metric]["value"] == scorer.aggregate(metric).value(table), metric
    assert values["roc_auc__knn_distance"] == pytest.approx(roc_auc_score(units["label"], units["knn_distance"]),
                                                            rel=0, abs=1e-12)
    assert values["average_precision__knn_distance"] == pytest.approx(
        average_precision_score(units["label"], units["knn_distance"]), rel=0, abs=1e-12)
    resample = units.iloc[np.random.default_rng(0).integers(0, len(units), len(units))]  # repeated rows count twice
    assert an.units_roc_auc(resample) == pytest.approx(roc_auc_score(resample["label"], resample["knn_distance"]),
                                                       rel=0, abs=1e-12)


def test_scorer_plan_does_not_read_the_vectors_and_a_moved_row_changes_only_its_neighbourhood(tmp_path):
    """The plan (k) is the same for other vectors; moving one row changes the k-NN distance of the rows whose
    neighbour list held it (before or after) and of itself, and no other row's."""
    from scored_reports import scorer_units

    from embeval_report.metrics.scoring import plan_fingerprint

    m, X = _labelled_set(tmp_path, spread=1.5)
    a, plan_a, _ = scorer_units(m, "anomaly")
    b, plan_b, _ = scorer_units(m, "anomaly", 2 * X + np.random.default_rng(0).normal(0, 0.5, X.shape))
    assert plan_fingerprint(plan_a) == plan_fingerprint(plan_b) and not np.allclose(a["knn_distance"], b["knn_distance"])
    Y = X.astype(np.float32)
    Y[17] = Y[250] + 0.01
    c, _, _ = scorer_units(m, "anomaly", Y)
    before, _ = an.neighbour_graph(X.astype(np.float32), plan_a.k, device="cpu")
    after, _ = an.neighbour_graph(Y, plan_a.k, device="cpu")
    near = (before == 17).any(1) | (after == 17).any(1)
    near[17] = True
    moved = a["knn_distance"].to_numpy() != c["knn_distance"].to_numpy()
    assert moved.any() and not (moved & ~near[:330]).any() and near.sum() < 40


def test_compare_finds_better_separated_anomalies_only_in_this_chapter(tmp_path, monkeypatch):
    """Two models that differ only in how far the anomalies lie from the normal rows: compare says B better on the
    k-NN distance's ROC-AUC and average precision, and finds no difference in the human-evaluation agreement."""
    from scored_reports import assert_found_only_in, compare, run_report

    chapters = ["anomaly", "human_evaluation"]
    a = run_report(_labelled_set(tmp_path / "A", spread=0.6)[0], tmp_path / "ra", chapters, "A")
    b = run_report(_labelled_set(tmp_path / "B", spread=3.0)[0], tmp_path / "rb", chapters, "B")
    assert_found_only_in(compare(a, b, monkeypatch), "anomaly",
                         ["roc_auc__knn_distance", "average_precision__knn_distance"])


def test_weighted_curves_are_those_of_the_bootstrap_samples():
    """ROC-AUC and average precision under unit weights (the counts of each draw, all draws at once) equal the
    numbers of the resampled rows, tied scores included; a draw without anomalies: NaN."""
    rng = np.random.default_rng(3)
    n = 200
    units = pd.DataFrame({"id": [str(i) for i in range(n)], "knn_distance": np.round(rng.uniform(0, 1, n), 2),
                          "label": (rng.uniform(0, 1, n) < 0.15).astype(int)})
    draws = [rng.integers(0, n, n) for _ in range(80)] + [np.full(n, int(np.flatnonzero(units["label"] == 0)[0]))]
    W = np.stack([np.bincount(d, minlength=n) for d in draws]).astype(float)
    for weighted, fn in ((an.units_roc_auc_weighted, an.units_roc_auc),
                         (an.units_average_precision_weighted, an.units_average_precision)):
        got, want = weighted(units, W), [fn(units.iloc[d]) for d in draws]
        np.testing.assert_allclose(got[:-1], want[:-1], rtol=0, atol=1e-12)
        assert np.isnan(got[-1]) and np.isnan(want[-1])


def test_delong_paired_against_its_definition():
    """DeLong et al. (1988) written out with the pairwise kernel psi (an O(P N) loop over every positive-negative
    pair): the AUC difference, z and two-sided p of the midrank form (stats.delong_paired), with ties."""
    from scipy.stats import norm

    from embeval_report.stats import delong_paired

    rng = np.random.default_rng(3)
    y = (rng.random(120) < 0.3).astype(float)
    a = np.round(y + rng.standard_normal(120), 1)           # rounded: ties within and across the classes
    b = np.round(0.4 * y + rng.standard_normal(120) + 0.3 * a, 1)
    pos, neg = y == 1, y == 0

    def components(s):
        psi = (s[pos][:, None] > s[neg][None, :]) + 0.5 * (s[pos][:, None] == s[neg][None, :])
        return psi.mean(), psi.mean(1), psi.mean(0)

    (A, v10a, v01a), (B, v10b, v01b) = components(a), components(b)
    P, N = pos.sum(), neg.sum()
    s10 = np.cov(np.vstack([v10a, v10b]))
    s01 = np.cov(np.vstack([v01a, v01b]))
    S = s10 / P + s01 / N
    z = (A - B) / np.sqrt(S[0, 0] + S[1, 1] - 2 * S[0, 1])
    diff, z_ours, p = delong_paired(a, b, y)
    assert diff == pytest.approx(A - B, abs=1e-12) and z_ours == pytest.approx(z, rel=1e-10)
    assert p == pytest.approx(2 * norm.sf(abs(z)), rel=1e-10)
    assert delong_paired(a, a, y) == (0.0, 0.0, 1.0)  # the same ranking: no difference
