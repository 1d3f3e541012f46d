"""Demo side data of the human-evaluation chapter: six raters grade how similar two titles are (0–4).

The editorial team graded 300 pairs of catalogue titles on the seed's relevance scale (seed 001 §21.3.1,
0 = not related … 4 = interchangeable). The true grade follows the generator's genre structure, like
:func:`embeval_report.demo.world.editorial_judgements`: 3 or 4 for two titles of the same genre, 2 for
related genres (:data:`~embeval_report.demo.world.RELATED_GENRES`), 0 or 1 otherwise. Every pair is graded
by 4 of the 6 raters, each rater's session in a random order (``position``), with the time spent
(``seconds``); 45 pairs (15 %, the seed's "10–15 % gold standard tasks") carry a ``gold`` grade.

**Planted problems** — the chapter should flag two raters:

* ``rater_5`` is careless: 60 % of the grades are random, given in about 4 seconds each (below the
  seed's 10-second minimum): low gold accuracy and low agreement with the others;
* ``rater_3`` tires: ever more often, and faster, it gives the top grade without reading the pair
  ("straight-lining"), from 5 % of the grades at the start of the session to 85 % at its end, so its
  agreement with the others falls with the position in the session (fatigue drift).

The four other raters give the true grade 85 % of the time and a neighbouring grade otherwise, which
the chapter's agreement coefficients, Dawid–Skene rater accuracies and consensus labels should show.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .world import PAIR_KINDS, genre_pair

N_PAIRS = 300
RATERS = tuple(f"rater_{i}" for i in range(1, 7))
PER_ITEM = 4
N_GOLD = 45
CARELESS, TIRED = "rater_5", "rater_3"


def _pairs(meta: pd.DataFrame, rng: np.random.Generator, n: int) -> tuple[list, np.ndarray]:
    items = meta[meta["kind"] == "item"]
    ids, genre = items["id"].to_numpy(), items["label"].to_numpy()
    pairs, truth, seen = [], [], set()
    while len(pairs) < n:
        k = rng.choice(3, p=PAIR_KINDS)  # same genre, related, unrelated
        g1, g2 = genre_pair(k, rng)
        a = rng.choice(np.flatnonzero(genre == g1))
        b = rng.choice(np.flatnonzero(genre == g2))
        key = tuple(sorted((ids[a], ids[b])))
        if a == b or key in seen:
            continue
        seen.add(key)
        pairs.append((ids[a], ids[b]))
        truth.append((3 + rng.integers(2), 2, rng.integers(2))[k])
    return pairs, np.array(truth)


def demo_side_data(folder, seed: int = 0) -> dict:
    """Write ``annotations.csv`` into ``folder`` (which holds the demo's ``metadata.csv``); return the
    manifest entries to add (``annotations`` and ``annotation_level: ordinal``)."""
    folder = Path(folder)
    meta = pd.read_csv(folder / "metadata.csv", dtype={"id": str}, keep_default_na=False)
    rng = np.random.default_rng([seed, 97, 0])
    pairs, truth = _pairs(meta, rng, N_PAIRS)
    gold = np.zeros(N_PAIRS, bool)
    gold[rng.choice(N_PAIRS, N_GOLD, replace=False)] = True
    assigned = {r: [] for r in RATERS}
    for i in range(N_PAIRS):
        for r in rng.choice(RATERS, PER_ITEM, replace=False):
            assigned[r].append(i)
    rows = []
    for r, todo in assigned.items():
        order = rng.permutation(todo)
        n = len(order)
        for pos, i in enumerate(order):
            t = truth[i]
            p_random, p_lazy = 0.0, 0.0
            if r == CARELESS:
                p_random, seconds = 0.6, rng.lognormal(np.log(4.0), 0.3)
            elif r == TIRED:
                p_lazy, seconds = 0.05 + 0.8 * pos / n, rng.lognormal(np.log(30.0 - 15.0 * pos / n), 0.35)
            else:
                seconds = rng.lognormal(np.log(22.0), 0.4)
            if rng.random() < p_lazy:
                grade = 4
            elif rng.random() < p_random:
                grade = int(rng.integers(5))
            elif rng.random() < 0.85:
                grade = int(t)
            else:
                grade = int(np.clip(t + rng.choice([-1, 1]), 0, 4))
            rows.append((pairs[i][0], pairs[i][1], r, grade, round(float(seconds), 1),
                         str(int(t)) if gold[i] else "", pos + 1))
    table = pd.DataFrame(rows, columns=["item1", "item2", "rater", "label", "seconds", "gold", "position"])
    table.to_csv(folder / "annotations.csv", index=False)
    return {"annotations": "annotations.csv", "annotation_level": "ordinal"}
