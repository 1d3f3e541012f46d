r"""Relevance judgements (qrels) for the retrieval chapter: reading, checking, and one tidy table.

Two formats, told apart by the first non-blank line:

* **TREC** — ``query_id iteration doc_id relevance``, whitespace separated, no header (the format
  of ``trec_eval``, ``pytrec_eval`` and ``ranx``; the iteration field is ignored);
* **delimited with a header** — a header row naming a query column, a document column and a
  relevance column; tab-separated when the header line holds a tab, else comma-separated.
  Accepted names (case-insensitive): ``query_id`` / ``query-id`` / ``qid`` / ``query``;
  ``doc_id`` / ``doc-id`` / ``corpus_id`` / ``corpus-id`` / ``docid`` / ``docno`` / ``doc``;
  ``relevance`` / ``rel`` / ``grade`` / ``label`` / ``score`` (BEIR's ``qrels/*.tsv`` header is
  ``query-id corpus-id score``). Further columns are ignored.

Every judgement is a non-negative integer grade: ``>= 1`` is relevant, ``0`` judged non-relevant.
Blank lines are ignored; ids are stripped of surrounding whitespace.

Bad input raises :class:`~embeval_report.errors.InputError` naming the file, the row (1-based data
row, header not counted) and its physical line, and what was expected: a row with the wrong number
of fields, a missing header column, an empty id, a relevance that is not an integer or is negative,
a (query, document) pair judged twice (an error rather than a silent choice between the two
grades), and — when the known ids are given — a query id that is not among the query ids or a
document id that is not among the corpus ids (judgements of documents outside the corpus would
silently lower every recall).
"""
from __future__ import annotations

import csv
import re

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import as_ids, existing_file, read_text, unknown_ids

#: columns of the tidy qrels table
COLUMNS = ("query_id", "doc_id", "relevance")
#: accepted header names of each column (lower case)
ALIASES = {
    "query_id": ("query_id", "query-id", "qid", "query", "queryid"),
    "doc_id": ("doc_id", "doc-id", "corpus_id", "corpus-id", "docid", "docno", "doc", "document_id", "pid"),
    "relevance": ("relevance", "rel", "grade", "label", "score", "judgement", "judgment"),
}
_INTEGER = re.compile(r"[+-]?\d+\Z")


def read_qrels(path, *, query_ids=None, doc_ids=None, label: str | None = None) -> pd.DataFrame:
    """Read a qrels file (TREC or delimited with a header, see the module docstring).

    ``query_ids`` / ``doc_ids`` (optional): the known query and corpus ids; a judgement naming
    another id is an :class:`InputError`. ``label`` names the file in messages (default: its name).
    Returns a DataFrame with columns ``query_id`` (str), ``doc_id`` (str), ``relevance`` (int64),
    one row per judgement in file order; ``df.attrs`` holds ``source`` (the label) and ``format``
    (``"trec"`` or ``"csv"`` / ``"tsv"``).
    """
    path = existing_file(path, label)
    label = label or path.name
    lines = read_text(path, label).split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise InputError(f"{label}: empty file; expected relevance judgements, one per line "
                         "('query_id iteration doc_id relevance', or a header row query_id,doc_id,relevance)")
    header = _header(lines[first])
    if header is None:
        fmt = "trec"
        qid, did, rel, line_no = _read_trec(lines, label)
    else:
        sep, names = header
        fmt = "tsv" if sep == "\t" else "csv"
        qid, did, rel, line_no = _read_delimited(lines, first, sep, names, label)
    if len(qid) == 0:
        raise InputError(f"{label}: no judgements{' below the header row' if header else ''}; "
                         "expected one (query, document, relevance) judgement per line")
    qrels = _check(qid, did, rel, line_no, label, query_ids, doc_ids)
    qrels.attrs.update(source=label, format=fmt)
    return qrels


def qrels_frame(qrels, *, query_ids=None, doc_ids=None, label: str = "qrels") -> pd.DataFrame:
    """The tidy table of in-memory judgements, checked like a file (rows counted from 1).

    ``qrels``: a DataFrame with columns ``query_id``, ``doc_id``, ``relevance``, or a mapping
    ``{query_id: {doc_id: relevance}}`` (pytrec_eval's and ranx's form).
    """
    if isinstance(qrels, pd.DataFrame):
        missing = [c for c in COLUMNS if c not in qrels.columns]
        if missing:
            raise InputError(f"{label}: no column {', '.join(map(repr, missing))}; expected columns "
                             f"{', '.join(COLUMNS)} (found {', '.join(map(str, qrels.columns))})")
        qid, did = (np.array([v.strip() for v in as_ids(qrels[c], f"{label}, column {c!r}")], dtype=object)
                    for c in ("query_id", "doc_id"))
        rel_raw = qrels["relevance"].to_numpy()
    elif isinstance(qrels, dict):
        items = [(str(q).strip(), str(d).strip(), r) for q, docs in qrels.items() for d, r in docs.items()]
        qid = np.array([q for q, _, _ in items], dtype=object)
        did = np.array([d for _, d, _ in items], dtype=object)
        rel_raw = np.array([r for _, _, r in items], dtype=object)
    else:
        raise InputError(f"{label}: expected a table with columns query_id, doc_id, relevance or a mapping "
                         f"query_id -> {{doc_id: relevance}}, found a {type(qrels).__name__}")
    rel = np.empty(len(rel_raw), np.int64)
    if rel_raw.dtype.kind in "iu":  # integers already: nothing to check one by one
        rel[:] = rel_raw
        rel_raw = ()
    for r, v in enumerate(rel_raw):
        ok = (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) or (
            isinstance(v, (float, np.floating)) and np.isfinite(v) and float(v).is_integer())
        if not ok:
            raise InputError(f"{label}, row {r + 1}, column 'relevance': {v!r} is not an integer; "
                             "expected a non-negative integer grade")
        rel[r] = int(v)
    for r, (q, d) in enumerate(zip(qid, did)):
        if not q or not d:
            raise InputError(f"{label}, row {r + 1}, column {'query_id' if not q else 'doc_id'!r}: empty id; "
                             "expected an id")
    return _check(qid, did, rel, np.arange(1, len(qid) + 1), label, query_ids, doc_ids, lines=False)


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

def _header(line: str) -> tuple[str, dict[str, int]] | None:
    """``(separator, column name -> field position)`` when ``line`` is a header row, else ``None``."""
    words = line.split()
    if len(words) == 4 and _INTEGER.match(words[3]):  # TREC data: a header names its relevance column
        return None
    sep = "\t" if "\t" in line else "," if "," in line else None
    fields = [f.strip().lower() for f in (next(csv.reader([line], delimiter=sep)) if sep else line.split())]
    names = {}
    for col, aliases in ALIASES.items():
        hit = [i for i, f in enumerate(fields) if f in aliases]
        if hit:
            names[col] = hit[0]
    if not names:
        return None
    return sep or " ", names


def _read_trec(lines: list[str], label: str):
    qid, did, rel, line_no = [], [], [], []
    for n, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 4:
            raise InputError(f"{label}, row {len(qid) + 1} (line {n}): found {len(fields)} field(s); expected 4 "
                             "whitespace-separated fields 'query_id iteration doc_id relevance' (TREC qrels), "
                             "or a header row naming query_id, doc_id and relevance")
        qid.append(fields[0])
        did.append(fields[2])
        rel.append(_grade(fields[3], label, len(qid), n, "relevance (4th field)"))
        line_no.append(n)
    return qid, did, rel, line_no


def _read_delimited(lines: list[str], first: int, sep: str, names: dict[str, int], label: str):
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise InputError(f"{label}, line {first + 1}: the header row has no {' or '.join(missing)} column; expected "
                         f"columns {', '.join(COLUMNS)} (also accepted: "
                         + "; ".join(f"{c}: {', '.join(ALIASES[c][1:])}" for c in missing) + ")")
    width = max(names.values()) + 1
    qid, did, rel, line_no = [], [], [], []
    rows = [(n, line) for n, line in enumerate(lines[first + 1:], first + 2) if line.strip()]
    reader = csv.reader((line for _, line in rows), delimiter=sep) if sep != " " else (line.split() for _, line in rows)
    for (n, _), fields in zip(rows, reader):
        r = len(qid) + 1
        if len(fields) < width:
            raise InputError(f"{label}, row {r} (line {n}): found {len(fields)} field(s); expected at least {width} "
                             f"({'tab' if sep == chr(9) else 'comma'}-separated, as in the header row)")
        q, d = fields[names["query_id"]].strip(), fields[names["doc_id"]].strip()
        for col, v in (("query_id", q), ("doc_id", d)):
            if not v:
                raise InputError(f"{label}, row {r} (line {n}), column {col!r}: empty id; expected an id")
        qid.append(q)
        did.append(d)
        rel.append(_grade(fields[names["relevance"]], label, r, n, "'relevance'"))
        line_no.append(n)
    return qid, did, rel, line_no


def _grade(text: str, label: str, row: int, line: int, column: str) -> int:
    t = text.strip()
    if not _INTEGER.match(t):
        what = "empty value" if not t else f"{t!r} is not an integer"
        raise InputError(f"{label}, row {row} (line {line}), column {column}: {what}; "
                         "expected a non-negative integer grade (0 = judged non-relevant, >= 1 relevant)")
    return int(t)


# ---------------------------------------------------------------------------------------------
# Checks shared by files and in-memory judgements
# ---------------------------------------------------------------------------------------------

def _where(label: str, row: int, line: int, lines: bool) -> str:
    return f"{label}, row {row} (line {line})" if lines else f"{label}, row {row}"


def _check(qid, did, rel, line_no, label: str, query_ids, doc_ids, lines: bool = True) -> pd.DataFrame:
    qid = np.asarray(qid, dtype=object)
    did = np.asarray(did, dtype=object)
    rel = np.asarray(rel, dtype=np.int64)
    line_no = np.asarray(line_no, dtype=np.int64)
    neg = rel < 0
    if neg.any():
        r = int(np.argmax(neg))
        raise InputError(f"{_where(label, r + 1, line_no[r], lines)}, column 'relevance': negative grade {rel[r]}; "
                         "expected a non-negative integer grade (0 = judged non-relevant, >= 1 relevant)")
    pairs = pd.MultiIndex.from_arrays([qid, did])
    dup = pairs.duplicated()
    if dup.any():
        j = int(np.argmax(dup))
        i = int(np.flatnonzero((qid[:j] == qid[j]) & (did[:j] == did[j]))[0])
        where = (f"rows {i + 1} and {j + 1} (lines {line_no[i]} and {line_no[j]})" if lines
                 else f"rows {i + 1} and {j + 1}")
        raise InputError(f"{label}, {where}: query {qid[j]!r} and document {did[j]!r} are judged twice "
                         f"(relevance {rel[i]} and {rel[j]}); expected one judgement per (query, document) pair")
    for col, values, known, what in (("query_id", qid, query_ids, "query"), ("doc_id", did, doc_ids, "corpus")):
        if known is None:
            continue
        bad = unknown_ids(values, known)
        if bad is not None:
            kind = "query" if col == "query_id" else "document"
            raise InputError(
                f"{_where(label, bad.row + 1, line_no[bad.row], lines)}, column {col!r}: {kind} id {bad.value!r} "
                f"matches no {what} id ({bad.rows} judgement(s) name {len(bad.ids)} unknown {kind} id(s): "
                f"{bad.named()}); expected ids of the {what} vectors")
    return pd.DataFrame({"query_id": qid, "doc_id": did, "relevance": rel})
