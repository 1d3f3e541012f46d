r"""Training diagnostics from a loss curve (seed 000 §219.1): convergence, early stopping, divergence,
oscillation, overfitting, change points, stationarity of the tail, and the seed's ``TrainingMonitor`` checks.

A run is a sequence of *checks* (the logged rows of one run, in step order). :math:`x_t` is the
monitored value at check t (the validation loss when the log has one, else the training loss),
:math:`s_t` its exponential moving average :math:`s_0 = x_0,\ s_t = \alpha x_t + (1-\alpha)s_{t-1}`
(the seed's ``smoothing_alpha``, default 0.1).

* **Early stopping** (:func:`early_stopping`): PyTorch Lightning's ``EarlyStopping`` rule, replayed over the
  checks: a check improves when :math:`x_t < b - \delta` (mode ``min``; ``> b + \delta`` for ``max``) with
  :math:`b` the best value so far; otherwise a wait counter grows, and the rule fires when it reaches
  ``patience``; a non-finite value stops at once (``check_finite``). ``relative=True`` uses
  :math:`\delta = \text{min\_delta}\cdot|b|` (the ``threshold_mode="rel"`` of PyTorch's ``ReduceLROnPlateau``),
  so "relative improvement below ``min_delta`` for ``patience`` checks" is a plateau. The recommended stop
  is the check where the rule fires; the checkpoint to keep is the best check before it.
* **Convergence step** (:func:`convergence_index`): the first check from which the smoothed curve stays
  within ``tol`` of its total change of the final level, :math:`|s_u - \bar s_{\text{tail}}| \le
  \text{tol}\cdot|s_0 - \bar s_{\text{tail}}|` for every later u (the seed's "within 1 % of the minimum",
  measured instead of extrapolated); undefined when that happens only inside the final window.
* **Convergence rate** (:func:`exponential_fit`, seed §219.1.1 and ``_estimate_convergence_rate``): the
  slope of :math:`\log(L_t - L_{\min} + 10^{-6})` on the check number over the middle half of the run,
  :math:`\lambda = -\text{slope}` with its t interval, :math:`R^2`, and :math:`\ln(100)/\lambda` checks to
  come within 1 % of the minimum.
* **Divergence** (:func:`divergence`): a non-finite loss, or the seed's trend test (linear slope > 0 with
  p < 0.05 over the last 20 checks) together with a smoothed loss that ends more than
  :data:`DIVERGENCE_RISE` above its minimum; the onset is the step of the smoothed minimum.
* **Oscillation** (:func:`oscillation`): the share of sign changes of the smoothed differences
  :math:`\Delta s_t` over the tail window, the lag-1 autocorrelation of the raw differences (seed v1),
  and the periodogram of the curve minus its Savitzky–Golay trend, after its first quarter (the steep start
  leaves a residual no trend filter removes; seed v2's dominant
  period and peak ratio), with Fisher's g test for a periodic component with period at most
  :data:`MAX_PERIOD` checks (Fisher 1929). Oscillating: g test p < 0.05 and the seed's peak ratio > 3.
* **Overfitting** (:func:`overfitting`): the gap :math:`g_k = \text{val}_k - \overline{\text{train}}_k`
  between each validation loss and the mean training loss since the previous validation; it opens at
  the validation minimum when, after it, the gap grows (least-squares slope > 0, one-sided p < 0.05) and
  the validation loss ends more than :data:`OVERFIT_RISE` above its minimum while the training loss ends
  below its value there (a training loss that rises too is divergence, not overfitting).
* **Change points** (:func:`change_points`): ruptures' PELT (Killick, Fearnhead & Eckley 2012) with the
  seed's settings (``model="rbf"``, ``min_size=10``, ``jump=1``, penalty 3), on at most
  :data:`MAX_CP_POINTS` points (bin means beyond).
* **Stationarity of the tail** (:func:`stationarity`): KPSS with a trend term (H0: trend-stationary;
  Kwiatkowski et al. 1992) and ADF with constant and trend (H0: unit root; Dickey & Fuller 1979),
  statsmodels, on the last ``window`` checks; settled when KPSS does not reject, ADF does, and the
  fitted linear trend is not significant (p > 0.05) or moves the loss by less than :data:`SETTLED_CHANGE`
  (relative) over the window.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..stats import DEFAULT_LEVEL
from .spec import MetricSpec, specs

SEED = "seed 000 §219.1"
#: the seed's TrainingMonitor defaults: trend window (checks) and EMA weight
WINDOW = 50
ALPHA = 0.1
#: seed v1 divergence window (last 20 checks, more than 5 needed)
DIVERGENCE_WINDOW = 20
#: a divergence also needs the smoothed loss to end this far (relative) above its minimum
DIVERGENCE_RISE = 0.10
#: overfitting needs the validation loss to end this far (relative) above its minimum
OVERFIT_RISE = 0.02
#: longest period (checks) tested for an oscillation; the curve is detrended by a cubic Savitzky–Golay filter of
#: 2 * MAX_PERIOD + 1 checks, which follows the decay and keeps periods up to about half its width (seed v2
#: counts periods < 50)
MAX_PERIOD = 25
#: most points handed to PELT (the rbf cost holds an n x n Gram matrix)
MAX_CP_POINTS = 200
#: fewest checks for the tail tests (seed v2: 20)
MIN_TAIL = 20
#: settled also needs the tail's fitted trend to move the loss by less than this (relative) over the window
SETTLED_CHANGE = 0.01

SPECS = specs(
    MetricSpec("final_loss", "Final training loss", "lower", r"\frac{1}{W}\sum_{t > T-W} L_t",
               f"{SEED} (final loss over the last W checks)"),
    MetricSpec("final_val_loss", "Final validation loss", "lower", r"\frac{1}{W}\sum_{k > K-W} V_k", SEED),
    MetricSpec("best_val_loss", "Best validation loss", "lower", r"\min_k V_k", SEED),
    MetricSpec("convergence_step", "Convergence step", "lower",
               r"\min\{t : |s_u - \bar s_{\mathrm{tail}}| \le \mathrm{tol}\,|s_0 - \bar s_{\mathrm{tail}}|\ \forall u \ge t\}",
               f"{SEED} (within 1 % of the final level)", range=(0, np.inf)),
    MetricSpec("recommended_stop_step", "Recommended stop (early stopping fires)", "lower",
               r"\min\{t : \mathrm{wait}_t \ge \mathrm{patience}\},\ \mathrm{wait}_t = 0 \text{ if } x_t < b_{t-1} - \delta",
               "PyTorch Lightning EarlyStopping (min_delta, patience, mode)", range=(0, np.inf)),
    MetricSpec("convergence_rate", "Convergence rate λ (per check)", "higher",
               r"\log(L_t - L_{\min} + 10^{-6}) \approx c - \lambda t", f"{SEED}.1 (exponential convergence model)"),
    MetricSpec("overfitting_gap", "Overfitting gap (validation − training)", "lower",
               r"\frac{1}{W}\sum_{k > K-W} (V_k - \overline{L}_k)", f"{SEED} (train vs validation)"),
    MetricSpec("overfitting_onset_step", "Overfitting onset (validation minimum)", "higher",
               r"\arg\min_k V_k \text{ when the gap then widens}", SEED, range=(0, np.inf)),
    MetricSpec("oscillation_rate", "Sign-change rate of smoothed differences", "lower",
               r"\frac{1}{W-2}\sum_t [\operatorname{sign}\Delta s_t \ne \operatorname{sign}\Delta s_{t-1}]",
               f"{SEED}, TrainingMonitor _test_oscillation (on the smoothed curve)", range=(0, 1)),
    MetricSpec("nonfinite_share", "Share of non-finite losses", "lower", r"\#\{t : L_t \notin \mathbb{R}\} / T",
               f"{SEED} (divergence: NaN/Inf)", range=(0, 1)),
    MetricSpec("diverged_runs", "Share of runs that diverged", "lower", r"\#\{\text{diverged runs}\} / R",
               SEED, range=(0, 1)),
    MetricSpec("final_loss_spread", "Spread of the final loss across runs (sd)", "lower",
               r"\mathrm{sd}_r(\text{final loss}_r)", "seed 000 §219.1 Example 7 (statistics across runs)",
               range=(0, np.inf)),
    MetricSpec("convergence_step_spread", "Spread of the convergence step across runs (sd)", "lower",
               r"\mathrm{sd}_r(\text{convergence step}_r)", "seed 000 §219.1 Example 7", range=(0, np.inf)),
)
METRICS = tuple(SPECS)


# ---------------------------------------------------------------------------------------------
# Small pieces
# ---------------------------------------------------------------------------------------------

def ema(x, alpha: float = ALPHA) -> np.ndarray:
    """The seed's exponential moving average: :math:`s_0 = x_0`, :math:`s_t = \\alpha x_t + (1-\\alpha)s_{t-1}`
    (a non-finite value propagates, as it would in the seed's ``log``)."""
    x = np.asarray(x, float)
    out = np.empty_like(x)
    s = x[0] if len(x) else 0.0
    for i, v in enumerate(x):
        s = v if i == 0 else alpha * v + (1 - alpha) * s
        out[i] = s
    return out


def _linregress(y) -> tuple[float, float, float, float]:
    """(slope, intercept, two-sided p, r²) of ``y`` on 0..n-1 (NaN when fewer than 3 points or no spread)."""
    y = np.asarray(y, float)
    if len(y) < 3 or np.ptp(y) == 0:
        return (0.0 if len(y) >= 3 else math.nan), (float(y.mean()) if len(y) else math.nan), math.nan, math.nan
    r = sps.linregress(np.arange(len(y)), y)
    return float(r.slope), float(r.intercept), float(r.pvalue), float(r.rvalue ** 2)


# ---------------------------------------------------------------------------------------------
# Early stopping (PyTorch Lightning semantics)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EarlyStop:
    """Lightning's EarlyStopping replayed over a run's checks (indices into the checks).

    ``stop`` the check where the rule fires (``None``: never), ``best`` the best check up to the stop
    (up to the end when it never fires), ``reason`` ``"patience"``, ``"non-finite"`` or ``""``; ``wait`` the
    wait counter after each replayed check, ``improved`` whether each check improved.
    """

    stop: int | None
    best: int | None
    reason: str
    wait: np.ndarray
    improved: np.ndarray


def early_stopping(values, *, min_delta: float = 0.0, patience: int = 3, mode: str = "min", relative: bool = False,
                   check_finite: bool = True) -> EarlyStop:
    """Replay PyTorch Lightning's ``EarlyStopping._evaluate_stopping_criteria`` over ``values``.

    Lightning keeps ``best = +inf`` (min) and improves when ``current - min_delta' < best`` with
    ``min_delta' = -min_delta`` for mode ``min``, i.e. ``current < best - min_delta``; else ``wait += 1`` and it
    stops when ``wait >= patience``; a non-finite ``current`` stops at once. ``relative`` scales
    ``min_delta`` by ``|best|`` (the first finite value always improves).
    """
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', not {mode!r}")
    x = np.asarray(values, float)
    sign = 1.0 if mode == "min" else -1.0
    best, best_i, wait = math.inf, None, 0
    waits, improved = [], []
    stop, reason = None, ""
    for i, v in enumerate(x):
        if check_finite and not math.isfinite(v):
            waits.append(wait)
            improved.append(False)
            stop, reason = i, "non-finite"
            break
        delta = min_delta * abs(best) if relative and math.isfinite(best) else (0.0 if relative else min_delta)
        if sign * v < best - delta:
            best, best_i, wait = sign * v, i, 0
            improved.append(True)
        else:
            wait += 1
            improved.append(False)
        waits.append(wait)
        if wait >= patience and not improved[-1]:
            stop, reason = i, "patience"
            break
    return EarlyStop(stop, best_i, reason, np.asarray(waits, int), np.asarray(improved, bool))


# ---------------------------------------------------------------------------------------------
# Convergence
# ---------------------------------------------------------------------------------------------

def tail_size(n: int, window: int = WINDOW) -> int:
    """Checks in the final window: ``window``, at most a fifth of the run, at least 1."""
    return int(max(1, min(window, n // 5 if n >= 10 else n)))


def convergence_index(smoothed, *, tol: float = 0.01, window: int = WINDOW) -> int | None:
    """First check from which the smoothed curve stays within ``tol`` of its total change of the mean of its
    final window (see the module docstring); ``None`` when it only gets there inside the final window,
    or the curve is not finite."""
    s = np.asarray(smoothed, float)
    n = len(s)
    if n < 3 or not np.isfinite(s).all():
        return None
    w = tail_size(n, window)
    final = float(s[-w:].mean())
    band = tol * abs(s[0] - final)
    outside = np.abs(s - final) > band
    if not outside.any():
        return 0
    idx = int(np.flatnonzero(outside)[-1]) + 1
    return idx if idx <= n - w else None


@dataclass(frozen=True)
class ExpFit:
    """The seed's exponential convergence fit over the middle half of a run (per check)."""

    rate: float
    ci: tuple
    r2: float
    p_value: float
    checks_to_1pct: float | None
    n: int


def exponential_fit(losses, level: float = DEFAULT_LEVEL) -> ExpFit | None:
    """Seed v2 ``_estimate_convergence_rate``: ``log(L - L_min + 1e-6)`` on the check number over
    ``[n//4, 3n//4)``; ``None`` for fewer than 20 finite checks or a middle half of 10 or fewer."""
    L = np.asarray(losses, float)
    L = L[np.isfinite(L)]
    n = len(L)
    if n < 20:
        return None
    a, b = n // 4, 3 * n // 4
    if b - a <= 10:
        return None
    y = np.log(L[a:b] - L.min() + 1e-6)
    x = np.arange(a, b)
    if np.ptp(y) == 0:
        return None
    r = sps.linregress(x, y)
    t = sps.t.ppf(0.5 + level / 2, len(x) - 2)
    lo, hi = -(r.slope + t * r.stderr), -(r.slope - t * r.stderr)
    return ExpFit(float(-r.slope), (float(lo), float(hi)), float(r.rvalue ** 2), float(r.pvalue),
                  float(math.log(100) / -r.slope) if r.slope < -0.001 else None, int(len(x)))


# ---------------------------------------------------------------------------------------------
# Divergence, oscillation, overfitting
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Divergence:
    diverged: bool
    reason: str                # "non-finite", "rising" or ""
    onset: int | None          # check index
    first_nonfinite: int | None
    n_nonfinite: int
    trend_slope: float
    trend_p: float
    rise: float                # final smoothed / min smoothed - 1 (finite prefix)


def divergence(losses, smoothed=None, *, alpha: float = ALPHA) -> Divergence:
    """Non-finite losses, and the seed's rising-trend test with a material rise (module docstring)."""
    L = np.asarray(losses, float)
    bad = ~np.isfinite(L)
    first = int(np.argmax(bad)) if bad.any() else None
    fin = L[:first] if first is not None else L
    s = ema(fin, alpha) if smoothed is None else np.asarray(smoothed, float)[:len(fin)]
    recent = fin[-DIVERGENCE_WINDOW:]
    slope, _, p, _ = _linregress(recent) if len(recent) > 5 else (math.nan, math.nan, math.nan, math.nan)
    lo = int(np.argmin(s)) if len(s) else None
    rise = float(s[-1] / s[lo] - 1) if len(s) and s[lo] > 0 else (float(s[-1] - s[lo]) if len(s) else math.nan)
    rising = bool(slope > 0 and p < 0.05 and rise > DIVERGENCE_RISE)
    if first is not None:
        onset = lo if lo is not None and rise > DIVERGENCE_RISE else first
        return Divergence(True, "non-finite", onset, first, int(bad.sum()), slope, p, rise)
    return Divergence(rising, "rising" if rising else "", lo if rising else None, None, 0, slope, p, rise)


@dataclass(frozen=True)
class Oscillation:
    sign_change_rate: float    # smoothed differences, tail window
    n_pairs: int               # consecutive difference pairs counted
    raw_sign_change_rate: float  # seed v1 (raw differences)
    acf1: float                # seed v1, lag-1 autocorrelation of the raw differences
    period: float              # seed v2 dominant period (checks)
    peak_ratio: float          # seed v2
    fisher_g: float
    fisher_p: float
    oscillating: bool


def fisher_g_test(power) -> tuple[float, float]:
    r"""Fisher's (1929) g test for a periodic component: :math:`g = \max_j I_j / \sum_j I_j` over m ordinates,
    :math:`P(G > g) = \sum_{j=1}^{\lfloor 1/g \rfloor} (-1)^{j-1}\binom{m}{j}(1 - jg)^{m-1}`."""
    p = np.asarray(power, float)
    m = len(p)
    if m < 2 or p.sum() <= 0:
        return math.nan, math.nan
    g = float(p.max() / p.sum())
    terms = [(-1) ** (j - 1) * math.comb(m, j) * (1 - j * g) ** (m - 1) for j in range(1, int(1 / g) + 1)]
    return g, float(min(1.0, max(0.0, sum(terms))))


def oscillation(losses, *, alpha: float = ALPHA, window: int = WINDOW) -> Oscillation | None:
    """Sign changes, autocorrelation and the periodogram of a run's finite losses (module docstring);
    ``None`` below 10 finite checks."""
    L = np.asarray(losses, float)
    L = L[np.isfinite(L)]
    n = len(L)
    if n < 10:
        return None
    recent = L[-min(window, n):]
    ds = np.diff(ema(L, alpha)[-min(window, n):])
    sc = np.sign(ds)
    pairs = len(sc) - 1
    rate = float(np.sum(sc[1:] != sc[:-1]) / pairs) if pairs > 0 else math.nan
    d = np.diff(recent)
    raw_rate = float(np.sum(np.diff(np.sign(d)) != 0) / len(d)) if len(d) else math.nan
    acf1 = float(np.corrcoef(d[:-1], d[1:])[0, 1]) if len(d) > 2 and np.ptp(d) > 0 else math.nan
    period = peak_ratio = g = gp = math.nan
    if n >= MIN_TAIL:
        from scipy import signal

        w = min(2 * MAX_PERIOD + 1, n // 2 * 2 - 1)
        trend = signal.savgol_filter(L, w, min(3, w - 1), mode="interp")
        freqs, power = signal.periodogram((L - trend)[n // 4:], scaling="spectrum")
        band = (freqs > 0) & (freqs >= 1.0 / MAX_PERIOD) & (freqs < 0.5)
        if band.sum() >= 2:
            j = int(np.argmax(np.where(band, power, -np.inf)))
            period = float(1 / freqs[j])
            peak_ratio = float(power[j] / (power[1:].mean() + 1e-10))
            g, gp = fisher_g_test(power[band])
    osc = bool(math.isfinite(gp) and gp < 0.05 and peak_ratio > 3 and period <= MAX_PERIOD)
    return Oscillation(rate, int(max(pairs, 0)), raw_rate, acf1, period, peak_ratio, g, gp, osc)


@dataclass(frozen=True)
class Overfitting:
    steps: np.ndarray          # validation steps
    val: np.ndarray
    train: np.ndarray          # mean training loss since the previous validation
    gap: np.ndarray
    onset: int | None          # index into the validation checks
    slope: float
    p_value: float             # one-sided, gap slope after the minimum > 0
    n_after: int
    rise: float                # final validation / minimum - 1
    overfitting: bool


def overfitting(steps, loss, val_loss) -> Overfitting | None:
    """Train/validation gap at each validation check and where it opens (module docstring); ``None``
    when fewer than 3 validation checks have a training loss before them."""
    steps, L, V = (np.asarray(a, float) for a in (steps, loss, val_loss))
    vk = np.flatnonzero(np.isfinite(V))
    rows, tr = [], []
    prev = -math.inf
    for k in vk:
        since = (steps > prev) & (steps <= steps[k]) & np.isfinite(L)
        before = (steps <= steps[k]) & np.isfinite(L)
        if since.any() or before.any():
            rows.append(k)
            tr.append(float(L[since].mean()) if since.any() else float(L[before][-1]))
        prev = steps[k]
    if len(rows) < 3:
        return None
    rows = np.asarray(rows)
    val, train = V[rows], np.asarray(tr)
    gap = val - train
    onset = int(np.argmin(val))
    after = gap[onset:]
    slope, p = math.nan, math.nan
    if len(after) >= 3 and np.ptp(after) > 0:
        r = sps.linregress(np.arange(len(after)), after)
        slope = float(r.slope)
        p = float(r.pvalue / 2 if r.slope > 0 else 1 - r.pvalue / 2)
    tail = val[-min(5, len(val)):].mean()
    rise = float(tail / val[onset] - 1) if val[onset] > 0 else float(tail - val[onset])
    train_fell = bool(train[-min(5, len(train)):].mean() < train[onset])
    over = bool(len(after) >= 3 and math.isfinite(p) and p < 0.05 and rise > OVERFIT_RISE and train_fell)
    return Overfitting(steps[rows], val, train, gap, onset if over else None, slope, p, len(after), rise, over)


# ---------------------------------------------------------------------------------------------
# Change points and stationarity
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChangePoints:
    indices: list              # check indices where a new regime starts
    segments: pd.DataFrame     # start, end (check indices), mean, slope per check
    binned: int                # checks per PELT point (1 = none)


def change_points(losses, *, penalty: float = 3.0, model: str = "rbf", min_size: int = 10, jump: int = 1,
                  max_points: int = MAX_CP_POINTS) -> ChangePoints | None:
    """ruptures PELT on a run's finite losses (seed v2 ``_detect_changepoints``); ``None`` below 30 checks."""
    import ruptures as rpt

    L = np.asarray(losses, float)
    L = L[np.isfinite(L)]
    n = len(L)
    if n < 30:
        return None
    b = int(math.ceil(n / max_points))
    x = L if b == 1 else np.array([L[i:i + b].mean() for i in range(0, n, b)])
    algo = rpt.Pelt(model=model, min_size=min_size, jump=jump).fit(x.reshape(-1, 1))
    bkps = [int(c) * b for c in algo.predict(pen=penalty) if c < len(x)]
    edges = [0, *bkps, n]
    rows = []
    for s, e in zip(edges[:-1], edges[1:]):
        seg = L[s:e]
        rows.append({"start": s, "end": e - 1, "mean": float(seg.mean()),
                     "slope": float(np.polyfit(np.arange(len(seg)), seg, 1)[0]) if len(seg) > 2 else math.nan})
    return ChangePoints(bkps, pd.DataFrame(rows), b)


@dataclass(frozen=True)
class Stationarity:
    n: int
    kpss_stat: float
    kpss_p: float
    kpss_bounded: str          # "" or "below" / "above" the table (statsmodels clips p to [0.01, 0.1])
    adf_stat: float
    adf_p: float
    trend_change: float        # fitted trend change over the window, relative to the window mean
    trend_p: float             # two-sided p of the fitted trend
    settled: bool
    regression: str


def stationarity(tail, *, regression: str = "ct") -> Stationarity | None:
    """KPSS (``regression``, ``nlags="auto"``) and ADF (``regression``, ``autolag="AIC"``) on ``tail``
    (statsmodels); ``None`` below :data:`MIN_TAIL` finite values or without spread."""
    from statsmodels.tools.sm_exceptions import InterpolationWarning
    from statsmodels.tsa.stattools import adfuller, kpss

    y = np.asarray(tail, float)
    y = y[np.isfinite(y)]
    if len(y) < MIN_TAIL or np.ptp(y) == 0:
        return None
    bounded = ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InterpolationWarning)
        ks, kp, _, _ = kpss(y, regression=regression, nlags="auto")
    for w in caught:
        if issubclass(w.category, InterpolationWarning):
            bounded = "below" if "smaller" in str(w.message) else "above"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        adf = adfuller(y, regression=regression, autolag="AIC")
    tr = sps.linregress(np.arange(len(y)), y)
    change = float(abs(tr.slope) * (len(y) - 1) / (abs(y.mean()) + 1e-12))
    settled = bool(kp > 0.05 and adf[1] < 0.05 and (tr.pvalue > 0.05 or change < SETTLED_CHANGE))
    return Stationarity(len(y), float(ks), float(kp), bounded, float(adf[0]), float(adf[1]), change,
                        float(tr.pvalue), settled, regression)
