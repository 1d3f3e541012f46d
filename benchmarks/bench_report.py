"""The intrinsic report (vectors only) against the cost of one all-pairs GEMM, in one run.

Generates an n x d float32 set (clustered, with a common direction so hubness and anisotropy are
present), times one n x n x d float32 product (tiled, the floor of any exact all-pairs work),
then runs ``embeval-report run`` on the set with HTML output only and reports each chapter's
seconds from ``run.json``, as seconds and as multiples of that GEMM. The issue's target for
100 000 x 384 on the 2-core CPU machine: the whole report within 4 GEMMs.

Usage: ``python benchmarks/bench_report.py [--n 100000] [--d 384] [--device auto] [--keep OUT] [--bracket]``
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
import torch


def gemm_seconds(X: np.ndarray, device: str) -> float:
    """One n x n x d float32 product in 2048-row tiles into a preallocated buffer."""
    dev = torch.device(device)
    U = torch.as_tensor(X, device=dev)
    Ut = U.T.contiguous()
    rows = 2048
    buf = torch.empty((rows, len(X)), device=dev)
    t = time.perf_counter()
    for s in range(0, len(X), rows):
        q = U[s:s + rows]
        torch.matmul(q, Ut, out=buf[:len(q)])
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--keep", help="write the report here instead of a temporary folder")
    ap.add_argument("--bracket", action="store_true",
                    help="time the GEMM again after the report and also give the ratio to the mean of both")
    a = ap.parse_args()
    device = a.device if a.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((50, a.d))
    X = (centres[rng.integers(0, 50, a.n)] + rng.standard_normal((a.n, a.d)) + 1.5).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "x.npy"), X)
        gemm = gemm_seconds(X, device)
        out = a.keep or os.path.join(tmp, "report")
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "embeval_report.cli", "run", os.path.join(tmp, "x.npy"), "--out", out,
                        "--formats", "html", "--device", device, "--force"], check=True)
        total = time.perf_counter() - t
        after = gemm_seconds(X, device) if a.bracket else None
        run = json.load(open(os.path.join(out, "run.json")))
    print(f"intrinsic report, n = {a.n}, d = {a.d}, device = {device}, torch threads = {torch.get_num_threads()}")
    print(f"one {a.n} x {a.n} x {a.d} float32 GEMM: {gemm:.1f} s "
          f"({2 * a.n * a.n * a.d / gemm / 1e9:.0f} GFLOP/s)")
    if after is not None:  # the machine's pace drifts: the same GEMM after the report, and the ratio to their mean
        print(f"the same GEMM after the report: {after:.1f} s; whole run / mean of both: "
              f"{total / ((gemm + after) / 2):.2f} GEMMs")
    print(f"{'chapter':<28} {'status':<8} {'seconds':>8} {'GEMMs':>6}")
    shared = run.get("neighbour_graph")
    if shared:
        print(f"{'shared sweep: ' + '+'.join(shared['products']):<37} {shared['seconds']:8.1f} "
              f"{shared['seconds'] / gemm:6.2f}")
    for ch in run["chapters"]:
        print(f"{ch['name']:<28} {ch['status']:<8} {ch['seconds']:8.1f} {ch['seconds'] / gemm:6.2f}")
    print(f"{'whole run (incl. loading, rendering)':<37} {total:8.1f} {total / gemm:6.2f}")


if __name__ == "__main__":
    main()
