"""The Stability-over-training-time chapter: the trajectory between checkpoints, across runs at each
checkpoint, and the movement of entity cohorts (computed in
:mod:`embeval_report.metrics.training_stability`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import ChapterSkipped
from ..metrics.stability import CORRELATION_BANDS, MIN_ENTITIES
from ..metrics.training_stability import (
    REF_MOVEMENT,
    REF_TRANCHE,
    SPECS,
    TRAINING_METRICS,
    Checkpoint,
    TrainingResult,
    adapted_k,
    cohort_table,
    compare_spaces,
    largest_comparison,
    measure_training_stability,
)
from ..io.runs import load_tranches
from ..present.display import escape, show_figure, show_markdown, show_metrics, show_table, smaller_k_note
from ..present.escape import mathtext
from ..present.format import interval, metric_text
from ..present.plotting import PALETTE, WIDTH
from ..stats import BCA_MAX
from .declaration import ChapterSpec, K

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["TrainingReport", "precheck", "compute", "training_narrative", "transitions_display_table",
           "to_final_display_table", "cross_run_display_table", "cohort_display_table", "trajectory_figure",
           "cohort_figure", "show_summary", "show_training_metrics", "show_trajectory", "show_cohorts",
           "show_checkpoints",
           "SPECS", "TRAINING_METRICS", "REF_TRANCHE", "REF_MOVEMENT", "Checkpoint", "TrainingResult", "cohort_table",
           "compare_spaces", "load_tranches", "measure_training_stability"]


@dataclass(frozen=True)
class TrainingReport:
    """Everything the chapter shows."""

    result: TrainingResult
    k_requested: int


def _too_few(most: int) -> str:
    return (f"no two checkpoints share {MIN_ENTITIES} entities (the most any compared pair shares is {most}), so no "
            "k-NN overlap can be measured")


def precheck(es, side, settings) -> str | None:
    """Why the chapter cannot run: no compared pair of checkpoints shares enough entities."""
    if not side.tranches:
        return None
    most = largest_comparison(side.tranches, es.n)
    return _too_few(most) if most < MIN_ENTITIES else None


def compute(ctx: ChapterContext) -> TrainingReport:
    """Compare the checkpoints and record every number."""
    tranches = ctx.side.tranches
    k_requested = ctx.option("k")
    k = adapted_k(tranches, ctx.es.n, k_requested)
    if k < 1:
        raise ChapterSkipped(_too_few(largest_comparison(tranches, ctx.es.n)))
    r = measure_training_stability(ctx.es, tranches, k, level=ctx.level, seed=ctx.seed, device=ctx.device)
    ctx.rec.add(*r.metrics.values())
    ctx.rec.note(k=k, **({"k_requested": k_requested} if k != k_requested else {}), runs=r.runs,
                 checkpoints=r.coverage.to_dict(orient="records"), transitions=r.transitions.to_dict(orient="records"),
                 to_final=r.to_final.to_dict(orient="records"), cross_run=r.cross_run.to_dict(orient="records"),
                 cohorts=r.cohorts.to_dict(orient="records"),
                 **({"dimension_mismatch": r.info["dimension_mismatch"]} if "dimension_mismatch" in r.info else {}))
    return TrainingReport(r, k_requested)


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _trajectory_text(r: TrainingResult) -> str | None:
    t = r.transitions
    if not ("k-NN overlap" in t and t["k-NN overlap"].notna().any() and "tranche_movement_last" in r.metrics):
        return None
    n_runs = len(r.runs)
    tt = t.dropna(subset=["k-NN overlap"])
    first, last = tt.groupby("run").head(1), tt.groupby("run").tail(1)
    rising = (last["k-NN overlap"].mean() - first["k-NN overlap"].mean()) if len(tt) > len(first) else 0.0
    trend = ("rises" if rising > 0.02 else "falls" if rising < -0.02 else "stays about level")
    move = r.metrics["tranche_movement_last"]
    moved = (f"entities move by 1 − cos = {metric_text(move, '.4f')} on average after alignment and"
             if move.value is not None and math.isfinite(move.value) else "entities")
    kept = r.values["tranche_knn_overlap_last"]
    return (f"Between consecutive checkpoints the k-NN overlap {trend} from {first['k-NN overlap'].mean():.3f} "
            f"(first transition) to {last['k-NN overlap'].mean():.3f} (last)"
            + (", averaged over runs" if n_runs > 1 else "")
            + (": the neighbourhoods consolidate as training proceeds." if rising > 0.02 else
               ": neighbourhoods keep changing late in training." if rising < -0.02 else ".")
            + f" At the last transition {moved} keep {kept:.1%} of their neighbours"
            + ("; training has largely settled." if kept >= 0.8 else
               "; the space is still moving at the end of training, so a later checkpoint could give different "
               "neighbours." if kept < 0.5 else "."))


def _cohort_text(co: pd.DataFrame) -> str | None:
    if not len(co) or co["cohort_step"].nunique() < 2:
        return None
    at = co[co["step"] == co["step"].max()].sort_values("cohort_step")
    if len(at) < 2:
        return None
    early, late = at.iloc[0], at.iloc[-1]
    if not (math.isfinite(early["mean movement"]) and math.isfinite(late["mean movement"])):
        return None
    ratio = late["mean movement"] / early["mean movement"] if early["mean movement"] > 0 else float("inf")
    verdict_txt = ("Entities introduced early have become anchors: they move much less than later arrivals, "
                   "as the age-of-acquisition hypothesis of seed 003 §5 predicts." if ratio > 1.5 else
                   "Early and late cohorts move by similar amounts: no anchoring of early entities is visible."
                   if ratio > 0.67 else "Later cohorts move less than early ones.")
    return (f"At the last transition (to {escape(late['tranche'])}), entities first seen in "
            f"{escape(early['cohort'])} move by {early['mean movement']:.4f} on average (n = {early['n']:,}), "
            f"those first seen in {escape(late['cohort'])} by {late['mean movement']:.4f} (n = {late['n']:,}). "
            + verdict_txt)


def training_narrative(r: TrainingResult) -> str:
    """Markdown paragraphs on the training-time trajectory and the cohorts."""
    n_runs = len(r.runs)
    parts = [f"{len(r.coverage)} checkpoints of {n_runs} run{'s' if n_runs > 1 else ''} "
             f"({', '.join(escape(x) for x in r.runs)}) are compared, with neighbourhoods of k = {r.k}."]
    other = r.info.get("dimension_mismatch")
    if other:
        names = ", ".join(f"**{escape(m['name'])}** (d = {m['d']})" for m in other)
        parts.append(f"**Dimensions.** The main set has d = {r.info['d_reference']}, but the checkpoint"
                     f"{'s' if len(other) > 1 else ''} {names} {'have' if len(other) > 1 else 'has'} another "
                     "dimension. Checkpoints of different dimensions share no space: the aligned cosine and the "
                     "movement 1 − cos between them are not defined (recorded as null with this reason, — in the "
                     "tables); their k-NN overlap and similarity correlation compare neighbourhoods within each "
                     "space and are kept.")
    parts.append(_trajectory_text(r))
    if "tranche_knn_overlap_first_to_final" in r.values:
        parts.append(f"The first checkpoint shares {r.values['tranche_knn_overlap_first_to_final']:.1%} of each "
                     "entity's neighbours with the final one (entities present in both).")
    c = r.cross_run
    if len(c) and "k-NN overlap" in c and c["k-NN overlap"].notna().any():
        cc = c.dropna(subset=["k-NN overlap"])
        parts.append(
            f"Across runs (seed 003 §3), the k-NN overlap between runs at the same tranche goes from "
            f"{cc['k-NN overlap'].iloc[0]:.3f} ({escape(cc['tranche'].iloc[0])}) to {cc['k-NN overlap'].iloc[-1]:.3f} "
            f"({escape(cc['tranche'].iloc[-1])})"
            + (": independent runs converge to more similar neighbourhoods as training proceeds."
               if cc["k-NN overlap"].iloc[-1] > cc["k-NN overlap"].iloc[0] + 0.02 else
               ": runs do not become more alike with training." if len(cc) > 1 else "."))
    parts.append(_cohort_text(r.cohorts))
    return "\n\n".join(p for p in parts if p)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def transitions_display_table(t: TrainingResult) -> pd.DataFrame:
    """Consecutive-tranche comparisons as shown in the report."""
    return t.transitions.drop(columns=["step"], errors="ignore")


def to_final_display_table(t: TrainingResult) -> pd.DataFrame:
    """Each tranche against its run's final tranche, as shown in the report."""
    return t.to_final.drop(columns=["step"], errors="ignore")


def cross_run_display_table(t: TrainingResult) -> pd.DataFrame:
    """Runs compared with each other at each shared tranche, as shown in the report."""
    c = t.cross_run
    if not len(c) or "k-NN overlap" not in c:
        return c
    out = c[["tranche", "runs", "n", "k-NN overlap"]].copy()
    out["95 % CI"] = [interval(lo, hi, ".3f", sep=" – ") for lo, hi in zip(c["ci_low"], c["ci_high"])]
    for col in ("aligned cosine", "similarity correlation", "verdict"):
        out[col] = c[col]
    return out


def cohort_display_table(t: TrainingResult) -> pd.DataFrame:
    """Cohort movement as shown in the report."""
    co = t.cohorts
    if not len(co):
        return co
    return pd.DataFrame({"cohort (first seen)": co["cohort"], "movement into": co["tranche"], "n": co["n"],
                         "mean 1 − cos": co["mean movement"],
                         "95 % CI": [interval(lo, hi, ".4f", sep=" – ") for lo, hi in zip(co["ci_low"], co["ci_high"])],
                         "median 1 − cos": co["median movement"], "k-NN overlap": co["k-NN overlap"]})


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _measured(df: pd.DataFrame, run: str | None = None) -> pd.DataFrame:
    """Rows with a k-NN overlap (of one run)."""
    if "k-NN overlap" not in df:
        return pd.DataFrame()
    if run is not None:
        df = df[df["run"] == run]
    return df.dropna(subset=["k-NN overlap"])


def _short(name, width: int = 12) -> str:
    """A tranche name as a tick label: at most ``width`` characters, cut with …"""
    name = str(name)
    return name if len(name) <= width else name[:width - 1] + "…"


def trajectory_figure(t: TrainingResult) -> plt.Figure:
    """k-NN overlap and aligned cosine along training: consecutive tranches, vs final, across runs."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    colors = [PALETTE["data"], PALETTE["accent"], "#7b4ea3", "#2b8a8a", PALETTE["reference"]]
    names_by_step: dict[int, str] = {}
    for i, run in enumerate(t.runs):
        c = colors[i % len(colors)]
        tr, tf = _measured(t.transitions, run), _measured(t.to_final, run)
        suffix = f" ({mathtext(run)})" if len(t.runs) > 1 else ""
        if len(tr):
            a.plot(tr["step"], tr["k-NN overlap"], "o-", color=c, label="consecutive tranches" + suffix)
            b.plot(tr["step"], tr["aligned cosine"], "o-", color=c, label="consecutive tranches" + suffix)
            names_by_step.update(dict(zip(tr["step"], tr["to"])))
        if len(tf):
            a.plot(tf["step"], tf["k-NN overlap"], "s--", color=c, alpha=0.75, label="vs final tranche" + suffix)
            b.plot(tf["step"], tf["aligned cosine"], "s--", color=c, alpha=0.75, label="vs final tranche" + suffix)
            names_by_step.update(dict(zip(tf["step"], tf["tranche"])))
    cr = _measured(t.cross_run)
    if len(cr):
        a.errorbar(cr["step"], cr["k-NN overlap"],
                   yerr=[(cr["k-NN overlap"] - cr["ci_low"]).fillna(0), (cr["ci_high"] - cr["k-NN overlap"]).fillna(0)],
                   fmt="^-", color="#333", capsize=3, label="across runs, same tranche")
        b.plot(cr["step"], cr["aligned cosine"], "^-", color="#333", label="across runs, same tranche")
        names_by_step.update(dict(zip(cr["step"], cr["tranche"])))
    steps = sorted(names_by_step)
    for ax, ylabel in ((a, f"k-NN overlap (k = {t.k})"), (b, "Aligned cosine")):
        ax.set_xticks(steps, [mathtext(_short(names_by_step[s])) for s in steps], rotation=20, fontsize=8)
        ax.set(xlabel="Tranche (consecutive: the later of the two)", ylabel=ylabel)
    if not any(np.isfinite(np.asarray(line.get_ydata(), float)).any() for line in b.get_lines()):
        b.text(0.5, 0.5, "undefined: no spread to align", ha="center", va="center", transform=b.transAxes)
    a.set(ylim=(0, 1.02), title="Neighbourhood stability along training")
    b.set(title="Aligned cosine along training")
    if steps:
        a.legend(fontsize=7.5, loc="lower right")
    return fig


def cohort_figure(t: TrainingResult) -> plt.Figure:
    """Mean movement 1 − cos between consecutive tranches, one line per cohort (first tranche seen)."""
    co = t.cohorts
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 3.8))
    colors = plt.get_cmap("viridis")(np.linspace(0.05, 0.85, max(1, co["cohort_step"].nunique() if len(co) else 1)))
    for c, (cs, grp) in zip(colors, co.groupby("cohort_step", sort=True) if len(co) else []):
        grp = grp.sort_values("step")
        a.errorbar(grp["step"], grp["mean movement"],
                   yerr=[(grp["mean movement"] - grp["ci_low"]).fillna(0), (grp["ci_high"] - grp["mean movement"]).fillna(0)],
                   fmt="o-", color=c, capsize=3, label=f"first seen: {mathtext(grp['cohort'].iloc[0])}")
    if len(co):
        steps = sorted(co["step"].unique())
        names = dict(zip(co["step"], co["tranche"]))
        a.set_xticks(steps, [mathtext(names[s]) for s in steps], rotation=20, fontsize=8)
        a.legend(fontsize=8)
        a.set_yscale("log") if (co["mean movement"] > 0).all() and co["mean movement"].max() / max(
            co["mean movement"].min(), 1e-12) > 20 else None
    a.set(xlabel="Tranche (movement from the previous one)", ylabel="Mean movement 1 − cos",
          title="Cohort movement along training")
    mv = t.movement[(t.movement["step"] >= 1) & np.isfinite(t.movement["movement"].astype(float))]
    if len(mv):
        last = mv[mv["step"] == mv["step"].max()]
        groups = [(nm, g["movement"].to_numpy()) for nm, g in last.groupby("cohort_step", sort=True)]
        labels = [mathtext(last[last["cohort_step"] == cs]["cohort"].iloc[0]) for cs, _ in groups]
        b.boxplot([g for _, g in groups], showfliers=False, widths=0.6,
                  medianprops={"color": PALETTE["reference"]})
        b.set_xticks(range(1, len(groups) + 1), [f"{lab}\n(n={len(g):,})" for lab, (_, g) in zip(labels, groups)],
                     fontsize=8)
        b.set(xlabel="Cohort (tranche first seen)", ylabel="Movement 1 − cos",
              title=f"Movement into {mathtext(last['tranche'].iloc[0])}, by cohort")
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: TrainingReport) -> None:
    r = rep.result
    smaller_k_note(r.k, rep.k_requested, "The compared checkpoints share too few entities")
    show_markdown(training_narrative(r))


def show_training_metrics(rep: TrainingReport) -> None:
    r = rep.result
    if not r.metrics:
        show_markdown(f"No pair of checkpoints shares the k + 2 = {r.k + 2} entities a comparison needs.")
        return
    show_metrics(r.metrics, caption="Stability at the end of training, pooled over runs (no threshold table "
                                    "applies; intervals: bootstrap or normal interval over entities, see the Method "
                                    "section).", label="tbl-training-metrics",
                 definitions="Here $T$ is a run's final checkpoint and $\\tilde v^t_i$ the mean-centred vector of "
                             "entity $i$ at checkpoint $t$.")


def show_trajectory(rep: TrainingReport) -> None:
    r = rep.result
    what = (f"Left: k-NN overlap (k = {r.k}) between consecutive checkpoints (solid), with the final checkpoint "
            "(dashed) and across runs at the same checkpoint (black, 95 % CI). Right: the same comparisons by mean "
            "aligned cosine.")
    show_figure(trajectory_figure(r), caption=what, label="fig-training-trajectory")
    show_table(transitions_display_table(r), caption="Consecutive checkpoints of each run: k-NN overlap, aligned "
               "cosine, mean movement 1 − cos and pairwise similarity correlation (entities in both).",
               label="tbl-training-transitions")
    show_table(to_final_display_table(r), caption="Each checkpoint against its run's final checkpoint.",
               label="tbl-training-final")
    if len(r.cross_run):
        show_table(cross_run_display_table(r), caption="Runs compared with each other at each checkpoint name they "
                   f"share (mean over run pairs; verdict: {CORRELATION_BANDS.table} on the "
                   "similarity correlation).",
                   label="tbl-training-cross")


def show_cohorts(rep: TrainingReport) -> None:
    r = rep.result
    if not len(r.cohorts):
        show_markdown("No entity appears in two consecutive checkpoints, so no movement can be measured.")
        return
    if not np.isfinite(r.cohorts["mean movement"].to_numpy(float)).any():
        show_markdown("Movement is undefined here: after mean-centring every entity has the same vector in a "
                      "checkpoint, so there is nothing to align.")
        show_table(cohort_display_table(r), caption="Cohorts and checkpoints compared.", label="tbl-training-cohorts")
        return
    show_figure(cohort_figure(r),
                caption="Left: mean movement 1 − cos into each checkpoint, one line per cohort (95 % CI). Right: "
                        "distribution of the movement into the last checkpoint by cohort (box: quartiles, "
                        "whiskers: 1.5 IQR).", label="fig-training-cohorts")
    show_table(cohort_display_table(r), caption="Movement by cohort and checkpoint, pooled over runs (CI: BCa "
               f"bootstrap over entities up to {BCA_MAX:,} entities, normal interval beyond).",
               label="tbl-training-cohorts")


def show_checkpoints(rep: TrainingReport) -> None:
    show_table(rep.result.coverage, caption="The checkpoints, in training order within each run.",
               label="tbl-training-checkpoints")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

CHAPTER = ChapterSpec(
    name="training_stability", title="Stability over training time", order=75,
    description="How the space settles during training: k-NN overlap and aligned cosine between consecutive checkpoints and against the final one, stability across runs at each checkpoint, and the movement of entity cohorts by the checkpoint that introduced them (seed 003 §3, §5).",
    requires=("tranches",),
    options=(K,), precheck=precheck, demo="stability",
)
