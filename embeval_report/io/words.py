"""Word-similarity judgements and analogy questions (the semantic chapter's side data).

* ``word_pairs`` — gensim's format (``word1<TAB>word2<TAB>score``, ``#`` comments) or CSV with a
  header ``word1,word2,score``;
* ``analogies`` — gensim's ``questions-words.txt`` format (``: section`` lines, then ``a b c d``) or
  CSV with a header ``a,b,c,d[,section]``.

Words are matched against the set's ids later (out-of-vocabulary words are counted, not errors).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError

#: section of analogy questions that come before any ': section' line
DEFAULT_SECTION = "all"


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


