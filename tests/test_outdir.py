"""The --out rules, exit statuses, interrupts and progress lines of a run."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from embeval_report.cli import main
from embeval_report.errors import InputError
from embeval_report.report.earlier import mark
from embeval_report.report.outdir import OutputFolder


def small_set(folder, n=60, d=6):
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "v.npy", np.random.default_rng(0).standard_normal((n, d)).astype(np.float32))
    return folder / "v.npy"


def fake_report(folder, extra=()):
    """A folder as an earlier run leaves it (run.json lists what it wrote)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = ["chapters", "metrics.json", "report.html", "results", "run.json"]
    (folder / "chapters").mkdir()
    (folder / "results").mkdir()
    for name in ("metrics.json", "report.html"):
        (folder / name).write_text("old")
    assert sorted(p.name for p in folder.iterdir()) == sorted(set(written) - {"run.json"})
    (folder / "run.json").write_text(json.dumps(mark({}, folder)))  # the marker, and every file written
    for name in extra:
        (folder / name).write_text("mine")
    return folder


def staged(target):
    staging = target.staging()
    (staging / "report.html").write_text("new")
    (staging / "run.json").write_text(json.dumps(mark({}, staging)))
    return staging


def test_new_and_empty_folders_are_written(tmp_path):
    for out in (tmp_path / "new", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        target = OutputFolder.check(out)
        target.commit(staged(target))
        assert (out / "report.html").read_text() == "new"
    assert not list(tmp_path.glob(".*partial*")) and not list(tmp_path.glob(".*old*"))


def test_an_earlier_report_is_replaced_whole(tmp_path):
    out = fake_report(tmp_path / "r")
    target = OutputFolder.check(out)
    assert not target.merge
    target.commit(staged(target))
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "run.json"]


def test_a_foreign_folder_is_refused_and_untouched(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(InputError, match="not an embeval-report output.*--force"):
        OutputFolder.check(out)
    assert (out / "thesis.tex").read_text() == "precious"


def test_force_adds_the_report_beside_foreign_files(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    target = OutputFolder.check(out, force=True)
    target.commit(staged(target))
    assert (out / "thesis.tex").read_text() == "precious" and (out / "report.html").exists()


def test_force_never_replaces_an_entry_it_did_not_write(tmp_path):
    out = tmp_path / "mine"
    (out / "chapters").mkdir(parents=True)
    (out / "chapters" / "notes.md").write_text("precious")
    with pytest.raises(InputError, match="chapters"):
        OutputFolder.check(out, force=True)
    assert (out / "chapters" / "notes.md").read_text() == "precious"


def test_earlier_report_with_a_user_file_needs_force_and_keeps_it(tmp_path):
    out = fake_report(tmp_path / "r", extra=["notes.txt"])
    with pytest.raises(InputError, match="notes.txt"):
        OutputFolder.check(out)
    target = OutputFolder.check(out, force=True)
    assert target.merge
    target.commit(staged(target))
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "report.html").read_text() == "new"
    assert not (out / "metrics.json").exists()  # the earlier report's own file, not rewritten: removed


def test_a_file_as_out_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        OutputFolder.check(tmp_path / "f")


def test_cli_refuses_a_foreign_folder_then_writes_with_force(tmp_path, capsys):
    vecs = small_set(tmp_path / "in")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    args = ["run", str(vecs), "--out", str(out), "--chapters", "isotropy", "--formats", "html"]
    assert main(args) == 2
    assert "--force" in capsys.readouterr().err and sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert main(args + ["--force"]) == 0
    assert (out / "keep.txt").read_text() == "precious" and (out / "report.html").exists()
    run = json.loads((out / "run.json").read_text())
    assert "keep.txt" not in run["files"] and "report.html" in run["files"]
    assert main(args) == 2  # an earlier report that also holds the user's file: still refused without --force


def _run_cli(args, **kw):
    env = dict(os.environ, EMBEVAL_PROGRESS="", PYTHONUNBUFFERED="1")
    env.pop("EMBEVAL_PROGRESS")
    return subprocess.Popen([sys.executable, "-m", "embeval_report.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kw)


def test_progress_lines_when_output_is_not_a_terminal(tmp_path, capsys, monkeypatch):
    """In this process (stderr captured: not a terminal), whose kernel template is already running: a run in a
    process of its own paid its imports and its template's start for the same lines."""
    monkeypatch.delenv("EMBEVAL_PROGRESS", raising=False)
    vecs = small_set(tmp_path / "in")
    code = main(["run", str(vecs), "--out", str(tmp_path / "o"), "--chapters", "isotropy", "--formats", "html"])
    err = capsys.readouterr().err
    assert code == 0 and not sys.stderr.isatty(), err
    assert "isotropy: started" in err and "isotropy: ok in" in err and "summary: ok in" in err
    assert "\r" not in err  # no bars


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_sigterm_removes_staging_and_exits_130(tmp_path, jobs):
    # 300 x 16: the signal comes while the first of several geometry chapters runs in its kernel (a 3,000 x 32 set
    # only made the shared work before the first chapter longer)
    vecs = small_set(tmp_path / "in", n=300, d=16)
    out = tmp_path / "o"
    proc = _run_cli(["run", str(vecs), "--out", str(out), "--formats", "html", "--jobs", jobs])
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(tmp_path.glob(".o.partial-*/chapters/*.ipynb")):
            time.sleep(0.2)  # wait until a chapter kernel is running
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:  # a run that did not end is not left behind (its kernels and template end with it)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not out.exists() and not list(tmp_path.glob(".o.*"))
