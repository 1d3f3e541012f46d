"""The report's findings, derived once every test of the report is adjusted: ``results/findings.json``.

Every chapter that ran turns its records into findings (its declaration's ``effects`` and ``findings`` rule,
:mod:`embeval_report.chapters.findings`); a chapter that failed is a protocol finding of its own. The list is
sorted worst first, then by category, then in report order; its worst severity is the report's ``status``, or
``"not evaluated"`` when no content chapter ran (every one skipped or failed).
The Summary, the cover, ``metrics.json`` and ``--fail-on`` read this file.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..chapters.findings import FINDINGS_FILE, NOT_EVALUATED, ChapterResults, Finding, threshold_findings, worst
from ..chapters.recorder import read_adjusted, read_baseline, read_results
from .baseline import regression_findings


def chapter_results(name: str, title: str, record: dict, adjusted) -> ChapterResults:
    """A chapter's records with its tests' report-wide adjusted p-values (when the report adjusted them)."""
    tests = list(record.get("tests", []))
    if adjusted is not None and len(adjusted):
        mine = adjusted[adjusted["chapter"] == name].set_index("name")
        tests = [dict(t, **({k: _plain(mine.loc[t["name"], k]) for k in ("p_holm", "p_bh", "rejected_holm",
                                                                        "rejected_bh")}
                            if t.get("name") in mine.index else {})) for t in tests]
    return ChapterResults(name, title, record.get("metrics", {}), record.get("info", {}), tests)


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def chapter_findings(spec, r: ChapterResults) -> list[Finding]:
    """The findings of one chapter that ran: its thresholds by declared effect, then its own rule's."""
    out = threshold_findings(r, spec.effects)
    if spec.findings is not None:  # a chapter's own rule knows its effect better: it replaces the generic finding
        own = list(spec.findings(r))
        out = [f for f in out if f.effect not in {g.effect for g in own}] + own
    return out


def failed_finding(spec, reason: str) -> Finding:
    return Finding("concerning", "protocol", spec.name, f"The {spec.title} chapter failed",
                   f"Fix the error and re-run: the chapter's numbers are missing from this report ({reason}).",
                   rule="run")


def derive_findings(results_dir: Path, chapters: list, outcomes: dict) -> list[Finding]:
    """Findings of every chapter (``chapters``: declarations in report order; ``outcomes``: name -> status and
    reason), sorted worst first, then by category, then in report order; written to :data:`FINDINGS_FILE`."""
    records, adjusted = read_results(results_dir), read_adjusted(results_dir)
    found = []
    for order, spec in enumerate(chapters):
        status, reason = outcomes.get(spec.name, ("skipped", ""))
        if status == "failed":
            found.append((order, failed_finding(spec, reason)))
        elif status == "ok" and spec.name in records:
            found += [(order, f) for f in chapter_findings(spec, chapter_results(spec.name, spec.title,
                                                                                  records[spec.name], adjusted))]
    order = {spec.name: i for i, spec in enumerate(chapters)}
    found += [(order.get(f.chapter, len(order)), f) for f in regression_findings(read_baseline(results_dir))]
    found.sort(key=lambda of: (*of[1].rank, of[0]))
    findings = [f for _, f in found]
    evaluated = any(outcomes.get(spec.name, ("skipped",))[0] == "ok" for spec in chapters if spec.stage == 0)
    write_findings(results_dir, findings, None if evaluated else NOT_EVALUATED)
    return findings


def write_findings(results_dir: Path, findings: list[Finding], status: str | None = None) -> None:
    """:data:`FINDINGS_FILE`: the status (``status``, else the worst finding's severity) and the findings."""
    doc = {"status": status or worst(findings), "findings": [f.to_json() for f in findings]}
    (Path(results_dir) / FINDINGS_FILE).write_text(json.dumps(doc, indent=2, allow_nan=False))
