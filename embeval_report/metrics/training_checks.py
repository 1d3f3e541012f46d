"""The seed's ``TrainingMonitor`` checks (seed 000 §219.1, versions 1 and 2) with the seed's own thresholds,
applied to one run's training loss (and gradient norms) as the seed states them."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from .convergence import DIVERGENCE_WINDOW, WINDOW, _linregress, exponential_fit

# ---------------------------------------------------------------------------------------------

V1 = "seed 000 §219.1, TrainingMonitor v1"
V2 = "seed 000 §219.1, TrainingMonitor v2"


def monitor_checks(losses, grad_norms=None, *, window: int = WINDOW) -> pd.DataFrame:
    """Every check of the seed's two ``TrainingMonitor`` versions on one run's training loss: the value,
    the rule with the seed's threshold, whether it fires, and the method it comes from. (The
    IsolationForest anomaly rate is left out: with ``contamination=0.1`` it is 10 % by construction, so
    its "> 15 %" rule cannot fire.)"""
    L = np.asarray(losses, float)
    rows = []

    def add(check, rule, value, fired, source):
        rows.append({"check": check, "rule (seed threshold)": rule, "value": value,
                     "fires": None if fired is None else bool(fired), "source": source})

    bad = int((~np.isfinite(L)).sum())
    add("NaN/Inf loss", "any non-finite loss → diverged (critical)", bad, bad > 0, f"{V1}/v2 diagnose_loss_curve")
    fin = L[np.isfinite(L)]
    if len(fin) < 10:
        add("enough data", "≥ 10 epochs for any diagnosis", len(fin), True, V1)
        return pd.DataFrame(rows)
    rec = fin[-DIVERGENCE_WINDOW:]
    slope, _, p, _ = _linregress(rec)
    add("rising trend (last 20)", "slope > 0 and p < 0.05 → possible divergence", f"slope {slope:.3g}, p {p:.3g}",
        slope > 0 and p < 0.05, f"{V1} divergence")
    w = fin[-min(window, len(fin)):]
    rr = float(np.ptp(w) / (w.mean() + 1e-10))
    s2, _, p2, _ = _linregress(w)
    add(f"plateau (last {len(w)})", "relative range < 0.01 and |slope| < 1e-4 and p > 0.05",
        f"range {rr:.3g}, slope {s2:.2g}, p {p2:.2g}", rr < 0.01 and abs(s2) < 1e-4 and p2 > 0.05, f"{V1} _test_plateau")
    d = np.diff(w)
    rate = float(np.sum(np.diff(np.sign(d)) != 0) / len(d))
    acf = float(np.corrcoef(d[:-1], d[1:])[0, 1]) if len(d) > 2 and np.ptp(d) > 0 else math.nan
    add("oscillation (raw differences)", "sign-change rate > 0.6 or lag-1 ACF < −0.3",
        f"rate {rate:.3f}, ACF {acf:.3f}", rate > 0.6 or acf < -0.3, f"{V1} _test_oscillation")
    if len(fin) >= 20:
        from scipy import signal
        from statsmodels.tsa.stattools import adfuller, kpss

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                adf_p = float(adfuller(fin, autolag="AIC")[1])
            except Exception:
                adf_p = math.nan
            try:
                kp = float(kpss(fin, regression="c", nlags="auto")[1])
            except Exception:
                kp = math.nan
        both_fail = not (adf_p < 0.05) and not (kp > 0.05)
        add("stationarity (whole run)", "ADF p < 0.05 and KPSS(c) p > 0.05 stationary; both failing → not converging",
            f"ADF p {adf_p:.3g}, KPSS p {kp:.3g}", both_fail, f"{V2} _test_stationarity")
        freqs, power = signal.periodogram(signal.detrend(fin), scaling="spectrum")
        j = int(np.argmax(power[1:]) + 1)
        per = 1 / freqs[j] if freqs[j] > 0 else math.inf
        ratio = float(power[j] / (power[1:].mean() + 1e-10))
        add("spectral oscillation", "peak ratio > 3 and period < 50", f"period {per:.1f}, peak ratio {ratio:.1f}",
            ratio > 3 and per < 50, f"{V2} _spectral_analysis")
        fit = exponential_fit(fin)
        if fit is not None:
            add("convergence fit", "R² < 0.5 → poor exponential fit, unstable", f"λ {fit.rate:.4f}, R² {fit.r2:.3f}",
                fit.r2 < 0.5, f"{V2} _estimate_convergence_rate")
            add("not converged (v1 table)", "convergence rate ≤ 0.01 per epoch → 'Converged: No'",
                f"{fit.rate:.4f}", not fit.rate > 0.01, f"{V1} demo table")
    if len(fin) >= 30:
        from statsmodels.tsa.seasonal import seasonal_decompose

        period = min(10, len(fin) // 3)
        tr = seasonal_decompose(pd.Series(fin), model="additive", period=period, extrapolate_trend=period).trend
        ts = float(np.polyfit(np.arange(len(tr)), tr.to_numpy(), 1)[0])
        add("trend direction", "slope > 0 → increasing; |slope| < 1e-4 → flat (plateau)",
            f"slope {ts:.3g}", ts > 0 or abs(ts) < 1e-4, f"{V2} _decompose_trend")
    if grad_norms is not None:
        g = np.asarray(grad_norms, float)
        g = g[np.isfinite(g)]
        if len(g) >= 10:
            m, sd = float(g.mean()), float(g.std())
            add("vanishing gradients", "mean gradient norm < 1e-6", f"{m:.3g}", m < 1e-6, f"{V1}/v2 _analyze_gradients")
            add("exploding gradients", "mean > 100 or max > 1000", f"mean {m:.3g}, max {g.max():.3g}",
                m > 100 or g.max() > 1000, f"{V1}/v2 _analyze_gradients")
            cv = sd / (m + 1e-10)
            add("gradient variance", "CV > 2.0 → high gradient variance", f"CV {cv:.2f}", cv > 2.0,
                f"{V2} _analyze_gradients")
    return pd.DataFrame(rows)
