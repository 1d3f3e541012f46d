"""MLflow tracking: one run per report whose metrics equal metrics.json, on a tracking server the test starts
(SQLite backend) and on a file store; an unreachable server stops the run before any chapter; a failure after
the run loses nothing."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from api_sets import write_small_set

from embeval_report.cli import main
from embeval_report.report import tracking
from embeval_report.report.tracking import Tracking, metric_name

mlflow = pytest.importorskip("mlflow")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``mlflow server`` on a free localhost port, SQLite backend; stopped (its whole process group) at the end."""
    tmp = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                             f"sqlite:///{tmp / 'mlflow.db'}", "--default-artifact-root", str(tmp / "artifacts"),
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "server.log", "w"), env=env,
                            start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp / "server.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2) as answer:
                    if answer.read().strip() == b"OK":
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "mlflow server did not answer within 180 s"
            time.sleep(0.5)
        yield uri
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        try:  # anything of its group still alive (workers)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _runs(uri: str, experiment: str) -> list:
    with tracking._quiet(uri):
        client = Tracking(uri).client()
        exp = client.get_experiment_by_name(experiment)
        return client.search_runs([exp.experiment_id]) if exp else []


def _check_run(run, folder, uri):
    """The run's metrics are metrics.json's numbers (value, ci_low, ci_high), its params and tags the run's."""
    doc = json.loads((folder / "metrics.json").read_text())
    expected = {}
    for chapter, entry in doc["chapters"].items():
        for name, m in entry["metrics"].items():
            for suffix, key in (("", "value"), (".ci_low", "ci_low"), (".ci_high", "ci_high"), (".n", "n")):
                if m[key] is not None:
                    expected[f"{chapter}.{name}{suffix}"] = m[key]
            if m["outside_ci"]:
                expected.update({f"{chapter}.{name}.outside_ci": 1.0,
                                 f"{chapter}.{name}.bias_corrected": m["bias_corrected"]})
    logged = {k: v for k, v in run.data.metrics.items() if not k.startswith("embeval.")}
    assert expected and logged == expected  # exactly: float64 round-trips on both backends
    levels = {"healthy": 0, "concerning": 1, "problematic": 2, "not evaluated": 3}
    assert run.data.metrics["embeval.status_level"] == levels[doc["status"]] == levels[run.data.tags["embeval.status"]]
    assert run.data.metrics["embeval.findings"] == len(doc["findings"])
    assert run.data.metrics["embeval.findings.problematic"] == sum(f["severity"] == "problematic"
                                                                   for f in doc["findings"])
    assert run.inputs.dataset_inputs[0].dataset.digest == run.data.params["vectors_digest"]
    info = json.loads((folder / "run.json").read_text())
    assert run.data.params["seed"] == str(info["seed"]) and run.data.params["n"] == str(info["n"])
    assert len(run.data.params["vectors_digest"]) == 32
    verdicts = {}
    for entry in doc["chapters"].values():
        for m in entry["metrics"].values():
            if m["verdict"]:
                verdicts[m["verdict"]] = verdicts.get(m["verdict"], 0) + 1
    assert {k.split(".")[-1]: v for k, v in run.data.metrics.items() if k.startswith("embeval.verdicts.")} == verdicts
    assert not [k for k in run.data.tags if " " in k]
    with tracking._quiet(uri):
        artifacts = {a.path for a in Tracking(uri).client().list_artifacts(run.info.run_id)}
    assert {"report.html", "metrics.json", "run.json", "metrics.csv"} <= artifacts


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return write_small_set(tmp_path_factory.mktemp("tracked") / "set")


def test_file_store_from_the_manifest(small, tmp_path):
    manifest = small.parent / "tracked.yaml"
    manifest.write_text(small.read_text() + "mlflow: {tracking_uri: mlruns, experiment: exp-file, run_name: run-1}\n")
    out = tmp_path / "out"
    assert main(["run", str(manifest), "--out", str(out), "--chapters", "isotropy", "--formats", "html"]) == 0
    uri = (small.parent / "mlruns").as_uri()  # relative to the manifest
    (run,) = _runs(uri, "exp-file")
    assert run.info.run_name == "run-1" and run.info.status == "FINISHED"
    _check_run(run, out, uri)


def test_tracking_server_and_compare_nests_one_run_per_model(small, server, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", str(small), "--out", str(a), "--chapters", "isotropy,retrieval", "--formats", "html",
                 "--mlflow", server]) == 0
    (run,) = _runs(server, "embeval-report")
    _check_run(run, a, server)
    noisier = write_small_set(tmp_path / "set-b", noise=1.4, name="noisier")
    assert main(["run", str(noisier), "--out", str(b), "--chapters", "isotropy,retrieval", "--formats", "html"]) == 0
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--names", "a,b", "--out", str(tmp_path / "cmp"), "--formats", "html",
                 "--mlflow", server]) == 0
    assert "logged to MLflow" in capsys.readouterr().err
    runs = {r.info.run_name: r for r in _runs(server, "embeval-report") if r.info.run_id != run.info.run_id}
    assert set(runs) == {"a vs b", "a", "b"}
    parent = runs["a vs b"]
    for name, folder in (("a", a), ("b", b)):
        assert runs[name].data.tags["mlflow.parentRunId"] == parent.info.run_id
        _check_run(runs[name], folder, server)
    comparisons = json.loads((tmp_path / "cmp" / "metrics.json").read_text())["comparisons"]
    for name, c in comparisons.items():  # the difference's interval under .diff (a model run's .ci_low: the value's)
        assert parent.data.metrics[f"{metric_name(name)}.diff"] == c["difference"]
        assert parent.data.metrics[f"{metric_name(name)}.diff.ci_low"] == c["ci_low"]
    assert not [k for k in list(parent.data.tags) + list(parent.data.metrics) if " " in k]


def test_unreachable_server_stops_before_any_chapter(small, tmp_path, capsys):
    out = tmp_path / "out"
    started = time.monotonic()
    assert main(["run", str(small), "--out", str(out), "--mlflow", f"http://127.0.0.1:{_free_port()}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("embeval-report: error: --mlflow http://127.0.0.1:") and "cannot be reached" in err
    assert len(err.splitlines()) == 1 and "started" not in err and not out.exists()
    assert time.monotonic() - started < 30


def test_a_failure_after_the_run_is_one_line_and_loses_nothing(small, tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise ConnectionError("tracking server went away")

    monkeypatch.setattr(tracking, "log_report", broken)
    out = tmp_path / "out"
    assert main(["run", str(small), "--out", str(out), "--chapters", "isotropy", "--formats", "html", "--mlflow",
                 (tmp_path / "mlruns").as_uri()]) == 0
    err = capsys.readouterr().err
    assert "warning: logging to MLflow failed" in err and "tracking server went away" in err
    assert (out / "report.html").exists() and (out / "metrics.json").exists()


def test_metric_names_are_what_mlflow_accepts():
    from mlflow.utils.validation import _validate_metric_name

    for parts, expected in ((("drift", "mean drift 1 − cos [2024-02]"), "drift.mean drift 1 _ cos _2024-02_"),
                            (("a", ".b"), "a.b"), (("/x", "y:z"), "x.y_z")):
        assert metric_name(*parts) == expected
        _validate_metric_name(expected)
    assert tracking.report_metrics({"chapters": {"c": {"metrics": {
        "m": {"value": 1.5, "ci_low": None, "ci_high": 2.0}, "n": {"value": None, "ci_low": None, "ci_high": None}}}}}) \
        == {"c.m": 1.5, "c.m.ci_high": 2.0}


def test_the_package_imports_without_mlflow_and_says_which_extra(monkeypatch):
    code = ("import sys, embeval_report, embeval_report.cli, embeval_report.report.tracking; "
            "assert 'mlflow' not in sys.modules")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow raises ImportError
    with pytest.raises(tracking.InputError, match=r"pip install 'embeval-report\[mlflow\]'"):
        Tracking("file:///nowhere").check()
