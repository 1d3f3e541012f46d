"""Recommendation metrics against independent references: brute-force numpy rankings of the full score
matrix (ties included), per-user metrics written out longhand, hand-computed cases (seed 001's toy
example), Microsoft Recommenders' ``python_evaluation`` (its values kept in tests/reference/peers.json, live
when installed), the splits, the interactions reader's errors, and one end-to-end report."""
import json
import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from embeval_report.errors import InputError
from embeval_report.io.interactions import read_id_list, read_interactions
from embeval_report.metrics import recommendation as rc
from reference import inputs, make_fixtures
from reference.inputs import brute_lists, random_case

# ---------------------------------------------------------------------------------------------
# References written out longhand
# ---------------------------------------------------------------------------------------------


def longhand(top, first, test, k=10):
    out = []
    for lst, f, t in zip(top, first, test):
        t = set(t)
        h = [1 if i in t else 0 for i in lst[:k]]
        found = sum(h)
        dcg = sum(x / math.log2(r + 2) for r, x in enumerate(h))
        idcg = sum(1 / math.log2(r + 2) for r in range(min(len(t), k)))
        ap = sum(sum(h[:r + 1]) / (r + 1) for r in range(k) if h[r]) / min(len(t), k)
        out.append(dict(hit_rate_at_10=float(found > 0), recall_at_10=found / len(t), precision_at_10=found / k,
                        ndcg_at_10=dcg / idcg, map_at_10=ap, mrr=1 / f))
    return pd.DataFrame(out)


def csr(lists, n):
    r = [u for u, lst in enumerate(lists) for _ in lst]
    c = [i for lst in lists for i in lst]
    return sp.csr_matrix((np.ones(len(r)), (r, c)), shape=(len(lists), n))


# ---------------------------------------------------------------------------------------------
# Exact ranking
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("score", ["dot", "cosine"])
def test_full_catalogue_lists_and_ranks_match_brute_force(score):
    U, V, train, test = random_case(1)
    ranked = rc.rank_catalogue(U, V, csr(train, len(V)), csr(test, len(V)), score=score, device="cpu")
    top, first = brute_lists(U, V, train, test, score)
    np.testing.assert_array_equal(ranked.top, top)
    np.testing.assert_array_equal(ranked.first_rank, first)


@pytest.mark.parametrize("score", ["dot", "cosine"])
def test_ranking_in_several_user_blocks_equals_one_block(score, device, monkeypatch):
    """The catalogue ranked a few users at a time (a small chunk budget: several blocks, a ragged last one)
    gives the brute-force lists, on every device."""
    from embeval_report.kernels import catalogue

    U, V, train, test = random_case(1)
    calls = []
    real = catalogue.block_rows
    monkeypatch.setattr(catalogue, "block_rows", lambda n, m, dev, free=None: calls.append(min(7, n)) or min(7, n))
    ranked = rc.rank_catalogue(U, V, csr(train, len(V)), csr(test, len(V)), score=score, device=device)
    top, first = brute_lists(U, V, train, test, score)
    np.testing.assert_array_equal(ranked.top, top)
    np.testing.assert_array_equal(ranked.first_rank, first)
    assert calls and len(U) > 7 and len(U) % 7  # several blocks of 7 users, the last one shorter
    assert real(len(U), len(V), __import__("torch").device("cpu")) >= 1


def test_gpu_block_sizing_from_the_free_memory():
    """Users per block from the free device memory (30 % of it, 16 bytes per catalogue item); retrieval tiles
    likewise (48 bytes per element of a query block x 262,144 corpus columns); tested with fake sizes."""
    import torch

    from embeval_report.kernels import catalogue, ranking

    cuda = torch.device("cuda")
    assert catalogue.block_rows(10_000, 1000, cuda, free=int(1000 * 16 * 50 / 0.3) + 16) == 50
    assert catalogue.block_rows(10, 1000, cuda, free=10**12) == 10  # never more users than there are
    assert catalogue.block_rows(10_000, 1000, cuda, free=10) == 1  # at least one
    cols = ranking.GPU_TILE_COLS
    assert ranking.tile_shape(10_000, 10**6, cuda, free=int(cols * 48 * 20 / 0.3) + 48) == (20, cols)
    assert ranking.tile_shape(10_000, 1000, cuda, free=int(1000 * 48 * 20 / 0.3) + 48) == (20, 1000)
    assert ranking.tile_shape(5, 1000, cuda, free=10**12) == (5, 1000)


def test_training_items_never_recommended_and_short_catalogue_pads():
    U = np.eye(3, dtype=np.float32)[:2]
    V = np.eye(3, dtype=np.float32)
    train, test = [[0], [0, 2]], [[1], [1]]
    ranked = rc.rank_catalogue(U, V, csr(train, 3), csr(test, 3), device="cpu")
    assert ranked.top[0].tolist() == [1, 2] + [-1] * 8  # tie between 1 and 2 at 0: lower index first
    assert ranked.top[1].tolist() == [1] + [-1] * 9
    assert ranked.first_rank.tolist() == [1, 1]


def test_baseline_ranking_matches_brute_force():
    _, V, train, test = random_case(2)
    n = len(V)
    phi = np.asarray(csr(train, n).sum(0)).ravel()
    score = phi - np.arange(n) / (n + 1)
    r = rc.rank_by(lambda idx: np.broadcast_to(score, (len(idx), n)), n, csr(train, n), csr(test, n))
    for u, t in enumerate(train):
        order = [i for i in sorted(range(n), key=lambda i: (-phi[i], i)) if i not in set(t)]
        assert r.top[u].tolist() == order[:10]
        assert r.first_rank[u] == min(order.index(i) for i in test[u]) + 1
    # the random baseline's lists do not depend on how users are blocked
    a = rc.random_scores(np.arange(5)[:, None], np.arange(n)[None, :], 3)
    b = rc.random_scores(np.arange(2, 5)[:, None], np.arange(n)[None, :], 3)
    np.testing.assert_array_equal(a[2:], b)
    assert 0 <= a.min() and a.max() < 1 and abs(a.mean() - 0.5) < 0.05


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------

def test_accuracy_metrics_match_longhand():
    U, V, train, test = random_case(3)
    ranked = rc.rank_catalogue(U, V, csr(train, len(V)), csr(test, len(V)), device="cpu")
    users = np.arange(len(U))
    got = rc.accuracy_per_user(ranked.top, ranked.first_rank, csr(test, len(V)), users)
    want = longhand(ranked.top, ranked.first_rank, test)
    for m in rc.ACCURACY:
        np.testing.assert_allclose(got[m].to_numpy(), want[m].to_numpy(), rtol=1e-12, err_msg=m)


def test_hand_computed_lists():
    # user 0: list [3, 1, 4, ...], test {1, 9}: hit at rank 2; user 1: test {0}, nothing found, first at rank 12
    top = np.array([[3, 1, 4, 5, 6, 7, 8, 10, 11, 12], [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]])
    test = csr([[1, 9], [0]], 13)
    acc = rc.accuracy_per_user(top, np.array([2, 12]), test, np.arange(2))
    assert acc["hit_rate_at_10"].tolist() == [1.0, 0.0]
    assert acc["recall_at_10"].tolist() == [0.5, 0.0]
    assert acc["precision_at_10"].tolist() == [0.1, 0.0]
    assert acc["ndcg_at_10"][0] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert acc["map_at_10"][0] == pytest.approx(0.5 / 2)
    assert acc["mrr"].tolist() == [0.5, 1 / 12]


def test_seed_toy_example_coverage_and_gini():
    """seed 001 §21.4.2: three users' top-3 lists over items 1..10 (0-based here: item_k -> k-1)."""
    recs = [[0, 1, 2], [0, 3, 4], [0, 1, 5]]
    R = csr(recs, 10)
    counts = np.asarray(R.sum(0)).ravel()
    assert rc.gini(counts, zeros=False) == pytest.approx(13 / 54)  # the seed's gini_coefficient 0.2407
    # whole catalogue, zeros included: sorted counts 0,0,0,0,1,1,1,1,2,3 (n = 10, total 9)
    c = np.sort(counts)
    assert rc.gini(counts) == pytest.approx(sum((2 * j - 11) * c[j - 1] for j in range(1, 11)) / (10 * 9))
    beyond = pd.DataFrame({"recommended_popularity": [1.0] * 3, "history_popularity": [1.0] * 3})
    stats = rc.catalogue_stats(R, beyond)
    assert stats["catalog_coverage"] == pytest.approx(0.6)
    # personalization: pair overlaps 1, 2, 1 of 3 -> mean cosine 4/9
    assert stats["personalization"] == pytest.approx(1 - 4 / 9)
    assert rc.gini(np.ones(5)) == 0 and rc.gini([0, 0, 0, 5]) == pytest.approx(0.75)


def test_personalization_matches_pairwise_with_unequal_lists():
    rng = np.random.default_rng(4)
    lists = [sorted(rng.choice(30, rng.integers(1, 8), replace=False).tolist()) for _ in range(25)]
    R = csr(lists, 30)
    sims = [len(set(a) & set(b)) / math.sqrt(len(a) * len(b)) for i, a in enumerate(lists) for b in lists[i + 1:]]
    assert rc._personalization(R) == pytest.approx(1 - np.mean(sims))


def test_beyond_accuracy_matches_longhand():
    U, V, train, test = random_case(5)
    tr, te = csr(train, len(V)), csr(test, len(V))
    ranked = rc.rank_catalogue(U, V, tr, te, device="cpu")
    users = np.arange(len(U))
    b = rc.BeyondInputs.of(tr, V)
    hits = rc.hits_matrix(ranked.top, te, users)
    got = rc.beyond_per_user(ranked.top, hits, users, b)
    Vf = V.astype(np.float64)
    Vn = Vf / np.linalg.norm(Vf, axis=1, keepdims=True)
    phi = np.bincount([i for t in train for i in t], minlength=len(V))
    N = phi.sum()
    for u in users:
        lst = ranked.top[u]
        cos = Vn[lst] @ Vn[lst].T
        ild = 1 - (cos.sum() - np.trace(cos)) / (len(lst) * (len(lst) - 1))
        nov = np.mean([-math.log2(max(phi[i], 1) / N) for i in lst])
        assert got["intra_list_diversity"][u] == pytest.approx(ild)
        assert got["novelty"][u] == pytest.approx(nov)
        if train[u]:
            ser = np.mean([(1 - np.mean([Vn[i] @ Vn[j] for j in train[u]])) * (i in test[u]) for i in lst])
            assert got["serendipity"][u] == pytest.approx(ser, abs=1e-12)
            assert got["history_popularity"][u] == pytest.approx(np.mean(phi[train[u]]))
        else:
            assert np.isnan(got["serendipity"][u])
        assert got["recommended_popularity"][u] == pytest.approx(np.mean(phi[lst]))


def check_against_microsoft_recommenders(ref):
    """Ranking metrics at 10, per-user serendipity, diversity and novelty (-log2 of the share of users who
    interacted with the item), catalogue coverage on the same top-10 lists."""
    U, V, train, test, top = inputs.recommendation_case()
    tr, te = csr(train, len(V)), csr(test, len(V))
    ranked = rc.rank_catalogue(U, V, tr, te, device="cpu")
    np.testing.assert_array_equal(ranked.top, top)  # the peer scored the brute-force lists: the same lists
    users = np.arange(len(U))
    acc = rc.accuracy_per_user(ranked.top, ranked.first_rank, te, users)
    b = rc.BeyondInputs.of(tr, V)
    beyond = rc.beyond_per_user(ranked.top, rc.hits_matrix(ranked.top, te, users), users, b)
    for name in ("precision", "recall", "ndcg", "map"):
        assert acc[f"{name}_at_10"].mean() == pytest.approx(ref[name]), name
    np.testing.assert_allclose(beyond["serendipity"].to_numpy(), ref["user_serendipity"], atol=1e-12)
    np.testing.assert_allclose(beyond["intra_list_diversity"].to_numpy(), ref["user_diversity"], atol=1e-12)
    np.testing.assert_allclose(beyond["novelty"].to_numpy(), ref["user_novelty"])  # user 0's list is short
    assert rc.catalogue_stats(rc._lists_matrix(ranked.top, users, len(V)), beyond)["catalog_coverage"] == \
        pytest.approx(ref["catalog_coverage"])


def test_against_microsoft_recommenders():
    """Drift check against the installed python_evaluation (not in the test extra: it pins a training stack;
    `pip install --no-deps recommenders`; see tests/reference/)."""
    pytest.importorskip("recommenders.evaluation.python_evaluation")
    check_against_microsoft_recommenders(make_fixtures.recommenders_values())


def test_against_microsoft_recommenders_fixture():
    """Microsoft Recommenders' values kept in tests/reference/peers.json: runs in CI."""
    check_against_microsoft_recommenders(make_fixtures.fixture("recommenders"))


# ---------------------------------------------------------------------------------------------
# Splits and the full evaluation
# ---------------------------------------------------------------------------------------------

def test_time_split_holds_out_the_latest_and_random_split_is_seeded():
    users, items = np.arange(3), np.arange(3, 10)
    u = np.array([0, 0, 0, 0, 1, 1, 2, 0])
    i = np.array([3, 4, 5, 6, 3, 4, 5, 3])
    t = np.array([1.0, 4.0, 3.0, 2.0, 1.0, 2.0, 1.0, 9.0])  # (0, 3) repeated later: the first is kept
    s = rc.split_interactions(users, items, u, i, time=t, holdout=2)
    assert s.mode == "time" and s.counts["repeated_dropped"] == 1 and s.counts["users_too_few"] == 2
    assert s.test[0].indices.tolist() == [1, 2]  # items 4 and 5: the two latest of user 0
    assert s.evaluated.tolist() == [0]
    r1 = rc.split_interactions(users, items, u, i, holdout=1, seed=3)
    r2 = rc.split_interactions(users, items, u, i, holdout=1, seed=3)
    assert r1.mode == "random" and (r1.test != r2.test).nnz == 0 and r1.test.nnz == 2
    assert (r1.train.multiply(r1.test)).nnz == 0


def test_given_test_drops_training_pairs_and_evaluation_needs_a_test_user():
    users, items = np.arange(2), np.arange(2, 6)
    s = rc.split_interactions(users, items, [0, 1], [2, 3], test_user=[0, 0, 1], test_item=[2, 4, 3])
    assert s.counts["test_in_train_dropped"] == 2 and s.evaluated.tolist() == [0]
    none = rc.split_interactions(users, items, [0, 1], [2, 3], test_user=[0], test_item=[2])
    with pytest.raises(InputError, match="no user has a held-out"):
        rc.evaluate_recommendation(np.ones((2, 3)), np.ones((4, 3)), none, device="cpu")


def test_evaluation_records_every_metric_with_intervals_and_sampled_only_on_request():
    U, V, train, test = random_case(7, n_users=60, n_items=120)
    u = [x for x, t in enumerate(train) for _ in t]
    i = [y for t in train for y in t]
    s = rc.split_interactions(np.arange(60), np.arange(60, 180), u, np.array(i) + 60,
                              test_user=[x for x, t in enumerate(test) for _ in t],
                              test_item=np.array([y for t in test for y in t]) + 60)
    r = rc.evaluate_recommendation(U, V, s, device="cpu", seed=1)
    assert list(r.metrics) == list(rc.METRICS) and not r.sampled_metrics
    for name in rc.ACCURACY + rc.PER_USER_BEYOND:
        m = r.metrics[name]
        assert m.ci_low <= m.value <= m.ci_high, name
    assert all(r.metrics[n].has_ci for n in rc.CATALOGUE)
    assert set(r.recommenders) == {"embeddings", "most popular", "random"}
    r2 = rc.evaluate_recommendation(U, V, s, device="cpu", seed=1, sampled_negatives=20)
    assert set(r2.sampled_metrics) == {"sampled_hit_rate_at_10", "sampled_ndcg_at_10"}
    assert "sampled" in r2.sampled_metrics["sampled_ndcg_at_10"].label
    # with few negatives the sampled hit rate is far above the full-ranking one
    assert r2.sampled_metrics["sampled_hit_rate_at_10"].value > r2.metrics["hit_rate_at_10"].value


# ---------------------------------------------------------------------------------------------
# The reader: one clear line for bad input
# ---------------------------------------------------------------------------------------------

class _Set:
    def __init__(self, ids, kinds=None):
        self.ids = np.array(ids, dtype=object)
        self.n = len(ids)
        self.metadata = None if kinds is None else pd.DataFrame({"kind": kinds}, index=pd.Index(ids, name="id"))


@pytest.fixture
def es():
    return _Set(["u1", "u2", "i1", "i2", "i3"], ["user", "user", "item", "item", "item"])


def test_reader_accepts_aliases_dates_and_ratings(tmp_path, es):
    p = tmp_path / "inter.csv"
    p.write_text("UserID,item,time,rating\nu1,i1,2024-01-02,4\nu2,i3,2024-01-05,2.5\n")
    r = read_interactions(p, es)
    assert r.user.tolist() == [0, 1] and r.item.tolist() == [2, 4] and r.time_is_date
    assert r.rating.tolist() == [4.0, 2.5] and r.roles.source == "metadata column 'kind'"


@pytest.mark.parametrize("text, words", [
    ("user_id,item_id\nu1,i1\nu9,i2\n", ["row 2", "'user_id'", "unknown id 'u9'"]),
    ("user_id,item_id\nu1,i1\nu1,u2\n", ["row 2", "'item_id'", "'u2' is a user", "expected an item"]),
    ("user_id,item_id\ni1,i2\n", ["row 1", "'user_id'", "'i1' is an item"]),
    ("user,thing\nu1,i1\n", ["missing column", "'item_id'"]),
    ("user_id,item_id,rating\nu1,i1,5\nu2,i2,lots\n", ["row 2", "'rating'", "'lots'"]),
    ("user_id,item_id,timestamp\nu1,i1,2024-01-01\nu2,i2,someday\n", ["row 2", "'timestamp'", "someday"]),
    ("user_id,item_id\n", ["no rows"]),
])
def test_reader_bad_input_is_one_clear_line(tmp_path, es, text, words):
    p = tmp_path / "inter.csv"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        read_interactions(p, es, label="inter.csv (interactions)")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("inter.csv (interactions)")
    for w in words:
        assert w in msg, (w, msg)


def test_roles_from_lists_or_from_the_interactions(tmp_path):
    es = _Set(["a", "b", "x", "y"])
    p = tmp_path / "inter.tsv"
    p.write_text("user_id\titem_id\na\tx\nb\ty\n")
    r = read_interactions(p, es)
    assert r.roles.users.tolist() == [0, 1] and r.roles.items.tolist() == [2, 3]
    lst = tmp_path / "items.txt"
    lst.write_text("x\ny\nb\n")
    items = read_id_list(lst, es.ids)
    with pytest.raises(InputError, match="'b' is an item"):
        read_interactions(p, es, items=items)
    lst.write_text("x\nzz\n")
    with pytest.raises(InputError, match="line 2: unknown id 'zz'"):
        read_id_list(lst, es.ids)


# ---------------------------------------------------------------------------------------------
# End to end
# ---------------------------------------------------------------------------------------------

def test_end_to_end_report(tmp_path):
    from embeval_report.cli import main

    rng = np.random.default_rng(0)
    n_users, n_items, d = 60, 80, 8
    ids = [f"u{i}" for i in range(n_users)] + [f"item {i}" for i in range(n_items)]
    np.save(tmp_path / "vectors.npy", rng.standard_normal((n_users + n_items, d)).astype(np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    pd.DataFrame({"id": ids, "kind": ["user"] * n_users + ["item"] * n_items}).to_csv(tmp_path / "meta.csv",
                                                                                      index=False)
    rows = [(f"u{u}", f"item {i}", int(rng.integers(0, 1000))) for u in range(n_users)
            for i in rng.choice(n_items, 6, replace=False)]
    pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"]).to_csv(tmp_path / "inter.csv", index=False)
    (tmp_path / "m.yaml").write_text("vectors: vectors.npy\nids: ids.txt\nmetadata: meta.csv\n"
                                     "interactions: inter.csv\nscore: cosine\n")
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--formats", "html", "--chapters",
                 "recommendation", "--device", "cpu"]) == 0
    chapter = json.loads((out / "metrics.json").read_text())["chapters"]["recommendation"]
    for name in rc.METRICS:
        assert chapter["metrics"][name]["ci_low"] is not None, name
    html = (out / "report.html").read_text()
    for words in ("most popular", "Lorenz", "head", "The evaluation protocol", "Wilcoxon"):
        assert words in html, words


# ---------------------------------------------------------------------------------------------
# The task scorer (issue 41): per-user units, their aggregates, the plan, compare
# ---------------------------------------------------------------------------------------------

def test_scorer_aggregates_are_the_recorded_numbers():
    from scorer_world import assert_aggregates_are_recorded

    assert_aggregates_are_recorded("recommendation")


def test_scorer_plan_does_not_read_the_vectors():
    from scorer_world import assert_plan_ignores_the_vectors

    assert_plan_ignores_the_vectors("recommendation")


def test_user_units_reproduce_every_per_user_number_with_users_without_history():
    """Given test interactions, some users have no training item (serendipity undefined, NaN): the unit table's
    aggregates, read back from its CSV too, are the evaluation's numbers bit for bit, and the user ids are the
    units."""
    from embeval_report.chapters import recommendation as chapter

    U, V, train, test = random_case(7, n_users=60, n_items=120)
    train = [t if x % 6 else [] for x, t in enumerate(train)]  # every sixth user: no history
    u = [x for x, t in enumerate(train) for _ in t]
    i = [y for t in train for y in t]
    s = rc.split_interactions(np.arange(60), np.arange(60, 180), u, np.array(i) + 60,
                              test_user=[x for x, t in enumerate(test) for _ in t],
                              test_item=np.array([y for t in test for y in t]) + 60)
    ids = np.array([f"u{x}" for x in range(60)] + [f"i{y}" for y in range(120)], dtype=object)
    X = np.vstack([U, V])
    plan = rc.recommendation_plan(s, ids)
    run = rc.run_recommendation(X, plan, device="cpu")
    r = rc.evaluate_recommendation(U, V, s, device="cpu", seed=1)
    assert run.per_user["serendipity"].isna().sum() >= 10
    values = chapter.SCORER.values(run.per_user)
    assert values == {m: r.metrics[m].value for m in values}
    assert list(run.per_user["user"]) == [f"u{x}" for x in s.evaluated]
    csv = run.per_user.to_csv(index=False)
    import io
    back = pd.read_csv(io.StringIO(csv), dtype={"user": str}, keep_default_na=False,
                       na_values={m: ["", "nan", "NaN"] for m in rc.ACCURACY})  # as compare reads a unit table
    assert chapter.SCORER.values(back) == values


def test_compare_finds_a_planted_recommendation_difference_there_only(tmp_path):
    from scorer_world import assert_found_only_in, planted_comparison

    table = planted_comparison(tmp_path, "recommendation")
    assert_found_only_in(table, "recommendation", ("ndcg_at_10", "hit_rate_at_10", "recall_at_10", "mrr"))


def test_plan_fingerprint_reads_the_split_s_interactions():
    """A recommendation plan holds sparse matrices: its fingerprint reads their entries (not their text, which
    names only the shape and the count), so two splits with as many interactions but other ones differ."""
    from embeval_report.metrics.scoring import plan_fingerprint

    a = rc.split_interactions(np.arange(3), np.arange(3, 8), [0, 1, 2, 0], [3, 4, 5, 6], holdout=0)
    b = rc.split_interactions(np.arange(3), np.arange(3, 8), [0, 1, 2, 0], [3, 4, 5, 7], holdout=0)
    assert a.train.nnz == b.train.nnz and str(a.train) != "" and plan_fingerprint(a) != plan_fingerprint(b)
    assert plan_fingerprint(a) == plan_fingerprint(rc.split_interactions(np.arange(3), np.arange(3, 8), [0, 1, 2, 0],
                                                                         [3, 4, 5, 6], holdout=0))
    assert plan_fingerprint(a.train) == plan_fingerprint(a.train.tocoo())
