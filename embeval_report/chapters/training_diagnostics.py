"""The Training-diagnostics chapter: what the training log says about how the model got its vectors —
convergence, early stopping, divergence, oscillation, overfitting, regime changes and whether the tail has
settled (computed in :mod:`embeval_report.metrics.convergence`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..errors import InputError
from ..io.snapshots import snapshot_slug
from ..io.side_data import evaluated_run
from ..io.training_log import TrainingLog
from ..metrics import convergence as cv
from ..metrics import training_runs as tr
from ..present.display import callout, escape, show_figure, show_markdown, show_table, with_mark_note
from ..present.display import show_metrics as show_metric_table
from ..present.escape import mathtext
from ..present.format import interval, marked_value, metric_text, number
from ..present.plotting import PALETTE, WIDTH
from ..stats import HypothesisTest
from .declaration import INF, ChapterSpec, Option
from .findings import ChapterResults, Finding

if TYPE_CHECKING:
    from .setup import ChapterContext

__all__ = ["TrainingReport", "checks_table", "compute", "curves_figure", "events_table", "narrative", "precheck",
           "per_run_table", "runs_table", "schedule_figure", "show_checks", "show_curves", "show_events", "show_metrics",
           "show_runs", "show_schedule", "show_summary", "show_tail", "tail_table"]

#: runs drawn in their own panel with every event (the rest only in the overlay)
PANELS = 6
RUN_COLORS = ["#3b6ea8", "#c2542d", "#6a8f3a", "#7b4ea3", "#2b8a8a", "#b7791f", "#555555", "#d16ba5"]


@dataclass(frozen=True)
class TrainingReport:
    """Everything the chapter shows."""

    log: TrainingLog
    runs: list
    metrics: dict
    settings: dict
    log_scale: bool
    n_vector_runs: int
    replicates: bool = False   # the runs repeat one configuration (the replicate_runs option)


def precheck(es, side, settings) -> str | None:
    """Why the chapter cannot run: no run with at least 10 logged losses (the seed's minimum)."""
    log = getattr(side, "training_log", None) if side is not None else None
    if log is None:
        return None
    longest = max(int(log.run(r)["loss_logged"].sum()) for r in log.runs)
    if longest < 10:
        return f"needs a run with at least 10 logged losses (seed 000 §219.1's minimum); the longest has {longest}"
    return None


def _settings(ctx: ChapterContext, log: TrainingLog) -> dict:
    s = dict(monitor=ctx.option("monitor"), mode=ctx.option("monitor_mode"), min_delta=ctx.option("min_delta"),
             relative=ctx.option("min_delta_mode") == "rel", patience=int(ctx.option("patience")),
             alpha=ctx.option("smoothing"), window=int(ctx.option("tail_window")), tol=ctx.option("convergence_tol"),
             cp_penalty=ctx.option("cp_penalty"))
    if s["min_delta"] < 0:
        raise InputError(f"option min_delta: expected a value of at least 0, got {s['min_delta']}")
    if s["monitor"] != "auto" and s["monitor"] not in log.frame.columns:
        cols = [c for c in log.frame.columns if c not in ("run", "step", "loss_logged")]
        raise InputError(f"option monitor: {s['monitor']!r} is not a column of the training log ({log.source}); "
                         f"expected auto or one of {', '.join(cols)}")
    return s


def compute(ctx: ChapterContext) -> TrainingReport:
    """Diagnose every run of the log, and record the metrics, the runs and the hypothesis tests.

    One run: its values under the metrics' names. Several runs: each run's values as ``<metric>__<run>`` with the
    run's own intervals, and nothing pooled over them unless the ``replicate_runs`` option says they repeat one
    configuration (then their mean and spread over runs, with intervals from at least 4 runs)."""
    log: TrainingLog = ctx.side.training_log
    s = _settings(ctx, log)
    replicates = ctx.option("replicate_runs") == "yes"
    diags = [tr.diagnose_run(log.run(r), r, **s) for r in log.runs if int(log.run(r)["loss_logged"].sum()) >= 10]
    values, cis = tr.summarize_runs(diags, ctx.level, ctx.seed, replicates=replicates)
    metrics = _headline_metrics(diags, values, cis, replicates)
    if len(diags) > 1:
        for name, (v, c) in tr.per_run(diags, ctx.level, ctx.seed).items():
            metrics.update(_run_metrics(name, v, c))
    ctx.rec.add(*metrics.values())
    for t in _tests(diags):
        ctx.rec.test(t)
    skipped = [r for r in log.runs if r not in {d.name for d in diags}]
    ctx.rec.note(training_log=dict(source=log.source, format=log.format, x=log.x, runs=log.runs,
                                   metrics=list(log.metrics), rows=len(log.frame)),
                 settings=s, runs=runs_table(diags).to_dict(orient="records"),
                 events=events_table(diags).to_dict(orient="records"), run_events=run_events(diags),
                 change_points={d.name: [int(d.steps[i]) for i in d.cps.indices] if d.cps else [] for d in diags},
                 evaluated_run=evaluated_run(log, getattr(ctx.es, 'fields', {}).get('training_run')), replicate_runs=replicates,
                 **({"skipped_runs": skipped} if skipped else {}))
    log_scale = _log_scale(ctx.option("log_scale"), diags)
    n_vec = len(ctx.side.runs) if "runs" in ctx.side and ctx.side.runs is not None else 0
    return TrainingReport(log, diags, metrics, s, log_scale, n_vec, replicates)


def _headline_metrics(diags, values: dict, cis: dict, replicates: bool) -> dict:
    """The metrics under their bare names: one run's values; with several, the share of runs that diverged, and
    with replicates the means and spreads over runs."""
    several = len(diags) > 1
    metrics = {}
    for spec in cv.SPECS.values():
        if spec.name not in values:
            continue
        lo, hi, how = cis.get(spec.name, (None, None, ""))
        lo, hi = spec.clip(lo, hi)
        if lo is not None:
            note = ""
        elif not several:
            note = "one run: give several runs for an interval"
        elif not replicates:
            note = "runs of possibly different configurations: a share, not an estimate"
        else:
            note = f"{len(diags)} runs: an interval needs at least {tr.MIN_INTERVAL_N}"
        label = spec.label + (" (mean over runs)" if several and spec.name in tr.run_values(diags[0]) else "")
        metrics[spec.name] = spec.record(values[spec.name], (lo, hi), ci_method=how, label=label, note=note)
    return metrics


def _run_metrics(run: str, values: dict, cis: dict) -> dict:
    """One run's values as ``<metric>__<run>`` with their own intervals."""
    out = {}
    for name, v in values.items():
        spec, key = cv.SPECS[name], f"{name}__{snapshot_slug(run)}"
        lo, hi, how = cis.get(name, (None, None, ""))
        lo, hi = spec.clip(lo, hi)
        out[key] = spec.record(v, (lo, hi), ci_method=how, name=key, label=f"{spec.label} [{run}]",
                               note="" if lo is not None else "a single value of this run: no interval")
    return out


def _log_scale(option: str, diags) -> bool:
    if option != "auto":
        return option == "true"
    fin = np.concatenate([d.loss[np.isfinite(d.loss)] for d in diags])
    return bool(len(fin) and fin.min() > 0 and fin.max() / fin.min() > 10)


def _tests(diags) -> list[HypothesisTest]:
    out = []
    for d in diags:
        n = f"{len(d.loss)} checks"
        if d.stat is not None:
            out.append(HypothesisTest(f"kpss: {d.name}", "KPSS with trend (statsmodels), p clipped to [0.01, 0.1]",
                                      d.stat.kpss_p, d.stat.kpss_stat, f"last {d.stat.n} checks",
                                      "the loss tail is stationary around a linear trend", "tail stationarity (KPSS)"))
            out.append(HypothesisTest(f"adf: {d.name}", "augmented Dickey–Fuller, constant + trend, AIC lags",
                                      d.stat.adf_p, d.stat.adf_stat, f"last {d.stat.n} checks",
                                      "the loss tail has a unit root (does not settle)", "tail stationarity (ADF)"))
        if d.osc is not None and math.isfinite(d.osc.fisher_p):
            out.append(HypothesisTest(f"periodicity: {d.name}", "Fisher's g test on the detrended periodogram",
                                      d.osc.fisher_p, d.osc.fisher_g, n, "no periodic component (white noise)",
                                      "oscillation (Fisher g)"))
        if math.isfinite(d.div.trend_p):
            out.append(HypothesisTest(f"rising trend: {d.name}", "least-squares slope, two-sided (seed v1)",
                                      d.div.trend_p, d.div.trend_slope, "last 20 finite checks",
                                      "no linear trend in the last 20 losses", "divergence trend"))
        if d.over is not None and math.isfinite(d.over.p_value):
            out.append(HypothesisTest(f"gap widening: {d.name}", "least-squares slope, one-sided (greater)",
                                      d.over.p_value, d.over.slope, f"{d.over.n_after} validations after the minimum",
                                      "the validation−training gap does not grow after the validation minimum",
                                      "overfitting gap"))
    return out


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def _step(v) -> str:
    return "—" if v is None else f"{int(v):,}"


def _status(d: tr.RunDiagnosis) -> str:
    words = []
    if d.div.diverged:
        words.append("diverged")
    if d.over is not None and d.over.overfitting:
        words.append("overfits")
    if d.osc is not None and d.osc.oscillating:
        words.append("oscillates")
    if not words:
        words.append("settled" if d.stat is not None and d.stat.settled else
                     "converged" if d.convergence is not None else "still improving")
    return ", ".join(words)


def runs_table(diags) -> pd.DataFrame:
    """One row per run: checks, final and best losses, convergence, early stopping, and a one-word status."""
    rows = []
    for d in diags:
        v = tr.run_values(d)
        rows.append({"run": d.name, "checks": len(d.loss), "status": _status(d),
                     "final loss": number(v["final_loss"]), "final val loss": number(v["final_val_loss"]),
                     "best val loss": number(v["best_val_loss"]), "converged at": _step(v["convergence_step"]),
                     "early stop fires at": _step(v["recommended_stop_step"]),
                     "best checkpoint": _step(d.step(d.early.best)) if d.early.best is not None else "—",
                     "λ per check": number(v["convergence_rate"], 3)})
    return pd.DataFrame(rows)


def run_events(diags) -> list[dict]:
    """Each run's events as data (steps; None where absent): divergence, the first non-finite loss, overfitting
    onset and the gap it reaches, oscillation, the best checkpoint by the monitored value."""
    out = []
    for d in diags:
        over = d.over is not None and d.over.overfitting
        out.append({"run": d.name, "diverged": bool(d.div.diverged), "diverged_from": d.step(d.div.onset, False)
                    if d.div.diverged else None, "first_nonfinite": d.step(d.div.first_nonfinite, False),
                    "overfitting": bool(over), "overfitting_onset": int(d.over.steps[d.over.onset]) if over else None,
                    "overfitting_rise": float(d.over.rise) if over else None,
                    "overfitting_p": float(d.over.p_value) if d.over is not None else None,
                    "oscillates": bool(d.osc is not None and d.osc.oscillating),
                    "best_step": d.step(d.early.best)})
    return out


def events_table(diags) -> pd.DataFrame:
    """Where each detected event happens, per run (steps)."""
    rows = []
    for d in diags:
        cps = [int(d.steps[i]) for i in d.cps.indices] if d.cps else []
        rows.append({"run": d.name,
                     "divergence": ("—" if not d.div.diverged else f"from {_step(d.step(d.div.onset, False))}"
                                    + (f"; first NaN/Inf at {_step(d.step(d.div.first_nonfinite, False))}"
                                       if d.div.first_nonfinite is not None else "; rising")),
                     "oscillation": ("—" if d.osc is None else
                                     (f"period {d.osc.period:.1f} checks" if d.osc.oscillating else "no")
                                     + f" (sign changes {d.osc.sign_change_rate:.0%})"),
                     "overfitting from": _step(int(d.over.steps[d.over.onset])) if d.over is not None and
                     d.over.overfitting else ("no" if d.over is not None else "no val loss"),
                     "change points (steps)": ", ".join(f"{c:,}" for c in cps[:8]) + (" …" if len(cps) > 8 else "")
                     or "none"})
    return pd.DataFrame(rows)


def tail_table(diags) -> pd.DataFrame:
    """The stationarity tests of each run's tail."""
    rows = []
    for d in diags:
        st = d.stat
        if st is None:
            rows.append({"run": d.name, "tail checks": "—", "KPSS (trend) p": "—", "ADF p": "—",
                         "trend over tail": "—", "settled": "diverged" if d.div.diverged else "too short"})
            continue
        kp = {"above": f"≥ {st.kpss_p:.2f}", "below": f"≤ {st.kpss_p:.2f}"}.get(st.kpss_bounded, f"{st.kpss_p:.3f}")
        rows.append({"run": d.name, "tail checks": st.n, "KPSS (trend) p": kp, "ADF p": f"{st.adf_p:.3g}",
                     "trend over tail": f"{st.trend_change:.1%} (p {st.trend_p:.2g})",
                     "settled": "yes" if st.settled else "no"})
    return pd.DataFrame(rows)


def checks_table(diags) -> pd.DataFrame:
    """The seed's TrainingMonitor checks, one column per run (⚑ marks a check that fires)."""
    rows: dict = {}
    for d in diags:
        for check, rule, v, fires in d.checks[["check", "rule (seed threshold)", "value", "fires"]].itertuples(
                index=False):
            row = rows.setdefault(check, {"check": check, "rule (seed threshold)": rule})
            row[d.name] = f"{v} ⚑" if fires else str(v)
    return pd.DataFrame(list(rows.values()), columns=["check", "rule (seed threshold)", *(d.name for d in diags)]
                        ).fillna("—")


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _m(rep: TrainingReport, name: str, fmt: str = ".3g") -> str:
    m = rep.metrics.get(name)
    return "—" if m is None or m.value is None else metric_text(m, fmt)


def narrative(rep: TrainingReport) -> str:
    """What the log says (markdown)."""
    diags, s = rep.runs, rep.settings
    x = rep.log.x
    parts = []
    mon = {d.monitor for d in diags}
    watched = ("the validation loss" if mon == {"val_loss"} else "the smoothed training loss" if mon == {"loss"}
               else f"`{escape(', '.join(sorted(mon)))}`")
    n = len(diags)
    parts.append(f"**{n} run{'s' if n > 1 else ''}** ({', '.join(f'`{escape(d.name)}`' for d in diags)}), "
                 f"{sum(len(d.loss) for d in diags):,} logged training losses by {x}. Early stopping watches "
                 f"{watched} with patience {s['patience']} checks and min_delta {s['min_delta']:g}"
                 f" ({'relative' if s['relative'] else 'absolute'}).")
    for d in diags:
        v = tr.run_values(d)
        bits = []
        if d.div.diverged:
            bits.append(f"**diverged**: the loss rises from {x} {_step(d.step(d.div.onset, False))}"
                        + (f" and is NaN/Inf from {x} {_step(d.step(d.div.first_nonfinite, False))} "
                           f"({d.div.n_nonfinite} checks)" if d.div.first_nonfinite is not None else
                           f" (smoothed loss {d.div.rise:.0%} above its minimum at the end)"))
        else:
            conv = (f"converged (within {s['tol']:.0%} of its final level) at {x} {_step(v['convergence_step'])}"
                    if v["convergence_step"] is not None else "had not converged by the end of the log")
            bits.append(f"{conv}; final loss {number(v['final_loss'], 3)}")
        if d.early.reason == "patience":
            bits.append(f"early stopping would stop at {x} {_step(d.step(d.early.stop))} and keep the checkpoint of "
                        f"{x} {_step(d.step(d.early.best))}, saving {_saved(d)} of the run")
        elif d.early.reason == "non-finite":
            bits.append(f"early stopping (check_finite) stops at the first non-finite {d.monitor} "
                        f"({x} {_step(d.step(d.early.stop))})")
        else:
            bits.append("early stopping never fires: the monitored value was still improving")
        if d.over is not None and d.over.overfitting:
            bits.append(f"**overfits** from {x} {_step(int(d.over.steps[d.over.onset]))}: the validation loss ends "
                        f"{d.over.rise:.0%} above its minimum while the training loss keeps falling")
        if d.osc is not None and d.osc.oscillating:
            bits.append(f"**oscillates** with a period of about {d.osc.period:.1f} checks (Fisher g raw p = "
                        f"{d.osc.fisher_p:.2g})")
        if d.stat is not None:
            bits.append("its tail has settled (stationary, no trend)" if d.stat.settled else
                        "its tail has not settled (" + ("still trending" if d.stat.trend_p <= 0.05 else
                                                        "not stationary") + ")")
        parts.append(f"- `{escape(d.name)}`: " + "; ".join(bits) + ".")
    if n > 1:
        k = sum(d.div.diverged for d in diags)
        parts.append(f"{k} of the {n} runs diverged. Neither the manifest nor the log says which run made the "
                     f"evaluated vectors: the log's runs are shown side by side and none is assumed to be the "
                     "evaluated one.")
        if rep.replicates:
            sp = rep.metrics.get("final_loss_spread")
            parts.append(f"The runs repeat one configuration (`replicate_runs=yes`): across them the final loss is "
                         f"{_m(rep, 'final_loss')} (mean over the runs that did not diverge)"
                         + (f", with a spread (sd) of {_m(rep, 'final_loss_spread')}" if sp else "") + ".")
        else:
            parts.append("Nothing is averaged over the runs: they may differ in configuration (here a learning rate "
                         "or a regulariser, say), and a mean or an interval over different configurations describes "
                         "none of them. The per-run table is the headline; when the runs repeat one configuration "
                         "with different seeds, `--set replicate_runs=yes` adds their mean and spread.")
    if rep.n_vector_runs:
        parts.append(f"The manifest also lists {rep.n_vector_runs} further training run(s) of the vectors: the Stability "
                     "chapter measures how much their embeddings disagree. Runs that reach the same loss but disagree "
                     "there found different, equally good solutions.")
    return "\n\n".join(parts)


def _saved(d: tr.RunDiagnosis) -> str:
    total = d.monitored_steps[-1] - d.monitored_steps[0]
    left = d.monitored_steps[-1] - d.step(d.early.stop)
    return f"{left / total:.0%}" if total > 0 else "nothing"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def _color(i: int) -> str:
    return RUN_COLORS[i % len(RUN_COLORS)]


def curves_figure(rep: TrainingReport) -> plt.Figure:
    """One panel per run (up to :data:`PANELS`): raw and smoothed training loss, validation loss, and the events."""
    diags = rep.runs[:PANELS]
    fig, axes = plt.subplots(len(diags), 1, figsize=(WIDTH, 2.5 * len(diags) + 0.4), squeeze=False, sharex=True)
    for i, (ax, d) in enumerate(zip(axes[:, 0], diags)):
        fin = np.isfinite(d.loss)
        ax.plot(d.steps[fin], d.loss[fin], color=_color(i), alpha=0.25, lw=0.8, label="training loss")
        ax.plot(d.steps, d.smoothed, color=_color(i), lw=1.8, label=f"smoothed (EMA α = {rep.settings['alpha']:g})")
        if d.over is not None:
            ax.plot(d.over.steps, d.over.val, color="black", lw=1.2, ls="--", marker=".", ms=3, label="validation loss")
        ev = []
        if d.convergence is not None:
            ev.append((d.step(d.convergence, False), PALETTE["healthy"], "-", "converged"))
        if d.early.reason == "patience":
            ev.append((d.step(d.early.stop), PALETTE["concerning"], "--", "early stop fires"))
        if d.early.best is not None and d.early.reason:
            ev.append((d.step(d.early.best), PALETTE["concerning"], ":", "best checkpoint"))
        if d.over is not None and d.over.overfitting:
            ev.append((int(d.over.steps[d.over.onset]), "#7b4ea3", "-.", "overfitting from"))
        if d.div.diverged:
            ev.append((d.step(d.div.onset, False), PALETTE["problematic"], "-", "divergence from"))
            if d.div.first_nonfinite is not None:
                ev.append((d.step(d.div.first_nonfinite, False), PALETTE["problematic"], ":", "first NaN/Inf"))
        for step, color, ls, lab in ev:
            ax.axvline(step, color=color, ls=ls, lw=1.3, label=f"{lab} ({step:,})")
        if d.cps is not None:
            for j, c in enumerate(d.cps.indices):
                ax.axvline(d.steps[c], ymax=0.06, color=PALETTE["muted"], lw=2,
                           label="change points (PELT)" if j == 0 else None)
        if rep.log_scale:
            ax.set_yscale("log")
        lo, hi = _ylim(d, rep.log_scale)
        ax.set_ylim(lo, hi)
        ax.set_title(f"{mathtext(d.name)} — {_status(d)}", loc="left", fontsize=10)
        ax.set_ylabel("loss" + (" (log)" if rep.log_scale else ""))
        ax.legend(fontsize=7, loc="upper right", ncol=2, framealpha=0.85)
    axes[-1, 0].set_xlabel(mathtext(rep.log.x))
    return fig


def _ylim(d: tr.RunDiagnosis, log: bool) -> tuple[float, float]:
    vals = [d.loss[np.isfinite(d.loss)]]
    if d.over is not None:
        vals.append(d.over.val[np.isfinite(d.over.val)])
    v = np.concatenate(vals)
    lo, hi = np.percentile(v, [0, 99.5])
    if log:
        lo = max(lo, v[v > 0].min() if (v > 0).any() else 1e-6)
        return lo / 1.3, hi * 1.3
    pad = 0.05 * (hi - lo or 1)
    return lo - pad, hi + pad


def overlay_figure(rep: TrainingReport) -> plt.Figure:
    """All runs on one axis: smoothed training loss (solid) and validation loss (dashed)."""
    fig, ax = plt.subplots(figsize=(WIDTH * 0.7, 3.2))
    for i, d in enumerate(rep.runs):
        ax.plot(d.steps, d.smoothed, color=_color(i), lw=1.6, label=mathtext(d.name))
        if d.over is not None:
            ax.plot(d.over.steps, d.over.val, color=_color(i), lw=1.0, ls="--")
    if rep.log_scale:
        ax.set_yscale("log")
    ax.set_xlabel(mathtext(rep.log.x))
    ax.set_ylabel("loss")
    ax.legend(fontsize=8, title="run (solid: smoothed training, dashed: validation)", title_fontsize=7)
    return fig


def schedule_figure(rep: TrainingReport) -> plt.Figure | None:
    """Learning rate and gradient norm per run (log scale), when logged."""
    f = rep.log.frame
    cols = [c for c in ("lr", "grad_norm") if c in f]
    if not cols:
        return None
    fig, axes = plt.subplots(1, len(cols), figsize=(WIDTH, 2.9), squeeze=False)
    for ax, c in zip(axes[0], cols):
        for i, r in enumerate(rep.log.runs):
            part = f[(f["run"] == r) & f[c].notna()]
            y = part[c].to_numpy(float)
            ok = np.isfinite(y) & (y > 0)
            ax.plot(part["step"].to_numpy()[ok], y[ok], color=_color(i), lw=1.2, label=mathtext(r))
        ax.set_yscale("log")
        ax.set_xlabel(mathtext(rep.log.x))
        ax.set_title("Learning rate" if c == "lr" else "Gradient norm", loc="left")
        if c == "grad_norm":
            ax.axhline(1000, color=PALETTE["problematic"], ls=":", lw=1, label="seed: max > 1000 exploding")
        ax.legend(fontsize=7)
    return fig


# ---------------------------------------------------------------------------------------------
# What the notebook shows
# ---------------------------------------------------------------------------------------------

def show_summary(rep: TrainingReport) -> None:
    show_markdown(narrative(rep))
    bad = [d.name for d in rep.runs if d.div.diverged]
    if bad:  # the runs' divergence is in the narrative above: the callout adds what to do
        callout("warning", "Seed 000 §219.1's remedies for a diverged run: reduce the learning rate (10× after "
                "NaN/Inf), add gradient clipping, check data normalization.", title="Divergence: what to do")


def per_run_table(rep: TrainingReport) -> pd.DataFrame:
    """Several runs: one row per metric, one column per run, each cell the run's value with its own interval."""
    runs = [d.name for d in rep.runs]
    rows = []
    for spec in cv.SPECS.values():
        cells = {}
        for run in runs:
            m = rep.metrics.get(f"{spec.name}__{snapshot_slug(run)}")
            cells[run] = "—" if m is None else marked_value(m.value, m.ci_low, m.ci_high, m.bias_corrected) + (
                f" ({interval(m.ci_low, m.ci_high, sep=' – ')})" if m.has_ci else "")
        if any(c != "—" for c in cells.values()):
            rows.append({"metric": spec.label, "better": spec.direction or "", **cells})
    return pd.DataFrame(rows, columns=["metric", "better", *runs])


def show_metrics(rep: TrainingReport) -> None:
    if len(rep.runs) == 1:
        show_metric_table(rep.metrics, caption="Training diagnostics. One run: final losses and the gap average the "
                          "last checks (bootstrap intervals over them; neighbouring checks are correlated, so these "
                          "intervals are optimistic); the rate has its regression interval. No verdicts: the seed "
                          "gives no threshold table for these numbers.", label="tbl-training-metrics")
        return
    table = per_run_table(rep)
    show_table(table, caption=with_mark_note(
        table, "Training diagnostics per run (recorded in metrics.json as metric__run): each run's value with its "
               "own 95 % interval (final losses and the gap: bootstrap over the last checks, optimistic since "
               "neighbouring checks are correlated; the rate: its regression interval; shares: Wilson). No verdicts: "
               "the seed gives no threshold table for these numbers."), label="tbl-training-metrics")
    headline = {k: m for k, m in rep.metrics.items() if "__" not in k}
    show_metric_table(headline, caption="Over the runs. " + (
        "The runs repeat one configuration: means over the runs where a value is defined (diverged runs have no "
        "final loss), t intervals over runs, spreads as standard deviations with chi-square intervals; no interval "
        f"from fewer than {tr.MIN_INTERVAL_N} runs." if rep.replicates else
        "Only the share of runs that diverged: the runs may differ in configuration, so nothing is averaged over "
        "them."), label="tbl-training-headline")


def show_curves(rep: TrainingReport) -> None:
    if len(rep.runs) > 1:
        show_figure(overlay_figure(rep), caption="All runs: smoothed training loss (solid) and validation loss "
                    "(dashed).", label="fig-training-overlay")
    extra = f" (the first {PANELS} runs)" if len(rep.runs) > PANELS else ""
    show_figure(curves_figure(rep),
                caption=f"Loss curves per run{extra} with the detected events: convergence (green), where early "
                        "stopping fires and the checkpoint it keeps (amber), overfitting onset (purple), divergence "
                        "and the first NaN/Inf (red), change points (grey ticks at the bottom)."
                        + (" Log-scale loss axis." if rep.log_scale else ""), label="fig-training-curves")


def show_schedule(rep: TrainingReport) -> None:
    fig = schedule_figure(rep)
    if fig is None:
        show_markdown("The log has no learning-rate or gradient-norm column.")
        return
    show_figure(fig, caption="Learning rate and gradient norm per run (log scale); the dotted line is the seed's "
                "exploding-gradient level (max > 1000).", label="fig-training-schedule")


#: the per-run table's columns that the metrics table does not already show
RUN_COLUMNS = ("run", "checks", "status", "best checkpoint")


def show_runs(rep: TrainingReport) -> None:
    show_table(runs_table(rep.runs)[list(RUN_COLUMNS)],
               caption=f"Per run: its checks, a one-word status and the checkpoint early stopping keeps (the best "
                       f"monitored value before it fires); the losses, steps and rates are in the metrics table "
                       f"above. Convergence step: the {rep.log.x} from which the smoothed loss stays within "
                       f"{rep.settings['tol']:.0%} of its total change of the final level; early stopping: Lightning's "
                       "rule on the monitored value; λ: the seed's exponential convergence rate per check.",
               label="tbl-training-runs")


def show_events(rep: TrainingReport) -> None:
    show_table(events_table(rep.runs), caption=f"Detected events per run ({rep.log.x}s). Change points: ruptures "
               "PELT (seed's rbf cost, minimum segment 10 points, penalty "
               f"{rep.settings['cp_penalty']:g}; runs longer than {cv.MAX_CP_POINTS} checks are binned to {cv.MAX_CP_POINTS} "
               "bin means); a smooth decay is cut into segments too, so read them as where the "
               "curve changes pace.", label="tbl-training-events")


def show_tail(rep: TrainingReport) -> None:
    show_table(tail_table(rep.runs), caption="Has the tail settled? KPSS with a trend term (H0: stationary around a "
               "trend; statsmodels clips its p-value to 0.01–0.1) and ADF with constant and trend (H0: unit root) on "
               "the last checks; settled when KPSS does not reject, ADF does, and the fitted trend is not "
               "significant or moves the loss by less than 1 %.", label="tbl-training-tail")


def show_checks(rep: TrainingReport) -> None:
    show_table(checks_table(rep.runs), caption="The seed's TrainingMonitor checks (seed 000 §219.1, versions 1 and 2) "
               "with the seed's thresholds on each run's training loss; ⚑ marks a check that fires. The seed applies "
               "them to per-epoch losses: on noisy per-step logs the raw-difference oscillation rule fires on noise "
               "alone, which is why the chapter's own oscillation test uses the smoothed curve and a periodogram.",
               label="tbl-training-checks")


# ---------------------------------------------------------------------------------------------
# The chapter's declaration
# ---------------------------------------------------------------------------------------------

MIN_DELTA = Option("min_delta", 0.001, "training diagnostics: smallest improvement early stopping counts (relative to the best "
                   "value with min_delta_mode=rel, absolute with abs as in Lightning)", bounds=(-1e-300, INF))
MIN_DELTA_MODE = Option("min_delta_mode", "rel", "training diagnostics: min_delta relative to the best value (rel) or absolute (abs)",
                        ("rel", "abs"))
PATIENCE = Option("patience", 5, "training diagnostics: checks without improvement before early stopping fires",
                  bounds=(0, INF))
MONITOR = Option("monitor", "auto", "training diagnostics: the log column early stopping watches (auto: val_loss when "
                 "logged, else the smoothed training loss)")
MONITOR_MODE = Option("monitor_mode", "min", "training diagnostics: whether the monitored value should fall (min) or rise (max)",
                      ("min", "max"))
SMOOTHING = Option("smoothing", 0.1, "training diagnostics: weight of the exponential moving average (seed's smoothing_alpha)",
                   bounds=(0, 1))
TAIL_WINDOW = Option("tail_window", 50, "training diagnostics: final checks of the tail tests (seed's window_size)",
                     bounds=(4, INF))
CONVERGENCE_TOL = Option("convergence_tol", 0.01, "training diagnostics: converged when within this share of the total change of "
                         "the final level", bounds=(0, 1))
CP_PENALTY = Option("cp_penalty", 3.0, "training diagnostics: PELT penalty of the change-point search (seed: 3)",
                    bounds=(0, INF))
REPLICATE_RUNS = Option("replicate_runs", "no", "training diagnostics: the log's runs repeat one configuration with "
                        "different seeds (yes: their mean and spread over runs are reported; no: each run on its own)",
                        ("no", "yes"))
LOG_SCALE = Option("log_scale", "auto", "training diagnostics: loss axis on a log scale (auto: when the loss spans a decade)",
                   ("auto", "true", "false"))

def findings(r: ChapterResults) -> list[Finding]:
    """A run that diverged (problematic) or overfits (concerning), naming the run and the step: the evaluated run's
    (``training_run``, or the only run) are the model's; the other runs' are evaluation findings."""
    events = r.info.get("run_events") or []
    evaluated = r.info.get("evaluated_run")
    out = []
    for mine in (True, False):
        group = [e for e in events if (str(e["run"]) == evaluated) == mine]
        out += _event_findings(r, group, len(events), evaluated, mine)
    return out


#: the two events of a run, as findings: (flag, severity, what happened, advice, metrics, effect, step and detail)
EVENTS = (
    ("diverged", "problematic", "diverged", "Lower the learning rate or clip gradients for these runs, and do not ship "
     "their checkpoints", ("diverged_runs",), "divergence",
     lambda e: f"{e['run']} from step {e['diverged_from']:,}" + (
         f", first NaN/Inf at {e['first_nonfinite']:,}" if e.get("first_nonfinite") is not None else "")),
    ("overfitting", "concerning", "overfit", "Stop these runs at their best validation checkpoint, or add "
     "regularisation", ("overfitting_onset_step", "overfitting_gap"), "overfitting",
     lambda e: f"{e['run']} from step {e['overfitting_onset']:,} (validation loss rises {e['overfitting_rise']:.0%} "
               "above its minimum)"),
)


def _event_findings(r: ChapterResults, events: list, total: int, evaluated: str | None, mine: bool) -> list[Finding]:
    """The divergence and overfitting findings of ``events``: the evaluated run's (``mine``) or the others'."""
    whose = (f" The run that produced these vectors ({evaluated}) is among them." if mine else
             "; not the run that produced these vectors" if evaluated else
             "; the log does not say which run produced these vectors (name it with `training_run:` in the manifest "
             "to judge it as the model's)")
    out = []
    for flag, severity, verb, advice, metrics, effect, where in EVENTS:
        hit = [e for e in events if e[flag]]
        if not hit:
            continue
        title = f"The evaluated training run {verb if verb == 'diverged' else verb + 's'}" if mine else \
            f"{len(hit)} of {total} training runs {verb}"
        text = "; ".join(where(e) for e in hit)
        out.append(Finding(
            severity, "training process", r.name, title,
            f"{advice} ({text}{'' if mine else whose}).{whose if mine else ''}", metrics=metrics,
            evidence={"value": len(hit) / max(total, 1), "runs": [e["run"] for e in hit], "evaluated_run": evaluated},
            rule="event", effect=effect if mine else f"{effect} (other runs)", kind="model" if mine else "evaluation"))
    return out


CHAPTER = ChapterSpec(
    name="training_diagnostics", title="Training diagnostics", order=76,
    description="Convergence, early stopping (Lightning's rule), divergence, oscillation, overfitting, change points and tail stationarity from the training log, with the seed's TrainingMonitor checks (seed 000 §219.1).",
    requires=("training_log",), optional=("runs",),
    options=(MIN_DELTA, MIN_DELTA_MODE, PATIENCE, MONITOR, MONITOR_MODE, SMOOTHING, TAIL_WINDOW, CONVERGENCE_TOL, CP_PENALTY, REPLICATE_RUNS, LOG_SCALE), precheck=precheck, demo="training_log",
    findings=findings,
)
