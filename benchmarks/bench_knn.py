"""Exact cosine k-NN: the package's kernel against faiss-cpu, the float32 GEMM and scikit-learn, in one run.

Default: 50 000 x 256 float32, k = 10, every row a query, self excluded (the issue's size). Measured on the
same data, each in its own subprocess (peak memory = that process's ``ru_maxrss``):

* ``gemm fp32``    — the n x n x d IEEE float32 product alone, in tiles written into one buffer (what an
  exact float32 method must at least compute);
* ``gemm bf16``    — the same product from bfloat16 inputs and outputs (the CPU's fastest product, when it has
  native bfloat16);
* ``embeval knn``  — :func:`embeval_report.kernels.knn` as a library call: candidates from the fastest exact
  product (:func:`~embeval_report.kernels.device.exact_product`), the float64 top-k;
* ``embeval +pot`` — the same graph in a report run's sweep, which also sums the all-pairs potential from
  float32 products (uniformity reads it);
* ``torch topk``   — plain torch: chunked ``q @ X.T`` then ``torch.topk`` over whole rows;
* ``sklearn brute`` — ``NearestNeighbors(metric="cosine", algorithm="brute")``;
* ``faiss flat``   — ``faiss.IndexFlatIP`` on normalised rows, when faiss-cpu is installed.

Prints seconds, GFLOP/s (2 n^2 d / t), the throughput ratio to each baseline of the same run (faiss, the fp32
GEMM, scikit-learn: baseline seconds / method seconds, higher is faster), peak memory, which path ran, the
share of rows whose neighbour set equals embeval's, and the share of embeval's lists identical (indices in
order) to float64 brute force on 2,000 seeded rows. ``--repeat 2`` runs every method twice and keeps each
one's best time (the machine is shared). ``--candidates fp32|bf16`` forces embeval's candidate product.

Usage: ``python benchmarks/bench_knn.py [--n 50000] [--d 256] [--k 10] [--device auto] [--repeat 2]
[--skip sklearn,faiss] [--candidates fp32]``
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

METHODS = ("gemm fp32", "gemm bf16", "embeval knn", "embeval +pot", "torch topk", "sklearn brute", "faiss flat")
#: rows whose embeval lists are checked against float64 brute force
CHECK_ROWS = 2000


def _data(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((64, d)).astype(np.float32)
    return (centres[rng.integers(0, 64, n)] + 0.8 * rng.standard_normal((n, d))).astype(np.float32)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _gemm(X: np.ndarray, device: str, bf16: bool) -> None:
    import torch

    from embeval_report.kernels.device import exact_matmul
    from embeval_report.kernels.neighbours import _tile_shape

    dev = torch.device(device)
    n = len(X)
    rows, cols = _tile_shape(n, n, dev)
    dtype = torch.bfloat16 if bf16 else torch.float32
    U = torch.as_tensor(X, device=dev).to(dtype)
    Ut = U.T.contiguous()
    buf = torch.empty((rows, cols), device=dev, dtype=dtype)
    with exact_matmul():
        for s in range(0, n, rows):
            q = U[s:s + rows]
            for j in range(0, n, cols):
                w = min(cols, n - j)
                torch.matmul(q, Ut[:, j:j + w], out=buf[:len(q), :w] if w == cols and len(q) == rows else None)
    _sync(device)


def run_method(name: str, path: str, k: int, device: str, candidates: str | None) -> dict:
    """Run one method on the saved data; return its time, memory, path and neighbour lists."""
    import torch

    X = np.load(path)
    n, d = X.shape
    if name.startswith(("gemm", "embeval")):  # imports outside the timed part
        import embeval_report.kernels.neighbours  # noqa: F401
    elif name == "sklearn brute":
        import sklearn.neighbors  # noqa: F401
    elif name == "faiss flat":
        import faiss  # noqa: F401
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    idx, path_ran = None, ""
    t = time.perf_counter()
    if name.startswith("gemm"):
        _gemm(X, device, bf16=name.endswith("bf16"))
    elif name.startswith("embeval"):
        from embeval_report.kernels import device as dv
        from embeval_report.kernels import neighbours as nb

        if candidates:
            dv.CANDIDATES = candidates
        stats = {}
        idx, _ = nb.self_sweep(X, {"cosine": (k, None)}, device=device, desc=None, stats=stats,
                               potential=name.endswith("+pot"))["cosine"]
        _sync(device)
        path_ran = (f"{stats['product']} {stats['sweep']} x{stats['workers']}"
                    + (f", {stats['searched_again']} again" if stats["searched_again"] else ""))
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
        path_ran = "fp32"
    elif name == "sklearn brute":
        from sklearn.neighbors import NearestNeighbors

        idx = NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(X).kneighbors(X)[1][:, 1:]
        path_ran = "fp64"
    elif name == "faiss flat":
        import faiss

        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        index = faiss.IndexFlatIP(d)
        index.add(U)
        idx = index.search(U, k + 1)[1][:, 1:]
        path_ran = "faiss fp32"
    seconds = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return dict(seconds=seconds, peak_mb=rss / 1024, extra_mb=(rss - rss0) / 1024, path=path_ran,
                idx=None if idx is None else np.asarray(idx).tolist())


def _exact_share(X: np.ndarray, idx: np.ndarray, k: int) -> float:
    """Share of CHECK_ROWS seeded rows whose list equals float64 brute force (indices in order, ties: lower index)."""
    rows = np.sort(np.random.default_rng(1).choice(len(X), min(CHECK_ROWS, len(X)), replace=False))
    U = X.astype(np.float64)
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    S = U[rows] @ U.T
    S[np.arange(len(rows)), rows] = -np.inf
    return float((np.argsort(-S, axis=1, kind="stable")[:, :k] == idx[rows]).all(1).mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeat", type=int, default=1, help="runs of every method; each keeps its best time")
    ap.add_argument("--skip", default="", help="comma-separated methods to skip (sklearn, faiss, torch, +pot, bf16)")
    ap.add_argument("--candidates", choices=("fp32", "bf16", "tf32"), help="force embeval's candidate product")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    a = ap.parse_args()
    import torch

    device = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if a.one:
        print(json.dumps(run_method(a.one, a.path, a.k, device, a.candidates)))
        return
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    X = _data(a.n, a.d)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.npy")
        np.save(path, X)
        extra = ["--path", path, "--k", str(a.k), "--device", device] + (
            ["--candidates", a.candidates] if a.candidates else [])
        for _ in range(a.repeat):
            for name, r in run_isolated(__file__, METHODS, skip, extra).items():
                if name not in results or r["seconds"] < results[name]["seconds"]:
                    results[name] = r
    flops = 2.0 * a.n * a.n * a.d
    ref = np.asarray(results["embeval knn"]["idx"])
    base = {b: results[b]["seconds"] for b in ("faiss flat", "gemm fp32", "sklearn brute") if b in results}
    print(f"exact cosine k-NN, n = {a.n}, d = {a.d}, k = {a.k}, device = {device}, "
          f"torch threads = {torch.get_num_threads()}, best of {a.repeat}; "
          f"ratios: baseline seconds / method seconds (higher: faster)")
    head = "".join(f" {'x ' + b.split()[0]:>9}" for b in base)
    print(f"{'method':<14} {'seconds':>8} {'GFLOP/s':>8}{head} {'peak MB':>8} {'same set':>9}  path")
    for name, r in results.items():
        same = ""
        if r["idx"] is not None:
            same = f"{(np.sort(np.asarray(r['idx']), 1) == np.sort(ref, 1)).all(1).mean():.2%}"
        ratios = "".join(f" {base[b] / r['seconds']:9.2f}" for b in base)
        print(f"{name:<14} {r['seconds']:8.2f} {flops / r['seconds'] / 1e9:8.1f}{ratios} {r['peak_mb']:8.0f} "
              f"{same:>9}  {r['path']}")
    print(f"embeval lists identical to float64 brute force (indices in order) on {min(CHECK_ROWS, a.n):,} seeded "
          f"rows: {_exact_share(X, ref, a.k):.2%}")


if __name__ == "__main__":
    main()
