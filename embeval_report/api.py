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
``scheduler``, ``wait``, ``record_paths``, ``trust_pickles`` (read gensim pickles), ``allow_outside`` (folders a
manifest's paths may lead into) and ``mlflow`` (a tracking URI, or ``{"tracking_uri", "experiment",
"run_name"}``).
Bad input raises :class:`~embeval_report.errors.InputError` with the command line's one-line message.
"""
from __future__ import annotations

import argparse
import contextlib
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
#: the Python function of each command (messages name it)
_FUNCTION = {"run": "evaluate", "compare": "compare"}
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


def evaluate(source, out=None, chapters=None, *, ids=None, metadata=None, name: str | None = None,
             progress: bool = True, **settings) -> Report:
    """Evaluate an embedding set and write its report; return it as a :class:`Report`.

    ``source``: a manifest (YAML), a vectors file (any format the command line reads), an
    :class:`~embeval_report.io.EmbeddingSet`, or an array or a numeric DataFrame (n × d; a DataFrame's index, when
    it is not the default 0..n-1, gives the ids; ``ids``: one per row, optional; ``name``: the set's name,
    default "array"). ``metadata``: with an array, a DataFrame of one row per vector (an ``id`` column, or the ids
    as its index, or rows in the vectors' order) and columns such as ``label``, ``group`` or ``timestamp``, as a
    manifest's ``metadata`` table. An array or set is written into the report's ``embeddings/`` (vectors, ids,
    metadata and a manifest naming the set's side-data files), so the report re-runs without Python.
    ``out``: the report folder (the command line's ``--out`` rules), or None for a temporary folder.
    ``chapters``: names (default: every chapter whose inputs exist). ``progress=False``: no progress lines (as
    ``EMBEVAL_PROGRESS=0``). ``settings``: see the module docstring. Raises :class:`InputError` for bad input,
    before any chapter runs.
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
        if ids is not None or metadata is not None:
            raise InputError(f"evaluate: {'ids' if ids is not None else 'metadata'}= goes with an array; a file's "
                             "ids and metadata come from the file or its manifest")
        path = source
    else:
        path, prepare = None, _writer(source, ids, name, metadata)
    with _one_line(), input_policy(**input_options(args)), _progress(progress):
        kwargs = run_arguments(args)
        tracking = tr.Tracking.resolve(None, path, setting=settings.get("mlflow"))
        if tracking is not None:
            tracking.check()
        with output_lock(out, wait=args.wait):
            result = run_report(path, out, prepare=prepare, **kwargs)
    run_id = _log(tracking, tr.log_report, result.out)
    return Report.open(result.out, files=result.files, render_errors=result.render_errors, mlflow_run=run_id,
                       _keep=keep)


def compare(*sources, out=None, names=None, chapters=None, correction: str = "holm", progress: bool = True,
            **settings) -> Comparison:
    """Run (or reuse) the same chapters on two or more models and compare them unit by unit, as ``embeval-report
    compare`` does; return a :class:`Comparison`.

    Each source is a manifest or vectors file (run into ``out/models/<name>/``), an earlier report folder or a
    :class:`Report` (reused), or an :class:`~embeval_report.io.EmbeddingSet` or array (written to a temporary
    manifest first). ``names``: one per model (default: each manifest's ``name:`` or the file name).
    ``progress=False``: no progress lines.
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
        with _one_line(), input_policy(**input_options(args)), _progress(progress):
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
                    progress=lambda line: None, record_paths=args.record_paths)
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
    actions = _actions(command)
    for key, value in settings.items():
        if key in _CONVERTED:
            continue
        if key not in vars(args) or key in _REFUSED:
            known = sorted((set(vars(args)) - _REFUSED) | set(_CONVERTED))
            raise TypeError(f"{_FUNCTION[command]}: unknown setting {key!r}; settings: {', '.join(known)}")
        setattr(args, key, _checked(command, actions[key], key, value))
    args.options = _options(command, settings.get("options"))
    mde = settings.get("mde")
    if isinstance(mde, dict):
        mde = ",".join(f"{k}={v}" for k, v in mde.items())
    _expect(command, "mde", mde, mde is None or _plain(mde) or isinstance(mde, (list, tuple))
            and all(_plain(m) for m in mde),
            "a number, a string such as '2%' or 'mrr=0.02', or a list or dict of them")
    args.mde = None if mde is None else [str(m) for m in (mde if isinstance(mde, (list, tuple)) else [mde])]
    formats = settings.get("formats", args.formats)
    _expect(command, "formats", formats, _strings(formats), "'html', 'pdf', 'html,pdf' or a list of them")
    args.formats = tuple(f.strip() for f in formats.split(",")) if isinstance(formats, str) else tuple(formats)
    _expect(command, "chapters", chapters, chapters is None or _strings(chapters),
            "a chapter name, 'isotropy,retrieval' or a list of names")
    mlflow = settings.get("mlflow")
    _expect(command, "mlflow", mlflow, mlflow is None or isinstance(mlflow, (str, os.PathLike, dict)),
            "a tracking URI or a dict with tracking_uri, experiment, run_name")
    args.chapters = [chapters] if isinstance(chapters, str) else (list(chapters) if chapters is not None else None)
    if isinstance(args.chapters, list) and len(args.chapters) == 1 and "," in args.chapters[0]:
        args.chapters = [c.strip() for c in args.chapters[0].split(",") if c.strip()]
    return args


def _actions(command: str) -> dict:
    """The command line's argparse actions of ``command``, by destination."""
    from .cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices[command]._actions}


def _plain(value) -> bool:
    """A string or a real number (not a bool): what a command-line value can be."""
    return isinstance(value, (str, int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _strings(value) -> bool:
    return isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))


def _expect(command: str, key: str, value, ok: bool, what: str) -> None:
    """One line naming the keyword when a setting is not of its type (before anything runs)."""
    if not ok:
        raise InputError(f"{_FUNCTION.get(command, command)}: {key}={value!r}: expected {what}, got "
                         f"{type(value).__name__}")


def _checked(command: str, action: argparse.Action, key: str, value):
    """A setting checked against its command-line option's type and choices (the command line's own parsing: a
    value of another type never reaches a chapter's kernel)."""
    if value is None and action.default is None:
        return None
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        _expect(command, key, value, isinstance(value, (bool, np.bool_)), "True or False")
        return bool(value)
    if isinstance(action, argparse._AppendAction):  # one path or string, or a list of them
        values = [value] if isinstance(value, (str, os.PathLike)) else value
        ok = isinstance(values, (list, tuple)) and all(isinstance(v, (str, os.PathLike)) for v in values)
        _expect(command, key, value, ok, "a path or a list of paths")
        return [os.fspath(v) for v in values]
    if action.choices is not None:
        _expect(command, key, value, isinstance(value, str) and value in action.choices,
                f"one of {', '.join(map(repr, action.choices))}")
        return value
    if action.type is int:
        _expect(command, key, value, isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)),
                "a whole number")
        return int(value)
    if action.type is float:
        _expect(command, key, value, _plain(value) and not isinstance(value, str), "a number")
        return float(value)
    if action.type is Path:
        _expect(command, key, value, isinstance(value, (str, os.PathLike)), "a path")
        return Path(value)
    if action.type is None:
        _expect(command, key, value, isinstance(value, str), "a string")
    return value


def _options(command: str, options) -> list:
    """``options={"k": 20}`` as ``--set k=20`` gives them: each value a string, a number or a bool (anything else,
    a tuple, a path, is refused here, as ``--set`` refuses a bad value)."""
    if options is None:
        return []
    where = _FUNCTION.get(command, command)
    _expect(command, "options", options, isinstance(options, dict), 'a dict such as {"k": 20}')
    for name, value in options.items():
        if not (_plain(value) or isinstance(value, (bool, np.bool_))):
            raise InputError(f"{where}: options={{{name!r}: {value!r}}}: expected a string, a number or True/False "
                             f"(as --set {name}=VALUE takes it), got {type(value).__name__}")
    return [(str(name), str(value).lower() if isinstance(value, (bool, np.bool_)) else str(value))
            for name, value in options.items()]


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
            raise InputError(keywords(" ".join(str(exc).split()))) from None
        if (isinstance(exc, OSError) and write_fault(exc) is None and exc.filename is not None
                and exc.errno in INPUT_ERRNOS):
            raise InputError(f"{os.fsdecode(exc.filename)}: {exc.strerror}") from None
        return False


def keywords(text: str) -> str:
    """A command-line message as a Python caller reads it: each ``--option`` the API takes as a keyword named as
    that keyword (``--force`` → ``force=True``, ``--chapters x`` → ``chapters=x``, ``--chapters`` alone →
    ``chapters``)."""
    import re

    actions = _actions("compare") | _actions("run")

    def keyword(match):
        flag = match.group(1)
        action = next((a for a in actions.values() if f"--{flag}" in a.option_strings), None)
        if action is None or action.dest in _REFUSED:
            return match.group(0)
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            return f"{action.dest}=True" + (match.group(2) or "")
        return f"{action.dest}=" if match.group(2) else action.dest  # "--chapters x" / "out of --chapters"

    return re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)(\s(?=[^\s(]))?", keyword, text)


@contextlib.contextmanager
def _progress(shown: bool):
    """``progress=False``: ``EMBEVAL_PROGRESS=0`` for the call (restored after)."""
    if not isinstance(shown, (bool, np.bool_)):
        raise InputError(f"progress={shown!r}: expected True or False, got {type(shown).__name__}")
    if shown:
        yield
        return
    before = os.environ.get("EMBEVAL_PROGRESS")
    os.environ["EMBEVAL_PROGRESS"] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("EMBEVAL_PROGRESS", None)
        else:
            os.environ["EMBEVAL_PROGRESS"] = before


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


def _writer(source, ids, name, metadata=None):
    """``prepare(staging) -> manifest``: an array or an EmbeddingSet written into the report's ``embeddings/``."""
    vectors, ids, metadata, fields, name = _set_parts(source, ids, name, metadata)

    def prepare(staging: Path) -> Path:
        return write_set(staging / "embeddings", vectors, ids, metadata, fields, name)

    return prepare


def _set_parts(source, ids, name, metadata=None):
    """Vectors (validated: the command line's checks and messages, labelled "array"), ids, metadata, side-data
    fields and the name of an array, a numeric DataFrame or an EmbeddingSet."""
    from .io.matrix import finalize
    from .kernels import as_numpy

    if isinstance(source, EmbeddingSet):
        if ids is not None or metadata is not None:
            raise InputError(f"evaluate: {'ids' if ids is not None else 'metadata'}= goes with an array; an "
                             "EmbeddingSet carries its ids and metadata")
        return (source.vectors, source.ids if source.ids_given else None, source.metadata, dict(source.fields),
                name or source.name)
    if isinstance(source, pd.DataFrame):
        raw, ids = _frame_vectors(source, ids)
    else:
        try:
            raw = as_numpy(source) if hasattr(source, "detach") else np.asarray(source)
        except (TypeError, ValueError) as exc:
            raise InputError(f"evaluate: expected a manifest, a vectors file, an EmbeddingSet or an n x d array, "
                             f"got {type(source).__name__} ({exc})") from None
    vectors, ids = finalize(raw, ids, "array", "ids")
    return vectors, ids, _metadata_frame(metadata, ids, len(vectors)), {}, name or "array"


def _default_index(index: pd.Index) -> bool:
    """Whether a DataFrame's index is pandas' default 0..n-1 (row positions, not ids)."""
    return isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1 and index.name is None


def _frame_vectors(frame: pd.DataFrame, ids) -> tuple[np.ndarray, object]:
    """A DataFrame of vectors: every column numeric (one naming the column otherwise: labels go to metadata=);
    its index, when it is not the default, gives the ids."""
    bad = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c]) or
           pd.api.types.is_bool_dtype(frame[c])]
    if bad:
        raise InputError(f"evaluate: column {bad[0]!r} of the DataFrame holds {frame[bad[0]].dtype} values, not "
                         f"numbers; pass the vector columns as the array and the others as metadata=, e.g. "
                         f"evaluate(df.drop(columns={bad!r}), metadata=df[{bad!r}])")
    if not _default_index(frame.index):
        own = frame.index.astype(str)
        if ids is not None and list(map(str, ids)) != list(own):
            raise InputError("evaluate: ids= differ from the DataFrame's index; give one of them (the index is "
                             "taken as the ids)")
        ids = list(own)
    return frame.to_numpy(), ids


def _metadata_frame(metadata, ids, n: int) -> pd.DataFrame | None:
    """``metadata=`` as the set's metadata table: indexed by id (its ``id`` column, its index, or, with the default
    index and one row per vector, the vectors' order), every id one of the vectors'."""
    if metadata is None:
        return None
    if isinstance(metadata, pd.Series):
        metadata = metadata.to_frame()
    if not isinstance(metadata, pd.DataFrame):
        raise InputError(f"evaluate: metadata= expected a pandas DataFrame (one row per vector: an 'id' column or the "
                         f"ids as its index, and columns such as label), got {type(metadata).__name__}")
    table = metadata.copy()
    table.columns = [str(c) for c in table.columns]
    known = list(ids) if ids is not None else [str(i) for i in range(n)]
    if "id" in table.columns:
        table = table.set_index("id")
    elif _default_index(table.index):
        if len(table) != n:
            raise InputError(f"evaluate: metadata= has {len(table):,} rows and no ids (no 'id' column, the default "
                             f"index) for {n:,} vectors; give one row per vector in their order, or the ids")
        table.index = known
    table.index = table.index.astype(str).rename("id")
    dup = table.index[table.index.duplicated()]
    if len(dup):
        raise InputError(f"evaluate: metadata=, id {dup[0]!r}: appears more than once; expected one row per id")
    unknown = table.index.difference(pd.Index(known))
    if len(unknown):
        raise InputError(f"evaluate: metadata=, id {unknown[0]!r}: not one of the vectors' ids "
                         f"(e.g. {', '.join(known[:3])}); {len(unknown):,} such row(s)")
    return table.reindex(pd.Index(known, name="id"))


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
