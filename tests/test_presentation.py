"""Statistics presentation (issue 26.6, 26.7): strict JSON everywhere, counts without a direction, every value
outside its interval marked, nothing printed twice, and sets of another dimension stated and left without the
metrics that need one shared space."""
from __future__ import annotations

import json
import math
import re
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import ortho_group

from embeval_report.chapters.recorder import Recorder, json_safe, json_text
from embeval_report.metrics.spec import Metric, MetricSpec


def strict_load(text: str):
    """``json.loads`` that refuses NaN and ±Infinity (RFC 8259)."""
    def refuse(token):
        raise ValueError(f"not valid JSON: {token}")
    return json.loads(text, parse_constant=refuse)


def assert_strict_json_folder(folder) -> list:
    """Every ``*.json`` under ``folder`` parses with :func:`strict_load`; returns the paths checked."""
    paths = sorted(p for p in folder.rglob("*.json"))
    assert paths
    for p in paths:
        strict_load(p.read_text())
    return paths


# ---------------------------------------------------------------------------------------------
# Strict JSON
# ---------------------------------------------------------------------------------------------

def test_json_text_maps_every_non_finite_number_to_null():
    doc = {"a": float("nan"), "b": [1.0, float("inf"), -math.inf], "c": np.float32("nan"), "d": np.float64(2.5),
           "e": np.array([1.0, np.nan]), "f": (np.int64(3), None), "g": pd.NA, "h": {"i": np.bool_(True)}}
    back = strict_load(json_text(doc))
    assert back == {"a": None, "b": [1.0, None, None], "c": None, "d": 2.5, "e": [1.0, None], "f": [3, None],
                    "g": None, "h": {"i": True}}
    assert json_safe(np.float32(0.5)) == 0.5 and isinstance(json_safe(np.float32(0.5)), float)
    with pytest.raises(ValueError):
        strict_load('{"x": NaN}')  # what json.dumps writes by default, and what the results files held


def test_the_recorder_writes_strict_json(tmp_path):
    rec = Recorder("demo", tmp_path)
    rec.add(Metric(name="m", value=float("nan"), direction="lower", reference="r", ci_low=float("-inf")))
    rec.note(events=[{"first_alert": float("nan")}], table=pd.DataFrame({"x": [np.nan, 1.0]}).to_dict("records"))
    doc = strict_load((tmp_path / "demo.json").read_text())
    assert doc["metrics"]["m"]["value"] is None and doc["info"]["events"] == [{"first_alert": None}]
    assert doc["info"]["table"] == [{"x": None}, {"x": 1.0}]


# ---------------------------------------------------------------------------------------------
# Counts have no direction
# ---------------------------------------------------------------------------------------------

def test_counts_have_no_direction_and_tables_show_none():
    from embeval_report.metrics import drift, rigor
    from embeval_report.monitoring import score
    from embeval_report.present.display import definitions_markdown, metrics_table

    counts = [rigor.SPECS[n] for n in ("tests_total", "tests_rejected_holm", "tests_rejected_bh")]
    counts += [drift.SPECS[n] for n in ("matched_entities", "new_entities", "departed_entities")]
    counts += [score.SPECS["batches"]]
    assert all(s.direction is None for s in counts)
    # counts of problems keep theirs
    assert score.SPECS["batches_alerting"].direction == "lower" and drift.SPECS["mean_drift"].direction == "lower"
    m = rigor.SPECS["tests_total"].record(314, verdict=False)
    assert m.to_json()["direction"] is None
    table = metrics_table({"tests_total": m})
    assert table.loc[0, "better"] == "" and "lower" not in table.to_string()
    assert "neither way is better" in definitions_markdown({"tests_total": m})
    with pytest.raises(ValueError, match="direction"):
        MetricSpec("x", "X", "sideways")


# ---------------------------------------------------------------------------------------------
# A value outside its interval is always marked
# ---------------------------------------------------------------------------------------------

def test_a_value_outside_its_interval_is_marked_in_tables_narrative_and_scorecard():
    from embeval_report.present.display import metrics_table, with_mark_note
    from embeval_report.present.format import MARK, MARK_NOTE, marked_value, scorecard_value, value_with_ci

    # the recommendation chapter's catalogue coverage: 0.119 with a basic interval 0.12–0.129
    cov = Metric(name="catalog_coverage", value=0.119, direction="higher", reference="r", ci_low=0.12,
                 ci_high=0.129025, bias_corrected=0.124605, ci_method="basic bootstrap")
    inside = Metric(name="ndcg", value=0.05, direction="higher", reference="r", ci_low=0.04, ci_high=0.06)
    table = metrics_table({"catalog_coverage": cov, "ndcg": inside})
    assert table.loc[0, "value"] == f"0.119, bias-corrected 0.1246 {MARK}" and table.loc[1, "value"] == "0.05"
    assert with_mark_note(table, "Caption.") == f"Caption. {MARK_NOTE}"
    assert with_mark_note(table.iloc[1:], "Caption.") == "Caption."
    # without a bias-corrected estimate the mark stays; at the interval's ends it does not fire
    assert marked_value(0.119, 0.12, 0.13) == f"0.119 {MARK}" and marked_value(0.12, 0.12, 0.13) == "0.12"
    assert marked_value(0.5, None, None) == "0.5"
    assert value_with_ci(0.119, 0.12, 0.129, ".3f") == "0.119 (95 % CI 0.120–0.129, which excludes the value)"
    assert value_with_ci(0.119, 0.12, 0.129, ".3f", bias_corrected=0.1246).startswith("0.119 (bias-corrected 0.125")
    assert value_with_ci(0.125, 0.12, 0.129, ".3f") == "0.125 (95 % CI 0.120–0.129)"
    assert scorecard_value(cov.to_record()).endswith(MARK) and not scorecard_value(inside.to_record()).endswith(MARK)


# ---------------------------------------------------------------------------------------------
# Nothing printed twice
# ---------------------------------------------------------------------------------------------

def test_the_correction_chapter_does_not_print_its_what_if_numbers_again():
    from embeval_report.chapters import correction
    from embeval_report.metrics.correction import compare_corrections

    X = np.random.default_rng(3).standard_normal((200, 12)) + 2.0
    c = compare_corrections(X, np.array(["a", "b"] * 100), k=5)
    text = correction.recorded_text(c.metrics)
    assert "`apcs_after_abtt`" not in text and "`apcs`" in text and "16 what-if numbers" in text
    # no number of the comparison table is repeated
    assert not re.search(r"\d\.\d{3}", text)


def printed_twice(notebook_path) -> dict:
    """Paragraphs (over 80 characters) and table rows that an executed chapter notebook prints more than once."""
    nb = json.loads(notebook_path.read_text())
    outputs = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/markdown")
            if text:
                outputs.append("".join(text) if isinstance(text, list) else text)
    blocks = [b.strip() for o in outputs for b in re.split(r"\n\s*\n", o)]
    paragraphs = [b.lstrip("> ").strip() for b in blocks if len(b) > 80 and not b.startswith(("|", ":", "<", "-"))]
    rows = [line for b in blocks if b.startswith("|") for line in b.splitlines()[2:]]
    return {k: n for k, n in Counter(paragraphs + rows).items() if n > 1}


# ---------------------------------------------------------------------------------------------
# A report whose runs, tranches and snapshots include another dimension (issue 26.7)
# ---------------------------------------------------------------------------------------------

def _table(path, ids, X):
    df = pd.DataFrame(X.astype(np.float32), columns=[f"d{j}" for j in range(X.shape[1])])
    df.insert(0, "id", ids)
    df.to_parquet(path, index=False)


def _monitor_history(folder, X):
    from embeval_report.io.monitor_history import append_history
    from embeval_report.monitoring import build_profile, score_batch
    from embeval_report.monitoring.score import history_record

    p = build_profile(X, name="ref", sample_size=100, calibration=60, device="cpu")
    rng = np.random.default_rng(9)
    for i, shift in enumerate((0.0, 0.0, 1.0)):
        Y = X[rng.choice(len(X), 80)] + 0.05 * rng.standard_normal((80, X.shape[1])) + shift
        s = score_batch(p, Y.astype(np.float32), seed=i, n_perm=150, mmd_sample=80, ks_sample=80,
                        classifier_sample=80, anomaly_sample=80, device="cpu")
        append_history(folder / "h.jsonl", history_record(s, batch=f"week {i + 1}", timestamp=f"2024-01-0{i + 1}"))
    return "h.jsonl"


def test_a_report_with_sets_of_another_dimension_states_them_and_writes_strict_json(tmp_path):
    from embeval_report.cli import main
    from embeval_report.demo.training_log import demo_side_data as training_log

    rng = np.random.default_rng(70)
    n, d = 160, 8
    X = rng.standard_normal((n, d)) + 0.5
    ids = [f"e{i}" for i in range(n)]
    np.save(tmp_path / "v.npy", X.astype(np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    small = X @ rng.standard_normal((d, 5))
    np.save(tmp_path / "r1.npy", (X @ ortho_group.rvs(d, random_state=71) + 0.1).astype(np.float32))
    _table(tmp_path / "r2.parquet", ids, small)
    np.save(tmp_path / "t1.npy", (X + rng.standard_normal(X.shape)).astype(np.float32))
    _table(tmp_path / "t2.parquet", ids, small)
    np.save(tmp_path / "s1.npy", (X + 0.05 * rng.standard_normal(X.shape)).astype(np.float32))
    manifest = {"vectors": "v.npy", "ids": "ids.txt", "runs": ["r1.npy", "r2.parquet"],
                "tranches": [{"name": "t1", "vectors": "t1.npy"}, {"name": "t2", "vectors": "t2.parquet"},
                             {"name": "t3", "vectors": "v.npy"}],
                "snapshots": [{"name": "s1", "vectors": "s1.npy"}, {"name": "s2", "vectors": "r2.parquet"}],
                "monitor_history": _monitor_history(tmp_path, X.astype(np.float32)),
                **training_log(tmp_path)}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(manifest))
    out = tmp_path / "out"
    chapters = "stability,training_stability,drift,monitoring,correction,training_diagnostics"
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--chapters", chapters, "--formats", "html",
                 "--device", "cpu"]) == 0
    checked = {p.name for p in assert_strict_json_folder(out)}
    assert {"metrics.json", "run.json", "drift.json", "stability.json"} <= checked
    doc = strict_load((out / "metrics.json").read_text())["chapters"]
    assert all(doc[c]["status"] == "ok" for c in chapters.split(","))
    results = {c: strict_load((out / "results" / f"{c}.json").read_text()) for c in chapters.split(",")}
    assert results["stability"]["info"]["dimension_mismatch"] == [{"name": "r2.parquet", "d": 5}]
    assert results["training_stability"]["info"]["dimension_mismatch"] == [{"name": "t2", "d": 5}]
    assert results["drift"]["info"]["dimension_mismatch"] == [{"name": "s2", "d": 5}]
    m = doc["stability"]["metrics"]
    assert m["procrustes_disparity"]["value"] is None and m["knn_overlap"]["value"] is not None
    note = results["stability"]["metrics"]["procrustes_disparity"]["note"]
    assert "r2.parquet has d = 5" in note and "main set d = 8" in note
    assert doc["drift"]["metrics"]["mean_drift"]["value"] is None  # the latest snapshot is the 5-d one
    assert doc["drift"]["metrics"]["knn_overlap_baseline"]["value"] is not None
    assert doc["training_stability"]["metrics"]["tranche_movement_last"]["value"] is None
    html = (out / "report.html").read_text()
    assert html.count("Dimensions.") >= 3
    # nothing printed twice, in any chapter
    for nb in sorted((out / "chapters").glob("*.ipynb")):
        assert printed_twice(nb) == {}, nb.name


# ---------------------------------------------------------------------------------------------
# Degenerate but real: n <= d (issue 29.5)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [30, 40, 41, 400])
def test_thresholds_that_assume_n_above_d_give_no_verdict_when_n_is_at_most_d(n):
    import warnings

    from embeval_report.chapters import collapse as collapse_chapter
    from embeval_report.chapters import isotropy as isotropy_chapter
    from embeval_report.errors import UndefinedMetricWarning
    from embeval_report.metrics.collapse import measure_collapse
    from embeval_report.metrics.isotropy import measure_isotropy
    from embeval_report.metrics.spec import NOT_ESTIMABLE

    d = 40
    X = np.random.default_rng(n).standard_normal((n, d)) * np.r_[np.full(4, 10.0), np.ones(d - 4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        iso, col = measure_isotropy(X, n_boot=20), measure_collapse(X, n_boot=20)
    gated = [iso.metrics[k] for k in ("condition_number", "participation_ratio_fraction", "dims_for_90pct_variance")]
    gated.append(col.metrics["effective_rank"])
    if n <= d:  # fires: the value is kept, the verdict is not, and the note says why
        assert all(m.verdict is None and m.note.startswith(NOT_ESTIMABLE) for m in gated)
        assert f"n = {n}, d = {d}" in gated[0].note
        assert iso.values["condition_number"] == math.inf and gated[1].value is not None
        assert "carry no verdict (not estimable" in isotropy_chapter.narrative(iso)
        assert "effective-rank part is not estimable" in collapse_chapter.collapse_callout(col)["text"]
        assert not col.collapse_detected
    elif n < 10 * d:  # full rank, but the spectral bands need n >= 10 d (Marchenko-Pastur): no verdict, said why
        assert all(m.verdict is None and "n ≥ 10·d" in m.note for m in gated[:3])
        assert gated[3].verdict is not None and not gated[3].note.startswith(NOT_ESTIMABLE)
    else:  # must not fire: enough vectors per dimension
        assert all(m.verdict is not None and not m.note.startswith(NOT_ESTIMABLE) for m in gated)
        assert "not estimable" not in isotropy_chapter.narrative(iso)
    # thresholds that do not assume n > d keep their verdicts either way
    assert iso.metrics["apcs"].verdict is not None and col.metrics["dead_dimensions"].verdict is not None


def test_a_full_rank_spec_without_n_keeps_its_verdict():
    from embeval_report.metrics.isotropy import SPECS

    m = SPECS["condition_number"].record(500.0, d=64)
    assert m.verdict == "problematic" and m.note == ""
    assert SPECS["condition_number"].record(500.0, d=64, n=64).verdict is None


@pytest.mark.parametrize("folds", [3, 4])
def test_no_interval_over_three_or_fewer_folds(folds):
    from scipy import stats

    from embeval_report.metrics.classification import evaluate_node_classification

    rng = np.random.default_rng(5)
    y = np.repeat(["a", "b", "c"], 40)
    X = rng.standard_normal((120, 6)) + (y[:, None] == np.array(["a", "b", "c", "a", "b", "c"])) * 1.5
    r = evaluate_node_classification(X, y, n_folds=folds, seed=0)
    m = r.metrics["accuracy"]
    if folds <= 3:  # fires: the value stays, the interval goes, the note says why
        assert m.ci_low is None and m.ci_high is None and m.note == "3 folds: an interval needs at least 4"
    else:  # must not fire: Student-t over 4 folds
        acc = r.folds[r.folds.model == "probe"]["accuracy"].to_numpy()
        half = stats.t.ppf(0.975, 3) * acc.std(ddof=1) / 2
        assert (m.ci_low, m.ci_high) == pytest.approx((max(acc.mean() - half, 0), min(acc.mean() + half, 1)))
        assert m.note == ""
