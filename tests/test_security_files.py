"""Hostile input, files (issue 40, cases 3, 4 and 13): a folder is replaced only when it is an earlier report
embeval-report wrote, no file is written through a symbolic link, and the published files name no folder,
Python environment or host of the machine that made them."""
from __future__ import annotations

import json
import os
import re
import socket
import sys

import nbformat
import numpy as np
import pytest

from embeval_report.cli import main
from embeval_report.errors import InputError
from embeval_report.io.monitor_history import append_history
from embeval_report.report import outdir
from embeval_report.report.earlier import EarlierReport, mark
from embeval_report.report.execution import publish_notebook
from embeval_report.report.explore import report_source
from embeval_report.report.outdir import OutputFolder, lock_path, owner_tag
from embeval_report.safe_files import portable_path, private_prefixes, scrub

RUN = ["--chapters", "isotropy", "--formats", "html"]


def one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("embeval-report: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def snapshot(folder):
    """Every file under ``folder`` with its bytes (links as their target text)."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = (os.readlink(path) if os.path.islink(path)
                                                    else open(path, "rb").read())
    return found


def small_set(folder, n=60, d=6):
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "v.npy", np.random.default_rng(0).standard_normal((n, d)).astype(np.float32))
    return folder / "v.npy"


# ------------------------------------------------------------------------------- case 3: earlier reports

def training_folder(folder):
    (folder / "models").mkdir(parents=True)
    (folder / "results").mkdir()
    (folder / "embeddings").mkdir()
    (folder / "run.json").write_text(json.dumps({"lr": 0.001}))
    (folder / "models" / "model.pt").write_bytes(b"weights")
    (folder / "results" / "loss.csv").write_text("epoch,loss\n1,0.5\n")
    (folder / "embeddings" / "e.npy").write_bytes(b"vectors")
    return folder


def test_a_training_folder_with_a_run_json_is_refused_and_untouched(tmp_path, capsys):
    vecs = small_set(tmp_path / "in")
    out = training_folder(tmp_path / "train")
    before = snapshot(out)
    assert main(["run", str(vecs), "--out", str(out), *RUN]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "its run.json was not written by embeval-report" in line and "--force" in line
    assert main(["run", str(vecs), "--out", str(out), *RUN, "--force"]) == 2  # even with --force: its results/
    assert "will not replace them even with --force" in one_error_line(capsys.readouterr().err)
    assert snapshot(out) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".train.")]  # no staging, no lock left


def legacy_report(folder, files=("chapters", "metrics.json", "report.html", "results", "run.json")):
    """A report as the versions before the marker wrote it."""
    (folder / "chapters").mkdir(parents=True)
    (folder / "results").mkdir()
    (folder / "metrics.json").write_text("{}")
    (folder / "report.html").write_text("old")
    (folder / "run.json").write_text(json.dumps({
        "title": "t", "name": "n", "source": "/somewhere/v.npy", "seed": 0, "version": "0.1.0",
        "generated": "2025-01-01T00:00:00+00:00", "chapters": [{"name": "isotropy", "status": "ok"}],
        "files": list(files)}))
    return folder


def test_a_report_of_an_earlier_version_is_replaced_only_when_its_files_match(tmp_path):
    out = legacy_report(tmp_path / "old")
    assert EarlierReport.read(out).legacy and not OutputFolder.check(out).merge
    (out / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="notes.txt"):
        OutputFolder.check(out)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "run.json").write_text(json.dumps({"files": ["run.json", "results"]}))  # no structure of a report
    assert EarlierReport.read(bare) is None


def test_a_file_of_the_user_inside_a_report_folder_is_never_deleted(tmp_path):
    out = tmp_path / "r"
    (out / "results").mkdir(parents=True)
    (out / "results" / "a.json").write_text("{}")
    (out / "chapters").mkdir()
    (out / "chapters" / "10_x.ipynb").write_text("{}")
    (out / "run.json").write_text(json.dumps(mark({}, out)))
    ckpt = out / "chapters" / ".ipynb_checkpoints"
    ckpt.mkdir()
    (ckpt / "10_x-checkpoint.ipynb").write_text("{}")  # JupyterLab's copy of a notebook the report wrote
    assert not OutputFolder.check(out).merge
    (out / "results" / "my-analysis.csv").write_text("precious")
    for force in (False, True):
        with pytest.raises(InputError, match="results/my-analysis.csv.*even with --force"):
            OutputFolder.check(out, force=force)
    assert (out / "results" / "my-analysis.csv").read_text() == "precious"


def test_clean_and_the_next_run_leave_a_folder_named_like_staging_with_other_files(tmp_path):
    host = owner_tag().split("@", 1)[1]
    forged = tmp_path / f".o.partial-999999999@{host}-abcd1234"  # no such pid: it would count as gone
    (forged / "models").mkdir(parents=True)
    (forged / "thesis.tex").write_text("precious")
    assert outdir.remove_stale(tmp_path / "o", say=lambda line: None) == []
    outdir.clean(tmp_path, say=lambda line: None)
    assert (forged / "thesis.tex").read_text() == "precious"


# ------------------------------------------------------------------------------ case 4: symbolic links

def test_a_symlinked_lock_is_refused_and_its_target_unchanged(tmp_path, capsys):
    vecs = small_set(tmp_path / "in")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "o"
    lock_path(out).symlink_to(victim)
    assert main(["run", str(vecs), "--out", str(out), *RUN]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(lock_path(out)) in line and "symbolic link" in line
    assert victim.read_text() == "precious" and not out.exists() and lock_path(out).is_symlink()


def test_a_lock_file_that_is_not_a_lock_is_not_overwritten(tmp_path, capsys):
    vecs = small_set(tmp_path / "in")
    out = tmp_path / "o"
    lock_path(out).write_text("my notes")
    assert main(["run", str(vecs), "--out", str(out), *RUN]) == 2
    assert "not a lock embeval-report wrote" in one_error_line(capsys.readouterr().err)
    assert lock_path(out).read_text() == "my notes"


@pytest.fixture(scope="module")
def profile_folder(tmp_path_factory):
    from embeval_report.monitoring import build_profile, save_profile

    X = np.random.default_rng(1).standard_normal((400, 8)).astype(np.float32)
    folder = tmp_path_factory.mktemp("profile") / "p"
    return save_profile(build_profile(X, name="ref", sample_size=200, calibration=100, device="cpu"), folder)


@pytest.mark.parametrize("option", ["--json", "--history"])
def test_monitor_refuses_a_symlinked_json_or_history(option, profile_folder, tmp_path, capsys):
    batch = small_set(tmp_path / "in", n=50, d=8)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "out" / "link.json"
    link.parent.mkdir()
    link.symlink_to(victim)
    assert main(["monitor", str(profile_folder), str(batch), option, str(link)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"{option} {link}: is a symbolic link" in line
    assert victim.read_text() == "precious" and sorted(p.name for p in link.parent.iterdir()) == ["link.json"]


def test_the_history_append_and_a_profile_never_write_through_a_link(profile_folder, tmp_path):
    from embeval_report.monitoring import load_profile, save_profile

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "h.jsonl").symlink_to(victim)
    with pytest.raises(InputError, match="--history .*h.jsonl: is a symbolic link"):
        append_history(tmp_path / "h.jsonl", {"batch": "b"})
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "profile.json").symlink_to(victim)
    with pytest.raises(InputError, match="profile.json: is a symbolic link"):
        save_profile(load_profile(profile_folder), tmp_path / "p")
    assert victim.read_text() == "precious" and sorted(p.name for p in (tmp_path / "p").iterdir()) == ["profile.json"]


# ----------------------------------------------------------------------------- case 13: published files

def private_strings(tmp_path) -> list[str]:
    host = socket.gethostname()
    found = {str(tmp_path), os.path.realpath(tmp_path), sys.prefix, f"@{host}-", ".partial-"}
    return sorted(found)


def leaks(folder, strings, host=socket.gethostname()) -> list[str]:
    """``(file, string)`` for every private string a file of ``folder`` holds (the PDF's text extracted too)."""
    found = []
    for rel, data in snapshot(folder).items():
        texts = [data.decode("utf-8", "replace") if isinstance(data, bytes) else data]
        if rel.endswith(".pdf"):
            import pypdf

            reader = pypdf.PdfReader(folder / rel)
            texts.append("".join(p.extract_text() or "" for p in reader.pages) + str(reader.metadata))
        for text in texts:
            found += [f"{rel}: {s}" for s in strings if s in text]
            if len(host) >= 5 and re.search(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", text):
                found.append(f"{rel}: host {host}")
    return found


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A report (HTML and PDF) of a manifest with metadata, written next to its input."""
    from conftest import built_once

    def build(root):
        data = root / "in"
        small_set(data, n=80, d=8)
        ids = [f"u{i}" for i in range(80)]
        (data / "ids.txt").write_text("".join(f"{i}\n" for i in ids))
        (data / "meta.csv").write_text("id,label\n" + "".join(f"{i},{'ab'[k % 2]}\n" for k, i in enumerate(ids)))
        (data / "m.yaml").write_text("name: tiny\nvectors: v.npy\nids: ids.txt\nmetadata: meta.csv\n")
        return {"rc": main(["run", str(data / "m.yaml"), "--out", str(root / "reports" / "r"), "--chapters",
                            "isotropy"])}

    root, done = built_once(tmp_path_factory, "published", build)  # once per session, not per worker
    assert done["rc"] == 0
    return root, root / "in" / "m.yaml", root / "reports" / "r"


def test_published_files_hold_no_private_path(published):
    root, manifest, out = published
    assert {"report.html", "report.pdf", "metrics.json", "run.json", "explore.ipynb"} <= {p.name for p in out.iterdir()}
    assert leaks(out, private_strings(root)) == []
    run, metrics = (json.loads((out / f).read_text()) for f in ("run.json", "metrics.json"))
    assert run["source"] == metrics["source"] == "../../in/m.yaml"  # relative to the report folder
    nb = nbformat.read(out / "chapters" / "10_isotropy.ipynb", as_version=4)
    assert 'source = "../../../in/m.yaml"' in injected(nb)  # relative to chapters/, where it runs
    assert nb.metadata.papermill.output_path == "chapters/10_isotropy.ipynb"
    assert report_source(out) == out / "../../in/m.yaml" and report_source(out).resolve() == manifest


def injected(nb) -> str:
    """The parameters cell papermill injected."""
    return next(c.source for c in nb.cells if "injected-parameters" in c.metadata.get("tags", []))


def test_a_notebook_rerun_in_its_folder_finds_its_input(published, monkeypatch):
    from embeval_report.chapters.setup import open_chapter

    root, manifest, out = published
    nb = nbformat.read(out / "chapters" / "10_isotropy.ipynb", as_version=4)
    params = {}
    exec(injected(nb), {}, params)
    monkeypatch.chdir(out / "chapters")  # JupyterLab's working folder is the notebook's
    ctx = open_chapter("isotropy", params["source"], params["prepared"], str(root / "rerun-results"),
                       params["settings"])
    assert ctx.es.n == 80 and ctx.es.source


def test_record_paths_keeps_absolute_paths_in_run_json_only(published):
    import shutil

    root, manifest, out = published
    out = shutil.copytree(published[2], out.with_name("r2"))  # an earlier report there: replaced
    assert main(["run", str(manifest), "--out", str(out), *RUN, "--record-paths"]) == 0
    run, metrics = (json.loads((out / f).read_text()) for f in ("run.json", "metrics.json"))
    assert run["source"] == str(manifest.resolve()) and metrics["source"] == "../../in/m.yaml"
    assert "report.pdf" not in run["files"] and not (out / "report.pdf").exists()
    out_json = snapshot(out)
    out_json.pop("run.json")
    assert not [rel for rel, data in out_json.items() if str(root).encode() in data]


def test_tracebacks_and_papermill_records_are_scrubbed(tmp_path):
    staging = tmp_path / f".r.partial-{owner_tag()}-abcd1234"
    (staging / "chapters").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output(
        "error", ename="OSError", evalue=f"cannot read '{tmp_path}/in/v.npy'",
        traceback=[f"File \x1b[0;32m{sys.prefix}/lib/python3/site-packages/numpy/io.py:12\x1b[0m",
                   f"File {staging}/chapters/10_x.ipynb:3", f"File {os.path.expanduser('~')}/x.py:1"]),
        nbformat.v4.new_output("stream", name="stderr", text=f"{staging}/.prepared/vectors.npy")]
    nb.cells.append(cell)
    nb.metadata["papermill"] = {"input_path": "/work/notebooks/10_x.ipynb", "output_path": str(staging / "x")}
    target = staging / "chapters" / "10_x.ipynb"
    nbformat.write(nb, target)
    publish_notebook(target, target, staging)
    text = target.read_text()
    for private in (str(tmp_path), sys.prefix, owner_tag(), "/work/notebooks"):
        assert private not in text, private
    out = nbformat.read(target, as_version=4).cells[0].outputs
    assert out[0].traceback[0].startswith("File \x1b[0;32m[python]/lib/python3/site-packages/numpy/io.py")
    assert out[0].traceback[1] == "File chapters/10_x.ipynb:3" and out[0].traceback[2] == "File ~/x.py:1"
    assert out[0].evalue == "cannot read '../in/v.npy'" and out[1].text == ".prepared/vectors.npy"


def test_portable_paths_and_scrub():
    assert portable_path("/data/in/m.yaml", "/data/reports/r") == "../../in/m.yaml"
    assert portable_path("/home/alice/m.yaml", "/tmp/r") == "m.yaml"  # only the root in common: the name alone
    prefixes = private_prefixes(("/tmp/ab", "x"))
    assert scrub("/tmp/ab/c and /tmp/abc", prefixes) == "x/c and /tmp/abc"  # whole components only
