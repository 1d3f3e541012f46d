"""Shared fixtures and configuration of the test suite."""
from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from threadpoolctl import threadpool_limits

from embeval_report.context import ComputeContext

# ---------------------------------------------------------------------------------------------
# No silent skips in CI (issue 30): with CI set, a skip for a module the test extra installs is a failure;
# only the five optional peer libraries of the reference checks may be missing (see tests/no_silent_skips.py).
# ---------------------------------------------------------------------------------------------
from no_silent_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402,F401

# --------------------------------------------------------------------------- the demo report

@dataclass(frozen=True)
class DemoReport:
    """The outcome of ``embeval-report demo --fail-on problematic``: its folder, exit code and standard error."""
    folder: Path
    returncode: int
    stderr: str


def built_once(tmp_path_factory, name: str, build) -> tuple[Path, dict]:
    """``build(folder) -> record`` (JSON) run once per test session, whichever pytest-xdist worker needs it first
    (holding a file lock; the others wait for it and read its record): a report several test modules or both
    workers read is written once. ``folder`` exists (empty) when ``build`` starts. Returns the folder and the
    record."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder of this session's workers' own folders
    folder, record = root / name, root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            folder.mkdir(exist_ok=True)
            record.write_text(json.dumps(build(folder)))
    return folder, json.loads(record.read_text())


@pytest.fixture(scope="session")
def demo_report(tmp_path_factory) -> DemoReport:
    """The full demo report (every chapter, HTML and PDF), written once per test session for the tests that read
    it (:func:`built_once`: the demo's own test, which writes it, is collected first and its readers last). Read
    it; copy it before changing anything in it."""
    from embeval_report.cli import main

    def build(folder):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["demo", "--out", str(folder), "--fail-on", "problematic"])
        return {"returncode": rc, "stderr": err.getvalue()}

    folder, done = built_once(tmp_path_factory, "demo-report", build)
    return DemoReport(folder, done["returncode"], done["stderr"])


@dataclass(frozen=True)
class DaskReference:
    """The local run (no engine) of isotropy and uniformity on an 8,300 x 64 set (more rows than one chunk of a 256
    MiB budget): the reference numbers of the Dask runs on that set. ``folder`` holds the set (``vecs.npy``,
    ``ids.txt``, ``m.yaml``), ``out`` the report."""
    folder: Path
    out: Path

    #: the runs' arguments after the manifest and --out
    ARGS = ("--chapters", "isotropy,uniformity", "--formats", "html", "--device", "cpu", "--memory-budget", "256MiB")


@pytest.fixture(scope="session")
def dask_reference(tmp_path_factory) -> DaskReference:
    """:class:`DaskReference`, written once per session (:func:`built_once`) for the Dask runs that compare with it
    (test_dask_engine, test_dask_no_shared_disk: the same set, chapters and options; each test ran it itself before).
    Read it; copy the set's files to run on them elsewhere."""
    import numpy as np

    from embeval_report.cli import main

    def build(folder):
        X = np.random.default_rng(0).standard_normal((8300, 64)).astype(np.float32)
        np.save(folder / "vecs.npy", X)
        (folder / "ids.txt").write_text("\n".join(f"e{i}" for i in range(len(X))))
        (folder / "m.yaml").write_text("name: tiny\nvectors: vecs.npy\nids: ids.txt\n")
        return {"rc": main(["run", str(folder / "m.yaml"), "--out", str(folder / "local"), *DaskReference.ARGS])}

    folder, done = built_once(tmp_path_factory, "dask-reference", build)
    assert done["rc"] == 0
    return DaskReference(folder, folder / "local")


@pytest.fixture(scope="session")
def demo_data(demo_report) -> Path:
    """The demo's manifest with every chapter's side data (``write_demo(seed=0)``), as the demo report holds it."""
    return demo_report.folder / "demo-data" / "manifest.yaml"


# --------------------------------------------------------------------------- the compute context

@pytest.fixture
def enter():
    """``enter(**fields)`` enters a :class:`~embeval_report.context.ComputeContext` for the rest of the test (left
    again, in reverse order, when the test ends); returns it."""
    entered = []

    def _enter(**fields) -> ComputeContext:
        ctx = ComputeContext(**fields)
        ctx.__enter__()
        entered.append(ctx)
        return ctx

    yield _enter
    for ctx in reversed(entered):
        ctx.__exit__(None, None, None)


# ---------------------------------------------------------------------------------------------
# Devices (issue 30 part 4): a kernel test that takes a ``device`` argument runs on the CPU and, where torch
# sees a GPU, on it too; the GPU cases carry "cuda" in their test id, so `pytest -k cuda` selects them all
# (what `make bench-gpu` runs first).
# ---------------------------------------------------------------------------------------------
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    """``"cpu"``, then ``"cuda"`` when torch sees a GPU."""
    return request.param


# ---------------------------------------------------------------------------------------------
# One share of the cores per test process (issue 27 part 5): `make test` runs two pytest-xdist workers on two
# cores, and each would otherwise run torch, BLAS and OpenMP on every core, as would the chapter kernels and CLI
# runs it starts: four or more busy threads on two cores, whose barriers mostly wait (the suite took 501 s, 423 s
# with one thread per worker). Each worker takes cores / workers threads, its child processes too (the
# environment); a variable the caller set is kept. Tests of multi-threaded paths set their own thread count.
# ---------------------------------------------------------------------------------------------
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def pytest_configure(config):
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        for name in THREAD_VARIABLES:
            os.environ.setdefault(name, str(max(1, cores // workers)))
        threads = int(os.environ["OMP_NUM_THREADS"])  # the caller's, if set
        torch.set_num_threads(threads)
        config._thread_limits = threadpool_limits(threads)  # numpy's and SciPy's BLAS in this process
    keep_the_kernel_template()


# ---------------------------------------------------------------------------------------------
# One kernel template per test process for the whole session (issue 50): a run in a test process forks its chapter
# kernels from that process's template (report/kernel_forks.py), which imports the chapters' modules once (about
# 5 CPU-s) and ends after IDLE_SECONDS (120) without a request. Between two report-writing tests of a worker more
# than two minutes often pass (a long test of another kind, or runs in subprocesses of their own), and the next
# run paid the template's start again. The template still ends with its test process (it checks its parent every
# second); the tests of the idle ending set their own IDLE_SECONDS.
# ---------------------------------------------------------------------------------------------
TEMPLATE_IDLE_SECONDS = 3600


def keep_the_kernel_template():
    from embeval_report.report import kernel_forks

    kernel_forks.IDLE_SECONDS = max(kernel_forks.IDLE_SECONDS, TEMPLATE_IDLE_SECONDS)


# ---------------------------------------------------------------------------------------------
# The longest tests first (issue 27 part 5). `make test` runs two workers, and pytest-xdist hands each worker
# two tests at a time (`--maxschedchunk 1`, pyproject's addopts): whichever worker is free takes the next. So
# the suite's longest tests start first, on both workers, and the short tests fill in around them:
#   1. the first test that needs a report written once per session (built_once: the demo 170 s, the hostile
#      report 95 s, the end-to-end report 65 s, the text demo 25 s, the label-only comparison 20 s, the API's
#      reports 12 s, in CI; the explore and published reports, the demo's side data), which writes it, the
#      longest first;
#   2. the other tests, the files of the longest tests first (LONGEST_FIRST, > 10 s each in CI), then the rest in
#      their own order;
#   3. the other tests that read those reports, by then written: next to its writer, a reader would wait on the
#      other worker for the whole writing (a core idle), which also wrote the hostile report twice (CI of 17:48).
# Order only: nothing is skipped.
# ---------------------------------------------------------------------------------------------
#: the reports written once per session, the longest to write first: (fixture, the files whose fixture of that
#: name it is; None: every file)
WRITTEN_ONCE = (("demo_report", None), ("hostile_report", ("test_security_output.py",)),
                ("report", ("test_end_to_end.py", "test_quarto.py")), ("lee_report", ("test_model_run.py",)),
                ("label_only", ("test_first_hour.py",)), ("made", ("test_api.py",)),
                ("small_report", ("test_explore.py",)), ("published", ("test_security_files.py",)),
                ("demo_side", ("test_faults.py",)))
#: the demo report's fixtures (demo_data: its input folder)
DEMO_FIXTURES = {"demo_report", "demo_data"}
LONGEST_FIRST = ("test_dask_out_of_core.py", "test_outdir.py", "test_api.py", "test_faults.py", "test_compare.py",
                 "test_tracking.py", "test_adding_a_chapter.py", "test_dask_engine.py", "test_findings.py",
                 "test_calibration.py", "test_dask_no_shared_disk.py", "test_presentation.py", "test_degenerate.py",
                 "test_out_of_core.py", "test_kernel_forks.py", "test_first_hour.py", "test_linkpred.py",
                 "test_explore.py", "test_drift.py", "test_stability.py", "test_model_run.py", "test_rigor.py",
                 "test_classification.py", "test_compare_tasks.py")
#: the readers' files, those of the longest readers first (the API's comparison 33 s, the demo's stability and
#: drift data 21 s and 11 s)
LONGEST_READERS = ("test_api.py", "test_stability.py", "test_drift.py", "test_first_hour.py", "test_end_to_end.py",
                   "test_explore.py", "test_security_output.py", "test_model_run.py")


def _written_once(item) -> int | None:
    """The index in WRITTEN_ONCE of the report written once per session that ``item`` reads, if any."""
    names = set(getattr(item, "fixturenames", ()))
    if names & DEMO_FIXTURES:
        return 0
    for i, (fixture, files) in enumerate(WRITTEN_ONCE):
        if fixture in names and (files is None or item.path.name in files):
            return i
    return None


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    readers = {name: i for i, name in enumerate(LONGEST_READERS)}
    reads = {id(item): _written_once(item) for item in items}
    writers = {}
    for item in items:
        if reads[id(item)] is not None:
            writers.setdefault(reads[id(item)], id(item))  # the first test that reads it writes it
    writer_of = {item: report for report, item in writers.items()}

    def order(item):
        if id(item) in writer_of:
            return 0, writer_of[id(item)]
        if reads[id(item)] is not None:
            return 2, readers.get(item.path.name, len(readers))
        return 1, rank.get(item.path.name, len(rank))

    items.sort(key=order)  # stable: each file keeps its own order
