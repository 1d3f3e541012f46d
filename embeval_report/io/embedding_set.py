"""An embedding set is given either as a bare vectors file or as a YAML manifest that
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

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import NA_STRINGS, as_ids, check_unique, existing_file, read_ids_file, read_table_file, resolve_path
from .manifest import CORE_FIELDS, MANIFEST_FIELDS, MANIFEST_SUFFIXES, read_manifest
from .stores import finalize_source, is_store, open_source, store_label, store_path
from .matrix import finalize
from .vectors import DELIMITERS, VECTOR_FORMATS, load_vectors, read_raw, table_columns

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


def load_source(source: str | os.PathLike, *, scratch: str | os.PathLike | None = None) -> EmbeddingSet:
    """Load and validate an embedding set from a manifest (.yaml/.yml), a vectors file, a Zarr store, an
    HDF5 file or a PyTorch-BigGraph checkpoint folder (one entity type).

    A set larger than one block (:data:`.stores.BLOCK_BYTES`: a Zarr store, an HDF5 dataset or a large
    ``.npy``) is validated block by block and its vectors are a read-only float32 memory map, written to
    ``scratch/vectors.npy`` when ``scratch`` is given (the runner passes its prepared cache), else to a
    temporary file (a C-ordered float32 ``.npy`` is mapped in place).
    """
    from .checkpoints import is_pbg_checkpoint

    if Path(source).is_dir() and is_pbg_checkpoint(source):
        folder = Path(source).resolve()
        vectors, ids = finalize(*read_raw(folder, folder.name), folder.name, folder.name)
        return _make_set(folder.name, vectors, ids, None, folder, {})
    if is_store(source):
        store = Path(os.path.abspath(source))
        vectors, ids = load_vectors(store, scratch=scratch)
        return _make_set(store.stem, vectors, ids, None, store, {})
    path = existing_file(source)
    suffix = path.suffix.lower()
    if suffix in MANIFEST_SUFFIXES:
        return _load_manifest_set(path, scratch)
    if suffix not in VECTOR_FORMATS:
        raise InputError(
            f"{path.name}: unknown format {suffix or '(no extension)'!r}; expected a manifest "
            f"({', '.join(MANIFEST_SUFFIXES)}) or a vectors file ({', '.join(VECTOR_FORMATS)})"
        )
    vectors, ids = load_vectors(path, scratch=scratch)
    return _make_set(path.stem, vectors, ids, None, path, {})


#: metadata columns that name kinds or groups of entities, tried in this order for per-group breakdowns
GROUP_COLUMNS = ("kind", "group", "type", "label")


def group_column(metadata: pd.DataFrame | None, max_groups: int = 12, candidates=GROUP_COLUMNS) -> str | None:
    """The metadata column to break a chapter down by: the first of ``candidates`` with 2..max levels."""
    return category_column(metadata, candidates, max_groups)


#: metadata columns that name kinds of entity (users, items, ...), tried in this order
KIND_COLUMNS = ("kind", "type", "group")


def kind_column(metadata: pd.DataFrame | None, max_kinds: int = 4) -> str | None:
    """The metadata column naming kinds of entity (users, items, ...) with 2..``max_kinds`` values."""
    return category_column(metadata, KIND_COLUMNS, max_kinds)


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
    if not is_store(path):
        path = existing_file(path, label)
    label = label or Path(path).name
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


def _load_manifest_set(path: Path, scratch: str | os.PathLike | None = None) -> EmbeddingSet:
    """Load everything a manifest names (see the module docstring for the ids rule)."""
    spec = read_manifest(path)
    if "model" in spec:
        raise InputError(f"{path.name}: names a model; embed its texts first (embeval_report.io.model_source."
                         "embed_manifest, which `embeval-report run` calls) and load the manifest that writes")
    vectors_spec = spec["vectors"]
    vectors_path, vectors_label = store_path(vectors_spec), store_label(vectors_spec)
    metadata_path = Path(spec["metadata"]) if "metadata" in spec else None
    ids_ref = spec.get("ids")
    id_column, key = _ids_columns(ids_ref, vectors_path, metadata_path, path)
    table = _read_metadata_table(metadata_path, key) if metadata_path else None

    source = open_source(vectors_spec, vectors_label)
    if source is None:
        raw, ids = read_raw(vectors_path, vectors_label, id_column, entity=spec.get("entity"))
        ids_label = vectors_label
    else:
        raw, ids, ids_label = None, source.ids, source.ids_label
    try:
        if ids_ref is not None and "path" in ids_ref:
            ids_label = Path(ids_ref["path"]).name
            ids = read_ids_file(Path(ids_ref["path"]), ids_label)
        elif ids_ref is not None and id_column is None:
            ids_label = f"{metadata_path.name}, column {key!r}"
            ids = table[key]
        if source is None:
            vectors, ids = finalize(raw, ids, vectors_label, ids_label)
            del raw
        else:
            vectors, ids = finalize_source(source, ids, vectors_label, ids_label, scratch)
    finally:
        if source is not None:
            source.close()

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
    if column in table_columns(vectors_path):
        return column, "id"
    if metadata_path is not None and column in table_columns(metadata_path):
        return None, column
    tables = vectors_path.name + (f" or {metadata_path.name}" if metadata_path else "")
    raise InputError(
        f"{manifest.name}, field 'ids': {column!r} is neither an existing file "
        f"({resolve_path(column, manifest.parent)}: file not found) nor a column of {tables}"
    )


def _make_set(name: str, vectors: np.ndarray, ids: np.ndarray | None, metadata: pd.DataFrame | None,
              source: Path, fields: dict) -> EmbeddingSet:
    """Build an EmbeddingSet, numbering the rows when there are no ids."""
    given = ids is not None
    if ids is None:
        ids = np.empty(len(vectors), dtype=object)
        ids[:] = list(map(str, range(len(vectors))))  # no (n,) '<U21' array on the way
    return EmbeddingSet(name, vectors, ids, metadata, str(source), fields, given)


def _read_metadata_table(path: Path, key: str) -> pd.DataFrame:
    """Read a metadata table; the key column is read as text, never as NaN."""
    label = path.name

    def options(path: Path) -> dict:
        columns = table_columns(path)
        return dict(dtype={key: str} if key in columns else None, keep_default_na=False,
                    na_values={c: NA_STRINGS for c in columns if c != key})

    table = read_table_file(path, label, separators=DELIMITERS, csv_options=options, kind="metadata format",
                            expected=".csv, .tsv or .parquet")
    if key not in table.columns:
        columns = ", ".join(map(str, table.columns)) or "none"
        raise InputError(
            f"{label}: no {key!r} column (columns: {columns}); expected a column {key!r} with the vector ids"
        )
    return table


def _align_metadata(table: pd.DataFrame, ids: np.ndarray, key: str, label: str) -> pd.DataFrame:
    """Index a metadata table by id in vector order; ids missing from it get NaN rows."""
    keys = as_ids(table[key], f"{label}, column {key!r}")
    check_unique(keys, label)
    unknown = ~pd.Index(keys).isin(ids)
    if unknown.any():
        examples = ", ".join(repr(k) for k in keys[unknown][:3])
        raise InputError(
            f"{label}: {int(unknown.sum())} of {len(keys)} ids match no vector id (e.g. {examples})"
        )
    metadata = table.drop(columns=[key])
    metadata.index = pd.Index(keys, name="id")
    return metadata.reindex(pd.Index(ids, name="id"))
