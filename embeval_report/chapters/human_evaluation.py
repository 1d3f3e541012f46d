"""The Human-evaluation chapter: how far the human ratings can be trusted (agreement between raters,
annotator quality), the consensus labels, and how well the embedding agrees with the humans (computed
in :mod:`embeval_report.metrics.agreement`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ChapterSkipped
from ..metrics import agreement as ag
from ..metrics.scoring import Aggregate, TaskScorer
from ..present.display import escape, show_figure, show_markdown, show_table
from ..present.display import show_metrics as show_metric_table
from ..present.escape import mathtext
from ..present.format import percent, value_with_ci
from ..present.plotting import PALETTE, WIDTH
from ..stats import HypothesisTest, weighted_spearman, wilson_ci
from .declaration import INF, ChapterSpec, Option
from .findings import ChapterResults, Effect, Finding, metric_evidence, value_text

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["HumanEvaluationReport", "compute", "consensus_table", "narrative", "precheck", "quality_figure",
           "rater_table", "show_agreement", "show_consensus", "show_embedding", "show_protocol", "show_raters",
           "show_summary"]

#: pairs listed in the "humans and embedding disagree" table
WORST = 10
#: file written into the results folder
CONSENSUS_FILE = "human_evaluation_consensus.tsv"


@dataclass(frozen=True)
class HumanEvaluationReport:
    """Everything the chapter shows."""

    ann: object                       # io.annotations.Annotations
    data: ag.RatingData
    agreement: ag.AgreementResult
    metrics: dict
    quality: ag.RaterQuality
    ds: ag.DawidSkene | None
    ds_reason: str
    consensus: pd.DataFrame
    consensus_path: str | None
    qrels_compatible: bool
    embedding: ag.EmbeddingAgreement | None
    embedding_reason: str
    thresholds: dict
    alpha_without_flagged: tuple | None = None  # (alpha, ci_low, ci_high, raters kept) without the flagged raters


def precheck(es, side, settings) -> str | None:
    """Why agreement cannot be measured (the reader already refuses one rater or no item rated twice)."""
    if "annotations" not in side:
        return "no `annotations` given"
    return None


def compute(ctx: ChapterContext) -> HumanEvaluationReport:
    """Agreement, rater quality, consensus (written to the results folder) and embedding agreement."""
    ann = ctx.side.annotations
    data = ag.RatingData.of(ann.ratings, ann.level)
    res = ag.agreement(data, level=ctx.level, seed=ctx.seed)
    metrics = ag.record_agreement(res)
    # consensus
    majority, share = ag.majority_labels(data)
    ds, ds_reason = None, ""
    if data.K < 2:
        ds_reason = "every rating has the same label"
    elif data.K > ag.DS_MAX_CATEGORIES:
        ds_reason = (f"the labels take {data.K} distinct values, a continuous scale rather than categories; "
                     "the consensus is the mean rating")
    else:
        ds = ag.dawid_skene(data.item, data.rater, data.cat, len(data.items), len(data.raters), data.K)
    thresholds = dict(min_accuracy=float(ctx.option("min_rater_accuracy")),
                      min_tasks=int(ctx.option("min_rater_tasks")), min_seconds=float(ctx.option("min_seconds")))
    quality = ag.rater_quality(data, ann.ratings, ds=ds, level=ctx.level, **thresholds)
    consensus = consensus_table(ann, data, majority, share, ds)
    # gold accuracy over every gold rating
    gc = quality.ratings["gold_correct"].to_numpy(float)
    gc = gc[np.isfinite(gc)]
    if len(gc):
        metrics["gold_accuracy"] = ag.SPECS["gold_accuracy"].record(
            float(gc.mean()), wilson_ci(int(gc.sum()), len(gc), ctx.level),
            ci_method=f"{ctx.level:.0%} Wilson interval over the {len(gc):,} ratings of gold items")
    # embedding against the humans
    emb, emb_reason = None, embedding_problem(ann)
    if not emb_reason:
        inputs = rated_pairs(ctx.es, ctx.side, ann, data)
        plan = SCORER.plan(inputs, ctx.settings)
        units = SCORER.units(ctx.es.vectors, inputs, plan)
        emb = ag.embedding_agreement(units["similarity"].to_numpy(float), units["human"].to_numpy(float), data=data,
                                     level=ctx.level, seed=ctx.seed)
        emb.pairs.insert(0, "item", inputs.items)
        emb.pairs.insert(1, "ratings", units["ratings"].to_numpy())
        ctx.rec.scored(SCORER, units, plan)
        m = ag.SPECS["embedding_human_spearman"].record(emb.rho, emb.ci, ci_method=emb.ci_method)
        metrics["embedding_human_spearman"] = m
        ctx.rec.test(HypothesisTest(name="embedding vs human grade", test="Spearman rank correlation, two-sided",
                                    p_value=emb.p_value, statistic=emb.rho, n=f"{emb.n:,} pairs",
                                    null="the embedding's similarity and the mean human grade are not monotonically "
                                         "associated", family="human evaluation"))
    ctx.rec.add(*metrics.values())
    for t in quality.tests:
        ctx.rec.test(HypothesisTest(name=f"fatigue: {t['rater']}", test="Mann–Whitney U, one-sided (greater)",
                                    p_value=t["p_value"], statistic=t["statistic"], n=t["n"],
                                    null="the rater's disagreements with the others come no later in the session "
                                         "than the agreements", family="fatigue drift per rater"))
    if quality.speed_accuracy:
        s = quality.speed_accuracy
        ctx.rec.test(HypothesisTest(name="speed vs agreement across raters", test="Spearman rank correlation, "
                                    "two-sided", p_value=s["p_value"], statistic=s["rho"], n=f"{s['n']} raters",
                                    null="a rater's median time is not monotonically associated with their agreement "
                                         "with the others", family="human evaluation"))
    without = ag.alpha_without(ann.ratings, ann.level, list(quality.flagged), level=ctx.level, seed=ctx.seed)
    path, qrels_ok = _write_consensus(ctx, ann, consensus)
    ctx.rec.note(level=ann.level, level_source=ann.level_source, kind=ann.kind, n_items=res.n_items,
                 n_items_rated_twice=res.n_items_multi, n_raters=res.n_raters, n_ratings=res.n_ratings,
                 categories=[str(c) for c in data.categories], alpha_by_level=res.alpha_by_level,
                 flagged_raters=quality.flagged, thresholds=thresholds, consensus_file=path,
                 qrels_compatible=qrels_ok, dawid_skene=None if ds is None else dict(
                     iterations=ds.iterations, converged=ds.converged, log_likelihood=ds.log_likelihood,
                     accuracy={str(r): float(a) for r, a in zip(data.raters, ds.accuracy)}),
                 dawid_skene_reason=ds_reason, embedding_reason=emb_reason,
                 agreement_notes={k: v for k, v in res.notes.items() if v},
                 alpha_without_flagged=None if without is None else dict(zip(("value", "ci_low", "ci_high", "raters"),
                                                                              without)))
    return HumanEvaluationReport(ann, data, res, metrics, quality, ds, ds_reason, consensus, path, qrels_ok, emb,
                                 emb_reason, thresholds, without)


def _fmt_label(v) -> str:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def consensus_table(ann, data: ag.RatingData, majority, share, ds) -> pd.DataFrame:
    """One row per item: its ids, the consensus label (Dawid–Skene when run, else the majority), the
    majority label and its share, the Dawid–Skene label and posterior, the mean rating (numeric labels)
    and the number of ratings."""
    out = pd.DataFrame({"item": data.items})
    if ann.kind != "item":
        out[ann.columns[0]], out[ann.columns[1]] = pair_ids(ann, data)
    best = ds.labels if ds is not None else majority
    out["consensus"] = [_fmt_label(v) for v in data.categories[best]]
    out["majority"] = [_fmt_label(v) for v in data.categories[majority]]
    out["majority_share"] = share
    if ds is not None:
        out["dawid_skene"] = [_fmt_label(v) for v in data.categories[ds.labels]]
        out["ds_posterior"] = ds.posterior.max(1)
    if ann.numeric:
        out["mean"] = mean_grades(data)
    out["ratings"] = data.m.astype(int)
    return out


def _write_consensus(ctx: ChapterContext, ann, consensus: pd.DataFrame) -> tuple[str | None, bool]:
    """The consensus labels as a TSV in the results folder: for query–document judgements with
    non-negative integer labels, a qrels table (``query_id, doc_id, relevance``, readable as ``qrels``)."""
    qrels_ok = bool(ann.kind == "query_doc" and ann.integer and (ann.ratings["label"] >= 0).all())
    table = consensus.drop(columns=["item"])
    if qrels_ok:
        table = table.rename(columns={ann.columns[0]: "query_id", ann.columns[1]: "doc_id", "consensus": "relevance"})
    if ctx.rec.results_dir is None:
        return None, qrels_ok
    path = Path(ctx.rec.results_dir) / CONSENSUS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tsv.tmp")
    table.to_csv(tmp, sep="\t", index=False, float_format="%.4g")
    tmp.replace(path)
    return str(path), qrels_ok


def pair_ids(ann, data: ag.RatingData) -> tuple[np.ndarray, np.ndarray]:
    """The two ids of each rated pair (items in ``data`` order), as the pair's first rating gives them."""
    first = ann.ratings.drop_duplicates("item").set_index("item")
    return first.loc[data.items, "id1"].to_numpy(), first.loc[data.items, "id2"].to_numpy()


def mean_grades(data: ag.RatingData) -> np.ndarray:
    """The mean rating of each item (numeric labels)."""
    return (data.counts @ data.values) / data.m


# ---------------------------------------------------------------------------------------------
# The scorer: the embedding's similarity of each rated pair against its mean human grade
# ---------------------------------------------------------------------------------------------

def embedding_problem(ann) -> str:
    """Why the annotations cannot be compared with the embedding's similarity ("" when they can)."""
    if ann.kind == "item":
        return "the annotations rate single items (column `item`), not pairs of vectors"
    if not ann.numeric:
        return "the labels are text categories, which have no order to correlate a similarity with"
    return ""


@dataclass(frozen=True)
class RatedPairs:
    """The scorer's inputs: per rated pair (``items``, their keys), its two ids, the rows of its two vectors
    (``rows1`` in ``queries`` when the first id is a query with a vector of its own, else in the set), its mean
    human grade and its number of ratings."""

    items: np.ndarray
    id1: np.ndarray
    id2: np.ndarray
    rows1: np.ndarray
    rows2: np.ndarray
    human: np.ndarray
    ratings: np.ndarray
    queries: np.ndarray | None = None


@dataclass(frozen=True)
class PairPlan:
    """The rated pairs scored (their item keys) and the similarity: nothing is drawn."""

    items: np.ndarray
    similarity: str = "cosine"


def rated_pairs(es, side, ann, data: ag.RatingData) -> RatedPairs:
    """The rated pairs of ``ann`` (coded as ``data``) with their vectors' rows and mean grades."""
    id1, id2 = pair_ids(ann, data)
    index = pd.Index(np.asarray(es.ids, dtype=object))
    queries, rows1 = None, index.get_indexer(id1)
    if ann.kind == "query_doc" and "queries" in side:
        q = side.queries
        queries, rows1 = q.vectors, pd.Index(np.asarray(q.ids, dtype=object)).get_indexer(id1)
    return RatedPairs(np.asarray(data.items, dtype=object), id1, id2, rows1, index.get_indexer(id2),
                      mean_grades(data), data.m.astype(int), queries)


def pair_inputs(es, side, settings) -> RatedPairs:
    """The scorer's inputs from the manifest's ``annotations``; :class:`ChapterSkipped` when they cannot be
    compared with the embedding (single items, text labels)."""
    if "annotations" not in side:
        raise ChapterSkipped("no `annotations` given")
    ann = side.annotations
    reason = embedding_problem(ann)
    if reason:
        raise ChapterSkipped(reason)
    return rated_pairs(es, side, ann, ag.RatingData.of(ann.ratings, ann.level))


def score_pairs(X, inputs: RatedPairs, plan: PairPlan) -> pd.DataFrame:
    """Per rated pair: the cosine similarity of its two vectors (0 for a zero vector) beside its mean grade."""
    A = np.asarray((X if inputs.queries is None else inputs.queries)[inputs.rows1], float)
    B = np.asarray(X[inputs.rows2], float)
    den = np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1)
    sim = np.where(den > 0, (A * B).sum(1) / np.where(den > 0, den, 1), 0.0)
    return pd.DataFrame({"item": inputs.items.astype(str), "id1": inputs.id1, "id2": inputs.id2,
                         "similarity": sim, "human": inputs.human, "ratings": inputs.ratings})


def units_spearman(units: pd.DataFrame) -> float:
    """Spearman's ρ of the pairs' similarity and mean grade (``embedding_human_spearman``, bit for bit)."""
    return float(sps.spearmanr(units["similarity"].to_numpy(float), units["human"].to_numpy(float)).statistic)


#: the embedding's agreement with the rated pairs, per pair; the raters' own agreement is not the vectors' and
#: stays out
SCORER = TaskScorer(
    unit="rated pairs", key="item", columns=("id1", "id2", "similarity", "human", "ratings"),
    aggregates=(Aggregate("embedding_human_spearman", fn=units_spearman,
                          boot=lambda units, W: weighted_spearman(units["similarity"], units["human"], W)),),
    inputs=pair_inputs, plan=lambda inputs, settings: PairPlan(inputs.items), score=score_pairs,
    map_inputs=lambda inputs, f: inputs if inputs.queries is None else replace(inputs, queries=f(inputs.queries)))


# ---------------------------------------------------------------------------------------------
# Numbers, narrative, tables, figures
# ---------------------------------------------------------------------------------------------

def _value(rep: HumanEvaluationReport, name: str, fmt: str = ".3f") -> str:
    m = rep.metrics[name]
    return value_with_ci(m.value, m.ci_low, m.ci_high, fmt)


def _alpha_reading(alpha: float | None) -> str:
    if alpha is None:
        return "undefined"
    if alpha >= 0.8:
        return "reliable enough to serve as ground truth (Krippendorff's α ≥ 0.800)"
    if alpha >= 0.667:
        return "good enough only for tentative conclusions (0.667 ≤ α < 0.800)"
    return "too unreliable to serve as ground truth (α < 0.667, Krippendorff's threshold for discarding data)"


def narrative(rep: HumanEvaluationReport) -> str:
    """What the numbers say about the ratings, the raters and the embedding."""
    a, m = rep.agreement, rep.metrics
    alpha = m["krippendorff_alpha"].value
    parts = [f"**{a.n_raters} raters** gave {a.n_ratings:,} ratings of {a.n_items:,} items ({a.n_items_multi:,} rated "
             f"at least twice), on {'an' if rep.ann.level[0] in 'aeiou' else 'a'} {rep.ann.level} scale "
             f"({escape(rep.ann.level_source)}). Krippendorff's α is "
             f"{_value(rep, 'krippendorff_alpha')}: the ratings are {_alpha_reading(alpha)}."]
    chance = []
    if m["gwet_ac1"].value is not None and m["cohen_kappa"].value is not None:
        chance.append(f"Raw percent agreement is {_value(rep, 'percent_agreement')}; corrected for chance, Gwet's AC1 "
                      f"is {_value(rep, 'gwet_ac1')} and the mean pairwise Cohen's κ {_value(rep, 'cohen_kappa')}")
        if m["gwet_ac1"].value - m["cohen_kappa"].value > 0.15:
            chance.append(" — AC1 well above κ is the kappa paradox: one label dominates, so kappa's chance agreement "
                          "is high and kappa low even where the raters mostly agree")
    if m["fleiss_kappa"].value is not None:
        chance.append(f"; Fleiss' κ {_value(rep, 'fleiss_kappa')}.")
    else:
        chance.append(f". Fleiss' κ is {escape(m['fleiss_kappa'].note)}.")
    parts.append("".join(chance))
    flagged = rep.quality.flagged
    if flagged:
        parts.append(f"**{len(flagged)} of {a.n_raters} raters are flagged** (seed 001 §21.3.2's checks): "
                     + "; ".join(f"**{escape(r)}** — {escape(', '.join(why))}" for r, why in flagged.items())
                     + ". Their ratings weigh on every coefficient above; the Dawid–Skene consensus down-weights them.")
        w = rep.alpha_without_flagged
        if w is not None:
            parts[-1] += (f" Without them ({w[3]} raters left) Krippendorff's α is "
                          f"{value_with_ci(w[0], w[1], w[2], '.3f')}: {_alpha_reading(w[0])}.")
    else:
        parts.append("No rater is flagged by seed 001 §21.3.2's checks (gold accuracy, agreement with the others, "
                     "speed, fatigue).")
    if rep.ds is not None:
        agree = float((rep.consensus["dawid_skene"] == rep.consensus["majority"]).mean())
        parts.append(f"The Dawid–Skene consensus agrees with the majority vote on {percent(agree, 1)} of the items; "
                     f"it estimates the raters' accuracies from {rep.ds.accuracy.min():.0%} to "
                     f"{rep.ds.accuracy.max():.0%}.")
    e = rep.embedding
    if e is not None:
        ceiling = ""
        if len(e.raters):
            ceiling = (f" For comparison, a rater's grades reach a median ρ of {np.median(e.raters['rho']):.3f} with "
                       "the mean of the other raters (the human ceiling).")
        parts.append(f"The embedding's cosine similarity ranks the {e.n:,} pairs like the humans with Spearman ρ = "
                     f"{_value(rep, 'embedding_human_spearman')}.{ceiling}")
    return "\n\n".join(parts)


def show_summary(rep: HumanEvaluationReport) -> None:
    show_markdown(narrative(rep))


def show_agreement(rep: HumanEvaluationReport) -> None:
    a = rep.agreement
    names = [n for n in ag.AGREEMENT]
    show_metric_table({n: rep.metrics[n] for n in names},
                      caption=f"Agreement between the raters over {a.n_items:,} items ({a.ci_method}). Verdicts: "
                              f"Krippendorff's α — {ag.KRIPPENDORFF_BANDS.text} ({ag.KRIPPENDORFF_BANDS.table}); "
                              f"the kappas and AC1 — {ag.LANDIS_KOCH.text} ({ag.LANDIS_KOCH.table}).",
                      label="tbl-human-agreement")
    if len(a.alpha_by_level) > 1:
        rows = [{"level of measurement": lv + (" (declared)" if lv == a.level else ""), "Krippendorff's α": f"{v:.3f}"}
                for lv, v in a.alpha_by_level.items()]
        show_table(pd.DataFrame(rows), caption="Krippendorff's α of the same ratings at each level of measurement: "
                                               "the declared level is the one reported; nominal ignores how far apart "
                                               "two grades are, interval treats the grades as equally spaced numbers.",
                   label="tbl-human-alpha-levels")


def _ci_text(lo, hi) -> str:
    return "" if lo is None or hi is None else f" ({lo:.2f}–{hi:.2f})"


def rater_table(rep: HumanEvaluationReport) -> pd.DataFrame:
    """The per-rater quality table as shown (intervals are Wilson intervals)."""
    t = rep.quality.table
    rows = []
    for _, r in t.iterrows():
        row = {"rater": str(r["rater"]), "ratings": int(r["ratings"])}
        if rep.ann.has["gold"]:
            row["gold accuracy"] = ("—" if not np.isfinite(r["gold accuracy"]) else
                                    f"{r['gold accuracy']:.2f}{_ci_text(*r['gold ci'])} of {int(r['gold items'])}")
        row["agrees with others"] = ("—" if not np.isfinite(r["consensus agreement"]) else
                                     f"{r['consensus agreement']:.2f}{_ci_text(*r['consensus ci'])}")
        if rep.ds is not None:
            row["Dawid–Skene accuracy"] = f"{r['dawid-skene accuracy']:.2f}"
        if rep.ann.has["seconds"]:
            row["median s"] = "—" if not np.isfinite(r["median seconds"]) else f"{r['median seconds']:.1f}"
        if rep.ann.has["position"]:
            row["drift (last − first third)"] = "—" if not np.isfinite(r["drift"]) else (
                f"{r['drift']:+.2f}" + ("" if not np.isfinite(r["drift p (Holm)"]) else
                                        f" (Holm p {r['drift p (Holm)']:.2g})"))
        row["flag"] = ", ".join(_short_flag(f) for f in r["flags"])
        rows.append(row)
    return pd.DataFrame(rows)


def _short_flag(reason: str) -> str:
    """The one-word form of a flag reason for the table (the full reasons are in the narrative)."""
    for start, word in (("gold", "gold"), ("agrees", "agreement"), ("median", "speed"), ("fatigue", "fatigue")):
        if reason.startswith(start):
            return word
    return reason


def quality_figure(rep: HumanEvaluationReport) -> plt.Figure | None:
    """Left: each rater's agreement with the others against their median time; right: agreement with the
    others along the session (sliding thirds), one line per rater."""
    q = rep.quality
    has_s, has_p = rep.ann.has["seconds"], rep.ann.has["position"]
    if not (has_s or has_p):
        return None
    panels = int(has_s) + int(has_p)
    fig, axes = plt.subplots(1, panels, figsize=(WIDTH if panels == 2 else WIDTH * 0.55, 3.2))
    axes = np.atleast_1d(axes)
    flagged = set(q.flagged)
    th = rep.thresholds
    i = 0
    if has_s:
        ax = axes[i]
        i += 1
        t = q.table
        for _, r in t.iterrows():
            bad = str(r["rater"]) in flagged
            ax.scatter(r["median seconds"], r["consensus agreement"], s=40,
                       color=PALETTE["problematic"] if bad else PALETTE["data"], zorder=3)
            ax.annotate(mathtext(r["rater"]), (r["median seconds"], r["consensus agreement"]), fontsize=7,
                        xytext=(4, 3), textcoords="offset points")
        ax.axvline(th["min_seconds"], color=PALETTE["reference"], ls="--", lw=1.0)
        ax.axhline(th["min_accuracy"], color=PALETTE["reference"], ls=":", lw=1.0)
        ax.set_xlim(0, max(float(np.nanmax(t["median seconds"])) * 1.15, th["min_seconds"] * 1.5))
        ax.set_xlabel("median seconds per rating")
        ax.set_ylabel("agreement with the others")
        ax.set_ylim(0, 1.02)
    if has_p:
        ax = axes[i]
        per = q.ratings.dropna(subset=["position", "agrees"])
        for name, part in per.groupby("rater", sort=True):
            if len(part) < ag.MIN_SESSION:
                continue
            part = part.sort_values("position")
            frac = np.arange(len(part)) / max(len(part) - 1, 1)
            bins = np.minimum((frac * 5).astype(int), 4)
            y = part.groupby(bins)["agrees"].mean()
            bad = str(name) in flagged
            ax.plot((y.index + 0.5) / 5, y.to_numpy(), marker="o", ms=3, lw=1.6 if bad else 0.9,
                    color=PALETTE["problematic"] if bad else PALETTE["data"], alpha=1 if bad else 0.55,
                    label=mathtext(name) if bad else None)
        ax.axhline(th["min_accuracy"], color=PALETTE["reference"], ls=":", lw=1.0)
        ax.set_xlabel("position in the rater's session (fifths)")
        ax.set_ylabel("agreement with the others")
        ax.set_ylim(0, 1.02)
        ax.set_xlim(0, 1)
        if flagged:
            ax.legend(frameon=False, fontsize=8, title="flagged", title_fontsize=8)
    return fig


def show_raters(rep: HumanEvaluationReport) -> None:
    th = rep.thresholds
    tol = ag.scale_tolerance(rep.data)
    agree_rule = ("their label is among the other raters' most frequent labels" if rep.data.level == "nominal" else
                  f"their grade is within {tol:g} (a quarter of the scale) of the other raters' median")
    show_table(rater_table(rep),
               caption=f"Each rater: gold accuracy (exact match, Wilson 95 % interval, over the gold items rated), "
                       f"agreement with the others (share of shared items where {agree_rule}), the Dawid–Skene "
                       "estimate of their accuracy, median time, and fatigue drift (agreement in the last third of "
                       "the session minus the first; one-sided Mann–Whitney test that disagreements come later, "
                       f"Holm-adjusted across raters). Flags: below {th['min_accuracy']:.0%} over at least "
                       f"{th['min_tasks']} items (gold, agreement), median below {th['min_seconds']:g} s (speed), "
                       "or significant fatigue (seed 001 §21.3.2); the reasons in full in the narrative above.",
               label="tbl-human-raters")
    fig = quality_figure(rep)
    if fig is not None:
        show_figure(fig, caption="Left: agreement with the other raters against median time per rating (dashed: the "
                                 f"{th['min_seconds']:g}-second minimum; dotted: the {th['min_accuracy']:.0%} "
                                 "threshold). Right: agreement with the others in each fifth of a rater's session; a "
                                 "falling line is fatigue. Flagged raters in red.", label="fig-human-raters")
    s = rep.quality.speed_accuracy
    if s:
        show_markdown(f"Across raters, median time and agreement with the others correlate with Spearman ρ = "
                      f"{s['rho']:.2f} (p = {s['p_value']:.2g}, {s['n']} raters): "
                      + ("faster raters agree less, the seed's speed–accuracy trade-off." if s["rho"] > 0 and
                         s["p_value"] < 0.05 else "no clear speed–accuracy trade-off at this number of raters."))


def show_consensus(rep: HumanEvaluationReport) -> None:
    c = rep.consensus
    where = (f"written to `results/{CONSENSUS_FILE}`" if rep.consensus_path else "not written (no results folder)")
    lines = [f"The consensus label of each item is {where}"
             + (" as a qrels table (`query_id`, `doc_id`, `relevance` = the consensus grade, further columns "
                "ignored by readers), usable as `qrels:` for the retrieval chapter." if rep.qrels_compatible else ".")]
    if rep.ds is not None:
        lines.append(f"The consensus is the **Dawid–Skene** label (EM over the raters' confusion matrices, "
                     f"{rep.ds.iterations} iterations{'' if rep.ds.converged else ', not converged'}); the majority "
                     "vote (ties to the lower label) is kept beside it.")
    else:
        lines.append(f"The consensus is the majority vote (ties to the lower label); Dawid–Skene was not run: "
                     f"{escape(rep.ds_reason)}.")
    show_markdown(" ".join(lines))
    rows = []
    for lab in rep.data.categories:
        s = _fmt_label(lab)
        row = {"label": s, "majority": int((c["majority"] == s).sum())}
        if rep.ds is not None:
            row["Dawid–Skene"] = int((c["dawid_skene"] == s).sum())
        row["ratings"] = int((rep.data.cat == int(np.searchsorted(rep.data.categories, lab))).sum())
        rows.append(row)
    caption = "Items per consensus label, and ratings per label."
    if rep.ds is not None:
        changed = int((c["dawid_skene"] != c["majority"]).sum())
        caption += (f" Dawid–Skene changes the majority label of {changed:,} of {len(c):,} items; its posterior "
                    f"probability of the chosen label is below 0.9 for {int((c['ds_posterior'] < 0.9).sum()):,}.")
    show_table(pd.DataFrame(rows), caption=caption, label="tbl-human-consensus")


def show_embedding(rep: HumanEvaluationReport) -> None:
    e = rep.embedding
    if e is None:
        show_markdown(f"Not measured: {escape(rep.embedding_reason)}. Give the annotations as pairs of vector ids "
                      "(`query_id`, `doc_id` or `item1`, `item2`) with numeric grades to compare the embedding's "
                      "similarity with the human grades.")
        return
    show_metric_table({"embedding_human_spearman": rep.metrics["embedding_human_spearman"]},
                      caption=f"Spearman's ρ between the cosine similarity of each pair's two vectors and its mean "
                              f"human grade ({e.ci_method}).", label="tbl-human-embedding")
    fig, ax = plt.subplots(figsize=(WIDTH * 0.55, 3.2))
    rng = np.random.default_rng(0)
    jitter = rng.uniform(-0.08, 0.08, len(e.pairs))
    ax.scatter(e.pairs["human"] + jitter, e.pairs["similarity"], s=9, alpha=0.5, color=PALETTE["data"])
    top = e.pairs.nlargest(WORST, "disagreement")
    ax.scatter(top["human"] + jitter[top.index], top["similarity"], s=18, color=PALETTE["problematic"],
               label=f"{WORST} largest disagreements")
    ax.set_xlabel("mean human grade (jittered)")
    ax.set_ylabel("cosine similarity")
    ax.legend(frameon=False, fontsize=8)
    show_figure(fig, caption="Each rated pair: its mean human grade against the embedding's cosine similarity. The "
                             "red pairs are ranked most differently by the two.", label="fig-human-embedding")
    worst = top.assign(similarity=top["similarity"].map(lambda v: f"{v:.3f}"),
                       human=top["human"].map(lambda v: f"{v:.2f}"),
                       disagreement=top["disagreement"].map(lambda v: f"{v:.2f}"))
    show_table(worst[["item", "ratings", "human", "similarity", "disagreement", "direction"]].rename(
        columns={"human": "mean grade", "disagreement": "rank gap"}),
        caption=f"The {WORST} pairs the embedding and the humans rank most differently (rank gap: the difference "
                "of the two percentile ranks, 0–1).", label="tbl-human-disagree")
    if len(e.raters):
        show_markdown(f"Human ceiling: each rater's grades against the mean of the other raters on the same pairs give "
                      f"Spearman ρ from {e.raters['rho'].min():.3f} to {e.raters['rho'].max():.3f} (median "
                      f"{e.raters['rho'].median():.3f}); the embedding's ρ = {e.rho:.3f} "
                      + ("is within that range." if e.rho >= e.raters["rho"].min() else "is below every rater's."))


def show_protocol(rep: HumanEvaluationReport) -> None:
    a, ann = rep.agreement, rep.ann
    m = rep.data.m.astype(int)
    vals, cnt = np.unique(m, return_counts=True)
    kinds = {"item": "single items", "query_doc": "query–document judgements", "pair": "pairs of vectors"}
    rows = [("file", ann.file), ("what is rated", kinds[ann.kind]),
            ("labels", ", ".join(_fmt_label(c) for c in rep.data.categories[:20])
             + (f", … ({rep.data.K} values)" if rep.data.K > 20 else "")),
            ("level of measurement", f"{ann.level} ({ann.level_source})"),
            ("items", f"{a.n_items:,} ({a.n_items_multi:,} rated at least twice)"),
            ("raters", f"{a.n_raters}"), ("ratings", f"{a.n_ratings:,}"),
            ("ratings per item", ", ".join(f"{v}: {c:,} items" for v, c in zip(vals, cnt))),
            ("optional columns", ", ".join(k for k, v in ann.has.items() if v) or "none"),
            ("intervals", a.ci_method)]
    show_table(pd.DataFrame(rows, columns=["setting", "value"]), caption="The annotations.",
               label="tbl-human-protocol")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

MIN_RATER_ACCURACY = Option("min_rater_accuracy", 0.7, "a rater is flagged below this gold accuracy or agreement with the other raters "
                            "(seed 001 §21.3.2)", bounds=(0, 1))
MIN_RATER_TASKS = Option("min_rater_tasks", 10, "gold (or shared) items a rater needs before being judged on them (seed 001 §21.3.2)", bounds=(0, INF))
MIN_SECONDS = Option("min_seconds", 10.0, "a rater whose median time per rating is below this is flagged (seed 001 §21.3.2)", bounds=(0, INF))

def findings(r: ChapterResults) -> list[Finding]:
    """The quality of the ratings: raters flagged by the quality checks, and the agreement without them."""
    flagged = r.info.get("flagged_raters") or {}
    if not flagged:
        return []
    alpha = r.metric("krippendorff_alpha") or {}
    without = r.info.get("alpha_without_flagged") or {}
    severity = "problematic" if alpha.get("verdict") == "problematic" else "concerning"
    reasons = "; ".join(f"{name}: {', '.join(why)}" for name, why in flagged.items())
    after = (f", and Krippendorff's α rises from {value_text(alpha)} to {value_text(without)} without them"
             if without.get("value") is not None else "")
    return [Finding(
        severity, "evaluation data", r.name,
        f"{len(flagged)} raters are unreliable; the ratings agree too little without dropping them",
        f"Drop or re-collect the ratings of {', '.join(flagged)} before using them as ground truth ({reasons}){after}.",
        metrics=("krippendorff_alpha",), evidence={**metric_evidence(alpha, "krippendorff_alpha"),
                                                   "raters_flagged": list(flagged), "alpha_without": without.get("value"),
                                                   "alpha_without_ci": [without.get("ci_low"), without.get("ci_high")]},
        rule="data quality", effect="rater agreement")]


CHAPTER = ChapterSpec(
    name="human_evaluation", title="Human evaluation", order=97,
    description="How far human ratings can be trusted and whether the embedding agrees with them: Krippendorff's α, Fleiss' κ, pairwise Cohen's κ, Gwet's AC1, rater quality checks, Dawid–Skene consensus labels (seed 001 §21.3).",
    requires=("annotations",), optional=("annotation_level", "queries"),
    options=(MIN_RATER_ACCURACY, MIN_RATER_TASKS, MIN_SECONDS), precheck=precheck, demo="human_evaluation",
    effects=(Effect("rater agreement", ("krippendorff_alpha", "fleiss_kappa", "cohen_kappa", "gwet_ac1"),
                    "The human ratings agree too little to be trusted",
                    "Do not use these ratings as ground truth without cleaning them:", "evaluation data"),),
    findings=findings, scorer=SCORER,
)
