"""The intrinsic report in sampled mode on a set too large for exact all-pairs work, in one run.

Generates an n x d float32 set (default 2 000 000 x 768, 6 GB in memory; clustered, with a common
direction), times one m x n x d float32 product (m = the sample size: the floor of the sampled
neighbour work), then runs ``embeval-report run --sample-size m`` with HTML output only. Prints each
chapter's seconds, the whole run against the issue's budget (10M x 768 within 30 min on the 2-core
CPU machine; this set is a fifth of it), and checks that every sampled number in metrics.json states
an interval.

Usage: ``python benchmarks/bench_sampled.py [--n 2000000] [--d 768] [--sample-size 5000] [--keep OUT]``
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from bench_out_of_core import unstated_intervals


def generate(n: int, d: int, seed: int = 0, block: int = 200_000) -> np.ndarray:
    """Clustered rows plus a common direction, written block by block into one float32 array."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((200, d)).astype(np.float32)
    X = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, block):
        m = min(block, n - s)
        X[s:s + m] = centres[rng.integers(0, 200, m)] + rng.standard_normal((m, d), dtype=np.float32) + 1.5
    return X


def product_seconds(X: np.ndarray, m: int) -> float:
    """One m x n x d float32 product (m query rows against all rows), tiled as the kernels tile it."""
    Q = torch.as_tensor(X[:m])
    buf = torch.empty((m, 4096))
    t = time.perf_counter()
    for s in range(0, len(X), 4096):
        c = torch.as_tensor(X[s:s + 4096]).T
        torch.matmul(Q, c, out=buf[:, :c.shape[1]])
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--sample-size", type=int, default=5000)
    ap.add_argument("--keep", help="write the report here instead of a temporary folder")
    a = ap.parse_args()
    t = time.perf_counter()
    X = generate(a.n, a.d)
    print(f"generated {a.n:,} x {a.d} float32 ({X.nbytes / 2**30:.1f} GiB) in {time.perf_counter() - t:.0f} s")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        np.save(os.path.join(tmp, "x.npy"), X)
        product = product_seconds(X, a.sample_size)
        del X
        out = a.keep or os.path.join(tmp, "report")
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "embeval_report.cli", "run", os.path.join(tmp, "x.npy"), "--out", out,
                        "--formats", "html", "--device", "cpu", "--sample-size", str(a.sample_size), "--force"],
                       check=True)
        total = time.perf_counter() - t
        run = json.load(open(os.path.join(out, "run.json")))
        metrics = json.load(open(os.path.join(out, "metrics.json")))
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    print(f"sampled intrinsic report, n = {a.n:,}, d = {a.d}, --sample-size {a.sample_size:,}, "
          f"torch threads = {torch.get_num_threads()}")
    print(f"one {a.sample_size:,} x {a.n:,} x {a.d} float32 product: {product:.1f} s")
    print(f"{'chapter':<28} {'status':<8} {'seconds':>8} {'products':>8}")
    for ch in run["chapters"]:
        print(f"{ch['name']:<28} {ch['status']:<8} {ch['seconds']:8.1f} {ch['seconds'] / product:8.1f}")
    scaled = total * 5 * (a.n / 2_000_000) ** -1 if a.n else total
    print(f"whole run: {total:.0f} s ({total / 60:.1f} min; x5 rows at the same sample size is about "
          f"{scaled / 60:.0f} min of linear work against the 30 min budget for 10M x 768); "
          f"peak memory of the run's processes {peak:.1f} GiB")
    missing = unstated_intervals(metrics)
    print("every sampled number states an interval" if not missing else f"sampled without interval: {missing}")


if __name__ == "__main__":
    main()
