"""Benchmark the across-runs stability chapter: R runs x n entities x d dimensions.

Default: 5 runs x 50 000 x 128 (the issue's size). Timed, on the same data:

* ``k-NN``          — exact cosine k-NN (k = 10) of every run with the chunked torch kernel;
* ``overlap``       — per-entity k-NN overlap for all R(R-1)/2 run pairs;
* ``Procrustes``    — orthogonal Procrustes fit + per-entity aligned cosine for all pairs;
* ``correlation``   — exact pairwise similarity correlation for all pairs (d x d moments);
* ``full``          — :func:`embeval_report.metrics.stability.measure_run_stability` end to end, without and
  with the 200-resample block bootstrap.

Peak memory: the process's peak RSS, and torch's peak CUDA allocation on a GPU.

Usage: ``python benchmarks/bench_stability.py [--runs 5] [--n 50000] [--d 128] [--device auto]``
"""
from __future__ import annotations

import argparse
import resource
import time
from itertools import combinations

import numpy as np
import torch
from scipy.stats import ortho_group

from embeval_report.kernels import knn, neighbour_sets_overlap, resolve_device
from embeval_report.metrics.procrustes import procrustes_align, row_cosines
from embeval_report.metrics.stability import measure_run_stability, similarity_correlation


def timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - t


def make_runs(R: int, n: int, d: int, seed: int = 0) -> list[np.ndarray]:
    """A shared clustered base; each run adds noise and an arbitrary rotation."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((64, d))
    base = centres[rng.integers(0, 64, n)] + 0.8 * rng.standard_normal((n, d))
    return [((base + 0.25 * rng.standard_normal((n, d))) @ ortho_group.rvs(d, random_state=r)).astype(np.float32)
            for r in range(R)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--skip-full", action="store_true", help="time the components only")
    a = ap.parse_args()
    dev = resolve_device(a.device)
    runs = make_runs(a.runs, a.n, a.d)
    pairs = list(combinations(range(a.runs), 2))
    print(f"{a.runs} runs x n = {a.n:,} x d = {a.d}, {len(pairs)} pairs, k = {a.k}, device = {dev}, "
          f"torch threads = {torch.get_num_threads()}")
    nbrs, t_knn = timed(lambda: [knn(X, a.k, device=dev, desc=None)[0] for X in runs])
    ov, t_ov = timed(lambda: [neighbour_sets_overlap(nbrs[i], nbrs[j]) for i, j in pairs])

    def procrustes_all():
        out = []
        for i, j in pairs:
            fit = procrustes_align(runs[i], runs[j])
            out.append((row_cosines(fit.target, fit.aligned).mean(), fit.disparity))
        return out
    pr, t_pr = timed(procrustes_all)
    corr, t_corr = timed(lambda: [similarity_correlation(runs[i], runs[j], device=dev) for i, j in pairs])
    rows = [("k-NN of every run", t_knn), ("k-NN overlap, all pairs", t_ov), ("Procrustes, all pairs", t_pr),
            ("similarity correlation, all pairs", t_corr)]
    if not a.skip_full:
        r0, t0 = timed(lambda: measure_run_stability(runs, a.k, n_boot=0, device=dev))
        r1, t1 = timed(lambda: measure_run_stability(runs, a.k, n_boot=200, device=dev))
        rows += [("measure_run_stability (no CI)", t0), ("measure_run_stability (+ block bootstrap, 200)", t1)]
    print(f"{'step':48s} {'seconds':>9s}")
    for name, t in rows:
        print(f"{name:48s} {t:9.2f}")
    print(f"mean k-NN overlap {np.mean([o.mean() for o in ov]):.4f}, aligned cosine "
          f"{np.mean([p[0] for p in pr]):.4f}, disparity {np.mean([p[1] for p in pr]):.4f}, "
          f"similarity correlation {np.mean(corr):.4f}")
    if not a.skip_full:
        m = r1.metrics
        print("with CI: " + ", ".join(f"{k} {v.value:.4f} [{v.ci_low:.4f}, {v.ci_high:.4f}]" for k, v in m.items()))
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    if dev.type == "cuda":
        print(f"peak CUDA allocated: {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
