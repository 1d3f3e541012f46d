"""The Python API: evaluate() and compare() give the command line's numbers and messages; executed notebooks carry
the report folder's own paths, so a moved report's chapter re-runs in place."""
import gc
import json
import os
import shutil

import nbformat
import numpy as np
import pandas as pd
import pytest
from api_sets import CHAPTERS, metric_values, write_small_set
from conftest import built_once

from embeval_report import Comparison, InputError, Report, compare, evaluate, load_source
from embeval_report.cli import main
from embeval_report.report.runner import _final_path


def _metrics(folder):
    return json.loads((folder / "metrics.json").read_text())


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The small set, and the command line's reports on its manifest (isotropy, retrieval) and on its bare vectors
    file (isotropy)."""
    def build(tmp):
        manifest = write_small_set(tmp / "set")
        return {"rc": [main(["run", str(manifest), "--out", str(tmp / "cli"), "--chapters", ",".join(CHAPTERS),
                             "--formats", "html", "--seed", "3", "--set", "k=7"]),
                       main(["run", str(tmp / "set" / "vectors.npy"), "--out", str(tmp / "cli-file"), "--chapters",
                             "isotropy", "--formats", "html", "--seed", "3"])]}

    tmp, done = built_once(tmp_path_factory, "api-reports", build)  # once per session, not once per worker
    assert done["rc"] == [0, 0]
    return tmp, tmp / "set" / "manifest.yaml"


def test_evaluate_on_a_manifest_gives_the_command_lines_metrics(made):
    tmp, manifest = made
    report = evaluate(manifest, tmp / "api", chapters=CHAPTERS, formats="html", seed=3, options={"k": 7})
    assert isinstance(report, Report) and report.path == (tmp / "api").resolve()
    cli = _metrics(tmp / "cli")
    assert metric_values(_metrics(report.path)) == metric_values(cli)
    # the metrics table is metrics.json, row for row
    expected = [(c, m, v["value"], v["verdict"], v["direction"]) for c, e in cli["chapters"].items()
                for m, v in e["metrics"].items()]
    got = list(report.metrics[["chapter", "name", "value", "verdict", "direction"]].itertuples(index=False, name=None))
    none = lambda x: None if pd.isna(x) else x  # noqa: E731 - a missing cell of the table is metrics.json's null
    assert [(c, m, none(v), none(vd), none(d)) for c, m, v, vd, d in got] == expected  # counts: no direction
    assert list(report.metrics.columns) == ["chapter", "name", "value", "ci_low", "ci_high", "verdict", "direction",
                                            "label", "reference", "slice", "ci_method", "n", "outside_ci",
                                            "bias_corrected", "citations"]
    retrieval = report.metrics.set_index(["chapter", "name"]).loc[("retrieval", "ndcg_at_10")]
    assert retrieval["label"] != "ndcg_at_10" and retrieval["ci_low"] <= retrieval["value"] <= retrieval["ci_high"]
    assert set(report.chapters.query("status == 'ok'")["name"]) == {"summary", "isotropy", "retrieval", "rigor"}
    assert report.files["html"] == report.path / "report.html"
    html = report._repr_html_()
    assert "report.html" in html and "Embedding evaluation: small set" in html


def test_evaluate_on_a_file_and_an_array_gives_the_command_lines_metrics(made):
    tmp, manifest = made
    cli = metric_values(_metrics(tmp / "cli-file"))
    on_file = evaluate(tmp / "set" / "vectors.npy", chapters=["isotropy"], formats=["html"], seed=3)
    assert metric_values(_metrics(on_file.path)) == cli
    X = np.load(tmp / "set" / "vectors.npy").astype(np.float64)  # cast to float32 as a file is
    on_array = evaluate(X, chapters="isotropy", formats="html", seed=3)
    assert metric_values(_metrics(on_array.path)) == cli
    # the array is kept inside the report, its manifest pointing at it relative to itself
    assert on_array.run["source"] == "embeddings/manifest.yaml"  # relative to the report folder
    assert on_array.set.n == 160 and not on_array.set.ids_given
    # out=None: a temporary folder that lives as long as the object
    folder = on_array.path
    assert folder.exists()
    del on_array
    gc.collect()
    assert not folder.exists()


def test_evaluate_on_an_embedding_set_keeps_its_ids_metadata_and_side_data(made):
    tmp, manifest = made
    es = load_source(manifest)
    report = evaluate(es, chapters=CHAPTERS, formats="html", seed=3, options={"k": 7})
    assert metric_values(_metrics(report.path)) == metric_values(_metrics(tmp / "cli"))
    written = load_source(report.path / "embeddings" / "manifest.yaml")
    assert list(written.ids) == list(es.ids)
    pd.testing.assert_frame_equal(written.metadata, es.metadata)


def test_bad_input_raises_the_command_lines_one_line(made, tmp_path, capsys):
    tmp, _ = made
    bad = tmp / "set" / "bad.yaml"
    bad.write_text("vectors: vectors.npy\nlables: x.csv\n")
    assert main(["run", str(bad), "--out", str(tmp_path / "o")]) == 2
    line = capsys.readouterr().err.strip().removeprefix("embeval-report: error: ")
    with pytest.raises(InputError) as err:
        evaluate(bad, tmp_path / "o2")
    assert str(err.value) == line and "lables" in line
    # NaN in an array: the message a file with the same rows gets, naming the array
    X = np.load(tmp / "set" / "vectors.npy")
    X[2, 0] = np.nan
    np.save(tmp_path / "nan.npy", X)
    assert main(["run", str(tmp_path / "nan.npy"), "--out", str(tmp_path / "o")]) == 2
    line = capsys.readouterr().err.strip().removeprefix("embeval-report: error: ")
    with pytest.raises(InputError) as err:
        evaluate(X, tmp_path / "o3")
    assert str(err.value) == line.replace("nan.npy", "array") == "array, row 3, column 1: NaN; expected finite numbers"
    with pytest.raises(InputError, match="--set|option k"):
        evaluate(tmp / "set" / "vectors.npy", tmp_path / "o4", options={"k": "many"})
    with pytest.raises(InputError, match="^chapters: unknown chapter"):  # the keyword, not the flag
        evaluate(tmp / "set" / "vectors.npy", tmp_path / "o5", chapters=["nope"])
    with pytest.raises(TypeError, match="unknown setting 'sede'"):
        evaluate(X, sede=1)
    with pytest.raises(InputError, match="ids"):
        evaluate(np.ones((3, 2)), ids=["a", "a", "b"])
    assert not any((tmp_path / f"o{i}").exists() for i in range(2, 6))


def test_compare_gives_the_command_lines_table(made, tmp_path):
    tmp, manifest = made
    noisier = write_small_set(tmp_path / "set-b", noise=1.4, name="noisier")  # the same ids, noisier vectors
    cmp = compare(tmp / "cli", noisier, names=["a", "b"], chapters=CHAPTERS, formats="html", seed=3,
                  options={"k": 7})
    assert isinstance(cmp, Comparison) and len(cmp.models) == 2
    assert cmp.models[0].path == (tmp / "cli").resolve() and cmp.models[1].path == cmp.path / "models" / "b"
    assert main(["compare", str(tmp / "cli"), str(cmp.models[1].path), "--names", "a,b", "--out",
                 str(tmp_path / "cli-cmp"), "--formats", "html", "--seed", "3"]) == 0
    cli = pd.read_csv(tmp_path / "cli-cmp" / "comparison.csv")
    pd.testing.assert_frame_equal(pd.read_csv(cmp.path / "comparison.csv"), cli)
    assert len(cmp.table) == len(cli) > 0 and set(cmp.table["chapter"]) == {"retrieval"}
    assert list(cmp.table["diff"]) == pytest.approx(list(cli["diff"]), rel=0, abs=0)
    assert "retrieval" in cmp._repr_html_() and cmp.rollup()


def test_executed_notebooks_point_to_the_final_folder_and_rerun_after_a_move(made, tmp_path):
    import papermill as pm

    report = evaluate(np.load(made[0] / "set" / "vectors.npy"), tmp_path / "report", chapters="isotropy",
                      formats="html", ids=[f"row{i}" for i in range(160)])
    for nb_path in (report.path / "chapters").glob("*.ipynb"):
        injected = [c.source for c in nbformat.read(nb_path, as_version=4).cells
                    if "injected-parameters" in c.metadata.get("tags", [])]
        assert injected and ".partial-" not in injected[0], nb_path.name
    cell = [c.source for c in nbformat.read(report.path / "chapters" / "10_isotropy.ipynb", as_version=4).cells
            if "injected-parameters" in c.metadata.get("tags", [])][0]
    assert 'source = "../embeddings/manifest.yaml"' in cell and 'prepared = "../.prepared"' in cell
    assert ".partial-" not in (report.path / "run.json").read_text()
    before = json.loads((report.path / "results" / "isotropy.json").read_text())["metrics"]
    moved = tmp_path / "elsewhere" / "moved-report"
    moved.parent.mkdir()
    shutil.move(report.path, moved)
    chapters = moved / "chapters"
    pm.execute_notebook(str(chapters / "10_isotropy.ipynb"), str(chapters / "10_isotropy.ipynb"),
                        kernel_name="python3", progress_bar=False, cwd=str(chapters))
    after = json.loads((moved / "results" / "isotropy.json").read_text())["metrics"]
    assert {k: v["value"] for k, v in after.items()} == {k: v["value"] for k, v in before.items()}


def test_final_path_maps_the_staging_folder_to_the_report_folder(tmp_path):
    staging, out = tmp_path / ".out.partial-1@h-x", tmp_path / "out"
    assert _final_path(staging / "demo-data" / "all-MiniLM-L6-v2", staging, out) == \
        str(out / "demo-data" / "all-MiniLM-L6-v2")
    assert _final_path(tmp_path / "models" / "m", staging, out) == str(tmp_path / "models" / "m")
    assert os.path.isabs(_final_path("relative/file.yaml", staging, out))
