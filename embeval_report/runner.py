"""Run a report: validate the input once, execute each chapter notebook, assemble, render.

The report is built in a hidden staging folder beside ``out`` and moved into place at the
end, so an interrupted run never leaves a half-written report at ``out``.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from . import __version__
from .chapters import Chapter, describe_input, discover, select
from .io import EmbeddingSet, load_source, save_prepared
from .kernels import resolve_device
from .progress import progress
from .render import render_report
from .results import read_results
from .thresholds import SEVERITY

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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

    def worst_verdict(self) -> str | None:
        """The most severe verdict recorded anywhere in the report."""
        metrics = json.loads((self.out / "metrics.json").read_text())
        best = None
        for ch in metrics["chapters"].values():
            for m in ch["metrics"].values():
                if SEVERITY[m["verdict"]] > SEVERITY[best]:
                    best = m["verdict"]
        return best


def _staging_dir(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))


def _move_into_place(staging: Path, out: Path) -> None:
    """Replace ``out`` by ``staging`` (old report removed only once the new one is in place)."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    staging.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _error_text(exc: BaseException) -> str:
    ename = getattr(exc, "ename", None)
    text = f"{ename}: {getattr(exc, 'evalue', '')}" if ename else f"{type(exc).__name__}: {exc}"
    return ANSI.sub("", text).strip()


def execute_chapter(ch: Chapter, staging: Path, params: dict, *, timeout: int | None = None) -> ChapterOutcome:
    """Execute one chapter in its own kernel; failures are caught and recorded, never raised."""
    import papermill as pm

    target = staging / "chapters" / ch.filename
    t0 = time.time()
    status, reason = "ok", ""
    try:
        pm.execute_notebook(str(ch.notebook), str(target), parameters=params, kernel_name="python3",
                            progress_bar=False, cwd=str(target.parent), execution_timeout=timeout,
                            extra_arguments=["--IPKernelApp.log_level=CRITICAL"])
    except Exception as exc:  # a failing chapter must not lose the report
        status, reason = "failed", _error_text(exc)
    if target.exists():
        nb = nbformat.read(target, as_version=4)
        nb.metadata.setdefault("embeval", {}).update(status=status, error=reason or None)
        nbformat.write(nb, target)
    else:  # papermill could not even start: leave a notebook that says so
        nb = nbformat.read(ch.notebook, as_version=4)
        nb.metadata["embeval"].update(status=status, error=reason or None)
        nbformat.write(nb, target)
    return ChapterOutcome(ch, status, reason, time.time() - t0)


def _notebook_path(path: Path, staging: Path) -> str:
    """A path as the chapter notebooks (cwd ``chapters/``) should see it."""
    path = Path(path).resolve()
    try:
        return os.path.relpath(path, staging / "chapters") if path.is_relative_to(staging) else str(path)
    except ValueError:
        return str(path)


def run_report(source, out, *, chapters: list[str] | None = None, seed: int = 0, device: str = "auto",
               sample_size: int | None = None, renderer: str = "auto", formats=("html", "pdf"),
               title: str | None = None, timeout: int | None = None, es: EmbeddingSet | None = None,
               prepare=None) -> RunResult:
    """Build a complete report for ``source`` (a manifest or a vectors file) at ``out``.

    ``prepare(staging) -> source`` may create the input inside the staging folder (the demo
    does, so its data travels with the report).
    """
    out = Path(out).resolve()
    dev = str(resolve_device(device))
    staging = _staging_dir(out)
    try:
        if prepare is not None:
            source = prepare(staging)
        es = es or load_source(source)
        cache = staging / ".prepared"
        save_prepared(es, cache)
        for sub in ("chapters", "results"):
            (staging / sub).mkdir()
        all_chapters = discover()
        chosen = select(all_chapters, chapters)
        summary = [c for c in chosen if c.name == "summary"]
        content = [c for c in chosen if c.name != "summary"]
        base = dict(source=_notebook_path(Path(source), staging), prepared=str(cache),
                    results_dir="../results", seed=seed, device=dev, sample_size=sample_size)
        outcomes = []
        for ch in progress(content, desc="chapters", total=len(content)):
            missing = ch.missing(es)
            if missing:
                outcomes.append(ChapterOutcome(ch, "skipped", "needs " + ", ".join(map(describe_input, missing))))
                continue
            outcomes.append(execute_chapter(ch, staging, dict(base, chapter=ch.name), timeout=timeout))
        not_selected = [c for c in all_chapters if c not in chosen]
        outcomes += [ChapterOutcome(c, "skipped", "not selected (--chapters)") for c in not_selected]
        final_source = Path(source).resolve()
        if final_source.is_relative_to(staging):  # input created inside the report (the demo)
            final_source = out / final_source.relative_to(staging)
        run_info = dict(title=title or f"Embedding evaluation: {es.name}", name=es.name, source=str(final_source),
                        seed=seed, device=dev, version=__version__, n=es.n, d=es.d,
                        generated=_dt.datetime.now().astimezone().isoformat(timespec="seconds"))
        _write_plan(staging, outcomes, run_info)
        for ch in summary:
            outcomes.insert(0, execute_chapter(ch, staging, dict(base, chapter=ch.name), timeout=timeout))
        _write_metrics(staging, outcomes, run_info)
        shutil.rmtree(cache, ignore_errors=True)
        files, errors = {}, {}
        for fmt in formats:
            try:
                files.update(render_report(staging, title=run_info["title"], formats=(fmt,), renderer=renderer))
            except Exception as exc:  # keep the other format and the notebooks
                errors[fmt] = _error_text(exc)
        _move_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    files = {k: out / Path(v).name for k, v in files.items()}
    return RunResult(out, outcomes, files, errors)


def _write_plan(staging: Path, outcomes: list[ChapterOutcome], run_info: dict) -> None:
    """``run.json``: run settings and every chapter's status, read by the summary chapter."""
    chapters = [dict(name=o.chapter.name, title=o.chapter.title, order=o.chapter.order, status=o.status,
                     reason=o.reason, requires=list(o.chapter.requires), seconds=round(o.seconds, 2))
                for o in sorted(outcomes, key=lambda o: o.chapter.order)]
    (staging / "run.json").write_text(json.dumps(dict(run_info, chapters=chapters), indent=2))


def _write_metrics(staging: Path, outcomes: list[ChapterOutcome], run_info: dict) -> None:
    """``metrics.json`` in the fixed schema, from the chapters' recorded results."""
    from .results import METRIC_KEYS

    _write_plan(staging, outcomes, run_info)
    recorded = read_results(staging / "results")
    chapters = {}
    for o in sorted(outcomes, key=lambda o: o.chapter.order):
        metrics = recorded.get(o.chapter.name, {}).get("metrics", {}) if o.status != "skipped" else {}
        chapters[o.chapter.name] = dict(status=o.status, reason=o.reason or None,
                                        metrics={k: {f: m.get(f) for f in METRIC_KEYS} for k, m in metrics.items()})
    doc = dict(version=__version__, source=run_info["source"], seed=run_info["seed"], device=run_info["device"],
               chapters=chapters)
    (staging / "metrics.json").write_text(json.dumps(doc, indent=2))
