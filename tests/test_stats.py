"""The statistics layer against closed forms and statsmodels, and the resampling plan's fallback."""
import math
import warnings

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from embeval_report import stats
from embeval_report.errors import UndefinedMetricWarning
from embeval_report.metrics.isotropy import measure_isotropy
from delta_method import SPECTRAL, apcs_se, eigen_functional_se


def test_adjust_pvalues_equals_statsmodels_and_keeps_nan():
    p = np.array([0.001, 0.04, np.nan, 0.03, 0.5])
    for method, sm in (("holm", "holm"), ("bh", "fdr_bh")):
        rej, adj = stats.adjust_pvalues(p, method)
        r2, a2, _, _ = multipletests(p[~np.isnan(p)], method=sm)
        np.testing.assert_allclose(adj[~np.isnan(p)], a2)
        assert np.isnan(adj[2]) and not rej[2] and list(rej[~np.isnan(p)]) == list(r2)


def test_adjust_pvalues_leaves_the_garbage_collector_as_it_found_it():
    """statsmodels' Holm calls gc.collect(); the heap is frozen around it, and a caller's own freeze is kept."""
    import gc
    assert gc.get_freeze_count() == 0
    stats.adjust_pvalues([0.01, 0.2], "holm")
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    gc.freeze()
    try:
        stats.adjust_pvalues([0.01, 0.2], "holm")
        assert gc.get_freeze_count() > 0  # not unfrozen (frozen objects may still be freed meanwhile)
    finally:
        gc.unfreeze()


def test_jackknife_interval_of_the_mean_is_the_t_free_normal_interval():
    x = np.random.default_rng(0).standard_normal(50)
    loo = (x.sum() - x) / (len(x) - 1)  # delete-one means
    lo, hi = stats.jackknife_interval(x.mean(), loo)
    se = x.std(ddof=1) / math.sqrt(len(x))  # the jackknife SE of a mean equals sd/√n exactly
    assert (hi - lo) / 2 == pytest.approx(1.959964 * se, rel=1e-6)


def test_mean_ci_methods_and_undefined_case():
    x = np.random.default_rng(1).exponential(size=300)
    lo, hi, method = stats.mean_ci(x, units="queries")
    assert lo < x.mean() < hi and "BCa" in method and "300 queries" in method
    big = np.random.default_rng(2).standard_normal(6000)
    lo, hi, method = stats.mean_ci(big)
    assert "normal interval" in method
    assert (hi - lo) / 2 == pytest.approx(1.959964 * big.std(ddof=1) / math.sqrt(6000), rel=1e-6)
    with pytest.warns(UndefinedMetricWarning):
        lo, hi, _ = stats.mean_ci([1.0])
    assert math.isnan(lo) and math.isnan(hi)


def _scipy_mean_ci(x, level, seed):
    """mean_ci's BCa interval as it was: scipy.stats.bootstrap through bootstrap_ci."""
    return stats.bootstrap_ci(np.mean, x, level=level, n_boot=stats.MEAN_CI_RESAMPLES, seed=seed)


@pytest.mark.parametrize("case", range(14))
def test_mean_ci_bca_equals_scipy_bit_for_bit(case):
    """mean_ci's own BCa (the jackknife rows selected, not gathered) gives SciPy's interval bit for bit: continuous,
    0/1 (ties everywhere), few distinct values, a few units, sizes where the batches do not divide the units and
    BCA_MAX; and where BCa is undefined (every resample below the estimate) the same percentile fallback."""
    rng = np.random.default_rng(case)
    n = [2, 3, 7, 30, 257, 999, 1001, 2500, stats.BCA_MAX, 400, 64, 5, 1500, 12][case]
    x = [rng.standard_normal(n), (rng.uniform(size=n) < 0.1).astype(float), rng.integers(0, 4, n) / 3.0,
         rng.exponential(size=n) ** 3][case % 4]
    if np.ptp(x) == 0:
        x[0] += 1.0
    for level, seed in ((0.95, case), (0.9, 7)):
        lo, hi, method = stats.mean_ci(x, level, seed=seed)
        assert "BCa" in method
        assert (lo, hi) == _scipy_mean_ci(x, level, seed), (n, level, seed)
    y = np.r_[np.zeros(40), 1e-300]  # the estimate below every resample's but one: z0 infinite, percentile fallback
    assert stats.mean_ci(y, seed=3)[:2] == _scipy_mean_ci(y, 0.95, 3)


def test_plan_falls_back_to_the_jackknife_when_blocks_do_not_fit():
    assert stats.ResamplingPlan.choose(10_000, 64, 200).method == "bootstrap"
    big_d = stats.ResamplingPlan.choose(10_000, 1300, 200)  # the old rule gave no interval above d = 1295
    assert big_d.method == "jackknife" and big_d.units == stats.MIN_BLOCKS
    assert stats.ResamplingPlan.choose(2, 4, 200).method == "none"
    assert stats.ResamplingPlan.choose(10, 4, 0).reason == "intervals not requested"


def test_jackknife_intervals_of_isotropy_agree_with_the_bootstrap(monkeypatch):
    scale = np.linspace(0.5, 2, 16)

    def draw(seed):
        return (np.random.default_rng(seed).standard_normal((3000, 16)) * scale + 0.8).astype(np.float32)

    names = ("apcs", "participation_ratio", "top10_variance_ratio")
    X = draw(3)
    boot = measure_isotropy(X, n_boot=300, seed=1)
    monkeypatch.setattr(stats, "RESAMPLING_BYTES", 16 * 16 * 8 * 2 * 5)  # room for 5 blocks only
    jack = measure_isotropy(X, n_boot=300, seed=1)
    assert boot.plan.method == "bootstrap" and jack.plan.method == "jackknife"
    assert "jackknife" in jack.metrics["apcs"].ci_method
    for k in names:
        b, j = boot.metrics[k], jack.metrics[k]
        assert j.value == pytest.approx(b.value, rel=1e-9) and j.ci_low <= j.value <= j.ci_high
    # Both widths against 2 z se, averaged over fresh data sets (one 20-group jackknife's width alone varies by
    # ~16 %): se of the spectral metrics by the delta method for N(0.8, diag(scale^2)), of APCS by its Hoeffding
    # projection on each set (delta_method.py). Measured ratios: jackknife 0.99 / 0.97 / 0.94 over 16 sets,
    # bootstrap 0.93 / 0.98 / 0.92 over 10 (APCS / PR / top-10 share); rel 0.2 keeps every ratio times or over
    # sqrt(2) out (1.30 and more, 0.70 and less).
    se_spectral = [eigen_functional_se(SPECTRAL[k], scale ** 2, 3000) for k in names[1:]]
    for method, budget, sets in (("jackknife", 16 * 16 * 8 * 2 * 5, 16), ("bootstrap", 512 * 2 ** 20, 10)):
        monkeypatch.setattr(stats, "RESAMPLING_BYTES", budget)
        ratios = []
        for s in range(sets):
            Xs = draw(200 + s)
            r = measure_isotropy(Xs, n_boot=300, seed=s, sample_size=1000)  # a small cosine histogram: not tested
            assert r.plan.method == method
            widths = np.array([r.metrics[k].ci_high - r.metrics[k].ci_low for k in names])
            ratios.append(widths / (2 * 1.959964 * np.array([apcs_se(Xs), *se_spectral])))
        for k, x in zip(names, np.mean(ratios, axis=0)):
            assert x == pytest.approx(1, rel=0.2), (method, k, x)


def test_identical_rows_warn_and_leave_spectral_metrics_undefined():
    X = np.tile(np.arange(1, 9, dtype=np.float32), (200, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = measure_isotropy(X, n_boot=50)
    assert any(issubclass(w.category, UndefinedMetricWarning) for w in caught)
    assert r.values["apcs"] == pytest.approx(1.0)
    assert r.metrics["condition_number"].to_json()["value"] is None
    assert r.metrics["participation_ratio_fraction"].verdict is None
    assert r.metrics["apcs"].verdict == "problematic"


def test_bias_corrected_estimate_sits_inside_a_basic_interval_that_excludes_the_value():
    rng = np.random.default_rng(4)
    X = (rng.standard_normal((60, 40)) * np.linspace(0.2, 3, 40)).astype(np.float32)  # small n: biased spectrum
    m = measure_isotropy(X, n_boot=400, seed=2).metrics["participation_ratio"]
    assert m.bias_corrected is not None
    if not m.ci_low <= m.value <= m.ci_high:
        assert m.ci_low <= m.bias_corrected <= m.ci_high
    assert m.bias_corrected > m.value  # the sample spectrum spreads out: PR is biased down


# ------------------------------------------------------------------------------------ power


def test_minimum_detectable_effect_closed_form_and_small_n():
    from scipy.stats import norm

    z = norm.ppf(0.975) + norm.ppf(0.8)
    for n, sd in ((20_000, 0.3), (5_000, 2.0)):  # large n: the normal form (z_{1-a/2} + z_power) sd / sqrt(n)
        assert stats.minimum_detectable_effect(sd, n) == pytest.approx(z * sd / math.sqrt(n), rel=2e-3)
    # small n: the t form, checked with SciPy's noncentral t, is larger than the normal one
    mde = stats.minimum_detectable_effect(1.0, 10)
    assert _t_power(mde, 1.0, 10) == pytest.approx(0.8, abs=1e-6) and mde > z / math.sqrt(10)
    assert stats.minimum_detectable_effect(0.0, 50) == 0.0
    with pytest.warns(UndefinedMetricWarning):
        assert math.isnan(stats.minimum_detectable_effect(1.0, 1))


def _t_power(effect, sd, n, alpha=0.05):
    """Power of the two-sided one-sample t-test from SciPy's noncentral t (independent of statsmodels)."""
    from scipy.stats import nct, t

    crit, nc = t.ppf(1 - alpha / 2, n - 1), effect / sd * math.sqrt(n)
    return 1 - nct.cdf(crit, n - 1, nc) + nct.cdf(-crit, n - 1, nc)


def test_required_units_is_the_smallest_n_with_the_power():
    for effect, sd in ((0.01, 0.1), (0.05, 0.3), (0.5, 1.0), (0.002, 0.2)):
        n = stats.required_units(effect, sd)
        assert _t_power(effect, sd, n) >= 0.8 - 1e-9 and _t_power(effect, sd, n - 1) < 0.8
    for n in (8, 40, 333, 5000):  # and it inverts the MDE (solved to a tolerance: n or n + 1)
        assert stats.required_units(stats.minimum_detectable_effect(0.7, n), 0.7) in (n, n + 1)
    assert stats.required_units(0.01, 0.0) == 2
    with pytest.raises(ValueError, match="effect must be"):
        stats.required_units(0.0, 1.0)
    with pytest.raises(ValueError, match="alpha and power"):
        stats.minimum_detectable_effect(1.0, 10, power=1.0)


def test_planted_mde_is_detected_at_the_stated_power():
    """Simulation: paired differences shifted by the MDE are rejected by scipy's t-test in about 80 % of
    2,000 seeded samples (binomial sd 0.9 %), and an unshifted sample in about 5 %."""
    from scipy.stats import ttest_1samp

    n, sd = 30, 0.25
    mde = stats.minimum_detectable_effect(sd, n)
    rng = np.random.default_rng(7)
    samples = rng.normal(0.0, sd, size=(2000, n))
    power = (ttest_1samp(samples + mde, 0.0, axis=1).pvalue < 0.05).mean()
    size = (ttest_1samp(samples, 0.0, axis=1).pvalue < 0.05).mean()
    assert power == pytest.approx(0.8, abs=0.03) and size == pytest.approx(0.05, abs=0.015)


def test_required_units_when_two_units_already_have_the_power():
    """A large effect against a small spread: statsmodels' solver returns NaN there; the answer is 2, and around
    it every answer is the smallest whole n with the power (checked against TTestPower.power)."""
    from statsmodels.stats.power import TTestPower

    assert stats.required_units(0.01, 1e-4) == 2
    for effect, sd in ((1.0, 0.3), (1.0, 0.8), (0.01, 0.2), (0.05, 0.04)):
        n = stats.required_units(effect, sd)
        power = lambda m: TTestPower().power(effect / sd, m, 0.05, alternative="two-sided")  # noqa: E731
        assert power(n) >= 0.8 - 1e-9 and (n == 2 or power(n - 1) < 0.8)
