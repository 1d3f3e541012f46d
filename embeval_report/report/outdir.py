"""The ``--out`` folder: which folders may be written, staging, the move into place, and the faults around it.

Rules (the tool never deletes a file it did not write):

* a new or empty folder is written;
* an earlier report (:mod:`.earlier`: its ``run.json`` carries embeval-report's marker and the list of files the
  run wrote, or the structure earlier versions wrote) is replaced atomically, provided it holds only what
  embeval-report wrote (other top-level entries: refused unless ``--force``, which keeps them; a file the run did
  not write inside the report's own folders: refused even with ``--force``);
* any other non-empty folder is refused (exit status 2) unless ``--force``; with ``--force`` the
  report's own entries are added next to the folder's other files, which are kept (a folder that
  already holds an entry with one of the report's names that embeval-report did not write is
  refused even then);
* the report is built in a hidden staging folder beside ``out`` (``.NAME.partial-PID@HOST-XXXX``, its
  owner in its name) and moved into place at the end, so an interrupted run leaves nothing half-written;
* one run at a time per output folder: :func:`output_lock` holds ``.NAME.lock`` beside it (an OS lock,
  released by the system when the process ends however it ends; the file names the run for the message);
* staging folders of the same output whose owner is gone (a run killed with SIGKILL, a crash, a power loss)
  are removed by the next run, and by :func:`clean` (``embeval-report clean DIR``);
* a write that fails for a reason of the output location (no space, permission, a path component that is a
  file, a read-only file system) becomes one :class:`~embeval_report.errors.OutputError` line naming the path
  and the cause (:meth:`OutputFolder.fault`), with exit status 2 before any chapter ran and 1 after.
"""
from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..errors import ExitCode, InputError, OutputError, notice
from ..safe_files import open_nofollow
from .earlier import REPORT_ENTRIES, EarlierReport


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _listed(names: list[str]) -> str:
    return f"{', '.join(names[:5])}{', …' if len(names) > 5 else ''}"


@dataclass(frozen=True)
class OutputFolder:
    """A checked ``--out`` target; ``merge`` when the report joins a folder of other files (``--force``)."""

    path: Path
    merge: bool = False
    previous: frozenset = frozenset()   # entries an earlier report wrote (replaced or removed on commit)

    @classmethod
    def check(cls, out, *, force: bool = False) -> "OutputFolder":
        """Apply the rules of the module docstring; raise :class:`InputError` for a folder that may not be written."""
        out = Path(out).resolve()
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {out}: exists and is not a folder; expected a new or empty folder")
        if not out.exists() or not any(out.iterdir()):
            return cls(out)
        entries = _listing(out)
        earlier = EarlierReport.read(out)
        if earlier is not None:
            inside = earlier.unrecorded()
            if inside:
                raise InputError(f"--out {out}: an earlier report folder holding files embeval-report did not write "
                                 f"inside its own folders ({_listed(inside)}); replacing the report would delete "
                                 "them, even with --force: move them away or choose another folder")
            foreign = earlier.foreign()
            if not foreign:
                return cls(out)
            if not force:
                raise InputError(f"--out {out}: an earlier report folder that also holds files embeval-report did "
                                 f"not write ({_listed(foreign)}); move them away, choose another folder, or pass "
                                 "--force to keep them and replace the report")
            return cls(out, merge=True, previous=frozenset(e for e in entries if e not in foreign))
        if not force:
            why = ("its run.json was not written by embeval-report" if os.path.lexists(out / "run.json")
                   else "no run.json")
            raise InputError(f"--out {out}: folder is not empty and is not an embeval-report output ({why}); "
                             "choose a new or empty folder, or pass --force to add the report beside its files")
        clash = [e for e in entries if e in REPORT_ENTRIES]
        if clash:
            raise InputError(f"--out {out}: already holds {', '.join(clash)}, which embeval-report did not write; "
                             "it will not replace them even with --force: choose another folder")
        return cls(out, merge=True)

    def staging(self) -> Path:
        """A new hidden staging folder beside the target, its owner (this process) in its name; staging folders
        of the same target whose owner is gone are removed first (:func:`remove_stale`)."""
        with self.writing(self.path.parent, started=False):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            remove_stale(self.path)
            return Path(tempfile.mkdtemp(prefix=f".{self.path.name}.partial-{owner_tag()}-", dir=self.path.parent))

    def check_room(self, staging: Path, n: int, d: int) -> None:
        """Refuse (exit status 2, before any chapter) when the file system of ``staging`` has less free space
        than the prepared float32 copy of an ``n`` × ``d`` set (``n·d·4`` bytes, unless already written or
        linked there) plus :data:`ROOM_MARGIN` for the report itself. A lower bound: the run may need more."""
        copy = 0 if os.path.lexists(staging / ".prepared" / "vectors.npy") else int(n) * int(d) * 4
        need = copy + ROOM_MARGIN
        try:
            free = shutil.disk_usage(staging).free
        except OSError:
            return
        if free < need:
            raise OutputError(f"--out {self.path}: {_size(free)} free on its file system; the run needs at least "
                              f"{_size(need)} (the prepared float32 copy of the set, {int(n):,} x {int(d)} x 4 bytes "
                              f"= {_size(copy)}, and {_size(ROOM_MARGIN)} for the report): free some space or choose "
                              "another --out", ExitCode.INPUT)

    def fault(self, exc: BaseException, staging: Path | None = None) -> OutputError | None:
        """``exc`` as one :class:`OutputError` line when it is a write fault of the output location (see
        :func:`write_fault`), else None. Exit status 2 when no chapter had started in ``staging`` (the runner makes
        ``chapters/`` when the chapters start), 1 after."""
        found = write_fault(exc, self.path.parent)
        if found is None:
            return None
        path, cause = found
        started = staging is not None and (staging / "chapters").is_dir()
        if not path and staging is not None:  # a write that failed after its open names no file: docs/faults.md
            path = _newest_file(staging)      # asks for one, and the file being written was touched last
        where = f" ({_shown(path, staging, self.path)})" if path and path not in cause else ""
        left = ("; the run's staging folder was removed, nothing else was touched" if staging is not None
                else "; nothing was written")
        return OutputError(f"--out {self.path}: {cause}{where}{left}", ExitCode.WRITE if started else ExitCode.INPUT)

    @contextmanager
    def writing(self, staging: Path | None = None, *, started: bool | None = None) -> Iterator[None]:
        """Turn a write fault raised inside into one :class:`OutputError` line (see :meth:`fault`)."""
        try:
            yield
        except OutputError:
            raise
        except Exception as exc:
            err = self.fault(exc, None if started is False else staging)
            if err is None:
                raise
            raise err from None

    def abandon(self, staging: Path, exc: BaseException) -> None:
        """A failed run: remove ``staging``; raise ``exc`` as an :class:`OutputError` line when it is a write fault
        (otherwise return, and the caller re-raises ``exc``)."""
        err = self.fault(exc, staging)
        shutil.rmtree(staging, ignore_errors=True)
        if err is not None:
            raise err from None

    def commit(self, staging: Path) -> None:
        """Move the staged report into place (see the module docstring)."""
        with self.writing(staging):
            self._commit(staging)

    def _commit(self, staging: Path) -> None:
        if not self.merge:
            old = None
            if self.path.exists():
                old = self.path.with_name(f".{self.path.name}.old-{owner_tag()}-{secrets.token_hex(4)}")
                self.path.rename(old)
            staging.rename(self.path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            return
        trash = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.old-{owner_tag()}-", dir=self.path.parent))
        new = {e.name for e in staging.iterdir()}
        for name in sorted(self.previous - new):  # the earlier report's own entries this run does not write
            (self.path / name).rename(trash / name)
        for entry in sorted(staging.iterdir()):
            target = self.path / entry.name
            if target.exists():
                target.rename(trash / entry.name)
            entry.rename(target)
        shutil.rmtree(trash, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)


# ----------------------------------------------------------------------------------------- write faults

#: errno -> the cause as the user reads it; these are the output location's fault wherever they happen
SPACE_FAULTS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                errno.EROFS: "read-only file system", errno.EFBIG: "file too large for the file system"}
#: errno -> cause; the output location's fault when the path named lies where the run writes (else, say, an
#: input file that cannot be read)
PLACE_FAULTS = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
                errno.ENOTDIR: "a component of the path is a file, not a folder",
                errno.EEXIST: "a component of the path is a file, not a folder"}
#: free space asked for beyond the prepared copy of the set (the notebooks, results and rendered report)
ROOM_MARGIN = 32 * 2**20
_KERNEL_OSERROR = re.compile(r"^\[Errno (\d+)\] [^:]*(?:: '(.*)')?")


def write_fault(exc: BaseException, where: Path | None = None) -> tuple[str | None, str] | None:
    """``(path, cause)`` when ``exc`` (or an error it wraps) is a write fault, else None.

    A fault is an :class:`OSError` of :data:`SPACE_FAULTS`, or of :data:`PLACE_FAULTS` naming a path under
    ``where`` (the folder that holds the output; none without it); a chapter kernel's own ``OSError`` (papermill reports its name
    and text) counts for :data:`SPACE_FAULTS`. For a path component that is a file, the cause names it.
    """
    seen = 0
    while isinstance(exc, Exception) and not isinstance(exc, (InputError, OutputError)) and seen < 8:
        seen += 1
        if isinstance(exc, OSError) and exc.errno in SPACE_FAULTS:
            return exc.filename and os.fsdecode(exc.filename), SPACE_FAULTS[exc.errno]
        if isinstance(exc, OSError) and exc.errno in PLACE_FAULTS and exc.filename is not None and where is not None:
            path = Path(os.path.abspath(os.fsdecode(exc.filename)))
            if path.is_relative_to(Path(where).resolve()) or path.is_relative_to(Path(where)):
                blocker = _file_in_path(path) if exc.errno in (errno.ENOTDIR, errno.EEXIST) else None
                if blocker is not None:
                    return str(path), f"{blocker} is a file, not a folder"
                if exc.errno != errno.EEXIST:
                    return str(path), PLACE_FAULTS[exc.errno]
        m = _KERNEL_OSERROR.match(str(getattr(exc, "evalue", "") or ""))
        if m and int(m.group(1)) in SPACE_FAULTS:
            return m.group(2), SPACE_FAULTS[int(m.group(1))]
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return None


def raise_write_fault(exc: BaseException) -> None:
    """Re-raise ``exc`` when it is a write fault (:func:`write_fault`), for code that otherwise records an error
    and goes on (a failing chapter, a failing format): with the disk full the run cannot go on."""
    if write_fault(exc) is not None:
        raise exc


def _newest_file(folder: Path) -> str | None:
    """The file modified last under ``folder`` (the one a write was filling when the disk filled up), or None."""
    newest = None
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                stamp = os.stat(os.path.join(root, name), follow_symlinks=False).st_mtime_ns
            except OSError:
                continue
            if newest is None or stamp >= newest[0]:
                newest = (stamp, os.path.join(root, name))
    return newest and newest[1]


def _file_in_path(path: Path) -> Path | None:
    """The first component of ``path`` (from the root) that exists and is not a folder."""
    for p in reversed([path, *path.parents]):
        if p.exists() or p.is_symlink():
            if not p.is_dir():
                return p
        else:
            return None
    return None


def _shown(path: str, staging: Path | None, out: Path) -> str:
    """``path`` as the user reads it: inside the staging folder relative to it ("writing chapters/x.ipynb")."""
    p = Path(path)
    if staging is not None and p.is_absolute() and p.is_relative_to(staging):
        return f"writing {p.relative_to(staging)}"
    if p.is_absolute() and p.is_relative_to(out.parent):
        return str(p)
    return f"writing {p}"


def _size(nbytes: int) -> str:
    from ..context import describe_bytes as describe

    return describe(int(nbytes))


# ------------------------------------------------------------------------------------- owners, staleness

def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:64] or "host"


def owner_tag() -> str:
    """``PID@HOST`` of this process, as staging and trash folders carry it in their names."""
    return f"{os.getpid()}@{_host()}"


#: ``.NAME.partial-PID@HOST-XXXXXXXX`` (``old`` for trash); without ``PID@HOST-`` as older versions named them
#: (``mkdtemp``'s 8 characters, or the pid alone for a replaced report)
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>partial|old)-(?:(?P<pid>\d+)@(?P<host>[A-Za-z0-9._-]+)-)?"
                       r"(?P<token>[a-z0-9_]{8}|\d+)$")
#: what a staging or trash folder may hold: the report's entries and the run's hidden working files (and the
#: temporaries of a file being replaced: ``safe_files.replace_with``'s, and earlier versions' ``.NAME.tmp-PID``)
_STAGING_ENTRIES = REPORT_ENTRIES | {".prepared", ".progress"}
_TEMPORARY = re.compile(r"^\..+\.tmp(-\d+)?$")


def _only_run_entries(folder: Path) -> bool:
    """Whether ``folder`` holds only what a run's staging (or trash) folder holds."""
    return all(p.name in _STAGING_ENTRIES or _TEMPORARY.match(p.name) for p in folder.iterdir())


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine."""
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


@dataclass(frozen=True)
class Leftover:
    """A staging (``partial``) or trash (``old``) folder of the output ``name``, and its owner if it names one."""

    path: Path
    name: str
    kind: str
    pid: int | None
    host: str | None

    @classmethod
    def parse(cls, path: Path) -> "Leftover | None":
        m = _LEFTOVER.match(path.name)
        if m is None or not path.is_dir() or path.is_symlink():
            return None
        if not _only_run_entries(path):
            return None  # not only what a run writes: not ours, whatever its name says
        return cls(path, m["name"], m["kind"], int(m["pid"]) if m["pid"] else None, m["host"])

    def state(self) -> str:
        """``gone`` (its owner ended), ``live`` (its owner runs here), ``other-host`` or ``unknown`` (no owner)."""
        if self.pid is None:
            return "unknown"
        if self.host != _host():
            return "other-host"
        return "live" if pid_alive(self.pid) else "gone"

    def describe(self) -> str:
        what = "staging folder" if self.kind == "partial" else "trash folder"
        owner = f" of run pid {self.pid} on {self.host}" if self.pid is not None else ""
        return f"{what}{owner}"


def remove_stale(out: Path, *, say: Callable[[str], None] = notice) -> list[tuple[Path, int]]:
    """Remove the staging and trash folders of ``out`` whose owner is gone; say each in one line.

    A trash folder holding a whole earlier report while ``out`` itself is missing (a run killed between its
    two renames) is moved back to ``out`` instead. Returns ``(path, bytes)`` of what was removed.
    """
    out = Path(out)
    removed = []
    if not out.parent.is_dir():
        return removed
    for entry in sorted(out.parent.glob(f".{glob_escape(out.name)}.*-*")):
        left = Leftover.parse(entry)
        if left is None or left.name != out.name or left.state() != "gone":
            continue
        if left.kind == "old" and not out.exists() and EarlierReport.read(entry) is not None:
            entry.rename(out)
            say(f"restored the earlier report {out} from {entry.name}, left by run pid {left.pid} that was "
                "stopped while moving its report into place")
            continue
        size = tree_size(entry)
        shutil.rmtree(entry, ignore_errors=True)
        removed.append((entry, size))
        say(f"removed {entry} ({_size(size)}), the {left.describe()} that is gone")
    return removed


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def tree_size(path: Path) -> int:
    """Bytes of the files under ``path`` (links counted as links, never followed)."""
    total = 0
    try:
        total += os.lstat(path).st_size if not path.is_dir() or path.is_symlink() else 0
    except OSError:
        return 0
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            for f in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                try:
                    total += os.lstat(os.path.join(root, f)).st_size
                except OSError:
                    pass
    return total


# --------------------------------------------------------------------------------------------- the lock

def lock_path(out: Path) -> Path:
    """``.NAME.lock`` beside the output folder ``out``."""
    out = Path(out)
    return out.parent / f".{out.name}.lock"


def _holder(record: dict | None) -> str:
    if not record:
        return "a run that is starting"
    since = record.get("since", "")
    try:
        minutes = (time.time() - _dt.datetime.fromisoformat(since).timestamp()) / 60
        ago = f", {minutes:.0f} min ago" if minutes >= 1 else ", under a minute ago"
    except (TypeError, ValueError):
        ago = ""
    return f"pid {record.get('pid')} on {record.get('host')}, started {since}{ago}"


def _is_lock_record(record: dict | None) -> bool:
    """Whether ``record`` is what :class:`OutputLock` writes into its file."""
    return bool(record) and {"pid", "host", "since"} <= set(record)


def _read_record(fd: int) -> dict | None:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        record = json.loads(text) if text.strip() else None
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


class OutputLock:
    """One run per output folder: an exclusive ``flock`` on ``.NAME.lock`` beside it.

    The lock is the operating system's, so a run that ends in any way (SIGKILL, a crash) releases it; the file
    holds ``{"pid", "host", "since", "out"}`` to name the run in messages. A file left by a run that is gone is
    taken over (said in one line). Where the file system has no ``flock`` (some network file systems), the
    recorded pid is checked instead (same host: is it alive; another host: taken as running).
    """

    def __init__(self, out, *, wait: bool = False, say: Callable[[str], None] = notice, poll: float = 1.0):
        self.out = Path(out).resolve()
        self.path = lock_path(self.out)
        self.fd: int | None = None
        self.made = [p for p in [self.out.parent, *self.out.parent.parents] if not p.exists()]  # removed if left empty
        target = OutputFolder(self.out)
        with target.writing(started=False):
            try:
                self.out.parent.mkdir(parents=True, exist_ok=True)
                self._acquire(wait, say, poll)
            except BaseException:
                self._remove_made()
                raise

    def _acquire(self, wait: bool, say, poll: float) -> None:
        import fcntl

        announced = False
        while True:
            fd = open_nofollow(self.path, os.O_RDWR, "--out lock")
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    self._busy(_read_record(fd), wait, announced, say)
                    announced = True
                    fcntl.flock(fd, fcntl.LOCK_EX)  # wait for it (Ctrl-C interrupts)
                except OSError as exc:  # no flock on this file system: the recorded pid decides
                    if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    record = _read_record(fd)
                    if record and _running(record):
                        self._busy(record, wait, announced, say)
                        announced = True
                        os.close(fd)
                        time.sleep(poll)
                        continue
                if not _same_file(fd, self.path):  # released and removed while we waited: take the new one
                    os.close(fd)
                    continue
            except BaseException:
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                raise
            break
        self.fd = fd
        previous = _read_record(fd)
        if os.fstat(fd).st_size and not _is_lock_record(previous):
            self.fd = None
            os.close(fd)
            raise InputError(f"--out lock {self.path}: holds something that is not a lock embeval-report wrote; it "
                             "will not overwrite it: remove it or choose another --out")
        if previous:
            say(f"took over {self.path}: the run it names ({_holder(previous)}) is gone")
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "since": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                             "out": str(self.out)}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)

    def _busy(self, record: dict | None, wait: bool, announced: bool, say) -> None:
        if not wait:
            raise InputError(f"--out {self.out}: another run is writing this folder ({_holder(record)}); "
                             "wait for it to end, choose another --out, or pass --wait to start when it ends")
        if not announced:
            say(f"--out {self.out}: waiting for the run writing this folder ({_holder(record)}) to end")

    def release(self) -> None:
        """Remove the lock file and release the lock (removed first, so that a run waiting on it retries)."""
        if self.fd is None:
            return
        try:
            if _same_file(self.fd, self.path):
                self.path.unlink()
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None
        self._remove_made()

    def _remove_made(self) -> None:
        """Remove the folders above the output that this run made and that stayed empty (a run that failed)."""
        for p in self.made:
            try:
                p.rmdir()
            except OSError:
                break


def _running(record: dict) -> bool:
    host, pid = record.get("host"), record.get("pid")
    if host != socket.gethostname():
        return True
    return isinstance(pid, int) and pid_alive(pid)


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@contextmanager
def output_lock(out, *, wait: bool = False, say: Callable[[str], None] = notice) -> Iterator[OutputLock]:
    """Hold the lock of the output folder ``out`` for the duration (see :class:`OutputLock`): a second run into it
    is refused (:class:`InputError`, exit 2) naming this one, or waits with ``wait``."""
    lock = OutputLock(out, wait=wait, say=say)
    try:
        yield lock
    finally:
        lock.release()


# -------------------------------------------------------------------------------------------- clean

#: an embedding-cache entry (``io/model.py``: ``<role>-<blake2b-160 hex>.npy``) and its unfinished temporaries
_CACHE_ENTRY = re.compile(r"^(corpus|queries)-[0-9a-f]{40}\.npy(\.[A-Za-z0-9_]+\.tmp|\.tmp)?$")


def clean(root, *, dry_run: bool = False, say: Callable[[str], None] = print) -> int:
    """Remove what embeval-report left under ``root`` that no run uses; one line each, then the total.

    * staging and trash folders (``.NAME.partial-*``, ``.NAME.old-*``, holding only what a run writes) whose
      owner is gone; those of a live run,
      or of a run on another host, are left and said; those of an older embeval-report (no owner in the name,
      holding only what a run writes) are removed when no run holds the output's lock;
    * lock files embeval-report wrote (a record naming the run and the output) that no run holds;
    * embedding-cache entries (``embeddings/corpus-<key>.npy``, ``queries-<key>.npy``) and their temporaries.

    Nothing else is touched. Returns the bytes removed (or that would be, with ``dry_run``).
    """
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"clean: {root}: not a folder")
    verb = "would remove" if dry_run else "removed"
    total, count = 0, 0
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        for d in sorted(dirs):
            left = Leftover.parse(here / d)
            if left is None:
                continue
            dirs.remove(d)  # never descend into staging
            state = left.state()
            if state == "unknown" and _lock_free(here / left.name):
                state = "gone"
            if state != "gone":
                why = {"live": "its run is still going", "other-host": f"its run is on host {left.host}: not checked",
                       "unknown": "a run holds the lock of its output"}[state]
                say(f"left {here / d}: {left.describe()}, {why}")
                continue
            size = tree_size(here / d)
            if not dry_run:
                shutil.rmtree(here / d, ignore_errors=True)
            total, count = total + size, count + 1
            say(f"{verb} {here / d} ({_size(size)}): {left.describe()} that is gone")
        for f in sorted(files):
            path = here / f
            if f.startswith(".") and f.endswith(".lock") and len(f) > 6:
                out = here / f[1:-5]
                if path.is_symlink() or not _lock_free(out, remove=not dry_run, ours=True):
                    continue
                count += 1
                say(f"{verb} {path}: a lock no run holds")
            elif here.name == "embeddings" and _CACHE_ENTRY.match(f) and not path.is_symlink():
                size = path.stat().st_size
                if not dry_run:
                    path.unlink(missing_ok=True)
                total, count = total + size, count + 1
                say(f"{verb} {path} ({_size(size)}): embedding cache entry")
    say(f"{verb} {count} entr{'y' if count == 1 else 'ies'}, {_size(total)} in all" if count
        else f"nothing to clean under {root}")
    return total


def _lock_free(out: Path, *, remove: bool = False, ours: bool = False) -> bool:
    """Whether no run holds the lock of ``out`` (no lock file, or one nobody holds); ``remove`` that file then.
    With ``ours``, False also for a file that is not a lock embeval-report wrote (a record naming ``out``)."""
    import fcntl

    path = lock_path(out)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError:  # no flock here: the recorded pid decides
            record = _read_record(fd)
            if record and _running(record):
                return False
        if ours:
            record = _read_record(fd) or {}
            if not _is_lock_record(record) or Path(str(record.get("out", ""))).name != out.name:
                return False
        if remove and _same_file(fd, path):
            path.unlink()
        return True
    finally:
        os.close(fd)
