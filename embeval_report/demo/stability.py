"""Demo side data of the stability chapters: runs, tranches and vocabularies."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .world import streaming_embeddings, streaming_world, unit_vectors

# ---------------------------------------------------------------------------------------------
# Demo side data
# ---------------------------------------------------------------------------------------------

def _write_table(path: Path, ids, X, dtype=np.float32) -> None:
    df = pd.DataFrame(np.asarray(X, dtype), columns=[f"d{j}" for j in range(X.shape[1])])
    df.insert(0, "id", list(ids))
    df.to_parquet(path, index=False)


def demo_side_data(folder, seed: int = 0) -> dict:
    """Write the demo's stability side data into ``folder``; return the manifest entries (paths relative).

    Generator (a documented variant of :func:`embeval_report.demo.streaming_embeddings`, replayed
    with the same seed): each **run** r re-trains the item vectors with run-specific noise whose
    scale shrinks with the item's view count, :math:`\\sigma_i = 0.1 / \\sqrt{1 + c_i/5}` per
    component (popular items are pinned down by many views, niche items barely), re-normalises
    them, recomputes every user as the view-weighted mean of the same views, and applies a random
    rotation (runs are identified only up to rotation). Runs 1–3 are ``.npy`` in the manifest's id
    order; run 4 is a parquet table with an ``id`` column that lacks 8 retired items and adds 3
    new ones, so the report has missing and extra ids to show.

    **Tranches**: two runs (``A`` ends in the main set, ``B`` in run 1) with checkpoints
    ``tranche 1..3`` before the final one. Items launch in waves by popularity (the 60 % most
    viewed in tranche 1, the next 25 % in tranche 2, the rest in tranche 3); a checkpoint holds
    the final vectors plus noise that shrinks with the time since the item arrived, users are
    recomputed from views of the items available so far (a user without such views is absent).
    Checkpoints are stored as float16 parquet tables to keep the demo small.

    **Vocabularies**: ``popular items`` (the 100 most viewed) and ``niche items`` (items with no
    views at all).
    """
    from scipy.stats import ortho_group

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vectors, meta = streaming_embeddings(seed=seed)
    world = streaming_world(seed=seed)
    items, counts = world.items, world.counts
    n_users = counts.shape[0]
    ids = meta["id"].to_numpy()
    item_ids = ids[n_users:]
    views = counts.sum(0)
    dim = items.shape[1]
    rng = np.random.default_rng([seed, 70])
    sigma = 0.1 / np.sqrt(1.0 + views / 5.0)

    def run_vectors(noise_items):
        its = unit_vectors(items + noise_items)
        return its, world.user_vectors(counts, its)

    (folder / "runs").mkdir(exist_ok=True)
    run_paths, run_finals = [], []
    for r in range(1, 5):
        its, us = run_vectors(sigma[:, None] * rng.standard_normal(items.shape))
        Q = ortho_group.rvs(dim, random_state=rng.integers(2**31))
        X = (np.vstack([us, its]) @ Q).astype(np.float32)
        run_finals.append((its, Q))
        if r < 4:
            path = f"runs/run_{r}.npy"
            np.save(folder / path, X)
        else:
            retired = rng.choice(np.arange(n_users, len(ids)), 8, replace=False)
            keep = np.setdiff1d(np.arange(len(ids)), retired)
            new = unit_vectors(rng.standard_normal((3, dim))).astype(np.float32)
            path = f"runs/run_{r}.parquet"
            _write_table(folder / path, list(ids[keep]) + [f"item_{len(item_ids) + j:05d}" for j in range(3)],
                         np.vstack([X[keep], new]))
        run_paths.append(path)

    # tranches: item launch waves by popularity rank
    rank = np.argsort(np.argsort(-views, kind="stable"), kind="stable")
    wave = np.where(rank < 0.6 * len(views), 0, np.where(rank < 0.85 * len(views), 1, 2))
    shrink = (1.0, 0.55, 0.3)  # noise multiplier by checkpoints since arrival
    (folder / "tranches").mkdir(exist_ok=True)
    tranche_entries = []
    finals = {"A": (items, np.eye(dim), "vectors.npy"), "B": (run_finals[0][0], run_finals[0][1], run_paths[0])}
    for run, (final_items, Q_final, final_path) in finals.items():
        for t in range(3):
            present = wave <= t
            age = np.clip(t - wave, 0, 2)
            noise = (sigma * 2.5 * np.take(shrink, age))[:, None] * rng.standard_normal(items.shape)
            its = unit_vectors(final_items + noise)
            user_counts = counts[:, present]
            has_views = user_counts.sum(1) > 0
            us = world.user_vectors(user_counts[has_views], its[present])
            Q = ortho_group.rvs(dim, random_state=rng.integers(2**31))
            X = np.vstack([us, its[present]]) @ Q
            rows = list(ids[:n_users][has_views]) + list(item_ids[present])
            path = f"tranches/run_{run}_tranche_{t + 1}.parquet"
            _write_table(folder / path, rows, X, np.float16)
            tranche_entries.append({"name": f"tranche {t + 1}", "vectors": path, "order": t + 1, "run": run})
        tranche_entries.append({"name": "final", "vectors": final_path, "order": 4, "run": run})

    popular = item_ids[np.argsort(-views, kind="stable")[:100]]
    niche = item_ids[views == 0]
    (folder / "vocabularies").mkdir(exist_ok=True)
    (folder / "vocabularies" / "popular_items.txt").write_text("\n".join(popular) + "\n")
    (folder / "vocabularies" / "niche_items.txt").write_text("\n".join(niche) + "\n")
    return {"runs": run_paths, "tranches": tranche_entries,
            "vocabularies": [{"name": "popular items", "ids": "vocabularies/popular_items.txt"},
                             {"name": "niche items", "ids": "vocabularies/niche_items.txt"}]}
