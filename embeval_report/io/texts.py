"""Texts to embed with a model: a corpus or a set of queries, each text with its id.

Formats, chosen by the file extension:

* ``.jsonl`` (or ``.ndjson``): one JSON object per line with an ``"id"`` (a string or an integer;
  BEIR's ``"_id"`` is accepted when there is no ``"id"``) and a ``"text"`` (a non-empty string);
  other keys are ignored, blank lines are skipped, messages give the physical line number;
* ``.csv`` / ``.tsv`` / ``.parquet``: a table with ``id`` and ``text`` columns (other columns are
  ignored); messages give the 1-based data row (the header is not counted).

Ids are stripped of surrounding whitespace (as the ids files and qrels readers do), must be
non-empty and unique; the order of the file is kept.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import as_ids, check_unique, describe, existing_file, library_errors, read_text
from .limits import read_parquet

#: extensions :func:`read_texts` reads
TEXT_FORMATS = (".jsonl", ".ndjson", ".csv", ".tsv", ".parquet")
#: characters of a text shown beside its id in a table
SNIPPET = 60
_EXPECTED = "expected columns 'id' and 'text'"


def read_texts(path: str | os.PathLike, *, label: str | None = None) -> tuple[np.ndarray, list[str]]:
    """Read ids and texts from a JSONL, CSV, TSV or Parquet file (see the module docstring).

    Parameters
    ----------
    path : path of the file.
    label : name used in messages (default: the file name), e.g. ``"queries: queries.jsonl"``.

    Returns
    -------
    ids : numpy.ndarray of dtype object (python str), shape (n,), unique, in file order.
    texts : list of str, one per id.

    Raises
    ------
    InputError
        Naming the file and the line or row: missing ``id``/``text`` key or column, missing or
        empty id, empty text, duplicate ids (both rows named), invalid JSON, empty file.
    """
    path = existing_file(path, label)
    label = label or path.name
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _read_jsonl(path, label)
    if suffix in (".csv", ".tsv", ".parquet"):
        return _read_table(path, label, suffix)
    raise InputError(f"{label}: unknown texts format {suffix or '(no extension)'!r}; expected one of "
                     f"{', '.join(TEXT_FORMATS)}")


def _read_jsonl(path: Path, label: str) -> tuple[np.ndarray, list[str]]:
    lines = read_text(path, label).split("\n")
    ids: list[str] = []
    texts: list[str] = []
    line_of: list[int] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{label}, line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: invalid JSON ({e.msg} at column {e.colno}); expected one JSON object "
                             'per line, e.g. {"id": "d1", "text": "..."}') from None
        except RecursionError:
            raise InputError(f"{where}: invalid JSON (nested too deeply); expected one JSON object per line") from None
        if not isinstance(record, dict):
            raise InputError(f'{where}: expected a JSON object with "id" and "text", found {describe(record)}')
        key = "id" if "id" in record or "_id" not in record else "_id"
        if key not in record:
            raise InputError(f'{where}: no "id" key (keys: {", ".join(record) or "none"}); expected "id" and "text"')
        if "text" not in record:
            raise InputError(f'{where}: no "text" key (keys: {", ".join(record) or "none"}); expected "id" and "text"')
        ids.append(_json_id(record[key], where))
        texts.append(_text(record["text"], where))
        line_of.append(number)
    if not ids:
        raise InputError(f'{label}: empty file; expected one JSON object per line with "id" and "text"')
    array = np.array(ids, dtype=object)
    duplicated = pd.Index(array).duplicated()
    if duplicated.any():
        j = int(np.argmax(duplicated))
        i = ids.index(ids[j])
        raise InputError(f"{label}: duplicate id {ids[j]!r} on lines {line_of[i]} and {line_of[j]}")
    return array, texts


def _json_id(value, where: str) -> str:
    if value is None:
        raise InputError(f"{where}: missing id (null); expected a string or an integer")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"{where}: expected a string or an integer id, found {describe(value)}")
    text = str(value).strip()
    if not text:
        raise InputError(f"{where}: empty id")
    return text


def _text(value, where: str) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(f"{where}: empty text; expected a non-empty string")
    if not isinstance(value, str):
        raise InputError(f"{where}: expected the text as a string, found {describe(value)}")
    return value


def _read_table(path: Path, label: str, suffix: str) -> tuple[np.ndarray, list[str]]:
    if path.stat().st_size == 0:
        raise InputError(f"{label}: empty file; {_EXPECTED}")
    if suffix == ".parquet":
        with library_errors(label, "a Parquet file"):
            table = read_parquet(path, label)  # a stored pandas index (e.g. the ids) as a column
    else:
        with library_errors(label, "a table"):
            # everything as text, nothing read as NaN: "NA", "null" are ids or texts like any other
            table = pd.read_csv(path, sep="," if suffix == ".csv" else "\t", dtype=str, keep_default_na=False)
    columns = [str(c) for c in table.columns]
    for column in ("id", "text"):
        if column not in columns:
            raise InputError(f"{label}: no {column!r} column (columns: {', '.join(columns) or 'none'}); {_EXPECTED}")
    if len(table) == 0:
        raise InputError(f"{label}: no rows; {_EXPECTED} and one row per text")
    raw_ids = np.array([v.strip() if isinstance(v, str) else v for v in table["id"].tolist()], dtype=object)
    blank = np.array([isinstance(v, str) and not v for v in raw_ids], dtype=bool)
    if blank.any():  # an empty cell in a text table: the id is missing
        raise InputError(f"{label}, row {int(np.argmax(blank)) + 1}: missing id")
    ids = as_ids(raw_ids, label)
    check_unique(ids, label)
    texts = [_text(None if _is_na(v) else v, f"{label}, row {r}") for r, v in enumerate(table["text"].tolist(), 1)]
    return ids, texts


def _is_na(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


# ---------------------------------------------------------------------------------------------
# Texts beside ids in the report's tables
# ---------------------------------------------------------------------------------------------

def snippet(text: str, width: int = SNIPPET) -> str:
    """The first ``width`` characters of ``text`` on one line (runs of whitespace as one space), with … when cut."""
    one = " ".join(str(text).split())
    return one if len(one) <= width else one[:max(width - 1, 1)].rstrip() + "…"


def texts_by_id(fields: dict | None = None, metadata: pd.DataFrame | None = None) -> dict[str, str]:
    """``id -> text`` of a set's documents, for showing beside ids: the manifest's ``texts`` file when its fields
    name one (read with :func:`read_texts`), else a ``text`` column of its ``metadata`` (keyed by ``id``, or by
    the index); ``{}`` when there is neither."""
    path = (fields or {}).get("texts")
    if path:
        ids, texts = read_texts(path)
        return dict(zip((str(i) for i in ids), texts))
    if metadata is None or "text" not in metadata.columns:
        return {}
    keys = metadata["id"] if "id" in metadata.columns else metadata.index
    return {str(k): str(t) for k, t in zip(keys, metadata["text"]) if isinstance(t, str) and t.strip()}
