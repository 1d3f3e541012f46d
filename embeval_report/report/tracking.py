"""Logging a report to MLflow: one run per report, the metrics, the decision, the settings and the files.

A report is logged as one MLflow run (:func:`log_report`): every metric of ``metrics.json`` with a value as
``<chapter>.<metric>``, its interval beside it as ``<chapter>.<metric>.ci_low`` / ``.ci_high``, the units it is
over as ``.n`` and, where the interval excludes the value, ``.outside_ci`` (1) and the ``.bias_corrected`` estimate
(names reduced to what MLflow accepts: letters, digits and ``_-./`` and space; a null value, undefined or
infinite, is not logged); the status as a number (``embeval.status_level``: 0 healthy, 1 concerning, 2
problematic, 3 not evaluated) and the findings and verdicts per level as counts (``embeval.findings.<severity>``,
``embeval.verdicts.<level>``), with the status as the tag ``embeval.status``; the run settings and the digest of
the model (a model run's content digest) or of the vectors file as params, the vectors as the run's dataset input;
``report.html``, ``report.pdf``, ``metrics.json``, ``run.json``, the findings table (``findings.csv``) and the
metrics table (``metrics.csv``: slice, interval method, citations) as artifacts. ``compare`` logs one run per model
nested in a run of the comparison (:func:`log_comparison`).

Where to log (:class:`Tracking`) comes from ``--mlflow URI`` or the manifest's ``mlflow: {tracking_uri,
experiment, run_name}``; a path ending in ``.db``/``.sqlite`` is an SQLite database, credentials in an http(s) URI
(``http://user:pass@host``) are taken off it and given to MLflow's client as ``MLFLOW_TRACKING_USERNAME`` /
``MLFLOW_TRACKING_PASSWORD`` (never printed); :meth:`Tracking.check` tells an unreachable server (or mlflow not
installed) in one line before any chapter runs. mlflow is imported only here, when a report is tracked.

A manifest is input, so its ``tracking_uri`` is trusted less than ``--mlflow``: a database or store path there is
confined to the manifest's folder like its other paths (:func:`~embeval_report.io.manifest.read_manifest`), and
a server it names gets the environment's credentials (:data:`ENV_CREDENTIALS`, ``~/.mlflow/credentials``) only
when it is the server of ``MLFLOW_TRACKING_URI`` (same scheme, host and port); else the run stops in one line
(:meth:`Tracking.check_credentials`) before anything is sent.
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
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import InputError
from ..safe_files import resolve_recorded

#: the experiment runs go to when none is named
DEFAULT_EXPERIMENT = "embeval-report"
#: seconds the reachability check waits for a tracking server
CHECK_TIMEOUT = 10
#: what MLflow accepts in a metric, param or tag name; anything else becomes "_"
_BAD_NAME = re.compile(r"[^A-Za-z0-9_\-./ ]")
#: a report's status as a number (``embeval.status_level``): a filter ``>= 2`` finds every report a
#: ``--fail-on problematic`` gate stops, a report that evaluated nothing included
STATUS_LEVELS = {"healthy": 0, "concerning": 1, "problematic": 2, "not evaluated": 3}
#: a path with one of these suffixes is an SQLite database (``sqlite:///`` URI), not a file store
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
#: user:password in a URI, as messages show it
_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^/@:\s]*)(?::[^/@\s]*)?@", re.I)
#: files of a report folder logged as artifacts (when present)
ARTIFACTS = ("report.html", "report.pdf", "metrics.json", "run.json")
#: files of a comparison folder logged as artifacts (when present)
COMPARISON_ARTIFACTS = ("report.html", "report.pdf", "metrics.json", "comparison.json", "comparison.csv")
#: environment variables MLflow's client sends to a tracking server as credentials (besides ~/.mlflow/credentials)
ENV_CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN",
                   "MLFLOW_TRACKING_AUTH")
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
    username: str | None = field(default=None, repr=False)   # from an http(s) URI's user:password@
    password: str | None = field(default=None, repr=False)
    #: where the URI came from when a manifest named it ("m.yaml, field 'mlflow', key 'tracking_uri'"), else None
    manifest_field: str | None = None

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
        if uri is not None:
            given = replace(given, tracking_uri=_normalise_uri(uri), manifest_field=None)
        given = given.without_credentials()
        given.check_credentials()
        return given

    def check_credentials(self) -> None:
        """Raise :class:`InputError` (one line naming the manifest's field) when a server the manifest names would
        be sent the environment's MLflow credentials: they go only to a URI given with ``--mlflow`` (or the API's
        ``mlflow=``) or to the server of ``MLFLOW_TRACKING_URI`` (same scheme, host and port)."""
        if self.manifest_field is None or urllib.parse.urlsplit(self.tracking_uri or "").scheme not in ("http",
                                                                                                        "https"):
            return
        ambient = environment_credentials()
        trusted = os.environ.get("MLFLOW_TRACKING_URI")
        if not ambient or (trusted and _origin(trusted) == _origin(self.tracking_uri)):
            return
        raise InputError(f"{self.manifest_field}: the manifest names the tracking server {redact(self.tracking_uri)}, "
                         f"which is not the server of MLFLOW_TRACKING_URI ({redact(trusted) if trusted else 'not set'})"
                         f", and the MLflow credentials of the environment ({', '.join(ambient)}) are sent only to a "
                         "server you choose: pass --mlflow URI (Python: mlflow=URI) to choose it, or set "
                         "MLFLOW_TRACKING_URI to this server")

    def without_credentials(self) -> "Tracking":
        """The tracking with ``user:password@`` taken off an http(s) URI and kept for the client's Basic auth."""
        parsed = urllib.parse.urlsplit(self.tracking_uri or "")
        if parsed.scheme not in ("http", "https") or (parsed.username is None and parsed.password is None):
            return self
        host = parsed.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (f":{parsed.port}" if parsed.port else "")
        return replace(self, tracking_uri=urllib.parse.urlunsplit(parsed._replace(netloc=netloc)),
                       username=urllib.parse.unquote(parsed.username or ""),
                       password=urllib.parse.unquote(parsed.password or ""))

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
            request = urllib.request.Request(self.tracking_uri.rstrip("/") + "/health", headers=self._auth_header())
            try:
                with urllib.request.urlopen(request, timeout=CHECK_TIMEOUT) as answer:
                    answer.read()
            except urllib.error.HTTPError as exc:
                if exc.code in (401, 403):
                    given = "the credentials given" if self._auth_header() else "a request without credentials"
                    raise InputError(f"--mlflow {self.tracking_uri}: the tracking server refused {given} (HTTP "
                                     f"{exc.code}); give them in the URI (http://user:password@host) or in "
                                     "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD") from None
                raise InputError(f"--mlflow {self.tracking_uri}: the tracking server cannot be reached (HTTP "
                                 f"{exc.code}); start it or give another URI") from None
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = redact(str(getattr(exc, "reason", exc)))
                raise InputError(f"--mlflow {self.tracking_uri}: the tracking server cannot be reached ({reason}); "
                                 "start it or give another URI") from None
        try:
            self._experiment_id()
        except Exception as exc:
            raise InputError(f"--mlflow {target}: {_one_line(exc)}") from None

    def _auth_header(self) -> dict:
        """The Basic authorization of this tracking's credentials (the URI's, else MLflow's variables)."""
        import base64

        user = self.username if self.username is not None else os.environ.get("MLFLOW_TRACKING_USERNAME")
        password = self.password if self.password is not None else os.environ.get("MLFLOW_TRACKING_PASSWORD")
        if user is None and password is None:
            return {}
        token = base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri)

    def _experiment_id(self) -> str:
        with _quiet(self.tracking_uri, self):
            client = self.client()
            found = client.get_experiment_by_name(self.experiment)
            return found.experiment_id if found is not None else client.create_experiment(self.experiment)


def environment_credentials() -> list[str]:
    """The MLflow credentials this process would send a tracking server: the names of :data:`ENV_CREDENTIALS` that
    are set, and ``~/.mlflow/credentials`` when it holds a user or password."""
    import configparser

    names = [name for name in ENV_CREDENTIALS if os.environ.get(name)]
    stored = configparser.ConfigParser()
    try:
        stored.read(os.path.expanduser("~/.mlflow/credentials"))
    except (configparser.Error, OSError, UnicodeError):  # unreadable: MLflow cannot send it either
        return names
    if stored.has_section("mlflow") and any(stored.get("mlflow", key, fallback=None)
                                            for key in ("mlflow_tracking_username", "mlflow_tracking_password")):
        names.append("~/.mlflow/credentials")
    return names


def _origin(uri: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of an http(s) URI, the port filled in (80, 443); None for anything else."""
    parsed = urllib.parse.urlsplit(uri)
    scheme = parsed.scheme.lower()
    if scheme not in ("http", "https") or not parsed.hostname:
        return None
    try:
        port = parsed.port
    except ValueError:
        return None
    return scheme, parsed.hostname.lower(), port or (443 if scheme == "https" else 80)


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
                    field.get("run_name"), manifest_field=f"{path.name}, field 'mlflow', key 'tracking_uri'" if uri
                    else None)


def _normalise_uri(uri: str | None, base: Path | None = None) -> str | None:
    """A plain folder path (or a relative ``file:`` one) as an absolute ``file:`` URI, a plain path ending in
    ``.db``/``.sqlite``/``.sqlite3`` as an ``sqlite:///`` URI; other URIs unchanged."""
    from ..io.manifest import local_tracking_path

    if uri is None:
        return None
    uri = str(uri)
    local = local_tracking_path(uri, f"--mlflow {uri}")
    if local is not None and local[0] == "file" and len(urllib.parse.urlsplit(uri).scheme) != 1:  # a Windows drive
        path = Path(local[1]).expanduser()
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        if path.suffix.lower() in SQLITE_SUFFIXES and not path.is_dir():  # a database file, not a store folder
            return f"sqlite:///{path.resolve()}"
        return path.resolve().as_uri()
    return uri


def redact(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` in it replaced by ``***``."""
    return _CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:***@", str(text))


@contextlib.contextmanager
def _quiet(uri: str | None, tracking: "Tracking | None" = None):
    """MLflow's own lines ("View run ... at") on stderr, not on the command's standard output; a ``file:`` store,
    which MLflow keeps in maintenance mode, allowed because it was named explicitly; the credentials of
    ``tracking``'s URI in MLflow's ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD`` for the client (restored after)."""
    scoped = {}
    if urllib.parse.urlparse(uri or "").scheme == "file" and "MLFLOW_ALLOW_FILE_STORE" not in os.environ:
        scoped["MLFLOW_ALLOW_FILE_STORE"] = "true"
    if tracking is not None and tracking.username is not None:
        scoped.update(MLFLOW_TRACKING_USERNAME=tracking.username, MLFLOW_TRACKING_PASSWORD=tracking.password or "")
    before = {k: os.environ.get(k) for k in scoped}
    os.environ.update(scoped)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _one_line(exc: BaseException) -> str:
    text = redact(" ".join(str(exc).split()) or type(exc).__name__)
    return text if len(text) <= 300 else text[:297] + "..."


def metric_name(*parts: str) -> str:
    """``chapter.metric[.ci_low]`` with every character MLflow does not accept as ``_`` (no ``..``, no leading
    ``/``)."""
    name = _BAD_NAME.sub("_", ".".join(str(p) for p in parts))
    return re.sub(r"\.{2,}", ".", name).lstrip("/")


def report_metrics(metrics: dict) -> dict[str, float]:
    """The MLflow metrics of a ``metrics.json`` document: ``<chapter>.<metric>``, ``.ci_low``/``.ci_high`` and
    ``.n`` for every non-null number, ``.outside_ci`` (1) and ``.bias_corrected`` where the interval excludes the
    value (a name that would repeat after cleaning gets ``_2``, ``_3``)."""
    out: dict[str, float] = {}
    for chapter, entry in (metrics.get("chapters") or {}).items():
        for name, m in (entry.get("metrics") or {}).items():
            base = _unique(metric_name(chapter, name), out)
            outside = m.get("outside_ci") is True
            for suffix, key in (("", "value"), (".ci_low", "ci_low"), (".ci_high", "ci_high"), (".n", "n"),
                                (".bias_corrected", "bias_corrected" if outside else None)):
                if _number(m.get(key)):
                    out[base + suffix] = float(m[key])
            if outside:
                out[base + ".outside_ci"] = 1.0
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def status_metrics(folder: Path, metrics: dict) -> dict[str, float]:
    """The decision as numbers: ``embeval.status_level`` (:data:`STATUS_LEVELS`), ``embeval.findings`` and
    ``embeval.findings.<severity>`` (when the run recorded findings), ``embeval.verdicts.<level>`` (how many
    metrics got each verdict); a filter such as ``metrics."embeval.findings.problematic" > 0`` finds runs."""
    from .explore import read_findings

    status, findings = read_findings(folder)
    out: dict[str, float] = {}
    if status is not None:
        if status in STATUS_LEVELS:
            out["embeval.status_level"] = float(STATUS_LEVELS[status])
        out["embeval.findings"] = float(len(findings))
        counts = findings["severity"].value_counts()
        for severity in ("problematic", "concerning", "healthy"):
            out[f"embeval.findings.{severity}"] = float(counts.get(severity, 0))
    for level, count in verdict_counts(m.get("verdict") for entry in (metrics.get("chapters") or {}).values()
                                       for m in (entry.get("metrics") or {}).values()).items():
        out[f"embeval.verdicts.{level}"] = float(count)
    return out


def tag_name(text: str) -> str:
    """A word of a tag or metric key: :func:`metric_name`'s characters, spaces as ``_``
    (``no difference larger than E`` → ``no_difference_larger_than_E``)."""
    return metric_name(str(text)).replace(" ", "_")


def verdict_counts(verdicts) -> dict[str, int]:
    """How many of ``verdicts`` (None skipped) each level has, its key a :func:`tag_name`."""
    out: dict[str, int] = {}
    for v in verdicts:
        if v:
            out[tag_name(v)] = out.get(tag_name(v), 0) + 1
    return out


def _unique(name: str, taken: dict) -> str:
    if name not in taken:
        return name
    i = 2
    while f"{name}_{i}" in taken:
        i += 1
    return f"{name}_{i}"


def report_tags(folder: Path, metrics: dict) -> dict[str, str]:
    """``embeval.report``, ``embeval.status`` (when the run recorded findings; its counts are metrics:
    :func:`status_metrics`) and the chapters that failed."""
    from .explore import read_findings

    status, _ = read_findings(folder)
    tags = {"embeval.report": "report"}
    if status is not None:
        tags["embeval.status"] = str(status)
    failed = [chapter for chapter, entry in (metrics.get("chapters") or {}).items() if entry.get("status") == "failed"]
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
    with _quiet(tracking.tracking_uri, tracking):
        client = tracking.client()
        tags = report_tags(folder, metrics) | ({MLFLOW_PARENT_RUN_ID: parent} if parent else {})
        created = client.create_run(tracking._experiment_id(), run_name=run_name or tracking.run_name or run.get("name"))
        run_id = created.info.run_id
        try:
            params = report_params(run, folder)
            _log(client, run_id, report_metrics(metrics) | status_metrics(folder, metrics), params, tags)
            _log_dataset(client, run_id, run, params)
            for name in ARTIFACTS:
                if (folder / name).is_file():
                    client.log_artifact(run_id, str(folder / name))
            _log_findings(client, run_id, folder)
            _log_table(client, run_id, folder)
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


#: a comparison's keys (``metrics.json``'s ``comparisons``) as MLflow names them: the difference and its interval
#: under ``.diff`` (a model run's ``.ci_low`` is the interval of the value itself)
COMPARISON_NAMES = {"difference": "diff", "ci_low": "diff.ci_low", "ci_high": "diff.ci_high",
                    "p_adjusted": "p_adjusted", "effect": "effect"}


def _log_table(client, run_id: str, folder: Path) -> None:
    """``metrics.csv``: the report's metrics table (:func:`~.explore.metrics_table`: value, interval, its method,
    n, outside_ci, bias_corrected, slice, citations) for what MLflow's metrics cannot hold."""
    from .explore import metrics_table

    table = metrics_table(folder)
    table["citations"] = [json.dumps(v) if isinstance(v, list) else v for v in table["citations"]]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.csv"
        table.to_csv(path, index=False)
        client.log_artifact(run_id, str(path))


def _log_dataset(client, run_id: str, run: dict, params: dict) -> None:
    """The vectors as the run's dataset input: named after the set, its digest (the model's or the vectors file's),
    its source and its shape."""
    from mlflow.entities import Dataset, DatasetInput

    digest = params.get("vectors_digest") or params.get("model_digest")
    if not digest:
        return
    source = run.get("source")
    dataset = Dataset(name=str(run.get("name") or "vectors"), digest=str(digest)[:36], source_type="local",
                      source=json.dumps({"uri": str(source)} if source else {}),
                      schema=json.dumps({"n": run.get("n"), "d": run.get("d")}),
                      profile=json.dumps({"num_rows": run.get("n"), "dimensions": run.get("d")}))
    client.log_inputs(run_id, datasets=[DatasetInput(dataset=dataset)])


def comparison_metrics(folder: Path) -> dict[str, float]:
    """The comparison's numbers per compared metric (``metrics.json``'s ``comparisons``): ``<name>.diff``,
    ``.diff.ci_low``, ``.diff.ci_high``, ``.p_adjusted`` and ``.effect``."""
    doc = json.loads((folder / "metrics.json").read_text())
    out: dict[str, float] = {}
    for name, c in (doc.get("comparisons") or {}).items():
        base = _unique(metric_name(name.replace(": ", ".")), out)
        for key, suffix in COMPARISON_NAMES.items():
            if _number(c.get(key)):
                out[f"{base}.{suffix}"] = float(c[key])
    return out


def log_comparison(tracking: Tracking, folder, models: list[tuple[str, Path]], settings: dict) -> str:
    """Log a comparison: one run of the comparison (its differences, intervals, adjusted p-values and verdict
    counts; comparison.json/.csv, metrics.json and the report as artifacts) with one nested run per model
    (:func:`log_report` of its report folder). Returns the comparison's run id."""
    folder = Path(folder)
    doc = json.loads((folder / "comparison.json").read_text())
    verdicts = {f"embeval.verdicts.{k}": float(v)
                for k, v in verdict_counts(c.get("verdict") for c in doc.get("comparisons", [])).items()}
    tags = {"embeval.report": "comparison", "embeval.models": ", ".join(name for name, _ in models)}
    params = {metric_name(k): _param_text(v) for k, v in dict(settings, correction=doc.get("correction"),
                                                              effect=doc.get("effect"), level=doc.get("level")).items()}
    with _quiet(tracking.tracking_uri, tracking):
        client = tracking.client()
        created = client.create_run(tracking._experiment_id(),
                                    run_name=tracking.run_name or " vs ".join(name for name, _ in models))
        parent = created.info.run_id
        try:
            _log(client, parent, comparison_metrics(folder) | verdicts, params, tags)
            for name in COMPARISON_ARTIFACTS:
                if (folder / name).is_file():
                    client.log_artifact(parent, str(folder / name))
        except BaseException:
            client.set_terminated(parent, "FAILED")
            raise
    for name, report in models:
        log_report(tracking, report, parent=parent, run_name=name)
    with _quiet(tracking.tracking_uri, tracking):
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
