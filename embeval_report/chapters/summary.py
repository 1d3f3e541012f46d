"""The Summary chapter: the decision first (the report's status and its top findings, grouped by who acts on
them, each linked to its section), then whether this model is better than the last, what every chapter found,
the scorecard of every thresholded metric and what was not run."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..metrics.thresholds import SEVERITY
from ..present.display import Link, escape, show_markdown, show_table
from ..present.format import number, scorecard_value
from .declaration import ChapterSpec
from .findings import CATEGORIES, NOT_EVALUATED, read_findings
from .recorder import read_baseline, read_results

STATUS_WORDS = {"ok": "ran", "failed": "failed", "skipped": "not run"}


def load_run(results_dir="../results") -> tuple[dict, dict]:
    """The run description (``run.json`` beside ``results_dir``) and every chapter's recorded results."""
    return json.loads((Path(results_dir).parent / "run.json").read_text()), read_results(results_dir)


def load_findings(results_dir="../results") -> dict:
    """The report's ``status`` and ``findings`` (``results/findings.json``)."""
    return read_findings(results_dir)


#: findings shown on the first screen
TOP = 7
#: what the status tells a reader to do
STATUS_LEAD = {
    "problematic": "Do not ship this model as it is: {p} finding(s) must be fixed first{c}.",
    "concerning": "Nothing blocks shipping, but {c0} finding(s) are worth a look before you do.",
    "healthy": "Every check that ran passed: nothing in this report argues against shipping this model.",
    NOT_EVALUATED: "No chapter that evaluates the vectors ran (each was skipped or failed; the chapter table below "
                   "says why), so this report supports no decision about this model: give the missing input or fix "
                   "the error and re-run.",
}


def status_line(found: dict) -> str:
    """The report's status as the first sentence a reader sees."""
    status, findings = found.get("status"), found.get("findings", [])
    if status is None:
        return "No findings were derived for this report (it was made by a version without findings)."
    p = sum(f["severity"] == "problematic" for f in findings)
    c = sum(f["severity"] == "concerning" for f in findings)
    lead = STATUS_LEAD[status].format(p=p, c0=c, c=f"; {c} more are worth a look" if c else "")
    if found.get("scope_text"):  # no task ran: the status cannot speak for shipping
        lead = f"Scope: {escape(found['scope_text'])}."
    return f"**Status: {status}.** {lead}"


def _finding_line(f: dict, titles: dict) -> str:
    chapter = titles.get(f["chapter"], f["chapter"])
    return (f"- **{escape(f['title'])}** ({f['severity']}). {escape(f['sentence'])} "
            f"[{escape(chapter)} →](#{f['section']})")


def first_screen(findings: list[dict], top: int = TOP) -> list[dict]:
    """The ``top`` findings to show first: worst severity first and, within a severity, the categories in turn
    (so that a problem of the training process or the evaluation data is not pushed off the screen by many of the
    model), each category's findings in report order."""
    out = []
    for severity in ("problematic", "concerning"):
        queues = [[f for f in findings if f["severity"] == severity and f["category"] == c] for c in CATEGORIES]
        while any(queues) and len(out) < top:
            for q in queues:
                if q and len(out) < top:
                    out.append(q.pop(0))
    return out


def top_findings(found: dict, titles: dict, top: int = TOP) -> str:
    """The worst ``top`` findings (problematic and concerning), grouped by category in :data:`CATEGORIES` order,
    one sentence each with its number and a link to its section; then how many more there are."""
    bad = [f for f in found.get("findings", []) if f["severity"] != "healthy"]
    shown = first_screen(bad, top)
    parts = []
    for cat in CATEGORIES:
        mine = [f for f in shown if f["category"] == cat]
        if mine:
            parts.append(f"**{cat[:1].upper() + cat[1:]}**\n\n" + "\n".join(_finding_line(f, titles) for f in mine))
    rest = len(bad) - len(shown)
    if rest:
        parts.append(f"{rest} more finding(s) below, in [All findings](#all-findings).")
    return "\n\n".join(parts)


def clean_chapters(run: dict, found: dict) -> str:
    """One line per chapter that ran and found nothing wrong."""
    flagged = {f["chapter"] for f in found.get("findings", []) if f["severity"] != "healthy"}
    ok = [c for c in run["chapters"] if c["status"] == "ok" and c["name"] not in flagged
          and c["name"] not in ("summary", "rigor")]
    if not ok:
        return ""
    return "**Nothing wrong found by**\n\n" + "\n".join(
        f"- [{escape(c['title'])}](#chapter-{c['name']}): no finding." for c in ok)


VERDICT_WORDS = {"B better": "better", "A better": "worse", "no difference larger than E": "no difference > E",
                 "underpowered": "underpowered", "inconclusive": "inconclusive"}


def baseline_table(base: dict | None) -> pd.DataFrame:
    """The metrics this report and the previous model's recorded per unit: previous, this, the paired change
    with the interval the verdict uses, the effect that matters and the verdict (worse rows first)."""
    rows = [{"chapter · metric": f"{c['chapter']} · {c['label']}", "previous": number(c["previous"], 4),
             "this model": number(c["value"], 4),
             "change [interval]": f"{c['difference']:+.4g} [{c['ci_low']:+.4g}, {c['ci_high']:+.4g}]",
             "±E": number(c["effect"], 3), "verdict": VERDICT_WORDS.get(c["verdict"], c["verdict"]),
             "_rank": ("A better", "B better").index(c["verdict"]) if c["verdict"] in ("A better", "B better") else 2}
            for c in (base or {}).get("comparisons", [])]
    df = pd.DataFrame(rows, columns=["chapter · metric", "previous", "this model", "change [interval]", "±E",
                                     "verdict", "_rank"])
    return df.sort_values("_rank", kind="stable").drop(columns="_rank").reset_index(drop=True)


def baseline_counts(base: dict | None) -> list[dict]:
    """Per chapter (task) of the ``--baseline`` comparison, in its order: ``chapter``, ``better``, ``worse``,
    ``same`` (no difference larger than the effect that matters), ``open`` (underpowered or inconclusive) and
    ``total``."""
    out: dict = {}
    for c in (base or {}).get("comparisons", []):
        row = out.setdefault(c["chapter"], dict(chapter=c["chapter"], better=0, worse=0, same=0, open=0, total=0))
        key = {"B better": "better", "A better": "worse", "no difference larger than E": "same"}.get(c["verdict"],
                                                                                                   "open")
        row[key] += 1
        row["total"] += 1
    return list(out.values())


def baseline_counts_text(base: dict | None, titles: dict, sep: str = "; ") -> str:
    """``Retrieval: 2 better, 9 worse of 15; Link prediction: 0 better, 1 worse of 5`` (the cover, the terminal)."""
    return sep.join(f"{titles.get(r['chapter']) or r['chapter']}: {r['better']} better, {r['worse']} worse of "
                    f"{r['total']}" for r in baseline_counts(base))


def baseline_line(run: dict, base: dict | None = None) -> str:
    """Better than the last model? Per task, how many metrics are better and worse, or how to get that frame."""
    if run.get("baseline"):
        if not base or not base.get("comparisons"):
            return (f"**Better than the last model?** The baseline report ({escape(Path(run['baseline']).name)}) "
                    "shares no per-unit metric with this one, so no change can be tested.")
        titles = {c["name"]: c["title"] for c in run["chapters"]}
        tasks = "; ".join(
            f"{escape(titles.get(r['chapter'], r['chapter']))}: {r['better']} better, {r['worse']} worse, "
            f"{r['same']} without a difference larger than the effect that matters"
            + (f", {r['open']} unresolved" if r["open"] else "") + f" (of {r['total']})"
            for r in baseline_counts(base))
        return (f"**Better than the last model ({escape(base['name'])})?** Per task, over the metrics both reports "
                f"measured on the same units: {tasks} ([Change since the previous model]"
                "(#change-since-the-previous-model)).")
    return ("**Better than the last model?** This report does not say: re-run it with `--baseline DIR` (an earlier "
            "report on the same inputs) to see each metric's change beside its value, or compare two models unit by "
            "unit with `embeval-report compare last.yaml this.yaml --out cmp/` (docs/compare.md).")


def show_decision(run: dict, found: dict) -> None:
    """The first screen: status, top findings by category, the frame of the last model, clean chapters."""
    titles = {c["name"]: c["title"] for c in run["chapters"]}
    parts = [status_line(found), top_findings(found, titles), baseline_line(run, load_baseline(run)),
             clean_chapters(run, found)]
    show_markdown("\n\n".join(p for p in parts if p))


def load_baseline(run: dict, results_dir="../results") -> dict | None:
    return read_baseline(results_dir) if run.get("baseline") else None


def show_baseline(run: dict) -> None:
    """The change since the previous model (``--baseline``), or nothing without one."""
    base = load_baseline(run)
    if not base:
        return
    show_markdown("## Change since the previous model")
    show_table(baseline_table(base), caption=f"This model against {base['name']} (the --baseline report), "
               "paired over the units both measured: the change (this model − previous) with the interval the "
               "verdict uses (simultaneous over every metric when the correction is applied), the effect that "
               "matters (--mde) and the verdict.",
               label="tbl-baseline")


def findings_table(run: dict, found: dict) -> pd.DataFrame:
    """Every finding, worst first: severity, category, chapter (linked), what was found."""
    titles = {c["name"]: c["title"] for c in run["chapters"]}
    rows = [{"severity": f["severity"], "category": f["category"],
             "chapter": Link(titles.get(f["chapter"], f["chapter"]), f"#{f['section']}"), "finding": f["title"]}
            for f in found.get("findings", [])]
    return pd.DataFrame(rows, columns=["severity", "category", "chapter", "finding"])


def show_findings(run: dict, found: dict) -> None:
    table = findings_table(run, found)
    if len(table):
        show_table(table, caption="All findings of the report, worst first (the first screen shows the top "
                                  f"{TOP} with their evidence).", label="tbl-findings")
    else:
        show_markdown("No finding: every check that ran passed.")


#: note shown under the scorecard when some interval excludes its estimate (marked †)
BIAS_NOTE = ("† The interval does not contain the plug-in value: it is a basic bootstrap interval, which corrects "
             "the finite-sample bias of eigenvalue statistics (sample spectra spread out more than the "
             "population's). The bias-corrected estimate (2 × value − mean of the bootstrap replicates) is shown "
             "beside the value; it and the interval are the better guide to the population value. See the "
             "chapter's Method section.")


def needs_bias_note(card: pd.DataFrame) -> bool:
    """Whether any scorecard value is marked † (see :data:`BIAS_NOTE`)."""
    return bool(card["value [95 % CI]"].str.endswith("†").any()) if len(card) else False


def scorecard(run: dict, results: dict) -> pd.DataFrame:
    """One row per metric that has a verdict, worst first, linked to its chapter."""
    titles = {c["name"]: c["title"] for c in run["chapters"]}
    rows = []
    for ch in run["chapters"]:
        if ch["status"] == "skipped" or ch["name"] == "summary":
            continue
        for name, m in results.get(ch["name"], {}).get("metrics", {}).items():
            if m.get("verdict") is None:
                continue
            rows.append({"chapter": Link(titles[ch["name"]], f"#chapter-{ch['name']}"),
                         "metric": m.get("label") or name, "value [95 % CI]": scorecard_value(dict(m, name=name)),
                         "better": m["direction"], "verdict": m["verdict"], "reference": m["reference"],
                         "_rank": (-SEVERITY[m["verdict"]], ch["order"])})
    df = pd.DataFrame(rows, columns=["chapter", "metric", "value [95 % CI]", "better", "verdict", "reference",
                                     "_rank"])
    return df.sort_values("_rank", kind="stable").drop(columns="_rank").reset_index(drop=True)


def chapter_status(run: dict) -> pd.DataFrame:
    """Every chapter with its status and, for those not run or failed, why."""
    rows = [{"chapter": Link(c["title"], f"#chapter-{c['name']}") if c["status"] != "skipped" else c["title"],
             "status": STATUS_WORDS[c["status"]],
             "time (s)": f"{c['seconds']:.1f}" if c["status"] != "skipped" else "—",
             "detail": (c["reason"] or "").replace("`", "")}  # table cells are plain text: no code spans
            for c in run["chapters"] if c["name"] != "summary"]
    return pd.DataFrame(rows, columns=["chapter", "status", "time (s)", "detail"])


def model_sentence(model: dict) -> str:
    """How the vectors were made when the run embedded texts with a model (``run.json``'s ``model``)."""
    options = [f"batch size {model['batch_size']}", "L2-normalised after the model" if model["normalize"]
               else "the model's own output (no extra normalisation)"]
    options += [f"{role} prompt “{escape(model[key])}”" for role, key in (("query", "query_prompt"),
                                                                       ("document", "document_prompt")) if model[key]]
    queries = f" and {model['queries']:,} query texts" if model["queries"] else ""
    return (f"The vectors were computed in this run by the model {escape(model['name'])} "
            f"(content digest {model['digest']}; {'; '.join(options)}) from the {model['n']:,} texts of "
            f"{escape(model['texts'])}{queries}; they are saved in `embeddings/` with a manifest that re-runs this "
            "report without the model.")


def run_conditions(run: dict) -> str:
    """What else of the run settings a reader needs next to the numbers: the Dask engine, sampled mode and a
    memory budget other than the default (each as ``"; ..."``, nothing for a default run)."""
    from ..context import DEFAULT_BUDGET as DEFAULT_BYTES
    from ..context import describe_bytes as describe

    parts = []
    engine = run.get("engine") or {}
    if engine.get("name") == "dask":
        parts.append(f"k-NN graph, moment, potential and KS passes on a Dask cluster ({engine.get('scheduler')}, "
                     f"{engine.get('workers')} workers)")
        if engine.get("lost"):  # the runner lost it: the passes after that ran in the chapters' processes
            parts.append(f"the cluster was lost during the run ({escape(engine['lost'])}): the passes after that "
                         "ran locally")
    if run.get("sample_size"):
        parts.append(f"sampled mode, `--sample-size {run['sample_size']:,}`")
    budget, share = run.get("memory_budget"), run.get("job_memory_budget")
    if share:  # --jobs: the chapters running side by side share the budget
        parts.append(f"memory budget {describe(budget)}, {describe(share)} for each of the {run.get('jobs')} "
                     "chapters run side by side")
    elif budget and budget != DEFAULT_BYTES:
        parts.append(f"memory budget {describe(budget)}")
    return "".join(f"; {p}" for p in parts)


def narrative(run: dict, card: pd.DataFrame) -> str:
    """Opening paragraph: what was evaluated and the headline of the scorecard."""
    counts = card["verdict"].value_counts().to_dict() if len(card) else {}
    chapters = [c for c in run["chapters"] if c["name"] != "summary"]
    ran = sum(c["status"] == "ok" for c in chapters)
    failed = [c["title"] for c in chapters if c["status"] == "failed"]
    skipped = sum(c["status"] == "skipped" for c in chapters)
    head = (f"This report evaluates **{escape(run['name'])}**: {run['n']:,} vectors of dimension {run['d']} "
            f"(seed {run['seed']}, computed on {run['device']}{run_conditions(run)}). {ran} chapter(s) ran"
            + (f", {len(failed)} failed ({escape(', '.join(failed))})" if failed else "")
            + (f", {skipped} could not run for lack of input (listed below)" if skipped else "") + ".")
    if run.get("model"):
        head += " " + model_sentence(run["model"])
    if not len(card):
        return head + " No metric with a threshold table was computed."
    n_prob, n_conc = (counts.get(k, 0) for k in ("problematic", "concerning"))
    return head + (f" Of its {len(card)} thresholded metrics, {n_prob} are problematic and {n_conc} concerning "
                   "(the scorecard below; related metrics of one effect make one finding above). Verdicts follow "
                   "the source documents' threshold tables, cited in each chapter; the tables are guidance, not hard "
                   "limits.")


def show_narrative(run: dict, card: pd.DataFrame) -> None:
    show_markdown(narrative(run, card))


def show_scorecard(card: pd.DataFrame) -> None:
    """The scorecard without its reference column: each threshold's source is cited in its chapter's definitions
    (the chapter's appendix) and in metrics.json, and a column of citations tripled the table's length."""
    show_table(card.drop(columns="reference"),
               caption="Scorecard: verdicts of all chapters (healthy / concerning / problematic); each threshold's "
                       "source is cited in its chapter and in the chapter's definitions.",
               label="tbl-scorecard")
    if needs_bias_note(card):
        show_markdown(BIAS_NOTE)


def show_chapters(run: dict) -> None:
    show_table(chapter_status(run), caption="Chapters of this report with their run time; those not run list the "
                                            "input that would enable them (or why they could not run), failed "
                                            "ones their error.", label="tbl-chapters")


CHAPTER = ChapterSpec(
    name="summary", title="Summary", order=0,
    description="The decision: the report's status, its findings and the scorecard of every verdict, and what was not run.",
    stage=2, decision=True,
)
