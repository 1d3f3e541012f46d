"""How a chapter's process ended, in one line: out of memory, killed by a signal, or an exit status.

A chapter's kernel (or, under ``--jobs``, its worker) that dies fails its chapter with the cause. The system's
out-of-memory killer sends SIGKILL and counts the kill: in the memory cgroup of the process (cgroup v2
``memory.events``, v1 ``memory.oom_control``: ``oom_kill``) and machine-wide (``/proc/vmstat``). A process that
ended by SIGKILL while one of those counters went up was killed for memory; the message says so and what to
change. :class:`Watch` reads those counters when a process starts and its peak resident memory while it runs
(``VmHWM``, Linux) and the most of its own memory seen (``RssAnon``, read every half second: a memory-mapped set's
pages are page cache, counted in the peak but not here), which the run records per chapter.
"""
from __future__ import annotations

import os
import signal
import threading

from ..context import describe_bytes

#: seconds between two readings of a watched process's peak resident memory
POLL_SECONDS = 0.5
#: the advice of an out-of-memory failure
MEMORY_ADVICE = "give a smaller --memory-budget, or a --sample-size"


def peak_rss(pid: int) -> int | None:
    """The peak resident memory of process ``pid`` so far, in bytes (``VmHWM``), or None (gone; not Linux)."""
    return _status(pid).get("VmHWM")


def anonymous_rss(pid: int) -> int | None:
    """The resident memory process ``pid`` holds itself now (``RssAnon``: not the pages of files it maps, such as
    a memory-mapped set, which are page cache), in bytes, or None."""
    return _status(pid).get("RssAnon")


def _status(pid: int) -> dict[str, int]:
    """The sizes of ``/proc/<pid>/status``, in bytes (empty: gone; not Linux)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                key, _, rest = line.partition(b":")
                if rest.rstrip().endswith(b"kB"):
                    out[key.decode()] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def oom_counters(pid: int | None = None) -> list[str]:
    """The files counting kills by the out-of-memory killer that apply to process ``pid`` (default: this one):
    its memory cgroup's (v2 ``memory.events``, v1 ``memory.oom_control``) and the machine's ``/proc/vmstat``,
    those that can be read."""
    files = []
    try:
        with open(f"/proc/{pid or os.getpid()}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        path = path.rstrip("/")
        if controllers == "":  # cgroup v2 (mounted alone, or beside v1 as "unified")
            files += [f"{root}{path}/memory.events" for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")]
        elif "memory" in controllers.split(","):
            files.append(f"/sys/fs/cgroup/memory{path}/memory.oom_control")
    return [f for f in [*files, "/proc/vmstat"] if oom_kills(f) is not None]


def oom_kills(path: str) -> int | None:
    """The ``oom_kill`` count of a counter file (:func:`oom_counters`), or None where it cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def how_it_ended(what: str, returncode: int | None, *, out_of_memory: bool = False, peak: int | None = None,
                 budget: int | None = None) -> str:
    """One line saying how ``what`` ("the chapter's kernel") ended: ``returncode`` as :mod:`subprocess` gives it
    (negative: the signal that killed it; None: unknown)."""
    if out_of_memory:
        at = f" at {describe_bytes(peak)} resident" if peak else ""
        of = f" (memory budget {describe_bytes(budget)})" if budget else ""
        return f"out of memory: the system killed {what}{at}{of}; {MEMORY_ADVICE}"
    if returncode is None:
        return f"{what} died"
    if returncode < 0:
        return f"{what} was killed by {signal_name(-returncode)}"
    return f"{what} ended with exit status {returncode}"


class Watch:
    """A process of a chapter (its kernel, or its worker), watched from here: the out-of-memory counters when it
    started and its peak resident memory, read every :data:`POLL_SECONDS` in a thread until :meth:`stop`."""

    def __init__(self, pid: int, what: str = "the chapter's kernel"):
        self.pid, self.what = pid, what
        self.kills = {f: oom_kills(f) for f in oom_counters(pid)}
        self.peak: int | None = peak_rss(pid)
        self.anonymous: int | None = anonymous_rss(pid)  # the most of it seen, read every POLL_SECONDS
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._poll, name=f"embeval-watch-{pid}", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stopped.wait(POLL_SECONDS):
            self._read()

    def _read(self) -> None:
        sizes = _status(self.pid)
        if "VmHWM" in sizes:
            self.peak = max(sizes["VmHWM"], self.peak or 0)
        if "RssAnon" in sizes:
            self.anonymous = max(sizes["RssAnon"], self.anonymous or 0)

    def stop(self) -> int | None:
        """Stop watching (a last reading first); the peak resident memory seen, in bytes (None: unknown)."""
        if not self._stopped.is_set():
            self._read()
            self._stopped.set()
        return self.peak

    def out_of_memory(self, returncode: int | None) -> bool:
        """Whether the process, ended with ``returncode``, was killed by the out-of-memory killer: SIGKILL (or an
        unknown end) while a kill was counted in its memory cgroup or on the machine since it started."""
        if returncode is not None and returncode != -signal.SIGKILL:
            return False
        return any((oom_kills(f) or 0) > before for f, before in self.kills.items())

    def cause(self, returncode: int | None, budget: int | None = None) -> str:
        """One line: how the watched process ended (:func:`how_it_ended`)."""
        self.stop()
        return how_it_ended(self.what, returncode, out_of_memory=self.out_of_memory(returncode), peak=self.peak,
                            budget=budget)
