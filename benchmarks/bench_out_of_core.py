"""The intrinsic report of a set larger than memory, read from Zarr, in sampled mode, with its peak memory.

Generates an n x d float32 Zarr store block by block (default 10 000 000 x 768: 30.7 GB of float32, more
than this machine's 24 GiB; Blosc zstd with bit shuffle). The values are those of a half-precision model
stored as float32 (float16-representable), which compress to about 58 %, so the store and the prepared
float32 copy every chapter memory-maps fit on a 64 GB disk together; the set is clustered, with a common
direction. Then runs ``embeval-report run`` on a manifest naming the store with ``--sample-size m``, HTML
only, while sampling the resident memory of the whole process tree every two seconds: anonymous memory
(what the budget bounds) apart from file pages (the memory-mapped set and page cache, which the kernel
reclaims). Prints each chapter's seconds against one m x n x d float32 product (measured on the first
262,144 rows and scaled to n: the floor of the sampled neighbour search), the whole run, the peaks, and
checks that every sampled number states an interval.

Usage: ``python benchmarks/bench_out_of_core.py [--n 10000000] [--d 768] [--sample-size 5000]
[--dir DIR] [--keep-store] [--memory-budget 4GiB]``
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import torch

BLOCK = 131_072  # rows generated and written per step (one Zarr chunk)


def generate(path: Path, n: int, d: int, seed: int = 0) -> float:
    """Write the store; returns the seconds it took."""
    import zarr
    from zarr.codecs import BloscCodec

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((200, d)).astype(np.float32)
    t = time.perf_counter()
    root = zarr.open_group(str(path), mode="w")
    z = root.create_array("vectors", shape=(n, d), chunks=(BLOCK, d), dtype="float32",
                          compressors=BloscCodec(cname="zstd", clevel=1, shuffle="bitshuffle"))
    for s in range(0, n, BLOCK):
        m = min(BLOCK, n - s)
        x = centres[rng.integers(0, 200, m)] + rng.standard_normal((m, d), dtype=np.float32) + 1.5
        z[s:s + m] = x.astype(np.float16).astype(np.float32)
        print(f"\rgenerating: {s + m:,} / {n:,} rows", end="", flush=True)
    print()
    return time.perf_counter() - t


def product_seconds(path: Path, n: int, m: int) -> float:
    """One m x n x d float32 product, timed on the first 262,144 rows (tiled as the kernels tile it) and
    scaled linearly to n."""
    import zarr

    rows = min(n, 262_144)
    X = np.asarray(zarr.open_group(str(path), mode="r")["vectors"][:rows])
    Q = torch.as_tensor(X[:m])
    buf = torch.empty((m, 4096))
    t = time.perf_counter()
    for s in range(0, rows, 4096):
        c = torch.as_tensor(X[s:s + 4096]).T
        torch.matmul(Q, c, out=buf[:, :c.shape[1]])
    return (time.perf_counter() - t) * n / rows


class MemorySampler(threading.Thread):
    """Peak resident memory of a process and its descendants: anonymous (sum over the tree, and the largest
    single process) and file-backed pages (the memory-mapped set), sampled every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 2.0):
        super().__init__(daemon=True)
        self.root, self.interval = psutil.Process(pid), interval
        self.peak_anon = self.peak_single = self.peak_file = 0
        self.stop = threading.Event()

    @staticmethod
    def _status(p: psutil.Process) -> tuple[int, int]:
        fields = {}
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
                    key, value = line.split(":")
                    fields[key] = int(value.split()[0]) * 1024
        return fields.get("RssAnon", 0), fields.get("RssFile", 0) + fields.get("RssShmem", 0)

    def run(self) -> None:
        while not self.stop.is_set():
            anon = files = single = 0
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for p in procs:
                try:
                    a, f = self._status(p)
                except (OSError, psutil.Error):
                    continue
                anon, files, single = anon + a, files + f, max(single, a)
            self.peak_anon, self.peak_file = max(self.peak_anon, anon), max(self.peak_file, files)
            self.peak_single = max(self.peak_single, single)
            self.stop.wait(self.interval)


def unstated_intervals(metrics: dict) -> list[str]:
    """Sampled numbers in metrics.json without an interval."""
    return [f"{ch}.{name}" for ch, body in metrics.get("chapters", {}).items()
            for name, m in body.get("metrics", {}).items()
            if isinstance(m, dict) and m.get("value") is not None and m.get("ci_low") is None
            and "sampled" in json.dumps(m).lower()]


def _stop(signum, frame):
    raise KeyboardInterrupt()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--sample-size", type=int, default=5000)
    ap.add_argument("--memory-budget", default=None)
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"), help="where the store and report go")
    ap.add_argument("--keep-store", action="store_true", help="reuse (and keep) DIR/bench.zarr")
    ap.add_argument("--chapters", default=None, help="comma-separated chapters (default: every one that applies)")
    a = ap.parse_args()
    work = Path(a.dir)
    store, out = work / "bench.zarr", work / "bench-report"
    if not (a.keep_store and store.is_dir()):
        shutil.rmtree(store, ignore_errors=True)
        seconds = generate(store, a.n, a.d)
        print(f"generated {a.n:,} x {a.d} float32 ({a.n * a.d * 4 / 1e9:.1f} GB) as Zarr in {seconds:.0f} s")
    size = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    print(f"store on disk: {size / 1e9:.1f} GB ({size / (a.n * a.d * 4):.0%} of the float32 bytes); "
          f"machine memory {psutil.virtual_memory().total / 2**30:.1f} GiB")
    product = product_seconds(store, a.n, a.sample_size)
    manifest = work / "bench.yaml"
    manifest.write_text(f"name: out-of-core benchmark\nvectors: {{zarr: {store}, array: vectors}}\n")
    cmd = [sys.executable, "-m", "embeval_report.cli", "run", str(manifest), "--out", str(out), "--formats", "html",
           "--device", "cpu", "--sample-size", str(a.sample_size), "--force"]
    if a.memory_budget:
        cmd += ["--memory-budget", a.memory_budget]
    if a.chapters:
        cmd += ["--chapters", a.chapters]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd)
    sampler = MemorySampler(proc.pid)
    sampler.start()
    signal.signal(signal.SIGTERM, _stop)
    try:
        rc = proc.wait()
    except BaseException:  # stopped (Ctrl-C, SIGTERM): the run must not outlive the benchmark
        proc.terminate()  # embeval-report cleans up on SIGTERM: kernels stopped, partial folder removed
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    finally:
        sampler.stop.set()
    total = time.perf_counter() - t
    sampler.join()
    if rc not in (0, 4):  # 4: a chapter failed; the report, and the times of the others, are still written
        sys.exit(f"embeval-report exited with {rc}")
    run = json.loads((out / "run.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    print(f"\nintrinsic report from Zarr, n = {a.n:,}, d = {a.d}, --sample-size {a.sample_size:,}, "
          f"torch threads = {torch.get_num_threads()}, memory budget {run.get('memory_budget', 0) / 2**30:.3g} GiB")
    print(f"one {a.sample_size:,} x {a.n:,} x {a.d} float32 product (scaled from 262,144 rows): {product:.1f} s")
    print(f"{'chapter':<28} {'status':<8} {'seconds':>8} {'products':>8}")
    for ch in run["chapters"]:
        if ch["status"] != "skipped":
            print(f"{ch['name']:<28} {ch['status']:<8} {ch['seconds']:8.1f} {ch['seconds'] / product:8.2f}")
    print(f"whole run (reading and validating the store, the prepared copy, every chapter, rendering): "
          f"{total:.0f} s = {total / 60:.1f} min")
    print(f"peak anonymous memory: {sampler.peak_anon / 2**30:.2f} GiB over the process tree, "
          f"{sampler.peak_single / 2**30:.2f} GiB in one process; peak file-backed pages (the memory-mapped "
          f"set, reclaimable): {sampler.peak_file / 2**30:.2f} GiB")
    missing = unstated_intervals(metrics)
    print("every sampled number states an interval" if not missing else f"sampled without interval: {missing}")
    shutil.rmtree(out, ignore_errors=True)
    if not a.keep_store:
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
