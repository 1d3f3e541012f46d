"""The retrieval chapter's queries: their vectors and ids, read and checked against the corpus.

The manifest's ``queries`` names a vectors file (any vectors format) and, unless that file carries
its own ids, an ``ids`` file (one id per line); an optional ``metadata`` table (``id`` column plus
free columns) groups the queries in the chapter's breakdown. Without ``queries`` the corpus rows
are the queries (``exclude_self: true`` then keeps each row from retrieving itself).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import as_ids, check_unique, read_ids_file
from .stores import is_store, store_label
from .matrix import finalize
from .vectors import read_raw


@dataclass(frozen=True)
class QuerySet:
    """Query vectors (m, d) float32 with their ids, and optional per-query metadata (indexed by id)."""

    vectors: np.ndarray
    ids: np.ndarray
    file: str
    metadata: pd.DataFrame | None = None


def load_queries(spec: dict, d: int) -> QuerySet:
    """Read the ``queries`` mapping (``vectors``, ``ids``, ``metadata``); the vectors must have the corpus's ``d``."""
    path = spec["vectors"]  # a file, or a store mapping {zarr|hdf5: ..., array|dataset, ids}
    name = store_label(path) if is_store(path) else Path(path).name
    label = f"queries: {name}"
    raw, ids = read_raw(path if is_store(path) else Path(path), label)
    ids_label = label
    if "ids" in spec:
        ids_label = f"queries: {Path(spec['ids']).name}"
        ids = read_ids_file(Path(spec["ids"]), ids_label)
    vectors, ids = finalize(raw, ids, label, ids_label)
    if ids is None:
        raise InputError(f"{label}: the file carries no ids; expected an `ids` file under `queries` (one id per "
                         "line): the qrels refer to queries by id")
    if vectors.shape[1] != d:
        raise InputError(f"{label}: {vectors.shape[1]} dimensions; expected {d}, as the corpus vectors (queries and "
                         "documents must come from the same model)")
    meta = None
    if "metadata" in spec:
        meta = _metadata(Path(spec["metadata"]), ids)
    return QuerySet(vectors, ids, name, meta)


def _metadata(path: Path, ids: np.ndarray) -> pd.DataFrame:
    """The queries' metadata table (read as the corpus's), indexed by query id; rows of other ids are dropped."""
    from .embedding_set import _read_metadata_table

    label = f"queries: {path.name}"
    table = _read_metadata_table(path, "id")
    keys = as_ids(table["id"], f"{label}, column 'id'")
    check_unique(keys, label)
    return table.drop(columns=["id"]).set_axis(pd.Index(keys, name="id")).reindex(pd.Index(ids, dtype=object))
