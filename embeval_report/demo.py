"""The built-in demo embedding set: a streaming platform's users and items (no downloads).

Follows seed 000's running example (§217.0.11, ``simulate_streaming_user_embeddings``): item
embeddings cluster by genre, item popularity is Zipf-distributed, and each user's embedding
is the view-count-weighted mean of the items they watched, where views follow
``softmax(preference · item + w · log popularity)``.

**Planted problem** — popularity-driven anisotropy: the popularity weight pulls every
viewing history toward the same few blockbusters, so user vectors share one dominant
direction (high APCS, low participation ratio), exactly the collapse the seed's Figure 217.5
shows. The demo report's isotropy chapter should find it and all-but-the-top should relieve it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

GENRES = ("drama", "comedy", "thriller", "documentary", "sci-fi", "animation", "romance", "horror")


def streaming_embeddings(n_users: int = 4000, n_items: int = 1000, dim: int = 64, *, popularity_skew: float = 1.0,
                         popularity_weight: float = 2.0, mean_views: int = 40, seed: int = 0
                         ) -> tuple[np.ndarray, pd.DataFrame]:
    """User and item vectors (users first) and their metadata table (``id`` column first)."""
    rng = np.random.default_rng(seed)
    n_genres = len(GENRES)
    centres = rng.standard_normal((n_genres, dim))
    item_genre = rng.integers(0, n_genres, n_items)
    items = centres[item_genre] + 0.9 * rng.standard_normal((n_items, dim))
    items /= np.linalg.norm(items, axis=1, keepdims=True)
    popularity = 1.0 / np.arange(1, n_items + 1) ** popularity_skew
    popularity /= popularity.sum()
    rng.shuffle(popularity)  # popularity is not tied to item order or genre
    user_genre = rng.integers(0, n_genres, n_users)
    prefs = centres[user_genre] + 0.7 * rng.standard_normal((n_users, dim))
    prefs /= np.linalg.norm(prefs, axis=1, keepdims=True)
    logits = 3.0 * prefs @ items.T + popularity_weight * np.log(popularity)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    views = np.maximum(rng.poisson(mean_views, n_users), 1)
    counts = np.stack([rng.multinomial(v, p) for v, p in zip(views, probs)]).astype(float)
    users = counts @ items / counts.sum(1, keepdims=True)
    users /= np.linalg.norm(users, axis=1, keepdims=True)
    vectors = np.vstack([users, items]).astype(np.float32)
    meta = pd.DataFrame({
        "id": [f"user_{i:05d}" for i in range(n_users)] + [f"item_{i:05d}" for i in range(n_items)],
        "kind": ["user"] * n_users + ["item"] * n_items,
        "label": [GENRES[g] for g in user_genre] + [GENRES[g] for g in item_genre],
        "frequency": np.concatenate([views, counts.sum(0)]).astype(int),
        "title": [f"viewer #{i}" for i in range(n_users)]
                 + [f"Title {i} <{GENRES[g]}> & \"friends\"" for i, g in enumerate(item_genre)],
    })
    return vectors, meta


def write_demo(folder, *, seed: int = 0, **kw) -> Path:
    """Write the demo set (vectors.npy, ids.txt, metadata.csv, manifest.yaml); return the manifest."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vectors, meta = streaming_embeddings(seed=seed, **kw)
    np.save(folder / "vectors.npy", vectors)
    (folder / "ids.txt").write_text("\n".join(meta["id"]) + "\n")
    meta.to_csv(folder / "metadata.csv", index=False)
    manifest = {
        "name": "StreamCo users and items (demo)",
        "vectors": "vectors.npy",
        "ids": "ids.txt",
        "metadata": "metadata.csv",
    }
    path = folder / "manifest.yaml"
    path.write_text("# embeval-report demo: a streaming platform's user and item embeddings\n"
                    + yaml.safe_dump(manifest, sort_keys=False))
    return path
