"""Logging a report to MLflow: one run per report, the metrics, the decision, the settings and the files.

A report is logged as one MLflow run (:func:`log_report`): every metric of ``metrics.json`` with a value as
``<chapter>.<metric>`` and its interval beside it as ``<chapter>.<metric>.ci_low`` / ``.ci_high`` (names reduced
to what MLflow accepts: letters, digits and ``_-./`` and space; a null value, undefined or infinite, is not
logged); the status and the number of findings per severity as tags (``embeval.status``,
``embeval.findings.<severity>``), with the count of verdicts per level; the run settings and the digest of the
model (a model run's content digest) or of the vectors file as params; ``report.html``, ``report.pdf``,
``metrics.json``, ``run.json`` and the findings table (``findings.csv``) as artifacts. ``compare`` logs one run
per model nested in a run of the comparison (:func:`log_comparison`).

Where to log (:class:`Tracking`) comes from ``--mlflow URI`` or the manifest's ``mlflow: {tracking_uri,
experiment, run_name}``; :meth:`Tracking.check` tells an unreachable server (or mlflow not installed) in one
line before any chapter runs. mlflow is imported only here, when a report is tracked.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import InputError
from ..safe_files import resolve_recorded

#: the experiment runs go to when none is named
DEFAULT_EXPERIMENT = "embeval-report"
#: seconds the reachability check waits for a tracking server
CHECK_TIMEOUT = 10
#: what MLflow accepts in a metric, param or tag name; anything else becomes "_"
_BAD_NAME = re.compile(r"[^A-Za-z0-9_\-./ ]")
#: files of a report folder logged as artifacts (when present)
ARTIFACTS = ("report.html", "report.pdf", "metrics.json", "run.json")
#: files of a comparison folder logged as artifacts (when present)
COMPARISON_ARTIFACTS = ("report.html", "report.pdf", "metrics.json", "comparison.json", "comparison.csv")
#: the longest param value MLflow stores (longer ones are cut, with "…")
PARAM_LENGTH = 6000
#: entities per log_batch request (MLflow's limits: 1000 metrics, 100 params or tags)
BATCH = {"metrics": 1000, "params": 100, "tags": 100}


@dataclass(frozen=True)
class Tracking:
    """Where a report is logged: the tracking URI (``None``: MLflow's own default, ``MLFLOW_TRACKING_URI``), the
    experiment and the run name (``None``: the report's name)."""

    tracking_uri: str | None = None
    experiment: str = DEFAULT_EXPERIMENT
    run_name: str | None = None

    @classmethod
    def resolve(cls, uri: str | None = None, source=None, setting=None) -> "Tracking | None":
        """The tracking of a run: ``setting`` (the API's ``mlflow=``: a URI or a mapping like the manifest's), the
        manifest's ``mlflow`` field when ``source`` is a manifest, and ``uri`` (``--mlflow``) over its
        ``tracking_uri``; None when neither asks for tracking. A relative file path in the manifest is relative
        to the manifest's folder."""
        given = None
        if isinstance(setting, (str, os.PathLike)):
            uri = uri or os.fspath(setting)
        elif isinstance(setting, dict):
            unknown = set(setting) - {"tracking_uri", "experiment", "run_name"}
            if unknown:
                raise InputError(f"mlflow: unknown key(s) {', '.join(sorted(unknown))}; known keys: tracking_uri, "
                                 "experiment, run_name")
            given = cls(setting.get("tracking_uri"), setting.get("experiment") or DEFAULT_EXPERIMENT,
                        setting.get("run_name"))
        if given is None and source is not None:
            given = _manifest_tracking(Path(source))
        if given is None and uri is None:
            return None
        given = given or cls()
        return replace(given, tracking_uri=_normalise_uri(uri)) if uri is not None else given

    def check(self) -> None:
        """Raise :class:`InputError` (one line) when mlflow is not installed or the tracking server cannot be
        reached; creates the experiment when it does not exist yet."""
        target = self.tracking_uri or "MLflow's default tracking URI"
        try:
            import mlflow  # noqa: F401
        except ImportError:
            raise InputError(f"--mlflow {target}: mlflow is not installed; pip install 'embeval-report[mlflow]'") \
                from None
        scheme = urllib.parse.urlparse(self.tracking_uri or "").scheme
        if scheme in ("http", "https"):
            url = self.tracking_uri.rstrip("/") + "/health"
            try:
                with urllib.request.urlopen(url, timeout=CHECK_TIMEOUT) as answer:
                    answer.read()
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                raise InputError(f"--mlflow {self.tracking_uri}: the tracking server cannot be reached ({reason}); "
                                 "start it or give another URI") from None
        try:
            self._experiment_id()
        except Exception as exc:
            raise InputError(f"--mlflow {target}: {_one_line(exc)}") from None

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri)

    def _experiment_id(self) -> str:
        with _quiet(self.tracking_uri):
            client = self.client()
            found = client.get_experiment_by_name(self.experiment)
            return found.experiment_id if found is not None else client.create_experiment(self.experiment)


def _manifest_tracking(path: Path) -> Tracking | None:
    """The manifest's ``mlflow`` field (read and validated with the rest of the manifest), or None."""
    from ..io.manifest import MANIFEST_SUFFIXES, read_manifest

    if path.suffix.lower() not in MANIFEST_SUFFIXES or not path.is_file():
        return None
    field = read_manifest(path).get("mlflow")
    if field is None:
        return None
    uri = field.get("tracking_uri")
    return Tracking(_normalise_uri(uri, path.parent) if uri else None, field.get("experiment") or DEFAULT_EXPERIMENT,
                    field.get("run_name"))


def _normalise_uri(uri: str | None, base: Path | None = None) -> str | None:
    """A plain folder path (or a relative ``file:`` one) as an absolute ``file:`` URI; other URIs unchanged."""
    if uri is None:
        return None
    uri = str(uri)
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme in ("", "file") and len(parsed.scheme) != 1:  # one letter: a Windows drive
        path = Path(urllib.parse.unquote(parsed.path if parsed.scheme else uri)).expanduser()
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        return path.resolve().as_uri()
    return uri


@contextlib.contextmanager
def _quiet(uri: str | None):
    """MLflow's own lines ("View run ... at") on stderr, not on the command's standard output; a ``file:`` store,
    which MLflow keeps in maintenance mode, allowed because it was named explicitly."""
    allow = urllib.parse.urlparse(uri or "").scheme == "file" and "MLFLOW_ALLOW_FILE_STORE" not in os.environ
    if allow:
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if allow:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def metric_name(*parts: str) -> str:
    """``chapter.metric[.ci_low]`` with every character MLflow does not accept as ``_`` (no ``..``, no leading
    ``/``)."""
    name = _BAD_NAME.sub("_", ".".join(str(p) for p in parts))
    return re.sub(r"\.{2,}", ".", name).lstrip("/")


def report_metrics(metrics: dict) -> dict[str, float]:
    """The MLflow metrics of a ``metrics.json`` document: ``<chapter>.<metric>`` and ``.ci_low``/``.ci_high``
    for every non-null number (a name that would repeat after cleaning gets ``_2``, ``_3``)."""
    out: dict[str, float] = {}
    for chapter, entry in (metrics.get("chapters") or {}).items():
        for name, m in (entry.get("metrics") or {}).items():
            base = _unique(metric_name(chapter, name), out)
            for suffix, key in (("", "value"), (".ci_low", "ci_low"), (".ci_high", "ci_high")):
                if isinstance(m.get(key), (int, float)) and not isinstance(m.get(key), bool):
                    out[base + suffix] = float(m[key])
    return out


def _unique(name: str, taken: dict) -> str:
    if name not in taken:
        return name
    i = 2
    while f"{name}_{i}" in taken:
        i += 1
    return f"{name}_{i}"


def report_tags(folder: Path, metrics: dict) -> dict[str, str]:
    """``embeval.status``, ``embeval.findings`` and ``embeval.findings.<severity>`` (when the run recorded
    findings), ``embeval.verdicts.<level>`` and the chapters that failed."""
    from .explore import read_findings

    status, findings = read_findings(folder)
    tags = {"embeval.report": "report"}
    if status is not None:
        tags["embeval.status"] = str(status)
        tags["embeval.findings"] = str(len(findings))
        for severity, count in findings["severity"].value_counts().items():
            tags[f"embeval.findings.{metric_name(severity)}"] = str(count)
    verdicts: dict[str, int] = {}
    failed = []
    for chapter, entry in (metrics.get("chapters") or {}).items():
        failed += [chapter] if entry.get("status") == "failed" else []
        for m in (entry.get("metrics") or {}).values():
            if m.get("verdict"):
                verdicts[m["verdict"]] = verdicts.get(m["verdict"], 0) + 1
    tags.update({f"embeval.verdicts.{k}": str(v) for k, v in verdicts.items()})
    if failed:
        tags["embeval.failed_chapters"] = ", ".join(failed)
    return tags


def report_params(run: dict, folder=None) -> dict[str, str]:
    """The run settings (``run.json``), the options set, the chapters that ran, and the model's digest (a model
    run's) or the vectors file's (blake2b of its bytes, when the input names one file; ``run.json`` records its
    path relative to the report ``folder``)."""
    params = {k: run.get(k) for k in ("name", "source", "seed", "device", "sample_size", "precision",
                                      "memory_budget", "n", "d", "version", "jobs")}
    params.update({f"option.{k}": v for k, v in (run.get("options") or {}).items()})
    params["chapters"] = ", ".join(c["name"] for c in run.get("chapters", []) if c.get("status") == "ok")
    model = run.get("model")
    if model:
        params.update(model=model.get("name"), model_digest=model.get("digest"))
    else:
        source = run.get("source")
        digest = vectors_digest(resolve_recorded(source, folder) if source and folder is not None else source)
        if digest:
            params["vectors_digest"] = digest
    return {metric_name(k): _param_text(v) for k, v in params.items()}


def _param_text(v) -> str:
    text = json.dumps(v) if isinstance(v, (dict, list)) else str(v)
    return text if len(text) <= PARAM_LENGTH else text[:PARAM_LENGTH - 1] + "…"


def vectors_digest(source) -> str | None:
    """blake2b (32 hex digits) of the bytes of the vectors file a source names (the file itself, or a
    manifest's ``vectors`` when it is one file); None for a folder store or an unreadable source."""
    if not source:
        return None
    path = Path(source)
    try:
        from ..io.manifest import MANIFEST_SUFFIXES, read_manifest
        from ..io.stores import store_path

        if path.suffix.lower() in MANIFEST_SUFFIXES:
            path = store_path(read_manifest(path)["vectors"])
        if not path.is_file():
            return None
        h = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        return h.hexdigest()
    except (OSError, InputError, KeyError):
        return None


def _log(client, run_id: str, metrics: dict, params: dict, tags: dict) -> None:
    """Everything in batches within MLflow's limits."""
    from mlflow.entities import Metric, Param, RunTag

    now = int(time.time() * 1000)
    items = list(metrics.items())
    for i in range(0, len(items), BATCH["metrics"]):
        client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in items[i:i + BATCH["metrics"]]])
    for kind, entity, values in (("params", Param, params), ("tags", RunTag, tags)):
        pairs = list(values.items())
        for i in range(0, len(pairs), BATCH[kind]):
            client.log_batch(run_id, **{kind: [entity(k, v) for k, v in pairs[i:i + BATCH[kind]]]})


def log_report(tracking: Tracking, folder, *, parent: str | None = None, run_name: str | None = None) -> str:
    """Log the report in ``folder`` as one MLflow run (see the module docstring); returns its run id. Inside a
    ``compare``, ``parent`` is the comparison's run (the run is nested in it)."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    folder = Path(folder)
    run = json.loads((folder / "run.json").read_text())
    metrics = json.loads((folder / "metrics.json").read_text())
    with _quiet(tracking.tracking_uri):
        client = tracking.client()
        tags = report_tags(folder, metrics) | ({MLFLOW_PARENT_RUN_ID: parent} if parent else {})
        created = client.create_run(tracking._experiment_id(), run_name=run_name or tracking.run_name or run.get("name"))
        run_id = created.info.run_id
        try:
            _log(client, run_id, report_metrics(metrics), report_params(run, folder), tags)
            for name in ARTIFACTS:
                if (folder / name).is_file():
                    client.log_artifact(run_id, str(folder / name))
            _log_findings(client, run_id, folder)
        except BaseException:
            client.set_terminated(run_id, "FAILED")
            raise
        client.set_terminated(run_id)
    return run_id


def _log_findings(client, run_id: str, folder: Path) -> None:
    """``findings.csv``: the findings table (evidence and metrics as JSON), when the run recorded findings."""
    from .explore import read_findings

    status, findings = read_findings(folder)
    if status is None:
        return
    table = findings.copy()
    for c in ("metrics", "evidence"):
        table[c] = [json.dumps(v, default=str) for v in table[c]]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "findings.csv"
        table.to_csv(path, index=False)
        client.log_artifact(run_id, str(path))


def comparison_metrics(folder: Path) -> dict[str, float]:
    """The comparison's numbers per compared metric (``metrics.json``'s ``comparisons``): ``<name>.difference``,
    ``.ci_low``, ``.ci_high``, ``.p_adjusted`` and ``.effect``."""
    doc = json.loads((folder / "metrics.json").read_text())
    out: dict[str, float] = {}
    for name, c in (doc.get("comparisons") or {}).items():
        base = _unique(metric_name(name.replace(": ", ".")), out)
        for key in ("difference", "ci_low", "ci_high", "p_adjusted", "effect"):
            if isinstance(c.get(key), (int, float)) and not isinstance(c.get(key), bool):
                out[f"{base}.{key}"] = float(c[key])
    return out


def log_comparison(tracking: Tracking, folder, models: list[tuple[str, Path]], settings: dict) -> str:
    """Log a comparison: one run of the comparison (its differences, intervals, adjusted p-values and verdict
    counts; comparison.json/.csv, metrics.json and the report as artifacts) with one nested run per model
    (:func:`log_report` of its report folder). Returns the comparison's run id."""
    folder = Path(folder)
    doc = json.loads((folder / "comparison.json").read_text())
    verdicts: dict[str, int] = {}
    for c in doc.get("comparisons", []):
        verdicts[c.get("verdict")] = verdicts.get(c.get("verdict"), 0) + 1
    tags = {"embeval.report": "comparison", "embeval.models": ", ".join(name for name, _ in models),
            **{f"embeval.verdicts.{metric_name(str(k))}": str(v) for k, v in verdicts.items()}}
    params = {metric_name(k): _param_text(v) for k, v in dict(settings, correction=doc.get("correction"),
                                                              effect=doc.get("effect"), level=doc.get("level")).items()}
    with _quiet(tracking.tracking_uri):
        client = tracking.client()
        created = client.create_run(tracking._experiment_id(),
                                    run_name=tracking.run_name or " vs ".join(name for name, _ in models))
        parent = created.info.run_id
        try:
            _log(client, parent, comparison_metrics(folder), params, tags)
            for name in COMPARISON_ARTIFACTS:
                if (folder / name).is_file():
                    client.log_artifact(parent, str(folder / name))
        except BaseException:
            client.set_terminated(parent, "FAILED")
            raise
    for name, report in models:
        log_report(tracking, report, parent=parent, run_name=name)
    with _quiet(tracking.tracking_uri):
        tracking.client().set_terminated(parent)
    return parent


def try_logging(log, *args, **kwargs) -> tuple[str | None, str | None]:
    """``(run_id, None)``, or ``(None, the failure in one line)`` when logging fails after the report was
    written (the report stays; the caller says so)."""
    try:
        return log(*args, **kwargs), None
    except Exception as exc:
        return None, _one_line(exc)


def compared_models(folder) -> list[tuple[str, Path]]:
    """``(name, report folder)`` of each model of a comparison folder (``comparison.json``)."""
    folder = Path(folder)
    doc = json.loads((folder / "comparison.json").read_text())
    return [(m["name"], folder / m["report"]) for m in doc.get("models", [])]
