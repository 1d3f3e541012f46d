"""Progress for long steps, on a terminal and off it.

* On a terminal: tqdm bars (the chapters of a run, and the kernel running inside the current one).
* Off a terminal (CI, nohup, a log file): one line per chapter start and end with the elapsed
  time and, for long kernels, a progress line at most every :data:`LINE_INTERVAL` seconds.
* Inside a chapter kernel started by the runner, :func:`progress` writes its state to the file
  named by ``EMBEVAL_PROGRESS_FILE``; the runner's :class:`RunProgress` follows that file and
  shows it in either form (the kernel's own output belongs to the notebook).

``EMBEVAL_PROGRESS=0`` silences everything (``evaluate(..., progress=False)`` sets it for one call); ``=1``
forces bars on a non-terminal.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

# the console bars, also inside Jupyter: tqdm.auto would pick notebook widgets there and, without ipywidgets, warn
# "IProgress not found" in every cell that runs a report (and fall back to these same bars)
from tqdm.std import tqdm

from .context import current

#: seconds between two progress lines when output is not a terminal
LINE_INTERVAL = 15.0
#: seconds between two writes of the progress file from a kernel
FILE_INTERVAL = 1.0
PROGRESS_FILE = "EMBEVAL_PROGRESS_FILE"


def _flag() -> str | None:
    return os.environ.get("EMBEVAL_PROGRESS")


def quiet() -> bool:
    return _flag() in ("0", "false", "no")


def interactive() -> bool:
    """Whether bars are drawn (stderr is a terminal, or ``EMBEVAL_PROGRESS=1``)."""
    flag = _flag()
    if flag is not None:
        return flag not in ("0", "false", "no")
    return sys.stderr.isatty()


def _stamp(t0: float) -> str:
    return f"[{time.time() - t0:7.1f}s]"


class _Reporter:
    """Iterates ``iterable`` and reports its position to a file or as throttled lines."""

    def __init__(self, iterable, desc: str, total: int | None, sink):
        self.iterable, self.desc, self.total, self.sink = iterable, desc, total, sink

    def __iter__(self):
        t0 = last = time.time()
        n = 0
        for item in self.iterable:
            yield item
            n += 1
            now = time.time()
            if now - last >= self.sink.interval:
                self.sink.write(self.desc, n, self.total, now - t0)
                last = now
        self.sink.write(self.desc, n, self.total, time.time() - t0, done=True)

    def __len__(self):
        return len(self.iterable)


class _FileSink:
    interval = FILE_INTERVAL

    def __init__(self, path: str):
        self.path = path

    def write(self, desc, n, total, elapsed, done=False):
        line = f"{current().chapter or ''}\t{desc}\t{n}\t{total or ''}\t{elapsed:.1f}\t{int(done)}\n"
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
        except OSError:  # the runner went away: progress is best effort
            pass


class _LineSink:
    interval = LINE_INTERVAL

    def write(self, desc, n, total, elapsed, done=False):
        if not done:
            print(f"  {desc}: {_position(n, total)} after {elapsed:.0f} s", file=sys.stderr, flush=True)


def _position(n, total) -> str:
    return f"{n}/{total} ({100 * n / total:.0f} %)" if total else f"{n}"


def progress(iterable, *, desc: str, total: int | None = None, **kw):
    """Wrap ``iterable`` so that its progress shows (see the module docstring)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    if quiet():
        return iterable
    path = os.environ.get(PROGRESS_FILE)
    if path:
        return _Reporter(iterable, desc, total, _FileSink(path))
    if interactive():
        return tqdm(iterable, desc=desc, total=total, leave=False, **kw)
    return _Reporter(iterable, desc, total, _LineSink())


class RunProgress:
    """What the runner shows while chapters execute: a bar, or start/end lines, plus kernel progress.

    Use as a context manager; call :meth:`start` and :meth:`end` around each chapter. The
    progress file the kernels write is followed by a background thread.
    """

    def __init__(self, total: int, progress_file: Path):
        self.total, self.file = total, Path(progress_file)
        self.t0 = time.time()
        self.bar = None
        self.running: list[str] = []   # chapters executing now, in the order they started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._offset = 0
        self._last_line = 0.0

    def __enter__(self):
        self.file.write_text("")
        os.environ[PROGRESS_FILE] = str(self.file)
        if not quiet() and interactive():
            self.bar = tqdm(total=self.total, desc="chapters", unit="chapter", leave=False)
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        os.environ.pop(PROGRESS_FILE, None)
        if self.bar is not None:
            self.bar.close()
        return False

    def say(self, text: str) -> None:
        """One line (off a terminal) or a bar message (on one)."""
        if quiet():
            return
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(f"{_stamp(self.t0)} {text}", file=sys.stderr, flush=True)

    def start(self, name: str) -> None:
        with self._lock:
            self.running.append(name)
            self._last_line = time.time()
            if self.bar is not None:
                self.bar.set_postfix_str(", ".join(self.running))
            else:
                self.say(f"{name}: started")

    def end(self, name: str, status: str, seconds: float, reason: str = "") -> None:
        with self._lock:
            if name in self.running:
                self.running.remove(name)
            if self.bar is not None:
                self.bar.update(1)
                if status != "ok":
                    self.say(f"  {status:8s} {name}" + (f" ({reason})" if reason else ""))
            else:
                self.say(f"{name}: {status} in {seconds:.1f} s" + (f" ({reason})" if reason else ""))

    def _follow(self) -> None:
        while not self._stop.wait(0.5):
            try:
                with open(self.file, encoding="utf-8") as f:
                    f.seek(self._offset)
                    lines = f.readlines()
                    self._offset = f.tell()
            except OSError:
                continue
            if lines and self.running:
                self._kernel(lines[-1].rstrip("\n").split("\t"))

    def _kernel(self, parts: list[str]) -> None:
        if len(parts) < 6 or parts[5] == "1":
            return
        chapter, desc, n, total = parts[0], parts[1], int(parts[2]), int(parts[3]) if parts[3] else None
        with self._lock:
            if self.bar is not None:
                others = [c for c in self.running if c != chapter]
                self.bar.set_postfix_str(", ".join([f"{chapter}: {desc} {_position(n, total)}", *others]))
            elif time.time() - self._last_line >= LINE_INTERVAL:
                self._last_line = time.time()
                self.say(f"{chapter}: {desc} {_position(n, total)}")
