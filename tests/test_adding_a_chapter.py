"""Adding a chapter takes a metric module, a chapter module with its declaration, a notebook and tests: nothing
else. A copy of the package gains a toy chapter made of exactly those files; the command line lists it and its
option, runs it, records its metric, and turns its flagged metric into a finding."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

import embeval_report
from embeval_report.resources import notebooks_dir

SOURCE = Path(embeval_report.__file__).parent

METRIC_MODULE = '''"""A toy metric: the mean row norm, scaled (for the adding-a-chapter test)."""
import numpy as np

from .spec import MetricSpec, specs
from .thresholds import Bands

SPECS = specs(MetricSpec("toy_norm", "Mean row norm (scaled)", "lower", r"s \\frac{1}{n}\\sum_i \\lVert x_i \\rVert",
                         "a toy", bands=Bands("lower", 1.0, 2.0, "Toy table", "healthy < 1, problematic > 2")))


def toy_norm(X, scale: float = 1.0):
    return SPECS["toy_norm"].record(float(scale * np.linalg.norm(np.asarray(X, float), axis=1).mean()))
'''

CHAPTER_MODULE = '''"""A toy chapter (for the adding-a-chapter test)."""
from ..metrics import toy
from ..present.display import show_metrics, show_markdown
from .declaration import INF, ChapterSpec, Option
from .findings import Effect


def compute(ctx):
    m = toy.toy_norm(ctx.es.vectors, ctx.option("toy_scale"))
    ctx.rec.add(m)
    return m


def show_summary(m):
    show_markdown(f"The scaled mean norm is {m.value:.3f}.")


CHAPTER = ChapterSpec(
    name="toy", title="Toy chapter", order=93, description="How long are the vectors?", requires=("vectors",),
    options=(Option("toy_scale", 1.0, "toy: the scale of the norm", bounds=(0, INF)),),
    effects=(Effect("toy effect", ("toy_norm",), "The vectors are long", "Shorten them:"),),
)
'''


def _notebook(path: Path) -> None:
    base = nbformat.read(notebooks_dir() / "10_isotropy.ipynb", as_version=4)
    params = next(c for c in base.cells if "parameters" in c.metadata.get("tags", []))
    nb = nbformat.v4.new_notebook(metadata={"embeval": {"name": "toy"}, "kernelspec": base.metadata.kernelspec})
    nb.cells = [nbformat.v4.new_markdown_cell("# Toy chapter"), params,
                nbformat.v4.new_code_cell("from embeval_report.chapters import open_chapter, toy as chapter\n\n"
                                          'ctx = open_chapter("toy", source, prepared, results_dir, settings)\n'
                                          "report = ctx.run(chapter.compute)", metadata={"tags": ["remove-input"]}),
                nbformat.v4.new_markdown_cell("## What the numbers say"),
                nbformat.v4.new_code_cell("chapter.show_summary(report)")]
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """A copy of the package, its notebooks and templates, plus the toy chapter's three files."""
    root = tmp_path_factory.mktemp("copy")
    shutil.copytree(SOURCE, root / "embeval_report", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("templates", "_quarto.yml", "notebooks"):
        src = notebooks_dir().parent / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    (root / "embeval_report" / "metrics" / "toy.py").write_text(METRIC_MODULE)
    (root / "embeval_report" / "chapters" / "toy.py").write_text(CHAPTER_MODULE)
    _notebook(root / "notebooks" / "93_toy.ipynb")
    return root


#: the copy's command line run for each argument list, in one process (the package and its chapters imported
#: once, as one command would: a process per command imported them three times): a JSON list of [exit status,
#: standard output] on the last line
MANY = """
import contextlib, io, json, sys
from embeval_report.cli import main
done = []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        done.append([main(argv), out.getvalue()])
print(json.dumps(done))
"""


def _cli_each(package, *commands):
    """(exit status, standard output) of each command of the copy's command line, from one process (the copy's
    folder first on its path), and that process's standard error."""
    env = dict(os.environ, PYTHONPATH=str(package), EMBEVAL_PROGRESS="0")
    done = subprocess.run([sys.executable, "-c", MANY, json.dumps(commands)], capture_output=True, text=True,
                          env=env, cwd=package)
    assert done.returncode == 0, done.stderr
    return [tuple(r) for r in json.loads(done.stdout.strip().splitlines()[-1])], done.stderr


def test_a_new_chapter_needs_its_own_files_only(package, tmp_path):
    X = np.random.default_rng(0).standard_normal((60, 4))
    np.save(tmp_path / "x.npy", X.astype(np.float32))
    out = tmp_path / "out"
    run = ["run", str(tmp_path / "x.npy"), "--out", str(out), "--chapters", "toy", "--formats", "html",
           "--set", "toy_scale=2", "--fail-on", "problematic"]
    ((code, listed), (_, options), (status, _)), err = _cli_each(package, ["chapters"], ["options"], run)
    assert code == 0 and "toy" in listed and "Toy chapter" in listed
    assert "toy_scale = 1.0" in options and "chapters: toy" in options
    assert status == 3, err  # its flagged metric is a finding, and --fail-on gates on it
    doc = json.loads((out / "metrics.json").read_text())
    m = doc["chapters"]["toy"]["metrics"]["toy_norm"]
    expected = 2 * np.linalg.norm(X.astype(np.float32).astype(float), axis=1).mean()
    assert m["value"] == pytest.approx(expected, rel=1e-12) and m["verdict"] == "problematic"
    assert [(f["chapter"], f["title"]) for f in doc["findings"]] == [("toy", "The vectors are long")]
    assert "Toy chapter" in (out / "report.html").read_text()
