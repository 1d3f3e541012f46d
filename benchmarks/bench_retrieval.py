"""Retrieval evaluation at scale: the exact ranking of a whole corpus for every query, against its peers.

Default: 10 000 queries x 1 000 000 documents, d = 384, float32 (the CPU size of issue 10; use
``--queries 100000`` on a GPU). Each query is a perturbed document; its qrels are that document
(grade 2) and three documents of the same cluster (grade 1). Measured on the same data, each in its
own subprocess (peak memory = that process's ``ru_maxrss``, data included):

* ``gemm bound``       the m x n x d float32 product alone, in 512 MB blocks of query rows written into
  one buffer (what any exact method must at least compute);
* ``embeval``          :func:`embeval_report.metrics.retrieval.evaluate_retrieval`: exact rank of every
  relevant document over the whole corpus, top-10 lists, the 15 metrics and their bootstrap intervals;
* ``torch topk``       plain torch: chunked ``q @ C.T`` then ``torch.topk(100)`` (ranks beyond 100 unknown);
* ``faiss flat``       ``faiss.IndexFlatIP.search(k=100)`` on normalised rows, when faiss-cpu is installed.

Prints seconds, the ratio to the GEMM bound, peak memory, and nDCG@10 / recall@100 as each method
computes them (the peers from their top-100 lists), which must agree.

Usage: ``python benchmarks/bench_retrieval.py [--queries 10000] [--docs 1000000] [--d 384] [--device auto]
[--skip faiss,torch]``
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time

import numpy as np
from _isolated import run_isolated

METHODS = ("gemm bound", "embeval", "torch topk", "faiss flat")
TOP = 100


def write_data(folder: str, m: int, n: int, d: int, seed: int = 0) -> None:
    """Corpus (clusters), queries (perturbed documents) and qrels (the document: 2, three cluster mates: 1)."""
    rng = np.random.default_rng(seed)
    clusters = 2000
    centres = rng.standard_normal((clusters, d)).astype(np.float32)
    label = rng.integers(0, clusters, n)
    C = np.empty((n, d), np.float32)
    for s in range(0, n, 100_000):
        e = min(n, s + 100_000)
        C[s:e] = centres[label[s:e]] + 1.5 * rng.standard_normal((e - s, d), dtype=np.float32)
    source = rng.choice(n, m, replace=False)
    Q = C[source] + 1.0 * rng.standard_normal((m, d), dtype=np.float32)
    members = np.argsort(label, kind="stable")
    starts = np.searchsorted(label[members], np.arange(clusters))
    counts = np.bincount(label, minlength=clusters)
    rows = []
    for i, doc in enumerate(source):
        g = label[doc]
        mates = members[starts[g] + rng.choice(counts[g], min(4, counts[g]), replace=False)]
        mates = [x for x in mates if x != doc][:3]
        rows += [(i, doc, 2)] + [(i, x, 1) for x in mates]
    np.save(os.path.join(folder, "corpus.npy"), C)
    np.save(os.path.join(folder, "queries.npy"), Q)
    np.save(os.path.join(folder, "qrels.npy"), np.asarray(rows, np.int64))


def _metrics_from_top(top: np.ndarray, qrels: np.ndarray, m: int) -> dict:
    """nDCG@10 (linear gain) and recall@100 from top-100 lists (rows of ``top`` are document rows)."""
    grades = [dict() for _ in range(m)]
    for q, doc, g in qrels:
        grades[q][int(doc)] = int(g)
    ndcg, recall = [], []
    disc = 1 / np.log2(np.arange(2, 12))
    for q in range(m):
        g = np.array([grades[q].get(int(x), 0) for x in top[q]])
        ideal = np.sort(np.array(list(grades[q].values())))[::-1][:10]
        ndcg.append((g[:10] * disc[:len(g[:10])]).sum() / (ideal * disc[:len(ideal)]).sum())
        recall.append((g > 0).sum() / sum(v > 0 for v in grades[q].values()))
    return dict(ndcg_at_10=float(np.mean(ndcg)), recall_at_100=float(np.mean(recall)))


def _rows(n: int) -> int:
    """Queries per chunk of the plain-torch methods: a 512 MB block of scores."""
    return max(1, (512 * 2**20) // (n * 4))


def run_method(name: str, folder: str, device: str) -> dict:
    import torch

    C = np.load(os.path.join(folder, "corpus.npy"))
    Q = np.load(os.path.join(folder, "queries.npy"))
    qrels = np.load(os.path.join(folder, "qrels.npy"))
    m, n, d = len(Q), len(C), C.shape[1]
    dev = torch.device(device)
    metrics = {}
    t = time.perf_counter()
    if name == "gemm bound":
        Qt, Ct = torch.as_tensor(Q, device=dev), torch.as_tensor(C, device=dev)
        rows = _rows(n)
        buf = torch.empty((rows, n), device=dev)
        for s in range(0, m, rows):
            q = Qt[s:s + rows]
            torch.matmul(q, Ct.T, out=buf[:len(q)])
        if device == "cuda":
            torch.cuda.synchronize()
    elif name == "embeval":
        from embeval_report.metrics.retrieval import evaluate_retrieval

        ids = np.array([f"d{i}" for i in range(n)], dtype=object)
        qids = np.array([f"q{i}" for i in range(m)], dtype=object)
        judged = {}
        for q, doc, g in qrels:
            judged.setdefault(qids[q], {})[ids[doc]] = int(g)
        res = evaluate_retrieval(Q, C, judged, query_ids=qids, doc_ids=ids, device=device, desc=None)
        metrics = {k: res.values[k] for k in ("ndcg_at_10", "recall_at_100")}
    elif name == "torch topk":
        Cn = torch.nn.functional.normalize(torch.as_tensor(C, device=dev), dim=1)
        Qn = torch.nn.functional.normalize(torch.as_tensor(Q, device=dev), dim=1)
        rows = _rows(n)
        top = torch.cat([torch.topk(Qn[s:s + rows] @ Cn.T, TOP, dim=1).indices.cpu() for s in range(0, m, rows)])
        metrics = _metrics_from_top(top.numpy(), qrels, m)
    elif name == "faiss flat":
        import faiss

        index = faiss.IndexFlatIP(d)
        index.add(C / np.linalg.norm(C, axis=1, keepdims=True))
        top = index.search(Q / np.linalg.norm(Q, axis=1, keepdims=True), TOP)[1]
        metrics = _metrics_from_top(top, qrels, m)
    seconds = time.perf_counter() - t
    return dict(seconds=seconds, peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **metrics)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--skip", default="", help="comma-separated methods to skip (faiss, torch)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    a = ap.parse_args()
    import torch

    device = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if a.one:
        print(json.dumps(run_method(a.one, a.folder, device)))
        return
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    with tempfile.TemporaryDirectory() as tmp:
        write_data(tmp, a.queries, a.docs, a.d)
        results = run_isolated(__file__, METHODS, skip, ["--folder", tmp, "--device", device])
    bound = results["gemm bound"]["seconds"]
    print(f"retrieval, {a.queries} queries x {a.docs} documents, d = {a.d}, device = {device}, "
          f"torch threads = {torch.get_num_threads()}")
    print(f"{'method':<12} {'seconds':>8} {'x GEMM':>7} {'peak MB':>8} {'nDCG@10':>8} {'R@100':>7}")
    for name, r in results.items():
        metric = "".join(f" {r[k]:{w}.4f}" if k in r else " " * (w + 1)
                         for k, w in (("ndcg_at_10", 8), ("recall_at_100", 7)))
        print(f"{name:<12} {r['seconds']:8.1f} {r['seconds'] / bound:7.2f} {r['peak_mb']:8.0f}{metric}")
    print("x GEMM: seconds / seconds of the bare product (1.00 = the product alone); peak MB includes the "
          f"{a.docs * a.d * 4 / 2**20:.0f} MB corpus")


if __name__ == "__main__":
    main()
