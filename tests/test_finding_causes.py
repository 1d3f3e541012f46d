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
