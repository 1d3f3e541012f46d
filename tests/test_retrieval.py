"""Retrieval metrics against independent references: pytrec_eval (trec_eval) and ranx per query on
random graded cases (test-only dependencies, skipped when absent), brute-force numpy ranks,
hand-computed cases (ties, own document excluded, relevant beyond rank 100, grade 0), exactness
below float32 resolution, and the qrels reader."""
import importlib.util
import json
import math
import os
import subprocess
import sys
import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from embeval_report import kernels
from embeval_report.kernels import ranking
from embeval_report.errors import InputError, UndefinedMetricWarning
from embeval_report.io.qrels import qrels_frame, read_qrels
from embeval_report.metrics import retrieval as rt

CONTRACT = ("recall_at_1", "recall_at_5", "recall_at_10", "recall_at_100", "r_cap_at_10", "precision_at_1",
            "precision_at_5", "precision_at_10", "hit_rate_at_10", "map", "map_at_100", "mrr", "mrr_at_10",
            "ndcg_at_10", "ndcg_at_10_exp")
#: our name -> trec_eval measure (pytrec_eval); ndcg_cut is trec_eval's linear-gain nDCG
PYTREC = {"recall_at_1": "recall_1", "recall_at_5": "recall_5", "recall_at_10": "recall_10",
          "recall_at_100": "recall_100", "precision_at_1": "P_1", "precision_at_5": "P_5", "precision_at_10": "P_10",
          "hit_rate_at_10": "success_10", "map": "map", "map_at_100": "map_cut_100", "mrr": "recip_rank",
          "ndcg_at_10": "ndcg_cut_10"}
#: our name -> ranx metric (ranx ndcg: Järvelin linear gain; ndcg_burges: 2^rel - 1)
RANX = {"ndcg_at_10": "ndcg@10", "ndcg_at_10_exp": "ndcg_burges@10", "mrr_at_10": "mrr@10", "mrr": "mrr",
        "hit_rate_at_10": "hit_rate@10", "map": "map", "map_at_100": "map@100", "recall_at_100": "recall@100",
        "precision_at_5": "precision@5"}


# ---------------------------------------------------------------------------------------------
# Random graded cases
# ---------------------------------------------------------------------------------------------

def random_case(seed, n=400, m=40, d=12, exclude_self=False):
    """Tie-free random vectors; 0-9 judgements per query with grades 0-3 (some queries all grade 0,
    some unjudged); with ``exclude_self`` some query ids are corpus ids (a few of them judged)."""
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((n, d))
    Q = rng.standard_normal((m, d))
    dids = np.array([f"doc{i:04d}" for i in rng.permutation(n)], dtype=object)
    qids = np.array([f"q{i}" for i in range(m)], dtype=object)
    if exclude_self:
        qids[:10] = dids[rng.choice(n, 10, replace=False)]
        Q[:5] = C[[int(np.flatnonzero(dids == q)[0]) for q in qids[:5]]] + 0.01 * rng.standard_normal((5, d))
    qrels = {}
    for i in range(m - 3):  # the last 3 queries are unjudged
        docs = dids[rng.choice(n, int(rng.integers(1, 10)), replace=False)]
        grades = rng.integers(0, 4, len(docs)) if i % 7 else np.zeros(len(docs), int)
        qrels[qids[i]] = {str(dd): int(g) for dd, g in zip(docs, grades)}
        if exclude_self and i < 3:
            qrels[qids[i]][qids[i]] = 2  # the query's own document, judged: dropped and counted
    return Q, C, qids, dids, qrels


def brute_scores(Q, C, metric="cosine"):
    if metric == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        C = C / np.linalg.norm(C, axis=1, keepdims=True)
    return Q @ C.T


def reference_inputs(Q, C, qids, dids, qrels, exclude_self, metric="cosine"):
    """The full run {qid: {docid: score}} from numpy scores (the own document popped, as BEIR does) and
    the qrels without self judgements, restricted to the queries with a relevant document."""
    S = brute_scores(Q, C, metric)
    run, ref_qrels = {}, {}
    for i, q in enumerate(qids):
        rel = {dd: g for dd, g in qrels.get(q, {}).items() if not (exclude_self and dd == q)}
        if not any(g >= 1 for g in rel.values()):
            continue
        ref_qrels[q] = rel
        run[q] = {str(dd): float(s) for dd, s in zip(dids, S[i]) if not (exclude_self and dd == q)}
    return run, ref_qrels


@pytest.fixture
def small_tiles(monkeypatch):
    """Many query blocks and corpus tiles (and small batches of exact re-scoring), on one thread: the
    thousands of tiny operations would otherwise mostly wait at thread-pool barriers on a busy machine."""
    monkeypatch.setattr(ranking, "CPU_TILE_COLS", 37)
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 37 * ranking.TILE_ELEMENT_BYTES * 7)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("seed,exclude_self,metric", [(0, False, "cosine"), (1, True, "cosine"), (2, False, "dot")])
def test_matches_pytrec_eval_per_query(seed, exclude_self, metric):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    Q, C, qids, dids, qrels = random_case(seed, exclude_self=exclude_self)
    res = rt.evaluate_retrieval(Q, C, qrels, query_ids=qids, doc_ids=dids, metric=metric, exclude_self=exclude_self,
                                device="cpu", desc=None)
    run, ref_qrels = reference_inputs(Q, C, qids, dids, qrels, exclude_self, metric)
    ev = pytrec_eval.RelevanceEvaluator(ref_qrels, {"recall.1,5,10,100", "P.1,5,10", "map", "map_cut.100",
                                                    "recip_rank", "ndcg_cut.10", "success.10"})
    ref = ev.evaluate(run)
    pq = res.per_query.set_index("query_id")
    assert list(pq.index) == [q for q in qids if q in ref_qrels]  # the evaluated queries, in vector order
    for ours, theirs in PYTREC.items():
        np.testing.assert_allclose(pq[ours].to_numpy(), [ref[q][theirs] for q in pq.index], rtol=1e-12, atol=1e-12,
                                   err_msg=ours)
    for name in CONTRACT:
        assert res.values[name] == pytest.approx(pq[name].mean(), rel=1e-12)
    # counts: grade-0-only queries are excluded and listed, unjudged ones counted
    only_zero = [q for q in qids if q in qrels and q not in ref_qrels]
    assert res.excluded_queries == only_zero and res.protocol["n_without_relevant"] == len(only_zero)
    assert res.protocol["n_unjudged"] == 3 and res.protocol["n_evaluated"] == len(ref_qrels)
    assert res.protocol["self_judgements_dropped"] == (3 if exclude_self else 0)
    # every relevant rank against brute-force numpy ranks (tie-free data)
    S = brute_scores(Q, C, metric)
    pos = {dd: j for j, dd in enumerate(dids)}
    for row in res.relevant.itertuples():
        i = int(np.flatnonzero(qids == row.query_id)[0])
        s = S[i].copy()
        if exclude_self and row.query_id in pos:
            s[pos[row.query_id]] = -np.inf
        assert row.rank == 1 + int((s > s[pos[row.doc_id]]).sum())
        assert row.score == pytest.approx(S[i, pos[row.doc_id]], abs=1e-12)
    # the top lists are the numpy top 10
    for q, grp in res.top.groupby("query_id", sort=False):
        ranked = sorted(run[q], key=lambda dd: -run[q][dd])[:10]
        assert list(grp["doc_id"]) == ranked and list(grp["rank"]) == list(range(1, 11))
        grades = [ref_qrels[q].get(dd) for dd in ranked]
        assert [None if pd.isna(g) else g for g in grp["relevance"]] == grades


@pytest.mark.parametrize("seed", [3, 4])
def test_same_ranks_whatever_the_tiles_and_placement(seed, small_tiles, monkeypatch):
    Q, C, qids, dids, qrels = random_case(seed, exclude_self=True)
    C[50:60] = C[7]  # exact duplicates: ties decided by the policy, whatever the tiling
    qrels[qids[4]] = {str(dd): 1 + i % 3 for i, dd in enumerate(dids[::17])}  # 24 relevant: searchsorted placement

    def run():
        return rt.evaluate_retrieval(Q, C, qrels, query_ids=qids, doc_ids=dids, exclude_self=True, device="cpu",
                                     desc=None)

    results = []
    for loop_slots, dense_share in ((0, 10**18), (16, 10**18), (16, 0)):  # searchsorted / loop / above-floor only
        monkeypatch.setattr(ranking, "LOOP_SLOTS", loop_slots)
        monkeypatch.setattr(ranking, "DENSE_SHARE", dense_share)
        results.append(run())
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 256 * 2**20)  # one block, whole-corpus tiles, defaults
    monkeypatch.setattr(ranking, "CPU_TILE_COLS", 4096)
    monkeypatch.setattr(ranking, "LOOP_SLOTS", 16)
    monkeypatch.setattr(ranking, "DENSE_SHARE", 4)
    results.append(run())
    assert results[0].relevant["rank"].max() > 300  # relevant documents deep in the ranking too
    for other in results[1:]:
        pd.testing.assert_frame_equal(results[0].relevant, other.relevant)
        pd.testing.assert_frame_equal(results[0].per_query, other.per_query)
        pd.testing.assert_frame_equal(results[0].top, other.top)
    # and the ranks are the brute-force ones, duplicates ordered by descending id
    S = brute_scores(Q, C)
    key = ranking.tie_keys(dids, "trec_eval")
    pos = {dd: j for j, dd in enumerate(dids)}
    for row in results[0].relevant.itertuples():
        i, j = int(np.flatnonzero(qids == row.query_id)[0]), pos[row.doc_id]
        s = np.round(S[i], 12)  # the duplicates' scores equal up to rounding
        if row.query_id in pos:
            s[pos[row.query_id]] = -np.inf
        assert row.rank == 1 + int((s > s[j]).sum() + ((s == s[j]) & (key < key[j])).sum())


def run_ranx(qrels, run, metrics):
    """Per-query ranx values, in a subprocess with numba's JIT off (its first compilation takes
    longer than this whole file; on these small inputs the plain-Python paths are fast)."""
    script = ("import json, sys\nfrom ranx import Qrels, Run, evaluate\nd = json.load(sys.stdin)\n"
              "run = Run(d['run'])\nevaluate(Qrels(d['qrels']), run, d['metrics'], make_comparable=True)\n"
              "print(json.dumps({m: {q: float(v) for q, v in run.scores[m].items()} for m in d['metrics']}))\n")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", script], input=json.dumps(dict(qrels=qrels, run=run, metrics=metrics)),
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_matches_ranx_per_query():
    if importlib.util.find_spec("ranx") is None:  # ranx runs in a subprocess: not imported here
        pytest.skip("could not import 'ranx': not installed")  # importorskip's words: fails under CI (conftest)
    frames = []
    runs, all_qrels = {}, {}
    for seed in (5, 6):
        Q, C, qids, dids, qrels = random_case(seed, n=300, m=25)
        qids = np.array([f"s{seed}-{q}" for q in qids], dtype=object)
        qrels = {f"s{seed}-{q}": v for q, v in qrels.items()}
        res = rt.evaluate_retrieval(Q, C, qrels, query_ids=qids, doc_ids=dids, device="cpu", desc=None)
        frames.append(res.per_query)
        run, ref_qrels = reference_inputs(Q, C, qids, dids, qrels, False)
        runs.update(run)
        all_qrels.update(ref_qrels)
    ref = run_ranx(all_qrels, runs, list(RANX.values()))
    pq = pd.concat(frames).set_index("query_id")
    for ours, theirs in RANX.items():
        np.testing.assert_allclose(pq[ours].to_numpy(), [ref[theirs][q] for q in pq.index], rtol=1e-10, atol=1e-12,
                                   err_msg=ours)


# ---------------------------------------------------------------------------------------------
# Hand-computed cases
# ---------------------------------------------------------------------------------------------

def one_d(values, ids, qrels, *, query_ids=("q",), queries=None, **kw):
    """1-d dot-product case: a query of value 1 scores each document by its own value."""
    Q = np.ones((len(query_ids), 1)) if queries is None else np.asarray(queries, float)
    C = np.asarray(values, float)[:, None]
    with warnings.catch_warnings():  # one query: no interval (UndefinedMetricWarning)
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return rt.evaluate_retrieval(Q, C, qrels, query_ids=np.array(query_ids, dtype=object),
                                     doc_ids=np.array(ids, dtype=object), metric="dot", device="cpu", desc=None,
                                     **kw)


def test_ties_trec_eval_policy_and_row_order():
    ids, values = ["a", "b", "c", "d"], [0.5, 0.5, 0.5, 0.9]
    qrels = {"q": {"a": 1, "b": 0}}
    # trec_eval: d (0.9), then the tied c, b, a (document id descending): a is 4th
    res = one_d(values, ids, qrels)
    assert res.relevant["rank"].tolist() == [4]
    assert list(res.top["doc_id"]) == ["d", "c", "b", "a"]
    assert res.values["mrr"] == 0.25 and res.values["precision_at_5"] == 0.2
    assert res.top["relevance"].tolist()[2:] == [0, 1] and pd.isna(res.top["relevance"].iloc[0])
    # row order: d, a, b, c
    res = one_d(values, ids, qrels, ties="index")
    assert res.relevant["rank"].tolist() == [2] and list(res.top["doc_id"]) == ["d", "a", "b", "c"]
    # two tied relevant documents and a tied non-relevant one: ids in descending order b, a, Z
    res = one_d([0.5, 0.5, 0.5], ["a", "Z", "b"], {"q": {"a": 2, "Z": 1}})
    assert dict(zip(res.relevant["doc_id"], res.relevant["rank"])) == {"a": 2, "Z": 3}
    ap = (1 / 2 + 2 / 3) / 2
    assert res.values["map"] == pytest.approx(ap)
    assert res.values["ndcg_at_10"] == pytest.approx((2 / math.log2(3) + 1 / 2) / (2 + 1 / math.log2(3)))


def test_ties_agree_with_pytrec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(9)
    values = rng.integers(0, 4, 60).astype(float)  # many exact ties
    ids = [f"d{i}" for i in rng.permutation(60)]
    qrels = {"q": {ids[j]: int(rng.integers(0, 4)) for j in rng.choice(60, 15, replace=False)}}
    res = one_d(values, ids, qrels)
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"map", "recip_rank", "ndcg_cut.10", "P.5,10", "recall.5,10"}).evaluate(
        {"q": {dd: float(v) for dd, v in zip(ids, values)}})["q"]
    row = res.per_query.iloc[0]
    for ours, theirs in PYTREC.items():
        if theirs in ref:
            assert row[ours] == pytest.approx(ref[theirs], abs=1e-12), ours


def test_exclude_self_and_self_judgement():
    ids, values = ["x", "a", "b"], [3.0, 2.0, 1.0]
    qrels = {"x": {"a": 1, "x": 1}}
    res = one_d(values, ids, qrels, query_ids=("x",))
    assert dict(zip(res.relevant["doc_id"], res.relevant["rank"])) == {"x": 1, "a": 2}
    res = one_d(values, ids, qrels, query_ids=("x",), exclude_self=True)
    assert dict(zip(res.relevant["doc_id"], res.relevant["rank"])) == {"a": 1}
    assert res.protocol["self_judgements_dropped"] == 1 and res.values["recall_at_1"] == 1.0
    assert list(res.top["doc_id"]) == ["a", "b"]
    # only the own document relevant: nothing left to evaluate
    with pytest.raises(InputError, match="own document"):
        one_d(values, ids, {"x": {"x": 1}}, query_ids=("x",), exclude_self=True)


def test_relevant_beyond_rank_100_and_grade_zero():
    n = 150
    ids = [f"d{i:03d}" for i in range(n)]
    values = np.arange(n, 0, -1.0)  # d000 ranks 1, d119 ranks 120
    qrels = {"q1": {"d002": 1, "d119": 3, "d000": 0},   # ranks 3 and 120; a grade-0 document at rank 1
             "q2": {"d119": 1},                          # only relevant document at rank 120
             "q3": {"d005": 0}}                          # no relevant document: excluded
    res = one_d(values, ids, qrels, query_ids=("q1", "q2", "q3"))
    pq = res.per_query.set_index("query_id")
    assert list(pq.index) == ["q1", "q2"] and res.excluded_queries == ["q3"]
    assert pq.loc["q1", "n_judged"] == 3 and pq.loc["q1", "n_relevant"] == 2
    q1, q2 = pq.loc["q1"], pq.loc["q2"]
    assert q1["first_relevant_rank"] == 3 and q2["first_relevant_rank"] == 120
    assert q1["recall_at_100"] == 0.5 and q1["recall_at_5"] == 0.5 and q1["precision_at_5"] == 0.2
    assert q1["map"] == pytest.approx((1 / 3 + 2 / 120) / 2) and q1["map_at_100"] == pytest.approx((1 / 3) / 2)
    assert q1["mrr"] == pytest.approx(1 / 3) and q1["mrr_at_10"] == pytest.approx(1 / 3)
    # nDCG: grade 1 at rank 3 in the top 10; ideal list 3, 1 (the grade-0 judgement adds nothing)
    assert q1["ndcg_at_10"] == pytest.approx((1 / 2) / (3 + 1 / math.log2(3)))
    assert q1["ndcg_at_10_exp"] == pytest.approx((1 / 2) / (7 + 1 / math.log2(3)))
    assert q2["mrr"] == pytest.approx(1 / 120) and q2["mrr_at_10"] == 0 and q2["hit_rate_at_10"] == 0
    assert q2["recall_at_100"] == 0 and q2["map_at_100"] == 0 and q2["map"] == pytest.approx(1 / 120)
    assert res.values["mrr"] == pytest.approx((1 / 3 + 1 / 120) / 2)


def test_capped_recall_and_graded_ndcg():
    ids = [f"d{i:02d}" for i in range(30)]
    values = np.arange(30, 0, -1.0)  # d00 first
    rel = {f"d{i:02d}": 1 for i in (0, 1, 2, 3, 4, 5, 6, 7, 20, 21, 22, 23)}  # 12 relevant, 8 in the top 10
    rel["d00"], rel["d01"] = 1, 3
    res = one_d(values, ids, {"q": rel})
    row = res.per_query.iloc[0]
    assert row["r_cap_at_10"] == pytest.approx(8 / 10) and row["recall_at_10"] == pytest.approx(8 / 12)
    assert row["precision_at_10"] == pytest.approx(0.8) and row["precision_at_1"] == 1.0
    gains = [1, 3, 1, 1, 1, 1, 1, 1, 0, 0]
    ideal = [3] + [1] * 9
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    assert row["ndcg_at_10"] == pytest.approx(dcg / idcg)
    dcg = sum((2 ** g - 1) / math.log2(i + 2) for i, g in enumerate(gains))
    idcg = sum((2 ** g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    assert row["ndcg_at_10_exp"] == pytest.approx(dcg / idcg)


# ---------------------------------------------------------------------------------------------
# Exactness below float32 resolution, duplicates, the top-list scan
# ---------------------------------------------------------------------------------------------

def test_exact_below_float32_resolution(small_tiles):
    # float64 scores 1 + k 1e-12 are one float32 value: every document is re-scored exactly
    n = 200
    rng = np.random.default_rng(1)
    k = rng.permutation(n)
    values = 1.0 + k * 1e-12
    ids = [f"d{i:03d}" for i in range(n)]
    rel = {ids[j]: 1 for j in (3, 50, 120)}
    res = one_d(values, ids, {"q": rel})
    for row in res.relevant.itertuples():
        j = ids.index(row.doc_id)
        assert row.rank == 1 + int((k > k[j]).sum())
    assert res.info["rescored_pairs"] > 0
    assert list(res.top["doc_id"]) == [ids[j] for j in np.argsort(-k)[:10]]


def test_top_list_scan_when_float32_cannot_decide(monkeypatch):
    monkeypatch.setattr(ranking, "SPARE", 0)
    n = 120
    k = np.random.default_rng(2).permutation(n)
    ids = [f"d{i:03d}" for i in range(n)]
    res = one_d(1.0 + k * 1e-12, ids, {"q": {ids[0]: 1}})
    assert res.info["top_list_scans"] == 1
    assert list(res.top["doc_id"]) == [ids[j] for j in np.argsort(-k)[:10]]


@pytest.mark.filterwarnings("ignore::embeval_report.errors.UndefinedMetricWarning")
def test_duplicates_and_constant_corpus_tie_by_id(small_tiles):
    rng = np.random.default_rng(4)
    d = 37
    C = rng.standard_normal((90, d))
    C[10:30] = C[5]  # 21 identical documents d05, d10..d29
    ids = [f"d{i:02d}" for i in range(90)]
    Q = C[5:6] + 1e-3 * rng.standard_normal((1, d))  # these duplicates score highest
    res = rt.evaluate_retrieval(Q, C, {"q": {"d12": 1, "d05": 2}}, query_ids=np.array(["q"], dtype=object),
                                doc_ids=np.array(ids, dtype=object), device="cpu", desc=None)
    # the 21 tied documents in descending id order: d29 .. d10, then d05
    assert dict(zip(res.relevant["doc_id"], res.relevant["rank"])) == {"d12": 18, "d05": 21}
    assert list(res.top["doc_id"]) == [f"d{i}" for i in range(29, 19, -1)]
    # a constant corpus: every product ties, every pair goes through the exact path
    C = np.ones((70, 5))
    ids = [f"e{i:02d}" for i in range(70)]
    res = rt.evaluate_retrieval(np.ones((2, 5)), C, {"q0": {"e00": 1}, "q1": {"e69": 1, "e33": 1}},
                                query_ids=np.array(["q0", "q1"], dtype=object), doc_ids=np.array(ids, dtype=object),
                                device="cpu", desc=None)
    assert res.relevant["rank"].tolist() == [70, 1, 37]


# ---------------------------------------------------------------------------------------------
# The result's structure
# ---------------------------------------------------------------------------------------------

def test_specs_metrics_and_intervals():
    assert rt.METRICS == CONTRACT
    for spec in rt.SPECS.values():
        assert spec.direction == "higher" and spec.formula and spec.reference and spec.range == (0, 1)
    Q, C, qids, dids, qrels = random_case(7, n=200, m=30)
    res = rt.evaluate_retrieval(Q, C, qrels, query_ids=qids, doc_ids=dids, device="cpu", desc=None, seed=3)
    again = rt.evaluate_retrieval(Q, C, qrels, query_ids=qids, doc_ids=dids, device="cpu", desc=None, seed=3)
    for name in CONTRACT:
        m = res.metrics[name]
        assert m.value == res.values[name] and m.name == name and m.direction == "higher"
        if m.has_ci:
            assert m.ci_low <= m.value + 1e-12 and m.value <= m.ci_high + 1e-12
            assert "BCa bootstrap over the" in m.ci_method or m.ci_method.startswith("constant values")
        assert (m.ci_low, m.ci_high) == (again.metrics[name].ci_low, again.metrics[name].ci_high)
        assert set(m.to_json()) == {"value", "ci_low", "ci_high", "verdict", "direction", "reference"}
    assert list(res.per_query.columns[:4]) == ["query_id", "n_judged", "n_relevant", "first_relevant_rank"]
    assert list(res.relevant.columns) == ["query_id", "doc_id", "relevance", "score", "rank"]
    assert (res.relevant["relevance"] >= 1).all() and len(res.top) == 10 * len(res.per_query)
    assert "cosine" in res.tag and res.protocol["n_docs"] == 200


def test_per_query_metrics_from_ranks_alone():
    judged = pd.DataFrame({"query_id": ["a", "a", "a", "b"], "relevance": [2, 0, 1, 0], "rank": [4, np.nan, 1, np.nan]})
    pq = rt.per_query_metrics(judged)
    assert pq["query_id"].tolist() == ["a"]
    assert pq.loc[0, "map"] == pytest.approx((1 / 1 + 2 / 4) / 2)
    with pytest.raises(ValueError):
        rt.per_query_metrics(judged.assign(rank=np.nan))


def test_bad_evaluation_inputs():
    Q, C = np.ones((1, 2)), np.eye(2)
    qid, dids = np.array(["q"], dtype=object), np.array(["a", "b"], dtype=object)
    with pytest.raises(InputError, match=r"qrels, row 1, column 'doc_id': document id 'zz' matches no corpus id"):
        rt.evaluate_retrieval(Q, C, {"q": {"zz": 1}}, query_ids=qid, doc_ids=dids, desc=None)
    with pytest.raises(InputError, match="no judged query has a relevant document"):
        rt.evaluate_retrieval(Q, C, {"q": {"a": 0}}, query_ids=qid, doc_ids=dids, desc=None)
    with pytest.raises(InputError, match="duplicate id 'a'"):
        rt.evaluate_retrieval(Q, C, {"q": {"a": 1}}, query_ids=qid, doc_ids=np.array(["a", "a"], dtype=object),
                              desc=None)
    with pytest.raises(ValueError, match="metric"):
        rt.evaluate_retrieval(Q, C, {"q": {"a": 1}}, query_ids=qid, doc_ids=dids, metric="l2", desc=None)


# ---------------------------------------------------------------------------------------------
# Reading qrels
# ---------------------------------------------------------------------------------------------

TREC = "q1 0 d1 1\nq1 0 d2 0\n\nq2\t0\td3\t2\n"


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_qrels_formats_parse_identically(tmp_path):
    a = read_qrels(write(tmp_path, "qrels.txt", TREC))
    b = read_qrels(write(tmp_path, "qrels.csv", "query_id,doc_id,relevance\nq1,d1,1\nq1, d2 ,0\nq2,d3,2\n"))
    c = read_qrels(write(tmp_path, "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td3\t2\n"))
    d = qrels_frame({"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}})
    for x in (b, c, d):
        pd.testing.assert_frame_equal(a, x)
    assert a["relevance"].dtype == np.int64 and a["query_id"].tolist() == ["q1", "q1", "q2"]
    assert (a.attrs["format"], b.attrs["format"], c.attrs["format"]) == ("trec", "csv", "tsv")
    # checked against known ids; an id that happens to be a column name is still TREC data
    read_qrels(write(tmp_path, "ok.txt", "query 0 doc 1\n"), query_ids=["query"], doc_ids=["doc"])


@pytest.mark.parametrize("name,text,kw,pattern", [
    ("bad.txt", "q1 0 d1 1\nq1 0 d2\n", {}, r"bad\.txt, row 2 \(line 2\): found 3 field\(s\); expected 4"),
    ("bad.txt", "q1 0 d1 1\n\nq1 0 d2 x\n", {}, r"bad\.txt, row 2 \(line 3\), column relevance .*'x' is not an integer"),
    ("bad.txt", "q1 0 d1 1.5\n", {}, r"bad\.txt, row 1 \(line 1\).*'1\.5' is not an integer"),
    ("bad.csv", "query_id,doc_id,relevance\nq1,d1,-1\n", {}, r"bad\.csv, row 1 \(line 2\), column 'relevance': negative"),
    ("bad.csv", "query_id,doc_id\nq1,d1\n", {}, r"bad\.csv, line 1: the header row has no relevance column"),
    ("bad.csv", "query_id,doc_id,relevance\nq1,,1\n", {}, r"bad\.csv, row 1 \(line 2\), column 'doc_id': empty id"),
    ("bad.csv", "query_id,doc_id,relevance\nq1,d1\n", {}, r"bad\.csv, row 1 \(line 2\): found 2 field\(s\)"),
    ("bad.csv", "q1,d1,1\n", {}, r"bad\.csv, row 1 \(line 1\): found 1 field\(s\); expected 4"),
    ("bad.txt", "q1 0 d1 1\nq2 0 d1 1\nq1 0 d1 0\n", {},
     r"bad\.txt, rows 1 and 3 \(lines 1 and 3\): query 'q1' and document 'd1' are judged twice"),
    ("bad.txt", "q1 0 d1 1\nq9 0 d1 1\nq8 0 d2 1\n", {"query_ids": ["q1"]},
     r"bad\.txt, row 2 \(line 2\), column 'query_id': query id 'q9' matches no query id \(2 judgement\(s\) name "
     r"2 unknown query id\(s\): 'q9', 'q8'\)"),
    ("bad.txt", "q1 0 d1 1\nq1 0 d7 1\n", {"doc_ids": ["d1"]},
     r"bad\.txt, row 2 \(line 2\), column 'doc_id': document id 'd7' matches no corpus id"),
    ("bad.txt", "\n\n", {}, r"bad\.txt: empty file"),
    ("bad.csv", "query_id,doc_id,relevance\n", {}, r"bad\.csv: no judgements below the header row"),
])
def test_bad_qrels_name_file_and_row(tmp_path, name, text, kw, pattern):
    with pytest.raises(InputError, match=pattern):
        read_qrels(write(tmp_path, name, text), **kw)


def test_bad_in_memory_qrels():
    with pytest.raises(InputError, match=r"qrels, row 2, column 'relevance': 0\.5 is not an integer"):
        qrels_frame({"q": {"a": 1, "b": 0.5}})
    with pytest.raises(InputError, match=r"qrels, column 'doc_id', row 2: missing id"):
        qrels_frame(pd.DataFrame({"query_id": ["q", "q"], "doc_id": ["a", None], "relevance": [1, 1]}))
    with pytest.raises(InputError, match="no column 'relevance'"):
        qrels_frame(pd.DataFrame({"query_id": ["q"], "doc_id": ["a"]}))
    with pytest.raises(InputError, match="file not found"):
        read_qrels("/nonexistent/qrels.txt")


# ---------------------------------------------------------------------------------------------
# The chapter: curves, manifest fields and the report
# ---------------------------------------------------------------------------------------------

def _judged_set(tmp_path, n_docs=300, n_queries=40, d=16, seed=5):
    """A corpus, noisy copies of some documents as queries, and graded qrels (plus one unanswerable query)."""
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((n_docs, d)).astype(np.float32)
    target = rng.choice(n_docs, n_queries, replace=False)
    Q = (C[target] + 0.8 * rng.standard_normal((n_queries, d))).astype(np.float32)
    np.save(tmp_path / "corpus.npy", C)
    (tmp_path / "corpus_ids.txt").write_text("".join(f"d{i}\n" for i in range(n_docs)))
    np.save(tmp_path / "queries.npy", Q)
    (tmp_path / "query_ids.txt").write_text("".join(f"q{i}\n" for i in range(n_queries)))
    pd.DataFrame({"id": [f"q{i}" for i in range(n_queries)], "group": ["short", "long"] * (n_queries // 2)}).to_csv(
        tmp_path / "qmeta.csv", index=False)
    lines = [f"q{i} 0 d{t} 2\nq{i} 0 d{(t + 1) % n_docs} 1\n" for i, t in enumerate(target[:-1])]
    lines.append(f"q{n_queries - 1} 0 d{target[-1]} 0\n")  # judged, nothing relevant: excluded and counted
    (tmp_path / "qrels.txt").write_text("".join(lines))
    (tmp_path / "m.yaml").write_text("vectors: corpus.npy\nids: corpus_ids.txt\nqueries: {vectors: queries.npy, "
                                     "ids: query_ids.txt, metadata: qmeta.csv}\nqrels: qrels.txt\n")
    return tmp_path / "m.yaml"


def test_cutoff_curves_agree_with_the_per_query_metrics(tmp_path):
    from embeval_report.io.qrels import read_qrels
    from embeval_report.metrics.retrieval import cutoff_curves, evaluate_retrieval

    _judged_set(tmp_path)
    C, Q = np.load(tmp_path / "corpus.npy"), np.load(tmp_path / "queries.npy")
    dids = [f"d{i}" for i in range(len(C))]
    qids = [f"q{i}" for i in range(len(Q))]
    r = evaluate_retrieval(Q, C, read_qrels(tmp_path / "qrels.txt"), query_ids=qids, doc_ids=dids, device="cpu",
                           desc=None)
    curves = cutoff_curves(r).set_index("k")
    for k in (1, 5, 10, 100):
        assert curves.loc[k, "recall"] == pytest.approx(r.values[f"recall_at_{k}"])
    for k in (1, 5, 10):
        assert curves.loc[k, "precision"] == pytest.approx(r.values[f"precision_at_{k}"])
    assert r.protocol["n_without_relevant"] == 1 and r.excluded_queries == [qids[-1]]


def test_retrieval_chapter_in_a_report(tmp_path):
    """The manifest's queries/qrels run the chapter: every contract metric in metrics.json with its interval,
    the breakdown by the queries' group column, the worst queries and the protocol in the report."""
    import json

    from embeval_report.cli import main
    from embeval_report.metrics.retrieval import METRICS

    m = _judged_set(tmp_path)
    out = tmp_path / "report"
    assert main(["run", str(m), "--out", str(out), "--formats", "html", "--chapters", "retrieval",
                 "--device", "cpu"]) == 0
    chapter = json.loads((out / "metrics.json").read_text())["chapters"]["retrieval"]
    assert [m for m in chapter["metrics"] if not m.startswith("mde_")] == [*METRICS, "ndcg_at_10_judged"]
    assert [m for m in chapter["metrics"] if m.startswith("mde_")] == [f"mde_{m}" for m in METRICS]
    assert all(v["ci_low"] <= v["value"] <= v["ci_high"] for k, v in chapter["metrics"].items() if not k.startswith("mde_"))
    html = (out / "report.html").read_text()
    for words in ("worst queries", "By query group", "short", "The evaluation protocol", "recall@k"):
        assert words in html, words


# ---------------------------------------------------------------------------------------------
# Judged documents only (issue 29.5): condensed lists, against trec_eval -J (pytrec_eval)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed,exclude_self,metric", [(3, False, "cosine"), (4, True, "dot")])
def test_judged_only_ndcg_matches_pytrec_eval_judged_docs_only(seed, exclude_self, metric):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    Q, C, qids, dids, qrels = random_case(seed, exclude_self=exclude_self)
    res = rt.evaluate_retrieval(Q, C, qrels, query_ids=qids, doc_ids=dids, metric=metric, exclude_self=exclude_self,
                                device="cpu", desc=None)
    run, ref_qrels = reference_inputs(Q, C, qids, dids, qrels, exclude_self, metric)
    ref = pytrec_eval.RelevanceEvaluator(ref_qrels, {"ndcg_cut.10"}, judged_docs_only_flag=True).evaluate(run)
    full = pytrec_eval.RelevanceEvaluator(ref_qrels, {"ndcg_cut.10"}).evaluate(run)
    pq = res.per_query.set_index("query_id")
    np.testing.assert_allclose(pq[rt.JUDGED_NDCG].to_numpy(), [ref[q]["ndcg_cut_10"] for q in pq.index],
                               rtol=1e-12, atol=1e-12)
    # it differs from the full-list nDCG here (unjudged documents rank high), and is never below it
    assert any(abs(ref[q]["ndcg_cut_10"] - full[q]["ndcg_cut_10"]) > 1e-3 for q in pq.index)
    assert (pq[rt.JUDGED_NDCG] >= pq["ndcg_at_10"] - 1e-12).all()
    m = res.metrics[rt.JUDGED_NDCG]
    assert m.value == pytest.approx(pq[rt.JUDGED_NDCG].mean(), rel=1e-12) and m.ci_low <= m.value <= m.ci_high
    assert rt.JUDGED_NDCG not in rt.METRICS  # not a per-unit mean of the rigor chapter


def test_judged_only_ndcg_hand_case_and_judgement_coverage():
    # cosine with q = (1, 0) ranks d3 (unjudged), d2 (grade 0), d9 (unjudged), d1 (grade 2), d4 (unjudged):
    # the condensed list is d2, d1
    dids = np.array(["d1", "d9", "d3", "d2", "d4"], dtype=object)
    C = np.array([[0.0, 1.0], [0.9, 0.44], [0.99, 0.14], [0.95, 0.31], [-1.0, 0.1]])
    with pytest.warns(UndefinedMetricWarning, match="at least 2 queries"):
        res = rt.evaluate_retrieval(np.array([[1.0, 0.0]]), C, {"q": {"d1": 2, "d2": 0}}, query_ids=["q"],
                                    doc_ids=dids, device="cpu", desc=None)
    assert res.relevant["rank"].tolist() == [4]
    assert res.values["ndcg_at_10"] == pytest.approx((2 / math.log2(5)) / 2)
    assert res.values[rt.JUDGED_NDCG] == pytest.approx((2 / math.log2(3)) / 2)
    cov = res.info["judgements"]
    assert cov["docs_never_judged"] == 3 and cov["share_never_judged"] == pytest.approx(0.6)
    assert cov["unjudged_in_top"] == 3  # d3, d9 and d4 are in the top 10 unjudged


# ---------------------------------------------------------------------------------------------
# The task scorer (issue 41): per-query units, their aggregates, the plan, compare
# ---------------------------------------------------------------------------------------------

def test_scorer_aggregates_are_the_recorded_numbers():
    from scorer_world import assert_aggregates_are_recorded

    assert_aggregates_are_recorded("retrieval")


def test_scorer_plan_does_not_read_the_vectors():
    from scorer_world import assert_plan_ignores_the_vectors

    assert_plan_ignores_the_vectors("retrieval")


def test_one_changed_query_vector_changes_that_querys_row_only():
    """The issue's "Done when": a set and a copy with one query vector changed, scored on the same plan, differ in
    that query's row of the unit table and in no other. The changed query is one whose relevant documents are not
    ranked first; it becomes a copy of its grade-2 document, which it then ranks first (cosine 1)."""
    from scorer_world import manifest_a, scorer_setup

    scorer, es, side, settings = scorer_setup(manifest_a("retrieval"), "retrieval")
    inputs = scorer.inputs(es, side, settings)
    plan = scorer.plan(inputs, settings)
    before = scorer.units(es.vectors, inputs, plan).set_index("query_id")
    qid = before.index[before["first_relevant_rank"] > 1][0]
    j = list(inputs.query_ids).index(qid)
    judged = plan.judged
    doc = judged.loc[(judged["query_id"] == qid) & (judged["relevance"] == 2), "doc_id"].iloc[0]
    row = list(es.ids).index(doc)

    def query_j_on_its_document(Q):
        Q = np.array(Q, copy=True)
        Q[j] = es.vectors[row]
        return Q

    after = scorer.units(es.vectors, scorer.map_inputs(inputs, query_j_on_its_document), plan).set_index("query_id")
    assert list(before.index) == list(after.index)
    pd.testing.assert_frame_equal(before.drop(index=qid), after.drop(index=qid))  # every other query: bit for bit
    assert before.loc[qid, "first_relevant_rank"] > 1 and after.loc[qid, "first_relevant_rank"] == 1
    assert after.loc[qid, "mrr"] == 1.0 > before.loc[qid, "mrr"]


def test_scorer_applies_a_remedy_to_the_query_vectors_too():
    """``map_inputs``: a transform of the set (centring by the corpus mean) applied to the queries as well gives
    what the metric function gives on both transformed sets; without queries the corpus is the query set."""
    from scorer_world import manifest_a, scorer_setup

    scorer, es, side, settings = scorer_setup(manifest_a("retrieval"), "retrieval")
    inputs = scorer.inputs(es, side, settings)
    plan = scorer.plan(inputs, settings)
    mu = np.asarray(es.vectors, np.float64).mean(0)
    centre = (lambda X: np.asarray(X, np.float64) - mu)
    units = scorer.units(centre(es.vectors), scorer.map_inputs(inputs, centre), plan)
    ref = rt.evaluate_retrieval(centre(inputs.queries), centre(es.vectors), side.qrels, query_ids=inputs.query_ids,
                                doc_ids=es.ids, device="cpu", desc=None).per_query
    pd.testing.assert_frame_equal(units[list(ref.columns)], ref)
    assert not units["mrr"].equals(scorer.units(centre(es.vectors), inputs, plan)["mrr"])  # the queries did move
    own = scorer.map_inputs(replace(inputs, queries=None), centre)
    assert own.queries is None


def test_compare_finds_a_planted_retrieval_difference_there_only(tmp_path):
    from scorer_world import assert_found_only_in, planted_comparison

    table = planted_comparison(tmp_path, "retrieval")
    assert_found_only_in(table, "retrieval", ("mrr", "ndcg_at_10", "map"))
