"""The Monitoring chapter: a history of batches scored by ``embeval-report monitor`` against a reference
profile, shown as the seed's monitoring dashboard (seed 000 §220.2; Figure 217.7's panels and Table 217.3's
alert levels). The scoring is :mod:`embeval_report.monitoring.score`; this module only reads the history."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import ChapterSkipped
from ..monitoring import score as sc
from ..monitoring.history import MonitorHistory
from ..present.display import callout, escape, show_figure, show_markdown, show_table, show_tests
from ..present.display import show_metrics as show_metric_table
from ..present.plotting import PALETTE, WIDTH
from ..stats import HypothesisTest
from .declaration import ChapterSpec

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["MonitoringReport", "batches_table", "compute", "dashboard_figure", "latest_table", "narrative",
           "precheck", "show_batches", "show_dashboard", "show_latest", "show_metrics", "show_summary", "show_tests"]

LEVEL_COLOUR = {"ok": PALETTE["healthy"], "warning": PALETTE["concerning"], "critical": PALETTE["problematic"]}


@dataclass(frozen=True)
class MonitoringReport:
    history: MonitorHistory
    metrics: dict
    latest: dict                 # the last history record


def precheck(es, side, settings) -> str | None:
    return None


def compute(ctx: ChapterContext) -> MonitoringReport:
    """Read the history, record the latest batch's signals (with their intervals, verdicts and tests) and the
    alert counts."""
    h = ctx.side.monitor_history
    if h is None:
        raise ChapterSkipped("no `monitor_history` given")
    latest = h.records[-1]
    metrics = {}
    for sname, metric in sc.SIGNAL_METRIC.items():
        s = latest["signals"].get(sname)
        if s is None:
            continue
        spec = sc.SPECS[metric]
        pa = s.get("p_adjusted")
        ref = (f"{s['rule']}; Holm-adjusted p = {pa:.3g}" if pa is not None else s["rule"]) if s.get("rule") \
            else spec.reference
        m = spec.record(s["value"], (s.get("ci_low"), s.get("ci_high")), ci_method="see the Method section",
                        label=f"{spec.label} (latest: {latest['batch']})", reference=ref, verdict=False)
        metrics[metric] = _with_verdict(m, s["level"])
        if sname == "mean_shift" and s.get("ratio") is not None:
            r = sc.SPECS["mean_shift_ratio"]
            lvl = s["level"]
            metrics["mean_shift_ratio"] = _with_verdict(
                r.record(s["ratio"], None, label=f"{r.label} (latest)", reference=r.reference, verdict=False), lvl)
    levels = [r["level"] for r in h.records]
    for name, value in (("batches", len(levels)), ("batches_alerting", sum(lv != "ok" for lv in levels)),
                        ("batches_critical", sum(lv == "critical" for lv in levels))):
        metrics[name] = sc.SPECS[name].record(value, verdict=False)
    ctx.rec.add(*metrics.values())
    family = f"monitoring: {latest['batch']}"
    for sname, s in latest["signals"].items():
        if s.get("p_value") is None:
            continue
        ctx.rec.test(HypothesisTest(name=f"{sname}: {latest['batch']}", test=s.get("test", ""), p_value=s["p_value"],
                                    statistic=s.get("statistic"), n=f"{latest['n']:,} batch rows",
                                    null="the batch is drawn from the reference distribution", family=family))
    ctx.rec.note(history_file=h.file, batches=len(levels), latest_batch=latest["batch"], latest_level=latest["level"],
                 alpha=latest.get("alpha"), levels=levels)
    return MonitoringReport(h, metrics, latest)


def _with_verdict(m, level: str):
    from dataclasses import replace

    return replace(m, verdict=sc.VERDICT[level])


# ---------------------------------------------------------------------------------------------
# Narrative, tables, figure
# ---------------------------------------------------------------------------------------------

def _alerting(rec: dict) -> list[str]:
    return [f"{s['label']} ({s['level']})" for s in rec["signals"].values() if s["level"] != "ok"]


def narrative(rep: MonitoringReport) -> str:
    recs = rep.history.records
    levels = [r["level"] for r in recs]
    first = next((i for i, lv in enumerate(levels) if lv != "ok"), None)
    latest = rep.latest
    parts = [f"**{len(recs)} batches** were scored against the reference profile "
             f"(`{escape(latest.get('profile') or 'reference')}`), from {escape(recs[0]['timestamp'])} to "
             f"{escape(latest['timestamp'])}. {sum(lv != 'ok' for lv in levels)} raised an alert "
             f"({sum(lv == 'critical' for lv in levels)} critical)."]
    if first is None:
        parts.append("No batch differs from the reference by more than sampling explains: every signal's test "
                     f"stays below its Holm-corrected threshold (family-wise false-alarm rate "
                     f"{latest.get('alpha', 0.05):g} per batch).")
    else:
        parts.append(f"The first alert is batch **{escape(recs[first]['batch'])}** ({escape(recs[first]['timestamp'])}, "
                     f"level {levels[first]}): {escape(', '.join(_alerting(recs[first])))}.")
    al = _alerting(latest)
    parts.append(f"The latest batch, **{escape(latest['batch'])}** ({latest['n']:,} rows), is at level "
                 f"**{latest['level']}**" + (f": {escape(', '.join(al))}." if al else ": no signal alerts."))
    if first is not None and len(recs) - first > 1 and all(lv != "ok" for lv in levels[first:]):
        parts.append("Every batch since the first alert alerts as well: a sustained change (Table 217.3's guidance: a "
                     "gradual trend calls for scheduled retraining, a sudden regime shift for review as well), not an "
                     "isolated spike (usually a data-quality problem upstream).")
    return "\n\n".join(parts)


def batches_table(rep: MonitoringReport) -> pd.DataFrame:
    rows = []
    for r in rep.history.records:
        rows.append({"batch": str(r["batch"]), "time": str(r["timestamp"]), "rows": f"{r['n']:,}",
                     "level": r["level"], "verdict": sc.VERDICT[r["level"]],
                     "alerting signals": ", ".join(_alerting(r)) or "—"})
    return pd.DataFrame(rows)


def latest_table(rep: MonitoringReport) -> pd.DataFrame:
    def f(x, spec=".4g"):
        return "—" if x is None else format(x, spec)

    rows = []
    for s in rep.latest["signals"].values():
        ci = f"{f(s.get('ci_low'))} – {f(s.get('ci_high'))}" if s.get("ci_low") is not None else "—"
        rows.append({"signal": s["label"], "value": f(s["value"]), "95 % CI": ci,
                     "× no-drift level": f(s.get("ratio"), ".2f"), "p (Holm)": f(s.get("p_adjusted"), ".3g"),
                     "verdict": sc.VERDICT[s["level"]], "rule": s.get("rule", "")})
    return pd.DataFrame(rows)


#: dashboard panels: (signal, what is plotted, y label, warning edge, critical edge)
PANELS = (
    ("mean_shift", "ratio", "mean shift, × no-drift level", sc.MEAN_DRIFT_WARNING, sc.MEAN_DRIFT_CRITICAL),
    ("norm_shift", "ratio", "mean norm change, |z|", sc.MEAN_DRIFT_WARNING, sc.MEAN_DRIFT_CRITICAL),
    ("isotropy_drift", "apcs", "APCS of the batch", sc.APCS_WARNING, sc.APCS_CRITICAL),
    ("anomalous_fraction", "value", "anomalous fraction", sc.ANOMALY_WARNING, sc.ANOMALY_CRITICAL),
    ("mmd", "value", "MMD²", None, None),
    ("ks_dimensions", "value", "share of dimensions drifted", None, sc.KS_SHARE_CRITICAL),
    ("domain_classifier", "value", "domain-classifier AUC", sc.AUC_WARNING, None),
)


def dashboard_figure(h: MonitorHistory) -> plt.Figure:
    """Each signal over the batches with its alert bands (amber: warning, red: critical); the marker colour
    is the signal's level (it alerts only when its test rejects); red dashed lines mark critical batches."""
    t = h.signals
    batches = h.batches
    x = batches["batch_index"].to_numpy()
    names = batches["batch"].astype(str).tolist()
    critical = x[batches["level"].to_numpy() == "critical"]
    fig, axes = plt.subplots(4, 2, figsize=(WIDTH, 10.5), sharex=True)
    for ax, (sname, col, ylabel, warn, crit) in zip(axes.flat, PANELS):
        part = t[t["signal"] == sname].sort_values("batch_index")
        if part.empty or col not in part:
            ax.set_visible(False)
            continue
        y = part[col].to_numpy(float)
        xs = part["batch_index"].to_numpy()
        finite = y[np.isfinite(y)]
        top = max([finite.max() if len(finite) else 1.0] + [e * 1.3 for e in (warn, crit) if e is not None])
        bottom = min(0.0, finite.min() if len(finite) else 0.0)
        if sname == "domain_classifier":
            bottom = min(0.45, bottom if len(finite) == 0 else finite.min() - 0.02)
        if warn is not None:
            ax.axhspan(warn, crit if crit is not None else top * 1.05, color=PALETTE["concerning"], alpha=0.12, lw=0)
        if crit is not None:
            ax.axhspan(crit, top * 1.05, color=PALETTE["problematic"], alpha=0.12, lw=0)
        if sname == "anomalous_fraction":
            ax.bar(xs, y, color="#e69138", width=0.6)
            ref = part["reference_fraction"].iloc[-1] if "reference_fraction" in part else None
            if ref is not None and np.isfinite(ref):
                ax.axhline(ref, color=PALETTE["muted"], ls=":", lw=1, label="held-out reference rows")
                ax.legend(frameon=False, fontsize=7, loc="upper left")
        else:
            ax.plot(xs, y, color=PALETTE["data"], lw=1.2, zorder=2)
        ax.scatter(xs, y, c=[LEVEL_COLOUR[lv] for lv in part["level"]], s=28, zorder=3, edgecolors="white",
                   linewidths=0.5)
        if sname == "isotropy_drift" and "reference_apcs" in part:
            r = float(part["reference_apcs"].iloc[-1])
            ax.axhspan(r - sc.APCS_DRIFT, r + sc.APCS_DRIFT, color=PALETTE["muted"], alpha=0.12, lw=0)
            ax.axhline(r, color=PALETTE["muted"], ls=":", lw=1)
            bottom = min(bottom, r - sc.APCS_DRIFT * 1.1)
        if sname == "domain_classifier":
            ax.axhline(0.5, color=PALETTE["muted"], ls=":", lw=1)
        for c in critical:
            ax.axvline(c, color=PALETTE["problematic"], ls="--", lw=0.7, alpha=0.6)
        ax.set_ylim(bottom, top * 1.05 if top > 0 else 1)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(sc.SIGNALS[sname][0], fontsize=9)
    ax = axes.flat[-1]
    lv = batches["level"].map(sc.LEVELS.index).to_numpy()
    ax.scatter(x, lv, c=[LEVEL_COLOUR[v] for v in batches["level"]], s=60, zorder=3)
    ax.plot(x, lv, color=PALETTE["muted"], lw=0.8)
    ax.set_yticks(range(3), list(sc.LEVELS))
    ax.set_ylim(-0.5, 2.5)
    ax.set_title("Batch alert level", fontsize=9)
    for a in axes[-1]:
        a.set_xticks(x, names, rotation=45, ha="right", fontsize=7)
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: MonitoringReport) -> None:
    show_markdown(narrative(rep))
    if rep.latest["level"] != "ok":
        callout("warning" if rep.latest["level"] == "warning" else "danger",
                f"The latest batch ({escape(rep.latest['batch'])}) is at level **{rep.latest['level']}**.",
                title="Alert")


def show_dashboard(rep: MonitoringReport) -> None:
    show_figure(dashboard_figure(rep.history),
                caption="The monitoring dashboard: each signal per batch, with its alert bands (amber: warning, red: "
                        "critical; Table 217.3 for the mean shift and the anomalous fraction, the §220.2 dashboard for "
                        "APCS, Evidently's defaults for the classifier AUC and the share of drifted dimensions). A "
                        "marker's colour is the signal's level: it alerts only when its test rejects after Holm's "
                        "correction, so a point inside a band can stay green. Grey band: reference APCS ± 0.1 "
                        "(§220.1). Red dashed lines: batches at critical.", label="fig-monitoring-dashboard")


def show_batches(rep: MonitoringReport) -> None:
    show_table(batches_table(rep), caption="Every batch in the history, its level, and the signals that alerted.",
               label="tbl-monitoring-batches")


def show_latest(rep: MonitoringReport) -> None:
    show_table(latest_table(rep), caption=f"The latest batch ({escape(rep.latest['batch'])}): each signal with its "
                                          "95 % interval, its ratio to the no-drift level where Table 217.3 reads "
                                          "one, its Holm-adjusted p-value and its rule.",
               label="tbl-monitoring-latest")


def show_metrics(rep: MonitoringReport) -> None:
    show_metric_table(rep.metrics, caption="Recorded numbers: the latest batch's signals (the verdict is the alert "
                                           "level: ok = healthy, warning = concerning, critical = problematic) and "
                                           "the alert counts over the history.", label="tbl-monitoring-metrics")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

CHAPTER = ChapterSpec(
    name="monitoring", title="Monitoring new batches", order=82,
    description="The history of `embeval-report monitor`: each new batch scored against the reference profile (mean and norm shift, isotropy drift, MMD, per-dimension KS, domain classifier, k-NN anomalies) as the seed's monitoring dashboard with Table 217.3 and §220.2 alert levels (seed 000 §220).",
    requires=("monitor_history",),
    precheck=precheck, demo="monitoring",
)
