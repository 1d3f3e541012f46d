"""Files embeval-report writes outside its staging folder, and the paths the files it publishes may hold.

Writing (every writer outside a run's own staging folder goes through here: the output lock, ``monitor``'s JSON
and ``--history``, a profile, ``render`` and ``explore`` in a report folder):

* :func:`open_nofollow` opens a file for writing in place (a lock, an appended history) without following a
  symbolic link at its name (``O_NOFOLLOW``), creating it when missing but never truncating it; a link, a file
  that is not a regular file, or one with other hard links is refused with one line naming the path
  (:class:`~embeval_report.errors.InputError`, exit status 2), so a link committed next to a CI output cannot
  redirect the write onto another file;
* :func:`replace_file` and :func:`replace_with` write a whole file as a new temporary file in the same folder
  (created exclusively, so never through a link) and ``os.replace`` it onto the name; a link at the name is
  refused the same way rather than replaced.

Publishing (``metrics.json``, ``run.json``, ``results/``, the executed notebooks, the rendered report): a path
is written relative to a folder the reader has (:func:`portable_path`), and a text that may quote paths of this
machine (a traceback, an error) has them replaced (:func:`scrub`): the run's staging folder (whose name holds
the host name) by the report folder's relative form, the Python environment by ``[python]``, the package by
``embeval_report`` and the home folder by ``~``.
"""
from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from .errors import InputError

#: errno of ``open(..., O_NOFOLLOW)`` on a symbolic link (Linux, macOS: ELOOP; FreeBSD: EMLINK)
_LINK_ERRNOS = (errno.ELOOP, errno.EMLINK)


def refused(what: str, path, why: str) -> InputError:
    """The one line of a path the tool will not write through."""
    return InputError(f"{what} {path}: {why}; embeval-report writes only regular files of its own there, never "
                      "through a link: remove it or choose another path")


def _check_regular(st: os.stat_result, what: str, path) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise refused(what, path, "is a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        raise refused(what, path, "exists and is not a regular file")
    if st.st_nlink > 1:
        raise refused(what, path, f"is a regular file with {st.st_nlink} hard links")


def open_nofollow(path, flags: int, what: str, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC)``: a descriptor of the regular file at ``path``
    (created when missing; ``O_TRUNC`` is never added). A symbolic link at ``path``, a folder, a FIFO or a file
    with other hard links is refused (:func:`refused`: ``what`` names the option, e.g. ``--history``)."""
    flags = (flags | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
             | getattr(os, "O_NONBLOCK", 0)) & ~os.O_TRUNC  # non-blocking: a FIFO there cannot hang the open
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno in _LINK_ERRNOS and os.path.islink(path):
            raise refused(what, path, "is a symbolic link") from None
        if exc.errno == errno.EISDIR:
            raise refused(what, path, "exists and is not a regular file") from None
        raise
    try:
        _check_regular(os.fstat(fd), what, path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_target(path, what: str) -> None:
    """Refuse (:func:`refused`) a ``path`` that exists and is not a regular file of its own (a link, a folder)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    _check_regular(st, what, path)


def replace_with(path, write: Callable[[Path], object], what: str) -> Path:
    """Write ``path`` whole: ``write(tmp)`` fills a new temporary file beside it (made with ``O_EXCL``, so never
    through a link), which then replaces ``path`` in one rename. A link or a non-file at ``path`` is refused
    (:func:`check_target`); the temporary is removed when anything fails."""
    path = Path(path)
    check_target(path, what)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # an ordinary file, as open() would make it (mkstemp makes it private)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def replace_file(path, data: bytes | str, what: str) -> Path:
    """:func:`replace_with` for ``data`` (text is written as UTF-8)."""
    blob = data.encode("utf-8") if isinstance(data, str) else data
    return replace_with(path, lambda tmp: tmp.write_bytes(blob), what)


# ----------------------------------------------------------------------------------------- published paths

def portable_path(path, start) -> str:
    """``path`` relative to the folder ``start`` (POSIX separators), as a published file records it; the file name
    alone when the two share no folder below the root (a relative path would spell out the absolute one)."""
    path, start = os.path.abspath(path), os.path.abspath(start)
    try:
        common = os.path.commonpath([path, start])
    except ValueError:  # another drive
        return Path(path).name
    if common == os.path.dirname(common):  # only the root in common
        return Path(path).name
    return Path(os.path.relpath(path, start)).as_posix()


def resolve_recorded(value, folder) -> Path:
    """A path a published file recorded (:func:`portable_path`, or absolute under ``--record-paths`` and in reports
    of earlier versions), as a path on this machine: relative ones against ``folder``."""
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else Path(folder) / path


def private_prefixes(*places: tuple[str | os.PathLike, str]) -> list[tuple[str, str]]:
    """``(prefix, replacement)`` for :func:`scrub`, longest first: ``places`` (e.g. the staging folder and what it
    reads as), then this package, the Python environment and the home folder."""
    package = Path(__file__).resolve().parent
    pairs = [(str(p), r) for p, r in places]
    pairs += [(str(package), "embeval_report")]
    pairs += [(p, "[python]") for p in {sys.prefix, sys.exec_prefix} if p and p != os.sep]
    home = os.path.expanduser("~")
    if home and home != os.sep:
        pairs.append((home, "~"))
    pairs = [(os.path.abspath(p), r) for p, r in pairs] + [(os.path.realpath(p), r) for p, r in pairs]
    return sorted(set(pairs), key=lambda pr: -len(pr[0]))


def scrub(text: str, prefixes: Iterable[tuple[str, str]]) -> str:
    """``text`` with every prefix of :func:`private_prefixes` replaced (a prefix is replaced where a path starts
    with it: followed by ``/``, a quote, a space, a colon or the end)."""
    if not isinstance(text, str) or not text:
        return text
    for prefix, replacement in prefixes:
        if prefix and prefix in text:
            text = _replace_prefix(text, prefix, replacement)
    return text


def _replace_prefix(text: str, prefix: str, replacement: str) -> str:
    out, i = [], 0
    while True:
        j = text.find(prefix, i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        end = j + len(prefix)
        nxt = text[end:end + 1]
        if nxt in ("", "/", os.sep, "'", '"', " ", ":", ")", "\n", "`", "\x1b", ","):
            if replacement == "" and nxt in ("/", os.sep):
                end += 1  # inside the report: "chapters/x.ipynb", not "/chapters/x.ipynb"
            out.append(text[i:j] + (replacement or ("." if nxt not in ("/", os.sep) else "")))
        else:
            out.append(text[i:end])
        i = end
