r"""Graph side data for the link-prediction chapters: the readers of edges, test edges, negatives and score.

Inputs (manifest fields, paths relative to the manifest):

* ``edges`` — an edge list over the embedding ids: columns ``src``, ``dst`` and optionally
  ``relation`` (text), ``timestamp`` (a number, or a date/time such as ``2024-03-05`` or
  ``2024-03-05T14:00``) and ``weight`` (a finite number). ``.csv``, ``.tsv`` / ``.txt``
  (tab-separated) or ``.parquet``, with a header row.
* ``test_edges`` (optional) — held-out edges, columns ``src``, ``dst`` (and ``relation``). Without
  it a split is made: by time when ``edges`` has timestamps (train strictly before the cut), else
  a seeded random 80/20 split.
* ``negatives`` (optional) — fixed pre-generated negatives in long format, as PyTorch-BigGraph,
  OGB and TGB distribute them: columns ``src``, ``dst``, ``negative`` (and ``relation``), one row
  per negative destination of a test edge ``(src, dst)``: the negative is the pair
  ``(src, negative)``. Without ``test_edges`` the test edges are the distinct ``(src, dst)`` of
  this file. Without ``negatives`` they are sampled
  (:func:`embeval_report.metrics.graph.sample_negatives`).
* ``score`` (optional) — ``dot`` (default), ``cosine`` or ``neg_l2`` (:func:`read_score`).

Bad input raises :class:`~embeval_report.errors.InputError` naming the file, the row (1-based data
row, header not counted) and the column.

Self-loops are dropped, and repeated (src, relation, dst) edges are kept once (the earliest, when
timestamps exist); both are counted in :attr:`EdgeList.notes`. Splits, negatives and the known-edge
index are built in :mod:`embeval_report.metrics.graph`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import read_table

SCORES = ("dot", "cosine", "neg_l2")
EDGE_COLUMNS = ("src", "dst")
EDGE_OPTIONAL = ("relation", "timestamp", "weight")
NEGATIVE_COLUMNS = ("src", "dst", "negative")
STRATEGIES = ("uniform", "batch")
POOLS = ("entities", "destinations")


# ---------------------------------------------------------------------------------------------
# Edge lists
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EdgeList:
    """Validated edges as row indices into the embedding matrix.

    ``relation`` holds text labels (or ``None``), ``time`` float seconds since 1970 for dates or the
    given numbers (or ``None``; ``time_is_date`` says which), ``row`` the 1-based data row of each
    edge in ``file`` (for messages).
    """

    src: np.ndarray
    dst: np.ndarray
    relation: np.ndarray | None = None
    time: np.ndarray | None = None
    weight: np.ndarray | None = None
    time_is_date: bool = False
    file: str = ""
    row: np.ndarray | None = None
    notes: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(len(self.src))

    @property
    def has_time(self) -> bool:
        return self.time is not None

    def take(self, idx) -> "EdgeList":
        """The edges at ``idx`` (an index or boolean array), in that order."""
        pick = (lambda a: None if a is None else a[idx])
        return replace(self, src=self.src[idx], dst=self.dst[idx], relation=pick(self.relation),
                       time=pick(self.time), weight=pick(self.weight), row=pick(self.row), notes=dict(self.notes))


#: how link prediction scores an edge when the manifest names no ``score``
DEFAULT_SCORE = "dot"


def read_score(value) -> str:
    """The manifest ``score`` field: ``dot`` (default when ``None``), ``cosine`` or ``neg_l2``."""
    if value is None:
        return DEFAULT_SCORE
    v = str(value).strip().lower()
    if v not in SCORES:
        raise InputError(f"manifest field 'score': expected one of {', '.join(SCORES)}, found {value!r}")
    return v


def _require_columns(t: pd.DataFrame, label: str, required, optional=()) -> None:
    missing = [c for c in required if c not in t.columns]
    if missing:
        opt = f" (optional: {', '.join(optional)})" if optional else ""
        raise InputError(f"{label}: missing column(s) {', '.join(map(repr, missing))}; expected columns "
                         f"{', '.join(required)}{opt}; found {', '.join(map(repr, t.columns)) or 'none'}")
    if not len(t):
        raise InputError(f"{label}: no rows; expected at least one row of {', '.join(required)}")


def _text_column(t: pd.DataFrame, col: str, label: str) -> np.ndarray:
    """A column as stripped python strings; an empty or missing cell is an error naming its row."""
    raw = t[col].to_numpy(dtype=object)
    bad = pd.isna(raw)
    vals = np.array([("" if b else str(v).strip()) for v, b in zip(raw, bad)], dtype=object)
    empty = vals == ""
    if empty.any():
        r = int(np.argmax(empty)) + 1
        raise InputError(f"{label}, row {r}, column {col!r}: empty value; expected an id"
                         + ("" if col != "relation" else " (a relation name)"))
    return vals


def _id_rows(values: np.ndarray, index: pd.Index, label: str, col: str) -> np.ndarray:
    """Row numbers of ``values`` in the embedding ids; unknown ids are an error naming the first row."""
    pos = index.get_indexer(values)
    unknown = pos < 0
    if unknown.any():
        r = int(np.argmax(unknown))
        raise InputError(f"{label}, row {r + 1}, column {col!r}: unknown id {values[r]!r}; every id must be one "
                         f"of the embedding ids ({int(unknown.sum()):,} row(s) have an unknown {col})")
    return pos.astype(np.int64)


def _numeric_column(t: pd.DataFrame, col: str, label: str, what: str) -> np.ndarray:
    raw = t[col]
    num = pd.to_numeric(raw.astype(str).str.strip() if raw.dtype == object else raw, errors="coerce")
    arr = num.to_numpy(dtype=float)
    bad = ~np.isfinite(arr)
    if bad.any():
        r = int(np.argmax(bad))
        raise InputError(f"{label}, row {r + 1}, column {col!r}: expected {what}, found {raw.iloc[r]!r}")
    return arr


def _time_column(t: pd.DataFrame, label: str) -> tuple[np.ndarray, bool]:
    """Timestamps as float: plain numbers, or dates/times as seconds since 1970 (UTC)."""
    raw = t["timestamp"]
    if pd.api.types.is_datetime64_any_dtype(raw):
        ts = pd.to_datetime(raw, utc=True)
    else:
        text = raw.astype(str).str.strip()
        empty = (text == "") | raw.isna().to_numpy()
        if empty.any():
            r = int(np.argmax(empty.to_numpy()))
            raise InputError(f"{label}, row {r + 1}, column 'timestamp': empty value; expected a number or a date "
                             "(every row needs one when the column is present)")
        num = pd.to_numeric(text, errors="coerce")
        if num.notna().all():
            arr = num.to_numpy(dtype=float)
            bad = ~np.isfinite(arr)
            if bad.any():
                r = int(np.argmax(bad))
                raise InputError(f"{label}, row {r + 1}, column 'timestamp': expected a finite number, "
                                 f"found {raw.iloc[r]!r}")
            return arr, False
        if num.notna().any():
            r = int(np.argmax(num.isna().to_numpy()))
            raise InputError(f"{label}, row {r + 1}, column 'timestamp': expected a number like the other rows, "
                             f"found {raw.iloc[r]!r}")
        ts = pd.to_datetime(text, errors="coerce", utc=True, format="mixed")
    bad = ts.isna().to_numpy()
    if bad.any():
        r = int(np.argmax(bad))
        raise InputError(f"{label}, row {r + 1}, column 'timestamp': {raw.iloc[r]!r} is neither a number nor a "
                         "date/time (for example 2024-03-05 or 2024-03-05T14:00)")
    ns = ts.dt.tz_localize(None).to_numpy("datetime64[ns]").astype(np.int64)
    return ns.astype(float) / 1e9, True


def read_edges(path, ids, *, label: str | None = None) -> EdgeList:
    """Read and validate an edge list (``src``, ``dst``; optional ``relation``, ``timestamp``, ``weight``).

    ``ids`` are the embedding ids (row order). Self-loops are dropped and repeated
    (src, relation, dst) rows kept once (the earliest when timestamped); both counts are in
    ``notes``. Raises :class:`InputError` for a missing column, an empty or unknown id, or a bad
    timestamp / weight, naming the file, row and column.
    """
    label = label or Path(path).name
    t = read_table(path, label)
    _require_columns(t, label, EDGE_COLUMNS, EDGE_OPTIONAL)
    index = pd.Index(np.asarray(ids, dtype=object))
    src = _id_rows(_text_column(t, "src", label), index, label, "src")
    dst = _id_rows(_text_column(t, "dst", label), index, label, "dst")
    rel = _text_column(t, "relation", label) if "relation" in t.columns else None
    time, is_date = _time_column(t, label) if "timestamp" in t.columns else (None, False)
    weight = _numeric_column(t, "weight", label, "a finite number") if "weight" in t.columns else None
    e = EdgeList(src, dst, rel, time, weight, is_date, label, np.arange(1, len(src) + 1))
    return _clean(e)


def _clean(e: EdgeList) -> EdgeList:
    """Drop self-loops and repeated (src, relation, dst) rows (keep the earliest); count both."""
    keep = e.src != e.dst
    n_loops = int((~keep).sum())
    e = e.take(np.flatnonzero(keep))
    order = np.argsort(e.time, kind="stable") if e.has_time else np.arange(len(e))
    rel = np.zeros(len(e), np.int64) if e.relation is None else pd.factorize(e.relation)[0]
    frame = pd.DataFrame({"s": e.src[order], "d": e.dst[order], "r": rel[order]})
    first = order[~frame.duplicated().to_numpy()]
    n_dup = len(e) - len(first)
    e = e.take(np.sort(first))
    notes = dict(e.notes, self_loops_dropped=n_loops, duplicates_dropped=n_dup)
    if not len(e):
        raise InputError(f"{e.file}: no edges left after dropping {n_loops} self-loop(s); expected edges between "
                         "two different ids")
    return replace(e, notes=notes)


def read_negatives(path, ids, test: EdgeList | None = None, *, label: str | None = None
                   ) -> tuple[EdgeList, np.ndarray]:
    """Read fixed negatives (long format ``src, dst, negative``) and group them by test edge.

    Returns ``(test, negatives)`` where ``negatives[i]`` lists the row indices of the negative
    destinations of test edge ``i`` (padded with -1 when counts differ). With ``test`` given, every
    row's ``(src, dst)`` (and ``relation``) must be one of its edges and every test edge needs at
    least one negative; without it the test edges are the distinct ``(src, dst[, relation])`` of
    the file, in order of first appearance.
    """
    label = label or Path(path).name
    t = read_table(path, label)
    _require_columns(t, label, NEGATIVE_COLUMNS, ("relation",))
    index = pd.Index(np.asarray(ids, dtype=object))
    src = _id_rows(_text_column(t, "src", label), index, label, "src")
    dst = _id_rows(_text_column(t, "dst", label), index, label, "dst")
    neg = _id_rows(_text_column(t, "negative", label), index, label, "negative")
    rel = _text_column(t, "relation", label) if "relation" in t.columns else None
    rows = pd.DataFrame({"s": src, "d": dst, "r": rel if rel is not None else ""})
    if test is None:
        first = ~rows.duplicated().to_numpy()
        test = EdgeList(src[first], dst[first], None if rel is None else rel[first], file=f"{label} (distinct src, dst)",
                        row=np.flatnonzero(first) + 1, notes={"self_loops_dropped": 0, "duplicates_dropped": 0})
    use_rel = rel is not None and test.relation is not None
    tkeys = pd.DataFrame({"s": test.src, "d": test.dst, "r": test.relation if use_rel else ""})
    lookup = pd.MultiIndex.from_frame(tkeys.drop_duplicates(keep="first"))
    which = lookup.get_indexer(pd.MultiIndex.from_frame(rows.assign(r=rows["r"] if use_rel else "")))
    if (which < 0).any():
        r = int(np.argmax(which < 0))
        extra = f", relation {rel[r]!r}" if use_rel else ""
        raise InputError(f"{label}, row {r + 1}, columns 'src', 'dst': ({index[src[r]]!r}, {index[dst[r]]!r}{extra}) "
                         "is not a test edge; every row must give a negative for one of the test edges")
    # map the de-duplicated lookup position back to the first test edge with that key
    first_pos = tkeys.reset_index().drop_duplicates(["s", "d", "r"], keep="first")["index"].to_numpy()
    q = first_pos[which]
    counts = np.bincount(q, minlength=len(test))
    dup_test = ~tkeys.duplicated(keep="first").to_numpy()
    lacking = np.flatnonzero((counts == 0) & dup_test)
    if len(lacking):
        i = int(lacking[0])
        where = f"row {int(test.row[i])} of {test.file}" if test.row is not None else f"test edge {i + 1}"
        raise InputError(f"{label}: test edge ({index[test.src[i]]!r}, {index[test.dst[i]]!r}) ({where}) has no "
                         f"negatives; expected one or more rows 'src, dst, negative' for each test edge "
                         f"({len(lacking):,} test edges have none)")
    if not dup_test.all():
        test = test.take(np.flatnonzero(dup_test))
        q = np.searchsorted(np.flatnonzero(dup_test), q)
        counts = np.bincount(q, minlength=len(test))
    order = np.argsort(q, kind="stable")
    pos = np.arange(len(q)) - np.repeat(np.cumsum(counts) - counts, counts)
    out = np.full((len(test), int(counts.max())), -1, dtype=np.int64)
    out[q[order], pos] = neg[order]
    return test, out


def field_label(path, field_name: str) -> str:
    """How messages name a side-data file: ``edges.csv (edges)``."""
    return f"{Path(path).name} ({field_name})"


@dataclass(frozen=True)
class Negatives:
    """Fixed negatives: the test edges they belong to, and ``candidates[i]`` the negative
    destinations of test edge ``i`` (row indices, padded with -1)."""

    test: EdgeList
    candidates: np.ndarray
    file: str
