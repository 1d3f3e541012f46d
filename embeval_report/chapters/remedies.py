"""The What-the-geometry-costs chapter: each flagged geometry diagnostic's remedy applied, every task of the run
re-scored on the remedied vectors with the same plan, paired with the task's own numbers (computed in
:mod:`embeval_report.metrics.remedies` and :mod:`embeval_report.metrics.scoring`).

It runs after every content chapter (stage 1): it reads which diagnostics their thresholds flagged and which task
chapters recorded units. The report's findings read its table: a diagnostic is ``concerning`` only when a remedy
improves a task by more than the effect that matters, otherwise a note (:mod:`embeval_report.report.findings`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import ChapterSkipped
from ..metrics import paired
from ..metrics.effects import Effects
from ..metrics.isotropy import PrincipalDirections
from ..metrics.remedies import REMEDIES, fit_remedy, remedied_rows
from ..metrics.scoring import compare_units, joined_units, plan_fingerprint
from ..metrics.spec import Metric
from ..metrics.swap import neighbour_swap
from ..present.display import escape, show_figure, show_markdown, show_table
from ..present.format import interval
from ..present.plotting import PALETTE, WIDTH
from .declaration import MDE, ChapterSpec, Option
from .recorder import read_results, read_units

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["RemediesReport", "compute", "cost_figure", "display_table", "flagged_diagnostics", "narrative",
           "show_costs", "show_summary", "IMPROVES", "HARMLESS"]

#: flagged: a diagnostic metric with this verdict
FLAGGED = ("concerning", "problematic")
#: what a row says, by its comparison verdict (B = the remedied vectors)
IMPROVES, WORSENS = "B better", "A better"
HARMLESS = "no difference larger than E"
READING = {IMPROVES: "improves", WORSENS: "worsens", HARMLESS: "no change larger than E",
           "underpowered": "underpowered", "inconclusive": "inconclusive"}


@dataclass(frozen=True)
class RemediesReport:
    """Everything the chapter shows."""

    table: pd.DataFrame          # one row per remedy × task × metric (compare_table's columns)
    diagnostics: dict            # diagnostic chapter -> its flagged metrics
    remedies: dict               # remedy name -> (label, the diagnostics it answers)
    tasks: list                  # the task chapters re-scored
    skipped: dict                # task chapter -> why it was not re-scored
    effect: str
    which: str = "standard"      # the remedies option: each diagnostic's standard remedies, or all it lists
    neighbours: dict | None = None  # without tasks: remedy -> its what-if on the top-k neighbour lists
    unchanged: dict | None = None   # "remedy · task" -> why the remedy cannot change that task (not scored again)


def flagged_diagnostics(records: dict, chapters) -> dict[str, list[str]]:
    """The diagnostic chapters (``kind="diagnostic"`` with remedies) among ``records`` whose thresholds flag a
    metric, with those metrics."""
    out = {}
    for spec in chapters:
        if spec.kind != "diagnostic" or not spec.remedies or spec.name not in records:
            continue
        flagged = [m for m, r in records[spec.name].get("metrics", {}).items() if r.get("verdict") in FLAGGED]
        if flagged:
            out[spec.name] = flagged
    return out


def compute(ctx: ChapterContext) -> RemediesReport:
    """Apply each flagged diagnostic's remedies and re-score every task that ran, on its own plan."""
    from .registry import discover

    results_dir = ctx.rec.results_dir
    records = read_results(results_dir) if results_dir else {}
    chapters = discover()
    diagnostics = flagged_diagnostics(records, chapters)
    tasks = [c for c in chapters if c.scorer is not None and c.name in records
             and records[c.name].get("info", {}).get("units")]
    if not diagnostics:
        raise ChapterSkipped("no geometry diagnostic is flagged, so there is no remedy to check")
    es = ctx.es
    if not ctx.compute.fits(2 * es.n * es.d * 4):
        raise ChapterSkipped(f"a remedied copy of the set ({es.n:,} × {es.d} float32) does not fit the memory budget "
                             "beside the set; rerun with a larger --memory-budget to check the remedies")
    wanted = {r: [d for d in diagnostics if r in _spec(chapters, d).remedies] for r in
              _checked(diagnostics, chapters, ctx.option("remedies"))}
    effects = Effects.parse(ctx.option("mde"))
    pcs = PrincipalDirections.fit(es.vectors, device=ctx.device)
    removed = records.get("correction", {}).get("info", {}).get("removed")
    if not tasks:  # nothing says what the geometry costs: what each remedy would do to the neighbour lists
        return _what_if(ctx, diagnostics, wanted, pcs, removed, effects)
    rows, skipped, labels, seconds, unchanged, plans = [], {}, {}, {}, {}, {}
    for name, answers in wanted.items():
        remedy = _fitted(ctx, name, removed, pcs, skipped)
        if remedy is None:
            continue
        labels[name] = (remedy.label, answers)
        Y = remedied_rows(es.vectors, remedy)
        for spec in tasks:
            started = time.perf_counter()
            if spec.name not in plans:  # made once, for the first remedy: the same for every remedy
                plans[spec.name] = _task_plan(ctx, spec, records[spec.name], skipped)
            scored = _task_rows(ctx, spec, records[spec.name], remedy, Y, plans[spec.name])
            rows += scored
            seconds[f"{name} · {spec.name}"] = round(time.perf_counter() - started, 2)
            if scored and name in spec.scorer.invariant:
                unchanged[f"{name} · {spec.name}"] = spec.scorer.invariant[name]
        del Y
    table = paired.compare_table(rows, correction="holm", effects=effects) if rows else pd.DataFrame()
    _record(ctx, table, diagnostics, labels, skipped, effects)
    ctx.rec.note(seconds=seconds, which=ctx.option("remedies"), unchanged=unchanged)
    return RemediesReport(table, diagnostics, labels, [t.name for t in tasks], skipped, effects.canonical(),
                          ctx.option("remedies"), unchanged=unchanged)


def _fitted(ctx, name: str, removed, pcs, skipped: dict):
    """The remedy ``name`` fitted on the set, or None with why in ``skipped`` (it leaves no variance, or it is
    all-but-the-top removing nothing: centring again)."""
    remedy = fit_remedy(ctx.es.vectors, name, removed=removed, pcs=pcs, device=ctx.device)
    if remedy is None:
        skipped[name] = "it leaves no variance (every remedied vector is the same)"
    elif remedy.detail == "D = 0":
        skipped[name] = "D = 0 (no top direction to remove): the same as centring"
    else:
        return remedy
    return None


#: rows whose neighbour lists the what-if compares (sampled above it; their neighbours sought among every row)
WHAT_IF_ROWS = 2_000
#: the neighbour lists compared
WHAT_IF_K = 10


def _what_if(ctx, diagnostics: dict, wanted: dict, pcs, removed, effects) -> RemediesReport:
    """Without a task: per remedy, the share of top-k cosine neighbour lists it changes by more than half
    (:func:`~embeval_report.metrics.swap.neighbour_swap`, exact, on a seeded sample of rows above
    :data:`WHAT_IF_ROWS`), recorded as ``info["neighbours"]`` for the diagnostics' notes."""
    es, neighbours, labels, skipped = ctx.es, {}, {}, {}
    rows = (np.sort(np.random.default_rng(ctx.seed).choice(es.n, WHAT_IF_ROWS, replace=False))
            if es.n > WHAT_IF_ROWS else None)
    for name, answers in wanted.items():
        remedy = _fitted(ctx, name, removed, pcs, skipped)
        if remedy is None:
            continue
        labels[name] = (remedy.label, answers)
        swap = neighbour_swap(es.vectors, remedied_rows(es.vectors, remedy), es.ids, k=WHAT_IF_K, rows=rows,
                              device=ctx.device)
        neighbours[name] = {"label": remedy.label, "answers": answers, "k": swap.k, "rows": len(swap.ids),
                            "changed_share": swap.changed_share,
                            "mean_overlap": float(np.mean(swap.overlap)) if len(swap.overlap) else None}
    ctx.rec.note(diagnostics=diagnostics, remedies={k: {"label": v[0], "answers": v[1]} for k, v in labels.items()},
                 skipped=skipped, effect=effects.canonical(), table=[], neighbours=neighbours,
                 which=ctx.option("remedies"))
    return RemediesReport(pd.DataFrame(), diagnostics, labels, [], skipped, effects.canonical(),
                          ctx.option("remedies"), neighbours)


def _checked(diagnostics: dict, chapters, which: str) -> list[str]:
    """The remedies to check, in :data:`REMEDIES` order: each flagged diagnostic's standard ones (the first
    ``standard_remedies`` it lists) or, with ``which="all"``, every one. Each re-scores every task, so each costs
    about the tasks' own time."""
    listed = {r for d in diagnostics for r in (_spec(chapters, d).remedies if which == "all" else
                                                 _spec(chapters, d).remedies[:_spec(chapters, d).standard_remedies])}
    return [r for r in REMEDIES if r in listed]


def _spec(chapters, name):
    return next(c for c in chapters if c.name == name)


def _task_plan(ctx, spec, record: dict, skipped: dict):
    """A task chapter's inputs, plan and recorded units, ``(inputs, plan, units)``, read once for every remedy; None,
    with why in ``skipped``, when its plan cannot be made again as the chapter made it."""
    scorer, info = spec.scorer, record["info"]["units"]
    try:
        inputs = scorer.inputs(ctx.es, ctx.side, ctx.settings)
        plan = scorer.plan(inputs, ctx.settings)
    except ChapterSkipped as e:
        skipped[spec.name] = str(e)
        return None
    if info.get("plan") and plan_fingerprint(plan) != info["plan"]:
        skipped[spec.name] = "its plan could not be made again as the chapter made it"
        return None
    return inputs, plan, read_units(ctx.rec.results_dir, spec.name, info)


def _task_rows(ctx, spec, record: dict, remedy, Y, planned) -> list[dict]:
    """The paired rows of one task chapter re-scored on the remedied set ``Y`` against its recorded units
    (``planned``: :func:`_task_plan`'s; none when it is None)."""
    if planned is None:
        return []
    scorer, (inputs, plan, original) = spec.scorer, planned
    if remedy.name in scorer.invariant:  # the protocol undoes the remedy: the recorded units are the remedied ones
        remedied = original.copy()
    else:
        if scorer.map_inputs is not None:
            inputs = scorer.map_inputs(inputs, remedy.apply)
        remedied = scorer.task_units(Y, inputs, plan)  # the outcomes compared below (not a silhouette)
        remedied[scorer.key] = remedied[scorer.key].astype(str)
    rows, pair = [], joined_units(original, remedied, scorer.key)  # joined once for every metric
    for agg in scorer.aggregates:
        m = record["metrics"].get(agg.metric)
        if m is None or not agg.task:
            continue
        result, differences = compare_units(*pair, key=scorer.key, metric=agg.metric, direction=agg.direction,
                                            aggregate=agg, level=ctx.level, seed=ctx.seed, units=scorer.unit,
                                            unit_tests=False, aligned=True)  # the table shows no t/Wilcoxon test
        if result.n < 2:
            continue
        rows.append(dict(a="original", b=remedy.name, chapter=spec.name, metric=agg.metric,
                         label=(m.get("label") or agg.metric).split(" [")[0], direction=agg.direction,
                         unit=scorer.unit, title=spec.title, result=result, differences=differences))
    return rows


def _record(ctx, table: pd.DataFrame, diagnostics: dict, labels: dict, skipped: dict, effects) -> None:
    """Each row as a metric ``change_<metric>_<chapter>_after_<remedy>`` (no verdict: it describes a remedy)."""
    metrics = []
    for r in table.itertuples() if len(table) else ():
        slug = r.b.replace("-", "_")
        metrics.append(Metric(name=f"change_{r.metric}_{r.chapter}_after_{slug}", value=r.diff,
                              ci_low=r.ci_low, ci_high=r.ci_high, direction=r.direction,
                              label=f"Change of {r.label} ({r.chapter}) after {r.b}", ci_method=r.ci_method,
                              reference="paired re-scoring on the same plan; remedies: Mu et al. 2018, Su et al. 2021",
                              note=f"{READING.get(r.verdict, r.verdict)}; E = {r.effect:.3g}"))
    if metrics:
        ctx.rec.add(*metrics)
    keep = ["b", "chapter", "title", "metric", "label", "direction", "unit", "n", "mean_a", "mean_b", "diff", "ci_low",
            "ci_high", "sim_low", "sim_high", "p_randomisation", "p_adjusted", "effect", "mde", "verdict"]
    ctx.rec.note(diagnostics=diagnostics, remedies={k: {"label": v[0], "answers": v[1]} for k, v in labels.items()},
                 skipped=skipped, effect=effects.canonical(),
                 table=table[[c for c in keep if c in table]].rename(columns={"b": "remedy"}).replace(
                     {np.nan: None}).to_dict(orient="records") if len(table) else [])


# ---------------------------------------------------------------------------------------------
# Narrative, tables, figures
# ---------------------------------------------------------------------------------------------

def _change(r) -> str:
    return f"{r.diff:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]"


def narrative(rep: RemediesReport) -> str:
    """Per remedy: the tasks it improves beyond the effect that matters, or that it changes none of them."""
    t = rep.table
    names = {"isotropy": "anisotropy", "uniformity": "poor uniformity", "hubness": "hubness",
             "collapse": "dimensional collapse"}
    flagged = ", ".join(names.get(d, d) for d in rep.diagnostics)
    if rep.neighbours is not None:
        return _what_if_narrative(rep, flagged)
    parts = [f"The thresholds flag **{escape(flagged)}**. Whether that costs anything depends on the tasks: each "
             f"remedy below is applied to the vectors and every task that ran ({len(rep.tasks)}) is scored again "
             "on its own plan (the same folds, held-out edges, negatives and samples), paired unit by unit with "
             f"its own numbers. A change counts when it exceeds the effect that matters (E, `--mde` "
             f"{escape(rep.effect)}) with Holm's correction over the {len(t)} comparisons."]
    for name, (label, _) in rep.remedies.items():
        rows = t[t["b"] == name] if len(t) else t
        better = rows[rows["verdict"] == IMPROVES] if len(rows) else rows
        worse = rows[rows["verdict"] == WORSENS] if len(rows) else rows
        if len(better):
            what = "; ".join(f"{escape(r.title)} {escape(r.label)} by {_change(r)}" for r in better.itertuples())
            parts.append(f"**{escape(label)} improves {len(better)} task metric(s)** beyond E: {what}. The geometry "
                         f"costs these tasks; apply {escape(name)} before using the vectors for them.")
        else:
            parts.append(f"**{escape(label)}** improves no task metric beyond E ({len(rows)} compared"
                         + (f"; it worsens {len(worse)}" if len(worse) else "") + "): here the geometry it corrects "
                         "costs no task measurably.")
    if rep.which == "standard":
        parts.append("Each flagged diagnostic's standard remedies are checked; `--set remedies=all` checks every "
                     "remedy it lists (whitening too), each re-scoring every task again.")
    if rep.unchanged:
        parts.append("Not scored again, unchanged by construction: " + "; ".join(
            f"{escape(k)} ({escape(v)})" for k, v in rep.unchanged.items()) + ".")
    if rep.skipped:
        parts.append("Not checked: " + "; ".join(f"{escape(k)} ({escape(v)})" for k, v in rep.skipped.items()) + ".")
    return "\n\n".join(parts)


def _what_if_narrative(rep: RemediesReport, flagged: str) -> str:
    what = "; ".join(f"**{escape(w['label'])}** changes {w['changed_share']:.0%} of the top-{w['k']} lists by more "
                     f"than half (mean overlap {w['mean_overlap']:.2f}, {w['rows']:,} rows)"
                     for w in rep.neighbours.values())
    return (f"The thresholds flag **{escape(flagged)}**, but no task chapter ran (add labels, judgements, edges or "
            "interactions), so nothing in this report says whether that costs anything: the diagnostics are notes. "
            "What each remedy would do to the cosine neighbour lists, the what-if a task would feel first: "
            + (what or "no remedy could be applied") + ". A remedy that moves few lists is harmless to neighbour "
            "search either way; one that moves most of them changes what any k-NN task sees, for better or worse: "
            "measure it on a task before applying it.")


def display_table(rep: RemediesReport) -> pd.DataFrame:
    """One row per remedy × task metric: before, after, the paired change and its reading."""
    t = rep.table
    if not len(t):
        return pd.DataFrame()
    return pd.DataFrame({"remedy": [rep.remedies[b][0] for b in t["b"]], "task": t["title"], "metric": t["label"],
                         "units": t["n"], "as recorded": t["mean_a"].round(4), "remedied": t["mean_b"].round(4),
                         "change [95 % CI]": [_change(r) for r in t.itertuples()],
                         "simultaneous CI": [interval(lo, hi, "+.3f", sep=", ") for lo, hi in zip(t["sim_low"],
                                                                                               t["sim_high"])],
                         "E": t["effect"], "p (Holm)": t["p_adjusted"],
                         "reading": [READING.get(v, v) for v in t["verdict"]]})


def cost_figure(rep: RemediesReport) -> plt.Figure | None:
    """Each paired change in units of its E, with its simultaneous interval: inside ±1, the remedy changes nothing
    that matters."""
    t = rep.table
    if not len(t):
        return None
    sign = np.where(t["direction"] == "lower", -1.0, 1.0)
    e = t["effect"].to_numpy(float)
    x, lo, hi = (sign * t[c].to_numpy(float) / e for c in ("diff", "sim_low", "sim_high"))
    lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
    y = np.arange(len(t))[::-1]
    fig, ax = plt.subplots(figsize=(WIDTH, 0.9 + 0.28 * len(t)))
    colours = [PALETTE["healthy"] if v == IMPROVES else PALETTE["problematic"] if v == WORSENS else PALETTE["muted"]
               for v in t["verdict"]]
    ax.hlines(y, lo, hi, color=colours, lw=2)
    ax.scatter(x, y, color=colours, zorder=3, s=18)
    for edge in (-1, 1):
        ax.axvline(edge, color=PALETTE["muted"], ls="--", lw=0.8)
    ax.axvline(0, color=PALETTE["muted"], lw=0.8)
    ax.set_yticks(y, [f"{b} · {c} · {m}" for b, c, m in zip(t["b"], t["chapter"], t["label"])], fontsize=7)
    ax.set_xlabel("change after the remedy, in units of E (positive: better)")
    fig.tight_layout()
    return fig


def show_summary(rep: RemediesReport) -> None:
    show_markdown(narrative(rep))


def show_costs(rep: RemediesReport) -> None:
    if rep.neighbours:
        show_table(pd.DataFrame([{"remedy": w["label"], "answers": ", ".join(w["answers"]), "rows": w["rows"],
                                  f"top-{w['k']} lists changed by more than half": f"{w['changed_share']:.1%}",
                                  "mean overlap": round(w["mean_overlap"], 3)} for w in rep.neighbours.values()]),
                   caption="Without a task: each remedy's what-if on the cosine neighbour lists (exact top-k lists "
                           "before and after, per row).", label="tbl-remedies-what-if")
    table = display_table(rep)
    if len(table):
        decided = table["reading"].isin([READING[IMPROVES], READING[WORSENS]])
        if decided.any():
            show_table(table[decided], caption="The task metrics a remedy changes beyond the effect that matters, "
                                               "paired with the recorded ones (change = remedied − as recorded; "
                                               "simultaneous CI: Bonferroni over the table).", label="tbl-remedies")
        rest = table[~decided]
        if len(rest):
            counts = (rest.groupby(["remedy", "task"], sort=False)["reading"].value_counts().unstack(fill_value=0)
                      .reset_index())
            show_table(counts, caption=f"The other {len(rest)} comparisons, per task: no change beyond the effect "
                                       "that matters was shown (each one's numbers: results/remedies.json, the "
                                       "explore notebook).", label="tbl-remedies-rest")
    fig = cost_figure(rep)
    if fig is not None:
        show_figure(fig, caption="The paired changes in units of the effect that matters: outside the dashed "
                                 "lines a remedy changes a task by more than E.", label="fig-remedies")


#: which remedies are checked (each re-scores every task of the run on the remedied vectors)
WHICH = Option("remedies", "standard", choices=("standard", "all"),
               help="the remedies checked: 'standard' each flagged diagnostic's standard ones (centring and "
                    "all-but-the-top for anisotropy; centring for poor uniformity and hubness; whitening for "
                    "dimensional collapse), 'all' every one it lists (whitening too); each remedy re-scores every "
                    "task of the run")

CHAPTER = ChapterSpec(
    name="remedies", title="What the geometry costs", order=51,
    description="Does a flagged geometry diagnostic cost any task? Its standard remedies (centring and all-but-the-top for anisotropy, centring for hubness and uniformity, whitening for collapse; every one with --set remedies=all) applied and every task of the run re-scored on the same plan, paired with its own numbers.",
    requires=("vectors",), options=(MDE, WHICH), stage=1, kind="diagnostic",
)
