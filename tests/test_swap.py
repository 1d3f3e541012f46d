"""Model swap impact (issue 43): neighbour-list overlap, query results, the similarity scale and its threshold
map, against closed forms (a rotation changes nothing) and a brute-force reference."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ortho_group

from embeval_report.metrics.swap import neighbour_swap, query_swap, similarity_scale


def _brute_topk(X, k):
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = U @ U.T
    np.fill_diagonal(S, -np.inf)
    return np.argsort(-S, axis=1, kind="stable")[:, :k]


def test_a_rotation_changes_no_list_and_no_similarity():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((300, 12))
    B = A @ ortho_group.rvs(12, random_state=1)
    swap = neighbour_swap(A, B, np.arange(300), k=10, device="cpu")
    assert swap.changed_share == 0.0 and np.allclose(swap.overlap, 1.0)
    scale = similarity_scale(A, B, pairs=2000, device="cpu")
    assert scale.spearman == pytest.approx(1.0, abs=1e-6)  # float32 rows: ties broken by rounding
    np.testing.assert_allclose(scale.quantiles["A"], scale.quantiles["B"], atol=1e-6)


def test_overlap_against_brute_force_lists_in_different_dimensions():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((200, 8))
    B = np.hstack([A, 1.5 * rng.standard_normal((200, 24))])  # another model, another dimension
    swap = neighbour_swap(A, B, np.arange(200), k=5, device="cpu")
    la, lb = _brute_topk(A, 5), _brute_topk(B, 5)
    ref = np.array([len(set(a) & set(b)) / 5 for a, b in zip(la, lb)])
    np.testing.assert_allclose(swap.overlap, ref)
    assert swap.changed_share == pytest.approx((ref < 0.5).mean())
    assert 0 < swap.changed_share < 1


def test_threshold_map_keeps_the_share_of_pairs():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((120, 6)) + 1.0
    B = rng.standard_normal((120, 10)) + 0.3
    scale = similarity_scale(A, B, pairs=10 ** 9, device="cpu")  # every pair of a small set
    assert scale.pairs == 120 * 119 // 2
    iu = np.triu_indices(120, 1)

    def cos(X):
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        return (U @ U.T)[iu]

    ca, cb = cos(A), cos(B)
    for row in scale.thresholds.itertuples():
        share = (ca >= row[1]).mean()
        assert row[2] == pytest.approx(share)
        if 0 < share < 1:  # the same share of B's pairs lies at or above the carried threshold
            assert (cb >= row[3]).mean() == pytest.approx(share, abs=2 / len(cb))


def test_query_results_overlap():
    rng = np.random.default_rng(4)
    C = rng.standard_normal((100, 8))
    Q = rng.standard_normal((7, 8))
    same = query_swap(Q, C, Q, C, list("abcdefg"), k=10, device="cpu")
    assert list(same["query"]) == list("abcdefg") and (same["overlap"] == 1.0).all()
    other = query_swap(Q, C, Q, rng.standard_normal((100, 8)), list("abcdefg"), k=10, device="cpu")
    assert other["overlap"].mean() < 0.5
    # exclude_self: a query that is a document of the corpus does not count itself among its results
    D = rng.standard_normal((100, 8))
    own = np.array([3, 10, 20, 30, 40, 50, -1])
    QA, QB = C[own.clip(0)], D[own.clip(0)]
    QA[-1], QB[-1] = Q[-1], Q[-1]
    mine = query_swap(QA, C, QB, D, list("abcdefg"), k=5, own=own, device="cpu")

    def top(q, X, skip):
        s = (X / np.linalg.norm(X, axis=1, keepdims=True)) @ q
        if skip >= 0:
            s[skip] = -np.inf
        return set(np.argsort(-s, kind="stable")[:5])
    ref = [len(top(qa, C, o) & top(qb, D, o)) / 5 for qa, qb, o in zip(QA, QB, own)]
    np.testing.assert_allclose(mine["overlap"], ref)


def test_sampled_ids_keep_their_lists_among_every_row():
    """``rows``: the lists of some ids only, their neighbours sought among every row, self left out."""
    rng = np.random.default_rng(5)
    A, B = rng.standard_normal((150, 6)), rng.standard_normal((150, 9))
    A[7] = A[3]  # an exact duplicate: row 7's own index may come second
    full = neighbour_swap(A, B, np.arange(150), k=5, device="cpu")
    rows = np.array([0, 3, 7, 42, 149])
    part = neighbour_swap(A, B, np.arange(150), k=5, rows=rows, device="cpu")
    assert list(part.ids) == list(rows)
    np.testing.assert_allclose(part.overlap, full.overlap[rows])
    hist = full.histogram()
    assert hist["ids"].sum() == 150 and list(hist["kept"]) == list(range(6))
    assert (hist["ids"].to_numpy() == np.bincount(np.rint(full.overlap * 5).astype(int), minlength=6)).all()


def _swap_set(folder, C, ids, Q, target):
    from scored_reports import write_set

    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "q.npy", Q.astype(np.float32))
    (folder / "qids.txt").write_text("".join(f"q{i:02d}\n" for i in range(len(Q))))
    return write_set(folder, C, ids, files={"qrels.txt": "".join(f"q{i:02d} 0 {t} 1\n" for i, t in enumerate(target))},
                     entries={"queries": "{vectors: q.npy, ids: qids.txt}", "qrels": "qrels.txt"})


def test_swap_section_of_two_reports(tmp_path):
    """Two models' reports whose sets hold partly different ids in another order and dimension: the section pairs
    the shared ids row for row (lists against brute force over them), the queries' result overlap, the queries that
    gain and lose on the retrieval units, and every pair's cosine scale."""
    from scored_reports import run_report

    from embeval_report.io import load_source
    from embeval_report.report.model_swap import swap_lines, swap_section
    from embeval_report.report.pairing import ModelReport

    rng = np.random.default_rng(6)
    n, d = 120, 8
    C = rng.standard_normal((n, d))
    ids = np.array([f"d{i:03d}" for i in range(n)])
    target = rng.choice(n - 10, 30, replace=False)
    Q = C[target] + 0.9 * rng.standard_normal((30, d))
    CB = np.hstack([C + 0.6 * rng.standard_normal((n, d)), rng.standard_normal((n, 4))])
    QB = np.hstack([Q, np.zeros((30, 4))])
    keep_a = np.arange(n - 5)                                # A lacks the last 5 ids
    order_b = np.r_[rng.permutation(n)[:n]]                  # B holds every id, shuffled, and 3 of its own
    ma = _swap_set(tmp_path / "sa", C[keep_a], list(ids[keep_a]), Q, ids[target])
    mb = _swap_set(tmp_path / "sb", np.vstack([CB[order_b], rng.standard_normal((3, d + 4))]),
                   list(ids[order_b]) + ["x0", "x1", "x2"], QB, ids[target])
    a = ModelReport.open(run_report(ma, tmp_path / "A", ["retrieval"], "A"))
    b = ModelReport.open(run_report(mb, tmp_path / "B", ["retrieval"], "B"))
    s = swap_section(a, b, k=10, device="cpu", sets=(load_source(ma), load_source(mb)))
    assert (s["shared_ids"], s["ids_compared"], s["d_a"], s["d_b"]) == (n - 5, n - 5, d, d + 4)
    shared_a, shared_b = C[keep_a], CB[keep_a]
    la, lb = _brute_topk(shared_a, 10), _brute_topk(shared_b, 10)
    ref = np.array([len(set(x) & set(y)) / 10 for x, y in zip(la, lb)])
    assert s["neighbours"]["changed_share"] == pytest.approx((ref < 0.5).mean())
    assert s["neighbours"]["mean"] == pytest.approx(ref.mean())
    assert [h["ids"] for h in s["neighbours"]["histogram"]] == list(np.bincount(np.rint(ref * 10).astype(int),
                                                                                minlength=11))

    def results(Qx, Cx):
        U = Cx / np.linalg.norm(Cx, axis=1, keepdims=True)
        return np.argsort(-(Qx @ U.T), axis=1, kind="stable")[:, :10]
    qa, qb = results(Q, shared_a), results(QB, shared_b)
    q_ref = np.array([len(set(x) & set(y)) / 10 for x, y in zip(qa, qb)])
    q = s["queries"]
    assert q["source"] == "query vectors" and q["queries"] == 30
    assert q["changed_share"] == pytest.approx((q_ref < 1).mean()) and 0 < q["changed_share"]
    ua = a.units["retrieval"].set_index("query_id")[q["metric"]]
    ub = b.units["retrieval"].set_index("query_id")[q["metric"]]
    changed = [f"q{i:02d}" for i in np.flatnonzero(q_ref < 1)]
    delta = ub[changed] - ua[changed]
    assert (q["gain"], q["lose"], q["same"]) == ((delta > 1e-12).sum(), (delta < -1e-12).sum(),
                                                 (delta.abs() <= 1e-12).sum())
    if q["gain"]:
        assert q["gainers"][0]["change"] == pytest.approx(delta.max())
    assert s["scale"]["pairs"] == (n - 5) * (n - 6) // 2
    geometry = {g["metric"]: g for g in s["geometry"]}

    def apcs(X):
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        return ((U @ U.T).sum() - len(X)) / (len(X) * (len(X) - 1))
    assert geometry["apcs"]["a"] == pytest.approx(apcs(shared_a), abs=1e-6)
    assert geometry["apcs"]["b"] == pytest.approx(apcs(shared_b), abs=1e-6)
    from scipy.stats import skew
    assert geometry["k_occurrence_skewness"]["a"] == pytest.approx(skew(np.bincount(la.ravel(), minlength=n - 5)))
    assert geometry["k_occurrence_skewness"]["ci_low"] <= geometry["k_occurrence_skewness"]["ci_high"]
    lines = swap_lines([s])
    assert lines[0].startswith("model swap A → B: 115 of 115 shared ids") and "queries:" in lines[1]


def test_a_swap_without_the_vectors_says_why(tmp_path):
    """A report whose input is gone: the section says so in one line, and the terminal prints it."""
    from embeval_report.report.model_swap import swap_lines, swap_sections
    from embeval_report.report.pairing import ModelReport

    reports = [ModelReport(n, tmp_path / n, {"name": n}, {}, {}) for n in ("prod", "new")]
    sections = swap_sections(reports)
    assert len(sections) == 1 and sections[0]["a"] == "prod" and "cannot be read again" in sections[0]["skipped"]
    assert swap_lines(sections)[0].startswith("model swap prod → new: not computed (the models' vectors")


def test_geometry_diagnostics_of_the_shared_ids():
    """Each id's mean cosine to the others against the cosine matrix (zero rows: cosine 0), in chunks; the
    k-occurrence skewness and its weighted form against scipy on resampled ids."""
    import pandas as pd
    from scipy.stats import skew

    from embeval_report.metrics.swap import mean_cosines
    from embeval_report.report.model_swap import _skewness, _skewness_weighted

    rng = np.random.default_rng(8)
    X = rng.standard_normal((90, 7)) + 0.5
    X[4] = 0
    U = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300)
    S = U @ U.T
    np.fill_diagonal(S, 0)
    np.testing.assert_allclose(mean_cosines(X, chunk=16), S.sum(1) / 89, atol=1e-12)
    occ = pd.DataFrame({"occurrence": rng.poisson(3, 90).astype(float)})
    assert _skewness(occ) == pytest.approx(skew(occ["occurrence"]))
    draws = [rng.integers(0, 90, 90) for _ in range(4)]
    W = np.stack([np.bincount(d, minlength=90) for d in draws]).astype(float)
    np.testing.assert_allclose(_skewness_weighted(occ, W), [skew(occ["occurrence"].to_numpy()[d]) for d in draws],
                               rtol=1e-10)
