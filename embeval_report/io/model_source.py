"""A manifest that names a model: embed its texts once, then hand the report a vectors manifest.

A manifest with ``model`` and ``texts`` (and optionally ``queries: {texts: ...}``) is turned into
an ordinary embedded set by :func:`embed_manifest`: the texts are read and checked
(:func:`~.texts.read_texts`), embedded through the content-addressed cache
(:func:`~.model.embed_with_cache`) and written with :func:`~.model.write_embedded_set` as
``<folder>/embeddings/{corpus.npy, corpus_ids.txt, queries.npy, query_ids.txt, manifest.yaml}``.
That manifest carries every other field of the original one, so it re-runs the same report from
the vectors, without the model.

The cache folder is ``--embedding-cache``, else ``$EMBEVAL_REPORT_CACHE``, else
``$XDG_CACHE_HOME/embeval-report`` (``~/.cache/embeval-report``), with ``embeddings/`` inside.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .manifest import MANIFEST_SUFFIXES, read_manifest
from .model import embed_with_cache, model_digest, model_folder, write_embedded_set
from .texts import read_texts


def default_cache_dir() -> Path:
    """Where embeddings are cached when no folder is given (see the module docstring)."""
    root = os.environ.get("EMBEVAL_REPORT_CACHE")
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "embeval-report"
    return Path(root) / "embeddings"


def embedded_source(source: str | os.PathLike, folder: str | os.PathLike, *, device: Any = "auto",
                    cache_dir: str | os.PathLike | None = None) -> tuple[str | os.PathLike, dict | None]:
    """``(source, None)`` unless ``source`` is a manifest that names a model; then :func:`embed_manifest`'s
    ``(written manifest, record)``. The manifest is read (and validated) once."""
    path = Path(source)
    if path.suffix.lower() not in MANIFEST_SUFFIXES or not path.is_file():
        return source, None
    spec = read_manifest(path)
    if "model" not in spec:
        return source, None
    return _embed(path, spec, folder, device, cache_dir)


def embed_manifest(path: str | os.PathLike, folder: str | os.PathLike, *, device: Any = "auto",
                   cache_dir: str | os.PathLike | None = None) -> tuple[Path, dict]:
    """Embed the texts a model manifest names; write the embedded set under ``folder/embeddings``.

    Returns the written manifest's path and a record of the model run for ``run.json``: the model
    as named, its folder, its content digest, the options, and the row counts. Bad texts or a
    model that cannot be loaded offline raise :class:`~embeval_report.errors.InputError` (one line).
    """
    return _embed(Path(path), read_manifest(path), folder, device, cache_dir)


def _embed(path: Path, spec: dict, folder, device, cache_dir) -> tuple[Path, dict]:
    model = spec["model"]
    corpus_ids, corpus_texts = read_texts(spec["texts"], label=f"{path.name}, field 'texts': {Path(spec['texts']).name}")
    queries = spec.get("queries")
    query_pair = None
    if queries is not None:
        qpath = Path(queries["texts"])
        query_pair = read_texts(qpath, label=f"{path.name}, field 'queries': {qpath.name}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    corpus_vectors, query_vectors = embed_with_cache(model, (corpus_ids, corpus_texts), query_pair, cache,
                                                     device=device)
    extra = {k: v for k, v in spec.items() if k not in ("model", "texts", "queries")}
    query_extra = {"metadata": queries["metadata"]} if queries is not None and "metadata" in queries else None
    written = write_embedded_set(folder, corpus_ids, corpus_vectors,
                                 query_pair[0] if query_pair else None, query_vectors, extra, query_extra=query_extra,
                                 comment=f"embedded by embeval-report from {path.name} with model {model.name}")
    folder_used = model_folder(model)
    record = dict(name=model.name, folder=str(folder_used), digest=model_digest(folder_used)[:16],
                  batch_size=model.batch_size, normalize=model.normalize, query_prompt=model.query_prompt,
                  document_prompt=model.document_prompt, texts=Path(spec["texts"]).name, n=len(corpus_ids),
                  d=int(corpus_vectors.shape[1]), queries=len(query_pair[0]) if query_pair else 0, cache=str(cache))
    return written, record
