r"""Human annotations for the human-evaluation chapter: reading, checking, and one tidy table.

A table (``.csv``, ``.tsv``/``.txt`` tab-separated, or ``.parquet``) with a header row and one row per
rating:

* what was rated — ``item`` (any task id), or a pair of vector ids: ``query_id`` and ``doc_id``
  (relevance judgements; the consensus is then written as qrels) or ``item1`` and ``item2``
  (similarity of two items);
* ``rater`` — who rated it (aliases ``annotator``, ``annotator_id``, ``worker``);
* ``label`` — the rating (aliases ``rating``, ``grade``, ``relevance``, ``score``): text for nominal
  categories, numbers for graded or interval ratings; every label of the file is of one type;
* optional ``seconds`` (time spent, ≥ 0), ``gold`` (the expected label of a gold/honeypot item,
  blank elsewhere; the same on every row of an item) and ``position`` (the rating's order in the
  rater's session, an integer ≥ 0).

The level of measurement (manifest ``annotation_level``: ``nominal``, ``ordinal`` or ``interval``)
defaults to nominal for text labels, ordinal for integer grades and interval for other numbers.
Text labels cannot be ordinal or interval (their order is unknown).

Bad input raises :class:`~embeval_report.errors.InputError` naming the file, the row (1-based data
row) and the column: a missing column, an empty item or rater, a missing label, labels of mixed
types, a non-numeric or negative ``seconds``/``position``, a ``gold`` of another type than the labels
or differing between rows of one item, one rater rating one item twice, pair ids that match no
vector, a single rater, no item rated twice.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import read_table, unknown_ids

LEVELS = ("nominal", "ordinal", "interval")
#: accepted header names of each column (lower case); the first is the canonical name
ALIASES = {
    "item": ("item", "item_id", "task", "task_id", "unit"),
    "query_id": ("query_id", "query-id", "qid", "query"),
    "doc_id": ("doc_id", "doc-id", "corpus_id", "corpus-id", "docid", "docno", "doc", "document_id"),
    "item1": ("item1", "item_1", "id1", "left", "word1"),
    "item2": ("item2", "item_2", "id2", "right", "word2"),
    "rater": ("rater", "annotator", "annotator_id", "rater_id", "worker", "worker_id", "judge", "coder"),
    "label": ("label", "rating", "grade", "relevance", "score", "value"),
    "seconds": ("seconds", "time", "duration", "time_seconds"),
    "gold": ("gold", "expected", "gold_label"),
    "position": ("position", "order", "index_in_session", "seq"),
}
#: item kinds: a free task id, a (query, document) judgement, an unordered pair of vector ids
KINDS = ("item", "query_doc", "pair")


@dataclass(frozen=True)
class Annotations:
    """The tidy ratings of one annotation file.

    ``ratings`` one row per rating: ``item`` (str key; ``"a → b"`` for pairs), ``rater`` (str),
    ``label`` (str for text labels, float for numbers), ``seconds`` / ``position`` (float, NaN when absent),
    ``gold`` (the item's expected label or None); for pairs also ``id1`` and ``id2`` (the two ids as given;
    ``"a ↔ b"`` is the key of an unordered pair, ``"q → d"`` of a query–document judgement).
    ``kind`` one of :data:`KINDS`; ``level`` the level of measurement and ``level_source`` why
    (``"annotation_level"`` or the default it came from); ``numeric`` whether labels are numbers;
    ``columns`` the names of the pair columns in the file (for the consensus file); ``file`` its name.
    """

    ratings: pd.DataFrame
    kind: str
    level: str
    level_source: str
    numeric: bool
    integer: bool
    columns: tuple[str, ...]
    file: str

    @property
    def items(self) -> np.ndarray:
        return self.ratings["item"].unique()

    @property
    def raters(self) -> np.ndarray:
        return self.ratings["rater"].unique()

    @property
    def has(self) -> dict:
        """Which optional columns were given."""
        r = self.ratings
        return {"seconds": bool(r["seconds"].notna().any()), "position": bool(r["position"].notna().any()),
                "gold": bool(r["gold"].notna().any())}


def read_level(value) -> str:
    """The manifest's ``annotation_level`` checked (lower-cased)."""
    v = str(value).strip().lower()
    if v not in LEVELS:
        raise InputError(f"manifest field 'annotation_level': expected one of {', '.join(LEVELS)}, found {value!r}")
    return v


def _read_table(path: Path, label: str) -> pd.DataFrame:
    """The ratings table as strings (:func:`~embeval_report.io.files.read_table`; Parquet cells as text too)."""
    t = read_table(path, label)
    if path.suffix.lower() == ".parquet":
        t = t.astype(object).where(t.notna(), "").astype(str) if len(t) else t.astype(str)
    return t


def _columns(t: pd.DataFrame, label: str) -> dict[str, str]:
    """Canonical column name -> the file's column name."""
    lower = {str(c).strip().lower(): c for c in t.columns}
    found = {}
    for canon, aliases in ALIASES.items():
        for a in aliases:
            if a in lower:
                found[canon] = lower[a]
                break
    seen = ", ".join(map(repr, map(str, t.columns))) or "none"
    for need in ("rater", "label"):
        if need not in found:
            raise InputError(f"{label}: no {need!r} column (also accepted: {', '.join(ALIASES[need][1:])}); "
                             f"expected columns item (or query_id, doc_id), rater, label; found {seen}")
    if "query_id" in found and "doc_id" in found:
        return found
    if "item1" in found and "item2" in found:
        return found
    if "item" not in found:
        raise InputError(f"{label}: no 'item' column (or 'query_id' and 'doc_id', or 'item1' and 'item2'); "
                         f"expected columns item, rater, label; found {seen}")
    return found


def _number(text: str):
    try:
        v = float(text)
    except ValueError:
        return None
    return v if np.isfinite(v) else None


def read_annotations(path, *, level: str | None = None, ids=None, query_ids=None, label: str | None = None
                     ) -> Annotations:
    """Read an annotation table (see the module docstring).

    ``level`` the manifest's ``annotation_level`` (``None``: the default for the label type);
    ``ids`` the vector ids (pair ids are checked against them; ``query_ids`` those of the queries
    when the set has separate query vectors). Raises :class:`InputError` on bad input.
    """
    path = Path(path)
    label = label or path.name
    if not path.is_file():
        raise InputError(f"{label}: file not found ({path})")
    t = _read_table(path, label)
    if not len(t):
        raise InputError(f"{label}: no rows; expected one rating per row (item, rater, label)")
    cols = _columns(t, label)
    kind = "query_doc" if "query_id" in cols and "doc_id" in cols else "pair" if (
        "item1" in cols and "item2" in cols) else "item"
    key_cols = {"query_doc": ("query_id", "doc_id"), "pair": ("item1", "item2"), "item": ("item",)}[kind]

    def col(name):
        return np.array([str(v).strip() for v in t[cols[name]].to_numpy()], dtype=object)

    def where(r, c):
        return f"{label}, row {r + 1}, column {str(cols.get(c, c))!r}"

    keys = [col(c) for c in key_cols]
    rater = col("rater")
    for name, values in [*zip(key_cols, keys), ("rater", rater)]:
        empty = values == ""
        if empty.any():
            r = int(np.argmax(empty))
            raise InputError(f"{where(r, name)}: empty {'id' if name != 'rater' else 'rater'}; expected a value")
    raw = col("label")
    empty = raw == ""
    if empty.any():
        r = int(np.argmax(empty))
        raise InputError(f"{where(r, 'label')}: empty label; expected a rating on every row (leave out the rows of "
                         "items a rater did not rate)")
    nums = [_number(v) for v in raw]
    is_num = np.array([v is not None for v in nums])
    if is_num.any() and not is_num.all():
        a, b = int(np.argmax(is_num)), int(np.argmax(~is_num))
        raise InputError(f"{where(b, 'label')}: {raw[b]!r} is text but row {a + 1} holds the number {raw[a]!r}; "
                         "expected labels of one type (all numbers, or all text categories)")
    numeric = bool(is_num.all())
    values = np.array(nums, float) if numeric else raw
    integer = numeric and bool(np.all(values == np.round(values)))
    if level is None:
        level, source = ("nominal", "default for text labels") if not numeric else (
            ("ordinal", "default for integer grades") if integer else ("interval", "default for non-integer numbers"))
    else:
        level, source = read_level(level), "annotation_level"
        if level != "nominal" and not numeric:
            raise InputError(f"{label}, column {str(cols['label'])!r}: annotation_level {level} needs numeric labels "
                             f"(their order and distances), found text such as {raw[0]!r}; use "
                             "annotation_level: nominal or give the grades as numbers")
    # optional columns
    extra = {}
    for name in ("seconds", "position"):
        v = np.full(len(t), np.nan)
        if name in cols:
            text = col(name)
            for r, s in enumerate(text):
                if s == "":
                    continue
                x = _number(s)
                if x is None or x < 0 or (name == "position" and x != round(x)):
                    what = "a non-negative number of seconds" if name == "seconds" else "a non-negative integer"
                    raise InputError(f"{where(r, name)}: {s!r}; expected {what} (or blank)")
                v[r] = x
        extra[name] = v
    gold = np.full(len(t), None, dtype=object)
    if "gold" in cols:
        text = col("gold")
        for r, s in enumerate(text):
            if s == "":
                continue
            if numeric:
                x = _number(s)
                if x is None:
                    raise InputError(f"{where(r, 'gold')}: {s!r} is not a number; expected the expected label of a "
                                     "gold item, of the same type as the labels (or blank)")
                gold[r] = x
            else:
                gold[r] = s
    # item keys
    if kind == "item":
        item = keys[0]
    else:
        arrow = " → " if kind == "query_doc" else " ↔ "  # a pair is unordered: one key for (a, b) and (b, a)
        item = np.array([arrow.join((a, b) if kind == "query_doc" or a <= b else (b, a)) for a, b in zip(*keys)],
                        dtype=object)
    frame = pd.DataFrame({"item": item, "rater": rater, "label": values, "seconds": extra["seconds"],
                          "gold": gold, "position": extra["position"]})
    if kind != "item":
        frame["id1"], frame["id2"] = keys
    dup = frame.duplicated(["item", "rater"])
    if dup.any():
        j = int(np.argmax(dup))
        i = int(np.flatnonzero((item[:j] == item[j]) & (rater[:j] == rater[j]))[0])
        raise InputError(f"{label}, rows {i + 1} and {j + 1}: rater {rater[j]!r} rates item {item[j]!r} twice; "
                         "expected one rating per (item, rater)")
    if "gold" in cols:
        g = frame[frame["gold"].notna()]
        clash = g.groupby("item")["gold"].nunique()
        if (clash > 1).any():
            it = clash.index[int(np.argmax(clash.to_numpy() > 1))]
            rows = np.flatnonzero((item == it) & pd.notna(gold))
            raise InputError(f"{label}, rows {rows[0] + 1} and {rows[1] + 1}, column {str(cols['gold'])!r}: item "
                             f"{it!r} has two gold labels ({gold[rows[0]]!r} and {gold[rows[1]]!r}); expected one "
                             "expected label per gold item")
        frame["gold"] = frame["item"].map(g.groupby("item")["gold"].first()).astype(object)
        frame["gold"] = frame["gold"].where(frame["gold"].notna(), None)
    # pair ids must name vectors
    if kind != "item" and ids is not None:
        known = [(keys[0], query_ids if (kind == "query_doc" and query_ids is not None) else ids,
                  key_cols[0], "query" if kind == "query_doc" and query_ids is not None else "vector"),
                 (keys[1], ids, key_cols[1], "vector")]
        for values_, known_ids, name, what in known:
            bad = unknown_ids(values_, known_ids)
            if bad is not None:
                raise InputError(f"{where(bad.row, name)}: id {bad.value!r} matches no {what} id ({bad.rows} row(s) "
                                 f"name {len(bad.ids)} unknown id(s): {bad.named()}); expected ids of the {what}s")
    n_raters = frame["rater"].nunique()
    if n_raters < 2:
        raise InputError(f"{label}: every rating comes from one rater ({rater[0]!r}); agreement needs at least 2 "
                         "raters")
    if not frame["item"].duplicated().any():
        raise InputError(f"{label}: no item is rated by more than one rater; agreement needs items rated at least "
                         "twice")
    columns = tuple(str(cols[c]) for c in key_cols)
    return Annotations(frame, kind, level, source, numeric, integer, columns, label)
