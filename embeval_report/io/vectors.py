"""Vectors files: one reader per format; every matrix read is validated by :mod:`.matrix`."""
from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError
from .limits import check_npz_member, read_parquet
from .matrix import finalize, pick_array_name
from .files import (
    NAN_STRINGS,
    as_ids,
    cell_problem,
    check_unique,
    existing_file,
    is_float,
    is_number,
    library_errors,
    one_line,
)



def load_vectors(
    path: str | os.PathLike, *, name_for_errors: str | None = None, scratch: str | os.PathLike | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Read and validate a vectors file.

    Parameters
    ----------
    path : str or path-like
        A file in one of ``VECTOR_FORMATS`` (chosen by extension), a Zarr store or an HDF5 file
        (see :mod:`.stores`).
    name_for_errors : str, optional
        How to name the file in error messages (default: its file name).
    scratch : str or path-like, optional
        Folder for the float32 copy of a set larger than one block (see :func:`.stores.finalize_source`).

    Returns
    -------
    vectors : numpy.ndarray
        float32 (n, d), C-contiguous, validated; a read-only memory map for a set larger than one block
        (a Zarr store, an HDF5 dataset or a large ``.npy``).
    ids : numpy.ndarray or None
        Object array of str when the file carries ids, else None.
    """
    from .stores import finalize_source, is_store, open_source

    if not is_store(path):
        path = existing_file(path)
    label = name_for_errors or Path(path).name
    source = open_source(path, label)
    if source is not None:
        with source:
            return finalize_source(source, source.ids, label, source.ids_label, scratch)
    raw, ids = read_raw(path, label)
    return finalize(raw, ids, label, label)


# --------------------------------------------------------------------- readers


def read_raw(path: Path, label: str, id_column: str | None = None, *, entity: str | None = None
             ) -> tuple[np.ndarray, Any]:
    """Read a vectors file by extension into (unvalidated array, ids or None); a folder is read as a
    PyTorch-BigGraph checkpoint (``entity``: its entity type, see :mod:`.checkpoints`); a Zarr store or
    an HDF5 file is read whole (see :mod:`.stores` for reading it in blocks)."""
    from .stores import is_store, read_store

    if is_store(path):
        return read_store(path, label)
    if path.is_dir():
        from .checkpoints import read_pbg_checkpoint

        return read_pbg_checkpoint(path, entity=entity, label=label)
    suffix = path.suffix.lower()
    if suffix in _TABLE_READERS:
        return _TABLE_READERS[suffix](path, label, id_column)
    if suffix not in _ARRAY_READERS:
        raise InputError(
            f"{label}: unknown vectors format {suffix or '(no extension)'!r}; supported: {', '.join(VECTOR_FORMATS)}"
        )
    return _ARRAY_READERS[suffix](path, label)


def _read_npy(path: Path, label: str) -> tuple[np.ndarray, None]:
    with library_errors(label, "a NumPy .npy file"):
        return np.load(path, allow_pickle=False), None


def _read_npz(path: Path, label: str) -> tuple[np.ndarray, np.ndarray | None]:
    with library_errors(label, "a NumPy .npz file"), np.load(path, allow_pickle=False) as archive:
        name = pick_array_name(archive.files, label)
        for member in (name, "ids") if "ids" in archive.files else (name,):
            check_npz_member(archive, member, label)
        return archive[name], archive["ids"] if "ids" in archive.files else None


def _read_safetensors(path: Path, label: str) -> tuple[np.ndarray, None]:
    from safetensors import safe_open

    with library_errors(label, "a safetensors file"):
        with safe_open(str(path), framework="np") as f:
            name = pick_array_name(f.keys(), label)
            if f.get_slice(name).get_dtype() not in ("BF16", "F8_E4M3", "F8_E5M2"):
                return f.get_tensor(name), None
        with safe_open(str(path), framework="pt") as f:  # dtypes numpy lacks
            return _tensor_to_numpy(f.get_tensor(name)), None


def _read_torch(path: Path, label: str) -> tuple[np.ndarray, Any]:
    import torch

    with library_errors(label, "a PyTorch file (torch.load with weights_only=True)"):
        obj = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(obj, torch.Tensor):
        return _tensor_to_numpy(obj), None
    if not isinstance(obj, dict):
        raise InputError(
            f"{label}: expected a tensor or a dict with 'vectors' or 'embeddings', found {type(obj).__name__}"
        )
    name = pick_array_name(obj, label)
    if not isinstance(obj[name], torch.Tensor):
        raise InputError(f"{label}: entry {name!r} should be a tensor, found {type(obj[name]).__name__}")
    ids = obj.get("ids")
    return _tensor_to_numpy(obj[name]), ids.tolist() if isinstance(ids, torch.Tensor) else ids


def _tensor_to_numpy(tensor: Any) -> np.ndarray:
    """CPU numpy view of a tensor; float types numpy lacks (bfloat16, float8) become float32."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.is_floating_point() and tensor.dtype not in (torch.float16, torch.float32, torch.float64):
        tensor = tensor.float()
    return tensor.numpy()


def _read_gensim(path: Path, label: str) -> tuple[np.ndarray, list[str]]:
    """gensim KeyedVectors or a full Word2Vec / FastText / Doc2Vec model (its document vectors), read
    through an allow-listed unpickler (:func:`.checkpoints.read_gensim_model`)."""
    from .checkpoints import read_gensim_model

    return read_gensim_model(path, label=label)


def _read_word2vec_text(path: Path, label: str) -> tuple[np.ndarray, list[str]]:
    """word2vec/GloVe/fastText text, with or without the "count dimensions" header line.

    gensim silently repeats short rows and drops duplicate words, so the row structure is
    checked first (one cheap pass); numbers are parsed as float64 by gensim.
    """
    from gensim.models import KeyedVectors

    has_header, n = _check_word2vec_text(path, label)
    try:
        kv = KeyedVectors.load_word2vec_format(
            str(path), binary=False, no_header=not has_header, limit=n, datatype=np.float64
        )
    except ValueError as e:
        _diagnose_word2vec_values(path, label, has_header)
        raise InputError(f"{label}: could not read as word2vec text: {one_line(e)}") from None
    return kv.vectors, list(kv.index_to_key)


def _read_word2vec_binary(path: Path, label: str) -> tuple[np.ndarray, list[str]]:
    from gensim.models import KeyedVectors

    with open(path, "rb") as f:
        header = f.readline().split()
    if len(header) != 2 or not all(part.isdigit() for part in header):
        raise InputError(f"{label}: not a word2vec binary file; expected a first line 'count dimensions'")
    with library_errors(label, "word2vec binary"):
        kv = KeyedVectors.load_word2vec_format(str(path), binary=True)
    words = list(kv.index_to_key)
    declared = int(header[0])
    if len(words) != declared or None in words:
        distinct = sum(w is not None for w in words)
        raise InputError(
            f"{label}: the header announces {declared} vectors but {distinct} distinct words were read; "
            "the file has duplicate words"
        )
    return kv.vectors, words


def _word2vec_header(first_line: bytes) -> tuple[int, int] | None:
    parts = first_line.split()
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return int(parts[0]), int(parts[1])
    return None


def _word2vec_rows(path: Path, has_header: bool) -> Iterator[tuple[int, bytes]]:
    """(line number, line without trailing whitespace) for each line after the header."""
    with open(path, "rb") as f:
        if has_header:
            f.readline()
        for line_no, line in enumerate(f, 2 if has_header else 1):
            yield line_no, line.rstrip()


def _check_word2vec_text(path: Path, label: str) -> tuple[bool, int]:
    """Check row lengths, the header count and duplicate words; return (has_header, rows)."""
    with open(path, "rb") as f:
        header = _word2vec_header(f.readline())
    declared, d = header if header else (None, None)
    words: list[bytes] = []
    blank_line = None
    for line_no, line in _word2vec_rows(path, header is not None):
        if not line:
            blank_line = blank_line or line_no
            continue
        if blank_line:
            raise InputError(f"{label}, line {blank_line}: empty line; expected a word and its values")
        found = line.count(b" ")  # gensim splits on single spaces
        if d is None:
            d = found
        if found != d or found == 0:
            where = f"{label}, row {len(words) + 1} (line {line_no})"
            raise InputError(f"{where}: expected {d or 'some'} values, found {found}")
        words.append(line[:line.index(b" ")])
    if declared is not None and declared != len(words):
        raise InputError(f"{label}: the header announces {declared} vectors but the file has {len(words)}")
    check_unique(as_ids(words, label), label)
    return header is not None, len(words)


def _diagnose_word2vec_values(path: Path, label: str, has_header: bool) -> None:
    """Raise InputError for the first value that is not a number, if any."""
    for row, (line_no, line) in enumerate(_word2vec_rows(path, has_header), 1):
        for col, text in enumerate(line.decode("utf-8", "replace").split(" ")[1:], 1):
            if not is_float(text):
                raise InputError(f"{label}, row {row} (line {line_no}), column {col}: {cell_problem(text)}")


@dataclass(frozen=True)
class _Layout:
    """Shape of a delimited text file, found from its first rows."""

    header: list[str] | None  # column names when the first row is a header
    skip: int                 # lines before the data (the header's lines)
    width: int                # fields per row
    id_index: int | None      # position of the id column


def _delimited_layout(path: Path, sep: str, label: str, id_column: str | None = None) -> _Layout:
    """Detect the header and the id column of a .csv/.tsv file.

    The first row is a header when its first cell is ``id`` or empty, when any later cell
    is not a number, or when it is pandas' default column labels 0, 1, 2, ...
    """
    rows = []
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
        reader = csv.reader(f, delimiter=sep)
        for row in reader:
            if row:
                rows.append((row, reader.line_num))
            if len(rows) == 2:
                break
    if not rows:
        return _Layout(None, 0, 0, None)
    first, first_line = rows[0]
    header = first if _looks_like_header(first) else None
    data = first if header is None else (rows[1][0] if len(rows) > 1 else None)
    if id_column is not None:
        if header is None or id_column not in header:
            columns = ", ".join(header or []) or "no header"
            raise InputError(f"{label}: no column named {id_column!r} (columns: {columns})")
        id_index = header.index(id_column)
    elif header is not None and header[0].strip() in ("id", ""):
        id_index = 0
    elif data is not None and not is_number(data[0]):
        id_index = 0
    else:
        id_index = None
    return _Layout(header, first_line if header else 0, len(first), id_index)


def _looks_like_header(row: list[str]) -> bool:
    first = row[0].strip()
    if first in ("id", "") or not all(is_number(cell) for cell in row[1:]):
        return True
    if len(row) < 2 or not all(cell.strip().isdigit() for cell in row):
        return False
    return [int(cell) for cell in row] == list(range(len(row)))


def _read_delimited(path: Path, label: str, id_column: str | None = None, *, sep: str) -> tuple[np.ndarray, Any]:
    """Read a .csv/.tsv vectors table (see :func:`_delimited_layout`)."""
    layout = _delimited_layout(path, sep, label, id_column)
    values = [j for j in range(layout.width) if j != layout.id_index]
    dtype: dict[int, Any] = {j: np.float64 for j in values}
    if layout.id_index is not None:
        dtype[layout.id_index] = str
    try:
        frame = pd.read_csv(
            path, sep=sep, header=None, skiprows=layout.skip, dtype=dtype,
            keep_default_na=False, na_values={j: NAN_STRINGS for j in values},
        )
    except pd.errors.EmptyDataError:
        return np.empty((0, len(values))), None
    except ValueError as e:  # also pandas' ParserError and UnicodeDecodeError
        _diagnose_delimited(path, sep, label, layout)
        raise InputError(f"{label}: could not read as a table: {one_line(e)}") from None
    if frame.shape[1] != layout.width:
        _diagnose_delimited(path, sep, label, layout)
        raise InputError(f"{label}: expected {layout.width} fields per row, found {frame.shape[1]}")
    return _split_table(frame, label, layout.id_index)


def _diagnose_delimited(path: Path, sep: str, label: str, layout: _Layout) -> None:
    """Raise InputError for the first ragged row or non-numeric value, if any."""
    has_id = layout.id_index is not None
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
        reader = csv.reader(f, delimiter=sep)
        row_no = 0
        for fields in reader:
            if reader.line_num <= layout.skip or not fields:
                continue
            row_no += 1
            where = f"{label}, row {row_no} (line {reader.line_num})"
            if len(fields) != layout.width:
                raise InputError(f"{where}: expected {layout.width - has_id} values, found {len(fields) - has_id}")
            for j, text in enumerate(fields):
                if j != layout.id_index and not is_number(text):
                    col = j + 1 - (has_id and j > layout.id_index)
                    name = f" ({layout.header[j]!r})" if layout.header else ""
                    raise InputError(f"{where}, column {col}{name}: {cell_problem(text)}")


def _read_parquet(path: Path, label: str, id_column: str | None = None) -> tuple[np.ndarray, Any]:
    with library_errors(label, "a Parquet file"):
        frame = read_parquet(path, label, index_as_column=False)
    if id_column is None and not isinstance(frame.index, pd.RangeIndex):
        frame = frame.reset_index()  # a stored pandas index holds the ids
        id_column = frame.columns[0]
    return _split_table(frame, label, id_column)


def _split_table(frame: pd.DataFrame, label: str, id_column: Any = None) -> tuple[np.ndarray, pd.Series | None]:
    """Split a table into (vector values, ids or None).

    Without ``id_column`` the first column holds the ids when it is named ``id`` or holds
    text (neither numbers nor lists). The other columns must be numeric, or be a single
    column of lists.
    """
    if id_column is None and len(frame.columns):
        first = frame[frame.columns[0]]
        if str(first.name) == "id" or not (_is_numeric(first) or _holds_lists(first)):
            id_column = first.name
    ids = None
    if id_column is not None:
        if id_column not in frame.columns:
            raise InputError(f"{label}: no column named {id_column!r} (columns: {', '.join(map(str, frame.columns))})")
        ids = frame[id_column]
        frame = frame.drop(columns=[id_column])
    if frame.shape[1] == 1 and not _is_numeric(frame.iloc[:, 0]) and _holds_lists(frame.iloc[:, 0]):
        return _stack_lists(frame.iloc[:, 0], label), ids
    for name in frame.columns:
        if not _is_numeric(frame[name]):
            raise _non_numeric_error(frame[name], label)
    target = np.float32 if all(dt == np.float32 for dt in frame.dtypes) else np.float64
    return frame.to_numpy(dtype=target, na_value=np.nan), ids


def _is_numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype)


def _holds_lists(series: pd.Series) -> bool:
    return len(series) > 0 and isinstance(series.iloc[0], (list, tuple, np.ndarray))


def _stack_lists(series: pd.Series, label: str) -> np.ndarray:
    """Stack a column whose cells are equal-length lists of numbers into (n, d)."""
    cells = series.to_numpy(dtype=object)
    lengths = np.fromiter(
        (len(c) if isinstance(c, (list, tuple, np.ndarray)) else -1 for c in cells), dtype=np.int64, count=len(cells)
    )
    bad = np.flatnonzero(lengths != lengths[0])
    if bad.size:
        r = int(bad[0])
        found = "no list" if lengths[r] < 0 else f"{lengths[r]} values"
        raise InputError(f"{label}, row {r + 1}, column {series.name!r}: expected {lengths[0]} values, found {found}")
    return np.stack([np.asarray(c) for c in cells])


def _non_numeric_error(series: pd.Series, label: str) -> InputError:
    try:
        coerced = pd.to_numeric(series, errors="coerce")
    except TypeError:  # cells that are not scalars
        coerced = pd.Series(np.nan, index=series.index)
    bad = np.flatnonzero(coerced.isna().to_numpy() & series.notna().to_numpy())
    if bad.size:
        r = int(bad[0])
        return InputError(f"{label}, row {r + 1}, column {series.name!r}: {cell_problem(str(series.iloc[r]))}")
    return InputError(f"{label}, column {series.name!r}: expected numbers, found {series.dtype}")


def table_columns(path: Path) -> list[str]:
    """Column names of a .csv/.tsv (with a header) or .parquet file; [] otherwise."""
    suffix = path.suffix.lower()
    if suffix in DELIMITERS:
        return _delimited_layout(path, DELIMITERS[suffix], path.name).header or []
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        with library_errors(path.name, "a Parquet file"):
            return list(pq.read_schema(path).names)
    return []


DELIMITERS = {".csv": ",", ".tsv": "\t"}
_TABLE_READERS: dict[str, Callable[[Path, str, str | None], tuple[np.ndarray, Any]]] = {
    ".csv": partial(_read_delimited, sep=","),
    ".tsv": partial(_read_delimited, sep="\t"),
    ".parquet": _read_parquet,
}
_ARRAY_READERS: dict[str, Callable[[Path, str], tuple[np.ndarray, Any]]] = {
    ".npy": _read_npy,
    ".npz": _read_npz,
    ".txt": _read_word2vec_text,
    ".vec": _read_word2vec_text,
    ".bin": _read_word2vec_binary,
    ".kv": _read_gensim,
    ".model": _read_gensim,
    ".safetensors": _read_safetensors,
    ".pt": _read_torch,
    ".pth": _read_torch,
}
VECTOR_FORMATS = tuple(sorted({**_TABLE_READERS, **_ARRAY_READERS}))
