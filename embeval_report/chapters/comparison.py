"""The comparison report's one chapter: is model B better than model A, and how sure are we?
(numbers from :mod:`embeval_report.report.compare` and :mod:`embeval_report.metrics.paired`).

The verdict comes first: a sentence per pair of models, a roll-up per chapter, and one compact row per metric
with the interval the verdict uses; the statistics behind it follow."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..metrics.paired import VERDICT_MEANING, VERDICTS, rollup
from ..present.display import Badge, escape, show_figure, show_markdown, show_table
from ..present.format import MARK, MARK_NOTE, decimals, p_value, scorecard_value
from ..present.plotting import PALETTE, WIDTH, use_style
from .comparison_swap import show_swap

__all__ = ["ComparisonReport", "CLIP", "detail_table", "difference_figure", "legend", "load", "method", "narrative",
           "rollup_table", "ship_sentence", "show_differences", "show_method", "show_models", "show_ranks",
           "show_rollup", "show_side_by_side", "show_summary", "show_table_of_differences", "show_verdict",
           "show_swap", "show_verdict_table", "show_wins", "side_by_side_table", "verdict_table", "wins_figure"]

#: the badge colour of each verdict: B (the candidate) better green, A better red, equivalence blue, no answer grey
VERDICT_KIND = {"B better": "healthy", "A better": "problematic", "no difference larger than E": "neutral",
                "underpowered": "unresolved", "inconclusive": "unresolved"}
SHORT = {"no difference larger than E": "no difference > E"}
#: the forest plot's x range, in units of E: differences beyond are drawn at the edge and marked
CLIP = 4.0
#: model names longer than this are written A, B, … in tables and figures
SHORT_NAME = 16
#: a no-break space: keeps an interval or a p-value on one line of a table cell
NBSP = "\u00a0"
KIND_COLOUR = {"healthy": PALETTE["healthy"], "problematic": PALETTE["problematic"], "neutral": "#2f6fb3",
               "unresolved": PALETTE["muted"]}


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


def side_by_side_table(rep: ComparisonReport) -> pd.DataFrame:
    """Every metric all models recorded, each model's own value and interval (over its own set, not paired) and
    its verdict where the metric has one (``comparison.json``'s ``side_by_side``)."""
    names = [m["name"] for m in rep.doc["models"]]
    rows = []
    for r in rep.doc.get("side_by_side") or []:
        row = {"metric": f"{r['chapter']} · {r['label']}", "better": r.get("direction") or ""}
        for n in names:
            cell = scorecard_value({"value": r.get(n), "ci_low": r.get(f"{n} ci_low"),
                                    "ci_high": r.get(f"{n} ci_high"), "bias_corrected": r.get(f"{n} bias_corrected")})
            row[n] = cell + (f" ({r[f'{n} verdict']})" if r.get(f"{n} verdict") else "")
        rows.append(row)
    return pd.DataFrame(rows, columns=["metric", "better", *names])


def show_side_by_side(rep: ComparisonReport) -> None:
    """The side-by-side table (nothing when no metric was recorded by every model)."""
    table = side_by_side_table(rep)
    if len(table):
        marked = any(MARK in str(v) for v in table.iloc[:, 2:].to_numpy().ravel())
        show_table(table, caption="Every metric each model recorded, side by side: each model's own value with its "
                                  "95 % interval over its own set (not paired unit by unit, so no difference is "
                                  "tested here), and its verdict where the metric has a threshold."
                                  + (f" {MARK_NOTE}" if marked else ""), label="tbl-compare-side-by-side")


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and not np.isfinite(x))


def _num(x, fmt=".4g") -> str:
    return "—" if _missing(x) else format(x, fmt)


def _signed(x, fmt="+.4g") -> str:
    return "—" if _missing(x) else format(x, fmt).replace("-", "−")


def _short(rep_or_table) -> dict:
    """Model name → how tables and figures write it: the name itself, or A, B, C, … (in the models' order) when a
    name is longer than :data:`SHORT_NAME` characters (the legend above the verdict names them)."""
    doc = rep_or_table.doc if isinstance(rep_or_table, ComparisonReport) else None
    names = [m["name"] for m in doc["models"]] if doc else list(dict.fromkeys(
        [*rep_or_table["a"], *rep_or_table["b"]]))
    if all(len(n) <= SHORT_NAME for n in names):
        return {n: n for n in names}
    return {n: chr(ord("A") + i) for i, n in enumerate(names)}


def _words(verdict: str, a: str, b: str) -> str:
    return {"B better": f"{b} better", "A better": f"{a} better"}.get(verdict, SHORT.get(verdict, verdict))


def _badge(row, short: dict) -> Badge:
    return Badge(_words(row["verdict"], short[row["a"]], short[row["b"]]), VERDICT_KIND[row["verdict"]])


def _metric(row) -> str:
    return f"{row['chapter']} · {row['label']}"


def _pairs(t: pd.DataFrame) -> int:
    return t[["a", "b"]].drop_duplicates().shape[0]


def _level(t: pd.DataFrame) -> str:
    """How the table's intervals are made, in words ("99.82 % simultaneous (Bonferroni over 28)")."""
    r = t.iloc[0]
    if r["interval"] == "marginal":
        return f"{100 * r['sim_level']:.4g} % marginal"
    return f"{100 * r['sim_level']:.4g} % simultaneous (Bonferroni over {len(t)})"


# ---------------------------------------------------------------------------------------------
# The verdict
# ---------------------------------------------------------------------------------------------

def ship_sentence(rep: ComparisonReport) -> str:
    """Which model to ship, against the first (the one in production), and how sure that is."""
    t, doc = rep.table, rep.doc
    base = doc["models"][0]["name"]
    lines = []
    for b, part in t[t["a"] == base].groupby("b", sort=False):
        part = part.assign(_size=part["d_z"].abs()).sort_values("_size", ascending=False)  # largest effects first
        count = part["verdict"].value_counts()
        better, worse = part[part["verdict"] == "B better"], part[part["verdict"] == "A better"]
        same = int(count.get("no difference larger than E", 0))
        open_ = int(count.get("underpowered", 0) + count.get("inconclusive", 0))

        def names(rows):
            return ", ".join(f"{r.chapter} · {r.label}" for r in rows.head(4).itertuples()) + (
                f" and {len(rows) - 4} more" if len(rows) > 4 else "")
        rest = (f" {same} metric(s) show no difference larger than their E; {open_} are unresolved (underpowered or "
                "inconclusive)." if same or open_ else "")
        if len(worse):
            lines.append(f"**Do not ship {escape(b)} in place of {escape(base)}:** it is significantly worse on "
                         f"{len(worse)} metric(s) ({escape(names(worse))})"
                         + (f", although better on {len(better)}" if len(better) else "") + "." + rest)
        elif len(better):
            lines.append(f"**Ship {escape(b)}:** it is better than {escape(base)} on {len(better)} metric(s) "
                         f"({escape(names(better))}) and significantly worse on none, after correcting for the "
                         f"{len(t)} comparisons." + rest)
        elif open_:
            lines.append(f"**No evidence either way between {escape(b)} and {escape(base)}:** no metric differs "
                         f"significantly; {same} are shown to differ by less than their E, and on {open_} a "
                         "difference that matters cannot be ruled out: more queries, edges or entities would settle "
                         "them.")
        else:
            lines.append(f"**{escape(b)} and {escape(base)} are equivalent** within each metric's E on every metric "
                         "compared: choose on cost or latency.")
    return "\n\n".join(lines)


def rollup_table(rep: ComparisonReport) -> pd.DataFrame:
    """Per pair of models × chapter: how many metrics have each verdict."""
    short, one = _short(rep), _pairs(rep.table) == 1
    rows = []
    for x in rollup(rep.table).itertuples(index=False):
        c = dict(zip(VERDICTS, x[3:]))
        rows.append({**({} if one else {"models": f"{short[x.b]} vs {short[x.a]}"}), "chapter": x.chapter,
                     f"{short[x.b]} better" if one else "B better": int(c["B better"]),
                     f"{short[x.a]} better" if one else "A better": int(c["A better"]),
                     "no difference > E": int(c["no difference larger than E"]),
                     "underpowered": int(c["underpowered"]), "inconclusive": int(c["inconclusive"])})
    return pd.DataFrame(rows)


def legend(rep: ComparisonReport) -> str:
    """Which model is A (the first: the one in production) and which B, and how tables write them."""
    short = _short(rep)
    models = rep.doc["models"]

    def name(m, role):
        s = short[m["name"]]
        return (f"**{escape(s)}** = {escape(m['name'])} ({role})" if s != m["name"]
                else f"**{escape(s)}** ({'A, ' if m is models[0] else 'B, ' if len(models) == 2 else ''}{role})")
    later = "the candidate" if len(models) == 2 else "each compared with every earlier model"
    return (f"Models: {name(models[0], 'the first: the one in production')} and "
            + ", ".join(name(m, later) for m in models[1:]) + ". B − A is the later model minus the earlier one; "
            "*better* is in each metric's own direction.")


def _per_row(rep: ComparisonReport, cells) -> pd.DataFrame:
    """One row per comparison: the pair (with several), the metric, then ``cells(row, signed, plain)``, the two
    number formats resolving a tenth of the row's E."""
    t, short = rep.table, _short(rep)
    rows = []
    for _, r in t.iterrows():
        k = decimals(r["effect"])
        rows.append({**({"models": f"{short[r['b']]} vs {short[r['a']]}"} if _pairs(t) > 1 else {}),
                     "metric": _metric(r), **cells(r, f"+.{k}f", f".{k}f")})
    return pd.DataFrame(rows)


def verdict_table(rep: ComparisonReport) -> pd.DataFrame:
    """The verdict per metric, compact: metric, A → B, B − A with the interval the verdict uses, E, verdict
    (numbers to a tenth of E)."""
    short = _short(rep)
    return _per_row(rep, lambda r, sg, pl: {
        "units": _units(r),
        "A → B": f"{_num(r['mean_a'], pl)}{NBSP}→ {_num(r['mean_b'], pl)}",
        "B − A [interval]": f"{_signed(r['diff'], sg)} [{_signed(r['sim_low'], sg)},{NBSP}"
                            f"{_signed(r['sim_high'], sg)}]",
        "E": _num(r["effect"], ".2g"), "verdict": _badge(r, short)})


def _units(r) -> str:
    """``"80 queries"``: the units a row is paired over (``"80 queries ‡"`` when the reports used different plans)."""
    unit = r.get("unit") if hasattr(r, "get") else None
    text = f"{int(r['n']):,}{NBSP}{unit or 'units'}"
    return text + (f"{NBSP}‡" if _other_plan(r.get("same_plan")) else "")


def _other_plan(same) -> bool:
    """Whether a row's ``same_plan`` says the two reports used different plans (None/NaN: unknown, not different)."""
    return same is not None and same == same and not bool(same)


def difference_figure(t: pd.DataFrame) -> plt.Figure:
    """Per comparison, B − A in units of its E with the interval the verdict uses, signed so that right is always
    "B better" (lower-is-better metrics flipped); ±1 is the equivalence margin; rows grouped by chapter, values
    beyond ±:data:`CLIP` drawn at the edge with an arrow and their value."""
    sign = np.where(t["direction"].to_numpy() == "lower", -1.0, 1.0)
    e = t["effect"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = sign * t["diff"].to_numpy(float) / e
        ends = np.sort(np.column_stack([sign * t["sim_low"].to_numpy(float) / e,
                                        sign * t["sim_high"].to_numpy(float) / e]), axis=1)
    short, pairs = _short(t), _pairs(t)
    labels = [(f"{short[r['b']]} vs {short[r['a']]} · " if pairs > 1 else "") + _metric(r) for _, r in t.iterrows()]
    n = len(t)
    fig, ax = plt.subplots(figsize=(WIDTH, 1.0 + 0.23 * n))
    y = np.arange(n)[::-1].astype(float)
    ax.axvspan(-1, 1, color="#2f6fb3", alpha=0.12, lw=0, label="±E: no difference that matters")
    ax.axvline(0, color="black", lw=0.8)
    colours = [KIND_COLOUR[VERDICT_KIND[v]] for v in t["verdict"]]
    lo, hi = np.clip(ends[:, 0], -CLIP, CLIP), np.clip(ends[:, 1], -CLIP, CLIP)
    ax.hlines(y, lo, hi, color=colours, lw=2.4)
    inside = np.abs(z) <= CLIP
    ax.plot(z[inside], y[inside], "o", color="black", ms=3.5, zorder=3)
    for side, marker in ((1, ">"), (-1, "<")):  # an interval running past the edge: its end marked there
        cut = inside & (side * ends[:, 1 if side > 0 else 0] > CLIP)
        ax.scatter(np.full(cut.sum(), side * CLIP), y[cut], marker=marker, s=22, zorder=4,
                   c=np.asarray(colours, dtype=object)[cut].tolist() or None)
    for yi, zi, colour in zip(y[~inside], z[~inside], np.asarray(colours, dtype=object)[~inside]):
        if not np.isfinite(zi):
            continue
        edge = CLIP if zi > 0 else -CLIP  # clipped: an arrow at the edge, with the point estimate's value
        ax.plot(edge, yi, ">" if zi > 0 else "<", color=colour, ms=7, zorder=4)
        ax.annotate(f"{zi:+.0f} E".replace("-", "−"), (edge, yi), xytext=(-8 if zi > 0 else 8, 0),
                    textcoords="offset points", ha="right" if zi > 0 else "left", va="center", fontsize=7.5)
    chapters = t["chapter"].tolist()
    for i in range(1, n):
        if chapters[i] != chapters[i - 1]:
            ax.axhline(y[i] + 0.5, color="#999999", lw=0.7)
    ax.set_yticks(y, labels, fontsize=8.5)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlim(-CLIP - 0.3, CLIP + 0.3)
    ax.set_xticks(np.arange(-CLIP, CLIP + 1), [f"{v:+.0f} E".replace("-", "−") if v else "0"
                                                for v in np.arange(-CLIP, CLIP + 1)])
    names = (short[t["a"].iloc[0]], short[t["b"].iloc[0]]) if pairs == 1 else ("A", "B")
    ax.set_xlabel(f"B − A in units of each metric's E: right, {names[1]} better; left, {names[0]} better "
                  f"(lower-is-better metrics flipped)", fontsize=9)
    ax.legend(frameon=False, fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", visible=False)
    return fig


def wins_figure(t: pd.DataFrame) -> plt.Figure:
    """Per comparison: the share of units on which B is better, tied, or worse than A."""
    short, pairs = _short(t), _pairs(t)
    labels = [(f"{short[r['b']]} vs {short[r['a']]} · " if pairs > 1 else "") + _metric(r) for _, r in t.iterrows()]
    n = t["n"].to_numpy(float)
    shares = np.column_stack([t["wins"], t["ties"], t["losses"]]) / n[:, None]
    fig, ax = plt.subplots(figsize=(WIDTH, 1.0 + 0.23 * len(t)))
    y = np.arange(len(t))[::-1]
    left = np.zeros(len(t))
    names = (short[t["a"].iloc[0]], short[t["b"].iloc[0]]) if pairs == 1 else ("A", "B")
    for j, (name, color) in enumerate(((f"{names[1]} better", PALETTE["healthy"]), ("tie", PALETTE["muted"]),
                                       (f"{names[0]} better", PALETTE["problematic"]))):
        ax.barh(y, shares[:, j], left=left, color=color, label=name, height=0.7)
        left += shares[:, j]
    ax.set_yticks(y, labels, fontsize=8.5)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the shared units")
    ax.legend(frameon=False, fontsize=7.5, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return fig


# ---------------------------------------------------------------------------------------------
# The details
# ---------------------------------------------------------------------------------------------

def narrative(rep: ComparisonReport) -> str:
    """What the comparison says, pair by pair (the details below the verdict)."""
    doc, t = rep.doc, rep.table
    names = [m["name"] for m in doc["models"]]
    if not len(t):
        return (f"The reports of {escape(', '.join(names))} share no per-unit results to pair (no chapter that "
                "records queries, test edges, entities or users ran on both with the same units), so no difference "
                "can be tested: the table below shows each model's own numbers side by side. To test differences, "
                "run a chapter with per-unit results (a task chapter: retrieval, node classification, clustering, link "
                "prediction, semantic similarity, ...; stability, drift) "
                "with the same side data on each model.")
    corr = {"holm": "Holm's correction", "bh": "the Benjamini–Hochberg correction", "none": "no correction"}[
        doc["correction"]]
    r0 = t.iloc[0]
    parts = [f"**{len(t)} comparisons** ({t[['chapter', 'metric']].drop_duplicates().shape[0]} metrics × "
             f"{_pairs(t)} pair(s) of models), each on the units both models were evaluated on, with {corr} over "
             f"all of them at α = 0.05. Each metric's **E**, the smallest difference that matters (`--mde "
             f"{escape(doc['effect'])}`), is in the table; the intervals are {_level(t)} ones, at the level "
             f"{_num(r0['alpha_test'], '.3g')} each comparison is tested at, so that no difference larger than E "
             "is claimed by accident."]
    for (a, b), part in t.groupby(["a", "b"], sort=False):
        best = part.loc[part["p_adjusted"].idxmin()]
        parts.append(f"**{escape(b)} vs {escape(a)}:** the clearest difference is {escape(_metric(best))}: "
                     f"{escape(b)} − {escape(a)} = {_signed(best['diff'])} ({_signed(best['sim_low'])} to "
                     f"{_signed(best['sim_high'])}), d_z = {_num(best['d_z'], '.2f')}, {escape(b)} better on "
                     f"{int(best['wins']):,} of {int(best['n']):,} {best['unit']} and worse on "
                     f"{int(best['losses']):,}, adjusted p {p_value(best['p_adjusted'])}.")
    if "same_plan" in t:
        other = t[t["same_plan"].map(_other_plan)]
        if len(other):
            parts.append(f"‡ {len(other)} comparison(s) pair units that the two reports scored on **different plans** "
                         "(folds, negatives, sampled queries or seeds: "
                         f"{escape(', '.join(dict.fromkeys(other['chapter'])))}): the units are the same ids, but part "
                         "of a difference may come from the plan rather than the vectors. Run both models with the same "
                         "side data and `--seed` to compare them on one plan.")
    under, inc = t[t["verdict"] == "underpowered"], t[t["verdict"] == "inconclusive"]
    if len(under):
        parts.append(f"{len(under)} comparison(s) are **underpowered**: not significant, and at the corrected level "
                     "their minimum detectable effect exceeds their E (e.g. "
                     f"{escape(_metric(under.iloc[0]))}: MDE {_num(under.iloc[0]['mde'], '.3g')}, E "
                     f"{_num(under.iloc[0]['effect'], '.3g')}), so a difference that matters could still hide in "
                     "them; more units (queries, edges) would settle them.")
    if len(inc):
        parts.append(f"{len(inc)} comparison(s) are **inconclusive**: not significant and powered for E, but the "
                     f"interval still reaches past ±E (e.g. {escape(_metric(inc.iloc[0]))}: "
                     f"{_signed(inc.iloc[0]['sim_low'])} to {_signed(inc.iloc[0]['sim_high'])}, E "
                     f"{_num(inc.iloc[0]['effect'], '.3g')}).")
    return "\n\n".join(parts)


def detail_table(rep: ComparisonReport) -> pd.DataFrame:
    """The statistics behind each verdict: units, marginal interval, d_z, wins/ties/losses, the randomisation test
    raw and adjusted, E and the MDE (the t and Wilcoxon p-values are in comparison.csv)."""
    return _per_row(rep, lambda r, sg, pl: {
        "units": f"{int(r['n']):,}",
        "B − A (95 % marginal CI)": f"{_signed(r['diff'], sg)} ({_signed(r['ci_low'], sg)}{NBSP}to{NBSP}"
                                    f"{_signed(r['ci_high'], sg)})",
        "d_z": _num(r["d_z"], ".2f"), "wins / ties / losses": f"{r['wins']:,} / {r['ties']:,} / {r['losses']:,}",
        "p": p_value(r["p_randomisation"]).replace(" ", NBSP), "p adj.": p_value(r["p_adjusted"]).replace(" ", NBSP),
        "E": _num(r["effect"], ".2g"), "MDE": _num(r["mde"], ".2g")})


def method(rep: ComparisonReport) -> str:
    """The Method, with what this comparison used (interval methods, level, E rules)."""
    t, doc = rep.table, rep.doc
    parts = [
        "For each metric that is a mean over units, both models' per-unit values are joined on the unit id (units "
        "only one model has are left out; their counts are in comparison.json). With differences dᵢ = Bᵢ − Aᵢ over "
        "the n shared units: the **paired t-test**, the **Wilcoxon signed-rank test** (zero differences dropped) "
        "and the **paired randomisation test** (the sign of each difference flipped at random, 4,999 draws, exact "
        "for up to 12 units; when the sampled p-value sits at its floor 2/5,000 the sign-flip null's normal limit "
        "2Φ̄(|Σdᵢ|/√Σdᵢ²) is used, so a correction over many metrics can still reject; Smucker, Allan & Carterette "
        "2007), all two-sided; the effect size **d_z** = mean(d)/sd(d); wins, ties and losses over units in the "
        "metric's direction. The randomisation p-values of every pair of models × metric are adjusted together "
        "(Holm by default; `--correction bh|none`)."]
    if len(t):
        methods = t["ci_method"].fillna("").astype(str)
        normal = t[methods.str.contains("normal")]
        bca = t[methods.str.contains("BCa")]
        how = []
        if len(bca):
            how.append(f"a **BCa bootstrap** over the units for {len(bca)} comparison(s)")
        if len(normal):
            how.append(f"the **normal interval** mean ± z·sd/√n for {len(normal)} comparison(s) with many units ("
                       + escape(", ".join(dict.fromkeys(_metric(r) for _, r in normal.iterrows()))) + ")")
        parts.append("**Intervals.** The *marginal* 95 % interval of the mean difference (details table) is "
                     + (" and ".join(how) if how else "not defined") + ". The interval the verdict uses is the "
                     f"paired t interval at level {_level(t)}: with m comparisons, 1 − α/m (Bonferroni; Dunn 1961) "
                     "holds for all of them at once, so each verdict can be read on its own.")
    parts.append(
        "**Verdict.** *B better* or *A better* when the adjusted randomisation test rejects at α = 0.05 (the sign and "
        "the metric's direction say which); otherwise *no difference larger than E* only when the simultaneous "
        "interval lies inside ±E: the two one-sided tests (TOST; Schuirmann 1987) at α/(2m) each, so such a claim "
        "is wrong with probability at most α/(2m) per metric when the true difference is E or more; otherwise "
        "*underpowered* when the minimum detectable effect at the same level (MDE = d·sd(d), d the standardised "
        "effect a two-sided paired t-test at α/m detects with power 0.8, statsmodels `TTestPower`) exceeds E; "
        "otherwise *inconclusive*. Holm can reject where the Bonferroni interval just touches zero: the verdict "
        "follows the test. " + " ".join(f"*{v}*: {VERDICT_MEANING[v]}." for v in VERDICTS[2:]))
    parts.append(f"**E per metric** (`--mde {escape(doc['effect'])}`; docs/compare.md): by default 0.01 for a bounded "
                 "metric (a rate, share, cosine, nDCG), but no more than 10 % of its distance to the nearer end of its "
                 "range (a hit rate of 0.015 gets 0.0015), and 5 % of model A's value for an unbounded one (mean "
                 "rank); comparison.csv says how each E was set (`effect_rule`).")
    parts.append("With three or more models, each model's rank comes with a bootstrap interval (units resampled "
                 "jointly for all models), as in the leaderboard-stability analysis of MTEB, where most adjacent "
                 "pairs could not be separated.")
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_verdict(rep: ComparisonReport) -> None:
    """The ship sentence and the roll-up per chapter; without paired comparisons, why, and the side-by-side
    table of every metric the models recorded."""
    if not len(rep.table):
        show_markdown(narrative(rep))
        show_side_by_side(rep)
        return
    show_markdown(legend(rep) + "\n\n" + ship_sentence(rep))
    show_rollup(rep)


def show_rollup(rep: ComparisonReport) -> None:
    if len(rep.table):
        show_table(rollup_table(rep), caption="Verdicts per chapter: how many metrics each model is significantly "
                                              "better on, how many are shown to differ by less than E, and how many "
                                              "are unresolved.", label="tbl-compare-rollup")


def show_verdict_table(rep: ComparisonReport) -> None:
    if not len(rep.table):
        return
    t = rep.table
    show_table(verdict_table(rep),
               caption=f"The verdict per metric: the units both models share (n), model A's and B's values over them, "
                       f"B − A with its "
                       f"{_level(t)} interval (the one the verdict uses), and E, the smallest difference that "
                       "matters. Green: B better; red: A better; blue: shown to differ by less than E; grey: "
                       "unresolved (underpowered or inconclusive).", label="tbl-compare-differences")


def show_summary(rep: ComparisonReport) -> None:
    show_markdown(narrative(rep))


def show_models(rep: ComparisonReport) -> None:
    rows = [{"model": m["name"], "report": m["report"], "vectors": f"{m['n']:,} × {m['d']}" if m.get("n") else ""}
            for m in rep.doc["models"]]
    show_table(pd.DataFrame(rows), caption="The models compared and the report of each (their chapters hold every "
                                           "number of each model on its own).", label="tbl-compare-models")
    if len(rep.table):  # without paired comparisons the verdict above shows it
        show_side_by_side(rep)


def show_table_of_differences(rep: ComparisonReport) -> None:
    if not len(rep.table):
        return
    show_table(detail_table(rep),
               caption="The statistics behind each verdict: shared units, mean difference with its marginal 95 % "
                       "interval (not adjusted for the other comparisons), effect size d_z, wins/ties/losses over "
                       "units, the randomisation test's p-value raw and adjusted over every row "
                       f"({rep.doc['correction']}), E and the minimum detectable effect at the corrected level (power "
                       "0.8). comparison.csv adds the paired t and Wilcoxon p-values and how each E was set.",
               label="tbl-compare-details")


def show_differences(rep: ComparisonReport) -> None:
    if not len(rep.table):
        return
    t = rep.table
    show_figure(difference_figure(t),
                caption=f"Each difference in units of its metric's E, with its {_level(t)} interval, signed so that "
                        "right is always B better (lower-is-better metrics such as mean rank flipped). The blue band "
                        "is ±E: an interval inside it shows no difference that matters; an interval clear of zero "
                        "is a significant difference. Colours as in the verdict table; arrows mark intervals clipped "
                        f"at ±{CLIP:g} E, with the point estimate's value when it lies beyond.",
                label="fig-compare-differences")


def show_wins(rep: ComparisonReport) -> None:
    if not len(rep.table):
        return
    show_figure(wins_figure(rep.table), caption="Wins, ties and losses over units: the share of queries, test edges "
                                                "or entities on which B is better than A, equal, or worse (in the "
                                                "metric's direction). A mean can move on a few units; this shows how "
                                                "broad the change is.", label="fig-compare-wins")


def show_method(rep: ComparisonReport) -> None:
    show_markdown(method(rep))


def show_ranks(rep: ComparisonReport) -> None:
    if not rep.ranks:
        show_markdown("Rank intervals need three or more models.")
        return
    rows = []
    for key, t in rep.ranks.items():
        chapter, metric = key.split(".", 1)
        label = rep.table.loc[(rep.table["chapter"] == chapter) & (rep.table["metric"] == metric), "label"]
        for _, r in t.iterrows():
            rows.append({"metric": f"{chapter} · {label.iloc[0] if len(label) else metric}", "model": r["model"],
                         "mean": _num(r["mean"]), "rank": int(r["rank"]),
                         "95 % rank interval": f"{int(r['rank_low'])}–{int(r['rank_high'])}"})
    show_table(pd.DataFrame(rows), caption="Rank of each model (1 = best) with a bootstrap interval over the units all "
                                           "models share: overlapping intervals mean the ranking between those models "
                                           "is not settled by these units.", label="tbl-compare-ranks")
