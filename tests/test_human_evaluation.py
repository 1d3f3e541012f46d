"""Human evaluation: agreement coefficients against the `krippendorff` package, statsmodels' inter_rater,
scikit-learn's cohen_kappa_score, irrCAC (its values kept in tests/reference/peers.json, live when installed)
and a hand-computed AC1 case, the published values of Krippendorff (2011) and Fleiss (1971), Dawid–Skene
recovering planted rater reliabilities, the rater checks on planted careless/tired raters, the annotation
reader's errors, and one report run."""
import json
import warnings

import numpy as np
import pandas as pd
import pytest

from embeval_report.errors import InputError
from embeval_report.io.annotations import read_annotations
from embeval_report.metrics import agreement as ag
from reference import inputs, make_fixtures
from reference.inputs import KRIPP, random_matrix

#: Fleiss (1971): 30 patients x 6 psychiatrists, 5 diagnoses (R irr::diagnoses, as in statsmodels' tests)
DIAGNOSES = np.array([
    [4, 4, 4, 4, 4, 4], [2, 2, 2, 5, 5, 5], [2, 3, 3, 3, 3, 5], [5, 5, 5, 5, 5, 5], [2, 2, 2, 4, 4, 4],
    [1, 1, 3, 3, 3, 3], [3, 3, 3, 3, 5, 5], [1, 1, 3, 3, 3, 4], [1, 1, 4, 4, 4, 4], [5, 5, 5, 5, 5, 5],
    [1, 4, 4, 4, 4, 4], [1, 2, 4, 4, 4, 4], [2, 2, 2, 3, 3, 3], [1, 4, 4, 4, 4, 4], [2, 2, 4, 4, 4, 5],
    [3, 3, 3, 3, 3, 5], [1, 1, 1, 4, 5, 5], [1, 1, 1, 1, 1, 2], [2, 2, 4, 4, 4, 4], [1, 3, 3, 5, 5, 5],
    [5, 5, 5, 5, 5, 5], [2, 4, 4, 4, 4, 4], [2, 2, 4, 5, 5, 5], [1, 1, 4, 4, 4, 4], [1, 4, 4, 4, 4, 5],
    [2, 2, 2, 2, 2, 4], [1, 1, 1, 1, 5, 5], [2, 2, 4, 4, 4, 4], [1, 3, 3, 3, 3, 3], [5, 5, 5, 5, 5, 5]])


def frame(matrix, text=False):
    """Long ratings table from an items x raters matrix (None / NaN = missing)."""
    rows = [(f"u{u:02d}", f"r{r}", (f"c{int(v)}" if text else float(v)))
            for u, row in enumerate(matrix) for r, v in enumerate(row) if v is not None and v == v]
    return pd.DataFrame(rows, columns=["item", "rater", "label"])


def kripp_data(level="nominal"):
    return ag.RatingData.of(frame(np.array(KRIPP, dtype=object).T), level)


# ---------------------------------------------------------------------------------------------
# Published values
# ---------------------------------------------------------------------------------------------

def test_krippendorff_published_example():
    d = kripp_data()
    assert ag.krippendorff_alpha(d, "nominal") == pytest.approx(0.743, abs=5e-4)
    assert ag.krippendorff_alpha(d, "interval") == pytest.approx(0.849, abs=5e-4)
    assert ag.krippendorff_alpha(d, "ordinal") == pytest.approx(0.815, abs=5e-4)  # same paper
    assert ag.fleiss_applicable(d) is not None  # items rated 1 to 4 times: omitted, with the reason
    res = ag.agreement(d, n_boot=200)
    assert res.values["fleiss_kappa"] is None and "same number" in res.notes["fleiss_kappa"]
    m = ag.record_agreement(res)
    assert m["fleiss_kappa"].value is None and "same number" in m["fleiss_kappa"].note
    lo, hi = res.intervals["krippendorff_alpha"]
    assert lo < res.values["krippendorff_alpha"] < hi


def test_fleiss_1971_published_kappa():
    d = ag.RatingData.of(frame(DIAGNOSES), "nominal")
    assert ag.fleiss_applicable(d) is None
    assert ag.fleiss_kappa(d) == pytest.approx(0.430, abs=5e-4)


# ---------------------------------------------------------------------------------------------
# Peer libraries
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_alpha_matches_krippendorff_package(seed, level):
    krippendorff = pytest.importorskip("krippendorff")
    M = random_matrix(seed)
    d = ag.RatingData.of(frame(M), level)
    ref = krippendorff.alpha(reliability_data=M.T, level_of_measurement=level)
    assert ag.krippendorff_alpha(d) == pytest.approx(ref, abs=1e-12)


def test_fleiss_matches_statsmodels():
    from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

    M = random_matrix(3, missing=0.0)
    d = ag.RatingData.of(frame(M), "nominal")
    table, _ = aggregate_raters(M.astype(int))
    assert ag.fleiss_kappa(d) == pytest.approx(fleiss_kappa(table, method="fleiss"), abs=1e-12)
    # percent agreement is Fleiss' mean P_i
    P = ((table ** 2).sum(1) - M.shape[1]) / (M.shape[1] * (M.shape[1] - 1))
    assert ag.percent_agreement(d) == pytest.approx(P.mean(), abs=1e-12)


@pytest.mark.parametrize("level,weights", [("nominal", None), ("ordinal", "quadratic")])
def test_pairwise_cohen_matches_sklearn(level, weights):
    from sklearn.metrics import cohen_kappa_score

    M = random_matrix(4, R=4, K=5)
    d = ag.RatingData.of(frame(M), level)
    kappas = []
    for a in range(4):
        for b in range(a + 1, 4):
            ok = ~np.isnan(M[:, a]) & ~np.isnan(M[:, b])
            kappas.append(cohen_kappa_score(M[ok, a], M[ok, b], labels=d.categories, weights=weights))
    np.testing.assert_allclose(ag.pairwise_kappas(d), kappas, atol=1e-12)
    assert ag.cohen_kappa(d) == pytest.approx(np.mean(kappas), abs=1e-12)


def check_against_irrcac(ref):
    for name, M in inputs.agreement_cases().items():
        d = ag.RatingData.of(frame(M), "nominal")
        assert ag.gwet_ac1(d) == pytest.approx(ref[name]["gwet_ac1"], abs=1e-8), name
        assert ag.krippendorff_alpha(d) == pytest.approx(ref[name]["krippendorff_alpha"], abs=1e-8), name


def test_gwet_ac1_matches_irrcac():
    """Drift check against the installed irrCAC (not installed by the test extra; see tests/reference/)."""
    pytest.importorskip("irrCAC.raw")
    check_against_irrcac(make_fixtures.irrcac_values())


def test_gwet_ac1_matches_irrcac_fixture():
    """irrCAC's values kept in tests/reference/peers.json (rounded by irrCAC to 10 digits): runs in CI."""
    check_against_irrcac(make_fixtures.fixture("irrcac"))


def test_gwet_ac1_hand_computed():
    """Gwet (2008) AC1 = (p_a - p_e) / (1 - p_e), p_a the mean over items rated at least twice of
    sum_k r_ik (r_ik - 1) / (r_i (r_i - 1)), p_e = sum_k pi_k (1 - pi_k) / (K - 1), pi_k = mean_i r_ik / r_i
    over every rated item. Three raters, K = 3 labels a, b, c:

        item 1  a a a   agreement 3*2/6 = 1       shares (1, 0, 0)
        item 2  a a b   agreement 2*1/6 = 1/3     shares (2/3, 1/3, 0)
        item 3  b b b   agreement 1               shares (0, 1, 0)
        item 4  a b c   agreement 0               shares (1/3, 1/3, 1/3)
    p_a = (1 + 1/3 + 1 + 0) / 4 = 7/12; pi = (2, 5/3, 1/3) / 4 = (1/2, 5/12, 1/12)
    sum pi (1 - pi) = 1/4 + 35/144 + 11/144 = 41/72, p_e = 41/144
    AC1 = (84/144 - 41/144) / (103/144) = 43/103 = 0.41748

    Item 5 rated once (c): no agreement term (p_a stays 7/12) but it counts in pi over n = 5 items:
    pi = (2, 5/3, 4/3) / 5 = (2/5, 1/3, 4/15); sum pi (1 - pi) = 6/25 + 2/9 + 44/225 = 148/225, p_e = 74/225
    AC1 = (7/12 - 74/225) / (151/225) = (687/2700) * (225/151) = 229/604 = 0.37914
    """
    M = np.array([[0, 0, 0], [0, 0, 1], [1, 1, 1], [0, 1, 2]], float)
    assert ag.gwet_ac1(ag.RatingData.of(frame(M, text=True), "nominal")) == pytest.approx(43 / 103, abs=1e-12)
    M5 = np.vstack([M, [2, np.nan, np.nan]])
    assert ag.gwet_ac1(ag.RatingData.of(frame(M5, text=True), "nominal")) == pytest.approx(229 / 604, abs=1e-12)


def test_kappa_paradox_ac1_stays_high():
    """95 % of the ratings are one label and raters agree on 92 % of items: kappa collapses, AC1 does not."""
    M = np.zeros((100, 2))
    M[:4, 0], M[4:8, 1] = 1, 1
    d = ag.RatingData.of(frame(M), "nominal")
    assert ag.percent_agreement(d) == pytest.approx(0.92)
    assert ag.cohen_kappa(d) < 0 < 0.9 < ag.gwet_ac1(d)


def test_text_labels_and_bootstrap_reweighting():
    d_text = ag.RatingData.of(frame(np.array(KRIPP, dtype=object).T, text=True), "nominal")
    assert ag.krippendorff_alpha(d_text) == pytest.approx(0.743, abs=5e-4)
    # integer item weights equal duplicating items
    d = kripp_data("ordinal")
    w = np.zeros(len(d.items))
    w[[0, 3, 5, 9]] = [2, 1, 3, 1]  # every category still present (Gwet's K counts the categories seen)
    dup = frame(np.repeat(np.array(KRIPP, dtype=object).T[[0, 3, 5, 9]], [2, 1, 3, 1], axis=0))
    d2 = ag.RatingData.of(dup, "ordinal")
    assert ag.krippendorff_alpha(d, None, w) == pytest.approx(ag.krippendorff_alpha(d2), abs=1e-12)
    for fn in (ag.percent_agreement, ag.gwet_ac1):
        assert fn(d, w=w) == pytest.approx(fn(d2), abs=1e-12)


# ---------------------------------------------------------------------------------------------
# Dawid–Skene, consensus and rater quality
# ---------------------------------------------------------------------------------------------

def test_dawid_skene_recovers_planted_reliabilities():
    rng = np.random.default_rng(7)
    n, K = 800, 3
    acc = np.array([0.95, 0.85, 0.75, 0.6, 0.4])
    truth = rng.integers(K, size=n)
    item, rater, cat = [], [], []
    for r, a in enumerate(acc):
        rated = np.flatnonzero(rng.random(n) < 0.8)
        wrong = rng.random(len(rated)) >= a
        lab = truth[rated].copy()
        lab[wrong] = (lab[wrong] + rng.integers(1, K, wrong.sum())) % K  # errors uniform over other classes
        item += rated.tolist()
        rater += [r] * len(rated)
        cat += lab.tolist()
    ds = ag.dawid_skene(item, rater, cat, n, len(acc), K)
    assert ds.converged
    np.testing.assert_allclose(ds.accuracy, acc, atol=0.04)
    counts = np.zeros((n, K))
    np.add.at(counts, (np.array(item), np.array(cat)), 1)
    majority = counts.argmax(1)
    assert (ds.labels == truth).mean() > (majority == truth).mean()
    assert (ds.labels == truth).mean() > 0.9
    np.testing.assert_allclose(ds.prior, np.bincount(truth) / n, atol=0.03)


def test_majority_ties_go_to_the_lower_label():
    d = ag.RatingData.of(frame([[1, 3], [2, 2], [0, 4]]), "ordinal")
    top, share = ag.majority_labels(d)
    assert d.categories[top].tolist() == [1, 2, 0] and share.tolist() == [0.5, 1.0, 0.5]


def planted_ratings(seed=0, n=200):
    """5 raters on a 0-4 scale: rater c careless (random, 3 s), rater t straight-lines 4 late in the session."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(5, size=n)
    rows = []
    for r in ("a", "b", "c", "d", "t"):
        for pos, u in enumerate(rng.permutation(n)):
            g = truth[u] if rng.random() < 0.9 else int(np.clip(truth[u] + rng.choice([-1, 1]), 0, 4))
            if r == "c" and rng.random() < 0.7:
                g = rng.integers(5)
            if r == "t" and rng.random() < pos / n:
                g = 4
            rows.append((f"i{u}", r, float(g), 3.0 if r == "c" else 20.0 + rng.random(),
                         float(truth[u]) if u < 30 else None, float(pos)))
    return pd.DataFrame(rows, columns=["item", "rater", "label", "seconds", "gold", "position"]), truth


def test_rater_quality_flags_planted_raters():
    ratings, truth = planted_ratings()
    d = ag.RatingData.of(ratings, "ordinal")
    ds = ag.dawid_skene(d.item, d.rater, d.cat, len(d.items), len(d.raters), d.K)
    q = ag.rater_quality(d, ratings, ds=ds)
    assert set(q.flagged) == {"c", "t"}
    assert any("10 s minimum" in x for x in q.flagged["c"]) and any("gold accuracy" in x for x in q.flagged["c"])
    assert any("fatigue" in x for x in q.flagged["t"])
    t = q.table.set_index("rater")
    assert t.loc["a", "gold accuracy"] == pytest.approx(
        (ratings.query("rater == 'a' and gold == gold")["label"] == ratings.query("rater == 'a' and gold == gold")[
            "gold"]).mean())
    assert t.loc["t", "drift"] < -0.3 and t.loc["a", "drift p (Holm)"] > 0.05
    assert ds.accuracy[list(d.raters).index("c")] < ds.accuracy[list(d.raters).index("a")]
    assert len(q.tests) == 5 and all(0 <= x["p_holm"] <= 1 for x in q.tests)


def test_agreement_with_others_hand_case():
    # item x: raters a, b, c say 0, 0, 1 ; nominal: a agrees (others 0,1 tie -> among the most frequent), c not
    r = pd.DataFrame({"item": ["x", "x", "x", "y"], "rater": ["a", "b", "c", "a"], "label": [0.0, 0.0, 1.0, 2.0]})
    d = ag.RatingData.of(r, "nominal")
    np.testing.assert_array_equal(ag.agrees_with_others(d), [1.0, 1.0, 0.0, np.nan])
    d = ag.RatingData.of(r.assign(label=[0.0, 4.0, 2.0, 1.0]), "ordinal")  # span 4: tolerance 1
    # a: others 4,2 -> median 3, |0-3| > 1; b: others 0,2 -> 1, |4-1| > 1; c: others 0,4 -> 2 -> agrees
    np.testing.assert_array_equal(ag.agrees_with_others(d), [0.0, 0.0, 1.0, np.nan])


def test_embedding_agreement_spearman():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    x = rng.random(80)
    y = x + 0.3 * rng.standard_normal(80)
    e = ag.embedding_agreement(x, y, n_boot=300)
    assert e.rho == pytest.approx(spearmanr(x, y).statistic) and e.ci[0] < e.rho < e.ci[1]
    assert e.pairs["disagreement"].between(0, 1).all()


# ---------------------------------------------------------------------------------------------
# The reader
# ---------------------------------------------------------------------------------------------

def write(tmp_path, text, name="ann.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_reader_kinds_levels_and_gold(tmp_path):
    a = read_annotations(write(tmp_path, "item,rater,label,gold\nx,a,good,good\nx,b,bad,\ny,a,bad,\n"))
    assert a.kind == "item" and a.level == "nominal" and not a.numeric and a.has["gold"]
    assert a.ratings.set_index(["item", "rater"]).loc[("x", "b"), "gold"] == "good"  # gold spread to the item
    a = read_annotations(write(tmp_path, "query_id\tdoc_id\tannotator\tgrade\nq\td1\ta\t2\nq\td1\tb\t3\n", "a.tsv"),
                         ids=["q", "d1"])
    assert a.kind == "query_doc" and a.level == "ordinal" and a.integer and a.columns == ("query_id", "doc_id")
    a = read_annotations(write(tmp_path, "item1,item2,rater,score\nb,a,r1,0.5\na,b,r2,0.7\n"), level="interval",
                         ids=["a", "b"])
    assert a.kind == "pair" and a.ratings["item"].nunique() == 1 and a.level == "interval"
    assert read_annotations(write(tmp_path, "item,rater,label\nx,a,0.5\nx,b,0.7\n")).level == "interval"


@pytest.mark.parametrize("text,kw,pattern", [
    ("item,rater,label\nx,a,1\nx,b,good\n", {}, r"row 2, column 'label': 'good' is text but row 1 holds"),
    ("item,rater,label\nx,a,1\nx,a,2\n", {}, r"rows 1 and 2: rater 'a' rates item 'x' twice"),
    ("item,rater,label\nx,a,1\ny,a,2\n", {}, r"every rating comes from one rater"),
    ("item,rater,label\nx,a,1\ny,b,2\n", {}, r"no item is rated by more than one rater"),
    ("item,label\nx,1\n", {}, r"no 'rater' column"),
    ("item,rater,label\nx,a,\nx,b,1\n", {}, r"row 1, column 'label': empty label"),
    ("item,rater,label,seconds\nx,a,1,fast\nx,b,1,3\n", {}, r"row 1, column 'seconds': 'fast'"),
    ("item,rater,label,gold\nx,a,1,1\nx,b,1,2\n", {}, r"item 'x' has two gold labels"),
    ("item,rater,label\nx,a,good\nx,b,bad\n", {"level": "ordinal"}, r"annotation_level ordinal needs numeric"),
    ("item,rater,label\nx,a,1\nx,b,1\n", {"level": "ratio"}, r"annotation_level': expected one of"),
    ("query_id,doc_id,rater,label\nq,zz,a,1\nq,zz,b,1\n", {"ids": ["q", "d"]}, r"row 1, column 'doc_id': id 'zz'"),
])
def test_bad_annotations_one_clear_line(tmp_path, text, kw, pattern):
    with pytest.raises(InputError, match=pattern) as e:
        read_annotations(write(tmp_path, text), label="ann.csv", **kw)
    assert "\n" not in str(e.value) and "ann.csv" in str(e.value) or "annotation_level" in str(e.value)


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------

def test_human_evaluation_chapter_in_a_report(tmp_path):
    """Query–document judgements with one careless rater: every contract metric with its interval in
    metrics.json, the flag, the consensus written as qrels that read back, the embedding comparison."""
    from embeval_report.cli import main
    from embeval_report.io.qrels import read_qrels

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 8)).astype(np.float32)
    np.save(tmp_path / "v.npy", X)
    ids = [f"d{i}" for i in range(60)]
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    rows = []
    for k in range(80):
        q, doc = rng.choice(60, 2, replace=False)
        cos = float(X[q] @ X[doc] / np.linalg.norm(X[q]) / np.linalg.norm(X[doc]))
        truth = int(np.clip(round(2 + 3 * cos), 0, 4))
        for pos_r, r in enumerate(("a", "b", "c", "sloppy")):
            g = truth if r != "sloppy" else int(rng.integers(5))
            rows.append(f"d{q},d{doc},{r},{g},{2.0 if r == 'sloppy' else 15.0},{truth if k < 12 else ''},{k}")
    (tmp_path / "ann.csv").write_text("query_id,doc_id,rater,label,seconds,gold,position\n" + "\n".join(
        dict.fromkeys(rows)) + "\n")
    table = pd.read_csv(tmp_path / "ann.csv")
    table = table.drop_duplicates(["query_id", "doc_id", "rater"])
    table.to_csv(tmp_path / "ann.csv", index=False)
    (tmp_path / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nannotations: ann.csv\n")
    out = tmp_path / "report"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--formats", "html", "--chapters",
                     "human_evaluation", "--device", "cpu"]) == 0
    chapter = json.loads((out / "metrics.json").read_text())["chapters"]["human_evaluation"]
    assert chapter["status"] == "ok", chapter
    metrics = chapter["metrics"]
    for name in ("krippendorff_alpha", "fleiss_kappa", "cohen_kappa", "gwet_ac1", "percent_agreement",
                 "gold_accuracy", "embedding_human_spearman"):
        v = metrics[name]
        assert v["ci_low"] <= v["value"] <= v["ci_high"], name
    assert metrics["embedding_human_spearman"]["value"] > 0.5
    rec = json.loads((out / "results" / "human_evaluation.json").read_text())
    assert list(rec["info"]["flagged_raters"]) == ["sloppy"]
    assert {t["name"] for t in rec["tests"]} >= {"embedding vs human grade", "fatigue: sloppy"}
    qrels = read_qrels(out / "results" / "human_evaluation_consensus.tsv", query_ids=ids, doc_ids=ids)
    assert len(qrels) == table.groupby(["query_id", "doc_id"]).ngroups and qrels["relevance"].between(0, 4).all()
    html = (out / "report.html").read_text()
    for words in ("Flagged raters", "Krippendorff", "Dawid–Skene", "human ceiling", "sloppy"):
        assert words in html, words


# ---------------------------------------------------------------------------------------------
# The task scorer: the embedding's similarity per rated pair
# ---------------------------------------------------------------------------------------------

def _rated_set(folder, noise: float, kind: str = "pair", seed: int = 4):
    """50 entities rated in pairs by three raters from their true vectors (the set: those plus ``noise`` times
    fixed directions) and 40 words of a word-pair benchmark that no noise touches. ``kind="query_doc"``: the
    first id of each rated pair is a query with a vector of its own (the manifest's ``queries``)."""
    from scored_reports import annotations_text, word_pairs_text, write_set

    rng = np.random.default_rng(seed)
    d, n_o, n_w = 16, 50, 40
    T, E, W = rng.standard_normal((n_o, d)), rng.standard_normal((n_o, d)), rng.standard_normal((n_w, d))
    truth = np.r_[T, W]
    ids = [f"o{i:02d}" for i in range(n_o)] + [f"w{i:02d}" for i in range(n_w)]
    files = {"ann.csv": annotations_text(truth, ids, range(n_o)),
             "pairs.tsv": word_pairs_text(truth, ids, range(n_o, n_o + n_w))}
    entries = {"annotations": "ann.csv", "annotation_level": "ordinal", "word_pairs": "pairs.tsv"}
    if kind == "query_doc":  # queries q00..: the true vectors of the entities, which the set holds with noise
        files["ann.csv"] = files["ann.csv"].replace("item1,item2", "query_id,doc_id").replace("\no", "\nq")
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "q.npy", T.astype(np.float32))
        files["qids.txt"] = "\n".join(f"q{i:02d}" for i in range(n_o)) + "\n"
        entries["queries"] = "{vectors: q.npy, ids: qids.txt}"
    return write_set(folder, np.r_[T + noise * E, W], ids, files=files, entries=entries)


@pytest.mark.parametrize("kind", ["pair", "query_doc"])
def test_scorer_aggregate_is_the_recorded_spearman(tmp_path, kind):
    """The scorer's ρ over its units is the chapter's embedding_human_spearman bit for bit; with queries the first
    vector of each pair is the query's (and a remedy maps the query vectors too)."""
    from scored_reports import open_set, recorded, run_report, scorer_units

    from embeval_report.report.pairing import ModelReport

    m = _rated_set(tmp_path / "set", noise=0.5, kind=kind)
    out = run_report(m, tmp_path / "report", ["human_evaluation"], "A")
    rec = recorded(out, "human_evaluation")
    units, plan, scorer = scorer_units(m, "human_evaluation")
    value = scorer.values(units)["embedding_human_spearman"]
    assert value == rec["metrics"]["embedding_human_spearman"]["value"] and value > 0.5
    assert rec["info"]["units"]["aggregates"] == ["embedding_human_spearman"]
    table = ModelReport.open(out).units["human_evaluation"]
    assert list(table["item"]) == list(units["item"]) and len(table) == rec["info"]["n_items"]
    assert scorer.aggregate("embedding_human_spearman").value(table) == value
    assert table["item"].iloc[0] == (f"{units['id1'].iloc[0]} → {units['id2'].iloc[0]}" if kind == "query_doc"
                                     else units["item"].iloc[0])
    ctx = open_set(m, "human_evaluation")
    inputs = scorer.inputs(ctx.es, ctx.side, ctx.settings)
    mapped = scorer.map_inputs(inputs, lambda V: -np.asarray(V))
    if kind == "query_doc":
        flipped = scorer.units(ctx.es.vectors, mapped, plan)
        np.testing.assert_array_equal(flipped["similarity"], -units["similarity"])
    else:
        assert mapped is inputs


def test_scorer_plan_does_not_read_the_vectors_and_one_vector_moves_only_its_pairs(tmp_path):
    from scored_reports import scorer_units

    from embeval_report.metrics.scoring import plan_fingerprint

    m = _rated_set(tmp_path, noise=0.5)
    X = np.load(tmp_path / "v.npy")
    a, plan_a, _ = scorer_units(m, "human_evaluation")
    b, plan_b, _ = scorer_units(m, "human_evaluation", 2 * X + np.random.default_rng(0).normal(0, 0.5, X.shape))
    assert plan_fingerprint(plan_a) == plan_fingerprint(plan_b) and not np.allclose(a["similarity"], b["similarity"])
    changed = a["id1"].iloc[0]
    Y = X.copy()
    Y[int(changed[1:])] = -Y[int(changed[1:])] + 0.3
    c, _, _ = scorer_units(m, "human_evaluation", Y)
    holds = ((a["id1"] == changed) | (a["id2"] == changed)).to_numpy()
    assert holds.sum() >= 1
    assert np.array_equal(a["similarity"].to_numpy() != c["similarity"].to_numpy(), holds)
    assert a.drop(columns="similarity").equals(c.drop(columns="similarity"))


def test_compare_finds_better_agreement_with_the_raters_only_in_this_chapter(tmp_path, monkeypatch):
    """Two models that differ only in the vectors of the rated entities: B (closer to what the raters saw) is
    better on ρ; the word-pair benchmark (other ids) shows no difference."""
    from scored_reports import assert_found_only_in, compare, run_report

    chapters = ["human_evaluation", "semantic"]
    a = run_report(_rated_set(tmp_path / "A", noise=1.5), tmp_path / "ra", chapters, "A")
    b = run_report(_rated_set(tmp_path / "B", noise=0.1), tmp_path / "rb", chapters, "B")
    assert_found_only_in(compare(a, b, monkeypatch), "human_evaluation", ["embedding_human_spearman"])
