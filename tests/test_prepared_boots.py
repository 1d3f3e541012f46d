"""The paired bootstrap's boots that read their table once (PreparedBoot: the remedy checks call each boot on a few
draws at a time, hundreds of times per table) give the values the per-batch versions gave, bit for bit; the remedy
checks' comparisons without the unit tests they do not show keep every other field."""
import json
import math
from functools import partial

import numpy as np
import pandas as pd
import pytest
from scipy import special

from embeval_report.metrics import anomaly as an
from embeval_report.metrics import fairness_units as fu
from embeval_report.metrics import linkpred as lp
from embeval_report.metrics import paired
from embeval_report.metrics import temporal as tp
from embeval_report.metrics.anomaly_replicates import weighted_counts
from embeval_report.metrics.scoring import PreparedBoot, weighted_mean


def _draws(rng, n, k):
    """``k`` bootstrap draws' unit counts (draws × units) as floats, as resampled_values passes them."""
    return paired._counts(rng.integers(0, n, (k, n)), n).astype(float)


# --- the per-batch versions, as they were before the boots read their table once --------------------------------

def _old_weighted_mean(table, W, column):
    x = pd.to_numeric(table[column], errors="coerce").to_numpy(float)
    ok = np.isfinite(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (W @ np.where(ok, x, 0.0)) / (W @ ok.astype(float))


def _old_adjusted_weighted(table, W, name, prefix=""):
    N = np.asarray(table["n_candidates"], float)
    chance = ((N + 1) / 2 if name == "mean_rank" else (special.digamma(N + 1) + np.euler_gamma) / N if name == "mrr"
              else np.minimum(int(name.rpartition("_")[2]), N) / N)
    total = W.sum(1)
    value = (W @ np.asarray(table[prefix + name], float)) / total
    e = (W @ chance) / total
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "mean_rank":
            return np.where(e > 1, 1 - (value - 1) / (e - 1), np.nan)
        return np.where(e < 1, (value - e) / (1 - e), np.nan)


def _old_horizon_change_weighted(table, W):
    b = np.asarray(pd.to_numeric(table["bin"]), np.int64)
    rr = np.asarray(table[tp.PREFIX + "mrr"], float)
    bins = np.unique(b)
    onehot = (b[:, None] == bins[None, :]).astype(float)
    count = W @ onehot
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = (W @ (onehot * rr[:, None])) / count
    present = count > 0
    first = np.argmax(present, axis=1)
    last = len(bins) - 1 - np.argmax(present[:, ::-1], axis=1)
    rows = np.arange(len(W))
    return np.where(present.sum(1) >= 2, mean[rows, last] - mean[rows, first], np.nan)


def _old_gap_constants(units, measure):
    """What the per-batch gap boot rebuilt on every batch: per attribute the mask of units with a value, their values
    and their one-hot groups (the arithmetic after them is unchanged)."""
    v = pd.to_numeric(units[measure], errors="coerce").to_numpy(float)
    out = []
    for codes in fu._attribute_codes(units):
        ok = (codes >= 0) & np.isfinite(v)
        if not ok.any():
            continue
        onehot = np.zeros((int(ok.sum()), int(codes[ok].max()) + 1))
        onehot[np.arange(len(onehot)), codes[ok]] = 1.0
        out.append((ok, v[ok], onehot))
    return out


def _old_curve(units, W, average_precision):
    r = an._unit_ranks(units)
    tp_, fp = weighted_counts(r, W)
    P, N, flagged, zero = tp_[:, -1:], fp[:, -1:], tp_ + fp, np.zeros((len(tp_), 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        recall, fpr = np.c_[zero, tp_ / P], np.c_[zero, fp / N]
        precision = np.where(flagged > 0, tp_ / np.maximum(flagged, 1e-300), 0.0)
    ok = (P[:, 0] > 0) & (N[:, 0] > 0)
    if average_precision:
        return np.where(ok, np.sum(np.diff(recall, axis=1) * precision, axis=1), np.nan)
    return np.where(ok, np.trapezoid(recall, fpr, axis=1), np.nan)


# --- the tables -----------------------------------------------------------------------------------------------------

def _edges(rng, n, prefix=""):
    N = rng.integers(1, 60, n).astype(float)
    r = np.ceil(rng.uniform(0, 1, n) * N)
    t = pd.DataFrame({"edge": [f"e{i}" for i in range(n)], f"{prefix}mean_rank": r, f"{prefix}mrr": 1.0 / r})
    for k in (1, 10, 50):
        t[f"{prefix}hits_at_{k}"] = (r <= k).astype(float)
    t["n_candidates"] = N
    t["auc_placement"] = np.where(rng.uniform(size=n) < 0.05, np.nan, rng.uniform(size=n))
    return t


def _check(new, old, tables, rng, n_batches=4):
    for t in tables:
        bound = paired.bound_boot(new, t)
        for k in (1, 3, 17)[:n_batches]:
            W = _draws(rng, len(t), k)
            want = old(t, W)
            np.testing.assert_array_equal(new(t, W), want)
            np.testing.assert_array_equal(bound(W), want)
            assert np.asarray(bound(W)).tobytes() == np.asarray(want).tobytes()


@pytest.mark.parametrize("seed", range(4))
def test_weighted_mean_and_chance_adjusted_ranks_equal_the_per_batch_versions(seed):
    rng = np.random.default_rng(seed)
    tables = [_edges(rng, n) for n in (2, 9, 300)]
    _check(partial(weighted_mean, column="auc_placement"), partial(_old_weighted_mean, column="auc_placement"),
           tables, rng)
    assert weighted_mean(tables[2], _draws(rng, 300, 2), "auc_placement").shape == (2,)  # positional column
    for name in ("mean_rank", "mrr", "hits_at_1", "hits_at_10", "hits_at_50"):
        _check(partial(lp.adjusted_weighted, name=name), partial(_old_adjusted_weighted, name=name), tables, rng)
    prefixed = [_edges(rng, 40, tp.PREFIX)]
    _check(partial(lp.adjusted_weighted, name="mrr", prefix=tp.PREFIX),
           partial(_old_adjusted_weighted, name="mrr", prefix=tp.PREFIX), prefixed, rng)


@pytest.mark.parametrize("seed", range(4))
def test_horizon_change_equals_the_per_batch_version(seed):
    rng = np.random.default_rng(seed)
    tables = []
    for n, bins in ((5, 2), (80, 5), (300, 3), (30, 1)):
        t = _edges(rng, n, tp.PREFIX)
        t["bin"] = rng.integers(0, bins, n)
        t["horizon"] = t["bin"].astype(str)
        tables.append(t)
    _check(tp.horizon_change_weighted, _old_horizon_change_weighted, tables, rng)


@pytest.mark.parametrize("seed", range(3))
def test_fairness_gaps_equal_the_per_batch_version(seed):
    rng = np.random.default_rng(seed)
    tables = []
    for n in (40, 150):
        groups = [json.dumps({"region": r, "plan": p}) for r, p in zip(rng.choice(["a", "b", "c", None], n),
                                                                       rng.choice(["x", "y", None], n))]
        tables.append(pd.DataFrame({"entity": [str(i) for i in range(n)], "groups": groups,
                                    "probe_accuracy": np.where(rng.uniform(0, 1, n) < 0.2, np.nan,
                                                               rng.integers(0, 2, n)),
                                    "label_agreement": rng.uniform(0, 1, n), "k_occurrence": np.full(n, np.nan)}))
    for t in tables:
        for measure in fu.MEASURES:
            terms, old = fu._gap_terms(t, measure), _old_gap_constants(t, measure)
            assert len(terms) == len(old) == (0 if measure == "k_occurrence" else 2)
            W = _draws(rng, len(t), 7)
            for (rows, v1, onehot1), (ok, v0, onehot0) in zip(terms, old):
                assert W[:, rows].tobytes() == W[:, ok].tobytes()
                assert v1.tobytes() == v0.tobytes() and onehot1.tobytes() == onehot0.tobytes()
    for agg in fu.gap_aggregates():  # the aggregate's boot, bound once, as called directly
        for t in tables:
            W = _draws(rng, len(t), 5)
            assert paired.bound_boot(agg.boot, t)(W).tobytes() == agg.boot(t, W).tobytes()


@pytest.mark.parametrize("seed", range(3))
def test_anomaly_curves_equal_the_per_batch_version(seed):
    rng = np.random.default_rng(seed)
    tables = []
    for n in (12, 200):
        label = (rng.uniform(size=n) < 0.15).astype(float)
        label[:2] = [0.0, 1.0]
        tables.append(pd.DataFrame({"entity": [str(i) for i in range(n)], "label": label,
                                    "knn_distance": np.round(rng.gamma(2, 1, n) + label, 1)}))  # ties too
    _check(an.units_roc_auc_weighted, partial(_old_curve, average_precision=False), tables, rng)
    _check(an.units_average_precision_weighted, partial(_old_curve, average_precision=True), tables, rng)


def test_resampled_values_bind_each_table_once_with_the_same_values():
    """A PreparedBoot's table is read once per resampled_values call (not once per batch of draws), and the values
    equal those of the same boot called as a plain function."""
    rng = np.random.default_rng(3)
    tables = [_edges(rng, 500), _edges(rng, 500)]
    reads = []

    def prepare(t, column):
        reads.append(column)
        return weighted_mean.prepare(t, column)

    counted = PreparedBoot(prepare, weighted_mean.weighted)
    fn = lp.placement_auc
    kw = dict(n_resamples=400, rng=None)
    got = paired.resampled_values(tables, fn, boot=partial(counted, column="auc_placement"),
                                  **{**kw, "rng": np.random.default_rng(9)})
    assert reads == ["auc_placement"] * len(tables)
    plain = paired.resampled_values(tables, fn, boot=lambda t, W: _old_weighted_mean(t, W, "auc_placement"),
                                    **{**kw, "rng": np.random.default_rng(9)})
    assert got.tobytes() == plain.tobytes()


@pytest.mark.parametrize("n", [5, 40, 400])
def test_paired_comparison_without_unit_tests_keeps_every_other_field(n):
    rng = np.random.default_rng(n)
    a = rng.uniform(size=n)
    b = a + rng.normal(0.02, 0.05, n)
    full = paired.paired_comparison(a, b, seed=4, units="queries")
    lean = paired.paired_comparison(a, b, seed=4, units="queries", unit_tests=False)
    assert math.isnan(lean.p_t) and math.isnan(lean.p_wilcoxon) and np.isfinite(full.p_wilcoxon)
    keep = {k: v for k, v in full.__dict__.items() if k not in ("p_t", "p_wilcoxon")}
    assert {k: v for k, v in lean.__dict__.items() if k in keep} == keep


@pytest.mark.parametrize("seed", range(3))
def test_compare_units_on_tables_joined_once_equals_joining_per_metric(seed):
    """The remedy checks join a task's two unit tables once (joined_units) and compare every metric on them
    (aligned=True): the same comparisons and differences as joining per metric, with b's rows shuffled and some
    units only in one table."""
    from embeval_report.metrics.scoring import Aggregate, compare_units, joined_units

    rng = np.random.default_rng(seed)
    a = _edges(rng, 300)
    b = _edges(rng, 300).sample(frac=1.0, random_state=seed).iloc[:280].reset_index(drop=True)
    b["edge"] = rng.permutation(a["edge"].to_numpy())[:280]
    a = pd.concat([a, _edges(rng, 5).assign(edge=[f"x{i}" for i in range(5)])], ignore_index=True)
    aggregates = [Aggregate("mrr", mean_of="mrr"), Aggregate("hits_at_10", mean_of="hits_at_10"),
                  Aggregate("auc", fn=lp.placement_auc, boot=partial(weighted_mean, column="auc_placement")),
                  Aggregate("adjusted_mrr", fn=partial(lp.adjusted, name="mrr"),
                            boot=partial(lp.adjusted_weighted, name="mrr"))]
    pair = joined_units(a, b, "edge")
    for agg in aggregates:
        kw = dict(key="edge", metric=agg.metric, aggregate=agg, seed=seed, units="test edges", unit_tests=False)
        per_metric, d0 = compare_units(a, b, **kw)
        once, d1 = compare_units(*pair, aligned=True, **kw)
        assert per_metric.__dict__ == once.__dict__ or all(
            x == y or (x != x and y != y) for x, y in zip(per_metric.__dict__.values(), once.__dict__.values()))
        assert (d0 is None and d1 is None) or d0.tobytes() == d1.tobytes()
