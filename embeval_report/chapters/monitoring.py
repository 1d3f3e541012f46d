"""The Monitoring chapter: a history of batches scored by ``embeval-report monitor`` against a reference
profile, shown as the seed's monitoring dashboard (seed 000 §220.2; Figure 217.7's panels and Table 217.3's
alert levels). The scoring is :mod:`embeval_report.monitoring.score`; this module only reads the history."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import ChapterSkipped
from ..monitoring import score as sc
from ..io.monitor_history import MonitorHistory
from ..present.display import (Badge, definitions_markdown, escape, metrics_table, show_figure, show_markdown,
                               show_table, show_tests, with_mark_note)
from ..present.escape import mathtext
from ..present.format import marked_value
from ..present.plotting import PALETTE, WIDTH
from ..stats import HypothesisTest
from .declaration import ChapterSpec
from .findings import ChapterResults, Effect, Finding, test_text, threshold_findings

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["MonitoringReport", "batches_table", "compute", "dashboard_figure", "latest_table", "narrative",
           "panel_data", "power_note", "precheck", "show_batches", "show_dashboard", "show_latest", "show_metrics",
           "show_summary", "show_tests"]

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
        ref = (f"{s['rule']}; adjusted p = {pa:.3g}" if pa is not None else s["rule"]) if s.get("rule") \
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


def _level(level: str) -> Badge:
    """A level as a coloured badge: its word (ok, warning, critical), its verdict's colour."""
    return Badge(level, sc.VERDICT[level])


def power_note(rec: dict) -> str:
    """What a batch is too small to see (from its record's power), or ""."""
    notes = []
    for name in rec.get("underpowered") or []:
        pw = rec.get("power", {}).get(name, {})
        label = rec["signals"].get(name, {}).get("label", name)
        need = f"about {pw['rows_needed']:,} rows" if pw.get("rows_needed") else "a larger reference sample"
        notes.append(f"{label.lower()}: power {pw.get('power', float('nan')):.2f} to detect {pw.get('change', '')}, "
                     f"{need} needed")
    return "; ".join(notes)


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
        parts.append("No batch differs from the reference by more than sampling explains: no signal's test rejects "
                     f"at α/7 (a false-alarm rate of at most {latest.get('alpha', 0.05):g} per batch over its seven "
                     "signals), or no significant change reaches a level.")
    else:
        parts.append(f"The first alert is batch **{escape(recs[first]['batch'])}** ({escape(recs[first]['timestamp'])}, "
                     f"level {levels[first]}): {escape(', '.join(_alerting(recs[first])))}.")
    al = _alerting(latest)
    parts.append(f"The latest batch, **{escape(latest['batch'])}** ({latest['n']:,} rows), is at level "
                 f"**{latest['level']}**" + (f": {escape(', '.join(al))}." if al else ": no signal alerts."))
    weak = [r for r in recs if r.get("underpowered")]
    if power_note(latest):
        parts.append(f"The latest batch is **too small to see a warning-level change** of every signal "
                     f"({escape(power_note(latest))}): its *ok* there is not evidence of no change.")
    elif weak:
        parts.append(f"{len(weak)} batch(es) were too small to see a warning-level change of every signal (the "
                     "batches table says which).")
    parts.append("Levels are *ok*, *warning* and *critical* here, in `monitor`'s output and in its JSON; the "
                 "report's scorecard and `metrics.json` read them as healthy, concerning and problematic.")
    if first is not None and len(recs) - first > 1 and all(lv != "ok" for lv in levels[first:]):
        parts.append("Every batch since the first alert alerts as well: a sustained change (Table 217.3's guidance: a "
                     "gradual trend calls for scheduled retraining, a sudden regime shift for review as well), not an "
                     "isolated spike (usually a data-quality problem upstream).")
    return "\n\n".join(parts)


#: a history of up to this many batches is shown batch by batch; a longer one keeps :data:`RECENT` batches in detail
DETAIL_MAX = 120
#: the latest batches a long history's dashboard shows one by one (older ones: at most :data:`WINDOWS` windows)
RECENT = 60
WINDOWS = 40
#: a long history's batches table: the latest TABLE_RECENT batches and up to TABLE_ALERTS alerts before them
TABLE_RECENT = 20
TABLE_ALERTS = 30


def table_records(h: MonitorHistory) -> tuple[list[dict], int, int]:
    """The records the batches table lists, and how many it leaves out (and how many of those alerted): every
    record of a history of up to :data:`DETAIL_MAX` batches; of a longer one the latest :data:`TABLE_RECENT` and
    the latest :data:`TABLE_ALERTS` alerting batches before them, in history order (the rest stay in the history
    file and ``results/monitoring.json``)."""
    recs = h.records
    if len(recs) <= DETAIL_MAX:
        return list(recs), 0, 0
    older = recs[:-TABLE_RECENT]
    alerts = [i for i, r in enumerate(older) if r["level"] != "ok"][-TABLE_ALERTS:]
    kept = [older[i] for i in alerts] + list(recs[-TABLE_RECENT:])
    return kept, len(older) - len(alerts), sum(r["level"] != "ok" for r in older) - len(alerts)


def batches_table(rep: MonitoringReport) -> pd.DataFrame:
    rows = []
    for r in table_records(rep.history)[0]:
        rows.append({"batch": str(r["batch"]), "time": str(r["timestamp"]), "rows": f"{r['n']:,}",
                     "level": _level(r["level"]), "alerting signals": ", ".join(_alerting(r)) or "—",
                     "too small to see": ", ".join(r["signals"].get(k, {}).get("label", k)
                                                   for k in r.get("underpowered") or []) or "—"})
    return pd.DataFrame(rows)


def latest_table(rep: MonitoringReport) -> pd.DataFrame:
    def f(x, spec=".4g"):
        return "—" if x is None else format(x, spec)

    rows = []
    for s in rep.latest["signals"].values():
        ci = f"{f(s.get('ci_low'))} – {f(s.get('ci_high'))}" if s.get("ci_low") is not None else "—"
        bands = sc.stored_bands(s.get("detail"))
        rows.append({"signal": s["label"],
                     "value": marked_value(s["value"], s.get("ci_low"), s.get("ci_high"), text=f(s["value"])),
                     "95 % CI": ci,
                     "reads": sc.reads_text(bands, _plotted(s), s.get("p_value")),
                     "warning / critical": sc.edges_text(bands), "p": f(s.get("p_value"), ".2g"),
                     "p (×7)": f(s.get("p_adjusted"), ".3g"), "level": _level(s["level"])})
    return pd.DataFrame(rows)


def _plotted(s: dict):
    """The value a signal's level reads (its ``plotted`` quantity: value, ratio or the batch's APCS)."""
    which = s.get("plotted", "value")
    return s.get("detail", {}).get("apcs") if which == "apcs" else s.get(which)


#: dashboard panels: (signal, the quantity its level reads, y label)
PANELS = (
    ("mean_shift", "ratio", "mean shift, × no-drift level"),
    ("norm_shift", "ratio", "mean norm change, Welch |t|"),
    ("isotropy_drift", "apcs", "APCS of the batch"),
    ("anomalous_fraction", "value", "anomalous fraction"),
    ("mmd", "value", "MMD²"),
    ("ks_dimensions", "value", "share of dimensions drifted"),
    ("domain_classifier", "value", "domain-classifier AUC"),
)
_EDGES = ("warning", "critical", "warning_below", "warning_p")


def panel_data(h: MonitorHistory, signal: str, column: str) -> pd.DataFrame:
    """One dashboard panel: per batch, the plotted value, the bands the batch stored (``warning``, ``critical``,
    ``warning_below``, ``warning_p``; NaN where none) and the level :func:`~embeval_report.monitoring.score.
    signal_level` reads from them, the same function that set the table's level (a history written before the
    bands were stored keeps its recorded level)."""
    part = h.signals[h.signals["signal"] == signal].sort_values("batch_index")
    out = pd.DataFrame({"batch_index": part["batch_index"].to_numpy(),
                        "value": part[column].to_numpy(float) if column in part else np.nan,
                        "p_value": part["p_value"].to_numpy(float), "recorded": part["level"].to_numpy()})
    for e in _EDGES:
        out[e] = part[f"{e}_edge"].to_numpy(float) if f"{e}_edge" in part else np.nan
    has = out[list(_EDGES)].notna().any(axis=1)
    out["level"] = [sc.signal_level(v, p, {e: r[e] for e in _EDGES if np.isfinite(r[e])}) if ok else rec
                    for v, p, ok, rec, (_, r) in zip(out["value"], out["p_value"], has, out["recorded"],
                                                     out.iterrows())]
    return out


def window_size(n: int) -> int:
    """Batches per window of the dashboard's older part (1: a history short enough to show batch by batch)."""
    return 1 if n <= DETAIL_MAX else int(np.ceil((n - RECENT) / WINDOWS))


def windowed(d: pd.DataFrame, cut: int, size: int) -> pd.DataFrame:
    """The rows of a panel (or of the batches, with ``value`` and ``level``) before batch index ``cut`` in
    windows of ``size`` consecutive batches: their span of batch indices (``first``, ``last``), the median value
    with its ``low`` and ``high``, the median of each band edge and the worst level, one row per window."""
    old = d[d["batch_index"] < cut]
    group = ((old["batch_index"] - old["batch_index"].min()) // size).to_numpy()
    g = old.assign(rank=old["level"].map(sc.LEVELS.index)).groupby(group)
    out = pd.DataFrame({"first": g["batch_index"].min(), "last": g["batch_index"].max(),
                        "value": g["value"].median(), "low": g["value"].min(), "high": g["value"].max(),
                        "level": g["rank"].max().map(lambda i: sc.LEVELS[int(i)])})
    for e in _EDGES:
        if e in old:
            out[e] = g[e].median()
    return out.reset_index(drop=True)


def dashboard_figure(h: MonitorHistory) -> plt.Figure:
    """Each signal over the batches with the bands its level is read against, batch by batch (amber: warning, red:
    critical; they include where the signal's test rejects, so they move with the batch's size); the marker colour
    is the level, which lies in the band the marker sits in; red dashed lines mark critical batches.

    A history longer than :data:`DETAIL_MAX` batches shows its latest :data:`RECENT` so, after the older ones in
    at most :data:`WINDOWS` windows of one slot each (:func:`windowed`: a square at the median, a line over the
    window's range, the window's median bands, the colour of its worst level): readable, and quick to draw (2,000
    batches took 105 s of CPU batch by batch, 5 s so)."""
    batches = h.batches
    size = window_size(len(batches))
    first = int(batches["batch_index"].min())
    cut = int(batches["batch_index"].iloc[-RECENT]) if size > 1 else first
    slots = -(-(cut - first) // size)  # the windows' slots come first, then one slot per recent batch

    def at(index):
        return np.asarray(index) - cut + slots

    detail = batches[batches["batch_index"] >= cut]
    x = at(detail["batch_index"].to_numpy())
    critical = x[detail["level"].to_numpy() == "critical"]
    fig, axes = plt.subplots(4, 2, figsize=(WIDTH, 10.5), sharex=True)
    for ax, (sname, col, ylabel) in zip(axes.flat, PANELS):
        whole = panel_data(h, sname, col)
        if whole.empty or not np.isfinite(whole["value"]).any():
            ax.set_visible(False)
            continue
        d = whole[whole["batch_index"] >= cut]
        windows = windowed(whole, cut, size) if size > 1 else None
        y, xs = d["value"].to_numpy(float), at(d["batch_index"].to_numpy())
        finite = whole["value"].to_numpy(float)
        finite = finite[np.isfinite(finite)]
        edges = d[["warning", "critical", "warning_below"]].to_numpy(float)
        spans = list(xs)
        if windows is not None:  # the older batches' windows: their median bands over their slot
            edges = np.vstack([windows[["warning", "critical", "warning_below"]].to_numpy(float), edges])
            spans = list(range(len(windows))) + spans
        shown = edges[np.isfinite(edges) & (edges < 1e6)]
        top = max([finite.max()] + [e * 1.15 for e in shown if e > 0] + [1e-9])
        bottom = min([0.0, finite.min()] + list(shown))
        if sname == "domain_classifier":
            bottom = min(0.45, finite.min() - 0.02)
        if sname == "isotropy_drift":
            bottom = min(finite.min(), *(shown if len(shown) else [finite.min()])) - 0.02
        hi = top * 1.05 if top > 0 else 1.0
        for xi, (w, c, wb) in zip(spans, edges):
            span = [xi - 0.5, xi + 0.5]
            if np.isfinite(w) and w < hi:
                ax.fill_between(span, w, c if np.isfinite(c) else hi, color=PALETTE["concerning"], alpha=0.14, lw=0)
            if np.isfinite(c) and c < hi:
                ax.fill_between(span, c, hi, color=PALETTE["problematic"], alpha=0.14, lw=0)
            if np.isfinite(wb):
                ax.fill_between(span, bottom, wb, color=PALETTE["concerning"], alpha=0.14, lw=0)
        if sname == "anomalous_fraction":
            ax.bar(xs, y, color="#e69138", width=0.5, zorder=2)
            ref = h.signals.loc[h.signals["signal"] == sname, "reference_fraction"] \
                if "reference_fraction" in h.signals else pd.Series(dtype=float)
            if len(ref) and np.isfinite(ref.iloc[-1]):
                ax.axhline(ref.iloc[-1], color=PALETTE["muted"], ls=":", lw=1, label="nominal rate q (held-out rows)")
                ax.legend(frameon=False, fontsize=7, loc="upper left")
        else:
            ax.plot(xs, y, color=PALETTE["data"], lw=1.2, zorder=2)
        ax.scatter(xs, y, c=[LEVEL_COLOUR[lv] for lv in d["level"]], s=28, zorder=3, edgecolors="white",
                   linewidths=0.5)
        if windows is not None:
            _show_windows(ax, windows, slots)
        if sname == "isotropy_drift" and "reference_apcs" in h.signals:
            r = h.signals.loc[h.signals["signal"] == sname, "reference_apcs"].iloc[-1]
            ax.axhline(r, color=PALETTE["muted"], ls=":", lw=1)
        if sname == "domain_classifier":
            ax.axhline(0.5, color=PALETTE["muted"], ls=":", lw=1)
        if sname == "mmd":
            ax.text(0.02, 0.95, "no bands: warning when its test rejects at α/7; no critical level",
                    transform=ax.transAxes, fontsize=7, va="top", color=PALETTE["muted"])
        for c in critical:
            ax.axvline(c, color=PALETTE["problematic"], ls="--", lw=0.7, alpha=0.6)
        ax.set_ylim(bottom, hi)
        ax.set_xlim(-0.6, x.max() + 0.6)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(sc.SIGNALS[sname][0], fontsize=9)
    ax = axes.flat[-1]
    lv = detail["level"].map(sc.LEVELS.index).to_numpy()
    ax.scatter(x, lv, c=[LEVEL_COLOUR[v] for v in detail["level"]], s=60, zorder=3)
    ax.plot(x, lv, color=PALETTE["muted"], lw=0.8)
    ticks, names = list(x), [mathtext(b) for b in detail["batch"]]
    if size > 1:
        worst = windowed(batches.assign(value=0.0), cut, size)
        ax.scatter(range(len(worst)), worst["level"].map(sc.LEVELS.index), c=[LEVEL_COLOUR[v] for v in worst["level"]],
                   marker="s", s=24, zorder=3)
        ax.axvline(slots - 0.5, color=PALETTE["muted"], ls=":", lw=0.8)
        named = batches.set_index("batch_index")["batch"]
        every = max(1, len(worst) // 6)
        ticks = [k for k in range(0, len(worst), every)] + ticks[::10]
        names = [mathtext(f"{named[worst['first'][k]]} …") for k in range(0, len(worst), every)] + names[::10]
    ax.set_yticks(range(3), list(sc.LEVELS))
    ax.set_ylim(-0.5, 2.5)
    ax.set_title("Batch alert level" + (f" (older: worst of each {size} batches)" if size > 1 else ""), fontsize=9)
    for a in axes[-1]:
        a.set_xticks(ticks, names, rotation=45, ha="right", fontsize=7)
    return fig


def _show_windows(ax, windows: pd.DataFrame, slots: int) -> None:
    """A panel's windows of older batches, one slot each: a square at the median, a line over the values' range, in
    the colour of the worst level; a dotted line where the batch-by-batch part starts."""
    colours = [LEVEL_COLOUR[lv] for lv in windows["level"]]
    k = np.arange(len(windows))
    ax.vlines(k, windows["low"], windows["high"], colors=colours, lw=1.2, zorder=2)
    ax.plot(k, windows["value"], color=PALETTE["data"], lw=0.8, alpha=0.6, zorder=2)
    ax.scatter(k, windows["value"], c=colours, marker="s", s=18, zorder=3, edgecolors="white", linewidths=0.4)
    ax.axvline(slots - 0.5, color=PALETTE["muted"], ls=":", lw=0.8)


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: MonitoringReport) -> None:
    show_markdown(narrative(rep))


def show_dashboard(rep: MonitoringReport) -> None:
    n, size = len(rep.history.records), window_size(len(rep.history.records))
    older = (f" The {n:,} batches are too many to show one by one: the latest {RECENT} are, left of the dotted line "
             f"the {n - RECENT:,} before them in windows of {size} (a square at the window's median, a line over its "
             "values, the window's median bands, the colour of its worst level); every batch is in the history file "
             "and the batches table lists the alerts." if size > 1 else "")
    show_figure(dashboard_figure(rep.history),
                caption="The monitoring dashboard: each signal per batch, with the bands its level is read against "
                        "(amber: warning, red: critical; Table 217.3 for the mean and norm shift and the anomalous "
                        "fraction, the §220.1–220.2 rules for APCS, Evidently's and Hosmer–Lemeshow's for the "
                        "classifier AUC and the share of drifted dimensions). Each band starts no lower than where the "
                        "signal's own test rejects at α/7, so it moves with the batch's size, and a marker's colour is "
                        "the level of the band it sits in, as in the tables. The anomalous fraction's threshold is "
                        "calibrated on the profile's held-out rows (dotted: their nominal rate q). MMD² has no scale "
                        "to draw bands on: it is amber when its test rejects. Red dashed lines: batches at critical."
                        + older, label="fig-monitoring-dashboard")


def show_batches(rep: MonitoringReport) -> None:
    _, left, alerting = table_records(rep.history)
    which = ("Every batch in the history" if not left else
             f"The latest {TABLE_RECENT} batches and the {'latest ' if alerting else ''}alerts before them (the "
             f"other {left:,} batches, {alerting:,} of them alerting, are in the history file "
             f"`{escape(rep.history.file)}` and in `results/monitoring.json`)")
    show_table(batches_table(rep), caption=f"{which}: each batch's level, the signals that alerted, and the signals "
                                           "whose warning-level change it had too few rows to see (power below 0.8 "
                                           "at α/7).", label="tbl-monitoring-batches")


def show_latest(rep: MonitoringReport) -> None:
    table = latest_table(rep)
    show_table(table, caption=with_mark_note(
        table, f"The latest batch ({rep.latest['batch']}): each signal's effect with its 95 % interval, the "
               "value its level reads (× the no-drift level, the batch's APCS, or the effect; for MMD², judged on its "
               "test, its p-value), the warning and critical edges it is read against (the dashboard's bands), its "
               "p-value raw and × 7 (Bonferroni) and its level."),
               label="tbl-monitoring-latest")


#: recorded metrics that are not a signal of the latest batch (the latest-batch table shows those)
HISTORY_METRICS = ("batches", "batches_alerting", "batches_critical")


def show_metrics(rep: MonitoringReport) -> None:
    signals = [name for name in rep.metrics if name not in HISTORY_METRICS]
    history = {name: m for name, m in rep.metrics.items() if name in HISTORY_METRICS}
    show_markdown("The latest batch's signals (the table above) are recorded in `metrics.json` as "
                  + ", ".join(f"`{n}`" for n in signals)
                  + (" (`mean_shift_ratio` is the mean shift's *reads* value)" if "mean_shift_ratio" in signals else "")
                  + ", each with its level as the verdict: ok = healthy, warning = concerning, critical = problematic.")
    show_table(metrics_table(history).drop(columns=["95 % CI", "verdict"]),
               caption="Recorded alert counts over the history.", label="tbl-monitoring-metrics")
    show_markdown(definitions_markdown(rep.metrics))


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

SHIFT = Effect("batch shift", ("mean_shift_ratio", "mean_shift", "norm_shift", "isotropy_drift_apcs", "mmd",
                                "ks_rejected_fraction", "domain_classifier_auc", "anomalous_fraction"),
               "New batches have shifted from the reference profile",
               "Check the data pipeline of the latest batches, then retrain if the shift is real:", cause="drift")


def findings(r: ChapterResults) -> list[Finding]:
    """The latest batch's alert (its signals' levels, Table 217.3 and §220.2), quoting the report-wide adjusted p
    of its tests instead of the monitor's within-batch one: the lead signal's, else the smallest. When no test of
    the batch survives the report-wide correction the alert rests on its bands alone: at most concerning."""
    (found,) = threshold_findings(r, (SHIFT,)) or (None,)
    if found is None:
        return []
    batch = r.info.get("latest_batch")
    tests = [t for t in r.tests if str(t.get("name", "")).endswith(f": {batch}") and r.adjusted_p(t["name"]) is not None]
    signal = {m: s for s, m in sc.SIGNAL_METRIC.items()} | {"mean_shift_ratio": "mean_shift"}
    lead = r.test(f"{signal.get(found.metrics[0], '')}: {batch}")
    if lead is None or r.adjusted_p(lead["name"]) is None:
        lead = min(tests, key=lambda t: r.adjusted_p(t["name"]), default=None)
    survives = any(r.significant(t["name"]) for t in tests)
    sentence = re.sub(r"; adjusted p = [^;:)]*?(?=[;:)]|$)", "", found.sentence).rstrip(".")
    sentence += (f"; report-wide: {test_text(lead)} ({lead['name'].split(':')[0].replace('_', ' ')})" if lead else "")
    if tests and not survives:
        sentence += ("; no test of the batch survives the report-wide correction, so the alert rests on its bands "
                     "alone")
    severity = found.severity if survives or not tests else "concerning"
    evidence = dict(found.evidence, batch=batch, test=lead["name"] if lead else None,
                    p_adjusted=r.adjusted_p(lead["name"]) if lead else None)
    return [Finding(severity, found.category, r.name, found.title, sentence + ".", metrics=found.metrics,
                    evidence=evidence, rule="threshold", effect=found.effect, cause=found.cause)]


CHAPTER = ChapterSpec(
    name="monitoring", title="Monitoring new batches", order=82,
    description="The history of `embeval-report monitor`: each new batch scored against the reference profile (mean and norm shift, isotropy drift, MMD, per-dimension KS, domain classifier, k-NN anomalies) as the seed's monitoring dashboard with Table 217.3 and §220.2 alert levels (seed 000 §220).",
    requires=("monitor_history",),
    precheck=precheck, demo="monitoring",
    effects=(SHIFT,), findings=findings,
)
