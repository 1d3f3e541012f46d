"""Later versions of the space in time order, matched to the baseline by id (the drift chapter's ``snapshots``).

Every file is read and validated here, before any chapter runs; a file with its own ids is
matched by them, one without (``.npy``) must list the baseline's entities in its order.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .embedding_set import EmbeddingSet, load_matched
from .stores import is_store, store_label
from .vectors import load_vectors

#: entities a snapshot must share with the baseline
MIN_MATCHED = 20


# ---------------------------------------------------------------------------------------------
# Snapshots
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    """One later version of the embedding set, matched to the baseline by id.

    ``vectors[r]`` is the snapshot's vector of baseline row ``index[r]``; ``new_vectors`` /
    ``new_ids`` are its entities absent from the baseline, ``departed_ids`` the baseline ids it
    lacks. ``slug`` is the metric-name suffix (``mean_drift__<slug>``).
    """

    name: str
    vectors: np.ndarray
    index: np.ndarray
    new_vectors: np.ndarray | None = None
    new_ids: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))
    departed_ids: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))
    timestamp: str | float | None = None
    slug: str = ""

    def __post_init__(self):
        if not self.slug:
            object.__setattr__(self, "slug", snapshot_slug(self.name))


def snapshot_slug(name: str) -> str:
    """Metric-name suffix of a snapshot name: lower case, runs of other characters -> ``_``.

    >>> snapshot_slug("2024-02"), snapshot_slug("March 2024 (v2)")
    ('2024_02', 'march_2024_v2')
    """
    return re.sub(r"[^0-9a-z]+", "_", str(name).lower()).strip("_")


def _time_key(ts):
    if ts is None:
        return None
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        return float(ts)
    try:
        return pd.Timestamp(str(ts)).value
    except (ValueError, TypeError):
        return None


def check_time_order(snapshots: list[Snapshot]) -> None:
    """Raise :class:`InputError` when the snapshots' timestamps are not in increasing list order."""
    keys = [(s, _time_key(s.timestamp)) for s in snapshots]
    keys = [(s, k) for s, k in keys if k is not None]
    if len({type(k) for _, k in keys}) > 1:
        return
    for (a, ka), (b, kb) in zip(keys, keys[1:]):
        if kb <= ka:
            raise InputError(f"manifest field `snapshots`: snapshot {b.name!r} (timestamp {b.timestamp}) is listed "
                             f"after {a.name!r} (timestamp {a.timestamp}); list the snapshots in time order, "
                             "earliest first, with distinct timestamps")


def load_snapshots(es: EmbeddingSet, entries: list | None = None) -> list[Snapshot]:
    """The ``snapshots`` of an embedding set (or ``entries``), each loaded and matched to the baseline by id.

    Raises :class:`InputError` (naming the snapshot and file) for a missing field, two names with
    the same metric suffix, too few entities in common with the baseline (fewer than
    :data:`MIN_MATCHED` while the baseline has more: ids of another kind), or timestamps out of
    order; the vectors themselves are validated by :func:`embeval_report.io.load_matched`. A
    baseline smaller than :data:`MIN_MATCHED` is valid: the drift chapter skips it with the reason.
    """
    entries = (es.fields.get("snapshots") or []) if entries is None else entries
    if not entries:
        raise InputError("manifest field `snapshots`: no snapshots given; list later versions as "
                         "`snapshots: [{name: ..., vectors: ..., timestamp: ...}]`")
    out, seen = [], {}
    for i, entry in enumerate(entries, 1):
        name = str(entry["name"])
        slug = snapshot_slug(name) or f"snapshot_{i}"
        if slug in seen:
            raise InputError(f"manifest field `snapshots`, item {i} ({name!r}): its name gives the same metric "
                             f"suffix {slug!r} as item {seen[slug][0]} ({seen[slug][1]!r}); give the snapshots "
                             "names that differ in letters or digits")
        seen[slug] = (i, name)
        path = entry["vectors"]  # a file, or a store mapping {zarr|hdf5: ..., array|dataset, ids}
        label = f"snapshot {name!r} ({store_label(path) if is_store(path) else Path(path).name})"
        m = load_matched(path, es, label=label)
        if len(m.index) < MIN_MATCHED and len(m.index) < es.n:  # a baseline under MIN_MATCHED: the chapter skips
            raise InputError(f"{label}: only {len(m.index)} of its ids occur in the baseline; drift needs at least "
                             f"{MIN_MATCHED} entities present in both (are the ids the same kind as the baseline's?)")
        new_vectors, new_ids = None, np.array([], dtype=object)
        if len(m.extra):
            vectors, ids = load_vectors(path, name_for_errors=label)
            keep = pd.Index(np.asarray(ids, dtype=object)).isin(pd.Index(m.extra))
            new_vectors, new_ids = vectors[keep], np.asarray(ids, dtype=object)[keep]
        out.append(Snapshot(name=name, slug=slug, vectors=m.vectors, index=m.index, new_vectors=new_vectors,
                            new_ids=new_ids, departed_ids=np.asarray(m.missing, dtype=object),
                            timestamp=entry.get("timestamp")))
    check_time_order(out)
    return out


