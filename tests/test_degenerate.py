"""Valid but degenerate sets: every chapter runs (adapting), is skipped with its reason, or records a
metric as null with the reason — never fails, never shows a Python exception in the report."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from embeval_report.cli import main

EXCEPTION_TEXT = re.compile(r"(Traceback|Error:|Exception:|ZeroDivision|ValueError|KeyError|IndexError)")


def write(folder, X, labels=None):
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "v.npy", np.asarray(X, np.float32))
    ids = [f"e{i}" for i in range(len(X))]
    (folder / "ids.txt").write_text("\n".join(ids) + "\n")
    text = "vectors: v.npy\nids: ids.txt\n"
    if labels is not None:
        pd.DataFrame({"id": ids, "label": labels}).to_csv(folder / "meta.csv", index=False)
        text += "metadata: meta.csv\n"
    (folder / "m.yaml").write_text(text)
    return folder / "m.yaml"


rng = np.random.default_rng(0)
SETS = {
    "3x2": (rng.standard_normal((3, 2)), None),
    "identical-rows": (np.tile(np.arange(1, 9, dtype=float), (200, 1)), None),
    "d-greater-than-n": (rng.standard_normal((10, 50)), None),
    "one-class": (rng.standard_normal((300, 8)), ["a"] * 300),
    "299-vs-1": (rng.standard_normal((300, 8)), ["a"] * 299 + ["b"]),
}


@pytest.mark.parametrize("name", sorted(SETS))
def test_degenerate_set_never_fails_a_chapter(tmp_path, name):
    X, labels = SETS[name]
    out = tmp_path / "out"
    assert main(["run", str(write(tmp_path / "in", X, labels)), "--out", str(out), "--formats", "html"]) == 0
    doc = json.loads((out / "metrics.json").read_text())
    statuses = {k: (v["status"], v["reason"]) for k, v in doc["chapters"].items()}
    assert not [k for k, (s, _) in statuses.items() if s == "failed"], statuses
    for k, (status, reason) in statuses.items():
        if status == "skipped":
            assert reason and not EXCEPTION_TEXT.search(reason), (k, reason)
    html = (out / "report.html").read_text()
    assert not EXCEPTION_TEXT.search(re.sub(r"<[^>]+>", " ", html)), name
    if labels is not None:
        for chapter in ("node_classification", "clustering"):
            status, reason = statuses[chapter]
            assert status == "skipped" and "at least 2 classes with at least 5 members" in reason, reason
