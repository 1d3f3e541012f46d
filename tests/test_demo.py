"""The built-in demo set: deterministic, and its planted problem shows in the report."""
import json

import numpy as np

from embeval_report.cli import main
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


def test_demo_command_writes_the_full_report(tmp_path):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    for name in ("report.html", "report.pdf", "metrics.json", "demo-data/manifest.yaml"):
        assert (out / name).exists(), name
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["chapters"]["isotropy"]["metrics"]["apcs"]["verdict"] == "problematic"
    # every JSON file of the report is strict JSON (null, never NaN): results/*.json, run.json, metrics.json, ...
    def refuse(token):
        raise ValueError(f"{token} is not valid JSON")
    for path in out.rglob("*.json"):
        json.loads(path.read_text(), parse_constant=refuse)
    html = (out / "report.html").read_text()
    assert "all-but-the-top" in html.lower()
