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
    assert "set &lt;x&gt;" in text and "1 failed (B)" in text and "1 check(s) are problematic" in text
