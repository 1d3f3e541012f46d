"""The Semantic benchmarks chapter: what the word-pair correlations and analogy accuracies mean, the
metric table, the similarity scatter and disagreements, and the analogy sections and failures
(computed in :mod:`embeval_report.metrics.semantic`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats as sstats

from ..errors import ChapterSkipped
from ..metrics import semantic as sem
from ..metrics.scoring import Aggregate, TaskScorer, check_units
from ..metrics.semantic import SemanticResult
from ..present.display import (
    callout,
    definitions_markdown,
    escape,
    metrics_table,
    show_definitions,
    show_figure,
    show_markdown,
    show_table,
    with_mark_note,
)
from ..present.escape import mathtext
from ..present.format import ci_suffix, interval, percent
from ..present.plotting import PALETTE, WIDTH
from .declaration import ChapterSpec

if TYPE_CHECKING:
    from .setup import ChapterContext

#: usual wording of a correlation's strength: upper bound of |ρ| -> word ("strong" above the last)
STRENGTH = ((0.1, "negligible"), (0.3, "weak"), (0.5, "moderate"))
#: below this share of pairs or questions in the vocabulary the chapter warns about partial coverage
MIN_COVERAGE = 0.9
#: rows of the disagreement and failure tables
EXAMPLES = 10


@dataclass(frozen=True)
class SemanticReport:
    """Everything the chapter shows."""

    result: SemanticResult
    label_column: str | None   # metadata column whose values mark near misses of analogies


@dataclass(frozen=True)
class SemanticInputs:
    """The scorer's inputs: the set's ids (the vocabulary), the validated word pairs and analogy questions
    (either may be ``None``) and the device."""

    ids: np.ndarray
    word_pairs: object | None
    analogies: object | None
    device: str = "auto"


@dataclass(frozen=True)
class SemanticPlan:
    """gensim's conventions the benchmarks are scored with
    (:func:`~embeval_report.metrics.semantic.measure_semantics`); nothing is drawn."""

    restrict_vocab: int | None = None
    case_insensitive: bool = True
    dummy4unknown: bool = False
    eps: float = sem.COSMUL_EPS


def semantic_inputs(es, side, settings) -> SemanticInputs:
    """The ``word_pairs`` and ``analogies`` of the manifest; :class:`ChapterSkipped` without either."""
    pairs, questions = side.get("word_pairs"), side.get("analogies")
    if pairs is None and questions is None:
        raise ChapterSkipped("needs `word_pairs` or `analogies`")
    return SemanticInputs(np.asarray(es.ids, dtype=object), pairs, questions, settings.device)


def measure(X, inputs: SemanticInputs, plan: SemanticPlan, **kw) -> SemanticResult:
    """Both benchmarks of ``X`` on the plan's conventions (``kw``: ``labels``, ``level``, ``seed``, ``n_boot``)."""
    return sem.measure_semantics(X, inputs.ids, word_pairs=inputs.word_pairs, analogies=inputs.analogies,
                                 restrict_vocab=plan.restrict_vocab, case_insensitive=plan.case_insensitive,
                                 dummy4unknown=plan.dummy4unknown, eps=plan.eps, device=inputs.device, **kw)


def semantic_units(result: SemanticResult) -> pd.DataFrame:
    """The unit table of a result (:func:`~embeval_report.metrics.semantic.semantic_units`)."""
    return sem.semantic_units(result.pairs, result.analogies)


def score_units(X, inputs: SemanticInputs, plan: SemanticPlan) -> pd.DataFrame:
    """Both benchmarks of ``X``, per word pair and per analogy question (no intervals)."""
    return semantic_units(measure(X, inputs, plan, n_boot=0))


#: word pairs (their cosine and human score: Spearman's ρ and Pearson's r of the whole table) and analogy
#: questions (correct or not: the accuracies are means over the questions) in one unit table
SCORER = TaskScorer(
    unit="word pairs and analogy questions", key="unit",
    columns=("kind", "human", "cosine", "analogy_accuracy", "analogy_accuracy_3cosmul"),
    aggregates=(Aggregate("word_pairs_spearman", fn=sem.units_spearman, boot=sem.units_spearman_weighted,
                          over="cosine"),
                Aggregate("word_pairs_pearson", fn=sem.units_pearson, boot=sem.units_pearson_weighted, over="cosine"),
                Aggregate("analogy_accuracy", mean_of="analogy_accuracy"),
                Aggregate("analogy_accuracy_3cosmul", mean_of="analogy_accuracy_3cosmul")),
    inputs=semantic_inputs, plan=lambda inputs, settings: SemanticPlan(), score=score_units)


def compute(ctx: ChapterContext) -> SemanticReport:
    """Run the benchmarks on the validated side data (``word_pairs``, ``analogies``) and record every number: the
    scorer's units come from the same result (the bootstrap intervals of the correlations are the chapter's own)."""
    col = "label" if ctx.es.has("metadata.label") else None
    labels = ctx.es.metadata[col].to_numpy() if col else None
    inputs = SCORER.inputs(ctx.es, ctx.side, ctx.settings)
    plan = SCORER.plan(inputs, ctx.settings)
    result = measure(ctx.es.vectors, inputs, plan, labels=labels, level=ctx.level, seed=ctx.seed)
    ctx.rec.add(*result.metrics.values())
    ctx.rec.scored(SCORER, check_units(semantic_units(result), SCORER.key, SCORER.columns), plan)
    ctx.rec.note(**result.info)
    return SemanticReport(result, col)


def _level(r: SemanticResult) -> str:
    """The confidence level as shown ("95 %")."""
    return f"{r.info.get('level', sem.DEFAULT_LEVEL):.0%}".replace("%", " %")


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _strength(rho: float) -> str:
    a = abs(rho)
    word = next((w for bound, w in STRENGTH if a < bound), "strong")
    return word + (" and negative" if rho < 0 and a >= STRENGTH[0][0] else "")


def coverage_warning(r: SemanticResult, minimum: float = MIN_COVERAGE) -> str | None:
    """Markdown caveat when less than ``minimum`` of the pairs or questions are in the vocabulary."""
    parts = []
    if r.pairs is not None and 1 - r.pairs.n_oov / r.pairs.n_pairs < minimum:
        parts.append(f"only {r.pairs.n_pairs - r.pairs.n_oov:,} of {r.pairs.n_pairs:,} word pairs "
                     f"({1 - r.pairs.n_oov / r.pairs.n_pairs:.0%})")
    if r.analogies is not None and 1 - r.analogies.n_oov / r.analogies.n_questions < minimum:
        a = r.analogies
        parts.append(f"only {a.n_questions - a.n_oov:,} of {a.n_questions:,} analogy questions "
                     f"({1 - a.n_oov / a.n_questions:.0%})")
    if not parts:
        return None
    return ("The vocabulary covers " + " and ".join(parts) + ". The scores are computed on the covered part "
            "only, which is usually the easier, more frequent part of a benchmark; they are not comparable "
            "with published numbers for the full benchmark, nor with another embedding set that covers a "
            "different part.")


def _pairs_paragraphs(r: SemanticResult, case: str) -> list[str]:
    p, what = r.pairs, f"{_level(r)} CI"
    name = Path(p.path).name
    cover = 1 - p.n_oov / p.n_pairs
    if not _finite(p.spearman):
        return [f"**Word similarity.** {cover:.0%} of the {p.n_pairs:,} pairs in `{name}` have both ids in the "
                f"vocabulary (matched {case}), but no correlation can be computed: {p.undefined}."]
    gap = p.spearman - p.pearson
    shape = (" Pearson's r is clearly lower than Spearman's ρ: the cosine rises with the human score but "
             "not linearly (typically a compressed cosine range or a few outlying pairs)." if gap > 0.1 else
             " Pearson's r is clearly higher than Spearman's ρ: a few extreme pairs carry the linear "
             "correlation more than the overall ordering does." if gap < -0.1 else "")
    out = [f"**Word similarity.** On the {p.n_used:,} pairs of `{name}` that enter the correlation "
           f"({cover:.0%} of its {p.n_pairs:,} pairs have both ids in the vocabulary, matched {case}), the "
           f"cosine similarity orders the pairs like the file's judgements with Spearman ρ = {p.spearman:.3f}"
           f"{ci_suffix(*p.spearman_ci, '.3f', what)}, a {_strength(p.spearman)} agreement; Pearson r = "
           f"{p.pearson:.3f}{ci_suffix(*p.pearson_ci, '.3f', what)}.{shape} The strength words follow the usual "
           "conventions for correlations; the seeds give no threshold for this benchmark, so there is no verdict."]
    if p.spearman_ci[0] is not None and p.spearman_ci[0] <= 0 <= p.spearman_ci[1]:
        out.append("The interval for ρ includes 0: with this many pairs the data cannot tell the ordering "
                   "from chance.")
    return out


def _analogy_paragraph(r: SemanticResult, case: str) -> str:
    a, what = r.analogies, f"{_level(r)} CI"
    name = Path(a.path).name
    if a.n_evaluated == 0:
        return (f"**Analogies.** None of the {a.n_questions:,} questions in `{name}` has all four words in "
                f"the vocabulary (matched {case}), so no accuracy can be reported.")
    if a.n_candidates <= 3:
        return (f"**Analogies.** The vocabulary has {a.n_candidates} id(s): once a, b and c are excluded no "
                f"candidate is left, so none of the {a.n_evaluated:,} evaluated questions of `{name}` can be "
                "answered (gensim counts them wrong too).")
    chance = 1 / max(a.n_candidates - 3, 1)
    sec = a.sections[a.sections["evaluated"] > 0]
    best = sec.sort_values("accuracy_3cosadd", ascending=False)
    spread = ""
    if len(sec) > 1:
        top, low = best.iloc[0], best.iloc[-1]
        spread = (f" Sections differ: from {top['accuracy_3cosadd']:.1%} on *{escape(top['section'])}* "
                  f"({int(top['evaluated'])} questions) down to {low['accuracy_3cosadd']:.1%} on "
                  f"*{escape(low['section'])}* ({int(low['evaluated'])}); small sections have wide intervals.")
    diff = a.accuracy_3cosmul - a.accuracy_3cosadd
    mul_ci = ci_suffix(*a.ci_3cosmul, ".1%", what)
    mul = ("3CosMul, which keeps one large similarity from dominating, does "
           + (f"better ({a.accuracy_3cosmul:.1%}{mul_ci}), as Levy & Goldberg (2014) found for most sets."
              if diff > 0.01 else f"worse ({a.accuracy_3cosmul:.1%}{mul_ci})." if diff < -0.01 else
              f"about the same ({a.accuracy_3cosmul:.1%})."))
    skipped = ("" if a.dummy4unknown else
               f" The {a.n_oov:,} questions with a word outside the vocabulary are skipped, as gensim does."
               if a.n_oov else "")
    near = ("" if a.label_match_3cosadd is None else
            f" Counting any id with the label of d as a hit, 3CosAdd is right for "
            f"{a.label_match_3cosadd:.1%} of the questions"
            + (", so every miss is a near miss (an id of the right category, just not d)." if
               a.label_match_3cosadd > 0.999 else
               ": most misses are near misses, in the right category." if
               a.label_match_3cosadd - a.accuracy_3cosadd > 0.5 * (1 - a.accuracy_3cosadd) else
               ": many misses land outside the expected category."))
    return (f"**Analogies.** The vector offset b − a + c lands exactly on d (3CosAdd, among all "
            f"{a.n_candidates:,} ids except a, b and c) for {a.correct_3cosadd:,} of {a.n_evaluated:,} "
            f"questions: accuracy {a.accuracy_3cosadd:.1%}{ci_suffix(*a.ci_3cosadd, '.1%', what)}, against a "
            f"chance level of about {chance:.2g}. {mul}{near}{skipped}{spread}")


def narrative(r: SemanticResult) -> str:
    """Markdown paragraphs that say what this set's semantic-benchmark numbers mean."""
    parts = []
    case = "ignoring case" if r.case_insensitive else "case-sensitively"
    if r.pairs is not None:
        parts += _pairs_paragraphs(r, case)
    if r.analogies is not None:
        parts.append(_analogy_paragraph(r, case))
    parts.append("Published results for standard benchmarks (WordSim-353, SimLex-999, the Google analogy set) "
                 "depend on the vocabulary, its case handling, the share of the benchmark covered and whether "
                 "candidates are restricted to frequent words; compare with them only when the coverage is close "
                 "to complete and those conventions match (here: gensim's). For ids that are not words, these "
                 "files are in-house judgements and the numbers are best compared between versions of this set.")
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def section_summary(r: SemanticResult) -> pd.DataFrame:
    """Per-section analogy table for display (accuracies as percentages with Wilson CIs)."""
    t, ci = r.analogies.sections, f"{_level(r)} CI"

    def pct(x):
        return percent(x, 1)
    return pd.DataFrame({
        "section": t["section"], "questions": t["questions"], "OOV": t["oov"], "evaluated": t["evaluated"],
        "3CosAdd": [pct(x) for x in t["accuracy_3cosadd"]],
        f"3CosAdd {ci}": [interval(a, b, ".1%", sep=" – ") for a, b in zip(t["ci_low_3cosadd"], t["ci_high_3cosadd"])],
        "3CosMul": [pct(x) for x in t["accuracy_3cosmul"]],
        f"3CosMul {ci}": [interval(a, b, ".1%", sep=" – ") for a, b in zip(t["ci_low_3cosmul"], t["ci_high_3cosmul"])]})


def pair_disagreements(r: SemanticResult, k: int = EXAMPLES) -> pd.DataFrame:
    """The ``k`` in-vocabulary pairs whose cosine rank is furthest from their human-score rank."""
    t = r.pairs.table[r.pairs.table["in_vocab"]].copy()
    if t.empty:
        return pd.DataFrame(columns=["word1", "word2", "human", "cosine", "rank gap", "line"])
    t["rank gap"] = (sstats.rankdata(t["cosine"]) - sstats.rankdata(t["human"])) / len(t)
    t = t.reindex(t["rank gap"].abs().sort_values(ascending=False).index[:k])
    return t[["word1", "word2", "human", "cosine", "rank gap", "line"]].reset_index(drop=True)


def analogy_failures(r: SemanticResult, k: int = EXAMPLES) -> pd.DataFrame:
    """Up to ``k`` evaluated questions that 3CosAdd gets wrong, with both methods' predictions
    (each id followed by its label when labels were given)."""
    q = r.analogies.questions
    wrong = q[q["in_vocab"] & ~q["correct_3cosadd"]]
    if len(wrong) > k:  # spread the examples over the sections
        wrong = wrong.groupby("section", sort=False, group_keys=False).head(max(1, k // q["section"].nunique()))[:k]
    labelled = "label_d" in wrong

    def show(col, lab):
        return [f"{x} ({y})" if labelled else str(x) for x, y in zip(wrong[col], wrong[lab] if labelled else wrong[col])]
    return pd.DataFrame({
        "section": wrong["section"].to_numpy(),
        "question a : b :: c": [f"{a} : {b} :: {c}" for a, b, c in zip(wrong["a"], wrong["b"], wrong["c"])],
        "expected d": show("d", "label_d"), "3CosAdd": show("predicted_3cosadd", "label_3cosadd"),
        "3CosMul": show("predicted_3cosmul", "label_3cosmul"), "line": wrong["line"].to_numpy()})


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def similarity_scatter(r: SemanticResult) -> plt.Figure:
    """Human score against cosine similarity (left) and the same pairs as ranks (right)."""
    p = r.pairs
    t = p.table[p.table["in_vocab"]]
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 4.0))
    alpha = 0.7 if len(t) < 500 else 0.35
    a.scatter(t["human"], t["cosine"], s=14, alpha=alpha, color=PALETTE["data"], edgecolor="none")
    if len(t) >= 10:  # running median of the cosine over human-score bins
        edges = np.unique(np.quantile(t["human"], np.linspace(0, 1, 9)))
        mid, med = [], []
        for lo, hi in zip(edges[:-1], edges[1:]):
            sel = (t["human"] >= lo) & (t["human"] <= hi)
            if sel.sum():
                mid.append(t.loc[sel, "human"].median()), med.append(t.loc[sel, "cosine"].median())
        a.plot(mid, med, "o-", color=PALETTE["reference"], lw=1.6, ms=4, label="median cosine per score octile")
        a.legend(loc="upper left", fontsize=8.5)
    title = (f"Spearman ρ = {p.spearman:.3f}, Pearson r = {p.pearson:.3f}" if _finite(p.spearman)
             else "Correlation undefined")
    a.set(xlabel="Human similarity score", ylabel="Cosine similarity of the two ids", title=title)
    rh = sstats.rankdata(t["human"]) / len(t) if len(t) else []
    rc = sstats.rankdata(t["cosine"]) / len(t) if len(t) else []
    b.scatter(rh, rc, s=14, alpha=alpha, color=PALETTE["data"], edgecolor="none")
    b.plot([0, 1], [0, 1], color=PALETTE["muted"], ls="--", lw=1, label="perfect agreement")
    b.set(xlabel="Rank of the human score (fraction)", ylabel="Rank of the cosine (fraction)",
          xlim=(0, 1.02), ylim=(0, 1.02), title=f"Ranks of the {len(t):,} in-vocabulary pairs")
    b.legend(loc="upper left", fontsize=8.5)
    return fig


def section_accuracy_figure(r: SemanticResult) -> plt.Figure:
    """Per-section analogy accuracy (3CosAdd and 3CosMul) with Wilson intervals."""
    a = r.analogies
    t = a.sections[a.sections["evaluated"] > 0].iloc[::-1]
    fig, ax = plt.subplots(figsize=(WIDTH, max(2.4, 0.42 * len(t) + 1.2)))
    y = np.arange(len(t))
    h = 0.38
    for k, (meth, color, label) in enumerate((("3cosadd", PALETTE["data"], "3CosAdd"),
                                              ("3cosmul", PALETTE["accent"], "3CosMul"))):
        acc = t[f"accuracy_{meth}"].to_numpy(float)
        err = np.vstack([acc - t[f"ci_low_{meth}"].to_numpy(float), t[f"ci_high_{meth}"].to_numpy(float) - acc])
        ax.barh(y + (0.5 - k) * h, acc, height=h, color=color, alpha=0.85, label=label,
                xerr=np.clip(err, 0, None), error_kw=dict(ecolor="#333", lw=0.9, capsize=2))
    if _finite(a.accuracy_3cosadd):
        ax.axvline(a.accuracy_3cosadd, color=PALETTE["data"], ls=":", lw=1.2, label="overall 3CosAdd")
    ax.set_yticks(y, [f"{mathtext(s)} (n = {n:,})" for s, n in zip(t["section"], t["evaluated"])])
    top = np.nanmax(np.r_[t["ci_high_3cosadd"].to_numpy(float), t["ci_high_3cosmul"].to_numpy(float), 0.05])
    ax.set(xlim=(0, min(1.0, 1.1 * top + 0.02)),
           xlabel=f"Accuracy (share of questions whose top candidate is d); bars: {_level(r)} Wilson CI",
           title="Analogy accuracy by section")
    ax.legend(loc="lower right", fontsize=8.5)
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: SemanticReport) -> None:
    show_markdown(narrative(rep.result))
    warning = coverage_warning(rep.result)
    if warning:
        callout("warning", warning, title="Partial coverage: not comparable with published numbers")


def show_metrics(rep: SemanticReport) -> None:
    r = rep.result
    table = metrics_table(r.metrics).drop(columns=["verdict"])
    show_table(table, caption=with_mark_note(
        table, "Semantic-benchmark metrics. No seed gives threshold bands for them, so there is no verdict. CIs: "
               "paired bootstrap over pairs for the correlations, Wilson score interval for the accuracies; OOV counts "
               "are exact."), label="tbl-semantic-metrics")
    show_definitions("**Definitions.** $V$ is the vocabulary (the ids of the set), $\\hat x = x / \\lVert x \\rVert$; "
                  "pairs and questions with a word outside $V$ are left out, as gensim does.\n\n"
                  + definitions_markdown(r.metrics))


def show_pairs(rep: SemanticReport) -> None:
    p = rep.result.pairs
    if p is None:
        show_markdown("No `word_pairs` file was given in the manifest, so this part was not run.")
        return
    if not _finite(p.spearman):
        show_markdown(f"No correlation to show: {p.undefined}.")
        return
    show_figure(similarity_scatter(rep.result),
                caption=f"Left: human score against the cosine similarity of the two ids for the "
                        f"{p.n_used:,} pairs in the vocabulary, with the median cosine per octile of "
                        "the score. Right: the same pairs as rank fractions; Spearman's ρ is the Pearson "
                        "correlation of these ranks.",
                label="fig-semantic-pairs")
    show_table(pair_disagreements(rep.result),
               caption="Pairs where the set disagrees most with the judgements. Rank gap = (rank of the cosine "
                       "− rank of the human score) / number of pairs: positive when the set calls the pair more "
                       "similar than the judges do. Line = line in the file.",
               label="tbl-semantic-disagreements")


def show_analogies(rep: SemanticReport) -> None:
    r, level = rep.result, _level(rep.result)
    a = r.analogies
    if a is None:
        show_markdown("No `analogies` file was given in the manifest, so this part was not run.")
        return
    show_table(section_summary(r),
               caption="Analogy accuracy by section (sections in file order). OOV = questions with a word "
                       f"outside the set, skipped as gensim does; CIs are {level} Wilson score intervals.",
               label="tbl-semantic-sections")
    if not a.n_evaluated:
        show_markdown(f"No accuracy to show: {a.undefined}.")
        return
    show_figure(section_accuracy_figure(r),
                caption=f"Share of questions answered exactly, per section, with {level} Wilson intervals; the "
                        "dotted line is the overall 3CosAdd accuracy.",
                label="fig-semantic-sections")
    failures = analogy_failures(r)
    if not len(failures):
        show_markdown("3CosAdd answers every question whose four words are in the vocabulary correctly.")
        return
    show_table(failures,
               caption="Examples of questions 3CosAdd gets wrong, with the ids each method predicted instead"
                       + (" (in parentheses: their label in the metadata)" if rep.label_column else "")
                       + ". Line = line in the file.",
               label="tbl-semantic-failures")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

CHAPTER = ChapterSpec(
    name="semantic", title="Semantic benchmarks", order=60,
    description="Do cosine similarities agree with human judgements, and do analogies hold? Word-pair Spearman/Pearson and 3CosAdd/3CosMul analogy accuracy (seed 001 §21.1).",
    requires=("word_pairs|analogies",), scorer=SCORER,
)
