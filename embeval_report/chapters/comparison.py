"""The comparison report's one chapter: is model B better than model A, and how sure are we?
(numbers from :mod:`embeval_report.report.compare` and :mod:`embeval_report.metrics.paired`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..present.display import show_figure, show_markdown, show_table
from ..present.format import p_value
from ..present.plotting import PALETTE, WIDTH, use_style

__all__ = ["ComparisonReport", "difference_figure", "load", "narrative", "ship_sentence", "show_differences",
           "show_models", "show_ranks", "show_summary", "show_table_of_differences", "show_wins", "verdict_table",
           "wins_figure"]

VERDICT_WORDS = {"B better": "{b} better", "A better": "{a} better",
                 "no difference larger than the MDE": "no difference > MDE", "underpowered": "underpowered"}


@dataclass(frozen=True)
class ComparisonReport:
    doc: dict
    table: pd.DataFrame
    ranks: dict


def load(comparison_dir: str = "..") -> ComparisonReport:
    """Read ``comparison.json`` from the comparison folder (the notebook runs in its ``chapters/``)."""
    use_style()
    doc = json.loads((Path(comparison_dir) / "comparison.json").read_text())
    table = pd.DataFrame(doc["comparisons"])
    return ComparisonReport(doc, table, {k: pd.DataFrame(v) for k, v in doc["ranks"].items()})


def _num(x, fmt=".4f") -> str:
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, fmt)


def _verdict(row) -> str:
    return VERDICT_WORDS[row["verdict"]].format(a=row["a"], b=row["b"])


def narrative(rep: ComparisonReport) -> str:
    """What the comparison says, pair by pair."""
    doc, t = rep.doc, rep.table
    names = [m["name"] for m in doc["models"]]
    if not len(t):
        return (f"The reports of {', '.join(names)} share no per-unit results to pair (no chapter that records "
                "queries, test edges, entities or users ran on both with the same units), so no difference can be "
                "tested. Run the same chapters with the same side data on each model.")
    corr = {"holm": "Holm's correction", "bh": "the Benjamini–Hochberg correction", "none": "no correction"}[
        doc["correction"]]
    parts = [ship_sentence(rep), f"**{len(t)} comparisons** ({t[['chapter', 'metric']].drop_duplicates().shape[0]} metrics × "
             f"{t[['a', 'b']].drop_duplicates().shape[0]} pair(s) of models), each on the units both models were "
             f"evaluated on, with {corr} over all of them at α = 0.05. The effect that matters (`--mde`) is "
             f"**{doc['effect']:g}** in each metric's own units."]
    for (a, b), part in t.groupby(["a", "b"], sort=False):
        counts = part["verdict"].value_counts()
        bits = [f"{counts.get(v, 0)} {VERDICT_WORDS[v].format(a=a, b=b)}" for v in VERDICT_WORDS if counts.get(v, 0)]
        best = part.loc[part["p_adjusted"].idxmin()]
        parts.append(f"**{b} vs {a}:** " + ", ".join(bits) + ". The clearest difference is "
                     f"{best['label']} ({best['chapter']}): {b} − {a} = {_num(best['diff'])} "
                     f"({_num(best['ci_low'])} to {_num(best['ci_high'])}), d_z = {_num(best['d_z'], '.2f')}, "
                     f"{b} better on {int(best['wins']):,} of {int(best['n']):,} "
                     f"{best['unit']} and worse on {int(best['losses']):,}, adjusted p {p_value(best['p_adjusted'])}.")
    under = t[t["verdict"] == "underpowered"]
    if len(under):
        parts.append(f"{len(under)} comparison(s) are **underpowered**: not significant, and their minimum detectable "
                     f"effect (up to {_num(under['mde'].max(), '.3g')}) exceeds {doc['effect']:g}, so a difference "
                     "that matters could still hide in them; more units (queries, edges) would settle them.")
    return "\n\n".join(parts)


def ship_sentence(rep: ComparisonReport) -> str:
    """Which model to ship, against the first (the one in production), and how sure that is."""
    t, doc = rep.table, rep.doc
    base = doc["models"][0]["name"]
    lines = []
    for b, part in t[t["a"] == base].groupby("b", sort=False):
        part = part.assign(_size=part["d_z"].abs()).sort_values("_size", ascending=False)  # largest effects first
        better = part[part["verdict"] == "B better"]
        worse = part[part["verdict"] == "A better"]
        weak = part[part["verdict"] == "underpowered"]
        names = lambda rows: ", ".join(f"{r.label} ({r.chapter})" for r in rows.head(4).itertuples()) + (
            f" and {len(rows) - 4} more" if len(rows) > 4 else "")
        if len(worse):
            lines.append(f"**Do not ship {b} in place of {base}:** it is significantly worse on {len(worse)} metric(s) "
                         f"({names(worse)})" + (f", although better on {len(better)}" if len(better) else "") + ".")
        elif len(better):
            lines.append(f"**Ship {b}:** it is better than {base} on {len(better)} metric(s) ({names(better)}) and "
                         f"significantly worse on none, after correcting for the {len(t)} comparisons"
                         + (f"; {len(weak)} other metric(s) are underpowered and could still hide a change of "
                            f"{doc['effect']:g}." if len(weak) else "."))
        elif len(weak):
            lines.append(f"**No evidence either way between {b} and {base}:** no metric differs significantly, and on "
                         f"{len(weak)} of them these units could miss a change of {doc['effect']:g}; more queries, "
                         "edges or entities would settle it.")
        else:
            lines.append(f"**{b} and {base} are equivalent** within {doc['effect']:g} on every metric compared: "
                         "choose on cost or latency.")
    return "\n\n".join(lines)


def verdict_table(rep: ComparisonReport) -> pd.DataFrame:
    """The table as shown: one row per pair × metric."""
    t = rep.table
    return pd.DataFrame({
        "B vs A": [f"{b} vs {a}" for a, b in zip(t["a"], t["b"])],
        "metric": [f"{lab} ({ch})" for lab, ch in zip(t["label"], t["chapter"])],
        "A": [_num(x) for x in t["mean_a"]], "B": [_num(x) for x in t["mean_b"]],
        "B − A (95 % CI)": [f"{_num(d)} ({_num(lo)} to {_num(hi)})" for d, lo, hi in zip(t["diff"], t["ci_low"],
                                                                                          t["ci_high"])],
        "d_z": [_num(x, ".2f") for x in t["d_z"]],
        "wins/ties/losses": [f"{w:,}/{ti:,}/{lo:,}" for w, ti, lo in zip(t["wins"], t["ties"], t["losses"])],
        "p (t / Wilcoxon / rand.)": [f"{p_value(x)} / {p_value(y)} / {p_value(z)}" for x, y, z in zip(t["p_t"], t["p_wilcoxon"],
                                                                                       t["p_randomisation"])],
        "p adjusted": [p_value(x) for x in t["p_adjusted"]], "MDE": [_num(x, ".3g") for x in t["mde"]],
        "verdict": [_verdict(r) for _, r in t.iterrows()],
    })


def difference_figure(t: pd.DataFrame) -> plt.Figure:
    """Standardised differences d_z with the interval of the mean difference in the same scale, per comparison."""
    labels = [f"{b} vs {a}: {lab}" for a, b, lab in zip(t["a"], t["b"], t["label"])]
    sd = t["sd_diff"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        z, lo, hi = t["diff"] / sd, t["ci_low"] / sd, t["ci_high"] / sd
    colors = [PALETTE["accent"] if v in ("B better", "A better") else PALETTE["muted"] for v in t["verdict"]]
    fig, ax = plt.subplots(figsize=(WIDTH, 0.6 + 0.28 * len(t)))
    y = np.arange(len(t))[::-1]
    ax.hlines(y, lo, hi, color=colors, lw=2)
    ax.plot(z, y, "o", color=PALETTE["data"], ms=4)
    ax.axvline(0, color=PALETTE["reference"], lw=0.8)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xlabel("B − A in standard deviations of the per-unit differences (d_z), with its 95 % interval")
    return fig


def wins_figure(t: pd.DataFrame) -> plt.Figure:
    """Per comparison: the share of units on which B is better, tied, or worse than A."""
    labels = [f"{b} vs {a}: {lab}" for a, b, lab in zip(t["a"], t["b"], t["label"])]
    n = t["n"].to_numpy(float)
    shares = np.column_stack([t["wins"], t["ties"], t["losses"]]) / n[:, None]
    fig, ax = plt.subplots(figsize=(WIDTH, 0.6 + 0.28 * len(t)))
    y = np.arange(len(t))[::-1]
    left = np.zeros(len(t))
    for j, (name, color) in enumerate((("B better", PALETTE["data"]), ("tie", PALETTE["muted"]),
                                       ("A better", PALETTE["accent"]))):
        ax.barh(y, shares[:, j], left=left, color=color, label=name, height=0.7)
        left += shares[:, j]
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the shared units")
    ax.legend(frameon=False, fontsize=7, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return fig


def show_wins(rep: ComparisonReport) -> None:
    if not len(rep.table):
        return
    show_figure(wins_figure(rep.table), caption="Wins, ties and losses over units: the share of queries, test edges "
                                                "or entities on which B is better than A, equal, or worse (in the "
                                                "metric's direction). A mean can move on a few units; this shows how "
                                                "broad the change is.", label="fig-compare-wins")


def show_summary(rep: ComparisonReport) -> None:
    show_markdown(narrative(rep))


def show_models(rep: ComparisonReport) -> None:
    rows = [{"model": m["name"], "report": m["report"], "vectors": f"{m['n']:,} × {m['d']}" if m.get("n") else ""}
            for m in rep.doc["models"]]
    show_table(pd.DataFrame(rows), caption="The models compared and the report of each (their chapters hold every "
                                           "number of each model on its own).", label="tbl-compare-models")


def show_table_of_differences(rep: ComparisonReport) -> None:
    if not len(rep.table):
        return
    show_table(verdict_table(rep),
               caption="Each metric recorded per unit, compared on the units both models share: mean difference with "
                       "a paired bootstrap interval, effect size d_z, wins/ties/losses over units, the paired t, "
                       "Wilcoxon signed-rank and randomisation p-values, the randomisation p adjusted over every row "
                       f"({rep.doc['correction']}), the minimum detectable effect (α 0.05, power 0.8) and the verdict.",
               label="tbl-compare-differences")


def show_differences(rep: ComparisonReport) -> None:
    if not len(rep.table):
        return
    show_figure(difference_figure(rep.table),
                caption="Standardised differences (dots) with their 95 % intervals (bars; coloured when the adjusted "
                        "test rejects). Intervals crossing zero are not resolved by these units.",
                label="fig-compare-differences")


def show_ranks(rep: ComparisonReport) -> None:
    if not rep.ranks:
        show_markdown("Rank intervals need three or more models.")
        return
    rows = []
    for key, t in rep.ranks.items():
        chapter, metric = key.split(".", 1)
        label = rep.table.loc[(rep.table["chapter"] == chapter) & (rep.table["metric"] == metric), "label"]
        for _, r in t.iterrows():
            rows.append({"metric": f"{label.iloc[0] if len(label) else metric} ({chapter})", "model": r["model"],
                         "mean": _num(r["mean"]), "rank": int(r["rank"]),
                         "95 % rank interval": f"{int(r['rank_low'])}–{int(r['rank_high'])}"})
    show_table(pd.DataFrame(rows), caption="Rank of each model (1 = best) with a bootstrap interval over the units all "
                                           "models share: overlapping intervals mean the ranking between those models "
                                           "is not settled by these units.", label="tbl-compare-ranks")
