r"""Semantic benchmarks: correlation with human similarity judgements, and analogies.

Seed 001 §21.1 lists "whether semantic relationships are preserved" among the intrinsic
qualities of an embedding set but gives no code or thresholds for it; this module implements
the two standard benchmarks the way gensim's ``KeyedVectors.evaluate_word_pairs`` and
``evaluate_word_analogies`` do, so the numbers can be compared with gensim's:

* **Word similarity** (Finkelstein et al. 2002, WordSim-353; Hill et al. 2015, SimLex-999):
  the Spearman rank correlation :math:`\rho_s` (and Pearson's *r*) between human scores and
  :math:`\cos(w_1, w_2)` over the pairs whose two words are in the vocabulary.
* **Analogies** *a : b :: c : d* (Mikolov et al. 2013): 3CosAdd predicts
  :math:`\hat d = \arg\max_{x \notin \{a, b, c\}} \cos(x, \hat b - \hat a + \hat c)` on unit
  vectors; 3CosMul (Levy & Goldberg 2014, eq. 4) predicts
  :math:`\arg\max_{x \notin \{a,b,c\}} s(x, b)\, s(x, c) / (s(x, a) + \varepsilon)` with
  :math:`s = (\cos + 1)/2` and :math:`\varepsilon = 10^{-3}`. Accuracy is the share of
  questions whose prediction is *d*.

Conventions (gensim's, unless said otherwise)
---------------------------------------------
* The "words" are the ids of the embedding set, in row order. ``restrict_vocab = N`` keeps only
  the first N rows as vocabulary and as analogy candidates (gensim's default is 300 000 and
  assumes a frequency-sorted vocabulary; here the default is all rows).
* ``case_insensitive=True`` (default): words are compared after ``str.upper()``; when several
  ids fold to the same word, the first row provides the vector.
* Out-of-vocabulary (OOV): a pair or question with any word outside the vocabulary is left out
  and counted; ``dummy4unknown=True`` keeps it instead, with cosine 0 for a pair and as a wrong
  answer for a question. gensim reports the OOV *percentage*; here ``*_oov_ratio`` is a fraction.
* Analogy candidates exclude the three question words and every id that folds to one of them
  (gensim skips such case variants among its top five); ties go to the lowest row index; a
  question whose every candidate is excluded has no prediction (wrong, as in gensim).
  Candidates are scored exactly in float32 (as gensim) by chunked matrix products in torch.
* Correlations: SciPy ``spearmanr`` (average ranks for ties) and ``pearsonr``.

Undefined cases warn (:class:`~embeval_report.errors.UndefinedMetricWarning`) and leave the value
NaN (``null`` in metrics.json) with the reason in the result: a correlation over fewer than three
pairs or with a constant side (gensim would return NaN or raise), an accuracy without evaluated
questions (gensim prints 0.0).

The files (word pairs, analogy questions) are read and validated by :mod:`embeval_report.io.words`
before any chapter runs; the functions here also accept a path and read it with those readers.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sstats

from ..errors import UndefinedMetricWarning
from ..kernels import as_numpy, pair_cosines, resolve_device
from ..kernels.analogies import COSMUL_EPS, solve_analogies
from ..stats import DEFAULT_LEVEL, bootstrap_ci, weighted_pearson, weighted_spearman, wilson_ci
from .spec import MetricSpec, specs

#: above this many pairs the correlation CIs use the percentile bootstrap (BCa's jackknife is O(n²))
BCA_MAX_PAIRS = 5000
#: fewest pairs a correlation is computed on
MIN_PAIRS = 3

REF_PAIRS = "seed 001 §21.1; Finkelstein et al. 2002, Hill et al. 2015 (as gensim evaluate_word_pairs)"
REF_ANALOGY = "seed 001 §21.1; Mikolov et al. 2013, 3CosAdd (as gensim evaluate_word_analogies)"
REF_COSMUL = "seed 001 §21.1; Levy & Goldberg 2014, eq. 4, ε = 10⁻³"
REF_OOV = "seed 001 §21.1; gensim's convention: pairs or questions with an unknown word are left out"

_ACCURACY = (r"\frac{1}{|Q|}\sum_{q \in Q} \big[\arg\max_{x \in V \setminus \{a,b,c\}} ")

SPECS = specs(
    MetricSpec("word_pairs_spearman", "Word-pair Spearman ρ", "higher",
               r"\rho_s\big(\text{human}_k,\ \cos(w_{1k}, w_{2k})\big)", REF_PAIRS, range=(-1.0, 1.0), chance=0.0),
    MetricSpec("word_pairs_pearson", "Word-pair Pearson r", "higher",
               r"r\big(\text{human}_k,\ \cos(w_{1k}, w_{2k})\big)", REF_PAIRS, range=(-1.0, 1.0), chance=0.0),
    MetricSpec("word_pairs_oov", "Word pairs with an OOV word", "lower",
               r"\#\{k : w_{1k} \notin V \lor w_{2k} \notin V\}", REF_OOV, range=(0, math.inf), unit="pairs"),
    MetricSpec("word_pairs_oov_ratio", "Share of word pairs with an OOV word", "lower",
               r"\#\mathrm{OOV\ pairs} / \#\mathrm{pairs}", REF_OOV, range=(0.0, 1.0)),
    MetricSpec("analogy_accuracy", "Analogy accuracy (3CosAdd)", "higher",
               _ACCURACY + r"\cos(x,\ \hat b - \hat a + \hat c) = d\big]", REF_ANALOGY, range=(0.0, 1.0)),
    MetricSpec("analogy_accuracy_3cosmul", "Analogy accuracy (3CosMul)", "higher",
               _ACCURACY + r"\frac{s(x,b)\,s(x,c)}{s(x,a)+\varepsilon} = d\big],\ s = \frac{1+\cos}{2}",
               REF_COSMUL, range=(0.0, 1.0)),
    MetricSpec("analogy_oov", "Analogy questions with an OOV word", "lower",
               r"\#\{q : \{a,b,c,d\} \not\subseteq V\}", REF_OOV, range=(0, math.inf), unit="questions"),
    MetricSpec("analogy_oov_ratio", "Share of analogy questions with an OOV word", "lower",
               r"\#\mathrm{OOV\ questions} / \#\mathrm{questions}", REF_OOV, range=(0.0, 1.0)),
)
#: the old name of :data:`SPECS` (metric names; ``METRICS[name]`` is now a MetricSpec)
METRICS = SPECS


def _undefined(what: str, reason: str) -> str:
    """Warn that ``what`` is undefined because of ``reason`` (:class:`UndefinedMetricWarning`); return the reason."""
    warnings.warn(f"{what} undefined: {reason}", UndefinedMetricWarning, stacklevel=3)
    return reason


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


# ---------------------------------------------------------------------------------------------
# Vocabulary (gensim's restrict_vocab / case_insensitive rules)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Vocabulary:
    """The ids of the first ``size`` rows as words.

    ``canonical[i]`` is the row that provides the vector for row ``i``'s (folded) word: the
    first row with that word. With ``case_insensitive`` the words are ``str.upper()``-ed.
    """

    size: int
    case_insensitive: bool
    index: dict            # folded word -> canonical row
    canonical: np.ndarray  # (size,) int64

    @classmethod
    def build(cls, ids, restrict_vocab: int | None = None, case_insensitive: bool = True) -> "Vocabulary":
        ids = list(ids)
        size = len(ids) if restrict_vocab is None else max(0, min(int(restrict_vocab), len(ids)))
        keys = [str(k).upper() if case_insensitive else str(k) for k in ids[:size]]
        index: dict = {}
        for i, k in enumerate(keys):
            index.setdefault(k, i)
        canonical = np.fromiter((index[k] for k in keys), dtype=np.int64, count=size)
        return cls(size, case_insensitive, index, canonical)

    def lookup(self, words) -> np.ndarray:
        """Canonical row of each word, ``-1`` when it is not in the vocabulary."""
        fold = str.upper if self.case_insensitive else str
        return np.fromiter((self.index.get(fold(str(w)), -1) for w in np.ravel(words)), dtype=np.int64,
                           count=np.size(words)).reshape(np.shape(words))

    def variants(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All rows sharing a folded word with ``rows`` (q, k): ``(question index, row)`` arrays."""
        rows = np.asarray(rows)
        order = np.argsort(self.canonical, kind="stable")
        counts = np.bincount(self.canonical, minlength=self.size)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        c = counts[rows].ravel()
        q = np.repeat(np.arange(rows.size) // rows.shape[1], c)
        offset = np.arange(c.sum()) - np.repeat(np.cumsum(c) - c, c)
        return q, order[np.repeat(starts[rows].ravel(), c) + offset]


# ---------------------------------------------------------------------------------------------
# Word similarity
# ---------------------------------------------------------------------------------------------

def _pearson_stat(x, y, axis=-1):
    x = x - x.mean(axis=axis, keepdims=True)
    y = y - y.mean(axis=axis, keepdims=True)
    return (x * y).sum(axis) / np.sqrt((x * x).sum(axis) * (y * y).sum(axis))


def _spearman_stat(x, y, axis=-1):
    return _pearson_stat(sstats.rankdata(x, axis=axis), sstats.rankdata(y, axis=axis), axis)


@dataclass(frozen=True)
class WordPairResult:
    """Correlation of cosine similarity with human scores on one word-pair file."""

    path: str
    table: pd.DataFrame   # word1, word2, human, cosine (NaN if OOV), in_vocab, line
    n_pairs: int
    n_oov: int
    n_used: int           # pairs entering the correlation
    spearman: float
    pearson: float
    spearman_ci: tuple
    pearson_ci: tuple
    ci_method: str
    dummy4unknown: bool
    undefined: str = ""   # why the correlations are NaN (shown as their note), when they are
    ci_note: str = ""     # why their bootstrap intervals are missing, when they are


def _correlation_undefined(human: np.ndarray, model: np.ndarray, name: str, dummy4unknown: bool) -> str:
    """Why no correlation can be computed on these pairs ("" when it can)."""
    pairs = _plural(len(human), "pair") + ("" if dummy4unknown else " with both words in the vocabulary")
    if len(human) < MIN_PAIRS:
        return f"{name} has {pairs}; a correlation needs at least {MIN_PAIRS}"
    if np.ptp(human) == 0:
        return f"the human scores of the {pairs} in {name} are all equal ({human[0]:g}): there is no ordering"
    if np.ptp(model) == 0:
        return (f"the cosine similarity is the same ({model[0]:.4g}) for all {pairs} in {name} (identical or "
                "collinear vectors): there is no ordering")
    return ""


def _symmetric_cosines(X, r1: np.ndarray, r2: np.ndarray, device) -> np.ndarray:
    """:func:`~embeval_report.kernels.pair_cosines` of the row pairs, each unordered pair computed once (in the
    order of its first occurrence) and copied to its repeats and reversals.

    The kernel divides the float64 dot product by one norm and then the other, so ``cos(a, b)`` and ``cos(b, a)``
    can differ in their last bit. WordSim-353 holds "bank money" and "money bank": gensim's float32 cosines and a
    float64 reference tie them, and a broken tie moves Spearman's ρ (by 4·10⁻⁵ on a 50-d word2vec of the Lee
    corpus). A pair seen once keeps the kernel's value bit for bit."""
    lo, hi = np.minimum(r1, r2), np.maximum(r1, r2)
    _, first, inverse = np.unique(lo * (int(max(hi.max(), 0)) + 1) + hi, return_index=True, return_inverse=True)
    return pair_cosines(X, r1[first], r2[first], device=device)[inverse.ravel()]


def word_pair_correlation(X, ids, pairs, *, vocab: Vocabulary | None = None, restrict_vocab: int | None = None,
                          case_insensitive: bool = True, dummy4unknown: bool = False, n_boot: int = 1000,
                          level: float = DEFAULT_LEVEL, seed: int = 0, device="auto") -> WordPairResult:
    r"""Spearman and Pearson correlation of :math:`\cos(w_1, w_2)` with human scores.

    ``pairs`` is an :class:`~embeval_report.io.words.WordPairFile` (``read_word_pairs``). Pairs with an OOV word
    are dropped (or scored 0 with ``dummy4unknown``). CIs: paired bootstrap over the pairs that enter the correlation
    (:func:`embeval_report.stats.bootstrap_ci`, BCa; percentile above :data:`BCA_MAX_PAIRS`).
    Higher is better. Equal to gensim's ``evaluate_word_pairs`` (see the module docstring).
    Fewer than :data:`MIN_PAIRS` usable pairs or a constant side: NaN correlations, an
    :class:`UndefinedMetricWarning` and the reason in ``undefined``.
    """
    X = as_numpy(X)
    vocab = vocab or Vocabulary.build(ids, restrict_vocab, case_insensitive)
    r1, r2 = vocab.lookup(pairs.word1), vocab.lookup(pairs.word2)
    ok = (r1 >= 0) & (r2 >= 0)
    cos = np.full(len(pairs), np.nan)
    if ok.any():
        cos[ok] = _symmetric_cosines(X, r1[ok], r2[ok], device)
    used = np.ones(len(pairs), bool) if dummy4unknown else ok
    model = np.where(ok, cos, 0.0)[used]
    human = pairs.score[used]
    rho = r = math.nan
    rho_ci = r_ci = (None, None)
    method = ci_note = ""
    why = _correlation_undefined(human, model, Path(pairs.path).name, dummy4unknown)
    if why:
        _undefined("word-pair correlation", why)
    else:
        rho = float(sstats.spearmanr(human, model).statistic)
        r = float(sstats.pearsonr(human, model).statistic)
        if n_boot:
            kind = "BCa" if len(human) <= BCA_MAX_PAIRS else "percentile"
            rho_ci = bootstrap_ci(_spearman_stat, human, model, paired=True, n_boot=n_boot, seed=seed,
                                  level=level, method=kind)
            r_ci = bootstrap_ci(_pearson_stat, human, model, paired=True, n_boot=n_boot, seed=seed,
                                level=level, method=kind)
            method = (f"{level:.0%} {kind} bootstrap, {n_boot} paired resamples of the {len(human):,} "
                      "pairs in the correlation")
            if not all(np.isfinite(x) for x in (*rho_ci, *r_ci)):
                ci_note = _undefined("word-pair correlation interval", (
                    f"too many bootstrap resamples of the {_plural(len(human), 'pair')} in "
                    f"{Path(pairs.path).name} have a constant side"))
    table = pd.DataFrame({"word1": pairs.word1, "word2": pairs.word2, "human": pairs.score, "cosine": cos,
                          "in_vocab": ok, "line": pairs.line})
    return WordPairResult(pairs.path, table, len(pairs), int((~ok).sum()), int(used.sum()), rho, r,
                          tuple(rho_ci), tuple(r_ci), method, dummy4unknown, why, ci_note)


# ---------------------------------------------------------------------------------------------
# Analogies
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AnalogyResult:
    """Analogy accuracy on one analogy file, overall and per section."""

    path: str
    n_questions: int
    n_oov: int
    n_evaluated: int        # questions in the denominator (all with dummy4unknown)
    correct_3cosadd: int
    correct_3cosmul: int
    accuracy_3cosadd: float
    accuracy_3cosmul: float
    ci_3cosadd: tuple
    ci_3cosmul: tuple
    sections: pd.DataFrame  # one row per section (see section_table)
    questions: pd.DataFrame  # a, b, c, d, section, in_vocab, predicted_3cosadd, predicted_3cosmul, correct_*
    n_candidates: int
    dummy4unknown: bool
    ci_method: str
    label_match_3cosadd: float | None = None  # share of evaluated questions whose prediction has d's label
    label_match_3cosmul: float | None = None
    undefined: str = ""     # why the accuracies are NaN, when they are


def analogy_accuracy(X, ids, analogies, *, vocab: Vocabulary | None = None, restrict_vocab: int | None = None,
                     case_insensitive: bool = True, dummy4unknown: bool = False, eps: float = COSMUL_EPS,
                     labels=None, level: float = DEFAULT_LEVEL, device="auto") -> AnalogyResult:
    r"""3CosAdd and 3CosMul accuracy on analogy questions, with Wilson intervals.

    ``analogies`` is an :class:`~embeval_report.io.words.AnalogyFile` (``read_analogies``). A question counts
    when all four words are in the vocabulary (the first ``restrict_vocab`` ids); otherwise it is skipped, or
    counted wrong with ``dummy4unknown``. Candidates: the whole vocabulary minus the three question words and
    their case variants. Higher is better; chance is about 1 / (|V| − 3). Equal to gensim's
    ``evaluate_word_analogies`` (3CosAdd; see the module docstring). Without an evaluated
    question the accuracies are NaN, with an :class:`UndefinedMetricWarning` and the reason in
    ``undefined``.

    ``labels`` (optional, one per id, e.g. a category) adds the share of in-vocabulary questions
    whose predicted id carries the label of d: a coarser "near miss" view for ids that are items.
    """
    qa = analogies
    X = as_numpy(X)
    ids = np.asarray(ids, dtype=object)
    vocab = vocab or Vocabulary.build(ids, restrict_vocab, case_insensitive)
    rows = vocab.lookup(qa.questions)
    ok = (rows >= 0).all(1)
    pred_add = np.full(len(qa), -1)
    pred_mul = np.full(len(qa), -1)
    if ok.any():
        abc = rows[ok, :3]
        pred_add[ok], pred_mul[ok] = solve_analogies(X, abc, n_candidates=vocab.size, exclude=vocab.variants(abc),
                                                     eps=eps, device=device)
    has_add, has_mul = ok & (pred_add >= 0), ok & (pred_mul >= 0)  # a prediction exists
    target = np.where(ok, rows[:, 3], -2)
    hit_add = has_add & (vocab.canonical[np.maximum(pred_add, 0)] == target) if vocab.size else ok & False
    hit_mul = has_mul & (vocab.canonical[np.maximum(pred_mul, 0)] == target) if vocab.size else ok & False
    counted = np.ones(len(qa), bool) if dummy4unknown else ok
    questions = pd.DataFrame({
        "a": qa.questions[:, 0], "b": qa.questions[:, 1], "c": qa.questions[:, 2], "d": qa.questions[:, 3],
        "section": qa.section, "in_vocab": ok,
        "predicted_3cosadd": np.where(has_add, ids[np.maximum(pred_add, 0)], None),
        "predicted_3cosmul": np.where(has_mul, ids[np.maximum(pred_mul, 0)], None),
        "correct_3cosadd": hit_add, "correct_3cosmul": hit_mul, "line": qa.line})
    match = {}
    if labels is not None:
        lab = pd.Series(np.asarray(labels, dtype=object))
        d_lab = lab.iloc[np.maximum(rows[:, 3], 0)].to_numpy()
        for meth, pred, has in (("3cosadd", pred_add, has_add), ("3cosmul", pred_mul, has_mul)):
            p_lab = lab.iloc[np.maximum(pred, 0)].to_numpy()
            questions[f"label_{meth}"] = np.where(has, p_lab, None)
            same = has & pd.notna(d_lab) & (p_lab == d_lab)
            match[meth] = float(same[ok].mean()) if ok.any() else None
        questions["label_d"] = np.where(ok, d_lab, None)
    sections = section_table(questions, qa.sections, counted, level)
    n_eval = int(counted.sum())
    why = "" if n_eval else _undefined(
        "analogy accuracy", f"none of the {_plural(len(qa), 'question')} in {Path(qa.path).name} has all four "
        f"words in the vocabulary ({_plural(vocab.size, 'id')})")
    acc = lambda k: k / n_eval if n_eval else math.nan  # noqa: E731
    ca, cm = int(hit_add.sum()), int(hit_mul.sum())
    return AnalogyResult(
        qa.path, len(qa), int((~ok).sum()), n_eval, ca, cm, acc(ca), acc(cm), wilson_ci(ca, n_eval, level),
        wilson_ci(cm, n_eval, level), sections, questions, vocab.size, dummy4unknown,
        f"{level:.0%} Wilson score interval over the {n_eval:,} evaluated questions" if n_eval else "",
        match.get("3cosadd"), match.get("3cosmul"), why)


def section_table(questions: pd.DataFrame, sections, counted: np.ndarray, level: float = DEFAULT_LEVEL
                  ) -> pd.DataFrame:
    """Per-section counts, accuracies and Wilson intervals (file order)."""
    out = []
    for name in sections:
        sel = (questions["section"] == name).to_numpy()
        n = int((sel & counted).sum())
        row = dict(section=name, questions=int(sel.sum()), oov=int((sel & ~questions["in_vocab"]).sum()),
                   evaluated=n)
        for meth in ("3cosadd", "3cosmul"):
            k = int(questions.loc[sel, f"correct_{meth}"].sum())
            lo, hi = wilson_ci(k, n, level)
            row.update({f"correct_{meth}": k, f"accuracy_{meth}": k / n if n else math.nan,
                        f"ci_low_{meth}": lo, f"ci_high_{meth}": hi})
        out.append(row)
    return pd.DataFrame(out)


# ---------------------------------------------------------------------------------------------
# Per unit: word pairs and analogy questions
# ---------------------------------------------------------------------------------------------

#: the unit kinds of :func:`semantic_units`
PAIR, QUESTION = "word pair", "analogy question"


def semantic_units(pairs: WordPairResult | None, analogies: AnalogyResult | None) -> pd.DataFrame:
    """One row per word pair and per analogy question (file order): ``unit`` (``pair <line>: w1 w2``,
    ``question <line>: a b c d``), ``kind``, and per pair ``human`` and ``cosine`` (the value entering the
    correlation: NaN for a pair left out, 0 for one kept by ``dummy4unknown``), per question ``analogy_accuracy``
    and ``analogy_accuracy_3cosmul`` (1 correct, 0 wrong, NaN when not counted). The correlations are whole-table
    functions of it (:func:`units_spearman`, :func:`units_pearson`), the accuracies the means of their columns."""
    frames = []
    if pairs is not None:
        t = pairs.table
        ok = t["in_vocab"].to_numpy(bool)
        model = np.where(ok, t["cosine"].to_numpy(float), 0.0 if pairs.dummy4unknown else math.nan)
        frames.append(pd.DataFrame({
            "unit": [f"pair {n}: {a} {b}" for n, a, b in zip(t["line"], t["word1"], t["word2"])], "kind": PAIR,
            "human": t["human"].to_numpy(float), "cosine": model}))
    if analogies is not None:
        q = analogies.questions
        counted = q["in_vocab"].to_numpy(bool) | analogies.dummy4unknown
        frames.append(pd.DataFrame({
            "unit": [f"question {n}: {a} {b} {c} {d}" for n, a, b, c, d in zip(q["line"], q["a"], q["b"], q["c"],
                                                                                 q["d"])], "kind": QUESTION,
            **{f"analogy_accuracy{s}": np.where(counted, q[f"correct_{m}"].to_numpy(float), math.nan)
               for s, m in (("", "3cosadd"), ("_3cosmul", "3cosmul"))}}))
    columns = ["unit", "kind", "human", "cosine", "analogy_accuracy", "analogy_accuracy_3cosmul"]
    return pd.concat(frames, ignore_index=True).reindex(columns=columns) if frames else pd.DataFrame(columns=columns)


def _pair_values(units: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(human, cosine) of the word pairs of a unit table that enter the correlation (a table read back from a
    file holds blanks where a column does not apply)."""
    human, cos = (pd.to_numeric(units[c], errors="coerce").to_numpy(float) for c in ("human", "cosine"))
    keep = (units["kind"] == PAIR).to_numpy() & np.isfinite(cos)
    return human[keep], cos[keep]


def _units_correlation(units: pd.DataFrame, correlation) -> float:
    human, model = _pair_values(units)
    if len(human) < MIN_PAIRS or np.ptp(human) == 0 or np.ptp(model) == 0:
        return math.nan
    return float(correlation(human, model).statistic)


def _weighted_correlation(units: pd.DataFrame, W: np.ndarray, correlation) -> np.ndarray:
    human, cos = (pd.to_numeric(units[c], errors="coerce").to_numpy(float) for c in ("human", "cosine"))
    keep = (units["kind"] == PAIR).to_numpy() & np.isfinite(cos)
    W = np.asarray(W, float)[:, keep]
    return np.where(W.sum(1) >= MIN_PAIRS, correlation(human[keep], cos[keep], W), math.nan)


def units_spearman(units: pd.DataFrame) -> float:
    """Spearman's ρ of the word pairs of :func:`semantic_units` (``word_pairs_spearman``, bit for bit; NaN where
    :func:`word_pair_correlation` finds it undefined)."""
    return _units_correlation(units, sstats.spearmanr)


def units_pearson(units: pd.DataFrame) -> float:
    """Pearson's r of the word pairs of :func:`semantic_units` (``word_pairs_pearson``, see :func:`units_spearman`)."""
    return _units_correlation(units, sstats.pearsonr)


def units_spearman_weighted(units: pd.DataFrame, W: np.ndarray) -> np.ndarray:
    """:func:`units_spearman` under each row of unit weights ``W`` (the counts of bootstrap draws), all at once."""
    return _weighted_correlation(units, W, weighted_spearman)


def units_pearson_weighted(units: pd.DataFrame, W: np.ndarray) -> np.ndarray:
    """:func:`units_pearson` under each row of unit weights ``W``, all at once."""
    return _weighted_correlation(units, W, weighted_pearson)


# ---------------------------------------------------------------------------------------------
# Both benchmarks, as metric records
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SemanticResult:
    """Everything the semantic-benchmarks chapter shows."""

    values: dict
    metrics: dict
    pairs: WordPairResult | None
    analogies: AnalogyResult | None
    n_vocab: int
    case_insensitive: bool
    info: dict = field(default_factory=dict)


def measure_semantics(X, ids, *, word_pairs=None, analogies=None, restrict_vocab: int | None = None,
                      case_insensitive: bool = True, dummy4unknown: bool = False, eps: float = COSMUL_EPS,
                      labels=None, n_boot: int = 1000, level: float = DEFAULT_LEVEL, seed: int = 0, device="auto"
                      ) -> SemanticResult:
    """Word-pair correlations and analogy accuracies for whichever files are given.

    Metrics (direction): ``word_pairs_spearman``, ``word_pairs_pearson`` (higher; paired
    bootstrap CI), ``word_pairs_oov``, ``word_pairs_oov_ratio`` (lower; exact counts),
    ``analogy_accuracy`` (3CosAdd) and ``analogy_accuracy_3cosmul`` (higher; Wilson CI),
    ``analogy_oov``, ``analogy_oov_ratio`` (lower). No seed gives threshold bands, so there is
    no verdict. Specs in :data:`SPECS`. ``labels`` (one per id, optional): see
    :func:`analogy_accuracy`. An undefined value is NaN in ``values`` and ``None`` with the reason
    (``note``) in ``metrics``.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from embeval_report.io.words import read_analogies
    >>> X = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1], [-1, 0, 0]], float)
    >>> ids = ["man", "woman", "king", "queen", "other"]
    >>> f = os.path.join(tempfile.mkdtemp(), "q.txt")
    >>> _ = open(f, "w").write(": royal\\nman woman king queen\\n")
    >>> measure_semantics(X, ids, analogies=read_analogies(f), device="cpu").values["analogy_accuracy"]
    1.0
    """
    if word_pairs is None and analogies is None:
        raise ValueError("measure_semantics needs word_pairs and/or analogies")
    vocab = Vocabulary.build(ids, restrict_vocab, case_insensitive)
    pr = ar = None
    values, cis, methods, notes = {}, {}, {}, {}
    if word_pairs is not None:
        pr = word_pair_correlation(X, ids, word_pairs, vocab=vocab, dummy4unknown=dummy4unknown, n_boot=n_boot,
                                   level=level, seed=seed, device=device)
        values.update(word_pairs_spearman=pr.spearman, word_pairs_pearson=pr.pearson,
                      word_pairs_oov=pr.n_oov, word_pairs_oov_ratio=pr.n_oov / pr.n_pairs)
        cis.update(word_pairs_spearman=pr.spearman_ci, word_pairs_pearson=pr.pearson_ci)
        methods.update(word_pairs_spearman=pr.ci_method, word_pairs_pearson=pr.ci_method)
        notes.update(word_pairs_spearman=pr.undefined or pr.ci_note, word_pairs_pearson=pr.undefined or pr.ci_note)
    if analogies is not None:
        ar = analogy_accuracy(X, ids, analogies, vocab=vocab, dummy4unknown=dummy4unknown, eps=eps, labels=labels,
                              level=level, device=device)
        values.update(analogy_accuracy=ar.accuracy_3cosadd, analogy_accuracy_3cosmul=ar.accuracy_3cosmul,
                      analogy_oov=ar.n_oov, analogy_oov_ratio=ar.n_oov / ar.n_questions)
        cis.update(analogy_accuracy=ar.ci_3cosadd, analogy_accuracy_3cosmul=ar.ci_3cosmul)
        methods.update(analogy_accuracy=ar.ci_method, analogy_accuracy_3cosmul=ar.ci_method)
        notes.update(analogy_accuracy=ar.undefined, analogy_accuracy_3cosmul=ar.undefined)
    metrics = {name: SPECS[name].record(None if isinstance(v, float) and not math.isfinite(v) else v,
                                        cis.get(name), ci_method=methods.get(name, ""),
                                        note=notes.get(name) or ("exact count" if "oov" in name else ""))
               for name, v in values.items()}
    info = dict(vocabulary=vocab.size, restrict_vocab=restrict_vocab, case_insensitive=case_insensitive,
                dummy4unknown=dummy4unknown, cosmul_eps=eps, level=level, device=str(resolve_device(device)))
    if pr is not None:
        info.update(word_pairs_file=Path(pr.path).name, word_pairs_total=pr.n_pairs, word_pairs_used=pr.n_used)
    if ar is not None:
        info.update(analogy_file=Path(ar.path).name, analogy_questions=ar.n_questions,
                    analogy_questions_evaluated=ar.n_evaluated, analogy_label_match_3cosadd=ar.label_match_3cosadd,
                    analogy_label_match_3cosmul=ar.label_match_3cosmul,
                    analogy_sections=ar.sections.replace({np.nan: None}).to_dict(orient="records"))
    return SemanticResult(values, metrics, pr, ar, vocab.size, case_insensitive, info)
