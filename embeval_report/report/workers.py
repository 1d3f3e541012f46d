"""The worker processes of ``--jobs N``: each runs one task at a time (a chapter, in a kernel of its own); a worker
that dies (killed, out of memory) costs only its task, another takes its place, and every worker ends with the
process that started it (:func:`~.lifeline.arm`), even when that one is killed.

``concurrent.futures.ProcessPoolExecutor`` could not do this: one dead worker breaks the whole pool (every running
chapter failed, then a traceback ended the run without a report), and it cannot say which task a dead worker ran.
"""
from __future__ import annotations

import os
from multiprocessing.connection import wait as wait_for


class Worker:
    """One worker process (``spawn``: it imports only what its tasks need) and the pipe it takes tasks on."""

    def __init__(self, context, work):
        self.conn, theirs = context.Pipe()
        self.proc = context.Process(target=_serve, args=(theirs, work, os.getpid()), name="embeval-worker",
                                    daemon=True)
        self.proc.start()
        theirs.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """Kill the worker and what it started (its kernel): stopped first, so that it starts nothing more."""
        if self.proc.is_alive():
            suspend(self.pid)
            kill_processes(children(self.pid))
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()


class Workers:
    """Up to ``jobs`` workers running ``work(*args, **kwargs)`` (a module-level function: spawned workers import it).

    :meth:`start` hands a task to an idle worker (started when there is none); :meth:`finished` waits until one
    or more running tasks end and yields ``(worker, kind, value)``: ``("done", result)``, ``("raised",
    exception)`` or ``("died", exit code)`` (negative: the signal that killed it; the worker is replaced on
    the next :meth:`start`). Use as a context manager: the workers end with the block."""

    def __init__(self, work, *, context=None):
        import multiprocessing as mp

        self.work, self.context = work, context or mp.get_context("spawn")
        self.idle: list[Worker] = []
        self.busy: set[Worker] = set()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind, *_) -> None:
        for worker in [*self.busy, *self.idle]:
            if kind is None and worker in self.idle:
                worker.conn.send(None)  # done: it ends by itself
                worker.proc.join(5)
            worker.stop()
        self.busy.clear()
        self.idle.clear()

    def start(self, *args, **kwargs) -> Worker:
        while self.idle:  # a worker that died between two tasks is replaced
            worker = self.idle.pop()
            try:
                if worker.proc.is_alive():
                    worker.conn.send((args, kwargs))
                    break
            except OSError:
                pass
            worker.stop()
        else:
            worker = Worker(self.context, self.work)
            worker.conn.send((args, kwargs))
        self.busy.add(worker)
        return worker

    def finished(self, timeout: float | None = None):
        """The tasks that end next (at least one, unless ``timeout`` seconds pass first)."""
        ready = set(wait_for([*(w.conn for w in self.busy), *(w.proc.sentinel for w in self.busy)], timeout))
        for worker in list(self.busy):
            if worker.conn not in ready and worker.proc.sentinel not in ready:
                continue
            self.busy.discard(worker)
            try:
                kind, value = worker.conn.recv()  # its result, even when it ended right after sending it
            except (EOFError, OSError):
                worker.proc.join(5)
                worker.stop()
                yield worker, "died", worker.proc.exitcode
                continue
            self.idle.append(worker)
            yield worker, kind, value


def _serve(conn, work, parent: int) -> None:
    """A worker: tasks from ``conn`` until None (or the pipe's end), each result (or exception) sent back."""
    from .lifeline import arm

    arm(parent)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            answer = ("done", work(*task[0], **task[1]))
        except BaseException as exc:  # sent to the runner, which decides (a full disk stops the run)
            answer = ("raised", exc)
        conn.send(answer)


def suspend(pid: int) -> None:
    """Stop process ``pid`` (SIGSTOP: it runs, and forks, no further until killed); nothing if it is gone."""
    try:
        import psutil  # installed with ipykernel
        psutil.Process(pid).suspend()
    except Exception:  # pragma: no cover - psutil missing or the process gone
        pass


def children(pid: int | None = None) -> list:
    """The processes started (directly or not) by ``pid`` (default: this process), as psutil handles."""
    try:
        import psutil  # installed with ipykernel
        return psutil.Process(pid).children(recursive=True)
    except Exception:  # pragma: no cover - psutil missing or the process gone
        return []


def kill_processes(procs: list) -> None:
    """Kill ``procs`` and wait (briefly) until they are gone."""
    if not procs:
        return
    import psutil

    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)
