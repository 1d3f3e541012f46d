"""Processes that end with the process that started them: chapter kernels, their template, the workers of ``--jobs``.

When the runner alone is killed (the system's out-of-memory killer picks the largest process, often the runner
under ``--jobs``), nothing of its run may go on computing: a kernel or worker left behind holds its memory (one
idle kernel held 1.3 GB for minutes) and writes into a staging folder nobody will read. ipykernel's own parent
check reads ``JPY_PARENT_PID`` when it is imported, which a forked kernel did in its template, before the variable
was set, so it never watched anything. :func:`arm` does not depend on what was imported when:

* the parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``): the operating system kills this process
  the moment its parent ends; it is cleared in a forked child, so each child arms its own;
* then the parent is checked (it may have ended before the signal was armed);
* and, with ``watch``, a thread that checks every :data:`POLL_SECONDS` that the parent is still this process's
  parent (any POSIX system; on Linux a second line of defence).
"""
from __future__ import annotations

import os
import signal
import sys
import threading

#: seconds between two checks of the watchdog thread
POLL_SECONDS = 0.5
#: ``prctl`` option of the parent-death signal (linux/prctl.h)
PR_SET_PDEATHSIG = 1
#: the exit status of a process that ended because its parent had ended
ORPHANED = 70


def arm(parent: int, *, watch: bool = True) -> bool:
    """End this process when ``parent`` (the pid of the process that started it) ends. Returns whether the
    parent-death signal is armed (Linux); ends this process at once when ``parent`` is no longer its parent."""
    armed = parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the signal was armed (or this is not its child)
        os._exit(ORPHANED)
    if watch and os.name == "posix":
        threading.Thread(target=_watch, args=(parent,), name="embeval-lifeline", daemon=True).start()
    return armed


def parent_death_signal(signum: int) -> bool:
    """Have the operating system send ``signum`` to this process when its parent ends (Linux only: False
    elsewhere, or where the C library cannot be called)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - a C library without prctl
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0


def _watch(parent: int) -> None:
    import time

    while os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    os._exit(ORPHANED)
