"""The built-in demo embedding set: a streaming platform's users and items (no downloads).

Follows seed 000's running example (§217.0.11, ``simulate_streaming_user_embeddings``): item
embeddings cluster by genre, item popularity is Zipf-distributed, and each user's embedding
is the view-count-weighted mean of the items they watched, where views follow
``softmax(preference · item + w · log popularity)``.

**Planted problem** — popularity-driven anisotropy: the popularity weight pulls every
viewing history toward the same few blockbusters, so user vectors share one dominant
direction (high APCS, low participation ratio), exactly the collapse the seed's Figure 217.5
shows. The demo report's isotropy chapter should find it and all-but-the-top should relieve it.

**Side data of the other chapters** (written by :mod:`embeval_report.demo.stability`,
:mod:`~embeval_report.demo.drift` and :mod:`~embeval_report.demo.graph`): further training runs and checkpoints (``stability``: niche items are
planted less stable than popular ones), monthly snapshots (``drift``: a genre drifts toward
another from the third month on), and a timestamped block-model graph (``graph``: the block
affinity broadens over the year).

**Side data for the semantic-benchmarks chapter** (from a separate seeded generator, so the
vectors above do not change): ``word_pairs.tsv``, an editorial team's similarity judgements of
item pairs (0–10; same genre > related genres > unrelated, plus rater noise; a few pairs name
retired titles that have no vector), and ``analogies.txt``, questions "a is to b as c is to ?"
built from genre offsets (see :func:`genre_analogies`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache

import numpy as np
import pandas as pd

GENRES = ("drama", "comedy", "thriller", "documentary", "sci-fi", "animation", "romance", "horror")
#: genre pairs the (synthetic) editors judge as related
RELATED_GENRES = frozenset(frozenset(p) for p in (("drama", "romance"), ("thriller", "horror"), ("comedy", "animation"),
                                                  ("sci-fi", "thriller"), ("documentary", "drama")))


def unit_vectors(X: np.ndarray) -> np.ndarray:
    """Rows of ``X`` scaled to unit L2 norm."""
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@dataclass(frozen=True)
class StreamingWorld:
    """The latent state behind the demo vectors, for chapters whose side data are variants of it
    (other training runs, later snapshots): genres, preferences, popularity and viewing counts."""

    centres: np.ndarray      # (genres, dim) genre centres
    item_genre: np.ndarray   # (n_items,)
    items: np.ndarray        # (n_items, dim) unit item vectors
    popularity: np.ndarray   # (n_items,) Zipf shares, shuffled
    user_genre: np.ndarray   # (n_users,)
    prefs: np.ndarray        # (n_users, dim) unit taste vectors
    counts: np.ndarray       # (n_users, n_items) views
    popularity_weight: float

    def view_probabilities(self, prefs=None, items=None, *, unavailable=None) -> np.ndarray:
        """``softmax(3 pref · item + w log popularity)`` per user (``unavailable`` items get 0)."""
        prefs = self.prefs if prefs is None else prefs
        items = self.items if items is None else items
        logits = 3.0 * prefs @ items.T + self.popularity_weight * np.log(self.popularity)
        if unavailable is not None and len(unavailable):
            logits[:, unavailable] = -np.inf
        probs = np.exp(logits - logits.max(1, keepdims=True))
        return probs / probs.sum(1, keepdims=True)

    def user_vectors(self, counts=None, items=None) -> np.ndarray:
        """Unit view-count-weighted means of the items (a user with no views gets a zero vector)."""
        counts = self.counts if counts is None else counts
        items = self.items if items is None else items
        w = counts.sum(1, keepdims=True)
        users = np.divide(counts @ items, w, out=np.zeros((len(counts), items.shape[1])), where=w > 0)
        norms = np.linalg.norm(users, axis=1, keepdims=True)
        return np.divide(users, norms, out=users, where=norms > 0)


@lru_cache(maxsize=4)
def streaming_world(n_users: int = 4000, n_items: int = 1000, dim: int = 64, *, popularity_skew: float = 1.0,
                    popularity_weight: float = 2.0, mean_views: int = 40, seed: int = 0) -> StreamingWorld:
    """Draw the demo's catalogue, viewers and viewing histories (deterministic for a seed).

    Drawn once per arguments and process (the demo's side data asks for the same world ten times: 1.9 s of its
    10 s); its arrays are read-only, so that no caller can change the world another one reads."""
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
    world = StreamingWorld(centres, item_genre, items, popularity, user_genre, prefs, np.zeros((0, n_items)),
                           popularity_weight)
    probs = world.view_probabilities()
    views = np.maximum(rng.poisson(mean_views, n_users), 1)
    counts = rng.multinomial(views, probs).astype(float)  # row by row, as a loop over the users draws them
    world = replace(world, counts=counts)
    for f in fields(world):
        value = getattr(world, f.name)
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return world


def streaming_embeddings(n_users: int = 4000, n_items: int = 1000, dim: int = 64, *, popularity_skew: float = 1.0,
                         popularity_weight: float = 2.0, mean_views: int = 40, seed: int = 0
                         ) -> tuple[np.ndarray, pd.DataFrame]:
    """User and item vectors (users first) and their metadata table (``id`` column first)."""
    w = streaming_world(n_users, n_items, dim, popularity_skew=popularity_skew, popularity_weight=popularity_weight,
                        mean_views=mean_views, seed=seed)
    vectors = np.vstack([w.user_vectors(), w.items]).astype(np.float32)
    views = w.counts.sum(1)
    meta = pd.DataFrame({
        "id": [f"user_{i:05d}" for i in range(n_users)] + [f"item_{i:05d}" for i in range(n_items)],
        "kind": ["user"] * n_users + ["item"] * n_items,
        "label": [GENRES[g] for g in w.user_genre] + [GENRES[g] for g in w.item_genre],
        "frequency": np.concatenate([views, w.counts.sum(0)]).astype(int),
        "title": [f"viewer #{i}" for i in range(n_users)]
                 + [f"Title {i} <{GENRES[g]}> & \"friends\"" for i, g in enumerate(w.item_genre)],
    })
    return vectors, meta


#: shares of same-genre, related-genre and unrelated pairs among judged item pairs
PAIR_KINDS = (0.4, 0.25, 0.35)
_RELATED_PAIRS = [tuple(p) for p in sorted(map(sorted, RELATED_GENRES))]


def genre_pair(kind: int, rng: np.random.Generator) -> tuple[str, str]:
    """Two genres for a judged pair: the same (``kind`` 0), related (1, :data:`RELATED_GENRES`) or unrelated (2)."""
    if kind == 0:
        g = GENRES[rng.integers(len(GENRES))]
        return g, g
    if kind == 1:
        return _RELATED_PAIRS[rng.integers(len(_RELATED_PAIRS))]
    g1, g2 = rng.choice(GENRES, 2, replace=False)
    while frozenset((g1, g2)) in RELATED_GENRES:
        g1, g2 = rng.choice(GENRES, 2, replace=False)
    return g1, g2


def editorial_judgements(meta: pd.DataFrame, *, n_pairs: int = 300, n_retired: int = 15, noise: float = 1.0,
                         seed: int = 0) -> pd.DataFrame:
    """Synthetic editorial similarity of item pairs (``word1, word2, score`` on 0–10).

    The score follows the generator's genre structure: about 7.5 for two items of the same
    genre, 4.5 for related genres (:data:`RELATED_GENRES`), 1.5 otherwise, plus Gaussian rater
    noise (sd ``noise``), clipped to [0, 10]. ``n_retired`` pairs name an item id beyond the
    catalogue (a retired title without a vector), so the report has OOV pairs to count.
    """
    rng = np.random.default_rng([seed, 60, 1])
    items = meta[meta["kind"] == "item"]
    ids, genre = items["id"].to_numpy(), items["label"].to_numpy()
    kind = rng.choice(3, n_pairs, p=PAIR_KINDS)
    rows = []
    for k in kind:
        g1, g2 = genre_pair(k, rng)
        pool1, pool2 = np.flatnonzero(genre == g1), np.flatnonzero(genre == g2)
        i = rng.choice(pool1)
        j = rng.choice(pool2[pool2 != i]) if len(pool2[pool2 != i]) else rng.integers(len(ids))
        score = float(np.clip((7.5, 4.5, 1.5)[k] + noise * rng.standard_normal(), 0, 10))
        rows.append((ids[i], ids[j], round(score, 2)))
    for r in rng.choice(n_pairs, min(n_retired, n_pairs), replace=False):
        rows[r] = (f"item_{len(ids) + int(rng.integers(0, 500)):05d}", rows[r][1], rows[r][2])
    return pd.DataFrame(rows, columns=["word1", "word2", "score"])


def genre_analogies(vectors: np.ndarray, meta: pd.DataFrame, *, per_section: int = 25, seed: int = 0
                    ) -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """Analogy questions "a : b :: c : d" between items of genre g and of the next genre g'.

    One section per genre pair ``g to g'`` (genres in :data:`GENRES` order). ``a`` and ``b`` are
    flagship items (the quarter closest to their genre's mean vector) of g and g'; ``c`` is any
    other item of g; the answer ``d`` is the item of g' (other than b) closest to ``c`` moved by
    the genre offset ``mean(g') − mean(g)``, the offset the question's pair a → b stands for.
    Built from the demo's item vectors by a separate seeded generator.
    """
    rng = np.random.default_rng([seed, 60, 2])
    item = (meta["kind"] == "item").to_numpy()
    V, genre, ids = vectors[item].astype(np.float64), meta["label"].to_numpy()[item], meta["id"].to_numpy()[item]
    centre = {g: V[genre == g].mean(0) for g in GENRES if (genre == g).sum() >= 3}
    out = []
    for k, g1 in enumerate(GENRES):
        g2 = GENRES[(k + 1) % len(GENRES)]
        if g1 not in centre or g2 not in centre:
            continue
        i1, i2 = np.flatnonzero(genre == g1), np.flatnonzero(genre == g2)
        flag1 = i1[np.argsort(-(V[i1] @ centre[g1]))[:max(2, len(i1) // 4)]]
        flag2 = i2[np.argsort(-(V[i2] @ centre[g2]))[:max(2, len(i2) // 4)]]
        questions = []
        for _ in range(per_section):
            a, b = rng.choice(flag1), rng.choice(flag2)
            c = rng.choice(i1[i1 != a])
            cand = i2[i2 != b]
            d = cand[np.argmax(V[cand] @ (V[c] - centre[g1] + centre[g2]))]
            questions.append((ids[a], ids[b], ids[c], ids[d]))
        out.append((f"{g1} to {g2}", questions))
    return out
