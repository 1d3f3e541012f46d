"""Each chapter's peak resident memory against ``--memory-budget``, one report run per budget.

Generates an n x d float32 set (default 300 000 x 768, 0.92 GB; clustered, with a common direction, so that
all-but-the-top and whitening have something to remove) as a ``.npy`` file, then runs ``embeval-report run
--memory-budget B`` for each budget (default 256 MiB, 1 GiB, 4 GiB; HTML only, one chapter at a time) and reads
``run.json``: each chapter kernel's peak resident memory (``peak_rss_bytes``, the kernel's VmHWM), the most of
its own memory seen (``peak_anon_bytes``, RssAnon read every half second: VmHWM also counts the pages of the
memory-mapped set a pass read, which are page cache), its seconds and status, and the runner's own peak. A kernel
holds its libraries before it computes anything (torch, pandas, SciPy, matplotlib: the Summary's kernel, which
computes next to nothing, measures that footprint), so the table also gives each chapter's own memory less that
footprint: its working memory, which the budget bounds.

The default chapters are those of a bare vectors file that need no k-NN graph (isotropy, uniformity, collapse);
``--chapters`` adds others (hubness and correction sweep the exact k-NN graph: about 10 min a run at 300k x 768
on the 2-core machine).

Usage: ``python benchmarks/bench_memory.py [--n 300000] [--d 768] [--budgets 256MiB,1GiB,4GiB]
[--chapters isotropy,uniformity,collapse] [--keep DIR]``
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


def generate(path: str, n: int, d: int, seed: int = 0, block: int = 50_000) -> None:
    """Clustered rows plus a common direction, written block by block into a float32 ``.npy`` (never whole in
    memory)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((100, d)).astype(np.float32)
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for s in range(0, n, block):
        m = min(block, n - s)
        X[s:s + m] = centres[rng.integers(0, 100, m)] + rng.standard_normal((m, d), dtype=np.float32) + 1.5
    X.flush()
    del X


def run(vectors: str, out: str, budget: str, chapters: str) -> dict:
    """One report run; its ``run.json`` (with the wall seconds and exit status added)."""
    t0 = time.time()
    done = subprocess.run([sys.executable, "-m", "embeval_report.cli", "run", vectors, "--out", out, "--force",
                           "--formats", "html", "--chapters", chapters, "--memory-budget", budget],
                          capture_output=True, text=True)
    doc = json.load(open(os.path.join(out, "run.json"))) if os.path.exists(os.path.join(out, "run.json")) else {}
    doc["wall_seconds"], doc["exit"], doc["stderr"] = time.time() - t0, done.returncode, done.stderr[-2000:]
    return doc


def mib(nbytes) -> str:
    return "—" if nbytes is None else f"{nbytes / 2**20:,.0f}"


def table(runs: dict[str, dict]) -> str:
    lines = ["| budget | chapter | status | seconds | peak RSS (MiB) | own memory, RssAnon (MiB) | "
             "own less the kernel's footprint (MiB) | within the budget |", "|---|---|---|---|---|---|---|---|"]
    from embeval_report.context import parse_bytes

    for budget, doc in runs.items():
        chapters = {c["name"]: c for c in doc.get("chapters", [])}
        footprint = chapters.get("summary", {}).get("peak_anon_bytes")
        for c in doc.get("chapters", []):
            if c["status"] == "skipped":
                continue
            own = c.get("peak_anon_bytes")
            work = None if own is None or footprint is None else max(0, own - footprint)
            within = "—" if work is None else ("yes" if work <= parse_bytes(budget) else "**no**")
            lines.append(f"| {budget} | {c['name']} | {c['status']} | {c['seconds']:.1f} | "
                         f"{mib(c.get('peak_rss_bytes'))} | {mib(own)} | {mib(work)} | {within} |")
        lines.append(f"| {budget} | (runner) | exit {doc['exit']} | {doc['wall_seconds']:.1f} | "
                     f"{mib(doc.get('runner_peak_rss_bytes'))} | | | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=300_000)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--budgets", default="256MiB,1GiB,4GiB")
    p.add_argument("--chapters", default="isotropy,uniformity,collapse")
    p.add_argument("--keep", default=None, help="keep the set and the reports in this folder")
    a = p.parse_args(argv)
    folder = a.keep or tempfile.mkdtemp(prefix="bench-memory-")
    os.makedirs(folder, exist_ok=True)
    vectors = os.path.join(folder, "vectors.npy")
    if not os.path.exists(vectors):
        generate(vectors, a.n, a.d)
    print(f"{a.n:,} x {a.d} float32 ({a.n * a.d * 4 / 2**30:.2f} GiB) in {vectors}", flush=True)
    runs = {}
    for budget in a.budgets.split(","):
        runs[budget] = doc = run(vectors, os.path.join(folder, f"report-{budget}"), budget, a.chapters)
        print(f"{budget}: exit {doc['exit']} in {doc['wall_seconds']:.0f} s", flush=True)
        if doc["exit"] not in (0, 3, 4):
            print(doc["stderr"], file=sys.stderr)
    print(table(runs))
    with open(os.path.join(folder, "bench_memory.json"), "w") as f:
        json.dump({b: {k: v for k, v in d.items() if k != "stderr"} for b, d in runs.items()}, f, indent=2)
    if a.keep is None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
