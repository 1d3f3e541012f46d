"""Load and validate an embedding set.

An embedding set is given either as a bare vectors file or as a YAML manifest that
names the vectors file plus optional ids, metadata and chapter inputs. Everything is
validated on load; bad input raises :class:`~embeval_report.errors.InputError` with a
message naming the file, the row or field, and what was expected.

Conventions used in messages: rows and columns are 1-based; "row" counts vectors (data
rows, not header lines) and "column" counts vector components (the id column is not
counted). Text formats also give the physical line number where it helps.

The ``ids`` manifest field
--------------------------
``ids`` is a path when a file of that name exists (relative to the manifest's folder);
the file then holds one id per line (surrounding whitespace is stripped; blank lines
are allowed only at the end). Otherwise ``ids`` names a column: of the vectors table
when the vectors file is a .csv/.tsv/.parquet with a column of that name (all other
columns are then vector values), else of the metadata table, which must then hold one
row per vector in vector order (and is keyed by that column; no ``id`` column needed).
Without an ``ids`` field the ids come from the vectors file when it carries them:

* tables (.csv/.tsv/.parquet): a stored pandas index (parquet), else the first column
  when its header is ``id``, is empty (an index written by pandas), or holds text;
* .npz / torch dicts: an ``ids`` entry; word2vec and gensim files: the words.

Otherwise the ids are the row numbers ``"0"``, ``"1"``, ... and ``has("ids")`` is False.
An explicit ``ids`` field wins over ids carried by the vectors file.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import InputError

__all__ = [
    "CORE_FIELDS",
    "FIELD_KINDS",
    "MANIFEST_FIELDS",
    "MANIFEST_SUFFIXES",
    "VECTOR_FORMATS",
    "EmbeddingSet",
    "ManifestField",
    "MatchedVectors",
    "category_column",
    "iter_groups",
    "load_matched",
    "load_prepared",
    "load_source",
    "load_vectors",
    "read_manifest",
    "save_prepared",
]

# --------------------------------------------------------------------------- schema

FIELD_KINDS = ("str", "path", "path_or_column", "path_list", "mapping_list", "timestamp")


@dataclass(frozen=True)
class ManifestField:
    """One manifest field (or one key of a ``mapping_list`` item).

    Attributes
    ----------
    kind : str
        One of ``FIELD_KINDS``: "str", "path" (an existing file, resolved to an absolute
        path), "path_or_column" (see the module docstring), "path_list" (non-empty list of
        paths), "mapping_list" (non-empty list of mappings with the given ``keys``),
        "timestamp" (a date, number or string; dates become ISO strings).
    description : str
        One line shown in error messages and documentation.
    required : bool
        Whether the field must be given.
    keys : Mapping[str, ManifestField]
        The schema of each item of a "mapping_list".
    """

    kind: str
    description: str
    required: bool = False
    keys: Mapping[str, ManifestField] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in FIELD_KINDS:
            raise ValueError(f"unknown manifest field kind {self.kind!r}; expected one of {FIELD_KINDS}")


_SNAPSHOT_KEYS = {
    "name": ManifestField("str", "name of the snapshot", required=True),
    "vectors": ManifestField("path", "vectors file of the snapshot", required=True),
    "timestamp": ManifestField("timestamp", "when the snapshot was taken (date, number or text)"),
}

_TRANCHE_KEYS = {
    "name": ManifestField("str", "label of the checkpoint (e.g. 'epoch 3' or 'tranche 2')", required=True),
    "vectors": ManifestField("path", "vectors file of the checkpoint", required=True),
    "order": ManifestField("timestamp", "position along training (number or date; default: list order)"),
    "run": ManifestField("str", "which training run the checkpoint belongs to (default: one run)"),
}

_VOCABULARY_KEYS = {
    "name": ManifestField("str", "name of the id subset (e.g. 'frequent words')", required=True),
    "ids": ManifestField("path", "file with one id per line", required=True),
}

MANIFEST_FIELDS: dict[str, ManifestField] = {
    "name": ManifestField("str", "display name of the embedding set (default: the manifest file name)"),
    "vectors": ManifestField("path", "file with the embedding matrix", required=True),
    "ids": ManifestField("path_or_column", "file with one id per line, or the name of an id column"),
    "metadata": ManifestField("path", "table (.csv/.tsv/.parquet) with an 'id' column and free columns"),
    "runs": ManifestField("path_list", "vectors files of further training runs of the same items"),
    "snapshots": ManifestField("mapping_list", "vectors of the same items over time", keys=_SNAPSHOT_KEYS),
    "tranches": ManifestField("mapping_list", "checkpoints along training (seed 003's tranches)", keys=_TRANCHE_KEYS),
    "vocabularies": ManifestField("mapping_list", "named id subsets for restricted stability",
                                  keys=_VOCABULARY_KEYS),
    "positive_pairs": ManifestField("path", "table of id pairs that should be similar"),
    "word_pairs": ManifestField("path", "table of word pairs with human similarity scores"),
    "analogies": ManifestField("path", "analogy questions (a : b :: c : d)"),
    "edges": ManifestField("path", "graph edges between ids"),
    "test_edges": ManifestField("path", "held-out graph edges for link prediction"),
    "negatives": ManifestField("path", "negative id pairs (non-edges)"),
    "score": ManifestField("str", "how link prediction scores an edge from two vectors: dot, cosine or neg_l2"),
}

CORE_FIELDS = ("name", "vectors", "ids", "metadata")
MANIFEST_SUFFIXES = (".yaml", ".yml")

# Strings pandas reads as missing by default; ids are never read through this list.
_NA_STRINGS = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)
# In vector columns an empty cell is an error (often a short row), not a NaN.
_NAN_STRINGS = tuple(s for s in _NA_STRINGS if s)
_CHECK_BLOCK = 1 << 22  # elements per block when scanning large arrays


# ------------------------------------------------------------------- embedding set


@dataclass(eq=False)
class EmbeddingSet:
    """A validated embedding set.

    Attributes
    ----------
    name : str
        Manifest ``name``, or the file stem for a bare vectors file.
    vectors : numpy.ndarray
        float32, shape (n, d), C-contiguous, finite, no zero rows, n >= 2.
    ids : numpy.ndarray
        dtype object (python str), shape (n,), unique, non-empty strings.
    metadata : pandas.DataFrame or None
        Indexed by ``ids`` (index name "id"), in vector order; NaN for ids absent from
        the metadata file.
    source : str
        Absolute path of the manifest or vectors file.
    fields : dict
        Validated manifest fields other than name/vectors/ids/metadata, paths absolute.
    ids_given : bool
        False when the ids are row numbers made up because the input had none.
    """

    name: str
    vectors: np.ndarray
    ids: np.ndarray
    metadata: pd.DataFrame | None
    source: str
    fields: dict = field(default_factory=dict)
    ids_given: bool = True

    @property
    def n(self) -> int:
        """Number of vectors."""
        return int(self.vectors.shape[0])

    @property
    def d(self) -> int:
        """Number of dimensions."""
        return int(self.vectors.shape[1])

    def has(self, requirement: str) -> bool:
        """Whether an input a chapter needs is present.

        Parameters
        ----------
        requirement : str
            "vectors", "name", "ids" (real ids, not row numbers), "metadata",
            "metadata.<column>" (the column exists and has at least one value), or the
            name of any other manifest field.

        Raises
        ------
        ValueError
            For a requirement that names nothing known (a typo in the caller).
        """
        if requirement in ("vectors", "name"):
            return True
        if requirement == "ids":
            return self.ids_given
        if requirement == "metadata":
            return self.metadata is not None
        if requirement.startswith("metadata."):
            column = requirement[len("metadata."):]
            return (
                self.metadata is not None
                and column in self.metadata.columns
                and bool(self.metadata[column].notna().any())
            )
        if requirement in MANIFEST_FIELDS or requirement in self.fields:
            return requirement in self.fields
        raise ValueError(
            f"unknown requirement {requirement!r}; expected 'vectors', 'ids', 'metadata', "
            f"'metadata.<column>' or a manifest field ({', '.join(MANIFEST_FIELDS)})"
        )


# ---------------------------------------------------------------------- public API


def load_vectors(
    path: str | os.PathLike, *, name_for_errors: str | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Read and validate a vectors file.

    Parameters
    ----------
    path : str or path-like
        A file in one of ``VECTOR_FORMATS`` (chosen by extension).
    name_for_errors : str, optional
        How to name the file in error messages (default: its file name).

    Returns
    -------
    vectors : numpy.ndarray
        float32 (n, d), C-contiguous, validated.
    ids : numpy.ndarray or None
        Object array of str when the file carries ids, else None.
    """
    path = _existing_file(path)
    label = name_for_errors or path.name
    raw, ids = _read_raw(path, label)
    return _finalize(raw, ids, label, label)


def load_source(source: str | os.PathLike) -> EmbeddingSet:
    """Load and validate an embedding set from a manifest (.yaml/.yml) or a vectors file."""
    path = _existing_file(source)
    suffix = path.suffix.lower()
    if suffix in MANIFEST_SUFFIXES:
        return _load_manifest_set(path)
    if suffix not in VECTOR_FORMATS:
        raise InputError(
            f"{path.name}: unknown format {suffix or '(no extension)'!r}; expected a manifest "
            f"({', '.join(MANIFEST_SUFFIXES)}) or a vectors file ({', '.join(VECTOR_FORMATS)})"
        )
    vectors, ids = load_vectors(path)
    return _make_set(path.stem, vectors, ids, None, path, {})


def category_column(metadata: pd.DataFrame | None, candidates, max_levels: int) -> str | None:
    """The first of ``candidates`` that is a metadata column with 2..``max_levels`` distinct values."""
    if metadata is None:
        return None
    for col in candidates:
        if col in metadata and 2 <= metadata[col].nunique() <= max_levels:
            return col
    return None


def iter_groups(groups):
    """``(name, row indices)`` for each value of ``groups`` in sorted order (missing values as "(missing)")."""
    g = pd.Series(np.asarray(groups, dtype=object)).fillna("(missing)").astype(str).to_numpy()
    for name in sorted(set(g)):
        yield name, np.flatnonzero(g == name)


@dataclass(frozen=True)
class MatchedVectors:
    """Another vectors file (a training run, a snapshot) matched by id to a reference set.

    ``vectors[r]`` belongs to reference row ``index[r]``; ``missing`` are reference ids the file
    lacks and ``extra`` the file's ids unknown to the reference, both reported, never silently
    dropped.
    """

    vectors: np.ndarray
    index: np.ndarray
    missing: np.ndarray
    extra: np.ndarray
    label: str


def load_matched(path: str | os.PathLike, reference: "EmbeddingSet", *, label: str | None = None) -> MatchedVectors:
    """Load ``path`` and match its rows to ``reference`` by id.

    A file that carries its own ids (csv/parquet id column, word2vec words, npz/pt ``ids``) is
    matched by them; a file without ids (``.npy``, safetensors) must have exactly the
    reference's rows, in the reference's order (the manifest's ``ids``).
    """
    path = _existing_file(path, label)
    label = label or path.name
    vectors, ids = load_vectors(path, name_for_errors=label)
    if ids is None:
        if len(vectors) != reference.n:
            raise InputError(f"{label}: {len(vectors)} rows but the reference set has {reference.n}; a file "
                             "without ids must list the same entities in the same order (give ids in the file "
                             "or use a format that carries them)")
        empty = np.array([], dtype=object)
        return MatchedVectors(vectors, np.arange(reference.n), empty, empty, label)
    position = pd.Index(reference.ids).get_indexer(pd.Index(ids))
    found = position >= 0
    if not found.any():
        raise InputError(f"{label}: none of its {len(ids)} ids occur in the reference set "
                         f"(first ids: {', '.join(map(str, ids[:3]))})")
    present = np.zeros(reference.n, dtype=bool)
    present[position[found]] = True
    order = np.argsort(position[found], kind="stable")
    return MatchedVectors(vectors[found][order], position[found][order], reference.ids[~present],
                          np.asarray(ids, dtype=object)[~found], label)


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """Parse and validate a manifest without loading the files it names.

    Returns
    -------
    dict
        The given fields in manifest order, checked against ``MANIFEST_FIELDS``; paths
        are absolute str, ``ids`` is ``{"path": ...}`` or ``{"column": ...}`` and
        ``name`` defaults to the manifest stem.
    """
    path = _existing_file(path)
    spec = _check_mapping(_parse_yaml(path), MANIFEST_FIELDS, path.name, path.parent, "field")
    spec.setdefault("name", path.stem)
    return spec


def save_prepared(es: EmbeddingSet, folder: str | os.PathLike) -> None:
    """Write an embedding set to a cache folder read back by :func:`load_prepared`.

    Writes vectors.npy, ids.txt (or ids.npy when an id cannot be one clean text line),
    metadata.parquet (when there is metadata) and info.json. Each file is written to a
    temporary name and then moved in place, so overwriting the folder that a memory-mapped
    set was loaded from is safe.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vectors = np.ascontiguousarray(es.vectors, dtype=np.float32)
    _write_atomic(folder / "vectors.npy", lambda p: _save_npy(p, vectors))
    if _ids_fit_text(es.ids):
        ids_text = "".join(f"{i}\n" for i in es.ids)
        _write_atomic(folder / "ids.txt", lambda p: p.write_text(ids_text, encoding="utf-8"))
        (folder / "ids.npy").unlink(missing_ok=True)
    else:
        _write_atomic(folder / "ids.npy", lambda p: _save_npy(p, np.array(list(es.ids), dtype=str)))
        (folder / "ids.txt").unlink(missing_ok=True)
    if es.metadata is not None:
        _write_atomic(folder / "metadata.parquet", lambda p: es.metadata.to_parquet(p))
    else:
        (folder / "metadata.parquet").unlink(missing_ok=True)
    info = {"name": es.name, "source": es.source, "fields": es.fields, "ids_given": es.ids_given}
    info_text = json.dumps(info, indent=2, ensure_ascii=False)
    _write_atomic(folder / "info.json", lambda p: p.write_text(info_text, encoding="utf-8"))


def load_prepared(folder: str | os.PathLike, *, mmap: bool = True) -> EmbeddingSet:
    """Read a folder written by :func:`save_prepared`.

    Parameters
    ----------
    folder : str or path-like
        The cache folder.
    mmap : bool
        Memory-map vectors.npy read-only instead of reading it into memory.
    """
    folder = Path(folder)
    info_path = _existing_file(folder / "info.json", f"{folder}: not a prepared embedding set")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    vectors = np.load(_existing_file(folder / "vectors.npy"), mmap_mode="r" if mmap else None, allow_pickle=False)
    if (folder / "ids.txt").is_file():
        ids = _read_ids_file(folder / "ids.txt", "ids.txt")
    else:
        ids = np.load(_existing_file(folder / "ids.npy"), allow_pickle=False).astype(object)
    _check_count(ids, len(vectors), f"{folder}/ids", f"{folder}/vectors.npy")
    metadata_path = folder / "metadata.parquet"
    metadata = pd.read_parquet(metadata_path) if metadata_path.is_file() else None
    return EmbeddingSet(
        name=info["name"], vectors=vectors, ids=ids, metadata=metadata, source=info["source"],
        fields=info["fields"], ids_given=info["ids_given"],
    )


# -------------------------------------------------------------------- manifest


def _load_manifest_set(path: Path) -> EmbeddingSet:
    """Load everything a manifest names (see the module docstring for the ids rule)."""
    spec = read_manifest(path)
    vectors_path = Path(spec["vectors"])
    metadata_path = Path(spec["metadata"]) if "metadata" in spec else None
    ids_ref = spec.get("ids")
    id_column, key = _ids_columns(ids_ref, vectors_path, metadata_path, path)
    table = _read_metadata_table(metadata_path, key) if metadata_path else None

    raw, ids = _read_raw(vectors_path, vectors_path.name, id_column)
    ids_label = vectors_path.name
    if ids_ref is not None and "path" in ids_ref:
        ids_label = Path(ids_ref["path"]).name
        ids = _read_ids_file(Path(ids_ref["path"]), ids_label)
    elif ids_ref is not None and id_column is None:
        ids_label = f"{metadata_path.name}, column {key!r}"
        ids = table[key]
    vectors, ids = _finalize(raw, ids, vectors_path.name, ids_label)
    del raw

    fields = {k: v for k, v in spec.items() if k not in CORE_FIELDS}
    es = _make_set(spec["name"], vectors, ids, None, path, fields)
    if table is not None:
        es.metadata = _align_metadata(table, es.ids, key, metadata_path.name)
    return es


def _ids_columns(
    ids_ref: dict | None, vectors_path: Path, metadata_path: Path | None, manifest: Path
) -> tuple[str | None, str]:
    """Resolve an ``ids`` column name: (column of the vectors table or None, metadata key)."""
    if ids_ref is None or "path" in ids_ref:
        return None, "id"
    column = ids_ref["column"]
    if column in _table_columns(vectors_path):
        return column, "id"
    if metadata_path is not None and column in _table_columns(metadata_path):
        return None, column
    tables = vectors_path.name + (f" or {metadata_path.name}" if metadata_path else "")
    raise InputError(
        f"{manifest.name}, field 'ids': {column!r} is neither an existing file "
        f"({_resolve(column, manifest.parent)}: file not found) nor a column of {tables}"
    )


def _parse_yaml(path: Path) -> Any:
    """Parse a YAML file; syntax errors name the line."""
    import yaml

    text = _read_text(path, path.name)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path.name}, line {mark.line + 1}" if mark is not None else path.name
        problem = getattr(e, "problem", None) or _one_line(e)
        raise InputError(f"{where}: invalid YAML: {problem}") from None


def _check_mapping(raw: Any, schema: Mapping[str, ManifestField], where: str, base: Path, noun: str) -> dict[str, Any]:
    """Validate a mapping against a schema; empty (null) values count as absent."""
    if not isinstance(raw, dict):
        raise InputError(f"{where}: expected a mapping of {noun}s ({', '.join(schema)}), found {_describe(raw)}")
    out = {}
    for key, value in raw.items():
        if key not in schema:
            raise InputError(f"{where}: unknown {noun} {key!r}; known {noun}s: {', '.join(schema)}")
        if value is not None:
            spec = schema[key]
            out[key] = _CHECKERS[spec.kind](value, f"{where}, {noun} {key!r}", base, spec)
    for key, spec in schema.items():
        if spec.required and key not in out:
            raise InputError(f"{where}: missing required {noun} {key!r} ({spec.description})")
    return out


def _require_text(value: Any, where: str, expected: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: expected {expected}, found {_describe(value)}")
    return value


def _check_str(value: Any, where: str, base: Path, spec: ManifestField) -> str:
    return _require_text(value, where, "a non-empty string")


def _check_path(value: Any, where: str, base: Path, spec: ManifestField) -> str:
    _require_text(value, where, "a file path (string)")
    return str(_existing_file(_resolve(value, base), where))


def _check_path_or_column(value: Any, where: str, base: Path, spec: ManifestField) -> dict[str, str]:
    _require_text(value, where, "a file path or a column name (string)")
    candidate = _resolve(value, base)
    if candidate.exists():
        return {"path": str(_existing_file(candidate, where))}
    return {"column": value}


def _check_path_list(value: Any, where: str, base: Path, spec: ManifestField) -> list[str]:
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: expected a non-empty list of file paths, found {_describe(value)}")
    return [_check_path(item, f"{where}, item {i}", base, spec) for i, item in enumerate(value, 1)]


def _check_mapping_list(value: Any, where: str, base: Path, spec: ManifestField) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise InputError(
            f"{where}: expected a non-empty list of mappings with keys {', '.join(spec.keys)}, found {_describe(value)}"
        )
    return [_check_mapping(item, spec.keys, f"{where}, item {i}", base, "key") for i, item in enumerate(value, 1)]


def _check_timestamp(value: Any, where: str, base: Path, spec: ManifestField) -> str | int | float:
    if isinstance(value, date):  # also datetime
        return value.isoformat()
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"{where}: expected a timestamp (date, number or string), found {_describe(value)}")
    return value


_CHECKERS: dict[str, Callable[[Any, str, Path, ManifestField], Any]] = {
    "str": _check_str,
    "path": _check_path,
    "path_or_column": _check_path_or_column,
    "path_list": _check_path_list,
    "mapping_list": _check_mapping_list,
    "timestamp": _check_timestamp,
}


# -------------------------------------------------------------- ids and metadata


def _make_set(name: str, vectors: np.ndarray, ids: np.ndarray | None, metadata: pd.DataFrame | None,
              source: Path, fields: dict) -> EmbeddingSet:
    """Build an EmbeddingSet, numbering the rows when there are no ids."""
    given = ids is not None
    if ids is None:
        ids = np.arange(len(vectors)).astype(str).astype(object)
    return EmbeddingSet(name, vectors, ids, metadata, str(source), fields, given)


def _read_ids_file(path: Path, label: str) -> np.ndarray:
    """Read one id per line; blank lines are allowed only at the end."""
    lines = [line.strip() for line in _read_text(path, label).split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    if "" in lines:
        raise InputError(f"{label}, line {lines.index('') + 1}: empty id; expected one id per line")
    return np.array(lines, dtype=object)


def _read_text(path: Path, label: str) -> str:
    """Read a UTF-8 text file with universal newlines only (\\n, \\r, \\r\\n)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            return "".join(f)
    except UnicodeDecodeError as e:
        raise InputError(f"{label}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _read_metadata_table(path: Path, key: str) -> pd.DataFrame:
    """Read a metadata table; the key column is read as text, never as NaN."""
    label = path.name
    suffix = path.suffix.lower()
    if suffix in _DELIMITERS:
        columns = _table_columns(path)
        with _library_errors(label, "a table"):
            table = pd.read_csv(
                path, sep=_DELIMITERS[suffix], dtype={key: str} if key in columns else None,
                keep_default_na=False, na_values={c: _NA_STRINGS for c in columns if c != key},
            )
    elif suffix == ".parquet":
        with _library_errors(label, "a Parquet file"):
            table = pd.read_parquet(path)
        if not isinstance(table.index, pd.RangeIndex):
            table = table.reset_index()
    else:
        raise InputError(f"{label}: unsupported metadata format {suffix!r}; expected .csv, .tsv or .parquet")
    if key not in table.columns:
        columns = ", ".join(map(str, table.columns)) or "none"
        raise InputError(
            f"{label}: no {key!r} column (columns: {columns}); expected a column {key!r} with the vector ids"
        )
    return table


def _align_metadata(table: pd.DataFrame, ids: np.ndarray, key: str, label: str) -> pd.DataFrame:
    """Index a metadata table by id in vector order; ids missing from it get NaN rows."""
    keys = _as_ids(table[key], f"{label}, column {key!r}")
    _check_unique(keys, label)
    unknown = ~pd.Index(keys).isin(ids)
    if unknown.any():
        examples = ", ".join(repr(k) for k in keys[unknown][:3])
        raise InputError(
            f"{label}: {int(unknown.sum())} of {len(keys)} ids match no vector id (e.g. {examples})"
        )
    metadata = table.drop(columns=[key])
    metadata.index = pd.Index(keys, name="id")
    return metadata.reindex(pd.Index(ids, name="id"))


def _as_ids(values: Any, label: str) -> np.ndarray:
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


def _check_count(ids: np.ndarray, n: int, ids_label: str, vectors_label: str) -> None:
    if len(ids) != n:
        if ids_label == vectors_label:
            raise InputError(f"{ids_label}: {len(ids)} ids for {n} vectors; expected one id per vector")
        raise InputError(
            f"{ids_label} has {len(ids)} ids but {vectors_label} has {n} vectors; expected one id per vector"
        )


def _check_unique(ids: np.ndarray, label: str) -> None:
    duplicated = pd.Index(ids).duplicated()
    if duplicated.any():
        j = int(np.argmax(duplicated))
        i = int(np.flatnonzero(ids[:j] == ids[j])[0])
        raise InputError(f"{label}: duplicate id {ids[j]!r} in rows {i + 1} and {j + 1}")


# ------------------------------------------------------------ vector validation


def _finalize(raw: np.ndarray, ids: Any, vectors_label: str, ids_label: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate raw vectors and ids; return float32 C-contiguous vectors and str ids."""
    raw = np.asarray(raw)
    _check_shape(raw, vectors_label)
    if ids is not None:
        ids = _as_ids(ids, ids_label)
        _check_count(ids, raw.shape[0], ids_label, vectors_label)
        _check_unique(ids, ids_label)
    vectors = _to_float32(raw, vectors_label, ids)
    zero = _first_row(vectors, lambda block: ~block.any(axis=1))
    if zero is not None:
        raise InputError(
            f"{vectors_label}, {_row_ref(zero, ids)}: zero vector (all {vectors.shape[1]} values are 0); "
            "expected a direction"
        )
    return vectors, ids


def _check_shape(raw: np.ndarray, label: str) -> None:
    if raw.ndim != 2:
        raise InputError(f"{label}: expected a 2-D array (vectors x dimensions), found shape {raw.shape}")
    n, d = raw.shape
    if n < 2:
        found = "no vectors (0 rows)" if n == 0 else "only 1 vector"
        raise InputError(f"{label}: {found}; expected at least 2 vectors")
    if d == 0:
        raise InputError(f"{label}: vectors have 0 dimensions; expected at least 1 value per vector")
    if raw.dtype.kind not in "iuf":
        raise InputError(f"{label}: expected numbers, found values of type {raw.dtype}")


def _to_float32(raw: np.ndarray, label: str, ids: np.ndarray | None) -> np.ndarray:
    """Cast to writable float32 C-contiguous (no copy when already so), rejecting NaN, inf and overflow."""
    bad = _first_non_finite(raw) if raw.dtype.kind == "f" else None
    if bad is not None:
        value = raw[bad]
        text = "NaN" if np.isnan(value) else str(float(value))
        raise InputError(f"{label}, {_row_ref(bad[0], ids)}, column {bad[1] + 1}: {text}; expected finite numbers")
    with np.errstate(over="ignore"):
        vectors = np.ascontiguousarray(raw, dtype=np.float32)
    if not vectors.flags.writeable:  # e.g. a read-only view into a pandas frame
        vectors = vectors.copy()
    bad = _first_non_finite(vectors) if raw.dtype.kind == "f" and raw.dtype.itemsize > 4 else None
    if bad is not None:
        raise InputError(
            f"{label}, {_row_ref(bad[0], ids)}, column {bad[1] + 1}: {raw[bad]:g} does not fit in float32 "
            f"(largest magnitude {np.finfo(np.float32).max:g})"
        )
    return vectors


def _first_non_finite(arr: np.ndarray) -> tuple[int, int] | None:
    """(row, column) of the first NaN or infinite value, or None."""
    row = _first_row(arr, lambda block: ~np.isfinite(block).all(axis=1))
    if row is None:
        return None
    return row, int(np.flatnonzero(~np.isfinite(arr[row]))[0])


def _first_row(arr: np.ndarray, row_mask: Callable[[np.ndarray], np.ndarray]) -> int | None:
    """Index of the first row where ``row_mask`` is True, scanning in blocks to bound memory."""
    step = max(1, _CHECK_BLOCK // max(1, arr.shape[1]))
    for start in range(0, arr.shape[0], step):
        mask = row_mask(arr[start:start + step])
        if mask.any():
            return start + int(np.argmax(mask))
    return None


def _row_ref(row: int, ids: np.ndarray | None) -> str:
    return f"row {row + 1}" + (f" (id {ids[row]!r})" if ids is not None else "")


# --------------------------------------------------------------------- readers


def _read_raw(path: Path, label: str, id_column: str | None = None) -> tuple[np.ndarray, Any]:
    """Read a vectors file by extension into (unvalidated array, ids or None)."""
    suffix = path.suffix.lower()
    if suffix in _TABLE_READERS:
        return _TABLE_READERS[suffix](path, label, id_column)
    if suffix not in _ARRAY_READERS:
        raise InputError(
            f"{label}: unknown vectors format {suffix or '(no extension)'!r}; supported: {', '.join(VECTOR_FORMATS)}"
        )
    return _ARRAY_READERS[suffix](path, label)


def _read_npy(path: Path, label: str) -> tuple[np.ndarray, None]:
    with _library_errors(label, "a NumPy .npy file"):
        return np.load(path, allow_pickle=False), None


def _read_npz(path: Path, label: str) -> tuple[np.ndarray, np.ndarray | None]:
    with _library_errors(label, "a NumPy .npz file"), np.load(path, allow_pickle=False) as archive:
        name = _pick_array_name(archive.files, label)
        return archive[name], archive["ids"] if "ids" in archive.files else None


def _read_safetensors(path: Path, label: str) -> tuple[np.ndarray, None]:
    from safetensors import safe_open

    with _library_errors(label, "a safetensors file"):
        with safe_open(str(path), framework="np") as f:
            name = _pick_array_name(f.keys(), label)
            if f.get_slice(name).get_dtype() not in ("BF16", "F8_E4M3", "F8_E5M2"):
                return f.get_tensor(name), None
        with safe_open(str(path), framework="pt") as f:  # dtypes numpy lacks
            return _tensor_to_numpy(f.get_tensor(name)), None


def _read_torch(path: Path, label: str) -> tuple[np.ndarray, Any]:
    import torch

    with _library_errors(label, "a PyTorch file (torch.load with weights_only=True)"):
        obj = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(obj, torch.Tensor):
        return _tensor_to_numpy(obj), None
    if not isinstance(obj, dict):
        raise InputError(
            f"{label}: expected a tensor or a dict with 'vectors' or 'embeddings', found {type(obj).__name__}"
        )
    name = _pick_array_name(obj, label)
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


def _pick_array_name(names: Iterable[str], label: str) -> str:
    """'vectors', else 'embeddings', else the only entry besides 'ids'."""
    names = [n for n in names if n != "ids"]
    for preferred in ("vectors", "embeddings"):
        if preferred in names:
            return preferred
    if len(names) == 1:
        return names[0]
    found = ", ".join(map(repr, names)) or "none"
    raise InputError(
        f"{label}: expected a single array or one named 'vectors' or 'embeddings' (plus optional 'ids'), "
        f"found {found}"
    )


def _read_gensim(path: Path, label: str) -> tuple[np.ndarray, list[str]]:
    from gensim.models import KeyedVectors

    with _library_errors(label, "a gensim KeyedVectors file"):
        obj = KeyedVectors.load(str(path))
    kv = getattr(obj, "wv", obj)  # a full model (Word2Vec, FastText) keeps its vectors in .wv
    if not isinstance(kv, KeyedVectors):
        raise InputError(f"{label}: expected gensim KeyedVectors or a model with .wv, found {type(obj).__name__}")
    return kv.vectors, list(kv.index_to_key)


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
        raise InputError(f"{label}: could not read as word2vec text: {_one_line(e)}") from None
    return kv.vectors, list(kv.index_to_key)


def _read_word2vec_binary(path: Path, label: str) -> tuple[np.ndarray, list[str]]:
    from gensim.models import KeyedVectors

    with open(path, "rb") as f:
        header = f.readline().split()
    if len(header) != 2 or not all(part.isdigit() for part in header):
        raise InputError(f"{label}: not a word2vec binary file; expected a first line 'count dimensions'")
    with _library_errors(label, "word2vec binary"):
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
    _check_unique(_as_ids(words, label), label)
    return header is not None, len(words)


def _diagnose_word2vec_values(path: Path, label: str, has_header: bool) -> None:
    """Raise InputError for the first value that is not a number, if any."""
    for row, (line_no, line) in enumerate(_word2vec_rows(path, has_header), 1):
        for col, text in enumerate(line.decode("utf-8", "replace").split(" ")[1:], 1):
            if not _is_float(text):
                raise InputError(f"{label}, row {row} (line {line_no}), column {col}: {_cell_problem(text)}")


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
    elif data is not None and not _is_number(data[0]):
        id_index = 0
    else:
        id_index = None
    return _Layout(header, first_line if header else 0, len(first), id_index)


def _looks_like_header(row: list[str]) -> bool:
    first = row[0].strip()
    if first in ("id", "") or not all(_is_number(cell) for cell in row[1:]):
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
            keep_default_na=False, na_values={j: _NAN_STRINGS for j in values},
        )
    except pd.errors.EmptyDataError:
        return np.empty((0, len(values))), None
    except ValueError as e:  # also pandas' ParserError and UnicodeDecodeError
        _diagnose_delimited(path, sep, label, layout)
        raise InputError(f"{label}: could not read as a table: {_one_line(e)}") from None
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
                if j != layout.id_index and not _is_number(text):
                    col = j + 1 - (has_id and j > layout.id_index)
                    name = f" ({layout.header[j]!r})" if layout.header else ""
                    raise InputError(f"{where}, column {col}{name}: {_cell_problem(text)}")


def _read_parquet(path: Path, label: str, id_column: str | None = None) -> tuple[np.ndarray, Any]:
    with _library_errors(label, "a Parquet file"):
        frame = pd.read_parquet(path)
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
        return InputError(f"{label}, row {r + 1}, column {series.name!r}: {_cell_problem(str(series.iloc[r]))}")
    return InputError(f"{label}, column {series.name!r}: expected numbers, found {series.dtype}")


def _table_columns(path: Path) -> list[str]:
    """Column names of a .csv/.tsv (with a header) or .parquet file; [] otherwise."""
    suffix = path.suffix.lower()
    if suffix in _DELIMITERS:
        return _delimited_layout(path, _DELIMITERS[suffix], path.name).header or []
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        with _library_errors(path.name, "a Parquet file"):
            return list(pq.read_schema(path).names)
    return []


_DELIMITERS = {".csv": ",", ".tsv": "\t"}
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


# ------------------------------------------------------------------- helpers


def _existing_file(path: str | os.PathLike, where: str | None = None) -> Path:
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


def _resolve(value: str, base: Path) -> Path:
    return Path(os.path.abspath(os.path.join(base, os.path.expanduser(value))))


@contextmanager
def _library_errors(label: str, what: str) -> Iterator[None]:
    """Turn any error a reading library raises into an InputError naming the file."""
    try:
        yield
    except InputError:
        raise
    except Exception as e:  # libraries raise many types for corrupt or foreign files
        raise InputError(f"{label}: could not read as {what}: {_one_line(e)}") from None


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _is_float(text: str) -> bool:
    """Whether Python (and numpy) parse ``text`` as a float, "nan" and "inf" included."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_number(text: str) -> bool:
    """Whether a table cell reads as a number, pandas' missing-value spellings included."""
    return text.strip() in _NAN_STRINGS or _is_float(text)


def _cell_problem(text: str) -> str:
    return "empty value; expected a number" if not text.strip() else f"{text!r} is not a number"


def _describe(value: Any) -> str:
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


def _ids_fit_text(ids: np.ndarray) -> bool:
    """Whether every id survives a one-id-per-line text file unchanged."""
    bom = len(ids) > 0 and ids[0].startswith("\ufeff")  # the reader drops a leading BOM
    return not bom and all(i == i.strip() and "\n" not in i and "\r" not in i for i in ids)


def _save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:  # a file object keeps np.save from appending ".npy"
        np.save(f, array, allow_pickle=False)


def _write_atomic(path: Path, write: Callable[[Path], Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)
