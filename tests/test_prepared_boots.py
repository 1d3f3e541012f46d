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


# --- node classification's and clustering's boots, as they were before they read their table once ------------------

def _old_fold_counts(units, W, codes, size, weights=None):
    from scipy import sparse
    onehot = sparse.csr_matrix((np.ones(len(units)) if weights is None else np.asarray(weights, float),
                                (np.arange(len(units)), codes)), shape=(len(units), size))
    return np.asarray(onehot.T @ np.asarray(W, float).T).T


def _old_fold_accuracy_weighted(units, W):
    f = units["fold"].to_numpy()
    F = int(f.max()) + 1
    counts = _old_fold_counts(units, W, f, F)
    per_fold = _old_fold_counts(units, W, f, F, units["correct"].to_numpy(float)) / np.maximum(counts, 1)
    return np.array([row[c > 0].mean() for row, c in zip(per_fold, counts)])


def _old_fold_macro_f1_weighted(units, W):
    f, y, p = (units[c].to_numpy(np.int64) for c in ("fold", "y", "y_pred"))
    C, F = int(max(y.max(), p.max())) + 1, int(f.max()) + 1
    tp = _old_fold_counts(units, W, f * C + y, F * C, (y == p).astype(float)).reshape(-1, F, C)
    denom = (_old_fold_counts(units, W, f * C + y, F * C)
             + _old_fold_counts(units, W, f * C + p, F * C)).reshape(-1, F, C)
    present = _old_fold_counts(units, W, f, F) > 0
    out = np.empty(len(W))
    for r in range(len(W)):
        classes = np.flatnonzero(np.bincount(y, weights=W[r], minlength=C) > 0)
        f1 = np.divide(2.0 * tp[r], denom[r], out=np.zeros((F, C)), where=denom[r] > 0)[:, classes]
        out[r] = np.mean([row.mean() for row in f1[present[r]]])
    return out


def _old_weighted_partition_scores(units, W):
    from scipy import sparse
    from sklearn.metrics.cluster import contingency_matrix
    from sklearn.metrics.cluster._expected_mutual_info_fast import expected_mutual_information

    y, c = units["y"].to_numpy(np.int64), units["cluster"].to_numpy(np.int64)
    ky, kc = int(y.max()) + 1, int(c.max()) + 1
    onehot = sparse.csr_matrix((np.ones(len(y)), (np.arange(len(y)), y * kc + c)), shape=(len(y), ky * kc))
    N = np.asarray(onehot.T @ np.asarray(W, float).T).T.reshape(len(W), ky, kc)
    a, b, n = N.sum(2), N.sum(1), N.sum((1, 2))

    def comb2(x):
        return (x * (x - 1) / 2).sum(-1)

    s_ij, s_a, s_b, s_n = comb2(N.reshape(len(W), -1)), comb2(a), comb2(b), n * (n - 1) / 2
    expected = s_a * s_b / s_n
    top = (s_a + s_b) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        ari = np.where(top == expected, 1.0, (s_ij - expected) / (top - expected))
        p = N / n[:, None, None]
        outer = a[:, :, None] * b[:, None, :] / n[:, None, None] ** 2
        mi = np.where(N > 0, p * np.log(np.where(N > 0, p, 1.0) / np.where(N > 0, outer, 1.0)), 0.0).sum((1, 2))
        mi = np.clip(mi, 0.0, None)

        def entropy(m):
            q = m / n[:, None]
            return -np.where(m > 0, q * np.log(np.where(m > 0, q, 1.0)), 0.0).sum(1)

        mean_h = (entropy(a) + entropy(b)) / 2
        nmi = np.where(mean_h > 0, mi / mean_h, 1.0)
        emi = float(expected_mutual_information(contingency_matrix(y, c, sparse=True), len(y)))
        denom = mean_h - emi
        denom = np.where(denom < 0, np.minimum(denom, -np.finfo(float).eps), np.maximum(denom, np.finfo(float).eps))
        ami = np.where(mean_h > 0, (mi - emi) / denom, 1.0)
    return {"ari": ari, "nmi": nmi, "ami": ami}


def _probe_table(rng, n, classes, folds, accuracy):
    """A probe's unit table: ``classes`` labels (some absent, when ``classes`` exceeds what the draw holds), folds,
    predictions right with probability ``accuracy`` and otherwise any class (ties between folds' F1 included)."""
    y = rng.integers(0, classes, n)
    pred = np.where(rng.random(n) < accuracy, y, rng.integers(0, classes + 1, n))
    return pd.DataFrame({"fold": rng.integers(0, folds, n), "y": y, "y_pred": pred,
                         "correct": (y == pred).astype(float)})


def _unit_weights(rng, n, k):
    """Bootstrap draws plus rows with zeros (a unit, a class or a fold absent) and one all-zero row."""
    W = _draws(rng, n, k)
    W[: k // 3] *= rng.random((k // 3, n)) < 0.5
    W[k // 3: k // 2, : n // 2] = 0.0
    W[-1] = 0.0
    return W


def _same(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("seed", range(24))
def test_fold_accuracy_and_macro_f1_equal_the_per_draw_loops(seed):
    from embeval_report.metrics import classification as nc

    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 400))
    classes = int(rng.choice([1, 2, 3, 9, 13]))  # one class; more than eight (numpy's pairwise sums unroll by 8)
    folds = int(rng.choice([1, 2, 5, 11]))
    units = _probe_table(rng, n, classes, folds, float(rng.choice([0.0, 0.5, 1.0])))
    if seed % 4 == 3 and classes > 2 and folds > 1:  # an empty class in the middle of the codes and an empty fold
        units = units[(units["y"] != 1) & (units["fold"] != 0)].reset_index(drop=True)
    W = _unit_weights(rng, len(units), int(rng.integers(2, 60)))
    with np.errstate(all="ignore"), __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")
        old_acc, old_f1 = _old_fold_accuracy_weighted(units, W), _old_fold_macro_f1_weighted(units, W)
    assert _same(nc.fold_accuracy_weighted(units, W), old_acc)
    assert _same(nc.fold_macro_f1_weighted(units, W), old_f1)
    f1 = nc.fold_macro_f1_weighted.bind(units)
    assert _same(np.concatenate([f1(W[:5]), f1(W[5:])]), old_f1)
    ones = np.ones((1, len(units)))  # every unit once: the table's own macro-F1
    assert _same(nc.fold_macro_f1_weighted(units, ones), [nc.fold_macro_f1(units)])


def test_masked_row_means_equal_each_rows_mean():
    from embeval_report.metrics.classification import masked_row_means

    rng = np.random.default_rng(3)
    values = rng.random((200, 37)) * 10.0 ** rng.integers(-3, 4, (200, 37))
    mask = rng.random((200, 37)) < rng.random((200, 1))
    mask[:20] = mask[20]  # shared patterns
    mask[-1] = False
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")
        expected = [values[r][mask[r]].mean() for r in range(200)]
    assert _same(masked_row_means(values, mask), expected)


@pytest.mark.parametrize("seed", range(10))
def test_partition_scores_equal_the_per_batch_version(seed):
    from embeval_report.metrics import clustering as cl

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 500))
    ky, kc = int(rng.choice([1, 2, 4, 9])), int(rng.choice([1, 3, 10]))
    y = rng.integers(0, ky, n)
    cluster = np.where(rng.random(n) < 0.7, y % kc, rng.integers(0, kc, n))  # agreeing, and ties
    if seed % 3 == 2 and n > 30:  # an empty class and an empty cluster between the codes
        y, cluster = np.where(y == 1, 0, y), np.where(cluster == 1, 0, cluster)
    units = pd.DataFrame({"y": y, "cluster": cluster})
    W = _unit_weights(rng, n, int(rng.integers(2, 40)))
    with np.errstate(all="ignore"):
        old = _old_weighted_partition_scores(units, W)
        new = cl.weighted_partition_scores(units, W)
        for metric in ("ari", "nmi", "ami"):
            assert _same(new[metric], old[metric]), metric
            assert _same(cl.partition_boot(units, W, metric=metric), old[metric]), metric
            bound = paired.bound_boot(partial(cl.partition_boot, metric=metric), units)
            assert _same(np.concatenate([bound(W[:3]), bound(W[3:])]), old[metric]), metric
