"""Chapter kernels forked from one process that has already imported the chapters' libraries.

Starting a chapter kernel the usual way costs about 3 s of CPU on the 2-core machine (a new Python, then torch,
pandas, SciPy, matplotlib, seaborn and the package imported again), and a chapter's own imports (scikit-learn,
statsmodels) 1 to 2 s more: with 21 chapters, a third of the demo's CPU time. :class:`KernelForks` starts one
template process (``python -m embeval_report.report.kernel_forks``) that imports those libraries once and then
computes nothing; each chapter kernel is a ``fork()`` of it that starts ipykernel with the connection file
jupyter_client wrote (:class:`ForkProvisioner`). Every chapter still gets a fresh process of its own: the fork
holds only imported modules, no state of another chapter, and the same libraries compute the same numbers.

One template serves every run of a process (:meth:`KernelForks.shared`): the Python API evaluating several models
in one notebook, and the test suite's hundred runs, pay its start (about 3 s of CPU) once. It ends after
:data:`IDLE_SECONDS` without a request, when its process ends (even by SIGKILL: it checks its parent every second),
or when a run is interrupted; the next run starts another. Its kernels end with it (:mod:`.lifeline`), and it
tells the runner how a kernel ended (killed by a signal: the cause of a failed chapter, :mod:`.supervision`).

The template never runs a parallel region (no OpenMP or BLAS thread pool is used before the fork; the pools that
libraries create at import are fork-safe through their ``pthread_atfork`` handlers, as with ``multiprocessing``'s
fork start). Where ``os.fork`` is missing, the template cannot start, or ``EMBEVAL_FORK_KERNELS=0`` is set, kernels
start the usual way.

**The command line's template is a fork of the command itself** (``KernelForks.shared(here=True)``, Linux): the
``embeval-report`` process imports every chapter module anyway (their declarations), so once it has, and before it
has computed anything, it forks the template instead of starting a new Python that imports the same modules again
(about 5 s of CPU per report). It does so only while nothing could make the fork unsafe or the kernels differ
(:func:`_may_fork_here`: no other Python thread, matplotlib's backend not yet chosen); the child then looks like a
template started the usual way (:func:`_become_template`): default signal handlers, every inherited file other than
its pipes and the standard streams replaced by ``/dev/null`` (an output folder's lock is never held by a template),
the kernels' matplotlib backend. Anything else, and any later template of the process, starts the usual way.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading

from jupyter_client.provisioning import LocalProvisioner

#: the environment switch that turns forked kernels off ("0")
SWITCH = "EMBEVAL_FORK_KERNELS"
#: the kernel command jupyter_client's python3 kernel spec runs, after the interpreter
LAUNCHER = ["-m", "ipykernel_launcher"]
#: what the template imports before it forks (the chapters' common imports, then every chapter module). The
#: progress bars' ``tqdm.auto`` comes before IPython: imported after it, it looks for notebook widgets and warns
#: on the run's stderr that they are missing (and falls back to the same console bars). ``ipykernel.ipkernel`` brings
#: the kernel class; ``ipykernel.debugger`` its debugger (debugpy and pydevd: ipykernel 7 imports it when a kernel
#: starts, half of each kernel's start, about 0.15 s of CPU; importing it starts no thread)
PRELOAD = ("embeval_report.progress", "embeval_report.chapters.setup", "matplotlib.pyplot", "seaborn",
           "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.debugger")
#: seconds the runner waits for the template to answer a fork (its imports included)
START_TIMEOUT = 120
#: seconds a template waits for its next request before it ends (an idle process holds no memory of a run)
IDLE_SECONDS = 120


def enabled() -> bool:
    """Whether chapter kernels may be forked on this platform (and the user did not turn it off)."""
    return hasattr(os, "fork") and sys.platform != "win32" and os.environ.get(SWITCH, "1") != "0"


class _Forked:
    """The runner's handle on a forked kernel (not its child: its parent is the template, which reaps it and
    tells its exit status when asked).

    The kernel leads a session of its own (``setsid`` before the template answers), so its process group id
    is its pid, as for a kernel jupyter_client starts itself."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int, forks: KernelForks | None = None):
        self.pid, self.forks = pid, forks
        self.parent = forks.proc.pid if forks is not None and forks.proc is not None else None  # the template
        self.returncode: int | None = None
        self.exit: int | None = None  # as ``returncode`` once known (negative: the signal that killed it)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)
            except (ProcessLookupError, PermissionError):  # gone (or the pid reused by another user's process)
                self.exit = self.forks.exit_status(self.pid) if self.forks is not None else None
                self.returncode = 0 if self.exit is None else self.exit
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import time

        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class KernelForks:
    """The template process of one run; :meth:`provisioner` gives a kernel manager a provisioner that forks it.

    Use as a context manager (the template ends with the block; kernels it forked end with their own
    managers, or with the template: :func:`~.lifeline.arm`). The template ends with the process that started it."""

    def __init__(self, here: bool = False):
        self.proc: subprocess.Popen | _Template | None = None
        self._lock = threading.Lock()
        self._replies = None
        if not enabled():
            return
        read, write = os.pipe()
        if here and _may_fork_here():
            self.proc = _fork_template(write)
            if self.proc is not None:
                os.close(write)
                self._replies = os.fdopen(read, "r")
                return
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", __name__, str(write), str(IDLE_SECONDS), str(os.getpid())],
                                         stdin=subprocess.PIPE, pass_fds=(write,), text=True)
        except OSError:
            os.close(read)
            self.proc = None
            return
        finally:
            os.close(write)
        self._replies = os.fdopen(read, "r")

    @classmethod
    def shared(cls, here: bool = False) -> KernelForks:
        """This process's template, started on first use and again when it has ended (idle, or killed with an
        interrupted run); a template that cannot serve (switched off, no ``fork``) where forking is off. ``here``:
        the first one may be a fork of this process (the command line, once it has imported the chapters and
        computed nothing; see the module docstring)."""
        with _SHARED_LOCK:
            pid = os.getpid()
            forks = _SHARED.get(pid)
            if forks is None or not forks.alive or not enabled():
                if forks is not None:
                    forks.close()
                _SHARED[pid] = forks = cls(here=here and forks is None)
            return forks

    def __enter__(self) -> KernelForks:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def provisioner(self, km) -> ForkProvisioner | None:
        """A provisioner for kernel manager ``km`` (before its ``start_kernel``) that forks this template, or None
        (template not running: the manager starts its kernel the usual way)."""
        if not self.alive:
            return None
        import uuid

        km.kernel_id = km.kernel_id or str(uuid.uuid4())
        return ForkProvisioner(kernel_id=km.kernel_id, kernel_spec=km.kernel_spec, parent=km, forks=self)

    def fork(self, argv: list[str], env: dict, cwd: str) -> _Forked | None:
        """Fork a kernel running ``ipykernel_launcher argv`` in ``cwd`` with environment ``env``; None when the
        template cannot (it ended: the caller starts the kernel the usual way)."""
        with self._lock:
            if not self.alive:
                return None
            try:
                self.proc.stdin.write(json.dumps({"argv": argv, "env": env, "cwd": str(cwd)}) + "\n")
                self.proc.stdin.flush()
                line = _read_line(self._replies, START_TIMEOUT)
            except (OSError, TimeoutError):
                line = ""
            if not line:
                self.close()
                return None
            return _Forked(int(json.loads(line)["pid"]), self)

    def exit_status(self, pid: int) -> int | None:
        """How kernel ``pid``, which has ended, ended: as :attr:`subprocess.Popen.returncode` (negative: the signal
        that killed it), or None (unknown: the template has ended too, or does not answer)."""
        with self._lock:
            if not self.alive:
                return None
            try:
                self.proc.stdin.write(json.dumps({"wait": pid}) + "\n")
                self.proc.stdin.flush()
                status = json.loads(_read_line(self._replies, 10) or "{}").get("status")
            except (OSError, TimeoutError, ValueError):
                return None
        return None if status is None else os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        """End the template (at once: it computes nothing; a kernel it forked that still runs ends with it, by its
        parent-death signal, or within a second where there is none: ipykernel watches its parent)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            proc.stdin.close()
        if self._replies is not None:
            self._replies.close()
            self._replies = None


class _Template:
    """The handle on a template forked from this process (as much of :class:`subprocess.Popen` as is used)."""

    def __init__(self, pid: int, stdin):
        self.pid, self.stdin, self.returncode = pid, stdin, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            except ChildProcessError:
                self.returncode = 0
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def _may_fork_here() -> bool:
    """Whether this process may fork the template itself: Linux (``/proc``: its open files), no other Python
    thread (one holding a lock would leave it held in the child), and matplotlib's backend not yet chosen."""
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self/fd") or threading.active_count() > 1:
        return False
    pyplot = sys.modules.get("matplotlib.pyplot")
    return pyplot is None or getattr(pyplot, "_backend_mod", None) is None


def flush_standard_streams() -> None:
    """Flush stdout and stderr before a fork, so that nothing they buffer is written twice."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


def _fork_template(reply: int) -> _Template | None:
    """Fork the template from this process, answering on ``reply``; None when it cannot fork."""
    requests, feed = os.pipe()
    flush_standard_streams()
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        os.close(requests)
        os.close(feed)
        return None
    if pid == 0:
        try:
            os.close(feed)
            _become_template(requests, reply)
            serve(reply, IDLE_SECONDS, parent)
        finally:
            os._exit(0)
    os.close(requests)
    return _Template(pid, os.fdopen(feed, "w"))


def _become_template(requests: int, reply: int) -> None:
    """In a template forked from the command line: what a template started the usual way has. Its requests on
    stdin; every other inherited file (an output folder's lock, a log) replaced by ``/dev/null`` (the descriptors
    stay taken, so an object that closes one later closes that); Python's default signal handlers; the script's
    folder off the module path (as ``-m`` leaves the working folder, which :func:`serve` removes); the kernels'
    matplotlib backend, which a template started the usual way reads from ``MPLBACKEND`` at import."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.dup2(requests, 0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in map(int, os.listdir("/proc/self/fd")):
        if fd > 2 and fd not in (reply, null):
            try:
                os.dup2(null, fd)
            except OSError:  # the listing's own descriptor, already closed
                pass
    script = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else None
    if sys.path and script and sys.path[0] == script:
        del sys.path[0]
    backend = os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].rcParams["backend"] = backend


#: the template of each process (:meth:`KernelForks.shared`), by process id (a forked process starts its own)
_SHARED: dict[int, KernelForks] = {}
_SHARED_LOCK = threading.Lock()


@atexit.register
def _close_shared() -> None:
    forks = _SHARED.pop(os.getpid(), None)
    if forks is not None:
        forks.close()


def _read_line(stream, timeout: float) -> str:
    """One line from ``stream`` (a pipe), or TimeoutError after ``timeout`` seconds (a selector, not
    ``select.select``, which refuses descriptors above 1023 in a process holding many files)."""
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise TimeoutError
    return stream.readline()


class ForkProvisioner(LocalProvisioner):
    """jupyter_client's local provisioner, except that the kernel process is forked from a :class:`KernelForks`
    template instead of started from scratch (any other kernel command starts the usual way)."""

    def __init__(self, *args, forks: KernelForks, **kwargs):
        super().__init__(*args, **kwargs)
        self.forks = forks

    async def launch_kernel(self, cmd: list[str], **kwargs):
        if cmd[1:3] != LAUNCHER:
            return await super().launch_kernel(cmd, **kwargs)
        cwd = kwargs.get("cwd") or os.getcwd()
        process = self.forks.fork(cmd[3:], dict(kwargs.get("env") or os.environ), cwd)
        if process is None:
            return await super().launch_kernel(cmd, **kwargs)
        self.process = process
        self.pid = self.pgid = process.pid
        self.cwd = cwd
        return self.connection_info


# --------------------------------------------------------------------------- the template process

def serve(reply_fd: int, idle: float = IDLE_SECONDS, parent: int | None = None) -> None:
    """The template: import :data:`PRELOAD` and every chapter module, then fork one kernel per request line on
    stdin (``{"argv", "env", "cwd"}``), answering ``{"pid"}`` on ``reply_fd``, or answer how a kernel it forked
    ended (``{"wait": pid}``: ``{"status"}``, the wait status, null when unknown). Ends at the end of stdin, when
    ``parent`` (the runner) is no longer its parent, or after ``idle`` seconds without a request while none of
    its kernels runs. A kernel ends with its template (:func:`~.lifeline.arm`): a chapter that computes longer
    than ``idle`` keeps it."""
    parent = os.getppid() if parent is None else parent
    if os.getppid() != parent:  # the runner ended while this process started
        return
    if sys.path and sys.path[0] in ("", os.getcwd()):  # as ipykernel_launcher: the caller's folder is not a path
        del sys.path[0]
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")  # as ipykernel sets it
    # debugpy warns on the run's stderr, at import, that the interpreter's frozen modules may hide breakpoints
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    import importlib
    import pkgutil

    for name in PRELOAD:
        importlib.import_module(name)
    chapters = importlib.import_module("embeval_report.chapters")
    for info in pkgutil.iter_modules(chapters.__path__):
        try:
            importlib.import_module(f"{chapters.__name__}.{info.name}")
        except Exception:  # a chapter whose optional library is missing imports (and fails) in its own kernel
            pass
    from .lifeline import arm

    ended: dict[int, int] = {}  # the wait status of each kernel reaped and not yet asked about

    def reap(*_) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            ended[pid] = status

    signal.signal(signal.SIGCHLD, reap)  # forked kernels are reaped as they end
    replies = os.fdopen(reply_fd, "w")
    kernels: set[int] = set()
    template = os.getpid()
    for request in _requests(idle, lambda: _running(kernels), parent):
        if "wait" in request:
            reap()
            replies.write(json.dumps({"status": ended.pop(int(request["wait"]), None)}) + "\n")
            replies.flush()
            continue
        started, ready = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(started)
            arm(template, watch=False)  # the kernel ends with the template (which ends with the runner)
            _kernel(request, ready, reply_fd)
        os.close(ready)
        os.read(started, 1)  # the kernel leads its own session now
        os.close(started)
        kernels.add(pid)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
    os._exit(0)  # at once, its kernels with it: a template holds nothing to clean up (an exit took seconds)


def _running(pids: set[int]) -> bool:
    """Whether any of ``pids`` (forked kernels, reaped as they end) still runs; drops those that ended."""
    for pid in list(pids):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            pids.discard(pid)
    return bool(pids)


def _requests(idle: float, busy, parent: int):
    """The request lines on stdin, parsed; ends at the end of stdin, when ``parent`` is no longer this process's
    parent (checked every second), or when none came for ``idle`` seconds and ``busy()`` is false (one request
    is in flight at a time: the runner waits for each answer)."""
    import selectors
    import time

    pending = b""
    with selectors.DefaultSelector() as selector:
        selector.register(0, selectors.EVENT_READ)
        while True:
            quiet = time.monotonic()
            while b"\n" not in pending:
                if not selector.select(min(idle, 1.0)):
                    if os.getppid() != parent:  # the runner is gone
                        return
                    if time.monotonic() - quiet < idle or busy():
                        continue
                    return
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    return
                pending += chunk
            line, pending = pending.split(b"\n", 1)
            yield json.loads(line)


def _kernel(request: dict, ready: int, reply_fd: int) -> None:
    """In the forked child: a session of its own, the request's folder and environment, then ipykernel."""
    code = 1
    try:
        os.setsid()
        os.write(ready, b"1")
        os.close(ready)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(reply_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = open(0, closefd=False)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ["JPY_PARENT_PID"] = str(os.getppid())
        # ipykernel read JPY_PARENT_PID when the template imported it: its check of the parent is asked for here
        argv = [*request["argv"], f"--IPKernelApp.parent_handle={os.getppid()}"]
        sys.argv = [sys.executable, *argv]
        from ipykernel import kernelapp

        kernelapp.launch_new_instance(argv=argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]), *(int(a) for a in sys.argv[3:4]))
