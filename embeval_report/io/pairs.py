"""Positive pairs: ids that should be close (the uniformity chapter's ``positive_pairs``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import library_errors


@dataclass(frozen=True)
class PositivePairs:
    """Row-index pairs ``(i[k], j[k])`` that should be close, and where they came from."""

    i: np.ndarray
    j: np.ndarray
    source: str        # "file" or "labels"
    description: str   # one plain-text sentence fragment for the report (not escaped)
    n_available: int   # pairs in the file, or same-label pairs in total
    sampled: bool

    def __len__(self) -> int:
        return len(self.i)


def read_positive_pairs(path, ids) -> PositivePairs:
    """Read a ``positive_pairs`` table: a header row, ids in the first two columns (names free).

    ``.tsv`` files are tab-separated, anything else comma-separated. Surrounding whitespace of
    ids and blank lines are ignored; further columns are ignored. Raises :class:`InputError`
    naming the file, the row (1-based data rows) and physical line, and the id, for an unknown
    id, a missing id, a pair of an id with itself, a ragged row, fewer than two columns, no
    rows, or a first row that holds two ids (no header).
    """
    path = Path(path)
    label = path.name
    sep = "\t" if path.suffix.lower() == ".tsv" else ","
    with library_errors(label, "a table of id pairs"):
        raw = pd.read_csv(path, sep=sep, header=None, dtype=str, keep_default_na=False, skipinitialspace=True,
                          encoding="utf-8-sig", skip_blank_lines=False)  # header=None: ragged rows are errors
    raw = raw.fillna("")
    line = np.flatnonzero((raw != "").any(axis=1).to_numpy()) + 1  # physical line of each non-blank row
    if len(line) == 0:
        raise InputError(f"{label}: empty file; expected a header row and one id pair per row")
    table = raw.iloc[line[1:] - 1]
    table.columns = raw.iloc[line[0] - 1].tolist()
    header_line, line = int(line[0]), line[1:]
    if table.shape[1] < 2:
        raise InputError(f"{label}: found {table.shape[1]} column(s) ({', '.join(map(str, table.columns))}); "
                         "expected a header row and two id columns")
    if len(table) == 0:
        raise InputError(f"{label}: no pairs below the header row; expected one id pair per row")
    index = pd.Index(np.asarray(ids, dtype=object))
    head = [str(c).strip() for c in table.columns[:2]]
    if index.get_indexer(head).min() >= 0:
        raise InputError(f"{label}, line {header_line}: the first row ({head[0]!r}, {head[1]!r}) "
                         "holds two vector ids; expected a header row of column names above the pairs "
                         "(for example 'id_a,id_b')")
    cols = []
    for k, c in enumerate(table.columns[:2]):
        vals = table.iloc[:, k].astype(str).str.strip().to_numpy(dtype=object)
        empty = vals == ""
        if empty.any():
            r = int(np.argmax(empty))
            raise InputError(f"{label}, row {r + 1} (line {line[r]}), column {c!r}: missing id; "
                             "expected two ids per row")
        pos = index.get_indexer(vals)
        if (pos < 0).any():
            r = int(np.argmax(pos < 0))
            n_bad = int((pos < 0).sum())
            raise InputError(f"{label}, row {r + 1} (line {line[r]}), column {c!r}: id {vals[r]!r} matches no "
                             f"vector id ({n_bad} unknown id{'s' if n_bad > 1 else ''} in this column)")
        cols.append(pos.astype(np.int64))
    same = cols[0] == cols[1]
    if same.any():
        r = int(np.argmax(same))
        raise InputError(f"{label}, row {r + 1} (line {line[r]}): pairs id {index[cols[0][r]]!r} with itself; "
                         "expected two different ids")
    m = len(table)
    return PositivePairs(cols[0], cols[1], "file", f"{m:,} pair{'s' if m != 1 else ''} from {label}", m, False)


