"""Task scorers (issue 41): the aggregates against scikit-learn, the paired bootstrap of whole-table metrics, the
plans' independence of the vectors, and the pairing of two reports' unit tables through a chapter's scorer."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import (accuracy_score, adjusted_mutual_info_score, adjusted_rand_score, f1_score,
                             normalized_mutual_info_score)

from embeval_report.chapters import clustering as cl_chapter
from embeval_report.chapters import node_classification as nc_chapter
from embeval_report.metrics import classification as nc
from embeval_report.metrics import clustering as cl
from embeval_report.metrics import paired
from embeval_report.metrics.labels import prepare_labels
from embeval_report.metrics.scoring import Aggregate, TaskScorer, check_units, joined_units, plan_fingerprint
from embeval_report.report.pairing import ModelReport, paired_rows
from embeval_report.settings import ChapterSettings


def _labelled(n=300, C=4, d=8, seed=0, spread=1.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, n)
    X = rng.standard_normal((C, d))[y] * 2 + spread * rng.standard_normal((n, d))
    return X, np.array([f"c{v}" for v in y], dtype=object)


@pytest.mark.parametrize("seed", range(4))
def test_fold_aggregates_equal_scikit_learn_fold_by_fold(seed):
    rng = np.random.default_rng(seed)
    n, C = int(rng.integers(40, 400)), int(rng.integers(2, 9))
    y, p = rng.integers(0, C, n), rng.integers(0, C, n)
    y[:C] = np.arange(C)  # every class present
    folds = rng.integers(0, 5, n)
    units = pd.DataFrame({"fold": folds, "y": y, "y_pred": p, "correct": (y == p).astype(int)})
    acc = np.mean([accuracy_score(y[folds == f], p[folds == f]) for f in range(5)])
    f1 = np.mean([f1_score(y[folds == f], p[folds == f], labels=np.arange(C), average="macro", zero_division=0)
                  for f in range(5)])
    assert nc.fold_accuracy(units) == acc
    assert nc.fold_macro_f1(units) == pytest.approx(f1, abs=1e-15)


def test_weighted_partition_scores_equal_scikit_learn_on_resamples():
    rng = np.random.default_rng(3)
    n = 600
    y = rng.integers(0, 7, n)
    c = np.where(rng.random(n) < 0.5, y, rng.integers(0, 7, n))
    draws = [np.arange(n)] + [rng.integers(0, n, n) for _ in range(15)]
    W = np.stack([np.bincount(i, minlength=n) for i in draws]).astype(float)
    got = cl.weighted_partition_scores(pd.DataFrame({"y": y, "cluster": c}), W)
    for name, f in (("ari", adjusted_rand_score), ("nmi", normalized_mutual_info_score),
                    ("ami", adjusted_mutual_info_score)):
        ref = np.array([f(y[i], c[i]) for i in draws])
        # ARI and NMI exactly; AMI with the full table's expected MI held fixed: far inside its bootstrap spread
        tol = 1e-12 if name != "ami" else 0.02 * ref[1:].std()
        np.testing.assert_allclose(got[name], ref, rtol=0, atol=tol)
        assert abs(got[name][0] - ref[0]) < 1e-12  # the unweighted table: exact for all three


def _mean(t):
    return float(t["v"].mean())


def _weighted_mean(t, W):
    return (W @ t["v"].to_numpy(float)) / W.sum(1)


def test_paired_bootstrap_finds_a_planted_difference_and_not_a_null_one():
    rng = np.random.default_rng(0)
    n = 400
    base = rng.standard_normal(n)
    a = pd.DataFrame({"v": base + 0.3 * rng.standard_normal(n)})
    b = pd.DataFrame({"v": base + 0.3 * rng.standard_normal(n) + 0.2})
    r, reps = paired.paired_aggregate(_mean, a, b, n_resamples=500)
    assert r.diff == pytest.approx(0.2, abs=0.05) and r.ci_low < r.diff < r.ci_high and r.ci_low > 0
    assert r.p_randomisation < 1e-6
    # the interval of a mean agrees with the paired t interval of the same differences
    t = paired.paired_comparison(a["v"], b["v"])
    assert r.ci_low == pytest.approx(t.ci_low, abs=0.01) and r.ci_high == pytest.approx(t.ci_high, abs=0.01)
    null, _ = paired.paired_aggregate(_mean, a, a.copy(), n_resamples=200)
    assert null.diff == 0 and null.p_randomisation == 1.0


def test_vectorised_bootstrap_uses_the_same_draws_as_the_loop():
    rng = np.random.default_rng(1)
    a, b = pd.DataFrame({"v": rng.random(90)}), pd.DataFrame({"v": rng.random(90)})
    loop, r1 = paired.paired_aggregate(_mean, a, b, n_resamples=300, seed=5)
    fast, r2 = paired.paired_aggregate(_mean, a, b, n_resamples=300, seed=5, boot=_weighted_mean)
    np.testing.assert_allclose(r1, r2, rtol=0, atol=1e-12)
    assert loop.p_randomisation == fast.p_randomisation and loop.ci_low == pytest.approx(fast.ci_low, abs=1e-12)


def test_equivalence_normal_is_inside_exactly_when_tost_rejects():
    lo, hi, p = paired.equivalence_normal(0.001, 0.002, 0.01, 0.05)
    assert -0.01 < lo < hi < 0.01 and p <= 0.025
    lo, hi, p = paired.equivalence_normal(0.008, 0.004, 0.01, 0.05)
    assert hi > 0.01 and p > 0.025


def test_scorer_declaration_and_unit_table_checks():
    agg = Aggregate("mrr", mean_of="rr")
    with pytest.raises(ValueError, match="exactly one"):
        Aggregate("x")
    with pytest.raises(ValueError, match="undeclared"):
        TaskScorer("queries", "query", ("other",), (agg,), None, None, None)
    with pytest.raises(ValueError, match="more than once"):
        check_units(pd.DataFrame({"q": ["a", "a"], "rr": [1, 0]}), "q", ("rr",))
    a = pd.DataFrame({"q": ["x", "y", "z"], "v": [1, 2, 3]})
    b = pd.DataFrame({"q": ["z", "x"], "v": [30, 10]})
    ja, jb = joined_units(a, b, "q")
    assert list(ja["q"]) == list(jb["q"]) == ["x", "z"] and list(jb["v"]) == [10, 30]


@pytest.mark.parametrize("chapter", [nc_chapter, cl_chapter])
def test_label_plans_do_not_depend_on_the_vectors_and_units_reproduce_the_chapter(chapter):
    X, y = _labelled()
    es = type("ES", (), {"metadata": pd.DataFrame({"label": y}), "n": len(X), "ids": np.array(
        [f"e{i}" for i in range(len(X))], dtype=object), "vectors": X})()
    settings = ChapterSettings(options={"probe_entities": 200, "silhouette_sample": 100})
    scorer = chapter.SCORER
    inputs = scorer.inputs(es, None, settings)
    plan = scorer.plan(inputs, settings)
    assert plan_fingerprint(plan) == plan_fingerprint(scorer.plan(scorer.inputs(es, None, settings), settings))
    units = scorer.units(X, inputs, plan)
    assert list(units[scorer.key]) == list(plan.ids)
    values = scorer.values(units)
    if chapter is nc_chapter:
        r = nc.evaluate_node_classification(X, prepare_labels(y, n=len(X)), max_entities=200, train_fractions=())
        assert values == {"accuracy": r.values["accuracy"], "macro_f1": r.values["macro_f1"]}
    else:
        r = cl.evaluate_clustering(X, y, silhouette_sample=100, n_seed_runs=0, sweep=False, n_boot=0, device="cpu")
        assert values == {k: r.values[k] for k in values}
    # a model with other vectors is scored on the very same plan: same units, same folds/sample
    other = scorer.units(2 * X + np.random.default_rng(9).standard_normal(X.shape), inputs, plan)
    assert list(other[scorer.key]) == list(units[scorer.key])
    if "fold" in units:
        assert (other["fold"] == units["fold"]).all()


def _report(tmp: Path, name: str, units: pd.DataFrame, scorer: TaskScorer, chapter: str, plan="p1") -> ModelReport:
    metrics = {a.metric: {"label": a.metric, "direction": a.direction, "value": scorer.values(units)[a.metric]}
               for a in scorer.aggregates}
    info = {"units": {"key": scorer.key, "unit": scorer.unit, "means": [a.metric for a in scorer.aggregates
                                                                        if a.is_mean],
                      "aggregates": [a.metric for a in scorer.aggregates if not a.is_mean], "plan": plan}}
    return ModelReport(name, tmp / name, {}, {chapter: {"metrics": metrics, "info": info}}, {chapter: units})


def test_pairing_compares_whole_table_metrics_through_the_scorer(tmp_path):
    rng = np.random.default_rng(0)
    n = 500
    y = rng.integers(0, 5, n)
    ids = [f"e{i}" for i in range(n)]

    def units(p_correct):
        pred = np.where(rng.random(n) < p_correct, y, rng.integers(0, 5, n))
        return pd.DataFrame({"entity": ids, "fold": np.arange(n) % 5, "label": y.astype(str),
                             "predicted": pred.astype(str), "y": y, "y_pred": pred, "correct": (pred == y).astype(int)})

    scorer = nc_chapter.SCORER
    A = _report(tmp_path, "A", units(0.5), scorer, "node_classification")
    B = _report(tmp_path, "B", units(0.7), scorer, "node_classification")
    C = _report(tmp_path, "C", A.units["node_classification"].copy(), scorer, "node_classification", plan="p2")
    rows = {r["metric"]: r for r in paired_rows([A, B])}
    assert set(rows) == {"accuracy", "macro_f1"}
    for r in rows.values():
        assert r["differences"] is None and r["same_plan"] is True
        assert r["result"].diff > 0.1 and r["result"].ci_low > 0 and r["result"].p_randomisation < 1e-4
        assert r["result"].mean_a == scorer.aggregate(r["metric"]).value(A.units["node_classification"])
    same = {r["metric"]: r for r in paired_rows([A, C])}
    assert all(r["result"].diff == 0 and r["same_plan"] is False for r in same.values())
    table = paired.compare_table(list(rows.values()))
    assert set(table["verdict"]) == {"B better"}


def test_rank_intervals_of_a_whole_table_metric():
    rng = np.random.default_rng(5)
    n = 600
    y = rng.integers(0, 4, n)

    def table(p_correct):
        pred = np.where(rng.random(n) < p_correct, y, rng.integers(0, 4, n))
        return pd.DataFrame({"fold": np.arange(n) % 5, "y": y, "y_pred": pred, "correct": (pred == y).astype(int)})

    tables = {"weak": table(0.3), "good": table(0.8), "good too": table(0.8), "best": table(0.97)}
    ranks = paired.rank_intervals_of(tables, nc.fold_macro_f1, n_boot=200).set_index("model")
    assert ranks.loc["best", "rank"] == 1 and (ranks.loc["best", ["rank_low", "rank_high"]] == 1).all()
    assert ranks.loc["weak", "rank"] == 4 and ranks.loc["weak", "rank_low"] == 4
    # two models of equal quality cannot be separated: their intervals overlap
    assert ranks.loc["good", "rank_low"] <= ranks.loc["good too", "rank_high"]
    assert ranks.loc["good too", "rank_low"] <= ranks.loc["good", "rank_high"]
    assert ranks.loc["best", "mean"] == nc.fold_macro_f1(tables["best"])



def test_a_table_compared_again_reuses_its_replicates_and_gives_the_same_result():
    """The remedy checks compare one recorded table with several remedied ones: its bootstrap replicates are kept
    and reused (the draws are the same), so each comparison is bit for bit the one computed afresh, and a table
    whose contents differ is not mistaken for it."""
    from embeval_report.metrics import paired as pm

    rng = np.random.default_rng(3)
    a = pd.DataFrame({"y": rng.integers(0, 3, 80), "p": rng.integers(0, 3, 80)})
    bs = [a.assign(p=np.where(rng.random(80) < 0.3, rng.integers(0, 3, 80), a.p)) for _ in range(3)]

    def acc(t):
        return float((t.y == t.p).mean())

    calls = []

    def counted(t):
        calls.append(len(t))
        return acc(t)

    pm._HELD.clear()
    fresh = []
    for b in bs:
        pm._HELD.clear()
        fresh.append(pm.paired_aggregate(acc, a, b, n_resamples=50, seed=4)[0])
    pm._HELD.clear()
    for b, want in zip(bs, fresh):
        got = pm.paired_aggregate(counted, a, b, n_resamples=50, seed=4)[0]
        assert (got.diff, got.ci_low, got.ci_high, got.p_randomisation) == (
            want.diff, want.ci_low, want.ci_high, want.p_randomisation)
    assert len(calls) == 3 * (2 + 50) + 50  # a's 50 replicates once, b's each time, fn(a) and fn(b) each time
    changed = a.assign(p=(a.p + 1) % 3)
    other = pm.paired_aggregate(counted, changed, bs[0], n_resamples=50, seed=4)[0]
    pm._HELD.clear()
    assert other.ci_low == pm.paired_aggregate(acc, changed, bs[0], n_resamples=50, seed=4)[0].ci_low
