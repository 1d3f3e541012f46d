"""The Summary chapter: a scorecard of every verdict, and what was not run."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .display import Link, escape
from .results import read_results
from .thresholds import SEVERITY

STATUS_WORDS = {"ok": "ran", "failed": "failed", "skipped": "not run"}


def load_run(run_json="../run.json", results_dir="../results") -> tuple[dict, dict]:
    """The run description (``run.json``) and every chapter's recorded results."""
    return json.loads(Path(run_json).read_text()), read_results(results_dir)


def _value_text(m: dict) -> str:
    v = m.get("value")
    if v is None:
        return "∞" if m.get("name") == "condition_number" else "—"
    fmt = (lambda x: f"{x:,.0f}") if abs(v) >= 1000 else (lambda x: f"{x:.4g}")
    text = fmt(v)
    lo, hi = m.get("ci_low"), m.get("ci_high")
    if lo is not None and hi is not None:
        text += f" [{fmt(lo)}, {fmt(hi)}]" + (" †" if not lo <= v <= hi else "")
    return text


#: note shown under the scorecard when some interval excludes its estimate (marked †)
BIAS_NOTE = ("† The interval does not contain the value: it is a bias-corrected (basic bootstrap) interval, and "
             "the plug-in value of an eigenvalue statistic is biased in finite samples (sample spectra spread "
             "out more than the population's). The interval is the better guide to the population value; see the "
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
                         "metric": m.get("label") or name, "value [95 % CI]": _value_text(m),
                         "better": m["direction"], "verdict": m["verdict"], "reference": m["reference"],
                         "_rank": (-SEVERITY[m["verdict"]], ch["order"])})
    df = pd.DataFrame(rows, columns=["chapter", "metric", "value [95 % CI]", "better", "verdict", "reference",
                                     "_rank"])
    return df.sort_values("_rank", kind="stable").drop(columns="_rank").reset_index(drop=True)


def chapter_status(run: dict) -> pd.DataFrame:
    """Every chapter with its status and, for those not run or failed, why."""
    rows = [{"chapter": Link(c["title"], f"#chapter-{c['name']}") if c["status"] != "skipped" else c["title"],
             "status": STATUS_WORDS[c["status"]],
             "time (s)": f"{c['seconds']:.1f}" if c["status"] != "skipped" else "—", "detail": c["reason"] or ""}
            for c in run["chapters"] if c["name"] != "summary"]
    return pd.DataFrame(rows, columns=["chapter", "status", "time (s)", "detail"])


def narrative(run: dict, card: pd.DataFrame) -> str:
    """Opening paragraph: what was evaluated and the headline of the scorecard."""
    counts = card["verdict"].value_counts().to_dict() if len(card) else {}
    chapters = [c for c in run["chapters"] if c["name"] != "summary"]
    ran = sum(c["status"] == "ok" for c in chapters)
    failed = [c["title"] for c in chapters if c["status"] == "failed"]
    skipped = sum(c["status"] == "skipped" for c in chapters)
    head = (f"This report evaluates **{escape(run['name'])}**: {run['n']:,} vectors of dimension {run['d']} "
            f"(seed {run['seed']}, computed on {run['device']}). {ran} chapter(s) ran"
            + (f", {len(failed)} failed ({escape(', '.join(failed))})" if failed else "")
            + (f", {skipped} could not run for lack of input (listed below)" if skipped else "") + ".")
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
