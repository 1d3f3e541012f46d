"""Benchmark the link-prediction ranking kernel against plain numpy, in one run.

Default: 1 000 000 test edges x 100 negatives, 1 000 000 entities, d = 64 (float32), dot score.
Compared, on the same data, each in a fresh subprocess (so peak memory is its own):

* ``embeval``        — :func:`embeval_report.metrics.ranks.score_candidates` with its default engine:
  chunked gather of the source (b, d) and candidate (b, 1 + m, d) vectors and ``torch.bmm`` on a GPU,
  ``np.take`` + batched ``np.matmul`` on a CPU; raw ranks only;
* ``embeval-torch``  — the same with the torch engine forced (gather + ``bmm``; what runs on a GPU);
* ``embeval+scores`` — the default engine, also keeping the (B, 1 + m) score matrix as the chapter
  does (needed for the exact pooled AUC and the separation statistics);
* ``numpy-vectorised`` — the same chunking in numpy (fancy-index gather + ``np.einsum``);
* ``numpy-loop``     — a Python loop over test edges (gather, matrix-vector product, two counts),
  the way per-query evaluators are often written; timed on ``--loop-edges`` edges and
  extrapolated linearly (it is stated as such).

Peak memory is the peak resident set size during the method minus the resident size just before
it (sampled every 2 ms from /proc/self/statm), plus peak CUDA memory when on the GPU. All methods'
ranks are checked to agree on the first ``--loop-edges`` test edges.

Usage: ``python benchmarks/bench_linkpred.py [--edges 1000000] [--negatives 100] [--entities 1000000]
[--d 64] [--device auto] [--loop-edges 100000]``
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import threading
import time

import numpy as np


def make_data(a):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((a.entities, a.d), dtype=np.float32)
    src = rng.integers(0, a.entities, a.edges)
    cand = rng.integers(0, a.entities, (a.edges, 1 + a.negatives))
    return X, src, cand


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """Peak resident memory above the level at entry, sampled in a thread."""

    def __enter__(self):
        self.base = self.peak = rss()
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        return self

    def _run(self):
        while not self.stop:
            self.peak = max(self.peak, rss())
            time.sleep(0.002)

    def __exit__(self, *exc):
        self.stop = True
        self.t.join()
        self.peak = max(self.peak, rss())

    @property
    def extra(self) -> int:
        return self.peak - self.base


def numpy_vectorised(X, src, cand, rows=None):
    B, c = cand.shape
    rows = rows or max(1, (256 * 2 ** 20) // (c * X.shape[1] * 4 * 2))
    opt, pess = np.empty(B, np.int64), np.empty(B, np.int64)
    for s in range(0, B, rows):
        xs = X[src[s:s + rows]]
        xc = X[cand[s:s + rows]]
        sc = np.einsum("bcd,bd->bc", xc, xs)
        pos, neg = sc[:, :1], sc[:, 1:]
        opt[s:s + rows] = 1 + (neg > pos).sum(1)
        pess[s:s + rows] = 1 + (neg >= pos).sum(1)
    return opt, pess


def numpy_loop(X, src, cand):
    opt, pess = np.empty(len(src), np.int64), np.empty(len(src), np.int64)
    for i in range(len(src)):
        sc = X[cand[i]] @ X[src[i]]
        opt[i] = 1 + (sc[1:] > sc[0]).sum()
        pess[i] = 1 + (sc[1:] >= sc[0]).sum()
    return opt, pess


def worker(method, a, queue):
    import torch

    from embeval_report.kernels import resolve_device
    from embeval_report.metrics.ranks import score_candidates

    torch.set_num_threads(os.cpu_count() or 1)
    X, src, cand = make_data(a)
    dev = resolve_device(a.device)
    if method == "numpy-loop":
        src, cand = src[:a.loop_edges], cand[:a.loop_edges]
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with PeakRSS() as mem:
        t = time.perf_counter()
        if method.startswith("embeval"):
            cs = score_candidates(X, src, cand, score="dot", keep_scores=method == "embeval+scores", device=dev,
                                  engine="torch" if method == "embeval-torch" else "auto")
            opt, pess = cs.raw.optimistic, cs.raw.pessimistic
            if dev.type == "cuda":
                torch.cuda.synchronize()
        elif method == "numpy-vectorised":
            opt, pess = numpy_vectorised(X, src, cand)
        else:
            opt, pess = numpy_loop(X, src, cand)
        seconds = time.perf_counter() - t
    gpu = torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0
    k = a.loop_edges
    queue.put(dict(method=method, seconds=seconds, edges=len(src), rss=mem.extra, gpu=gpu, device=str(dev),
                   opt=opt[:k], pess=pess[:k], mrr=float((2.0 / (opt + pess)).mean())))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--edges", type=int, default=1_000_000)
    ap.add_argument("--negatives", type=int, default=100)
    ap.add_argument("--entities", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--loop-edges", type=int, default=100_000)
    ap.add_argument("--methods", default="embeval,embeval-torch,embeval+scores,numpy-vectorised,numpy-loop")
    a = ap.parse_args()
    a.loop_edges = min(a.loop_edges, a.edges)
    print(f"{a.edges:,} test edges x {a.negatives} negatives, {a.entities:,} entities, d = {a.d}, dot score, "
          f"{os.cpu_count()} CPU cores")
    ctx = mp.get_context("spawn")
    results = []
    for method in a.methods.split(","):
        q = ctx.Queue()
        p = ctx.Process(target=worker, args=(method, a, q))
        p.start()
        results.append(q.get())
        p.join()
    ref = results[0]
    print(f"device: {ref['device']}")
    print(f"{'method':20s} {'seconds':>9s} {'for 1M edges':>13s} {'edges/s':>12s} {'peak RAM +MiB':>14s} "
          f"{'peak GPU MiB':>13s} {'MRR':>8s}")
    for r in results:
        per_m = r["seconds"] * 1_000_000 / r["edges"]
        note = "" if r["edges"] == a.edges else f"  (timed on {r['edges']:,} edges, extrapolated)"
        print(f"{r['method']:20s} {r['seconds']:9.2f} {per_m:13.2f} {r['edges'] / r['seconds']:12,.0f} "
              f"{r['rss'] / 2 ** 20:14.0f} {r['gpu'] / 2 ** 20:13.0f} {r['mrr']:8.5f}{note}")
        assert (r["opt"] == ref["opt"]).all() and (r["pess"] == ref["pess"]).all(), r["method"]
    print(f"ranks agree on the first {a.loop_edges:,} test edges across all methods")


if __name__ == "__main__":
    main()
