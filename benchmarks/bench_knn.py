"""Exact cosine k-NN: the blocked kernel against the GEMM bound and its peers, in one run.

Default: 50 000 x 256 float32, k = 10, every row a query, self excluded (the issue's size).
Measured on the same data, each in its own subprocess (peak memory = that process's ``ru_maxrss``):

* ``gemm bound``   — the n x n x d float32 product alone, in tiles of the kernel's shape written into one
  preallocated buffer (what any exact method must at least compute);
* ``embeval knn``  — :func:`embeval_report.kernels.knn` (blocked product + pruned running top-k);
* ``torch topk``   — plain torch: chunked ``q @ X.T`` then ``torch.topk`` over whole rows (the previous kernel);
* ``sklearn brute`` — ``NearestNeighbors(metric="cosine", algorithm="brute")``;
* ``faiss flat``   — ``faiss.IndexFlatIP`` on normalised rows, when faiss-cpu is installed.

Prints seconds, GFLOP/s (2 n² d / t), the ratio to the GEMM bound, peak memory, and the share of
rows whose neighbour set equals embeval's. ``--device cuda`` runs the torch methods on the GPU.

Usage: ``python benchmarks/bench_knn.py [--n 50000] [--d 256] [--k 10] [--device auto] [--skip sklearn,faiss]``
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

METHODS = ("gemm bound", "embeval knn", "torch topk", "sklearn brute", "faiss flat")


def _data(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((64, d)).astype(np.float32)
    return (centres[rng.integers(0, 64, n)] + 0.8 * rng.standard_normal((n, d))).astype(np.float32)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def run_method(name: str, path: str, k: int, device: str) -> dict:
    """Run one method on the saved data; return its time, memory and neighbour lists."""
    import torch

    X = np.load(path)
    n, d = X.shape
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    idx = None
    t = time.perf_counter()
    if name == "gemm bound":
        from embeval_report.kernels.neighbours import _tile_shape

        dev = torch.device(device)
        rows, cols = _tile_shape(n, n, dev)
        U = torch.as_tensor(X, device=dev)
        Ut = U.T.contiguous()
        buf = torch.empty((rows, cols), device=dev)
        for s in range(0, n, rows):
            q = U[s:s + rows]
            for j in range(0, n, cols):
                w = min(cols, n - j)
                torch.matmul(q, Ut[:, j:j + w], out=buf[:len(q), :w] if w == cols and len(q) == rows else None)
        _sync(device)
    elif name == "embeval knn":
        from embeval_report.kernels import knn

        idx, _ = knn(X, k, device=device, desc=None)
    elif name == "torch topk":
        dev = torch.device(device)
        U = torch.nn.functional.normalize(torch.as_tensor(X, device=dev), dim=1)
        rows = max(1, (256 * 2**20) // (n * 4 * 3))
        out = []
        for s in range(0, n, rows):
            S = U[s:s + rows] @ U.T
            S[torch.arange(len(S)), torch.arange(s, s + len(S))] = -torch.inf
            out.append(torch.topk(S, k, dim=1).indices.cpu())
        idx = torch.cat(out).numpy()
    elif name == "sklearn brute":
        from sklearn.neighbors import NearestNeighbors

        idx = NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(X).kneighbors(X)[1][:, 1:]
    elif name == "faiss flat":
        import faiss

        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        index = faiss.IndexFlatIP(d)
        index.add(U)
        idx = index.search(U, k + 1)[1][:, 1:]
    seconds = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return dict(seconds=seconds, peak_mb=rss / 1024, extra_mb=(rss - rss0) / 1024,
                idx=None if idx is None else np.asarray(idx).tolist())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--skip", default="", help="comma-separated methods to skip (sklearn, faiss, torch)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    a = ap.parse_args()
    import torch

    device = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if a.one:
        print(json.dumps(run_method(a.one, a.path, a.k, device)))
        return
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.npy")
        np.save(path, _data(a.n, a.d))
        results = run_isolated(__file__, METHODS, skip, ["--path", path, "--k", str(a.k), "--device", device])
    flops = 2.0 * a.n * a.n * a.d
    bound = results["gemm bound"]["seconds"]
    ref = np.asarray(results["embeval knn"]["idx"])
    print(f"exact cosine k-NN, n = {a.n}, d = {a.d}, k = {a.k}, device = {device}, "
          f"torch threads = {torch.get_num_threads()}")
    print(f"{'method':<14} {'seconds':>8} {'GFLOP/s':>8} {'x GEMM bound':>12} {'peak MB':>8} {'same set':>9}")
    for name, r in results.items():
        same = ""
        if r["idx"] is not None:
            same = f"{(np.sort(np.asarray(r['idx']), 1) == np.sort(ref, 1)).all(1).mean():.2%}"
        print(f"{name:<14} {r['seconds']:8.2f} {flops / r['seconds'] / 1e9:8.1f} {bound / r['seconds']:12.2f} "
              f"{r['peak_mb']:8.0f} {same:>9}")


if __name__ == "__main__":
    main()
