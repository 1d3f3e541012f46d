"""Link prediction against independent references: hand-computed ranks with ties, brute-force numpy
scoring, PyKEEN's rank-based metric functions (test-only dependency; skipped when absent),
scikit-learn's AUC / AP, brute-force DeLong, closed forms for chance values, and planted structure."""
import json

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from embeval_report import kernels, stats
from embeval_report.kernels import edge_ranks
from embeval_report.chapters import temporal_link_prediction as tchapter
from embeval_report.metrics import edge_probes as ep
from embeval_report.metrics import graph as g
from embeval_report.metrics import linkpred as lp
from embeval_report.metrics import ranks as rk
from embeval_report.metrics import temporal as tp
from embeval_report.metrics.thresholds import cohens_d_quality, verdict


# ---------------------------------------------------------------------------------------------
# Ranks and ties
# ---------------------------------------------------------------------------------------------

def test_hand_computed_ranks_with_ties_all_three_policies():
    # 1-d vectors: source x = 1, so the dot score of a candidate is its own value
    X = np.array([[1.0], [2.0], [3.0], [2.0], [2.0], [1.0], [5.0]])
    # edge 0 -> 1 (score 2) against negatives 2 (3), 3 (2), 4 (2), 5 (1):
    #   optimistic 1 + #{> 2} = 2, pessimistic 1 + #{>= 2} = 4, realistic 3
    # edge 0 -> 6 (score 5) against 2, 3, padding: rank 1 under every policy
    cand = np.array([[1, 2, 3, 4, 5], [6, 2, 3, -1, -1]])
    for engine in ("torch", "numpy"):
        cs = rk.score_candidates(X, np.array([0, 0]), cand, score="dot", device="cpu", engine=engine)
        np.testing.assert_array_equal(cs.raw.optimistic, [2, 1])
    r = cs.raw
    np.testing.assert_array_equal(r.optimistic, [2, 1])
    np.testing.assert_array_equal(r.pessimistic, [4, 1])
    np.testing.assert_array_equal(r.get("realistic"), [3, 1])
    np.testing.assert_array_equal(r.n_candidates, [5, 3])
    assert np.isnan(cs.scores[1, 3:]).all() and cs.scores[0, 0] == 2
    v = rk.rank_metrics(r.get("pessimistic"))
    assert v["mean_rank"] == 2.5 and v["mrr"] == pytest.approx((1 / 4 + 1) / 2) and v["hits_at_1"] == 0.5
    with pytest.raises(ValueError, match="ties must be one of"):
        r.get("random")


#: every score the project supports, as a full float64 n x n matrix in one NumPy line (independent of pair_scores)
SCORE_MATRIX = {
    "dot": lambda X: X @ X.T,
    "cosine": lambda X: (X / np.linalg.norm(X, axis=1, keepdims=True)) @ (X / np.linalg.norm(X, axis=1, keepdims=True)).T,
    "neg_l2": lambda X: -np.sqrt(((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)),
}


def test_the_numpy_oracle_covers_every_score():
    assert set(SCORE_MATRIX) == set(rk.SCORES)


def brute_ranks(S, src, cand):
    """Optimistic and pessimistic rank of each row's first candidate among its candidates under scores S."""
    out = []
    for s, row in zip(src, cand):
        sc = S[s, row[row >= 0]]
        out.append((1 + (sc[1:] > sc[0]).sum(), 1 + (sc[1:] >= sc[0]).sum()))
    return np.array(out).T


@pytest.mark.parametrize("engine", ["torch", "numpy"])
@pytest.mark.parametrize("score", ["dot", "cosine", "neg_l2"])
def test_batched_scoring_matches_brute_force_and_chunking(score, engine, monkeypatch):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((60, 8)).astype(np.float32)
    src = rng.integers(0, 60, 40)
    cand = rng.integers(0, 60, (40, 12))
    cand[::5, -3:] = -1  # some padding
    S = SCORE_MATRIX[score](X.astype(np.float64))
    opt, pess = brute_ranks(S, src, cand)
    cs = rk.score_candidates(X, src, cand, score=score, device="cpu", engine=engine)
    np.testing.assert_array_equal(cs.raw.optimistic, opt)
    np.testing.assert_array_equal(cs.raw.pessimistic, pess)
    np.testing.assert_allclose(cs.scores[cand >= 0], np.take_along_axis(S[src], np.maximum(cand, 0), 1)[cand >= 0],
                               rtol=1e-5, atol=1e-5)
    assert np.isnan(cs.scores[cand < 0]).all()
    for s, row in zip(src, cand):  # the exact float64 re-scoring the tie policy relies on
        np.testing.assert_allclose(rk.pair_scores(X, np.full((row >= 0).sum(), s), row[row >= 0], score),
                                   S[s, row[row >= 0]], rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 2000)  # a few rows per chunk: same result
    monkeypatch.setattr(edge_ranks, "CPU_CHUNK_BYTES", 2000)
    cs2 = rk.score_candidates(X, src, cand, score=score, device="cpu", engine=engine)
    np.testing.assert_array_equal(cs2.raw.optimistic, opt)
    np.testing.assert_allclose(cs2.scores, cs.scores, equal_nan=True)


def test_filtered_vs_raw_on_a_constructed_case():
    # source 0; true destination 1 scores 1.0; negatives 2 (3.0), 3 (2.0), 4 (0.5).
    # 2 is also a real edge of the graph (0-2) and 3 is an edge in the other direction (3-0) of another relation.
    X = np.array([[1.0], [1.0], [3.0], [2.0], [0.5]])
    known = g.KnownEdges.from_edges(5, (np.array([0, 0, 3]), np.array([1, 2, 0]), np.array([0, 0, 1])))
    cs = rk.score_candidates(X, np.array([0]), np.array([[1, 2, 3, 4]]), known=known, rel=np.array([0]), device="cpu")
    assert cs.raw.get("realistic")[0] == 3          # beaten by 2 and 3
    assert cs.filtered.get("realistic")[0] == 2     # 2 removed (known, same relation); 3 stays (other relation)
    assert cs.filtered.n_candidates[0] == 3 and cs.removed.tolist() == [[True, False, False]]
    pos, neg = cs.pooled(filtered=True)
    assert sorted(neg) == [0.5, 2.0]


# ---------------------------------------------------------------------------------------------
# Metrics against PyKEEN, closed forms, scikit-learn
# ---------------------------------------------------------------------------------------------

def test_rank_metrics_and_adjustments_match_pykeen():
    pk = pytest.importorskip("pykeen.metrics.ranking")
    rng = np.random.default_rng(0)
    N = rng.integers(5, 120, 500)
    ranks = np.floor(rng.random(500) * N) + 1 + 0.5 * rng.integers(0, 2, 500)  # realistic ranks can be halves
    ranks = np.minimum(ranks, N)
    v = rk.rank_metrics(ranks)
    e = rk.expected_metrics(N)
    assert v["mean_rank"] == pytest.approx(pk.ArithmeticMeanRank()(ranks))
    assert v["mrr"] == pytest.approx(pk.InverseHarmonicMeanRank()(ranks))
    for k in (1, 10, 50):
        assert v[f"hits_at_{k}"] == pytest.approx(pk.HitsAtK(k=k)(ranks))
    assert rk.adjust("mean_rank", v["mean_rank"], e) == pytest.approx(
        pk.AdjustedArithmeticMeanRankIndex()(ranks, num_candidates=N))
    assert rk.adjust("mrr", v["mrr"], e) == pytest.approx(pk.AdjustedInverseHarmonicMeanRank()(ranks, num_candidates=N))
    assert rk.adjust("hits_at_10", v["hits_at_10"], e) == pytest.approx(
        pk.AdjustedHitsAtK(k=10)(ranks, num_candidates=N))
    assert e["mean_rank"] == pytest.approx(pk.ArithmeticMeanRank().expected_value(num_candidates=N))
    assert e["mrr"] == pytest.approx(pk.InverseHarmonicMeanRank().expected_value(num_candidates=N))


def test_expected_values_are_the_uniform_rank_averages():
    for n in (1, 2, 7, 101):
        r = np.arange(1, n + 1)
        e = rk.expected_metrics([n])
        assert e["mean_rank"] == pytest.approx(r.mean())
        assert e["mrr"] == pytest.approx((1 / r).mean())  # H_n / n
        assert e["hits_at_10"] == pytest.approx((r <= 10).mean())
    assert rk.harmonic(4) == pytest.approx(1 + 1 / 2 + 1 / 3 + 1 / 4)


def brute_delong(pos, neg):
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    v10, v01 = psi.mean(1), psi.mean(0)
    return psi.mean(), np.sqrt(v10.var(ddof=1) / len(pos) + v01.var(ddof=1) / len(neg))


def test_auc_and_delong_interval():
    rng = np.random.default_rng(2)
    pos, neg = np.round(rng.normal(0.6, 1, 300), 1), np.round(rng.normal(0, 1, 500), 1)  # rounded: many ties
    auc, lo, hi = rk.auc_delong(pos, neg)
    assert auc == pytest.approx(roc_auc_score(np.r_[np.ones(300), np.zeros(500)], np.r_[pos, neg]))
    ref, se = brute_delong(pos, neg)
    assert auc == pytest.approx(ref)
    assert (lo, hi) == pytest.approx((ref - 1.959964 * se, ref + 1.959964 * se), rel=1e-5)
    # the tables of relations and of temporal cuts show the AUC without its interval: the same value, bit for bit
    assert lp.auc_value(pos, neg) == auc and np.isnan(lp.auc_value(pos, neg[:0]))


def test_placements_count_below_and_half_the_ties():
    """The placement kernel (numpy's sorted search on the CPU, torch's where a value is NaN) against a brute-force
    count: #{b < a_i} + ½ #{b = a_i}, ties and infinities included."""
    import torch

    from embeval_report.kernels.edge_ranks import placements

    rng = np.random.default_rng(7)
    for case in range(60):
        a, b = np.round(rng.standard_normal(rng.integers(0, 40)), 1), np.round(rng.standard_normal(rng.integers(0, 60)), 1)
        if case % 5 == 0 and len(b):
            b[0] = np.inf
        if case % 6 == 0 and len(a):
            a[0] = -np.inf
        ref = (b[None, :] < a[:, None]).sum(1) + 0.5 * (b[None, :] == a[:, None]).sum(1)
        got = placements(a, b, torch.device("cpu"))
        assert got.dtype == np.float64 and np.array_equal(got, ref)
    a, b = np.array([0.5, np.nan]), np.array([0.0, 1.0, np.nan])  # NaN: torch's search, as before
    assert placements(a, b, torch.device("cpu"))[0] == 1.0


def test_average_precision_matches_scikit_learn_with_ties_and_weights():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 400)
    s = np.round(rng.standard_normal(400), 1) + 0.7 * y
    assert ep.average_precision(y, s) == pytest.approx(average_precision_score(y, s))
    w = rng.integers(0, 3, (3, 400))
    for row, got in zip(w, ep.average_precision(y, s, w)):
        assert got == pytest.approx(average_precision_score(y, s, sample_weight=row))
    # resampling counts (integers) are accumulated per class in integers: the float cumulative sums' value bit for
    # bit, in blocks of rows (51 rows: no block of one, whose sum would round differently)
    w = rng.integers(0, 4, (51, 400))
    counted = ep.average_precision(y, s, w)
    assert np.array_equal(counted, ep.average_precision(y, s, w.astype(float)))
    assert counted == pytest.approx([average_precision_score(y, s, sample_weight=row) for row in w], rel=1e-12)
    draws = ep._ap_draws(y, 200, seed=4)
    assert draws.sum(1).tolist() == [400] * 200 and (draws[:, y == 1].sum(1) == (y == 1).sum()).all()
    assert ep._ap_ci(y, s, 0.95, seed=4) == ep._ap_ci(y, s, 0.95, seed=4, draws=draws)


def test_cohens_d_forms_and_bands():
    a, b = np.array([2.0, 4.0, 6.0]), np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    sp = np.sqrt((2 * a.var(ddof=1) + 4 * b.var(ddof=1)) / 6)
    assert ep.cohens_d(a, b) == pytest.approx((4 - 3) / sp)
    assert ep.cohens_d_seed(a, b) == pytest.approx(1 / np.sqrt((a.var() + b.var()) / 2), rel=1e-8)
    assert [cohens_d_quality(x) for x in (2.5, 1.7, 1.2, 0.7, 0.5, -1)] == [
        "excellent", "good", "moderate", "poor", "very_poor", "very_poor"]
    assert [verdict("negative_score_cohens_d", x) for x in (1.2, 0.7, 0.3)] == ["healthy", "concerning", "problematic"]
    assert [verdict("link_prediction_auc", x) for x in (0.95, 0.85, 0.7)] == ["healthy", "concerning", "problematic"]
    lo, hi = stats.cohens_d_ci(0.8, 50, 60)
    se = np.sqrt(110 / 3000 + 0.64 / 220)
    assert (lo, hi) == pytest.approx((0.8 - 1.959964 * se, 0.8 + 1.959964 * se), rel=1e-5)


def test_edge_operators():
    X = np.array([[1.0, -2.0], [3.0, 4.0]])
    np.testing.assert_allclose(ep.edge_features(X, [0], [1], "hadamard"), [[3, -8]])
    np.testing.assert_allclose(ep.edge_features(X, [0], [1], "average"), [[2, 1]])
    np.testing.assert_allclose(ep.edge_features(X, [0], [1], "weighted_l1"), [[2, 6]])
    np.testing.assert_allclose(ep.edge_features(X, [0], [1], "weighted_l2"), [[4, 36]])
    # float32 vectors: each operator in float64 on the ends cast to float64, bit for bit
    rng = np.random.default_rng(5)
    X = (rng.standard_normal((50, 8)) * rng.choice([1e-30, 1.0, 1e20], (50, 8))).astype(np.float32)
    u, v = rng.integers(0, 50, 200), rng.integers(0, 50, 200)
    a, b = X[u].astype(np.float64), X[v].astype(np.float64)
    for op, ref in (("hadamard", a * b), ("average", (a + b) / 2), ("weighted_l1", np.abs(a - b)),
                    ("weighted_l2", (a - b) ** 2)):
        got = ep.edge_features(X, u, v, op)
        assert got.dtype == np.float64 and np.array_equal(got.view(np.int64), ref.view(np.int64))
    with pytest.raises(ValueError, match="operator must be one of"):
        ep.edge_features(X, u, v, "cosine")


def test_operator_probes_side_by_side_equal_one_after_the_other(monkeypatch):
    # the operators' pipelines in threads (single-threaded BLAS) give the sequential run's numbers bit for bit
    rng = np.random.default_rng(6)
    X = rng.standard_normal((400, 48)).astype(np.float32)
    pairs = [tuple(rng.integers(0, 400, (2, k))) for k in (3000, 3000, 800, 800)]
    threaded = ep.operator_probes(X, *pairs, seed=2)
    monkeypatch.setattr(ep, "PARALLEL_FEATURE_BYTES", 0)
    sequential = ep.operator_probes(X, *pairs, seed=2)
    assert threaded.table.equals(sequential.table) and threaded.best == sequential.best
    assert list(threaded.table["name"]) == [*ep.OPERATORS, "score"]
    for name, curve in sequential.curves.items():
        assert all(np.array_equal(curve[k], threaded.curves[name][k]) for k in ("fpr", "tpr", "precision", "recall"))
    # the raw score's row: scikit-learn's average precision (the same step integral, bit for bit) and ROC-AUC
    s = rk.pair_scores(X, np.r_[pairs[2][0], pairs[3][0]], np.r_[pairs[2][1], pairs[3][1]], "dot")
    y = np.r_[np.ones(800), np.zeros(800)]
    row = sequential.table.set_index("name").loc["score"]
    assert row["average precision"] == average_precision_score(y, s)
    assert row["ROC-AUC"] == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def test_mean_ci_methods():
    x = np.random.default_rng(0).random(500)
    lo, hi, how = stats.mean_ci(x)
    assert lo < x.mean() < hi and "BCa" in how
    # the unified stats.mean_ci bootstraps up to stats.BCA_MAX = 5000 values (linkpred's own copy stopped at 2000)
    y = np.random.default_rng(0).random(stats.BCA_MAX + 1)
    lo, hi, how = stats.mean_ci(y)
    assert "normal" in how and hi - lo == pytest.approx(2 * 1.959964 * y.std(ddof=1) / np.sqrt(len(y)), rel=1e-5)


# ---------------------------------------------------------------------------------------------
# Planted structure
# ---------------------------------------------------------------------------------------------

def planted(n=1000, blocks=50, d=32, noise=0.3, n_edges=1500, seed=0, t=False):
    """A sparse stochastic block model (90 % of edges inside a block) and vectors = block centre + noise."""
    rng = np.random.default_rng(seed)
    block = rng.integers(0, blocks, n)
    centres = rng.standard_normal((blocks, d))
    X = (centres[block] + noise * rng.standard_normal((n, d))).astype(np.float32)
    src = rng.integers(0, n, n_edges)
    same = rng.random(n_edges) < 0.9
    members = [np.flatnonzero(block == b) for b in range(blocks)]
    dst = np.array([rng.choice(members[block[s]]) if sm else rng.integers(0, n) for s, sm in zip(src, same)])
    keep = src != dst
    key = pd.Series(np.minimum(src, dst) * n + np.maximum(src, dst))
    keep &= ~key.duplicated().to_numpy()
    time = rng.random(n_edges)[keep] if t else None
    return X, g.EdgeList(src[keep], dst[keep], time=time, file="edges.csv")


def test_planted_structure_beats_heuristics_and_random_vectors_score_at_chance():
    X, e = planted()
    data = g.build_link_data(e, len(X), split="random", n_negatives=100)
    r = lp.evaluate_link_prediction(X, data, probe=True, heuristics=True, max_heuristic_queries=300)
    b = r.baselines.set_index("name")
    assert r.values["amri"] > 0.6 and r.values["auc"] > 0.8
    assert b.loc["embedding", "MRR"] > b.drop("embedding")["MRR"].max() + 0.1
    assert r.values["probe_roc_auc"] > 0.8
    # every metric CI contains its value, and the metric names are the contract
    assert set(r.metrics) == set(lp.METRICS)
    for m in r.metrics.values():
        assert m.ci_low <= m.value <= m.ci_high, m.name
        assert "raw, realistic ties, 100 negatives, dot" in m.label or m.name.startswith(("probe", "negative", "false"))
    # random vectors: MRR at its chance value (1/m') H_{m'} with m' = 101 candidates
    R = np.random.default_rng(5).standard_normal(X.shape).astype(np.float32)
    rr = lp.evaluate_link_prediction(R, data, probe=False, heuristics=False)
    chance = rk.harmonic(101) / 101
    se = (1 / rr.ranks).std(ddof=1) / np.sqrt(len(rr.ranks))
    assert abs(rr.values["mrr"] - chance) < 4 * se
    assert abs(rr.values["amri"]) < 0.1 and abs(rr.values["auc"] - 0.5) < 0.05


def test_quality_and_false_negatives_count_real_edges():
    X, e = planted(n=200, blocks=5, n_edges=2500)
    data = g.build_link_data(e, len(X), split="random", n_negatives=50)
    r = lp.evaluate_link_prediction(X, data, probe=False, heuristics=False)
    cand = data.candidates[:, 1:]
    u = np.repeat(data.test.src, cand.shape[1])
    is_edge = data.known.contains(u, cand.ravel(), np.zeros(cand.size, int))
    assert r.quality.n_false == is_edge.sum() and r.values["false_negative_rate"] == pytest.approx(is_edge.mean())
    pos, neg = r.cs.pooled(False)
    assert r.values["negative_score_cohens_d"] == pytest.approx(ep.cohens_d(pos, neg))
    assert r.quality.mw_auc == pytest.approx(r.values["auc"], abs=1e-9)  # U / (n+ n-) is the AUC
    assert r.quality.quality == cohens_d_quality(r.values["negative_score_cohens_d"])
    tt = r.tie_table.set_index(["ranks", "ties"])
    assert tt.loc[("filtered", "realistic"), "MRR"] >= tt.loc[("raw", "realistic"), "MRR"]


def test_relation_table_global_row_is_the_count_weighted_average():
    X, e = planted(n=300, blocks=10, n_edges=2500, seed=4)
    e = g.EdgeList(e.src, e.dst, relation=np.where(e.src % 3 == 0, "a", "b").astype(object), file="e.csv")
    data = g.build_link_data(e, len(X), split="random", n_negatives=30)
    r = lp.evaluate_link_prediction(X, data, probe=False, heuristics=False)
    t = r.relation_table.set_index("relation")
    per = t.loc[["a", "b"]]
    glob = t.loc["all test edges (PBG global average)"]
    assert glob["MRR"] == pytest.approx((per["MRR"] * per["test edges"]).sum() / per["test edges"].sum())
    assert glob["MRR"] == pytest.approx(r.values["mrr"])
    assert t.loc["mean over relations (macro)", "MRR"] == pytest.approx(per["MRR"].mean())


# ---------------------------------------------------------------------------------------------
# Temporal
# ---------------------------------------------------------------------------------------------

def test_temporal_evaluation_never_leaks_and_reports_horizons():
    X, e = planted(n=300, blocks=10, n_edges=3000, t=True)
    t = tp.evaluate_temporal(X, e, len(X), n_negatives=50, n_bins=4, max_heuristic_queries=200)
    d = t.data
    assert d.train.time.max() < d.test.time.min()
    assert t.horizon["test edges"].iloc[1:].sum() == len(d.test) and len(t.horizon) == 5
    assert set(t.metrics) == set(tp.TEMPORAL_METRICS)
    assert t.values["temporal_mrr"] > 2 * rk.harmonic(51) / 51
    assert len(t.cuts) == 5 and (np.diff(t.cuts["train edges"]) > 0).all()
    assert "Why random splits leak" in tchapter.temporal_narrative(t)
    assert "timestamp" in tchapter.temporal_unavailable(None)


def test_the_temporal_plans_own_cut_is_scored_once(monkeypatch):
    """The cut at the plan's own train share is the plan's split: its ranks and heuristic are reused (one scoring
    fewer), and the table of cuts is the one that scores every cut afresh."""
    X, e = planted(n=300, blocks=10, n_edges=3000, t=True)
    calls = []
    score = tp.score_candidates
    monkeypatch.setattr(tp, "score_candidates", lambda *a, **k: calls.append(1) or score(*a, **k))
    kw = dict(n_negatives=50, n_bins=4, max_heuristic_queries=200)
    once = tp.evaluate_temporal(X, e, len(X), **kw)
    reused = len(calls)
    monkeypatch.setattr(tp, "_same_split", lambda a, b: False)
    calls.clear()
    every = tp.evaluate_temporal(X, e, len(X), **kw)
    assert reused == len(calls) - 1
    pd.testing.assert_frame_equal(once.cuts, every.cuts)
    assert once.values == every.values


# ---------------------------------------------------------------------------------------------
# The chapters, end to end
# ---------------------------------------------------------------------------------------------

def test_chapters_end_to_end(tmp_path):
    from embeval_report.cli import main

    X, e = planted(n=240, blocks=8, n_edges=1800, t=True)
    ids = [f"v<{i}>&" for i in range(len(X))]
    np.save(tmp_path / "v.npy", X)
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    stamps = pd.Timestamp("2024-01-01") + pd.to_timedelta(e.time * 100, unit="D")
    pd.DataFrame({"src": np.array(ids)[e.src], "dst": np.array(ids)[e.dst],
                  "timestamp": stamps.strftime("%Y-%m-%d")}).to_csv(tmp_path / "e.csv", index=False)
    pd.DataFrame({"src": np.array(ids)[e.src], "dst": np.array(ids)[e.dst]}).to_csv(tmp_path / "plain.csv", index=False)
    (tmp_path / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nedges: e.csv\nscore: cosine\n")
    (tmp_path / "p.yaml").write_text("vectors: v.npy\nids: ids.txt\nedges: plain.csv\n")
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--formats", "html",
                 "--chapters", "link_prediction,temporal_link_prediction"]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    recorded = set(doc["chapters"]["link_prediction"]["metrics"])
    assert {m for m in recorded if not m.startswith("mde_")} == set(lp.METRICS)
    assert {m for m in recorded if m.startswith("mde_")} == {"mde_mean_rank", "mde_mrr", "mde_hits_at_1", "mde_hits_at_10",
                                                             "mde_hits_at_50"}
    recorded = set(doc["chapters"]["temporal_link_prediction"]["metrics"])
    assert {m for m in recorded if not m.startswith("mde_")} == set(tp.TEMPORAL_METRICS)
    assert {m for m in recorded if m.startswith("mde_")} == {"mde_temporal_mrr", "mde_temporal_hits_at_10"}
    units = pd.read_csv(out / "results" / "units" / "temporal_link_prediction.csv", keep_default_na=False)
    t_info = json.loads((out / "results" / "temporal_link_prediction.json").read_text())["info"]
    assert len(units) == t_info["units"]["stats"]["temporal_mrr"]["n"] > 0 and units["edge"].is_unique
    assert units["horizon"].isin([row["horizon"] for row in t_info["by_horizon"]]).all()
    html = (out / "report.html").read_text()
    assert "raw, realistic ties, 100 negatives, cosine" in html and "Why random splits leak" in html
    out2 = tmp_path / "out2"
    assert main(["run", str(tmp_path / "p.yaml"), "--out", str(out2), "--formats", "html",
                 "--chapters", "temporal_link_prediction"]) == 0
    doc2 = json.loads((out2 / "metrics.json").read_text())
    assert doc2["chapters"]["temporal_link_prediction"]["status"] == "ok"
    assert "No timestamps" in (out2 / "report.html").read_text()


# ---------------------------------------------------------------------------------------------
# Degenerate inputs: the chapters run with what can be computed, or are skipped with a reason
# ---------------------------------------------------------------------------------------------

def test_undefined_values_warn_instead_of_a_silent_nan():
    from embeval_report.errors import UndefinedMetricWarning
    with pytest.warns(UndefinedMetricWarning, match="DeLong interval of the AUC undefined"):
        auc, lo, hi = rk.auc_delong([1.0], [0.0, 2.0, 0.5])
    assert auc == pytest.approx(2 / 3) and np.isnan(lo) and np.isnan(hi)
    with pytest.warns(UndefinedMetricWarning, match="AUC undefined: 3 positive and 0 negative"):
        assert np.isnan(rk.auc_delong([1.0, 2.0, 3.0], [])[0])
    with pytest.warns(UndefinedMetricWarning, match="chance-adjusted mean rank is undefined"):
        assert np.isnan(rk.adjust("mean_rank", 1.0, rk.expected_metrics([1, 1])))
    with pytest.warns(UndefinedMetricWarning, match="Cohen's d of positive vs negative scores is undefined"):
        q = ep.negative_quality(np.ones(5), np.ones(50), n_false=0, n_negatives=50, auc=0.5, sampled=True,
                                strategy="uniform")
    assert np.isnan(q.cohens_d) and q.rules == ("poor_auc",)  # NaN d triggers neither d rule
    q1 = ep.negative_quality(np.array([2.0]), np.arange(50.0) / 100, n_false=30, n_negatives=50, auc=0.9, sampled=False,
                             strategy=None)
    assert np.isnan(q1.pos_sd) and q1.rules == ("false_negatives",)


def _manifest(tmp_path, X, edges: dict, extra: str = ""):
    np.save(tmp_path / "v.npy", np.asarray(X, np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(f"n{i}" for i in range(len(X))))
    pd.DataFrame(edges).to_csv(tmp_path / "e.csv", index=False)
    (tmp_path / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nedges: e.csv\n" + extra)
    return tmp_path / "m.yaml"


def _run_chapters(tmp_path, path, **options) -> dict:
    """Both chapters as the runner and their notebooks run them: the precheck, then compute and every
    ``show_`` function; a chapter's entry is its report, or the reason it is skipped."""
    import warnings

    from embeval_report.chapters import link_prediction as lchapter
    from embeval_report.chapters import open_chapter
    from embeval_report.errors import ChapterSkipped
    out = {}
    with warnings.catch_warnings():  # open_chapter installs the notebook's warning display
        for name, module in (("link_prediction", lchapter), ("temporal_link_prediction", tchapter)):
            try:  # re-run by hand (no runner): open_chapter runs the chapter's check
                ctx = open_chapter(name, str(path), None, str(tmp_path / "results"), {"options": options})
            except ChapterSkipped as e:
                out[name] = str(e)
                continue
            try:
                out[name] = report = module.compute(ctx)
            except ChapterSkipped as e:
                out[name] = str(e)
                continue
            for show in [f for f in module.__all__ if f.startswith("show_")]:
                getattr(module, show)(report)
    return out


def _info(tmp_path, name):
    return json.loads((tmp_path / "results" / f"{name}.json").read_text())["info"]


def _texts(reports) -> str:
    from embeval_report.chapters import link_prediction as lchapter
    out = []
    if not isinstance(reports["link_prediction"], str):
        r = reports["link_prediction"].result
        out += [lchapter.narrative(r), lchapter.protocol_markdown(r), lchapter.quality_table(r.quality).to_string(),
                *lchapter.recommendations(r.quality)]
    t = reports["temporal_link_prediction"]
    if not isinstance(t, str) and t.result is not None:
        out += [tchapter.temporal_narrative(t.result), tchapter.temporal_protocol_markdown(t.result)]
    return "\n".join(out)


def test_three_points_in_two_dimensions(tmp_path, capsys):
    rng = np.random.default_rng(0)
    path = _manifest(tmp_path, rng.standard_normal((3, 2)),
                     {"src": ["n0", "n1", "n0"], "dst": ["n1", "n2", "n2"], "timestamp": [1, 2, 3]})
    reps = _run_chapters(tmp_path, path)
    r = reps["link_prediction"].result
    assert len(r.data.test) == 1 and r.metrics["mrr"].ci_low is None and r.probes is None
    info = _info(tmp_path, "link_prediction")
    assert any(w.startswith("the interval of a mean needs at least 2 test edges") for w in info["warnings"])
    assert reps["temporal_link_prediction"].result.metrics["random_split_mrr_gap"].ci_low is None
    assert " nan" not in _texts(reps) and "Traceback" not in capsys.readouterr().out


def test_identical_rows_tie_every_score(tmp_path, capsys):
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 200, 600), rng.integers(0, 200, 600)
    path = _manifest(tmp_path, np.ones((200, 8)), {"src": [f"n{i}" for i in src], "dst": [f"n{i}" for i in dst],
                                                    "timestamp": rng.random(600)})
    reps = _run_chapters(tmp_path, path)
    r = reps["link_prediction"].result
    np.testing.assert_array_equal(r.ranks, (1 + r.n_candidates) / 2)  # realistic rank: the middle of all ties
    assert r.values["auc"] == 0.5 and r.metrics["negative_score_cohens_d"].to_json()["value"] is None
    assert r.metrics["negative_score_cohens_d"].verdict is None
    assert any("Cohen's d" in w for w in _info(tmp_path, "link_prediction")["warnings"])
    t = reps["temporal_link_prediction"].result
    assert "Performance decays" not in tchapter.temporal_narrative(t)  # a zero-width interval says nothing
    text = _texts(reps)
    assert " nan" not in text and "undefined" in text and "Traceback" not in capsys.readouterr().out


def test_more_dimensions_than_points(tmp_path):
    rng = np.random.default_rng(2)
    src, dst = rng.integers(0, 10, 30), rng.integers(0, 10, 30)
    path = _manifest(tmp_path, rng.standard_normal((10, 50)), {"src": [f"n{i}" for i in src],
                                                                "dst": [f"n{i}" for i in dst], "timestamp": src + dst})
    reps = _run_chapters(tmp_path, path)
    assert set(reps["link_prediction"].result.metrics) <= set(lp.METRICS)
    assert reps["temporal_link_prediction"].result is not None and " nan" not in _texts(reps)


def test_two_edges_one_train_one_test(tmp_path):
    path = _manifest(tmp_path, np.random.default_rng(3).standard_normal((20, 4)),
                     {"src": ["n0", "n1"], "dst": ["n1", "n2"], "timestamp": [1, 2]})
    reps = _run_chapters(tmp_path, path)
    r, t = reps["link_prediction"].result, reps["temporal_link_prediction"].result
    assert len(r.data.train) == len(r.data.test) == 1
    assert len(t.data.test) == 1 and "mrr_change_over_horizon" not in t.metrics
    assert " nan" not in _texts(reps)


def test_too_little_input_is_skipped_with_a_reason(tmp_path):
    X = np.random.default_rng(4).standard_normal((20, 4))
    reps = _run_chapters(tmp_path, _manifest(tmp_path, X, {"src": ["n0", "n3"], "dst": ["n1", "n3"],
                                                           "timestamp": [1, 2]}))  # one edge left: n3-n3 is a loop
    assert reps["link_prediction"].startswith("needs at least 2 edges") and "1 after dropping" in reps["link_prediction"]
    assert "two or more distinct times" in reps["temporal_link_prediction"]
    two = tmp_path / "two"
    two.mkdir()
    reps = _run_chapters(two, _manifest(two, X[:2], {"src": ["n0"], "dst": ["n1"]}))
    assert all(v.startswith("needs at least 3 entities") for v in reps.values())


def test_one_timestamp_falls_back_to_a_random_split(tmp_path):
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 50, 100), rng.integers(0, 50, 100)
    path = _manifest(tmp_path, rng.standard_normal((50, 4)), {"src": [f"n{i}" for i in src],
                                                               "dst": [f"n{i}" for i in dst],
                                                               "timestamp": ["2024-01-01"] * 100})
    reps = _run_chapters(tmp_path, path)
    lrep = reps["link_prediction"]
    assert lrep.result.data.split.startswith("seeded random split") and "cannot be split by time" in lrep.notes[0]
    assert _info(tmp_path, "link_prediction")["adapted"] == lrep.notes
    assert "distinct times" in reps["temporal_link_prediction"]


def test_relation_with_too_few_destinations_draws_from_all_ids(tmp_path):
    rng = np.random.default_rng(6)
    src, dst = rng.integers(0, 60, 300), rng.integers(2, 60, 300)
    rel = np.where(np.arange(300) % 10 == 0, "rare", "common")
    dst = np.where(rel == "rare", 1, dst)  # one destination only
    e = g.EdgeList(src[src != dst], dst[src != dst], relation=rel[src != dst].astype(object), file="e.csv")
    d = g.build_link_data(e, 60, split="random", n_negatives=20, pool="destinations")
    assert d.notes["destination_pool_too_small"] == ["rare"] and "all ids for rare" in d.negatives
    rare = d.test_rel == d.relations.index("rare")
    assert (d.candidates[~rare, 1:] >= 2).all() and (d.candidates[rare, 1:] < 2).any()


def test_link_data_from_a_set_read_by_io(tmp_path):
    from embeval_report.metrics import graph as mgraph  # noqa: E402
    from embeval_report.io import load_source
    from embeval_report.io.side_data import load_side_data
    rng = np.random.default_rng(7)
    src, dst = rng.integers(0, 30, 80), rng.integers(0, 30, 80)
    es = load_source(_manifest(tmp_path, rng.standard_normal((30, 4)), {"src": [f"n{i}" for i in src],
                                                                        "dst": [f"n{i}" for i in dst]}))
    side = load_side_data(es, fields=("edges", "test_edges", "negatives"))
    data, edges = mgraph.link_data(side, es.n, n_negatives=7, seed=1), side.edges
    assert isinstance(data, g.LinkData) and data.n_negatives == 7 and len(data.train) + len(data.test) == len(edges)
    assert data.split.startswith("seeded random split")


def test_degenerate_input_through_the_cli(tmp_path):
    from embeval_report.cli import main
    path = _manifest(tmp_path, np.random.default_rng(8).standard_normal((2, 4)), {"src": ["n0"], "dst": ["n1"]})
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--formats", "html",
                 "--chapters", "link_prediction,temporal_link_prediction"]) == 0
    doc = json.loads((out / "metrics.json").read_text())["chapters"]
    assert doc["link_prediction"]["status"] == doc["temporal_link_prediction"]["status"] == "skipped"
    assert "needs at least 3 entities" in doc["link_prediction"]["reason"]


def test_link_data_from_side_data_with_a_negatives_file(tmp_path):
    from embeval_report.io import load_source
    from embeval_report.io.side_data import load_side_data
    X = np.random.default_rng(9).standard_normal((12, 3))
    path = _manifest(tmp_path, X, {"src": [f"n{i}" for i in range(11)], "dst": [f"n{i + 1}" for i in range(11)]},
                     "negatives: neg.csv\n")
    (tmp_path / "neg.csv").write_text("src,dst,negative\nn0,n1,n5\nn0,n1,n6\nn2,n3,n7\n")
    es = load_source(path)
    data = g.link_data(load_side_data(es), es.n)
    assert data.split == "the test edges named in the negatives file" and data.strategy is None
    np.testing.assert_array_equal(data.candidates, [[1, 5, 6], [3, 7, -1]])
    assert len(data.train) == 9 and data.notes["test_edges_also_in_edges"] == 2
    assert data.negatives == "1–2 fixed negatives per test edge from the negatives file"
    from embeval_report.errors import UndefinedMetricWarning
    with pytest.warns(UndefinedMetricWarning, match="hits at 10 is undefined: every test edge has at most 10"):
        r = lp.evaluate_link_prediction(X, data, probe=False, heuristics=True)
    assert np.isnan(r.values["adjusted_hits_at_10"]) and r.metrics["adjusted_hits_at_10"].to_json()["value"] is None
    assert r.protocol["n_test"] == 2 and r.n_candidates.tolist() == [3, 2]


# ---------------------------------------------------------------------------------------------
# The task scorers (issue 41): per-test-edge units, their aggregates, the plan, compare
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("chapter", ["link_prediction", "temporal_link_prediction"])
def test_scorer_aggregates_are_the_recorded_numbers(chapter):
    from scorer_world import assert_aggregates_are_recorded

    assert_aggregates_are_recorded(chapter)


@pytest.mark.parametrize("chapter", ["link_prediction", "temporal_link_prediction"])
def test_scorer_plan_does_not_read_the_vectors(chapter):
    from scorer_world import assert_plan_ignores_the_vectors

    assert_plan_ignores_the_vectors(chapter)


def test_edge_units_reproduce_every_headline_number():
    """On planted data (ties, filtered ranks, relations): the unit table's aggregates are the evaluation's own
    numbers, bit for bit, and each test edge's placement is its share of the pooled negatives below it."""
    from embeval_report.chapters import link_prediction as lchapter

    X, e = planted(n=200, blocks=8, n_edges=1200, seed=3)
    X[:20] = X[0]  # exact ties
    data = g.build_link_data(e, len(X), split="random", n_negatives=40)
    for ties, filtered in (("realistic", False), ("pessimistic", True)):
        plan = lp.LinkPlan(data, lp.edge_ids(data.test, np.arange(len(X)).astype(str)), "cosine", ties, filtered)
        run = lp.run_link_prediction(X, plan, device="cpu")
        r = lp.evaluate_link_prediction(X, data, score="cosine", ties=ties, filtered=filtered, probe=False,
                                        heuristics=False, device="cpu")
        values = lchapter.SCORER.values(run.per_edge)
        assert values == {m: r.values[m] for m in values}
        pos, neg = run.cs.pooled(filtered)
        i = 5
        assert run.per_edge["auc_placement"][i] == ((neg < pos[i]).sum() + 0.5 * (neg == pos[i]).sum()) / len(neg)


def test_temporal_units_carry_the_horizon_and_the_change_over_it():
    from embeval_report.chapters import temporal_link_prediction as tch

    X, e = planted(n=240, blocks=8, n_edges=1800, t=True)
    plan = tp.temporal_plan(e, len(X), n_negatives=50, n_bins=4)
    run = tp.run_temporal(X, plan, device="cpu")
    t = tp.evaluate_temporal(X, e, len(X), n_negatives=50, n_bins=4, max_heuristic_queries=200, plan=plan, cs=run.cs)
    values = tch.SCORER.values(run.per_edge)
    assert values == {m: t.values[m] for m in values}
    by_bin = run.per_edge.groupby("horizon", sort=False)["temporal_mrr"].agg(["size", "mean"])
    horizon = t.horizon.iloc[1:].set_index("horizon")
    assert by_bin["size"].to_dict() == horizon["test edges"].to_dict()
    assert by_bin["mean"].to_dict() == horizon["MRR"].to_dict()
    assert list(run.per_edge["horizon"]) == [plan.horizons[b] for b in plan.bins]
    again = tp.evaluate_temporal(X, e, len(X), n_negatives=50, n_bins=4, max_heuristic_queries=200)
    assert again.values == t.values  # the plan and scores handed over change nothing


@pytest.mark.parametrize("chapter,headline", [
    ("link_prediction", ("mrr", "mean_rank", "hits_at_10", "amri", "adjusted_mrr", "auc")),
    ("temporal_link_prediction", ("temporal_mrr", "temporal_hits_at_10", "temporal_amri", "temporal_auc"))])
def test_compare_finds_a_planted_difference_there_only(tmp_path, chapter, headline):
    from scorer_world import assert_found_only_in, planted_comparison

    assert_found_only_in(planted_comparison(tmp_path, chapter), chapter, headline)


def test_plan_fingerprint_of_a_large_plan_is_fast_and_by_value():
    """A link plan's negatives (here 2 million) enter the fingerprint as a digest of their values: the same values in
    another integer type give the same fingerprint, one changed negative another, in well under the seconds a JSON
    list of them takes."""
    import time

    from embeval_report.metrics.scoring import plan_fingerprint

    cand = np.random.default_rng(0).integers(0, 100_000, (20_000, 101))
    start = time.perf_counter()
    f = plan_fingerprint({"candidates": cand, "seed": 0})
    assert time.perf_counter() - start < 2.0
    assert f == plan_fingerprint({"candidates": cand.astype(np.int32), "seed": 0})
    other = cand.copy()
    other[123, 45] += 1
    assert f != plan_fingerprint({"candidates": other, "seed": 0})
