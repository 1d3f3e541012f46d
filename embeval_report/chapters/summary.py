"""The Summary chapter: a scorecard of every verdict, and what was not run."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..metrics.thresholds import SEVERITY
from ..present.display import Link, escape, show_markdown, show_table
from ..present.format import scorecard_value
from .declaration import ChapterSpec
from .recorder import read_results

STATUS_WORDS = {"ok": "ran", "failed": "failed", "skipped": "not run"}


def load_run(results_dir="../results") -> tuple[dict, dict]:
    """The run description (``run.json`` beside ``results_dir``) and every chapter's recorded results."""
    return json.loads((Path(results_dir).parent / "run.json").read_text()), read_results(results_dir)


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
    if run.get("sample_size"):
        parts.append(f"sampled mode, `--sample-size {run['sample_size']:,}`")
    budget = run.get("memory_budget")
    if budget and budget != DEFAULT_BYTES:
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
    n_prob, n_conc, n_ok = (counts.get(k, 0) for k in ("problematic", "concerning", "healthy"))
    if n_prob:
        verdict = (f"**{n_prob} check(s) are problematic** and {n_conc} concerning out of {len(card)}; "
                   "the problematic ones are listed first. Read their chapters before shipping this model.")
    elif n_conc:
        verdict = f"No check is problematic; **{n_conc} of {len(card)} are concerning** and worth a look."
    else:
        verdict = f"**All {n_ok} checks are healthy.**"
    return head + "\n\n" + verdict + (" Verdicts follow the seed documents' threshold tables (cited per row); "
                                      "the tables are guidance, not hard limits.")


def show_narrative(run: dict, card: pd.DataFrame) -> None:
    show_markdown(narrative(run, card))


def show_scorecard(card: pd.DataFrame) -> None:
    show_table(card, caption="Scorecard: verdicts of all chapters (healthy / concerning / problematic).",
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
    stage=2,
)
