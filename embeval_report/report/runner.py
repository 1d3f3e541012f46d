"""Run a report: validate every input once, execute each chapter notebook, assemble, render.

The flow: check ``--out`` → load and validate the set and all its side data (bad input stops
here, before any chapter) → write the prepared cache → execute each chapter in its own kernel
(skipped when its inputs are absent or too degenerate, isolated when it fails) → ``run.json``,
the summary chapter, ``metrics.json`` → render each format on its own → move into place.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat

from .. import __version__
from ..chapters.registry import Chapter, describe_input, discover, select
from ..io import load_source, save_prepared
from ..kernels.budget import memory_budget, use_memory_budget
from ..io.model_source import embedded_source
from ..io.side_data import load_side_data
from ..metrics.thresholds import SEVERITY
from ..progress import RunProgress
from ..settings import ChapterSettings
from .outdir import OutputFolder, raise_write_fault
from .recorder import metrics_document
from .rigor import adjust_report
from .render import render_report
from .render.common import strip_ansi

#: exception names a chapter raises to be skipped rather than failed
SKIP_ERRORS = ("ChapterSkipped",)


@dataclass
class ChapterOutcome:
    chapter: Chapter
    status: str          # ok | skipped | failed
    reason: str = ""
    seconds: float = 0.0


@dataclass
class RunResult:
    out: Path
    outcomes: list[ChapterOutcome]
    files: dict = field(default_factory=dict)
    render_errors: dict = field(default_factory=dict)

    @property
    def failed(self) -> list[ChapterOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    def worst_verdict(self) -> str | None:
        """The most severe verdict recorded anywhere in the report."""
        metrics = json.loads((self.out / "metrics.json").read_text())
        best = None
        for ch in metrics["chapters"].values():
            for m in ch["metrics"].values():
                if SEVERITY[m["verdict"]] > SEVERITY[best]:
                    best = m["verdict"]
        return best


def _error_text(exc: BaseException) -> str:
    ename = getattr(exc, "ename", None)
    text = f"{ename}: {getattr(exc, 'evalue', '')}" if ename else f"{type(exc).__name__}: {exc}"
    return strip_ansi(text).strip()


#: arguments of every chapter kernel
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]
#: what a warm kernel imports before its chapter is handed to it (the chapters' common imports)
WARM_IMPORTS = "import embeval_report.chapters.setup, matplotlib.pyplot, seaborn"


class WarmKernel:
    """A chapter kernel started (and its common imports run) while the previous chapter executes.

    Each chapter still gets a fresh kernel of its own; only the start-up (about 4 s of process start and
    imports per chapter on a 2-core machine) overlaps the previous chapter's work.
    """

    def __init__(self, cwd: Path):
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(cwd), extra_arguments=KERNEL_ARGUMENTS)
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.execute(WARM_IMPORTS, silent=True, store_history=False)

    def release(self) -> None:
        """Stop the client and the kernel (after its chapter, or unused)."""
        self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=True)


def execute_chapter(ch: Chapter, staging: Path, params: dict, *, timeout: int | None = None,
                    kernel: WarmKernel | None = None) -> ChapterOutcome:
    """Execute one chapter in its own kernel (``kernel``, started ahead, or a new one); failures are caught
    and recorded, never raised."""
    import papermill as pm

    target = staging / "chapters" / ch.filename
    t0 = time.time()
    status, reason = "ok", ""
    try:
        pm.execute_notebook(str(ch.notebook), str(target), parameters=params, kernel_name="python3",
                            progress_bar=False, cwd=str(target.parent), execution_timeout=timeout,
                            extra_arguments=KERNEL_ARGUMENTS, **({"km": kernel.km} if kernel else {}))
    except Exception as exc:  # a failing chapter must not lose the report
        raise_write_fault(exc)  # but a full disk stops the run
        if getattr(exc, "ename", None) in SKIP_ERRORS:
            status, reason = "skipped", strip_ansi(str(getattr(exc, "evalue", ""))).strip()
        else:
            status, reason = "failed", _error_text(exc)
    nb = nbformat.read(target if target.exists() else ch.notebook, as_version=4)
    nb.metadata.setdefault("embeval", {}).update(status=status, error=reason or None)
    nbformat.write(nb, target)
    return ChapterOutcome(ch, status, reason, time.time() - t0)


#: chapters that read the set's cosine k-NN graph (computed once by the runner, before them)
GRAPH_CHAPTERS = ("hubness", "correction", "anomaly")


def _shared_graph(es, settings: ChapterSettings, cache: Path, ready: list[Chapter], client=None) -> dict | None:
    """Compute the set's cosine k-NN graph into the prepared cache when a chapter that reads it will run
    (exact mode; k + 1 neighbours for the k option), so chapters running side by side share one computation.
    The same sweep sums the all-pairs potential (uniformity) and, when the hubness chapter runs, ranks
    by mutual proximity too. Returns the cosine graph's cache event plus the products of the sweep.

    With a Dask ``client`` (``--dask``, ``--scheduler``; exact precision) the cosine graph is computed on the
    cluster (:func:`~embeval_report.kernels.dask_engine.knn_blockwise`, the same lists; the workers read the
    prepared ``vectors.npy`` themselves) and stored in the cache as the local sweep would store it; the
    mutual-proximity graph and the potential still come from a local sweep."""
    import numpy as np

    from ..kernels.device import use_precision
    from ..kernels.graph_cache import use_graph_cache
    from ..kernels.moments_cache import use_moments_cache
    from ..kernels.neighbours import fast_recall
    from ..metrics.hubness_measures import usable_k
    from ..metrics.hubness_reduction import reduced_knn

    if settings.sample_size is not None or not any(ch.name in GRAPH_CHAPTERS for ch in ready) or es.n < 3:
        return None
    k = usable_k(int(settings.option("k")), es.n)
    methods = ("mutual_proximity",) if any(ch.name == "hubness" for ch in ready) else ()
    events, started = [], time.perf_counter()
    use_graph_cache(cache / "neighbours", min_k=int(settings.option("k")) + 1, log=events.append)
    use_moments_cache(cache / "moments")
    use_precision(settings.precision)
    try:
        if client is not None and settings.precision == "exact":
            _dask_graph(np.load(cache / "vectors.npy", mmap_mode="r"), k, client)
        reduced_knn(es.vectors, k, methods, with_cosine=True, device=settings.device,
                    desc="k-NN graph (shared by the chapters)")
        recall = fast_recall(es.vectors)
    finally:
        use_graph_cache(None)
        use_moments_cache(None)
        use_precision("exact")
        if settings.device == "cuda":  # leave the GPU's memory to the chapter kernels
            import torch

            torch.cuda.empty_cache()
    cosine = [e for e in events if e["metric"] in ("cosine", "cosine-fast")]
    if client is not None and cosine and settings.precision == "exact":  # the cluster's event, not the cache read
        cosine = [cosine[0] | {"engine": "dask"}]
    products = sorted({e["metric"] for e in events} | ({"potential"} if settings.precision == "exact" or methods else set()))
    if client is not None and settings.precision == "exact" and not methods:  # no local sweep ran: no potential
        products = [p for p in products if p != "potential"]
    seconds = round(time.perf_counter() - started, 2)
    return (cosine[-1] | {"products": products, "seconds": seconds}
            | ({"recall": recall[0], "recall_queries": recall[1]} if recall else {}) if cosine else None)


def _dask_graph(vectors, k: int, client) -> None:
    """The cosine k-NN graph of ``vectors`` computed on the Dask cluster into the graph cache in use (the
    same key, k and arrays as :func:`~embeval_report.kernels.neighbours.self_sweep` stores).

    ``vectors``: the prepared float32 memory map, whose row blocks the workers read from its file (a task
    carries the path, not the rows); only when a worker cannot open that file are the rows sent instead."""
    import numpy as np

    from ..kernels.dask_engine import FileRows, knn_blockwise, readable
    from ..kernels.device import as_numpy
    from ..kernels.graph_cache import cached_products

    X = as_numpy(vectors)
    rows = FileRows.of(X)
    if rows is None or not readable(rows, client):
        X = np.ascontiguousarray(X, dtype=np.float32)
    cached_products(X, {"cosine": k}, True,
                    lambda missing: {"cosine": knn_blockwise(X, missing["cosine"], client=client)})


def _dask_client(engine: str, scheduler: str | None, workers: int):
    """``(client, run_info entry)`` of the engine: no client for ``"local"``, a Dask client for ``"dask"``."""
    if engine == "local" and scheduler is None:
        return None, {"name": "local"}
    from ..kernels.dask_engine import connect, worker_count

    client = connect(scheduler, workers)
    return client, {"name": "dask", "scheduler": scheduler or "LocalCluster", "workers": worker_count(client)}


def _sequential(chapters: list[Chapter], staging: Path, params: dict, timeout: int | None, shown: RunProgress,
                before=None, done: dict | None = None) -> dict[str, ChapterOutcome]:
    """Execute ``chapters`` one at a time, each in a fresh kernel started while the previous one runs;
    ``before(ch)`` is called just before ``ch`` executes; outcomes are added to ``done`` as they come."""
    done = {} if done is None else done
    kernels: list[WarmKernel] = []
    try:
        for i, ch in enumerate(chapters):
            if not kernels:
                kernels.append(WarmKernel(staging / "chapters"))
            if i + 1 < len(chapters):  # the next chapter's kernel starts while this one runs
                kernels.append(WarmKernel(staging / "chapters"))
            if before is not None:
                before(ch)
            shown.start(ch.name)
            kernel = kernels.pop(0)
            try:
                done[ch.name] = o = execute_chapter(ch, staging, params, timeout=timeout, kernel=kernel)
            finally:
                kernel.release()
            shown.end(ch.name, o.status, o.seconds, o.reason)
    except BaseException:  # interrupted: no kernel may outlive the staging folder it runs in
        _kill_processes(_children())
        raise
    finally:
        for kernel in kernels:
            kernel.release()
    return done


def _execute(ready: list[Chapter], staging: Path, params: dict, timeout: int | None, shown: RunProgress,
             jobs: int, final: list[Chapter] = (), before_final=None) -> dict[str, ChapterOutcome]:
    """Execute the content chapters, ``jobs`` at a time (each in its own worker process when ``jobs`` > 1),
    then the ``final`` ones in order, ``before_final(ch, done)`` called before each of those."""
    done: dict[str, ChapterOutcome] = {}

    def before(ch):
        if ch.stage > 0 and before_final is not None:
            before_final(ch, done)

    if jobs <= 1 or len(ready) <= 1:
        return _sequential(list(ready) + list(final), staging, params, timeout, shown, before=before, done=done)
    done.update(_parallel(ready, staging, params, timeout, shown, jobs))
    return _sequential(list(final), staging, params, timeout, shown, before=before, done=done)


def _parallel(ready: list[Chapter], staging: Path, params: dict, timeout: int | None, shown: RunProgress,
              jobs: int) -> dict[str, ChapterOutcome]:
    """Execute the chapters ``jobs`` at a time, each in its own worker process."""
    done = {}
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"))
    waiting, running = list(ready), {}
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                ch = waiting.pop(0)
                shown.start(ch.name)
                running[pool.submit(execute_chapter, ch, staging, params, timeout=timeout)] = (ch, time.time())
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                ch, t0 = running.pop(future)
                try:
                    o = future.result()
                except Exception as exc:  # the worker process died (killed, out of memory)
                    raise_write_fault(exc)
                    o = ChapterOutcome(ch, "failed", f"the chapter's process ended abnormally: {_error_text(exc)}",
                                       time.time() - t0)
                done[ch.name] = o
                shown.end(ch.name, o.status, o.seconds, o.reason)
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown()
    return done


def _stop_workers(pool) -> None:
    """Kill a pool's worker processes and the chapter kernels they started (an interrupted run)."""
    for proc in list(getattr(pool, "_processes", {}).values()):
        _kill_processes(_children(proc.pid))
        proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def _children(pid: int | None = None) -> list:
    """The processes started (directly or not) by ``pid`` (default: this process), as psutil handles."""
    try:
        import psutil  # installed with ipykernel
        return psutil.Process(pid).children(recursive=True)
    except Exception:  # pragma: no cover - psutil missing or the process gone
        return []


def _kill_processes(procs: list) -> None:
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


def _notebook_path(path: Path, staging: Path) -> str:
    """A path as the chapter notebooks (cwd ``chapters/``) should see it."""
    path = Path(path).resolve()
    try:
        return os.path.relpath(path, staging / "chapters") if path.is_relative_to(staging) else str(path)
    except ValueError:
        return str(path)


def run_report(source, out, *, settings: ChapterSettings | None = None, chapters: list[str] | None = None,
               renderer: str = "auto", pdf_engine: str = "typst", formats=("html", "pdf"), title: str | None = None,
               timeout: int | None = None, prepare=None, force: bool = False, jobs: int = 1,
               embedding_cache=None, engine: str = "local", scheduler: str | None = None, workers: int = 2) -> RunResult:
    """Build a complete report for ``source`` (a manifest or a vectors file) at ``out``.

    ``jobs`` chapters execute at once, each in its own process (statistical rigor and the summary last,
    alone, after the report-wide adjustment of every recorded test); the
    numbers do not depend on it. The set's cosine k-NN graph is computed once, here, when a
    chapter that reads it will run.

    ``prepare(staging) -> source`` may create the input inside the staging folder (the demo
    does, so its data travels with the report). A manifest that names a model is embedded first
    (:func:`~embeval_report.io.model_source.embed_manifest`, through ``embedding_cache``): the
    report's ``embeddings/`` folder then holds the vectors and a manifest that re-runs it without
    the model, and every chapter reads those vectors. Raises :class:`~embeval_report.errors.InputError`
    for bad input or a folder that may not be written, before any chapter runs.

    ``engine="dask"`` (or a ``scheduler`` address) runs the decomposable passes on a Dask cluster: a
    ``LocalCluster`` of ``workers`` processes on this machine, or the scheduler at ``tcp://HOST:PORT``. The
    shared cosine k-NN graph is computed there, and every chapter receives the scheduler's address
    (``settings.scheduler``) and sends its moment, potential and KS passes to it
    (:func:`~embeval_report.kernels.dask_engine.takes`); the client is closed after the last chapter (and in
    any case before this returns). ``run.json`` records it under ``engine``.
    """
    if engine not in ("local", "dask"):
        raise ValueError(f"engine must be 'local' or 'dask', not {engine!r}")
    if engine == "dask" or scheduler is not None:
        from ..kernels.dask_engine import _require

        _require()  # one line naming the extra to install, before anything is written
    settings = settings or ChapterSettings.resolve()
    use_memory_budget(settings.memory_budget)  # block sizes of the streamed validation and of the shared sweep
    target = OutputFolder.check(out, force=force)
    out = target.path
    all_chapters = discover()
    chosen = select(all_chapters, chapters)
    staging = target.staging()
    client = None
    try:
        if prepare is not None:
            source = prepare(staging)
        source, model_run = embedded_source(source, staging, device=settings.device, cache_dir=embedding_cache)
        cache = staging / ".prepared"
        cache.mkdir(exist_ok=True)
        es = load_source(source, scratch=cache)  # a set larger than memory is written there block by block
        target.check_room(staging, es.n, es.d)
        side = load_side_data(es)
        save_prepared(es, cache)
        side.save(cache / "side")
        for sub in ("chapters", "results"):
            (staging / sub).mkdir()
        final = sorted((c for c in chosen if c.stage > 0), key=lambda c: c.stage)  # rigor, then the summary
        content = [c for c in chosen if c.stage == 0]
        base = dict(source=_notebook_path(Path(source), staging), prepared=str(cache), results_dir="../results",
                    settings=settings.to_params())
        ready, outcomes = [], {}
        for ch in content:
            missing = ch.missing(es)
            reason = ("needs " + ", ".join(map(describe_input, missing)) if missing
                      else ch.precheck(es, side, settings))
            if reason:
                outcomes[ch.name] = ChapterOutcome(ch, "skipped", reason)
            else:
                ready.append(ch)
        client, engine_info = _dask_client(engine, scheduler, workers)
        if client is not None:  # every chapter sends its passes to this cluster, open until the last has run
            base["settings"] = replace(settings, scheduler=client.scheduler.address).to_params()
        graph = _shared_graph(es, settings, cache, ready, client=client)
        final_source = Path(source).resolve()
        if final_source.is_relative_to(staging):  # input created inside the report (the demo)
            final_source = out / final_source.relative_to(staging)
        run_info = dict(title=title or f"Embedding evaluation: {es.name}", name=es.name, source=str(final_source),
                        seed=settings.seed, device=settings.device, sample_size=settings.sample_size,
                        options=settings.options, precision=settings.precision, version=__version__, n=es.n,
                        d=es.d, jobs=jobs, engine=engine_info, memory_budget=memory_budget(),
                        **({"neighbour_graph": graph} if graph else {}),
                        **({"model": model_run} if model_run else {}),
                        generated=_dt.datetime.now().astimezone().isoformat(timespec="seconds"))
        unselected = [ChapterOutcome(c, "skipped", "not selected (--chapters)") for c in all_chapters if c not in chosen]

        skipped = dict(outcomes)

        def in_order(done: dict) -> list[ChapterOutcome]:
            known = skipped | done
            return ([known[ch.name] for ch in content] + unselected
                    + [done[ch.name] for ch in final if ch.name in done])

        def before_final(ch: Chapter, done: dict) -> None:
            """Rigor and the summary read run.json and results/: write what ran so far; adjust every test first."""
            _write_run(staging, in_order(done), run_info)
            if ch is final[0]:
                adjust_report(staging, [c.name for c in content])

        with RunProgress(len(content) + len(final), staging / ".progress") as shown:
            for o in outcomes.values():
                shown.end(o.chapter.name, o.status, 0.0, o.reason)
            if not final:
                before_final = None
            outcomes = in_order(_execute(ready, staging, base, timeout, shown, jobs, final, before_final))
        _write_run(staging, outcomes, run_info)
        _write_metrics(staging, outcomes, run_info)
        shutil.rmtree(cache, ignore_errors=True)
        (staging / ".progress").unlink(missing_ok=True)
        files, errors = {}, {}
        for fmt in formats:  # each format on its own: a failing PDF never loses the HTML
            try:
                files.update(render_report(staging, title=run_info["title"], formats=(fmt,), renderer=renderer,
                                           pdf_engine=pdf_engine))
            except Exception as exc:
                raise_write_fault(exc)
                errors[fmt] = _error_text(exc)
        _write_run(staging, outcomes, run_info)
        target.commit(staging)
    except BaseException as exc:
        target.abandon(staging, exc)  # removes staging; a write fault becomes one line (OutputError)
        raise
    finally:
        if client is not None:  # a LocalCluster closes with its client
            client.close()
    files = {k: out / Path(v).name for k, v in files.items()}
    return RunResult(out, outcomes, files, errors)


def _write_run(staging: Path, outcomes: list[ChapterOutcome], run_info: dict) -> None:
    """``run.json``: run settings, every chapter's status and the entries this run wrote (read by the summary)."""
    chapters = [dict(name=o.chapter.name, title=o.chapter.title, order=o.chapter.order, status=o.status,
                     reason=o.reason, requires=list(o.chapter.requires), seconds=round(o.seconds, 2))
                for o in sorted(outcomes, key=lambda o: o.chapter.order)]
    files = sorted(p.name for p in staging.iterdir() if not p.name.startswith(".")) + ["run.json"]
    doc = dict(run_info, chapters=chapters, files=sorted(set(files)))
    (staging / "run.json").write_text(json.dumps(doc, indent=2))


def _write_metrics(staging: Path, outcomes: list[ChapterOutcome], run_info: dict) -> None:
    """``metrics.json`` in the fixed schema, from the chapters' recorded results."""
    chapters = [dict(name=o.chapter.name, status=o.status, reason=o.reason)
                for o in sorted(outcomes, key=lambda o: o.chapter.order)]
    doc = metrics_document(staging / "results", chapters, version=__version__, source=run_info["source"],
                           seed=run_info["seed"], device=run_info["device"])
    (staging / "metrics.json").write_text(json.dumps(doc, indent=2))
