r"""Inputs of the anomaly chapter: the 0/1 anomaly labels (a metadata column), the optional event and
timestamp columns, and the optional scores of the user's own detector (``anomaly_scores:``).

**Labels** — the metadata column ``is_anomaly`` (or, when it is absent, ``anomaly``): ``1`` an
anomaly (fraud, bot, fault), ``0`` a normal row, blank an unlabelled row (left out of every metric,
but still part of the set the embedding baselines are fitted on). Accepted spellings: the numbers 0
and 1, ``true``/``false``, ``yes``/``no`` (any case).

**Events** (optional, for time-to-detection) — an ``event`` column naming the incident a row belongs
to (a fraud ring, an attack, an outage; blank for none) and a ``timestamp`` column (numbers, or dates
and times in any format pandas reads) saying when the row appeared. An event's onset is the earliest
timestamp of its rows.

**Scores file** (``anomaly_scores:``) — a table (.csv, .tsv or .parquet) with a header row: an ``id``
column (else the first column holds the ids) and one or more numeric score columns, each the output
of one detector (higher = more anomalous), named by its column. Every id must be an id of the
vectors, once; every labelled row must have a score (a detector is compared with the baselines on the
same rows).

Bad input raises :class:`~embeval_report.errors.InputError` naming the file, the row or id, the
column and what was expected.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import existing_file, quoted, read_table_file, unknown_ids

#: label columns, in order of preference
LABEL_COLUMNS = ("is_anomaly", "anomaly")
EVENT_COLUMN = "event"
TIME_COLUMN = "timestamp"
_TRUE = {"1", "1.0", "true", "yes", "y", "t"}
_FALSE = {"0", "0.0", "false", "no", "n", "f"}
#: the delimited score tables, by suffix (a .txt file is comma-separated here)
SEPARATORS = {".csv": ",", ".tsv": "\t", ".txt": ","}


def label_column(metadata: pd.DataFrame | None) -> str | None:
    """The metadata column holding the anomaly labels (``is_anomaly``, else ``anomaly``), or ``None``."""
    if metadata is None:
        return None
    for c in LABEL_COLUMNS:
        if c in metadata.columns and metadata[c].notna().any():
            return c
    return None


def anomaly_labels(metadata: pd.DataFrame | None, label: str = "metadata") -> tuple[str, np.ndarray]:
    """``(column, labels)``: the label column's name and one float per row (1 anomaly, 0 normal, NaN
    unlabelled), in the metadata's (vector) order. Raises :class:`InputError` for any other value."""
    column = label_column(metadata)
    if column is None:
        raise InputError(f"{label}: no {' or '.join(map(repr, LABEL_COLUMNS))} column with a value; expected a 0/1 "
                         "column marking the anomalies")
    raw = metadata[column]
    out = np.full(len(raw), np.nan)
    for r, v in enumerate(raw.to_numpy(dtype=object)):
        if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
            continue
        if isinstance(v, (bool, np.bool_)):
            out[r] = float(v)
            continue
        if isinstance(v, (int, float, np.integer, np.floating)) and float(v) in (0.0, 1.0):
            out[r] = float(v)
            continue
        t = str(v).strip().lower()
        if t == "":
            continue
        if t in _TRUE or t in _FALSE:
            out[r] = 1.0 if t in _TRUE else 0.0
            continue
        raise InputError(f"{label}, id {metadata.index[r]!r}, column {column!r}: {v!r} is not a 0/1 label; expected 0 "
                         "(normal), 1 (anomaly), true/false, or blank (unlabelled)")
    return column, out


def event_columns(metadata: pd.DataFrame | None, label: str = "metadata"
                  ) -> tuple[np.ndarray, np.ndarray, str] | None:
    """``(event, time, unit)`` when the metadata has an ``event`` column with a value and a ``timestamp``
    column: ``event`` (object, ``None`` where blank), ``time`` float (numbers as given; dates as days since
    the earliest date; NaN where blank) and the unit of ``time`` ("days" or "timestamp units").
    ``None`` without an event column. An event row without a timestamp, or a timestamp that is neither
    a number nor a date, raises :class:`InputError`."""
    if metadata is None or EVENT_COLUMN not in metadata.columns or not metadata[EVENT_COLUMN].notna().any():
        return None
    if TIME_COLUMN not in metadata.columns:
        raise InputError(f"{label}: column {EVENT_COLUMN!r} needs a {TIME_COLUMN!r} column (when each row appeared) "
                         "to measure time to detection")
    ev = metadata[EVENT_COLUMN].to_numpy(dtype=object)
    ev = np.array([None if (e is None or e is pd.NA or (isinstance(e, float) and np.isnan(e)) or not str(e).strip())
                   else str(e).strip() for e in ev], dtype=object)
    raw = metadata[TIME_COLUMN]
    if pd.api.types.is_numeric_dtype(raw):
        time, unit = raw.to_numpy(dtype=float), "timestamp units"
    else:
        text = raw.astype("string").str.strip()
        numeric = pd.to_numeric(text, errors="coerce")
        if bool((numeric.notna() | text.isna() | (text == "")).all()):
            time, unit = numeric.to_numpy(dtype=float, na_value=np.nan), "timestamp units"
        else:
            stamps = pd.to_datetime(text.replace("", pd.NA), errors="coerce", utc=True, format="mixed")
            bad = stamps.isna() & text.notna() & (text != "")
            if bad.any():
                r = int(np.argmax(bad.to_numpy()))
                raise InputError(f"{label}, id {metadata.index[r]!r}, column {TIME_COLUMN!r}: {raw.iloc[r]!r} is "
                                 "neither a number nor a date; expected a number or a date/time")
            ok = stamps.notna().to_numpy()
            time = np.full(len(stamps), np.nan)
            if ok.any():
                valid = stamps[ok]
                time[ok] = ((valid - valid.min()).dt.total_seconds() / 86_400.0).to_numpy(float)
            unit = "days"
    missing = np.array([e is not None for e in ev]) & ~np.isfinite(time)
    if missing.any():
        r = int(np.argmax(missing))
        raise InputError(f"{label}, id {metadata.index[r]!r}, column {TIME_COLUMN!r}: blank, but the row belongs to "
                         f"event {ev[r]!r}; expected the time the row appeared")
    return ev, time, unit


def read_anomaly_scores(path, ids, *, labels: np.ndarray | None = None, label: str | None = None) -> pd.DataFrame:
    """Read a scores file (module docstring): a DataFrame indexed by id (in file order) with one float64
    column per detector. ``ids`` are the vector ids; with ``labels`` (one per vector, NaN unlabelled),
    every labelled id must have a score."""
    path = existing_file(path, label)
    label = label or path.name
    table = read_table_file(path, label, separators=SEPARATORS, expected="a .csv, .tsv or .parquet table with an "
                            "id column and score columns",
                            csv_options=dict(dtype=str, keep_default_na=False, skip_blank_lines=True))
    return anomaly_scores_frame(table, ids, labels=labels, label=label)


def anomaly_scores_frame(table: pd.DataFrame, ids, *, labels: np.ndarray | None = None,
                         label: str = "anomaly_scores") -> pd.DataFrame:
    """The checked scores of an in-memory table (columns: ``id`` or the first column, then scores)."""
    cols = [str(c) for c in table.columns]
    if len(cols) < 2:
        raise InputError(f"{label}: found {len(cols)} column(s) ({', '.join(cols) or 'none'}); expected a header row "
                         "with an id column and at least one score column (e.g. 'id,score')")
    table = table.copy()
    table.columns = cols
    key = "id" if "id" in cols else cols[0]
    keys = np.array([str(k).strip() for k in table[key].to_numpy(dtype=object)], dtype=object)
    for r, k in enumerate(keys):
        if not k or k == "nan":
            raise InputError(f"{label}, row {r + 1}, column {key!r}: empty id; expected an id of the vectors")
    dup = pd.Index(keys).duplicated()
    if dup.any():
        r = int(np.argmax(dup))
        first = int(np.flatnonzero(keys == keys[r])[0])
        raise InputError(f"{label}, rows {first + 1} and {r + 1}, column {key!r}: id {keys[r]!r} appears twice; "
                         "expected one score row per id")
    known = pd.Index(np.asarray([str(i) for i in ids], dtype=object))
    bad = unknown_ids(keys, known)
    if bad is not None:  # keys are unique: one row per unknown id
        raise InputError(f"{label}, row {bad.row + 1}, column {key!r}: id {bad.value!r} matches no vector id "
                         f"({len(bad.ids)} unknown id(s): {bad.named()}); expected ids of the vectors")
    out = {}
    for c in cols:
        if c == key:
            continue
        if not c.strip() or re.fullmatch(r"Unnamed: \d+", c):
            raise InputError(f"{label}: a score column has no name in the header row; expected a detector name")
        values = table[c].to_numpy(dtype=object)
        x = np.empty(len(values))
        for r, v in enumerate(values):
            try:
                x[r] = float(str(v).strip()) if not isinstance(v, (int, float, np.number)) else float(v)
            except ValueError:
                what = "empty value" if not str(v).strip() else f"{v!r} is not a number"
                raise InputError(f"{label}, row {r + 1} (id {keys[r]!r}), column {c!r}: {what}; expected a numeric "
                                 "anomaly score (higher = more anomalous)") from None
            if not np.isfinite(x[r]):
                raise InputError(f"{label}, row {r + 1} (id {keys[r]!r}), column {c!r}: {v!r} is not finite; expected "
                                 "a finite numeric anomaly score")
        out[c] = x
    frame = pd.DataFrame(out, index=pd.Index(keys, name="id"))
    if labels is not None:
        labelled = known[np.isfinite(np.asarray(labels, float))]
        lacking = labelled[~labelled.isin(frame.index)]
        if len(lacking):
            raise InputError(f"{label}: {len(lacking)} labelled id(s) have no score "
                             f"({quoted(lacking)}); expected a score for every row "
                             "with an is_anomaly label, so the detector is compared with the baselines on the same rows")
    frame.attrs["source"] = label
    return frame


def load_anomaly_scores(es, path) -> pd.DataFrame:
    """The manifest's ``anomaly_scores`` file, checked against the set's ids (and its labels, when it has them)."""
    labels = None
    if label_column(es.metadata) is not None:
        _, labels = anomaly_labels(es.metadata)
    return read_anomaly_scores(path, es.ids, labels=labels, label=f"anomaly_scores: {Path(path).name}")
