"""One training run through every analysis of :mod:`.convergence` and the seed's monitor checks of
:mod:`.training_checks` (:func:`diagnose_run`), and several runs summarised with their spread
(:func:`summarize_runs`)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..stats import DEFAULT_LEVEL
from .convergence import (
    ALPHA,
    WINDOW,
    ChangePoints,
    Divergence,
    EarlyStop,
    ExpFit,
    Oscillation,
    Overfitting,
    Stationarity,
    change_points,
    convergence_index,
    divergence,
    early_stopping,
    ema,
    exponential_fit,
    oscillation,
    overfitting,
    stationarity,
    tail_size,
)
from .spec import MIN_INTERVAL_N
from .training_checks import monitor_checks


@dataclass(frozen=True)
class RunDiagnosis:
    """Every analysis of one run (indices are check indices; ``steps`` maps them to steps)."""

    name: str
    steps: np.ndarray
    loss: np.ndarray
    smoothed: np.ndarray
    monitor: str                      # the monitored column
    monitored_steps: np.ndarray
    monitored: np.ndarray
    early: EarlyStop
    convergence: int | None           # index into the training-loss checks
    fit: ExpFit | None
    div: Divergence
    osc: Oscillation | None
    over: Overfitting | None
    cps: ChangePoints | None
    stat: Stationarity | None
    checks: pd.DataFrame
    final_loss: float
    final_loss_values: np.ndarray     # the tail the final loss averages
    extra: dict = field(default_factory=dict)

    def step(self, i: int | None, monitored: bool = True) -> int | None:
        if i is None:
            return None
        return int((self.monitored_steps if monitored else self.steps)[i])


def diagnose_run(run: pd.DataFrame, name: str = "run", *, monitor: str = "auto", mode: str = "min",
                 min_delta: float = 0.001, relative: bool = True, patience: int = 5, alpha: float = ALPHA,
                 window: int = WINDOW, tol: float = 0.01, cp_penalty: float = 3.0) -> RunDiagnosis:
    """All analyses of one run of a tidy training log (columns ``step``, ``loss`` and optionally
    ``val_loss``, ``grad_norm``, metrics). ``monitor``: the column early stopping watches (``auto``: the
    validation loss when logged, else the training loss, smoothed when it is the training loss)."""
    run = run.sort_values("step")
    lrows = run[run["loss_logged"]] if "loss_logged" in run else run[run["loss"].notna()]
    steps, L = lrows["step"].to_numpy(np.int64), lrows["loss"].to_numpy(float)
    bad = ~np.isfinite(L)
    first_bad = int(np.argmax(bad)) if bad.any() else len(L)
    s = np.full(len(L), np.nan)
    s[:first_bad] = ema(L[:first_bad], alpha)
    col = monitor
    if col == "auto":
        col = "val_loss" if "val_loss" in run and run["val_loss"].notna().sum() >= 3 else "loss"
    if col not in run:
        raise KeyError(col)
    if col == "loss":
        m_steps, m_vals = steps, np.where(np.arange(len(L)) < first_bad, s, L)
    else:
        mrows = run[run[col].notna()]
        m_steps, m_vals = mrows["step"].to_numpy(np.int64), mrows[col].to_numpy(float)
    early = early_stopping(m_vals, min_delta=min_delta, patience=patience, mode=mode, relative=relative)
    div = divergence(L, s[:first_bad], alpha=alpha)
    conv = None if div.diverged else convergence_index(s[:first_bad], tol=tol, window=window)
    w = tail_size(first_bad, window)
    tail = L[:first_bad][-w:]
    final = float(tail.mean()) if len(tail) and not div.diverged else math.nan
    over = overfitting(run["step"].to_numpy(float), run["loss"].to_numpy(float), run["val_loss"].to_numpy(float)) \
        if "val_loss" in run and run["val_loss"].notna().sum() >= 3 else None
    st = stationarity(L[:first_bad][-min(window, first_bad):]) if not div.diverged else None
    grads = lrows["grad_norm"].to_numpy(float) if "grad_norm" in lrows else None
    return RunDiagnosis(
        name=name, steps=steps, loss=L, smoothed=s, monitor=col, monitored_steps=m_steps, monitored=m_vals, early=early,
        convergence=conv, fit=exponential_fit(L[:first_bad]), div=div,
        osc=oscillation(L[:first_bad], alpha=alpha, window=window), over=over,
        cps=change_points(L[:first_bad], penalty=cp_penalty), stat=st,
        checks=monitor_checks(L, grads, window=window), final_loss=final,
        final_loss_values=tail if not div.diverged else np.array([]))


# ---------------------------------------------------------------------------------------------
# Per-run values and the headline metrics over runs
# ---------------------------------------------------------------------------------------------

def _tail_mean(x, k: int = 5) -> tuple[float, np.ndarray]:
    x = np.asarray(x, float)
    x = x[np.isfinite(x)][-k:]
    return (float(x.mean()) if len(x) else math.nan), x


def run_values(d: RunDiagnosis) -> dict:
    """The per-run numbers behind the headline metrics (NaN / None where undefined)."""
    val_final, _ = _tail_mean(d.over.val) if d.over is not None else (math.nan, None)
    gap, _ = _tail_mean(d.over.gap) if d.over is not None else (math.nan, None)
    n = len(d.loss)
    return {
        "final_loss": d.final_loss,
        "final_val_loss": math.nan if d.div.diverged else val_final,
        "best_val_loss": float(np.nanmin(d.over.val)) if d.over is not None and np.isfinite(d.over.val).any()
        else math.nan,
        "convergence_step": d.step(d.convergence, monitored=False),
        "recommended_stop_step": d.step(d.early.stop) if d.early.reason == "patience" else None,
        "convergence_rate": d.fit.rate if d.fit is not None and not d.div.diverged else math.nan,
        "overfitting_gap": math.nan if d.div.diverged else gap,
        "overfitting_onset_step": (int(d.over.steps[d.over.onset]) if d.over is not None and d.over.overfitting
                                   else None),
        "oscillation_rate": d.osc.sign_change_rate if d.osc is not None else math.nan,
        "nonfinite_share": d.div.n_nonfinite / n if n else math.nan,
    }


def _defined(v) -> bool:
    return v is not None and math.isfinite(float(v))


def sd_interval(values, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    r"""Chi-square interval of a standard deviation (normal values): :math:`s\sqrt{(n-1)/\chi^2_{1-a/2}}` to
    :math:`s\sqrt{(n-1)/\chi^2_{a/2}}`."""
    x = np.asarray(values, float)
    n = len(x)
    if n < 2:
        return math.nan, math.nan
    s, a = float(x.std(ddof=1)), (1 - level) / 2
    return (s * math.sqrt((n - 1) / sps.chi2.ppf(1 - a, n - 1)), s * math.sqrt((n - 1) / sps.chi2.ppf(a, n - 1)))




def run_intervals(d: RunDiagnosis, level: float = DEFAULT_LEVEL, seed: int = 0) -> dict:
    """One run's own intervals ``name -> (low, high, method)`` of :func:`run_values`: the final losses and the
    gap bootstrap over the final checks (validations), the rate the fit's t interval, the shares Wilson; none
    from fewer than :data:`MIN_INTERVAL_N` values."""
    from ..stats import mean_ci, wilson_ci

    cis = {}
    v = run_values(d)
    if _defined(v["final_loss"]) and len(d.final_loss_values) >= MIN_INTERVAL_N:
        cis["final_loss"] = mean_ci(d.final_loss_values, level, seed=seed, units="final checks")
    for name in ("final_val_loss", "overfitting_gap"):
        if _defined(v[name]) and d.over is not None:
            _, tail = _tail_mean(d.over.val if name == "final_val_loss" else d.over.gap)
            if len(tail) >= MIN_INTERVAL_N:
                cis[name] = mean_ci(tail, level, seed=seed, units="final validations")
    if _defined(v["convergence_rate"]) and d.fit is not None and d.fit.n >= MIN_INTERVAL_N:
        cis["convergence_rate"] = (*d.fit.ci, f"{level:.0%} t interval of the fitted slope ({d.fit.n} checks)")
    if _defined(v["oscillation_rate"]) and d.osc is not None and d.osc.n_pairs >= MIN_INTERVAL_N:
        k = round(d.osc.sign_change_rate * d.osc.n_pairs)
        cis["oscillation_rate"] = (*wilson_ci(k, d.osc.n_pairs, level), f"{level:.0%} Wilson interval over "
                                   f"{d.osc.n_pairs} difference pairs")
    n = len(d.loss)
    if _defined(v["nonfinite_share"]) and n >= MIN_INTERVAL_N:
        cis["nonfinite_share"] = (*wilson_ci(d.div.n_nonfinite, n, level), f"{level:.0%} Wilson interval over {n} "
                                  "checks")
    return cis


def summarize_runs(diags: list[RunDiagnosis], level: float = DEFAULT_LEVEL, seed: int = 0, *,
                   replicates: bool = False) -> tuple[dict, dict]:
    """Headline values and intervals ``(values, cis)`` with ``cis[name] = (low, high, method)``.

    One run: each value is that run's, with its own interval (:func:`run_intervals`). Several runs: nothing is
    pooled over runs of different configurations (a learning rate per run, say): the values are each run's
    (:func:`per_run`), and the headline is only ``diverged_runs``, the share of runs that diverged, without an
    interval. ``replicates=True`` (the runs repeat one configuration with different seeds): a per-run value is
    also the mean over the runs where it is defined (diverged runs have no final loss), and the spreads (sd over
    runs) join; intervals (t over runs, Wilson, chi-square) only from at least :data:`MIN_INTERVAL_N` runs.
    """
    from ..stats import t_interval, wilson_ci

    if len(diags) == 1:
        values = {k: float(v) for k, v in run_values(diags[0]).items() if _defined(v)}
        return values, run_intervals(diags[0], level, seed)
    per = [run_values(d) for d in diags]
    values, cis = {}, {}
    k = sum(d.div.diverged for d in diags)
    values["diverged_runs"] = k / len(diags)
    if not replicates:
        return values, cis
    if len(diags) >= MIN_INTERVAL_N:
        cis["diverged_runs"] = (*wilson_ci(k, len(diags), level), f"{level:.0%} Wilson interval over {len(diags)} runs")
    for name in per[0]:
        v = np.array([float(p[name]) for p in per if _defined(p[name])])
        if not len(v):
            continue
        values[name] = float(v.mean())
        if len(v) >= MIN_INTERVAL_N:
            cis[name] = (*t_interval(v, level, bounds=(-np.inf, np.inf)), f"{level:.0%} t interval over {len(v)} runs")
    for name, src in (("final_loss_spread", "final_loss"), ("convergence_step_spread", "convergence_step")):
        v = np.array([float(p[src]) for p in per if _defined(p[src])])
        if len(v) >= 2:
            values[name] = float(v.std(ddof=1))
            if len(v) >= MIN_INTERVAL_N:
                cis[name] = (*sd_interval(v, level), f"{level:.0%} chi-square interval over {len(v)} runs")
    return values, cis


def per_run(diags: list[RunDiagnosis], level: float = DEFAULT_LEVEL, seed: int = 0) -> dict:
    """``run name -> (values, cis)``: each run's own values (:func:`run_values`, the defined ones) and intervals
    (:func:`run_intervals`), the numbers a log of several runs records run by run."""
    return {d.name: ({k: float(v) for k, v in run_values(d).items() if _defined(v)}, run_intervals(d, level, seed))
            for d in diags}
