"""A small embedding set with retrieval side data, written for the API, tracking and exploration tests: 160
documents in 8 dimensions in four topics (metadata ``label``), 24 queries near their topic's centre, each judging
the documents of its topic relevant. Two chapters run on it in seconds: isotropy and retrieval (which records
one row per query in results/units/)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

CHAPTERS = ["isotropy", "retrieval"]


def write_small_set(folder: Path, *, seed: int = 0, noise: float = 1.0, name: str = "small set") -> Path:
    """Write vectors.npy, ids.txt, metadata.csv, queries.npy, query_ids.txt, qrels.tsv and manifest.yaml."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, 8))
    topic = np.repeat(np.arange(4), 40)
    X = (centres[topic] + noise * rng.standard_normal((160, 8))).astype(np.float32)
    ids = [f"doc{i:03d}" for i in range(160)]
    q_topic = np.repeat(np.arange(4), 6)
    Q = (centres[q_topic] + noise * rng.standard_normal((24, 8))).astype(np.float32)
    qids = [f"q{i:02d}" for i in range(24)]
    np.save(folder / "vectors.npy", X)
    (folder / "ids.txt").write_text("\n".join(ids) + "\n")
    pd.DataFrame({"id": ids, "label": [f"topic-{t}" for t in topic]}).to_csv(folder / "metadata.csv", index=False)
    np.save(folder / "queries.npy", Q)
    (folder / "query_ids.txt").write_text("\n".join(qids) + "\n")
    rows = [(q, d, 1) for q, t in zip(qids, q_topic) for d, dt in zip(ids, topic) if dt == t]
    pd.DataFrame(rows, columns=["query_id", "doc_id", "relevance"]).to_csv(folder / "qrels.tsv", sep="\t",
                                                                          index=False)
    manifest = folder / "manifest.yaml"
    manifest.write_text(f"name: {name}\nvectors: vectors.npy\nids: ids.txt\nmetadata: metadata.csv\n"
                        "queries: {vectors: queries.npy, ids: query_ids.txt}\nqrels: qrels.tsv\n")
    return manifest


def metric_values(doc: dict) -> dict:
    """``{(chapter, metric): (value, ci_low, ci_high, verdict)}`` of a metrics.json document."""
    return {(c, m): (v["value"], v["ci_low"], v["ci_high"], v["verdict"])
            for c, entry in doc["chapters"].items() for m, v in entry["metrics"].items()}
