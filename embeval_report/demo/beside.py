"""One demo writer in a forked process beside the others (the demo data's second core).

Writing the demo data is one process's work of about 10 CPU-s, half of it the monitoring history (scoring eight
batches); the machine's second core is idle meanwhile (the chapter kernels' template waits for its first
request). :class:`Beside` forks this process before it has computed anything, runs one writer there (it draws
from its own seeded generators and reads no file the others write, so it writes the same bytes) and hands its
manifest entries back through a pipe. Where forking is not safe (no ``os.fork``, another Python thread: one
holding a lock would leave it held in the child) or ``EMBEVAL_FORK_KERNELS=0`` turns forks off, the writer runs
in this process when its result is asked for.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import traceback


class Beside:
    """``writer(*args)`` in a forked child, started now; :meth:`result` waits for it (and raises what it raised,
    as a RuntimeError naming the writer, with its traceback's last line)."""

    def __init__(self, name: str, writer, *args):
        self.name, self.writer, self.args = name, writer, args
        self.pid, self._read = None, None
        if not _may_fork():
            return
        from ..report.kernel_forks import flush_standard_streams

        read, write = os.pipe()
        flush_standard_streams()
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            return
        if pid == 0:  # pragma: no cover - the child (its work is checked by the files it writes)
            status = 1
            try:
                os.close(read)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                try:
                    reply = (True, writer(*args))
                except BaseException as exc:
                    reply = (False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}")
                with os.fdopen(write, "wb") as out:
                    pickle.dump(reply, out)
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        self.pid, self._read = pid, read

    def result(self):
        """The writer's return value (computed here when no child runs it)."""
        if self.pid is None:
            return self.writer(*self.args)
        try:
            with os.fdopen(self._read, "rb") as inp:
                self._read = None
                data = inp.read()
            _, status = os.waitpid(self.pid, 0)
            self.pid = None
        except BaseException:
            self.stop()
            raise
        if not data:
            raise RuntimeError(f"demo data ({self.name}): its process ended without an answer (status {status})")
        ok, value = pickle.loads(data)
        if not ok:
            raise RuntimeError(f"demo data ({self.name}): {value}")
        return value

    def stop(self) -> None:
        """End the child (the run was interrupted or failed before it was asked for)."""
        if self._read is not None:
            os.close(self._read)
            self._read = None
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = None


def _may_fork() -> bool:
    """Whether a child may be forked here: ``os.fork``, forks not switched off, no other Python thread."""
    from ..report.kernel_forks import SWITCH

    return (hasattr(os, "fork") and sys.platform != "win32" and os.environ.get(SWITCH, "1") != "0"
            and threading.active_count() == 1)
