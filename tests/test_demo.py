"""The built-in demo set: deterministic, and its planted problem shows in the report."""
import json

import numpy as np
import pytest

from embeval_report.demo import streaming_embeddings
from embeval_report.metrics.isotropy import measure_isotropy


def test_demo_set_is_deterministic_and_well_formed():
    a, meta_a = streaming_embeddings(n_users=300, n_items=100, dim=16, seed=5)
    b, meta_b = streaming_embeddings(n_users=300, n_items=100, dim=16, seed=5)
    np.testing.assert_array_equal(a, b)
    assert meta_a.equals(meta_b)
    assert a.shape == (400, 16) and a.dtype == np.float32
    assert meta_a["id"].is_unique and set(meta_a["kind"]) == {"user", "item"}


def test_planted_popularity_anisotropy():
    """Seed 000 §217.0.11: popularity pulls users into one direction (APCS up, PR down)."""
    fair, _ = streaming_embeddings(n_users=1500, n_items=400, dim=32, popularity_weight=0.0, seed=1)
    skewed, _ = streaming_embeddings(n_users=1500, n_items=400, dim=32, popularity_weight=2.0, seed=1)
    f, s = measure_isotropy(fair[:1500], n_boot=0), measure_isotropy(skewed[:1500], n_boot=0)
    assert s.values["apcs"] > f.values["apcs"] + 0.2
    assert s.values["participation_ratio"] < f.values["participation_ratio"]


#: the demo's planted problems (README), each the finding of its chapter that must report it: (chapter, effect, kind
#: (None: any), the severities that count, a word the title must hold)
PLANTED = [("isotropy", "anisotropy", "diagnostic", {"concerning"}, "cone"),  # centring improves link prediction
           ("stability", "stability by group", "model", {"problematic"}, "unstable"),  # niche items, not the users
           ("drift", "drift", "model", {"problematic", "concerning"}, "drift"),  # the batches' shift folds into it
           ("temporal_link_prediction", "horizon", "model", {"problematic", "concerning"}, "degrades"),
           # the vectors are the baseline run's (training_run): the other runs' events are the evaluation's
           ("training_diagnostics", "divergence (other runs)", "evaluation", {"problematic"}, "diverged"),
           ("training_diagnostics", "overfitting (other runs)", "evaluation", {"concerning", "problematic"}, "overfit"),
           ("recommendation", "baselines", "model", {"problematic"}, "most-popular"),
           ("anomaly", "baselines", "evaluation", {"problematic", "concerning"}, "baseline"),  # the user's detector
           ("human_evaluation", "rater agreement", "evaluation", {"problematic", "concerning"}, "raters"),
           ("fairness", "group gap", "model", {"problematic", "concerning"}, "group")]


def test_demo_command_writes_the_full_report(demo_report):
    out = demo_report.folder
    assert demo_report.returncode == 3  # because of its findings (--fail-on problematic)
    for name in ("report.html", "report.pdf", "metrics.json", "demo-data/manifest.yaml"):
        assert (out / name).exists(), name
    doc = json.loads((out / "metrics.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert doc["chapters"]["isotropy"]["metrics"]["apcs"]["verdict"] == "problematic"
    assert doc["status"] == "problematic" and "reached 'problematic' (--fail-on)" in demo_report.stderr
    by = {(f["chapter"], f["effect"]): f for f in doc["findings"]}
    for chapter, effect, kind, severities, word in PLANTED:
        f = by.get((chapter, effect))
        assert f is not None and f["severity"] in severities and word in f["title"].lower(), (chapter, effect, f)
        assert kind in (None, f["kind"]), (chapter, effect, f["kind"])
    # the link-prediction chapter splits by time itself: no protocol false alarm; internal labels stay out of titles
    assert not [f for f in doc["findings"] if "random split" in f["title"].lower() or "(vocabulary)" in f["title"]]
    item = by[("stability", "stability by group")]
    assert "user" not in item["title"] and item["evidence"]["knn_overlap"] < item["evidence"]["compared_knn_overlap"]
    summary = (out / "report.html").read_text().split('id="chapter-isotropy"')[0]
    assert "Status: problematic" in summary and "All findings" in summary
    # every JSON file of the report is strict JSON (null, never NaN): results/*.json, run.json, metrics.json, ...
    def refuse(token):
        raise ValueError(f"{token} is not valid JSON")
    for path in out.rglob("*.json"):
        json.loads(path.read_text(), parse_constant=refuse)
    html = (out / "report.html").read_text()
    assert "all-but-the-top" in html.lower()


#: demo.beside.Beside's checks, run in a fresh interpreter: a test process may hold other threads (Dask's, torch's,
#: an earlier test's), where the fork is (rightly) refused
BESIDE_CHECKS = """
import os, sys, threading, time
from embeval_report.demo.beside import Beside

def pid_of(tag):
    return tag, os.getpid()

def fails(tag):
    raise ValueError(f"planted {tag}")

assert threading.active_count() == 1
b = Beside("probe", pid_of, "x")
child = b.pid
assert child not in (None, os.getpid()) and b.result() == ("x", child)
try:
    os.kill(child, 0)
    sys.exit("the child was not reaped")
except ProcessLookupError:
    pass
try:
    Beside("broken", fails, "y").result()
    sys.exit("no error came back")
except RuntimeError as e:
    assert "demo data (broken): ValueError: planted y" in str(e), e
slow = Beside("slow", time.sleep, 60)
child, started = slow.pid, time.monotonic()
slow.stop()  # an interrupted demo: the child ends with it, at once
assert slow.pid is None and time.monotonic() - started < 10
try:
    os.kill(child, 0)
    sys.exit("the stopped child lives")
except ProcessLookupError:
    pass
os.environ["EMBEVAL_FORK_KERNELS"] = "0"
here = Beside("probe", pid_of, "z")
assert here.pid is None and here.result() == ("z", os.getpid())
print("ok")
"""


def _pid_of(tag):
    import os

    return tag, os.getpid()


def test_a_demo_writer_beside_the_others_runs_in_a_fork():
    """demo.beside.Beside (in a fresh interpreter, with no other thread): the writer runs in a forked child
    (another pid) and hands back its value; what it raises comes back as one RuntimeError naming it; stop() ends a
    child not asked for; with forks switched off the writer runs here when asked."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", BESIDE_CHECKS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_demo_writer_runs_here_while_another_thread_runs():
    """With another Python thread alive (one holding a lock would leave it held in a child) Beside does not fork:
    the writer runs in this process when its result is asked for."""
    import os
    import threading

    from embeval_report.demo.beside import Beside

    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        here = Beside("probe", _pid_of, "w")
        assert here.pid is None and here.result() == ("w", os.getpid())
    finally:
        stop.set()
        other.join()
