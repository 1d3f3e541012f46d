"""Demo side data of the retrieval chapter: search queries for the demo's titles, with graded judgements."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

#: query styles: share of queries, noise added to the target title's vector (relative to its unit norm)
STYLES = {"title search": (0.5, 0.6), "vague description": (0.5, 1.3)}


def demo_side_data(folder, seed: int = 0, n_queries: int = 400) -> dict:
    """Write ``queries.npy``, ``query_ids.txt``, ``query_metadata.csv`` and ``qrels.txt`` into ``folder``
    (which holds the demo's ``vectors.npy`` and ``metadata.csv``); return the manifest entries to add.

    Each query looks for one item (a title): its vector is the item's vector plus Gaussian noise, small
    for a "title search" and large for a "vague description" (the ``group`` column of the query
    metadata). Judges marked the target grade 2, three other titles of its genre grade 1 and two
    titles of other genres grade 0; ten further queries name titles no longer in the catalogue and
    have only grade-0 judgements (they are left out of the means and counted). The corpus is the whole
    demo set, users included: with the planted popularity direction, user vectors crowd the rankings.
    """
    folder = Path(folder)
    vectors = np.load(folder / "vectors.npy")
    meta = pd.read_csv(folder / "metadata.csv", dtype={"id": str}, keep_default_na=False)
    rng = np.random.default_rng([seed, 95, 0])
    items = np.flatnonzero(meta["kind"].to_numpy() == "item")
    genre = meta["label"].to_numpy()
    targets = rng.choice(items, n_queries, replace=False)
    styles = rng.choice(list(STYLES), n_queries, p=[share for share, _ in STYLES.values()])
    noise = np.array([STYLES[s][1] for s in styles])[:, None]
    d = vectors.shape[1]
    Q = vectors[targets] + noise * rng.standard_normal((n_queries, d)) / np.sqrt(d)
    Q = (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32)
    qids = [f"query_{i:04d}" for i in range(n_queries)]
    ids = meta["id"].to_numpy()
    lines = []
    for q, t in zip(qids, targets):
        same = items[(genre[items] == genre[t]) & (items != t)]
        other = items[genre[items] != genre[t]]
        lines.append(f"{q} 0 {ids[t]} 2")
        lines += [f"{q} 0 {ids[j]} 1" for j in rng.choice(same, 3, replace=False)]
        lines += [f"{q} 0 {ids[j]} 0" for j in rng.choice(other, 2, replace=False)]
    retired = [f"query_{n_queries + i:04d}" for i in range(10)]
    Q = np.vstack([Q, Q[rng.choice(n_queries, 10)]])
    for q in retired:
        lines += [f"{q} 0 {ids[j]} 0" for j in rng.choice(items, 2, replace=False)]
    np.save(folder / "queries.npy", Q)
    (folder / "query_ids.txt").write_text("\n".join(qids + retired) + "\n")
    pd.DataFrame({"id": qids + retired, "group": list(styles) + ["retired title"] * 10}).to_csv(
        folder / "query_metadata.csv", index=False)
    (folder / "qrels.txt").write_text("\n".join(lines) + "\n")
    return {"queries": {"vectors": "queries.npy", "ids": "query_ids.txt", "metadata": "query_metadata.csv"},
            "qrels": "qrels.txt"}
