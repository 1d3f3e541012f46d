r"""Scoring one batch of new vectors against a reference :class:`~.profile.Profile` (seed 000 §220).

Seven signals, each an effect size with a test of "the batch comes from the reference distribution":

=====================  ==========================================================  ===============================
signal                 effect (what is plotted)                                    test (p-value)
=====================  ==========================================================  ===============================
``mean_shift``         :math:`\lVert\bar y - \mu\rVert / \sqrt{\mathrm{tr}\,\Sigma}`;  scaled χ² (Bai & Saranadasa 1996
                       its ratio to the no-drift level                             statistic, Satterthwaite 1946)
``norm_shift``         relative change of the mean row norm; the Welch z ratio      two-sample KS on the norms
``isotropy_drift``     APCS of the batch minus the reference's                      z-test, U-statistic variance
``mmd``                unbiased MMD², Gaussian kernel (median heuristic)            permutation (Gretton et al. 2012)
``ks_dimensions``      share of dimensions whose KS test rejects after BH          Simes (the smallest BH p)
``domain_classifier``  cross-validated AUC of baseline-vs-batch logistic regression  one-sided, Mann–Whitney null
``anomalous_fraction`` share of batch rows whose k-NN distance to the reference     Fisher exact, one-sided, against
                       exceeds :math:`\mu + 2\sigma` of held-out reference rows     the held-out rows' share
=====================  ==========================================================  ===============================

**Alert levels** (``ok`` < ``warning`` < ``critical``). A signal alerts only when its test rejects after
Holm's correction over the batch's seven tests at ``alpha`` (0.05), so a batch drawn from the reference
distribution raises *any* alert with probability at most ``alpha`` (up to the large-sample
approximations of the mean-shift and APCS tests); the effect size then sets the level:

* mean shift and norm shift, Table 217.3's mean-drift row: warning above 1.5×, critical above 2.5× the
  baseline, the baseline being the shift sampling alone produces at this batch size
  (:math:`\sqrt{\mathrm{tr}\,\Sigma\,(1/n_b + 1/n_r)}`, and the norm's standard error);
* norm spread, the §220.2 dashboard: warning when the norms' coefficient of variation exceeds 0.5 (and the
  reference's does not);
* isotropy, §220.1 (warning when :math:`|\Delta\mathrm{APCS}| > 0.1`) and the §220.2 dashboard (APCS above 0.3
  warning, above 0.5 critical, when the reference sits in a lower band: a model whose reference already
  is anisotropic would otherwise alert on every batch);
* anomalous fraction, Table 217.3: warning above 5 %, critical above 10 %;
* domain classifier: warning above AUC 0.55 (Evidently's default);
* per-dimension KS: warning when any dimension rejects, critical when more than half do (Evidently's
  dataset-drift share);
* MMD: warning (the seed's ``mmd > 0.1`` rule is on its own biased estimator and kernel scale).

Table 217.3's pairwise correlation and Procrustes distance, and the §220.2 dashboard's Procrustes
"drift from baseline", compare *the same entities* at two times; a batch of new rows has no such
pairing, so they are the drift chapter's (``snapshots``), not this one's.

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
from ..kernels import as_numpy, resolve_device
from ..metrics.thresholds import TABLE_217_3
from ..metrics.two_sample import domain_classifier_auc, ks_dimensions, mmd_test
from ..stats import adjust_pvalues, normal_ci, wilson_ci
from .profile import Profile, knn_scores

#: alert levels, least to most severe, and the report verdict each one reads as
LEVELS = ("ok", "warning", "critical")
VERDICT = {"ok": "healthy", "warning": "concerning", "critical": "problematic"}
ALPHA = 0.05
#: Table 217.3 mean-drift row (× baseline) and anomalous-fraction row
MEAN_DRIFT_WARNING, MEAN_DRIFT_CRITICAL = 1.5, 2.5
ANOMALY_WARNING, ANOMALY_CRITICAL = 0.05, 0.10
#: seed 000 §220.2 dashboard: APCS warning / critical, norm coefficient of variation warning
APCS_WARNING, APCS_CRITICAL, NORM_CV_WARNING = 0.3, 0.5, 0.5
#: seed 000 §220.1: isotropy drift alert
APCS_DRIFT = 0.1
#: Evidently defaults: domain-classifier AUC, share of drifted columns for dataset drift
AUC_WARNING, KS_SHARE_CRITICAL = 0.55, 0.5
#: default row samples of the two-sample tests
MMD_SAMPLE, KS_SAMPLE, CLASSIFIER_SAMPLE, ANOMALY_SAMPLE = 1000, 5000, 1000, 5000
N_PERM = 500
#: relative differences of norms below this are float32 rounding
NORM_ROUNDING = 1e-5

SEED_220_1, SEED_220_2 = "seed 000 §220.1", "seed 000 §220.2 dashboard"

#: signal name -> (label, rule in words)
SIGNALS = {
    "mean_shift": ("Mean shift", f"{TABLE_217_3} mean drift: warning > 1.5×, critical > 2.5× the no-drift level"),
    "norm_shift": ("Norm shift", f"{TABLE_217_3} mean drift on the mean norm (warning > 1.5×, critical > 2.5× its "
                                 f"standard error); {SEED_220_2}: warning when the norms' CV > 0.5"),
    "isotropy_drift": ("Isotropy drift (APCS)", f"{SEED_220_1}: warning when |ΔAPCS| > 0.1; {SEED_220_2}: APCS > 0.3 "
                                                "warning, > 0.5 critical"),
    "mmd": ("MMD² (permutation test)", "warning when significant (Gretton et al. 2012)"),
    "ks_dimensions": ("Dimensions drifted (KS + BH)", "warning when any dimension rejects; critical when > 50 % do "
                                                      "(Evidently's drift share)"),
    "domain_classifier": ("Domain-classifier AUC", "warning when AUC > 0.55 (Evidently)"),
    "anomalous_fraction": ("Anomalous fraction (k-NN)", f"{TABLE_217_3}: warning > 5 %, critical > 10 %"),
}


@dataclass(frozen=True)
class Signal:
    """One drift signal of a batch: effect, interval, test and alert level."""

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

    def to_json(self) -> dict:
        def num(x):
            return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else float(x)

        return {"label": self.label, "value": num(self.value), "ci_low": num(self.ci_low),
                "ci_high": num(self.ci_high), "ratio": num(self.ratio), "p_value": num(self.p_value),
                "p_adjusted": num(self.p_adjusted), "test": self.test, "statistic": num(self.statistic),
                "level": self.level, "rule": self.rule,
                "detail": {k: (num(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                           for k, v in self.detail.items()}}


@dataclass(frozen=True)
class BatchScore:
    """A scored batch: its signals, the worst level, sizes and timing."""

    signals: dict                 # name -> Signal
    level: str
    n: int
    d: int
    seconds: float
    alpha: float
    info: dict

    def to_json(self) -> dict:
        return {"level": self.level, "n": self.n, "d": self.d, "alpha": self.alpha,
                "seconds": round(self.seconds, 3), "signals": {k: s.to_json() for k, s in self.signals.items()},
                **self.info}


def worst_level(levels) -> str:
    return max(levels, key=LEVELS.index, default="ok")


def _sample(Y: np.ndarray, size: int, rng) -> np.ndarray:
    return Y if len(Y) <= size else Y[np.sort(rng.choice(len(Y), size, replace=False))]


def _band(value: float, warning: float, critical: float) -> str:
    return "critical" if value > critical else "warning" if value > warning else "ok"


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


def _mean_shift(p: Profile, mean_b: np.ndarray, n_b: int, level: float) -> Signal:
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
    return Signal("mean_shift", SIGNALS["mean_shift"][0], value, math.sqrt(max(lo, 0.0)) / scale,
                  math.sqrt(max(hi, 0.0)) / scale, pval, "scaled chi-squared (Bai–Saranadasa statistic, "
                  "Satterthwaite degrees of freedom), one-sided", T / a, SIGNALS["mean_shift"][1], ratio=ratio,
                  detail={"no_drift_level": math.sqrt(null_mean) / scale, "dof": nu})


def _norm_shift(p: Profile, norms: np.ndarray, ref_norms: np.ndarray, level: float) -> Signal:
    from scipy import stats

    n_b = len(norms)
    m, s = float(norms.mean()), float(norms.std(ddof=1))
    # norms agreeing to float32 rounding are equal (unit vectors stored in float32 differ in the 7th digit)
    floor = NORM_ROUNDING * p.norm_mean
    se = math.sqrt(s * s / n_b + p.norm_sd ** 2 / p.n + floor * floor)
    z = (m - p.norm_mean) / se
    lo, hi = normal_ci(m - p.norm_mean, se, level)
    ks = stats.ks_2samp(np.round(norms / floor), np.round(ref_norms / floor))
    cv = s / m if m > 0 else float("nan")
    return Signal("norm_shift", SIGNALS["norm_shift"][0], (m - p.norm_mean) / p.norm_mean, lo / p.norm_mean,
                  hi / p.norm_mean, float(ks.pvalue), "two-sample Kolmogorov–Smirnov on the row norms, two-sided",
                  float(ks.statistic), SIGNALS["norm_shift"][1], ratio=abs(z),
                  detail={"mean_norm": m, "reference_mean_norm": p.norm_mean, "norm_cv": cv,
                          "reference_norm_cv": p.norm_cv})


def _isotropy(p: Profile, su: np.ndarray, proj: np.ndarray, level: float) -> Signal:
    from scipy import stats

    n_b = len(proj)
    apcs = float((su @ su - n_b) / (n_b * (n_b - 1)))
    var = (4 * float(proj.var(ddof=1)) / n_b + 2 * p.apcs_zeta2 / (n_b * (n_b - 1))
           + 4 * p.apcs_zeta1 / p.n + 2 * p.apcs_zeta2 / (p.n * (p.n - 1)))
    delta = apcs - p.apcs
    se = math.sqrt(var)
    z = delta / se if se > 0 else 0.0
    lo, hi = normal_ci(delta, se, level)
    return Signal("isotropy_drift", SIGNALS["isotropy_drift"][0], delta, lo, hi, float(2 * stats.norm.sf(abs(z))),
                  "z-test of the APCS difference (U-statistic variance, Hoeffding 1948), two-sided", z,
                  SIGNALS["isotropy_drift"][1], detail={"apcs": apcs, "reference_apcs": p.apcs})


def score_batch(profile: Profile, Y, *, seed: int = 0, alpha: float = ALPHA, level: float = 0.95,
                n_perm: int = N_PERM, mmd_sample: int = MMD_SAMPLE, ks_sample: int = KS_SAMPLE,
                classifier_sample: int = CLASSIFIER_SAMPLE, anomaly_sample: int = ANOMALY_SAMPLE,
                label: str = "batch", device="auto") -> BatchScore:
    """Score the batch ``Y`` against ``profile``: the seven signals of the module docstring, Holm-corrected,
    each with its alert level, and the batch's worst level. Deterministic for a given ``seed``."""
    from scipy import stats

    t0 = time.perf_counter()
    Y = check_batch(profile, Y, label)
    n_b = len(Y)
    dev = resolve_device(device)
    mean_b, norms, proj, su = _batch_moments(Y, profile.mean_unit, dev)
    ref = profile.sample
    ref_norms = np.linalg.norm(ref.astype(np.float64), axis=1)
    sig = [_mean_shift(profile, mean_b, n_b, level), _norm_shift(profile, norms, ref_norms, level),
           _isotropy(profile, su, proj, level)]

    rng = np.random.default_rng([seed, 82, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        mmd = mmd_test(_sample(ref, mmd_sample, rng), _sample(Y, mmd_sample, rng), n_perm=n_perm, alpha=alpha,
                       level=level, seed=seed, device=dev)
    sig.append(Signal("mmd", SIGNALS["mmd"][0], mmd.mmd2, mmd.ci_low, mmd.ci_high, mmd.p_value,
                      f"permutation ({n_perm} relabellings), one-sided", mmd.mmd2, SIGNALS["mmd"][1],
                      detail={"bandwidth": mmd.bandwidth, "rows": f"{mmd.n_x} + {mmd.n_y}"}))

    Xk, Yk = _sample(ref, ks_sample, rng), _sample(Y, ks_sample, rng)
    ks = ks_dimensions(Xk, Yk, alpha=alpha)
    share = ks.rejected_fraction
    lo, hi = wilson_ci(int(ks.rejected.sum()), len(ks.rejected), level)
    top = np.argsort(-ks.statistics)[:5]
    sig.append(Signal("ks_dimensions", SIGNALS["ks_dimensions"][0], share, lo, hi, float(ks.p_adjusted.min()),
                      "two-sample KS per dimension, Benjamini–Hochberg; the family's p is the smallest adjusted p "
                      "(Simes)", float(ks.statistics.max()), SIGNALS["ks_dimensions"][1],
                      detail={"max_ks_statistic": float(ks.statistics.max()),
                              "top_dimensions": [int(j) for j in top], "rows": f"{len(Xk)} + {len(Yk)}"}))

    Xc, Yc = _sample(ref, classifier_sample, rng), _sample(Y, classifier_sample, rng)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # a small L-BFGS fit: BLAS threads only contend (20x slower on a busy machine)
        dc = domain_classifier_auc(Xc, Yc, seed=seed, level=level)
    se0 = math.sqrt((dc.n_x + dc.n_y + 1) / (12 * dc.n_x * dc.n_y))
    z = (dc.auc - 0.5) / se0
    sig.append(Signal("domain_classifier", SIGNALS["domain_classifier"][0], dc.auc, dc.ci_low, dc.ci_high,
                      float(stats.norm.sf(z)), "AUC > 0.5, one-sided, Mann–Whitney null variance", z,
                      SIGNALS["domain_classifier"][1], detail={"rows": f"{dc.n_x} + {dc.n_y}", "folds": dc.folds}))

    Ya = _sample(Y, anomaly_sample, rng)
    scores = knn_scores(profile.index, Ya, profile.k, device=dev)
    hits = int((scores > profile.anomaly_threshold).sum())
    n_cal = len(profile.calibration_scores)
    cal_hits = int((profile.calibration_scores > profile.anomaly_threshold).sum())
    frac = hits / len(Ya)
    _, fp = stats.fisher_exact([[hits, len(Ya) - hits], [cal_hits, n_cal - cal_hits]], alternative="greater")
    lo, hi = wilson_ci(hits, len(Ya), level)
    sig.append(Signal("anomalous_fraction", SIGNALS["anomalous_fraction"][0], frac, lo, hi, float(fp),
                      "Fisher exact against the held-out reference rows, one-sided", frac,
                      SIGNALS["anomalous_fraction"][1],
                      detail={"reference_fraction": profile.calibration_anomalous_fraction, "rows": len(Ya),
                              "threshold": profile.anomaly_threshold, "mean_knn_distance": float(scores.mean()),
                              "reference_mean_knn_distance": float(profile.calibration_scores.mean())}))

    _, p_adj = adjust_pvalues([s.p_value for s in sig], "holm", alpha)
    out = {}
    for s, pa in zip(sig, p_adj):
        out[s.name] = _with_level(profile, s, float(pa), alpha)
    info = {"profile": profile.name, "seed": seed, "samples": dict(mmd=mmd_sample, ks=ks_sample,
                                                                   classifier=classifier_sample,
                                                                   anomaly=anomaly_sample), "n_perm": n_perm}
    return BatchScore(out, worst_level(s.level for s in out.values()), n_b, Y.shape[1],
                      time.perf_counter() - t0, alpha, info)


def _apcs_band(a: float) -> str:
    return _band(a, APCS_WARNING, APCS_CRITICAL)


def _with_level(p: Profile, s: Signal, p_adj: float, alpha: float) -> Signal:
    """The signal with its Holm-adjusted p-value and alert level (``ok`` unless the test rejects)."""
    from dataclasses import replace

    lvl = "ok"
    if p_adj < alpha:
        if s.name in ("mean_shift", "norm_shift"):
            lvl = _band(s.ratio, MEAN_DRIFT_WARNING, MEAN_DRIFT_CRITICAL)
            if s.name == "norm_shift" and s.detail["norm_cv"] > NORM_CV_WARNING >= p.norm_cv:
                lvl = worst_level([lvl, "warning"])
        elif s.name == "isotropy_drift":
            a = s.detail["apcs"]
            lvl = "warning" if abs(s.value) > APCS_DRIFT else "ok"
            if LEVELS.index(_apcs_band(a)) > LEVELS.index(_apcs_band(p.apcs)):
                lvl = worst_level([lvl, _apcs_band(a)])
        elif s.name == "mmd":
            lvl = "warning"
        elif s.name == "ks_dimensions":
            lvl = "critical" if s.value > KS_SHARE_CRITICAL else "warning"
        elif s.name == "domain_classifier":
            lvl = "warning" if s.value > AUC_WARNING else "ok"
        elif s.name == "anomalous_fraction":
            lvl = _band(s.value, ANOMALY_WARNING, ANOMALY_CRITICAL)
    return replace(s, p_adjusted=p_adj, level=lvl)


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
        MetricSpec("batches", "Batches in the history", "higher", "", "monitor --history"),
        MetricSpec("batches_alerting", "Batches at warning or above", "lower", "", "monitor --history"),
        MetricSpec("batches_critical", "Batches at critical", "lower", "", "monitor --history"),
    )


#: signal -> the metric name its value is recorded under (the mean shift also records its ratio)
SIGNAL_METRIC = {"mean_shift": "mean_shift", "norm_shift": "norm_shift", "isotropy_drift": "isotropy_drift_apcs",
                 "mmd": "mmd", "ks_dimensions": "ks_rejected_fraction", "domain_classifier": "domain_classifier_auc",
                 "anomalous_fraction": "anomalous_fraction"}
SPECS = _specs()
