r"""Scoring one batch of new vectors against a reference :class:`~.profile.Profile` (seed 000 §220).

Seven signals, each an effect size with a test of "the batch comes from the reference distribution":

=====================  ==========================================================  ===============================
signal                 effect (what is plotted)                                    test (p-value)
=====================  ==========================================================  ===============================
``mean_shift``         :math:`\lVert\bar y - \mu\rVert / \sqrt{\mathrm{tr}\,\Sigma}`;  scaled χ² (Bai & Saranadasa 1996
                       its ratio to the no-drift level                             statistic, Satterthwaite 1946)
``norm_shift``         relative change of the mean row norm; its Welch |t|          studentized permutation
``isotropy_drift``     APCS of the batch minus the reference's                      z-test, U-statistic variance
``mmd``                unbiased MMD², Gaussian kernel (median heuristic)            permutation (Gretton et al. 2012)
``ks_dimensions``      share of dimensions whose KS test rejects (BH at α/7)       Simes (the smallest BH p)
``domain_classifier``  cross-validated AUC of baseline-vs-batch logistic regression  one-sided, Mann–Whitney null
``anomalous_fraction`` share of batch rows whose k-NN distance to the reference     exceedances of the held-out
                       exceeds the held-out rows' (1 − q) quantile (q = 2.5 %)     quantile: beta-binomial, exact
=====================  ==========================================================  ===============================

**Alert levels** (``ok`` < ``warning`` < ``critical``; the report's verdicts read them as healthy < concerning <
problematic, :data:`VERDICT`). Each signal's level is :func:`band_level` of its plotted value against its
**bands** (the warning and critical edges, stored with the batch in ``detail``, which the dashboard draws): an
edge is the larger of the effect the rule names and the value at which the signal's own test rejects at α/7
(Bonferroni over the seven tests, :func:`per_signal_alpha`), so a batch drawn from the reference distribution
raises *any* alert with probability at most α (``alpha``, 0.05; up to the large-sample approximations of the
mean-shift, norm and APCS tests), and a point inside a band always has that band's level:

* mean shift, Table 217.3's mean-drift row: warning above 1.5×, critical above 2.5× the no-drift level
  (:math:`\sqrt{\mathrm{tr}\,\Sigma\,(1/n_b + 1/n_r)}`, what sampling alone produces at this batch size);
* norm shift, the same row on the mean norm, whose no-drift level is its standard error (the ratio is Welch's
  |t|): significance at α/7 (|t| above about 2.7) already passes 2.5×, so a significant norm shift is critical;
* isotropy, §220.1 (warning when :math:`|\Delta\mathrm{APCS}| > 0.1`) and the §220.2 dashboard (APCS above 0.3
  warning, above 0.5 critical, when the reference sits in a lower band: a model whose reference already
  is anisotropic would otherwise alert on every batch);
* anomalous fraction, Table 217.3 (warning above 5 %, critical above 10 %: 2× and 4× the 2.3–2.5 % nominal rate
  of its μ + 2σ rule): warning above 2q, critical above 4q, with the threshold calibrated on the profile's
  held-out rows to the nominal rate q (:mod:`.profile`), so an unchanged batch sits near q whatever the tails;
* domain classifier: warning above AUC 0.55 (Evidently's default), critical above 0.7 (acceptable
  discrimination, Hosmer & Lemeshow 2000);
* per-dimension KS: warning when any dimension rejects, critical when more than half do (Evidently's
  dataset-drift share);
* MMD: warning when its permutation test rejects; **no critical level** (MMD² has no scale-free threshold: the
  seed's ``mmd > 0.1`` is on its own biased estimator and kernel scale).

**Power.** A batch too small to see a warning-level change says so (:func:`batch_power`): the anomalous
fraction's test against a doubled rate 2q (statsmodels ``NormalIndPower``, one sample, arcsine effect size), and
the domain classifier against AUC 0.55 (the Mann–Whitney null variance), each at α/7 with power 0.8.

Table 217.3's pairwise correlation and Procrustes distance, and the §220.2 dashboard's Procrustes
"drift from baseline", compare *the same entities* at two times; a batch of new rows has no such
pairing, so they are the drift chapter's (``snapshots``), not this one's. The §220.2 dashboard's norm CV
(> 0.5) is kept in each batch's detail, not levelled: it describes the set, not a change.

The batch enters the tests through seeded row samples (``mmd_sample``, ``ks_sample``,
``classifier_sample``, ``anomaly_sample``); the mean, norm and APCS statistics use every row.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import InputError, UndefinedMetricWarning
from ..io.monitor_history import HISTORY_FORMAT, HISTORY_VERSION, LEVELS
from ..kernels import as_numpy, resolve_device
from ..metrics.thresholds import TABLE_217_3
from ..metrics.two_sample import domain_classifier_auc, ks_dimensions, mmd_test
from ..stats import normal_ci, wilson_ci
from .profile import Profile, knn_scores

#: alert levels, least to most severe, and the report verdict each one reads as (one vocabulary: the levels;
#: ``metrics.json`` and the report's scorecard use the verdicts, by this mapping)
VERDICT = {"ok": "healthy", "warning": "concerning", "critical": "problematic"}
ALPHA = 0.05
#: Table 217.3 mean-drift row (× baseline)
MEAN_DRIFT_WARNING, MEAN_DRIFT_CRITICAL = 1.5, 2.5
#: Table 217.3 anomalous-fraction row (5 %, 10 %) as multiples of the nominal rate of its mu + 2 sigma rule (2.5 %)
ANOMALY_WARNING_RATIO, ANOMALY_CRITICAL_RATIO = 2.0, 4.0
#: seed 000 §220.2 dashboard: APCS warning / critical; the norms' CV it flags (kept in the detail, not levelled)
APCS_WARNING, APCS_CRITICAL, NORM_CV_WARNING = 0.3, 0.5, 0.5
#: seed 000 §220.1: isotropy drift alert
APCS_DRIFT = 0.1
#: Evidently defaults: domain-classifier AUC, share of drifted columns for dataset drift
AUC_WARNING, KS_SHARE_CRITICAL = 0.55, 0.5
#: domain-classifier AUC read as critical: acceptable discrimination (Hosmer & Lemeshow 2000, §5.2.4)
AUC_CRITICAL = 0.70
#: power a batch should have to see a warning-level change
POWER = 0.8
#: default row samples of the two-sample tests
MMD_SAMPLE, KS_SAMPLE, CLASSIFIER_SAMPLE, ANOMALY_SAMPLE = 1000, 5000, 1000, 5000
N_PERM = 500
#: relative differences of norms below this are float32 rounding
NORM_ROUNDING = 1e-5

SEED_220_1, SEED_220_2 = "seed 000 §220.1", "seed 000 §220.2 dashboard"
_SIG = "and its test rejects at α/7"

#: signal name -> (label, rule in words)
SIGNALS = {
    "mean_shift": ("Mean shift", f"{TABLE_217_3} mean drift: warning > 1.5×, critical > 2.5× the no-drift level, "
                                 f"{_SIG}"),
    "norm_shift": ("Norm shift", f"{TABLE_217_3} mean drift on the mean norm: warning > 1.5×, critical > 2.5× its "
                                 f"standard error (Welch |t|), {_SIG} (|t| above about 2.7: a significant shift is "
                                 "critical)"),
    "isotropy_drift": ("Isotropy drift (APCS)", f"{SEED_220_1}: warning when |ΔAPCS| > 0.1; {SEED_220_2}: APCS > 0.3 "
                                                f"warning, > 0.5 critical (above the reference's band), {_SIG}"),
    "mmd": ("MMD² (permutation test)", "warning when its test rejects at α/7 (Gretton et al. 2012); no critical "
                                       "level: MMD² has no scale-free threshold"),
    "ks_dimensions": ("Dimensions drifted (KS + BH)", "warning when any dimension rejects (BH at α/7); critical when "
                                                      "> 50 % do (Evidently's drift share)"),
    "domain_classifier": ("Domain-classifier AUC", f"warning when AUC > 0.55 (Evidently), critical > 0.7 (Hosmer & "
                                                   f"Lemeshow 2000), {_SIG}"),
    "anomalous_fraction": ("Anomalous fraction (k-NN)", f"{TABLE_217_3}: warning > 2×, critical > 4× the nominal rate "
                                                        f"of held-out reference rows (5 %, 10 % at 2.5 %), {_SIG}"),
}


@dataclass(frozen=True)
class Signal:
    """One drift signal of a batch: effect, interval, test and alert level.

    ``bands`` holds the edges its level is read against, on the quantity the dashboard plots (``plotted``:
    ``"value"``, ``"ratio"`` or ``"apcs"``): ``warning`` and ``critical`` (above), ``warning_below`` (isotropy),
    ``None`` where the signal has no such level (:func:`band_level`)."""

    name: str
    label: str
    value: float                 # the effect size (see the module table)
    ci_low: float
    ci_high: float
    p_value: float
    test: str
    statistic: float
    rule: str
    level: str = "ok"
    p_adjusted: float = float("nan")
    ratio: float | None = None   # × the no-drift level, where Table 217.3's "× baseline" reads it
    detail: dict = field(default_factory=dict)
    bands: dict = field(default_factory=dict)
    plotted: str = "value"

    @property
    def plotted_value(self) -> float:
        return {"value": self.value, "ratio": self.ratio, "apcs": self.detail.get("apcs")}[self.plotted]

    def to_json(self) -> dict:
        def num(x):
            return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else float(x)

        return {"label": self.label, "value": num(self.value), "ci_low": num(self.ci_low),
                "ci_high": num(self.ci_high), "ratio": num(self.ratio), "p_value": num(self.p_value),
                "p_adjusted": num(self.p_adjusted), "test": self.test, "statistic": num(self.statistic),
                "level": self.level, "rule": self.rule, "plotted": self.plotted,
                "detail": {k: (num(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                           for k, v in {**self.detail, **{f"{k}_edge": v for k, v in self.bands.items()}}.items()}}


@dataclass(frozen=True)
class BatchScore:
    """A scored batch: its signals, the worst level, sizes, timing and power."""

    signals: dict                 # name -> Signal
    level: str
    n: int
    d: int
    seconds: float
    alpha: float
    info: dict

    def to_json(self) -> dict:
        return {"level": self.level, "verdict": VERDICT[self.level], "n": self.n, "d": self.d, "alpha": self.alpha,
                "seconds": round(self.seconds, 3), "signals": {k: s.to_json() for k, s in self.signals.items()},
                **self.info}


def worst_level(levels) -> str:
    return max(levels, key=LEVELS.index, default="ok")


def per_signal_alpha(alpha: float = ALPHA) -> float:
    """The level each signal's test is read at: α over the seven signals (Bonferroni)."""
    return alpha / len(SIGNALS)


def band_level(value, bands: dict) -> str:
    """The level of a plotted ``value`` against its ``bands`` (``warning``, ``critical``: above; ``warning_below``:
    below; a missing or None edge never fires). The one rule the table's levels and the dashboard's bands share."""
    if value is None or not math.isfinite(value):
        return "ok"
    crit, warn, below = bands.get("critical"), bands.get("warning"), bands.get("warning_below")
    if crit is not None and value > crit:
        return "critical"
    if (warn is not None and value > warn) or (below is not None and value < below):
        return "warning"
    return "ok"


def edges_text(bands: dict) -> str:
    """A signal's bands in words, as the table of ``monitor`` and the chapter print them: ``> 1.5 / > 2.5``
    (warning / critical), ``> 0.1 or < -0.05 / none``, ``p ≤ 0.0071 / none`` (a signal judged on its test)."""
    def edge(v):
        return f"> {_num(v, '.3g')}" if v is not None else "none"
    if "warning_p" in bands:
        return f"p ≤ {_num(bands['warning_p'], '.2g')} / none"
    if not bands:
        return "—"
    warning = edge(bands.get("warning")) + (f" or < {_num(bands['warning_below'], '.3g')}"
                                           if bands.get("warning_below") is not None else "")
    return f"{warning} / {edge(bands.get('critical'))}"


def reads_text(bands: dict, plotted, p_value) -> str:
    """What a signal's level reads, in the units of its bands: the plotted value (a ratio, |t|, APCS, AUC, share),
    or, for a signal judged on its test alone (MMD², bands ``p ≤ …``), its raw p-value: ``p 0.43``."""
    return f"p {_num(p_value, '.2g')}" if "warning_p" in bands else _num(plotted, ".3g")


def _num(x, spec: str) -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def stored_bands(detail: dict) -> dict:
    """The bands a history record's signal stored (``detail["<edge>_edge"]``), for the dashboard."""
    return {k[:-5]: v for k, v in (detail or {}).items() if k.endswith("_edge") and v is not None}


def _sample(Y: np.ndarray, size: int, rng) -> np.ndarray:
    return Y if len(Y) <= size else Y[np.sort(rng.choice(len(Y), size, replace=False))]


def _edges(warning, critical, significant) -> dict:
    """Each edge raised to where the test becomes significant (``None`` stays: no such level)."""
    return {"warning": None if warning is None else max(warning, significant),
            "critical": None if critical is None else max(critical, significant)}


def check_batch(profile: Profile, Y, label: str = "batch") -> np.ndarray:
    """The batch as float32 (n, d), or one clear :class:`InputError`: wrong dimension, NaN/inf, empty."""
    Y = as_numpy(Y)
    if Y.ndim != 2:
        raise InputError(f"{label}: expected a 2-D array (vectors x dimensions), found shape {Y.shape}")
    if len(Y) < 2:
        raise InputError(f"{label}: {'an empty batch (0 rows)' if len(Y) == 0 else 'only 1 vector'}; expected at "
                         "least 2 vectors")
    if Y.shape[1] != profile.d:
        raise InputError(f"{label}: vectors of dimension {Y.shape[1]}; the profile ({profile.name or 'reference'}) "
                         f"has dimension {profile.d}")
    Y = np.ascontiguousarray(Y, dtype=np.float32)
    bad = ~np.isfinite(Y).all(axis=1)
    if bad.any():
        r = int(np.argmax(bad))
        c = int(np.flatnonzero(~np.isfinite(Y[r]))[0])
        raise InputError(f"{label}, row {r + 1}, column {c + 1}: {Y[r, c]}; expected finite numbers")
    zero = ~Y.any(axis=1)
    if zero.any():
        raise InputError(f"{label}, row {int(np.argmax(zero)) + 1}: zero vector; expected a direction")
    return Y


def _batch_moments(Y: np.ndarray, mean_unit: np.ndarray, dev) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean (float64), row norms and projections of the unit rows on the reference's mean unit vector."""
    n = len(Y)
    s = torch.zeros(Y.shape[1], dtype=torch.float64, device=dev)
    su = torch.zeros_like(s)
    norms, proj = np.empty(n), np.empty(n)
    mu = torch.as_tensor(mean_unit, device=dev, dtype=torch.float64)
    step = 65536
    for start in range(0, n, step):
        x = torch.as_tensor(Y[start:start + step], device=dev)
        s += x.sum(0, dtype=torch.float64)
        nr = x.double().norm(dim=1)
        u = x.double() / nr[:, None]
        su += u.sum(0)
        norms[start:start + len(x)] = nr.cpu().numpy()
        proj[start:start + len(x)] = (u @ mu).cpu().numpy()
    return (s / n).cpu().numpy(), norms, proj, su.cpu().numpy()


def _mean_shift(p: Profile, mean_b: np.ndarray, n_b: int, level: float, a_sig: float) -> Signal:
    from scipy import stats

    delta = mean_b - p.mean
    T = float(delta @ delta)
    c = 1.0 / n_b + 1.0 / p.n
    null_mean = c * p.trace
    a, nu = c * p.trace_sq / p.trace, p.trace ** 2 / p.trace_sq   # T ~ a chi2_nu under no shift
    pval = float(stats.chi2.sf(T / a, nu))
    theta = T - null_mean                                          # unbiased for ||delta||^2
    se = math.sqrt(2 * c * c * p.trace_sq + 4 * c * max(float(delta @ p.covariance @ delta), 0.0))
    lo, hi = normal_ci(theta, se, level)
    scale = math.sqrt(p.trace)
    value = math.sqrt(T) / scale
    ratio = math.sqrt(T / null_mean)
    significant = math.sqrt(a * float(stats.chi2.isf(a_sig, nu)) / null_mean)  # the ratio at which p = α/7
    return Signal("mean_shift", SIGNALS["mean_shift"][0], value, math.sqrt(max(lo, 0.0)) / scale,
                  math.sqrt(max(hi, 0.0)) / scale, pval, "scaled chi-squared (Bai–Saranadasa statistic, "
                  "Satterthwaite degrees of freedom), one-sided", T / a, SIGNALS["mean_shift"][1], ratio=ratio,
                  detail={"no_drift_level": math.sqrt(null_mean) / scale, "dof": nu},
                  bands=_edges(MEAN_DRIFT_WARNING, MEAN_DRIFT_CRITICAL, significant), plotted="ratio")


def _welch(x: np.ndarray, y: np.ndarray, floor: float) -> np.ndarray:
    """Welch's t of mean(x) − mean(y) along the last axis (``floor``: a rounding-level standard error)."""
    nx, ny = x.shape[-1], y.shape[-1]
    se = np.sqrt(x.var(-1, ddof=1) / nx + y.var(-1, ddof=1) / ny + floor * floor)
    return (x.mean(-1) - y.mean(-1)) / se


def _norm_shift(p: Profile, norms: np.ndarray, batch_norms: np.ndarray, ref_norms: np.ndarray, level: float,
                a_sig: float, n_perm: int, rng) -> Signal:
    r"""The mean-norm change (``norms``: every batch row) and a studentized permutation test of it on the sampled
    batch rows' norms (``batch_norms``) against the profile's sample (``ref_norms``): Welch's t, its p-value
    :math:`(1 + \#\{b : |t_b| \ge |t|\})/(1 + B)` over ``n_perm`` relabellings (exact under no drift whatever the
    norms' tails; Janssen 1997), and the |t| beyond which it rejects at ``a_sig`` (the critical edge)."""
    m, s = float(norms.mean()), float(norms.std(ddof=1))
    floor = NORM_ROUNDING * p.norm_mean  # norms agreeing to float32 rounding are equal
    se = math.sqrt(s * s / len(norms) + p.norm_sd ** 2 / p.n + floor * floor)
    lo, hi = normal_ci(m - p.norm_mean, se, level)
    x, y = np.asarray(batch_norms, float), np.asarray(ref_norms, float)
    t = float(_welch(x, y, floor))
    pooled, nx = np.concatenate([x, y]), len(x)
    null = np.empty(n_perm)
    for start in range(0, n_perm, 64):
        perm = rng.permuted(np.broadcast_to(pooled, (min(64, n_perm - start), len(pooled))), axis=1)
        null[start:start + len(perm)] = np.abs(_welch(perm[:, :nx], perm[:, nx:], floor))
    pval = (1 + int((null >= abs(t) - 1e-12).sum())) / (1 + n_perm)
    allowed = math.floor(a_sig * (1 + n_perm)) - 1  # exceedances a significant |t| may have
    edge = float(np.sort(null)[::-1][allowed]) if allowed >= 0 else math.inf
    return Signal("norm_shift", SIGNALS["norm_shift"][0], (m - p.norm_mean) / p.norm_mean, lo / p.norm_mean,
                  hi / p.norm_mean, pval, f"studentized permutation test of the mean norm (Welch t, {n_perm} "
                  "relabellings), two-sided", t, SIGNALS["norm_shift"][1], ratio=abs(t),
                  detail={"mean_norm": m, "reference_mean_norm": p.norm_mean, "norm_cv": s / m if m > 0 else math.nan,
                          "reference_norm_cv": p.norm_cv, "rows": f"{len(x)} + {len(y)}"},
                  bands=_edges(MEAN_DRIFT_WARNING, MEAN_DRIFT_CRITICAL, edge), plotted="ratio")


def _apcs_band(a: float) -> str:
    return band_level(a, {"warning": APCS_WARNING, "critical": APCS_CRITICAL})


def _isotropy(p: Profile, su: np.ndarray, proj: np.ndarray, level: float, a_sig: float) -> Signal:
    from scipy import stats

    n_b = len(proj)
    apcs = float((su @ su - n_b) / (n_b * (n_b - 1)))
    var = (4 * float(proj.var(ddof=1)) / n_b + 2 * p.apcs_zeta2 / (n_b * (n_b - 1))
           + 4 * p.apcs_zeta1 / p.n + 2 * p.apcs_zeta2 / (p.n * (p.n - 1)))
    delta = apcs - p.apcs
    se = math.sqrt(var)
    z = delta / se if se > 0 else 0.0
    lo, hi = normal_ci(delta, se, level)
    # on the batch's APCS: |ΔAPCS| > 0.1 either way, or a §220.2 band above the reference's, each once significant
    sig = float(stats.norm.isf(a_sig / 2)) * se
    ref_band = _apcs_band(p.apcs)
    warning = p.apcs + max(APCS_DRIFT, sig)
    if ref_band == "ok":
        warning = min(warning, max(APCS_WARNING, p.apcs + sig))
    critical = max(APCS_CRITICAL, p.apcs + sig) if ref_band != "critical" else None
    return Signal("isotropy_drift", SIGNALS["isotropy_drift"][0], delta, lo, hi, float(2 * stats.norm.sf(abs(z))),
                  "z-test of the APCS difference (U-statistic variance, Hoeffding 1948), two-sided", z,
                  SIGNALS["isotropy_drift"][1], detail={"apcs": apcs, "reference_apcs": p.apcs},
                  bands={"warning": warning, "critical": critical, "warning_below": p.apcs - max(APCS_DRIFT, sig)},
                  plotted="apcs")


def anomaly_bands(n: int, profile: Profile, a_sig: float) -> dict:
    """The anomalous fraction's edges for a batch of ``n`` rows: warning above 2q, critical above 4q (q the profile's
    nominal rate), each at least the largest fraction the exceedance test does not reject at ``a_sig``
    (BetaBin(n, m − k + 1, k), :mod:`.profile`), so both alert only when significant; 1 (never) when no count of
    ``n`` rows can be significant."""
    from scipy import stats

    a, b = profile.exceedance
    q = profile.nominal_rate
    x = int(stats.betabinom.isf(a_sig, n, a, b))  # P(X > x) <= a_sig: counts above x are significant
    while x > 0 and stats.betabinom.sf(x - 1, n, a, b) <= a_sig:
        x -= 1
    quiet = min(x / n, 1.0)  # the largest fraction that is not significant
    return {"warning": max(ANOMALY_WARNING_RATIO * q, quiet), "critical": max(ANOMALY_CRITICAL_RATIO * q, quiet)}


def batch_power(n_anomaly: int, n_classifier: tuple[int, int], profile: Profile, a_sig: float) -> dict:
    """Whether the batch is large enough to see a warning-level change: per signal, the change, the power to detect
    it at ``a_sig`` and the rows needed for power :data:`POWER`.

    * anomalous fraction: a doubled rate 2q against q, one-sample test of a proportion (statsmodels
      ``NormalIndPower`` with ``ratio=0``, Cohen's arcsine effect size h);
    * domain classifier: AUC 0.55 against 0.5, with the Mann–Whitney null variance
      :math:`(n_r + n_b + 1)/(12\\,n_r n_b)` (Hanley & McNeil 1982).
    """
    from scipy import stats
    from statsmodels.stats.power import NormalIndPower
    from statsmodels.stats.proportion import proportion_effectsize

    q = profile.nominal_rate
    h = float(proportion_effectsize(ANOMALY_WARNING_RATIO * q, q))
    npow = NormalIndPower()
    p_anom = float(npow.power(h, nobs1=n_anomaly, alpha=a_sig, ratio=0, alternative="larger"))
    need_anom = math.ceil(float(npow.solve_power(h, alpha=a_sig, power=POWER, ratio=0, alternative="larger")))
    n_r, n_b = n_classifier
    z, zb = float(stats.norm.isf(a_sig)), float(stats.norm.isf(1 - POWER))
    se0 = math.sqrt((n_r + n_b + 1) / (12 * n_r * n_b))
    p_auc = float(stats.norm.sf(z - (AUC_WARNING - 0.5) / se0))
    target = ((AUC_WARNING - 0.5) / (z + zb)) ** 2  # the null variance the AUC test needs
    denom = 12 * n_r * target - 1
    need_auc = math.ceil((n_r + 1) / denom) if denom > 0 else None
    return {"anomalous_fraction": {"change": f"the rate doubled to {100 * ANOMALY_WARNING_RATIO * q:.3g} %",
                                   "power": p_anom, "rows_needed": need_anom},
            "domain_classifier": {"change": f"AUC {AUC_WARNING}", "power": p_auc, "rows_needed": need_auc}}


def score_batch(profile: Profile, Y, *, seed: int = 0, alpha: float = ALPHA, level: float = 0.95,
                n_perm: int = N_PERM, mmd_sample: int = MMD_SAMPLE, ks_sample: int = KS_SAMPLE,
                classifier_sample: int = CLASSIFIER_SAMPLE, anomaly_sample: int = ANOMALY_SAMPLE,
                label: str = "batch", device="auto") -> BatchScore:
    """Score the batch ``Y`` against ``profile``: the seven signals of the module docstring, each with its bands
    and alert level, the batch's worst level and its power. Deterministic for a given ``seed``."""
    from scipy import stats
    from statsmodels.stats.multitest import multipletests

    t0 = time.perf_counter()
    Y = check_batch(profile, Y, label)
    n_b = len(Y)
    a_sig = per_signal_alpha(alpha)
    if 1 / (1 + n_perm) > a_sig:
        raise ValueError(f"n_perm = {n_perm}: the permutation tests need at least {math.ceil(1 / a_sig) - 1} "
                         f"relabellings to reach α/7 = {a_sig:.3g}")
    dev = resolve_device(device)
    mean_b, norms, proj, su = _batch_moments(Y, profile.mean_unit, dev)
    ref = profile.sample
    ref_norms = np.linalg.norm(ref.astype(np.float64), axis=1)
    rng = np.random.default_rng([seed, 82, 1])
    sig = [_mean_shift(profile, mean_b, n_b, level, a_sig),
           _norm_shift(profile, norms, _sample(norms, ks_sample, np.random.default_rng([seed, 82, 2])), ref_norms,
                       level, a_sig, n_perm, np.random.default_rng([seed, 82, 3])),
           _isotropy(profile, su, proj, level, a_sig)]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        mmd = mmd_test(_sample(ref, mmd_sample, rng), _sample(Y, mmd_sample, rng), n_perm=n_perm, alpha=alpha,
                       level=level, seed=seed, device=dev)
    sig.append(Signal("mmd", SIGNALS["mmd"][0], mmd.mmd2, mmd.ci_low, mmd.ci_high, mmd.p_value,
                      f"permutation ({n_perm} relabellings), one-sided", mmd.mmd2, SIGNALS["mmd"][1],
                      detail={"bandwidth": mmd.bandwidth, "rows": f"{mmd.n_x} + {mmd.n_y}"},
                      bands={"warning_p": a_sig}))  # no scale on MMD² to draw: warning when the test rejects

    Xk, Yk = _sample(ref, ks_sample, rng), _sample(Y, ks_sample, rng)
    ks = ks_dimensions(Xk, Yk, alpha=a_sig)
    share = ks.rejected_fraction
    lo, hi = wilson_ci(int(ks.rejected.sum()), len(ks.rejected), level)
    top = np.argsort(-ks.statistics)[:5]
    sig.append(Signal("ks_dimensions", SIGNALS["ks_dimensions"][0], share, lo, hi, float(ks.p_adjusted.min()),
                      "two-sample KS per dimension, Benjamini–Hochberg at α/7; the family's p is the smallest adjusted "
                      "p (Simes)", float(ks.statistics.max()), SIGNALS["ks_dimensions"][1],
                      detail={"max_ks_statistic": float(ks.statistics.max()),
                              "top_dimensions": [int(j) for j in top], "rows": f"{len(Xk)} + {len(Yk)}"},
                      bands={"warning": 0.0, "critical": KS_SHARE_CRITICAL}))

    Xc, Yc = _sample(ref, classifier_sample, rng), _sample(Y, classifier_sample, rng)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # a small L-BFGS fit: BLAS threads only contend (20x slower on a busy machine)
        dc = domain_classifier_auc(Xc, Yc, seed=seed, level=level)
    se0 = math.sqrt((dc.n_x + dc.n_y + 1) / (12 * dc.n_x * dc.n_y))
    z = (dc.auc - 0.5) / se0
    sig.append(Signal("domain_classifier", SIGNALS["domain_classifier"][0], dc.auc, dc.ci_low, dc.ci_high,
                      float(stats.norm.sf(z)), "AUC > 0.5, one-sided, Mann–Whitney null variance", z,
                      SIGNALS["domain_classifier"][1], detail={"rows": f"{dc.n_x} + {dc.n_y}", "folds": dc.folds},
                      bands=_edges(AUC_WARNING, AUC_CRITICAL, 0.5 + float(stats.norm.isf(a_sig)) * se0)))

    Ya = _sample(Y, anomaly_sample, rng)
    scores = knn_scores(profile.index, Ya, profile.k, device=dev)
    hits = int((scores > profile.anomaly_threshold).sum())
    frac = hits / len(Ya)
    ea, eb = profile.exceedance
    lo, hi = wilson_ci(hits, len(Ya), level)
    sig.append(Signal("anomalous_fraction", SIGNALS["anomalous_fraction"][0], frac, lo, hi,
                      float(stats.betabinom.sf(hits - 1, len(Ya), ea, eb)),
                      "exceedances of the held-out rows' quantile, beta-binomial (Gumbel & von Schelling 1950), "
                      "one-sided", float(hits), SIGNALS["anomalous_fraction"][1],
                      detail={"reference_fraction": profile.nominal_rate, "rows": len(Ya),
                              "threshold": profile.anomaly_threshold, "mean_knn_distance": float(scores.mean()),
                              "reference_mean_knn_distance": float(profile.calibration_scores.mean())},
                      bands=anomaly_bands(len(Ya), profile, a_sig)))

    p_adj = multipletests([s.p_value for s in sig], alpha=alpha, method="bonferroni")[1]
    out = {s.name: _with_level(s, float(pa)) for s, pa in zip(sig, p_adj)}
    power = batch_power(len(Ya), (dc.n_x, dc.n_y), profile, a_sig)
    info = {"profile": profile.name, "seed": seed, "samples": dict(mmd=mmd_sample, ks=ks_sample,
                                                                   classifier=classifier_sample,
                                                                   anomaly=anomaly_sample), "n_perm": n_perm,
            "per_signal_alpha": a_sig, "power": power,
            "underpowered": [k for k, v in power.items() if v["power"] < POWER]}
    return BatchScore(out, worst_level(s.level for s in out.values()), n_b, Y.shape[1],
                      time.perf_counter() - t0, alpha, info)


def signal_level(value, p_value, bands: dict) -> str:
    """A signal's level: :func:`band_level` of its plotted value, or, for a signal without a scale to draw
    (``bands["warning_p"]``: MMD²), warning when its p-value is at most that."""
    if "warning_p" in bands:
        return "warning" if p_value is not None and math.isfinite(p_value) and p_value <= bands["warning_p"] else "ok"
    return band_level(value, bands)


def _with_level(s: Signal, p_adj: float) -> Signal:
    """The signal with its Bonferroni-adjusted p-value and its level (:func:`signal_level`; its bands include where
    its test rejects at α/7)."""
    from dataclasses import replace

    return replace(s, p_adjusted=p_adj, level=signal_level(s.plotted_value, s.p_value, s.bands))


# ---------------------------------------------------------------------------------------------
# The signals as report metrics (the monitoring chapter records the latest batch's)
# ---------------------------------------------------------------------------------------------

def _specs():
    from ..metrics.spec import MetricSpec, specs

    return specs(
        MetricSpec("mean_shift", "Mean shift / reference spread", "lower",
                   r"\lVert \bar y - \mu \rVert / \sqrt{\mathrm{tr}\,\Sigma}",
                   f"{SEED_220_1} (mean_shift, relative); test: Bai & Saranadasa 1996", range=(0.0, math.inf)),
        MetricSpec("mean_shift_ratio", "Mean shift, × no-drift level", "lower",
                   r"\lVert \bar y - \mu \rVert / \sqrt{\mathrm{tr}\,\Sigma\,(1/n_b + 1/n_r)}",
                   f"{TABLE_217_3} mean drift (× baseline)", range=(0.0, math.inf)),
        MetricSpec("norm_shift", "Mean norm change (relative)", "lower",
                   r"(\overline{\lVert y \rVert} - \overline{\lVert x \rVert}) / \overline{\lVert x \rVert}",
                   f"{SEED_220_2} (mean_norm); test: two-sample KS on the norms"),
        MetricSpec("isotropy_drift_apcs", "APCS change", "lower", r"\mathrm{APCS}_b - \mathrm{APCS}_r",
                   f"{SEED_220_1} (isotropy_drift, signed)", range=(-2.0, 2.0)),
        MetricSpec("mmd", "MMD² (unbiased, Gaussian kernel)", "lower",
                   r"\widehat{\mathrm{MMD}}^2_u,\ \sigma = \text{median distance}",
                   "Gretton et al. 2012; seed 000 §220.1 (biased variant)"),
        MetricSpec("ks_rejected_fraction", "Dimensions with a changed distribution (KS + BH)", "lower",
                   r"\frac1d\#\{j : p^{\mathrm{BH}}_j < \alpha\}",
                   f"{SEED_220_1} (KS per dimension); Benjamini & Hochberg 1995", range=(0.0, 1.0)),
        MetricSpec("domain_classifier_auc", "Domain-classifier AUC", "lower",
                   r"\mathrm{AUC}(\text{reference vs batch; 5-fold CV logistic regression})",
                   "domain classifier (Evidently, deepchecks); 0.5 = no drift", range=(0.0, 1.0), chance=0.5),
        MetricSpec("anomalous_fraction", "Anomalous fraction (k-NN distance)", "lower",
                   r"\frac1{n_b}\sum_i \mathbf 1[d_k(y_i) > \mu_{d} + 2\sigma_{d}]",
                   f"{TABLE_217_3}; seed 000 §217.2.3.2 (k = 2); Ramaswamy et al. 2000", range=(0.0, 1.0)),
        MetricSpec("batches", "Batches in the history", None, "", "monitor --history"),
        MetricSpec("batches_alerting", "Batches at warning or above", "lower", "", "monitor --history"),
        MetricSpec("batches_critical", "Batches at critical", "lower", "", "monitor --history"),
    )


#: signal -> the metric name its value is recorded under (the mean shift also records its ratio)
SIGNAL_METRIC = {"mean_shift": "mean_shift", "norm_shift": "norm_shift", "isotropy_drift": "isotropy_drift_apcs",
                 "mmd": "mmd", "ks_dimensions": "ks_rejected_fraction", "domain_classifier": "domain_classifier_auc",
                 "anomalous_fraction": "anomalous_fraction"}
SPECS = _specs()


def history_record(score: BatchScore, *, batch: str, timestamp: str, file: str = "") -> dict:
    """The JSON object of one history line."""
    return {"format": HISTORY_FORMAT, "version": HISTORY_VERSION, "batch": batch, "timestamp": timestamp,
            "file": file, **score.to_json()}
