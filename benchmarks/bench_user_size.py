"""A report at the sizes most users have: n x d vectors with labels, a graph and queries, chapter by chapter.

Generates a set like a text model's output on a labelled corpus (default 10,000 x 384): ``--labels`` topics
of different sizes and spreads around a common direction (real text embeddings are anisotropic), a metadata
``label`` column, a graph of about 8 edges per row mostly within a topic (``edges.csv``; ``--timestamps``
adds a timestamp column, which also enables temporal link prediction), and ``--queries`` query vectors near
a target row with graded judgements (the target 2, three rows of its topic 1, two other rows 0). Times one
n x n x d float32 GEMM (the machine's pace, to compare runs on a shared machine), then runs
``embeval-report run`` with HTML output only and prints each chapter's seconds from ``run.json`` and their sum.
The target of issue 44 on the 2-core CPU machine: the chapters of a 10,000 x 384 report under 30 s in all.

Usage: ``python benchmarks/bench_user_size.py [--n 10000] [--d 384] [--labels 24] [--queries 500]
[--timestamps] [--chapters a,b] [--set NAME=VALUE ...] [--keep OUT] [--repeat 1] [--jobs 1]``
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import gemm_seconds  # noqa: E402


def write_set(folder: str, n: int, d: int, n_labels: int, n_queries: int, timestamps: bool, seed: int = 0) -> str:
    """Write vectors.npy, metadata.csv, edges.csv, queries.npy, query_ids.txt, qrels.txt and manifest.yaml."""
    rng = np.random.default_rng(seed)
    sizes = rng.dirichlet(np.full(n_labels, 2.0))
    label = np.sort(rng.choice(n_labels, n, p=sizes))
    label = label[rng.permutation(n)]
    # topics overlap as a text model's do: a linear probe reaches about 0.65 accuracy and k-means an ARI of about
    # 0.3 at the defaults (so the probe's solver and k-means iterate as long as on real text)
    centres = 0.045 * rng.standard_normal((n_labels, d))
    spread = rng.uniform(0.8, 1.6, n_labels) * 6 / np.sqrt(d)  # some topics are tighter than others
    common = 7.2 / np.sqrt(d) * rng.standard_normal(d)
    X = centres[label] + spread[label, None] * rng.standard_normal((n, d)) + common
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    ids = np.array([f"doc_{i:06d}" for i in range(n)])
    names = np.array([f"topic_{k:02d}" for k in range(n_labels)])
    np.save(os.path.join(folder, "vectors.npy"), X)
    pd.DataFrame({"id": ids, "label": names[label]}).to_csv(os.path.join(folder, "metadata.csv"), index=False)
    members = [np.flatnonzero(label == k) for k in range(n_labels)]
    m = 8 * n
    src = rng.integers(0, n, m)
    same = rng.random(m) < 0.8
    dst = np.where(same, [members[label[s]][rng.integers(len(members[label[s]]))] for s in src],
                   rng.integers(0, n, m))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    pair = pd.DataFrame({"a": np.minimum(src, dst), "b": np.maximum(src, dst)})
    first = ~pair.duplicated().to_numpy()
    edges = pd.DataFrame({"src": ids[src[first]], "dst": ids[dst[first]]})
    if timestamps:
        t = np.sort(rng.random(len(edges)))
        edges["timestamp"] = (pd.Timestamp("2024-01-01") + pd.to_timedelta(np.round(t * 366 * 86400), unit="s")
                              ).strftime("%Y-%m-%dT%H:%M:%S")
    edges.to_csv(os.path.join(folder, "edges.csv"), index=False)
    targets = rng.choice(n, n_queries, replace=False)
    Q = X[targets] + rng.uniform(0.3, 1.5, (n_queries, 1)) * rng.standard_normal((n_queries, d)) / np.sqrt(d)
    np.save(os.path.join(folder, "queries.npy"), (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32))
    qids = [f"q_{i:05d}" for i in range(n_queries)]
    with open(os.path.join(folder, "query_ids.txt"), "w") as f:
        f.write("\n".join(qids) + "\n")
    lines = []
    for q, t in zip(qids, targets):
        topic = members[label[t]]
        lines.append(f"{q} 0 {ids[t]} 2")
        lines += [f"{q} 0 {ids[j]} 1" for j in rng.choice(topic[topic != t], 3, replace=False)]
        lines += [f"{q} 0 {ids[j]} 0" for j in rng.choice(np.flatnonzero(label != label[t]), 2, replace=False)]
    with open(os.path.join(folder, "qrels.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    manifest = os.path.join(folder, "manifest.yaml")
    with open(manifest, "w") as f:
        f.write("name: user-size benchmark set\nvectors: vectors.npy\nids: id\nmetadata: metadata.csv\n"
                "edges: edges.csv\nqueries: {vectors: queries.npy, ids: query_ids.txt}\nqrels: qrels.txt\n")
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--labels", type=int, default=24)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--timestamps", action="store_true", help="timestamped edges (adds temporal link prediction)")
    ap.add_argument("--chapters", help="only these chapters (comma-separated)")
    ap.add_argument("--set", action="append", default=[], help="a chapter option NAME=VALUE (repeatable)")
    ap.add_argument("--keep", help="write the report here instead of a temporary folder")
    ap.add_argument("--repeat", type=int, default=1, help="run the report this many times (each chapter's best)")
    ap.add_argument("--jobs", type=int, default=1, help="the run's --jobs (chapters at once; their seconds then overlap)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        manifest = write_set(tmp, a.n, a.d, a.labels, a.queries, a.timestamps)
        gemm = gemm_seconds(np.load(os.path.join(tmp, "vectors.npy")), "cpu")
        runs, totals = [], []
        for r in range(a.repeat):
            out = a.keep or os.path.join(tmp, f"report{r}")
            cmd = [sys.executable, "-m", "embeval_report.cli", "run", manifest, "--out", out, "--formats", "html",
                   "--device", "cpu", "--force", "--jobs", str(a.jobs)]
            cmd += ["--chapters", a.chapters] if a.chapters else []
            for s in a.set:
                cmd += ["--set", s]
            t = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            totals.append(time.perf_counter() - t)
            with open(os.path.join(out, "run.json")) as f:
                runs.append(json.load(f))
    print(f"user-size report, n = {a.n}, d = {a.d}, {a.labels} labels, {a.queries} queries, "
          f"timestamps = {a.timestamps}, --jobs {a.jobs}, best of {a.repeat}")
    print(f"one {a.n} x {a.n} x {a.d} float32 GEMM: {gemm:.2f} s ({2 * a.n * a.n * a.d / gemm / 1e9:.0f} GFLOP/s)")
    print(f"{'chapter':<28} {'status':<8} {'seconds':>8} {'GEMMs':>7}")
    best = {}
    for run in runs:
        for ch in run["chapters"]:
            if ch["name"] not in best or ch["seconds"] < best[ch["name"]]["seconds"]:
                best[ch["name"]] = ch
    shared = [run.get("neighbour_graph") for run in runs if run.get("neighbour_graph")]
    if shared:
        s = min(g["seconds"] for g in shared)
        print(f"{'shared graph':<37} {s:8.2f} {s / gemm:7.1f}")
    for ch in best.values():
        print(f"{ch['name']:<28} {ch['status']:<8} {ch['seconds']:8.2f} {ch['seconds'] / gemm:7.1f}")
    chapters = sum(ch["seconds"] for ch in best.values())
    print(f"{'chapters in all':<37} {chapters:8.2f} {chapters / gemm:7.1f}")
    print(f"{'whole run (incl. loading, rendering)':<37} {min(totals):8.2f} {min(totals) / gemm:7.1f}")


if __name__ == "__main__":
    main()
