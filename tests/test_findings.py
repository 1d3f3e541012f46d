"""Findings: each rule fires where its problem is planted and stays silent where it is not; the report's status,
metrics.json and --fail-on follow them; every findings file is strict JSON."""
import json
import math

import numpy as np
import pytest

from embeval_report.chapters import anomaly, human_evaluation, link_prediction, node_classification, recommendation
from embeval_report.chapters import stability, temporal_link_prediction, training_diagnostics
from embeval_report.chapters.findings import (ChapterResults, Effect, Finding, baseline_finding, threshold_findings,
                                              worst)
from embeval_report.chapters.registry import chapter, discover
from embeval_report.cli import main
from embeval_report.report.findings import derive_findings


def metric(value, verdict=None, lo=None, hi=None, label=None, ref="seed 000 §1; verdict Table X"):
    return {"value": value, "ci_low": lo, "ci_high": hi, "verdict": verdict, "label": label, "reference": ref,
            "direction": "higher"}


def results(name="x", metrics=None, info=None, tests=None):
    return ChapterResults(name, name.title(), metrics or {}, info or {}, tests or [])


def recorded_test(name, p_holm, **kw):
    return {"name": name, "test": kw.get("test", "a test"), "p_value": p_holm, "p_holm": p_holm,
            "rejected_holm": p_holm <= 0.05}


# ------------------------------------------------------------------------ thresholds, grouped by effect

def test_flagged_metrics_of_one_effect_make_one_finding_led_by_the_worst():
    r = results("isotropy", {"apcs": metric(0.58, "problematic", 0.57, 0.59, "APCS"),
                             "condition_number": metric(156.0, "problematic", label="κ"),
                             "top10_variance_ratio": metric(0.5, "concerning", label="top-10"),
                             "uniform": metric(0.1, "concerning", label="other"),
                             "fine": metric(0.9, "healthy")})
    e = Effect("anisotropy", ("condition_number", "apcs", "top10_variance_ratio"), "Narrow cone", "Centre them:")
    found = threshold_findings(r, (e,))
    assert [f.effect for f in found] == ["anisotropy", "uniform"]
    cone = found[0]
    assert cone.severity == "problematic" and cone.metrics[0] == "condition_number"  # first of the worst, by effect
    assert set(cone.metrics) == {"apcs", "condition_number", "top10_variance_ratio"}
    assert "2 related metrics agree" in cone.sentence and cone.sentence.startswith("Centre them:")
    assert found[1].severity == "concerning" and worst(found) == "problematic"


def test_no_flagged_metric_no_finding():
    assert threshold_findings(results(metrics={"a": metric(1.0, "healthy"), "b": metric(2.0)})) == []
    assert worst([]) == "healthy"


def test_a_finding_is_strict_json_and_validated():
    f = Finding("concerning", "model", "x", "t", "s", evidence={"value": float("nan"), "ci": [1.0, float("inf")]})
    assert json.loads(json.dumps(f.to_json(), allow_nan=False))["evidence"] == {"value": None, "ci": [1.0, None]}
    with pytest.raises(ValueError, match="severity"):
        Finding("bad", "model", "x", "t", "s")
    with pytest.raises(ValueError, match="category"):
        Finding("healthy", "elsewhere", "x", "t", "s")


# ------------------------------------------------------------------------ baselines

@pytest.mark.parametrize("lo, hi, p, expected", [
    (-0.5, -0.4, 1e-9, "problematic"),   # below, and the test rejects: loses
    (-0.5, -0.4, 0.3, "concerning"),     # below, but not after the adjustment: does not beat
    (-0.1, 0.1, 0.4, "concerning"),      # straddles 0: does not beat
    (0.1, 0.2, 1e-6, None),              # above, and the test rejects: beats
])
def test_baseline_rule_decides_by_the_interval_and_the_adjusted_test(lo, hi, p, expected):
    r = results(tests=[recorded_test("m vs b", p)])
    c = {"baseline": "b", "metric": "m", "model": 0.1, "baseline_value": 0.2, "difference": (lo + hi) / 2,
         "ci_low": lo, "ci_high": hi, "test": "m vs b"}
    f = baseline_finding(r, [c], subject="the vectors", action="Act:")
    assert (f and f.severity) == expected


def _rec(diff_most, diff_random, p_most, p_random):
    info = {"baselines": [{"metric": "nDCG@10", "embeddings": 0.3, "most popular": 0.3 - diff_most,
                           "random": 0.3 - diff_random}],
            "lift_over_baselines": [
                {"baseline": "most popular", "mean difference": diff_most, "ci_low": diff_most - 0.01,
                 "ci_high": diff_most + 0.01, "p_value": p_most},
                {"baseline": "random", "mean difference": diff_random, "ci_low": diff_random - 0.01,
                 "ci_high": diff_random + 0.01, "p_value": p_random}]}
    tests = [recorded_test("ndcg_at_10: embeddings vs most popular", p_most), recorded_test("ndcg_at_10: embeddings vs random", p_random)]
    return recommendation.findings(results("recommendation", info=info, tests=tests))


def test_recommendation_loses_to_most_popular_and_is_silent_when_it_beats_both():
    (f,) = _rec(-0.46, -0.001, 1e-30, 0.4)
    assert f.severity == "problematic" and "most-popular" in f.title and f.rule == "baseline"
    assert "do not beat random lists" in f.sentence and f.evidence["p_adjusted"] == 1e-30
    assert _rec(0.2, 0.25, 1e-20, 1e-30) == []


def _anomaly(lo, hi, chance_p=1e-9, user=True, delong_p=1e-6):
    m = {"roc_auc": metric(0.72, label="ROC-AUC [mine]"), "roc_auc__knn": metric(0.91, label="ROC-AUC [k-NN distance]"),
         "roc_auc_difference__mine_vs_knn": metric((lo + hi) / 2, lo=lo, hi=hi)}
    test = "anomaly: mine vs k-NN distance (ROC-AUC)"
    info = {"primary": "mine", "scores_file": "s.csv" if user else None,
            "difference_tests": {"roc_auc_difference__mine_vs_knn": test}}
    return anomaly.findings(results("anomaly", m, info, [recorded_test("anomaly: mine vs chance", chance_p),
                                                         recorded_test(test, delong_p, test="DeLong")]))


def test_anomaly_detector_below_a_free_baseline_and_no_better_than_chance():
    (f,) = _anomaly(-0.24, -0.13)
    assert f.severity == "problematic" and "k-NN distance" in f.title
    assert "DeLong, report-wide Holm-adjusted p" in f.sentence and f.evidence["p_adjusted"] == 1e-6
    assert _anomaly(-0.24, -0.13, delong_p=0.2) == []  # the paired test does not reject report-wide: no loss
    assert _anomaly(-0.05, 0.08) == [] and _anomaly(0.02, 0.1) == []
    (g,) = _anomaly(0.02, 0.1, chance_p=0.6)
    assert g.title == "Your detector does no better than chance"


def _stability(p, corr_items, whole="healthy"):
    info = {"subsets": [{"grouping": "kind", "subset": "item", "k-NN overlap": 0.24, "ci_low": 0.2, "ci_high": 0.3},
                        {"grouping": "kind", "subset": "user", "k-NN overlap": 0.92, "ci_low": 0.9, "ci_high": 0.94}],
            "subset_correlations": [
                {"grouping": "kind", "subset": "item", "n": 900, "similarity correlation": corr_items,
                 "verdict": stability.BANDS.verdict(corr_items)},
                {"grouping": "kind", "subset": "user", "n": 4000, "similarity correlation": 0.999, "verdict": "healthy"}]}
    m = {"pairwise_similarity_correlation": metric(0.97, whole), "knn_overlap": metric(0.78)}
    return stability.findings(results("stability", m, info, [recorded_test("kind: item vs user (Mann–Whitney U)", p)]))


def test_the_worst_kind_decides_when_kinds_differ_significantly():
    (f,) = _stability(1e-40, 0.77)
    assert f.severity == "problematic" and "“item”" in f.title and f.rule == "worst group"
    assert "24%" in f.sentence and "92% for user" in f.sentence and f.evidence["compared_with"] == "user"
    assert _stability(0.2, 0.77) == []            # the kinds do not differ after the adjustment
    assert _stability(1e-40, 0.97) == []          # every kind is as stable as the whole set
    assert _stability(1e-40, 0.90)[0].severity == "concerning"


def _temporal(lo, hi, last_low=0.07, chance=0.05):
    m = {"mrr_change_over_horizon": metric((lo + hi) / 2, lo=lo, hi=hi)}
    info = {"by_horizon": [{"horizon": "before", "MRR": 0.14, "mid": math.nan},
                           {"horizon": "0–15 days", "MRR": 0.11, "MRR low": 0.10, "chance MRR": chance, "mid": 7.0},
                           {"horizon": "59–73 days", "MRR": 0.08, "MRR low": last_low, "chance MRR": chance, "mid": 66.0}]}
    return temporal_link_prediction.findings(results("temporal_link_prediction", m, info))


def test_performance_falling_with_the_horizon_is_an_event():
    assert _temporal(-0.047, -0.022)[0].severity == "concerning"
    assert _temporal(-0.047, -0.022, last_low=0.04)[0].severity == "problematic"  # the last horizon reaches chance
    assert _temporal(-0.02, 0.01) == []


def test_a_random_split_that_looks_better_than_the_temporal_one_is_a_protocol_finding():
    rows = [{"split": "temporal", "MRR (embedding)": 0.108}, {"split": "random", "MRR (embedding)": 0.134}]

    def gap(lo, hi, split="given"):
        m = {"random_split_mrr_gap": metric((lo + hi) / 2, lo=lo, hi=hi, label="MRR gap")}
        info = {"random_vs_temporal": rows, "link_prediction_split": split}
        return temporal_link_prediction.findings(results("temporal_link_prediction", m, info))

    (f,) = gap(0.019, 0.033)
    assert (f.severity, f.category, f.effect, f.kind) == ("concerning", "protocol", "random split", "evaluation")
    assert "0.134" in f.sentence and "0.108" in f.sentence and f.sentence.startswith("Judge link prediction")
    assert gap(-0.004, 0.01) == [] and gap(-0.03, -0.01) == []    # no optimism a reader must discount
    # the link-prediction chapter split the same timestamped edges by time itself: nothing to warn about
    assert gap(0.019, 0.033, split="time") == []


def _events(**kw):
    base = {"run": "r", "diverged": False, "diverged_from": None, "first_nonfinite": None, "overfitting": False,
            "overfitting_onset": None, "overfitting_rise": None, "oscillates": False}
    return [dict(base, **kw)]


def test_training_events_diverged_and_overfitting():
    events = _events(run="a") + _events(run="b", diverged=True, diverged_from=3200, first_nonfinite=4100) + \
        _events(run="c", overfitting=True, overfitting_onset=1900, overfitting_rise=1.7)
    found = training_diagnostics.findings(results("training_diagnostics", info={"run_events": events}))
    assert [(f.severity, f.category, f.kind) for f in found] == [("problematic", "training process", "evaluation"),
                                                                 ("concerning", "training process", "evaluation")]
    assert "b from step 3,200" in found[0].sentence and "c from step 1,900" in found[1].sentence
    assert "training_run:" in found[0].sentence  # which run made the vectors is unknown: say how to tell
    assert training_diagnostics.findings(results(info={"run_events": _events() * 2})) == []
    # the evaluated run diverged: the model's finding; the other overfitting run is not the evaluated vectors
    found = training_diagnostics.findings(results("training_diagnostics", info={"run_events": events,
                                                                                "evaluated_run": "b"}))
    assert [(f.title, f.kind) for f in found] == [("The evaluated training run diverged", "model"),
                                                  ("1 of 3 training runs overfit", "evaluation")]
    assert "not the run that produced these vectors" in found[1].sentence
    found = training_diagnostics.findings(results("training_diagnostics", info={"run_events": events,
                                                                                "evaluated_run": "a"}))
    assert {f.kind for f in found} == {"evaluation"}  # the evaluated run converged


def test_flagged_raters_are_an_evaluation_data_finding():
    info = {"flagged_raters": {"r3": ["gold accuracy 62% < 70%"]},
            "alpha_without_flagged": {"value": 0.94, "ci_low": 0.92, "ci_high": 0.95}}
    m = {"krippendorff_alpha": metric(0.56, "problematic", 0.5, 0.62)}
    (f,) = human_evaluation.findings(results("human_evaluation", m, info))
    assert (f.severity, f.category, f.effect) == ("problematic", "evaluation data", "rater agreement")
    assert "0.940" in f.sentence
    assert human_evaluation.findings(results("human_evaluation", m, {"flagged_raters": {}})) == []


def test_graph_heuristic_beating_the_vectors_and_the_majority_class_baseline():
    rows = [{"method": "embedding (this set)", "MRR": 0.10, "MRR 95 % CI": "0.090 – 0.110"},
            {"method": "Adamic–Adar", "MRR": 0.20, "MRR 95 % CI": "0.180 – 0.220"}]
    (f,) = link_prediction.findings(results("link_prediction", info={"heuristics": rows}))
    assert "Adamic–Adar" in f.title
    rows[1].update({"MRR": 0.09, "MRR 95 % CI": "0.080 – 0.100"})
    assert link_prediction.findings(results("link_prediction", info={"heuristics": rows})) == []
    info = {"baselines": {"majority": {"accuracy": 0.30}}}
    assert node_classification.findings(results("nc", {"accuracy": metric(0.31, lo=0.28, hi=0.34)}, info))
    assert node_classification.findings(results("nc", {"accuracy": metric(0.88, lo=0.87, hi=0.9)}, info)) == []


# ------------------------------------------------------------------------ the report's findings

def test_derive_findings_sorts_worst_first_and_a_failed_chapter_is_a_protocol_finding(tmp_path):
    iso = {"chapter": "isotropy", "metrics": {"apcs": metric(0.5, "problematic", 0.4, 0.6, "APCS")}, "info": {},
           "tests": []}
    uni = {"chapter": "uniformity", "metrics": {"uniformity": metric(-0.9, "concerning", label="U")}, "info": {},
           "tests": []}
    (tmp_path / "isotropy.json").write_text(json.dumps(iso))
    (tmp_path / "uniformity.json").write_text(json.dumps(uni))
    chapters = [c for c in discover() if c.name in ("isotropy", "uniformity", "hubness")]
    found = derive_findings(tmp_path, chapters, {"isotropy": ("ok", ""), "uniformity": ("ok", ""),
                                                 "hubness": ("failed", "RuntimeError: boom")})
    # geometry only: no task says what the diagnostics cost, so they are notes (uniformity merges into the
    # anisotropy, its cause); the failure is the evaluation's; neither sets the status, the scope says why
    assert [(f.chapter, f.kind, f.severity) for f in found] == [
        ("isotropy", "diagnostic", "note"), ("hubness", "evaluation", "concerning")]
    assert found[1].category == "protocol" and "boom" in found[1].sentence
    assert "No task of this report says whether it costs anything" in found[0].sentence
    assert "uniformity" in found[0].metrics and found[0].rule == "threshold (no task)"
    doc = json.loads((tmp_path / "findings.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert doc["status"] == "healthy" and doc["scope"] == "geometry only" and len(doc["findings"]) == 2


def test_findings_of_one_cause_merge_into_one(tmp_path):
    """Poor uniformity is the anisotropy seen on the sphere: with both flagged the report says it once."""
    iso = {"chapter": "isotropy", "metrics": {"apcs": metric(0.5, "problematic", 0.4, 0.6, "APCS")}, "info": {},
           "tests": []}
    uni = {"chapter": "uniformity", "metrics": {"uniformity": metric(-0.9, "concerning", label="Uniformity")},
           "info": {}, "tests": []}
    for name, doc in (("isotropy", iso), ("uniformity", uni)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    chapters = [c for c in discover() if c.name in ("isotropy", "uniformity")]
    (f,) = derive_findings(tmp_path, chapters, {c.name: ("ok", "") for c in chapters})
    assert f.chapter == "isotropy" and f.cause == "anisotropy" and f.metrics == ("apcs", "uniformity")
    assert "The same shows in Uniformity and alignment" in f.sentence
    assert f.evidence["also"] == [{"chapter": "uniformity", "title": "The vectors do not spread over the sphere",
                                   "severity": "note"}]  # no task: what either costs is unknown


def _remedy_row(remedy, chapter, metric, diff, verdict):
    return {"remedy": remedy, "chapter": chapter, "title": chapter.replace("_", " ").capitalize(), "metric": metric,
            "label": metric, "diff": diff, "ci_low": diff - 0.01, "ci_high": diff + 0.01, "p_adjusted": 0.001,
            "effect": 0.01, "verdict": verdict}


@pytest.mark.parametrize("improves", [True, False])
def test_a_diagnostic_is_concerning_only_when_a_remedy_improves_a_task(tmp_path, improves):
    iso = {"chapter": "isotropy", "metrics": {"apcs": metric(0.5, "problematic", 0.4, 0.6, "APCS")}, "info": {},
           "tests": []}
    nc = {"chapter": "node_classification", "metrics": {"accuracy": metric(0.9, lo=0.88, hi=0.92)},
          "info": {"baselines": {"majority": {"accuracy": 0.3}}}, "tests": []}
    rows = [_remedy_row("centring", "node_classification", "accuracy", 0.05 if improves else 0.001,
                        "B better" if improves else "no difference larger than E")]
    rem = {"chapter": "remedies", "metrics": {}, "tests": [],
           "info": {"remedies": {"centring": {"label": "centring", "answers": ["isotropy"]}}, "table": rows}}
    for name, doc in (("isotropy", iso), ("node_classification", nc), ("remedies", rem)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    chapters = [c for c in discover() if c.name in ("isotropy", "node_classification", "remedies")]
    found = derive_findings(tmp_path, chapters, {c.name: ("ok", "") for c in chapters})
    (f,) = [f for f in found if f.chapter == "isotropy"]
    assert f.kind == "diagnostic" and f.rule == "remedy check"
    assert f.severity == ("concerning" if improves else "note")
    assert ("improves Node classification: accuracy by +0.050" in f.sentence) == improves
    assert ("costs no task" in f.sentence) != improves
    doc = json.loads((tmp_path / "findings.json").read_text())
    assert doc["status"] == "healthy" and "scope" not in doc  # a diagnostic never sets the status


def test_every_chapter_declares_how_its_results_become_findings():
    """Every effect names metrics its chapter records (spelled as in its MetricSpecs) and a valid category."""
    from embeval_report.chapters.findings import CATEGORIES

    for spec in discover():
        for e in spec.effects:
            assert e.category in CATEGORIES and e.metrics and e.title, (spec.name, e.name)
    assert chapter("recommendation").findings is recommendation.findings


def _set(tmp_path, X):
    np.save(tmp_path / "x.npy", X.astype(np.float32))
    return tmp_path / "x.npy"


@pytest.mark.parametrize("anisotropic", [True, False])
def test_fail_on_gates_on_the_findings(tmp_path, anisotropic, capsys):
    """The geometry alone never fails a gate: without a task a flagged diagnostic is a note (what it costs is
    unknown), the status rests on model findings only and metrics.json says the report is geometry only."""
    rng = np.random.default_rng(0)
    # isotropic: every Table 217.2 row healthy; n >= 10 d, so that every row has a verdict (at 1,400 x 128 as at
    # 3,000 x 256, for a third of the chapter's CPU)
    X = rng.standard_normal((1400, 128)) + (6.0 if anisotropic else 0.0)
    out = tmp_path / "out"
    run = ["run", str(_set(tmp_path, X)), "--out", str(out), "--chapters", "isotropy", "--formats", "html"]
    assert main([*run, "--fail-on", "concerning"]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["status"] == "healthy" and doc["scope"] == "geometry only"
    assert doc["scope_text"].startswith("geometry only: add labels")
    assert [(f["chapter"], f["kind"], f["severity"]) for f in doc["findings"]] == (
        [("isotropy", "diagnostic", "note")] if anisotropic else [])
    assert "reached" not in capsys.readouterr().err


# ------------------------------------------------------------------------ --baseline

def _retrieval_model(folder, noise):
    from test_compare import _model

    return _model(folder, noise)


def test_baseline_puts_the_previous_model_beside_this_one_and_regressions_are_findings(tmp_path, capsys):
    prod, new = _retrieval_model(tmp_path / "prod", 0.5), _retrieval_model(tmp_path / "new", 1.6)
    common = ["--chapters", "retrieval", "--formats", "html", "--device", "cpu"]
    assert main(["run", str(prod), "--out", str(tmp_path / "r1"), *common]) == 0
    assert main(["run", str(new), "--out", str(tmp_path / "r2"), "--baseline", str(tmp_path / "r1"), *common,
                 "--fail-on", "problematic"]) == 3
    doc = json.loads((tmp_path / "r2" / "metrics.json").read_text())
    regressions = [f for f in doc["findings"] if f["rule"] == "comparison"]
    assert regressions and all(f["severity"] == "problematic" and f["chapter"] == "retrieval" for f in regressions)
    assert len(regressions) == 1 and "mrr" in regressions[0]["metrics"]  # one finding per task
    found = regressions[0]
    base = json.loads((tmp_path / "r2" / "results" / "baseline.json").read_text())
    row = next(c for c in base["comparisons"] if c["metric"] == "mrr")
    units = {r: __import__("pandas").read_csv(tmp_path / r / "results" / "units" / "retrieval.csv") for r in ("r1", "r2")}
    assert row["difference"] == pytest.approx(units["r2"]["mrr"].mean() - units["r1"]["mrr"].mean())
    worst = next(c for c in base["comparisons"] if c["metric"] == found["evidence"]["metric"])
    assert row["verdict"] == "A better" and found["evidence"]["previous"] == pytest.approx(worst["previous"])
    html = (tmp_path / "r2" / "report.html").read_text()
    assert "Change since the previous model" in html and "Better than the last model" in html
    capsys.readouterr()
    assert main(["run", str(new), "--out", str(tmp_path / "r3"), "--baseline", str(tmp_path / "prod"), *common]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--baseline" in err[0] and "not an embeval-report folder" in err[0]


def test_training_run_must_name_a_run_of_the_log(tmp_path):
    from embeval_report.errors import InputError
    from embeval_report.io import load_source
    from embeval_report.io.side_data import load_side_data

    np.save(tmp_path / "v.npy", np.random.default_rng(0).standard_normal((20, 4)).astype(np.float32))
    rows = [f"{run},{s},{1.0 / s}" for run in ("base", "fast") for s in range(1, 30)]
    (tmp_path / "log.csv").write_text("run,step,loss\n" + "\n".join(rows) + "\n")
    for run, ok in (("base", True), ("nope", False)):
        (tmp_path / "m.yaml").write_text(f"vectors: v.npy\ntraining_log: log.csv\ntraining_run: {run}\n")
        es = load_source(tmp_path / "m.yaml")
        if ok:
            assert load_side_data(es).training_log.runs == ["base", "fast"]
        else:
            with pytest.raises(InputError, match=r"training_run: 'nope' is not a run of the training log \(its runs: "
                                                 r"base, fast\)"):
                load_side_data(es)
