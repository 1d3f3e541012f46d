"""The Anomaly-detection chapter: how well anomaly scores — the user's own detector's, and four baselines
read off the embeddings — separate the labelled anomalies from normal rows, what alerting on them would
cost, and how soon incidents would be caught (computed in :mod:`embeval_report.metrics.anomaly`)."""
from __future__ import annotations

from dataclasses import replace

from typing import TYPE_CHECKING

import math
import re
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import ChapterSkipped
from ..io.anomaly_scores import anomaly_labels, event_columns, label_column
from ..metrics import anomaly as an
from ..metrics.scoring import Aggregate, TaskScorer, check_units
from ..present.display import escape, show_figure, show_markdown, show_table
from ..present.display import show_metrics as show_metric_table
from ..present.escape import mathtext
from ..present.format import percent, value_with_ci
from ..present.plotting import PALETTE, WIDTH
from ..stats import HypothesisTest, delong_paired
from .declaration import INF, ChapterSpec, K, Option
from .findings import ChapterResults, Finding, baseline_finding, metric_evidence, value_text

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["AnomalyReport", "comparison_table", "compute", "cost_figure", "curves_figure", "distribution_figure",
           "narrative", "precheck", "show_comparison", "show_cost", "show_curves", "show_detection",
           "show_distributions", "show_metrics", "show_operating_points", "show_protocol", "show_summary"]

#: colours of the detectors, in order (the primary first)
COLOURS = ("#3b6ea8", "#c2542d", "#6a8f3a", "#8e5ea2", "#b7791f", "#2a9d8f", "#6d6d6d", "#d16ba5")
#: detectors shown in the score-distribution figure
SHOWN_DISTRIBUTIONS = 5


@dataclass(frozen=True)
class AnomalyReport:
    """Everything the chapter shows."""

    result: an.AnomalyResult
    label_column: str
    user_columns: tuple        # detectors from the user's scores file
    scores_file: str | None
    k: int


def precheck(es, side, settings) -> str | None:
    """Why the chapter cannot run: no labelled rows of both classes, or fewer than 3 vectors. A label
    that is not 0/1 is bad input (:class:`~embeval_report.errors.InputError`, the run stops)."""
    if label_column(es.metadata) is None:
        return "needs an `is_anomaly` (or `anomaly`) 0/1 column in `metadata`"
    return _label_problem(*anomaly_labels(es.metadata), es.n)


def _label_problem(column: str, y: np.ndarray, n_rows: int) -> str | None:
    p, n = int(np.sum(y == 1)), int(np.sum(y == 0))
    if p == 0 or n == 0:
        return (f"the `{column}` column has {'no anomaly (1)' if p == 0 else 'no normal row (0)'} among its "
                f"{p + n:,} labelled rows; detection needs both classes")
    if n_rows < 3:
        return f"the embedding baselines need at least 3 vectors; the set has {n_rows}"
    return None


@dataclass(frozen=True)
class AnomalyInputs:
    """The scorer's inputs: the label column, the label of every row (1, 0, NaN unlabelled), the ids, the device."""

    column: str
    labels: np.ndarray
    ids: np.ndarray
    device: str = "auto"

    @property
    def rows(self) -> np.ndarray:
        """The labelled rows (the units), in row order."""
        return np.flatnonzero(np.isfinite(self.labels))


@dataclass(frozen=True)
class AnomalyPlan:
    """The k of the k-NN distance (the ``k`` option, at most n − 2): nothing else is drawn."""

    k: int


def anomaly_inputs(es, side, settings) -> AnomalyInputs:
    """The labels of the ``is_anomaly`` (or ``anomaly``) column; :class:`ChapterSkipped` where :func:`precheck`
    finds no labelled rows of both classes or too few vectors."""
    if label_column(es.metadata) is None:
        raise ChapterSkipped(precheck(es, side, settings))
    column, y = anomaly_labels(es.metadata)
    reason = _label_problem(column, y, es.n)
    if reason:
        raise ChapterSkipped(reason)
    return AnomalyInputs(column, y, np.asarray(es.ids, dtype=object), settings.device)


def anomaly_plan(inputs: AnomalyInputs, settings) -> AnomalyPlan:
    return AnomalyPlan(max(1, min(int(settings.option("k")), len(inputs.labels) - 2)))


def anomaly_units(inputs: AnomalyInputs, knn_distance: np.ndarray) -> pd.DataFrame:
    """One row per labelled row: its id, its k-NN distance (of every row's, ``knn_distance``) and its label."""
    rows = inputs.rows
    return pd.DataFrame({"id": inputs.ids[rows].astype(str), "knn_distance": np.asarray(knn_distance)[rows],
                         "label": inputs.labels[rows].astype(np.int64)})


def score_rows(X, inputs: AnomalyInputs, plan: AnomalyPlan) -> pd.DataFrame:
    """The k-NN-distance baseline of the vectors, per labelled row (:func:`anomaly_units`)."""
    _, dist = an.neighbour_graph(X, plan.k, device=inputs.device)
    return anomaly_units(inputs, an.knn_distance_scores(dist))


#: the vectors' own detector (the k-NN distance), scored per labelled row; a user's detector scores are not the
#: vectors' and stay out
SCORER = TaskScorer(
    unit=an.UNIT, key="id", columns=("knn_distance", "label"),
    aggregates=(Aggregate("roc_auc__knn_distance", fn=an.units_roc_auc, boot=an.units_roc_auc_weighted),
                Aggregate("average_precision__knn_distance", fn=an.units_average_precision,
                          boot=an.units_average_precision_weighted)),
    inputs=anomaly_inputs, plan=anomaly_plan, score=score_rows)


def compute(ctx: ChapterContext) -> AnomalyReport:
    """Score the rows (baselines, and the user's detector when given), evaluate, and record."""
    es, side = ctx.es, ctx.side
    inputs = SCORER.inputs(es, side, ctx.settings)
    plan = SCORER.plan(inputs, ctx.settings)
    column, y, k = inputs.column, inputs.labels, plan.k
    graph = an.neighbour_graph(es.vectors, k, device=ctx.device)  # the scorer's graph, shared by LOF
    baselines = an.baseline_scores(es.vectors, k, seed=ctx.seed, device=ctx.device, graph=graph)
    units = check_units(anomaly_units(inputs, baselines["knn_distance"]), SCORER.key, SCORER.columns)
    scores, user, sources, scores_file = {}, [], {}, None
    if "anomaly_scores" in side and side.anomaly_scores is not None:
        frame = side.anomaly_scores
        scores_file = frame.attrs.get("source", "anomaly_scores")
        aligned = frame.reindex(pd.Index(es.ids, dtype=object))
        for c in frame.columns:
            name = c if c not in an.BASELINES else f"{c} (yours)"
            scores[name] = aligned[c].to_numpy(float)
            user.append(name)
            sources[name] = scores_file
    scores.update(baselines)
    primary = user[0] if user else "knn_distance"
    events = event_columns(es.metadata)
    result = an.evaluate_detectors(scores, y, cost_fn=float(ctx.option("cost_fn")),
                                   cost_fp=float(ctx.option("cost_fp")), events=events, primary=primary,
                                   sources=sources, level=ctx.level, seed=ctx.seed)
    ctx.rec.add(*result.metrics.values())
    ctx.rec.scored(SCORER, units, plan)
    for d in result.detectors:  # shown, raw and adjusted over the report, in the chapter's table of tests
        auc, p = an.chance_test(d.scores, result.labels)
        ctx.rec.test(HypothesisTest(
            name=f"anomaly: {d.label} vs chance", test="Mann–Whitney U, one-sided (anomalies score higher)",
            p_value=p, statistic=auc, n=f"{result.protocol['n_anomalies']:,} anomalies + "
                                        f"{result.protocol['n_normal']:,} normal rows",
            null="anomalies and normal rows have the same score distribution (ROC-AUC = 0.5)"))
    difference_tests = {}
    by_name = {d.name: d for d in result.detectors}
    for row in result.differences.itertuples(index=False):  # each of your detectors against each baseline
        a, b = by_name[row.detector], by_name[row.baseline]
        _, z, p = delong_paired(a.scores, b.scores, result.labels)
        name = f"anomaly: {a.label} vs {b.label} (ROC-AUC)"
        difference_tests[f"roc_auc_difference__{an.slug(a.name)}_vs_{an.slug(b.name)}"] = name
        ctx.rec.test(HypothesisTest(
            name=name, test="DeLong test of two correlated ROC-AUCs, two-sided", p_value=1.0 if p != p else p,
            statistic=None if z != z else z, n=f"{result.protocol['n_anomalies']:,} anomalies + "
                                              f"{result.protocol['n_normal']:,} normal rows",
            null=f"{a.label} and {b.label} have the same ROC-AUC on these rows", family="anomaly: detector vs baseline"))
    ctx.rec.note(protocol=result.protocol, label_column=column, k=k, primary=primary, scores_file=scores_file,
                 difference_tests=difference_tests,
                 operating_points={d.name: _json_points(d.points) for d in result.detectors},
                 **({"events": {d.name: d.ttd.events.to_dict("records") for d in result.detectors if d.ttd}}
                    if events is not None else {}))
    return AnomalyReport(result, column, tuple(user), scores_file, k)


def _json_points(points: pd.DataFrame) -> list:
    out = points.to_dict("records")
    for r in out:
        for key, v in r.items():
            if isinstance(v, float) and not math.isfinite(v):
                r[key] = None if math.isnan(v) else "inf"
    return out


# ---------------------------------------------------------------------------------------------
# Numbers, narrative, tables, figures
# ---------------------------------------------------------------------------------------------

def _v(rep: AnomalyReport, name: str, fmt: str = ".3f", detector: str | None = None) -> str:
    key = name if detector is None else f"{name}__{an.slug(detector)}"
    m = rep.result.metrics[key]
    return value_with_ci(m.value, m.ci_low, m.ci_high, fmt)


def _money(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.6g}"


def _detector(rep: AnomalyReport, name: str) -> an.DetectorResult:
    return next(d for d in rep.result.detectors if d.name == name)


def narrative(rep: AnomalyReport) -> str:
    r, p = rep.result, rep.result.protocol
    prim = r.detectors[0]
    base = [d for d in r.detectors if d.source == "baseline"]
    best = max(base, key=lambda d: d.values["roc_auc"])
    worst = min(base, key=lambda d: d.values["roc_auc"])
    who = (f"your detector **{escape(prim.label)}** (from {escape(rep.scores_file)})" if rep.user_columns
           else f"the **{prim.label}** baseline (no scores of your own detector were given)")
    parts = [
        f"**{p['n_labelled']:,} labelled rows**, {p['n_anomalies']:,} of them anomalies (prevalence "
        f"{percent(p['prevalence'], 2)}); {p['n_unlabelled']:,} unlabelled rows take part in fitting the embedding "
        f"baselines only. The headline numbers are for {who}: ROC-AUC {_v(rep, 'roc_auc')}, average precision "
        f"{_v(rep, 'average_precision')} against {p['prevalence']:.3f} for random scores, and "
        f"{_v(rep, 'detection_rate_at_fpr_1pct', '.1%')} of the anomalies caught while at most 1 % of normal rows "
        f"are flagged.",
    ]
    if best.values["roc_auc"] - worst.values["roc_auc"] >= 0.05:
        parts.append(
            f"Among the embedding baselines, **{best.label}** separates best (ROC-AUC "
            f"{_v(rep, 'roc_auc', detector=best.name)}) and **{worst.label}** worst "
            f"({_v(rep, 'roc_auc', detector=worst.name)})"
            + (": the anomalies do not sit far from the centre of the space but *between* its dense regions, "
               "which only a local measure sees." if worst.name == "centroid_distance"
               and best.name in ("knn_distance", "lof") else ".")
            + (" A ROC-AUC below 0.5 means that detector ranks the anomalies as *more* normal than the rest."
               if worst.values["roc_auc"] < 0.5 else ""))
    if rep.user_columns and len(r.differences):
        d = r.differences[r.differences["detector"] == prim.name].set_index("baseline")
        row = d.loc[best.name]
        sign = "above" if row["difference"] > 0 else "below"
        sure = row["ci_low"] > 0 or row["ci_high"] < 0
        parts.append(f"Your detector's ROC-AUC is {abs(row['difference']):.3f} {sign} the best baseline's "
                     f"(paired 95 % interval {row['ci_low']:+.3f} to {row['ci_high']:+.3f}"
                     + ("), a difference the bootstrap resolves." if sure else
                        "), within the bootstrap's uncertainty."))
    ops = prim.points.set_index("operating point")
    opt = ops.loc["cost optimum"]
    cost_fn, cost_fp = p["cost_fn"], p["cost_fp"]
    parts.append(
        f"With a missed anomaly costing {_money(cost_fn)} and a false alarm {_money(cost_fp)}, the cheapest "
        f"threshold flags {int(opt['flagged']):,} rows and catches {int(opt['anomalies caught']):,} of "
        f"{p['n_anomalies']:,} anomalies at an expected {_v(rep, 'expected_cost', '.4g')} per row, "
        f"{_v(rep, 'cost_reduction_vs_baseline', '.1%')} less than the better of flagging nothing or everything "
        "(`--set cost_fn=… --set cost_fp=…` for your own costs).")
    if prim.ttd is not None and len(prim.ttd.events):
        e = prim.ttd.events
        med = r.metrics["time_to_detection_median"]
        when = (f"the median time to detection is {value_with_ci(med.value, med.ci_low, med.ci_high, '.3g')} "
                f"{p['time_unit']}" if med.value is not None else
                "fewer than half the events are ever detected, so the median time to detection is not reached")
        parts.append(f"Alerting at the 1 %-FPR threshold, {int(e['detected'].sum())} of {len(e)} events are "
                     f"detected; {when} (Kaplan–Meier, undetected events censored at the end of the data).")
    return "\n\n".join(parts)


def comparison_table(rep: AnomalyReport) -> pd.DataFrame:
    """One row per detector: the main metrics with their intervals."""
    rows = []
    for d in rep.result.detectors:
        def cell(name, fmt=".3f"):
            m = rep.result.metrics.get(f"{name}__{an.slug(d.name)}")
            if m is None or m.value is None:
                return "—" if m is None else "not reached"
            return f"{m.value:{fmt}}" + (f" ({m.ci_low:{fmt}}–{m.ci_high:{fmt}})" if m.has_ci else "")

        rows.append({"detector": d.label + (" ★" if d.name == rep.result.primary else ""),
                     "scores": "yours" if d.source != "baseline" else "embedding",
                     "ROC-AUC": cell("roc_auc"), "average precision": cell("average_precision"),
                     "detection @ 1 % FPR": cell("detection_rate_at_fpr_1pct", ".1%"),
                     "pAUC ≤ 10 % (McClish)": cell("partial_auc_fpr_10pct_mcclish"),
                     "precision@n": cell("precision_at_n"),
                     "cost reduction": cell("cost_reduction_vs_baseline", ".1%"),
                     **({"events detected": cell("events_detected", ".0%"),
                         f"median time to detection ({d.ttd.unit})": cell("time_to_detection_median", ".3g")}
                        if d.ttd is not None and len(d.ttd.events) else {})})
    return pd.DataFrame(rows)


def _colour(i: int) -> str:
    return COLOURS[i % len(COLOURS)]


def curves_figure(rep: AnomalyReport) -> plt.Figure:
    """ROC (linear and log FPR) and precision–recall curves of every detector, with chance lines."""
    r = rep.result
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(WIDTH, 3.3))
    for i, d in enumerate(r.detectors):
        tp, fp = d.ranked.counts()
        fpr, tpr = an.roc_points(tp, fp)
        lw = 2.0 if i == 0 else 1.2
        a.plot(fpr, tpr, color=_colour(i), lw=lw, label=mathtext(d.label), drawstyle="default")
        keep = fpr > 0
        b.plot(fpr[keep], tpr[keep], color=_colour(i), lw=lw)
        rec, prec = an.pr_points(d.ranked)
        c.step(np.r_[0, rec], np.r_[prec[0], prec], where="pre", color=_colour(i), lw=lw)
    a.plot([0, 1], [0, 1], color=PALETTE["muted"], ls="--", lw=0.8)
    a.set_xlabel("false-positive rate")
    a.set_ylabel("detection rate (recall)")
    a.set_title("ROC")
    grid = np.geomspace(1e-4, 1, 50)
    b.plot(grid, grid, color=PALETTE["muted"], ls="--", lw=0.8)
    b.set_xscale("log")
    b.set_xlim(max(1e-4, 0.5 / max(r.protocol["n_normal"], 1)), 1)
    for t in an.FPR_TARGETS.values():
        b.axvline(t, color=PALETTE["muted"], lw=0.6, ls=":")
    b.set_xlabel("false-positive rate (log)")
    b.set_title("ROC, low FPR")
    c.axhline(r.protocol["prevalence"], color=PALETTE["muted"], ls="--", lw=0.8)
    c.set_xlabel("recall")
    c.set_ylabel("precision")
    c.set_ylim(0, 1.02)
    c.set_title("precision–recall")
    for ax in (a, b):
        ax.set_ylim(0, 1.02)
    a.legend(frameon=False, fontsize=7, loc="lower right")
    return fig


def distribution_figure(rep: AnomalyReport) -> plt.Figure:
    """Score histograms of normal vs anomalous rows, one panel per detector (the first few)."""
    r = rep.result
    shown = r.detectors[:SHOWN_DISTRIBUTIONS]
    fig, axes = plt.subplots(1, len(shown), figsize=(WIDTH, 2.6), squeeze=False)
    y = r.labels
    for ax, d in zip(axes[0], shown):
        s = d.scores
        lo, hi = np.quantile(s, [0.001, 0.999]) if len(s) > 20 else (s.min(), s.max())
        if hi <= lo:
            lo, hi = s.min() - 0.5, s.max() + 0.5
        bins = np.linspace(lo, hi, 31)
        ax.hist(np.clip(s[y == 0], lo, hi), bins=bins, density=True, color=PALETTE["data"], alpha=0.55,
                label="normal")
        ax.hist(np.clip(s[y == 1], lo, hi), bins=bins, density=True, color=PALETTE["reference"], alpha=0.55,
                label="anomaly")
        ax.set_title(mathtext(d.label), fontsize=9)
        ax.set_xlabel("score")
        ax.set_yticks([])
    axes[0][0].set_ylabel("density")
    axes[0][0].legend(frameon=False, fontsize=7)
    return fig


def cost_figure(rep: AnomalyReport) -> plt.Figure:
    """Drummond & Holte cost curves of every detector, the trivial policies, and the user's cost ratio."""
    r, p = rep.result, rep.result.protocol
    fig, ax = plt.subplots(figsize=(WIDTH * 0.62, 3.2))
    for i, d in enumerate(r.detectors):
        pc, cost = an.cost_curve(d.ranked)
        ax.plot(pc, cost, color=_colour(i), lw=2.0 if i == 0 else 1.2, label=mathtext(d.label))
    ax.plot([0, 1], [0, 1], color=PALETTE["muted"], ls="--", lw=0.8, label="flag nothing / everything")
    ax.plot([0, 1], [1, 0], color=PALETTE["muted"], ls="--", lw=0.8)
    ours = an.probability_cost(p["prevalence"], p["cost_fn"], p["cost_fp"])
    ax.axvline(ours, color="black", lw=0.8, ls=":")
    ax.annotate("your costs", (ours, 0.47), xytext=(4, 0), textcoords="offset points", fontsize=8,
                ha="left" if ours < 0.7 else "right")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 0.52)
    ax.set_xlabel("probability cost PC(+)")
    ax.set_ylabel("normalised expected cost")
    ax.legend(frameon=False, fontsize=7, loc="upper left")
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: AnomalyReport) -> None:
    show_markdown(narrative(rep))


def show_metrics(rep: AnomalyReport) -> None:
    r = rep.result
    head = {k: m for k, m in r.metrics.items() if "__" not in k and k != "average_precision_baseline"}
    show_metric_table(head, caption=f"Headline metrics of {r.detectors[0].label} over the "
                                    f"{r.protocol['n_labelled']:,} labelled rows (average precision of random scores: "
                                    f"the prevalence, {r.protocol['prevalence']:.4g}); {r.protocol['ci_method']}, every "
                                    "threshold re-chosen in each resample. No verdict: what is good enough depends on "
                                    "the cost of a miss and of a false alarm.",
                      label="tbl-anomaly-metrics")


def show_comparison(rep: AnomalyReport) -> None:
    show_table(comparison_table(rep),
               caption="Every detector on the same labelled rows (★ the headline detector), with 95 % bootstrap "
                       "intervals. The embedding baselines use the cosine geometry: k-NN distance and LOF "
                       f"(k = {rep.k}) from the exact neighbour graph, the distance to the mean direction, and an "
                       "isolation forest.", label="tbl-anomaly-detectors")
    d = rep.result.differences
    if len(d):
        t = pd.DataFrame({"detector": d["detector"], "minus baseline": [an.BASELINE_LABELS[b] for b in d["baseline"]],
                          "ROC-AUC difference": [f"{v:+.3f} ({lo:+.3f} to {hi:+.3f})" for v, lo, hi in
                                                 zip(d["difference"], d["ci_low"], d["ci_high"])]})
        show_table(t, caption="Your detector against each baseline: ROC-AUC difference with a paired 95 % bootstrap "
                              "interval (the same resampled rows for both).", label="tbl-anomaly-differences")


def show_curves(rep: AnomalyReport) -> None:
    show_figure(curves_figure(rep),
                caption="ROC curves (left; dashed: chance), the same on a log FPR axis where alerting systems operate "
                        "(middle; dotted: 0.1 %, 1 % and 5 % FPR), and precision–recall curves (right; dashed: the "
                        "prevalence, the precision of random scores). The thick line is the headline detector.",
                label="fig-anomaly-curves")


def show_distributions(rep: AnomalyReport) -> None:
    show_figure(distribution_figure(rep),
                caption="Score distributions of normal and anomalous labelled rows (densities, 0.1–99.9 % range). "
                        "The more the two overlap, the more false alarms every catch costs.",
                label="fig-anomaly-distributions")


def show_operating_points(rep: AnomalyReport) -> None:
    d = rep.result.detectors[0]
    t = d.points.copy()
    t["threshold"] = t["threshold"].map(lambda v: "above every score" if not math.isfinite(v) else f"{v:.6g}")
    for c in ("recall", "FPR", "precision"):
        t[c] = t[c].map(lambda v: "—" if not np.isfinite(v) else f"{v:.2%}")
    show_table(t, caption=f"Operating points of {d.label}: the exact threshold used (flag a row when its score is at "
                          "least this), what it flags and catches. The FPR targets pick the lowest threshold whose "
                          "false-positive rate stays within the target; the cost optimum minimises "
                          f"{_money(rep.result.protocol['cost_fn'])} × misses + "
                          f"{_money(rep.result.protocol['cost_fp'])} × false alarms.",
               label="tbl-anomaly-operating-points")


def show_cost(rep: AnomalyReport) -> None:
    p = rep.result.protocol
    pc = an.probability_cost(p["prevalence"], p["cost_fn"], p["cost_fp"])
    show_figure(cost_figure(rep),
                caption="Cost curves (Drummond & Holte 2006): for every mix of prevalence and cost ratio, summarised "
                        "by the probability cost PC(+) on the x axis, the expected cost of each detector's best "
                        "threshold, normalised so that the better of flagging nothing or everything (dashed) peaks "
                        f"at 0.5. The dotted line is this data's prevalence with your costs (PC(+) = {pc:.3f}); the "
                        "lower a curve there, the more the scores save.", label="fig-anomaly-cost")


def show_detection(rep: AnomalyReport) -> None:
    d = rep.result.detectors[0]
    if d.ttd is None:
        show_markdown("No time to detection: the metadata has no `event` column (give `event` — the incident each "
                      "row belongs to — and `timestamp` — when the row appeared).")
        return
    e = d.ttd.events.sort_values("onset", kind="stable").reset_index(drop=True)
    if not len(e):
        show_markdown("No time to detection: the `event` column names no event.")
        return
    unit = d.ttd.unit
    t = pd.DataFrame({"event": e["event"], "rows": e["rows"], "flagged": e["rows_flagged"],
                      f"onset ({unit})": e["onset"].map(lambda v: f"{v:.4g}"),
                      f"time to detection ({unit})": [f"{v:.4g}" if ok else f"> {v:.4g} (censored)"
                                                      for v, ok in zip(e["duration"], e["detected"])]})
    thr = "above every score" if not math.isfinite(d.ttd.threshold) else f"{d.ttd.threshold:.6g}"
    show_table(t, caption=f"Events and when {d.label} first alerts on one of their rows (threshold {thr}, the 1 %-FPR "
                          "operating point). Times are from the earliest row; undetected events are censored at the "
                          "end of the data.", label="tbl-anomaly-events")


def show_protocol(rep: AnomalyReport) -> None:
    p = rep.result.protocol
    rows = [("labels", f"metadata column {rep.label_column} (1 anomaly, 0 normal, blank unlabelled)"),
            ("labelled rows", f"{p['n_labelled']:,} ({p['n_anomalies']:,} anomalies, {p['n_normal']:,} normal)"),
            ("unlabelled rows", f"{p['n_unlabelled']:,} (used only to fit the baselines)"),
            ("your scores", rep.scores_file or "none given"),
            ("baselines", f"cosine geometry; k-NN distance and LOF with k = {rep.k} (exact shared graph), centroid "
                          f"distance, isolation forest ({an.N_TREES} trees, seed {p['seed']})"),
            ("costs", f"missed anomaly {_money(p['cost_fn'])}, false alarm {_money(p['cost_fp'])}"),
            ("intervals", p["ci_method"]),
            ("time to detection", f"{p['events']} events; alerts at the {p['alert_fpr']:.0%}-FPR threshold"
             if p["events"] else "no event column")]
    show_table(pd.DataFrame(rows, columns=["setting", "value"]), caption="The evaluation protocol.",
               label="tbl-anomaly-protocol")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

COST_FN = Option("cost_fn", 10_000.0, "anomaly: cost of a missed anomaly (false negative), e.g. the fraud loss", bounds=(0, INF))
COST_FP = Option("cost_fp", 100.0, "anomaly: cost of a false alarm (false positive), e.g. the investigation", bounds=(0, INF))

def findings(r: ChapterResults) -> list[Finding]:
    """Your detector below a free embedding baseline (DeLong's paired test of the two ROC-AUCs rejects after the
    report-wide adjustment and the difference's paired bootstrap interval lies below 0), or no better than chance
    (its Mann–Whitney test, report-wide adjusted). Evaluation findings: they judge the user's own detector, not the
    vectors (issue 42)."""
    primary = r.info.get("primary")
    tests = r.info.get("difference_tests") or {}
    out = []
    diffs = {k: m for k, m in r.metrics.items() if k.startswith(f"roc_auc_difference__{an.slug(primary or '')}_vs_")}
    labels = {k: re.sub(r"^.*\[(.*)\]$", r"\1", (r.metrics.get(f"roc_auc__{k.split('_vs_', 1)[1]}") or {}).get(
        "label", k)) for k in diffs}
    comparisons = [{"baseline": f"the free {labels[k]} baseline",
                    "metric": "ROC-AUC", "metric_name": "roc_auc", "model": r.value("roc_auc"),
                    "baseline_value": r.value(f"roc_auc__{k.split('_vs_', 1)[1]}"), "difference": m.get("value"),
                    "ci_low": m.get("ci_low"), "ci_high": m.get("ci_high"), "test": tests.get(k)}
                   for k, m in diffs.items()]
    losing = [c for c in comparisons if c["ci_high"] is not None and c["ci_high"] < 0 and c["test"]
              and r.significant(c["test"])]
    if losing:
        found = baseline_finding(r, losing, subject=f"your detector ({primary})", plural=False,
                                 action="Replace or combine your detector with the embedding baseline:", effect="baselines")
        out += [replace(found, kind="evaluation")] if found else []  # the user's detector, not the vectors
    if r.info.get("scores_file") and not any(r.significant(t["name"]) for t in r.tests
                                             if t["name"] == f"anomaly: {primary} vs chance"):
        out.append(Finding("problematic", "model", r.name, "Your detector does no better than chance",
                           f"Do not use it: its scores do not separate anomalies from normal rows (ROC-AUC "
                           f"{value_text(r.metric('roc_auc') or {})}).", metrics=("roc_auc",),
                           evidence=metric_evidence(r.metric("roc_auc") or {}, "roc_auc"), rule="baseline",
                           effect="chance", kind="evaluation"))
    return out


CHAPTER = ChapterSpec(
    name="anomaly", title="Anomaly detection", order=88,
    description="Anomaly and fraud detection on labelled rows: ROC-AUC, average precision, detection rate at fixed false-positive rates, partial AUC, precision@n, expected cost and time to detection, for your detector and four embedding baselines (seed 001 §21.4.3).",
    requires=("metadata.is_anomaly|metadata.anomaly",), optional=("anomaly_scores",),
    needs="an `is_anomaly` 0/1 column in `metadata` (1 = anomaly; blank = unlabelled) or a `anomaly` column in "
          "`metadata`",
    options=(K, COST_FN, COST_FP), graph=True, precheck=precheck, demo="anomaly",
    findings=findings, scorer=SCORER,
)
