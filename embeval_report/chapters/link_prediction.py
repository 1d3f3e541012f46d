"""The link-prediction chapter: the protocol in words, what the numbers say, the metric table,
tie and filter policies, per-relation results, rank distribution, graph-heuristic baselines, the
edge-operator probes and the negative-sampling quality (computed in :mod:`embeval_report.metrics.linkpred`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass, field
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import ChapterSkipped, InputError
from ..metrics import linkpred as lp
from ..metrics.scoring import Aggregate, TaskScorer, check_units, weighted_mean
from ..metrics.edge_probes import (
    FALSE_NEGATIVE_RATE_LIMIT,
    OPERATOR_LABELS,
    SUSPECTS_LISTED,
    OPERATORS,
    TEST_SAMPLE,
    NegativeQuality,
    ProbeResult,
)
from ..metrics.graph import HEURISTIC_FORMULAS, HEURISTIC_SHORT, MIN_POOL, link_data
from ..metrics.ranks import KS, SCORE_FORMULAS, SCORE_NAMES, Ranks
from ..present.display import callout, escape, show_figure, show_markdown, show_table
from ..present.display import show_metrics as show_metric_table
from ..present.format import interval, metric_text
from ..present.plotting import PALETTE, WIDTH
from .declaration import LINK_OPTIONS, ChapterSpec
from .findings import ChapterResults, Effect, Finding

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["LinkPredictionReport", "baseline_display_table", "compute", "heuristic_definitions", "narrative",
           "precheck", "probe_curves_figure", "probe_display_table", "protocol_markdown", "quality_table", "rank_figure",
           "recommendations", "separation_figure", "show_heuristics", "show_metrics", "show_probes", "show_protocol",
           "show_hardness", "show_quality", "show_ranks", "show_relations", "show_summary", "show_ties",
           "suspects_table"]

AUC_BANDS = lp.SPECS["auc"].bands
AP_BANDS = lp.SPECS["probe_average_precision"].bands
D_BANDS = lp.SPECS["negative_score_cohens_d"].bands


@dataclass(frozen=True)
class LinkPredictionReport:
    """Everything the chapter shows."""

    result: lp.LinkPredictionResult
    score: str
    recommendations: list
    seed: int = 0
    notes: list = field(default_factory=list)  # how the protocol adapted to this input, in words
    ids: object = None                          # the set's ids (suspected false negatives are listed by id)


def precheck(es, side, settings) -> str | None:
    """Why the chapter cannot run on this input: too few entities to draw negatives from, or too
    few edges to hold one out."""
    if side is None or side.edges is None:
        return None
    if es.n < MIN_POOL and side.negatives is None:
        return (f"needs at least {MIN_POOL} entities to draw negatives (a negative differs from both ends of its "
                f"test edge); the set has {es.n}")
    if side.test_edges is None and side.negatives is None and len(side.edges) < 2:
        return (f"needs at least 2 edges to hold one out for testing (or `test_edges`); the edge list has "
                f"{len(side.edges)} after dropping self-loops and repeated edges")
    return None


def link_plan(inputs: lp.LinkInputs, settings) -> lp.LinkPlan:
    """The evaluation protocol from the side data and options; a time split that cannot separate past
    from future (every edge at one time) falls back to a seeded random split, stated in the notes."""
    side = inputs.side
    kw = dict(test_fraction=settings.option("test_fraction"), n_negatives=settings.option("n_negatives"),
              strategy=settings.option("negative_strategy"), pool=settings.option("negative_pool"), seed=settings.seed)
    try:
        data, notes = link_data(side, inputs.n, **kw), ()
    except InputError as e:
        if not (side.edges.has_time and side.test_edges is None and side.negatives is None):
            raise ChapterSkipped(str(e)) from None
        notes = (f"The edges cannot be split by time ({e}); a seeded random split is used instead.",)
        data = link_data(side, inputs.n, split="random", **kw)
    return lp.LinkPlan(data, lp.edge_ids(data.test, inputs.ids), inputs.score, settings.option("ties"),
                       settings.option("filtered"), notes)


#: link prediction scored per test edge: its rank among its negatives; the rank metrics are means over the edges
SCORER = TaskScorer(
    unit="test edges", key="edge", columns=(*lp.RANK_MEANS, "n_candidates", "auc_placement"),
    aggregates=(Aggregate("mean_rank", "lower", mean_of="mean_rank"),
                *(Aggregate(m, mean_of=m) for m in lp.RANK_MEANS[1:]),
                *(Aggregate(adjusted, fn=partial(lp.adjusted, name=name), unit_column=name,
                            boot=partial(lp.adjusted_weighted, name=name))
                  for adjusted, name in (("amri", "mean_rank"), ("adjusted_mrr", "mrr"),
                                         ("adjusted_hits_at_10", "hits_at_10"))),
                Aggregate("auc", fn=lp.placement_auc, unit_column="auc_placement",
                          boot=partial(weighted_mean, column="auc_placement"))),
    inputs=lp.LinkInputs.of, plan=link_plan,
    score=lambda X, inputs, plan: lp.run_link_prediction(X, plan, device=inputs.device).per_edge)


def compute(ctx: ChapterContext) -> LinkPredictionReport:
    """Rank every test edge against its negatives, run the probes and heuristics, and record every number."""
    inputs = SCORER.inputs(ctx.es, ctx.side, ctx.settings)
    plan = SCORER.plan(inputs, ctx.settings)
    run = lp.run_link_prediction(ctx.es.vectors, plan, device=inputs.device)  # the scorer's units, with the scores
    units = check_units(run.per_edge, SCORER.key, SCORER.columns)
    score, notes = plan.score, list(plan.notes)
    result = lp.evaluate_link_prediction(ctx.es.vectors, plan.data, score=score, ties=plan.ties,
                                         filtered=plan.filtered,
                                         max_heuristic_queries=ctx.option("heuristic_queries"), level=ctx.level,
                                         seed=ctx.seed, device=ctx.device, cs=run.cs)
    recs = recommendations(result.quality)
    ctx.rec.add(*result.metrics.values())
    ctx.rec.scored(SCORER, units, plan)
    ctx.rec.test(*lp.negative_quality_tests(result.quality))
    ctx.rec.note(protocol=result.protocol, protocol_tag=result.tag, expected_under_chance=result.expected,
                 tie_and_filter=result.tie_table.to_dict(orient="records"),
                 by_relation=result.relation_table.to_dict(orient="records"),
                 heuristics=None if result.baselines is None else baseline_display_table(
                     result.baselines).to_dict(orient="records"),
                 heuristic_queries=result.baseline_queries,
                 probes=None if result.probes is None else probe_display_table(result.probes).to_dict(orient="records"),
                 negative_quality=quality_table(result.quality).to_dict(orient="records"),
                 recommendations=recs, **({"adapted": notes} if notes else {}))
    if result.suspects is not None:
        ctx.rec.note(negative_hardness=result.hardness.to_dict(orient="records"),
                     suspected_false_negatives=suspects_table(result, ctx.es.ids).to_dict(orient="records"))
    return LinkPredictionReport(result, score, recs, ctx.seed, notes, ctx.es.ids)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def _interval_column(table: pd.DataFrame, source: str, name: str, after: str) -> pd.DataFrame:
    """``table`` with the interval tuples of column ``source`` written as text column ``name`` after ``after``."""
    t = table.drop(columns=[source])
    t.insert(t.columns.get_loc(after) + 1, name, [interval(lo, hi, ".3f", sep=" – ") for lo, hi in table[source]])
    return t


def probe_display_table(p: ProbeResult) -> pd.DataFrame:
    t = _interval_column(p.table, "_auc_ci", "ROC-AUC 95 % CI", "ROC-AUC")
    return _interval_column(t, "_ap_ci", "AP 95 % CI", "average precision").drop(columns=["name"])


def baseline_display_table(b: pd.DataFrame) -> pd.DataFrame:
    return _interval_column(b, "_mrr_ci", "MRR 95 % CI", "MRR").drop(columns=["name"])


def quality_table(q: NegativeQuality) -> pd.DataFrame:
    """Seed 000 Table 2 ("Negative Sampling Quality Metrics"), with tests and the false-negative rate."""
    def mean_sd(mean, sd):
        return f"{mean:.3f} ± {sd:.3f}" if math.isfinite(sd) else f"{mean:.3f} (a single score)"

    d = (f"{q.cohens_d:.3f} (95 % CI {interval(*q.d_ci, '.3f', sep=' – ')})" if math.isfinite(q.cohens_d) else
         "undefined (the scores do not vary)")
    rows = [("Positive score (mean ± sd)", mean_sd(q.pos_mean, q.pos_sd)),
            ("Negative score (mean ± sd)", mean_sd(q.neg_mean, q.neg_sd)),
            ("Separation (mean difference)", f"{q.pos_mean - q.neg_mean:.3f}"),
            ("Cohen's d (pooled sd)", d),
            ("Cohen's d, seed's variant (mean of the two variances)", f"{q.d_seed:.3f}"),
            ("Quality band (seed 000 §219.2)", _quality_word(q)),
            (f"KS statistic (p-value; {q.test_sample:,} per side)", f"{q.ks_statistic:.3f} (p = {q.ks_pvalue:.2g})"),
            ("Mann–Whitney U / (n₊n₋) (one-sided p)", f"{q.mw_auc:.3f} (p = {q.mw_pvalue:.2g})"),
            ("False-negative rate (negatives that are edges)",
             f"{q.false_negative_rate:.2%} ({q.n_false:,} of {q.n_negatives:,}; 95 % CI "
             f"{interval(*q.fnr_ci, '.2%', sep=' – ')})"),
            ("Seed's potential false negatives (negatives above the 25th percentile of positives)",
             f"{q.potential_false_negatives:.1%}")]
    return pd.DataFrame(rows, columns=["quantity", "value"])


def _quality_word(q: NegativeQuality) -> str:
    return q.quality.replace("_", " ") if math.isfinite(q.cohens_d) else "undefined"


def recommendations(q: NegativeQuality) -> list[str]:
    """The seed 000 §219.2 recommendations for the rules the numbers trigger (in words)."""
    text = {
        "weak_separation": f"Cohen's d < {D_BANDS.healthy:.1f}: positive and negative scores overlap (seed, for "
                           "training: \"Improve negative sampling strategy\", \"Consider hard negative mining\"). In an "
                           "evaluation the negatives are part of the protocol, so read it as: the vectors separate true "
                           "edges from these negatives only weakly.",
        "false_negatives": f"False-negative rate {q.false_negative_rate:.1%} > {FALSE_NEGATIVE_RATE_LIMIT * 100:g} %: many "
                           "negatives are real edges (seed: \"verify ground truth\"); report filtered ranks, which drop "
                           "them.",
        "poor_auc": f"AUC {q.auc:.3f} < {AUC_BANDS.problematic:g}: poor discriminative power (seed: \"review embedding "
                    "model capacity\").",
        "easy_negatives": "Uniform negatives are easy (seed 000 §218.1.2, \"Easy Negatives\"): a high separation may say "
                          "more about the negatives than about the embedding; re-run with harder negatives "
                          "(same-batch, degree-matched, or hard negatives given as a negatives file).",
    }
    return [text[r] for r in q.rules] or [
        "No seed rule is triggered: positives and negatives are well separated and few negatives are real edges."]


def heuristic_definitions() -> str:
    """The heuristics' formulas (markdown), :math:`N(x)` the neighbours of x in the training graph."""
    return ("**Heuristics** ($N(x)$: neighbours of $x$ in the training graph, edges undirected; $C_{uv}$: the "
            "neighbours that $u$ and $v$ share): "
            + "; ".join(f"{HEURISTIC_SHORT[k]} ${f}$" for k, f in HEURISTIC_FORMULAS.items()) + ".")


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _text(m, fmt: str = ".3f") -> str:
    return "undefined" if m.value is None or not math.isfinite(m.value) else metric_text(m, fmt)


def protocol_markdown(r: lp.LinkPredictionResult) -> str:
    """The evaluation protocol in words: what every number in the chapter is conditioned on."""
    p, d = r.protocol, r.data
    filt = ("**filtered**: negatives that are known edges of the graph (train or test, either direction"
            + (", same relation" if d.relations else "") + ") are removed before ranking (Bordes et al. 2013)"
            if p["filtered"] else
            "**raw**: negatives are kept even when they are real edges (PyTorch-BigGraph's default; the filtered "
            "ranks are in the tie/filter table)")
    ties = {"realistic": "**realistic** ties: the mean of the optimistic and pessimistic rank, i.e. the expected rank "
                         "under random tie breaking (PyKEEN's recommended setting; PBG counts ties against the positive)",
            "optimistic": "**optimistic** ties: only strictly higher negatives count",
            "pessimistic": "**pessimistic** ties: negatives with an equal score count against the positive, as in PBG"}
    lines = [
        f"- **Test edges**: {d.split}; {p['n_test']:,} test edges, {p['n_train']:,} training edges"
        + (f" ({p['test_edges_also_in_edges']:,} test edges also listed in `edges` were removed from training)"
           if p.get("test_edges_also_in_edges") else "") + ".",
        f"- **Negatives**: {d.negatives}; a negative of $(u, v)$ is $(u, v')$ (destination corrupted).",
        f"- **Score**: {SCORE_NAMES[p['score']]}, ${SCORE_FORMULAS[p['score']]}$ (seed 000 Table 218.1); higher = more "
        "likely an edge.",
        f"- **Rank**: per query: each positive is ranked among its own {d.n_negatives} negatives only (rank 1 = best; "
        "seed 002), not in one pooled list; {}.".format(ties[p["ties"]]),
        f"- **Filter**: {filt}.",
        "- **Averaging**: over all test edges, each counting once (PBG's global average); per relation below."
        if d.relations else "- **Averaging**: over all test edges, each counting once (PBG's global average).",
        "- **AUC**: pooled, any positive against any negative (seed 002), exact over all pairs, ties ½.",
    ]
    return "\n".join(lines)


def narrative(r: lp.LinkPredictionResult) -> str:
    """What the numbers say for this set (markdown)."""
    v, m, e = r.values, r.metrics, r.expected
    N = float(r.n_candidates.mean())
    parts = []
    amri = v["amri"]
    strength = ("undefined" if not math.isfinite(amri) else "a near-perfect signal" if amri > 0.95 else
                "a strong signal" if amri > 0.8 else "a moderate signal" if amri > 0.5 else
                "a weak signal" if amri > 0.1 else "no better than chance")
    parts.append(
        f"**The vectors rank true edges {'well above' if amri > 0.5 else 'above' if amri > 0.1 else 'about at'} "
        f"chance.** Among each test edge's "
        f"{N - 1:.0f} negatives the true destination has mean rank {metric_text(m['mean_rank'], '.1f')} and MRR "
        f"{metric_text(m['mrr'], '.3f')}, against {e['mean_rank']:.1f} and {e['mrr']:.3f} for random scores; the adjusted "
        f"mean rank index is AMRI = {_text(m['amri'])} (0 = chance, 1 = perfect): {strength}. "
        f"Hits@10 = {v['hits_at_10']:.1%} (chance {e['hits_at_10']:.1%}), Hits@1 = {v['hits_at_1']:.1%}. "
        f"[{escape(r.tag)}]")
    auc_v = m["auc"].verdict
    parts.append(
        f"A random true edge outscores a random negative with probability AUC = {_text(m['auc'])}"
        + (f", which the seed's checklist (AUC {AUC_BANDS.edges} on held-out edges) reads as **{auc_v}**."
           if auc_v else ".")
        + (" AUC and MRR answer different questions: AUC counts every positive–negative pair, MRR only how close to "
           "the top each true edge lands, so a high AUC with a low MRR means true edges beat most negatives but "
           "rarely all of them." if v["auc"] > 0.85 and v["mrr"] < 0.3 else ""))
    tt = r.tie_table
    headline = "filtered" if r.protocol["filtered"] else "raw"
    raw = tt[(tt.ranks == "raw") & (tt.ties == r.protocol["ties"])].iloc[0]
    fil = tt[(tt.ranks == "filtered") & (tt.ties == r.protocol["ties"])].iloc[0]
    opt = tt[(tt.ranks == headline) & (tt.ties == "optimistic")].iloc[0]
    pes = tt[(tt.ranks == headline) & (tt.ties == "pessimistic")].iloc[0]
    q = r.quality
    parts.append(
        f"Raw and filtered ranks {'differ little' if abs(raw.MRR - fil.MRR) < 0.01 else 'differ'}: MRR {raw.MRR:.3f} raw "
        f"vs {fil.MRR:.3f} filtered, because {q.false_negative_rate:.2%} of the negatives ({q.n_false:,} of "
        f"{q.n_negatives:,}) are real edges of the graph. "
        + _ties_sentence(r.cs.ranks(r.protocol["filtered"]), opt.MRR, pes.MRR))
    rel = r.relation_table
    per = rel[~rel.relation.str.contains("average|macro")] if len(rel) > 1 else rel.iloc[:0]
    if len(per) > 1 and per.AMRI.notna().any():
        lo, hi = per.loc[per.AMRI.idxmin()], per.loc[per.AMRI.idxmax()]
        text = (f"By relation, AMRI ranges from {lo.AMRI:.3f} ({escape(lo.relation)}, {int(lo['test edges']):,} test "
                f"edges) to {hi.AMRI:.3f} ({escape(hi.relation)}).")
        if lo.AMRI < 0:
            text += (f" **For {escape(lo.relation)} edges the vectors do worse than chance**: negatives outscore the true "
                     "destination. This happens when the negatives are drawn from every kind of entity and the "
                     "source's own kind sits in a shared direction (see the isotropy chapter): any entity of that kind "
                     "then beats the true destination. Type-consistent negatives (`negative_pool = \"destinations\"`, "
                     "corrupting only with entities that are destinations of the same relation, as PBG's entity types "
                     "do) separate this effect from the ranking quality.")
        parts.append(text)
    if r.baselines is not None and len(r.baselines) > 1:
        b = r.baselines
        emb = b[b.name == "embedding"].iloc[0]
        heur = b[b.name != "embedding"]
        best = heur.loc[heur.MRR.idxmax()]
        lead = emb.MRR - best.MRR
        parts.append(
            f"Against structure alone (on {r.baseline_queries:,} test edges, heuristics computed on the training "
            f"graph): the embedding's MRR is {emb.MRR:.3f}, the best heuristic ({HEURISTIC_SHORT[best['name']]}) "
            f"reaches {best.MRR:.3f}. "
            + ("The vectors clearly add information beyond the graph's local structure." if lead > 0.05 else
               "The vectors do about as well as a trivial structural score." if lead > -0.05 else
               "**A trivial structural score beats the vectors**: they miss structure that common neighbours capture."))
    if r.probes is not None:
        pt = r.probes.table.set_index("name")
        parts.append(
            f"As a classifier (1:1 negatives), the best edge operator is {OPERATOR_LABELS[r.probes.best]} with ROC-AUC "
            f"{_text(m['probe_roc_auc'])} and average precision {_text(m['probe_average_precision'])}; the untrained "
            f"{SCORE_NAMES[r.protocol['score']]} gives ROC-AUC {pt.loc['score', 'ROC-AUC']:.3f}. "
            + ("A trained probe doing much better means the information is there but the chosen score does not read "
               "it out." if pt.loc[r.probes.best, "ROC-AUC"] - pt.loc["score", "ROC-AUC"] > 0.05 else
               "The fixed score already reads out most of what a trained probe finds."))
    parts.append(
        f"Negative quality (seed 000 §219.2): Cohen's d between positive and negative scores is "
        f"{_text(m['negative_score_cohens_d'], '.2f')}, quality band **{_quality_word(q)}**.")
    return "\n\n".join(parts)


def _ties_sentence(rk: Ranks, mrr_opt: float, mrr_pess: float) -> str:
    share = float((rk.optimistic != rk.pessimistic).mean())
    if share == 0:
        return "No positive ties with any of its negatives, so the tie policy does not matter here."
    if abs(mrr_opt - mrr_pess) < 0.005:
        return (f"{share:.2%} of the test edges tie with some negative; the tie policy barely matters here (MRR "
                f"{mrr_opt:.4f} optimistic vs {mrr_pess:.4f} pessimistic).")
    return (f"**Ties matter**: {share:.1%} of the test edges tie with some negative, and MRR is {mrr_opt:.3f} optimistic "
            f"vs {mrr_pess:.3f} pessimistic; the realistic rank is the fair middle, and a number reported without its "
            "tie policy is ambiguous.")


def _metrics_caption(r: lp.LinkPredictionResult) -> str:
    how = r.metrics["mrr"].ci_method
    return (f"Link-prediction metrics. Protocol in brackets; {r.data.split}; {r.data.negatives}. "
            f"Verdicts: {AUC_BANDS.table} (AUC {AUC_BANDS.edges}, AP {AP_BANDS.edges}; AUC below "
            f"{AUC_BANDS.problematic:g} poor), Cohen's d: {D_BANDS.table} ({D_BANDS.text}). "
            + (f"Intervals: {how} (Wilson for Hits, DeLong for AUC)." if how else
               "Too few test edges for intervals of the rank metrics."))


DEFINITIONS = (
    "**Definitions.** $r_i$ is the rank of test edge $i$ among its own $N_i = 1 + m_i$ candidates (rank 1 = best), "
    "$B$ the number of test edges, $\\mathbb{E}[\\cdot]$ the value expected when each $r_i$ is uniform on "
    "$1..N_i$ (random scores): $\\mathbb{E}[\\mathrm{MR}] = \\tfrac1B\\sum_i (N_i + 1)/2$, "
    "$\\mathbb{E}[\\mathrm{MRR}] = \\tfrac1B\\sum_i H_{N_i}/N_i$, $\\mathbb{E}[H_k] = \\tfrac1B\\sum_i \\min(k, N_i)/N_i$.")


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def rank_figure(r: lp.LinkPredictionResult) -> plt.Figure:
    """Left: distribution of the ranks against uniform (chance). Right: Hits@k for every k."""
    ranks, N = r.ranks, r.n_candidates
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.6))
    top = int(N.max())
    n_bins = int(min(top, 50))
    edges = np.linspace(0.5, top + 0.5, n_bins + 1)
    a.hist(ranks, bins=edges, color=PALETTE["data"], alpha=0.8, label="this embedding set")
    # expected count per bin when every rank is uniform on 1..N_i
    expected = sum(np.clip(np.minimum(edges[1:], n + 0.5) - np.maximum(edges[:-1], 0.5), 0, None) / n * c
                   for n, c in zip(*np.unique(N, return_counts=True)))
    a.stairs(expected, edges, color=PALETTE["reference"], lw=1.4, label="random scores (uniform ranks)")
    a.set(xlabel="Rank of the true destination (1 = best)", ylabel="Test edges", title="Rank distribution",
          xlim=(0.5, top + 0.5))
    a.legend(fontsize=8.5)
    k = np.arange(1, top + 1)
    hits = np.searchsorted(np.sort(ranks), k, side="right") / len(ranks)
    b.plot(k, hits, color=PALETTE["data"], lw=1.8, label="this embedding set")
    b.plot(k, np.minimum(k, top) / top, color=PALETTE["reference"], ls="--", lw=1.2, label="random scores")
    for kk in KS:
        if kk <= top:
            b.axvline(kk, color=PALETTE["muted"], ls=":", lw=0.8)
    b.set(xscale="log", xlabel="k", ylabel="Hits@k (share of ranks ≤ k)", ylim=(0, 1.02), title="Hits@k for every k")
    b.legend(fontsize=8.5, loc="upper left")
    return fig


def probe_curves_figure(p: ProbeResult) -> plt.Figure:
    """ROC and precision–recall curves of every probe and of the raw score (1:1 test pairs)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    colors = dict(zip(OPERATORS, [PALETTE["data"], PALETTE["accent"], "#7b4ea3", "#2b8a8a"]), score=PALETTE["reference"])
    t = p.table.set_index("name")
    for name, c in p.curves.items():
        lw, alpha = (2.2, 1.0) if name in (p.best, "score") else (1.0, 0.6)
        short = "raw score" if name == "score" else name.replace("_", "-")
        a.plot(c["fpr"], c["tpr"], color=colors[name], lw=lw, alpha=alpha,
               label=f"{short} (AUC {t.loc[name, 'ROC-AUC']:.3f})")
        b.plot(c["recall"], c["precision"], color=colors[name], lw=lw, alpha=alpha,
               label=f"{short} (AP {t.loc[name, 'average precision']:.3f})")
    a.plot([0, 1], [0, 1], color=PALETTE["muted"], ls=":", lw=1, label="chance")
    a.set(xlabel="False-positive rate", ylabel="True-positive rate", title="ROC curves", xlim=(0, 1), ylim=(0, 1.01))
    b.axhline(0.5, color=PALETTE["muted"], ls=":", lw=1, label="chance (1:1)")
    b.set(xlabel="Recall", ylabel="Precision", title="Precision–recall curves", xlim=(0, 1), ylim=(0, 1.01))
    a.legend(fontsize=8, loc="lower right")
    b.legend(fontsize=8, loc="lower left")
    return fig


def separation_figure(r: lp.LinkPredictionResult, seed: int = 0) -> plt.Figure:
    """Positive vs negative score distributions (histograms and empirical CDFs, KS distance)."""
    pos, neg = r.cs.pooled(False)
    rng = np.random.default_rng([seed, 90, 7])
    if len(neg) > TEST_SAMPLE:
        neg = rng.choice(neg, TEST_SAMPLE, replace=False)
    q = r.quality
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.5))
    lo, hi = np.percentile(np.r_[pos, neg], [0.5, 99.5])
    for x in (pos, neg):  # a handful of scores may all lie outside the central 99 %: widen to show them
        if not ((x >= lo) & (x <= hi)).any():
            lo, hi = min(lo, x.min()), max(hi, x.max())
    if not hi > lo:  # every score the same: one bin around it
        lo, hi = lo - 0.5, hi + 0.5
    bins = np.linspace(lo, hi, 60)
    a.hist(neg, bins=bins, density=True, alpha=0.55, color=PALETTE["reference"], label="negatives")
    a.hist(pos, bins=bins, density=True, alpha=0.55, color=PALETTE["data"], label="positives (test edges)")
    a.axvline(q.neg_mean, color=PALETTE["reference"], ls="--", lw=1.2)
    a.axvline(q.pos_mean, color=PALETTE["data"], ls="--", lw=1.2)
    d = f"{q.cohens_d:.2f}" if math.isfinite(q.cohens_d) else "undefined"
    a.set(xlabel=f"Score ({SCORE_NAMES[r.protocol['score']]})", ylabel="Density",
          title=f"Score distributions (Cohen's d = {d})")
    a.legend(fontsize=8.5)
    for x, c, lab in ((neg, PALETTE["reference"], "negatives"), (pos, PALETTE["data"], "positives")):
        xs = np.sort(x)
        b.plot(xs, np.arange(1, len(xs) + 1) / len(xs), color=c, lw=1.6, label=lab)
    b.set(xlabel="Score", ylabel="Cumulative share", title=f"Empirical CDFs (KS = {q.ks_statistic:.3f})")
    b.legend(fontsize=8.5, loc="lower right")
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_protocol(rep: LinkPredictionReport) -> None:
    for note in rep.notes:
        callout("note", escape(note), title="Protocol adapted to this input")
    show_markdown(protocol_markdown(rep.result))


def show_summary(rep: LinkPredictionReport) -> None:
    show_markdown(narrative(rep.result))


def show_metrics(rep: LinkPredictionReport) -> None:
    show_metric_table(rep.result.metrics, caption=_metrics_caption(rep.result), label="tbl-linkpred-metrics",
                 definitions=DEFINITIONS)


def show_ties(rep: LinkPredictionReport) -> None:
    show_table(rep.result.tie_table, caption="Mean rank, MRR, Hits and AMRI of all test edges under each tie policy, "
                                             "raw and filtered ('mean candidates' drops when filtering removes "
                                             "negatives).", label="tbl-linkpred-ties")


def show_relations(rep: LinkPredictionReport) -> None:
    r = rep.result
    if len(r.relation_table) > 1:
        show_table(r.relation_table, caption=f"Metrics within each relation [{r.tag}].", label="tbl-linkpred-relations")
    else:
        show_markdown("The edge list has no `relation` column (or a single relation): every test edge is one group.")


def show_ranks(rep: LinkPredictionReport) -> None:
    r = rep.result
    show_figure(rank_figure(r),
                caption=f"Left: histogram of the ranks of the {len(r.ranks):,} test edges against uniform ranks (random "
                        f"scores). Right: Hits@k against k; dotted lines at k = {', '.join(map(str, KS))} [{r.tag}].",
                label="fig-linkpred-ranks")


def show_heuristics(rep: LinkPredictionReport) -> None:
    r = rep.result
    if r.baselines is None:
        return
    show_table(baseline_display_table(r.baselines),
               caption=f"Embedding vs heuristics on {r.baseline_queries:,} test edges [{r.tag}]. MRR interval: "
                       "bootstrap / normal over these test edges. 'ties in rank': share of test edges whose optimistic "
                       "and pessimistic rank differ.", label="tbl-linkpred-heuristics")
    show_markdown(heuristic_definitions())


def show_probes(rep: LinkPredictionReport) -> None:
    p = rep.result.probes
    if p is None:
        show_markdown(f"Too few training or test edges for the probes (need {lp.MIN_PROBE_EDGES} of each).")
        return
    show_table(probe_display_table(p),
               caption=f"ROC-AUC and average precision on {p.n_test:,} test pairs (1:1); probes trained on "
                       f"{p.n_train:,} training pairs. {p.ci_method}.", label="tbl-linkpred-probes")
    show_figure(probe_curves_figure(p),
                caption="ROC (left) and precision–recall (right) curves of each probe and of the raw score; thick "
                        "lines: the best operator and the raw score.", label="fig-linkpred-probes")


def show_quality(rep: LinkPredictionReport) -> None:
    r = rep.result
    show_table(quality_table(r.quality), caption=f"Separation of positive and negative scores ({rep.score} score, raw "
               "negatives). With hundreds of thousands of scores every test is significant: read the effect sizes "
               "(d, KS, U).", label="tbl-linkpred-quality")
    show_figure(separation_figure(r, seed=rep.seed),
                caption="Scores of the test edges and of their negatives: densities with means (dashed), and empirical "
                        "CDFs whose largest vertical gap is the KS statistic.", label="fig-linkpred-separation")
    callout("note" if r.metrics["negative_score_cohens_d"].verdict == "healthy" else "warning",
            "\n".join(f"- {x}" for x in rep.recommendations), title="Recommendations (seed 000 §219.2)")
    show_hardness(rep)


def suspects_table(r: lp.LinkPredictionResult, ids, n: int = SUSPECTS_LISTED) -> pd.DataFrame:
    """The highest-scoring suspected false negatives by id: the test edge, the negative destination, its score,
    the share of positive scores it beats, and whether it is a known edge of the graph. A negative drawn twice for
    the same test edge is listed once."""
    sp, test = r.suspects, r.data.test
    ids = np.asarray(ids, dtype=object)
    m = min(len(sp.rows), 4 * n)  # enough rows to list n distinct ones after dropping repeats
    rows, cols = sp.rows[:m], sp.cols[:m]
    neg = r.data.candidates[rows, 1 + cols]
    table = pd.DataFrame({"source": [str(ids[u]) for u in test.src[rows]],
                          "true destination": [str(ids[v]) for v in test.dst[rows]],
                          "negative": [str(ids[v]) for v in neg], "score": sp.scores[:m],
                          "beats positives": [f"{b:.1%}" for b in sp.beats[:m]],
                          "known edge": ["yes" if k else "" for k in sp.known[:m]]})
    return table.drop_duplicates(["source", "true destination", "negative"]).head(n).reset_index(drop=True)


def show_hardness(rep: LinkPredictionReport) -> None:
    """Negative hardness by rank range and the suspected false negatives by id."""
    r = rep.result
    if r.hardness is None or r.suspects is None or not len(r.hardness):
        return
    show_table(r.hardness, caption="Hardness of the negatives by their rank among their own test edge's negatives "
                                   "(1 = the highest-scoring negative of that edge; raw negatives). 'above their "
                                   "positive': share that outscore the true destination; 'known edges': share that "
                                   "are edges of the graph (false negatives).", label="tbl-linkpred-hardness")
    sp = r.suspects
    m = r.metrics.get("negatives_above_most_positives")
    head = (f"**{sp.n:,} of {sp.n_negatives:,} negatives ({_text(m, '.1%') if m else f'{sp.rate:.1%}'}) score above "
            f"{sp.quantile:.0%} of the positives** (score > {sp.threshold:.3g}); with scores unrelated to edges "
            f"{1 - sp.quantile:.0%} would. Negatives that beat most true edges are either true edges missing from the "
            "graph (false negatives) or entities the score ranks high for every source (hubs).")
    show_markdown(head)
    if sp.n:
        show_table(suspects_table(r, rep.ids), caption=f"The {min(sp.n, SUSPECTS_LISTED)} highest-scoring suspected "
                   "false negatives ('beats positives': the share of all positive scores below it).",
                   label="tbl-linkpred-suspects")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------


def findings(r: ChapterResults) -> list[Finding]:
    """Loses to a free graph heuristic: a heuristic's MRR interval lies above the embeddings' on the same test
    edges (the chapter ranks both; no paired test is recorded, so the two intervals decide)."""
    rows = r.info.get("heuristics") or []
    mine = next((h for h in rows if h["method"].startswith("embedding")), None)
    if mine is None:
        return []
    lo_hi = lambda h: [float(x) for x in str(h.get("MRR 95 % CI", "nan – nan")).split(" – ")]  # noqa: E731
    m_lo, m_hi = lo_hi(mine)
    better = [h for h in rows if h is not mine and lo_hi(h)[0] > m_hi]
    if not better:
        return []
    best = max(better, key=lambda h: h["MRR"])
    return [Finding(
        "problematic", "model", r.name, f"The vectors lose to the {best['method']} heuristic",
        f"Prefer the free {best['method']} score over these vectors for link prediction: MRR {best['MRR']:.3f} "
        f"({best['MRR 95 % CI']}) against {mine['MRR']:.3f} ({mine['MRR 95 % CI']}) on the same test edges.",
        metrics=("mrr",), evidence={"value": mine["MRR"], "ci_low": m_lo, "ci_high": m_hi, "baseline": best["method"],
                                    "baseline_value": best["MRR"]}, rule="baseline", effect="baselines")]


CHAPTER = ChapterSpec(
    name="link_prediction", title="Link prediction", order=90,
    description="Do the vectors rank held-out edges above their negatives? MR, MRR, Hits@1/10/50, AUC and chance-adjusted AMRI (seed 002, PyTorch-BigGraph), raw vs filtered ranks and tie policies, per relation; edge-operator probes; graph-heuristic baselines; negative-sampling quality (seed 000 §218.1, §219.2).",
    requires=("edges",), optional=("test_edges", "negatives", "score"),
    options=LINK_OPTIONS, precheck=precheck, demo="graph",
    effects=(Effect("edge separation", ("auc", "probe_roc_auc", "probe_average_precision", "negative_score_cohens_d"),
                    "The vectors barely separate held-out edges from non-edges",
                    "Do not use these vectors for link prediction as they are:"),),
    findings=findings, scorer=SCORER,
)
