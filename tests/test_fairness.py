"""Fairness chapter: WEAT against a hand-computed case, brute-force partitions and WEFE (its values kept in
tests/reference/peers.json, and live when installed); group gaps against fairlearn's MetricFrame (test extra)
and closed forms; the association-test reader and bad input; the demo's planted gap; one end-to-end report."""
import json
import math
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from embeval_report.errors import InputError, UndefinedMetricWarning
from embeval_report.io.association_tests import read_association_tests, vocabulary_rows
from embeval_report.metrics import fairness as fm
from reference import inputs, make_fixtures


def unit(M):
    M = np.asarray(M, float)
    return M / np.linalg.norm(M, axis=1, keepdims=True)


# ---------------------------------------------------------------------------------------------
# WEAT
# ---------------------------------------------------------------------------------------------

def test_weat_hand_computed_case():
    """2-d words at known angles: s(w) = cos(w, a) - cos(w, b) with A = {e1}, B = {e2}."""
    ang = np.deg2rad([0, 30, 60, 90])
    X = np.c_[np.cos(ang[:2]), np.sin(ang[:2])]       # 0°, 30°
    Y = np.c_[np.cos(ang[2:]), np.sin(ang[2:])]       # 60°, 90°
    A, B = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])
    s = np.cos(ang) - np.sin(ang)                     # 1, 0.366, -0.366, -1
    with pytest.warns(UndefinedMetricWarning, match="no interval for the effect size"):
        r = fm.weat(X, Y, A, B, n_boot=200)
    assert r.statistic == pytest.approx(s[:2].sum() - s[2:].sum())
    assert r.effect["effect_size"] == pytest.approx((s[:2].mean() - s[2:].mean()) / s.std(ddof=1))
    assert r.effect["effect_size_wefe"] == pytest.approx((s[:2].mean() - s[2:].mean()) / s.std(ddof=0))
    pooled = math.sqrt((s[:2].var(ddof=1) + s[2:].var(ddof=1)) / 2)
    assert r.effect["effect_size_pooled"] == pytest.approx((s[:2].mean() - s[2:].mean()) / pooled)
    # 6 partitions of 4 words into 2 + 2: only the observed one reaches S
    assert r.p["method"] == "exact" and r.p["n_partitions"] == 6 and r.p_value == pytest.approx(1 / 6)


def test_weat_p_value_against_brute_force_and_sampling():
    rng = np.random.default_rng(3)
    sx, sy = rng.normal(0.3, 1, 7), rng.normal(0, 1, 6)
    pool = np.r_[sx, sy]
    S = sx.sum() - sy.sum()
    stats = [pool[list(c)].sum() - np.delete(pool, list(c)).sum() for c in combinations(range(13), 7)]
    brute = np.mean(np.array(stats) >= S - 1e-12)
    exact = fm.weat_p_value(sx, sy)
    assert exact["method"] == "exact" and exact["n_partitions"] == math.comb(13, 7)
    assert exact["p_value"] == pytest.approx(brute)
    sampled = fm.weat_p_value(sx, sy, exact_limit=0, n_perm=20_000, seed=1)
    assert sampled["method"] == "sampled" and sampled["mc_error"] > 0
    assert abs(sampled["p_value"] - brute) < 4 * sampled["mc_error"] + 1e-3


def check_weat_against_wefe(ref):
    """WEFE's effect size divides by the population sd of the pooled s(w); our headline by the sample sd."""
    words, V = inputs.weat_case()
    X, Y, A, B = (V[a:b] for a, b in inputs.WEAT_SETS.values())
    ours = fm.weat(X, Y, A, B, n_boot=100, n_perm=200)
    assert ours.effect["effect_size_wefe"] == pytest.approx(ref["effect_size"], rel=1e-5)
    assert ours.statistic == pytest.approx(ref["weat"], rel=1e-5)
    n = len(X) + len(Y)  # our headline uses the sample sd: d = d_wefe * sqrt((n - 1) / n)
    assert ours.effect["effect_size"] == pytest.approx(ref["effect_size"] * math.sqrt((n - 1) / n), rel=1e-5)


def test_weat_against_wefe():
    """Drift check against the installed WEFE (not installed by the test extra; see tests/reference/)."""
    pytest.importorskip("wefe")
    check_weat_against_wefe(make_fixtures.wefe_values())


def test_weat_against_wefe_fixture():
    """WEFE's values kept in tests/reference/peers.json: runs in CI."""
    check_weat_against_wefe(make_fixtures.fixture("wefe"))


def test_weat_out_of_vocabulary_is_counted_and_too_few_words_give_a_reason(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("test,role,set,word\n" + "".join(
        f"t1,target,x,{w}\n" for w in ("a", "b", "zz")) + "t1,target,y,c\nt1,target,y,d\n"
        "t1,attribute,A,e\nt1,attribute,A,f\nt1,attribute,B,g\nt1,attribute,B,h\n"
        "t2,target,x,a\nt2,target,y,qq\nt2,target,y,c\nt2,attribute,A,e\nt2,attribute,A,f\nt2,attribute,B,g\n"
        "t2,attribute,B,h\n")
    tests = read_association_tests(f)
    ids = list("abcdefgh")
    rows = vocabulary_rows(tests[0], ids)
    assert [len(r) for r, _ in rows] == [2, 2, 2, 2] and rows[0][1] == ("zz",)
    X = np.random.default_rng(0).standard_normal((8, 5))
    with pytest.warns(UndefinedMetricWarning):  # 2 + 2 target words: resamples without spread
        res = fm.run_association_tests(X, ids, tests)
    assert not res[0].reason and res[0].oov[0] == ("zz",)
    assert "at least 2 words" in res[1].reason and "'x' has 1" in res[1].reason and np.isnan(res[1].p_value)


def test_association_file_formats_agree_and_bad_files_fail_clearly(tmp_path):
    y = tmp_path / "t.yaml"
    y.write_text("tests:\n  - name: t1\n    targets: {x: [a, b], y: [c, d]}\n    attributes: {A: [e, f], B: [g, h]}\n")
    c = tmp_path / "t.csv"
    c.write_text("test,role,set,word\n" + "".join(f"t1,{r},{s},{w}\n" for r, s, ws in (
        ("target", "x", "ab"), ("target", "y", "cd"), ("attribute", "A", "ef"), ("attribute", "B", "gh")) for w in ws))
    assert read_association_tests(y) == read_association_tests(c)
    bad = {
        "targets: {x: [a, b]}": "found 1 target set(s)",
        "targets: {x: [a, a], y: [c]}": "'a' is listed twice",
        "targets: {x: [a, b], y: [b]}": "'b' is in both target sets",
        "targets: {x: [], y: [b]}": "no words",
    }
    for block, words in bad.items():
        y.write_text(f"- name: t\n  {block}\n  attributes: {{A: [e], B: [g]}}\n")
        with pytest.raises(InputError) as e:
            read_association_tests(y)
        assert words in str(e.value) and "t.yaml, test 't'" in str(e.value) and "\n" not in str(e.value)
    c.write_text("test,role,set,word\nt1,targets,x,a\n")
    with pytest.raises(InputError, match=r"t.csv, row 1 \(line 2\), column 'role'"):
        read_association_tests(c)
    c.write_text("test,set,word\nt1,x,a\n")
    with pytest.raises(InputError, match="no role column"):
        read_association_tests(c)


# ---------------------------------------------------------------------------------------------
# Groups and gaps
# ---------------------------------------------------------------------------------------------

def test_groups_minimum_size_missing_values_and_intersections():
    a = ["n"] * 40 + ["s"] * 35 + ["tiny"] * 3 + [None, "", float("nan")]
    b = (["x", "y"] * 41)[:len(a)]
    g = fm.make_groups(a, "region", min_size=30)
    assert g.names == ("n", "s") and g.too_small == ("tiny",) and g.n_missing == 3
    assert g.sizes == {"n": 40, "s": 35, "tiny": 3} and (g.codes[75:] == -1).all()
    i = fm.intersect(a, b, "region", "b", min_size=10)
    assert i.attribute == "region × b" and "n · x" in i.names and i.n_missing == 3 and "tiny · x" in i.too_small


def test_gaps_against_fairlearn_metricframe():
    MetricFrame = pytest.importorskip("fairlearn.metrics").MetricFrame  # the test extra installs it
    from sklearn.metrics import accuracy_score

    rng = np.random.default_rng(1)
    n = 900
    region = rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2])
    y = rng.integers(0, 3, n)
    pred = np.where(rng.random(n) < np.select([region == "a", region == "b"], [0.9, 0.8], 0.6), y, (y + 1) % 3)
    X = rng.standard_normal((n, 6))
    c = fm.compare_groups(X, fm.make_groups(region, "region"), {"probe_accuracy": (pred == y).astype(float)},
                          n_boot=200)
    mf = MetricFrame(metrics=accuracy_score, y_true=y, y_pred=pred, sensitive_features=region)
    assert c.values["probe_accuracy_difference"] == pytest.approx(mf.difference())
    assert c.values["probe_accuracy_ratio"] == pytest.approx(mf.ratio())
    t = c.table.set_index("group")
    for g, v in mf.by_group.items():
        assert t.loc[g, "probe_accuracy"] == pytest.approx(v)
        assert t.loc[g, "probe_accuracy ci_low"] < v < t.loc[g, "probe_accuracy ci_high"]
    lo, hi = c.cis["probe_accuracy_difference"]
    assert lo < c.values["probe_accuracy_difference"] < hi
    # the chi-squared test is scipy's on the group x (right, wrong) table
    table = [[int(((pred == y) & (region == g)).sum()) for g in ("a", "b", "c")],
             [int(((pred != y) & (region == g)).sum()) for g in ("a", "b", "c")]]
    assert c.test.p_value == pytest.approx(sps.chi2_contingency(table, correction=False).pvalue)


def test_group_apcs_label_agreement_and_k_occurrence_closed_forms():
    from embeval_report.metrics.isotropy import measure_isotropy

    rng = np.random.default_rng(2)
    X = rng.standard_normal((120, 8)) + np.r_[np.zeros((60, 8)), np.full((60, 8), 0.7)]
    g = fm.make_groups(["p"] * 60 + ["q"] * 60, "grp")
    labels = np.array(["u", "v", "w"] * 40, dtype=object)
    nb = np.array([[(i + 1) % 120, (i + 2) % 120] for i in range(120)])
    agree = fm.neighbour_label_agreement(nb, labels)
    assert (agree == 0).all()  # i, i+1, i+2 always carry three different labels
    c = fm.compare_groups(X, g, {"label_agreement": agree, "k_occurrence": np.ones(120)}, n_boot=100)
    t = c.table.set_index("group")
    for name, rows in (("p", slice(0, 60)), ("q", slice(60, 120))):
        ref = measure_isotropy(X[rows], n_boot=0).values["apcs"]
        assert t.loc[name, "apcs"] == pytest.approx(ref)
        U = unit(X[rows])
        C = U @ U.T
        assert t.loc[name, "apcs"] == pytest.approx((C.sum() - 60) / (60 * 59))
    assert c.values["k_occurrence_difference"] == 0 and c.values["k_occurrence_ratio"] == 1
    assert "label_agreement_ratio" not in c.values or np.isnan(c.values["label_agreement_ratio"])


def test_planted_group_gap_is_found():
    """Noisier vectors for one region: a worse probe, a 'problematic' accuracy gap and a small chi-squared p."""
    rng = np.random.default_rng(4)
    n = 900
    label = rng.integers(0, 3, n)
    centres = rng.standard_normal((3, 16)) * 2
    region = np.where(np.arange(n) < 200, "remote", np.where(np.arange(n) % 2, "north", "south"))
    noise = np.where(region == "remote", 5.0, 1.0)[:, None]
    X = centres[label] + noise * rng.standard_normal((n, 16))
    meta = pd.DataFrame({"id": [f"e{i}" for i in range(n)], "label": label.astype(str), "region": region})
    r = fm.evaluate_fairness(X, meta, ["region"], ids=meta["id"], n_boot=100, device="cpu")
    c = r.comparisons["region"]
    assert c.extremes["probe_accuracy"][1] == "remote"
    assert r.metrics["probe_accuracy_difference"].verdict == "problematic"
    assert c.test.p_value < 1e-6 and r.tests[0].family == "fairness: probe accuracy by group"
    with pytest.raises(InputError, match="no metadata column 'gender'"):
        fm.evaluate_fairness(X, meta, ["gender"])


# ---------------------------------------------------------------------------------------------
# Manifest, demo and the report
# ---------------------------------------------------------------------------------------------

def _fair_set(tmp_path, attributes="[region, plan]"):
    rng = np.random.default_rng(5)
    n = 400
    label = rng.integers(0, 4, n)
    region = np.where(np.arange(n) < 90, "remote", np.where(np.arange(n) % 2, "north", "south"))
    X = rng.standard_normal((4, 12))[label] * 1.5 + np.where(region == "remote", 2.5, 0.8)[:, None] * \
        rng.standard_normal((n, 12))
    ids = [f"e{i:03d}" for i in range(n)]
    np.save(tmp_path / "v.npy", X.astype(np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    pd.DataFrame({"id": ids, "label": label, "region": region, "plan": rng.choice(["free", "paid", "vip"], n,
                                                                                 p=[0.6, 0.37, 0.03])}
                 ).to_csv(tmp_path / "meta.csv", index=False)
    (tmp_path / "weat.yaml").write_text(
        "- name: zero vs one\n  targets:\n    zero: [" + ", ".join(ids[i] for i in np.flatnonzero(label == 0)[:6])
        + ", retired_1]\n    one: [" + ", ".join(ids[i] for i in np.flatnonzero(label == 1)[:6]) + "]\n"
        "  attributes:\n    A: [" + ", ".join(ids[i] for i in np.flatnonzero(label == 0)[6:12]) + "]\n"
        "    B: [" + ", ".join(ids[i] for i in np.flatnonzero(label == 1)[6:12]) + "]\n")
    (tmp_path / "m.yaml").write_text(f"vectors: v.npy\nids: ids.txt\nmetadata: meta.csv\n"
                                     f"fairness: {{attributes: {attributes}}}\nassociation_tests: weat.yaml\n")
    return tmp_path / "m.yaml"


def test_manifest_names_unknown_attribute_in_one_line(tmp_path):
    from embeval_report.io import load_source
    from embeval_report.io.side_data import load_side_data

    m = _fair_set(tmp_path, "[region, gender]")
    with pytest.raises(InputError) as e:
        load_side_data(load_source(m))
    assert "'gender' is not in the metadata table" in str(e.value) and "\n" not in str(e.value)
    m.write_text(m.read_text().replace("[region, gender]", "{a: 1}"))
    with pytest.raises(InputError, match="expected a non-empty list of names"):
        load_source(m)


def test_demo_plants_a_region_gap(tmp_path):
    from embeval_report.demo import streaming_embeddings
    from embeval_report.demo.fairness import demo_side_data

    vectors, meta = streaming_embeddings(seed=0)  # what write_demo writes, without the other chapters' side data
    np.save(tmp_path / "vectors.npy", vectors)
    meta.to_csv(tmp_path / "metadata.csv", index=False)
    before = np.load(tmp_path / "vectors.npy")
    entries = demo_side_data(tmp_path)
    assert entries["fairness"] == {"attributes": ["region", "age_band"]}
    meta = pd.read_csv(tmp_path / "metadata.csv", dtype={"id": str}, keep_default_na=False)
    assert np.array_equal(np.load(tmp_path / "vectors.npy"), before)
    assert set(meta.loc[meta["kind"] == "item", "region"]) == {""}
    assert (meta["region"] == "overseas").sum() == 12
    tests = read_association_tests(tmp_path / entries["association_tests"])
    assert len(tests) == 3 and sum(len(o) for _, o in vocabulary_rows(tests[2], meta["id"])) == 4


def test_fairness_chapter_in_a_report(tmp_path):
    """The manifest's fairness attributes and association tests run the chapter: the gap metrics per attribute,
    intersection and worst attribute with intervals, WEAT effect sizes, the recorded tests, the report sections."""
    from embeval_report.cli import main

    m = _fair_set(tmp_path)
    out = tmp_path / "report"
    assert main(["run", str(m), "--out", str(out), "--formats", "html", "--chapters", "fairness",
                 "--device", "cpu"]) == 0
    chapter = json.loads((out / "metrics.json").read_text())["chapters"]["fairness"]
    metrics = chapter["metrics"]
    for name in ("probe_accuracy_difference", "probe_accuracy_ratio", "label_agreement_difference",
                 "k_occurrence_ratio", "apcs_difference", "probe_accuracy_difference__region",
                 "probe_accuracy_difference__region_plan", "weat_effect_size__zero_vs_one",
                 "weat_effect_size_pooled__zero_vs_one"):
        assert name in metrics, name
        assert metrics[name]["ci_low"] is not None and metrics[name]["ci_high"] is not None, name
    assert metrics["probe_accuracy_difference__region"]["verdict"] == "problematic"
    rec = json.loads((out / "results" / "fairness.json").read_text())
    names = {t["name"] for t in rec["tests"]}
    assert {"probe accuracy by region", "WEAT: zero vs one"} <= names
    weat = rec["info"]["fairness"]["weat"][0]
    assert weat["out_of_vocabulary"][0] == ["retired_1"] and weat["sizes"] == [6, 6, 6, 6]
    html = (out / "report.html").read_text()
    for words in ("Types of bias", "Representation bias", "too small", "remote", "region × plan", "WEAT",
                  "out of vocabulary", "Hypothesis tests"):
        assert words in html, words


# ---------------------------------------------------------------------------------------------
# The task scorer: per entity, its groups, the held-out probe and the neighbourhood measures
# ---------------------------------------------------------------------------------------------

def _grouped_set(folder, remote_noise: float, seed: int = 6):
    """400 labelled entities in three regions (the 90 "remote" ones with ``remote_noise`` times fixed noise, the
    others 0.8 times), a too-small "plan" group, and 40 unlabelled entities without a region rated in pairs."""
    from scored_reports import annotations_text, write_set

    rng = np.random.default_rng(seed)
    n, d, n_o = 400, 12, 40
    label = rng.integers(0, 4, n)
    region = np.where(np.arange(n) < 90, "remote", np.where(np.arange(n) % 2, "north", "south"))
    X = np.r_[1.5 * rng.standard_normal((4, d))[label]
              + np.where(region == "remote", remote_noise, 0.8)[:, None] * rng.standard_normal((n, d)),
              2 * rng.standard_normal((n_o, d))]
    ids = [f"e{i:03d}" for i in range(n)] + [f"o{i:02d}" for i in range(n_o)]
    meta = pd.DataFrame({"id": ids, "label": list(label) + [""] * n_o, "region": list(region) + [""] * n_o,
                         "plan": list(rng.choice(["free", "paid", "vip"], n, p=[0.6, 0.37, 0.03])) + [""] * n_o})
    files = {"ann.csv": annotations_text(X, ids, range(n, n + n_o))}
    return write_set(folder, X, ids, meta, files, {"fairness": "{attributes: [region, plan]}",
                                                   "annotations": "ann.csv", "annotation_level": "ordinal"}), X


def test_scorer_aggregates_are_the_recorded_gaps(tmp_path):
    """The worst attribute's gaps computed from the unit table are the chapter's numbers bit for bit (and from
    results/units/fairness.csv as compare reads it); the units are the entities of a compared group, with their
    groups; a bootstrap resample (repeated rows) gives the group means a groupby of the resample gives."""
    from scored_reports import recorded, run_report, scorer_units

    from embeval_report.metrics import fairness_units as fu
    from embeval_report.report.pairing import ModelReport

    m, _ = _grouped_set(tmp_path / "set", remote_noise=2.5)
    out = run_report(m, tmp_path / "report", ["fairness"], "A")
    rec = recorded(out, "fairness")
    units, plan, scorer = scorer_units(m, "fairness")
    assert len(units) == 400 and units["entity"].iloc[0] == "e000"
    assert list(json.loads(units["groups"].iloc[0])) == ["region", "plan"]
    assert json.loads(units["groups"].iloc[0])["region"] == "remote"
    assert {json.loads(g)["plan"] for g in units["groups"]} == {"free", "paid", None}  # vip: too small
    values = scorer.values(units)
    table = ModelReport.open(out).units["fairness"]
    for metric, v in values.items():
        assert v == rec["metrics"][metric]["value"] == scorer.aggregate(metric).value(table), metric
    assert rec["metrics"]["probe_accuracy_difference"]["verdict"] == "problematic"
    resample = units.iloc[np.random.default_rng(1).integers(0, len(units), len(units))]
    region = resample["groups"].map(lambda g: json.loads(g)["region"])
    means = resample.groupby(region)["probe_accuracy"].mean()
    gaps = fu.attribute_gaps(resample, "probe_accuracy")
    assert gaps[0] == pytest.approx((means.max() - means.min(), means.min() / means.max()), rel=0, abs=1e-12)


def test_scorer_plan_does_not_read_the_vectors(tmp_path):
    """Groups, the probe's sample and folds and k: the same plan for other vectors (whose units differ)."""
    from scored_reports import scorer_units

    from embeval_report.metrics.scoring import plan_fingerprint

    m, X = _grouped_set(tmp_path, remote_noise=2.5)
    a, plan_a, _ = scorer_units(m, "fairness")
    b, plan_b, _ = scorer_units(m, "fairness", 2 * X + np.random.default_rng(0).normal(0, 0.5, X.shape))
    assert plan_fingerprint(plan_a) == plan_fingerprint(plan_b)
    assert np.array_equal(plan_a.probe.folds, plan_b.probe.folds) and plan_a.k == 10
    assert a["groups"].equals(b["groups"]) and not a["label_agreement"].equals(b["label_agreement"])


def test_compare_finds_a_smaller_accuracy_gap_only_in_this_chapter(tmp_path, monkeypatch):
    """Two models that differ only in how noisy the remote region's vectors are: compare says B better on the
    probe-accuracy gap (a paired bootstrap over the entities) and finds no difference in the human-evaluation
    agreement (unlabelled entities outside every group)."""
    from scored_reports import assert_found_only_in, compare, run_report

    chapters = ["fairness", "human_evaluation"]
    a = run_report(_grouped_set(tmp_path / "A", remote_noise=3.0)[0], tmp_path / "ra", chapters, "A")
    b = run_report(_grouped_set(tmp_path / "B", remote_noise=0.8)[0], tmp_path / "rb", chapters, "B")
    table = compare(a, b, monkeypatch)
    assert_found_only_in(table, "fairness", ["probe_accuracy_difference", "label_agreement_difference"])
    assert set(table.loc[table["chapter"] == "fairness", "metric"]) == {
        f"{m}_{kind}" for m in ("probe_accuracy", "label_agreement", "k_occurrence") for kind in ("difference", "ratio")}


def test_weighted_gaps_are_those_of_the_bootstrap_samples():
    """Each gap aggregate under unit weights (all draws at once) equals its value on the resampled rows."""
    from embeval_report.metrics import fairness_units as fu

    rng = np.random.default_rng(4)
    n = 120
    groups = [json.dumps({"region": r, "plan": p}) for r, p in zip(rng.choice(["a", "b", "c"], n),
                                                                   rng.choice(["x", "y", None], n))]
    units = pd.DataFrame({"entity": [str(i) for i in range(n)], "groups": groups,
                          "probe_accuracy": np.where(rng.uniform(0, 1, n) < 0.2, np.nan, rng.integers(0, 2, n)),
                          "label_agreement": rng.uniform(0, 1, n), "k_occurrence": rng.gamma(2, 0.5, n)})
    draws = [rng.integers(0, n, n) for _ in range(60)]
    W = np.stack([np.bincount(d, minlength=n) for d in draws]).astype(float)
    for agg in fu.gap_aggregates():
        np.testing.assert_allclose(agg.boot(units, W), [agg.fn(units.iloc[d]) for d in draws], rtol=0, atol=1e-12,
                                   err_msg=agg.metric)


def test_findings_name_the_worst_served_group_and_a_significant_association():
    """The group gap names its worst- and best-served groups and quotes the chi-squared test's report-wide p (not
    rejected: a note); a WEAT association is a finding only where its test rejects report-wide."""
    from embeval_report.chapters import fairness as chapter
    from embeval_report.chapters.findings import ChapterResults

    def gap(v, verdict):
        return {"value": v, "ci_low": v - 0.03, "ci_high": v + 0.03, "verdict": verdict, "label": "gap",
                "reference": "seed; verdict: bands"}

    table = [{"group": "north", "probe_accuracy": 0.91, "probe_accuracy ci_low": 0.88, "probe_accuracy ci_high": 0.93,
              "note": ""},
             {"group": "islands", "probe_accuracy": 0.72, "probe_accuracy ci_low": 0.66, "probe_accuracy ci_high": 0.78,
              "note": ""},
             {"group": "overseas", "n": 3, "note": "too small"}]
    weat = [{"name": "a vs b ~ c vs d", "sets": ["a", "b", "c", "d"], "reason": ""}]
    info = {"fairness": {"groups": {"region": {"table": table}}, "weat": weat}}
    metrics = {"probe_accuracy_difference": gap(0.19, "problematic"),
               "probe_accuracy_difference__region": gap(0.19, "problematic"),
               "weat_effect_size__a_vs_b_c_vs_d": {"value": 1.5, "ci_low": 1.1, "ci_high": 1.9, "label": "d"}}

    def results(p_gap, p_weat, p_attributes=None):
        tests = [{"name": "probe accuracy by region", "test": "chi-squared", "p_value": p_gap, "p_holm": p_gap},
                 {"name": "WEAT: a vs b ~ c vs d", "test": "WEAT permutation test", "p_value": p_weat, "p_holm": p_weat}]
        if p_attributes is not None:
            tests.append({"name": "WEAT attributes: a vs b ~ c vs d", "test": "WEAT attribute permutation test",
                          "p_value": p_attributes, "p_holm": p_attributes})
        return ChapterResults("fairness", "Fairness", metrics, info, tests)

    found = {f.effect: f for f in chapter.findings(results(0.001, 0.004))}
    g, a = found["group gap"], found["association"]
    assert g.severity == "problematic" and "islands (region)" in g.title and g.evidence["group"] == "islands"
    assert g.evidence["best_group"] == "north" and "0.720" in g.sentence and "Holm-adjusted p 0.001" in g.sentence
    assert a.severity == "concerning" and a.title == "The vectors associate a with c and b with d"
    assert a.evidence["p_adjusted"] == 0.004 and "a large effect" in a.sentence
    found = {f.effect: f for f in chapter.findings(results(0.2, 0.2))}
    assert found["group gap"].severity == "note" and "within chance" in found["group gap"].sentence
    assert "association" not in found
    # random attribute sets could give it (the attribute-side test does not reject): a note that says so
    (a,) = [f for f in chapter.findings(results(0.001, 0.004, 0.3)) if f.effect == "association"]
    assert a.severity == "note" and "re-drawn at random" in a.sentence
    (a,) = [f for f in chapter.findings(results(0.001, 0.004, 0.01)) if f.effect == "association"]
    assert a.severity == "concerning"


def test_weat_attribute_test_against_brute_force():
    """The attribute side of the WEAT: every equal-size re-partition of A ∪ B, the WEAT statistic recomputed from
    association_scores of the re-drawn sets (the definition), against weat()'s exact attribute p-value."""
    from itertools import combinations

    from embeval_report.metrics import fairness as f

    rng = np.random.default_rng(5)
    X, Y, A, B = (rng.standard_normal((m, 6)) + shift for m, shift in ((4, 0.5), (5, -0.5), (4, 0.3), (4, -0.2)))
    r = f.weat(X, Y, A, B, seed=0)
    pool = np.vstack([A, B])

    def statistic(a_rows):
        b_rows = [i for i in range(len(pool)) if i not in a_rows]
        return f.association_scores(X, pool[list(a_rows)], pool[b_rows]).sum() - \
            f.association_scores(Y, pool[list(a_rows)], pool[b_rows]).sum()

    assert statistic(range(4)) == pytest.approx(r.statistic, rel=1e-12)
    every = np.array([statistic(c) for c in combinations(range(len(pool)), 4)])
    expected = np.mean(every >= r.statistic - 1e-12)
    assert r.p_attributes["method"] == "exact" and r.p_attributes["p_value"] == pytest.approx(expected, abs=1e-12)
