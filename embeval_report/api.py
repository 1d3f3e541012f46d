"""From Python: :func:`evaluate` and :func:`compare`, the command line's ``run`` and ``compare`` as functions.

::

    from embeval_report import evaluate
    report = evaluate("my-model.yaml", chapters=["isotropy", "retrieval"], seed=1)
    report.status, report.findings, report.metrics      # the decision and the numbers, as DataFrames
    report                                               # in JupyterLab: the decision block

The same validation, chapters and report as the command line (:func:`~embeval_report.report.runner.run_report`,
:func:`~embeval_report.report.compare.run_compare`), with the same settings as keywords: ``seed``, ``device``,
``sample_size``, ``precision``, ``memory_budget``, ``mde``, ``options={"k": 20}``, ``formats``, ``renderer``,
``pdf_engine``, ``pdf_timeout``, ``jobs``, ``title``, ``timeout``, ``force``, ``embedding_cache``, ``dask``, ``dask_workers``,
``scheduler``, ``wait``, ``trust_pickles`` (read gensim pickles), ``allow_outside`` (folders a
manifest's paths may lead into) and ``mlflow`` (a tracking URI, or ``{"tracking_uri", "experiment", "run_name"}``).
Bad input raises :class:`~embeval_report.errors.InputError` with the command line's one-line message.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import InputError
from .io import EmbeddingSet
from .report.explore import Exploration

#: keywords that are not command-line options of their own name
_CONVERTED = ("options", "mde", "formats", "chapters", "mlflow")
#: command-line options that are arguments of their own (or exit statuses) in Python
_REFUSED = {"command", "out", "source", "sources", "names", "correction", "text", "fail_on", "fail_on_regression"}


@dataclass(repr=False)
class Report(Exploration):
    """A written report (:func:`evaluate`): ``path``, ``run`` (run.json), ``status`` and ``findings`` (as the run
    recorded them; None and an empty table when it recorded none), ``metrics`` (one row per metric: chapter,
    name, value, ci_low, ci_high, verdict, direction, label, reference), what each chapter did (``chapters``),
    the rendered ``files``, ``render_errors`` and the MLflow run id (``mlflow_run``). With ``out=None`` the folder
    is temporary and lives as long as this object. The exploration helpers (:meth:`neighbours`, :meth:`worst`,
    :meth:`evidence`, :meth:`scatter`, ...) work on it too."""

    files: dict = field(default_factory=dict)
    render_errors: dict = field(default_factory=dict)
    mlflow_run: str | None = None
    _keep: object = None   # the temporary folder of out=None, removed with this object

    @property
    def chapters(self) -> pd.DataFrame:
        """Each chapter's status, the reason when skipped or failed, and its seconds."""
        rows = [{k: c.get(k) for k in ("name", "title", "status", "reason", "seconds")}
                for c in self.run.get("chapters", [])]
        return pd.DataFrame(rows, columns=["name", "title", "status", "reason", "seconds"])


@dataclass(repr=False)
class Comparison:
    """A written comparison (:func:`compare`): ``path``, ``table`` (one row per pair of models × metric measured
    per unit on both: the difference B − A, its intervals, the adjusted p-value and the verdict; empty when the
    models share no per-unit chapter), ``side_by_side`` (every metric all models recorded: each model's own value,
    interval and verdict, not paired), ``models`` (each model's :class:`Report`), ``files`` and the MLflow run id
    of the comparison (``mlflow_run``)."""

    path: Path
    table: pd.DataFrame
    models: list
    files: dict = field(default_factory=dict)
    mlflow_run: str | None = None
    _keep: object = None
    side_by_side: pd.DataFrame = field(default_factory=pd.DataFrame)

    def rollup(self) -> list[str]:
        """Per pair of models and chapter: how many metrics each model wins, shows no difference, ..."""
        from .report.compare import rollup_lines

        return rollup_lines(self.table) if len(self.table) else []

    @property
    def note(self) -> str:
        """One line when the models share no per-unit chapter (nothing is tested), else ""."""
        from .report.compare import no_pairs_line

        return "" if len(self.table) else no_pairs_line([m.run.get("name") or m.path.name for m in self.models])

    def __repr__(self) -> str:
        return (f"Comparison({str(self.path)!r}, {len(self.models)} models, {len(self.table)} comparisons, "
                f"{len(self.side_by_side)} metrics side by side)")

    def _repr_html_(self) -> str:
        import html

        from .report.explore import _href

        report = self.path / "report.html"
        link = (f'<p><a href="{html.escape(_href(report))}">report.html</a> · {html.escape(str(self.path))}</p>'
                if report.exists() else f"<p>{html.escape(str(self.path))}</p>")
        items = "".join(f"<li>{html.escape(line)}</li>" for line in self.rollup()) or \
            f"<li>{html.escape(self.note)}</li>"
        names = " vs ".join(html.escape(m.run.get("name") or m.path.name) for m in self.models)
        side = "" if len(self.table) or not len(self.side_by_side) else self.side_by_side.to_html(index=False)
        return f"<div><h4>Model comparison: {names}</h4><ul>{items}</ul>{side}{link}</div>"


def evaluate(source, out=None, chapters=None, *, ids=None, name: str | None = None, **settings) -> Report:
    """Evaluate an embedding set and write its report; return it as a :class:`Report`.

    ``source``: a manifest (YAML), a vectors file (any format the command line reads), an
    :class:`~embeval_report.io.EmbeddingSet`, or an array (n × d; ``ids``: one per row, optional; ``name``:
    the set's name, default "array"). An array or set is written into the report's ``embeddings/`` (vectors,
    ids, metadata and a manifest naming the set's side-data files), so the report re-runs without Python.
    ``out``: the report folder (the command line's ``--out`` rules), or None for a temporary folder.
    ``chapters``: names (default: every chapter whose inputs exist). ``settings``: see the module docstring.
    Raises :class:`InputError` for bad input, before any chapter runs.
    """
    from .cli import input_options, run_arguments
    from .io.policy import input_policy
    from .report import tracking as tr
    from .report.outdir import output_lock
    from .report.runner import run_report

    args = _arguments("run", settings, chapters)
    out, keep = _out(out, "report")
    prepare = None
    if isinstance(source, (str, os.PathLike)):
        if ids is not None:
            raise InputError("evaluate: ids= goes with an array; a file's ids come from the file or its manifest")
        path = source
    else:
        path, prepare = None, _writer(source, ids, name)
    with _one_line(), input_policy(**input_options(args)):
        kwargs = run_arguments(args)
        tracking = tr.Tracking.resolve(None, path, setting=settings.get("mlflow"))
        if tracking is not None:
            tracking.check()
        with output_lock(out, wait=args.wait):
            result = run_report(path, out, prepare=prepare, **kwargs)
    run_id = _log(tracking, tr.log_report, result.out)
    return Report.open(result.out, files=result.files, render_errors=result.render_errors, mlflow_run=run_id,
                       _keep=keep)


def compare(*sources, out=None, names=None, chapters=None, correction: str = "holm", **settings) -> Comparison:
    """Run (or reuse) the same chapters on two or more models and compare them unit by unit, as ``embeval-report
    compare`` does; return a :class:`Comparison`.

    Each source is a manifest or vectors file (run into ``out/models/<name>/``), an earlier report folder or a
    :class:`Report` (reused), or an :class:`~embeval_report.io.EmbeddingSet` or array (written to a temporary
    manifest first). ``names``: one per model (default: each manifest's ``name:`` or the file name).
    """
    from .cli import input_options
    from .io.policy import input_policy
    from .report import tracking as tr
    from .report.compare import read_side_by_side, run_compare
    from .report.outdir import output_lock

    args = _arguments("compare", settings, chapters)
    out, keep = _out(out, "comparison")
    inputs = tempfile.TemporaryDirectory(prefix="embeval-compare-inputs-")
    paths = [_as_path(s, Path(inputs.name) / f"model-{i}", f"model-{i}") for i, s in enumerate(sources, 1)]
    try:
        with _one_line(), input_policy(**input_options(args)):
            from .cli import _check_formats, _settings

            _check_formats(args.formats)
            chosen = _settings(args)
            tracking = next((t for t in (tr.Tracking.resolve(None, p, setting=settings.get("mlflow")) for p in paths)
                             if t is not None), None)
            if tracking is not None:
                tracking.check()
            with output_lock(out, wait=args.wait):
                folder, table, files = run_compare(
                    paths, out, names=names, settings=chosen, chapters=args.chapters, correction=correction,
                    renderer=args.renderer, pdf_engine=args.pdf_engine, formats=args.formats, title=args.title,
                    timeout=args.timeout, force=args.force, jobs=args.jobs, embedding_cache=args.embedding_cache,
                    pdf_timeout=args.pdf_timeout,
                    progress=lambda line: None)
    finally:
        inputs.cleanup()
    models = tr.compared_models(folder)
    run_id = _log(tracking, tr.log_comparison, folder, models, dict(seed=chosen.seed, device=chosen.device))
    return Comparison(folder, table, [Report.open(path) for _, path in models], files, run_id, keep,
                      read_side_by_side(folder))


# ------------------------------------------------------------------------------------------------ helpers


def _arguments(command: str, settings: dict, chapters) -> argparse.Namespace:
    """The command line's options for ``command`` at their defaults, with ``settings`` applied."""
    from .cli import defaults

    args = defaults(command)
    for key, value in settings.items():
        if key in _CONVERTED:
            continue
        if key not in vars(args) or key in _REFUSED:
            known = sorted((set(vars(args)) - _REFUSED) | set(_CONVERTED))
            raise TypeError(f"{command}: unknown setting {key!r}; settings: {', '.join(known)}")
        setattr(args, key, value)
    args.options = list((settings.get("options") or {}).items())
    mde = settings.get("mde")
    if isinstance(mde, dict):
        mde = ",".join(f"{k}={v}" for k, v in mde.items())
    args.mde = None if mde is None else [str(m) for m in (mde if isinstance(mde, (list, tuple)) else [mde])]
    formats = settings.get("formats", args.formats)
    args.formats = tuple(f.strip() for f in formats.split(",")) if isinstance(formats, str) else tuple(formats)
    args.chapters = [chapters] if isinstance(chapters, str) else (list(chapters) if chapters is not None else None)
    if isinstance(args.chapters, list) and len(args.chapters) == 1 and "," in args.chapters[0]:
        args.chapters = [c.strip() for c in args.chapters[0].split(",") if c.strip()]
    return args


def _out(out, what: str) -> tuple[Path, object]:
    """The output folder, or a new temporary one (returned too, to keep it alive)."""
    if out is not None:
        return Path(out), None
    keep = tempfile.TemporaryDirectory(prefix=f"embeval-{what}-")
    return Path(keep.name) / what, keep


class _one_line:
    """An OSError reading an input the user named, as the command line says it (one line, an InputError)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        from .cli import INPUT_ERRNOS
        from .report.outdir import write_fault

        if isinstance(exc, InputError):
            raise InputError(" ".join(str(exc).split())) from None
        if (isinstance(exc, OSError) and write_fault(exc) is None and exc.filename is not None
                and exc.errno in INPUT_ERRNOS):
            raise InputError(f"{os.fsdecode(exc.filename)}: {exc.strerror}") from None
        return False


def _log(tracking, log, *args) -> str | None:
    """Log to MLflow after the report is written; a failure is a warning (the report stays)."""
    import warnings

    from .report.tracking import try_logging

    if tracking is None:
        return None
    run_id, error = try_logging(log, tracking, *args)
    if error:
        warnings.warn(f"logging to MLflow failed ({tracking.tracking_uri}): {error}; the report is written",
                      RuntimeWarning, stacklevel=3)
    return run_id


def _writer(source, ids, name):
    """``prepare(staging) -> manifest``: an array or an EmbeddingSet written into the report's ``embeddings/``."""
    vectors, ids, metadata, fields, name = _set_parts(source, ids, name)

    def prepare(staging: Path) -> Path:
        return write_set(staging / "embeddings", vectors, ids, metadata, fields, name)

    return prepare


def _set_parts(source, ids, name):
    """Vectors (validated: the command line's checks and messages, labelled "array"), ids, metadata, side-data
    fields and the name of an array or an EmbeddingSet."""
    from .io.matrix import finalize
    from .kernels import as_numpy

    if isinstance(source, EmbeddingSet):
        if ids is not None:
            raise InputError("evaluate: ids= goes with an array; an EmbeddingSet carries its ids")
        return (source.vectors, source.ids if source.ids_given else None, source.metadata, dict(source.fields),
                name or source.name)
    try:
        raw = as_numpy(source) if hasattr(source, "detach") else np.asarray(source)
    except (TypeError, ValueError) as exc:
        raise InputError(f"evaluate: expected a manifest, a vectors file, an EmbeddingSet or an n x d array, got "
                         f"{type(source).__name__} ({exc})") from None
    vectors, ids = finalize(raw, ids, "array", "ids")
    return vectors, ids, None, {}, name or "array"


def write_set(folder: Path, vectors, ids, metadata, fields: dict, name: str) -> Path:
    """``folder/{vectors.npy, ids.txt, metadata.parquet, manifest.yaml}``: the manifest names the files (relative
    paths) and carries ``fields`` (a loaded set's side-data fields, absolute paths) as they are."""
    import yaml

    from .io.files import ids_fit_text, save_npy
    from .io.policy import absolute_paths, register_written

    folder.mkdir(parents=True, exist_ok=True)
    save_npy(folder / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
    manifest = {"name": name, "vectors": "vectors.npy"}
    if ids is not None:
        if not ids_fit_text(np.asarray(ids, dtype=object)):
            bad = next((i for i in ids if i != i.strip() or "\n" in i or "\r" in i), ids[0])
            raise InputError(f"ids: id {bad!r} has surrounding spaces or a line break; it cannot be written to "
                             "ids.txt (one id per line)")
        (folder / "ids.txt").write_text("".join(f"{i}\n" for i in ids), encoding="utf-8")
        manifest["ids"] = "ids.txt"
    if metadata is not None:
        metadata.rename_axis("id").reset_index().to_parquet(folder / "metadata.parquet", index=False)
        manifest["metadata"] = "metadata.parquet"
    manifest.update({k: v for k, v in fields.items() if k not in manifest})
    path = folder / "manifest.yaml"
    path.write_text("# written by embeval_report.evaluate from a Python object\n"
                    + yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True), encoding="utf-8")
    register_written(path, absolute_paths(fields))  # the set's own files, where it was loaded from
    return path


def _as_path(source, folder: Path, name: str):
    """A compare source as a path: a path as given, a Report's folder, an array or set written to ``folder``."""
    if isinstance(source, (str, os.PathLike)):
        return Path(source)
    if isinstance(source, Exploration):
        return source.path
    vectors, ids, metadata, fields, set_name = _set_parts(source, None, None if isinstance(source, EmbeddingSet)
                                                          else name)
    return write_set(folder, vectors, ids, metadata, fields, set_name)
