"""The temporal link-prediction chapter: the protocol, what the numbers say, the metric table,
performance by horizon, several cuts and the random-split comparison (computed in
:mod:`embeval_report.metrics.temporal`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass
from functools import partial

import matplotlib.pyplot as plt
import numpy as np

from ..errors import ChapterSkipped, InputError
from ..io.graph import EdgeList
from ..metrics import linkpred as lp
from ..metrics import temporal as tp
from ..metrics.scoring import Aggregate, TaskScorer, check_units, weighted_mean
from ..metrics.graph import HEURISTIC_FORMULAS, HEURISTIC_SHORT, MIN_POOL, format_time
from ..present.format import metric_text
from ..present.display import callout, escape, show_figure, show_markdown, show_table
from ..present.display import show_metrics as show_metric_table
from ..present.plotting import PALETTE, WIDTH
from .declaration import LINK_OPTIONS, ChapterSpec
from .findings import ChapterResults, Finding, metric_evidence, value_text

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["TemporalReport", "compute", "horizon_figure", "precheck", "show_cuts", "show_horizons", "show_leakage",
           "show_metrics", "show_summary", "temporal_narrative", "temporal_protocol_markdown", "temporal_unavailable"]


@dataclass(frozen=True)
class TemporalReport:
    """Everything the chapter shows (``result`` is ``None`` when the edges have no timestamps)."""

    result: tp.TemporalResult | None
    edges: EdgeList
    unused: list  # manifest fields this chapter does not use (test_edges, negatives)


def precheck(es, side, settings) -> str | None:
    """Why the chapter cannot run: too few entities for negatives, or every edge at one time (no cut
    separates past from future). Edges without timestamps are explained in the chapter instead."""
    if side is None or side.edges is None:
        return None
    if es.n < MIN_POOL:
        return (f"needs at least {MIN_POOL} entities to draw negatives (a negative differs from both ends of its "
                f"test edge); the set has {es.n}")
    e = side.edges
    if e.has_time and len(np.unique(e.time)) < 2:
        return (f"a temporal split needs edges at two or more distinct times; the {len(e):,} edge(s) share one "
                "timestamp, so no cut separates past from future")
    return None


def temporal_inputs(es, side, settings) -> lp.LinkInputs:
    """The edges (:class:`ChapterSkipped` without timestamps: nothing to split by time)."""
    if not side.edges.has_time:
        raise ChapterSkipped("the edges have no timestamp column")
    return lp.LinkInputs.of(es, side, settings)


def temporal_plan(inputs: lp.LinkInputs, settings) -> tp.TemporalPlan:
    """The split at the cut, its negatives and each test edge's horizon, from the edges, the options and the seed."""
    try:
        option = settings.option
        return tp.temporal_plan(inputs.side.edges, inputs.n, inputs.ids, train_fraction=1 - option("test_fraction"),
                                score=inputs.score, ties=option("ties"), filtered=option("filtered"),
                                n_negatives=option("n_negatives"), strategy=option("negative_strategy"),
                                pool=option("negative_pool"), seed=settings.seed)
    except InputError as e:
        raise ChapterSkipped(str(e)) from None


#: temporal link prediction scored per test edge after the cut (with its horizon): its rank among its negatives
SCORER = TaskScorer(
    unit="test edges", key="edge",
    columns=tuple(f"{tp.PREFIX}{m}" for m in lp.RANK_MEANS) + ("n_candidates", "auc_placement", "bin", "horizon"),
    aggregates=(Aggregate("temporal_mrr", mean_of="temporal_mrr"),
                Aggregate("temporal_hits_at_10", mean_of="temporal_hits_at_10"),
                Aggregate("temporal_auc", fn=lp.placement_auc, unit_column="auc_placement",
                          boot=partial(weighted_mean, column="auc_placement")),
                Aggregate("temporal_amri", fn=partial(lp.adjusted, name="mean_rank", prefix=tp.PREFIX),
                          unit_column="temporal_mean_rank",
                          boot=partial(lp.adjusted_weighted, name="mean_rank", prefix=tp.PREFIX)),
                Aggregate("mrr_change_over_horizon", fn=tp.horizon_change, boot=tp.horizon_change_weighted)),
    inputs=temporal_inputs, plan=temporal_plan,
    score=lambda X, inputs, plan: tp.run_temporal(X, plan, device=inputs.device).per_edge)


def compute(ctx: ChapterContext) -> TemporalReport:
    """Evaluate before/after a cut, by horizon, at several cuts and against a random split; record every number."""
    edges = ctx.side.edges
    unused = [f for f in ("test_edges", "negatives") if ctx.es.has(f)]
    if not edges.has_time:
        ctx.rec.note(not_run="the edges have no timestamp column")
        return TemporalReport(None, edges, unused)
    inputs = SCORER.inputs(ctx.es, ctx.side, ctx.settings)
    plan = SCORER.plan(inputs, ctx.settings)
    run = tp.run_temporal(ctx.es.vectors, plan, device=inputs.device)  # the scorer's units, with the scores
    units = check_units(run.per_edge, SCORER.key, SCORER.columns)
    try:
        result = tp.evaluate_temporal(
            ctx.es.vectors, edges, ctx.es.n, train_fraction=1 - ctx.option("test_fraction"),
            score=plan.score, ties=plan.ties, filtered=plan.filtered,
            n_negatives=ctx.option("n_negatives"), strategy=ctx.option("negative_strategy"),
            pool=ctx.option("negative_pool"), max_heuristic_queries=ctx.option("heuristic_queries"), level=ctx.level,
            seed=ctx.seed, device=ctx.device, plan=plan, cs=run.cs)
    except InputError as e:
        raise ChapterSkipped(str(e)) from None
    ctx.rec.add(*result.metrics.values())
    ctx.rec.scored(SCORER, units, plan)
    ctx.rec.note(cut=format_time(result.cut, result.is_date), protocol_tag=result.tag,
                 by_horizon=result.horizon.to_dict(orient="records"), by_cut=result.cuts.to_dict(orient="records"),
                 random_vs_temporal=result.leakage.to_dict(orient="records"),
                 # the link-prediction chapter's protocol on the same side data: its own time split, or the given
                 # test edges / negatives (which may have been drawn at random)
                 link_prediction_split="given" if unused else "time")
    return TemporalReport(result, edges, unused)


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def temporal_protocol_markdown(t: tp.TemporalResult) -> str:
    """The temporal protocol in words."""
    d = t.data
    return "\n".join([
        f"- **Cut**: {format_time(t.cut, t.is_date)}, the time of the edge at the "
        f"{len(d.train) / (len(d.train) + len(d.test)):.0%} quantile; {len(d.train):,} training edges are strictly "
        f"before it, {len(d.test):,} test edges at or after it (seed 000 §218.2.1). No random split is used.",
        f"- **Horizons**: the test edges are binned by time since the cut into {len(t.horizon) - 1} equal-width bins; "
        "the first row scores a sample of training edges the same way, as a reference.",
        f"- **Negatives**: {d.negatives}; **ranks**: {escape(t.tag)}.",
        f"- **Heuristic**: {HEURISTIC_SHORT[t.heuristic]} (${HEURISTIC_FORMULAS[t.heuristic]}$, $N(x)$ the neighbours "
        "of $x$, $C_{uv}$ those shared by $u$ and $v$) on the graph of edges before the cut "
        f"({t.info['heuristic_queries']:,} test edges).",
    ])


def _text(m, fmt: str = ".3f", ci: bool = True) -> str:
    if m.value is None or not math.isfinite(m.value):
        return "undefined"
    return metric_text(m, fmt) if ci else format(m.value, fmt)


def _excludes_zero(m) -> bool:
    """Whether the interval of ``m`` lies strictly on one side of 0 (a zero-width interval, from scores that
    do not vary, says nothing)."""
    return m.has_ci and m.ci_high > m.ci_low and (m.ci_high < 0 or m.ci_low > 0)


def temporal_narrative(t: tp.TemporalResult) -> str:
    """What the temporal numbers say (markdown), including why random splits leak."""
    v, m = t.values, t.metrics
    h = t.horizon
    parts = [f"After the cut the vectors reach MRR {_text(m['temporal_mrr'])}, Hits@10 {v['temporal_hits_at_10']:.1%} "
             f"and AUC {_text(m['temporal_auc'])} (AMRI {_text(m['temporal_amri'], ci=False)}). "
             f"On training edges before the cut, scored the same way, MRR is {h.iloc[0].MRR:.3f}."]
    if "mrr_change_over_horizon" in v:
        ch = m["mrr_change_over_horizon"]
        first, last = h.iloc[1], h.iloc[-1]
        sig = _excludes_zero(ch)
        parts.append(
            f"From the first horizon ({escape(first.horizon)}) to the last ({escape(last.horizon)}) MRR moves from "
            f"{first.MRR:.3f} to {last.MRR:.3f}, a change of {_text(ch)}. "
            + (("**Performance decays with the horizon**: the later an edge forms, the less the vectors anticipate it, "
                "the signature of concept drift (seed 000 §218.2.5). Re-train or refresh the vectors more often than "
                "the span over which the drop appears." if ch.value < 0 else
                "Performance rises with the horizon.") if sig else
               "The change is within the noise: performance is stable across these horizons."
               if ch.has_ci else
               "Too few test edges per horizon to tell a change from noise."))
    gap = m["random_split_mrr_gap"]
    lk = t.leakage
    hcol = [c for c in lk.columns if c.startswith("MRR (") and "embedding" not in c][0]
    parts.append(
        f"**Why random splits leak** (seed 000 §218.2.2). A random split puts future edges in training and past edges in "
        f"test: a model, or a structural heuristic, trained on that graph sees neighbourhoods that did not exist when "
        f"the test edges formed (direct leakage), and the graph's degree and clustering structure reflect its future "
        f"(structural leakage). Here a random split with the same test share gives MRR {lk.iloc[1]['MRR (embedding)']:.3f} "
        f"for the vectors against {lk.iloc[0]['MRR (embedding)']:.3f} under the temporal split (gap {_text(gap)}), and "
        f"{lk.iloc[1][hcol]:.3f} vs {lk.iloc[0][hcol]:.3f} for {HEURISTIC_SHORT[t.heuristic]} "
        "fitted on the training graph. "
        + ("The random split looks better: that optimism is what a random split would have reported. "
           if gap.value > 0 and _excludes_zero(gap) else "")
        + "The vectors themselves are fixed, so these numbers are honest only if they were trained on edges before the "
          "cut; the report cannot check that. If they were trained on all edges, every number here measures "
          "memorisation rather than prediction.")
    return "\n\n".join(parts)


def temporal_unavailable(edges: EdgeList | None) -> str:
    """Why the temporal chapter cannot run, and what would enable it (markdown)."""
    return ("The edge list has no `timestamp` column, so there is no past and future to separate. Add a `timestamp` "
            "column to `edges` (a number such as a Unix time, or a date/time such as `2024-03-05` or "
            "`2024-03-05T14:00`) with the time each edge formed; this chapter will then train before a cut and test "
            "after it, by horizon. The link-prediction chapter meanwhile uses a seeded random split"
            + (f" of the {len(edges):,} edges." if edges is not None else "."))


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def horizon_figure(t: tp.TemporalResult) -> plt.Figure:
    """Left: edges over time with the cut and the horizon bins. Right: MRR (and chance, heuristic) by horizon."""
    scale, unit = t.info["scale"], t.info["unit"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.7))
    x = (t.times - t.cut) / scale
    test_edges = (t.bin_edges - t.cut) / scale
    width = float(test_edges[1] - test_edges[0])
    back = -width * np.arange(int(np.ceil(-x.min() / width)) + 1)[::-1] if width > 0 else np.array([x.min(), 0.0])
    a.hist(x[x < 0], bins=back, color=PALETTE["muted"], alpha=0.8, label="training edges")
    a.hist(x[x >= 0], bins=test_edges, color=PALETTE["data"], alpha=0.8, label="test edges (horizon bins)")
    a.axvline(0, color=PALETTE["reference"], lw=1.5, label="cut")
    a.set(xlabel=f"Time relative to the cut ({unit})", ylabel="Edges", title="Edges over time")
    a.legend(fontsize=8.5, loc="lower left", framealpha=0.95)
    h = t.horizon.iloc[1:]
    ref = t.horizon.iloc[0]
    yerr = np.clip(np.vstack([h.MRR - h["MRR low"], h["MRR high"] - h.MRR]), 0, None)  # rounding: constant ranks
    b.errorbar(h["mid"], h.MRR, yerr=yerr, fmt="o-", color=PALETTE["data"], capsize=3, lw=1.8, label="vectors (95 % CI)")
    if "heuristic MRR" in h:
        b.plot(h["mid"], h["heuristic MRR"], "s--", color=PALETTE["accent"], lw=1.2,
               label=f"{t.heuristic.replace('_', '–')} (graph before cut)")
    b.plot(h["mid"], h["chance MRR"], ":", color=PALETTE["reference"], lw=1.2, label="random scores")
    b.axhline(ref.MRR, color=PALETTE["muted"], ls="--", lw=1, label="training edges (before cut)")
    b.set(xlabel=f"Horizon: time since the cut ({unit})", ylabel="MRR", title="MRR by horizon",
          ylim=(0, max(1e-3, float(np.nanmax(np.r_[h["MRR high"], h.MRR, ref.MRR]))) * 1.15))
    b.legend(fontsize=8, loc="best")
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

NOT_AVAILABLE = "Not available without timestamps."


def show_summary(rep: TemporalReport) -> None:
    t = rep.result
    if t is None:
        callout("note", temporal_unavailable(rep.edges), title="No timestamps: temporal evaluation not possible")
        return
    show_markdown(temporal_protocol_markdown(t))
    if rep.unused:
        show_markdown("The manifest's " + " and ".join(f"`{f}`" for f in rep.unused) + " are not used here: the cut "
                      "defines the test edges, and their negatives are sampled (the link-prediction chapter uses them).")
    show_markdown(temporal_narrative(t))


def show_metrics(rep: TemporalReport) -> None:
    if rep.result is None:
        show_markdown(NOT_AVAILABLE)
        return
    show_metric_table(rep.result.metrics, label="tbl-temporal-metrics",
                 caption="Temporal link-prediction metrics (test edges after the cut). No verdicts: the seeds give no "
                         "threshold for stability over horizons, and the AUC's verdict is in the link-prediction "
                         "chapter.")


def show_horizons(rep: TemporalReport) -> None:
    t = rep.result
    if t is None:
        show_markdown(NOT_AVAILABLE)
        return
    show_figure(horizon_figure(t),
                caption="Left: edges over time, the cut and the horizon bins of the test edges. Right: MRR of the "
                        "vectors in each bin (95 % intervals), of the heuristic fitted on the graph before the cut, of "
                        f"random scores, and on training edges before the cut (dashed) [{t.tag}].",
                label="fig-temporal-horizon")
    show_table(t.horizon.drop(columns=["mid"], errors="ignore"),
               caption=f"Metrics by horizon (time since the cut) [{t.tag}]. 'MRR low/high': 95 % interval.",
               label="tbl-temporal-horizon")


def show_cuts(rep: TemporalReport) -> None:
    t = rep.result
    if t is None or not len(t.cuts):
        show_markdown(NOT_AVAILABLE if t is None else "No other cut leaves edges on both sides.")
        return
    show_table(t.cuts, caption=f"Test edges after each cut [{t.tag}].", label="tbl-temporal-cuts")


def show_leakage(rep: TemporalReport) -> None:
    t = rep.result
    if t is None:
        show_markdown(NOT_AVAILABLE)
        return
    show_table(t.leakage, caption="MRR under the temporal split and under a random split with the same test share "
                                  f"[{t.tag}].", label="tbl-temporal-leakage")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

def findings(r: ChapterResults) -> list[Finding]:
    """Performance falls with the horizon, and a random split overstates it (a protocol finding)."""
    return [f for f in (_horizon_finding(r), _random_split_finding(r)) if f is not None]


def _random_split_finding(r: ChapterResults) -> Finding | None:
    """A random split reports a higher MRR than the temporal one (the gap's 95 % interval above 0): link
    prediction judged on a random split is optimistic (seed 000 §218.2.2), concerning, an evaluation finding. Only
    where this report's link prediction may rest on such a split: the link-prediction chapter splits timestamped
    edges by time itself, so only given test edges or negatives (of unknown origin) can be a random split."""
    m = r.metric("random_split_mrr_gap")
    if not m or m.get("ci_low") is None or not m["ci_low"] > 0 or r.info.get("link_prediction_split") != "given":
        return None
    rows = r.info.get("random_vs_temporal", [])
    mrr = [row.get("MRR (embedding)") for row in rows[:2]]
    values = (f" (MRR {mrr[1]:.3f} on a random split vs {mrr[0]:.3f} after the cut)"
              if len(mrr) == 2 and all(isinstance(x, (int, float)) for x in mrr) else "")
    return Finding(
        "concerning", "protocol", r.name, "A random split overstates link prediction",
        f"Judge link prediction on the temporal split, not a random one: a random split of the same edges puts "
        f"future edges in training and reports MRR higher by {value_text(m)}{values}, optimism the deployed model "
        "will not have (seed 000 §218.2.2). The link-prediction chapter uses the given test edges: if they were "
        "drawn at random, its numbers carry this optimism.",
        metrics=("random_split_mrr_gap",), evidence=metric_evidence(m, "random_split_mrr_gap"),
        rule="event", effect="random split")


def _horizon_finding(r: ChapterResults) -> Finding | None:
    """The MRR change from the first to the last horizon below 0 (its 95 % interval); problematic when the last
    horizon's MRR interval reaches chance."""
    m = r.metric("mrr_change_over_horizon")
    if not m or m.get("ci_high") is None or not m["ci_high"] < 0:
        return None
    rows = [h for h in r.info.get("by_horizon", []) if isinstance(h.get("mid"), (int, float))]
    last = rows[-1] if rows else {}
    at_chance = bool(last) and last.get("MRR low", 1.0) <= last.get("chance MRR", 0.0)
    return Finding(
        "problematic" if at_chance else "concerning", "model", r.name,
        "Link prediction degrades the further ahead it predicts",
        f"Retrain more often than the horizon over which it degrades: MRR changes by {value_text(m)} from the first "
        f"to the last horizon" + (f" ({last.get('horizon')}: MRR {last.get('MRR', float('nan')):.3f}, chance "
                                  f"{last.get('chance MRR', float('nan')):.3f})" if last else "") + ".",
        metrics=("mrr_change_over_horizon", "temporal_mrr"), evidence=metric_evidence(m, "mrr_change_over_horizon"),
        rule="event", effect="horizon")


CHAPTER = ChapterSpec(
    name="temporal_link_prediction", title="Temporal link prediction", order=92,
    description="Train before a cut, test after it: MRR, Hits@10 and AUC by horizon, at several cuts, and against a random split to show its leakage (seed 000 §218.2). Needs timestamps on the edges.",
    requires=("edges",), optional=("score",),
    options=LINK_OPTIONS, precheck=precheck, demo="graph",
    findings=findings, scorer=SCORER,
)
