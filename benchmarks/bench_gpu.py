"""`make bench-gpu`: the GPU tests and the GPU benchmarks, each against plain torch in the same run.

On a machine where torch sees no CUDA device it prints one line saying so and exits 0. Otherwise, within
``--budget`` seconds (default 360: the whole command fits 6 minutes on an H100):

1. **GPU tests**: ``pytest -k cuda`` over the test suite — the device-parametrised kernel tests (the
   ``device`` fixture of ``tests/conftest.py``) on the GPU, which compare the GPU's numbers with float64
   references computed on the host (the same references the CPU cases meet). Test files that cannot be
   imported on this machine (packages it lacks) are listed, not counted as failures.
2. **Exact k-NN**, 1M x 768 float32 (cosine, k = 10, self excluded; generated on the GPU, handed over as a
   host array as a report run has it): ``knn`` end to end (target: at most 10 s on an H100) and its search
   alone, against plain torch (TF32 ``q @ X.T`` in chunks, then ``topk``); the lists checked against
   float64 brute force on 1,000 seeded rows.
3. **Isotropy**, 1M x 768: ``measure_isotropy`` without and with its bootstrap (target: at most 1 s)
   against plain torch (one float32 covariance GEMM + ``eigvalsh``).
4. **Host round trips**: ``torch.profiler`` counts the device-to-host copies of the isotropy bootstrap at
   two replicate counts (a count that grows with the replicates means a round trip inside the loop), and
   whether the eigendecompositions and Procrustes run on the device at all.
5. **The intrinsic report** on 1M x 768 (target: at most 5 minutes): the five chapters' compute functions
   run directly (isotropy, uniformity, collapse, hubness, correction, after the shared graph as a report run
   computes it), since papermill and nbconvert need not be installed here; it gets the rest of the budget and
   says so when it does not finish.

6. **Split products and one upload** (``split``): the exact search on one TF32 pass and on the split product
   (``tf32x3``: three TF32 passes, :data:`~embeval_report.kernels.device.TF32X3`), the same lists, and the TF32
   search inside :func:`~embeval_report.kernels.device.resident` (the set uploaded once for the corpus and every
   query block).
7. **Entries within the bound** (``entries``, also without a device: float64 products of the rounded inputs, which is
   what a GPU's candidates are up to the bound): per query row, how many corpus rows lie within B and 2B of its k-th
   score for each candidate product (TF32, the split, bfloat16, float32) on clustered rows; the count is what the
   kept-entry pass re-scores, so it decides whether the split's two extra passes pay.

8. **Profiles** (only with ``--profile-dir``): ``torch.profiler`` tables and a ``cProfile`` of the exact search
   (``--profile-n`` rows) and of the shared graph's sweep (half as many), one text file each, for the next step
   when a target is missed.

Isotropy's bootstrap is also timed with its eigendecompositions spread over 4 and 8 CUDA streams
(:data:`~embeval_report.kernels.spectra.EIG_STREAMS`), the same intervals required.

Without a CUDA device it prints the GPU figures as "no device lent" and measures the entries within the bound by
emulation on the CPU (``--emulate-n`` rows, 20,000 by default; a few seconds).

Prints one line per figure as it is measured and a summary table at the end. Each section runs in its own
process (a fresh CUDA context; a timeout). ``--n``/``--d``/``--report-n`` shrink the sizes;
``--device cpu`` runs the same code on the CPU (a dry run of this script).

Usage: ``python benchmarks/bench_gpu.py [--budget 360] [--n 1000000] [--d 768] [--report-n 1000000]``
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: seconds each section may take at most (the intrinsic report: whatever is left of the budget)
CAPS = {"tests": 100, "knn": 140, "isotropy": 60, "roundtrips": 45, "split": 120, "entries": 40, "profile": 90}
TARGETS = {"knn": 10.0, "isotropy": 1.0, "report": 300.0}


def _data(n: int, d: int, dev, seed: int = 0, spread: float = 0.8):
    """Clustered float32 rows, generated on ``dev`` (64 centres + noise of sd ``spread``, as bench_knn's data)."""
    import torch

    g = torch.Generator(device=dev).manual_seed(seed)
    centres = torch.randn(64, d, generator=g, device=dev)
    X = torch.empty(n, d, device=dev)
    for s in range(0, n, 262_144):
        m = min(262_144, n - s)
        pick = torch.randint(0, 64, (m,), generator=g, device=dev)
        X[s:s + m] = centres[pick] + spread * torch.randn(m, d, generator=g, device=dev)
    return X


def _sync(dev) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, dev):
    _sync(dev)
    t = time.perf_counter()
    out = fn()
    _sync(dev)
    return time.perf_counter() - t, out


def section_knn(a, dev) -> dict:
    import numpy as np
    import torch

    from embeval_report.kernels import neighbours as nb
    from embeval_report.kernels.device import BF16
    from embeval_report.kernels.graph_cache import clear_memory

    k = 10
    X = _data(a.n, a.d, dev)
    host = X.cpu().numpy()

    def plain():  # chunked TF32 products + topk over whole rows
        U = torch.nn.functional.normalize(X, dim=1)
        rows = max(1, int(torch.cuda.mem_get_info()[0] * 0.3) // (a.n * 4 * 2)) if dev.type == "cuda" else 2048
        saved = torch.backends.cuda.matmul.fp32_precision
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        try:
            out = []
            for s in range(0, a.n, rows):
                S = U[s:s + rows] @ U.T
                S[torch.arange(len(S), device=dev), torch.arange(s, s + len(S), device=dev)] = -torch.inf
                out.append(torch.topk(S, k, dim=1).indices)
                del S
            return torch.cat(out).cpu().numpy()
        finally:
            torch.backends.cuda.matmul.fp32_precision = saved

    t_plain, idx_plain = _timed(plain, dev)
    torch.cuda.empty_cache() if dev.type == "cuda" else None
    stats = {}
    clear_memory()
    t_knn, (idx, _) = _timed(lambda: nb.knn(host, k, device=dev, desc=None, stats=stats), dev)
    clear_memory()
    torch.cuda.empty_cache() if dev.type == "cuda" else None
    product = nb.exact_product(dev)
    t_search, ((idx2, _),) = _timed(lambda: nb._search(host, host, [(k, None)], "cosine", True, dev, None,
                                                        product=product)[0], dev)
    torch.cuda.empty_cache() if dev.type == "cuda" else None
    t_bf16, ((idx3, _),) = _timed(lambda: nb._search(host, host, [(k, None)], "cosine", True, dev, None,
                                                      product=BF16)[0], dev)  # the other exact candidate product
    rows = np.sort(np.random.default_rng(1).choice(a.n, min(1000, a.n), replace=False))
    U64 = torch.nn.functional.normalize(X.double(), dim=1)
    S = U64[torch.as_tensor(rows, device=dev)] @ U64.T
    S[torch.arange(len(rows), device=dev), torch.as_tensor(rows, device=dev)] = -torch.inf
    ref = torch.sort(torch.topk(S, 4 * k, dim=1).indices, dim=1).values  # then stable order by score, index
    sc = S.gather(1, ref)
    order = torch.sort(sc, dim=1, descending=True, stable=True).indices[:, :k]
    ref = ref.gather(1, order).cpu().numpy()
    return dict(n=a.n, d=a.d, plain_s=t_plain, knn_s=t_knn, search_s=t_search, path=stats,
                search_bf16_s=t_bf16, bf16_same=bool((idx3 == idx2).all()),
                exact_rows=float((idx[rows] == ref).all(1).mean()), same_as_search=bool((idx == idx2).all()),
                same_set_plain=float((np.sort(idx, 1) == np.sort(idx_plain, 1)).all(1).mean()))


def section_isotropy(a, dev) -> dict:
    import torch

    from embeval_report.metrics.isotropy import measure_isotropy

    host = _data(a.n, a.d, dev).cpu().numpy()

    def plain():  # upload, one covariance GEMM, eigvalsh
        Xd = torch.as_tensor(host, device=dev)
        Xc = Xd - Xd.mean(0)
        return torch.linalg.eigvalsh(Xc.T @ Xc / (len(Xc) - 1)).cpu()

    plain()  # warm-up: cuBLAS / cuSOLVER handles
    t_plain, _ = _timed(plain, dev)
    measure_isotropy(host[:10_000], n_boot=0, device=dev)  # warm-up
    t0, _ = _timed(lambda: measure_isotropy(host, n_boot=0, device=dev), dev)
    t200, ref = _timed(lambda: measure_isotropy(host, device=dev), dev)
    streams = {}
    from embeval_report.kernels import spectra

    for count in (4, 8):  # the bootstrap's eigendecompositions spread over CUDA streams: the same intervals?
        spectra.EIG_STREAMS = count
        t, res = _timed(lambda: measure_isotropy(host, device=dev), dev)
        same = all((res.metrics[k].ci_low, res.metrics[k].ci_high) == (m.ci_low, m.ci_high)
                   for k, m in ref.metrics.items())
        streams[str(count)] = dict(seconds=t, same=same)
    spectra.EIG_STREAMS = 1
    return dict(n=a.n, d=a.d, plain_s=t_plain, iso_s=t0, iso_boot_s=t200, streams=streams)


def section_split(a, dev) -> dict:
    """The exact search on one TF32 pass and on the split product, and the TF32 search on a set held on the device
    (:func:`~embeval_report.kernels.device.resident`: one upload for the corpus and every query block)."""
    import numpy as np
    import torch

    from embeval_report.kernels import neighbours as nb
    from embeval_report.kernels.device import TF32, TF32X3, resident

    k = 10
    host = _data(a.n, a.d, dev).cpu().numpy()
    out, lists = {}, {}
    for product in (TF32, TF32X3):
        stats = {}
        out[f"{product.name}_s"], ((lists[product.name], _),) = _timed(
            lambda: nb._search(host, host, [(k, None)], "cosine", True, dev, None, product=product, stats=stats)[0],
            dev)
        out[f"{product.name}_searched_again"] = stats.get("searched_again")
        torch.cuda.empty_cache() if dev.type == "cuda" else None
    with resident(host, dev):
        out["resident_s"], ((held, _),) = _timed(
            lambda: nb._search(host, host, [(k, None)], "cosine", True, dev, None, product=TF32)[0], dev)
    return dict(n=a.n, d=a.d, same=bool(np.array_equal(lists["tf32"], lists["tf32x3"])),
                resident_same=bool(np.array_equal(lists["tf32"], held)), **out)


def entries_within_bound(n: int, d: int, dev, *, queries: int = 300, k: int = 10, spread: float = 0.8) -> dict:
    """Per query row, the mean number of corpus rows whose float64 cosine lies within B and within 2B of the row's
    k-th (self excluded), for each candidate product's bound B (:func:`~embeval_report.kernels.device.product_bound`
    with the rows' measured rounding residuals), on :func:`_data`'s clustered rows: what the kept-entry pass keeps
    (2B) and re-scores (B). Float64 products, so it runs the same on a CPU (an emulation of the GPU's candidates:
    they are within B of these products)."""
    import torch

    from embeval_report.kernels import device as dv

    X = _data(n, d, dev, seed=4, spread=spread)
    U = torch.nn.functional.normalize(X.double(), dim=1)
    Q = U[:queries]
    S = Q @ U.T
    S[torch.arange(len(Q), device=dev), torch.arange(len(Q), device=dev)] = -torch.inf
    t_k = torch.topk(S, k, dim=1).values[:, -1]
    out = {}
    for p in (dv.TF32, dv.TF32X3, dv.BF16, dv.FP32):
        r = p.rounded(U).double()
        q = r[:queries]
        B = dv.product_bound(q.norm(dim=1), (q - Q).norm(dim=1), float(U.norm(dim=1).max()),
                             float((r - U).norm(dim=1).max()), float(r.norm(dim=1).max()), d, p)
        out[p.name] = dict(bound=float(B.mean()), within_b=float((S >= (t_k - B)[:, None]).sum(1).double().mean()),
                           within_2b=float((S >= (t_k - 2 * B)[:, None]).sum(1).double().mean()))
    return dict(n=n, d=d, k=k, queries=queries, spread=spread, products=out)


def section_entries(a, dev) -> dict:
    n = a.emulate_n if dev.type == "cpu" else min(a.n, 200_000)
    return dict(clustered=entries_within_bound(n, a.d, dev), tight=entries_within_bound(n, a.d, dev, spread=0.3))


def section_roundtrips(a, dev) -> dict:
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    from embeval_report.metrics.isotropy import measure_isotropy
    from embeval_report.metrics.procrustes import procrustes_align

    n = min(a.n, 200_000)
    host = _data(n, a.d, dev).cpu().numpy()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])

    def copies(fn) -> tuple[int, int]:
        """(device-to-host copies, device kernels) while ``fn`` runs."""
        with profile(activities=acts) as prof:
            fn()
            _sync(dev)
        names = [e.name for e in prof.events()]
        dtoh = sum(1 for s in names if "Memcpy DtoH" in s or "memcpy DtoH" in s.lower())
        kernels = sum(1 for e in prof.events() if getattr(e, "device_type", None) is not None
                      and str(e.device_type).endswith("CUDA") and "Memcpy" not in e.name)
        return dtoh, kernels

    measure_isotropy(host[:5000], n_boot=5, device=dev)  # warm-up
    b10 = copies(lambda: measure_isotropy(host, n_boot=10, device=dev))
    b40 = copies(lambda: measure_isotropy(host, n_boot=40, device=dev))
    rng = np.random.default_rng(0)
    B = host @ np.linalg.qr(rng.standard_normal((a.d, a.d)))[0].astype(np.float32)
    pro = copies(lambda: procrustes_align(torch.as_tensor(host, device=dev), torch.as_tensor(B, device=dev)))
    return dict(n=n, boot10=b10, boot40=b40, procrustes=pro, cuda=dev.type == "cuda")


def section_profile(a, dev) -> dict:
    """Where the time of the exact search and of the shared graph's sweep goes: ``torch.profiler`` tables (by
    device time and by host time) and a ``cProfile`` of the Python functions, at ``--profile-n`` rows, written to
    ``--profile-dir`` (the next step's evidence when a target is missed)."""
    import cProfile
    import io
    import pstats

    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    from embeval_report.kernels import neighbours as nb
    from embeval_report.kernels.graph_cache import clear_memory
    from embeval_report.metrics.hubness_reduction import reduced_knn

    os.makedirs(a.profile_dir, exist_ok=True)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    by = "self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
    out = {}
    jobs = {"knn_search": (a.profile_n, lambda h: nb._search(h, h, [(10, None)], "cosine", True, dev, None,
                                                             product=nb.exact_product(dev))),
            "shared_graph": (a.profile_n // 2, lambda h: reduced_knn(h, 10, ("mutual_proximity",), with_cosine=True,
                                                                      device=dev, desc=None))}
    for name, (n, fn) in jobs.items():
        host = _data(n, a.d, dev, seed=2).cpu().numpy()
        clear_memory()
        fn(host[:20_000])  # warm-up: kernels loaded, allocator primed
        clear_memory()
        prof_py = cProfile.Profile()
        t = time.perf_counter()
        with profile(activities=acts) as prof:
            prof_py.enable()
            fn(host)
            _sync(dev)
            prof_py.disable()
        seconds = time.perf_counter() - t
        text = io.StringIO()
        pstats.Stats(prof_py, stream=text).sort_stats("cumulative").print_stats(40)
        with open(os.path.join(a.profile_dir, f"{name}.txt"), "w") as f:
            f.write(f"{name}: {n:,} x {a.d}, {seconds:.2f} s under the profilers\n\n")
            f.write(prof.key_averages().table(sort_by=by, row_limit=30, max_name_column_width=60))
            f.write("\n\n")
            f.write(prof.key_averages().table(sort_by="cpu_time_total", row_limit=30, max_name_column_width=60))
            f.write("\n\ncProfile, cumulative:\n" + text.getvalue())
        out[name] = dict(n=n, seconds=seconds)
        clear_memory()
        torch.cuda.empty_cache() if dev.type == "cuda" else None
    host = _data(a.profile_n, a.d, dev, seed=3).cpu().numpy()  # the pooled sweep: whole rows against column tiles
    graphs, tiles = {}, {}
    for cols in (None, nb.GPU_TILE_COLS):
        nb.GPU_TILE_COLS = cols
        clear_memory()
        tiles[str(cols)], graphs[str(cols)] = _timed(lambda: reduced_knn(host, 10, ("mutual_proximity",),
                                                                         with_cosine=True, device=dev, desc=None), dev)
        torch.cuda.empty_cache() if dev.type == "cuda" else None
    same = all(np.array_equal(x, y) for x, y in zip(*(_arrays(g) for g in graphs.values())))
    out["sweep_cols"] = dict(n=a.profile_n, seconds=tiles, same=same)
    return out


def _arrays(found) -> list:
    """The numpy arrays in a (nested) result, in order."""
    import numpy as np

    if isinstance(found, np.ndarray):
        return [found]
    if isinstance(found, dict):
        found = list(found.values())
    return [x for item in (found if isinstance(found, (list, tuple)) else []) for x in _arrays(item)]


def section_report(a, dev) -> dict:
    import tempfile

    from embeval_report.context import CacheFolder, ComputeContext
    from embeval_report.metrics import collapse as col
    from embeval_report.metrics import correction as corr
    from embeval_report.metrics import hubness as hub
    from embeval_report.metrics import isotropy as iso
    from embeval_report.metrics import uniformity as uni
    from embeval_report.metrics.hubness_reduction import reduced_knn

    try:
        import nbconvert  # noqa: F401
        import papermill  # noqa: F401
        how = "compute functions run directly (the notebooks are not executed by this benchmark)"
    except ImportError:
        how = "compute functions run directly (papermill/nbconvert are not installed on this machine)"
    host = _data(a.report_n, a.d, dev).cpu().numpy()
    times = {}
    with tempfile.TemporaryDirectory() as cache, ComputeContext(  # a report run's caches: the shared graph's
            device=dev.type, graph_cache=CacheFolder(f"{cache}/neighbours", min_k=11),  # sweep leaves the potential
            moments_cache=CacheFolder(f"{cache}/moments")):
        steps = [("shared graph", lambda: reduced_knn(host, 10, ("mutual_proximity",), with_cosine=True, device=dev,
                                                      desc=None)),
                 ("isotropy", lambda: iso.measure_isotropy(host, device=dev)),
                 ("uniformity", lambda: uni.measure_uniformity(host, device=dev)),
                 ("collapse", lambda: col.measure_collapse(host, device=dev)),
                 ("hubness", lambda: hub.measure_hubness(host, 10, device=dev)),
                 ("correction", lambda: corr.compare_corrections(host, k=10, device=dev))]
        for name, fn in steps:
            times[name], _ = _timed(fn, dev)
            print(json.dumps({"partial": name, "seconds": round(times[name], 2)}), flush=True)
    return dict(n=a.report_n, d=a.d, how=how, steps=times, total_s=sum(times.values()))


def _run_tests(timeout: float) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-k", "cuda", "-p", "no:cacheprovider", "--continue-on-collection-errors",
           "-W", "ignore::DeprecationWarning", os.path.join(ROOT, "tests")]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
        out = res.stdout + res.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return dict(seconds=timeout, summary=f"stopped after {timeout:.0f} s", failed=[], uncollected=[])
    last = [ln for ln in out.splitlines() if ln.strip()][-1:] or ["(no output)"]
    failed = [ln.split(" ", 1)[1].split(" - ")[0] for ln in out.splitlines() if ln.startswith("FAILED ")]
    uncollected = sorted({ln.split(" ", 1)[1].split(" - ")[0] for ln in out.splitlines() if ln.startswith("ERROR ")})
    return dict(seconds=time.perf_counter() - t, summary=last[0].strip("= "), failed=failed, uncollected=uncollected,
                code=res.returncode)


def _section(name: str, a, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--section", name, "--n", str(a.n), "--d", str(a.d), "--report-n",
           str(a.report_n), "--device", a.device, "--profile-n", str(a.profile_n), "--profile-dir", a.profile_dir,
           "--emulate-n", str(a.emulate_n)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, timeout), env=env)
    except subprocess.TimeoutExpired as e:
        partial = [json.loads(ln) for ln in (e.stdout or b"").decode(errors="replace").splitlines()
                   if ln.startswith("{\"partial\"")] if e.stdout else []
        return dict(error=f"did not finish within {timeout:.0f} s", partial=partial)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines or "partial" in json.loads(lines[-1]):
        tail = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        return dict(error=f"failed: {tail}")
    return json.loads(lines[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=360.0, help="seconds for the whole run")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--report-n", type=int, default=1_000_000)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile-dir", default="", help="write profiles of the search and the shared graph here")
    ap.add_argument("--profile-n", type=int, default=200_000, help="rows of the profiled search (the graph: half)")
    ap.add_argument("--emulate-n", type=int, default=20_000,
                    help="rows of the entries-within-the-bound emulation without a device")
    ap.add_argument("--skip", default="",
                    help="comma-separated sections to skip (tests, knn, isotropy, roundtrips, split, entries, profile, "
                         "report)")
    ap.add_argument("--section", help=argparse.SUPPRESS)
    a = ap.parse_args()
    import torch

    dev = torch.device(a.device)
    if a.section:
        fn = {"knn": section_knn, "isotropy": section_isotropy, "roundtrips": section_roundtrips,
              "split": section_split, "entries": section_entries, "profile": section_profile,
              "report": section_report}[a.section]
        print(json.dumps(fn(a, dev)), flush=True)
        return 0
    if dev.type == "cuda" and not torch.cuda.is_available():
        print(f"bench-gpu: torch {torch.__version__} sees no CUDA device on this machine: no device lent; the GPU "
              f"figures are not measured. The entries within each product's bound, emulated on the CPU "
              f"({a.emulate_n:,} x {a.d} clustered rows):", flush=True)
        a.device, started = "cpu", time.perf_counter()
        res = {"entries": _section("entries", a, 600)}
        _summary(res, time.perf_counter() - started, lent=False)
        return 0
    started = time.perf_counter()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (dry run)"
    print(f"bench-gpu on {name}, torch {torch.__version__}, budget {a.budget:.0f} s", flush=True)
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    res = {}
    if "tests" not in skip:
        res["tests"] = _run_tests(CAPS["tests"])
        t = res["tests"]
        print(f"GPU tests (pytest -k cuda): {t['summary']} in {t['seconds']:.0f} s"
              + (f"; failed: {', '.join(t['failed'])}" if t["failed"] else "")
              + (f"; not importable here: {', '.join(t['uncollected'])}" if t["uncollected"] else ""), flush=True)
    for sec in ("knn", "isotropy", "roundtrips", "split", "entries", "profile", "report"):
        if sec in skip or (sec == "profile" and not a.profile_dir):
            continue
        left = a.budget - (time.perf_counter() - started)
        cap = left - 5 if sec == "report" else min(CAPS[sec], left - 5)
        if cap < 10:
            res[sec] = dict(error="not run: no time left in the budget")
            continue
        res[sec] = _section(sec, a, cap)
        print(f"{sec}: {json.dumps(res[sec])}", flush=True)
    _summary(res, time.perf_counter() - started)
    failed = res.get("tests", {}).get("failed")
    return 1 if failed else 0


def _summary(res: dict, seconds: float, lent: bool = True) -> None:
    rows = []
    if not lent:
        rows += [(figure, "no device lent", "", target, "")
                 for figure, target in (("exact k-NN 1,000,000 x 768 vs plain torch TF32 + topk", ">= 1.0x, <= 10 s"),
                                        ("isotropy 1,000,000 x 768 and its 200-replicate bootstrap", "<= 1 s"),
                                        ("intrinsic report 1,000,000 x 768", "<= 5 min"),
                                        ("search on split products (tf32x3) vs one TF32 pass", "same lists"))]
    if "tests" in res:
        t = res["tests"]
        rows.append(("GPU tests (pytest -k cuda)", t["summary"], "", "all pass", "yes" if not t["failed"] else "NO"))
    k = res.get("knn", {})
    if "knn_s" in k:
        rows.append((f"exact k-NN {k['n']:,} x {k['d']}, knn()", f"{k['knn_s']:.1f} s",
                     f"{k['plain_s'] / k['knn_s']:.2f} x torch", f"<= {TARGETS['knn']:.0f} s",
                     "yes" if k["knn_s"] <= TARGETS["knn"] else "no"))
        rows.append(("  the search alone", f"{k['search_s']:.1f} s", f"{k['plain_s'] / k['search_s']:.2f} x torch",
                     "", ""))
        rows.append(("  the search, bf16 candidates", f"{k['search_bf16_s']:.1f} s",
                     f"{k['plain_s'] / k['search_bf16_s']:.2f} x torch", "same lists",
                     "yes" if k["bf16_same"] else "NO"))
        rows.append(("  plain torch TF32 + topk", f"{k['plain_s']:.1f} s", "1.00", "", ""))
        rows.append(("  lists = float64 (1,000 rows)", f"{k['exact_rows']:.2%}", f"path {k['path'].get('product')}",
                     "100%", "yes" if k["exact_rows"] == 1.0 else "NO"))
    elif "knn" in res:
        rows.append(("exact k-NN", res["knn"].get("error", "?"), "", "", ""))
    i = res.get("isotropy", {})
    if "iso_s" in i:
        rows.append((f"isotropy {i['n']:,} x {i['d']}, no CI", f"{i['iso_s']:.2f} s",
                     f"{i['plain_s'] / i['iso_s']:.2f} x torch", f"<= {TARGETS['isotropy']:.0f} s",
                     "yes" if i["iso_s"] <= TARGETS["isotropy"] else "no"))
        rows.append(("  with the 200-replicate bootstrap", f"{i['iso_boot_s']:.2f} s",
                     f"{i['plain_s'] / i['iso_boot_s']:.2f} x torch", f"<= {TARGETS['isotropy']:.0f} s",
                     "yes" if i["iso_boot_s"] <= TARGETS["isotropy"] else "no"))
        rows.append(("  plain torch covariance + eigvalsh", f"{i['plain_s']:.2f} s", "1.00", "", ""))
        for count, v in i.get("streams", {}).items():
            rows.append((f"  bootstrap on {count} CUDA streams", f"{v['seconds']:.2f} s",
                         f"{i['plain_s'] / v['seconds']:.2f} x torch", "same intervals", "yes" if v["same"] else "NO"))
    elif "isotropy" in res:
        rows.append(("isotropy", res["isotropy"].get("error", "?"), "", "", ""))
    r = res.get("roundtrips", {})
    if "boot10" in r and not r.get("cuda", True):
        rows.append(("host round trips", "not measured (no GPU: a dry run)", "", "", ""))
    elif "boot10" in r:
        grows = r["boot40"][0] > r["boot10"][0]
        rows.append(("bootstrap DtoH copies (10 / 40 reps)", f"{r['boot10'][0]} / {r['boot40'][0]}",
                     "grows with reps" if grows else "constant", "constant", "no" if grows else "yes"))
        rows.append(("Procrustes: device kernels, DtoH", f"{r['procrustes'][1]}, {r['procrustes'][0]}",
                     "on the host" if r["procrustes"][1] == 0 else "on the device", "on the device",
                     "no" if r["procrustes"][1] == 0 else "yes"))
    elif "roundtrips" in res:
        rows.append(("host round trips", res["roundtrips"].get("error", "?"), "", "", ""))
    x = res.get("split", {})
    if "tf32_s" in x:
        rows.append((f"search {x['n']:,} x {x['d']}: one TF32 pass / split (tf32x3)",
                     f"{x['tf32_s']:.1f} s / {x['tf32x3_s']:.1f} s", f"{x['tf32_s'] / x['tf32x3_s']:.2f} x",
                     "same lists", "yes" if x["same"] else "NO"))
        rows.append(("  the TF32 search on a held set (one upload)", f"{x['resident_s']:.1f} s",
                     f"{x['tf32_s'] / x['resident_s']:.2f} x", "same lists", "yes" if x["resident_same"] else "NO"))
    elif "split" in res:
        rows.append(("split products", res["split"].get("error", "?"), "", "", ""))
    e = res.get("entries", {})
    for name, v in ((k_, e[k_]) for k_ in ("clustered", "tight") if k_ in e):
        for prod, c in v["products"].items():
            rows.append((f"entries within B / 2B of the k-th, {name} {v['n']:,} x {v['d']}, {prod}",
                         f"{c['within_b']:.2f} / {c['within_2b']:.2f}", f"B = {c['bound']:.2e}", f"k = {v['k']}", ""))
    if "error" in e:
        rows.append(("entries within the bound", e["error"], "", "", ""))
    f = res.get("profile", {})
    for name, v in f.items():
        if name == "sweep_cols":
            rows.append((f"shared graph {v['n']:,} rows: whole rows / column tiles",
                         " / ".join(f"{x:.1f} s" for x in v["seconds"].values()), ", ".join(v["seconds"]),
                         "same lists", "yes" if v["same"] else "NO"))
        elif isinstance(v, dict):
            rows.append((f"profile: {name} {v['n']:,} rows", f"{v['seconds']:.1f} s", "tables in --profile-dir", "",
                         ""))
        else:
            rows.append(("profile", str(v), "", "", ""))
    p = res.get("report", {})
    if "total_s" in p:
        rows.append((f"intrinsic report {p['n']:,} x {p['d']}", f"{p['total_s']:.0f} s", "", f"<= {TARGETS['report']:.0f} s",
                     "yes" if p["total_s"] <= TARGETS["report"] else "no"))
        rows += [(f"  {s}", f"{v:.1f} s", "", "", "") for s, v in p["steps"].items()]
    elif "report" in res:
        done = ", ".join(f"{x['partial']} {x['seconds']:.0f}" for x in res["report"].get("partial", []))
        rows.append(("intrinsic report", res["report"].get("error", "?"), done, f"<= {TARGETS['report']:.0f} s", "no"))
    widths = [max(len(str(row[c])) for row in rows + [("figure", "value", "vs baseline", "target", "met")])
              for c in range(5)]
    print(f"\nsummary ({seconds:.0f} s in all)")
    for row in [("figure", "value", "vs baseline", "target", "met")] + rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())
    if "how" in p:
        print(f"intrinsic report: the chapters' {p['how']}")


if __name__ == "__main__":
    sys.exit(main())
