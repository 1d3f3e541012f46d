"""Semantic benchmarks against gensim (KeyedVectors.evaluate_word_pairs / evaluate_word_analogies /
most_similar_cosmul) on gensim's shipped benchmark files, hand-computed analogies, file errors, and
degenerate inputs (all OOV, one pair, constant scores, identical rows, a 3 x 2 set)."""
import json
import math
import re
import warnings

import nbformat
import numpy as np
import pandas as pd
import pytest
from gensim.models import KeyedVectors, Word2Vec
from gensim.models.word2vec import LineSentence
from gensim.test.utils import datapath
from statsmodels.stats.proportion import proportion_confint

from embeval_report.chapters.registry import chapter as declared
from embeval_report import kernels
from embeval_report.chapters import semantic as sem_chapter  # noqa: E402
from embeval_report.metrics import semantic as msem  # noqa: E402
from embeval_report.chapters import semantic as chapter
from embeval_report.errors import InputError, UndefinedMetricWarning
from embeval_report.io.words import read_analogies, read_word_pairs
from embeval_report.resources import notebooks_dir

WORDSIM, SIMLEX, QUESTIONS = datapath("wordsim353.tsv"), datapath("simlex999.txt"), datapath("questions-words.txt")


@pytest.fixture(scope="module")
def lee_kv():
    """A small real model: word2vec on gensim's Lee corpus (lower-case words; the benchmarks are mixed case)."""
    model = Word2Vec(LineSentence(datapath("lee_background.cor")), vector_size=32, min_count=2, epochs=10,
                     seed=1, workers=1)
    return model.wv


@pytest.fixture(scope="module")
def planted_kv():
    """Vectors for three questions-words sections with a planted offset per section, so that many
    analogies hold; plus case variants (one in front, so it provides the vector ignoring case) and
    random distractors."""
    rng = np.random.default_rng(7)
    qa = read_analogies(QUESTIONS)
    d, vec = 24, {}
    for section in ("capital-common-countries", "family", "gram2-opposite"):
        offset = 1.5 * rng.standard_normal(d)
        for a, b, c, e in qa.questions[qa.section == section]:
            for x, y in ((a, b), (c, e)):
                vec.setdefault(x, rng.standard_normal(d))
                vec.setdefault(y, vec[x] + offset + 1.3 * rng.standard_normal(d))
    keys = ["ATHENS", "BOY"] + list(vec) + [k.lower() for k in list(vec)[:40] if k.lower() != k]
    keys += [f"filler{i}" for i in range(150)]
    vectors = np.array([vec[k] if k in vec else rng.standard_normal(d) for k in keys], dtype=np.float32)
    kv = KeyedVectors(d)
    kv.add_vectors(keys, vectors)
    return kv


def gensim_sections(sections):
    return {s["section"]: (len(s["correct"]), len(s["correct"]) + len(s["incorrect"])) for s in sections}


# --------------------------------------------------------------------------- word pairs vs gensim

@pytest.mark.parametrize("path", [WORDSIM, SIMLEX])
@pytest.mark.parametrize("case_insensitive,restrict_vocab,dummy", [(True, None, False), (False, None, False),
                                                                   (True, 1500, False), (True, None, True)])
def test_word_pairs_equal_gensim(lee_kv, path, case_insensitive, restrict_vocab, dummy):
    pearson, spearman, oov_pct = lee_kv.evaluate_word_pairs(
        path, restrict_vocab=restrict_vocab or 300000, case_insensitive=case_insensitive, dummy4unknown=dummy)
    r = msem.measure_semantics(lee_kv.vectors, lee_kv.index_to_key, word_pairs=read_word_pairs(path), restrict_vocab=restrict_vocab,
                              case_insensitive=case_insensitive, dummy4unknown=dummy, n_boot=0, device="cpu")
    assert r.values["word_pairs_spearman"] == pytest.approx(spearman.statistic, abs=1e-9)
    assert r.values["word_pairs_pearson"] == pytest.approx(pearson.statistic, abs=1e-5)  # gensim: float32 cosines
    assert 100 * r.values["word_pairs_oov_ratio"] == pytest.approx(oov_pct, abs=1e-9)
    n = len(read_word_pairs(path))
    assert r.values["word_pairs_oov"] == round(oov_pct * n / 100)
    assert 0 < r.values["word_pairs_oov"] < n  # the Lee model covers part of each benchmark


def test_word_pair_cosines_equal_gensim_similarity(lee_kv):
    r = msem.word_pair_correlation(lee_kv.vectors, lee_kv.index_to_key, read_word_pairs(WORDSIM), case_insensitive=False, n_boot=0)
    t = r.table[r.table["in_vocab"]]
    ref = [lee_kv.similarity(a, b) for a, b in zip(t["word1"], t["word2"])]
    np.testing.assert_allclose(t["cosine"], ref, atol=1e-6)
    assert r.n_used == len(t) == r.n_pairs - r.n_oov


@pytest.mark.parametrize("vector_size,seed", [(50, 1), (64, 2), (32, 1)])
def test_word_pair_spearman_equals_float64_reference_on_real_vectors(vector_size, seed):
    """Word2vec models of gensim's Lee corpus cover "bank money" and "money bank" of WordSim-353: the two must tie,
    as in a float64 reference (cosines dot / (|a| |b|) of the float64 rows) and in gensim's evaluate_word_pairs.
    The kernel's cosines divided by one norm, then the other, and broke the tie at 50 and 64 dimensions."""
    kv = Word2Vec(LineSentence(datapath("lee_background.cor")), vector_size=vector_size, min_count=2, epochs=10,
                  seed=seed, workers=1).wv
    from scipy import stats
    for path in (WORDSIM, SIMLEX):
        r = msem.word_pair_correlation(kv.vectors, kv.index_to_key, read_word_pairs(path), n_boot=0, device="cpu")
        t = r.table[r.table["in_vocab"]]
        vocab = msem.Vocabulary.build(kv.index_to_key)
        X = kv.vectors.astype(np.float64)
        a, b = X[vocab.lookup(t["word1"])], X[vocab.lookup(t["word2"])]
        ref = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        np.testing.assert_allclose(t["cosine"], ref, rtol=0, atol=1e-15)
        rho = stats.spearmanr(t["human"], ref).statistic
        assert r.spearman == pytest.approx(rho, rel=0, abs=1e-12)
        _, gensim_rho, _ = kv.evaluate_word_pairs(path)
        assert r.spearman == pytest.approx(gensim_rho.statistic, rel=0, abs=1e-12)
    words = {(w1.upper(), w2.upper()): c for w1, w2, c in zip(*(msem.word_pair_correlation(
        kv.vectors, kv.index_to_key, read_word_pairs(WORDSIM), n_boot=0, device="cpu").table[k] for k in ("word1", "word2", "cosine")))}
    assert words[("BANK", "MONEY")] == words[("MONEY", "BANK")]  # the reversed pair is in the vocabulary: a tie


def test_correlation_ci_is_a_paired_bootstrap(lee_kv):
    r = msem.measure_semantics(lee_kv.vectors, lee_kv.index_to_key, word_pairs=read_word_pairs(WORDSIM), n_boot=300, device="cpu")
    m = r.metrics["word_pairs_spearman"]
    assert m.ci_low < m.value < m.ci_high and "paired" in m.ci_method
    # the vectorised statistics used by the bootstrap equal SciPy's on every resample row
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 40)), rng.standard_normal((5, 40))
    from scipy import stats
    np.testing.assert_allclose(msem._spearman_stat(x, y), [stats.spearmanr(a, b).statistic for a, b in zip(x, y)])
    np.testing.assert_allclose(msem._pearson_stat(x, y), [stats.pearsonr(a, b).statistic for a, b in zip(x, y)])


# --------------------------------------------------------------------------- analogies vs gensim

@pytest.mark.parametrize("case_insensitive,restrict_vocab", [(True, None), (False, None), (True, 2000)])
def test_analogies_equal_gensim_on_lee_model(lee_kv, case_insensitive, restrict_vocab):
    score, sections = lee_kv.evaluate_word_analogies(QUESTIONS, restrict_vocab=restrict_vocab or 300000,
                                                     case_insensitive=case_insensitive)
    r = msem.analogy_accuracy(lee_kv.vectors, lee_kv.index_to_key, read_analogies(QUESTIONS), restrict_vocab=restrict_vocab,
                             case_insensitive=case_insensitive, device="cpu")
    assert r.accuracy_3cosadd == pytest.approx(score, abs=1e-12)
    ref = gensim_sections(sections)
    total = ref.pop("Total accuracy")
    assert (r.correct_3cosadd, r.n_evaluated) == total
    assert r.n_evaluated + r.n_oov == r.n_questions == 19544
    ours = {row.section: (row.correct_3cosadd, row.evaluated) for row in r.sections.itertuples()}
    assert ours == ref


@pytest.mark.parametrize("case_insensitive,restrict_vocab,dummy", [(True, None, False), (False, None, False),
                                                                   (True, 300, False), (True, None, True)])
def test_analogies_equal_gensim_with_planted_structure(planted_kv, case_insensitive, restrict_vocab, dummy):
    score, sections = planted_kv.evaluate_word_analogies(QUESTIONS, restrict_vocab=restrict_vocab or 300000,
                                                         case_insensitive=case_insensitive, dummy4unknown=dummy)
    r = msem.measure_semantics(planted_kv.vectors, planted_kv.index_to_key, analogies=read_analogies(QUESTIONS),
                              restrict_vocab=restrict_vocab, case_insensitive=case_insensitive,
                              dummy4unknown=dummy, device="cpu")
    acc = r.values["analogy_accuracy"]
    assert acc == pytest.approx(score, abs=1e-12)
    assert 0.1 < acc < 0.95 or dummy  # many hits and many misses: a real comparison
    ref = gensim_sections(sections)
    assert (r.analogies.correct_3cosadd, r.analogies.n_evaluated) == ref.pop("Total accuracy")
    assert {row.section: (row.correct_3cosadd, row.evaluated) for row in r.analogies.sections.itertuples()} == ref
    lo, hi = proportion_confint(r.analogies.correct_3cosadd, r.analogies.n_evaluated, method="wilson")
    assert (r.metrics["analogy_accuracy"].ci_low, r.metrics["analogy_accuracy"].ci_high) == pytest.approx((lo, hi))


def test_case_variant_in_front_provides_the_vector(planted_kv):
    """'ATHENS' (random) precedes 'Athens' (planted): ignoring case, the first one is used, as in gensim."""
    r_ci = msem.analogy_accuracy(planted_kv.vectors, planted_kv.index_to_key, read_analogies(QUESTIONS), device="cpu")
    r_cs = msem.analogy_accuracy(planted_kv.vectors, planted_kv.index_to_key, read_analogies(QUESTIONS), case_insensitive=False,
                                device="cpu")
    q = r_ci.questions
    athens = q["in_vocab"] & (q["a"] == "Athens")
    assert athens.sum() > 0
    assert r_cs.questions.loc[athens, "correct_3cosadd"].mean() > q.loc[athens, "correct_3cosadd"].mean()


def test_3cosmul_equals_gensim_most_similar_cosmul(planted_kv):
    """gensim's most_similar_cosmul uses ε = 1e-6 and excludes the exact question keys (case-sensitive)."""
    kv = planted_kv
    qa = read_analogies(QUESTIONS)
    vocab = msem.Vocabulary.build(kv.index_to_key, case_insensitive=False)
    rows = vocab.lookup(qa.questions)
    ok = np.flatnonzero((rows >= 0).all(1))[::7][:150]
    _, mul = msem.solve_analogies(kv.vectors, rows[ok, :3], eps=1e-6, device="cpu")
    for k, qi in enumerate(ok):
        a, b, c, _ = qa.questions[qi]
        assert kv.index_to_key[mul[k]] == kv.most_similar_cosmul(positive=[b, c], negative=[a], topn=1)[0][0]


def test_3cosadd_equals_brute_force_and_is_chunk_invariant(planted_kv, monkeypatch):
    X = planted_kv.vectors.astype(np.float64)
    rng = np.random.default_rng(3)
    abc = rng.integers(0, len(X), (120, 3))
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = (U[abc[:, 1]] - U[abc[:, 0]] + U[abc[:, 2]]) @ U.T
    sa, sb, sc = ((1 + U[abc[:, j]] @ U.T) / 2 for j in range(3))
    M = sb * sc / (sa + 1e-3)
    for A in (S, M):
        A[np.repeat(np.arange(len(abc)), 3), abc.ravel()] = -np.inf
    add, mul = msem.solve_analogies(X, abc, device="cpu")
    np.testing.assert_array_equal(add, S.argmax(1))
    np.testing.assert_array_equal(mul, M.argmax(1))
    monkeypatch.setattr(kernels.device, "CHUNK_BYTES", 10_000)  # a few questions per chunk
    add2, mul2 = msem.solve_analogies(X, abc, device="cpu")
    np.testing.assert_array_equal(add, add2)
    np.testing.assert_array_equal(mul, mul2)


def test_hand_computed_analogy(tmp_path):
    """Unit vectors at angles a = 0°, b = 90°, c = 45°; candidates at 60° and 180°.

    3CosAdd  cos(x,b) − cos(x,a) + cos(x,c):  60°: 0.8660 − 0.5 + 0.9659 = 1.3320;  180°: 0 + 1 − 0.7071 = 0.2929.
    (b itself would score 1.7071 and win if the question words were not excluded.)
    3CosMul  s_b s_c / (s_a + 0.001), s = (1 + cos)/2:  60°: 0.9330 · 0.9830 / 0.751 = 1.2212;
             180°: 0.5 · 0.1464 / 0.001 = 73.2 — the near-zero s_a dominates, so 3CosMul picks 180°.
    """
    ang = {"a": 0, "b": 90, "c": 45, "x60": 60, "x180": 180}
    X = np.array([[math.cos(math.radians(t)), math.sin(math.radians(t))] for t in ang.values()])
    f = tmp_path / "q.txt"
    f.write_text(": add\na b c x60\n: mul\na b c x180\n")
    r = msem.analogy_accuracy(X, list(ang), read_analogies(f), device="cpu")
    q = r.questions
    assert list(q["predicted_3cosadd"]) == ["x60", "x60"] and list(q["predicted_3cosmul"]) == ["x180", "x180"]
    assert list(r.sections["accuracy_3cosadd"]) == [1.0, 0.0]
    assert list(r.sections["accuracy_3cosmul"]) == [0.0, 1.0]
    assert r.accuracy_3cosadd == r.accuracy_3cosmul == 0.5


def test_oov_questions_and_labels(tmp_path):
    X = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1], [0.1, 1, 1]], float)
    ids = ["man", "woman", "king", "queen", "princess"]
    f = tmp_path / "q.txt"
    f.write_text("man woman king queen\nman woman king unicorn\n")  # no section header: section 'all'
    r = msem.measure_semantics(X, ids, analogies=read_analogies(f), labels=["m", "f", "m", "f", "f"], device="cpu")
    assert r.values["analogy_oov"] == 1 and r.values["analogy_oov_ratio"] == 0.5
    assert r.values["analogy_accuracy"] == 1.0 and r.analogies.sections["section"].tolist() == ["all"]
    assert r.analogies.label_match_3cosadd == 1.0
    r2 = msem.measure_semantics(X, ids, analogies=read_analogies(f), dummy4unknown=True, device="cpu")
    assert r2.values["analogy_accuracy"] == 0.5 and r2.analogies.n_evaluated == 2


# --------------------------------------------------------------------------- file formats

def test_csv_formats_read_like_gensim_formats(tmp_path):
    pairs = read_word_pairs(WORDSIM)
    csv_path = tmp_path / "pairs.csv"
    pd.DataFrame({"Word1": pairs.word1, "word2": pairs.word2, "score": pairs.score, "note": "x"}).to_csv(
        csv_path, index=False)
    back = read_word_pairs(csv_path)
    assert list(back.word1) == list(pairs.word1) and np.array_equal(back.score, pairs.score)
    assert len(pairs) == 353 and pairs.line[0] == 3  # two '#' comment lines
    qa = read_analogies(QUESTIONS)
    assert len(qa) == 19544 and len(qa.sections) == 14
    sub = pd.DataFrame(qa.questions[:50], columns=list("abcd")).assign(section=qa.section[:50])
    sub.to_csv(tmp_path / "q.csv", index=False)
    back = read_analogies(tmp_path / "q.csv")
    assert (back.questions == qa.questions[:50]).all() and list(back.section) == list(qa.section[:50])


def test_whitespace_pairs_with_header_line(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text("word1 word2 similarity\n\n# comment\nCat  dog 7.5\ncar  bus 3\n")
    p = read_word_pairs(f)
    assert list(p.word1) == ["Cat", "car"] and list(p.score) == [7.5, 3.0] and list(p.line) == [4, 5]


@pytest.mark.parametrize("name,text,message", [
    ("p.tsv", "a\tb\t1\nc\td\n", "p.tsv, line 2: expected 3 tab-separated fields"),
    ("p.txt", "a b 1\nc d high\n", "p.txt, line 2: expected a number as the score"),
    ("p.txt", "a b 1\nc d nan\n", "p.txt, line 2: expected a finite score"),
    ("p.txt", "# only a comment\n", "p.txt: no word pairs found"),
    ("p.csv", "first,second,score\na,b,1\n", "p.csv, line 1: expected a CSV header with columns word1, word2, score"),
    ("p.csv", "word1,word2,score\na,b,1\na,b\n", "p.csv, line 3: expected 3 comma-separated fields"),
    ("p.csv", "word1,word2,score\n,b,1\n", "p.csv, line 2: empty word"),
])
def test_bad_word_pair_files(tmp_path, name, text, message):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        read_word_pairs(f)


@pytest.mark.parametrize("name,text,message", [
    ("q.txt", ": s\na b c d\na b c\n", "q.txt, line 3: expected 4 whitespace-separated words"),
    ("q.txt", ":\na b c d\n", "q.txt, line 1: expected a section name"),
    ("q.txt", ": s\n", "q.txt: no analogy questions found"),
    ("q.csv", "a,b,c\nx,y,z\n", "q.csv, line 1: expected a CSV header with columns a, b, c, d"),
])
def test_bad_analogy_files(tmp_path, name, text, message):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(InputError, match=message):
        read_analogies(f)


def test_non_utf8_file(tmp_path):
    f = tmp_path / "p.txt"
    f.write_bytes(b"caf\xe9 tea 3\n")
    with pytest.raises(InputError, match="p.txt: expected UTF-8 text"):
        read_word_pairs(f)


# --------------------------------------------------------------------------- chapter pieces

def test_result_metrics_narrative_and_figures(lee_kv):
    r = msem.measure_semantics(lee_kv.vectors, lee_kv.index_to_key, word_pairs=read_word_pairs(WORDSIM), analogies=read_analogies(QUESTIONS),
                              n_boot=100, device="cpu")
    assert set(r.metrics) == set(msem.SPECS) == set(msem.METRICS)
    assert all(m.verdict is None and m.reference for m in r.metrics.values())
    text = sem_chapter.narrative(r)
    assert "Spearman ρ" in text and "3CosAdd" in text
    assert sem_chapter.coverage_warning(r) is not None  # the Lee model covers ~30 % of WordSim-353
    assert len(sem_chapter.pair_disagreements(r)) == 10 and len(sem_chapter.analogy_failures(r)) <= 10
    assert list(sem_chapter.section_summary(r)["section"]) == list(read_analogies(QUESTIONS).sections)
    for fig in (sem_chapter.similarity_scatter(r), sem_chapter.section_accuracy_figure(r)):
        assert fig.axes
    import matplotlib.pyplot as plt
    plt.close("all")


def test_notebook_metadata():
    nb = nbformat.read(notebooks_dir() / "60_semantic.ipynb", as_version=4)
    nbformat.validate(nb)
    spec = declared("semantic")
    assert nb.metadata["embeval"]["name"] == "semantic" and spec.notebook.name == "60_semantic.ipynb"
    assert (spec.title, spec.order, spec.requires) == ("Semantic benchmarks", 60, ("word_pairs|analogies",))
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert ["parameters"] in tags and ["remove-input"] in tags


def test_demo_side_data(demo_data):
    from embeval_report.demo import streaming_embeddings
    from embeval_report.io import load_source
    es = load_source(demo_data)
    X, meta = streaming_embeddings(seed=0)
    np.testing.assert_array_equal(es.vectors, X)  # the side data does not disturb the vectors
    assert {"word_pairs", "analogies"} <= set(es.fields) and es.has("word_pairs|analogies".split("|")[0])
    pairs, qa = read_word_pairs(es.fields["word_pairs"]), read_analogies(es.fields["analogies"])
    assert len(pairs) == 300 and len(qa) == 200 and len(qa.sections) == 8
    r = msem.measure_semantics(es.vectors, es.ids, word_pairs=pairs, analogies=qa, n_boot=0, device="cpu")
    assert r.values["word_pairs_oov"] == 15 and r.values["word_pairs_spearman"] > 0.5
    assert r.values["analogy_oov"] == 0 and r.values["analogy_accuracy"] > 0.05


def test_wilson_interval_matches_statsmodels_with_exact_ends():
    for k, n in ((0, 25), (3, 25), (25, 25), (17, 400)):
        ref = proportion_confint(k, n, alpha=0.05, method="wilson")
        assert msem.wilson_ci(k, n) == pytest.approx(ref, abs=1e-12)
    assert msem.wilson_ci(0, 25)[0] == 0.0 and msem.wilson_ci(25, 25)[1] == 1.0
    assert msem.wilson_ci(0, 0) == (None, None)


# --------------------------------------------------------------------------- degenerate inputs

NO_NAN = re.compile(r"\bnan\b|Traceback|Error")


def run_measure(X, ids, tmp_path, pairs=None, questions=None, **kw):
    """measure_semantics on files written from text, with the UndefinedMetricWarnings it emitted."""
    files = {}
    if pairs is not None:
        (tmp_path / "p.tsv").write_text(pairs)
        files["word_pairs"] = read_word_pairs(tmp_path / "p.tsv")
    if questions is not None:
        (tmp_path / "q.txt").write_text(questions)
        files["analogies"] = read_analogies(tmp_path / "q.txt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = msem.measure_semantics(np.asarray(X, float), ids, device="cpu", n_boot=200, **files, **kw)
    return r, [str(w.message) for w in caught if issubclass(w.category, UndefinedMetricWarning)]


def check_chapter_pieces(r):
    """Narrative, tables and figures of a degenerate result: no 'nan', no exception."""
    import matplotlib.pyplot as plt

    text = chapter.narrative(r) + (chapter.coverage_warning(r) or "")
    assert not NO_NAN.search(text), text
    if r.pairs is not None:
        chapter.pair_disagreements(r)
        chapter.similarity_scatter(r)
    if r.analogies is not None:
        assert not NO_NAN.search(chapter.section_summary(r).to_string())
        chapter.analogy_failures(r)
        chapter.section_accuracy_figure(r)
    plt.close("all")
    for m in r.metrics.values():  # the record keeps null, never NaN, and says why
        rec = m.to_record()
        assert rec["value"] is None or math.isfinite(rec["value"])
        if rec["value"] is None:
            assert rec["note"]


def test_all_oov_gives_null_metrics_with_reasons(tmp_path):
    X = np.random.default_rng(0).standard_normal((30, 4))
    ids = [f"e{i}" for i in range(30)]
    r, warned = run_measure(X, ids, tmp_path, pairs="x\ty\t3\nz\tw\t5\ne0\tq\t1\n", questions=": s\na b c d\ne0 e1 e2 zz\n")
    assert math.isnan(r.values["word_pairs_spearman"]) and math.isnan(r.values["analogy_accuracy"])
    assert r.values["word_pairs_oov"] == 3 and r.values["word_pairs_oov_ratio"] == 1.0
    assert r.values["analogy_oov"] == 2 and r.values["analogy_oov_ratio"] == 1.0
    for name in ("word_pairs_spearman", "word_pairs_pearson", "analogy_accuracy", "analogy_accuracy_3cosmul"):
        m = r.metrics[name]
        assert m.value is None and m.ci_low is None and m.note
    assert r.metrics["word_pairs_spearman"].note == "p.tsv has 0 pairs with both words in the vocabulary; " \
                                                    "a correlation needs at least 3"
    assert "none of the 2 questions in q.txt has all four words" in r.metrics["analogy_accuracy"].note
    assert len(warned) == 2 and warned[0].startswith("word-pair correlation undefined: p.tsv has 0 pairs")
    assert r.analogies.sections["accuracy_3cosadd"].isna().all()
    check_chapter_pieces(r)


@pytest.mark.parametrize("pairs,reason", [
    ("e0\te1\t3\nz\tw\t5\n", "p.tsv has 1 pair with both words in the vocabulary; a correlation needs at least 3"),
    ("".join(f"e{i}\te{i + 1}\t4\n" for i in range(10)), "the human scores of the 10 pairs with both words in the "
                                                          "vocabulary in p.tsv are all equal (4)"),
])
def test_single_pair_and_constant_scores_are_undefined(tmp_path, pairs, reason):
    X = np.random.default_rng(1).standard_normal((30, 4))
    r, warned = run_measure(X, [f"e{i}" for i in range(30)], tmp_path, pairs=pairs)
    assert math.isnan(r.values["word_pairs_spearman"]) and math.isnan(r.values["word_pairs_pearson"])
    assert r.metrics["word_pairs_pearson"].value is None and r.metrics["word_pairs_pearson"].note.startswith(reason)
    assert warned == [f"word-pair correlation undefined: {r.pairs.undefined}"]
    assert r.pairs.undefined.startswith(reason)
    check_chapter_pieces(r)


def test_identical_rows_have_no_correlation_but_analogies_run(tmp_path):
    X = np.tile(np.arange(1, 9.0), (200, 1))
    ids = [f"e{i}" for i in range(200)]
    r, warned = run_measure(X, ids, tmp_path, pairs="".join(f"e{i}\te{i + 1}\t{i % 7}\n" for i in range(50)),
                            questions=": s\n" + "".join(f"e{i} e{i + 1} e{i + 2} e{i + 3}\n" for i in range(20)))
    assert r.values["word_pairs_spearman"] != r.values["word_pairs_spearman"]  # NaN
    assert "cosine similarity is the same (1)" in r.pairs.undefined and len(warned) == 1
    # every candidate ties: the lowest row that is not a, b or c wins (e3 for the first question only)
    assert r.analogies.correct_3cosadd == r.analogies.correct_3cosmul == 1 and r.values["analogy_accuracy"] == 0.05
    check_chapter_pieces(r)


def test_three_by_two_set_matches_gensim_and_has_no_candidate(tmp_path):
    """With three ids, excluding a, b and c leaves no candidate: no prediction, counted wrong (as gensim)."""
    X = np.random.default_rng(2).standard_normal((3, 2))
    ids = ["e0", "e1", "e2"]
    questions = ": s\ne0 e1 e2 e0\ne1 e2 e0 e1\n"
    r, warned = run_measure(X, ids, tmp_path, pairs="e0\te1\t3\ne1\te2\t5\ne0\te2\t1\n", questions=questions)
    kv = KeyedVectors(2)
    kv.add_vectors(ids, X.astype(np.float32))
    score, _ = kv.evaluate_word_analogies(str(tmp_path / "q.txt"))
    assert r.values["analogy_accuracy"] == score == 0.0 and r.analogies.n_evaluated == 2
    assert r.analogies.questions["predicted_3cosadd"].isna().all()
    add, mul = msem.solve_analogies(X, [[0, 1, 2]], device="cpu")
    assert add.tolist() == mul.tolist() == [-1]
    # three pairs: the correlation is defined; too few distinct resamples for a bootstrap interval, said so
    assert math.isfinite(r.values["word_pairs_spearman"])
    assert r.metrics["word_pairs_spearman"].ci_low is None and "bootstrap" in r.metrics["word_pairs_spearman"].note
    assert any("interval undefined" in w for w in warned)
    check_chapter_pieces(r)
    assert "no candidate is left" in chapter.narrative(r)


def test_metrics_module_has_no_presentation():
    import inspect

    src = inspect.getsource(msem)
    assert "matplotlib" not in src and "..report" not in src and "..chapters" not in src


def test_chapter_through_the_cli_on_degenerate_sets(tmp_path):
    """The chapter runs (ok) on an all-OOV set and on identical rows; null metrics, notes in the report."""
    from embeval_report.cli import main

    for name, X, pairs, questions in (
            ("oov", np.random.default_rng(0).standard_normal((30, 4)), "x\ty\t3\n", ": s\na b c d\n"),
            ("identical", np.tile(np.arange(1, 9.0), (200, 1)), "".join(f"e{i}\te{i + 1}\t{i % 7}\n" for i in range(9)),
             "e0 e1 e2 e3\n")):
        folder = tmp_path / name
        folder.mkdir()
        np.save(folder / "v.npy", X.astype(np.float32))
        (folder / "ids.txt").write_text("\n".join(f"e{i}" for i in range(len(X))) + "\n")
        (folder / "p.tsv").write_text(pairs)
        (folder / "q.txt").write_text(questions)
        (folder / "m.yaml").write_text("vectors: v.npy\nids: ids.txt\nword_pairs: p.tsv\nanalogies: q.txt\n")
        out = tmp_path / f"out-{name}"
        assert main(["run", str(folder / "m.yaml"), "--out", str(out), "--chapters", "semantic",
                     "--formats", "html"]) == 0
        doc = json.loads((out / "metrics.json").read_text())["chapters"]["semantic"]
        assert doc["status"] == "ok" and doc["metrics"]["word_pairs_spearman"]["value"] is None
        info = json.loads((out / "results" / "semantic.json").read_text())["info"]
        assert any(w.startswith("word-pair correlation undefined") for w in info["warnings"])
        html = re.sub(r"<[^>]+>", " ", (out / "report.html").read_text())
        assert "Undefined for this input" in html and not re.search(r"\bnan\b|Traceback", html)


# ---------------------------------------------------------------------------------------------
# The task scorer: per word pair and per analogy question
# ---------------------------------------------------------------------------------------------

def _words_set(folder, noise: float, analogies: bool = True, seed: int = 3):
    """60 words whose true vectors ``T`` score 60 word pairs (the vectors: ``T`` plus ``noise`` times fixed
    directions), 10 planted analogy pairs, and 40 other entities rated in pairs (annotations) that no noise
    touches."""
    from scored_reports import annotations_text, word_pairs_text, write_set

    rng = np.random.default_rng(seed)
    d, n_w, n_o = 16, 60, 40
    T, E = rng.standard_normal((n_w, d)), rng.standard_normal((n_w, d))
    u, g = rng.standard_normal((10, d)), 3 * rng.standard_normal(d)
    M = np.r_[u, u + g] + 0.1 * rng.standard_normal((20, d))
    O = rng.standard_normal((n_o, d))
    X = np.r_[T + noise * E, M, O]
    ids = [f"w{i:02d}" for i in range(n_w)] + [f"m{i}" for i in range(10)] + [f"f{i}" for i in range(10)] + \
          [f"o{i:02d}" for i in range(n_o)]
    files = {"pairs.tsv": word_pairs_text(T, ids, range(n_w)),
             "ann.csv": annotations_text(X, ids, range(n_w + 20, n_w + 20 + n_o))}
    entries = {"word_pairs": "pairs.tsv", "annotations": "ann.csv", "annotation_level": "ordinal"}
    if analogies:
        files["questions.txt"] = ": gender\n" + "".join(f"m{i} f{i} m{j} f{j}\n" for i in range(10) for j in range(10)
                                                         if i != j and (i + j) % 3 == 0)
        entries["analogies"] = "questions.txt"
    return write_set(folder, X, ids, files=files, entries=entries), X


def test_scorer_aggregates_are_the_recorded_numbers(tmp_path):
    """Spearman's ρ and Pearson's r of the unit table's word pairs and the mean correctness of its questions are
    the chapter's numbers bit for bit (and read back from results/units/semantic.csv as compare reads them)."""
    from scored_reports import recorded, run_report, scorer_units

    from embeval_report.report.pairing import ModelReport

    m, _ = _words_set(tmp_path / "set", noise=0.8)
    out = run_report(m, tmp_path / "report", ["semantic"], "A")
    rec = recorded(out, "semantic")
    units, plan, scorer = scorer_units(m, "semantic")
    values = scorer.values(units)
    assert set(values) == {"word_pairs_spearman", "word_pairs_pearson", "analogy_accuracy", "analogy_accuracy_3cosmul"}
    for metric, v in values.items():
        assert v == rec["metrics"][metric]["value"], metric
    assert 0 < values["analogy_accuracy"] < 1 and values["word_pairs_spearman"] > 0.3
    info = rec["info"]["units"]
    assert (info["key"], info["means"], info["aggregates"]) == (
        "unit", ["analogy_accuracy", "analogy_accuracy_3cosmul"], ["word_pairs_spearman", "word_pairs_pearson"])
    assert info["stats"]["analogy_accuracy"]["n"] == rec["info"]["analogy_questions_evaluated"]
    table = ModelReport.open(out).units["semantic"]
    assert (table["kind"] == msem.PAIR).sum() == rec["info"]["word_pairs_total"]
    for metric, v in values.items():
        assert scorer.aggregate(metric).value(table) == pytest.approx(v, rel=0, abs=1e-12), metric


def test_scorer_plan_does_not_read_the_vectors(tmp_path):
    from scored_reports import scorer_units

    from embeval_report.metrics.scoring import plan_fingerprint

    m, X = _words_set(tmp_path, noise=0.8)
    a, plan_a, _ = scorer_units(m, "semantic")
    b, plan_b, _ = scorer_units(m, "semantic", 2 * X + np.random.default_rng(0).normal(0, 0.5, X.shape))
    assert plan_fingerprint(plan_a) == plan_fingerprint(plan_b)
    assert list(a["unit"]) == list(b["unit"]) and not np.allclose(a["cosine"], b["cosine"], equal_nan=True)


def test_one_word_changed_changes_only_its_pairs(tmp_path):
    """The cosines of the pairs holding the changed word move; every other pair keeps its value bit for bit."""
    from scored_reports import scorer_units

    m, X = _words_set(tmp_path, noise=0.8, analogies=False)
    Y = X.astype(np.float32)  # the set's own rows, as it stores them
    Y[5] = -Y[5] + 0.3
    a, _, _ = scorer_units(m, "semantic")
    b, _, _ = scorer_units(m, "semantic", Y)
    holds = a["unit"].str.contains(r"\bw05\b").to_numpy()
    assert holds.sum() >= 1
    moved = a["cosine"].to_numpy() != b["cosine"].to_numpy()
    assert np.array_equal(moved, holds)
    assert a.drop(columns="cosine").equals(b.drop(columns="cosine"))


def test_compare_finds_a_better_word_similarity_only_in_this_chapter(tmp_path, monkeypatch):
    """Two models that differ only in the vectors of the benchmark's words: compare says B better on Spearman's ρ
    (a paired bootstrap over the units) and finds no difference in the human-evaluation agreement (other ids)."""
    from scored_reports import assert_found_only_in, compare, run_report

    from embeval_report.report.pairing import ModelReport

    chapters = ["semantic", "human_evaluation"]
    a = run_report(_words_set(tmp_path / "A", noise=2.0)[0], tmp_path / "ra", chapters, "A")
    b = run_report(_words_set(tmp_path / "B", noise=0.2)[0], tmp_path / "rb", chapters, "B")
    table = compare(a, b, monkeypatch)
    assert_found_only_in(table, "semantic", ["word_pairs_spearman", "word_pairs_pearson"])
    rows = table.set_index(["chapter", "metric"])
    units = ModelReport.open(a).units["semantic"]
    pairs = int(((units["kind"] == msem.PAIR) & (units["cosine"] != "")).sum())
    assert rows.loc[("semantic", "word_pairs_spearman"), "n"] == pairs  # the pairs only, not the questions
    assert rows.loc[("semantic", "analogy_accuracy"), "n"] == int(units["analogy_accuracy"].notna().sum())
    assert bool(rows.loc[("semantic", "word_pairs_spearman"), "same_plan"])


def test_weighted_correlations_are_those_of_the_bootstrap_samples():
    """The paired bootstrap's all-at-once form (unit weights = the counts of each draw) gives the ρ and r that
    scipy gives the resampled rows, ties (repeated rows, equal scores) included; a draw with a constant side: NaN."""
    rng = np.random.default_rng(2)
    n = 40
    human = np.round(rng.uniform(0, 10, n))  # many ties
    units = pd.DataFrame({"unit": [f"u{i}" for i in range(n + 5)], "kind": [msem.PAIR] * n + [msem.QUESTION] * 5,
                          "human": np.r_[human, [np.nan] * 5],
                          "cosine": np.r_[np.round(human / 10 + rng.normal(0, 0.2, n), 2), [np.nan] * 5],
                          "analogy_accuracy": np.r_[[np.nan] * n, [1.0, 0, 0, 1, 1]]})
    draws = [rng.integers(0, n + 5, n + 5) for _ in range(100)] + [np.full(n + 5, 3)]
    W = np.stack([np.bincount(d, minlength=n + 5) for d in draws]).astype(float)
    for weighted, fn in ((msem.units_spearman_weighted, msem.units_spearman),
                         (msem.units_pearson_weighted, msem.units_pearson)):
        np.testing.assert_allclose(weighted(units, W), [fn(units.iloc[d]) for d in draws], rtol=0, atol=1e-12)
    assert np.isnan(msem.units_spearman_weighted(units, W[-1:]))[0]
