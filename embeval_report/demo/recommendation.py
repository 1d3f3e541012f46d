"""Demo side data of the recommendation chapter: a year of viewing on the demo platform, with dates.

**Planted problem** — consumption is popularity-driven, the vectors are not. In the demo world
(:func:`~embeval_report.demo.world.streaming_world`) every view follows
``softmax(3 preference · item + 2 log popularity)``: popularity dominates what people watch, but
item popularity is drawn independently of the item vectors, and each user vector is the mean of the
(mostly blockbuster) items the user watched, so all users share one dominant direction. Ranking the
catalogue by user·item therefore hands nearly everybody the same few niche items that happen to lie
along that direction. The chapter should find: a most-popular list beating the embeddings by a wide
margin, low catalogue coverage with a high Gini index of exposure and low personalization, and
recommendations far less popular than what the users consume (ARP ratio well below 1).

``interactions.csv`` (``user_id, item_id, timestamp``): each user's distinct watched items from the
world's view counts — the histories the vectors were built from — dated over January–November 2025,
followed by two new titles per user watched in December, drawn from the same viewing model among the
titles the user had not watched. The chapter's time split holds out each user's latest two items, so
the test items are exactly the December discoveries, which the vectors never saw.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .world import streaming_world

#: new titles per user in the held-out month
NEW_TITLES = 2


def demo_side_data(folder, seed: int = 0) -> dict:
    """Write ``interactions.csv`` into ``folder`` (which holds the demo's vectors, ids and metadata);
    return the manifest entries to add (see the module docstring)."""
    folder = Path(folder)
    w = streaming_world(seed=seed)
    n_users, n_items = w.counts.shape
    rng = np.random.default_rng([seed, 87, 0])
    watched = w.counts > 0
    u, i = np.nonzero(watched)
    day = rng.integers(0, 334, len(u))  # 2025-01-01 .. 2025-11-30
    probs = np.where(watched, 0.0, w.view_probabilities())
    probs /= probs.sum(1, keepdims=True)
    new = np.stack([rng.choice(n_items, NEW_TITLES, replace=False, p=p) for p in probs])
    fu = np.repeat(np.arange(n_users), NEW_TITLES)
    fday = 334 + rng.integers(0, 31, len(fu))  # December
    users = np.concatenate([u, fu])
    items = np.concatenate([i, new.ravel()])
    days = np.concatenate([day, fday])
    order = np.lexsort((items, days))
    dates = np.datetime64("2025-01-01") + days[order].astype("timedelta64[D]")
    pd.DataFrame({"user_id": [f"user_{k:05d}" for k in users[order]],
                  "item_id": [f"item_{k:05d}" for k in items[order]],
                  "timestamp": dates.astype(str)}).to_csv(folder / "interactions.csv", index=False)
    return {"interactions": "interactions.csv"}
