"""One finding per cause, and only per cause: two chapters' effects of the same name are different causes."""
from embeval_report.chapters.findings import Finding
from embeval_report.report.findings import merge_causes


def test_effects_of_one_name_in_two_chapters_stay_apart_and_a_shared_cause_merges():
    rec = Finding("problematic", "model", "recommendation", "Recommendations lose to a most-popular list", "…",
                  effect="baselines")
    det = Finding("problematic", "model", "anomaly", "Your detector loses to a free baseline", "…", effect="baselines")
    assert (rec.cause, det.cause) == ("recommendation: baselines", "anomaly: baselines")
    assert merge_causes([rec, det], {}) == [rec, det]  # the demo folded the detector into the recommendations
    drift = Finding("problematic", "model", "drift", "Later snapshots drift", "…", effect="drift", cause="drift")
    batch = Finding("concerning", "model", "monitoring", "New batches have shifted", "…", effect="batch shift",
                    cause="drift")
    (merged,) = merge_causes([drift, batch], {"monitoring": "Monitoring new batches"})
    assert merged.evidence["also"][0]["chapter"] == "monitoring" and "Monitoring new batches" in merged.sentence


def test_a_worse_silhouette_since_the_baseline_is_not_a_regression_of_the_task():
    """--baseline: only task metrics make the model's regression finding; a cluster-geometry metric (silhouette,
    Aggregate.task False) or a diagnostic chapter's number is shown in the comparison, never a finding."""
    from embeval_report.report.baseline import regression_findings

    def row(chapter, metric, diff):
        return {"chapter": chapter, "metric": metric, "label": metric, "verdict": "A better", "difference": diff,
                "effect": 0.01, "unit": "entities", "previous": 0.75, "value": 0.75 + diff, "interval": "simultaneous",
                "ci_low": diff - 0.01, "ci_high": diff + 0.01, "n": 600, "p_adjusted": 1e-9}
    doc = {"name": "model a", "comparisons": [row("clustering", "silhouette", -0.227), row("clustering", "ari", 0.0),
                                              row("hubness", "k_skewness", -0.5)]}
    doc["comparisons"][1]["verdict"] = "no difference larger than E"
    assert regression_findings(doc) == []
    doc["comparisons"].append(row("clustering", "nmi", -0.05))
    (f,) = regression_findings(doc)
    assert f.title == "Clustering alignment regressed on 1 of 2 metrics since model a" and f.metrics == ("nmi",)
