"""The Recommendation chapter: every user gets the exact top 10 of the whole item catalogue by its
user·item score, scored on held-out interactions for accuracy and beyond it (coverage, concentration,
novelty, diversity, serendipity, popularity bias, personalization), beside a most-popular and a random
recommender (computed in :mod:`embeval_report.metrics.recommendation`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ChapterSkipped
from ..metrics import recommendation as rc
from ..metrics.scoring import Aggregate, TaskScorer, check_units, weighted_mean
from ..present.display import callout, show_figure, show_markdown, show_table
from ..present.display import show_metrics as show_metric_table
from ..present.display import show_tests as show_recorded_tests
from ..present.format import metric_text, percent
from ..present.plotting import PALETTE, WIDTH
from ..stats import HypothesisTest, mean_ci
from .declaration import INF, ChapterSpec, Option
from .findings import ChapterResults, Finding, baseline_finding

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["RecommendationReport", "baseline_table", "compute", "distribution_figure", "lorenz_figure", "narrative",
           "popularity_figure", "popularity_table", "precheck", "show_baselines", "show_distributions", "show_lorenz",
           "show_metrics", "show_popularity", "show_protocol", "show_sampled", "show_summary", "show_tests"]

COLORS = {"embeddings": PALETTE["data"], "most popular": PALETTE["reference"], "random": PALETTE["muted"],
          "consumed (test)": PALETTE["accent"], "training interactions": PALETTE["accent"]}
GROUPS = ("head", "mid", "tail")


@dataclass(frozen=True)
class RecommendationReport:
    """Everything the chapter shows."""

    result: rc.RecommendationResult
    lift: pd.DataFrame          # per baseline: paired nDCG@10 difference with its interval and test
    roles_source: str
    notes: tuple
    rec: object                 # the chapter's recorder (for its hypothesis tests)


def precheck(es, side, settings) -> str | None:
    """Why recommendation cannot be evaluated: a catalogue of fewer than 2 items, or no users."""
    inter = side.interactions
    if inter is None:
        return None
    roles = inter.roles
    if len(roles.items) < 2:
        return f"recommendation needs a catalogue of at least 2 items; {roles.source} names {len(roles.items)}"
    if len(roles.users) == 0:
        return f"recommendation needs users; {roles.source} names none"
    return None


@dataclass(frozen=True)
class RecommendationInputs:
    """The scorer's inputs: the interactions (and the given test interactions), the score (``notes``: how the
    manifest's was adapted), the set's ids and where to rank (``device``: every device gives the same lists)."""

    interactions: object
    test_interactions: object | None
    score: str
    notes: tuple
    ids: np.ndarray
    device: str = "auto"


def recommendation_inputs(es, side, settings) -> RecommendationInputs:
    """The interactions and the score (the dot product when the manifest's is not a recommendation score)."""
    score, notes = side.score or "dot", ()
    if score not in rc.SCORES:
        notes = (f"The manifest's score `{score}` is not a recommendation score; the dot product is used.",)
        score = "dot"
    return RecommendationInputs(side.interactions, side.test_interactions, score, notes, es.ids, settings.device)


def recommendation_plan(inputs: RecommendationInputs, settings) -> rc.RecommendationPlan:
    """The split of the interactions (the given test interactions, else each user's latest or seeded random
    ``rec_holdout``) and the evaluated users; :class:`ChapterSkipped` when no user has a held-out interaction."""
    inter, given = inputs.interactions, inputs.test_interactions
    roles = inter.roles
    kw = dict(time=inter.time, rating=inter.rating, holdout=int(settings.option("rec_holdout")), seed=settings.seed,
              min_rating=float(settings.option("rec_min_rating")))
    if given is not None:
        kw |= dict(test_user=given.user, test_item=given.item, test_rating=given.rating)
    split = rc.split_interactions(roles.users, roles.items, inter.user, inter.item, **kw)
    if len(split.evaluated) == 0:
        c = split.counts
        why = ("every test interaction is already among the user's training interactions"
               if given is not None and c.get("test_in_train_dropped") else
               f"no user has more than {split.holdout} distinct items to hold {split.holdout} out"
               if given is None else "the test interactions are empty")
        raise ChapterSkipped(f"no user has a held-out interaction to evaluate: {why}")
    return rc.recommendation_plan(split, inputs.ids, score=inputs.score,
                                  sampled_negatives=int(settings.option("rec_sampled_negatives")))


#: recommendation scored per evaluated user: the accuracy of its top 10 (and what the list does beyond accuracy)
SCORER = TaskScorer(
    unit="users", key="user",
    columns=(*rc.ACCURACY, "n_test", "hits", "first_rank", "list_length", *rc.PER_USER_BEYOND,
             "recommended_popularity", "history_popularity"),
    aggregates=(*(Aggregate(m, mean_of=m) for m in rc.ACCURACY),
                # means over the users with a value (NaN without a history, a list of two): as the chapter computes
                # them, paired by the bootstrap
                *(Aggregate(m, fn=partial(rc.user_mean, column=m), unit_column=m,
                            boot=partial(weighted_mean, column=m)) for m in rc.PER_USER_BEYOND)),
    inputs=recommendation_inputs, plan=recommendation_plan,
    score=lambda X, inputs, plan: rc.run_recommendation(X, plan, device=inputs.device).per_user)


def compute(ctx: ChapterContext) -> RecommendationReport:
    """Split the interactions, recommend from the embeddings and the baselines, and record every number."""
    es = ctx.es
    inputs = SCORER.inputs(es, ctx.side, ctx.settings)
    plan = SCORER.plan(inputs, ctx.settings)
    split = plan.split
    run = rc.run_recommendation(es.vectors, plan, device=inputs.device)  # the scorer's units, with the lists
    units = check_units(run.per_user, SCORER.key, SCORER.columns)
    result = rc.evaluate_recommendation(es.vectors[split.user_rows], es.vectors[split.item_rows], split,
                                        score=plan.score, level=ctx.level, seed=ctx.seed, device=ctx.device,
                                        sampled_negatives=plan.sampled_negatives, run=run)
    ctx.rec.add(*result.metrics.values(), *result.sampled_metrics.values())
    lift = _lift(result, ctx)
    ctx.rec.scored(SCORER, units, plan)
    notes = list(inputs.notes)
    ctx.rec.note(protocol=result.protocol, users_and_items=inputs.interactions.roles.source, **result.info,
                 baselines=baseline_table(result, raw=True).to_dict(orient="records"),
                 lift_over_baselines=lift.to_dict(orient="records"), **({"adapted": notes} if notes else {}))
    return RecommendationReport(result, lift, inputs.interactions.roles.source, tuple(notes), ctx.rec)


def _lift(result: rc.RecommendationResult, ctx: ChapterContext) -> pd.DataFrame:
    """Paired per-user nDCG@10 difference (embeddings − baseline), its interval and a Wilcoxon signed-rank test."""
    emb = result.recommenders["embeddings"].per_user["ndcg_at_10"].to_numpy()
    rows = []
    for name in rc.RECOMMENDERS[1:]:
        if name not in result.recommenders:
            continue
        diff = emb - result.recommenders[name].per_user["ndcg_at_10"].to_numpy()
        lo, hi, _ = mean_ci(diff, ctx.level, seed=ctx.seed, units="users")
        nz = diff[diff != 0]
        if len(nz):
            w = sps.wilcoxon(nz, alternative="two-sided")
            stat, p = float(w.statistic), float(w.pvalue)
        else:
            stat, p = float("nan"), 1.0
        ctx.rec.test(HypothesisTest(name=f"ndcg_at_10: embeddings vs {name}",
                                    test="Wilcoxon signed-rank, two-sided (zero differences dropped)", p_value=p,
                                    statistic=stat, n=f"{len(diff):,} users ({len(nz):,} with a difference)",
                                    null=f"per-user nDCG@10 differences between the embeddings and the {name} "
                                         "recommender are symmetric about 0", family="recommendation baselines"))
        rows.append({"baseline": name, "mean difference": float(diff.mean()), "ci_low": lo, "ci_high": hi,
                     "users better": int((diff > 0).sum()), "users worse": int((diff < 0).sum()), "p_value": p})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# Numbers, narrative, tables, figures
# ---------------------------------------------------------------------------------------------

def _v(r: rc.RecommendationResult, name: str, fmt: str = ".3f") -> str:
    return metric_text(r.metrics[name], fmt)


def narrative(rep: RecommendationReport) -> str:
    """What the numbers say about recommending from these embeddings."""
    r, p = rep.result, rep.result.protocol
    recs = r.recommenders
    emb = recs["embeddings"].values
    split = {"time": f"the latest {p['holdout']} interactions of each user held out",
             "random": f"{p['holdout']} interactions of each user held out at random (seeded)",
             "given": "the given test interactions"}[p["split"]]
    parts = [f"**{p['n_evaluated']:,} users** each received the exact top 10 of all {p['n_items']:,} catalogue items "
             f"by the {p['score']} product of their vectors, their training items excluded ({split}). "
             f"nDCG@10 is {_v(r, 'ndcg_at_10')}, hit rate@10 {_v(r, 'hit_rate_at_10')} and recall@10 "
             f"{_v(r, 'recall_at_10')}."]
    if "most popular" in recs:
        pop, rnd = recs["most popular"].values, recs["random"].values
        row = rep.lift.set_index("baseline")
        if pop["ndcg_at_10"] > emb["ndcg_at_10"] and row.loc["most popular", "ci_high"] < 0:
            parts.append(f"**A most-popular list beats the embeddings**: nDCG@10 {pop['ndcg_at_10']:.3f} against "
                         f"{emb['ndcg_at_10']:.3f}. What these users go on to consume is driven by popularity, and the "
                         "vectors do not carry it: every user would be better served by the same chart of hits.")
        elif row.loc["most popular", "ci_low"] > 0:
            parts.append(f"The embeddings beat the most-popular list (nDCG@10 {pop['ndcg_at_10']:.3f}), so they carry "
                         "preference beyond popularity.")
        else:
            parts.append(f"The embeddings do not clearly beat the most-popular list (nDCG@10 {pop['ndcg_at_10']:.3f}).")
        if emb["ndcg_at_10"] <= rnd["ndcg_at_10"] or row.loc["random", "ci_low"] <= 0:
            parts.append(f"They are **not clearly better than random recommendations** either (random nDCG@10 "
                         f"{rnd['ndcg_at_10']:.3f}).")
    cov, g = emb["catalog_coverage"], emb["gini_index"]
    concentrated = cov < 0.3 or g > 0.8
    parts.append(f"Beyond accuracy, the lists reach {percent(cov, 1)} of the catalogue (coverage) with a Gini index of "
                 f"exposure of {g:.2f} over the whole catalogue"
                 + (": **recommendations are concentrated on few items**" if concentrated else "")
                 + f"; personalization is {emb['personalization']:.2f} (1 = no two users share an item, 0 = everyone "
                 f"gets the same list) and intra-list diversity {emb['intra_list_diversity']:.2f}.")
    bias = emb["popularity_bias"]
    if np.isfinite(bias):
        if bias > 1.2:
            parts.append(f"The recommended items are on average {bias:.1f}× as popular as what the users consumed "
                         "(ARP ratio): **popularity bias** — the lists amplify the head of the catalogue.")
        elif bias < 0.8:
            parts.append(f"The recommended items are far less popular than what the users consume (ARP ratio "
                         f"{bias:.3g}): the lists sit in the long tail, away from the titles that drive consumption.")
        else:
            parts.append(f"Recommended and consumed items are about as popular (ARP ratio {bias:.2f}).")
    if p.get("users_without_training"):
        parts.append(f"{p['users_without_training']:,} evaluated users have no training interaction (cold start); "
                     "they are ranked by their vectors alone and left out of serendipity and popularity bias.")
    return "\n\n".join(parts)


def _fmt(name: str, v: float) -> str:
    if not np.isfinite(v):
        return "–"
    return f"{v:.2f}" if name == "novelty" else f"{v:.3g}" if name == "popularity_bias" else f"{v:.3f}"


def baseline_table(result: rc.RecommendationResult, raw: bool = False) -> pd.DataFrame:
    """Every metric for the embeddings and each baseline, one row per metric (``raw``: numbers, else text)."""
    rows = []
    for name in rc.METRICS:
        spec = rc.SPECS[name]
        row = {"metric": spec.label, "better": spec.direction}
        for rname, res in result.recommenders.items():
            v = res.values[name]
            row[rname] = (None if not np.isfinite(v) else v) if raw else _fmt(name, v)
        rows.append(row)
    return pd.DataFrame(rows)


def popularity_table(result: rc.RecommendationResult) -> pd.DataFrame:
    """Share of the training interactions, of consumed (test) interactions and of each recommender's slots in
    the head, mid and tail of the catalogue (:func:`~embeval_report.metrics.recommendation.popularity_groups`)."""
    split = result.split
    phi = np.asarray(split.train.sum(0)).ravel()
    g = rc.popularity_groups(phi)
    rows = {"training interactions": np.bincount(g, weights=phi, minlength=3) / max(phi.sum(), 1)}
    test_items = split.test[result.users].indices
    rows["consumed (test)"] = np.bincount(g[test_items], minlength=3) / max(len(test_items), 1)
    for name, res in result.recommenders.items():
        rows[name] = np.bincount(g, weights=res.exposure, minlength=3) / max(res.exposure.sum(), 1)
    return pd.DataFrame(rows, index=list(GROUPS)).T


def lorenz_figure(result: rc.RecommendationResult) -> plt.Figure:
    """Lorenz curves of exposure for each recommender and of the training interactions."""
    fig, ax = plt.subplots(figsize=(WIDTH * 0.55, 3.6))
    ax.plot([0, 1], [0, 1], color="black", lw=0.8, ls=":", label="equal exposure")
    phi = np.asarray(result.split.train.sum(0)).ravel()
    x, y = rc.lorenz(phi)
    ax.plot(x, y, color=COLORS["training interactions"], lw=1.4, ls="--",
            label=f"training interactions (Gini {rc.gini(phi):.2f})")
    for name, res in result.recommenders.items():
        x, y = rc.lorenz(res.exposure)
        ax.plot(x, y, color=COLORS[name], lw=1.8, label=f"{name} (Gini {rc.gini(res.exposure):.2f})")
    ax.set_xlabel("share of catalogue items (least exposed first)")
    ax.set_ylabel("share of recommendations")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    return fig


def popularity_figure(table: pd.DataFrame) -> plt.Figure:
    """Share of consumed items and of each recommender's slots in the head, mid and tail."""
    fig, ax = plt.subplots(figsize=(WIDTH * 0.62, 3.0))
    series = [s for s in table.index if s != "training interactions"]
    width = 0.8 / len(series)
    for j, s in enumerate(series):
        xs = np.arange(3) + (j - (len(series) - 1) / 2) * width
        ax.bar(xs, table.loc[s, list(GROUPS)], width, color=COLORS.get(s, PALETTE["muted"]), label=s,
               hatch="//" if s == "consumed (test)" else None, edgecolor="white")
    share = table.loc["training interactions"]
    names = {"head": "head (top 20 %)", "mid": "mid (next 30 %)", "tail": "tail (bottom 50 %)"}
    ax.set_xticks(range(3), [f"{names[g]}\n{percent(share[g], 0)} of training" for g in GROUPS])
    ax.set_ylabel("share of items / slots")
    ax.set_ylim(0, 1.02)
    ax.legend(frameon=False, fontsize=8, ncol=2)
    return fig


def distribution_figure(result: rc.RecommendationResult) -> plt.Figure:
    """Per user: nDCG@10 (embeddings and baselines) and recommended vs history popularity."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.0))
    bins = np.linspace(0, 1, 21)
    for name, res in result.recommenders.items():
        a.hist(res.per_user["ndcg_at_10"], bins=bins, histtype="step", lw=1.6, color=COLORS[name], label=name)
    a.set_yscale("log")
    a.set_xlabel("nDCG@10 of a user")
    a.set_ylabel("users (log scale)")
    a.legend(frameon=False, fontsize=8)
    pu = result.recommenders["embeddings"].per_user
    ok = (pu["history_popularity"] > 0) & (pu["recommended_popularity"] > 0)
    h, r = pu.loc[ok, "history_popularity"], pu.loc[ok, "recommended_popularity"]
    b.scatter(h, r, s=4, alpha=0.35, color=COLORS["embeddings"], lw=0)
    if ok.any():
        lo, hi = float(min(h.min(), r.min())), float(max(h.max(), r.max()))
        b.plot([lo, hi], [lo, hi], color="black", lw=0.8, ls=":")
    b.set_xscale("log")
    b.set_yscale("log")
    b.set_xlabel("mean popularity of the user's history")
    b.set_ylabel("mean popularity of its top 10")
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: RecommendationReport) -> None:
    for note in rep.notes:
        callout("note", note)
    show_markdown(narrative(rep))


def show_metrics(rep: RecommendationReport) -> None:
    p = rep.result.protocol
    show_metric_table(rep.result.metrics,
                      caption=f"Recommendation metrics of the embeddings: {p['n_evaluated']:,} users, each given the "
                              f"exact top 10 of {p['n_items']:,} items by the {p['score']} score, training items "
                              "excluded. Accuracy and per-user means: bootstrap intervals over users; catalogue-level "
                              "numbers: basic bootstrap over users. No verdict: what is good depends on the catalogue.",
                      label="tbl-recommendation-metrics")


def show_baselines(rep: RecommendationReport) -> None:
    show_table(baseline_table(rep.result),
               caption="The embeddings beside two baselines ranked by the same code with the same exclusions: the "
                       "most-popular recommender (items by training interactions) and a uniform random one. A model "
                       "that does not beat most-popular adds nothing over a chart of hits.",
               label="tbl-recommendation-baselines")
    lift = rep.lift
    if len(lift):
        t = pd.DataFrame({"baseline": lift["baseline"],
                          "nDCG@10 difference (95 % CI)": [f"{d:+.4f} ({lo:+.4f} – {hi:+.4f})" for d, lo, hi in
                                                           zip(lift["mean difference"], lift["ci_low"], lift["ci_high"])],
                          "users better / worse": [f"{b:,} / {w:,}" for b, w in
                                                   zip(lift["users better"], lift["users worse"])],
                          "Wilcoxon p": [f"{p:.2g}" for p in lift["p_value"]]})
        show_table(t, caption="Paired per-user nDCG@10 difference, embeddings minus baseline: mean with a bootstrap "
                              "interval over users, and a two-sided Wilcoxon signed-rank test (raw p-value; the "
                              "report adjusts all tests together).", label="tbl-recommendation-lift")


def show_lorenz(rep: RecommendationReport) -> None:
    show_figure(lorenz_figure(rep.result),
                caption="Lorenz curves of exposure: items sorted from least to most recommended against their "
                        "cumulative share of all recommendation slots. The further below the diagonal, the more the "
                        "slots go to few items; never-recommended items are the flat start. Dashed: the training "
                        "interactions themselves.", label="fig-recommendation-lorenz")


def show_popularity(rep: RecommendationReport) -> None:
    t = popularity_table(rep.result)
    show_figure(popularity_figure(t),
                caption="Where recommendations fall in the catalogue: the head is the 20 % most popular items (by "
                        "training interactions), the mid the next 30 %, the tail the least popular half; the labels "
                        "give each group's share of the training interactions. Hatched: the items users actually went "
                        "on to consume (test interactions).", label="fig-recommendation-popularity")
    show_table(t.map(lambda v: percent(v, 1)).reset_index(names="share of"),
               caption="The shares of the figure.", label="tbl-recommendation-popularity")


def show_distributions(rep: RecommendationReport) -> None:
    show_figure(distribution_figure(rep.result),
                caption="Per user: nDCG@10 of each recommender (left, log count scale) and, for the embeddings, the "
                        "mean training popularity of the top 10 against that of the user's own history (right, "
                        "dotted: equal). Points above the line: the user is pushed towards more popular items.",
                label="fig-recommendation-users")


def show_sampled(rep: RecommendationReport) -> None:
    r = rep.result
    n = r.protocol["sampled_negatives"]
    if not r.sampled:
        show_markdown("Not computed (the default): every number above ranks the whole catalogue. Set "
                      "`--set rec_sampled_negatives=100` to also report the sampled-negative protocol.")
        return
    callout("warning", f"These numbers rank each test item among only {n:,} sampled items the user never "
                       "interacted with. Sampled metrics are inconsistent with full ranking and can even reverse the "
                       "order of models (Krichene & Rendle 2020); they are shown for comparison with papers that use "
                       "them, not as the chapter's result.", title="Sampled-negative evaluation")
    rows = [{"metric": rc.SAMPLED_SPECS[m].label,
             **{name: f"{frame[m].mean():.3f}" for name, frame in r.sampled.items()}} for m in rc.SAMPLED_SPECS]
    show_table(pd.DataFrame(rows), caption=f"Sampled-negative metrics ({n:,} negatives per test item), means over "
                                           "users.", label="tbl-recommendation-sampled")


def show_tests(rep: RecommendationReport) -> None:
    show_recorded_tests(rep.rec)


def show_protocol(rep: RecommendationReport) -> None:
    p = rep.result.protocol
    split = {"time": f"by time: each user's latest {p['holdout']} distinct items held out",
             "random": f"leave-{p['holdout']}-out per user, seeded (seed {p['seed']}); no timestamps",
             "given": "the given `test_interactions`"}[p["split"]]
    rows = [("users and items told apart by", rep.roles_source),
            ("catalogue", f"{p['n_items']:,} items, all ranked exactly"),
            ("score", p["score"]), ("split", split),
            ("interactions", f"{p['interactions']:,} ({p['repeated_dropped']:,} repeated (user, item) rows dropped)"),
            ("training / test pairs", f"{p['n_train']:,} / {p['n_test']:,}"),
            ("users evaluated", f"{p['n_evaluated']:,} of {p['n_users']:,}"
             + (f"; {p['users_too_few']:,} with too few items to hold any out" if p.get("users_too_few") else ""))]
    if p.get("test_in_train_dropped"):
        rows.append(("test pairs dropped", f"{p['test_in_train_dropped']:,} already in the user's training items"))
    if p.get("test_below_min_rating"):
        rows.append(("not relevant", f"{p['test_below_min_rating']:,} held-out interactions rated below the minimum"))
    rows.append(("ties", "equal scores: the lower catalogue position first"))
    show_table(pd.DataFrame(rows, columns=["setting", "value"]), caption="The evaluation protocol.",
               label="tbl-recommendation-protocol")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

REC_HOLDOUT = Option("rec_holdout", 2, "recommendation: interactions held out per user when no test_interactions are given "
                     "(the latest when timestamped, else a seeded draw)", bounds=(0, INF))
REC_SAMPLED_NEGATIVES = Option("rec_sampled_negatives", 0, "recommendation: also rank each test item among this many sampled negatives "
                               "(0 = off; sampled metrics disagree with full ranking)", bounds=(-1, INF))
REC_MIN_RATING = Option("rec_min_rating", -INF, "recommendation: held-out interactions rated below this are not relevant")

def findings(r: ChapterResults) -> list[Finding]:
    """Loses to, or does not beat, the free baselines the chapter ranks beside the embeddings (most popular,
    random): the paired per-user nDCG@10 differences and their Wilcoxon tests."""
    values = {row["metric"]: row for row in r.info.get("baselines", [])}
    ndcg = values.get("nDCG@10", {})
    comparisons = [{"baseline": "random lists" if row["baseline"] == "random" else
                    f"a {row['baseline'].replace(' ', '-')} list",
                    "metric": "nDCG@10", "metric_name": "ndcg_at_10", "model": ndcg.get("embeddings"),
                    "baseline_value": ndcg.get(row["baseline"]), "difference": row["mean difference"],
                    "ci_low": row["ci_low"], "ci_high": row["ci_high"],
                    "test": f"ndcg_at_10: embeddings vs {row['baseline']}"}
                   for row in r.info.get("lift_over_baselines", [])]
    found = baseline_finding(r, comparisons, subject="recommendations from these vectors",
                             action="Do not ship these vectors for recommendation:", effect="baselines")
    return [found] if found else []


CHAPTER = ChapterSpec(
    name="recommendation", title="Recommendation", order=87,
    description="Top-10 recommendation from user·item scores over the whole catalogue: accuracy on held-out interactions, coverage, concentration, novelty, diversity, serendipity, popularity bias and personalization, beside most-popular and random baselines (seed 001 §21.4.2).",
    requires=("interactions",), optional=("test_interactions", "users", "items", "score"),
    options=(REC_HOLDOUT, REC_SAMPLED_NEGATIVES, REC_MIN_RATING), precheck=precheck, demo="recommendation",
    findings=findings, scorer=SCORER,
)
