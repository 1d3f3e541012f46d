"""The paired bootstrap's draws made all at once (one ``rng.integers`` call and one ``bincount`` per batch, the counts
kept for the next call from the same generator state) give the replicates of the per-draw loop they replace, bit
for bit, and leave the generator where that loop left it."""
import math
import warnings

import numpy as np
import pandas as pd
import pytest

from embeval_report.metrics import paired
from embeval_report.metrics.scoring import weighted_mean


def _reference(tables, fn, *, boot=None, boot_exact=False, n_resamples, rng):
    """resampled_values as it was: one ``rng.integers`` call per draw, one ``bincount`` per draw, nothing kept."""
    n = len(tables[0])
    out = np.full((n_resamples, len(tables)), math.nan)
    step = max(1, min(n_resamples, paired.BOOT_BATCH_VALUES // n if boot is not None and boot_exact else
                      paired.BATCH_VALUES // (8 * n)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in range(0, n_resamples, step):
            draws = [rng.integers(0, n, n) for _ in range(min(step, n_resamples - s))]
            if boot is not None:
                W = np.stack([np.bincount(idx, minlength=n) for idx in draws]).astype(float)
                out[s:s + len(draws)] = np.column_stack([np.asarray(boot(t, W), float) for t in tables])
            else:
                out[s:s + len(draws)] = [[float(fn(t.iloc[idx])) for t in tables] for idx in draws]
    return out


def _mean(t):
    x = t["x"].to_numpy(float)
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else math.nan


def _boot(t, W):
    return weighted_mean(t, W, "x")


def _exact_boot(t, W):  # integer counts, row-wise arithmetic: the same value whatever shares the call
    return (W * t["x"].to_numpy(float)).sum(axis=1)


def _table(rng, n, kind):
    x = {"normal": rng.normal(size=n), "binary": rng.integers(0, 2, n).astype(float),
         "missing": np.where(rng.random(n) < 0.3, np.nan, rng.normal(size=n))}[kind]
    return pd.DataFrame({"unit": np.arange(n).astype(str), "x": x})


@pytest.mark.parametrize("n, kind, resamples, seed", [(1, "normal", 50, 0), (2, "binary", 101, 3),
                                                      (7, "missing", 200, [0, 41]), (333, "normal", 257, 5),
                                                      (4001, "missing", 120, [2, 41]), (20_011, "binary", 30, 9)])
@pytest.mark.parametrize("mode", ["fn", "boot", "exact"])
def test_replicates_drawn_at_once_equal_the_per_draw_loop(n, kind, resamples, seed, mode):
    rng = np.random.default_rng(n)
    tables = [_table(rng, n, kind), _table(rng, n, kind)]
    kw = dict(boot=None if mode == "fn" else _exact_boot if mode == "exact" else _boot, boot_exact=mode == "exact",
              n_resamples=resamples)
    fn = _mean if mode != "exact" else (lambda t: float(t["x"].sum()))
    paired._DRAWS.clear()
    for _ in range(2):  # the second call reads the kept counts
        r_ref, r_new = np.random.default_rng(seed), np.random.default_rng(seed)
        want = _reference(tables, fn, rng=r_ref, **kw)
        got = paired.resampled_values(tables, fn, rng=r_new, **kw)
        np.testing.assert_array_equal(got, want)
        assert r_new.bit_generator.state == r_ref.bit_generator.state  # the same draws taken from the generator
        assert r_new.integers(0, 1000) == r_ref.integers(0, 1000)
    if mode != "fn":
        assert len(paired._DRAWS) == 1


def test_a_generator_that_drew_before_gets_its_own_draws():
    """The kept counts are keyed by the generator's state: a generator that has drawn before is not served the
    counts of a fresh one."""
    t = _table(np.random.default_rng(1), 500, "normal")
    paired._DRAWS.clear()
    fresh = paired.resampled_values([t], _mean, boot=_boot, n_resamples=100, rng=np.random.default_rng(0))
    used = np.random.default_rng(0)
    used.integers(0, 10)
    after = paired.resampled_values([t], _mean, boot=_boot, n_resamples=100, rng=used)
    np.testing.assert_array_equal(after, _reference([t], _mean, boot=_boot, n_resamples=100,
                                                    rng=(lambda g: (g.integers(0, 10), g)[1])(np.random.default_rng(0))))
    assert not np.array_equal(fresh, after)
    assert len(paired._DRAWS) == 2


def test_counts_beyond_the_budget_are_drawn_batch_by_batch(monkeypatch):
    monkeypatch.setattr(paired, "DRAW_CACHE_BYTES", 1000)
    t = _table(np.random.default_rng(2), 300, "missing")
    paired._DRAWS.clear()
    got = paired.resampled_values([t], _mean, boot=_boot, n_resamples=80, rng=np.random.default_rng(4))
    np.testing.assert_array_equal(got, _reference([t], _mean, boot=_boot, n_resamples=80,
                                                  rng=np.random.default_rng(4)))
    assert not paired._DRAWS


def test_paired_aggregate_is_unchanged_by_kept_replicates():
    """The second comparison with the same tables (a remedy its protocol undoes, a later remedy) reads the
    replicates kept from the first and gives the same comparison."""
    rng = np.random.default_rng(6)
    a, b = _table(rng, 900, "normal"), _table(rng, 900, "normal")
    paired._HELD.clear()
    paired._DRAWS.clear()
    first = paired.paired_aggregate(_mean, a, b, boot=_boot)
    again = paired.paired_aggregate(_mean, a, b, boot=_boot)
    paired._HELD.clear()
    paired._DRAWS.clear()
    cold = paired.paired_aggregate(_mean, a, b, boot=_boot)
    slow = paired.paired_aggregate(_mean, a, b)  # per drawn table, no boot
    for r in (again, cold):
        assert r[0] == first[0]
        np.testing.assert_array_equal(r[1], first[1])
    np.testing.assert_allclose(slow[1], first[1], rtol=0, atol=1e-12)
    same = paired.paired_aggregate(_mean, a, a.copy(), boot=_boot)
    assert same[0].diff == 0 and same[0].ci_low == same[0].ci_high == 0 and same[0].p_randomisation == 1


@pytest.mark.parametrize("n", [2, 3, 10, 47, 500, 15_764])
def test_the_mde_of_a_comparison_is_the_power_solvers(n):
    from embeval_report.stats import minimum_detectable_effect

    for sd in (0.0, 1e-9, 0.37, 1.0, 12.5, math.nan):
        want = minimum_detectable_effect(sd, n) if np.isfinite(sd) else math.nan
        got = paired._mde(sd, n)
        assert got == want or (math.isnan(got) and math.isnan(want))


def test_sign_flips_of_several_unit_counts_are_kept_together():
    """The remedy checks return to each task's units after the other tasks': the flips of every (seed, units,
    resamples) within the budget stay kept, and each test still equals scipy's."""
    rng = np.random.default_rng(8)
    paired._FLIP_CACHE.clear()
    ds = {n: rng.normal(0.03, 1, n) for n in (300, 700, 1100)}
    for n, d in ds.items():
        assert paired._sign_flip_p(d, 999, 2) == paired._permutation_p(d, 999, 2)
    assert set(paired._FLIP_CACHE) == {(2, n, 999) for n in ds}
    for n, d in ds.items():
        assert paired._sign_flip_p(-d, 999, 2) == paired._permutation_p(-d, 999, 2)
