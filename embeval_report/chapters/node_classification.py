"""The Node classification chapter: is the label linearly decodable? The probe against chance, the
label budget, the per-class scores and confusions, and the probe within each kind of entity
(computed in :mod:`embeval_report.metrics.classification`).

The label set, the scorer's inputs and the label budget it shares with the clustering and fairness chapters
are in :mod:`.labelled`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import pandas as pd

from ..errors import ChapterSkipped, InputError
from ..io import kind_column
from ..metrics import classification as nc
from ..metrics.scoring import Aggregate, TaskScorer, check_units
from ..present.display import definitions_markdown, escape, show_definitions, show_figure, show_markdown, show_table
from ..present.format import interval, metric_text
from ..present.plotting import PALETTE, WIDTH, share_heatmap
from .declaration import PROBE_ENTITIES, ChapterSpec
from .labelled import LABEL_COLUMN, LabelInputs, exclusion_text, label_inputs, precheck, probe_budget
from .findings import ChapterResults, Finding, metric_evidence, value_text

if TYPE_CHECKING:
    from .setup import ChapterContext

@dataclass(frozen=True)
class NodeClassificationReport:
    """Everything the chapter shows."""

    result: nc.ClassificationResult
    kind_column: str | None
    by_group: pd.DataFrame | None  # the probe within each value of ``kind_column``


def probe_plan(inputs: LabelInputs, settings) -> nc.ProbePlan:
    """The evaluated sample and its folds, from the labels and the seed (:func:`~.classification.probe_plan`)."""
    try:
        return nc.probe_plan(inputs.labels, inputs.ids, max_entities=probe_budget(settings), seed=settings.seed)
    except InputError as e:  # e.g. a sample_size too small to keep 2 classes
        raise ChapterSkipped(str(e).split(": ", 1)[-1]) from None


#: the probe, scored per entity: its out-of-fold prediction on the plan's folds
SCORER = TaskScorer(
    unit="entities", key="entity", columns=("fold", "label", "predicted", "y", "y_pred", "correct"),
    aggregates=(Aggregate("accuracy", fn=nc.fold_accuracy, unit_column="correct", boot=nc.fold_accuracy_weighted,
                          boot_exact=True),
                Aggregate("macro_f1", fn=nc.fold_macro_f1, unit_column="correct", boot=nc.fold_macro_f1_weighted,
                          boot_exact=True)),
    inputs=label_inputs, plan=probe_plan, score=lambda X, inputs, plan: nc.probe_units(X, plan),
    invariant={"centring": nc.CENTRING_INVARIANT})


def compute(ctx: ChapterContext) -> NodeClassificationReport:
    """Run the probe (and the probe within each kind of entity) and record every number."""
    es, meta = ctx.es, ctx.es.metadata
    inputs = SCORER.inputs(es, ctx.side, ctx.settings)
    plan = SCORER.plan(inputs, ctx.settings)
    # the scorer's units (its out-of-fold predictions) and the learning curve from one pool of fits
    units, learning = nc.probe_fits(es.vectors, plan, train_fractions=nc.TRAIN_FRACTIONS)
    units = check_units(units, SCORER.key, SCORER.columns)
    result = nc.evaluate_node_classification(es.vectors, inputs.labels, level=ctx.level, column=LABEL_COLUMN,
                                             plan=plan, units=units, learning=learning)
    col = kind_column(meta)
    by_kind = (nc.node_classification_by_group(es.vectors, meta[LABEL_COLUMN], meta[col], column=col,
                                               max_entities=probe_budget(ctx.settings), level=ctx.level,
                                               seed=ctx.seed, label_column=LABEL_COLUMN) if col else None)
    ctx.rec.add(*result.metrics.values())
    ctx.rec.scored(SCORER, units, plan)
    ctx.rec.note(**classification_record(result, by_kind, col))
    return NodeClassificationReport(result, col, by_kind)


def classification_record(r: nc.ClassificationResult, by_group: pd.DataFrame | None = None, column: str | None = None
                          ) -> dict:
    """JSON-serialisable context for ``Recorder.note``: baselines, per-class scores, learning curve."""
    v = r.values
    baselines = {m: {k: v[f"{m}_{k}"] for k in nc.SPECS} for m in ("majority", "stratified")}
    baselines["expected_stratified_accuracy"] = v["chance_accuracy_expected"]
    out = dict(r.info, classes=list(r.labels.classes), baselines=baselines,
               fold_scores=r.folds.to_dict(orient="records"), per_class=r.per_class.to_dict(orient="records"),
               learning_curve=r.learning_summary.to_dict(orient="records"))
    if by_group is not None:
        out["by_group"] = {"column": column, "rows": by_group.to_dict(orient="records")}
    return out


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def summary_table(r: nc.ClassificationResult) -> pd.DataFrame:
    """Probe and chance baselines side by side: mean ± sd over folds and the t-interval."""
    rows = []
    for model, text in nc.MODEL_NAMES.items():
        row = {"model": text}
        for name, col in (("accuracy", "accuracy"), ("micro_f1", "micro-F1"), ("macro_f1", "macro-F1")):
            key = name if model == "probe" else f"{model}_{name}"
            row[col] = f"{r.values[key]:.3f} ± {r.values[key + '_std']:.3f}"
            if name != "micro_f1":
                row[f"{col} {r.level:.0%} CI"] = interval(r.values[key + "_ci_low"], r.values[key + "_ci_high"],
                                                          ".3f", sep=" – ")
        rows.append(row)
    return pd.DataFrame(rows)


def learning_display_table(r: nc.ClassificationResult) -> pd.DataFrame:
    """The learning curve as the report shows it (percentages)."""
    t = r.learning_summary
    return pd.DataFrame({"training fraction %": 100 * t["train_fraction"], "training entities": t["n_train"],
                         "repeats": t["repeats"], "accuracy %": 100 * t["accuracy_mean"],
                         "accuracy sd": 100 * t["accuracy_std"], "macro-F1 %": 100 * t["macro_f1_mean"],
                         "macro-F1 sd": 100 * t["macro_f1_std"], "majority baseline %": 100 * t["majority_accuracy"]})


def by_group_table(by_group: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """The per-kind table as shown: the accuracy interval as one column."""
    t = by_group.copy()
    if "accuracy ci_low" in t:
        at = list(t.columns).index("accuracy ci_low")
        t.insert(at, f"accuracy {level:.0%} CI", [interval(lo, hi, ".3f", sep=" – ") for lo, hi in
                                                  zip(t["accuracy ci_low"], t["accuracy ci_high"])])
        t = t.drop(columns=["accuracy ci_low", "accuracy ci_high"])
    return t


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def decodability(r: nc.ClassificationResult) -> str:
    """A word for how well the probe reads the label, from its lift over the majority class."""
    v = r.values
    maj, acc = v["majority_accuracy"], v["accuracy"]
    gain = (acc - maj) / max(1 - maj, 1e-12)
    if not v["accuracy_ci_low"] > maj:
        return "not detectably"
    return "almost perfectly" if gain >= 0.9 else "strongly" if gain >= 0.7 else "clearly" if gain >= 0.4 \
        else "partly" if gain >= 0.15 else "weakly"


def _class_paragraph(r: nc.ClassificationResult) -> str | None:
    pc = r.per_class
    if len(pc) < 2:
        return None
    best, worst = pc.iloc[0], pc.iloc[-1]
    text = (f"**By class.** The best-recognised class is {escape(best['class'])} (F1 {best['F1']:.2f}) and the "
            f"hardest {escape(worst['class'])} (F1 {worst['F1']:.2f}, recall {worst['recall']:.2f})")
    if worst["share of the class %"] > 0:
        text += (f", whose entities are most often predicted as {escape(worst['most often predicted instead'])} "
                 f"({worst['share of the class %']:.0f} % of them)")
    pairs = nc.confused_pairs(r, top=3, min_share=0.05)
    if len(pairs):
        text += (". The most frequent confusions: " + "; ".join(
            f"{escape(p['true class'])} → {escape(p['predicted as'])} {p['share of the true class %']:.0f} %"
            for _, p in pairs.iterrows())
            + ". Confused classes sit close together in the space; if the distinction matters downstream, the "
              "vectors do not carry it well.")
    else:
        text += ". No class loses more than 5 % of its entities to any single other class."
    return text


def curve_sample_text(r: nc.ClassificationResult) -> str:
    """Where the learning curve's splits come from: every evaluated entity, or a stratified sample of them."""
    sample = r.info.get("curve_sample")
    return ("the entities" if sample is None else
            f"a stratified sample of {sample:,} of the {r.n:,} entities, drawn for each split")


def _budget_paragraph(r: nc.ClassificationResult, reading: str) -> str | None:
    ls_sum = r.learning_summary
    if len(ls_sum) < 2:
        return None
    first, last = ls_sum.iloc[0], ls_sum.iloc[-1]
    of = curve_sample_text(r)
    if reading == "not detectably":
        return (f"**Label budget.** With no detectable signal, more labels do not help: the probe's accuracy is "
                f"{first['accuracy_mean']:.3f} when trained on {first['train_fraction']:.0%} of "
                f"{of} and {last['accuracy_mean']:.3f} on {last['train_fraction']:.0%}.")
    ratio = first["accuracy_mean"] / max(last["accuracy_mean"], 1e-12)
    return (f"**Label budget.** Trained on {first['train_fraction']:.0%} of {of} "
            f"({int(first['n_train']):,}), the probe reaches accuracy {first['accuracy_mean']:.3f} "
            f"(sd {first['accuracy_std']:.3f} over {int(first['repeats'])} splits); on {last['train_fraction']:.0%} "
            f"({int(last['n_train']):,}) it reaches {last['accuracy_mean']:.3f}, so {ratio:.0%} of the accuracy is "
            "available with the smallest budget. "
            + ("The label is carried by a few strong directions: a small labelled set is enough to read it (the seed: "
               "embeddings that reach high accuracy with 10 % of the labels encode richer structure than those that "
               "need 70 %)." if ratio >= 0.95 else
               "Accuracy still grows with more labels: the label is spread over many weak directions, and a "
               "downstream model will need a sizeable labelled set."))


def classification_narrative(r: nc.ClassificationResult, by_group: pd.DataFrame | None = None,
                             column: str | None = None) -> str:
    """Markdown paragraphs that say what this set's probe numbers mean."""
    v, m, ls = r.values, r.metrics, r.labels
    col = escape(ls.column)
    top_class = escape(ls.classes[0])
    reading = decodability(r)
    maj, acc = v["majority_accuracy"], v["accuracy"]
    gain = (acc - maj) / max(1 - maj, 1e-12)
    parts = [
        f"**The `{col}` is {reading} linearly decodable from the vectors.** A logistic-regression probe on the "
        f"standardised vectors predicts the {ls.n_classes} classes of {ls.n:,} entities with accuracy "
        f"{metric_text(m['accuracy'], '.3f')} in {r.n_folds}-fold stratified cross-validation. Always answering the most "
        f"frequent class ({top_class}) scores {maj:.3f}, and guessing at the class frequencies "
        f"{v['stratified_accuracy']:.3f} (expected {v['chance_accuracy_expected']:.3f}); "
        + (f"the probe is {100 * (acc - maj):.1f} points above the majority class and closes {gain:.0%} of the gap "
           f"between it and a perfect score. " if reading != "not detectably" else
           f"the probe does no better than always answering the majority class ({100 * (acc - maj):+.1f} points; the "
           f"interval includes the baseline). ")
        + f"Macro-F1, which weighs every class equally, is {metric_text(m['macro_f1'], '.3f')}, "
        f"against {v['majority_macro_f1']:.3f} for the majority class"
        + (": the smaller classes are predicted clearly worse than the large ones."
           if acc - v["macro_f1"] > 0.05 and reading != "not detectably" else ".")]
    parts += [p for p in (_class_paragraph(r), _budget_paragraph(r, reading)) if p]
    if by_group is not None and "accuracy" in by_group and by_group["accuracy"].notna().sum() >= 2:
        t = by_group[by_group["accuracy"].notna()]
        items = [f"{escape(x[column])} {x['accuracy']:.3f} (majority {x['majority baseline']:.3f}, "
                 f"{int(x['evaluated']):,} entities)" for _, x in t.iterrows()]
        hi, lo = t.loc[t["accuracy"].idxmax()], t.loc[t["accuracy"].idxmin()]
        text = f"**By {escape(column)}** (a separate probe within each): " + "; ".join(items) + "."
        if hi["accuracy"] - lo["accuracy"] > 0.05:
            text += (f" The label is clearly easier to read from {escape(hi[column])} than from {escape(lo[column])} "
                     "vectors; the overall number mixes the two.")
        else:
            text += " The groups are about equally decodable."
        parts.append(text)
    excl = exclusion_text(ls)
    if excl:
        parts.append(excl)
    if r.info.get("not_converged_fits"):
        parts.append(f"{r.info['not_converged_fits']} probe fits stopped at max_iter = {r.info['max_iter']} before "
                     "converging; their scores may be slightly low.")
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def learning_curve_figure(r: nc.ClassificationResult) -> plt.Figure:
    """Accuracy and macro-F1 against the training fraction (±1 sd over repeats), with the chance baselines
    and the cross-validated estimate (the seed's ``fig-classification-curve``)."""
    t = r.learning_summary
    v = r.values
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    cv_frac = (r.n_folds - 1) / r.n_folds
    # the share of all evaluated entities trained on (the curve's splits may be a sample of them; the CV's are not)
    x = t["train_fraction"] if r.info.get("curve_sample") is None else t["n_train"] / r.n
    for ax, key, title, marker in ((axes[0], "accuracy", "Accuracy", "o"), (axes[1], "macro_f1", "Macro-F1", "s")):
        if len(t):
            ax.errorbar(x, t[f"{key}_mean"], yerr=t[f"{key}_std"], marker=marker, capsize=4, lw=2,
                        color=PALETTE["data"], label="probe, held-out rest (±1 sd)")
        lo, hi = v[f"{key}_ci_low"], v[f"{key}_ci_high"]
        ax.errorbar([cv_frac], [v[key]], yerr=[[v[key] - lo], [hi - v[key]]], fmt="D", color=PALETTE["accent"],
                    capsize=4, label=f"{r.n_folds}-fold CV ({100 * r.level:.0f} % CI)")
        ax.axhline(v[f"majority_{key}"], color=PALETTE["reference"], ls="--", lw=1.2, label="majority class")
        ax.axhline(v[f"stratified_{key}"], color=PALETTE["muted"], ls=":", lw=1.2, label="stratified random")
        ax.set(xlabel="Training fraction", ylabel=title, title=f"{title} vs label budget", ylim=(0, 1.05),
               xlim=(0, 1))
        ax.legend(loc="lower right", fontsize=8)
    return fig


def confusion_figure(r: nc.ClassificationResult) -> plt.Figure:
    """Row-normalised confusion matrix of the out-of-fold predictions (recall on the diagonal)."""
    C = r.labels.n_classes
    size = min(WIDTH * 0.75, 2.2 + 0.42 * C)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    im = share_heatmap(ax, r.confusion, r.labels.classes, r.labels.classes, annotate=C <= nc.MAX_CONFUSION_CLASSES)
    ax.set(xlabel="Predicted class", ylabel="True class", title="Share of each true class predicted as …")
    fig.colorbar(im, ax=ax, shrink=0.8, label="share of the true class")
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: NodeClassificationReport) -> None:
    show_markdown(classification_narrative(rep.result, rep.by_group, rep.kind_column))


def show_metrics(rep: NodeClassificationReport) -> None:
    r = rep.result
    show_table(summary_table(r),
               caption=f"Probe and chance baselines over the same {r.n_folds} stratified folds ({r.n:,} entities, "
                       f"{r.labels.n_classes} classes): mean ± sd over the folds and a {100 * r.level:.0f} % Student-t "
                       "interval over the folds. No seed threshold table applies, so no verdict.",
               label="tbl-nc-summary")
    show_definitions("**Definitions** (over the entities of a test fold; $P_c$, $R_c$: precision and recall of class $c$, "
                  "$C$ classes). Micro-F1 pools the counts of all classes and equals accuracy when each entity has one "
                  "label; macro-F1 averages the per-class F1, so small classes weigh as much as large ones.\n\n"
                  + definitions_markdown(r.metrics))


def show_learning_curve(rep: NodeClassificationReport) -> None:
    r = rep.result
    repeats = r.info["repeats"]
    sample = r.info.get("curve_sample")
    within = "" if sample is None else (f" Each split is a stratified sample of {sample:,} of the {r.n:,} entities "
                                        "(trained on a fraction of it, scored on the rest of it), so the curve costs "
                                        "the same at any size; the cross-validation uses every entity.")
    show_figure(learning_curve_figure(r),
                caption=f"Accuracy and macro-F1 of the probe against the share of entities it is trained on (mean ± 1 "
                        f"sd over {repeats} stratified splits, scored on the rest); diamond: the {r.n_folds}-fold "
                        f"cross-validated estimate with its {100 * r.level:.0f} % interval; dashed and dotted: the chance "
                        f"baselines.{within}", label="fig-nc-learning-curve")
    if not len(r.learning):
        show_markdown("No training fraction leaves every class in both the training part and the rest, so the "
                      "learning curve is empty.")
        return
    show_table(learning_display_table(r),
               caption="Learning curve: probe scores on the held-out rest after training on each fraction (mean and sd "
                       f"over the splits, in %).{within}", label="tbl-nc-learning-curve")


def show_per_class(rep: NodeClassificationReport) -> None:
    r = rep.result
    show_table(r.per_class, caption="Per-class scores from the out-of-fold predictions, best F1 first; the last two "
                                    "columns name the class its entities are most often predicted as, and how often.",
               label="tbl-nc-per-class")
    if r.labels.n_classes <= nc.MAX_CONFUSION_CLASSES:
        show_figure(confusion_figure(r),
                    caption="Confusion matrix of the out-of-fold predictions, each row as shares of its true class (the "
                            "diagonal is the recall).", label="fig-nc-confusion")
    else:
        show_markdown(f"With {r.labels.n_classes} classes the confusion matrix is too large to read; the table below "
                      "lists the largest confusions.")
    show_table(nc.confused_pairs(r, top=10),
               caption="The largest confusions: true classes whose entities the probe most often assigns to one other "
                       "class (at least 2 % of the true class).", label="tbl-nc-confusions")


def show_by_kind(rep: NodeClassificationReport) -> None:
    if rep.by_group is None:
        show_markdown("The metadata has no `kind`, `type` or `group` column with 2–4 values, so no breakdown is shown.")
        return
    r = rep.result
    show_table(by_group_table(rep.by_group, r.level),
               caption=f"The probe within each value of “{rep.kind_column}” (own {r.n_folds}-fold CV; lift: accuracy "
                       "minus the majority-class accuracy, in points).", label="tbl-nc-by-kind")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

def findings(r: ChapterResults) -> list[Finding]:
    """The label is not decodable: the probe's accuracy interval does not clear the majority-class baseline."""
    acc = r.metric("accuracy") or {}
    majority = ((r.info.get("baselines") or {}).get("majority") or {}).get("accuracy")
    if majority is None or acc.get("ci_low") is None or acc["ci_low"] > majority:
        return []
    return [Finding(
        "problematic", "model", r.name, "The label cannot be read from the vectors",
        f"Do not use these vectors to predict the label: a linear probe's accuracy {value_text(acc)} does not beat "
        f"always predicting the most frequent class ({majority:.3f}).",
        metrics=("accuracy",), evidence={**metric_evidence(acc, "accuracy"), "baseline": "majority class",
                                         "baseline_value": majority}, rule="baseline", effect="baselines")]


#: entities a linear probe is trained and tested on (fairness's per-group probes read it too)



CHAPTER = ChapterSpec(
    name="node_classification", title="Node classification", order=94,
    description="Is the label linearly decodable? A logistic-regression probe with stratified 5-fold CV: accuracy, micro- and macro-F1 against majority and stratified baselines, learning curve, per-class F1, confusion matrix (seed 000 §218.3).",
    requires=("metadata.label",),
    options=(PROBE_ENTITIES,), precheck=precheck,
    findings=findings, scorer=SCORER,
)
