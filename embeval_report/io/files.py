"""File access and message helpers shared by every reader of :mod:`embeval_report.io`.

Conventions used in messages: rows and columns are 1-based; "row" counts vectors or data rows (not
header lines) and "column" counts vector components (the id column is not counted). Text formats also
give the physical line number where it helps.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError

# Strings pandas reads as missing by default; ids are never read through this list.
NA_STRINGS = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)
# In vector columns an empty cell is an error (often a short row), not a NaN.
NAN_STRINGS = tuple(s for s in NA_STRINGS if s)


def existing_file(path: str | os.PathLike, where: str | None = None) -> Path:
    """Absolute path of an existing regular file, else InputError (prefixed by ``where``)."""
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    prefix = f"{where}: " if where else ""
    if not path.exists():
        raise InputError(f"{prefix}file not found: {path}")
    if path.is_dir():
        raise InputError(f"{prefix}{path} is a directory; expected a file")
    if not path.is_file():
        raise InputError(f"{prefix}{path} is not a regular file")
    return path


def resolve_path(value: str, base: Path) -> Path:
    return Path(os.path.abspath(os.path.join(base, os.path.expanduser(value))))


@contextmanager
def library_errors(label: str, what: str) -> Iterator[None]:
    """Turn any error a reading library raises into an InputError naming the file."""
    try:
        yield
    except InputError:
        raise
    except Exception as e:  # libraries raise many types for corrupt or foreign files
        raise InputError(f"{label}: could not read as {what}: {one_line(e)}") from None


def one_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def is_float(text: str) -> bool:
    """Whether Python (and numpy) parse ``text`` as a float, "nan" and "inf" included."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def is_number(text: str) -> bool:
    """Whether a table cell reads as a number, pandas' missing-value spellings included."""
    return text.strip() in NAN_STRINGS or is_float(text)


def cell_problem(text: str) -> str:
    return "empty value; expected a number" if not text.strip() else f"{text!r} is not a number"


def describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def ids_fit_text(ids: np.ndarray) -> bool:
    """Whether every id survives a one-id-per-line text file unchanged."""
    bom = len(ids) > 0 and ids[0].startswith("\ufeff")  # the reader drops a leading BOM
    return not bom and all(i == i.strip() and "\n" not in i and "\r" not in i for i in ids)


def save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:  # a file object keeps np.save from appending ".npy"
        np.save(f, array, allow_pickle=False)


def write_atomic(path: Path, write: Callable[[Path], Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def read_ids_file(path: Path, label: str) -> np.ndarray:
    """Read one id per line; blank lines are allowed only at the end."""
    lines = [line.strip() for line in read_text(path, label).split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    if "" in lines:
        raise InputError(f"{label}, line {lines.index('') + 1}: empty id; expected one id per line")
    return np.array(lines, dtype=object)


def read_text(path: Path, label: str) -> str:
    """Read a UTF-8 text file with universal newlines only (\\n, \\r, \\r\\n)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            return "".join(f)
    except UnicodeDecodeError as e:
        raise InputError(f"{label}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def as_ids(values: Any, label: str) -> np.ndarray:
    """Convert ids to an object array of non-empty python str."""
    arr = values.to_numpy(dtype=object) if isinstance(values, pd.Series) else np.asarray(values, dtype=object)
    if arr.ndim != 1:
        raise InputError(f"{label}: expected a flat list of ids, found shape {arr.shape}")
    missing = pd.isna(arr)
    if missing.any():
        raise InputError(f"{label}, row {int(np.argmax(missing)) + 1}: missing id")
    ids = np.empty(len(arr), dtype=object)
    ids[:] = [v if type(v) is str else v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in arr]
    empty = ids == ""
    if empty.any():
        raise InputError(f"{label}, row {int(np.argmax(empty)) + 1}: empty id")
    return ids


def check_count(ids: np.ndarray, n: int, ids_label: str, vectors_label: str) -> None:
    if len(ids) != n:
        if ids_label == vectors_label:
            raise InputError(f"{ids_label}: {len(ids)} ids for {n} vectors; expected one id per vector")
        raise InputError(
            f"{ids_label} has {len(ids)} ids but {vectors_label} has {n} vectors; expected one id per vector"
        )


def check_unique(ids: np.ndarray, label: str) -> None:
    duplicated = pd.Index(ids).duplicated()
    if duplicated.any():
        j = int(np.argmax(duplicated))
        i = int(np.flatnonzero(ids[:j] == ids[j])[0])
        raise InputError(f"{label}: duplicate id {ids[j]!r} in rows {i + 1} and {j + 1}")


#: separators of the delimited tables :func:`read_table` reads, by suffix
TABLE_SEPARATORS = {".csv": ",", ".tsv": "\t", ".txt": "\t"}


def read_table_file(path: Path, label: str, *, separators: dict[str, str], csv_options, expected: str,
                    kind: str = "format") -> pd.DataFrame:
    """A table read by its suffix: delimited (``separators``: suffix -> separator; ``csv_options``: the other
    options of ``pandas.read_csv``, or a function of the path giving them) or Parquet
    (:func:`~embeval_report.io.limits.read_parquet`: its declared size checked). Every error is one line naming
    ``label``: another suffix says ``unsupported <kind> '.x'; expected <expected>``, bytes that are not UTF-8 say
    so, and a file the library cannot parse gets the library's first line."""
    suffix = path.suffix.lower()
    if suffix in separators:
        options = csv_options(path) if callable(csv_options) else csv_options
        with library_errors(label, "a table"):
            try:
                return pd.read_csv(path, sep=separators[suffix], **options)
            except UnicodeDecodeError as e:
                raise InputError(f"{label}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if suffix == ".parquet":
        from .limits import read_parquet

        with library_errors(label, "a Parquet file"):
            return read_parquet(path, label)
    raise InputError(f"{label}: unsupported {kind} {suffix or '(no extension)'!r}; expected {expected}")


def read_table(path, label: str) -> pd.DataFrame:
    """A table of strings (csv / tsv / txt / parquet) with its header; nothing read as NaN."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{label}: file not found ({p})")
    t = read_table_file(p, label, separators=TABLE_SEPARATORS, expected=".csv, .tsv, .txt (tab-separated) or "
                        ".parquet with a header row",
                        csv_options=dict(dtype=str, keep_default_na=False, na_filter=False, skipinitialspace=True,
                                         encoding="utf-8-sig"))
    t.columns = [str(c).strip() for c in t.columns]
    return t


#: unknown ids named in a message before "..."
NAMED = 3


@dataclass(frozen=True)
class UnknownIds:
    """The ids of a column that name no known id: the first row naming one (0-based) and its id, the number of
    rows naming one, and the distinct unknown ids in the order they appear."""

    row: int
    value: object
    rows: int
    ids: list

    def named(self, limit: int = NAMED) -> str:
        """The first ``limit`` unknown ids, quoted, ``, ...`` after them when there are more."""
        return quoted(self.ids, limit)


def quoted(ids, limit: int = NAMED) -> str:
    """The first ``limit`` of ``ids``, quoted and comma-separated, ``, ...`` after them when there are more."""
    ids = list(ids)
    return ", ".join(map(repr, ids[:limit])) + (", ..." if len(ids) > limit else "")


def unknown_ids(values: np.ndarray, known) -> UnknownIds | None:
    """Which of ``values`` (an object array of id strings) are not among ``known`` (ids, compared as strings);
    ``None`` when every one is known."""
    index = pd.Index(np.asarray([str(k) for k in known], dtype=object))
    bad = index.get_indexer(values) < 0
    if not bad.any():
        return None
    r = int(np.argmax(bad))
    return UnknownIds(r, values[r], int(bad.sum()), list(dict.fromkeys(values[bad])))
