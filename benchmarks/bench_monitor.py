"""Time `monitor`'s scoring of a 100,000 x 768 batch against a profile, next to one covariance of the batch.

    .venv/bin/python benchmarks/bench_monitor.py [--n 100000] [--d 768] [--device cpu]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from embeval_report.monitoring import build_profile, score_batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    mix = rng.standard_normal((a.d, a.d)).astype(np.float32) / np.sqrt(a.d)
    ref = rng.standard_normal((a.n, a.d)).astype(np.float32) @ mix
    batch = (rng.standard_normal((a.n, a.d)).astype(np.float32) @ mix) + 0.01
    t = time.perf_counter()
    p = build_profile(ref, device=a.device)
    t_profile = time.perf_counter() - t
    t = time.perf_counter()
    xt = torch.from_numpy(batch)
    xc = xt - xt.mean(0)
    _ = (xc.T @ xc) / (a.n - 1)
    t_cov = time.perf_counter() - t
    t = time.perf_counter()
    s = score_batch(p, batch, device=a.device)
    t_score = time.perf_counter() - t
    print(f"{a.n:,} x {a.d}: profile {t_profile:.2f} s; monitor score {t_score:.2f} s (level {s.level}); "
          f"one covariance of the batch {t_cov:.2f} s; ratio {t_score / t_cov:.1f}x")


if __name__ == "__main__":
    main()
