"""Demo side data of the link-prediction chapters: a timestamped block-model graph."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .world import GENRES, RELATED_GENRES, streaming_embeddings

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
