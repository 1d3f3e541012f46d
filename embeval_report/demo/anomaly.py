"""Demo side data of the anomaly chapter: catalogue-crawling bot accounts, labelled by a trust-and-safety team.

**Planted problem** — 2 % of the users (80 accounts) are bots that crawl the catalogue across genres
instead of following one taste. They are chosen, by a separate seeded generator, among the 200 users
whose *latent* viewing histories (the demo world's view counts, not the vectors) spread most evenly
over the genres: the bots were never planted in the vectors, which stay exactly as the demo wrote
them. Their vectors are view-weighted means over many genres, so they sit *between* the genre
clusters — off the manifold of single-taste viewers, yet close to the overall mean direction. The
chapter should find that the local baselines (k-NN distance, LOF) catch them well while the distance
to the centroid ranks them as *more* normal than the rest (ROC-AUC below 0.5).

What is written (the vectors are not touched):

* ``metadata.csv`` gains three columns (read, added, written back; every other column unchanged):
  ``is_anomaly`` (1 bot, 0 normal user, blank for items: unlabelled), ``event`` (the bot ring an account
  belongs to, 8 rings, blank otherwise) and ``timestamp`` (the date an account was first seen in 2024;
  each ring starts on its own onset date and its accounts appear over the following weeks), so the
  chapter measures the time to detection of each ring.
* ``anomaly_scores.csv`` — the platform's current rules engine (``id,rules_engine``): how many distinct
  genres an account watched in the last month (a 30 % thinning of its views). A coarse, heavily tied
  integer score that the chapter compares with the embedding baselines.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .world import streaming_world

N_BOTS = 80
CANDIDATES = 200
N_RINGS = 8
YEAR_START = np.datetime64("2024-01-01")
DAYS = 366


def genre_entropy(counts: np.ndarray, item_genre: np.ndarray, n_genres: int) -> np.ndarray:
    """Shannon entropy (nats) of each user's views over the genres (0 for a user without views)."""
    G = np.stack([counts[:, item_genre == g].sum(1) for g in range(n_genres)], axis=1)
    total = G.sum(1, keepdims=True)
    p = np.divide(G, total, out=np.zeros_like(G), where=total > 0)
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(1)


def demo_side_data(folder, seed: int = 0) -> dict:
    """Add ``is_anomaly``, ``event`` and ``timestamp`` to ``folder/metadata.csv`` and write
    ``anomaly_scores.csv`` (see the module docstring); return the manifest entries to add."""
    folder = Path(folder)
    meta = pd.read_csv(folder / "metadata.csv", dtype={"id": str}, keep_default_na=False)
    users = np.flatnonzero(meta["kind"].to_numpy() == "user")
    world = streaming_world(n_users=len(users), n_items=int((meta["kind"] == "item").sum()), seed=seed)
    n_genres = len(world.centres)
    rng = np.random.default_rng([seed, 88, 0])
    entropy = genre_entropy(world.counts, world.item_genre, n_genres)
    bots = rng.choice(np.argsort(-entropy, kind="stable")[:CANDIDATES], N_BOTS, replace=False)
    is_bot = np.zeros(len(users), bool)
    is_bot[bots] = True
    # first-seen dates: normal users over the year; each ring from its onset over a few weeks
    day = rng.integers(0, DAYS, len(users)).astype(float)
    ring = np.full(len(users), "", dtype=object)
    onsets = np.sort(rng.integers(10, 280, N_RINGS))
    member = rng.integers(0, N_RINGS, N_BOTS)
    for b, r in zip(bots, member):
        ring[b] = f"ring_{r + 1:02d}"
        day[b] = min(DAYS - 1, onsets[r] + rng.exponential(12.0))
    for r in range(N_RINGS):  # each ring's first account appears on its onset day
        first = bots[member == r]
        if len(first):
            day[first[np.argmin(day[first])]] = onsets[r]
    dates = (YEAR_START + day.astype(int).astype("timedelta64[D]")).astype(str)
    n = len(meta)
    label, event, stamp = np.full(n, "", dtype=object), np.full(n, "", dtype=object), np.full(n, "", dtype=object)
    label[users] = np.where(is_bot, "1", "0")
    event[users] = ring
    stamp[users] = dates
    meta["is_anomaly"], meta["event"], meta["timestamp"] = label, event, stamp
    meta.to_csv(folder / "metadata.csv", index=False)
    # the rules engine: distinct genres watched in the last month (a 30 % thinning of the views)
    last_month = rng.binomial(world.counts.astype(np.int64), 0.3)
    genres = np.stack([last_month[:, world.item_genre == g].sum(1) for g in range(n_genres)], axis=1)
    pd.DataFrame({"id": meta["id"].to_numpy()[users], "rules_engine": (genres > 0).sum(1)}).to_csv(
        folder / "anomaly_scores.csv", index=False)
    return {"anomaly_scores": "anomaly_scores.csv"}
