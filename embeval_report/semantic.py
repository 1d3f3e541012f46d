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
  (gensim skips such case variants among its top five); ties go to the lowest row index.
  Candidates are scored exactly in float32 (as gensim) by chunked matrix products in torch.
* Correlations: SciPy ``spearmanr`` (average ranks for ties) and ``pearsonr``. A section
  without evaluated questions has no accuracy (gensim prints 0.0).

File formats
------------
* word pairs: one pair per line, ``word1 word2 score`` separated by tabs (when the line has a
  tab) or whitespace; ``#`` comment lines and blank lines are skipped, and a first line whose
  score is not a number is taken as a header. Or a ``.csv`` with a header ``word1,word2,score``.
* analogies: ``: section`` lines start a section; other lines hold 4 whitespace-separated words
  (questions before the first header go to a section named ``all``). Or a ``.csv`` with a header
  ``a,b,c,d`` and an optional ``section`` column.

Bad lines raise :class:`~embeval_report.errors.InputError` naming the file, the line and what
was expected (gensim skips them silently).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from scipy import stats as sstats
from statsmodels.stats.proportion import proportion_confint

from .errors import InputError
from .kernels import CHUNK_BYTES, as_numpy, chunk_rows, pair_cosines, resolve_device, unit_rows
from .plotting import PALETTE, WIDTH
from .progress import progress
from .results import Metric
from .stats import DEFAULT_LEVEL, bootstrap_ci

#: Levy & Goldberg (2014) footnote: ε keeps the 3CosMul denominator away from zero
COSMUL_EPS = 1e-3
#: above this many pairs the correlation CIs use the percentile bootstrap (BCa's jackknife is O(n²))
BCA_MAX_PAIRS = 5000
#: section name for analogy questions that come before any ``: section`` line
DEFAULT_SECTION = "all"

REF_PAIRS = "seed 001 §21.1; Finkelstein et al. 2002, Hill et al. 2015 (as gensim evaluate_word_pairs)"
REF_ANALOGY = "seed 001 §21.1; Mikolov et al. 2013, 3CosAdd (as gensim evaluate_word_analogies)"
REF_COSMUL = "seed 001 §21.1; Levy & Goldberg 2014, eq. 4, ε = 10⁻³"
REF_OOV = "seed 001 §21.1; gensim's convention: pairs or questions with an unknown word are left out"

#: name -> (label, direction, LaTeX formula, reference)
METRICS = {
    "word_pairs_spearman": ("Word-pair Spearman ρ", "higher",
                            r"\rho_s\big(\text{human}_k,\ \cos(w_{1k}, w_{2k})\big)", REF_PAIRS),
    "word_pairs_pearson": ("Word-pair Pearson r", "higher",
                           r"r\big(\text{human}_k,\ \cos(w_{1k}, w_{2k})\big)", REF_PAIRS),
    "word_pairs_oov": ("Word pairs with an OOV word", "lower",
                       r"\#\{k : w_{1k} \notin V \lor w_{2k} \notin V\}", REF_OOV),
    "word_pairs_oov_ratio": ("Share of word pairs with an OOV word", "lower",
                             r"\#\mathrm{OOV\ pairs} / \#\mathrm{pairs}", REF_OOV),
    "analogy_accuracy": ("Analogy accuracy (3CosAdd)", "higher",
                         r"\frac{1}{|Q|}\sum_{q \in Q} \big[\arg\max_{x \in V \setminus \{a,b,c\}} "
                         r"\cos(x,\ \hat b - \hat a + \hat c) = d\big]", REF_ANALOGY),
    "analogy_accuracy_3cosmul": ("Analogy accuracy (3CosMul)", "higher",
                                 r"\frac{1}{|Q|}\sum_{q \in Q} \big[\arg\max_{x \in V \setminus \{a,b,c\}} "
                                 r"\frac{s(x,b)\,s(x,c)}{s(x,a)+\varepsilon} = d\big],\ s = \frac{1+\cos}{2}",
                                 REF_COSMUL),
    "analogy_oov": ("Analogy questions with an OOV word", "lower",
                    r"\#\{q : \{a,b,c,d\} \not\subseteq V\}", REF_OOV),
    "analogy_oov_ratio": ("Share of analogy questions with an OOV word", "lower",
                          r"\#\mathrm{OOV\ questions} / \#\mathrm{questions}", REF_OOV),
}


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WordPairFile:
    """Word pairs with human similarity scores, as read from a file."""

    path: str
    word1: np.ndarray   # object array of str
    word2: np.ndarray
    score: np.ndarray   # float64
    line: np.ndarray    # 1-based line number of each pair

    def __len__(self) -> int:
        return len(self.score)


@dataclass(frozen=True)
class AnalogyFile:
    """Analogy questions a : b :: c : d, grouped in sections, as read from a file."""

    path: str
    questions: np.ndarray  # (q, 4) object array of str
    section: np.ndarray    # (q,) section name of each question
    sections: tuple        # section names in file order (also those without questions)
    line: np.ndarray       # 1-based line number of each question

    def __len__(self) -> int:
        return len(self.questions)


def _text_lines(path) -> tuple[Path, list[str]]:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: file not found")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{p.name}: expected UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return p, [ln.rstrip("\r") for ln in text.split("\n")]


def _is_content(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith("#")


def _csv_row(line: str) -> list[str]:
    return [f.strip() for f in next(csv.reader([line]))]


def _csv_header(p: Path, lines: list[str], required: tuple[str, ...], optional: tuple[str, ...] = ()
                ) -> tuple[int, dict[str, int], int]:
    """Index of the header line, column positions (lower-cased names) and the header's width."""
    for i, line in enumerate(lines):
        if _is_content(line):
            header = [h.lower() for h in _csv_row(line)]
            missing = [c for c in required if c not in header]
            if missing:
                raise InputError(f"{p.name}, line {i + 1}: expected a CSV header with columns "
                                 f"{', '.join(required)}; found {', '.join(header) or 'nothing'}")
            return i, {c: header.index(c) for c in required + optional if c in header}, len(header)
    raise InputError(f"{p.name}: empty file; expected a CSV header with columns {', '.join(required)}")


def _looks_like_csv(p: Path, lines: list[str], required: tuple[str, ...]) -> bool:
    if p.suffix.lower() == ".csv":
        return True
    first = next((ln for ln in lines if _is_content(ln)), "")
    return "," in first and set(required) <= {h.lower() for h in _csv_row(first)}


def _parse_score(text: str, p: Path, line_no: int) -> float:
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"{p.name}, line {line_no}: expected a number as the score (third field), "
                         f"found {text!r}") from None
    if not math.isfinite(v):
        raise InputError(f"{p.name}, line {line_no}: expected a finite score, found {text!r}")
    return v


def _check_words(words: list[str], p: Path, line_no: int, names: str) -> None:
    if any(not w for w in words):
        raise InputError(f"{p.name}, line {line_no}: empty word; expected {names}")


def read_word_pairs(path) -> WordPairFile:
    """Read a word-pair file (gensim's tab/whitespace format, or CSV with a header).

    Returns the pairs in file order; raises :class:`InputError` for malformed lines or a file
    without pairs.
    """
    p, lines = _text_lines(path)
    w1, w2, sc, ln = [], [], [], []
    cols = ("word1", "word2", "score")
    if _looks_like_csv(p, lines, cols):
        h, pos, width = _csv_header(p, lines, cols)
        for i, row in _csv_rows(p, lines, h, width):
            a, b = row[pos["word1"]], row[pos["word2"]]
            _check_words([a, b], p, i + 1, "word1 and word2")
            w1.append(a), w2.append(b), sc.append(_parse_score(row[pos["score"]], p, i + 1)), ln.append(i + 1)
    else:
        first = True
        for i, line in enumerate(lines):
            if not _is_content(line):
                continue
            row = [f.strip() for f in line.split("\t")] if "\t" in line else line.split()
            if len(row) != 3:
                sep = "tab" if "\t" in line else "whitespace"
                raise InputError(f"{p.name}, line {i + 1}: expected 3 {sep}-separated fields "
                                 f"(word1, word2, score), found {len(row)}")
            try:
                score = _parse_score(row[2], p, i + 1)
            except InputError:
                if first:  # a header line such as "word1  word2  similarity"
                    first = False
                    continue
                raise
            first = False
            _check_words(row[:2], p, i + 1, "word1 and word2")
            w1.append(row[0]), w2.append(row[1]), sc.append(score), ln.append(i + 1)
    if not sc:
        raise InputError(f"{p.name}: no word pairs found; expected lines 'word1<TAB>word2<TAB>score' "
                         "or a CSV with a header word1,word2,score")
    return WordPairFile(str(p), np.array(w1, dtype=object), np.array(w2, dtype=object),
                        np.array(sc, dtype=float), np.array(ln))


def _csv_rows(p, lines, header: int, width: int):
    """``(line index, fields)`` of each content line after the CSV header, checking the field count."""
    for i in range(header + 1, len(lines)):
        if not _is_content(lines[i]):
            continue
        row = _csv_row(lines[i])
        if len(row) != width:
            raise InputError(f"{p.name}, line {i + 1}: expected {width} comma-separated fields "
                             f"(as in the header), found {len(row)}")
        yield i, row


def read_analogies(path) -> AnalogyFile:
    """Read an analogy file (gensim's ``: section`` format, or CSV with a header a,b,c,d[,section])."""
    p, lines = _text_lines(path)
    qs, sec, ln, sections = [], [], [], []
    cols = ("a", "b", "c", "d")
    if _looks_like_csv(p, lines, cols):
        h, pos, width = _csv_header(p, lines, cols, ("section",))
        for i, row in _csv_rows(p, lines, h, width):
            words = [row[pos[c]] for c in cols]
            _check_words(words, p, i + 1, "four words a, b, c, d")
            name = row[pos["section"]] if "section" in pos and row[pos["section"]] else DEFAULT_SECTION
            if name not in sections:
                sections.append(name)
            qs.append(words), sec.append(name), ln.append(i + 1)
    else:
        current = None
        for i, line in enumerate(lines):
            if not _is_content(line):
                continue
            if line.startswith(":"):
                current = line.lstrip(": ").strip()
                if not current:
                    raise InputError(f"{p.name}, line {i + 1}: expected a section name after ':'")
                if current not in sections:
                    sections.append(current)
                continue
            words = line.split()
            if len(words) != 4:
                raise InputError(f"{p.name}, line {i + 1}: expected 4 whitespace-separated words "
                                 f"(a b c d) or a ': section' line, found {len(words)} field(s)")
            if current is None:
                current = DEFAULT_SECTION
                sections.append(current)
            qs.append(words), sec.append(current), ln.append(i + 1)
    if not qs:
        raise InputError(f"{p.name}: no analogy questions found; expected lines 'a b c d' "
                         "(with ': section' headers) or a CSV with a header a,b,c,d")
    return AnalogyFile(str(p), np.array(qs, dtype=object).reshape(-1, 4), np.array(sec, dtype=object),
                       tuple(sections), np.array(ln))


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


def word_pair_correlation(X, ids, pairs, *, vocab: Vocabulary | None = None, restrict_vocab: int | None = None,
                          case_insensitive: bool = True, dummy4unknown: bool = False, n_boot: int = 1000,
                          level: float = DEFAULT_LEVEL, seed: int = 0, device="auto") -> WordPairResult:
    r"""Spearman and Pearson correlation of :math:`\cos(w_1, w_2)` with human scores.

    ``pairs`` is a path or a :class:`WordPairFile`. Pairs with an OOV word are dropped (or scored
    0 with ``dummy4unknown``). CIs: paired bootstrap over the pairs that enter the correlation
    (:func:`embeval_report.stats.bootstrap_ci`, BCa; percentile above :data:`BCA_MAX_PAIRS`).
    Higher is better. Equal to gensim's ``evaluate_word_pairs`` (see the module docstring).
    """
    pairs = pairs if isinstance(pairs, WordPairFile) else read_word_pairs(pairs)
    X = as_numpy(X)
    vocab = vocab or Vocabulary.build(ids, restrict_vocab, case_insensitive)
    r1, r2 = vocab.lookup(pairs.word1), vocab.lookup(pairs.word2)
    ok = (r1 >= 0) & (r2 >= 0)
    cos = np.full(len(pairs), np.nan)
    if ok.any():
        cos[ok] = pair_cosines(X, r1[ok], r2[ok], device=device)
    used = np.ones(len(pairs), bool) if dummy4unknown else ok
    model = np.where(ok, cos, 0.0)[used]
    human = pairs.score[used]
    rho = r = math.nan
    rho_ci = r_ci = (None, None)
    method = ""
    if len(human) >= 3 and np.ptp(human) > 0 and np.ptp(model) > 0:
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
    table = pd.DataFrame({"word1": pairs.word1, "word2": pairs.word2, "human": pairs.score, "cosine": cos,
                          "in_vocab": ok, "line": pairs.line})
    return WordPairResult(pairs.path, table, len(pairs), int((~ok).sum()), int(used.sum()), rho, r,
                          tuple(rho_ci), tuple(r_ci), method, dummy4unknown)


# ---------------------------------------------------------------------------------------------
# Analogies
# ---------------------------------------------------------------------------------------------

def solve_analogies(X, abc, *, n_candidates: int | None = None, exclude: tuple | None = None,
                    eps: float = COSMUL_EPS, device="auto", desc: str | None = "analogies"
                    ) -> tuple[np.ndarray, np.ndarray]:
    r"""Exact 3CosAdd and 3CosMul predictions for analogy questions, chunked over questions.

    Parameters
    ----------
    X : array (n, d)
    abc : int array (q, 3)
        Rows of a, b, c for each question a : b :: c : ?.
    n_candidates : the first rows of ``X`` that may be predicted (default all)
    exclude : ``(question index, row)`` arrays of candidates to skip (default: each question's
        own a, b, c rows)
    eps : 3CosMul's ε (Levy & Goldberg 2014 use 10⁻³; gensim's ``most_similar_cosmul`` 10⁻⁶)

    Returns
    -------
    (pred_3cosadd, pred_3cosmul) : int64 arrays (q,) of predicted rows.

    On unit vectors, 3CosAdd is :math:`\arg\max_x x^\top(\hat b - \hat a + \hat c)` and 3CosMul
    :math:`\arg\max_x s_b s_c / (s_a + \varepsilon)` with :math:`s_y = (1 + x^\top \hat y)/2`.
    Scores are float32 matrix products on ``device``; ties go to the lowest row.
    """
    X = as_numpy(X)
    abc = np.asarray(abc, dtype=np.int64).reshape(-1, 3)
    q = len(abc)
    m = len(X) if n_candidates is None else int(n_candidates)
    dev = resolve_device(device)
    if exclude is None:
        exclude = (np.repeat(np.arange(q), 3), abc.ravel())
    eq, er = (np.asarray(e, dtype=np.int64) for e in exclude)
    order = np.argsort(eq, kind="stable")
    eq, er = eq[order], er[order]
    U = unit_rows(torch.as_tensor(np.ascontiguousarray(X[:m]), dtype=torch.float32, device=dev))
    Q = unit_rows(torch.as_tensor(np.ascontiguousarray(X[abc.ravel()]), dtype=torch.float32,
                                  device=dev)).reshape(q, 3, -1)
    add = np.empty(q, dtype=np.int64)
    mul = np.empty(q, dtype=np.int64)
    rows = chunk_rows(q, m * 4 * 5, CHUNK_BYTES)
    starts = range(0, q, rows)
    for s in progress(starts, desc=desc or "analogies", total=len(starts)) if desc else starts:
        a, b, c = Q[s:s + rows, 0], Q[s:s + rows, 1], Q[s:s + rows, 2]
        lo, hi = np.searchsorted(eq, [s, s + len(a)])
        mask_r = torch.as_tensor(eq[lo:hi] - s, device=dev)
        mask_c = torch.as_tensor(er[lo:hi], device=dev)
        scores = (b - a + c) @ U.T
        scores[mask_r, mask_c] = -torch.inf
        add[s:s + len(a)] = scores.argmax(1).cpu().numpy()
        del scores
        sa, sb, sc = ((1 + y @ U.T) / 2 for y in (a, b, c))
        scores = sb * sc / (sa + eps)
        scores[mask_r, mask_c] = -torch.inf
        mul[s:s + len(a)] = scores.argmax(1).cpu().numpy()
        del scores, sa, sb, sc
    return add, mul


def wilson_ci(correct: int, n: int, level: float = DEFAULT_LEVEL) -> tuple[float | None, float | None]:
    """Wilson score interval for a proportion (statsmodels ``proportion_confint``); ``None`` if n = 0."""
    if n <= 0:
        return None, None
    lo, hi = proportion_confint(correct, n, alpha=1 - level, method="wilson")
    # exact 0 / 1 at the ends (statsmodels leaves rounding residue such as 1e-17)
    return (0.0 if correct == 0 else float(lo)), (1.0 if correct == n else float(hi))


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


def analogy_accuracy(X, ids, analogies, *, vocab: Vocabulary | None = None, restrict_vocab: int | None = None,
                     case_insensitive: bool = True, dummy4unknown: bool = False, eps: float = COSMUL_EPS,
                     labels=None, level: float = DEFAULT_LEVEL, device="auto") -> AnalogyResult:
    r"""3CosAdd and 3CosMul accuracy on analogy questions, with Wilson intervals.

    ``analogies`` is a path or an :class:`AnalogyFile`. A question counts when all four words are
    in the vocabulary (the first ``restrict_vocab`` ids); otherwise it is skipped, or counted wrong
    with ``dummy4unknown``. Candidates: the whole vocabulary minus the three question words and
    their case variants. Higher is better; chance is about 1 / (|V| − 3). Equal to gensim's
    ``evaluate_word_analogies`` (3CosAdd; see the module docstring).

    ``labels`` (optional, one per id, e.g. a category) adds the share of in-vocabulary questions
    whose predicted id carries the label of d: a coarser "near miss" view for ids that are items.
    """
    qa = analogies if isinstance(analogies, AnalogyFile) else read_analogies(analogies)
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
    target = np.where(ok, rows[:, 3], -2)
    hit_add = ok & (vocab.canonical[np.maximum(pred_add, 0)] == target)
    hit_mul = ok & (vocab.canonical[np.maximum(pred_mul, 0)] == target)
    counted = np.ones(len(qa), bool) if dummy4unknown else ok
    questions = pd.DataFrame({
        "a": qa.questions[:, 0], "b": qa.questions[:, 1], "c": qa.questions[:, 2], "d": qa.questions[:, 3],
        "section": qa.section, "in_vocab": ok,
        "predicted_3cosadd": np.where(ok, ids[np.maximum(pred_add, 0)], None),
        "predicted_3cosmul": np.where(ok, ids[np.maximum(pred_mul, 0)], None),
        "correct_3cosadd": hit_add, "correct_3cosmul": hit_mul, "line": qa.line})
    match = {}
    if labels is not None:
        lab = pd.Series(np.asarray(labels, dtype=object))
        d_lab = lab.iloc[np.maximum(rows[:, 3], 0)].to_numpy()
        for meth, pred in (("3cosadd", pred_add), ("3cosmul", pred_mul)):
            p_lab = lab.iloc[np.maximum(pred, 0)].to_numpy()
            questions[f"label_{meth}"] = np.where(ok, p_lab, None)
            same = ok & pd.notna(d_lab) & (p_lab == d_lab)
            match[meth] = float(same[ok].mean()) if ok.any() else None
        questions["label_d"] = np.where(ok, d_lab, None)
    sections = section_table(questions, qa.sections, counted, level)
    n_eval = int(counted.sum())
    acc = lambda k: k / n_eval if n_eval else math.nan  # noqa: E731
    ca, cm = int(hit_add.sum()), int(hit_mul.sum())
    return AnalogyResult(
        qa.path, len(qa), int((~ok).sum()), n_eval, ca, cm, acc(ca), acc(cm), wilson_ci(ca, n_eval, level),
        wilson_ci(cm, n_eval, level), sections, questions, vocab.size, dummy4unknown,
        f"{level:.0%} Wilson score interval over the {n_eval:,} evaluated questions" if n_eval else "",
        match.get("3cosadd"), match.get("3cosmul"))


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
# The chapter's result
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
    no verdict. References in :data:`METRICS`. ``labels`` (one per id, optional): see
    :func:`analogy_accuracy`.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> X = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1], [-1, 0, 0]], float)
    >>> ids = ["man", "woman", "king", "queen", "other"]
    >>> f = os.path.join(tempfile.mkdtemp(), "q.txt")
    >>> _ = open(f, "w").write(": royal\\nman woman king queen\\n")
    >>> measure_semantics(X, ids, analogies=f, device="cpu").values["analogy_accuracy"]
    1.0
    """
    if word_pairs is None and analogies is None:
        raise ValueError("measure_semantics needs word_pairs and/or analogies")
    vocab = Vocabulary.build(ids, restrict_vocab, case_insensitive)
    pr = ar = None
    values, cis, methods = {}, {}, {}
    if word_pairs is not None:
        pr = word_pair_correlation(X, ids, word_pairs, vocab=vocab, dummy4unknown=dummy4unknown, n_boot=n_boot,
                                   level=level, seed=seed, device=device)
        values.update(word_pairs_spearman=pr.spearman, word_pairs_pearson=pr.pearson,
                      word_pairs_oov=pr.n_oov, word_pairs_oov_ratio=pr.n_oov / pr.n_pairs)
        cis.update(word_pairs_spearman=pr.spearman_ci, word_pairs_pearson=pr.pearson_ci)
        methods.update(word_pairs_spearman=pr.ci_method, word_pairs_pearson=pr.ci_method)
    if analogies is not None:
        ar = analogy_accuracy(X, ids, analogies, vocab=vocab, dummy4unknown=dummy4unknown, eps=eps, labels=labels,
                              level=level, device=device)
        values.update(analogy_accuracy=ar.accuracy_3cosadd, analogy_accuracy_3cosmul=ar.accuracy_3cosmul,
                      analogy_oov=ar.n_oov, analogy_oov_ratio=ar.n_oov / ar.n_questions)
        cis.update(analogy_accuracy=ar.ci_3cosadd, analogy_accuracy_3cosmul=ar.ci_3cosmul)
        methods.update(analogy_accuracy=ar.ci_method, analogy_accuracy_3cosmul=ar.ci_method)
    metrics = {}
    for name, v in values.items():
        label, direction, formula, ref = METRICS[name]
        lo, hi = cis.get(name, (None, None))
        metrics[name] = Metric(name=name, value=v, direction=direction, reference=ref, ci_low=lo, ci_high=hi,
                               verdict=None, label=label, formula=formula,
                               ci_method=methods.get(name) or ("exact count" if "oov" in name else ""))
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


# ---------------------------------------------------------------------------------------------
# Narrative
# ---------------------------------------------------------------------------------------------

def _ci(lo, hi, fmt: str) -> str:
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return ""
    return f" (95 % CI {format(lo, fmt)} to {format(hi, fmt)})"


def _strength(rho: float) -> str:
    a = abs(rho)
    word = ("negligible" if a < 0.1 else "weak" if a < 0.3 else "moderate" if a < 0.5 else "strong")
    return word + (" and negative" if rho < 0 and a >= 0.1 else "")


def coverage_warning(r: SemanticResult, minimum: float = 0.9) -> str | None:
    """Markdown caveat when less than ``minimum`` of the pairs or questions are in the vocabulary."""
    parts = []
    if r.pairs is not None and 1 - r.pairs.n_oov / r.pairs.n_pairs < minimum:
        parts.append(f"only {r.pairs.n_pairs - r.pairs.n_oov:,} of {r.pairs.n_pairs:,} word pairs "
                     f"({1 - r.pairs.n_oov / r.pairs.n_pairs:.0%})")
    if r.analogies is not None and 1 - r.analogies.n_oov / r.analogies.n_questions < minimum:
        a = r.analogies
        parts.append(f"only {a.n_questions - a.n_oov:,} of {a.n_questions:,} analogy questions "
                     f"({1 - a.n_oov / a.n_questions:.0%})")
    if not parts:
        return None
    return ("The vocabulary covers " + " and ".join(parts) + ". The scores are computed on the covered part "
            "only, which is usually the easier, more frequent part of a benchmark; they are not comparable "
            "with published numbers for the full benchmark, nor with another embedding set that covers a "
            "different part.")


def narrative(r: SemanticResult) -> str:
    """Markdown paragraphs that say what this set's semantic-benchmark numbers mean."""
    parts = []
    case = "ignoring case" if r.case_insensitive else "case-sensitively"
    if r.pairs is not None:
        p = r.pairs
        name = Path(p.path).name
        cover = 1 - p.n_oov / p.n_pairs
        if not np.isfinite(p.spearman):
            parts.append(f"**Word similarity.** None of the correlations could be computed: only {p.n_used} of the "
                         f"{p.n_pairs:,} pairs in `{name}` are usable (both words in the vocabulary, matched {case}), "
                         "or one side is constant.")
        else:
            gap = p.spearman - p.pearson
            shape = (" Pearson's r is clearly lower than Spearman's ρ: the cosine rises with the human score but "
                     "not linearly (typically a compressed cosine range or a few outlying pairs)." if gap > 0.1 else
                     " Pearson's r is clearly higher than Spearman's ρ: a few extreme pairs carry the linear "
                     "correlation more than the overall ordering does." if gap < -0.1 else "")
            parts.append(
                f"**Word similarity.** On the {p.n_used:,} pairs of `{name}` that enter the correlation "
                f"({cover:.0%} of its {p.n_pairs:,} pairs have both ids in the vocabulary, matched {case}), the "
                f"cosine similarity orders the pairs like the file's judgements with Spearman ρ = {p.spearman:.3f}"
                f"{_ci(*p.spearman_ci, '.3f')}, a {_strength(p.spearman)} agreement; Pearson r = {p.pearson:.3f}"
                f"{_ci(*p.pearson_ci, '.3f')}.{shape} The strength words follow the usual conventions for "
                "correlations; the seeds give no threshold for this benchmark, so there is no verdict.")
            if p.spearman_ci[0] is not None and p.spearman_ci[0] <= 0 <= p.spearman_ci[1]:
                parts.append("The interval for ρ includes 0: with this many pairs the data cannot tell the ordering "
                             "from chance.")
    if r.analogies is not None:
        a = r.analogies
        name = Path(a.path).name
        if a.n_evaluated == 0:
            parts.append(f"**Analogies.** None of the {a.n_questions:,} questions in `{name}` has all four words in "
                         f"the vocabulary (matched {case}), so no accuracy can be reported.")
        else:
            chance = 1 / max(a.n_candidates - 3, 1)
            sec = a.sections[a.sections["evaluated"] > 0]
            best = sec.sort_values("accuracy_3cosadd", ascending=False)
            spread = ""
            if len(sec) > 1:
                top, low = best.iloc[0], best.iloc[-1]
                spread = (f" Sections differ: from {top['accuracy_3cosadd']:.1%} on *{top['section']}* "
                          f"({int(top['evaluated'])} questions) down to {low['accuracy_3cosadd']:.1%} on "
                          f"*{low['section']}* ({int(low['evaluated'])}); small sections have wide intervals.")
            diff = a.accuracy_3cosmul - a.accuracy_3cosadd
            mul = ("3CosMul, which keeps one large similarity from dominating, does "
                   + (f"better ({a.accuracy_3cosmul:.1%}{_ci(*a.ci_3cosmul, '.1%')}), as Levy & Goldberg (2014) "
                      "found for most sets." if diff > 0.01 else
                      f"worse ({a.accuracy_3cosmul:.1%}{_ci(*a.ci_3cosmul, '.1%')})." if diff < -0.01 else
                      f"about the same ({a.accuracy_3cosmul:.1%})."))
            skipped = ("" if a.dummy4unknown else
                       f" The {a.n_oov:,} questions with a word outside the vocabulary are skipped, as gensim does."
                       if a.n_oov else "")
            near = ("" if a.label_match_3cosadd is None else
                    f" Counting any id with the label of d as a hit, 3CosAdd is right for "
                    f"{a.label_match_3cosadd:.1%} of the questions"
                    + (", so every miss is a near miss (an id of the right category, just not d)." if
                       a.label_match_3cosadd > 0.999 else
                       ": most misses are near misses, in the right category." if
                       a.label_match_3cosadd - a.accuracy_3cosadd > 0.5 * (1 - a.accuracy_3cosadd) else
                       ": many misses land outside the expected category."))
            parts.append(
                f"**Analogies.** The vector offset b − a + c lands exactly on d (3CosAdd, among all "
                f"{a.n_candidates:,} ids except a, b and c) for {a.correct_3cosadd:,} of {a.n_evaluated:,} "
                f"questions: accuracy {a.accuracy_3cosadd:.1%}{_ci(*a.ci_3cosadd, '.1%')}, against a chance "
                f"level of about {chance:.2g}. {mul}{near}{skipped}{spread}")
    parts.append("Published results for standard benchmarks (WordSim-353, SimLex-999, the Google analogy set) "
                 "depend on the vocabulary, its case handling, the share of the benchmark covered and whether "
                 "candidates are restricted to frequent words; compare with them only when the coverage is close "
                 "to complete and those conventions match (here: gensim's). For ids that are not words, these "
                 "files are in-house judgements and the numbers are best compared between versions of this set.")
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

def _ci_text(lo, hi) -> str:
    return "—" if lo is None or hi is None or not np.isfinite(lo) else f"{lo:.1%} – {hi:.1%}"


def section_summary(r: SemanticResult) -> pd.DataFrame:
    """Per-section analogy table for display (accuracies as percentages with Wilson CIs)."""
    t = r.analogies.sections
    pct = lambda x: "—" if not np.isfinite(x) else f"{x:.1%}"  # noqa: E731
    return pd.DataFrame({
        "section": t["section"], "questions": t["questions"], "OOV": t["oov"], "evaluated": t["evaluated"],
        "3CosAdd": [pct(x) for x in t["accuracy_3cosadd"]],
        "3CosAdd 95 % CI": [_ci_text(a, b) for a, b in zip(t["ci_low_3cosadd"], t["ci_high_3cosadd"])],
        "3CosMul": [pct(x) for x in t["accuracy_3cosmul"]],
        "3CosMul 95 % CI": [_ci_text(a, b) for a, b in zip(t["ci_low_3cosmul"], t["ci_high_3cosmul"])]})


def pair_disagreements(r: SemanticResult, k: int = 10) -> pd.DataFrame:
    """The ``k`` in-vocabulary pairs whose cosine rank is furthest from their human-score rank."""
    t = r.pairs.table[r.pairs.table["in_vocab"]].copy()
    if t.empty:
        return pd.DataFrame(columns=["word1", "word2", "human", "cosine", "rank gap"])
    t["rank gap"] = (sstats.rankdata(t["cosine"]) - sstats.rankdata(t["human"])) / len(t)
    t = t.reindex(t["rank gap"].abs().sort_values(ascending=False).index[:k])
    return t[["word1", "word2", "human", "cosine", "rank gap", "line"]].reset_index(drop=True)


def analogy_failures(r: SemanticResult, k: int = 10) -> pd.DataFrame:
    """Up to ``k`` evaluated questions that 3CosAdd gets wrong, with both methods' predictions
    (each id followed by its label when labels were given)."""
    q = r.analogies.questions
    wrong = q[q["in_vocab"] & ~q["correct_3cosadd"]]
    if len(wrong) > k:  # spread the examples over the sections
        wrong = wrong.groupby("section", sort=False, group_keys=False).head(max(1, k // q["section"].nunique()))[:k]
    labelled = "label_d" in wrong

    def show(col, lab):
        return [f"{x} ({y})" if labelled else str(x) for x, y in zip(wrong[col], wrong[lab] if labelled else wrong[col])]
    return pd.DataFrame({
        "section": wrong["section"].to_numpy(),
        "question a : b :: c": [f"{a} : {b} :: {c}" for a, b, c in zip(wrong["a"], wrong["b"], wrong["c"])],
        "expected d": show("d", "label_d"), "3CosAdd": show("predicted_3cosadd", "label_3cosadd"),
        "3CosMul": show("predicted_3cosmul", "label_3cosmul"), "line": wrong["line"].to_numpy()})


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

def similarity_scatter(r: SemanticResult) -> plt.Figure:
    """Human score against cosine similarity (left) and the same pairs as ranks (right)."""
    p = r.pairs
    t = p.table[p.table["in_vocab"]]
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 4.0))
    alpha = 0.7 if len(t) < 500 else 0.35
    a.scatter(t["human"], t["cosine"], s=14, alpha=alpha, color=PALETTE["data"], edgecolor="none")
    if len(t) >= 10:  # running median of the cosine over human-score bins
        edges = np.unique(np.quantile(t["human"], np.linspace(0, 1, 9)))
        mid, med = [], []
        for lo, hi in zip(edges[:-1], edges[1:]):
            sel = (t["human"] >= lo) & (t["human"] <= hi)
            if sel.sum():
                mid.append(t.loc[sel, "human"].median()), med.append(t.loc[sel, "cosine"].median())
        a.plot(mid, med, "o-", color=PALETTE["reference"], lw=1.6, ms=4, label="median cosine per score octile")
        a.legend(loc="upper left", fontsize=8.5)
    a.set(xlabel="Human similarity score", ylabel="Cosine similarity of the two ids",
          title=f"Spearman ρ = {p.spearman:.3f}, Pearson r = {p.pearson:.3f}")
    rh = sstats.rankdata(t["human"]) / len(t) if len(t) else []
    rc = sstats.rankdata(t["cosine"]) / len(t) if len(t) else []
    b.scatter(rh, rc, s=14, alpha=alpha, color=PALETTE["data"], edgecolor="none")
    b.plot([0, 1], [0, 1], color=PALETTE["muted"], ls="--", lw=1, label="perfect agreement")
    b.set(xlabel="Rank of the human score (fraction)", ylabel="Rank of the cosine (fraction)",
          xlim=(0, 1.02), ylim=(0, 1.02), title=f"Ranks of the {len(t):,} in-vocabulary pairs")
    b.legend(loc="upper left", fontsize=8.5)
    return fig


def section_accuracy_figure(r: SemanticResult) -> plt.Figure:
    """Per-section analogy accuracy (3CosAdd and 3CosMul) with Wilson intervals."""
    a = r.analogies
    t = a.sections[a.sections["evaluated"] > 0].iloc[::-1]
    fig, ax = plt.subplots(figsize=(WIDTH, max(2.4, 0.42 * len(t) + 1.2)))
    y = np.arange(len(t))
    h = 0.38
    for k, (meth, color, label) in enumerate((("3cosadd", PALETTE["data"], "3CosAdd"),
                                              ("3cosmul", PALETTE["accent"], "3CosMul"))):
        acc = t[f"accuracy_{meth}"].to_numpy(float)
        err = np.vstack([acc - t[f"ci_low_{meth}"].to_numpy(float), t[f"ci_high_{meth}"].to_numpy(float) - acc])
        ax.barh(y + (0.5 - k) * h, acc, height=h, color=color, alpha=0.85, label=label,
                xerr=np.clip(err, 0, None), error_kw=dict(ecolor="#333", lw=0.9, capsize=2))
    ax.axvline(a.accuracy_3cosadd, color=PALETTE["data"], ls=":", lw=1.2, label="overall 3CosAdd")
    ax.set_yticks(y, [f"{s} (n = {n:,})" for s, n in zip(t["section"], t["evaluated"])])
    top = np.nanmax(np.r_[t["ci_high_3cosadd"].to_numpy(float), t["ci_high_3cosmul"].to_numpy(float), 0.05])
    ax.set(xlim=(0, min(1.0, 1.1 * top + 0.02)), xlabel="Accuracy (share of questions whose top candidate is d); bars: 95 % Wilson CI",
           title="Analogy accuracy by section")
    ax.legend(loc="lower right", fontsize=8.5)
    return fig
