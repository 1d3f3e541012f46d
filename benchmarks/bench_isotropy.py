"""Benchmark the isotropy chapter's kernels against plain numpy / scikit-learn, in one run.

Default: 100 000 x 384 float32 (the issue's size). Compared, on the same data:

* ``embeval``   — :func:`embeval_report.metrics.isotropy.measure_isotropy` (exact, chunked torch), without and
  with the 200-resample block bootstrap;
* ``numpy``     — ``np.cov`` + ``np.linalg.eigvalsh`` for the spectrum, and the exact mean /
  spread of the cosine over all pairs with ``sklearn.metrics.pairwise_distances_chunked``
  (the plain way to get the same exact numbers without an n x n matrix);
* ``seed-code`` — seed 000's approach (cosine of a 5 000-row sample), fast but approximate.

Usage: ``python benchmarks/bench_isotropy.py [--n 100000] [--d 384] [--device auto]``
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np
from sklearn.metrics import pairwise_distances_chunked

from embeval_report.metrics.isotropy import measure_isotropy, spectral_metrics
from embeval_report.kernels import resolve_device


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def numpy_reference(X):
    lam = np.linalg.eigvalsh(np.cov(X, rowvar=False, bias=True))
    spec = spectral_metrics(lam, X.shape[1])
    total = total_sq = 0.0
    for D in pairwise_distances_chunked(X, metric="cosine", working_memory=512):
        S = 1.0 - D  # cosine similarity rows
        total += S.sum()
        total_sq += (S * S).sum()
    n = len(X)
    mean = (total - n) / (n * (n - 1))  # self-similarities are 1
    mean_sq = (total_sq - n) / (n * (n - 1))
    return dict(spec, apcs=mean, apcs_std=float(np.sqrt(mean_sq - mean ** 2)))


def seed_code(X, sample_size=5000, seed=42):
    rng = np.random.default_rng(seed)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = U[rng.choice(len(X), sample_size, replace=False)]
    sims = (S @ S.T)[np.triu_indices(sample_size, k=1)]
    return dict(apcs=float(sims.mean()), apcs_std=float(sims.std()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--skip-numpy", action="store_true", help="skip the slow all-pairs numpy baseline")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    scales = np.exp(-4 * np.arange(a.d) / a.d)
    X = (rng.standard_normal((a.n, a.d)) * scales + 0.3).astype(np.float32)  # anisotropic, shifted
    dev = resolve_device(a.device)
    print(f"n = {a.n:,}, d = {a.d}, device = {dev}")
    fast, t_fast = timed(lambda: measure_isotropy(X, n_boot=0, device=dev))
    boot, t_boot = timed(lambda: measure_isotropy(X, n_boot=200, device=dev))
    rows = [("embeval exact (no CI)", t_fast, fast.values), ("embeval exact + bootstrap CI", t_boot, boot.values)]
    if not a.skip_numpy:
        ref, t_ref = timed(lambda: numpy_reference(X))
        rows.append(("numpy/sklearn exact", t_ref, ref))
    approx, t_seed = timed(lambda: seed_code(X))
    rows.append(("seed code, 5k-row sample", t_seed, approx))
    print(f"{'method':32s} {'seconds':>9s} {'apcs':>10s} {'apcs_std':>9s} {'PR':>8s} {'kappa':>9s}")
    for name, t, v in rows:
        print(f"{name:32s} {t:9.2f} {v['apcs']:10.6f} {v['apcs_std']:9.6f} "
              f"{v.get('participation_ratio', float('nan')):8.3f} {v.get('condition_number', float('nan')):9.2f}")
    if not a.skip_numpy:
        err = max(abs(fast.values[k] - ref[k]) / max(abs(ref[k]), 1e-12) for k in ("apcs", "apcs_std",
                                                                                  "participation_ratio"))
        print(f"max relative difference embeval vs numpy: {err:.2e}; speed-up {t_ref / t_fast:.1f}x")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
