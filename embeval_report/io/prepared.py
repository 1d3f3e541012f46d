"""The runner's validated cache of an input (vectors memory-mapped), read by every chapter."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .embedding_set import EmbeddingSet
from .files import check_count, existing_file, ids_fit_text, read_ids_file, save_npy, write_atomic
from .stores import copy_rows


def save_prepared(es: EmbeddingSet, folder: str | os.PathLike) -> None:
    """Write an embedding set to a cache folder read back by :func:`load_prepared`.

    Writes vectors.npy, ids.txt (or ids.npy when an id cannot be one clean text line),
    metadata.parquet (when there is metadata) and info.json. Each file is written to a
    temporary name and then moved in place, so overwriting the folder that a memory-mapped
    set was loaded from is safe.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "vectors.npy"
    if isinstance(es.vectors, np.memmap) and es.vectors.dtype == np.float32:
        # a set validated out of core (:mod:`.stores`): already in place, else copied block by block
        if getattr(es.vectors, "_embeval_file", None) != str(target.resolve()) or not target.is_file():
            write_atomic(target, lambda p: copy_rows(es.vectors, p))
    else:
        vectors = np.ascontiguousarray(es.vectors, dtype=np.float32)
        write_atomic(target, lambda p: save_npy(p, vectors))
    if ids_fit_text(es.ids):
        write_atomic(folder / "ids.txt", lambda p: _write_lines(p, es.ids))
        (folder / "ids.npy").unlink(missing_ok=True)
    else:
        write_atomic(folder / "ids.npy", lambda p: save_npy(p, np.array(list(es.ids), dtype=str)))
        (folder / "ids.txt").unlink(missing_ok=True)
    if es.metadata is not None:
        write_atomic(folder / "metadata.parquet", lambda p: es.metadata.to_parquet(p))
    else:
        (folder / "metadata.parquet").unlink(missing_ok=True)
    info = {"name": es.name, "source": es.source, "fields": es.fields, "ids_given": es.ids_given}
    info_text = json.dumps(info, indent=2, ensure_ascii=False)
    write_atomic(folder / "info.json", lambda p: p.write_text(info_text, encoding="utf-8"))


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
    info_path = existing_file(folder / "info.json", f"{folder}: not a prepared embedding set")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    vectors = np.load(existing_file(folder / "vectors.npy"), mmap_mode="r" if mmap else None, allow_pickle=False)
    if (folder / "ids.txt").is_file():
        ids = read_ids_file(folder / "ids.txt", "ids.txt")
    else:
        ids = np.load(existing_file(folder / "ids.npy"), allow_pickle=False).astype(object)
    check_count(ids, len(vectors), f"{folder}/ids", f"{folder}/vectors.npy")
    metadata_path = folder / "metadata.parquet"
    metadata = pd.read_parquet(metadata_path) if metadata_path.is_file() else None
    return EmbeddingSet(
        name=info["name"], vectors=vectors, ids=ids, metadata=metadata, source=info["source"],
        fields=info["fields"], ids_given=info["ids_given"],
    )


def _write_lines(path: Path, ids) -> None:
    """One id per line, written in slices so that a long list of ids is never one string."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        for start in range(0, len(ids), 65536):
            f.write("".join(f"{i}\n" for i in ids[start:start + 65536]))
