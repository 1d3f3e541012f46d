"""The manifest: its schema (every field, its kind and meaning) and its validation.

Every path a manifest names is resolved by :class:`~.policy.ManifestPaths`: it must lead inside the manifest's
folder, its ``data_root`` or a folder allowed with ``--allow-outside`` (:mod:`.policy`)."""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from ..errors import InputError
from .files import describe, existing_file, read_text
from .limits import load_yaml
from .policy import ManifestPaths

# --------------------------------------------------------------------------- schema

FIELD_KINDS = ("str", "bool", "path", "vectors_path", "vectors_file", "vectors_list", "path_or_column", "path_list",
               "mapping", "mapping_list", "timestamp", "model", "str_list", "path_or_folder", "folder", "tracking_uri")


@dataclass(frozen=True)
class ManifestField:
    """One manifest field (or one key of a ``mapping_list`` item).

    Attributes
    ----------
    kind : str
        One of ``FIELD_KINDS``: "str", "path" (an existing file, resolved to an absolute
        path), "path_or_column" (see the module docstring), "path_list" (non-empty list of
        paths), "mapping" (one mapping with the given ``keys``), "mapping_list" (non-empty list
        of mappings with the given ``keys``), "bool" (true or false),
        "timestamp" (a date, number or string; dates become ISO strings), "folder" (an existing
        folder, resolved to an absolute path), "model" (a
        sentence-transformers model folder or mapping, parsed to a
        :class:`~embeval_report.io.model.ModelSpec`), "tracking_uri" (an MLflow tracking URI; a database or
        store path in it is resolved and confined like a "path").
    description : str
        One line shown in error messages and documentation.
    required : bool
        Whether the field must be given.
    keys : Mapping[str, ManifestField]
        The schema of each item of a "mapping_list".
    needs : str
        How a chapter that needs the field names it ("needs an `edges` list (src, dst)"); default: the field's
        name.
    """

    kind: str
    description: str
    required: bool = False
    keys: Mapping[str, ManifestField] = field(default_factory=dict)
    needs: str = ""

    def __post_init__(self) -> None:
        if self.kind not in FIELD_KINDS:
            raise ValueError(f"unknown manifest field kind {self.kind!r}; expected one of {FIELD_KINDS}")


_SNAPSHOT_KEYS = {
    "name": ManifestField("str", "name of the snapshot", required=True),
    "vectors": ManifestField("vectors_file", "vectors file (or Zarr store) of the snapshot", required=True),
    "timestamp": ManifestField("timestamp", "when the snapshot was taken (date, number or text)"),
}

_TRANCHE_KEYS = {
    "name": ManifestField("str", "label of the checkpoint (e.g. 'epoch 3' or 'tranche 2')", required=True),
    "vectors": ManifestField("vectors_file", "vectors file (or Zarr store) of the checkpoint", required=True),
    "order": ManifestField("timestamp", "position along training (number or date; default: list order)"),
    "run": ManifestField("str", "which training run the checkpoint belongs to (default: one run)"),
}

_VOCABULARY_KEYS = {
    "name": ManifestField("str", "name of the id subset (e.g. 'frequent words')", required=True),
    "ids": ManifestField("path", "file with one id per line", required=True),
}

_FAIRNESS_KEYS = {
    "attributes": ManifestField("str_list", "metadata columns holding protected attributes (e.g. [gender, region])",
                                required=True),
    "label": ManifestField("str", "metadata column the probe and the neighbourhood agreement use (default: label)"),
}

_QUERY_KEYS = {
    "vectors": ManifestField("vectors_file", "vectors file (or Zarr store) of the queries (same model as the corpus)"),
    "texts": ManifestField("path", "query texts (.jsonl/.csv/.tsv/.parquet with id and text), embedded with `model`"),
    "ids": ManifestField("path", "file with one query id per line (unless the vectors file carries ids)"),
    "metadata": ManifestField("path", "table with an 'id' column grouping the queries (e.g. a 'group' column)"),
}

_MLFLOW_KEYS = {
    "tracking_uri": ManifestField("tracking_uri", "where to log: a tracking server (http://host:5000), a database "
                                  "(sqlite:///mlflow.db) or a file store (file:///path or a folder); a database or "
                                  "store path is relative to the manifest and must lie inside its folder; default: "
                                  "MLflow's own (MLFLOW_TRACKING_URI)"),
    "experiment": ManifestField("str", "the MLflow experiment (default: embeval-report)"),
    "run_name": ManifestField("str", "the MLflow run's name (default: the report's name)"),
}

MANIFEST_FIELDS: dict[str, ManifestField] = {
    "name": ManifestField("str", "display name of the embedding set (default: the manifest file name)"),
    "vectors": ManifestField("vectors_path", "file with the embedding matrix, a Zarr store or HDF5 file (or a mapping "
                             "{zarr: store, array, ids} / {hdf5: file, dataset, ids}), or a PyTorch-BigGraph "
                             "checkpoint folder (required unless `model` and `texts` are given)",
                             needs="the embedding vectors"),
    "ids": ManifestField("path_or_column", "file with one id per line, or the name of an id column",
                         needs="an `ids` file or column"),
    "metadata": ManifestField("path", "table (.csv/.tsv/.parquet) with an 'id' column and free columns",
                              needs="a `metadata` table keyed by id"),
    "runs": ManifestField("vectors_list", "vectors files (or Zarr stores) of further training runs of the same items",
                          needs="a `runs` list of other training runs"),
    "snapshots": ManifestField("mapping_list", "vectors of the same items over time", keys=_SNAPSHOT_KEYS,
                               needs="a `snapshots` list of later versions"),
    "tranches": ManifestField("mapping_list", "checkpoints along training (seed 003's tranches)", keys=_TRANCHE_KEYS,
                              needs="`tranches` (checkpoints along training)"),
    "vocabularies": ManifestField("mapping_list", "named id subsets for restricted stability",
                                  keys=_VOCABULARY_KEYS,
                                  needs="`vocabularies` (named id lists)"),
    "positive_pairs": ManifestField("path", "table of id pairs that should be similar",
                                    needs="`positive_pairs` (CSV of id pairs)"),
    "word_pairs": ManifestField("path", "table of word pairs with human similarity scores",
                                needs="`word_pairs` (word1, word2, human score)"),
    "analogies": ManifestField("path", "analogy questions (a : b :: c : d)",
                               needs="`analogies` (a:b::c:d)"),
    "edges": ManifestField("path", "graph edges between ids",
                           needs="an `edges` list (src, dst)"),
    "test_edges": ManifestField("path", "held-out graph edges for link prediction",
                                needs="`test_edges` (held-out src, dst)"),
    "negatives": ManifestField("path", "negative id pairs (non-edges)",
                               needs="`negatives` (src, dst, negative)"),
    "score": ManifestField("str", "how link prediction scores an edge from two vectors: dot, cosine or neg_l2"),
    "queries": ManifestField("mapping", "the retrieval queries: vectors, ids, metadata", keys=_QUERY_KEYS),
    "qrels": ManifestField("path", "relevance judgements: TREC qrels or a table query_id,doc_id,relevance",
                           needs="`qrels` (relevance judgements of queries; `queries` for query vectors)"),
    "annotations": ManifestField("path", "human ratings: a table item (or query_id, doc_id), rater, label "
                                 "[, seconds, gold, position]",
                                 needs="`annotations` (human ratings: item, rater, label)"),
    "annotation_level": ManifestField("str", "level of measurement of the annotations: nominal, ordinal or interval"),
    "exclude_self": ManifestField("bool", "retrieval: a document whose id equals the query id is not ranked"),
    "qrels_note": ManifestField("str", "retrieval: how the relevance grades were made, stated with the judgements"),
    "monitor_history": ManifestField("path", "JSONL history written by `embeval-report monitor --history`",
                                     needs="`monitor_history` (the JSONL file `embeval-report monitor --history` writes)"),
    "anomaly_scores": ManifestField("path", "anomaly: your detector's scores, a table id,score[,more score columns]",
                                    needs="`anomaly_scores` (your detector's scores: id, score)"),
    "fairness": ManifestField("mapping", "fairness: protected-attribute columns of `metadata`", keys=_FAIRNESS_KEYS,
                              needs="`fairness: {attributes: [...]}` (protected-attribute columns of `metadata`)"),
    "association_tests": ManifestField("path", "fairness: WEAT tests (YAML or CSV: two target and two attribute sets)",
                                       needs="`association_tests` (WEAT target and attribute word sets)"),
    "interactions": ManifestField("path", "recommendation: table user_id, item_id[, timestamp][, rating]",
                                  needs="`interactions` (user_id, item_id[, timestamp][, rating])"),
    "test_interactions": ManifestField("path", "recommendation: held-out interactions (else a split is made)"),
    "users": ManifestField("path", "recommendation: one user id per line (else the metadata `kind` column)"),
    "items": ManifestField("path", "recommendation: one item id per line, the catalogue (else metadata `kind`)"),
    "training_log": ManifestField("path_or_folder", "training log: CSV/TSV/JSONL with step or epoch, loss[, val_loss, "
                                  "lr, grad_norm, run, metrics], or a TensorBoard event folder",
                                  needs="a `training_log` (CSV/TSV/JSONL of step, loss, ... or a TensorBoard folder)"),
    "training_run": ManifestField("str", "training diagnostics: the run of the training log that produced these "
                                  "vectors (its events are the model's; the other runs' are about other checkpoints)"),
    "entity": ManifestField("str", "the entity type to read from a PyTorch-BigGraph checkpoint folder"),
    "model": ManifestField("model", "a sentence-transformers model folder (or mapping) that embeds `texts`"),
    "texts": ManifestField("path", "the corpus texts (.jsonl/.csv/.tsv/.parquet with id and text), embedded with `model`"),
    "data_root": ManifestField("folder", "the folder the manifest's files may lie in besides the manifest's own "
                               "(relative to the manifest; inside the working directory or an --allow-outside "
                               "folder); default: the manifest's folder only"),
    "mlflow": ManifestField("mapping", "log the report to MLflow (one run per report; not side data, no chapter "
                            "reads it)", keys=_MLFLOW_KEYS),
}

CORE_FIELDS = ("name", "data_root", "vectors", "ids", "metadata", "entity", "model", "texts")


def describe_input(req: str) -> str:
    """How a chapter's requirement reads in a "not run" line: a manifest field (its ``needs`` wording),
    ``metadata.<column>``, or ``a|b`` when either will do.

    >>> describe_input("metadata.label|edges")
    'a `label` column in `metadata` or an `edges` list (src, dst)'
    """
    if "|" in req:
        return " or ".join(describe_input(alt) for alt in req.split("|"))
    if req.startswith("metadata."):
        return f"a `{req.split('.', 1)[1]}` column in `metadata`"
    spec = MANIFEST_FIELDS.get(req)
    return spec.needs if spec is not None and spec.needs else f"manifest field `{req}`"
MANIFEST_SUFFIXES = (".yaml", ".yml")


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """Parse and validate a manifest without loading the files it names.

    Returns
    -------
    dict
        The given fields in manifest order, checked against ``MANIFEST_FIELDS``; paths
        are absolute str, ``ids`` is ``{"path": ...}`` or ``{"column": ...}`` and
        ``name`` defaults to the manifest stem.
    """
    path = existing_file(path)
    raw = load_yaml(read_text(path, path.name), path.name)
    data_root = raw.get("data_root") if isinstance(raw, dict) else None
    paths = ManifestPaths.of(path, data_root, f"{path.name}, field 'data_root'")
    spec = _check_mapping(raw, MANIFEST_FIELDS, path.name, paths, "field")
    _check_sources(spec, path.name)
    spec.setdefault("name", path.stem)
    return spec


def _check_sources(spec: dict[str, Any], where: str) -> None:
    """Vectors come either from files (``vectors``) or from a model (``model`` with ``texts``), never both."""
    if "model" in spec:
        clash = [k for k in ("vectors", "ids", "entity") if k in spec]
        if clash:
            raise InputError(f"{where}: field 'model' embeds `texts`; remove field {clash[0]!r} (the corpus ids come "
                             "from the texts file)")
        if "texts" not in spec:
            raise InputError(f"{where}: field 'model' needs field 'texts' (the corpus texts to embed: "
                             ".jsonl/.csv/.tsv/.parquet with id and text)")
    elif "texts" in spec:
        raise InputError(f"{where}: field 'texts' needs field 'model' (the sentence-transformers model that embeds them)")
    elif "vectors" not in spec:
        raise InputError(f"{where}: missing required field 'vectors' ({MANIFEST_FIELDS['vectors'].description})")
    queries = spec.get("queries")
    if queries is not None:
        given = [k for k in ("vectors", "texts") if k in queries]
        if len(given) != 1:
            raise InputError(f"{where}, field 'queries': expected exactly one of key 'vectors' (a vectors file) or "
                             f"key 'texts' (texts embedded with `model`), found {' and '.join(given) or 'neither'}")
        if "texts" in queries:
            if "model" not in spec:
                raise InputError(f"{where}, field 'queries', key 'texts': needs field 'model' (the model that embeds "
                                 "them)")
            if "ids" in queries:
                raise InputError(f"{where}, field 'queries': remove key 'ids'; the query ids come from the texts file")
        elif "model" in spec:
            raise InputError(f"{where}, field 'queries': with field 'model', give the queries as key 'texts' so "
                             "that the same model embeds them")


def _check_mapping(raw: Any, schema: Mapping[str, ManifestField], where: str, base: ManifestPaths,
                   noun: str) -> dict[str, Any]:
    """Validate a mapping against a schema; empty (null) values count as absent."""
    if not isinstance(raw, dict):
        raise InputError(f"{where}: expected a mapping of {noun}s ({', '.join(schema)}), found {describe(raw)}")
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
        raise InputError(f"{where}: expected {expected}, found {describe(value)}")
    return value


def _check_str(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> str:
    return _require_text(value, where, "a non-empty string")


def _check_path(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> str:
    _require_text(value, where, "a file path (string)")
    return str(existing_file(base.resolve(value, where), where))


def _check_vectors_path(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> str | dict[str, str]:
    """A vectors file, a Zarr store, a PyTorch-BigGraph folder, or a mapping {zarr|hdf5: path, array|dataset, ids}."""
    from .checkpoints import is_pbg_checkpoint

    if isinstance(value, dict):
        return _check_store_mapping(value, where, base)
    _require_text(value, where, "a file path (string)")
    path = base.resolve(value, where)
    if path.is_dir() and is_pbg_checkpoint(path):
        return str(path.resolve())
    return _check_vectors_file(value, where, base, spec)


def _check_vectors_file(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> str | dict[str, str]:
    """A vectors file, a Zarr store folder, or a store mapping {zarr|hdf5: path, array|dataset, ids}."""
    from .stores import is_zarr_store

    if isinstance(value, dict):
        return _check_store_mapping(value, where, base)
    _require_text(value, where, "a file path (string)")
    path = base.resolve(value, where)
    if is_zarr_store(path) and (path.is_dir() or not path.exists()):
        if not path.exists():
            raise InputError(f"{where}: Zarr store not found: {path}")
        return str(path.resolve())
    return str(existing_file(path, where))


def _check_vectors_list(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> list[str]:
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: expected a non-empty list of file paths, found {describe(value)}")
    return [_check_vectors_file(item, f"{where}, item {i}", base, spec) for i, item in enumerate(value, 1)]


def _check_store_mapping(value: dict, where: str, base: ManifestPaths) -> dict[str, str]:
    from .stores import STORE_KEYS, is_zarr_store

    kinds = [k for k in STORE_KEYS if k in value]
    if len(kinds) != 1:
        raise InputError(f"{where}: expected a mapping with key 'zarr' (a Zarr store; optional keys 'array', 'ids') "
                         f"or key 'hdf5' (an HDF5 file; optional keys 'dataset', 'ids'), found keys "
                         f"{', '.join(map(repr, value)) or 'none'}")
    kind = kinds[0]
    known = (kind, *STORE_KEYS[kind])
    for key in value:
        if key not in known:
            raise InputError(f"{where}: unknown key {key!r}; known keys with {kind!r}: {', '.join(known)}")
    out = {k: _require_text(value[k], f"{where}, key {k!r}", "a path" if k == kind else "a name (string)")
           for k in known if value.get(k) is not None}
    if kind not in out:
        raise InputError(f"{where}, key {kind!r}: expected a path, found nothing")
    path = base.resolve(out[kind], f"{where}, key {kind!r}")
    if kind == "zarr":
        if not path.exists():
            raise InputError(f"{where}, key 'zarr': Zarr store not found: {path}")
        if not (path.is_dir() and is_zarr_store(path)):
            raise InputError(f"{where}, key 'zarr': {path} is not a Zarr store (a folder with zarr.json, .zarray "
                             "or .zgroup)")
        out[kind] = str(path.resolve())
    else:
        out[kind] = str(existing_file(path, f"{where}, key 'hdf5'"))
    return out


def _check_path_or_folder(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> str:
    _require_text(value, where, "a file or folder path (string)")
    path = base.resolve(value, where)
    if path.is_dir():
        return str(path.resolve())
    return str(existing_file(path, where))


def _check_folder(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> str:
    _require_text(value, where, "a folder path (string)")
    path = base.resolve(value, where)
    if not path.is_dir():
        raise InputError(f"{where}: {value!r} is not a folder; expected a folder")
    return str(path)


def _check_path_or_column(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> dict[str, str]:
    _require_text(value, where, "a file path or a column name (string)")
    candidate = base.resolve(value, where)
    if candidate.exists():
        return {"path": str(existing_file(candidate, where))}
    return {"column": value}


def _check_path_list(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> list[str]:
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: expected a non-empty list of file paths, found {describe(value)}")
    return [_check_path(item, f"{where}, item {i}", base, spec) for i, item in enumerate(value, 1)]


def _check_bool(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{where}: expected true or false, found {describe(value)}")
    return value


def _check_one_mapping(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> dict[str, Any]:
    return _check_mapping(value, spec.keys, where, base, "key")


def _check_mapping_list(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise InputError(
            f"{where}: expected a non-empty list of mappings with keys {', '.join(spec.keys)}, found {describe(value)}"
        )
    return [_check_mapping(item, spec.keys, f"{where}, item {i}", base, "key") for i, item in enumerate(value, 1)]


def _check_str_list(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: expected a non-empty list of names, found {describe(value)}")
    return [_require_text(item, f"{where}, item {i}", "a non-empty string").strip() for i, item in enumerate(value, 1)]


def _check_model(value: Any, where: str, base: ManifestPaths, spec: ManifestField):
    from .model import parse_model_spec

    return parse_model_spec(value, base, where)


def local_tracking_path(uri: str, where: str = "mlflow") -> tuple[str, str] | None:
    """``("sqlite" | "file", the path as written)`` of a tracking URI that names a local database or store (a plain
    path, ``file:``, ``sqlite:///path``); None for a server, another database or an in-memory SQLite."""
    from urllib.parse import unquote, urlsplit

    parsed = urlsplit(uri)
    scheme = parsed.scheme.lower()
    if scheme.split("+")[0] == "sqlite":
        if parsed.netloc:
            raise InputError(f"{where}: {uri!r} names a host; expected sqlite:///path/to/mlflow.db")
        path = parsed.path[1:]
        return None if path in ("", ":memory:") else ("sqlite", path)
    if scheme == "file":
        return "file", unquote(parsed.path)
    if scheme == "" or len(scheme) == 1:  # a plain path (one letter: a Windows drive)
        return "file", uri
    return None


def _check_tracking_uri(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> str:
    """A tracking URI; a local database or store goes through the manifest's paths (confined to its folder) and
    comes back absolute: ``sqlite:////abs/mlflow.db``, ``file:///abs/mlruns``."""
    _require_text(value, where, "a tracking URI (string)")
    local = local_tracking_path(value, where)
    if local is None:
        return value
    kind, written = local
    path = base.resolve(written, where)
    if kind == "sqlite":
        query = value.split("?", 1)[1] if "?" in value else ""
        return f"sqlite:///{path}" + (f"?{query}" if query else "")
    return path.as_uri()


def _check_timestamp(value: Any, where: str, base: ManifestPaths, spec: ManifestField) -> str | int | float:
    if isinstance(value, date):  # also datetime
        return value.isoformat()
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"{where}: expected a timestamp (date, number or string), found {describe(value)}")
    return value


_CHECKERS: dict[str, Callable[[Any, str, ManifestPaths, ManifestField], Any]] = {
    "str": _check_str,
    "bool": _check_bool,
    "mapping": _check_one_mapping,
    "path": _check_path,
    "vectors_path": _check_vectors_path,
    "vectors_file": _check_vectors_file,
    "vectors_list": _check_vectors_list,
    "path_or_column": _check_path_or_column,
    "path_list": _check_path_list,
    "mapping_list": _check_mapping_list,
    "timestamp": _check_timestamp,
    "model": _check_model,
    "path_or_folder": _check_path_or_folder,
    "folder": _check_folder,
    "tracking_uri": _check_tracking_uri,
    "str_list": _check_str_list,
}
