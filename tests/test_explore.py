"""The exploration notebook and its helpers: explore.ipynb executes on a small report and on a demo report; the
helpers' numbers against independent references (scikit-learn's brute-force neighbours, numpy's SVD);
``embeval-report explore`` serves the notebook and leaves no server behind."""
import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request

import nbformat
import numpy as np
import pytest
from api_sets import CHAPTERS, write_small_set

from embeval_report.cli import main
from embeval_report.report.explore import NOTEBOOK, Exploration, open_report, report_source
from embeval_report.resources import explore_template

FINDING = {"severity": "problematic", "category": "model", "chapter": "isotropy", "title": "Narrow cone",
           "sentence": "The vectors crowd into a narrow cone.", "metrics": ["apcs"],
           "evidence": {"value": 0.5, "ci_low": 0.4, "ci_high": 0.6, "baseline": {"value": 0.1}},
           "section": "chapter-isotropy", "rule": "threshold", "effect": None}


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    from conftest import built_once

    def build(tmp):
        return {"rc": main(["run", str(write_small_set(tmp / "set")), "--out", str(tmp / "report"), "--chapters",
                            ",".join(CHAPTERS), "--formats", "html"])}

    tmp, done = built_once(tmp_path_factory, "explore-report", build)  # once per session, not per worker
    assert done["rc"] == 0
    return tmp / "report"


def _execute(folder, tmp_path):
    import papermill as pm

    out = tmp_path / "executed.ipynb"
    pm.execute_notebook(str(folder / NOTEBOOK), str(out), parameters={"report_dir": str(folder)},
                        kernel_name="python3", progress_bar=False, cwd=str(folder))
    nb = nbformat.read(out, as_version=4)
    outputs = {c.source: c.outputs for c in nb.cells if c.cell_type == "code"}
    assert not [o for os_ in outputs.values() for o in os_ if o.output_type == "error"]
    return outputs


def _text(outputs):
    return " ".join(o.get("data", {}).get("text/plain", "") for o in outputs)


def test_every_report_has_the_notebook_and_it_executes(small_report, tmp_path):
    assert (small_report / NOTEBOOK).read_text() == explore_template().read_text()
    assert NOTEBOOK in json.loads((small_report / "run.json").read_text())["files"]
    outputs = _execute(small_report, tmp_path)
    shown = _text(outputs["x.neighbours()"])  # the corner names whose neighbours; the rows never hold that id
    assert shown.startswith("neighbours of doc000") and "doc000" not in shown.split("\n", 1)[1] and "cosine" in shown
    assert "query_id" in _text(outputs["x.worst()"])
    assert any("image/png" in o.get("data", {}) for o in outputs["x.scatter(x.colour_column())"])


def test_the_notebook_shows_and_the_package_computes():
    """Code cells import only from embeval_report and hold no arithmetic, comprehension, subscript or comparison
    (the chapter notebooks' rule, tests/test_notebooks.py)."""
    nb = nbformat.read(explore_template(), as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in cells[0].metadata.get("tags", [])
    for cell in cells[1:]:
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom):
                assert node.module.startswith("embeval_report")
            assert not isinstance(node, (ast.BinOp, ast.ListComp, ast.DictComp, ast.Lambda, ast.Subscript,
                                         ast.Compare)), ast.unparse(node)


def test_it_executes_on_a_demo_report(demo_report, tmp_path):
    # the shared demo report stays where it is: a copy plays a report written at ``written``, then moved
    written, moved = tmp_path / "demo", tmp_path / "moved-demo"
    shutil.copytree(demo_report.folder, written)
    run = json.loads((written / "run.json").read_text())
    run["source"] = str(written / "demo-data" / "manifest.yaml")
    (written / "run.json").write_text(json.dumps(run))
    shutil.move(written, moved)  # the demo's data travels inside the report
    assert report_source(moved) == moved / "demo-data" / "manifest.yaml"
    outputs = _execute(moved, tmp_path)
    assert "retrieval" in _text(outputs["x.unit_chapters()"])
    assert "user_" in _text(outputs["x.neighbours()"])


def test_neighbours_are_the_exact_cosine_lists(small_report):
    from sklearn.neighbors import NearestNeighbors

    x = open_report(small_report)
    X = np.load(small_report.parent / "set" / "vectors.npy").astype(np.float64)
    nn = NearestNeighbors(n_neighbors=11, metric="cosine", algorithm="brute").fit(X)
    dist, idx = nn.kneighbors(X[[0, 57, 159]])
    for row, (d, i) in zip((0, 57, 159), zip(dist, idx)):
        got = x.neighbours(f"doc{row:03d}")
        assert len(got) == 10 and list(got["rank"]) == list(range(1, 11))
        keep = i != row
        assert list(got["id"]) == [f"doc{j:03d}" for j in i[keep][:10]]
        np.testing.assert_allclose(got["cosine"], 1 - d[keep][:10], rtol=0, atol=1e-6)
        assert set(got["label"]) <= {f"topic-{t}" for t in range(4)}
    assert len(x.neighbours("doc001", k=3)) == 3
    with pytest.raises(Exception, match="no id 'nope'"):
        x.neighbours("nope")


def test_worst_units_are_the_lowest_where_higher_is_better(small_report):
    x = open_report(small_report)
    units = x.units("retrieval")
    assert len(units) == 24 and units.columns[0] == "query_id"
    worst = x.worst("retrieval", "ndcg_at_10", n=5)
    values = np.sort(units["ndcg_at_10"].to_numpy())
    np.testing.assert_array_equal(worst["ndcg_at_10"].to_numpy(), values[:5])
    assert abs(units["ndcg_at_10"].mean() - x.metrics.query("name == 'ndcg_at_10'")["value"].item()) < 1e-12
    with pytest.raises(Exception, match="no per-unit"):
        x.worst("retrieval", "nope")


def test_scatter_axes_are_the_principal_components(small_report):
    x = open_report(small_report)
    fig = x.scatter("label")
    X = np.load(small_report.parent / "set" / "vectors.npy").astype(np.float64)
    s = np.linalg.svd(X - X.mean(0), compute_uv=False)
    share = s**2 / (s**2).sum()
    ax = fig.axes[0]
    assert ax.get_xlabel() == f"PC 1 ({100 * share[0]:.1f} % of variance)"
    assert ax.get_ylabel() == f"PC 2 ({100 * share[1]:.1f} % of variance)"
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == [f"topic-{t}" for t in range(4)]
    with pytest.raises(Exception, match="no metadata column 'nope'"):
        x.scatter("nope")


def test_findings_evidence_and_decision_block(small_report, tmp_path):
    folder = tmp_path / "with-findings"
    shutil.copytree(small_report, folder)
    doc = json.loads((folder / "metrics.json").read_text())
    doc.update(status="problematic", findings=[FINDING, dict(FINDING, severity="concerning", title="Second",
                                                             evidence={}, metrics=["isotropy.apcs_std"])])
    (folder / "metrics.json").write_text(json.dumps(doc))
    x = Exploration.open(folder)
    assert x.status == "problematic" and list(x.findings["title"]) == ["Narrow cone", "Second"]
    ev = dict(zip(x.evidence(0)["item"], x.evidence(0)["value"]))
    assert ev["evidence.value"] == 0.5 and ev["evidence.baseline.value"] == 0.1 and ev["severity"] == "problematic"
    assert list(x.finding_metrics(0)["name"]) == ["apcs"] and list(x.finding_metrics("Second")["name"]) == ["apcs_std"]
    html = x._repr_html_()
    assert "problematic" in html and "The vectors crowd into a narrow cone." in html and "0.5 [0.4, 0.6]" in html
    assert re.search(r'href="[^"]*report\.html#chapter-isotropy"', html)
    from embeval_report.present.format import number

    apcs_std = x.metrics.query("name == 'apcs_std'").iloc[0]
    assert f"({number(apcs_std['value'])} [{number(apcs_std['ci_low'])}, {number(apcs_std['ci_high'])}])" in html


def test_explore_command_serves_the_notebook_and_stops(small_report, tmp_path):
    import psutil

    # started as a CI runner or nohup would start it, with SIGINT ignored (inherited): Ctrl-C must still stop it
    proc = subprocess.Popen([sys.executable, "-m", "embeval_report.cli", "explore", str(small_report),
                             "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        url = proc.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/lab/tree/explore\.ipynb\?token=[0-9a-f]+", url), \
            proc.stderr.read() if proc.poll() is not None else url
        api = url.replace("/lab/tree/", "/api/contents/")
        with urllib.request.urlopen(api, timeout=30) as answer:
            assert json.loads(answer.read())["name"] == NOTEBOOK
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children  # JupyterLab
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        psutil.wait_procs(children, timeout=30)
        assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_explore_refuses_a_folder_that_is_not_a_report(tmp_path, capsys):
    assert main(["explore", str(tmp_path)]) == 2
    assert "not an embeval-report folder" in capsys.readouterr().err
