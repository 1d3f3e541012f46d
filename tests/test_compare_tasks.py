"""``compare`` on every task chapter at once: one small set with the side data of eight task chapters (labels,
a graph, queries and judgements, word pairs, rated pairs, labelled anomalies, protected groups), two models whose
vectors differ in one task's rows only. Each task's rows live in their own coordinates (a block of dimensions no
other task's rows touch), so a cosine between rows of two tasks is exactly 0 under both models and a change of one
task's vectors cannot reach another task's units: the comparison must find that task's difference and no other.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from scored_reports import annotations_text, compare, run_report, word_pairs_text, write_set

#: the task chapters this set has the side data of
TASKS = ("node_classification", "clustering", "link_prediction", "retrieval", "semantic", "human_evaluation",
         "anomaly", "fairness")
#: each task's block of rows and its noise under model A; a planted model B has less noise in one block
BLOCKS = {"labels": 2.0, "graph": 2.2, "docs": 1.0, "words": 0.8, "rated": 0.5, "anomalies": 0.6, "groups": 1.0}
#: the chapters that read each block (the labelled entities are node classification's and clustering's task)
READERS = {"labels": ("node_classification", "clustering"), "graph": ("link_prediction",)}
DIM = 8  # dimensions per block


def _block(rng, b: int, n: int, centres: np.ndarray, member: np.ndarray, noise: float, offset: float = 3.0):
    """``n`` rows living in block ``b``'s dimensions only: a common offset (so that every cosine within the block is
    positive and neighbours never cross blocks), the member's centre and noise."""
    X = np.zeros((n, DIM * len(BLOCKS)))
    X[:, DIM * b:DIM * (b + 1)] = offset + centres[member] + noise * rng.standard_normal((n, DIM))
    return X


def task_set(folder: Path, planted: str | None = None) -> Path:
    """The set: model A, or model B where ``planted`` names the block whose rows have a fifth of A's noise. The side
    data is the same for both models (it is made from its own seeded generator)."""
    side, noise_rng = np.random.default_rng(11), np.random.default_rng(12)
    noise = {k: v * (0.2 if k == planted else 1.0) for k, v in BLOCKS.items()}
    names = list(BLOCKS)
    parts, ids, meta = [], [], []
    # labels: 4 classes of 40 (node classification, clustering)
    cls = np.repeat(np.arange(4), 40)
    parts.append(_block(noise_rng, names.index("labels"), 160, 2.0 * side.standard_normal((4, DIM)), cls,
                        noise["labels"]))
    ids += [f"l{i:03d}" for i in range(160)]
    meta += [{"label": f"c{c}"} for c in cls]
    # graph: 12 communities of 10, edges within communities (link prediction)
    comm = np.repeat(np.arange(12), 10)
    parts.append(_block(noise_rng, names.index("graph"), 120, 2.0 * side.standard_normal((12, DIM)), comm,
                        noise["graph"]))
    gids = [f"g{i:03d}" for i in range(120)]
    ids += gids
    meta += [{}] * 120
    src = side.integers(0, 120, 600)
    dst = np.array([side.choice(np.flatnonzero(comm == comm[s])) for s in src])
    edges = pd.DataFrame({"src": np.array(gids)[src], "dst": np.array(gids)[dst]})[src != dst].drop_duplicates()
    # docs and queries: each query a noisy copy of its target document (retrieval)
    D = side.standard_normal((150, DIM))
    parts.append(_block(noise_rng, names.index("docs"), 150, D, np.arange(150), 0.05))
    ids += [f"d{i:03d}" for i in range(150)]
    meta += [{}] * 150
    target = side.choice(150, 60, replace=False)
    Q = _block(noise_rng, names.index("docs"), 60, D, target, noise["docs"])
    # words: pairs scored by their cosine in true vectors T (semantic)
    T = side.standard_normal((60, DIM))
    parts.append(_block(noise_rng, names.index("words"), 60, T, np.arange(60), noise["words"], offset=0.0))
    wids = [f"w{i:02d}" for i in range(60)]
    ids += wids
    meta += [{}] * 60
    # rated pairs: three raters grade pairs by their cosine (human evaluation)
    R = _block(noise_rng, names.index("rated"), 60, side.standard_normal((60, DIM)), np.arange(60), noise["rated"],
               offset=0.0)
    parts.append(R)
    rids = [f"r{i:02d}" for i in range(60)]
    ids += rids
    meta += [{}] * 60
    # anomalies: 150 normal rows near one centre, 15 far from it (anomaly)
    centre = np.zeros((2, DIM))
    centre[1] = 2.5 * side.standard_normal(DIM)
    kind = np.r_[np.zeros(150, int), np.ones(15, int)]
    parts.append(_block(noise_rng, names.index("anomalies"), 165, centre, kind, noise["anomalies"]))
    ids += [f"a{i:03d}" for i in range(165)]
    meta += [{"is_anomaly": int(k)} for k in kind]
    # groups: two regions, 3 classes (fairness)
    fcls = np.tile(np.arange(3), 40)
    parts.append(_block(noise_rng, names.index("groups"), 120, 2.0 * side.standard_normal((3, DIM)), fcls,
                        noise["groups"]))
    ids += [f"f{i:03d}" for i in range(120)]
    meta += [{"region": "north" if i % 2 else "south", "flabel": f"k{c}"} for i, c in enumerate(fcls)]
    X = np.vstack(parts)
    metadata = pd.DataFrame(meta, columns=["label", "is_anomaly", "region", "flabel"])
    metadata.insert(0, "id", ids)
    metadata["is_anomaly"] = metadata["is_anomaly"].astype("Int64")
    folder.mkdir(parents=True, exist_ok=True)
    edges.to_csv(folder / "edges.csv", index=False)
    np.save(folder / "queries.npy", Q.astype(np.float32))
    (folder / "query_ids.txt").write_text("".join(f"q{i:02d}\n" for i in range(60)))
    files = {"qrels.txt": "".join(f"q{i:02d} 0 d{t:03d} 1\n" for i, t in enumerate(target)),
             "pairs.tsv": word_pairs_text(T, wids, range(60)),
             "ann.csv": annotations_text(R, rids, range(60))}
    entries = {"edges": "edges.csv", "queries": "{vectors: queries.npy, ids: query_ids.txt}", "qrels": "qrels.txt",
               "word_pairs": "pairs.tsv", "annotations": "ann.csv", "annotation_level": "ordinal",
               "fairness": "{attributes: [region], label: flabel}"}
    return write_set(folder, X, ids, metadata=metadata, files=files, entries=entries)


def test_a_difference_planted_in_one_task_is_found_there_only(tmp_path, monkeypatch, planted="labels"):
    """Every task chapter is compared unit by unit (its rows name the unit and n); the planted task's headline
    metrics are "B better", every other task's difference is exactly 0 with no verdict of better or worse, and
    every chapter was scored on the same plan by both models."""
    t0 = time.perf_counter()
    a = run_report(task_set(tmp_path / "set-a"), tmp_path / "A", TASKS, "A")
    b = run_report(task_set(tmp_path / "set-b", planted), tmp_path / "B", TASKS, "B")
    table = compare(a, b, monkeypatch, resamples=200)
    assert set(table["chapter"]) == set(TASKS), set(TASKS) - set(table["chapter"])
    assert table["same_plan"].all(), table.loc[~table["same_plan"].astype(bool), ["chapter", "metric"]]
    assert (table["n"] >= 10).all() and table["unit"].notna().all()
    units = dict(zip(table["chapter"], table["unit"]))
    assert units["node_classification"] == "entities" and units["retrieval"] == "queries"
    mine = table[table["chapter"].isin(READERS[planted])]
    others = table[~table["chapter"].isin(READERS[planted])]
    headline = {"labels": [("node_classification", "accuracy"), ("node_classification", "macro_f1"),
                           ("clustering", "ari")],
                "graph": [("link_prediction", "mean_rank"), ("link_prediction", "auc")]}[planted]
    rows = table.set_index(["chapter", "metric"])
    for key in headline:
        assert rows.loc[key, "verdict"] == "B better", (key, rows.loc[key].to_dict())
    assert "A better" not in set(mine["verdict"])
    assert not others["verdict"].isin(["B better", "A better"]).any(), others[["chapter", "metric", "verdict"]]
    assert (others["diff"].abs() < 1e-12).all(), others.loc[others["diff"].abs() >= 1e-12, ["chapter", "metric"]]
    # --baseline pairs the same way: this report (B) against the previous model's (A), a verdict per task
    from embeval_report.chapters.summary import baseline_counts
    from embeval_report.report.baseline import compare_with_baseline

    doc = compare_with_baseline(b, a, mde=None, level=0.95, seed=0)
    counts = {r["chapter"]: r for r in baseline_counts(doc)}
    assert set(counts) == set(TASKS)
    for chapter in TASKS:
        better = counts[chapter]["better"]
        assert (better > 0) == (chapter in READERS[planted]) and counts[chapter]["worse"] == 0, counts[chapter]
    assert time.perf_counter() - t0 < 90  # about 30 s on the shared, loaded 2-core machine
