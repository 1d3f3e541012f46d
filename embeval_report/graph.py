r"""Graph side data for the link-prediction chapters: readers, splits, negatives, heuristics, demo.

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
  this file. Without ``negatives`` they are sampled (:func:`sample_negatives`).
* ``score`` (optional) — ``dot`` (default), ``cosine`` or ``neg_l2`` (:func:`read_score`).

Bad input raises :class:`~embeval_report.errors.InputError` naming the file, the row (1-based data
row, header not counted) and the column.

Conventions: the three scores are symmetric, :math:`s(u, v) = s(v, u)`, so an edge is *known*
(for filtered ranks, false negatives and the heuristics) in either direction; with a ``relation``
column an edge is the triple (src, relation, dst) and knowledge is per relation, as in
knowledge-graph evaluation (Bordes et al. 2013). Self-loops are dropped, and repeated edges are
kept once (the earliest, when timestamps exist); both are counted in :attr:`EdgeList.notes`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .errors import InputError

SCORES = ("dot", "cosine", "neg_l2")
EDGE_COLUMNS = ("src", "dst")
EDGE_OPTIONAL = ("relation", "timestamp", "weight")
NEGATIVE_COLUMNS = ("src", "dst", "negative")
STRATEGIES = ("uniform", "batch")
POOLS = ("entities", "destinations")
_SEPARATORS = {".csv": ",", ".tsv": "\t", ".txt": "\t"}


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


def read_score(value) -> str:
    """The manifest ``score`` field: ``dot`` (default when ``None``), ``cosine`` or ``neg_l2``."""
    if value is None:
        return "dot"
    v = str(value).strip().lower()
    if v not in SCORES:
        raise InputError(f"manifest field 'score': expected one of {', '.join(SCORES)}, found {value!r}")
    return v


def _read_table(path, label: str) -> pd.DataFrame:
    """A table of strings (csv / tsv / txt / parquet) with its header; nothing read as NaN."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{label}: file not found ({p})")
    suffix = p.suffix.lower()
    try:
        if suffix in _SEPARATORS:
            t = pd.read_csv(p, sep=_SEPARATORS[suffix], dtype=str, keep_default_na=False, na_filter=False,
                            skipinitialspace=True, encoding="utf-8-sig")
        elif suffix == ".parquet":
            t = pd.read_parquet(p)
            if not isinstance(t.index, pd.RangeIndex):
                t = t.reset_index()
        else:
            raise InputError(f"{label}: unsupported format {suffix!r}; expected .csv, .tsv, .txt (tab-separated) "
                             "or .parquet with a header row")
    except InputError:
        raise
    except UnicodeDecodeError as e:
        raise InputError(f"{label}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except Exception as e:  # pandas / pyarrow parse errors
        raise InputError(f"{label}: could not be read as a table ({str(e).splitlines()[0]})") from None
    t.columns = [str(c).strip() for c in t.columns]
    return t


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
    t = _read_table(path, label)
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
    t = _read_table(path, label)
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


# ---------------------------------------------------------------------------------------------
# Known edges (for filtering, false negatives) and relation codes
# ---------------------------------------------------------------------------------------------

def relation_codes(*edge_lists: EdgeList) -> tuple[list[np.ndarray], list[str]]:
    """Integer relation codes of each edge list over their joint vocabulary (all 0 without relations)."""
    names = sorted({str(r) for e in edge_lists if e is not None and e.relation is not None for r in e.relation})
    lookup = {r: i for i, r in enumerate(names)}
    codes = [np.zeros(len(e), np.int64) if e.relation is None else np.array([lookup[str(r)] for r in e.relation],
                                                                             dtype=np.int64)
             for e in edge_lists]
    return codes, names


@dataclass(frozen=True)
class KnownEdges:
    """Sorted keys of a set of undirected (u, relation, v) edges, for fast membership tests."""

    keys: np.ndarray
    n: int

    @staticmethod
    def encode(u, v, rel, n: int) -> np.ndarray:
        """Key of the undirected pair {u, v} in relation ``rel``: ``rel·n² + min·n + max``."""
        u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
        return np.asarray(rel, np.int64) * n * n + np.minimum(u, v) * n + np.maximum(u, v)

    @classmethod
    def from_edges(cls, n: int, *pairs) -> "KnownEdges":
        """From ``(u, v, rel)`` triples of arrays."""
        if pairs and (1 + int(max(np.max(r, initial=0) for _, _, r in pairs))) * n * n >= 2 ** 62:
            raise ValueError("too many ids and relations to encode edge keys in 64 bits")
        keys = np.concatenate([cls.encode(u, v, r, n) for u, v, r in pairs]) if pairs else np.zeros(0, np.int64)
        return cls(np.unique(keys), n)

    def contains(self, u, v, rel) -> np.ndarray:
        """Whether each (u, rel, v) is a known edge (either direction)."""
        k = self.encode(u, v, rel, self.n)
        if not len(self.keys):
            return np.zeros(k.shape, bool)
        i = np.searchsorted(self.keys, k).clip(max=len(self.keys) - 1)
        return self.keys[i] == k

    def __len__(self) -> int:
        return int(len(self.keys))


# ---------------------------------------------------------------------------------------------
# Splits
# ---------------------------------------------------------------------------------------------

def random_split(edges: EdgeList, test_fraction: float = 0.2, *, seed: int = 0) -> tuple[EdgeList, EdgeList]:
    """Seeded random split: ``round(test_fraction · E)`` edges (at least 1) held out for testing."""
    if not 0 < test_fraction < 1:
        raise ValueError("test_fraction must be between 0 and 1")
    if len(edges) < 2:
        raise InputError(f"{edges.file}: {len(edges)} edge(s); at least 2 are needed to split into train and test")
    perm = np.random.default_rng([seed, 90, 1]).permutation(len(edges))
    n_test = int(min(len(edges) - 1, max(1, round(test_fraction * len(edges)))))
    return edges.take(np.sort(perm[n_test:])), edges.take(np.sort(perm[:n_test]))


def temporal_cut(time: np.ndarray, train_fraction: float = 0.8) -> float:
    """The cut time: the timestamp of the edge at position ``⌊train_fraction·E⌋`` in time order
    (seed 000 §218.2.3). Edges at the cut time go to test, so train times are all < test times."""
    t = np.sort(np.asarray(time, float))
    return float(t[min(len(t) - 1, int(len(t) * train_fraction))])


def temporal_split(edges: EdgeList, train_fraction: float = 0.8, *, cut: float | None = None
                   ) -> tuple[EdgeList, EdgeList, float]:
    """Train on edges strictly before the cut, test on the edges at or after it (never random).

    Returns ``(train, test, cut)``. Raises :class:`InputError` when every edge has the same time
    (no cut can separate past from future).
    """
    if not edges.has_time:
        raise ValueError("temporal_split needs timestamps")
    cut = temporal_cut(edges.time, train_fraction) if cut is None else float(cut)
    before = edges.time < cut
    if not before.any() or before.all():
        raise InputError(f"{edges.file}: column 'timestamp': all edges fall on one side of the cut "
                         f"(only {len(np.unique(edges.time))} distinct time(s)); a temporal split needs edges "
                         "before and after it")
    return edges.take(np.flatnonzero(before)), edges.take(np.flatnonzero(~before)), cut


# ---------------------------------------------------------------------------------------------
# Negative sampling
# ---------------------------------------------------------------------------------------------

def sample_negatives(src, dst, n_entities: int, n_negatives: int = 100, *, strategy: str = "uniform",
                     pool=None, seed: int = 0) -> np.ndarray:
    """Corrupted destinations for each positive edge ``(src[i], dst[i])``: an array (B, m) of row indices.

    ``strategy="uniform"``: each negative is drawn uniformly from ``pool`` (default all entities,
    PyTorch-BigGraph's uniform negatives). ``strategy="batch"``: the positives are shuffled into
    batches of ``m + 1`` and each one's negatives are the destinations of the other positives of its
    batch (PBG's same-batch negatives, which follow the degree distribution of the destinations); a
    last, short batch is topped up uniformly. Either way a negative never equals the edge's own
    source or destination (redrawn uniformly); other true edges may still appear, which is what
    filtered ranks and the false-negative rate account for.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, not {strategy!r}")
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    B, m = len(src), int(n_negatives)
    pool = np.arange(n_entities) if pool is None else np.unique(np.asarray(pool, np.int64))
    if len(pool) < 3:
        raise ValueError("the negative pool needs at least 3 entities")
    rng = np.random.default_rng([seed, 90, 2])
    if strategy == "uniform":
        out = pool[rng.integers(0, len(pool), (B, m))]
    else:
        out = np.empty((B, m), np.int64)
        perm = rng.permutation(B)
        for s in range(0, B, m + 1):
            batch = perm[s:s + m + 1]
            b = len(batch)
            others = dst[batch]
            # row r takes the other b - 1 destinations in batch order, then uniform top-up
            grid = np.broadcast_to(others, (b, b))[~np.eye(b, dtype=bool)].reshape(b, b - 1)
            fill = pool[rng.integers(0, len(pool), (b, m - (b - 1)))] if b - 1 < m else np.zeros((b, 0), np.int64)
            out[batch] = np.hstack([grid[:, :m], fill])
    bad = (out == src[:, None]) | (out == dst[:, None])
    while bad.any():
        out[bad] = pool[rng.integers(0, len(pool), int(bad.sum()))]
        bad = (out == src[:, None]) | (out == dst[:, None])
    return out


def sample_non_edges(known: KnownEdges, n_entities: int, count: int, *, rel=None, seed: int = 0
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``count`` uniform random pairs (u ≠ v) that are not known edges (for training a probe)."""
    rng = np.random.default_rng([seed, 90, 3])
    rel = np.zeros(count, np.int64) if rel is None else np.asarray(rel, np.int64)
    u, v = rng.integers(0, n_entities, count), rng.integers(0, n_entities, count)
    for _ in range(100):
        bad = (u == v) | known.contains(u, v, rel)
        if not bad.any():
            break
        u[bad], v[bad] = rng.integers(0, n_entities, int(bad.sum())), rng.integers(0, n_entities, int(bad.sum()))
    return u, v


# ---------------------------------------------------------------------------------------------
# Graph heuristics (EvalNE's baselines), on the training graph
# ---------------------------------------------------------------------------------------------

HEURISTICS = {
    "common_neighbours": "Common neighbours |N(u) ∩ N(v)|",
    "jaccard": "Jaccard |N(u) ∩ N(v)| / |N(u) ∪ N(v)|",
    "adamic_adar": "Adamic–Adar Σ_{w ∈ N(u) ∩ N(v)} 1 / log |N(w)|",
    "resource_allocation": "Resource allocation Σ_{w ∈ N(u) ∩ N(v)} 1 / |N(w)|",
    "preferential_attachment": "Preferential attachment |N(u)| · |N(v)|",
}


def adjacency(edges: EdgeList, n: int) -> sp.csr_matrix:
    """Binary symmetric adjacency (n x n, sparse) of the undirected simple graph of ``edges``."""
    A = sp.coo_matrix((np.ones(2 * len(edges)), (np.r_[edges.src, edges.dst], np.r_[edges.dst, edges.src])),
                      shape=(n, n)).tocsr()
    A.data[:] = 1.0
    A.setdiag(0)
    A.eliminate_zeros()
    return A


def heuristic_scores(A: sp.csr_matrix, u, v, name: str, *, chunk: int = 100_000) -> np.ndarray:
    """A structural score for each pair ``(u[i], v[i])`` on the graph ``A`` (see :data:`HEURISTICS`).

    Definitions as networkx (``common_neighbors``, ``jaccard_coefficient`` — 0 when both
    neighbourhoods are empty —, ``adamic_adar_index``, ``resource_allocation_index``,
    ``preferential_attachment``; Liben-Nowell & Kleinberg 2007), computed with sparse row products.
    """
    if name not in HEURISTICS:
        raise ValueError(f"unknown heuristic {name!r}; expected one of {', '.join(HEURISTICS)}")
    u, v = np.asarray(u, np.int64), np.asarray(v, np.int64)
    deg = np.asarray(A.sum(1)).ravel()
    if name == "preferential_attachment":
        return deg[u] * deg[v]
    with np.errstate(divide="ignore"):
        w = {"common_neighbours": np.ones_like(deg), "jaccard": np.ones_like(deg),
             "adamic_adar": np.where(deg > 1, 1.0 / np.log(np.maximum(deg, 1)), 0.0),
             "resource_allocation": np.where(deg > 0, 1.0 / np.maximum(deg, 1), 0.0)}[name]
    out = np.empty(len(u))
    for s in range(0, len(u), chunk):
        P = A[u[s:s + chunk]].multiply(A[v[s:s + chunk]])
        out[s:s + chunk] = P @ w
    if name == "jaccard":
        union = deg[u] + deg[v] - out
        out = np.where(union > 0, out / np.where(union > 0, union, 1), 0.0)
    return out


# ---------------------------------------------------------------------------------------------
# Everything the link-prediction chapters need, from an embedding set
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LinkData:
    """Train / test edges, the negatives of each test edge, and the protocol that produced them.

    ``candidates`` is (B, 1 + m): column 0 the true destination, then the negatives (-1 = padding).
    ``known`` holds every edge of the graph (train and test, either direction, per relation).
    """

    train: EdgeList
    test: EdgeList
    candidates: np.ndarray
    test_rel: np.ndarray
    train_rel: np.ndarray
    relations: list
    known: KnownEdges
    n_entities: int
    split: str            # how the test edges were chosen
    negatives: str        # how the negatives were chosen
    cut: float | None = None
    notes: dict = field(default_factory=dict)
    strategy: str | None = None   # "uniform" / "batch" when sampled, None for a negatives file
    pool: str | None = None

    @property
    def n_negatives(self) -> int:
        return int(self.candidates.shape[1] - 1)


def split_description(kind: str, *, fraction: float | None = None, seed: int | None = None, cut=None,
                      is_date: bool = False) -> str:
    """How the test edges were chosen, in words (shown next to every number)."""
    if kind == "given":
        return "held-out edges given as test_edges"
    if kind == "negatives":
        return "the test edges named in the negatives file"
    if kind == "temporal":
        return (f"time split: train on edges before {format_time(cut, is_date)}, test on the "
                f"{fraction:.0%} of edges at or after it")
    return f"seeded random split, {1 - fraction:.0%} train / {fraction:.0%} test (seed {seed})"


def format_time(t, is_date: bool) -> str:
    """A timestamp as the user gave it: a date/time, or a number."""
    if t is None:
        return "—"
    if is_date:
        ts = pd.Timestamp(float(t), unit="s")
        return ts.strftime("%Y-%m-%d") if ts == ts.normalize() else ts.strftime("%Y-%m-%d %H:%M")
    return f"{t:g}"


def build_link_data(edges: EdgeList, n_entities: int, *, test: EdgeList | None = None,
                    negatives: np.ndarray | None = None, split: str = "auto", test_fraction: float = 0.2,
                    n_negatives: int = 100, strategy: str = "uniform", pool: str = "entities", seed: int = 0,
                    split_label: str | None = None) -> LinkData:
    """Split (unless ``test`` is given), attach or sample negatives, and index the known edges.

    ``split``: ``"auto"`` (time split when ``edges`` has timestamps, else random), ``"temporal"``
    or ``"random"``. Given test edges are removed from the training graph (so the heuristics and
    the probe never see them); the number that were also in ``edges`` is in ``notes``. Sampled
    negatives come from ``pool``: ``"entities"`` (all ids, the default) or ``"destinations"`` (the
    ids that are a destination of the test edge's relation somewhere in the graph: type-consistent
    corruption, as PyTorch-BigGraph's per-relation entity types).
    """
    cut = None
    is_date = edges.time_is_date
    if test is not None:
        codes, names = relation_codes(edges, test)
        overlap = KnownEdges.from_edges(n_entities, (test.src, test.dst, codes[1])).contains(
            edges.src, edges.dst, codes[0])
        train = edges.take(np.flatnonzero(~overlap))
        desc = split_label or split_description("given")
        notes = {"test_edges_also_in_edges": int(overlap.sum())}
    else:
        kind = ("temporal" if edges.has_time else "random") if split == "auto" else split
        if kind == "temporal":
            train, test, cut = temporal_split(edges, 1 - test_fraction)
        elif kind == "random":
            train, test = random_split(edges, test_fraction, seed=seed)
        else:
            raise ValueError(f"split must be 'auto', 'temporal' or 'random', not {split!r}")
        desc = split_description(kind, fraction=test_fraction, seed=seed, cut=cut, is_date=is_date)
        notes = {}
    if not len(test):
        raise InputError("no test edges; expected test_edges, negatives, or an edge list large enough to split")
    (train_rel, test_rel), names = relation_codes(train, test)
    known = KnownEdges.from_edges(n_entities, (train.src, train.dst, train_rel), (test.src, test.dst, test_rel))
    if negatives is None:
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, not {pool!r}")
        negatives = np.empty((len(test), n_negatives), np.int64)
        groups = [np.arange(len(test))] if pool == "entities" else [np.flatnonzero(test_rel == c)
                                                                    for c in np.unique(test_rel)]
        for g in groups:
            dsts = None if pool == "entities" else np.r_[train.dst[train_rel == test_rel[g[0]]], test.dst[g]]
            if dsts is not None and len(np.unique(dsts)) < 3:  # too few destinations to corrupt with: use all ids
                dsts = None
            negatives[g] = sample_negatives(test.src[g], test.dst[g], n_entities, n_negatives, strategy=strategy,
                                            pool=dsts, seed=seed + int(test_rel[g[0]]))
        neg_desc = (f"{n_negatives} {'uniform' if strategy == 'uniform' else 'same-batch'} negatives per test edge "
                    f"drawn from {'all ids' if pool == 'entities' else 'the destinations of its relation'} "
                    f"(destination corrupted, seed {seed})")
    else:
        m = negatives.shape[1]
        counts = (negatives >= 0).sum(1)
        neg_desc = (f"{m} fixed negatives per test edge from the negatives file" if counts.min() == m else
                    f"{counts.min()}–{m} fixed negatives per test edge from the negatives file")
        strategy = pool = None
    candidates = np.hstack([test.dst[:, None], negatives]).astype(np.int64)
    return LinkData(train, test, candidates, test_rel, train_rel, names, known, n_entities, desc, neg_desc, cut,
                    dict(notes, **{f"edges_{k}": v for k, v in edges.notes.items()}), strategy, pool)


def link_data_from_set(es, *, split: str = "auto", test_fraction: float = 0.2, n_negatives: int = 100,
                       strategy: str = "uniform", pool: str = "entities", seed: int = 0) -> tuple[LinkData, EdgeList]:
    """Read ``edges`` (and ``test_edges``, ``negatives`` when given) of an embedding set and build
    :class:`LinkData`. Returns it with the full edge list."""
    f = es.fields
    edges = read_edges(f["edges"], es.ids, label=field_label(f["edges"], "edges"))
    test = read_edges(f["test_edges"], es.ids, label=field_label(f["test_edges"], "test_edges")) \
        if "test_edges" in f else None
    negs = None
    label = None
    if "negatives" in f:
        test, negs = read_negatives(f["negatives"], es.ids, test, label=field_label(f["negatives"], "negatives"))
        label = None if "test_edges" in f else split_description("negatives")
    data = build_link_data(edges, es.n, test=test, negatives=negs, split=split, test_fraction=test_fraction,
                           n_negatives=n_negatives, strategy=strategy, pool=pool, seed=seed, split_label=label)
    return data, edges


def field_label(path, field_name: str) -> str:
    return f"{Path(path).name} ({field_name})"


# ---------------------------------------------------------------------------------------------
# Demo side data
# ---------------------------------------------------------------------------------------------

def demo_side_data(folder, seed: int = 0) -> dict:
    """Write ``edges.csv`` for the demo set into ``folder``; return the manifest entries to add.

    A stochastic block model over the demo's users and items whose blocks are the ``label``
    (genre) column, with about 8 edges per entity arriving over the 12 months of 2024 and a
    changing block affinity: at time t (fraction of the year) the weight of a within-genre link is
    30 − 25 t³ and that of a link between related genres (``demo.RELATED_GENRES``) 0.3 + 4.7 t³
    (tastes broaden, slowly at first and quickly in the last quarter); other genre pairs stay at
    0.3. Each edge picks a uniform source, a destination genre with probability proportional to
    the affinity at its time, and a uniform member of that genre (no self-loops, each pair once).
    ``relation`` names the kinds of the two ends (``user-user``, ``user-item`` pointing from the
    user, ``item-item``). The demo vectors cluster by genre, so they rank these edges above
    chance, less well for later edges; user–item edges suffer from the demo's planted popularity
    anisotropy (every user vector leans toward the same direction, so with negatives drawn from
    all ids other users outscore the true item). Ids, kinds and genres are read from ``folder/metadata.csv`` when it
    exists (so the edges match a demo written with other sizes), else re-created with
    :func:`embeval_report.demo.streaming_embeddings`.
    """
    from .demo import GENRES, RELATED_GENRES, streaming_embeddings

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta_path = folder / "metadata.csv"
    if meta_path.exists():
        meta = pd.read_csv(meta_path, dtype={"id": str}, keep_default_na=False)
    else:
        meta = streaming_embeddings(seed=seed)[1]
    ids, kinds = meta["id"].to_numpy(dtype=object), meta["kind"].to_numpy(dtype=object)
    genre = pd.Index(GENRES).get_indexer(meta["label"])
    n, G = len(ids), len(GENRES)
    rng = np.random.default_rng([seed, 90, 0])
    n_edges = 8 * n
    t = np.sort(rng.random(n_edges))  # fraction of the year
    related = np.zeros((G, G), bool)
    for pair in RELATED_GENRES:
        a, b = (GENRES.index(g) for g in pair)
        related[a, b] = related[b, a] = True
    members = [np.flatnonzero(genre == g) for g in range(G)]
    src = rng.integers(0, n, n_edges)
    w_in, w_rel = 30.0 - 25.0 * t ** 3, 0.3 + 4.7 * t ** 3   # affinity over time (drift speeds up late)
    g_src = genre[src]
    W = np.where(related[g_src], w_rel[:, None], 0.3)       # (E, G) affinity of each edge's source genre
    W[np.arange(n_edges), g_src] = w_in
    W /= W.sum(1, keepdims=True)
    g_dst = (W.cumsum(1) > rng.random(n_edges)[:, None]).argmax(1)
    dst = np.array([members[g][rng.integers(0, len(members[g]))] for g in g_dst])
    keep = src != dst
    src, dst, t = src[keep], dst[keep], t[keep]
    flip = (kinds[src] == "item") & (kinds[dst] == "user")  # user-item edges point from the user to the item
    src, dst = np.where(flip, dst, src), np.where(flip, src, dst)
    pair = pd.DataFrame({"a": np.minimum(src, dst), "b": np.maximum(src, dst)})
    first = ~pair.duplicated().to_numpy()
    src, dst, t = src[first], dst[first], t[first]
    start = pd.Timestamp("2024-01-01")
    stamps = start + pd.to_timedelta(np.round(t * 366 * 24 * 3600), unit="s")
    kind_pair = kinds[src] + "-" + kinds[dst]
    pd.DataFrame({"src": ids[src], "dst": ids[dst], "relation": kind_pair,
                  "timestamp": stamps.strftime("%Y-%m-%dT%H:%M:%S")}).to_csv(folder / "edges.csv", index=False)
    return {"edges": "edges.csv"}
