"""Stability across runs and over training time, against closed forms, brute force, SciPy/statsmodels
and a real gensim Word2Vec run on the Lee corpus."""
import json
import re

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from scipy.stats import ortho_group

from embeval_report.chapters import stability as st_chapter  # noqa: E402
from embeval_report.chapters import training_stability as ts_chapter  # noqa: E402
from embeval_report.metrics import stability as mst  # noqa: E402
from embeval_report.metrics import training_stability as mts  # noqa: E402
from embeval_report.errors import InputError
from embeval_report.io import EmbeddingSet, load_source
from embeval_report.io.runs import load_tranches, read_vocabularies
from embeval_report.metrics.procrustes import procrustes_align


def load_runs(es):
    """The ``runs`` of ``es`` read (:mod:`embeval_report.io.runs`) and matched to the entities of every run."""
    from embeval_report.io.runs import load_runs as read_runs
    return mst.match_runs(es, read_runs(es))


def _with_tranches(es):
    return es, load_tranches(es)


def noisy_runs(n=300, d=12, sigma=0.3, R=3, seed=0, rotate=True):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d))
    out = []
    for r in range(R):
        X = base + sigma * rng.standard_normal((n, d))
        out.append(X @ ortho_group.rvs(d, random_state=seed + r + 1) if rotate else X)
    return out


def dense_knn(X, k):
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = U @ U.T
    np.fill_diagonal(S, -np.inf)
    return np.argsort(-S, axis=1, kind="stable")[:, :k]


def gram_corr_brute(A, B, same=None):
    """Pearson correlation of centred Gram entries over ordered pairs, excluding ``same`` (default: i == j)."""
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    GA, GB = Ac @ Ac.T, Bc @ Bc.T
    mask = ~np.eye(len(A), dtype=bool) if same is None else ~same
    return np.corrcoef(GA[mask], GB[mask])[0, 1]


# ---------------------------------------------------------------------------------------------
# Across runs: exact expectations
# ---------------------------------------------------------------------------------------------

def test_pure_rotation_gives_overlap_one_and_aligned_cosine_one():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((250, 10))
    runs = [X, X @ ortho_group.rvs(10, random_state=1), X @ ortho_group.rvs(10, random_state=2)]
    r = mst.measure_run_stability(runs, k=10, n_boot=50)
    assert np.all(r.overlap == 1.0) and np.all(r.overlap_by_pair == 1.0)
    assert np.allclose(r.aligned_cosine, 1.0, atol=1e-9)
    assert r.values["procrustes_disparity"] == pytest.approx(0.0, abs=1e-10)
    assert r.values["pairwise_similarity_correlation"] == pytest.approx(1.0, abs=1e-10)
    assert r.metrics["pairwise_similarity_correlation"].verdict == "healthy"
    assert len(r.pairs) == 3 and list(r.pairs["verdict"]) == ["healthy"] * 3


def test_translation_leaves_procrustes_metrics_unchanged():
    A, B, _ = noisy_runs(R=3, rotate=False)
    r0 = mst.measure_run_stability([A, B], n_boot=0)
    r1 = mst.measure_run_stability([A + 5.0, B - 2.0], n_boot=0)
    for name in ("procrustes_aligned_cosine", "procrustes_disparity", "pairwise_similarity_correlation"):
        assert r1.values[name] == pytest.approx(r0.values[name], rel=1e-9)


def test_independent_runs_overlap_at_chance_k_over_n_minus_1():
    rng = np.random.default_rng(7)
    n, k = 1000, 10
    runs = [rng.standard_normal((n, 16)) for _ in range(3)]
    r = mst.measure_run_stability(runs, k=k, n_boot=0)
    assert r.chance == mst.chance_overlap(n, k) == pytest.approx(k / (n - 1))
    assert r.values["knn_overlap"] == pytest.approx(k / (n - 1), abs=0.003)
    assert abs(r.values["pairwise_similarity_correlation"]) < 0.02
    assert r.metrics["pairwise_similarity_correlation"].verdict == "problematic"


def test_per_entity_overlap_and_aligned_cosine_match_brute_force():
    A, B = noisy_runs(n=150, d=6, sigma=0.4, R=2)
    r = mst.measure_run_stability([A, B], k=7, n_boot=0)
    na, nb = dense_knn(A, 7), dense_knn(B, 7)
    expected = np.array([len(set(a) & set(b)) / 7 for a, b in zip(na, nb)])
    np.testing.assert_allclose(r.overlap_by_pair[0], expected)
    # Schönemann's closed form: R = U Vᵀ from the SVD of B̃ᵀÃ
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    U, _, Vt = np.linalg.svd(Bc.T @ Ac)
    aligned = Bc @ (U @ Vt)
    cos = (Ac * aligned).sum(1) / np.linalg.norm(Ac, axis=1) / np.linalg.norm(aligned, axis=1)
    np.testing.assert_allclose(r.aligned_cosine, cos, atol=1e-10)
    assert r.pairs["Procrustes distance"].iloc[0] == pytest.approx(np.sqrt(r.values["procrustes_disparity"]))


def test_similarity_correlation_is_exact_over_all_pairs():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((200, 5)) + 2.0
    B = np.hstack([A, rng.standard_normal((200, 2))]) + 0.7 * rng.standard_normal((200, 7))  # d differs
    assert mst.similarity_correlation(A, B) == pytest.approx(gram_corr_brute(A, B), rel=1e-10)


def test_similarity_correlation_closed_form_for_noisy_copies():
    """Two copies of a base with independent N(0, σ²) noise: corr of Gram entries = 1/(1+σ²)² (seed 000 App. B)."""
    rng = np.random.default_rng(11)
    base = rng.standard_normal((4000, 32))
    sigma = 0.5
    A, B = (base + sigma * rng.standard_normal(base.shape) for _ in range(2))
    assert mst.similarity_correlation(A, B) == pytest.approx(1 / (1 + sigma ** 2) ** 2, abs=0.015)


def test_block_bootstrap_moments_equal_the_resampled_rows():
    """A replicate with block weights w equals the statistic on the explicitly replicated rows."""
    n, seed = 40, 5
    A, B = noisy_runs(n=n, d=4, sigma=0.5, R=2, seed=2)
    mom = mst.PairMoments.gather(A, B, n_blocks=n, seed=seed)
    row_of_block = np.random.default_rng(seed).permutation(n)  # block_moments' assignment, one row per block
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    np.testing.assert_allclose(mom.sa, Ac[row_of_block], atol=1e-12)
    assert mom.disparity() == pytest.approx(procrustes_align(A, B).disparity, rel=1e-10)
    w = np.random.default_rng(1).multinomial(n, np.full(n, 1 / n)).astype(float)
    rows = np.repeat(row_of_block, w.astype(int))
    RA, RB = Ac[rows], Bc[rows]
    assert mom.disparity(w) == pytest.approx(procrustes_align(RA, RB, center=False).disparity, rel=1e-9)
    GA, GB = RA @ RA.T, RB @ RB.T
    mask = rows[:, None] != rows[None, :]  # pairs of copies of one row are self-pairs
    assert mom.correlation(w) == pytest.approx(np.corrcoef(GA[mask], GB[mask])[0, 1], rel=1e-9)


def test_intervals_bracket_means_and_are_deterministic():
    runs = noisy_runs(n=400, d=8, sigma=0.4, R=3)
    a = mst.measure_run_stability(runs, n_boot=100, seed=4)
    b = mst.measure_run_stability(runs, n_boot=100, seed=4)
    for name, m in a.metrics.items():
        assert (m.ci_low, m.ci_high) == (b.metrics[name].ci_low, b.metrics[name].ci_high)
        assert m.ci_low is not None and m.ci_low < m.ci_high
    for name in ("knn_overlap", "procrustes_aligned_cosine", "pairwise_similarity_correlation"):
        assert a.metrics[name].ci_low <= a.values[name] <= a.metrics[name].ci_high
    assert "bootstrap" in a.ci_method and a.n_blocks == 64


def test_least_stable_lists_the_noisiest_entities_by_id():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((200, 8))
    Y = X.copy()
    Y[:5] = rng.standard_normal((5, 8))  # five entities re-drawn in the second run
    ids = np.array([f"e<{i}>" for i in range(200)], dtype=object)
    r = mst.measure_run_stability([X, Y], n_boot=0)
    t = mst.least_stable(r, ids, pd.DataFrame({"label": ["x"] * 200}, index=ids), n=5)
    assert set(t["id"]) == {f"e<{i}>" for i in range(5)}
    assert list(t.columns[:4]) == ["rank", "id", "k-NN overlap", "aligned cosine"] and "label" in t
    text = st_chapter.narrative(r, ids=ids)
    assert "e&lt;" in text and "<0>" not in text  # ids are escaped


def test_verdict_bands_follow_seed_000_section_217_2_2():
    from embeval_report.metrics.thresholds import verdict
    assert verdict("pairwise_similarity_correlation", 0.97) == "healthy"
    assert verdict("pairwise_similarity_correlation", 0.90) == "concerning"
    assert verdict("pairwise_similarity_correlation", 0.80) == "problematic"


# ---------------------------------------------------------------------------------------------
# Real data: gensim Word2Vec on the Lee corpus, several seeds
# ---------------------------------------------------------------------------------------------

def test_word2vec_runs_frequent_words_are_more_stable(tmp_path):
    pytest.importorskip("gensim")
    from gensim.models import Word2Vec
    from gensim.test.utils import datapath
    from gensim.utils import simple_preprocess

    with open(datapath("lee_background.cor")) as f:
        sentences = [simple_preprocess(line) for line in f]
    files = []
    for s in (1, 2, 3):
        model = Word2Vec(sentences, vector_size=16, window=5, min_count=5, epochs=5, workers=1, seed=s)
        files.append(tmp_path / f"seed{s}.txt")
        model.wv.save_word2vec_format(str(files[-1]))  # word2vec text: the words are the ids
        if s == 1:
            words = model.wv.index_to_key
            pd.DataFrame({"id": words, "frequency": [model.wv.get_vecattr(w, "count") for w in words]}) \
                .to_csv(tmp_path / "meta.csv", index=False)
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"vectors": "seed1.txt", "metadata": "meta.csv",
                                                     "runs": ["seed2.txt", "seed3.txt"]}))
    es = load_source(tmp_path / "m.yaml")
    inputs = load_runs(es)
    assert inputs.coverage["missing"].sum() == 0 and len(inputs.ids) == es.n
    r = mst.measure_run_stability(inputs, n_boot=0)
    assert r.values["knn_overlap"] > 2 * r.chance
    freq = mst.frequency_association(r, es.metadata, inputs.index)
    assert freq["rho"] > 0.3 and freq["p"] < 1e-10
    groupings = mst.stability_groupings(es, inputs.index)
    assert [g.name for g in groupings] == ["frequency quartile"]
    s = mst.subset_stability(r, groupings)
    means = s.table["k-NN overlap"].to_numpy()
    assert means[3] > means[2] > means[0]  # Q4 (most frequent) > Q3 > Q1 (rarest)
    q1_q4 = s.tests[s.tests["comparison"].str.startswith("Q1") & s.tests["comparison"].str.contains("Q4")]
    assert q1_q4["p (Holm)"].iloc[0] < 1e-6 and q1_q4["effect A"].iloc[0] < 0.35


# ---------------------------------------------------------------------------------------------
# Subsets
# ---------------------------------------------------------------------------------------------

def make_set(X, ids, metadata=None, **fields):
    return EmbeddingSet("t", np.asarray(X, np.float32), np.asarray(ids, dtype=object), metadata, "t.yaml", fields)


def two_group_runs(n=400, seed=0):
    """First half identical up to rotation across runs, second half heavily re-noised."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 10))
    runs = [X]
    for r in range(2):
        Y = X.copy()
        Y[n // 2:] += 1.5 * rng.standard_normal((n - n // 2, 10))
        runs.append(Y @ ortho_group.rvs(10, random_state=r + 1))
    return runs


def test_subsets_differ_kruskal_mann_whitney_with_holm(tmp_path):
    n = 400
    runs = two_group_runs(n)
    ids = [f"w{i}" for i in range(n)]
    (tmp_path / "stable.txt").write_text("\n".join(ids[:100]) + "\nnot_a_word\n")
    (tmp_path / "noisy.txt").write_text("\n".join(ids[300:]))
    (tmp_path / "mixed.txt").write_text("\n".join(ids[150:250]))
    voc = [{"name": "stable", "ids": str(tmp_path / "stable.txt")}, {"name": "noisy", "ids": str(tmp_path / "noisy.txt")},
           {"name": "mixed", "ids": str(tmp_path / "mixed.txt")}]
    es = make_set(runs[0], ids, vocabularies=voc)
    r = mst.measure_run_stability(runs, n_boot=0)
    g = mst.vocabulary_grouping(es, np.arange(n), read_vocabularies(es))
    assert g.disjoint and [len(v) for v in g.subsets.values()] == [100, 100, 100]
    assert any("1 not in the embedding set" in note for note in g.notes)
    s = mst.subset_stability(r, [g])
    t = s.table.set_index("subset")
    assert t.loc["stable", "k-NN overlap"] > t.loc["mixed", "k-NN overlap"] > t.loc["noisy", "k-NN overlap"] + 0.1
    kw = s.tests.iloc[0]
    assert "Kruskal" in kw["comparison"]
    assert kw["statistic"] == pytest.approx(stats.kruskal(*[r.overlap[v] for v in g.subsets.values()]).statistic)
    mw = s.tests.iloc[1:]
    p = mw["p"].to_numpy()
    order = np.argsort(p)  # Holm by hand: p_(i) (m − i + 1), running maximum, capped at 1
    holm = np.minimum(1, np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p)))))
    np.testing.assert_allclose(mw["p (Holm)"].to_numpy()[order], holm)
    sn = mw[mw["comparison"].str.startswith("stable vs noisy")].iloc[0]
    assert sn["differs"] and sn["effect A"] > 0.9
    assert "Holm" in st_chapter.subset_text(s)


def test_overlapping_vocabularies_are_tested_against_the_rest(tmp_path):
    n = 400
    runs = two_group_runs(n)
    ids = [f"w{i}" for i in range(n)]
    (tmp_path / "a.txt").write_text("\n".join(ids[:250]))
    (tmp_path / "b.txt").write_text("\n".join(ids[150:]))
    es = make_set(runs[0], ids, vocabularies=[{"name": "a", "ids": str(tmp_path / "a.txt")},
                                              {"name": "b", "ids": str(tmp_path / "b.txt")}])
    g = mst.vocabulary_grouping(es, np.arange(n), read_vocabularies(es))
    assert not g.disjoint
    s = mst.subset_stability(mst.measure_run_stability(runs, n_boot=0), [g])
    assert list(s.tests["comparison"]) == ["a vs the rest (Mann–Whitney U)", "b vs the rest (Mann–Whitney U)"]


def test_vocabulary_without_known_ids_is_an_input_error(tmp_path):
    (tmp_path / "v.txt").write_text("zzz\nyyy\n")
    es = make_set(np.eye(20, 5) + 1, [f"w{i}" for i in range(20)],
                  vocabularies=[{"name": "ghosts", "ids": str(tmp_path / "v.txt")}])
    with pytest.raises(InputError, match=r"v\.txt.*none of its 2 ids"):
        mst.vocabulary_grouping(es, np.arange(20), read_vocabularies(es))


def test_frequency_quartiles_and_kind_groupings_from_metadata():
    n = 100
    ids = [f"e{i}" for i in range(n)]
    meta = pd.DataFrame({"frequency": np.arange(1, n + 1), "kind": ["user"] * 60 + ["item"] * 40},
                        index=pd.Index(ids, name="id"))
    es = make_set(np.random.default_rng(0).standard_normal((n, 4)), ids, meta)
    gs = mst.stability_groupings(es, np.arange(n))
    assert [g.name for g in gs] == ["frequency quartile", "kind"]
    q = gs[0]
    assert list(q.subsets) == ["Q1: 1 – 25", "Q2: 26 – 50", "Q3: 51 – 75", "Q4: 76 – 100"]
    assert all(len(v) == 25 for v in q.subsets.values())
    assert {k: len(v) for k, v in gs[1].subsets.items()} == {"item": 40, "user": 60}


# ---------------------------------------------------------------------------------------------
# Id matching
# ---------------------------------------------------------------------------------------------

def write_table(path, ids, X):
    df = pd.DataFrame(X, columns=[f"d{j}" for j in range(X.shape[1])])
    df.insert(0, "id", ids)
    df.to_parquet(path, index=False)


def test_runs_matched_by_id_report_missing_and_extra(tmp_path):
    n = 120
    X = np.random.default_rng(0).standard_normal((n, 6)).astype(np.float32)
    ids = [f"e_{i}*" for i in range(n)]
    np.save(tmp_path / "v.npy", X)
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    np.save(tmp_path / "r1.npy", X[::-1].copy() * 0 + X)  # same order as the manifest ids
    keep = np.arange(3, n)[::-1]  # lacks e_0*, e_1*, e_2*; other order
    write_table(tmp_path / "r2.parquet", [ids[i] for i in keep] + ["new_1", "new_2"],
                np.vstack([X[keep], np.ones((2, 6), np.float32)]))
    (tmp_path / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nruns: [r1.npy, r2.parquet]\n")
    es = load_source(tmp_path / "m.yaml")
    inputs = load_runs(es)
    cov = inputs.coverage.set_index("run")
    assert cov.loc["r2.parquet", ["missing", "extra", "matched"]].tolist() == [3, 2, n - 3]
    assert cov.loc["r2.parquet", "extra ids (first)"] == "new_1, new_2"
    assert list(inputs.excluded) == ids[:3] and len(inputs.ids) == n - 3
    for V in inputs.vectors:
        np.testing.assert_array_equal(V, X[3:])  # rows re-ordered to the main set's
    r = mst.measure_run_stability(inputs, n_boot=0)
    assert r.values["knn_overlap"] == 1.0
    text = st_chapter.coverage_text(inputs)
    assert "lacks 3" in text and "has 2 ids" in text and r"e\_0\*" in text


def test_run_without_ids_and_wrong_row_count_is_an_input_error(tmp_path):
    X = np.random.default_rng(0).standard_normal((30, 4)).astype(np.float32)
    np.save(tmp_path / "v.npy", X)
    np.save(tmp_path / "short.npy", X[:20])
    (tmp_path / "m.yaml").write_text("vectors: v.npy\nruns: [short.npy]\n")
    with pytest.raises(InputError, match=r"short\.npy: 20 rows but the reference set has 30"):
        load_runs(load_source(tmp_path / "m.yaml"))


# ---------------------------------------------------------------------------------------------
# Tranches
# ---------------------------------------------------------------------------------------------

def cohort_case(tmp_path):
    """40 early entities from t1; 10 pairs of late entities from t2 that split at t3 by ±δ.

    The late pairs' moves cancel in the cross-covariance, so the Procrustes rotation between t2
    and t3 is exactly the planted one, early entities move by exactly 0, and a late entity by
    1 − cos(c − μ, c ± δ − μ).
    """
    rng = np.random.default_rng(0)
    d = 4
    early = rng.standard_normal((40, d))
    centres = rng.standard_normal((10, d))
    delta = 0.8 * rng.standard_normal((10, d))
    late_t2 = np.repeat(centres, 2, axis=0)
    late_t3 = late_t2 + np.repeat(delta, 2, axis=0) * np.tile([1, -1], 10)[:, None]
    e_ids = [f"early{i}" for i in range(40)]
    l_ids = [f"late{i}" for i in range(20)]
    Q = [ortho_group.rvs(d, random_state=s) for s in (1, 2, 3)]
    write_table(tmp_path / "t1.parquet", e_ids + ["ghost"], np.vstack([early, np.ones((1, d))]) @ Q[0])
    write_table(tmp_path / "t2.parquet", e_ids + l_ids, np.vstack([early, late_t2]) @ Q[1])
    write_table(tmp_path / "t3.parquet", l_ids + e_ids, np.vstack([late_t3, early]) @ Q[2])
    main = np.vstack([early, late_t3, rng.standard_normal((2, d))])
    np.save(tmp_path / "v.npy", main.astype(np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(e_ids + l_ids + ["never1", "never2"]))
    manifest = {"vectors": "v.npy", "ids": "ids.txt",
                "tranches": [{"name": "t3", "vectors": "t3.parquet", "order": 3},
                             {"name": "t1", "vectors": "t1.parquet", "order": 1},
                             {"name": "t2", "vectors": "t2.parquet", "order": 2}]}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(manifest))
    X2, X3 = np.vstack([early, late_t2]), np.vstack([early, late_t3])
    mu = X2.mean(0)  # = X3.mean(0): the ±δ cancel
    c2, c3 = X2 - mu, X3 - mu
    expected = 1 - (c2 * c3).sum(1) / np.linalg.norm(c2, axis=1) / np.linalg.norm(c3, axis=1)
    return load_source(tmp_path / "m.yaml"), expected


def test_tranche_cohorts_and_movement_on_a_constructed_case(tmp_path):
    es, expected = cohort_case(tmp_path)
    runs = load_tranches(es)
    assert [cp.name for cp in runs["run"]] == ["t1", "t2", "t3"]  # sorted by order
    r = mts.measure_training_stability(es, runs, k=5, n_boot=0)
    cov = r.coverage.set_index("tranche")
    assert cov["new"].tolist() == [40, 20, 0] and cov.loc["t1", "extra ids"] == 1
    assert cov.loc["t1", "not yet present"] == 22
    co = r.cohorts.set_index(["cohort", "tranche"])
    assert co.loc[("t1", "t2"), "n"] == 40 and co.loc[("t1", "t3"), "n"] == 40 and co.loc[("t2", "t3"), "n"] == 20
    assert co.loc[("t1", "t2"), "mean movement"] == pytest.approx(0, abs=1e-9)
    assert co.loc[("t1", "t3"), "mean movement"] == pytest.approx(0, abs=1e-9)
    assert co.loc[("t2", "t3"), "mean movement"] == pytest.approx(expected[40:].mean(), rel=1e-8)
    mv = r.movement[r.movement["step"] == 2].sort_values("row")
    np.testing.assert_allclose(mv["movement"].to_numpy(), expected, atol=1e-9)
    assert r.values["tranche_movement_last"] == pytest.approx(expected.mean(), rel=1e-8)
    assert r.transitions["n"].tolist() == [40, 60]
    assert r.transitions["k-NN overlap"].iloc[0] == 1.0  # t1 → t2: early entities only rotated
    assert "tranche_cross_run_knn_overlap_final" not in r.metrics  # one run
    assert "anchors" in ts_chapter.training_narrative(r)


def test_tranches_across_runs_are_compared_at_each_shared_name(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((80, 6))
    ids = [f"e{i}" for i in range(80)]
    np.save(tmp_path / "v.npy", X.astype(np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    entries = []
    for run in ("a", "b"):
        for t, noise in ((1, 0.8), (2, 0.3)):
            np.save(tmp_path / f"{run}{t}.npy", (X + noise * rng.standard_normal(X.shape)).astype(np.float32))
            entries.append({"name": f"epoch {t}", "vectors": f"{run}{t}.npy", "run": run})
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"vectors": "v.npy", "ids": "ids.txt", "tranches": entries}))
    r = mts.measure_training_stability(*_with_tranches(load_source(tmp_path / "m.yaml")), k=5, n_boot=30)
    assert r.cross_run["tranche"].tolist() == ["epoch 1", "epoch 2"]
    assert r.cross_run["k-NN overlap"].iloc[1] > r.cross_run["k-NN overlap"].iloc[0]
    m = r.metrics["tranche_cross_run_knn_overlap_final"]
    assert m.value == pytest.approx(r.cross_run["k-NN overlap"].iloc[1]) and m.ci_low <= m.value <= m.ci_high


@pytest.mark.parametrize("orders, message", [
    ([1, "x", 3], "mixes numbers and text"),
    ([1, None, 3], "given for some tranches but not"),
    ([2, 2, 3], "same order 2"),
    (["2024-01-01", "soon", "2024-03-01"], "'soon' is not a number or a date"),
])
def test_bad_tranche_orders_are_input_errors(tmp_path, orders, message):
    X = np.random.default_rng(0).standard_normal((30, 4)).astype(np.float32)
    np.save(tmp_path / "v.npy", X)
    entries = [dict({"name": f"t{i}", "vectors": "v.npy"}, **({"order": o} if o is not None else {}))
               for i, o in enumerate(orders)]
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"vectors": "v.npy", "tranches": entries}))
    with pytest.raises(InputError, match=message):
        load_tranches(load_source(tmp_path / "m.yaml"))


def test_dates_order_tranches_and_a_single_checkpoint_is_an_input_error(tmp_path):
    X = np.random.default_rng(0).standard_normal((30, 4)).astype(np.float32)
    np.save(tmp_path / "v.npy", X)
    entries = [{"name": "late", "vectors": "v.npy", "order": "2024-03-01"},
               {"name": "early", "vectors": "v.npy", "order": "2024-01-15"}]
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"vectors": "v.npy", "tranches": entries}))
    assert [cp.name for cp in load_tranches(load_source(tmp_path / "m.yaml"))["run"]] == ["early", "late"]
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"vectors": "v.npy", "tranches": entries[:1]}))
    with pytest.raises(InputError, match="at least two checkpoints"):
        load_tranches(load_source(tmp_path / "m.yaml"))


# ---------------------------------------------------------------------------------------------
# Demo side data and the chapters end to end
# ---------------------------------------------------------------------------------------------

def test_demo_side_data_plants_frequency_and_cohort_effects(demo_data):
    manifest = yaml.safe_load(demo_data.read_text())  # write_demo's, with the stability module's side data
    assert {"runs", "tranches", "vocabularies"} <= set(manifest) and len(manifest["runs"]) == 4
    es = load_source(demo_data)
    inputs = load_runs(es)
    assert inputs.coverage["missing"].tolist() == [0, 0, 0, 0, 8] and inputs.coverage["extra"].iloc[-1] == 3
    r = mst.measure_run_stability(inputs, n_boot=0)
    s = mst.subset_stability(r, mst.stability_groupings(es, inputs.index, vocabularies=read_vocabularies(es)))
    t = s.table.set_index("subset")
    assert t.loc["popular items", "k-NN overlap"] > t.loc["niche items", "k-NN overlap"] + 0.1
    assert mst.frequency_association(r, es.metadata, inputs.index)["rho"] > 0.3
    tr = mts.measure_training_stability(es, load_tranches(es), k=10, n_boot=0)
    last = tr.cohorts[tr.cohorts["step"] == tr.cohorts["step"].max()].sort_values("cohort_step")
    assert last["mean movement"].iloc[-1] > 5 * last["mean movement"].iloc[0]  # late cohorts still move
    assert tr.cross_run["tranche"].tolist() == ["tranche 1", "tranche 2", "tranche 3", "final"]


def test_chapters_run_end_to_end(tmp_path):
    from embeval_report.cli import main
    n = 200
    runs = two_group_runs(n)
    ids = [f"w{i}" for i in range(n)]
    for i, X in enumerate(runs):
        np.save(tmp_path / f"r{i}.npy", X.astype(np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    pd.DataFrame({"id": ids, "frequency": np.arange(n)}).to_csv(tmp_path / "meta.csv", index=False)
    manifest = {"vectors": "r0.npy", "ids": "ids.txt", "metadata": "meta.csv", "runs": ["r1.npy", "r2.npy"],
                "tranches": [{"name": "half", "vectors": "r1.npy"}, {"name": "end", "vectors": "r0.npy"}]}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(manifest))
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--chapters", "stability,training_stability",
                 "--formats", "html"]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    ch = doc["chapters"]
    assert ch["stability"]["status"] == "ok" and ch["training_stability"]["status"] == "ok"
    assert set(ch["stability"]["metrics"]) == set(mst.METRICS) | {"mde_knn_overlap", "mde_procrustes_aligned_cosine"}
    assert ch["stability"]["metrics"]["pairwise_similarity_correlation"]["verdict"] in ("healthy", "concerning",
                                                                                       "problematic")
    assert {"tranche_knn_overlap_last", "tranche_movement_last"} <= set(ch["training_stability"]["metrics"])
    html = (out / "report.html").read_text()
    assert "Stability across training runs" in html and "Cohort movement" in html


# ---------------------------------------------------------------------------------------------
# Intervals that never vanish: the jackknife when per-block moments do not fit
# ---------------------------------------------------------------------------------------------

def test_block_bootstrap_up_to_d_647_then_jackknife():
    """The rule of the old block count (two (2d x 2d) moment sets per block in 512 MiB, at least 20 blocks):
    the demo's d keeps its 64-block bootstrap, d > 647 gets a jackknife instead of no interval."""
    from embeval_report.metrics.stability import _plan
    assert (_plan(5000, [64, 64], 200).method, _plan(5000, [64], 200).units) == ("bootstrap", 64)
    assert _plan(5000, [647], 200).method == "bootstrap"
    plan = _plan(5000, [648, 100], 200)
    assert plan.method == "jackknife" and plan.units == 20
    assert _plan(10, [4], 200).method == "jackknife"  # fewer than 20 entities: delete-one jackknife
    assert _plan(10, [4], 0).method == "none"


def test_jackknife_replicates_are_the_statistics_without_each_group(monkeypatch):
    from embeval_report import stats
    from embeval_report.kernels.blocks import assign_blocks
    monkeypatch.setattr(stats, "RESAMPLING_BYTES", 1000)  # no room for per-block moments
    A, B = noisy_runs(n=120, d=5, sigma=0.5, R=2, seed=3)
    r = mst.measure_run_stability([A, B], k=5, n_boot=200, seed=2)
    r0 = mst.measure_run_stability([A, B], k=5, n_boot=0, seed=2)
    assert r.plan.method == "jackknife" and r.n_blocks == 20 and "jackknife" in r.ci_method
    assert r.values == r0.values  # same point estimates
    for name, m in r.metrics.items():
        assert m.has_ci and m.ci_low <= m.value <= m.ci_high, name
    # replicate g: the statistic on the rows outside group g (centring held at the full-sample mean)
    group = assign_blocks(120, 20, 2)
    plan = r.plan
    _, reps = mst.pair_replicates(A, B, plan, plan.replicates(lambda w: w), seed=2)
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    for g in (0, 7, 19):
        keep = group != g
        GA, GB = Ac[keep] @ Ac[keep].T, Bc[keep] @ Bc[keep].T
        mask = ~np.eye(keep.sum(), dtype=bool)
        assert reps[g, 1] == pytest.approx(np.corrcoef(GA[mask], GB[mask])[0, 1], rel=1e-9)
        assert reps[g, 0] == pytest.approx(procrustes_align(Ac[keep], Bc[keep], center=False).disparity, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Degenerate but valid inputs
# ---------------------------------------------------------------------------------------------

def test_identical_rows_give_undefined_metrics_with_a_warning():
    from embeval_report.errors import UndefinedMetricWarning
    X = np.tile(np.arange(1, 9, dtype=float), (200, 1))
    with pytest.warns(UndefinedMetricWarning, match="undefined"):
        r = mst.measure_run_stability([X, X.copy(), X.copy()], n_boot=50)
    for name in ("procrustes_aligned_cosine", "procrustes_disparity", "pairwise_similarity_correlation"):
        m = r.metrics[name]
        assert np.isnan(m.value) and m.to_json()["value"] is None and m.verdict is None and m.note
    assert r.values["knn_overlap"] == 1.0
    text = st_chapter.narrative(r)
    assert "nan" not in text and "undefined" in text and "No verdict" in text


def test_a_run_identical_to_the_main_set():
    X = np.random.default_rng(4).standard_normal((150, 6))
    r = mst.measure_run_stability([X, X.copy()], n_boot=50)
    assert r.values["knn_overlap"] == 1.0 and r.values["pairwise_similarity_correlation"] == pytest.approx(1.0)
    assert r.values["procrustes_disparity"] == pytest.approx(0.0, abs=1e-12)
    assert r.metrics["procrustes_disparity"].ci_low >= 0.0  # clipped to the metric's range
    assert r.metrics["pairwise_similarity_correlation"].verdict == "healthy"
    from embeval_report.errors import UndefinedMetricWarning
    with pytest.warns(UndefinedMetricWarning, match="cannot differ"):
        s = mst.subset_stability(r, [mst.category_grouping(np.array(["a", "b"] * 75), column="kind")])
    assert len(s.table) == 2 and not len(s.tests)  # every overlap is 1: nothing to test


@pytest.mark.parametrize("n, d", [(3, 2), (10, 50)])
def test_tiny_sets_and_d_above_n(n, d):
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, d))
    k = mst.usable_k(10, n)
    assert k == n - 2
    r = mst.measure_run_stability([X, X + 0.1 * rng.standard_normal((n, d))], k=k)
    assert r.plan.method == "jackknife" and r.k == k and r.chance == pytest.approx(k / (n - 1))
    assert 0 <= r.values["knn_overlap"] <= 1 and np.isfinite(r.values["pairwise_similarity_correlation"])
    for m in r.metrics.values():
        assert m.has_ci or m.note  # an interval, or the reason there is none


def test_too_few_shared_entities(tmp_path):
    X = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
    ids = [f"e{i}" for i in range(40)]
    np.save(tmp_path / "v.npy", X)
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    write_table(tmp_path / "r.parquet", ids[:5], X[:5])
    (tmp_path / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nruns: [r.parquet]\n")
    es = load_source(tmp_path / "m.yaml")
    with pytest.raises(InputError, match="k = 10 needs at least 12 shared entities, found 5"):
        mst.measure_run_stability(load_runs(es), k=10)  # the k check, on the runs as read
    from embeval_report.io.side_data import load_side_data
    from embeval_report.chapters import stability as chapter
    side = load_side_data(es)
    inputs = mst.match_runs(es, side.runs)
    assert len(inputs.index) == 5 and mst.usable_k(10, 5) == 3
    assert chapter.precheck(es, side, None) is None
    write_table(tmp_path / "r.parquet", ids[:2], X[:2])
    reason = chapter.precheck(es, load_side_data(es), None)
    assert "only 2 entities" in reason and "at least 3" in reason


def test_vocabulary_outside_the_compared_entities_is_left_out_with_a_note(tmp_path):
    n = 60
    ids = [f"w{i}" for i in range(n)]
    (tmp_path / "v.txt").write_text("w50\nw51\n")
    (tmp_path / "u.txt").write_text("w1\nw2\nw3\n")
    es = make_set(np.random.default_rng(0).standard_normal((n, 4)), ids,
                  vocabularies=[{"name": "late", "ids": str(tmp_path / "v.txt")},
                                {"name": "early", "ids": str(tmp_path / "u.txt")}])
    g = mst.vocabulary_grouping(es, np.arange(40), read_vocabularies(es))  # w50, w51 are missing from some run
    assert list(g.subsets) == ["early"] and any("“late”" in note and "left out" in note for note in g.notes)
    g2 = mst.vocabulary_grouping(es, np.arange(40), read_vocabularies(es, es.fields["vocabularies"]))
    assert list(g2.subsets) == ["early"]  # the validated side data gives the same grouping
    only_late = mst.vocabulary_grouping(es, np.arange(40), read_vocabularies(es, es.fields["vocabularies"][:1]))
    assert only_late.subsets == {} and only_late.notes


def test_tranches_that_share_no_entities_and_identical_checkpoints(tmp_path):
    from embeval_report.chapters import training_stability as chapter
    from embeval_report.errors import UndefinedMetricWarning
    from embeval_report.io.side_data import load_side_data
    from embeval_report.metrics.training_stability import adapted_k, largest_comparison
    X = np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32)
    ids = [f"e{i}" for i in range(100)]
    np.save(tmp_path / "v.npy", X)
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    write_table(tmp_path / "a.parquet", ids[:50], X[:50])
    write_table(tmp_path / "b.parquet", ids[50:], X[50:])
    same = np.tile(np.arange(1, 9, dtype=np.float32), (100, 1))
    write_table(tmp_path / "c.parquet", ids, same)
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"vectors": "v.npy", "ids": "ids.txt", "tranches": [
        {"name": "t1", "vectors": "a.parquet"}, {"name": "t2", "vectors": "b.parquet"}]}))
    es = load_source(tmp_path / "m.yaml")
    side = load_side_data(es)
    assert largest_comparison(side.tranches, es.n) == 0 and adapted_k(side.tranches, es.n, 10) == 0
    assert "no two checkpoints share 3 entities" in chapter.precheck(es, side, None)
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"vectors": "v.npy", "ids": "ids.txt", "tranches": [
        {"name": "t1", "vectors": "c.parquet"}, {"name": "t2", "vectors": "c.parquet"}]}))
    es = load_source(tmp_path / "m.yaml")
    with pytest.warns(UndefinedMetricWarning, match="no spread"):
        r = mts.measure_training_stability(es, load_tranches(es), k=5, n_boot=0)
    assert np.isnan(r.values["tranche_movement_last"]) and r.metrics["tranche_movement_last"].note
    assert r.values["tranche_knn_overlap_last"] == 1.0
    assert "nan" not in ts_chapter.training_narrative(r)


def test_degenerate_chapters_through_the_cli(tmp_path):
    """A 3 x 2 set with a run and two checkpoints runs both chapters with k lowered to 1; two shared
    entities skip both chapters with the reason."""
    import re
    from embeval_report.cli import main
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3, 2))
    ids = ["a", "b", "c"]
    np.save(tmp_path / "v.npy", X.astype(np.float32))
    np.save(tmp_path / "r.npy", (X + 0.1 * rng.standard_normal((3, 2))).astype(np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    write_table(tmp_path / "t1.parquet", ids, X + 0.3 * rng.standard_normal((3, 2)))
    write_table(tmp_path / "two.parquet", ids[:2], X[:2])
    manifest = {"vectors": "v.npy", "ids": "ids.txt", "runs": ["r.npy"],
                "tranches": [{"name": "t1", "vectors": "t1.parquet"}, {"name": "t2", "vectors": "v.npy"}]}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(manifest))
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--chapters", "stability,training_stability",
                 "--formats", "html"]) == 0
    ch = json.loads((out / "metrics.json").read_text())["chapters"]
    assert ch["stability"]["status"] == "ok" and ch["training_stability"]["status"] == "ok"
    info = json.loads((out / "results" / "stability.json").read_text())["info"]
    assert (info["k"], info["k_requested"], info["resampling"]) == (1, 10, "jackknife")
    html = re.sub(r"<[^>]+>", " ", (out / "report.html").read_text())
    assert "Smaller k" in html and not re.search(r"Traceback|Error:|\bnan\b", html)
    manifest.update(runs=["two.parquet"], tranches=[{"name": "t1", "vectors": "two.parquet"},
                                                     {"name": "t2", "vectors": "two.parquet"}])
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(manifest))
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--chapters", "stability,training_stability",
                 "--formats", "html"]) == 0
    ch = json.loads((out / "metrics.json").read_text())["chapters"]
    assert ch["stability"]["status"] == "skipped" and "only 2 entities" in ch["stability"]["reason"]
    assert ch["training_stability"]["status"] == "skipped"


# ---------------------------------------------------------------------------------------------
# Another dimension than the main set (issue 26.7)
# ---------------------------------------------------------------------------------------------

def _overlap_brute(A, B, k):
    na, nb = dense_knn(A, k), dense_knn(B, k)
    return np.array([len(set(a) & set(b)) / k for a, b in zip(na, nb)])


def test_a_run_of_another_dimension_keeps_neighbourhoods_and_nulls_the_procrustes_metrics():
    rng = np.random.default_rng(60)
    X = rng.standard_normal((150, 8))
    runs = [X, X @ ortho_group.rvs(8, random_state=61), X @ rng.standard_normal((8, 5))]
    with pytest.warns(Warning, match="r2 has d = 5, the main set d = 8"):
        r = mst.measure_run_stability(runs, k=5, labels=[mst.MAIN_LABEL, "r1", "r2"], n_boot=30)
    assert r.info["dimension_mismatch"] == [{"name": "r2", "d": 5}]
    for name in mst.SHARED_SPACE:
        rec = r.metrics[name].to_record()
        assert rec["value"] is None and rec["ci_low"] is None and "r2 has d = 5" in rec["note"], name
    # kept, and exact: the mean over the three pairs of the brute-force overlap and Gram correlation
    pairs = [(0, 1), (0, 2), (1, 2)]
    assert r.values["knn_overlap"] == pytest.approx(np.mean([_overlap_brute(runs[a], runs[b], 5).mean()
                                                             for a, b in pairs]), abs=1e-6)
    assert r.values["pairwise_similarity_correlation"] == pytest.approx(
        np.mean([gram_corr_brute(runs[a], runs[b]) for a, b in pairs]), abs=1e-9)
    assert r.metrics["knn_overlap"].has_ci and r.metrics["pairwise_similarity_correlation"].verdict is not None
    # the pair of equal dimension keeps its Procrustes numbers (a rotation: disparity 0), the others have none
    p = r.pairs.set_index(["run A", "run B"])
    assert p.loc[(mst.MAIN_LABEL, "r1"), "disparity"] == pytest.approx(0, abs=1e-9)
    assert np.isnan(p.loc[(mst.MAIN_LABEL, "r2"), "disparity"]) and np.isnan(p.loc[("r1", "r2"), "aligned cosine"])
    text = st_chapter.narrative(r)
    assert "**Dimensions.**" in text and "**r2** (d = 5)" in text and "main set has d = 8" in text
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)


def test_runs_of_the_main_sets_dimension_state_no_mismatch():
    r = mst.measure_run_stability(noisy_runs(R=2), k=5, n_boot=0)
    assert "dimension_mismatch" not in r.info and st_chapter.dimension_text(r) == ""
    assert r.values["procrustes_disparity"] is not None and np.isfinite(r.values["procrustes_disparity"])


def test_a_tranche_of_another_dimension_has_no_movement_but_keeps_its_overlap(tmp_path):
    rng = np.random.default_rng(62)
    X = rng.standard_normal((100, 8))
    np.save(tmp_path / "v.npy", X.astype(np.float32))
    t1 = X + 0.5 * rng.standard_normal(X.shape)
    t2 = X @ rng.standard_normal((8, 5))
    for name, M in (("t1", t1), ("t2", t2), ("t3", X)):
        np.save(tmp_path / f"{name}.npy", M.astype(np.float32))
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"vectors": "v.npy", "tranches": [
        {"name": t, "vectors": f"{t}.npy"} for t in ("t1", "t2", "t3")]}))
    es = load_source(tmp_path / "m.yaml")
    r = mts.measure_training_stability(es, load_tranches(es), k=5, n_boot=0)
    assert r.info["dimension_mismatch"] == [{"name": "t2", "d": 5}]
    assert r.transitions["movement"].isna().all() and r.transitions["aligned cosine"].isna().all()
    f32 = [M.astype(np.float32).astype(float) for M in (t1, t2, X)]
    assert r.transitions["k-NN overlap"].tolist() == pytest.approx(
        [_overlap_brute(f32[0], f32[1], 5).mean(), _overlap_brute(f32[1], f32[2], 5).mean()], abs=1e-6)
    rec = r.metrics["tranche_movement_last"].to_record()
    assert rec["value"] is None and "tranche t2 has d = 5" in rec["note"] and "main set d = 8" in rec["note"]
    assert r.metrics["tranche_knn_overlap_last"].value == pytest.approx(r.transitions["k-NN overlap"].iloc[-1])
    fin = r.to_final.set_index("tranche")
    assert np.isfinite(fin.loc["t1", "aligned cosine"]) and np.isnan(fin.loc["t2", "aligned cosine"])
    text = ts_chapter.training_narrative(r)
    assert "**Dimensions.**" in text and "**t2** (d = 5)" in text
