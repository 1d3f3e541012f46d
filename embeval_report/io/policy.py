"""What a command trusts of its input: where a manifest's paths may lead, and whether gensim pickles are loaded.

Both are set once per command with :func:`input_policy` (the command line's ``--allow-outside`` and
``--trust-pickles``, the Python API's ``allow_outside=`` and ``trust_pickles=``); outside it the strict
default applies.

* **A manifest's paths stay inside its folder.** Every path a manifest names (relative, absolute, ``~``, or
  one that a symbolic link takes elsewhere) must resolve inside the manifest's folder, its ``data_root`` or a
  folder given with ``--allow-outside``; else the run stops with one line naming the field and the path as
  written, before the file is looked at (the line says nothing about it: whether it exists, its size, its
  lines). ``data_root`` widens the folder from inside the manifest, so it may only name a folder inside the
  working directory or an ``--allow-outside`` folder: a manifest someone sent cannot reach ``/`` or ``~``.
  A vectors file named on the command line is the user's own choice and is not confined.
* **gensim pickles only on request.** A gensim ``.kv``/``.model`` file is a Python pickle, which can be made
  to run code when read; the reader allows only the classes of a gensim model (:mod:`.safe_pickle`), and it
  reads one only with ``--trust-pickles`` (word2vec text and binary files need no opt-in).

A manifest this process wrote itself from validated input (a model run's embeddings, the Python API's
array, the text demo) names files that were already checked where they were first given:
:func:`register_written` lets exactly those paths through when that same file is read again.
"""
from __future__ import annotations

import contextvars
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from .files import describe

#: how to widen the folder a manifest's paths may lead into, said in every refusal
WIDEN = ("allow it with --allow-outside DIR (Python: allow_outside=[DIR]) or name a folder inside the working "
         "directory as the manifest's data_root")
#: how to opt in to gensim pickles, said in every refusal
TRUST = ("word2vec text (.txt/.vec) and binary (.bin) files need no opt-in; to read a gensim pickle you trust, "
         "give --trust-pickles (Python: trust_pickles=True)")


@dataclass(frozen=True)
class InputPolicy:
    """``allow_outside``: real paths of folders (or files) a manifest's paths may lead into besides its own
    folder; ``trust_pickles``: whether gensim pickles are read."""

    allow_outside: tuple[Path, ...] = ()
    trust_pickles: bool = False


_POLICY: contextvars.ContextVar[InputPolicy] = contextvars.ContextVar("embeval_input_policy",
                                                                    default=InputPolicy())


def current_policy() -> InputPolicy:
    """The policy in force (the strict default outside every :func:`input_policy` block)."""
    return _POLICY.get()


@contextmanager
def input_policy(*, allow_outside: Iterable[str | os.PathLike] = (), trust_pickles: bool = False
                 ) -> Iterator[InputPolicy]:
    """Make a policy the one in force inside the block (see the module docstring)."""
    if isinstance(allow_outside, (str, os.PathLike)):
        allow_outside = [allow_outside]
    policy = InputPolicy(tuple(real_path(p) for p in allow_outside), bool(trust_pickles))
    token = _POLICY.set(policy)
    try:
        yield policy
    finally:
        _POLICY.reset(token)


def real_path(path: str | os.PathLike) -> Path:
    """The absolute path with ``~`` expanded and every symbolic link followed (what the OS will open)."""
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def inside(path: Path, roots: Iterable[Path]) -> bool:
    """Whether the real path ``path`` is one of ``roots`` or lies under one."""
    return any(path == r or path.is_relative_to(r) for r in roots)


@dataclass(frozen=True)
class ManifestPaths:
    """Where a manifest's relative paths start (``folder``, as written) and the real folders its paths may lead
    into (``roots``): :meth:`resolve` is the one way a manifest's path becomes a file path."""

    folder: Path
    roots: tuple[Path, ...]

    @classmethod
    def of(cls, manifest: Path, data_root: Any = None, where: str = "") -> "ManifestPaths":
        """The paths of ``manifest``: its folder, the ``data_root`` it declares (checked: an existing folder inside
        the working directory, the manifest's folder or an allowed folder) and the allowed folders."""
        folder = Path(os.path.abspath(manifest)).parent
        roots = (real_path(folder), *current_policy().allow_outside, *written_roots(manifest))
        if data_root is not None:
            if not isinstance(data_root, str) or not data_root.strip():
                raise InputError(f"{where}: expected a folder (string), found {describe(data_root)}")
            real = real_path(os.path.join(folder, os.path.expanduser(data_root)))
            if not inside(real, (*roots, real_path(os.getcwd()))):
                raise InputError(f"{where}: {data_root!r} lies outside the working directory and the manifest's "
                                 "folder; a manifest may widen its folder only within them: give the folder with "
                                 "--allow-outside DIR (Python: allow_outside=[DIR]) instead")
            if not real.is_dir():
                raise InputError(f"{where}: {data_root!r} is not a folder; expected the folder the manifest's files "
                                 "lie in")
            roots = (*roots, real)
        return cls(folder, roots)

    @classmethod
    def unconfined(cls, folder: str | os.PathLike) -> "ManifestPaths":
        """Paths relative to ``folder`` that may lead anywhere (a folder a caller gives from Python)."""
        return cls(Path(os.path.abspath(folder)), (Path(os.path.abspath(os.sep)),))

    def resolve(self, value: str, where: str) -> Path:
        """The absolute path ``value`` names (relative to the manifest's folder, ``~`` expanded, links kept as
        written); InputError when it leads outside every root, before anything about the file is looked at."""
        path = Path(os.path.abspath(os.path.join(self.folder, os.path.expanduser(value))))
        if not inside(real_path(path), self.roots):
            link = " through a symbolic link" if inside(path, (self.folder, *self.roots)) else ""
            raise InputError(f"{where}: the path {value!r} leads outside the manifest's folder{link}; a manifest's "
                             f"files must lie inside it: {WIDEN}")
        return path


# ------------------------------------------------------------------ manifests this process wrote

#: the file (device, inode, size, modification time) of each manifest this process wrote -> the paths it may name
_WRITTEN: dict[tuple[int, ...], tuple[Path, ...]] = {}


def register_written(manifest: str | os.PathLike, paths: Iterable[str | os.PathLike]) -> None:
    """Let the absolute ``paths`` through when this process reads ``manifest`` again, unchanged (a manifest it
    wrote itself, naming files validated where they were first given); the file is known by its identity, so it
    may be moved (a report's staging folder renamed into place), not changed."""
    key = _signature(real_path(manifest))
    if key:
        _WRITTEN[key] = tuple(real_path(p) for p in paths)


def absolute_paths(value: Any) -> list[str]:
    """Every absolute path string in a manifest's values (lists and mappings walked)."""
    if isinstance(value, dict):
        return [p for v in value.values() for p in absolute_paths(v)]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in absolute_paths(v)]
    return [value] if isinstance(value, str) and os.path.isabs(value) else []


def written_roots(manifest: str | os.PathLike) -> tuple[Path, ...]:
    """The paths :func:`register_written` allowed for ``manifest``; none when it was not written here or has
    changed since."""
    key = _signature(real_path(manifest))
    return _WRITTEN.get(key, ()) if key else ()


def _signature(path: Path) -> tuple[int, ...]:
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

