"""Benchmark the all-pairs intrinsic kernels against dense numpy / scikit-learn baselines, in one run.

Default: 50 000 x 256 float32 (clustered, so k-NN is meaningful). Compared on the same data:

(a) uniformity (Wang & Isola, t = 2), exact over all pairs:

* ``embeval exact``   — :func:`embeval_report.metrics.uniformity.uniformity_score` (blocked torch kernel
  :func:`embeval_report.kernels.gaussian_potential_rows`, float64, memory O(nd + block²));
* ``scipy pdist``     — ``scipy.spatial.distance.pdist(Z, "sqeuclidean")`` then an in-place exp: the
  condensed n(n−1)/2 float64 vector (10 GB at n = 50 000);
* ``dense n x n``     — seed 004's numpy code (``Z @ Z.T``, mask the diagonal, exp, mean): several
  n x n float64 matrices (about 80 GB at n = 50 000).

  The dense baselines run at the largest n whose predicted memory fits ``--dense-gb`` (default
  2 GiB); their time and memory at the full n are extrapolated by (n_full / n)², and
  ``embeval exact`` is also run at that n for a like-for-like comparison.

(b) k nearest neighbours (cosine, k = 10, self excluded):

* ``embeval knn``     — :func:`embeval_report.kernels.knn` (blocked product + pruned running top-k; see bench_knn.py);
* ``sklearn brute``   — ``NearestNeighbors(metric="cosine", algorithm="brute")`` (chunked by
  ``pairwise_distances_chunked``), neighbour sets compared with embeval's.

Each method runs in its own subprocess; peak memory is that process's ``ru_maxrss``, reported in
full and above the RSS after loading the data and importing the libraries ("extra").

Usage: ``python benchmarks/bench_intrinsic.py [--n 50000] [--d 256] [--dense-gb 2] [--device auto]``
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

T = 2.0
K = 10


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _normalized(X):
    X = X.astype(np.float64)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def worker(method: str, path: str, rows: int, device: str) -> dict:
    """Run one method on the first ``rows`` rows of the data; return time, memory and result."""
    import torch  # noqa: F401  (imported before the baseline RSS for every method alike)
    from scipy.spatial.distance import pdist
    from sklearn.neighbors import NearestNeighbors

    from embeval_report.kernels import knn
    from embeval_report.metrics.uniformity import uniformity_score

    X = np.ascontiguousarray(np.load(path, mmap_mode="r")[:rows])
    base = _rss_mib()
    t0 = time.perf_counter()
    out: dict = {}
    if method == "embeval exact":
        out["value"] = float(uniformity_score(X, t=T))
    elif method == "scipy pdist":
        D = pdist(_normalized(X), "sqeuclidean")
        D *= -T
        np.exp(D, out=D)  # in place: one condensed vector in memory
        out["value"] = float(np.log(D.mean()))
    elif method == "dense n x n":  # seed 004 (nidl) numpy path
        z = _normalized(X)
        dist_sq = 2 - 2 * (z @ z.T)
        dist_sq = dist_sq[~np.eye(len(z), dtype=bool)]
        out["value"] = float(np.log(np.exp(-T * dist_sq).mean()))
    elif method == "embeval knn":
        idx, _ = knn(X, K, metric="cosine", device=device, desc=None)
        np.save(path + ".knn_embeval.npy", idx)
    elif method == "sklearn brute":
        _, idx = NearestNeighbors(n_neighbors=K + 1, metric="cosine", algorithm="brute").fit(X).kneighbors(X)
        # drop each row's own index (sklearn puts the query itself first unless a duplicate ties with it)
        own = idx == np.arange(len(X))[:, None]
        keep = np.where(own.any(1)[:, None], ~own, np.arange(K + 1)[None, :] < K)
        np.save(path + ".knn_sklearn.npy", idx[keep].reshape(len(X), K))
    else:
        raise ValueError(method)
    out.update(seconds=time.perf_counter() - t0, peak_mib=_rss_mib(), base_mib=base, rows=rows)
    return out


def run(method: str, path: str, rows: int, device: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", method, "--data", path, "--rows", str(rows),
           "--device", device]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return dict(error=(p.stderr.strip().splitlines() or ["failed"])[-1], rows=rows)
    return json.loads(p.stdout.strip().splitlines()[-1])


def dense_rows(n: int, gib: float, matrices: float) -> int:
    """Largest n' <= n whose ``matrices`` x n'² float64 values fit in ``gib`` GiB."""
    return int(min(n, math.sqrt(gib * 2**30 / (8 * matrices))))


def make_data(n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((200, d))
    X = centres[rng.integers(0, 200, n)] + 0.8 * rng.standard_normal((n, d))
    return (X + 0.2).astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--dense-gb", type=float, default=2.0, help="memory allowed for the dense baselines (GiB)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--worker")
    ap.add_argument("--data")
    ap.add_argument("--rows", type=int)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.data, a.rows, a.device)))
        return

    import torch

    from embeval_report.kernels import resolve_device
    dev = resolve_device(a.device)
    n = a.n
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "X.npy")
        np.save(path, make_data(n, a.d))
        n_pdist = dense_rows(n, a.dense_gb, 0.5)   # one condensed vector of n²/2 values
        n_dense = dense_rows(n, a.dense_gb, 3.0)   # z z^T, 2 − 2 z z^T, the masked copy (+ bool mask)
        print(f"data: {n:,} x {a.d} float32 ({n * a.d * 4 / 2**20:.0f} MiB), device = {dev}, "
              f"torch threads = {torch.get_num_threads()}, CPU cores = {os.cpu_count()}")
        need = f"{n * n / 2 * 8 / 2**30:.1f} GiB and {3 * n * n * 8 / 2**30:.0f} GiB"
        print(f"dense baselines capped at {a.dense_gb:g} GiB: scipy pdist at n = {n_pdist:,}, dense n x n at "
              f"n = {n_dense:,} (full n would need {need})")
        plan = [("(a) uniformity", "embeval exact", n)]
        if n_pdist < n:
            plan.append(("(a) uniformity", "embeval exact", n_pdist))
        plan.append(("(a) uniformity", "scipy pdist", n_pdist))
        if n_dense not in (n, n_pdist):
            plan.append(("(a) uniformity", "embeval exact", n_dense))
        plan.append(("(a) uniformity", "dense n x n", n_dense))
        plan += [("(b) k-NN k=10", "embeval knn", n), ("(b) k-NN k=10", "sklearn brute", n)]
        results = []
        for task, method, rows in plan:
            print(f"  running {method} at n = {rows:,} ...", flush=True)
            results.append((task, method, run(method, path, rows, a.device)))
        exact = {r["rows"]: r.get("value") for _, m, r in results if m == "embeval exact"}

        print()
        print(f"{'task':16s} {'method':15s} {'n':>7s} {'seconds':>9s} {'peak MiB':>9s} {'extra MiB':>10s} "
              f"{'result':>12s}  note")
        for task, method, r in results:
            if "error" in r:
                print(f"{task:16s} {method:15s} {r['rows']:7,d}  failed: {r['error']}")
                continue
            extra = r["peak_mib"] - r["base_mib"]
            note = ""
            if "value" in r:
                res = f"{r['value']:.6f}"
                if method != "embeval exact" and exact.get(r["rows"]) is not None:
                    note = f"|Δ| vs embeval {abs(r['value'] - exact[r['rows']]):.1e}"
            else:
                res = ""
            if r["rows"] < n:
                f = (n / r["rows"]) ** 2
                note += (f"; at n = {n:,}: ~{r['seconds'] * f:,.0f} s, ~{extra * f / 1024:,.1f} GiB extra "
                         "(extrapolated by n²)" if method != "embeval exact" else
                         "like-for-like with the baseline at this n")
            print(f"{task:16s} {method:15s} {r['rows']:7,d} {r['seconds']:9.2f} {r['peak_mib']:9.0f} {extra:10.0f} "
                  f"{res:>12s}  {note.lstrip('; ')}")
        try:
            A, B = np.load(path + ".knn_embeval.npy"), np.load(path + ".knn_sklearn.npy")
            agree = np.mean([len(set(x) & set(y)) / K for x, y in zip(A, B)])
            print(f"\nk-NN neighbour sets, embeval vs scikit-learn: {agree:.4%} overlap (differences are ties "
                  "or float32 rounding at the k-th neighbour)")
        except OSError:
            pass


if __name__ == "__main__":
    main()
