"""User–item interactions for the recommendation chapter: reading, checking, and who is a user.

Manifest fields (paths relative to the manifest):

* ``interactions`` — a table with a header row: ``user_id``, ``item_id`` and optionally
  ``timestamp`` (a number, or a date/time such as ``2024-03-05`` or ``2024-03-05T14:00``) and
  ``rating`` (a finite number). ``.csv``, ``.tsv`` / ``.txt`` (tab-separated) or ``.parquet``.
  Accepted header names (case-insensitive): ``user_id`` / ``user`` / ``userid`` / ``uid``;
  ``item_id`` / ``item`` / ``itemid`` / ``iid``; ``timestamp`` / ``time`` / ``ts``; ``rating`` / ``score``.
* ``test_interactions`` (optional) — held-out interactions, same columns; without it the
  chapter splits ``interactions`` (by time when they have timestamps, else a seeded leave-n-out).
* ``users`` / ``items`` (optional) — files with one id per line naming the users and the items
  (the item catalogue). Without them users and items are told apart by a ``kind`` metadata
  column whose values include ``user`` and ``item`` (also ``users`` / ``items``, any case); without
  that either, the users are the ids in the ``user_id`` column and the catalogue is every other id.

Every id must be an embedding id, every ``user_id`` a user and every ``item_id`` an item; a
violation raises :class:`~embeval_report.errors.InputError` naming the file, the row (1-based data
row) and the column. Repeated (user, item) rows are allowed (a user may watch an item twice); the
chapter keeps the first occurrence.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import existing_file, read_ids_file, read_table
from .graph import _id_rows, _numeric_column, _text_column, _time_column

#: canonical column -> accepted header names (lower case)
ALIASES = {
    "user_id": ("user_id", "user", "userid", "uid", "user-id"),
    "item_id": ("item_id", "item", "itemid", "iid", "item-id"),
    "timestamp": ("timestamp", "time", "ts"),
    "rating": ("rating", "score"),
}
REQUIRED = ("user_id", "item_id")
#: values of the metadata kind column that mark users and items (lower case)
USER_KINDS = ("user", "users")
ITEM_KINDS = ("item", "items")


@dataclass(frozen=True)
class Roles:
    """Which embedding rows are users and which are items (the catalogue), and how that was decided."""

    users: np.ndarray   # row indices, ascending
    items: np.ndarray   # row indices, ascending
    source: str         # in words: "`users`/`items` lists", "metadata column 'kind'", ...


@dataclass(frozen=True)
class Interactions:
    """Validated interactions as embedding row indices.

    ``time`` float seconds since 1970 for dates, or the given numbers (``None`` without a
    timestamp column; ``time_is_date`` says which); ``rating`` floats or ``None``; ``row`` the
    1-based data row of each interaction in ``file``; ``roles`` the user/item partition they were
    checked against.
    """

    user: np.ndarray
    item: np.ndarray
    time: np.ndarray | None
    rating: np.ndarray | None
    time_is_date: bool
    file: str
    row: np.ndarray
    roles: Roles
    notes: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.user)

    @property
    def has_time(self) -> bool:
        return self.time is not None


def read_id_list(path, ids, *, label: str | None = None) -> np.ndarray:
    """Row indices of the ids listed in ``path`` (one per line), each an embedding id, none twice."""
    p = existing_file(path, label)
    label = label or p.name
    listed = read_ids_file(p, label)
    if not len(listed):
        raise InputError(f"{label}: no ids; expected one id per line")
    pos = pd.Index(np.asarray(ids, dtype=object)).get_indexer(listed)
    bad = pos < 0
    if bad.any():
        r = int(np.argmax(bad))
        raise InputError(f"{label}, line {r + 1}: unknown id {listed[r]!r}; every id must be one of the embedding ids "
                         f"({int(bad.sum()):,} line(s) name an unknown id)")
    dup = pd.Index(listed).duplicated()
    if dup.any():
        j = int(np.argmax(dup))
        raise InputError(f"{label}, line {j + 1}: id {listed[j]!r} is listed twice; expected each id once")
    return np.sort(pos.astype(np.int64))


def _kind_rows(metadata: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray, str] | None:
    """User and item rows from a metadata ``kind`` (or ``type``) column holding user and item values."""
    if metadata is None:
        return None
    for col in ("kind", "type"):
        if col in metadata.columns:
            kind = metadata[col].astype(str).str.strip().str.lower().to_numpy()
            users, items = np.isin(kind, USER_KINDS), np.isin(kind, ITEM_KINDS)
            if users.any() and items.any():
                return np.flatnonzero(users), np.flatnonzero(items), f"metadata column {col!r}"
    return None


def user_item_roles(es, users=None, items=None, user_rows=None) -> Roles:
    """The user/item partition of ``es`` (see the module docstring): ``users`` / ``items`` row
    indices from the id lists when given, else the metadata kind column, else ``user_rows`` (the
    rows named as users by the interactions) with every other row an item."""
    n = es.n
    if users is not None or items is not None:
        if users is not None and items is not None:
            both = np.intersect1d(users, items)
            if len(both):
                raise InputError(f"manifest fields 'users' and 'items': id {es.ids[both[0]]!r} is in both lists "
                                 f"({len(both):,} ids are); expected each id to be a user or an item, not both")
            return Roles(users, items, "`users` and `items` lists")
        if users is not None:
            return Roles(users, np.setdiff1d(np.arange(n), users), "`users` list (every other id is an item)")
        return Roles(np.setdiff1d(np.arange(n), items), items, "`items` list (every other id is a user)")
    found = _kind_rows(es.metadata)
    if found is not None:
        return Roles(found[0], found[1], found[2])
    users = np.unique(np.asarray(user_rows, np.int64)) if user_rows is not None else np.empty(0, np.int64)
    return Roles(users, np.setdiff1d(np.arange(n), users),
                 "the interactions' user_id column (every other id is an item)")


def _canonical(t: pd.DataFrame, label: str) -> pd.DataFrame:
    lower = {c.lower(): c for c in t.columns}
    rename = {}
    for col, names in ALIASES.items():
        hit = [lower[a] for a in names if a in lower]
        if hit:
            rename[hit[0]] = col
    t = t.rename(columns=rename)
    missing = [c for c in REQUIRED if c not in t.columns]
    if missing:
        raise InputError(f"{label}: missing column(s) {', '.join(map(repr, missing))}; expected columns user_id, "
                         f"item_id (optional: timestamp, rating); found {', '.join(map(repr, t.columns)) or 'none'}")
    if not len(t):
        raise InputError(f"{label}: no rows; expected at least one (user_id, item_id) interaction")
    return t


def read_interactions(path, es, *, users=None, items=None, roles: Roles | None = None,
                      label: str | None = None) -> Interactions:
    """Read and validate an interactions table against the embedding set ``es``.

    ``users`` / ``items``: row indices from the ``users`` / ``items`` lists (optional); ``roles``:
    a partition already decided (the training interactions' one, for ``test_interactions``).
    """
    label = label or Path(path).name
    t = _canonical(read_table(path, label), label)
    index = pd.Index(np.asarray(es.ids, dtype=object))
    u = _id_rows(_text_column(t, "user_id", label), index, label, "user_id")
    i = _id_rows(_text_column(t, "item_id", label), index, label, "item_id")
    time, is_date = _time_column(t, label) if "timestamp" in t.columns else (None, False)
    rating = _numeric_column(t, "rating", label, "a finite number") if "rating" in t.columns else None
    roles = roles or user_item_roles(es, users, items, u)
    is_user = np.zeros(es.n, bool)
    is_user[roles.users] = True
    is_item = np.zeros(es.n, bool)
    is_item[roles.items] = True
    for col, rows, ok, want in (("user_id", u, is_user, "a user"), ("item_id", i, is_item, "an item")):
        bad = ~ok[rows]
        if bad.any():
            r = int(np.argmax(bad))
            other = "an item" if want == "a user" else "a user"
            what = other if (is_item if want == "a user" else is_user)[rows[r]] else "neither a user nor an item"
            raise InputError(f"{label}, row {r + 1}, column {col!r}: {es.ids[rows[r]]!r} is {what} (users and items "
                             f"told apart by {roles.source}); expected {want} id ({int(bad.sum()):,} row(s) are not)")
    return Interactions(u, i, time, rating, is_date, label, np.arange(1, len(u) + 1), roles)


def load_interactions(es, value, side: dict, field_name: str) -> Interactions:
    """The loader of the ``interactions`` / ``test_interactions`` manifest fields (see :data:`LOADERS`)."""
    label = f"{Path(value).name} ({field_name})"
    train = side.get("interactions")
    if field_name == "test_interactions" and train is not None:
        return read_interactions(value, es, roles=train.roles, label=label)
    return read_interactions(value, es, users=side.get("users"), items=side.get("items"), label=label)
