"""A user's first hour (issue 45): what a new user tries first works and says what it did.

compare of two models that share no per-unit chapter, a requested chapter that cannot run, a report in which
nothing was evaluated, readable --baseline regressions, pandas in, the metrics table's own flags, MLflow's
names and credentials, monitor's p-values and the notebook helpers."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from embeval_report.cli import main


def _label_set(folder, seed: int, name: str, n: int = 90, classes: int = 3):
    """Vectors, ids and a label column only: isotropy, node classification and clustering can run, no chapter
    records per-unit values."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    np.save(folder / "vectors.npy", rng.standard_normal((n, 8)).astype(np.float32))
    ids = [f"i{i}" for i in range(n)]
    (folder / "ids.txt").write_text("\n".join(ids) + "\n")
    pd.DataFrame({"id": ids, "label": [f"c{i % classes}" for i in range(n)]}).to_csv(folder / "metadata.csv",
                                                                                     index=False)
    (folder / "m.yaml").write_text(f"name: {name}\nvectors: vectors.npy\nids: ids.txt\nmetadata: metadata.csv\n")
    return folder / "m.yaml"


@pytest.fixture(scope="module")
def label_only(tmp_path_factory):
    """``embeval-report compare`` of two label-only models (isotropy): its exit status, stderr and folder."""
    import contextlib
    import io

    from conftest import built_once

    def build(tmp):
        a, b = _label_set(tmp / "a", 0, "a"), _label_set(tmp / "b", 1, "b")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["compare", str(a), str(b), "--out", str(tmp / "cmp"), "--chapters", "isotropy", "--formats",
                       "html", "--device", "cpu"])
        return {"rc": rc, "err": err.getvalue()}

    tmp, done = built_once(tmp_path_factory, "label-only-compare", build)  # once per session, not per worker
    return done["rc"], done["err"], tmp / "cmp"


# ------------------------------------------------------------------------------------------ 1. compare


def test_compare_without_shared_units_says_so_and_shows_the_metrics_side_by_side(label_only):
    rc, err, out = label_only
    assert rc == 0, err
    assert "Traceback" not in err and err.count("share no per-unit chapter") == 1
    models = {m: json.loads((out / "models" / m / "metrics.json").read_text())["chapters"]["isotropy"]["metrics"]
              for m in ("a", "b")}
    line = next(x for x in err.splitlines() if "isotropy.apcs:" in x)
    for m in ("a", "b"):  # each model's own value and interval, as its report recorded them
        apcs = models[m]["apcs"]
        assert f"{m} {apcs['value']:.4g} [{apcs['ci_low']:.4g}, {apcs['ci_high']:.4g}]" in line
    side = pd.DataFrame(json.loads((out / "comparison.json").read_text())["side_by_side"])
    assert set(side["metric"]) == set(models["a"]) and set(side["chapter"]) == {"isotropy"}
    row = side.set_index("metric").loc["apcs"]
    assert row["b"] == models["b"]["apcs"]["value"] and row["a ci_high"] == models["a"]["apcs"]["ci_high"]
    html = (out / "report.html").read_text()
    assert "tbl-compare-side-by-side" in html and "share no per-unit results" in html


def test_compare_from_python_without_shared_units(label_only, tmp_path):
    from embeval_report import compare

    _, _, out = label_only
    cmp = compare(out / "models" / "a", out / "models" / "b", out=tmp_path / "again", formats="html")
    assert len(cmp.table) == 0 and "share no per-unit chapter" in cmp.note
    assert len(cmp.side_by_side) == len(json.loads((out / "comparison.json").read_text())["side_by_side"]) > 0
    assert "metrics side by side" in repr(cmp) and "apcs" in cmp._repr_html_()


# ------------------------------------------------------------------------------------ 2. nothing evaluated


def test_a_requested_chapter_without_its_input_is_one_line_and_exit_2(tmp_path, capsys):
    _label_set(tmp_path / "s", 0, "s")
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "s" / "vectors.npy"), "--chapters", "retrieval", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("embeval-report: error: --chapters retrieval: cannot run")
    assert "qrels" in err[0] and not out.exists()


def test_a_report_in_which_nothing_ran_is_not_evaluated_and_fails_every_gate(tmp_path, capsys):
    _label_set(tmp_path / "s", 0, "s", classes=1)  # one class: node classification cannot run (its precheck)
    out = tmp_path / "out"
    rc = main(["run", str(tmp_path / "s" / "m.yaml"), "--chapters", "node_classification", "--out", str(out),
               "--formats", "html", "--fail-on", "problematic"])
    err = capsys.readouterr().err
    assert rc == 3 and "status not evaluated" in err and "--fail-on problematic cannot pass" in err
    assert err.count("not selected (--chapters)") == 1  # one line for the chapters left out
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["status"] == "not evaluated"
    html = (out / "report.html").read_text()
    assert 'verdict-not-evaluated">not evaluated<' in html and "Status: not evaluated." in html


def test_every_content_chapter_failed_is_not_evaluated(tmp_path):
    from embeval_report.chapters.registry import discover
    from embeval_report.report.findings import derive_findings

    chapters = [c for c in discover() if c.name in ("isotropy", "hubness", "rigor")]
    (tmp_path / "results").mkdir()
    derive_findings(tmp_path / "results", chapters, {"isotropy": ("failed", "boom"), "hubness": ("failed", "boom"),
                                                     "rigor": ("ok", "")})
    doc = json.loads((tmp_path / "results" / "findings.json").read_text())
    assert doc["status"] == "not evaluated" and len(doc["findings"]) == 2
    derive_findings(tmp_path / "results", chapters, {"isotropy": ("ok", ""), "hubness": ("failed", "boom"),
                                                     "rigor": ("ok", "")})
    assert json.loads((tmp_path / "results" / "findings.json").read_text())["status"] != "not evaluated"


# ------------------------------------------------------------------------------------------ 3. --baseline


def test_baseline_regressions_are_one_finding_per_task_with_counts_on_the_cover(tmp_path, capsys):
    from api_sets import write_small_set

    before, after = tmp_path / "v13", tmp_path / "v14"
    assert main(["run", str(write_small_set(tmp_path / "a", noise=0.6, name="v13")), "--out", str(before),
                 "--chapters", "retrieval", "--formats", "html"]) == 0
    capsys.readouterr()
    assert main(["run", str(write_small_set(tmp_path / "b", noise=1.6, name="v14")), "--out", str(after),
                 "--chapters", "retrieval", "--formats", "html", "--baseline", str(before)]) == 0
    err = capsys.readouterr().err
    base = json.loads((after / "results" / "baseline.json").read_text())
    rows = [c for c in base["comparisons"] if c["chapter"] == "retrieval"]
    worse = [c for c in rows if c["verdict"] == "A better"]
    better = [c for c in rows if c["verdict"] == "B better"]
    assert len(worse) >= 3
    line = f"since v13 (--baseline): Retrieval: {len(better)} better, {len(worse)} worse of {len(rows)}"
    assert line in err
    doc = json.loads((after / "metrics.json").read_text())
    regressions = [f for f in doc["findings"] if f["rule"] == "comparison"]
    assert len(regressions) == 1  # one finding for the task, not one per metric
    f = regressions[0]
    beyond = [c for c in worse if abs(c["difference"]) >= c["effect"]]
    assert f["title"] == f"Retrieval regressed on {len(beyond)} of {len(rows)} metrics since v13"
    assert set(f["metrics"]) == {c["metric"] for c in beyond}
    ev = f["evidence"]
    worst = max(beyond, key=lambda c: abs(c["difference"]) / c["effect"])
    own = doc["chapters"]["retrieval"]["metrics"][worst["metric"]]
    assert ev["metric"] == worst["metric"] and ev["difference_ci"] == [worst["ci_low"], worst["ci_high"]]
    assert (ev["value"], ev["ci_low"], ev["ci_high"]) == (own["value"], own["ci_low"], own["ci_high"])
    assert own["ci_low"] <= ev["value"] <= own["ci_high"]  # its own interval, not the change's
    html = (after / "report.html").read_text()
    assert "(this model); change since v13 −" in html and "†" not in html.split("report-meta")[0]
    assert f"Since v13</dt><dd>Retrieval: {len(better)} better, {len(worse)} worse of {len(rows)}" in html
    assert "this model − previous" in html and "B − A" not in html


def test_the_pairing_step_holds_bounded_memory():
    import tracemalloc

    from embeval_report.metrics.paired import paired_comparison

    rng = np.random.default_rng(0)
    a = rng.random(2000)
    b = a + 0.01 * rng.standard_normal(2000)
    tracemalloc.start()
    result = paired_comparison(a, b)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 80 * 2**20, peak / 2**20  # 0.3 GB before (1.4 GB over 5 000 units): unbatched resamples
    assert result.ci_low < result.diff < result.ci_high


# ------------------------------------------------------------------------------------------ 4. pandas in


def _labelled(n: int = 90):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, 8)).astype(np.float32)
    X[: n // 3] += 2.0
    X[n // 3: 2 * n // 3] -= 2.0
    ids = [f"u{i}" for i in range(n)]
    labels = ["a"] * (n // 3) + ["b"] * (n // 3) + ["c"] * (n - 2 * (n // 3))
    return X, ids, pd.DataFrame({"label": labels, "region": ["north", "south"] * (n // 2)},
                                index=pd.Index(ids, name="user"))


def test_evaluate_takes_a_metadata_dataframe_and_a_dataframe_of_vectors(tmp_path):
    from embeval_report import evaluate

    X, ids, users = _labelled()
    shuffled = users.sample(frac=1.0, random_state=1)  # rows matched by id, not by position
    report = evaluate(X, tmp_path / "r", chapters="node_classification", ids=ids, metadata=shuffled,
                      formats="html")
    status = report.chapters.set_index("name")["status"]
    assert status["node_classification"] == "ok" and report.status != "not evaluated"
    written = pd.read_parquet(report.path / "embeddings" / "metadata.parquet").set_index("id")
    assert list(written.index) == ids and list(written["label"]) == list(users["label"])
    # a DataFrame of vectors: its index is the ids; a label column in it is refused with its name and the fix
    frame = pd.DataFrame(X, index=pd.Index(ids))
    from embeval_report.api import _set_parts

    vectors, got_ids, meta, _, _ = _set_parts(frame, None, None, users.reset_index().rename(columns={"user": "id"}))
    assert list(got_ids) == ids and np.array_equal(vectors, X) and list(meta["region"]) == list(users["region"])
    from embeval_report.errors import InputError
    from embeval_report.io import EmbeddingSet

    by_hand = EmbeddingSet("mine", X, ids, users.rename_axis("id"), source="python")  # as docs/python.md builds it
    assert _set_parts(by_hand, None, None)[2] is not None and _set_parts(by_hand, None, None)[4] == "mine"
    with pytest.raises(InputError, match=r"column 'label' of the DataFrame .* metadata="):
        evaluate(frame.assign(label=users["label"].to_numpy()), tmp_path / "r2")
    with pytest.raises(InputError, match=r"metadata=, id 'x9': not one of the vectors' ids"):
        evaluate(X, tmp_path / "r3", ids=ids, metadata=pd.DataFrame({"label": ["a"]}, index=["x9"]))
    with pytest.raises(InputError, match=r"metadata= has 3 rows and no ids"):
        evaluate(X, tmp_path / "r4", metadata=pd.DataFrame({"label": ["a", "b", "c"]}))
    assert not any((tmp_path / f"r{i}").exists() for i in (2, 3, 4))


@pytest.mark.parametrize("settings, message", [
    (dict(seed="one"), "evaluate: seed='one': expected a whole number"),
    (dict(options={"k": (1, 2)}), r"options=\{'k': \(1, 2\)\}: expected a string, a number or True/False"),
    (dict(options={"negative_strategy": __import__("pathlib").Path("uniform")}), "got PosixPath"),
    (dict(title=("a", "b")), "title=\\('a', 'b'\\): expected a string"),
    (dict(jobs=1.5), "jobs=1.5: expected a whole number"),
    (dict(force="yes"), "force='yes': expected True or False"),
    (dict(device="gpu"), "device='gpu': expected one of 'auto', 'cpu', 'cuda'"),
])
def test_settings_are_type_checked_before_the_run(tmp_path, settings, message):
    from embeval_report import evaluate
    from embeval_report.errors import InputError

    with pytest.raises(InputError, match=message):
        evaluate(np.eye(4, dtype=np.float32) + 0.1, tmp_path / "out", chapters="isotropy", **settings)
    assert not (tmp_path / "out").exists()


def test_python_messages_name_keywords_not_flags(tmp_path):
    from embeval_report import evaluate
    from embeval_report.errors import InputError

    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(InputError) as caught:
        evaluate(np.eye(4, dtype=np.float32) + 0.1, tmp_path / "busy", chapters="isotropy")
    assert "force=True" in str(caught.value) and "--force" not in str(caught.value)
    with pytest.raises(InputError) as caught:
        evaluate(np.eye(4, dtype=np.float32) + 0.1, tmp_path / "out", chapters="retrieval")
    assert str(caught.value).startswith("chapters=retrieval: cannot run") and "--" not in str(caught.value)


# ------------------------------------------------------------------------------------------ 6. MLflow


def _auth_server(user: str, password: str):
    """A tracking server stand-in that requires Basic auth: /health and the experiment lookup MLflow's client
    makes; returns (server, the Authorization headers it saw)."""
    import base64
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            seen.append((self.path.split("?")[0], self.headers.get("Authorization")))
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
                self.end_headers()
                return
            if self.path.startswith("/health"):
                body = b"OK"
            else:
                body = json.dumps({"experiment": {"experiment_id": "1", "name": "embeval-report",
                                                  "artifact_location": "mlruns/1", "lifecycle_stage": "active",
                                                  "creation_time": 0, "last_update_time": 0}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_mlflow_credentials_are_basic_auth_and_never_printed(tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlflow")
    import base64
    import os

    from embeval_report.errors import InputError
    from embeval_report.report.tracking import Tracking

    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    server, seen = _auth_server("alice", "s3cr3t-pw")
    port = server.server_address[1]
    try:
        t = Tracking.resolve(f"http://alice:s3cr3t-pw@127.0.0.1:{port}")
        assert t.tracking_uri == f"http://127.0.0.1:{port}" and "s3cr3t" not in repr(t)
        t.check()  # the server is up and takes the credentials: the check passes
        token = "Basic " + base64.b64encode(b"alice:s3cr3t-pw").decode()
        assert ("/health", token) in seen
        assert any(path.startswith("/api/2.0/mlflow/experiments/get-by-name") and auth == token for path, auth in seen)
        assert "MLFLOW_TRACKING_PASSWORD" not in os.environ  # set for the client only
        with pytest.raises(InputError) as refused:  # wrong password: one line, pointing to the variables
            Tracking.resolve(f"http://alice:wrong-pw@127.0.0.1:{port}").check()
        assert "MLFLOW_TRACKING_USERNAME" in str(refused.value) and "wrong-pw" not in str(refused.value)
    finally:
        server.shutdown()
    # a server that is down: exit 2, one line, no password
    _label_set(tmp_path / "s", 0, "s")
    assert main(["run", str(tmp_path / "s" / "m.yaml"), "--out", str(tmp_path / "out"), "--mlflow",
                 f"http://alice:s3cr3t-pw@127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert "cannot be reached" in err and "s3cr3t" not in err and len(err.strip().splitlines()) == 1


def test_mlflow_names_numbers_and_a_database_path(tmp_path):
    from embeval_report.report import tracking as tr

    assert tr.Tracking.resolve(str(tmp_path / "mlflow.db")).tracking_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert tr.Tracking.resolve(str(tmp_path / "mlruns")).tracking_uri.startswith("file://")
    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / "metrics.json").write_text(json.dumps({"comparisons": {"mrr": {
        "difference": 0.1, "ci_low": 0.05, "ci_high": 0.15, "p_adjusted": 0.01, "effect": 0.01}}}))
    assert tr.comparison_metrics(tmp_path / "cmp") == {"mrr.diff": 0.1, "mrr.diff.ci_low": 0.05,
                                                       "mrr.diff.ci_high": 0.15, "mrr.p_adjusted": 0.01,
                                                       "mrr.effect": 0.01}
    counts = tr.verdict_counts(["no difference larger than E", "B better", None, "B better"])
    assert counts == {"no_difference_larger_than_E": 1, "B_better": 2}
    assert tr.report_metrics({"chapters": {"c": {"metrics": {"m": {
        "value": 2.0, "ci_low": 2.1, "ci_high": 3.0, "n": 40, "outside_ci": True, "bias_corrected": 2.5}}}}}) == {
        "c.m": 2.0, "c.m.ci_low": 2.1, "c.m.ci_high": 3.0, "c.m.n": 40.0, "c.m.bias_corrected": 2.5,
        "c.m.outside_ci": 1.0}


# ------------------------------------------------------------------------------------------ 5. the metrics table


def test_each_metric_says_its_interval_method_units_slice_and_citations(tmp_path):
    from api_sets import write_small_set

    from embeval_report import evaluate
    from embeval_report.report.metrics_file import EXTRA_KEYS, metric_entry

    report = evaluate(write_small_set(tmp_path / "set"), tmp_path / "r", chapters=["isotropy", "retrieval"],
                      formats="html")
    doc = json.loads((report.path / "metrics.json").read_text())
    entries = {(c, k): m for c, e in doc["chapters"].items() for k, m in e["metrics"].items()}
    assert all(set(EXTRA_KEYS) <= set(m) for m in entries.values())
    mrr = entries["retrieval", "mrr"]
    assert mrr["n"] == 24 and "24 queries" in mrr["ci_method"] and mrr["outside_ci"] is False
    assert any(c.startswith("Voorhees, E. M. (1999). The TREC-8 question answering track report") for c in mrr["citations"])
    assert any(c.startswith("Ethayarajh, K. (2019)") for c in entries["isotropy", "apcs"]["citations"])
    assert entries["retrieval", "mde_mrr"]["n"] == 24
    for (c, k), m in entries.items():  # outside_ci says what the numbers say, with the bias-corrected estimate
        if m["ci_low"] is not None and m["value"] is not None:
            assert m["outside_ci"] == (not m["ci_low"] <= m["value"] <= m["ci_high"]), (c, k)
            assert m["bias_corrected"] is not None or not m["outside_ci"] or c != "isotropy", (c, k)
        assert m["citations"], (c, k)
    table = report.metrics.set_index(["chapter", "name"])
    assert table.loc[("retrieval", "mrr"), "n"] == 24 and table.loc[("retrieval", "mrr"), "ci_method"] == mrr["ci_method"]
    assert {"slice", "outside_ci", "bias_corrected", "citations"} <= set(table.columns)
    assert metric_entry("mean_drift__2024_02", {"value": 0.1, "reference": "seed 000 §217.2.3.2"}, {})["slice"] \
        == "2024_02"
    assert metric_entry("mean_drift", {"value": 0.1}, {})["slice"] is None


# ------------------------------------------------------------------------------------------ 7. monitor


def test_monitor_prints_the_raw_p_beside_a_p_band_and_findings_lead_with_the_ratio():
    from embeval_report.chapters.findings import ChapterResults, threshold_findings
    from embeval_report.chapters.registry import discover
    from embeval_report.monitoring import build_profile, score_batch
    from embeval_report.monitoring.cli import table

    rng = np.random.default_rng(0)
    ref = rng.standard_normal((1500, 8)).astype(np.float32) + 1.0
    profile = build_profile(ref, name="ref", sample_size=600, calibration=200, device="cpu")
    same = rng.standard_normal((400, 8)).astype(np.float32) + 1.0
    score = score_batch(profile, same, seed=0, n_perm=150, mmd_sample=200, ks_sample=300, classifier_sample=200,
                        device="cpu")
    mmd = score.signals["mmd"]
    row = next(line for line in table(score).splitlines() if line.startswith(mmd.label))
    header = table(score).splitlines()[0]
    assert f"p {mmd.p_value:.2g}" in row  # what the level reads against "p ≤ 0.0071": the raw p, not MMD²
    assert row.split()[-3] == f"{mmd.p_value:.2g}" and " p " in f" {header} " and "p (×7)" in header
    # the chapter's finding quotes the number its verdict was judged on (× the no-drift level) first
    spec = next(c for c in discover() if c.name == "monitoring")
    metrics = {"mean_shift": {"value": 0.074, "ci_low": 0.03, "ci_high": 0.09, "verdict": "concerning",
                              "label": "Mean shift / reference spread", "reference": "Table 217.3 mean drift"},
               "mean_shift_ratio": {"value": 2.14, "verdict": "concerning", "label": "Mean shift, × no-drift level",
                                    "reference": "Table 217.3 mean drift (× baseline)"}}
    (f,) = threshold_findings(ChapterResults("monitoring", "Monitoring", metrics, {}), spec.effects)
    assert f.metrics[0] == "mean_shift_ratio" and "Mean shift, × no-drift level is 2.140" in f.sentence


# ------------------------------------------------------------------------------------------ 8. notebooks


def test_notebook_hygiene(tmp_path, capfd):
    import shutil

    from api_sets import write_small_set

    from embeval_report import evaluate
    from embeval_report.api import Report
    from embeval_report.cli import build_parser
    from embeval_report.progress import tqdm
    from embeval_report.report.explore import remote_hint

    assert tqdm.__module__ == "tqdm.std"  # no notebook widgets looked for: no "IProgress not found" in Jupyter
    capfd.readouterr()
    report = evaluate(write_small_set(tmp_path / "set"), tmp_path / "r", chapters="retrieval", formats="html",
                      progress=False)
    assert capfd.readouterr().err == ""  # progress=False: not a line
    near = report.neighbours("doc007", k=3)
    assert near.columns.name == "neighbours of doc007" and near.attrs["of"] == "doc007"
    # worst() takes the task chapter (not drift, first by name) and shows few columns
    folder = tmp_path / "copy"
    shutil.copytree(report.path, folder)
    ids = [f"doc{i:03d}" for i in range(160)]
    drift = pd.DataFrame({"entity": ids, **{f"c{j}": np.arange(160.0) for j in range(40)}})
    drift.to_csv(folder / "results" / "units" / "drift.csv", index=False)
    (folder / "results" / "drift.json").write_text(json.dumps({
        "chapter": "drift", "metrics": {"c0": {"value": 79.5, "direction": "lower"}}, "tests": [],
        "info": {"units": {"key": "entity", "unit": "entities", "means": [f"c{j}" for j in range(40)]}}}))
    worst = Report.open(folder).worst(n=3)
    assert worst.columns[0] == "query_id" and len(worst.columns) <= 6
    assert worst.columns.name == f"worst 3 of retrieval.{worst.columns[1]}"
    assert "ssh -N -L 8899:localhost:8899" in remote_hint("127.0.0.1", 8899)
    assert build_parser().parse_args(["explore", "r/", "--ip", "0.0.0.0"]).ip == "0.0.0.0"
