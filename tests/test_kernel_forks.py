"""Chapter kernels forked from a template process (report/kernel_forks.py): the same numbers as kernels started
the usual way, and the usual way whenever the template cannot serve."""
import json
import os
import signal
import sys

import pytest

from embeval_report.cli import main
from embeval_report.report import kernel_forks
from embeval_report.report.kernel_forks import KernelForks
from tests.test_end_to_end import write_set

CHAPTERS = "isotropy"


def _run(tmp_path, name):
    out = tmp_path / name
    assert main(["run", str(tmp_path / "m.yaml"), "--out", str(out), "--seed", "5", "--formats", "html",
                 "--chapters", CHAPTERS, "--jobs", "1"]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    return {c: doc["chapters"][c]["metrics"] for c in CHAPTERS.split(",")}


def _open_files() -> int | None:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None


@pytest.mark.skipif(not kernel_forks.enabled(), reason="no os.fork on this platform")
def test_runs_fork_their_kernels_and_hold_no_more_files(tmp_path, monkeypatch):
    """Every chapter kernel of a run is forked from the template, and a run releases its kernels' channels
    (nbclient leaves them open on a kernel it did not start), so the Python API evaluating many models in one
    notebook does not run out of file descriptors. That forked kernels give the numbers of fresh ones is
    test_end_to_end's test_numbers_do_not_depend_on_jobs (--jobs 2 starts fresh kernels, --jobs 1 forks)."""
    write_set(tmp_path)
    forked = []
    real = KernelForks.fork
    monkeypatch.setattr(KernelForks, "fork", lambda self, *a: forked.append(real(self, *a)) or forked[-1])
    first = _run(tmp_path, "forked")
    assert len(forked) >= len(CHAPTERS.split(",")) and all(p is not None for p in forked)
    held = _open_files()
    assert _run(tmp_path, "again") == first
    if held is not None:
        assert _open_files() <= held + 2, (held, _open_files())


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


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets are POSIX only")
def test_chapter_kernels_talk_over_private_unix_sockets(tmp_path, monkeypatch):
    """A chapter kernel's channels are Unix sockets in a folder only this process writes to, so no other process
    can take them between their choice and the kernel's bind (over TCP a parallel CI worker took a port and the
    chapter failed with "kernel died before replying to kernel_info"); its socket files go with the kernel, and a
    folder whose path is too long for a socket falls back to TCP."""
    import stat

    from embeval_report.report import execution

    kernel = execution.WarmKernel(tmp_path)
    try:
        assert kernel.km.transport == "ipc"
        folder = os.path.dirname(kernel.km.ip)
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        reply = kernel.kc.execute_interactive("print(6 * 7)", timeout=60)
        assert reply["content"]["status"] == "ok"
        assert len([f for f in os.listdir(folder) if f.startswith(os.path.basename(kernel.km.ip))]) == 5
    finally:
        kernel.release()
    assert not [f for f in os.listdir(folder) if f.startswith(os.path.basename(kernel.km.ip))]
    assert execution.kernel_sockets()["ip"] != execution.kernel_sockets()["ip"]  # one base name per kernel
    monkeypatch.setattr(execution, "_socket_folder", lambda: "/tmp/" + "x" * execution.SOCKET_PATH_MAX)
    assert execution.kernel_sockets() == {}


@pytest.mark.skipif(not kernel_forks.enabled(), reason="no os.fork on this platform")
def test_one_template_serves_the_runs_of_a_process_until_it_idles(tmp_path, monkeypatch):
    """Runs in one process share its template (its start, about 3 s of CPU, is paid once), which ends by itself
    after IDLE_SECONDS without a request once none of its kernels runs (a kernel ends with its template); the next
    run then starts another, and a switched-off process none."""
    import time

    from embeval_report.report.execution import WarmKernel

    write_set(tmp_path)
    first = KernelForks.shared()
    assert first.alive and KernelForks.shared() is first
    _run(tmp_path, "one")
    assert KernelForks.shared() is first and first.alive
    monkeypatch.setattr(kernel_forks, "IDLE_SECONDS", 0.5)
    with KernelForks() as idle:
        kernel = WarmKernel(tmp_path, idle)  # a chapter that computes longer than the idle time keeps its template
        try:
            assert kernel.kc.execute_interactive("import time; time.sleep(2)", timeout=60)["content"]["status"] == "ok"
            assert idle.alive and kernel.km.is_alive()
        finally:
            kernel.release()
        end = time.monotonic() + 60
        while idle.alive and time.monotonic() < end:
            time.sleep(0.1)
        assert not idle.alive  # ended by itself once its kernel had ended
    first.proc.kill()
    first.proc.wait()
    second = KernelForks.shared()
    assert second is not first and second.alive
    monkeypatch.setenv(kernel_forks.SWITCH, "0")
    assert KernelForks.shared().proc is None


_FORK_HERE = r"""
import fcntl, json, os, signal, sys, time
from embeval_report.chapters.registry import options
options()  # as the command line: every chapter module imported, nothing computed
lock = open(sys.argv[1] + "/lock", "w")
fcntl.flock(lock, fcntl.LOCK_EX)  # an output folder's lock, held while the template is forked
signal.signal(signal.SIGTERM, lambda *a: None)  # the command line's own handler
from embeval_report.report.execution import WarmKernel
from embeval_report.report.kernel_forks import KernelForks, _Template
forks = KernelForks(here=True)
out = {"forked": isinstance(forks.proc, _Template) and forks.alive}
kernel = WarmKernel(sys.argv[1], forks)
try:
    code = ("import json, os, matplotlib; json.dump({'backend': matplotlib.rcParams['backend'], "
            "'parent': os.getppid()}, open(%r, 'w'))" % (sys.argv[1] + "/kernel.json"))
    out["status"] = kernel.kc.execute_interactive(code, timeout=120)["content"]["status"]
finally:
    kernel.release()
out.update(json.load(open(sys.argv[1] + "/kernel.json")), template=forks.proc.pid)
lock.close()  # this process's hold released: the template must not hold the lock
other = open(sys.argv[1] + "/lock", "w")
try:
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    out["lock_free"] = True
except BlockingIOError:
    out["lock_free"] = False
os.kill(forks.proc.pid, signal.SIGTERM)  # the default handler in the template: it ends by the signal
for _ in range(300):
    if forks.proc.poll() is not None:
        break
    time.sleep(0.1)
out["template_exit"] = forks.proc.poll()
forks.close()
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the command line forks its template on Linux only")
def test_the_command_lines_template_is_a_fork_of_it_like_a_fresh_one(tmp_path):
    """``embeval-report`` forks its template from itself once it has imported the chapters (their import, about
    5 s of CPU, is not paid again by a new template). The fork looks like a template started anew: its kernels
    draw with the inline backend, it holds none of the command's files (an output folder's lock taken before the
    fork is free once the command lets it go) and keeps none of its signal handlers (SIGTERM ends it)."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", _FORK_HERE, str(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["forked"] and out["status"] == "ok" and out["parent"] == out["template"]
    assert out["backend"] == "module://matplotlib_inline.backend_inline"
    assert out["lock_free"]
    assert out["template_exit"] == -signal.SIGTERM
