"""The report's findings, derived once every test of the report is adjusted: ``results/findings.json``.

Every chapter that ran turns its records into findings (its declaration's ``effects`` and ``findings`` rule,
:mod:`embeval_report.chapters.findings`); a chapter that failed is a protocol finding of its own. Diagnostics are
graded by what their remedies measurably cost the tasks (:func:`grade_diagnostics`). The list is sorted model
findings first, then diagnostics, then the evaluation's, each worst first, then by category, then the task
chapters' (what users do with the vectors: retrieval, recommendation, link prediction, …) before the others
(stability, drift, training), then in report order. The report's ``status`` is the worst *model* finding's severity; ``"not evaluated"`` when no content
chapter ran (every one skipped or failed). Diagnostics never set it: a report that measured only the geometry has
the scope ``"geometry only"`` (its diagnostics are notes, with what their remedies would do to the neighbour
lists) and no model finding, so its status is ``healthy`` with that scope beside it.
The Summary, the cover, ``metrics.json`` and ``--fail-on`` read this file.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..chapters.findings import FINDINGS_FILE, NOT_EVALUATED, ChapterResults, Finding, threshold_findings, worst
from ..chapters.recorder import read_adjusted, read_baseline, read_results
from ..present.format import interval, p_value
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
    """The findings of one chapter that ran: its thresholds by declared effect, then its own rule's; a diagnostic
    chapter's (``kind="diagnostic"``) are diagnostics, but for those about the evaluation."""
    out = threshold_findings(r, spec.effects)
    if spec.findings is not None:  # a chapter's own rule knows its effect better: it replaces the generic finding
        own = list(spec.findings(r))
        out = [f for f in out if f.effect not in {g.effect for g in own}] + own
    if spec.kind == "diagnostic":
        out = [f if f.kind == "evaluation" else replace(f, kind="diagnostic") for f in out]
    return out


def merge_causes(findings: list[Finding], titles: dict) -> list[Finding]:
    """One finding per cause: the findings (in rank order) that share a ``cause`` with an earlier one of the same
    kind (uniformity with anisotropy, the monitoring's batch shift with the snapshots' drift) are folded into it:
    their metrics join its own and its sentence names them; ``evidence["also"]`` lists them."""
    out, lead_of = [], {}
    for f in findings:
        key = (f.kind, f.cause)
        if key not in lead_of:
            lead_of[key] = len(out)
            out.append(f)
            continue
        i = lead_of[key]
        lead = out[i]
        also = list(lead.evidence.get("also", [])) + [{"chapter": f.chapter, "title": f.title, "severity": f.severity}]
        out[i] = replace(lead, metrics=tuple(dict.fromkeys((*lead.metrics, *f.metrics))),
                         evidence=dict(lead.evidence, also=also),
                         sentence=f"{lead.sentence} The same shows in {titles.get(f.chapter, f.chapter)}: "
                                  f"{f.title[:1].lower() + f.title[1:]} ({f.severity}).")
    return out


#: the scope of a report that evaluated no task, only the geometry of the vectors
GEOMETRY_ONLY = "geometry only"
GEOMETRY_ONLY_TEXT = ("geometry only: add labels, judgements, edges or interactions to judge the model; the geometry "
                      "alone says nothing of what it costs")


def grade_diagnostics(findings: list[Finding], remedies: dict | None, *, tasks: bool = True) -> list[Finding]:
    """Diagnostics graded by what their remedies measurably cost the tasks (``remedies``: the record of the
    What-the-geometry-costs chapter, ``None`` when it did not run; ``tasks``: whether any task chapter ran):

    * a remedy answering the diagnostic improves a task beyond the effect that matters → ``concerning``, and the
      sentence says which remedy, which task and by how much;
    * the remedies ran and improve no task → a ``note`` with what they changed;
    * the report has no task (``tasks=False``) → a ``note``: no task says what it costs, and the sentence gives the
      what-if on the neighbour lists where the check measured it (``info["neighbours"]``: per remedy, the share of
      top-k lists it changes by more than half, :func:`~embeval_report.metrics.swap.neighbour_swap`);
    * there are tasks, but none could be re-scored (the check could not run) → at most ``concerning``, saying the
      cost is unknown.
    """
    info = (remedies or {}).get("info", {})
    rows = info.get("table") or []
    answered = {name: r.get("answers", []) for name, r in (info.get("remedies") or {}).items()}
    out = []
    for f in findings:
        if f.kind != "diagnostic" or f.severity in ("healthy", "note"):
            out.append(f)
            continue
        mine = [r for r in rows if f.chapter in answered.get(r["remedy"], [])]
        better = [r for r in mine if r.get("verdict") == "B better"]
        if better:
            best = max(better, key=lambda r: abs(r["diff"]) / max(r.get("effect") or 1e-12, 1e-12))
            cost = "; ".join(_remedy_text(r) for r in better[:3]) + (f"; and {len(better) - 3} more" if len(better) > 3
                                                                      else "")
            out.append(replace(f, severity="concerning", rule="remedy check",
                               sentence=f"It costs {'a task' if len({r['chapter'] for r in better}) == 1 else 'tasks'}: "
                                        f"{cost}. Apply {best['remedy']} before using the vectors for "
                                        f"{best.get('title') or best['chapter']}. {f.sentence}",
                               evidence=dict(f.evidence, remedy=best["remedy"], task=best["chapter"],
                                             task_metric=best["metric"], change=best["diff"],
                                             change_ci=[best.get("ci_low"), best.get("ci_high")],
                                             p_adjusted=best.get("p_adjusted"), effect_that_matters=best.get("effect"))))
        elif mine:
            shown = sorted(mine, key=lambda r: -abs(r["diff"]) / max(r.get("effect") or 1e-12, 1e-12))[:3]
            out.append(replace(f, severity="note", rule="remedy check",
                               sentence=f"It costs no task measurably: {'; '.join(_remedy_text(r) for r in shown)} "
                                        f"(none beyond the effect that matters). {f.sentence}"))
        elif not tasks:
            what_if = [dict(w, remedy=name) for name, w in (info.get("neighbours") or {}).items()
                       if f.chapter in w.get("answers", [])]
            out.append(replace(f, severity="note", rule="threshold (no task)",
                               sentence=f"{f.sentence} {_no_task_text(what_if)}",
                               evidence=dict(f.evidence, **({"what_if": what_if} if what_if else {}))))
        else:
            why = (info.get("skipped") or {})
            reason = "no task of this report could be re-scored" + (f" ({'; '.join(why.values())})" if why else "")
            out.append(replace(f, severity="concerning" if f.severity == "problematic" else f.severity,
                               rule="threshold (cost unknown)",
                               sentence=f"{f.sentence} Whether it costs anything is unknown: {reason}."))
    return out


def _no_task_text(what_if: list[dict]) -> str:
    """What a diagnostic of a report without tasks says of its cost: nothing measured, and the remedies' what-if on
    the neighbour lists where the check measured it."""
    text = ("No task of this report says whether it costs anything (add labels, judgements, edges or interactions "
            "to know)")
    if not what_if:
        return text + "."
    parts = [f"{w.get('label') or w['remedy']} would change {_share(w.get('changed_share'))} of the top-"
             f"{w.get('k', 10)} neighbour lists by more than half (mean overlap {_share(w.get('mean_overlap'))})"
             for w in what_if]
    return f"{text}; what its remedies would do to the neighbours: {'; '.join(parts)}."


def _share(v) -> str:
    return f"{100 * v:.0f} %" if isinstance(v, (int, float)) and v == v else "an unknown share"


def _remedy_text(r: dict) -> str:
    """``centring changes Node classification: Probe accuracy by +0.002 [-0.004, +0.008] (Holm p 0.6)``."""
    p = r.get("p_adjusted")
    verb = "improves" if r.get("verdict") == "B better" else "changes"
    return (f"{r['remedy']} {verb} {r.get('title') or r['chapter']}: {r.get('label') or r['metric']} by "
            f"{r['diff']:+.3f} [{interval(r.get('ci_low'), r.get('ci_high'), '+.3f', sep=', ')}]"
            + (f" (Holm p {p_value(p)})" if isinstance(p, float) else ""))


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
    ran = {spec.name for spec in chapters if spec.stage == 0 and outcomes.get(spec.name, ("skipped",))[0] == "ok"}
    tasks = any(spec.scorer is not None for spec in chapters if spec.name in ran)
    graded = grade_diagnostics([f for _, f in found], records.get("remedies"), tasks=tasks)
    tasks_first = {spec.name for spec in chapters if spec.scorer is not None}  # what users do with the vectors
    found = sorted(zip([o for o, _ in found], graded),
                   key=lambda of: (*of[1].rank, of[1].chapter not in tasks_first, of[0]))
    findings = merge_causes([f for _, f in found], {c.name: c.title for c in chapters})
    model_ran = any(spec.kind == "model" for spec in chapters if spec.name in ran)
    if not ran:
        status, scope = NOT_EVALUATED, None
    else:  # diagnostics never set the status: a report of the geometry alone says so (its scope)
        status, scope = worst([f for f in findings if f.kind == "model"]), (None if model_ran else GEOMETRY_ONLY)
    write_findings(results_dir, findings, status, scope)
    return findings


def write_findings(results_dir: Path, findings: list[Finding], status: str | None = None,
                   scope: str | None = None) -> None:
    """:data:`FINDINGS_FILE`: the status (``status``, else the worst model finding's severity), the scope of the
    evaluation (``"geometry only"`` when no task ran; else absent) and the findings."""
    doc = {"status": status or worst([f for f in findings if f.kind == "model"]),
           **({"scope": scope, "scope_text": GEOMETRY_ONLY_TEXT} if scope == GEOMETRY_ONLY else {}),
           "findings": [f.to_json() for f in findings]}
    (Path(results_dir) / FINDINGS_FILE).write_text(json.dumps(doc, indent=2, allow_nan=False))
