"""Chapter kernels forked from a template process (report/kernel_forks.py): the same numbers as kernels started
the usual way, and the usual way whenever the template cannot serve."""
import json
import os

import pytest

from embeval_report.cli import main
from embeval_report.report import kernel_forks
from embeval_report.report.kernel_forks import KernelForks
from tests.test_end_to_end import write_set

CHAPTERS = "isotropy,uniformity,hubness"


def _run(tmp_path, name):
    out = tmp_path / name
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--seed", "5", "--formats", "html",
                 "--chapters", CHAPTERS, "--jobs", "1"]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    return {c: doc["chapters"][c]["metrics"] for c in CHAPTERS.split(",")}


@pytest.mark.skipif(not kernel_forks.enabled(), reason="no os.fork on this platform")
def test_forked_kernels_compute_the_numbers_of_fresh_ones(tmp_path, monkeypatch):
    write_set(tmp_path)
    forked = []
    real = KernelForks.fork
    monkeypatch.setattr(KernelForks, "fork", lambda self, *a: forked.append(real(self, *a)) or forked[-1])
    with_forks = _run(tmp_path, "forked")
    assert len(forked) >= len(CHAPTERS.split(",")) and all(p is not None for p in forked)
    monkeypatch.setenv(kernel_forks.SWITCH, "0")
    forked.clear()
    fresh = _run(tmp_path, "fresh")
    assert forked == [] and with_forks == fresh


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc")
def test_runs_in_one_process_hold_no_more_files_each_time(tmp_path):
    """A report run releases its kernels' channels (nbclient leaves them open on a kernel it did not start): the
    Python API evaluating many models in one notebook does not run out of file descriptors."""
    write_set(tmp_path)
    held = []
    for name in ("a", "b", "c"):
        assert main(["run", str(tmp_path / "m.yaml"), "--out", str(tmp_path / name), "--formats", "html",
                     "--chapters", "isotropy", "--jobs", "1"]) == 0
        held.append(len(os.listdir("/proc/self/fd")))
    assert held[2] <= held[1] <= held[0] + 2, held


def test_switch_and_a_dead_template_fall_back_to_the_usual_start(monkeypatch):
    monkeypatch.setenv(kernel_forks.SWITCH, "0")
    assert not kernel_forks.enabled() and KernelForks().proc is None
    monkeypatch.delenv(kernel_forks.SWITCH)
    if not kernel_forks.enabled():
        pytest.skip("no os.fork on this platform")
    with KernelForks() as forks:
        assert forks.alive
        forks.proc.kill()
        forks.proc.wait()
        assert forks.provisioner(object()) is None  # the kernel manager starts its kernel itself
        assert forks.fork(["-f", "x.json"], {}, ".") is None
