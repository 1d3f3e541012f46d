"""Run a report: a short chain of named steps.

:func:`run_report` checks the output folder, prepares the input (every file read and validated once, bad
input stops here, before any chapter), selects the chapters that can run, computes the shared k-NN graph,
executes the content chapters (each notebook in its own kernel; a failing chapter is recorded, the rest
go on), adjusts every recorded test over the whole report, derives the findings, executes the chapters
that read the others' results (statistical rigor, the summary), writes ``run.json`` and ``metrics.json``,
renders each format on its own and moves the staged folder into place.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..chapters.declaration import ChapterSpec
from ..chapters.recorder import json_text
from ..chapters.registry import discover, resolve_settings, select
from ..errors import InputError, notice
from ..io import load_source, save_prepared
from ..io.model_source import embedded_source
from ..io.side_data import load_side_data
from ..progress import RunProgress
from ..resources import EXPLORE_NOTEBOOK, explore_template
from ..safe_files import portable_path
from ..settings import ChapterSettings
from ..version import __version__
from .baseline import check_baseline, compare_with_baseline
from .earlier import mark
from .execution import ChapterOutcome, error_text, execute, job_plan
from .kernel_forks import KernelForks
from .findings import derive_findings
from .metrics_file import metrics_document
from .outdir import OutputFolder, raise_write_fault
from .render import PDF_TIMEOUT, PdfTimeout, render_each
from .rigor import adjust_report
from .shared_graph import close_client, cluster_check, cluster_lost, dask_client, shared_graph


#: the reason of a chapter left out by ``--chapters``
NOT_SELECTED = "not selected (--chapters)"


@dataclass
class RunResult:
    out: Path
    outcomes: list[ChapterOutcome]
    files: dict = field(default_factory=dict)
    render_errors: dict = field(default_factory=dict)

    @property
    def failed(self) -> list[ChapterOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    def findings(self) -> tuple[str | None, list[dict]]:
        """The report's status (its worst finding's severity) and its findings, from ``metrics.json``."""
        doc = json.loads((self.out / "metrics.json").read_text())
        return doc.get("status"), doc.get("findings", [])

    def scope_text(self) -> str | None:
        """``metrics.json``'s scope ("geometry only: add labels, …") when no task ran, else None."""
        return json.loads((self.out / "metrics.json").read_text()).get("scope_text")


@dataclass
class Run:
    """The state a run's steps hand on: where it writes, what it read, which chapters, what they did."""

    target: OutputFolder
    staging: Path
    settings: ChapterSettings
    chosen: list[ChapterSpec]
    unselected: list[ChapterOutcome]
    source: Path | None = None
    es: object = None
    side: object = None
    model_run: dict | None = None
    ready: list[ChapterSpec] = field(default_factory=list)
    skipped: dict[str, ChapterOutcome] = field(default_factory=dict)
    done: dict[str, ChapterOutcome] = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    baseline: Path | None = None     # an earlier report of the previous model (--baseline)
    record_paths: bool = False       # run.json keeps the absolute paths of the input (--record-paths)
    requested: bool = False          # the chapters were named (--chapters): one that lacks its input is an error

    @property
    def cache(self) -> Path:
        return self.staging / ".prepared"

    @property
    def content(self) -> list[ChapterSpec]:
        return [c for c in self.chosen if c.stage == 0]

    @property
    def final(self) -> list[ChapterSpec]:
        """The chapters that read the others' results, in stage order (statistical rigor, then the summary)."""
        return sorted((c for c in self.chosen if c.stage > 0), key=lambda c: c.stage)

    def outcomes(self) -> list[ChapterOutcome]:
        """Every chapter's outcome so far, in report order (content, unselected, then the final chapters)."""
        known = self.skipped | self.done
        return ([known[c.name] for c in self.content if c.name in known] + self.unselected
                + [self.done[c.name] for c in self.final if c.name in self.done])


def prepare_input(run: Run, source, *, prepare=None, embedding_cache=None) -> None:
    """Create the input (the demo writes it into the staging folder), embed a model manifest, read and validate
    the set and every side-data file, and write the prepared cache every chapter reads."""
    if prepare is not None:
        source = prepare(run.staging)
    source, run.model_run = embedded_source(source, run.staging, device=run.settings.device, cache_dir=embedding_cache)
    run.source = Path(source)
    run.cache.mkdir(exist_ok=True)
    with run.settings.compute():  # the memory budget sizes the blocks of a streamed set
        run.es = load_source(source, scratch=run.cache)  # a set larger than memory is written there block by block
        run.target.check_room(run.staging, run.es.n, run.es.d)  # room for the prepared copy, before any chapter
        run.side = load_side_data(run.es)
        save_prepared(run.es, run.cache)
        run.side.save(run.cache / "side")
    for sub in ("chapters", "results"):
        (run.staging / sub).mkdir()


def select_chapters(run: Run) -> None:
    """Split the content chapters into those that run and those skipped with the reason (a missing input, or a
    set too degenerate for the chapter: its precheck, run here and nowhere else; within the memory budget). A
    chapter named in ``--chapters`` whose input is missing is an error (one line naming it), before any runs."""
    if run.requested:
        from ..io.manifest import describe_input

        for ch in run.content:
            missing = ch.missing(run.es)
            if missing:
                raise InputError(f"--chapters {ch.name}: cannot run on {run.es.name}: it needs "
                                 f"{ch.needs or ', '.join(map(describe_input, missing))}; add it to the manifest "
                                 "(`embeval-report chapters SOURCE` lists what each chapter needs) or leave "
                                 f"{ch.name} out of --chapters")
    with run.settings.compute():  # a precheck that reads the rows reads them in chunks of the budget
        for ch in run.content:
            reason = ch.check(run.es, run.side, run.settings)
            if reason:
                run.skipped[ch.name] = ChapterOutcome(ch, "skipped", reason)
            else:
                run.ready.append(ch)


def describe_run(run: Run, out: Path, *, title, jobs, engine_info, graph, job_budget=None) -> None:
    """The run's description (``run.json`` without the chapters): settings, set, engine, shared graph, model."""
    s, es = run.settings, run.es
    model = (dict(run.model_run, **{k: published(run, run.model_run[k], out) for k in ("folder", "cache")
                                    if run.model_run.get(k)}) if run.model_run else None)
    run.info = dict(title=title or f"Embedding evaluation: {es.name}", name=es.name,
                    source=published(run, run.source.resolve(), out),
                    seed=s.seed, device=s.device, sample_size=s.sample_size, options=s.set_options,
                    precision=s.precision, version=__version__, n=es.n, d=es.d, jobs=jobs, engine=engine_info,
                    memory_budget=s.compute().budget, runner_peak_rss_bytes=peak_rss_bytes(),
                    **({"job_memory_budget": job_budget} if jobs > 1 else {}),
                    **({"neighbour_graph": graph} if graph else {}),
                    **({"model": model} if model else {}),
                    **({"baseline": published(run, run.baseline, out)} if run.baseline else {}),
                    generated=_dt.datetime.now().astimezone().isoformat(timespec="seconds"))


def execute_chapters(run: Run, params: dict, *, timeout, jobs: int, forks: KernelForks | None = None,
                     check=None, job_budget: int | None = None) -> None:
    """Execute the ready content chapters, then the final ones; before the first final chapter every recorded
    test is adjusted over the report (:func:`~.rigor.adjust_report`); before each, ``run.json`` says what ran.
    ``check()`` is called before every chapter (the Dask cluster's health: :func:`~.shared_graph.cluster_check`)."""
    def before_final(ch: ChapterSpec, done: dict) -> None:
        run.done = done
        write_run(run)
        if ch is run.final[0]:
            adjust_report(run.staging, [c.name for c in run.content])
            if run.baseline is not None:  # the previous model beside this one, unit by unit
                compare_with_baseline(run.staging, run.baseline, mde=run.settings.option("mde"),
                                      level=run.settings.level, seed=run.settings.seed)
        if ch is run.final[-1]:  # the summary reads the findings of every chapter before it
            derive_report_findings(run)

    with RunProgress(len(run.content) + len(run.final), run.staging / ".progress") as shown:
        for o in run.skipped.values():
            shown.end(o.chapter.name, o.status, 0.0, o.reason)
        run.done = execute(run.ready, run.staging, params, timeout, shown, jobs, run.final,
                           before_final if run.final else None, forks=forks, check=check, job_budget=job_budget)


def derive_report_findings(run: Run) -> None:
    """The findings of every chapter that ran (``results/findings.json``; see :mod:`.findings`)."""
    outcomes = {o.chapter.name: (o.status, o.reason) for o in run.outcomes()}
    derive_findings(run.staging / "results", [c for c in run.chosen if c.stage != 2], outcomes)


def write_run(run: Run) -> None:
    """``run.json``: run settings, every chapter's status and the entries this run wrote (read by the summary)."""
    chapters = [dict(name=o.chapter.name, title=o.chapter.title, order=o.chapter.order, status=o.status,
                     reason=o.reason, requires=list(o.chapter.requires), seconds=round(o.seconds, 2),
                     **({"peak_rss_bytes": o.peak_rss} if o.peak_rss is not None else {}),
                     **({"peak_anon_bytes": o.peak_anon} if o.peak_anon is not None else {}))
                for o in sorted(run.outcomes(), key=lambda o: o.chapter.order)]
    run.info["runner_peak_rss_bytes"] = peak_rss_bytes()  # so far: the last write comes after rendering
    doc = mark(dict(run.info, chapters=chapters), run.staging)  # the marker and every file: earlier.py
    (run.staging / "run.json").write_text(json_text(doc, indent=2))


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory so far (``ru_maxrss``; the chapter kernels and Dask workers are
    processes of their own), in bytes; None where the platform has no :mod:`resource` (Windows). It counts the
    pages of a memory-mapped set this process has read through the map (page cache, not memory it holds)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB elsewhere


def write_metrics(run: Run) -> None:
    """``metrics.json`` in the fixed schema, from the chapters' recorded results."""
    chapters = [dict(name=o.chapter.name, status=o.status, reason=o.reason)
                for o in sorted(run.outcomes(), key=lambda o: o.chapter.order)]
    source = portable_path(_final_path(run.source.resolve(), run.staging, run.target.path), run.target.path)
    doc = metrics_document(run.staging / "results", chapters, version=__version__, source=source,
                           seed=run.info["seed"], device=run.info["device"])
    (run.staging / "metrics.json").write_text(json_text(doc, indent=2))


def render(run: Run, *, formats, renderer, pdf_engine, pdf_timeout=PDF_TIMEOUT) -> tuple[dict, dict]:
    """Each format on its own (a failing PDF never loses the HTML; nor one past its time limit; the builtin
    renderer's two side by side, :func:`~.render.render_each`): ``(files, errors)``."""
    shutil.rmtree(run.cache, ignore_errors=True)
    (run.staging / ".progress").unlink(missing_ok=True)
    files, errors = {}, {}
    for fmt, done in render_each(run.staging, title=run.info["title"], formats=formats, renderer=renderer,
                                 pdf_engine=pdf_engine, pdf_timeout=pdf_timeout).items():
        if isinstance(done, PdfTimeout):
            errors[fmt] = str(done)
        elif isinstance(done, Exception):
            raise_write_fault(done)  # a full disk stops the run; another failure loses only this format
            errors[fmt] = error_text(done)
        else:
            files[fmt] = done
    return files, errors


def _final_path(path, staging: Path, out: Path) -> str:
    """A path as it will be once the staged report is moved to ``out`` (input created inside the report: the
    demo's data, a model run's embeddings, a model linked there)."""
    path = Path(os.path.abspath(path))
    return str(out / path.relative_to(staging)) if path.is_relative_to(staging) else str(path)


def published(run: Run, path, out: Path) -> str:
    """A path of the input as ``run.json`` records it: relative to the report folder ``out``
    (:func:`~embeval_report.safe_files.portable_path`), absolute with ``--record-paths``."""
    final = _final_path(path, run.staging, out)
    return final if run.record_paths else portable_path(final, out)


def _notebook_path(path: Path, staging: Path, out: Path) -> str:
    """A path as the chapter notebooks (cwd ``chapters/``) should see it: relative to ``chapters/`` of the report
    as it will be at ``out``."""
    return portable_path(_final_path(Path(path).resolve(), staging, out), out / "chapters")


def run_report(source, out, *, settings: ChapterSettings | None = None, chapters: list[str] | None = None,
               renderer: str = "auto", pdf_engine: str = "typst", formats=("html", "pdf"), title: str | None = None,
               timeout: int | None = None, prepare=None, force: bool = False, jobs: int = 1,
               embedding_cache=None, engine: str = "local", scheduler: str | None = None, workers: int = 2,
               baseline=None, record_paths: bool = False, pdf_timeout: float | None = PDF_TIMEOUT) -> RunResult:
    """Build a complete report for ``source`` (a manifest or a vectors file) at ``out``.

    ``jobs`` chapters execute at once, each in its own process (statistical rigor and the summary last,
    alone, after the report-wide adjustment of every recorded test); the numbers do not depend on it.
    ``prepare(staging) -> source`` may create the input inside the staging folder (the demo does, so its
    data travels with the report). A manifest that names a model is embedded first (through
    ``embedding_cache``). ``baseline``: an earlier report folder of the previous model on the same inputs,
    compared with this one (:mod:`.baseline`). ``record_paths``: ``run.json`` records the input's absolute paths
    (else paths relative to the report folder, as every other file of the report). ``pdf_timeout``: the PDF's
    wall-clock limit in seconds (None: none; past it the PDF is not written and its error says so).
    ``engine="dask"`` (or a ``scheduler`` address) runs the shared graph and the chapters' decomposable passes on
    a Dask cluster (a ``LocalCluster`` of ``workers`` processes, or the scheduler at ``tcp://HOST:PORT``), closed
    before this returns. Raises
    :class:`~embeval_report.errors.InputError` for bad input or a folder that may not be written, before any
    chapter runs.
    """
    if engine not in ("local", "dask"):
        raise ValueError(f"engine must be 'local' or 'dask', not {engine!r}")
    if engine == "dask" or scheduler is not None:
        from ..kernels.dask_engine import _require
        from ..context import check_scheduler

        _require()  # one line naming the extra to install, before anything is written
        if scheduler is not None:
            check_scheduler(scheduler)  # a web address is refused at once
    settings = settings or resolve_settings()
    baseline = check_baseline(baseline) if baseline is not None else None
    target = OutputFolder.check(out, force=force)
    everything = discover()
    chosen = select(everything, chapters)
    run = Run(target, target.staging(), settings, chosen,
              [ChapterOutcome(c, "skipped", NOT_SELECTED) for c in everything if c not in chosen],
              baseline=baseline, requested=bool(chapters), record_paths=record_paths)
    client = None
    forks = KernelForks.shared()  # the chapter kernels' template: its imports overlap the preparation of the input
    try:
        prepare_input(run, source, prepare=prepare, embedding_cache=embedding_cache)
        select_chapters(run)
        client, engine_info = dask_client(engine, scheduler, workers)
        # both relative to chapters/: an executed notebook re-runs where the report ends up (beside its input)
        params = dict(source=_notebook_path(run.source, run.staging, target.path),
                      prepared=_notebook_path(run.cache, run.staging, target.path),
                      results_dir="../results", settings=settings.to_params())
        if client is not None:  # every chapter sends its passes to this cluster, open until the last has run
            params["settings"] = replace(settings, scheduler=client.scheduler.address).to_params()
        graph = shared_graph(run.es, settings, run.cache, run.ready, client=client,
                             on_lost=lambda line: cluster_lost(line, engine_info, params, settings))
        jobs, job_budget, note = job_plan(settings.compute().budget, jobs, len(run.ready))
        if note:
            notice(note)
        describe_run(run, target.path, title=title, jobs=jobs, engine_info=engine_info, graph=graph,
                     job_budget=job_budget)
        execute_chapters(run, params, timeout=timeout, jobs=jobs, forks=forks, job_budget=job_budget,
                         check=cluster_check(client, engine_info, params, settings) if client is not None else None)
        if not run.final:
            derive_report_findings(run)
        write_run(run)
        write_metrics(run)
        shutil.copyfile(explore_template(), run.staging / EXPLORE_NOTEBOOK)  # explore.ipynb: docs/explore.md
        files, errors = render(run, formats=formats, renderer=renderer, pdf_engine=pdf_engine, pdf_timeout=pdf_timeout)
        write_run(run)
        target.commit(run.staging)
    except BaseException as exc:
        target.abandon(run.staging, exc)  # removes staging; a write fault becomes one line (OutputError)
        raise
    finally:
        if client is not None:  # a LocalCluster closes with its client
            close_client(client)
    return RunResult(target.path, run.outcomes(), {k: target.path / Path(v).name for k, v in files.items()}, errors)
