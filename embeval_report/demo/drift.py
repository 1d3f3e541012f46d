"""Demo side data of the drift chapter: monthly snapshots with a planted genre drift."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from .world import GENRES, streaming_embeddings, streaming_world, unit_vectors

# ---------------------------------------------------------------------------------------------

#: the demo's monthly snapshots: (name, timestamp)
DEMO_MONTHS = (("2024-02", "2024-02-01"), ("2024-03", "2024-03-01"), ("2024-04", "2024-04-01"),
               ("2024-05", "2024-05-01"))
#: the planted drift: this genre's items and fans move toward the other genre
DEMO_DRIFT_FROM, DEMO_DRIFT_TO = "documentary", "drama"


def demo_snapshots(seed: int = 0, *, refresh: float = 0.1, pull: tuple[float, ...] = (0.0, 0.0, 0.3, 0.7),
                   fan_refresh: tuple[float, ...] = (0.1, 0.1, 0.5, 0.8),
                   n_new: tuple[int, ...] = (0, 15, 30, 45), n_departed: tuple[int, ...] = (0, 0, 20, 40),
                   mean_views: int = 40) -> list[tuple[str, str, pd.DataFrame]]:
    """Four monthly snapshots of the demo set, as ``(name, timestamp, table: id column, d0..d63)``.

    A documented variant of :func:`embeval_report.demo.streaming_embeddings`, whose baseline it
    reproduces (checked here). Each month, **natural variation**: every user's viewing history has a
    share ``refresh`` of its views replaced by fresh views drawn from the generator's viewing
    probabilities (binomial thinning plus Poisson(``refresh`` x 40) new views), so user vectors wobble
    while their distribution stays the same; the whole space gets an arbitrary rotation (a retrained
    model's coordinates). **Planted drift** from the third month: the documentary items and the
    documentary fans' tastes are pulled toward the drama genre's centre by ``pull`` (a catalogue and
    its audience drifting into docudrama), the fans renew a larger share ``fan_refresh`` of their
    history with the new tastes, and everyone who watched those items moves with them. **Population
    drift:** new items (drawn like the generator's items, not yet watched) appear from the second month
    and items retire from the third (no longer watched, dropped from the snapshot); both accumulate.
    Drawn once per arguments and process (the drift and the monitoring side data both read them); each
    call gets its own copies of the tables.
    """
    snapshots = _demo_snapshots(seed, float(refresh), tuple(pull), tuple(fan_refresh), tuple(n_new),
                                tuple(n_departed), int(mean_views))
    return [(name, stamp, table.copy()) for name, stamp, table in snapshots]


@lru_cache(maxsize=2)
def _demo_snapshots(seed, refresh, pull, fan_refresh, n_new, n_departed, mean_views):
    """The snapshots of :func:`demo_snapshots` (arguments hashable), drawn."""
    world = streaming_world(seed=seed, mean_views=mean_views)
    items0, prefs = world.items, world.prefs
    counts0 = world.counts.astype(np.int64)
    _, meta = streaming_embeddings(seed=seed, mean_views=mean_views)
    genres = GENRES
    n_users, n_items, d = len(prefs), len(items0), items0.shape[1]
    target = unit_vectors(world.centres[[genres.index(DEMO_DRIFT_TO)]])[0]
    moving_items = world.item_genre == genres.index(DEMO_DRIFT_FROM)
    fans = world.user_genre == genres.index(DEMO_DRIFT_FROM)
    ids = meta["id"].to_numpy().astype(object)
    new_items, new_ids, retired = np.zeros((0, d)), [], np.zeros(0, dtype=np.int64)
    out = []
    for t, (name, stamp) in enumerate(DEMO_MONTHS):
        mrng = np.random.default_rng([seed, 80, t])
        items, p = items0.copy(), prefs.copy()
        if pull[t]:
            items[moving_items] = unit_vectors((1 - pull[t]) * items[moving_items] + pull[t] * target)
            p[fans] = unit_vectors((1 - pull[t]) * p[fans] + pull[t] * target)
        more = n_departed[t] - len(retired)
        if more > 0:
            retired = np.r_[retired, mrng.choice(np.setdiff1d(np.arange(n_items), retired), more, replace=False)]
        probs = world.view_probabilities(p, items, unavailable=retired)
        share = np.where(fans, fan_refresh[t], refresh)
        kept = mrng.binomial(counts0, (1 - share)[:, None])
        fresh = mrng.multinomial(mrng.poisson(share * mean_views), probs)  # row by row, as a loop over users
        counts = kept + fresh
        empty = counts.sum(1) == 0
        counts[empty] = counts0[empty]
        users = unit_vectors(counts @ items)
        extra = n_new[t] - len(new_ids)
        if extra > 0:
            genre = mrng.integers(0, len(genres), extra)
            new_items = np.vstack([new_items, unit_vectors(world.centres[genre] + 0.9 * mrng.standard_normal((extra, d)))])
            new_ids += [f"item_{n_items + len(new_ids) + j:05d}" for j in range(extra)]
        keep_items = np.setdiff1d(np.arange(n_items), retired)
        rows = np.vstack([users, items[keep_items], new_items])
        row_ids = np.r_[ids[:n_users], ids[n_users + keep_items], np.asarray(new_ids, dtype=object)]
        Q, _ = np.linalg.qr(mrng.standard_normal((d, d)))
        table = pd.DataFrame((rows @ Q).astype(np.float32), columns=[f"d{j}" for j in range(d)])
        table.insert(0, "id", row_ids)
        out.append((name, stamp, table))
    return tuple(out)


def demo_side_data(folder, seed: int = 0) -> dict:
    """Write the demo's monthly snapshots (``snapshot_<month>.parquet``: an ``id`` column, then d0..d63)
    into ``folder``; return the manifest entries ``{"snapshots": [{name, vectors, timestamp}, ...]}``
    with paths relative to ``folder``. The baseline is :func:`embeval_report.demo.streaming_embeddings`
    with its defaults and ``seed``; :func:`demo_snapshots` describes the months and the planted drift.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, stamp, table in demo_snapshots(seed):
        path = f"snapshot_{name}.parquet"
        table.to_parquet(folder / path, index=False)
        entries.append({"name": name, "vectors": path, "timestamp": stamp})
    return {"snapshots": entries}
