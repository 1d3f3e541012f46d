"""The Drift-over-time chapter: Table 217.3 alerts, the Figure 217.7 dashboard, the latest snapshot's
metrics, who moved, and the distribution tests (computed in :mod:`embeval_report.metrics.drift` and
:mod:`embeval_report.metrics.two_sample`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import ChapterSkipped
from ..metrics import drift as dr
from ..metrics.thresholds import SEVERITY, THRESHOLDS
from ..present.display import callout, escape, show_figure, show_markdown, show_table
from ..present.display import show_metrics as show_metric_table
from ..present.escape import mathtext
from ..present.format import interval, number, percent, value_with_ci
from ..present.plotting import PALETTE, WIDTH
from .declaration import INF, ChapterSpec, Option
from .findings import ChapterResults, Effect, Finding, threshold_findings

if TYPE_CHECKING:
    from .setup import ChapterContext

#: the Table 217.3 bands, as the captions, narrative and figures quote them
RATIO, CORRELATION, ANOMALOUS, SIGMA = (THRESHOLDS[dr.ALERT_CHECKS[k]] for k in (
    "mean_drift", "pairwise_similarity_correlation", "anomalous_fraction", "procrustes_distance"))
#: metadata columns shown next to the ids of the entities that moved most
META_COLUMNS = ("kind", "label", "title", "name")


@dataclass(frozen=True)
class DriftReport:
    """Everything the chapter shows."""

    result: dr.DriftResult
    ids: np.ndarray
    metadata: pd.DataFrame | None
    groups: pd.DataFrame       # drift of the latest snapshot by metadata group (empty without group columns)


def precheck(es, side, settings) -> str | None:
    """Why drift cannot run on this valid but degenerate input (too few entities in common), or None."""
    if es.n < dr.MIN_MATCHED:
        return (f"drift needs at least {dr.MIN_MATCHED} entities present in both the baseline and each snapshot; "
                f"the baseline has only {es.n} vectors")
    snaps = getattr(side, "snapshots", None) or []
    few = [s for s in snaps if len(s.index) < dr.MIN_MATCHED]
    if few:
        return (f"drift needs at least {dr.MIN_MATCHED} entities present in both the baseline and each snapshot; "
                f"snapshot {few[0].name!r} shares only {len(few[0].index)}")
    if settings is not None and settings.option("mmd_sample") < 2:
        return f"option mmd_sample must be at least 2 rows per side, not {settings.option('mmd_sample')}"
    return None


def compute(ctx: ChapterContext) -> DriftReport:
    """Measure every snapshot against the baseline, and record every number."""
    es, snapshots = ctx.es, ctx.side.snapshots
    if not snapshots:
        raise ChapterSkipped("no snapshots given (manifest field `snapshots`)")
    result = dr.measure_drift(es.vectors, snapshots, mmd_sample=ctx.option("mmd_sample"), level=ctx.level,
                              seed=ctx.seed, device=ctx.device)
    ctx.rec.add(*result.metrics.values())
    units = dr.drift_units(result, es.ids)
    ctx.rec.units(units, key="entity", unit="entities",
                  means=[c for c in units.columns[1:] if c in result.metrics])
    ctx.rec.test(*dr.drift_tests(result))
    groups = dr.drift_by_group(result, es.metadata)
    ctx.rec.note(**{k: v for k, v in result.info.items() if k != "device"}, pattern=result.pattern,
                 reference_drift=result.reference_drift,
                 snapshots=[{"name": s.name, "slug": s.slug, "timestamp": s.timestamp, "matched": len(s.index),
                             "new": len(s.new_ids), "departed": len(s.departed_ids),
                             "new_ids": [str(i) for i in s.new_ids[:20]],
                             "departed_ids": [str(i) for i in s.departed_ids[:20]]} for s in result.snapshots],
                 alerts=result.alerts.to_dict(orient="records"), by_group=groups.to_dict(orient="records"))
    return DriftReport(result, np.asarray(es.ids, dtype=object), es.metadata, groups)


def _finite(x) -> bool:
    return x is not None and not pd.isna(x) and math.isfinite(x)


def mismatched(result: dr.DriftResult, s: dr.SnapshotDrift) -> bool:
    """Whether snapshot ``s`` has another dimension than the baseline (no shared space: see
    :data:`~embeval_report.metrics.drift.SHARED_SPACE`)."""
    return s.d is not None and s.d != result.d


def dimension_text(result: dr.DriftResult) -> str:
    """The paragraph on snapshots of another dimension than the baseline ("" when there is none)."""
    other = [s for s in result.snapshots if mismatched(result, s)]
    if not other:
        return ""
    names = ", ".join(f"**{escape(s.name)}** (d = {s.d})" for s in other)
    return (f"**Dimensions.** The baseline has d = {result.d}, but {names} {'has' if len(other) == 1 else 'have'} "
            "another dimension: positions, rotations and coordinates cannot be compared across dimensions, so for "
            f"{'it' if len(other) == 1 else 'them'} the per-entity cosine drift, the anomalous fraction, the "
            "Procrustes distance and its σ, the mean shift and the distribution tests (MMD, per-dimension KS, domain "
            "classifier) are not defined and are recorded as null with this reason. The k-NN overlap with the "
            "baseline and the pairwise similarity correlation compare neighbourhoods and similarities within each "
            "space and are kept, as are the APCS and PR/d changes (each set in its own space).")


def _ci_label(result: dr.DriftResult) -> str:
    return f"{100 * result.info['level']:g} % CI"


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

_ALERT_WORD = {None: "", "healthy": "ok", "concerning": "warning", "problematic": "critical"}


def alert_table(result: dr.DriftResult) -> pd.DataFrame:
    """Table 217.3 per snapshot: each check's value and the snapshot's worst level."""
    def cell(text, level):
        level = dr._level(level)
        return text if not level or level == "healthy" else f"{text} ({_ALERT_WORD[level]})"
    rows = []
    for i, (_, r) in enumerate(result.alerts.iterrows()):
        ratio = "" if not _finite(r["mean_drift_ratio"]) else f" ({r['mean_drift_ratio']:.2f}×)"
        sigma = (f" ({r['procrustes_sigma']:+.1f}σ)" if _finite(r["procrustes_sigma"]) else
                 f"; σ n/a (fewer than {dr.MIN_TREND_POINTS})" if i < dr.MIN_TREND_POINTS else "")
        rows.append({
            "snapshot": r["snapshot"],
            "mean drift (× first)": cell(number(r["mean_drift"]) + ratio, r["check_mean_drift"]),
            "pairwise corr.": cell(number(r["pairwise_similarity_correlation"]),
                                   r["check_pairwise_similarity_correlation"]),
            "anomalous": cell(percent(r["anomalous_fraction"], 1), r["check_anomalous_fraction"]),
            "Procrustes D_P (σ)": cell(number(r["procrustes_distance"]) + sigma, r["check_procrustes_distance"]),
            "verdict": r["verdict"]})
    return pd.DataFrame(rows)


def neighbourhood_table(result: dr.DriftResult) -> pd.DataFrame:
    """Per snapshot: population (in both, new, departed) and the entity-level metrics."""
    rows = []
    for r, (_, a) in zip(result.snapshots, result.alerts.iterrows()):
        v = r.values
        rows.append({"snapshot": r.name, "timestamp": "" if r.timestamp is None else str(r.timestamp),
                     "in both": int(v["matched_entities"]), "new": int(v["new_entities"]),
                     "departed": int(v["departed_entities"]), "mean drift": v["mean_drift"],
                     "since previous": a["step_drift"],
                     "L2 / RMS norm": v["mean_l2_drift"], "k-NN overlap": v["knn_overlap_baseline"]})
    df = pd.DataFrame(rows)
    return df.drop(columns="timestamp") if not df["timestamp"].astype(bool).any() else df


def distribution_table(result: dr.DriftResult) -> pd.DataFrame:
    """Per snapshot: the distribution-drift tests and the moment changes."""
    rows = []
    for r in result.snapshots:
        v, c = r.values, r.classifier
        other = mismatched(result, r)
        rows.append({"snapshot": r.name, "MMD²": v["mmd"], "MMD p": v["mmd_p_value"],
                     "KS dims changed": f"— (d = {r.d})" if other else
                     f"{int(r.ks.rejected.sum())} of {len(r.ks.rejected)}",
                     "max KS": v["ks_max_statistic"],
                     f"domain AUC [{_ci_label(result)}]": f"— (d = {r.d})" if other else
                     f"{c.auc:.3f} [{interval(c.ci_low, c.ci_high, '.3f', sep=', ')}]",
                     "mean shift": v["mean_shift"], "Δ APCS": v["isotropy_drift_apcs"],
                     "Δ PR/d": v["isotropy_drift_pr_fraction"]})
    return pd.DataFrame(rows)


def movers_table(result: dr.DriftResult, ids, metadata: pd.DataFrame | None = None, *, snapshot: int = -1,
                 n: int = 15) -> pd.DataFrame:
    """The ``n`` entities that moved most in one snapshot (default: the latest), by cosine drift."""
    r = result.snapshots[snapshot]
    order = np.argsort(-r.drift, kind="stable")[:n]
    rows = r.index[order]
    ids = np.asarray(ids, dtype=object)
    df = pd.DataFrame({"rank": np.arange(1, len(order) + 1), "id": [str(i) for i in ids[rows]],
                       "drift 1 − cos": r.drift[order], "k-NN overlap": r.overlap[order],
                       "anomalous": np.where(r.anomalous[order], "yes", "no")})
    if metadata is not None:
        for col in [c for c in META_COLUMNS if c in metadata.columns]:
            vals = metadata[col].to_numpy()[rows]
            df[col] = [None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in vals]
    return df


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

_LEVEL_WORD = {"healthy": "no alert", "concerning": "a warning", "problematic": "a critical alert"}
_PATTERN_TEXT = {
    "stable": "No snapshot raises a Table 217.3 alert: the space is stable over the period covered.",
    "isolated spike": ("**Pattern: isolated spike.** An alert is followed by a snapshot without one. The seed reads "
                       "isolated spikes as data-quality issues (missing features, pipeline delays, upstream "
                       "changes): check deployments and data sources around that snapshot."),
    "gradual trend": ("**Pattern: gradual trend.** Drift builds up steadily until it crosses the alert levels: "
                      "natural drift that calls for scheduled retraining; the drift per period sets how often."),
    "regime shift": ("**Pattern: sudden regime shift.** The space was stable, then drift jumped and the alerts "
                     "persist. The seed reads this as a major change (new item categories, a user population "
                     "shift, an algorithm change) that may need an architecture review as well as retraining."),
}
_STRUCTURE_READING = {"healthy": "the relational structure holds",
                      "concerning": "the organisation of the space is changing: worth investigating",
                      "problematic": "similar entities no longer stay similar: the structure has changed"}


def _ids_text(ids, limit: int = 3) -> str:
    ids = list(ids)
    shown = ", ".join(f"**{escape(i)}**" for i in ids[:limit])
    return shown + (f" and {len(ids) - limit:,} more" if len(ids) > limit else "")


def _entities_paragraph(result: dr.DriftResult, metadata, ids, by_group) -> str:
    last, row, v = result.snapshots[-1], result.alerts.iloc[-1], result.snapshots[-1].values
    lo, hi = last.cis["mean_drift"]
    k = result.info["anomaly_k"]
    text = (f"**Entities.** In {escape(last.name)} the mean cosine drift is "
            f"{value_with_ci(v['mean_drift'], lo, hi, '.4f', _ci_label(result))}, with an sd over entities of "
            f"{v['drift_std']:.4f}")
    if len(result.snapshots) > 1:
        text += (f", {row['mean_drift_ratio']:.2f}× the first interval's {result.reference_drift:.4f} "
                 f"(warning above {RATIO.healthy:g}×, critical above {RATIO.problematic:g}×)")
    else:
        text += ("; the × baseline rule of Table 217.3 cannot be applied with a single snapshot, because the "
                 "first interval is what defines the natural variation")
    text += (f". {v['anomalous_fraction']:.1%} of the entities moved more than μ + {k:g}σ (the seed expects "
             f"2–{ANOMALOUS.healthy:.0%} from natural variation; warning above {ANOMALOUS.healthy:.0%}, critical above "
             f"{ANOMALOUS.problematic:.0%}).")
    moved = float(last.drift.max()) > dr.DRIFT_FLOOR
    if not moved:
        text += f" No entity moved by more than numerical noise (drift ≤ {dr.DRIFT_FLOOR:g})."
    elif v["drift_std"] == 0:
        text += " Every entity moved by the same amount, so no entity stands out."
    if by_group is None:
        by_group = dr.drift_by_group(result, metadata) if metadata is not None else pd.DataFrame()
    if len(by_group) and last.anomalous.sum() >= 5:
        top = by_group.sort_values("share of anomalies %", ascending=False).iloc[0]
        share_of_set = 100 * top["entities"] / len(last.index)
        if top["share of anomalies %"] > 2 * share_of_set and top["share of anomalies %"] > 25:
            text += (f" The anomalies concentrate in {escape(top['column'])} = **{escape(top['group'])}**: "
                     f"{top['share of anomalies %']:.0f} % of them, from {share_of_set:.0f} % of the entities "
                     f"(mean drift {top['mean drift']:.4f} there against {v['mean_drift']:.4f} overall). "
                     "A drift confined to one group points to a change in that group (relabelled category, "
                     "shifted audience) rather than to retraining noise.")
    if ids is not None and len(last.index) and moved and v["drift_std"] > 0:
        top_rows = last.index[np.argsort(-last.drift)[:3]]
        text += f" The entities that moved most: {_ids_text(np.asarray(ids, dtype=object)[top_rows])}."
    return text


def _structure_paragraph(result: dr.DriftResult) -> str:
    snaps, row = result.snapshots, result.alerts.iloc[-1]
    last, kk = snaps[-1], result.info["k"]
    v = last.values
    corr = v["pairwise_similarity_correlation"]
    if _finite(corr):
        lo, hi = last.cis.get("pairwise_similarity_correlation", (None, None))
        text = (f"**Structure.** The cosine similarities of all pairs correlate at "
                f"{value_with_ci(corr, lo, hi, '.4f', _ci_label(result))} with the baseline's "
                f"({_STRUCTURE_READING[CORRELATION.verdict(corr)]}; warning below {CORRELATION.healthy:g}, critical "
                f"below {CORRELATION.problematic:g})")
    else:
        text = ("**Structure.** The correlation of the pairwise cosine similarities is undefined here (every pair is "
                "equally similar in the baseline or in the snapshot)")
    text += (f", and on average {v['knn_overlap_baseline']:.1%} of each entity's {kk} nearest neighbours are still "
             f"among its {kk} nearest.")
    if mismatched(result, last):
        return text + (f" The Procrustes distance needs one shared space and is not defined for {escape(last.name)} "
                       f"(d = {last.d}, the baseline d = {result.d}), so its Table 217.3 rule cannot be applied.")
    if not _finite(v["procrustes_distance"]):
        return text + (" The Procrustes distance is undefined (no variance in the baseline or the snapshot), so its "
                       "Table 217.3 rule cannot be applied.")
    text += (f" The Procrustes distance is {v['procrustes_distance']:.4f} (0 = identical up to rotation, √2 = "
             "unrelated)")
    if _finite(row["procrustes_sigma"]):
        text += f", {row['procrustes_sigma']:+.1f}σ against the earlier snapshots"
        return text + (f" (σ estimated from only {len(snaps) - 1} earlier values, so large multiples are common "
                       "after a flat start; the seed's own rule uses a trailing window of 5)." if len(snaps) - 1 < 5
                       else ".")
    if len(snaps) - 1 < dr.MIN_TREND_POINTS:
        return text + (f"; σ above the trend is n/a: its Table 217.3 rule needs at least {dr.MIN_TREND_POINTS} "
                       f"earlier snapshots (a spread of fewer says nothing), and {escape(last.name)} has "
                       f"{len(snaps) - 1}.")
    return text + "; its Table 217.3 rule cannot be applied because an earlier distance is undefined."


def _or_undefined(x, fmt: str) -> str:
    return format(x, fmt) if _finite(x) else "undefined"


def _distribution_paragraph(result: dr.DriftResult) -> str:
    last = result.snapshots[-1]
    v, mmd, auc, alpha = last.values, last.mmd, last.classifier, result.info["alpha"]
    sig = v["mmd_p_value"] < alpha
    apcs = v["isotropy_drift_apcs"]
    shift = (f"The mean moved by {v['mean_shift']:.3f} of the baseline's spread" if _finite(v["mean_shift"]) else
             "The mean shift is undefined (the baseline has no spread)")
    return (
        f"**Distribution.** Comparing independent halves of the entities, a logistic-regression domain classifier "
        f"separates baseline from snapshot with AUC "
        f"{value_with_ci(auc.auc, auc.ci_low, auc.ci_high, '.3f', _ci_label(result))}, where 0.5 means "
        f"indistinguishable, and the kernel two-sample statistic is MMD² = {v['mmd']:.2g} (raw permutation p = "
        f"{v['mmd_p_value']:.2g} from {mmd.n_perm} permutations of {mmd.n_x:,} + {mmd.n_y:,} sampled rows, "
        f"{'below' if sig else 'not below'} {alpha:g} before any correction). "
        f"{shift}; APCS changed by {_or_undefined(apcs, '+.3f')} and PR/d by "
        f"{_or_undefined(v['isotropy_drift_pr_fraction'], '+.1%')}"
        + (" (the seed's detector alerts on an isotropy change above 0.1)" if _finite(apcs) and abs(apcs) > 0.1
           else "")
        + f". Per dimension, {int(last.ks.rejected.sum())} of {len(last.ks.rejected)} KS tests reject at "
        f"{alpha:.0%} FDR when adjusted over this snapshot's {len(last.ks.rejected)} dimensions only "
        f"(Benjamini–Hochberg; largest KS statistic {v['ks_max_statistic']:.3f}). These p-values are raw or adjusted "
        "within the chapter: the report adjusts every test together (Holm and Benjamini–Hochberg over all of them), "
        "and which of these survive is in the Statistical rigor chapter's tests table, so read the sizes above "
        "(AUC, mean shift) for how much the distribution changed.")


def narrative(result: dr.DriftResult, ids=None, metadata: pd.DataFrame | None = None, *,
              by_group: pd.DataFrame | None = None) -> str:
    """Markdown paragraphs saying what the drift numbers mean for this set."""
    snaps, a = result.snapshots, result.alerts
    last, row = snaps[-1], a.iloc[-1]
    names = ", ".join(escape(s.name) for s in snaps)
    n_alert = int((a["verdict"] != "healthy").sum())
    parts = [f"{len(snaps)} snapshot{'s' if len(snaps) > 1 else ''} ({names}) {'were' if len(snaps) > 1 else 'was'} "
             f"compared with the baseline of {result.n:,} vectors, each rotated onto the baseline (orthogonal "
             f"Procrustes on the entities present in both, never chained). {n_alert} of {len(snaps)} raise a "
             f"Table 217.3 alert; the latest, **{escape(last.name)}**, raises "
             f"{_LEVEL_WORD[row['verdict']]}."]
    parts += [p for p in (dimension_text(result),) if p]
    if mismatched(result, last):  # no shared space: only the neighbourhood structure can be read
        parts.append(_structure_paragraph(result))
    else:
        parts += [_entities_paragraph(result, metadata, ids, by_group), _structure_paragraph(result),
                  _distribution_paragraph(result)]
    new, gone = last.new_ids, last.departed_ids
    if len(new) or len(gone):
        parts.append(f"**Population.** {escape(last.name)} has {len(new):,} entities the baseline lacks"
                     + (f" (e.g. {_ids_text(new)})" if len(new) else "")
                     + f" and lacks {len(gone):,} of the baseline's"
                     + (f" (e.g. {_ids_text(gone)})" if len(gone) else "")
                     + ". New entities need inference or a cold-start policy; departed ones leave gaps in "
                       "neighbourhoods (seed 000 §217.2.3.1). They enter the distribution tests, not the "
                       "per-entity metrics.")
    parts.append(_PATTERN_TEXT[result.pattern])
    unapplied = _unapplied_checks(result)
    if unapplied:
        parts[-1] += (f" The {' and '.join(unapplied)} check{'s are' if len(unapplied) > 1 else ' is'} undefined for "
                      f"{escape(last.name)} (see the notes above), so its verdict covers only the checks that could "
                      "be applied.")
    return "\n\n".join(parts)


def _unapplied_checks(result: dr.DriftResult) -> list[str]:
    """Labels of the latest snapshot's Table 217.3 checks whose value is undefined (not merely not yet applicable)."""
    v = result.snapshots[-1].values
    if mismatched(result, result.snapshots[-1]):
        return [_CHECK_WORD[c] for c in dr.ALERT_CHECKS if c in dr.SHARED_SPACE]
    return [_CHECK_WORD[c] for c in dr.ALERT_CHECKS if not _finite(v[c])]


_CHECK_WORD = {"mean_drift": "mean drift", "pairwise_similarity_correlation": "pairwise correlation",
               "anomalous_fraction": "anomalous fraction", "procrustes_distance": "Procrustes distance"}


def alert_callout(result: dr.DriftResult) -> dict:
    """Arguments ``kind``, ``text``, ``title`` of :func:`embeval_report.present.display.callout` for the latest snapshot."""
    row = result.alerts.iloc[-1]
    fired = [dr.SPECS[c].label for c in dr.ALERT_CHECKS if SEVERITY[dr._level(row[f"check_{c}"])] > 0]
    level = row["verdict"]
    kind = {"problematic": "danger", "concerning": "warning"}.get(level, "success")
    title = {"danger": "Critical drift", "warning": "Drift warning", "success": "No drift alert"}[kind]
    if fired:
        text = f"In **{escape(row['snapshot'])}**: " + ", ".join(fired) + " beyond the Table 217.3 levels."
    else:
        text = (f"**{escape(row['snapshot'])}** stays within every Table 217.3 level that can be applied. These "
                "levels are the seed's starting point; calibrate them on your own history of stable periods.")
    return dict(kind=kind, title=title, text=text)


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _time_axis(ax, result: dr.DriftResult, *, label: bool = True, crowded: int = 6) -> np.ndarray:
    """Snapshots at x = 1..T, labelled by name (slanted when more than ``crowded``)."""
    x = np.arange(1, len(result.snapshots) + 1)
    slant = len(x) > crowded
    ax.set_xticks(x)
    ax.set_xticklabels([mathtext(s.name) for s in result.snapshots], rotation=30 if slant else 0,
                       ha="right" if slant else "center")
    ax.set_xlim(0.5, len(x) + 0.5)
    if label:
        ax.set_xlabel("Time period (snapshot)")
    return x


def dashboard_figure(result: dr.DriftResult) -> plt.Figure:
    """Figure 217.7: mean drift (± sd, alerts), structural consistency, anomalous fraction, Procrustes distance."""
    a, floor, snaps = result.alerts, dr.DRIFT_FLOOR, result.snapshots
    fig, ((pa, pb), (pc, pd_)) = plt.subplots(2, 2, figsize=(WIDTH, 7.0))
    x = _time_axis(pa, result, label=False)
    md, sd = a["mean_drift"].to_numpy(float), np.array([s.values["drift_std"] for s in snaps])
    pa.fill_between(x, np.clip(md - sd, 0, None), md + sd, color=PALETTE["data"], alpha=0.2, label="± sd over entities")
    pa.plot(x, md, "o-", color=PALETTE["data"], label="mean drift 1 − cos")
    if len(x) > 1 and math.isfinite(result.reference_drift):
        for mult, ls in ((RATIO.healthy, ":"), (RATIO.problematic, "--")):
            pa.axhline(mult * max(result.reference_drift, floor), color=PALETTE["muted"], ls=ls, lw=1,
                       label=f"{mult:g}× first interval")
    for xi, lv in zip(x, a["verdict"]):
        if SEVERITY[lv] > 0:
            pa.axvline(xi, color=PALETTE["problematic"], ls="--", lw=1, alpha=0.8)
    pa.set(ylabel="Mean drift (1 − cos)", title="A. Mean drift over time (red: alert)")
    # a wide band (drift concentrated in a few entities) would flatten the line: cut it at 2.5x the largest mean
    fin = md[np.isfinite(md)]  # a snapshot of another dimension has no per-entity drift
    ref = result.reference_drift if math.isfinite(result.reference_drift) else floor
    pa.set_ylim(0, max(2.5 * float(fin.max()) if len(fin) else 0.0, 3.0 * max(ref, floor)))
    pa.legend(fontsize=8, loc="upper left")

    _time_axis(pb, result, label=False)
    corr, overlap = a["pairwise_similarity_correlation"].to_numpy(float), [s.values["knn_overlap_baseline"] for s in snaps]
    pb.plot(x, corr, "o-", color=PALETTE["accent"], label="pairwise similarity corr.")
    pb.plot(x, overlap, "s--", color="#7b4ea3", label=f"k-NN overlap (k = {result.info['k']})")
    pb.axhline(CORRELATION.healthy, color=PALETTE["concerning"], ls=":", lw=1.1, label=f"warning < {CORRELATION.healthy:g}")
    pb.axhline(CORRELATION.problematic, color=PALETTE["problematic"], ls="--", lw=1.1,
               label=f"critical < {CORRELATION.problematic:g}")
    low = min(0.5, float(np.nanmin(np.r_[corr, overlap])) - 0.05)
    pb.set(ylabel="Correlation / overlap", ylim=(low, 1.05), title="B. Structural consistency")
    pb.legend(fontsize=8, loc="best")

    _time_axis(pc, result)
    k = result.info["anomaly_k"]
    pc.bar(x, 100 * a["anomalous_fraction"], color="#e08a2c", width=0.6, label=f"anomalous (d > μ + {k:g}σ)")
    pc.axhline(100 * ANOMALOUS.healthy, color=PALETTE["concerning"], ls="--", lw=1.1,
               label=f"{ANOMALOUS.healthy:.0%} (warning)")
    pc.axhline(100 * ANOMALOUS.problematic, color=PALETTE["problematic"], ls="--", lw=1.1,
               label=f"{ANOMALOUS.problematic:.0%} (critical)")
    pc.set(ylabel="Anomalous entities (%)", title="C. Entity-level anomalies")
    pc.set_ylim(0, max(120 * ANOMALOUS.problematic, 100 * float(a["anomalous_fraction"].max()) * 1.15))
    pc.legend(fontsize=8, loc="upper left")

    _time_axis(pd_, result)
    dp = a["procrustes_distance"].to_numpy(float)
    pd_.plot(x, dp, "o-", color="#a0399a", label="Procrustes distance")
    lims = []
    for t in range(len(dp)):
        prev = dp[:t]
        if len(prev) >= dr.MIN_TREND_POINTS and np.isfinite(prev).all():
            s = max(float(prev.std(ddof=1)), dr.SIGMA_FLOOR)
            lims.append((x[t], prev.mean() + SIGMA.healthy * s, prev.mean() + SIGMA.problematic * s))
    if lims:
        lx, l2, l3 = map(np.array, zip(*lims))
        pd_.scatter(lx, l2, marker="_", s=300, color=PALETTE["concerning"], label=f"trend + {SIGMA.healthy:g}σ (warning)")
        pd_.scatter(lx, l3, marker="_", s=300, color=PALETTE["problematic"],
                    label=f"trend + {SIGMA.problematic:g}σ (critical)")
    pd_.set(ylabel="Procrustes distance $D_P$", title="D. Global structure shift")
    pd_.set_ylim(bottom=0)
    pd_.legend(fontsize=8, loc="upper left")
    return fig


def distribution_figure(result: dr.DriftResult) -> plt.Figure:
    """MMD² against its permutation null, domain-classifier AUC with CI, share of dimensions changed."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(WIDTH, 3.4))
    snaps = result.snapshots
    x = _time_axis(a, result, crowded=2)
    mmd = np.array([s.mmd.mmd2 for s in snaps])
    a.plot(x, mmd, "o-", color=PALETTE["data"], label="MMD²")
    a.errorbar(x, mmd, yerr=np.abs(np.array([[s.mmd.mmd2 - s.mmd.ci_low, s.mmd.ci_high - s.mmd.mmd2] for s in snaps]).T),
               fmt="none", ecolor=PALETTE["data"], capsize=3)
    a.plot(x, [s.mmd.null_quantile for s in snaps], "_", ms=16, mew=2, color=PALETTE["reference"],
           label=f"{1 - result.info['alpha']:.0%} of permutations")
    a.axhline(0, color=PALETTE["muted"], lw=0.8)
    a.set(ylabel="Unbiased MMD²", title="Kernel two-sample test")
    a.legend(fontsize=8)
    _time_axis(b, result, crowded=2)
    auc = np.array([s.classifier.auc for s in snaps])
    err = np.array([[s.classifier.auc - s.classifier.ci_low, s.classifier.ci_high - s.classifier.auc] for s in snaps]).T
    b.errorbar(x, auc, yerr=err, fmt="o-", color=PALETTE["accent"], capsize=3, label=f"AUC ({_ci_label(result)})")
    b.axhline(0.5, color=PALETTE["muted"], ls="--", lw=1, label="0.5 = no drift")
    fin = auc[np.isfinite(auc)]  # a snapshot of another dimension has no classifier
    b.set(ylabel="Domain-classifier AUC", title="Domain classifier",
          ylim=(min(0.4, fin.min() - 0.05) if len(fin) else 0.4, max(0.75, fin.max() + 0.05) if len(fin) else 0.75))
    b.legend(fontsize=8)
    _time_axis(c, result, crowded=2)
    c.bar(x, [100 * np.nan_to_num(s.ks.rejected_fraction) for s in snaps], width=0.6, color="#2b8a8a")
    c.set(ylabel="Dimensions changed (%)", title=f"Per-dimension KS, BH {result.info['alpha']:.0%} FDR", ylim=(0, 100))
    return fig


def entity_figure(result: dr.DriftResult, metadata: pd.DataFrame | None = None) -> plt.Figure:
    """Left: per-entity drift of the latest snapshot with the μ + 2σ line. Right: mean drift per group
    over time (the group column whose groups differ most), when the metadata has one."""
    series = dr.group_drift_series(result, metadata)
    fig, axes = plt.subplots(1, 2 if series else 1, figsize=(WIDTH, 3.6), squeeze=False)
    a = axes[0, 0]
    r = result.snapshots[-1]
    d, k = r.drift, result.info["anomaly_k"]
    top = max(float(d.max()), dr.DRIFT_FLOOR * 10)
    a.hist(d, bins=np.linspace(0, top, 60), color=PALETTE["data"], alpha=0.8)
    thr = float(d.mean() + k * d.std())
    a.axvline(thr, color=PALETTE["problematic"], ls="--", lw=1.2, label=f"μ + {k:g}σ = {thr:.4f}")
    a.set_yscale("log")
    a.set(xlabel="Per-entity drift 1 − cos", ylabel="Entities (log scale)",
          title=f"Per-entity drift in {mathtext(r.name)} ({r.anomalous.mean():.1%} anomalous)")
    a.legend(fontsize=8)
    if series:
        col, table = series
        b = axes[0, 1]
        x = _time_axis(b, result)
        colors = plt.get_cmap("tab10").colors
        order = table.iloc[:, -1].sort_values(ascending=False).index
        for j, g in enumerate(order[:10]):
            b.plot(x, table.loc[g].to_numpy(float), "o-", ms=3.5, lw=1.4, color=colors[j % 10], label=mathtext(g))
        b.set(ylabel="Mean drift 1 − cos", title=f"Mean drift by {mathtext(col)}")
        b.set_ylim(bottom=0)
        b.legend(fontsize=7.5, ncol=2, loc="upper left")
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: DriftReport) -> None:
    show_markdown(narrative(rep.result, rep.ids, rep.metadata, by_group=rep.groups))
    callout(**alert_callout(rep.result))


def show_dashboard(rep: DriftReport) -> None:
    k = rep.result.info["anomaly_k"]
    show_figure(dashboard_figure(rep.result),
                caption="Drift monitoring dashboard (seed 000 Figure 217.7). A: mean per-entity drift 1 − cos "
                        f"(band: ± sd; dotted and dashed: {RATIO.healthy:g}× and {RATIO.problematic:g}× the first "
                        "interval's drift). B: pairwise similarity correlation and k-NN overlap with the baseline. "
                        f"C: share of entities with drift above μ + {k:g}σ. D: Procrustes distance with the "
                        f"{SIGMA.healthy:g}σ and {SIGMA.problematic:g}σ limits above the trend of the earlier "
                        "snapshots (from the fourth snapshot on: σ needs at least 3 earlier values).",
                label="fig-drift-dashboard")
    show_table(alert_table(rep.result),
               caption=f"{RATIO.table} alert levels per snapshot (warning = concerning, critical = problematic; "
                       "the verdict is the worst check). Mean drift is compared with the first snapshot's, "
                       "the Procrustes distance with the mean and sd of the earlier snapshots.",
               label="tbl-drift-alerts")


def show_metrics(rep: DriftReport) -> None:
    result = rep.result
    show_metric_table(
        dr.headline_metrics(result),
        caption=f"Drift of the latest snapshot ({result.snapshots[-1].name}) against the baseline. "
                f"Verdicts: {RATIO.table}. Intervals: per metric, see Method. Every "
                "snapshot's values are in metrics.json as <metric>__<snapshot>.",
        label="tbl-drift-metrics",
        definitions="**Definitions.** $e^{(0)}_i$ is entity $i$ in the baseline, $E^{(t)}$ the snapshot, $R^*$ "
                    "the orthogonal Procrustes rotation onto the baseline and $\\tilde e^{(t)}_i$ the aligned "
                    "vector; $d_i = 1 - \\cos(e^{(0)}_i, \\tilde e^{(t)}_i)$. Per-entity metrics use the entities "
                    "present in both sets.")


def show_entities(rep: DriftReport) -> None:
    show_table(neighbourhood_table(rep.result), caption="Population and entity-level drift per snapshot.",
               label="tbl-drift-entities")


def show_movers(rep: DriftReport) -> None:
    result, k = rep.result, rep.result.info["anomaly_k"]
    latest = result.snapshots[-1].name
    if mismatched(result, result.snapshots[-1]):
        show_markdown(f"No per-entity drift for {escape(latest)}: it has d = {result.snapshots[-1].d} and the "
                      f"baseline d = {result.d}, so no entity's position can be compared (see the narrative).")
        return
    show_table(movers_table(result, rep.ids, rep.metadata),
               caption=f"The 15 entities that moved most in {latest} (cosine drift after alignment; anomalous: "
                       f"above μ + {k:g}σ).", label="tbl-drift-movers")
    if len(rep.groups):
        show_table(rep.groups, caption=f"Drift in {latest} by metadata group (share of anomalies: the group's part "
                                       "of all anomalous entities).", label="tbl-drift-groups")
    else:
        show_markdown("The metadata has no group column (`kind`, `group`, `type` or `label` with 2–12 values), "
                      "so no breakdown is shown.")
    show_figure(entity_figure(result, rep.metadata),
                caption="Left: per-entity drift in the latest snapshot (log counts) with the anomaly threshold "
                        f"μ + {k:g}σ. Right (with group metadata): mean drift of each group over time, for the "
                        "group column whose groups differ most.", label="fig-drift-entities")


def show_distribution(rep: DriftReport) -> None:
    result = rep.result
    alpha, ci = result.info["alpha"], _ci_label(result)
    show_table(distribution_table(result),
               caption="Distribution drift per snapshot: unbiased MMD² and its permutation p-value, dimensions "
                       f"whose distribution changed (KS, BH {alpha:.0%} FDR), domain-classifier AUC (5-fold CV), mean "
                       "shift relative to the baseline's spread, change of APCS and PR/d.",
               label="tbl-drift-distribution")
    show_figure(distribution_figure(result),
                caption=f"Left: unbiased MMD² (jackknife {ci}) against the {100 * (1 - alpha):g}th percentile of its "
                        f"permutation distribution. Middle: domain-classifier AUC with Hanley–McNeil {ci} (0.5: no "
                        "drift). Right: share of dimensions whose distribution changed significantly.",
                label="fig-drift-distribution")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

MMD_SAMPLE = Option("mmd_sample", 1000, "rows per side of the MMD permutation test", bounds=(1, INF))

EFFECTS = (Effect("drift", ("mean_drift", "procrustes_distance", "pairwise_similarity_correlation", "anomalous_fraction"),
                  "Later snapshots drift from the baseline",
                  "Schedule a retraining and check what moved (the chapter lists the entities and groups):", cause="drift"),)
#: a metadata group "moved" when its mean drift in the latest snapshot is at least this multiple of the whole set's
MOVER_RATIO = 2.0


def findings(r: ChapterResults) -> list[Finding]:
    """The drift effect's finding, naming the metadata group that moved most when its mean drift in the latest
    snapshot is at least :data:`MOVER_RATIO` times the whole set's."""
    out, whole = threshold_findings(r, EFFECTS), r.value("mean_drift")
    rows = [g for g in r.info.get("by_group") or [] if g.get("entities", 0) >= 2]
    if not rows or not whole:
        return out
    top = max(rows, key=lambda g: g["mean drift"])
    if top["mean drift"] < MOVER_RATIO * whole:
        return out
    action = EFFECTS[0].action
    moved = (f"{action} “{top['group']}” ({top['column']}, {top['entities']:,} entities) moved most: its mean drift "
             f"{top['mean drift']:.4f} is {top['mean drift'] / whole:.1f}× the whole set's {whole:.4f}.")
    return [replace(f, title=f"{f.title}, most of all “{top['group']}” ({top['column']})",
                    sentence=f"{moved} {f.sentence.removeprefix(action).lstrip()}",
                    evidence=dict(f.evidence, group=top["group"], grouping=top["column"],
                                  group_mean_drift=top["mean drift"])) if f.effect == "drift" else f for f in out]


CHAPTER = ChapterSpec(
    name="drift", title="Drift over time", order=80,
    description="Do later snapshots of the same entities drift from the baseline? Aligned per-entity drift, k-NN overlap, pairwise similarity correlation, anomalous fraction, Procrustes distance with Table 217.3 alerts and the Figure 217.7 dashboard; MMD, KS + BH and domain-classifier distribution tests; who moved (seed 000 §217.2.3, §220.1; seed 003).",
    requires=("snapshots",),
    options=(MMD_SAMPLE,), precheck=precheck, demo="drift", effects=EFFECTS, findings=findings,
)
