"""Embedding texts with a sentence-transformers model, offline, with a content-addressed cache.

The manifest's model value is either a string (a model folder, relative to the manifest, or the
name of a model already in the local Hugging Face cache) or a mapping::

    model:
      sentence_transformers: models/all-MiniLM-L6-v2   # folder or cached hub name (required)
      batch_size: 64                                  # texts per forward pass (default 64)
      normalize: false                                # L2-normalise the outputs (default false:
                                                      # the model's own output, its Normalize module included)
      query_prompt: "query: "                         # text put before each query (default none)
      document_prompt: "passage: "                    # text put before each document (default none)

Nothing is ever downloaded: folders are loaded with ``local_files_only=True`` while
``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` are set, and a hub name is looked up in the
local cache only (``huggingface_hub.snapshot_download(local_files_only=True)``; a name without an
organisation is also tried as ``sentence-transformers/<name>``, as sentence-transformers does).

Cache
-----
:func:`cached_embeddings` stores each result as ``<role>-<key>.npy`` in the cache folder. The key
is a blake2b digest of

* the bytes of every file of the model folder (relative path, size and contents, in sorted
  order; hidden entries and the ``onnx/`` and ``openvino/`` folders, which the torch backend does
  not read, are skipped). Hashing the contents costs about 0.2 s for MiniLM's 90 MB of weights and
  catches a model re-saved in place, which a names/sizes/mtimes manifest would miss; the digest is
  memoised per process by (path, size, mtime) of each file, so a run hashes each model once;
* the installed sentence-transformers and transformers versions (pooling or tokenisation may change);
* the options that change the vectors: ``normalize`` and the prompt of the role;
* the role (``corpus`` or ``queries``) and every text, length-prefixed, in order.

The batch size and the device are not part of the key: they change the vectors only at the level
of float rounding. A hit is checked for shape (one row per text) before it is used; an unreadable
or mis-shaped cache file is recomputed.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, notice
from ..progress import progress
from .files import describe, ids_fit_text, one_line, save_npy, write_atomic
from .policy import ManifestPaths, absolute_paths, register_written

#: keys of the mapping form of the manifest's model value
MODEL_KEYS = ("sentence_transformers", "batch_size", "normalize", "query_prompt", "document_prompt")
ROLES = ("corpus", "queries")
#: bumped when the cache layout or key changes
CACHE_VERSION = 1
#: folders of a model repository the torch backend never reads (skipped by the cache key)
_SKIPPED_FOLDERS = ("onnx", "openvino")
#: a Hugging Face repo id: "name" or "org/name"
_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_NEVER_DOWNLOADS = "this tool never downloads: give the path of a downloaded model folder"


@dataclass(frozen=True)
class ModelSpec:
    """A model as the manifest names it, validated.

    Attributes
    ----------
    name : str
        The value as written (a path or a hub name), for messages.
    path : pathlib.Path or None
        The absolute model folder, or None for a hub name (resolved from the local Hugging Face
        cache by :func:`model_folder`).
    batch_size : int
        Texts per forward pass.
    normalize : bool
        Whether the embeddings are L2-normalised after the model.
    query_prompt, document_prompt : str or None
        Text put before each query / each document (e.g. ``"query: "`` for E5 models).
    """

    name: str
    path: Path | None = None
    batch_size: int = 64
    normalize: bool = False
    query_prompt: str | None = None
    document_prompt: str | None = None

    def prompt(self, role: str) -> str | None:
        """The prompt of ``role`` ("corpus" or "queries")."""
        _check_role(role)
        return self.query_prompt if role == "queries" else self.document_prompt


def parse_model_spec(value: Any, base_dir: str | os.PathLike | ManifestPaths, where: str) -> ModelSpec:
    """Validate the manifest's model value (see the module docstring).

    ``base_dir`` is the folder relative paths start from, or a manifest's :class:`~.policy.ManifestPaths` (a
    model folder must then lie where the manifest's files may), and ``where`` prefixes messages, e.g.
    ``"set.yaml, field 'model'"``. A string that names an existing folder
    is a model folder; one that names a file, or a path that does not exist and cannot be a hub
    name (``name`` or ``org/name``), is an InputError. Whether a hub name is in the local cache is
    checked when the model is needed (:func:`model_folder`).
    """
    base = base_dir if isinstance(base_dir, ManifestPaths) else ManifestPaths.unconfined(base_dir)
    if isinstance(value, str):
        return ModelSpec(**_source(value, base, where))
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a model folder (string) or a mapping with keys "
                         f"{', '.join(MODEL_KEYS)}, found {describe(value)}")
    for key in value:
        if key not in MODEL_KEYS:
            raise InputError(f"{where}: unknown key {key!r}; known keys: {', '.join(MODEL_KEYS)}")
    if value.get("sentence_transformers") is None:
        raise InputError(f"{where}: missing required key 'sentence_transformers' (the model folder)")
    source = value["sentence_transformers"]
    if not isinstance(source, str):
        raise InputError(f"{where}, key 'sentence_transformers': expected a model folder (string), "
                         f"found {describe(source)}")
    options: dict[str, Any] = _source(source, base, f"{where}, key 'sentence_transformers'")
    if value.get("batch_size") is not None:
        batch = value["batch_size"]
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InputError(f"{where}, key 'batch_size': expected a positive integer, found {describe(batch)}")
        options["batch_size"] = batch
    if value.get("normalize") is not None:
        if not isinstance(value["normalize"], bool):
            raise InputError(f"{where}, key 'normalize': expected true or false, found {describe(value['normalize'])}")
        options["normalize"] = value["normalize"]
    for key in ("query_prompt", "document_prompt"):
        if value.get(key) is not None:
            if not isinstance(value[key], str) or not value[key]:
                raise InputError(f"{where}, key {key!r}: expected a non-empty string (the text put before each "
                                 f"{'query' if key == 'query_prompt' else 'document'}), found {describe(value[key])}")
            options[key] = value[key]
    return ModelSpec(**options)


def _source(value: str, base: ManifestPaths, where: str) -> dict[str, Any]:
    if not value.strip():
        raise InputError(f"{where}: expected a model folder or a model name, found the string {value!r}")
    candidate = base.resolve(value, where)
    if candidate.is_dir():
        return {"name": value, "path": candidate}
    if candidate.exists():
        raise InputError(f"{where}: {candidate} is a file; expected a model folder (with modules.json or "
                         "config.json)")
    if not _HUB_NAME.match(value):
        raise InputError(f"{where}: model folder not found: {candidate}")
    return {"name": value, "path": None}


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")


# ---------------------------------------------------------------------------- loading


@contextmanager
def offline() -> Iterator[None]:
    """Forbid Hugging Face downloads inside the block (environment and, once imported, huggingface_hub)."""
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved_env = {name: os.environ.get(name) for name in names}
    os.environ.update({name: "1" for name in names})
    constants = _hub_constants()
    saved_flag = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None and saved_flag is not None:
        constants.HF_HUB_OFFLINE = True  # read once at import: the environment alone is too late then
    try:
        yield
    finally:
        for name, old in saved_env.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
        if constants is not None and saved_flag is not None:
            constants.HF_HUB_OFFLINE = saved_flag


def _hub_constants():
    try:
        from huggingface_hub import constants
    except ImportError:
        return None
    return constants


def model_folder(spec: ModelSpec) -> Path:
    """The folder the model is loaded from: ``spec.path``, or the cached snapshot of a hub name.

    Raises InputError for a hub name that is not in the local Hugging Face cache (nothing is downloaded).
    """
    if spec.path is not None:
        if not spec.path.is_dir():
            raise InputError(f"model {spec.name!r}: model folder not found: {spec.path}")
        return spec.path
    not_cached = InputError(f"model {spec.name!r}: not a folder and not in the local Hugging Face cache; "
                            f"{_NEVER_DOWNLOADS}")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise not_cached from None
    candidates = [spec.name] if "/" in spec.name else [spec.name, f"sentence-transformers/{spec.name}"]
    cache_dir = os.environ.get("SENTENCE_TRANSFORMERS_HOME") or None
    with offline():
        for repo_id in candidates:
            try:
                folder = Path(snapshot_download(repo_id, cache_dir=cache_dir, local_files_only=True))
            except Exception:  # LocalEntryNotFoundError, HFValidationError, ...: not usable from the cache
                continue
            if folder.is_dir():
                return folder
    raise not_cached


def load_model(spec: ModelSpec, device: Any = "auto"):
    """Load a sentence-transformers model from a local folder or the local Hugging Face cache.

    ``device`` is ``"auto" | "cpu" | "cuda"`` or a torch device (see
    :func:`~embeval_report.context.resolve_device`). Raises InputError (one line) when the
    folder is not a sentence-transformers model (nor a plain transformers model, which
    sentence-transformers loads with mean pooling) or the model cannot be read. No code of the folder
    runs: ``trust_remote_code=False``, with which sentence-transformers >= 6 refuses a model whose
    ``modules.json`` or ``config.json`` (``auto_map``) names classes outside its own package.
    """
    from ..context import resolve_device

    folder = model_folder(spec)
    if not any((folder / marker).is_file() for marker in ("modules.json", "config.json")):
        raise InputError(f"model {spec.name!r}: {folder} is not a sentence-transformers model folder "
                         "(no modules.json or config.json)")
    torch_device = resolve_device(device)
    with offline():
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise InputError(f"model {spec.name!r}: sentence-transformers is not installed; install it with "
                             "pip install 'embeval-report[models]'") from None
        try:
            # never the folder's own code: sentence-transformers >= 6 then refuses a module class outside its own
            # package (a modules.json or auto_map naming custom code) instead of importing it
            return SentenceTransformer(str(folder), device=str(torch_device), local_files_only=True,
                                       trust_remote_code=False)
        except Exception as e:  # many types for a broken or foreign folder
            raise InputError(f"model {spec.name!r}: could not load {folder} as a sentence-transformers model: "
                             f"{one_line(e)}") from None


# -------------------------------------------------------------------------- embedding


def embedding_dimension(model) -> int:
    """Output width of a sentence-transformers model (the method's name changed in 6.x)."""
    for name in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
        method = getattr(model, name, None)
        if method is not None:
            d = method()
            if d is not None:
                return int(d)
    return int(np.asarray(model.encode(["x"], convert_to_numpy=True, show_progress_bar=False)).shape[1])


def embed_texts(model, texts: Sequence[str], *, batch_size: int = 64, normalize: bool = False,
                prompt: str | None = None, desc: str = "embedding") -> np.ndarray:
    """Embed ``texts`` with ``model``; returns float32 (n, d) in the order of ``texts``.

    The texts are encoded longest first in batches of ``batch_size`` (little padding, as
    sentence-transformers does inside one call) with a progress bar named ``desc``, on the
    model's device (a GPU when the model is on one). ``prompt`` is put before every text;
    ``normalize`` L2-normalises each row.
    """
    texts = list(texts)
    n = len(texts)
    if n == 0:
        return np.empty((0, embedding_dimension(model)), dtype=np.float32)
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, not {batch_size}")
    order = np.argsort([-len(t) for t in texts], kind="stable")
    starts = range(0, n, batch_size)
    out: np.ndarray | None = None
    kwargs = {"prompt": prompt} if prompt else {}
    for s in progress(starts, desc=desc, total=len(starts), unit="batch"):
        rows = order[s:s + batch_size]
        batch = np.asarray(model.encode([texts[i] for i in rows], batch_size=batch_size, show_progress_bar=False,
                                        convert_to_numpy=True, normalize_embeddings=normalize, **kwargs),
                           dtype=np.float32)
        if out is None:
            out = np.empty((n, batch.shape[1]), dtype=np.float32)
        out[rows] = batch
    return out


# ------------------------------------------------------------------------------ cache

_folder_digests: dict[tuple, str] = {}


def _model_files(folder: Path) -> list[Path]:
    files = []
    for root, dirs, names in os.walk(folder, followlinks=True):
        top = Path(root) == folder
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (top and d in _SKIPPED_FOLDERS))
        files += [Path(root, name) for name in sorted(names) if not name.startswith(".")]
    return files


def model_digest(folder: str | os.PathLike) -> str:
    """blake2b hex digest of a model folder's files (relative paths, sizes and contents); memoised per process."""
    folder = Path(folder).resolve()
    files = _model_files(folder)
    stats = [(f.relative_to(folder).as_posix(), f.stat()) for f in files]  # stat follows links (HF cache blobs)
    memo_key = (str(folder), tuple((name, st.st_size, st.st_mtime_ns) for name, st in stats))
    if memo_key in _folder_digests:
        return _folder_digests[memo_key]
    h = hashlib.blake2b(digest_size=32)
    for (name, st), path in zip(stats, files):
        h.update(f"{name}\0{st.st_size}\0".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    _folder_digests[memo_key] = digest = h.hexdigest()
    return digest


def _version(package: str) -> str:
    try:
        return importlib_metadata.version(package)
    except importlib_metadata.PackageNotFoundError:
        return "-"


def cache_key(spec: ModelSpec, texts: Sequence[str], role: str) -> str:
    """The cache key of embedding ``texts`` as ``role`` with ``spec`` (see the module docstring)."""
    _check_role(role)
    h = hashlib.blake2b(digest_size=20)
    header = {
        "cache": CACHE_VERSION,
        "model": model_digest(model_folder(spec)),
        "sentence_transformers": _version("sentence-transformers"),
        "transformers": _version("transformers"),
        "normalize": spec.normalize,
        "prompt": spec.prompt(role),
        "role": role,
        "n": len(texts),
    }
    h.update(json.dumps(header, sort_keys=True).encode())
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def cached_embeddings(spec: ModelSpec, texts: Sequence[str], ids: Sequence[str], cache_dir: str | os.PathLike, *,
                      role: str, device: Any = "auto", model=None, loader=None) -> np.ndarray:
    """Embeddings of ``texts`` (float32, (n, d), in order), from ``cache_dir`` when computed before.

    On a miss the model is loaded (a given ``model``, else ``loader()``, else :func:`load_model`), the
    texts are embedded with ``spec``'s batch size, normalisation and the prompt of ``role``
    ("corpus" uses ``document_prompt``, "queries" ``query_prompt``) and the result is stored as
    ``cache_dir/<role>-<key>.npy``. On a hit the model is not loaded at all. Only the count of
    ``ids`` is checked (one per text): the key holds the texts, not the ids, so the same texts under
    other ids share an entry.
    """
    _check_role(role)
    texts = list(texts)
    if len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids for {len(texts)} texts; expected one id per text")
    cache_dir = Path(cache_dir)
    path = cache_dir / f"{role}-{cache_key(spec, texts, role)}.npy"
    hit = _read_cached(path, len(texts))
    if hit is not None:
        return hit
    if model is None:
        model = loader() if loader is not None else load_model(spec, device)
    vectors = embed_texts(model, texts, batch_size=spec.batch_size, normalize=spec.normalize,
                          prompt=spec.prompt(role), desc=f"embedding {role}")
    _store_cached(path, vectors)
    return vectors


def _read_cached(path: Path, n: int) -> np.ndarray | None:
    """The cached entry at ``path``, or None when absent; a damaged one (truncated, foreign, mis-shaped) is said
    in one line, removed and recomputed."""
    if not path.is_file():
        return None
    try:
        vectors = np.load(path, allow_pickle=False)
        problem = (None if vectors.ndim == 2 and vectors.shape[0] == n and vectors.dtype == np.float32 else
                   f"holds a {vectors.dtype} array of shape {vectors.shape}; expected float32 with {n} rows")
    except Exception as exc:
        problem = f"unreadable: {one_line(exc)}"
    if problem is None:
        return vectors
    notice(f"embedding cache: {path} {problem}; recomputing it")
    try:
        path.unlink()
    except OSError:
        pass
    return None


def _store_cached(path: Path, vectors: np.ndarray) -> None:
    """Write a cache entry atomically (a temporary of this process's own, then a rename); a cache that cannot be
    written (no space, permission) is said in one line and the run goes on without it."""
    import tempfile

    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        save_npy(tmp, vectors)
        os.chmod(tmp, 0o644)  # as an ordinary file (mkstemp makes it private)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        notice(f"embedding cache: could not store {path} ({exc.strerror or one_line(exc)}); "
               "the run goes on, the next one embeds the texts again")


def embed_with_cache(spec: ModelSpec, corpus: tuple[Sequence[str], Sequence[str]],
                     queries: tuple[Sequence[str], Sequence[str]] | None, cache_dir: str | os.PathLike, *,
                     device: Any = "auto") -> tuple[np.ndarray, np.ndarray | None]:
    """Corpus and (optional) query embeddings through the cache, loading the model at most once.

    ``corpus`` and ``queries`` are ``(ids, texts)`` pairs as :func:`~.texts.read_texts` returns them.
    """
    loaded: list[Any] = []

    def once():
        if not loaded:
            loaded.append(load_model(spec, device))
        return loaded[0]

    results = []
    for role, pair in (("corpus", corpus), ("queries", queries)):
        if pair is None:
            results.append(None)
            continue
        ids, texts = pair
        results.append(cached_embeddings(spec, texts, ids, cache_dir, role=role, device=device, loader=once))
    return results[0], results[1]


# ----------------------------------------------------------------------------- output


def write_embedded_set(out_dir: str | os.PathLike, corpus_ids: Sequence[str], corpus_vectors: np.ndarray,
                       query_ids: Sequence[str] | None = None, query_vectors: np.ndarray | None = None,
                       extra_manifest: dict | None = None, *, query_extra: dict | None = None,
                       comment: str | None = None) -> Path:
    """Write the vectors a model produced so that the report can be re-run without the model.

    Writes ``out_dir/embeddings/``: ``corpus.npy`` and ``corpus_ids.txt`` (one id per line, input
    order), with queries also ``queries.npy`` and ``query_ids.txt``, and ``manifest.yaml`` naming
    them (relative paths, so the folder can be moved) plus ``extra_manifest``'s fields copied as
    given (e.g. ``name``, ``qrels``, ``metadata``, ``exclude_self``: paths in it must be absolute,
    as :func:`~.manifest.read_manifest` returns them; those inside ``out_dir`` are written relative
    to the manifest, so that the report folder can be moved). ``query_extra`` adds keys to the
    ``queries`` mapping (e.g. ``metadata``); ``comment`` is written as the manifest's first line.
    Returns the manifest's path, which :func:`~.embedding_set.load_source` loads.
    """
    import yaml

    extra = dict(extra_manifest or {})
    clash = [k for k in ("vectors", "ids", "queries") if k in extra]
    if clash:
        raise ValueError(f"extra_manifest must not set {', '.join(clash)}: write_embedded_set writes them")
    if (query_ids is None) != (query_vectors is None):
        raise ValueError("give both query_ids and query_vectors, or neither")
    folder = Path(out_dir) / "embeddings"
    folder.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {}
    if "name" in extra:
        manifest["name"] = extra.pop("name")
    manifest["vectors"] = _write_part(folder, "corpus.npy", "corpus_ids.txt", corpus_ids, corpus_vectors, "corpus")
    manifest["ids"] = "corpus_ids.txt"
    if query_ids is not None:
        manifest["queries"] = {
            "vectors": _write_part(folder, "queries.npy", "query_ids.txt", query_ids, query_vectors, "queries"),
            "ids": "query_ids.txt",
        }
        manifest["queries"].update(query_extra or {})
    manifest.update(extra)
    checked = absolute_paths(manifest)  # validated where they were first given: let through when read again here
    manifest = _portable(manifest, Path(out_dir).resolve(), folder.resolve())
    path = folder / "manifest.yaml"
    text = yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True)
    if comment:
        text = "".join(f"# {line}\n" for line in comment.splitlines()) + text
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    register_written(path, checked)
    return path


def _portable(value: Any, root: Path, folder: Path) -> Any:
    """``value`` with every absolute path inside ``root`` made relative to ``folder`` (lists and mappings walked)."""
    if isinstance(value, dict):
        return {k: _portable(v, root, folder) for k, v in value.items()}
    if isinstance(value, list):
        return [_portable(v, root, folder) for v in value]
    if isinstance(value, str) and os.path.isabs(value) and Path(value).resolve().is_relative_to(root):
        return os.path.relpath(Path(value).resolve(), folder)
    return value


def _write_part(folder: Path, vectors_name: str, ids_name: str, ids: Sequence[str], vectors: np.ndarray,
                what: str) -> str:
    ids = np.asarray(list(ids), dtype=object)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(ids):
        raise ValueError(f"{what}: {len(ids)} ids for vectors of shape {vectors.shape}; expected one row per id")
    if not ids_fit_text(ids):
        bad = next((i for i in ids if i != i.strip() or "\n" in i or "\r" in i), ids[0])
        raise InputError(f"{what}: id {bad!r} has surrounding spaces or a line break; it cannot be written to "
                         f"{ids_name} (one id per line)")
    write_atomic(folder / vectors_name, lambda tmp: save_npy(tmp, vectors))
    ids_text = "".join(f"{i}\n" for i in ids)
    write_atomic(folder / ids_name, lambda tmp: tmp.write_text(ids_text, encoding="utf-8"))
    return vectors_name
