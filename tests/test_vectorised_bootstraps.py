"""Every bootstrap computed for all replicates at once equals the per-replicate loop it replaced: the same
weights (stats.weighted_bootstrap with ``batch``), and the same values, bit for bit unless a test states a
tolerance (sums formed as matrix products), on inputs with ties, NaNs, small groups and replicates that lack a
class."""
import numpy as np
import pytest

from embeval_report import stats
from embeval_report.metrics import anomaly as an


def _old_weights(n, b, seed):
    rng = np.random.default_rng(seed)
    p = np.full(n, 1.0 / n)
    return np.array([rng.multinomial(n, p).astype(float) for _ in range(b)]).reshape(b, n)


@pytest.mark.parametrize("n,b", [(1, 4), (2, 3), (64, 200), (301, 17), (7, 0)])
def test_bootstrap_weights_and_batches_are_the_old_draws(n, b):
    ref = _old_weights(n, b, 5)
    got = stats.bootstrap_weights(n, b, 5)
    assert got.shape == ref.shape and got.dtype == ref.dtype and np.array_equal(got, ref)
    loop = stats.weighted_bootstrap(lambda w: w.sum() * w[0], n, n_boot=b, seed=5)
    for batch in (1, 3, 1000):
        batched = stats.weighted_bootstrap(lambda W: W.sum(1) * W[:, 0], n, n_boot=b, seed=5, batch=batch)
        assert np.array_equal(batched, loop)
        assert np.array_equal(stats.weighted_bootstrap(lambda W: W, n, n_boot=b, seed=5, batch=batch).reshape(ref.shape),
                              ref)


def _anomaly_loop(ranked, n, *, cost_fn, cost_fp, n_boot, seed):
    """The per-replicate loop of anomaly._replicates before it was vectorised."""
    def stat(w):
        out = np.empty((len(ranked), len(an._CURVE_METRICS)))
        for d, r in enumerate(ranked):
            m = an.curve_metrics(*r.counts(w), cost_fn=cost_fn, cost_fp=cost_fp)
            out[d] = [m[k] for k in an._CURVE_METRICS]
        return out

    with np.errstate(invalid="ignore", divide="ignore"):
        return stats.weighted_bootstrap(stat, n, n_boot=n_boot, seed=seed)


@pytest.mark.parametrize("n,prevalence,decimals,seed", [
    (12, 0.1, 1, 1),       # tiny: many replicates lack a class (two anomalies); ties everywhere
    (40, 0.1, 1, 1),
    (300, 0.05, 2, 2),     # ties, > 128 thresholds
    (900, 0.02, 6, 3),     # few ties, ~900 thresholds
    (500, 0.5, 0, 4),      # three distinct scores
])
def test_anomaly_replicates_equal_the_per_replicate_loop(n, prevalence, decimals, seed):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < prevalence).astype(float)
    y[:2] = [1.0, 0.0]
    detectors = [np.round(rng.normal(size=n) + 1.5 * y, decimals), np.round(rng.random(n), decimals),
                 np.round(-rng.normal(size=n) * y, decimals)]
    ranked = [an.Ranked.of(s, y) for s in detectors]
    kw = dict(cost_fn=700.0, cost_fp=13.0, n_boot=150, seed=seed)
    ref = _anomaly_loop(ranked, n, **kw)
    got = an._replicates(ranked, y, **kw)
    assert got.shape == ref.shape
    assert np.array_equal(got, ref, equal_nan=True)
    assert np.isnan(ref).any() or n > 20  # the tiny cases do exercise replicates without a class


def test_anomaly_replicates_are_batch_independent(monkeypatch):
    rng = np.random.default_rng(9)
    y = (rng.random(200) < 0.1).astype(float)
    y[0] = 1.0
    ranked = [an.Ranked.of(np.round(rng.normal(size=200), 1), y)]
    whole = an._replicates(ranked, y, cost_fn=10.0, cost_fp=1.0, n_boot=64, seed=0)
    real = stats.weighted_bootstrap
    monkeypatch.setattr(an, "weighted_bootstrap", lambda *a, **k: real(*a, **{**k, "batch": 7}))
    assert np.array_equal(an._replicates(ranked, y, cost_fn=10.0, cost_fp=1.0, n_boot=64, seed=0), whole,
                          equal_nan=True)


def _fairness_loop_statistic(X, groups, rows):
    """compare_groups' per-replicate statistic before it was vectorised (one weight vector at a time)."""
    from embeval_report.metrics.fairness import grouped_rows

    G = len(groups.names)
    sel, codes, starts, U, vals = grouped_rows(X, groups, rows)

    def statistic(w):
        out = np.full((len(vals) + 1, G), np.nan)
        for j, m in enumerate(rows):
            ok = np.isfinite(vals[m])
            num = np.bincount(codes[ok], w[ok] * vals[m][ok], minlength=G)
            den = np.bincount(codes[ok], w[ok], minlength=G)
            out[j] = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
        s = np.add.reduceat(w[:, None] * U, starts, axis=0)
        n_w, same = np.bincount(codes, w, minlength=G), np.bincount(codes, w * w, minlength=G)
        den = n_w * n_w - same
        out[-1] = np.where(den > 0, (np.einsum("gd,gd->g", s, s) - same) / np.where(den > 0, den, 1), np.nan)
        return out

    return statistic, len(sel)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fairness_replicates_equal_the_per_replicate_loop(monkeypatch, seed):
    from embeval_report.metrics import fairness as fm

    rng = np.random.default_rng(seed)
    n = 230
    region = rng.choice(["a", "b", "c", "d"], n, p=[0.55, 0.3, 0.1, 0.05]).astype(object)
    region[rng.random(n) < 0.05] = None  # missing values
    region[-6:] = "e"  # a small group whose k_occurrence is mostly not evaluated
    X = rng.normal(size=(n, 12)).astype(np.float32)
    X[3] = 0.0  # a zero row
    acc = (rng.random(n) < 0.7).astype(float)
    acc[rng.random(n) < 0.2] = np.nan  # not evaluated
    occ = np.round(rng.gamma(2.0, size=n), 1)  # ties
    occ[:40] = np.nan
    occ[-5:] = np.nan  # one evaluated row in group e: replicates without it have no value there
    groups = fm.make_groups(region, "region", min_size=5)
    rows = {"probe_accuracy": acc, "k_occurrence": occ}
    seen = []
    real = fm.weighted_bootstrap
    monkeypatch.setattr(fm, "weighted_bootstrap", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    fm.compare_groups(X, groups, rows, n_boot=120, seed=seed)
    statistic, units = _fairness_loop_statistic(X, groups, rows)
    ref = stats.weighted_bootstrap(statistic, units, n_boot=120, seed=seed)
    got = seen[0]
    assert got.shape == ref.shape
    assert np.array_equal(got[:, :-1], ref[:, :-1], equal_nan=True)  # the measures' means: bit for bit
    assert np.array_equal(np.isnan(got[:, -1]), np.isnan(ref[:, -1]))
    # the within-group APCS: its weighted sums one product per group, rounded in another order
    np.testing.assert_allclose(got[:, -1], ref[:, -1], rtol=1e-12, atol=1e-15)
    assert np.isnan(ref[:, :-1]).any()


@pytest.mark.parametrize("seed,n_events", [(0, 2), (1, 5), (2, 30), (3, 200)])
def test_time_to_detection_replicates_equal_the_per_replicate_loop(seed, n_events):
    import pandas as pd

    rng = np.random.default_rng(seed)
    detected = rng.random(n_events) < 0.6
    detected[0] = True
    events = pd.DataFrame({"duration": np.round(rng.exponential(3.0, n_events), 0),  # tied times
                           "detected": detected})
    events.loc[~detected, "duration"] = np.round(rng.uniform(0, 6, (~detected).sum()), 0)  # censored, ties with events
    dur, obs = events["duration"].to_numpy(float), events["detected"].to_numpy(bool)
    ref = stats.weighted_bootstrap(lambda w: np.array([an.km_median(dur, obs, w), np.average(obs, weights=w)]),
                                   n_events, n_boot=300, seed=seed)
    got = an._ttd_replicates(events, 300, seed)
    assert got.shape == ref.shape
    assert np.array_equal(got, ref, equal_nan=True)


def test_pair_moments_gram_products_do_not_depend_on_blas_threads():
    """PairMoments.from_moments forms its block Gram products on one BLAS thread: the same values as with the
    default threads (the demo's shape: 64 blocks, 64 + 64 dimensions)."""
    from threadpoolctl import threadpool_limits

    from embeval_report.metrics.pair_moments import PairMoments

    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 50, 128))
    G = np.einsum("bni,bnj->bij", X, X)
    s, qs, qG = X.sum(1), rng.random((64, 2)), rng.random((64, 2, 2))
    flat = lambda M: M.reshape(len(M), -1)  # noqa: E731
    with threadpool_limits(2, user_api="blas"):
        ref = [flat(M) @ flat(M).T for M in (G[:, :64, :64], G[:, 64:, 64:], G[:, :64, 64:])]
    pm = PairMoments.from_moments(np.full(64, 50.0), s, G, qs, qG, 64)
    assert all(np.array_equal(a, b) for a, b in zip((pm.Kaa, pm.Kbb, pm.Kab), ref))


def test_average_precision_replicates_equal_scikit_learn_on_the_drawn_rows():
    """Each replicate's average precision is scikit-learn's on the resample itself (every row repeated as often as
    drawn, undrawn rows absent), also when the top-scored rows are not drawn (a 0/0 precision there once made the
    replicate NaN, and ~40 % of replicates were dropped), with tied scores."""
    from sklearn.metrics import average_precision_score

    from embeval_report.metrics.anomaly import Ranked
    from embeval_report.metrics.anomaly_replicates import curve_replicates, weighted_counts

    rng = np.random.default_rng(12)
    n = 60
    y = (rng.random(n) < 0.2).astype(float)
    y[:2] = 1
    scores = np.round(rng.standard_normal(n) + y, 1)  # ties
    W = rng.multinomial(n, np.full(n, 1 / n), size=300).astype(float)
    top = np.argsort(-scores, kind="stable")[:3]
    W[:100, top] = 0  # the top-scored rows undrawn in a third of the replicates
    ap = curve_replicates(*weighted_counts(Ranked.of(scores, y), W), cost_fn=1.0, cost_fp=1.0, targets={},
                          max_fpr=0.1)["average_precision"]
    for w, got in zip(W.astype(int), ap):
        yy, ss = np.repeat(y, w), np.repeat(scores, w)
        if 0 < yy.sum() < len(yy):
            assert got == pytest.approx(average_precision_score(yy, ss), abs=1e-12)
        else:
            assert np.isnan(got)
