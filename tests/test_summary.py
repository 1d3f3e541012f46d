"""The Summary chapter's tables and narrative from recorded results."""
from embeval_report.chapters import summary
from embeval_report.present.display import Link


def run_and_results():
    run = {"name": "set <x>", "n": 10, "d": 4, "seed": 0, "device": "cpu",
           "chapters": [{"name": "summary", "title": "Summary", "order": 0, "status": "ok", "reason": "", "seconds": 1},
                        {"name": "a", "title": "A", "order": 10, "status": "ok", "reason": "", "seconds": 2.5},
                        {"name": "b", "title": "B", "order": 20, "status": "failed", "reason": "ValueError: x",
                         "seconds": 1},
                        {"name": "c", "title": "C", "order": 30, "status": "skipped", "reason": "needs runs",
                         "seconds": 0}]}
    m = lambda v, verdict, lo=None, hi=None: {"value": v, "ci_low": lo, "ci_high": hi, "verdict": verdict,
                                              "direction": "lower", "reference": "ref", "label": "lab"}
    results = {"a": {"metrics": {"x": m(1.0, "healthy", 0.5, 1.5), "y": m(2.0, "problematic", 2.5, 3.0),
                                 "z": m(3.0, None)}},
               "b": {"metrics": {"w": m(0.2, "concerning")}}}
    return run, results


def test_scorecard_is_worst_first_links_chapters_and_marks_biased_intervals():
    run, results = run_and_results()
    card = summary.scorecard(run, results)
    assert card["verdict"].tolist() == ["problematic", "concerning", "healthy"]  # z has no verdict
    assert isinstance(card.loc[0, "chapter"], Link) and card.loc[0, "chapter"].href == "#chapter-a"
    assert card.loc[0, "value [95 % CI]"] == "2 [2.5, 3] †" and card.loc[2, "value [95 % CI]"] == "1 [0.5, 1.5]"
    assert summary.needs_bias_note(card)


def test_chapter_status_and_narrative():
    run, results = run_and_results()
    status = summary.chapter_status(run)
    assert status["status"].tolist() == ["ran", "failed", "not run"]
    assert status.loc[2, "detail"] == "needs runs" and status.loc[2, "time (s)"] == "—"
    text = summary.narrative(run, summary.scorecard(run, results))
    assert "set &lt;x&gt;" in text and "1 failed (B)" in text and "1 are problematic and 1 concerning" in text


def found(*severities):
    return {"status": max(severities, key=["healthy", "concerning", "problematic"].index) if severities else "healthy",
            "findings": [{"severity": s, "category": c, "chapter": "a", "title": f"T{i} <b>", "sentence": f"S{i}.",
                          "section": "chapter-a"}
                         for i, (s, c) in enumerate(zip(severities, ["model", "evaluation data"] * 10))]}


def test_the_first_screen_leads_with_the_status_and_the_top_findings_by_category():
    run, _ = run_and_results()
    titles = {c["name"]: c["title"] for c in run["chapters"]}
    f = found(*["problematic"] * 3, *["concerning"] * 6)
    assert summary.status_line(f).startswith("**Status: problematic.** Do not ship this model as it is: 3 finding(s)")
    top = summary.top_findings(f, titles)
    assert top.index("**Model**") < top.index("**Evaluation data**")  # grouped by category
    assert top.count("- **") == summary.TOP and "2 more finding(s) below" in top
    assert "T0 &lt;b&gt;" in top and "[A →](#chapter-a)" in top  # escaped, linked to the section
    assert summary.status_line(found("concerning")).startswith("**Status: concerning.** Nothing blocks shipping")
    assert summary.status_line(found()).startswith("**Status: healthy.**")
    assert summary.status_line({"status": None, "findings": []}).startswith("No findings")
    assert summary.clean_chapters(run, f) == ""  # a found something; b failed; c skipped
    assert "[A](#chapter-a): no finding." in summary.clean_chapters(run, found())
    assert "--baseline DIR" in summary.baseline_line(run)
    assert "shares no per-unit metric" in summary.baseline_line(dict(run, baseline="x"), {"comparisons": []})
    base = {"name": "prod", "comparisons": [
        {"chapter": "retrieval", "metric": "mrr", "label": "MRR", "previous": 0.3, "value": 0.2, "difference": -0.1,
         "ci_low": -0.15, "ci_high": -0.05, "effect": 0.01, "verdict": "A better"},
        {"chapter": "retrieval", "metric": "ndcg", "label": "nDCG", "previous": 0.3, "value": 0.31, "difference": 0.01,
         "ci_low": -0.005, "ci_high": 0.008, "effect": 0.01, "verdict": "no difference larger than E"}]}
    line = summary.baseline_line(dict(run, baseline="x"), base)
    assert "Better than the last model (prod)?" in line and "0 better, 1 worse, 1 without" in line
    table = summary.baseline_table(base)
    assert table["verdict"].tolist() == ["worse", "no difference > E"] and table.loc[0, "previous"] == "0.3"
