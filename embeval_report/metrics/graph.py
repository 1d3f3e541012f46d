r"""Graph side of link prediction: known edges, splits, negative sampling, heuristics, :class:`LinkData`.

The edges arrive validated (:mod:`embeval_report.io.graph` reads them; :mod:`embeval_report.io.side_data`
loads them before any chapter runs). This module turns them into an evaluation protocol: a split
into training and test edges (given, by time, or seeded random), the negatives of each test edge
(fixed from a file, or sampled), and the index of every known edge used for filtered ranks and
the false-negative rate.

Conventions: the three scores are symmetric, :math:`s(u, v) = s(v, u)`, so an edge is *known*
(for filtered ranks, false negatives and the heuristics) in either direction; with a ``relation``
column an edge is the triple (src, relation, dst) and knowledge is per relation, as in
knowledge-graph evaluation (Bordes et al. 2013).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..errors import InputError
from ..io.graph import POOLS, STRATEGIES, EdgeList

#: entities a negative pool needs: a negative differs from both ends of its test edge
MIN_POOL = 3

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
    if len(pool) < MIN_POOL:
        raise ValueError(f"the negative pool needs at least {MIN_POOL} entities")
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
#: LaTeX of each heuristic; C_uv are the common neighbours of u and v (no \cap: pandoc's Typst output of it
#: is a symbol name that current Typst no longer knows)
HEURISTIC_FORMULAS = {
    "common_neighbours": r"|C_{uv}|", "jaccard": r"|C_{uv}| / (|N(u)| + |N(v)| - |C_{uv}|)",
    "adamic_adar": r"\sum_{w \in C_{uv}} 1 / \log |N(w)|", "resource_allocation": r"\sum_{w \in C_{uv}} 1 / |N(w)|",
    "preferential_attachment": r"|N(u)| \cdot |N(v)|"}
HEURISTIC_SHORT = {"common_neighbours": "common neighbours", "jaccard": "Jaccard", "adamic_adar": "Adamic–Adar",
                   "resource_allocation": "resource allocation", "preferential_attachment": "preferential attachment"}


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
        too_few = []
        for g in groups:
            dsts = None if pool == "entities" else np.r_[train.dst[train_rel == test_rel[g[0]]], test.dst[g]]
            if dsts is not None and len(np.unique(dsts)) < MIN_POOL:  # too few destinations to corrupt with: all ids
                dsts = None
                too_few.append(names[test_rel[g[0]]] if names else "(all edges)")
            negatives[g] = sample_negatives(test.src[g], test.dst[g], n_entities, n_negatives, strategy=strategy,
                                            pool=dsts, seed=seed + int(test_rel[g[0]]))
        neg_desc = (f"{n_negatives} {'uniform' if strategy == 'uniform' else 'same-batch'} negatives per test edge "
                    f"drawn from {'all ids' if pool == 'entities' else 'the destinations of its relation'} "
                    f"(destination corrupted, seed {seed})")
        if too_few:
            neg_desc += (f"; all ids for {', '.join(too_few)}, with fewer than {MIN_POOL} distinct destinations")
            notes["destination_pool_too_small"] = too_few
    else:
        m = negatives.shape[1]
        counts = (negatives >= 0).sum(1)
        neg_desc = (f"{m} fixed negatives per test edge from the negatives file" if counts.min() == m else
                    f"{counts.min()}–{m} fixed negatives per test edge from the negatives file")
        strategy = pool = None
    candidates = np.hstack([test.dst[:, None], negatives]).astype(np.int64)
    return LinkData(train, test, candidates, test_rel, train_rel, names, known, n_entities, desc, neg_desc, cut,
                    dict(notes, **{f"edges_{k}": v for k, v in edges.notes.items()}), strategy, pool)


def link_data(side, n_entities: int, *, split: str = "auto", test_fraction: float = 0.2, n_negatives: int = 100,
              strategy: str = "uniform", pool: str = "entities", seed: int = 0) -> LinkData:
    """:class:`LinkData` from validated side data (``side.edges``, and ``side.test_edges`` /
    ``side.negatives`` when given; see :class:`embeval_report.io.side_data.SideData`).

    With a negatives file its test edges are the test edges (the given ``test_edges``, or the
    distinct ``(src, dst)`` of the file) and its negatives are used as they are.
    """
    negatives = getattr(side, "negatives", None)
    given = getattr(side, "test_edges", None)
    test = given if negatives is None else negatives.test
    label = split_description("negatives") if negatives is not None and given is None else None
    return build_link_data(side.edges, n_entities, test=test,
                           negatives=None if negatives is None else negatives.candidates, split=split,
                           test_fraction=test_fraction, n_negatives=n_negatives, strategy=strategy, pool=pool,
                           seed=seed, split_label=label)
