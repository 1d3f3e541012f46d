"""End to end: the CLI on small sets writes a complete report; failures stay isolated."""
import json
import shutil

import nbformat
import numpy as np
import pandas as pd
import pytest
from conftest import built_once
from pypdf import PdfReader

from embeval_report import chapters as chapters_mod
from embeval_report.chapters import registry
from embeval_report.cli import main
from embeval_report.io import load_source
from embeval_report.report.render import quarto_available
from embeval_report.resources import notebooks_dir

METRIC_KEYS = {"value", "ci_low", "ci_high", "verdict", "direction", "reference", "ci_method", "n", "outside_ci",
               "bias_corrected", "slice", "citations"}
ISOTROPY_METRICS = {"condition_number", "participation_ratio", "participation_ratio_fraction", "apcs", "apcs_std",
                    "dims_for_90pct_variance", "effective_dim_entropy", "top10_variance_ratio"}


def write_set(folder, n=240, d=12, seed=0, shift=0.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32) + shift
    np.save(folder / "vecs.npy", X)
    ids = [f"e{i}" for i in range(n)]
    (folder / "ids.txt").write_text("\n".join(ids))
    pd.DataFrame({"id": ids, "label": rng.choice(["a", "b<script>"], n)}).to_csv(folder / "meta.csv", index=False)
    (folder / "m.yaml").write_text("name: tiny <set>\nvectors: vecs.npy\nids: ids.txt\nmetadata: meta.csv\n")
    return folder / "m.yaml"


def check_metrics_schema(doc):
    assert set(doc) - {"scope", "scope_text"} == {"version", "source", "seed", "device", "status", "findings",
                                                  "chapters"}  # scope: "geometry only" when no task ran
    assert doc["status"] in ("healthy", "concerning", "problematic") and isinstance(doc["findings"], list)
    for name, ch in doc["chapters"].items():
        assert set(ch) == {"status", "reason", "metrics"}
        assert ch["status"] in ("ok", "skipped", "failed")
        for m in ch["metrics"].values():
            assert set(m) == METRIC_KEYS
            assert m["verdict"] in (None, "healthy", "concerning", "problematic")
            # null for a count with no better way (tests run, entities matched; issue 26.6)
            assert m["direction"] in ("higher", "lower", None) and m["reference"]
            assert m["value"] is None or isinstance(m["value"], (int, float))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Every chapter whose inputs exist, HTML and PDF, --jobs 2: written once per session (conftest.built_once),
    whichever worker needs it first; read it, copy it before changing it."""
    def build(tmp):
        return {"rc": main(["run", str(write_set(tmp)), "--out", str(tmp / "out"), "--seed", "3", "--title",
                            "Tiny <b>report</b>", "--jobs", "2"])}

    tmp, done = built_once(tmp_path_factory, "e2e-report", build)
    assert done["rc"] == 0
    return tmp / "out"


def test_numbers_do_not_depend_on_jobs(report, tmp_path, monkeypatch):
    """Chapters executed side by side (the fixture: --jobs 2, fresh kernels in worker processes) give the numbers
    of one at a time (kernels forked from the run's template where the platform can fork)."""
    from embeval_report.report import kernel_forks

    forked = []
    real = kernel_forks.KernelForks.fork
    monkeypatch.setattr(kernel_forks.KernelForks, "fork", lambda self, *a: forked.append(real(self, *a)) or forked[-1])
    out = tmp_path / "one"
    assert main(["run", str(report.parent / "m.yaml"), "--out", str(out), "--seed", "3", "--formats", "html",
                 "--chapters", "isotropy,uniformity,hubness,correction", "--jobs", "1"]) == 0
    one = json.loads((out / "metrics.json").read_text())["chapters"]
    two = json.loads((report / "metrics.json").read_text())["chapters"]
    for name in ("isotropy", "hubness", "correction"):
        assert one[name]["metrics"] == two[name]["metrics"], name
    assert (len(forked) >= 4 and None not in forked) or not kernel_forks.enabled()
    # one pass per run: uniformity reads the isotropy chapter's covariance moments and mean from the moments cache
    passes = {name: json.loads((out / "results" / f"{name}.json").read_text())["info"]["moment_passes"]
              for name in ("isotropy", "uniformity")}
    assert all(e["source"] == "computed" for e in passes["isotropy"])
    covariance = [e for e in passes["uniformity"] if e["pass"].startswith(("block_moments|None", "row_sum|None"))]
    assert len(covariance) == 2 and all(e["source"] == "cache" for e in covariance)
    assert main(["run", str(report.parent / "m.yaml"), "--out", str(tmp_path / "bad"), "--jobs", "0"]) == 2


def test_report_folder_is_complete(report):
    assert (report / "report.html").stat().st_size > 10_000
    names = {p.name for p in (report / "chapters").iterdir()}
    es = load_source(report.parent / "m.yaml")
    ran = {c.filename for c in chapters_mod.discover() if not c.missing(es)}
    assert names == ran and "10_isotropy.ipynb" in names  # every chapter whose inputs exist
    assert not list(report.parent.glob(".out.partial-*"))  # staging folder moved into place
    assert not (report / ".prepared").exists()


def test_metrics_json_schema_and_isotropy_names(report):
    doc = json.loads((report / "metrics.json").read_text())
    check_metrics_schema(doc)
    assert doc["seed"] == 3 and doc["device"] == "cpu"
    iso = doc["chapters"]["isotropy"]
    assert iso["status"] == "ok" and set(iso["metrics"]) == ISOTROPY_METRICS
    assert iso["metrics"]["apcs"]["ci_low"] <= iso["metrics"]["apcs"]["value"] <= iso["metrics"]["apcs"]["ci_high"]
    assert doc["chapters"]["summary"]["status"] == "ok"
    assert doc["chapters"]["semantic"]["status"] == "skipped"
    assert "word_pairs" in doc["chapters"]["semantic"]["reason"]
    assert "runs" in doc["chapters"]["stability"]["reason"]
    assert all(ch["status"] in ("ok", "skipped") for ch in doc["chapters"].values())
    assert {n for n, ch in doc["chapters"].items() if ch["status"] == "ok"} >= {"summary", "isotropy", "hubness"}


def test_one_neighbour_graph_per_space_is_shared_by_the_chapters(report):
    """The runner computes the set's cosine graph once; hubness and correction (running side by side)
    read it, and correction computes only its corrected spaces, each once."""
    shared = json.loads((report / "run.json").read_text())["neighbour_graph"]
    assert shared["source"] == "computed" and shared["metric"] == "cosine"
    graphs = {}
    for path in sorted((report / "results").glob("*.json")):
        for event in json.loads(path.read_text()).get("info", {}).get("neighbour_graphs", []):
            graphs.setdefault((event["space"], event["metric"]), []).append((path.stem, event["source"]))
    uses = graphs[(shared["space"], "cosine")]
    assert {u[0] for u in uses} == {"hubness", "correction"} and all(src == "cache" for _, src in uses)
    # the same sweep ranked by mutual proximity and summed the potential: hubness reads MP, not recomputes it
    assert {"cosine", "mutual_proximity", "potential"} <= set(shared["products"])
    assert graphs[(shared["space"], "mutual_proximity")] == [("hubness", "cache")]
    corrected = [s for s, u in graphs.items() if s[0] != shared["space"] and ("correction", "computed") in u]
    assert len(corrected) == 3  # centred, all-but-the-top, whitened: each its own graph
    assert all(sum(src == "computed" for _, src in u) <= 1 for u in graphs.values())


def test_html_has_chapters_figures_tables_and_escapes(report):
    html = (report / "report.html").read_text()
    for anchor in ("chapter-summary", "chapter-isotropy"):
        assert f'id="{anchor}"' in html
    assert html.count("data:image/png;base64,") >= 3
    assert "<table" in html and "Scorecard" in html and 'href="#chapter-isotropy"' in html
    assert "Tiny &lt;b&gt;report&lt;/b&gt;" in html and "<b>report</b>" not in html
    assert "tiny <set>" not in html
    assert "<script src=\"http" not in html


def test_pdf_has_pages_and_chapters(report):
    reader = PdfReader(report / "report.pdf")
    assert len(reader.pages) >= 3
    text = " ".join(p.extract_text() for p in reader.pages)
    assert "Summary" in text and "Isotropy" in text and "Scorecard" in text


def test_executed_notebooks_open_with_outputs(report):
    nb = nbformat.read(report / "chapters" / "10_isotropy.ipynb", as_version=4)
    assert nb.metadata["embeval"]["status"] == "ok"
    assert any(o.get("output_type") == "display_data" for c in nb.cells if c.cell_type == "code"
               for o in c.get("outputs", []))


def test_render_command_rerenders(report, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(report, copy)
    (copy / "report.html").unlink()
    assert main(["render", str(copy), "--formats", "html"]) == 0
    assert (copy / "report.html").exists()


def test_failing_chapter_still_yields_a_report(tmp_path, monkeypatch):
    from dataclasses import replace

    from embeval_report import resources

    nbs = tmp_path / "notebooks"
    shutil.copytree(notebooks_dir(), nbs)
    broken = nbformat.read(nbs / "10_isotropy.ipynb", as_version=4)
    broken.cells.insert(3, nbformat.v4.new_code_cell("raise RuntimeError('planted failure <x>')"))
    nbformat.write(broken, nbs / "21_broken.ipynb")
    monkeypatch.setattr(resources, "notebooks_dir", lambda: nbs)
    declared = registry._declared()
    spec = replace(registry.chapter("isotropy"), name="broken", title="Broken chapter", order=21)
    monkeypatch.setattr(registry, "_declared", lambda: tuple(sorted((*declared, spec), key=lambda c: c.order)))
    out = tmp_path / "out"
    assert main(["run", str(write_set(tmp_path)), "--out", str(out), "--formats", "html",
                 "--chapters", "isotropy,broken"]) == 4  # report written
    doc = json.loads((out / "metrics.json").read_text())
    check_metrics_schema(doc)
    assert doc["chapters"]["broken"]["status"] == "failed"
    assert "planted failure" in doc["chapters"]["broken"]["reason"]
    assert doc["chapters"]["isotropy"]["status"] == "ok"
    html = (out / "report.html").read_text()
    assert 'id="chapter-broken"' in html and "planted failure &lt;x&gt;" in html
    assert 'id="chapter-isotropy"' in html


def test_fail_on_gates_and_chapter_selection(tmp_path):
    manifest = write_set(tmp_path, shift=3.0)  # a narrow cone: APCS problematic
    out = tmp_path / "gate"
    rc = main(["run", str(manifest), "--out", str(out), "--formats", "html", "--fail-on", "problematic",
               "--chapters", "isotropy"])
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["chapters"]["isotropy"]["metrics"]["apcs"]["verdict"] == "problematic"
    # the geometry alone (no task chapter selected) never makes the status problematic: the gate passes, and
    # metrics.json says what the status rests on
    assert rc == 0 and doc["status"] != "problematic" and doc["scope"] == "geometry only"
    # without a task, the remedy check gives the what-if on the neighbour lists; the diagnostic is a note
    assert [n for n, ch in doc["chapters"].items() if ch["status"] == "ok"] == ["summary", "isotropy", "remedies",
                                                                                 "rigor"]
    (f,) = [f for f in doc["findings"] if f["chapter"] == "isotropy"]
    assert f["severity"] == "note" and "centring would change" in f["sentence"]


def test_unknown_chapter_and_bad_input_exit_2_without_traceback(tmp_path, capsys):
    manifest = write_set(tmp_path)
    assert main(["run", str(manifest), "--out", str(tmp_path / "o"), "--chapters", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown chapter" in err and "Traceback" not in err
    (tmp_path / "bad.yaml").write_text("vectors: [unclosed\n")
    assert main(["run", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_chapters_command_reports_readiness(tmp_path, capsys):
    assert main(["chapters", str(write_set(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "isotropy" in out and "ready" in out


@pytest.mark.skipif(not quarto_available(), reason="quarto is not on PATH")
def test_quarto_renderer(report, tmp_path):
    copy = tmp_path / "q"
    shutil.copytree(report, copy)
    assert main(["render", str(copy), "--renderer", "quarto"]) == 0
    assert (copy / "report.html").exists() and (copy / "report.pdf").exists()
