"""The Fairness and bias chapter (seed 000 §222): is the embedding as good for every group of entities,
and does it associate groups with concepts? (computed in :mod:`embeval_report.metrics.fairness`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import ChapterSkipped
from ..metrics import fairness as fm
from ..metrics import fairness_units as fu
from ..metrics.scoring import TaskScorer
from ..present.display import callout, escape, show_figure, show_markdown, show_table, with_mark_note
from ..present.display import show_metrics as show_metric_table
from ..present.escape import mathtext
from ..present.format import interval, marked_value, metric_text, p_value, value_with_ci
from ..present.plotting import PALETTE, WIDTH
from ..stats import adjust_pvalues
from .declaration import INF, PROBE_ENTITIES, ChapterSpec, K, Option
from .findings import ChapterResults, Effect, Finding, metric_evidence, test_text, threshold_findings, value_text
from .labelled import probe_budget

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["FairnessReport", "association_table", "bias_types_table", "compute", "group_display_table",
           "gaps_table", "groups_figure", "narrative", "precheck", "show_association", "show_bias_types", "show_gaps",
           "show_groups", "show_intersections", "show_protocol", "show_summary", "weat_figure"]

#: seed 000 §222.1, Table "Types of Embedding Bias" (reproduced), with where this chapter looks for each
BIAS_TYPES = (
    ("Representation bias", "Certain groups have significantly fewer training examples, which leads to lower "
     "fidelity embeddings for minority groups or long-tail items.", "Rare product categories have poor vector "
     "quality compared to popular consumer electronics.", "group sizes; relative k-occurrence, neighbourhood "
     "label agreement and within-group APCS per group"),
    ("Association bias", "The embedding space captures and amplifies human stereotypes present in the training "
     "text, encoding cultural biases as geometric relationships.", "“Doctor” is closer to “Male” than “Female”, "
     "“Nurse” closer to “Female”.", "WEAT effect sizes and permutation tests (association_tests)"),
    ("Allocation bias", "The system distributes resources or opportunities unequally: the model performs better "
     "for the majority group.", "New users receive generic popular recommendations, active users personalised "
     "ones.", "held-out probe accuracy per group and its gap; relative k-occurrence (who gets retrieved)"),
    ("Measurement bias", "The evaluation metrics favour the majority class: a high overall score can hide a "
     "catastrophic failure within a subgroup.", "95 % AUC overall, 60 % for one minority demographic.",
     "every number per group and per intersection of two attributes, never only the overall mean"),
    ("Historical bias", "The data reflects the world accurately, but the world contains inequities the model "
     "learns to perpetuate.", "A hiring model trained on ten years of résumés penalises women's colleges.",
     "not separable from the data by any metric: WEAT shows the associations the data taught"),
)
#: short names of the measures in the gaps table
SHORT = {"probe_accuracy": "probe accuracy", "label_agreement": "label agreement", "k_occurrence": "N_k / k",
         "apcs": "APCS"}
#: gap (in points of accuracy) from the best group that Figure 222.1 colours
SEED_FIGURE_GAP = 0.05


@dataclass(frozen=True)
class FairnessReport:
    """Everything the chapter shows."""

    result: fm.FairnessResult
    attributes: tuple
    label_column: str
    has_tests: bool


def precheck(es, side, settings) -> str | None:
    """Why the chapter cannot run: fairness attributes without any metadata (the loader names the columns)."""
    if "fairness" not in es.fields and "association_tests" not in es.fields:
        return "needs `fairness: {attributes: [...]}` or `association_tests`"
    return None


def entity_inputs(es, side, settings) -> fu.FairnessInputs:
    """The protected attributes of the manifest's ``fairness`` entry and the metadata holding them;
    :class:`ChapterSkipped` without attributes (the association tests alone have no units)."""
    spec = side.fairness if "fairness" in side else None
    if spec is None or not spec.attributes:
        raise ChapterSkipped("no protected attributes (`fairness: {attributes: [...]}`) to compare groups on")
    return fu.entity_inputs(es.metadata, tuple(spec.attributes), ids=es.ids, label_column=spec.label,
                            device=settings.device)


def entity_plan(inputs: fu.FairnessInputs, settings) -> fu.FairnessPlan:
    """The groups (``min_group_size``), the probe's sample and folds (``probe_entities``, the seed) and k."""
    return fu.fairness_plan(inputs, min_group_size=int(settings.option("min_group_size")),
                            k=int(settings.option("k")), max_probe_entities=probe_budget(settings), seed=settings.seed)


#: the held-out probe, the neighbourhood label agreement and the k-occurrence per entity, with its groups; the gaps
#: between groups (the worst attribute's) are functions of the whole table
SCORER = TaskScorer(
    unit="entities", key="entity", columns=("groups", *fu.MEASURES),
    aggregates=fu.gap_aggregates(),
    inputs=entity_inputs, plan=entity_plan,
    score=lambda X, inputs, plan: fu.entity_table(inputs, plan, fu.entity_measures(X, inputs, plan)))


def compute(ctx: ChapterContext) -> FairnessReport:
    """Compare the groups of every protected attribute, run the association tests, record everything."""
    es, side = ctx.es, ctx.side
    spec = side.fairness if "fairness" in side else None
    tests = side.association_tests if "association_tests" in side else None
    attrs = tuple(spec.attributes) if spec else ()
    label = spec.label if spec else "label"
    plan = units = measures = None
    if attrs:  # the scorer's units; the group comparisons and their bootstrap read them back per row
        inputs = SCORER.inputs(es, side, ctx.settings)
        plan = SCORER.plan(inputs, ctx.settings)
        units = SCORER.units(es.vectors, inputs, plan)
        measures = fu.row_measures(units, inputs, plan)
    result = fm.evaluate_fairness(es.vectors, es.metadata, attrs, ids=es.ids, label_column=label,
                                  association_tests=tests or (), k=int(ctx.option("k")),
                                  min_group_size=int(ctx.option("min_group_size")),
                                  n_perm=int(ctx.option("weat_permutations")), level=ctx.level, seed=ctx.seed,
                                  device=ctx.device, max_probe_entities=probe_budget(ctx.settings), plan=plan,
                                  measures=measures)
    if not result.metrics and not result.weat:
        raise ChapterSkipped("no attribute has two groups with at least "
                             f"{int(ctx.option('min_group_size'))} members and no association test was given")
    ctx.rec.add(*result.metrics.values())
    if units is not None:
        ctx.rec.scored(SCORER, units, plan)
    ctx.rec.test(*result.tests)
    ctx.rec.note(**_record(result))
    return FairnessReport(result, attrs, label, bool(tests))


def _record(r: fm.FairnessResult) -> dict:
    groups = {a: {"sizes": c.groups.sizes, "too_small": list(c.groups.too_small), "missing": c.groups.n_missing,
                  "table": c.table.to_dict(orient="records")} for a, c in r.comparisons.items()}
    weat = [dict(name=w.name, sets=list(w.set_names), sizes=list(w.sizes), out_of_vocabulary=[list(o) for o in w.oov],
                 statistic=w.statistic, effect=w.effect, p=w.p, p_attributes=w.p_attributes, reason=w.reason)
            for w in r.weat]
    return dict(fairness=dict(r.info, groups=groups, weat=weat))


# ---------------------------------------------------------------------------------------------
# Narrative and tables
# ---------------------------------------------------------------------------------------------

def _ci(r: fm.FairnessResult, attr: str, key: str, fmt: str) -> str:
    return metric_text(r.metrics[f"{key}__{fm.slug(attr)}"], fmt)


def _group_value(c: fm.GroupComparison, group: str, measure: str) -> float:
    t = c.table.set_index("group")
    return float(t.loc[group, measure])


def narrative(rep: FairnessReport) -> str:
    """What the numbers say, attribute by attribute, then the association tests."""
    r = rep.result
    parts = []
    for a in rep.attributes:
        c = r.comparisons[a]
        g = c.groups
        head = (f"**{escape(a)}**: {len(g.names)} groups compared ({g.n_compared:,} entities)"
                + (f"; {len(g.too_small)} too small to compare ({', '.join(escape(x) for x in g.too_small)}: fewer "
                   f"than {g.min_size} members)" if g.too_small else "")
                + (f"; {g.n_missing:,} entities have no value and are left out" if g.n_missing else "") + ".")
        bits = [head]
        if "probe_accuracy_difference" in c.values:
            best, worst = c.extremes["probe_accuracy"]
            verdict = r.metrics[f"probe_accuracy_difference__{fm.slug(a)}"].verdict
            bits.append(f"The probe's held-out accuracy is lowest for *{escape(worst)}* "
                        f"({_group_value(c, worst, 'probe_accuracy'):.1%}) and highest for *{escape(best)}* "
                        f"({_group_value(c, best, 'probe_accuracy'):.1%}): a gap of "
                        f"{_ci(r, a, 'probe_accuracy_difference', '.3f')}, {verdict} by the seed's bands (healthy "
                        "below 5 points, problematic above 10)"
                        + (f"; a chi-squared test of equal accuracy gives raw p = {c.test.p_value:.2g} (the "
                           "report-wide adjustment is in the Statistical rigor chapter's tests table)." if c.test
                           else "."))
        if "k_occurrence_difference" in c.values:
            best, worst = c.extremes["k_occurrence"]
            lo = _group_value(c, worst, "k_occurrence")
            bits.append(f"*{escape(worst)}* appears in the others' {r.info.get('k', 10)} nearest neighbours "
                        f"{lo:.2f}× as often as the average entity (*{escape(best)}*: "
                        f"{_group_value(c, best, 'k_occurrence'):.2f}×)"
                        + (": it is under-represented in every neighbour-based use of the vectors."
                           if lo < 0.85 else "."))
        if "apcs_difference" in c.values:
            best, worst = c.extremes["apcs"]
            bits.append(f"The most crowded group is *{escape(worst)}* (mean pairwise cosine "
                        f"{_group_value(c, worst, 'apcs'):.3f} against {_group_value(c, best, 'apcs'):.3f} for "
                        f"*{escape(best)}*).")
        parts.append(" ".join(bits))
    inter = [k for k in r.comparisons if k not in rep.attributes]
    for k in inter:
        c = r.comparisons[k]
        if "probe_accuracy_difference" in c.values:
            best, worst = c.extremes["probe_accuracy"]
            parts.append(f"Across the intersections **{escape(k)}** the probe's accuracy ranges from "
                         f"{_group_value(c, worst, 'probe_accuracy'):.1%} (*{escape(worst)}*) to "
                         f"{_group_value(c, best, 'probe_accuracy'):.1%} (*{escape(best)}*), a gap of "
                         f"{_ci(r, k, 'probe_accuracy_difference', '.3f')}: a cell can fare worse than either of its "
                         "attributes shows alone (smaller cells also make the max − min larger by chance; the "
                         "interval says how much).")
    for note in r.info.get("notes", []):
        parts.append(escape(note) + ".")
    if rep.has_tests:
        ran = [w for w in r.weat if not w.reason]
        _, adj = adjust_pvalues([w.p_value for w in ran], "holm") if ran else (None, np.array([]))
        strong = [w for w, p in zip(ran, adj) if p < 0.05]
        lost = sum(len(o) for w in r.weat for o in w.oov)
        txt = (f"**Association tests**: {len(ran)} of {len(r.weat)} WEAT tests ran; {len(strong)} show an association "
               "that survives Holm's correction across them (one-sided, α = 0.05)")
        if strong:
            w = max(strong, key=lambda x: abs(x.effect["effect_size"]))
            x, y, a_, b_ = (escape(s) for s in w.set_names)
            txt += (f", the largest “{escape(w.name)}”: {x} is closer to {a_} (relative to {b_}) than {y} is, effect "
                    f"size d = {w.effect['effect_size']:.2f} (Caliskan's convention; above 0.8 is large)")
        txt += "."
        if lost:
            txt += (f" {lost} word(s) are not in the vocabulary; they are counted per set in the table and left out, "
                    "never silently.")
        parts.append(txt)
    return "\n\n".join(parts)


def bias_types_table() -> pd.DataFrame:
    """The seed's table of bias types (§222.1), with the place in this chapter that looks for each."""
    return pd.DataFrame(BIAS_TYPES, columns=["bias", "mechanism (seed 000 §222.1)", "example", "measured here by"])


def group_display_table(c: fm.GroupComparison) -> pd.DataFrame:
    """One row per group: size and every per-group measure with its bootstrap interval."""
    rows = []
    for _, g in c.table.iterrows():
        row = {"group": g["group"], "entities": int(g["n"])}
        if g.get("note"):
            row["note"] = g["note"]
            rows.append(row)
            continue
        for m, (label, _, _) in fm.MEASURES.items():
            if m not in g or not np.isfinite(g[m]):
                continue
            fmt = ".1%" if m in ("probe_accuracy", "label_agreement") else (".2f" if m == "k_occurrence" else ".3f")
            lo, hi = g[f"{m} ci_low"], g[f"{m} ci_high"]
            row[label] = f"{marked_value(g[m], lo, hi, text=format(g[m], fmt))} ({interval(lo, hi, fmt)})"
        if "probe_accuracy n" in g and np.isfinite(g["probe_accuracy n"]):
            row["probe-evaluated"] = int(g["probe_accuracy n"])
        row["note"] = ""
        rows.append(row)
    out = pd.DataFrame(rows)
    if "probe-evaluated" in out and (out["probe-evaluated"].fillna(out["entities"]) == out["entities"]).all():
        out = out.drop(columns="probe-evaluated")
    if "note" in out and not out["note"].fillna("").astype(bool).any():
        out = out.drop(columns="note")
    return out


def gaps_table(r: fm.FairnessResult) -> pd.DataFrame:
    """One row per attribute and intersection, one column per gap (value with its interval)."""
    rows = []
    for attr, c in r.comparisons.items():
        row = {"attribute": attr}
        for key in c.values:
            m = r.metrics[f"{key}__{fm.slug(attr)}"]
            fmt = ".3f"
            base, kind = key.rsplit("_", 1)
            row[f"{SHORT[base]} {'gap (max − min)' if kind == 'difference' else 'ratio (min / max)'}"] = (
                f"{marked_value(m.value, m.ci_low, m.ci_high, m.bias_corrected, format(m.value, fmt))} "
                f"({interval(m.ci_low, m.ci_high, fmt)})"
                + (f" {m.verdict}" if m.verdict else ""))
        rows.append(row)
    return pd.DataFrame(rows)


def association_table(r: fm.FairnessResult, level: float = 0.95) -> pd.DataFrame:
    """One row per WEAT test: sets with their sizes and out-of-vocabulary counts, effect sizes, p-values."""
    ran = [w for w in r.weat if not w.reason]
    _, adj = adjust_pvalues([w.p_value for w in ran], "holm") if ran else (None, [])
    holm = dict(zip([w.name for w in ran], adj))
    rows = []
    for w in r.weat:
        sets = "; ".join(f"{n} ({s}{f', {len(o)} out of vocabulary' if o else ''})"
                         for n, s, o in zip(w.set_names, w.sizes, w.oov))
        row = {"test": f"T{len(rows) + 1} · {w.name}", "X; Y; A; B (words used)": sets}
        if w.reason:
            row.update({"effect size d": "—", "note": w.reason})
        else:
            for key, col in (("effect_size", "d (sd over X ∪ Y)"), ("effect_size_pooled", "d (pooled sd)")):
                lo, hi = w.cis.get(key, (None, None))
                row[col] = value_with_ci(w.effect[key], lo, hi, ".2f", what=f"{level:.0%} CI")
            p = w.p
            row["p (one-sided)"] = (f"{p['p_value']:.2g} (exact, {p['n_partitions']:,} partitions)"
                                    if p["method"] == "exact" else
                                    f"{p['p_value']:.2g} ± {p['mc_error']:.1g} ({p['n_used']:,} of "
                                    f"{p['n_partitions']:,} partitions)")
            row["p Holm (these tests)"] = f"{holm[w.name]:.2g}"
            row["note"] = ""
        rows.append(row)
    out = pd.DataFrame(rows)
    if "note" in out and not out["note"].fillna("").astype(bool).any():
        out = out.drop(columns="note")
    return out


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def groups_figure(c: fm.GroupComparison) -> plt.Figure:
    """Figure 222.1 re-drawn: held-out probe accuracy, relative k-occurrence and group sizes, with intervals."""
    t = c.table[c.table["note"].fillna("") == ""]
    small = c.table[c.table["note"].fillna("") != ""]
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH, 2.9))
    y = np.arange(len(t))[::-1]
    panels = [("probe_accuracy", "held-out probe accuracy"), ("k_occurrence", "relative k-occurrence N_k / k")]
    for ax, (m, title) in zip(axes[:2], panels):
        if m not in t or not np.isfinite(t[m].astype(float)).any():
            ax.set_axis_off()
            ax.set_title(f"{title}\n(not computed)")
            continue
        v = t[m].to_numpy(float)
        lo, hi = t[f"{m} ci_low"].to_numpy(float), t[f"{m} ci_high"].to_numpy(float)
        if m == "probe_accuracy":
            colors = [PALETTE["reference"] if np.nanmax(v) - x >= SEED_FIGURE_GAP else PALETTE["data"] for x in v]
        else:
            colors = [PALETTE["reference"] if x < 0.85 else PALETTE["data"] for x in v]
        ax.barh(y, v, color=colors, alpha=0.85)
        ax.errorbar(v, y, xerr=[np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)], fmt="none", ecolor="black",
                    lw=1, capsize=2)
        if m == "k_occurrence":
            ax.axvline(1.0, color=PALETTE["muted"], ls="--", lw=0.8)
        else:
            ax.set_xlim(max(0.0, float(np.nanmin(lo)) - 0.1), 1.0)
        ax.set_yticks(y, [mathtext(g) for g in t["group"]])
        ax.set_title(title)
    ax = axes[2]
    names = [mathtext(g) for g in t["group"]] + [mathtext(g) for g in small["group"]]
    sizes = list(t["n"]) + list(small["n"])
    yy = np.arange(len(names))[::-1]
    ax.barh(yy, sizes, color=[PALETTE["data"]] * len(t) + [PALETTE["muted"]] * len(small))
    ax.axvline(c.groups.min_size, color=PALETTE["reference"], ls=":", lw=0.8)
    ax.set_yticks(yy, names)
    ax.set_xscale("log")
    ax.set_title("group size (grey: too small)")
    return fig


def weat_figure(r: fm.FairnessResult) -> plt.Figure | None:
    """The association score s(w, A, B) of every target word, per test (X above, Y below the line)."""
    ran = [w for w in r.weat if not w.reason]
    if not ran:
        return None
    fig, ax = plt.subplots(figsize=(WIDTH * 0.8, 0.55 * len(ran) * 2 + 0.8))
    ticks, labels = [], []
    for i, w in enumerate(ran):
        base = 2 * (len(ran) - 1 - i)
        for off, scores, name, color in ((0.5, w.scores_x, w.set_names[0], PALETTE["data"]),
                                          (0.0, w.scores_y, w.set_names[1], PALETTE["reference"])):
            ax.scatter(scores, np.full(len(scores), base + off), color=color, s=14, alpha=0.8)
            ticks.append(base + off)
            labels.append(f"T{r.weat.index(w) + 1} · {mathtext(name)}")
    ax.axvline(0, color=PALETTE["muted"], lw=0.8)
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.set_xlabel("s(w, A, B) = mean cos(w, A) − mean cos(w, B)")
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: FairnessReport) -> None:
    show_markdown(narrative(rep))


def show_bias_types(rep: FairnessReport) -> None:
    show_table(bias_types_table(), caption="The types of embedding bias (seed 000 §222.1, Table “Types of Embedding "
                                           "Bias”), and where this chapter looks for each.", label="tbl-fairness-types")


def _show_comparison(name: str, c: fm.GroupComparison, level: float, figure: bool) -> None:
    table = group_display_table(c)
    show_table(table,
               caption=with_mark_note(table, f"By {name}: per-group means with {level:.0%} percentile bootstrap "
                                             f"intervals over the compared entities ({c.n_boot} resamples; the probe's "
                                             "predictions and the k-NN graph held fixed). Groups below "
                                             f"{c.groups.min_size} members are too small to compare."),
               label=f"tbl-fairness-{fm.slug(name)}")
    if figure:
        show_figure(groups_figure(c), caption=f"By {name} (after the seed's Figure 222.1): held-out probe accuracy "
                                              f"(red: {SEED_FIGURE_GAP:.0%} or more below the best group), relative "
                                              "k-occurrence (red: below 0.85; dashed: parity) and group sizes "
                                              "(log scale; dotted: the minimum size).",
                    label=f"fig-fairness-{fm.slug(name)}")


def show_groups(rep: FairnessReport) -> None:
    if not rep.attributes:
        show_markdown("No protected attribute given (`fairness: {attributes: [...]}` names metadata columns).")
        return
    for a in rep.attributes:
        show_markdown(f"### {escape(a)}")
        _show_comparison(a, rep.result.comparisons[a], rep.result.info["level"], True)


def show_intersections(rep: FairnessReport) -> None:
    inter = [k for k in rep.result.comparisons if k not in rep.attributes]
    if not inter:
        show_markdown("No intersection: it needs at least two attributes.")
        return
    for k in inter:
        show_markdown(f"### {escape(k)}")
        _show_comparison(k, rep.result.comparisons[k], rep.result.info["level"], False)


def show_gaps(rep: FairnessReport) -> None:
    gaps = {k: m for k, m in rep.result.metrics.items() if not k.startswith("weat")}
    if not gaps:
        show_markdown("No gap: no attribute has two groups large enough to compare.")
        return
    table = gaps_table(rep.result)
    show_table(table,
               caption=with_mark_note(
                   table, f"Gaps between groups (fairlearn's between-groups difference max − min, and ratio min / max), "
                          f"per attribute and intersection, with {rep.result.info['level']:.0%} percentile bootstrap "
                          "intervals (max − min is biased upward: an interval above a small value means no detectable "
                          "gap). Verdict of the accuracy gap from seed 000 §222.2: healthy below 5 points, problematic "
                          "above 10."), label="tbl-fairness-gaps")
    worst = {k: m for k, m in gaps.items() if "__" not in k}
    show_metric_table(worst, caption="The worst single attribute per gap (the numbers the report's scorecard reads; "
                                     "each is also recorded per attribute and intersection as name__attribute).",
                      label="tbl-fairness-worst")


def show_association(rep: FairnessReport) -> None:
    r = rep.result
    if not rep.has_tests:
        show_markdown("No association tests given (`association_tests:` a YAML or CSV file of WEAT tests).")
        return
    show_table(association_table(r, r.info["level"]),
               caption="WEAT tests (Caliskan et al. 2017). d: effect size with the standard deviation over all target "
                       "words (Caliskan's convention, sample sd) and with the pooled within-set sd (Cohen's d); "
                       "intervals: BCa bootstrap over the target words. p: one-sided permutation p-value over "
                       "equal-size re-partitions of the target words (exact, or sampled with its Monte-Carlo error); "
                       "Holm-adjusted over these tests.", label="tbl-fairness-weat")
    fig = weat_figure(r)
    if fig is not None:
        show_figure(fig, caption="Association score of every target word: X (blue) and Y (red) per test. A test shows "
                                 "an association when the two colours separate.", label="fig-fairness-weat")
    bad = [w for w in r.weat if w.reason]
    if bad:
        callout("note", "\n\n".join(f"“{escape(w.name)}” did not run: {escape(w.reason)}." for w in bad),
                title="Tests not run")


def show_protocol(rep: FairnessReport) -> None:
    i = rep.result.info
    probe = rep.result.probe
    rows = [("attributes", ", ".join(rep.attributes) or "—"),
            ("minimum group size", f"{i['min_group_size']} members"),
            ("probe", f"node-classification probe on '{rep.label_column}', {probe.n_folds}-fold stratified CV over "
                      f"{probe.labels.n:,} labelled entities, held-out predictions only" if probe is not None
             else "not run"),
            ("neighbours", f"k = {i.get('k', '—')} cosine nearest neighbours over the whole set"),
            ("intervals", f"{i['level']:.0%} percentile bootstrap over entities, {i['n_boot']} resamples"),
            ("WEAT p-values", f"exact up to {i['exact_limit']:,} partitions, else {i['n_perm']:,} random partitions")]
    show_table(pd.DataFrame(rows, columns=["setting", "value"]), caption="The evaluation protocol.",
               label="tbl-fairness-protocol")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# Findings
# ---------------------------------------------------------------------------------------------

#: the group gap: the seed's bands on the probe's accuracy gap between the groups of an attribute
GAP = Effect("group gap", ("probe_accuracy_difference",), "Quality differs between protected groups",
             "Review the training data of the worst-served group before shipping:")
#: WEAT |d| at or above which an association is large (Cohen's convention, as Caliskan et al. read it)
LARGE_ASSOCIATION = 0.8


def findings(r: ChapterResults) -> list[Finding]:
    """The group gap, naming the worst-served group, and the association tests (WEAT) that reject after the
    report-wide adjustment."""
    return [*_gap_findings(r), *_association_findings(r)]


def _gap_findings(r: ChapterResults) -> list[Finding]:
    """The seed's bands on the accuracy gap, led by the attribute with the largest flagged gap and naming its
    worst- and best-served groups; the chi-squared test of equal accuracy (report-wide adjusted) must reject,
    else the gap is within chance (a note)."""
    (found,) = threshold_findings(r, (GAP,)) or (None,)
    if found is None:
        return []
    groups = (r.info.get("fairness") or {}).get("groups") or {}
    gaps = [(r.value(f"probe_accuracy_difference__{fm.slug(a)}") or 0.0, a) for a in groups
            if (r.metric(f"probe_accuracy_difference__{fm.slug(a)}") or {}).get("verdict") in ("concerning",
                                                                                             "problematic")]
    if not gaps:
        return [found]
    _, attr = max(gaps, key=lambda ga: (" × " not in ga[1], ga[0]))  # a single attribute before an intersection
    rows = [t for t in groups[attr].get("table", []) if not t.get("note") and isinstance(t.get("probe_accuracy"), float)
            and t["probe_accuracy"] == t["probe_accuracy"]]
    if len(rows) < 2:
        return [found]
    worst, best = min(rows, key=lambda t: t["probe_accuracy"]), max(rows, key=lambda t: t["probe_accuracy"])
    key = f"probe_accuracy_difference__{fm.slug(attr)}"
    m = r.metric(key)
    name = f"probe accuracy by {attr}"
    t = r.test(name)
    chance = t is not None and not r.significant(name)
    group_ci = (f" (95 % CI {interval(worst.get('probe_accuracy ci_low'), worst.get('probe_accuracy ci_high'), '.3f')})"
                if worst.get("probe_accuracy ci_low") is not None else "")
    sentence = (f"{'The gap is within chance: ' if chance else GAP.action + ' '}{worst['group']} ({attr}) is served "
                f"worst: the probe reads its label with held-out accuracy {worst['probe_accuracy']:.3f}{group_ci}, "
                f"against {best['probe_accuracy']:.3f} for {best['group']}; the gap {value_text(m)} is "
                f"{m['verdict']} by the seed's bands (5 and 10 points)" + (f"; {test_text(t)}" if t else "") + ".")
    evidence = dict(metric_evidence(m, key), attribute=attr, group=worst["group"], group_value=worst["probe_accuracy"],
                    best_group=best["group"], best_value=best["probe_accuracy"], test=name if t else None,
                    p_adjusted=r.adjusted_p(name) if t else None)
    return [Finding("note" if chance else m["verdict"], GAP.category, r.name,
                    f"The vectors serve {worst['group']} ({attr}) less well than the other groups", sentence,
                    metrics=(key, *[k for k in found.metrics if k != key]), evidence=evidence, rule="worst group",
                    effect=GAP.name)]


def _association_findings(r: ChapterResults) -> list[Finding]:
    """One finding for the WEAT tests whose one-sided target permutation test rejects after the report-wide
    adjustment, led by the largest effect size: ``concerning`` where the attribute-side test rejects too, else a
    ``note`` (attribute sets drawn at random from one population differ by their draw, and the target test alone
    holds them fixed: on clustered vectors two random attribute sets give d above 1 and a rejecting target test)."""
    found = []
    for w in (r.info.get("fairness") or {}).get("weat") or []:
        name, attributes = f"WEAT: {w['name']}", f"WEAT attributes: {w['name']}"
        if w.get("reason") or r.test(name) is None or not r.significant(name):
            continue
        key = f"weat_effect_size__{fm.slug(w['name'])}"
        held = r.test(attributes) is None or r.significant(attributes)  # else random attribute sets could give it
        found.append((held, abs(r.value(key) or 0.0), w, key, name))
    if not found:
        return []
    found.sort(key=lambda f: (not f[0], -f[1]))
    held = found[0][0]
    found = [f[1:] for f in found]
    _, w, key, name = found[0]
    x, y, a, b = w["sets"]
    parts = [f"{wx['sets'][0]} and {wx['sets'][1]} against {wx['sets'][2]} and {wx['sets'][3]}: d = "
             f"{value_text(r.metric(k) or {})}, {test_text(r.test(n))}"
             + (f"; attributes re-drawn: report-wide Holm-adjusted p {p_value(r.adjusted_p('WEAT attributes: ' + wx['name']))}"
                if r.test("WEAT attributes: " + wx["name"]) else "") for _, wx, k, n in found]
    d = r.value(key) or 0.0
    sentence = (f"Check what the training data teaches about {x} and {y} before shipping: the vectors place {x} "
                f"nearer {a} and {y} nearer {b} ({'a large' if abs(d) >= LARGE_ASSOCIATION else 'an'} effect by "
                f"Cohen's convention, |d| ≥ {LARGE_ASSOCIATION} large); WEAT " + "; ".join(parts) + ".")
    if not held:
        sentence += (f" The attribute words carry it weakly: {a} and {b} re-drawn at random from their union give as "
                     "large an association too often to pass the report-wide correction, so it may rest on these "
                     "particular words: a note until larger attribute sets confirm it.")
    evidence = dict(metric_evidence(r.metric(key) or {}, key), sets=list(w["sets"]), test=name,
                    p_adjusted=r.adjusted_p(name), tests=[n for _, _, _, n in found],
                    p_attributes_adjusted=r.adjusted_p(f"WEAT attributes: {w['name']}"))
    return [Finding("concerning" if held else "note", "model", r.name,
                    f"The vectors associate {x} with {a} and {y} with {b}", sentence, metrics=tuple(k for _, _, k, _ in found), evidence=evidence, rule="test", effect="association")]


MIN_GROUP_SIZE = Option("min_group_size", 30, "fairness: groups with fewer members are reported as too small to compare", bounds=(1, INF))
WEAT_PERMUTATIONS = Option("weat_permutations", 10_000, "fairness: sampled partitions of a WEAT permutation test (exact when the "
                           "partitions are fewer)", bounds=(99, INF))

CHAPTER = ChapterSpec(
    name="fairness", title="Fairness and bias", order=98,
    description="Quality per protected group (held-out probe accuracy, neighbourhood label agreement, k-occurrence, within-group APCS) with gaps, intersections and WEAT association tests (seed 000 §222).",
    requires=("fairness|association_tests",),
    options=(K, MIN_GROUP_SIZE, WEAT_PERMUTATIONS, PROBE_ENTITIES), precheck=precheck, demo="fairness", scorer=SCORER,
    effects=(GAP,), findings=findings,
)
