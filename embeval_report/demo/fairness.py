"""Demo side data of the fairness chapter: a region and an age band for every user, and three WEAT tests.

**Planted problem** — representation bias against one region. StreamCo's users get a ``region``
(north, south, east, islands, plus 12 ``overseas`` users, a group too small to compare) and an
``age_band`` (18–34, 35–54, 55+) in ``metadata.csv`` (items get neither). The **islands** (12 % of the
users) have a small local catalogue: 40 % of them are drawn from the users whose histories hold at most
one title of their favourite genre (the rest at random). A user's vector is the mean of the titles they
watched, so those vectors say little about their taste: the node-classification probe predicts the
islands users' favourite genre about 14 points less often than the other regions' (a *problematic* gap
by the seed's bands), and they sit less often in other entities' neighbour lists. The vectors are not
changed; only who lives where (chosen from the demo world's viewing counts, never from the vectors).

The age band follows taste (historical bias in the viewing data): younger users lean to animation,
sci-fi, horror and comedy, older users to documentary, drama and romance. ``association_tests.yaml``
holds three WEAT tests over item ids (targets) and user ids (attributes): animation vs documentary
titles against younger vs older viewers (a strong association the chapter should find, exact
permutation test), comedy vs drama titles against north vs south viewers (no association planted;
24 target titles, so the p-value is sampled), and horror vs romance titles against younger vs older
viewers, which lists four retired titles that have no vector (counted as out of vocabulary).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from .world import streaming_world

REGIONS = ("north", "south", "east")
#: share of users in the planted region, and the share of those drawn from the users with at most
#: one view of their favourite genre
ISLANDS_SHARE = 0.12
ISLANDS_FROM_LOW_SIGNAL = 0.4
OVERSEAS = 12
YOUNG_GENRES = ("animation", "sci-fi", "horror", "comedy")
OLD_GENRES = ("documentary", "drama", "romance")
AGE_BANDS = ("18–34", "35–54", "55+")


def demo_side_data(folder, seed: int = 0) -> dict:
    """Add ``region`` and ``age_band`` to ``folder/metadata.csv`` (read, add, write back; the vectors are
    untouched), write ``association_tests.yaml``, and return the manifest entries to add."""
    folder = Path(folder)
    path = folder / "metadata.csv"
    meta = pd.read_csv(path, dtype={"id": str}, keep_default_na=False)
    rng = np.random.default_rng([seed, 98, 0])
    users = np.flatnonzero(meta["kind"].to_numpy() == "user")
    world = streaming_world(seed=seed)
    if len(world.counts) != len(users) or not np.array_equal(world.counts.sum(1),
                                                             meta["frequency"].to_numpy(float)[users]):
        raise ValueError("the metadata does not come from the demo world of this seed; write it with write_demo")
    own = (world.counts * (world.item_genre[None, :] == world.user_genre[:, None])).sum(1)
    n_islands = int(round(ISLANDS_SHARE * len(users)))
    n_low = int(round(ISLANDS_FROM_LOW_SIGNAL * n_islands))
    low = rng.choice(np.flatnonzero(own <= 1), n_low, replace=False)
    rest = rng.choice(np.setdiff1d(np.arange(len(users)), low), n_islands - n_low, replace=False)
    islands = np.concatenate([low, rest])
    region = rng.choice(REGIONS, len(users), p=[0.4, 0.3, 0.3]).astype(object)
    region[islands] = "islands"
    others = np.setdiff1d(np.arange(len(users)), islands)
    region[rng.choice(others, OVERSEAS, replace=False)] = "overseas"
    genre = meta["label"].to_numpy()[users]
    p_age = {g: (0.6, 0.3, 0.1) for g in YOUNG_GENRES} | {g: (0.1, 0.3, 0.6) for g in OLD_GENRES}
    age = np.array([rng.choice(AGE_BANDS, p=p_age.get(g, (1 / 3, 1 / 3, 1 / 3))) for g in genre], dtype=object)
    meta["region"], meta["age_band"] = "", ""
    meta.loc[users, "region"] = region
    meta.loc[users, "age_band"] = age
    meta.to_csv(path, index=False)

    ids = meta["id"].to_numpy()
    item_rows = np.flatnonzero(meta["kind"].to_numpy() == "item")
    item_genre = meta["label"].to_numpy()[item_rows]

    def titles(g, n):
        return [str(ids[i]) for i in rng.choice(item_rows[item_genre == g], n, replace=False)]

    def viewers(mask, n=60):
        return [str(ids[users[i]]) for i in rng.choice(np.flatnonzero(mask), n, replace=False)]

    young, old = age == "18–34", age == "55+"
    retired = [f"item_{9990 + i:05d}" for i in range(4)]
    tests = [
        {"name": "animation vs documentary titles ~ younger vs older viewers",
         "targets": {"animation": titles("animation", 8), "documentary": titles("documentary", 8)},
         "attributes": {"viewers 18–34": viewers(young), "viewers 55+": viewers(old)}},
        {"name": "comedy vs drama titles ~ north vs south viewers",
         "targets": {"comedy": titles("comedy", 12), "drama": titles("drama", 12)},
         "attributes": {"north viewers": viewers(region == "north"), "south viewers": viewers(region == "south")}},
        {"name": "horror vs romance titles ~ younger vs older viewers",
         "targets": {"horror": titles("horror", 8) + retired[:2], "romance": titles("romance", 8) + retired[2:]},
         "attributes": {"viewers 18–34": viewers(young), "viewers 55+": viewers(old)}},
    ]
    (folder / "association_tests.yaml").write_text(
        "# StreamCo association tests (WEAT): targets are titles (item ids), attributes are viewers (user ids)\n"
        + yaml.safe_dump({"tests": tests}, sort_keys=False, allow_unicode=True))
    return {"fairness": {"attributes": ["region", "age_band"]}, "association_tests": "association_tests.yaml"}
