"""Vectors from the outputs of graph and word-embedding trainers.

* **PyTorch-BigGraph** (PBG) checkpoint folders: :func:`read_pbg_checkpoint`, :func:`is_pbg_checkpoint`;
* **gensim** files written by ``.save()`` (``Word2Vec``, ``FastText``, ``Doc2Vec`` and plain
  ``KeyedVectors``): :func:`read_gensim_model`, :func:`is_gensim_model`.

Both readers return ``(vectors, ids)``: float32 (n, d) C-contiguous vectors and an object array of
str ids. They check what is specific to the format (names per row, dimensions, duplicate ids, what
the file holds); NaN, infinite and zero vectors are left to :func:`.vectors.finalize`, which every
matrix goes through.
"""
from __future__ import annotations

import _compat_pickle
import contextlib
import json
import os
import pickletools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError
from .files import as_ids, existing_file, library_errors, one_line
from .limits import check_whole_read
from .policy import TRUST, current_policy
from .safe_pickle import ALLOWED, AllowListUnpickler

# ------------------------------------------------------------------ PyTorch-BigGraph

_PBG_EMBEDDINGS = re.compile(r"^embeddings_(?P<entity>.+)_(?P<part>\d+)\.v(?P<version>\d+)\.h5$")
_PBG_VERSION_FILE = "checkpoint_version.txt"
_PBG_PATTERN = "embeddings_<entity>_<part>.v<N>.h5"


@dataclass(frozen=True)
class _PbgFile:
    entity: str
    part: int
    version: int
    path: Path


def is_pbg_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder holding at least one PBG ``embeddings_<entity>_<part>.v<N>.h5`` file.

    Only file names are looked at (nothing is opened).
    """
    try:
        with os.scandir(path) as entries:
            return any(_PBG_EMBEDDINGS.match(e.name) and e.is_file() for e in entries)
    except OSError:  # not a folder, unreadable, missing
        return False


def read_pbg_checkpoint(
    folder: str | os.PathLike,
    *,
    entity: str | None = None,
    names_folder: str | os.PathLike | None = None,
    label: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Read the embeddings of one entity type from a PyTorch-BigGraph checkpoint folder.

    Format
        PBG writes, per entity type and partition, ``embeddings_<entity>_<part>.v<N>.h5`` into the
        checkpoint folder (HDF5 dataset ``embeddings`` of shape (count, dim)), and
        ``entity_names_<entity>_<part>.json`` (a JSON list of ``count`` names, row order) into the
        entity-path folder given to its importer.

    Choices
        * **Version**: the one named in ``checkpoint_version.txt`` when the folder has that file
          (PBG writes it after each completed checkpoint), else the highest ``N`` present.
        * **Partitions**: concatenated in increasing partition number (0, 1, ..., 10: numeric
          order); partitions must be 0..P-1 with no gap, and a names file for a partition without
          embeddings is an error (an incomplete checkpoint).
        * **Ids**: the names, row by row; numbers in a names file become their decimal text.

    Parameters
    ----------
    folder : str or path-like
        The checkpoint folder (PBG's ``checkpoint_path``).
    entity : str, optional
        Entity type to read; needed when the checkpoint holds several.
    names_folder : str or path-like, optional
        Folder with the ``entity_names_*.json`` files (PBG's ``entity_path``); default ``folder``.
    label : str, optional
        How to name ``folder`` in error messages (default: its name).

    Returns
    -------
    vectors : numpy.ndarray
        float32 (n, d), partitions concatenated.
    ids : numpy.ndarray
        Object array of str, one name per row.

    Raises
    ------
    InputError
        No embeddings files; several entity types and no ``entity``; an unknown ``entity``; a
        missing partition or names file; a names count that differs from the rows; dimensions that
        differ across partitions; a duplicate name; an unreadable HDF5 or JSON file.
    """
    folder = _existing_folder(folder, label)
    label = label or folder.name
    names_dir = folder if names_folder is None else _existing_folder(names_folder, f"{label}, names_folder")
    names_label = label if names_dir == folder else names_dir.name

    files = _pbg_files(folder)
    if not files:
        raise InputError(f"{label}: no PyTorch-BigGraph embeddings ({_PBG_PATTERN}) in {folder}")
    version = _pbg_version(folder, files, label)
    at_version = [f for f in files if f.version == version]
    entities = sorted({f.entity for f in at_version})
    if entity is None:
        if len(entities) > 1:
            raise InputError(
                f"{label}: the checkpoint holds {len(entities)} entity types ({', '.join(entities)}); "
                "choose one with entity"
            )
        entity = entities[0]
    elif entity not in entities:
        other = sorted({f.version for f in files if f.entity == entity})
        where = f" (found at version {', '.join(map(str, other))} only)" if other else ""
        raise InputError(
            f"{label}: no embeddings for entity {entity!r} at version {version}{where}; "
            f"entity types: {', '.join(entities)}"
        )
    parts = sorted((f for f in at_version if f.entity == entity), key=lambda f: f.part)
    _check_partitions(parts, names_dir, entity, version, label, names_label)

    with contextlib.ExitStack() as stack:
        datasets = [_pbg_dataset(stack, f, label) for f in parts]
        dims = {ds.shape[1] for ds in datasets}
        if len(dims) > 1:
            first = datasets[0].shape[1]
            j = next(i for i, ds in enumerate(datasets) if ds.shape[1] != first)
            raise InputError(
                f"{label}/{parts[j].path.name}: {datasets[j].shape[1]} dimensions, but "
                f"{parts[0].path.name} has {first}; expected the same in every partition"
            )
        names = [_pbg_names(names_dir / _names_file(entity, f.part), f"{names_label}/{_names_file(entity, f.part)}",
                            ds.shape[0], f"{label}/{f.path.name}", folder, names_folder is None)
                 for f, ds in zip(parts, datasets)]
        counts = [ds.shape[0] for ds in datasets]
        check_whole_read((sum(counts), datasets[0].shape[1]), 4, label, "the checkpoint's embeddings")
        vectors = np.empty((sum(counts), datasets[0].shape[1]), dtype=np.float32)
        start = 0
        for f, ds, count in zip(parts, datasets, counts):
            if count:
                with library_errors(f"{label}/{f.path.name}", "PyTorch-BigGraph embeddings (HDF5)"), \
                        np.errstate(over="ignore"):
                    ds.read_direct(vectors, dest_sel=np.s_[start:start + count])
            start += count
    ids = np.concatenate(names) if names else np.empty(0, dtype=object)
    _check_unique_names(ids, parts, counts, entity, names_label)
    return vectors, ids


def _existing_folder(path: str | os.PathLike, where: str | None) -> Path:
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
    prefix = f"{where}: " if where else ""
    if not path.exists():
        raise InputError(f"{prefix}folder not found: {path}")
    if not path.is_dir():
        raise InputError(f"{prefix}{path} is not a folder; expected a PyTorch-BigGraph checkpoint folder")
    return path


def _pbg_files(folder: Path) -> list[_PbgFile]:
    files = []
    for entry in os.scandir(folder):
        m = _PBG_EMBEDDINGS.match(entry.name)
        if m and entry.is_file():
            files.append(_PbgFile(m["entity"], int(m["part"]), int(m["version"]), Path(entry.path)))
    return files


def _pbg_version(folder: Path, files: list[_PbgFile], label: str) -> int:
    """The version in checkpoint_version.txt when present, else the highest version present."""
    present = sorted({f.version for f in files})
    version_file = folder / _PBG_VERSION_FILE
    if not version_file.is_file():
        return present[-1]
    text = version_file.read_text(encoding="utf-8", errors="replace").strip()
    if not text.isdigit():
        raise InputError(f"{label}/{_PBG_VERSION_FILE}: expected a checkpoint version number, found {text[:40]!r}")
    version = int(text)
    if version not in present:
        raise InputError(
            f"{label}/{_PBG_VERSION_FILE}: names version {version}, but the folder has embeddings of "
            f"version {', '.join(map(str, present))} only"
        )
    return version


def _names_file(entity: str, part: int) -> str:
    return f"entity_names_{entity}_{part}.json"


def _check_partitions(parts: list[_PbgFile], names_dir: Path, entity: str, version: int, label: str,
                      names_label: str) -> None:
    """Partitions 0..P-1 without gaps, and no names file for a partition beyond them."""
    numbers = [f.part for f in parts]
    missing = sorted(set(range(numbers[-1] + 1)) - set(numbers))
    if missing:
        raise InputError(
            f"{label}: missing embeddings_{entity}_{missing[0]}.v{version}.h5; found partitions "
            f"{', '.join(map(str, numbers))} of entity {entity!r}; expected partitions 0 to {numbers[-1]}"
        )
    extra = f"{_names_file(entity, len(parts))}"
    if (names_dir / extra).is_file():
        raise InputError(
            f"{names_label}/{extra} exists but {label} has no embeddings_{entity}_{len(parts)}.v{version}.h5; "
            f"expected embeddings for every partition (an incomplete checkpoint?)"
        )


def _pbg_dataset(stack: contextlib.ExitStack, f: _PbgFile, label: str) -> Any:
    import h5py

    where = f"{label}/{f.path.name}"
    with library_errors(where, "an HDF5 file"):
        h5 = stack.enter_context(h5py.File(f.path, "r"))
    ds = h5.get("embeddings")
    if not isinstance(ds, h5py.Dataset):
        found = ", ".join(map(repr, h5.keys())) or "nothing"
        raise InputError(f"{where}: expected an HDF5 dataset 'embeddings', found {found}")
    if ds.ndim != 2:
        raise InputError(f"{where}: dataset 'embeddings' should be 2-D (count x dimensions), found shape {ds.shape}")
    if ds.dtype.kind not in "iuf":
        raise InputError(f"{where}: dataset 'embeddings' should hold numbers, found values of type {ds.dtype}")
    return ds


def _pbg_names(path: Path, where: str, rows: int, h5_label: str, folder: Path, default_names_dir: bool) -> np.ndarray:
    if not path.is_file():
        hint = _entity_path_hint(folder) if default_names_dir else ""
        raise InputError(
            f"{where}: names file not found; expected one entity_names_<entity>_<part>.json per partition "
            f"next to the embeddings or in names_folder{hint}"
        )
    with library_errors(where, "JSON"):
        with open(path, encoding="utf-8") as fh:
            names = json.load(fh)
    if not isinstance(names, list):
        raise InputError(f"{where}: expected a JSON list of names, found {type(names).__name__}")
    for i, name in enumerate(names):
        if not isinstance(name, (str, int)) or isinstance(name, bool):
            raise InputError(f"{where}, row {i + 1}: expected a name (a string), found {json.dumps(name)[:40]}")
    if len(names) != rows:
        raise InputError(f"{where} has {len(names)} names but {h5_label} has {rows} rows; expected one name per row")
    return as_ids(names, where)


def _entity_path_hint(folder: Path) -> str:
    """' (config.json: entity_path ...)' when the checkpoint's config names its entity path."""
    try:
        with open(folder / "config.json", encoding="utf-8") as fh:
            entity_path = json.load(fh).get("entity_path")
    except (OSError, ValueError, AttributeError):
        return ""
    return f" (the checkpoint's config.json has entity_path {entity_path!r})" if isinstance(entity_path, str) else ""


def _check_unique_names(ids: np.ndarray, parts: list[_PbgFile], counts: list[int], entity: str,
                        names_label: str) -> None:
    duplicated = pd.Index(ids).duplicated()
    if not duplicated.any():
        return
    j = int(np.argmax(duplicated))
    i = int(np.flatnonzero(ids[:j] == ids[j])[0])
    bounds = np.cumsum(counts)

    def where(row: int) -> str:
        p = int(np.searchsorted(bounds, row, side="right"))
        return f"{_names_file(entity, parts[p].part)} row {row - (bounds[p - 1] if p else 0) + 1}"

    raise InputError(f"{names_label}: duplicate name {ids[j]!r} in {where(i)} and {where(j)}; expected unique names")


# ------------------------------------------------------------------ gensim


_GENSIM_ATTRIBUTES = ("wv", "dv")


def is_gensim_model(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file saved by gensim's ``.save()`` that :func:`read_gensim_model` reads.

    A cheap check: only the start of the pickle is parsed (without running it) to find the class of
    the saved object, which must be a ``Word2Vec``, ``FastText`` or ``Doc2Vec`` model or a
    ``KeyedVectors``. Compressed saves (``.gz``, ``.bz2``) are read through smart_open.
    """
    try:
        found = _pickled_class(Path(path))
    except Exception:  # not a pickle, unreadable, a bad compressed stream
        return False
    return found is not None and _gensim_class(*found) is not None


def read_gensim_model(
    path: str | os.PathLike, *, label: str | None = None, attribute: str | None = None, trust: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Read the vectors of a gensim ``Word2Vec``, ``FastText``, ``Doc2Vec`` or ``KeyedVectors`` file.

    Format
        A file written by gensim's ``.save()`` (usually ``.model`` or ``.kv``): a pickle, with arrays
        above 10 MB in companion files ``<file>.<attribute>.npy`` next to it (``.npz`` when the
        file name ends in ``.gz``/``.bz2``); those must be copied along with the model.

    Choices
        * ``Word2Vec`` and ``FastText``: the word vectors ``model.wv.vectors``, ids
          ``model.wv.index_to_key`` (FastText: the vectors of the vocabulary words only, not of
          the n-gram buckets).
        * ``Doc2Vec``: the **document** vectors ``model.dv.vectors``, ids ``model.dv.index_to_key``
          (the tags); ``attribute="wv"`` reads its word vectors instead.
        * ``KeyedVectors``: the vectors and keys themselves.
        * Ids are stringified (integer Doc2Vec tags become "0", "1", ...).
        * Safety: a pickle can be made to run code when read, so the file is read only when trusted
          (``trust``, default: the command's ``--trust-pickles``, :mod:`.policy`), and then with an
          exact allow-list of globals (:mod:`.safe_pickle`: gensim's model and keyed-vectors classes,
          numpy arrays, scalars and the model's random state, Python containers); a file that
          references anything else (code, other libraries, a dotted name) is refused with an
          InputError before it calls anything. Companion files must be named by plain attribute
          names. Large companion arrays are memory-mapped while loading, so FastText's n-gram
          buckets are not read.

    Parameters
    ----------
    path : str or path-like
        The saved file.
    label : str, optional
        How to name the file in error messages (default: its file name).
    attribute : {"wv", "dv"}, optional
        Which keyed vectors of a model to read; default ``"dv"`` for Doc2Vec, else ``"wv"``.
    trust : bool, optional
        Read the pickle (True) or refuse it (False); default: the policy in force (``--trust-pickles``).

    Returns
    -------
    vectors : numpy.ndarray
        float32 (n, d), C-contiguous, writeable.
    ids : numpy.ndarray
        Object array of str.

    Raises
    ------
    InputError
        Not trusted, not a pickle, not a gensim model or KeyedVectors, a refused class, a missing
        companion file, an unknown ``attribute``.
    """
    from gensim.models import KeyedVectors

    path = existing_file(path)
    label = label or path.name
    if attribute is not None and attribute not in _GENSIM_ATTRIBUTES:
        raise InputError(f"{label}: unknown gensim attribute {attribute!r}; expected 'wv' or 'dv'")
    try:
        found = _pickled_class(path)
    except Exception as e:  # pickletools raises ValueError for foreign bytes; compressed streams their own
        raise InputError(f"{label}: not a gensim model file (not a Python pickle: {one_line(e)})") from None
    if found is None or _gensim_class(*found) is None:
        what = "a plain value (no class)" if found is None else f"{found[0]}.{found[1]}"
        raise InputError(
            f"{label}: not a gensim model; expected a Word2Vec, FastText, Doc2Vec or KeyedVectors saved "
            f"with .save(), found a pickle of {what}"
        )
    if not (current_policy().trust_pickles if trust is None else trust):
        raise InputError(f"{label}: refused to read a gensim pickle (.kv/.model files can be made to run code when "
                         f"read): {TRUST}")
    obj = _load_gensim(path, label)
    if isinstance(obj, KeyedVectors):
        if attribute is not None:
            raise InputError(f"{label}: attribute {attribute!r} given, but the file holds KeyedVectors, not a model")
        kv, where = obj, label
    else:
        attribute = attribute or ("dv" if hasattr(obj, "dv") else "wv")
        kv, where = getattr(obj, attribute, None), f"{label} ({type(obj).__name__}.{attribute})"
        if not isinstance(kv, KeyedVectors):
            raise InputError(f"{label}: the {type(obj).__name__} model has no keyed vectors {attribute!r}")
    keys, raw = kv.index_to_key, kv.vectors
    if raw is None or np.ndim(raw) != 2:
        raise InputError(f"{where}: expected a 2-D vectors array, found {_describe_array(raw)}")
    if len(keys) != raw.shape[0]:
        raise InputError(f"{where}: {len(keys)} keys for {raw.shape[0]} vectors; expected one key per vector")
    with np.errstate(over="ignore"):
        vectors = np.array(raw, dtype=np.float32, order="C", copy=True)  # also detaches a memory map
    del obj, kv, raw
    return vectors, as_ids(list(keys), where)


def _describe_array(value: Any) -> str:
    return "nothing" if value is None else f"shape {np.shape(value)}"


def _pickled_class(path: Path) -> tuple[str, str] | None:
    """(module, name) of the class of the pickled top-level object, parsed without unpickling.

    Reads only the first opcodes of the pickle; None when the object is not an instance of a class
    (a plain dict, list, ...).
    """
    from smart_open import open as smart_open

    strings: list[str] = []
    with smart_open(str(path), "rb") as fh:
        for n, (op, arg, _) in enumerate(pickletools.genops(fh)):
            if n == 0 and op.name != "PROTO":  # gensim writes protocol 2 or higher, which starts so
                raise ValueError("does not start with a pickle protocol mark")
            if n > 64:
                return None
            if op.name == "GLOBAL":  # protocols 0-3: "module name"
                module, name = arg.split(" ", 1)
            elif op.name == "STACK_GLOBAL":  # protocol 4+: the two strings pushed before it
                if len(strings) < 2:
                    return None
                module, name = strings[-2:]
            elif isinstance(arg, str) and "UNICODE" in op.name:
                strings.append(arg)
                continue
            elif op.name in ("PROTO", "FRAME", "MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT", "MARK"):
                continue
            else:
                return None
            if (module, name) in (("copyreg", "_reconstructor"), ("copy_reg", "_reconstructor")):
                continue  # protocols 0-1: the class comes next
            return _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
    return None


def _gensim_class(module: str, name: str) -> type | None:
    """The gensim class when (module, name) is a model or keyed vectors read_gensim_model accepts: a pair of the
    unpickler's allow-list (:data:`.safe_pickle.ALLOWED`), never a dotted name."""
    if not module.startswith("gensim.models.") or (module, name) not in ALLOWED:
        return None
    import importlib

    from gensim.models import Doc2Vec, FastText, KeyedVectors, Word2Vec

    cls = getattr(importlib.import_module(module), name, None)
    ok = isinstance(cls, type) and issubclass(cls, (Word2Vec, FastText, Doc2Vec, KeyedVectors))
    return cls if ok else None


def _load_gensim(path: Path, label: str) -> Any:
    """What ``gensim.utils.SaveLoad.load`` does, with an allow-listed unpickler.

    gensim's own loaders only add type checks around ``unpickle`` + ``_load_specials``; all their
    upgrades of files from older gensim versions happen in ``_load_specials``, called here too.
    """
    from gensim.utils import SaveLoad
    from smart_open import open as smart_open

    fname = str(path)
    compress, subname = SaveLoad._adapt_by_suffix(fname)
    with library_errors(label, "a gensim model"):
        with smart_open(fname, "rb") as fh:
            obj = AllowListUnpickler(fh, label).load()
        _check_companions(obj, label)
        try:
            obj._load_specials(fname, None if compress else "r", compress, subname)
        except FileNotFoundError as e:
            missing = Path(e.filename).name if e.filename else one_line(e)
            raise InputError(
                f"{label}: companion file {missing} not found; gensim saves large arrays next to the model "
                "file: copy them along with it"
            ) from None
    return obj


#: how deep gensim's companion files may nest (a model's keyed vectors: 1)
_COMPANION_DEPTH = 4


def _check_companions(obj: Any, label: str, depth: int = 0) -> None:
    """The companion files a model names (gensim's ``_load_specials`` builds their paths from attribute names the
    pickle holds) must be plain attribute names, so that no path is built from them; sparse matrices are refused,
    since gensim reads those with a plain unpickle."""
    if getattr(obj, "__scipys", None):
        raise InputError(f"{label}: refused to load: the model stores sparse matrices in companion pickles")
    for key in ("__numpys", "__ignoreds", "__recursive_saveloads"):
        names = getattr(obj, key, None) or []
        if not isinstance(names, (list, tuple)) or not all(
                isinstance(n, str) and n.isidentifier() and not n.startswith("__") for n in names):
            raise InputError(f"{label}: refused to load: the model names companion files by something other than "
                             "its attribute names")
    nested = getattr(obj, "__recursive_saveloads", None) or []
    if nested and depth >= _COMPANION_DEPTH:
        raise InputError(f"{label}: refused to load: companion files nested more than {_COMPANION_DEPTH} deep")
    for name in nested:
        _check_companions(getattr(obj, name, None), label, depth + 1)
