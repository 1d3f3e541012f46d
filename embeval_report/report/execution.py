"""Executing chapter notebooks: each in a kernel of its own, one after another (the next kernel started while
the current chapter runs) or side by side in worker processes (:mod:`.workers`); a failing chapter is recorded,
never raised, and an interrupted run leaves no kernel behind.

Every execution is supervised: nbclient checks each second that the kernel lives (through an asynchronous client:
:data:`CLIENT_CLASS`) and holds ``--timeout`` per cell; a kernel that dies fails its chapter with how it ended
(out of memory, a signal: :mod:`.supervision`) and the run goes on; every kernel ends with the process that
started it (:mod:`.lifeline`)."""
from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import nbformat

from ..chapters.declaration import ChapterSpec
from ..progress import RunProgress
from ..safe_files import private_prefixes, scrub
from .kernel_forks import KernelForks, _Forked
from .outdir import raise_write_fault
from .render.common import strip_ansi
from .supervision import Watch
from .workers import Workers, children, kill_processes

#: exception names a chapter raises to be skipped rather than failed
SKIP_ERRORS = ("ChapterSkipped",)


@dataclass
class ChapterOutcome:
    chapter: ChapterSpec
    status: str          # ok | skipped | failed
    reason: str = ""
    seconds: float = 0.0
    peak_rss: int | None = None  # the peak resident memory of the chapter's kernel, in bytes (None: unknown)
    peak_anon: int | None = None  # the most of it the kernel held itself (not mapped files), read every 0.5 s


def error_text(exc: BaseException) -> str:
    ename = getattr(exc, "ename", None)
    text = f"{ename}: {getattr(exc, 'evalue', '')}" if ename else f"{type(exc).__name__}: {exc}"
    return strip_ansi(text).strip()


#: arguments of every chapter kernel: no input history (IPython's SQLite file, written by every kernel at start and
#: after each cell: a tenth of a second of each kernel's start, and a file all of a run's kernels contend for)
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL", "--HistoryManager.enabled=False"]
#: what a warm kernel imports before its chapter is handed to it (the chapters' common imports)
WARM_IMPORTS = "import embeval_report.chapters.setup, matplotlib.pyplot, seaborn"
#: what a kernel runs first: it ends with the process that started it (:func:`~.lifeline.arm`), whatever it imported
LIFELINE = "__import__('embeval_report.report.lifeline', fromlist=['arm']).arm({parent})"
#: the client nbclient talks to a chapter's kernel through. nbclient waits for a cell's output and checks each
#: second that the kernel lives side by side in one event loop; a kernel manager's default client blocks that loop
#: in its wait for output, which has no timeout, so a dead kernel and ``--timeout`` went unnoticed for ever
CLIENT_CLASS = "jupyter_client.asynchronous.AsyncKernelClient"
#: the longest Unix socket path (sun_path holds 108 bytes on Linux, 104 on macOS), with room for the "-N" suffix
SOCKET_PATH_MAX = 96


def kernel_sockets() -> dict:
    """The transport of a chapter kernel's channels: Unix sockets in a private folder of this process on POSIX
    (one base name per kernel), TCP elsewhere or where that folder's path is too long for a socket.

    Over TCP, jupyter_client picks free ports by binding and releasing them before the kernel binds them, and any
    other process can take one in between: a CI run with parallel test workers lost a chapter to "Address already
    in use" (kernel died before replying to kernel_info). A socket file in a folder only this process writes to
    cannot be taken."""
    import os
    import uuid

    if os.name != "posix":
        return {}
    base = os.path.join(_socket_folder(), uuid.uuid4().hex[:12])
    return {"transport": "ipc", "ip": base} if len(base) + 4 <= SOCKET_PATH_MAX else {}


_SOCKETS: dict[int, str] = {}


def _socket_folder() -> str:
    """This process's folder of kernel sockets (made on first use, removed at exit; a forked process makes its
    own)."""
    import os

    pid = os.getpid()
    if pid not in _SOCKETS:
        import atexit
        import shutil
        import tempfile

        _SOCKETS[pid] = folder = tempfile.mkdtemp(prefix="embeval-kernels-")
        atexit.register(lambda: os.getpid() == pid and shutil.rmtree(folder, True))
    return _SOCKETS[pid]


class WarmKernel:
    """A chapter kernel started (and its common imports run) while the previous chapter executes.

    Each chapter still gets a fresh kernel of its own; only the start-up overlaps the previous chapter's work.
    With ``forks`` (a :class:`~.kernel_forks.KernelForks` template) the kernel is a fork of a process that has
    imported the chapters' libraries already (about 4 s of CPU saved per chapter on a 2-core machine).
    """

    def __init__(self, cwd: Path, forks: KernelForks | None = None):
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3", client_class=CLIENT_CLASS, **kernel_sockets())
        if forks is not None:
            self.km.provisioner = forks.provisioner(self.km)
        self.km.start_kernel(cwd=str(cwd), extra_arguments=KERNEL_ARGUMENTS)
        forked = isinstance(self.process, _Forked)
        parent = self.process.parent if forked else os.getpid()
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        lifeline = f"{LIFELINE.format(parent=parent)}\n" if parent else ""
        self.kc.execute(f"{lifeline}{WARM_IMPORTS}", silent=True, store_history=False)

    @property
    def process(self):
        """The kernel's process handle (``subprocess.Popen``, or the template's :class:`~.kernel_forks._Forked`)."""
        provisioner = self.km.provisioner
        return getattr(provisioner, "process", None) if provisioner is not None else None

    def watch(self) -> Watch | None:
        """Start watching the kernel's process (its peak memory, the out-of-memory counters): see :meth:`ended`."""
        process = self.process
        return Watch(process.pid) if process is not None else None

    def ended(self, watch: Watch | None, budget: int | None = None) -> str | None:
        """None while the kernel runs, else one line: how it ended (out of memory, a signal, an exit status)."""
        process = self.process
        if process is None or process.poll() is None:
            return None
        code = process.exit if isinstance(process, _Forked) else process.returncode
        return watch.cause(code, budget) if watch is not None else None

    def release(self) -> None:
        """Stop the client and the kernel (after its chapter, or unused)."""
        self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=True)


#: the papermill engine chapters execute with (:func:`_papermill_engine`)
ENGINE = "embeval"
#: nbclient's log: its errors ("Kernel died while waiting for execute reply") are the chapter's reason, said once
_QUIET = logging.getLogger("embeval_report.nbclient")
_QUIET.setLevel(100)


def _papermill_engine() -> str:
    """Register (once per process) and name papermill's nbclient engine, writing the executed notebook when its
    execution starts and when it ends, not also before and after every cell as papermill does (twice per cell:
    about 3 s of the demo's 21 chapters, while the chapter's kernel waits)."""
    from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

    if ENGINE in papermill_engines._engines:
        return ENGINE

    class Manager(NotebookExecutionManager):
        in_cell = False

        def save(self, **kwargs):
            if not self.in_cell:
                with naming(self.output_path):
                    super().save(**kwargs)

        def _quiet(self, method, *args, **kwargs):
            self.in_cell = True
            try:
                return method(*args, **kwargs)
            finally:
                self.in_cell = False

        def cell_start(self, *args, **kwargs):
            return self._quiet(super().cell_start, *args, **kwargs)

        def cell_complete(self, *args, **kwargs):
            return self._quiet(super().cell_complete, *args, **kwargs)

        def autosave_cell(self, *args, **kwargs):
            return self._quiet(super().autosave_cell, *args, **kwargs)

    from papermill.clientwrap import PapermillNotebookClient
    from papermill.utils import merge_kwargs, remove_args

    class Client(PapermillNotebookClient):
        def execute(self, **kwargs):
            try:
                result = super().execute(**kwargs)
            except KeyboardInterrupt:
                # Ctrl-C or SIGTERM: the process is ending, so its channels are left to it and the kernel to its
                # lifeline (stopping them here once waited 73 minutes in ZeroMQ's term, for a heartbeat thread still
                # polling, on a busy machine)
                raise
            except BaseException:
                self._stop_channels()
                raise
            self._stop_channels()
            return result

        def _stop_channels(self):  # nbclient stops its client's channels only on a kernel it started: a run leaked
            if getattr(self, "kc", None) is not None and not self.owns_km:  # ~12 fds (a heartbeat thread) per chapter
                self.kc.stop_channels()

    class Engine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, log_output=False, stdout_file=None, stderr_file=None,
                                     start_timeout=60, execution_timeout=None, **kwargs):  # papermill's, with Client
            kwargs = remove_args(["input_path"], **kwargs)
            final = merge_kwargs(remove_args(["timeout", "startup_timeout"], **kwargs),
                                 timeout=execution_timeout if execution_timeout else kwargs.get("timeout"),
                                 startup_timeout=start_timeout, kernel_name=kernel_name, log=_QUIET,
                                 log_output=log_output, stdout_file=stdout_file, stderr_file=stderr_file)
            return Client(nb_man, **final).execute()

        @classmethod
        def execute_notebook(cls, nb, kernel_name, output_path=None, progress_bar=True, log_output=False,
                             autosave_cell_every=30, **kwargs):  # papermill's Engine.execute_notebook, with Manager
            nb_man = Manager(nb, output_path=output_path, progress_bar=progress_bar, log_output=log_output,
                             autosave_cell_every=autosave_cell_every)
            nb_man.notebook_start()
            try:
                cls.execute_managed_notebook(nb_man, kernel_name, log_output=log_output, **kwargs)
            finally:
                nb_man.cleanup_pbar()
                nb_man.notebook_complete()
            return nb_man.nb

    papermill_engines.register(ENGINE, Engine)
    return ENGINE


def execute_chapter(ch: ChapterSpec, staging: Path, params: dict, *, timeout: int | None = None,
                    kernel: WarmKernel | None = None, forks: KernelForks | None = None) -> ChapterOutcome:
    """Execute one chapter in its own kernel (``kernel``, started ahead, or a new one, forked from ``forks`` when
    given, released here); failures are caught and recorded, never raised: a kernel that died fails the chapter
    with how it ended, a cell that ran past ``timeout`` seconds with that."""
    import papermill as pm

    target = staging / "chapters" / ch.filename
    t0 = time.time()
    status, reason = "ok", ""
    own, watch = kernel is None, None
    try:
        if own:
            kernel = WarmKernel(target.parent, forks)
        watch = kernel.watch()
        pm.execute_notebook(str(ch.notebook), str(target), parameters=params, kernel_name="python3",
                            engine_name=_papermill_engine(),
                            progress_bar=False, cwd=str(target.parent), execution_timeout=timeout,
                            extra_arguments=KERNEL_ARGUMENTS, km=kernel.km)
    except Exception as exc:  # a failing chapter must not lose the report
        raise_write_fault(exc)  # but a full disk stops the run
        if getattr(exc, "ename", None) in SKIP_ERRORS:
            status, reason = "skipped", strip_ansi(str(getattr(exc, "evalue", ""))).strip()
        else:
            budget = (params.get("settings") or {}).get("memory_budget")
            status = "failed"
            reason = ((kernel.ended(watch, _budget(budget)) if kernel is not None else None)
                      or _timed_out(exc, timeout) or error_text(exc))
    finally:
        peak, anon = (watch.stop(), watch.anonymous) if watch is not None else (None, None)
        if own and kernel is not None:
            kernel.release()
    reason = scrub(reason, private_prefixes(*report_places(staging)))
    publish_notebook(target if target.exists() else ch.notebook, target, staging,
                     dict(name=ch.name, title=ch.title, status=status, error=reason or None))
    return ChapterOutcome(ch, status, reason, time.time() - t0, peak, anon)


@contextmanager
def naming(path) -> Iterator[None]:
    """Within the block, an OSError that names no file (a write that failed after its open: the disk filled up)
    names ``path``, so that the run's one line says which file (docs/faults.md)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or path is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def _budget(budget) -> int:
    from ..context import DEFAULT_BUDGET, parse_bytes

    return DEFAULT_BUDGET if budget is None else parse_bytes(budget)


def _timed_out(exc: BaseException, timeout: int | None) -> str | None:
    """The one line of a cell that ran longer than ``--timeout`` (nbclient's message spans the cell's code)."""
    if type(exc).__name__ != "CellTimeoutError":
        return None
    return f"timed out: a cell ran longer than --timeout {timeout} s; the chapter's kernel was stopped"


def report_places(staging: Path) -> list[tuple[Path, str]]:
    """What paths of a run's staging folder and of the folder around it read as from the report folder."""
    places = [(staging, "")]
    if staging.parent != staging.parent.parent:
        places.append((staging.parent, ".."))
    return places


#: the output fields of a notebook that hold text (a traceback, a warning, a printed path)
_TEXT_FIELDS = ("text", "evalue", "traceback")


def publish_notebook(source: Path, target: Path, staging: Path, embeval: dict | None = None) -> None:
    """Write the executed notebook ``source`` to ``target`` as the report publishes it: papermill's record of
    where it ran (``input_path``, ``output_path``) relative to the report, and the paths of this machine in its
    outputs (tracebacks, warnings) replaced (:func:`~embeval_report.safe_files.scrub`: no staging folder, whose
    name holds the host name, no Python environment); ``embeval``: the chapter's metadata."""
    nb = nbformat.read(source, as_version=4)
    prefixes = private_prefixes(*report_places(staging))
    if embeval is not None:
        nb.metadata.setdefault("embeval", {}).update(embeval)
    pm = nb.metadata.get("papermill")
    if pm:
        pm["input_path"] = Path(str(pm.get("input_path") or target.name)).name
        pm["output_path"] = target.relative_to(staging).as_posix() if target.is_relative_to(staging) else target.name

    def clean(value):
        return [clean(v) for v in value] if isinstance(value, list) else scrub(value, prefixes)

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for key in _TEXT_FIELDS:
                if key in out:
                    out[key] = clean(out[key])
            data = out.get("data") or {}
            for kind in [k for k in data if k.startswith("text/")]:
                data[kind] = clean(data[kind])
    with naming(target):
        nbformat.write(nb, target)


def _sequential(chapters: list[ChapterSpec], staging: Path, params: dict, timeout: int | None, shown: RunProgress,
                before=None, done: dict | None = None, forks: KernelForks | None = None) -> dict[str, ChapterOutcome]:
    """Execute ``chapters`` one at a time, each in a fresh kernel started while the previous one runs (forked
    from ``forks``, or from this process's template); ``before(ch)`` is called just before ``ch`` executes;
    outcomes are added to ``done`` as they come."""
    done = {} if done is None else done
    kernels: list[WarmKernel] = []
    if forks is None and len(chapters) > 1:
        forks = KernelForks.shared()
    try:
        for i, ch in enumerate(chapters):
            if not kernels:
                kernels.append(WarmKernel(staging / "chapters", forks))
            if i + 1 < len(chapters):  # the next chapter's kernel starts while this one runs
                kernels.append(WarmKernel(staging / "chapters", forks))
            if before is not None:
                before(ch)
            shown.start(ch.name)
            kernel = kernels.pop(0)
            if kernel.process is None or kernel.process.poll() is not None:  # it died waiting (its template killed)
                kernel.release()
                kernel = WarmKernel(staging / "chapters", forks)  # a template that is gone: the usual start
            try:
                done[ch.name] = o = execute_chapter(ch, staging, params, timeout=timeout, kernel=kernel)
            finally:
                kernel.release()
            shown.end(ch.name, o.status, o.seconds, o.reason)
    except BaseException:  # interrupted: no kernel may outlive the staging folder it runs in
        kill_processes(children())
        raise
    finally:
        for kernel in kernels:
            kernel.release()
    return done


#: the least working memory a chapter running beside others gets under ``--jobs``: a smaller share runs fewer jobs
MIN_JOB_BUDGET = 256 * 2**20


def job_plan(budget: int, jobs: int, chapters: int) -> tuple[int, int, str | None]:
    """``(jobs, budget of each, note)`` for ``chapters`` content chapters under ``--jobs jobs`` and
    ``--memory-budget budget``: the chapters running side by side share the budget (each process gets
    ``budget // jobs``: the run's peak stays within it, which ``jobs`` full budgets did not); a share below
    :data:`MIN_JOB_BUDGET` runs fewer at a time, said in ``note``."""
    from ..context import describe_bytes

    wanted = max(1, min(jobs, chapters))
    if wanted == 1:
        return 1, budget, None
    fit = max(1, min(wanted, budget // MIN_JOB_BUDGET))
    note = None if fit == wanted else (
        f"--jobs {jobs}: {fit} chapter{'s' if fit > 1 else ''} at a time, so that each has at least "
        f"{describe_bytes(MIN_JOB_BUDGET)} of --memory-budget {describe_bytes(budget)}")
    return fit, budget // fit, note


def execute(ready: list[ChapterSpec], staging: Path, params: dict, timeout: int | None, shown: RunProgress,
            jobs: int, final: list[ChapterSpec] = (), before_final=None,
            forks: KernelForks | None = None, check=None, job_budget: int | None = None) -> dict[str, ChapterOutcome]:
    """Execute the content chapters, ``jobs`` at a time (each in its own worker process when ``jobs`` > 1, with
    ``job_budget`` bytes of working memory: :func:`job_plan`), then the ``final`` ones in order,
    ``before_final(ch, done)`` called before each of those, ``check()`` before every chapter. The kernels of
    chapters executed one at a time are forked from ``forks`` (:mod:`.kernel_forks`) when given."""
    done: dict[str, ChapterOutcome] = {}

    def before(ch):
        if check is not None:
            check()
        if ch.stage > 0 and before_final is not None:
            before_final(ch, done)

    if jobs <= 1 or len(ready) <= 1:
        return _sequential(list(ready) + list(final), staging, params, timeout, shown, before=before, done=done,
                           forks=forks)
    shared = dict(params, settings=dict(params["settings"], memory_budget=job_budget)) if job_budget else params
    done.update(_parallel(ready, staging, shared, timeout, shown, jobs, check))
    return _sequential(list(final), staging, params, timeout, shown, before=before, done=done, forks=forks)


def _parallel(ready: list[ChapterSpec], staging: Path, params: dict, timeout: int | None, shown: RunProgress,
              jobs: int, check=None) -> dict[str, ChapterOutcome]:
    """Execute the chapters ``jobs`` at a time, each in a worker process of its own (:mod:`.workers`): a worker
    that dies fails its chapter only, with how it ended."""
    done = {}
    waiting, running = list(ready), {}
    budget = _budget((params.get("settings") or {}).get("memory_budget"))
    with Workers(_execute_in_worker) as pool:
        while waiting or running:
            while waiting and len(running) < jobs:
                ch = waiting.pop(0)
                if check is not None:
                    check()
                shown.start(ch.name)
                worker = pool.start(ch.module or ch, ch.name, staging, params, timeout)
                running[worker] = (ch, time.time(), Watch(worker.pid, "the chapter's worker process"))
            for worker, kind, value in pool.finished():
                ch, t0, watch = running.pop(worker)
                if kind == "done":
                    o = ChapterOutcome(ch, *value)
                elif kind == "raised":  # pragma: no cover - execute_chapter records failures itself
                    raise_write_fault(value)  # a full disk stops the run
                    o = ChapterOutcome(ch, "failed", f"the chapter's process ended abnormally: {error_text(value)}",
                                       time.time() - t0)
                else:  # the worker died (killed, out of memory): its kernel ended with it
                    o = ChapterOutcome(ch, "failed", watch.cause(value, budget), time.time() - t0, watch.peak,
                                       watch.anonymous)
                    _record_failure(ch, staging, o.reason)
                watch.stop()
                done[ch.name] = o
                shown.end(ch.name, o.status, o.seconds, o.reason)
    return done


def _execute_in_worker(chapter, name: str, staging: Path, params: dict, timeout: int | None) -> tuple:
    """:func:`execute_chapter` in a ``--jobs`` worker: the chapter's declaration found there from its module's name
    (a declaration may hold what does not pickle, such as a lambda), its outcome sent back without it. Its kernel
    is a fork of the worker's own template (:mod:`.kernel_forks`, started with the worker's first chapter and
    ending with the worker): a worker's later chapters do not each start a Python that imports the chapters'
    libraries again (a 240 x 12 report at ``--jobs 2``: 106.7 CPU-s, against 32.4 at ``--jobs 1``)."""
    if isinstance(chapter, str):
        import importlib
        from dataclasses import replace

        chapter = replace(importlib.import_module(chapter).CHAPTER, module=chapter)
    o = execute_chapter(chapter, staging, params, timeout=timeout, forks=KernelForks.shared())
    return o.status, o.reason, o.seconds, o.peak_rss, o.peak_anon


def _record_failure(ch: ChapterSpec, staging: Path, reason: str) -> None:
    """The notebook of a chapter whose process died before it wrote it, marked failed with ``reason``."""
    target = staging / "chapters" / ch.filename
    publish_notebook(target if target.exists() else ch.notebook, target, staging,
                     dict(name=ch.name, title=ch.title, status="failed", error=reason))
