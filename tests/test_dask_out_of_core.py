"""Dask with out-of-core input (issue 27, part 4): the cluster's tasks read a set larger than the memory budget
by path, block by block, the numbers are those of the set in memory, and the runner process never holds it."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("distributed")
zarr = pytest.importorskip("zarr")

from embeval_report.cli import main  # noqa: E402
from embeval_report.context import CacheFolder, ComputeContext  # noqa: E402
from embeval_report.kernels import dask_engine as de  # noqa: E402
from embeval_report.kernels import graph_cache, knn  # noqa: E402

D = 2048
BIG, TINY = 4608, 300        # 36 MiB of float32 rows (two row blocks of the cluster's graph), and 2.3 MiB
BUDGET = 16 * 2**20          # the set is over twice the budget
ZARR_ROWS = 128              # rows per Zarr chunk (1 MiB)


def write_set(folder, n, seed=0):
    """A Zarr store of ``n`` float32 rows of ``D`` (one in a hundred shifted: the anomalies), a file of ids, a
    metadata table labelling the anomalies, and the manifest naming the three."""
    folder.mkdir()
    rng = np.random.default_rng(seed)
    store = zarr.create_array(str(folder / "vectors.zarr"), shape=(n, D), chunks=(ZARR_ROWS, D), dtype="f4")
    labels = np.zeros(n, dtype=int)
    labels[rng.choice(n, max(3, n // 100), replace=False)] = 1
    for s in range(0, n, 1024):
        block = rng.standard_normal((min(1024, n - s), D), dtype=np.float32)
        block[labels[s:s + 1024] == 1] += 0.5
        store[s:s + len(block)] = block
    ids = [f"e{i}" for i in range(n)]
    (folder / "ids.txt").write_text("\n".join(ids) + "\n")
    (folder / "meta.csv").write_text("id,is_anomaly\n" + "".join(f"{i},{y}\n" for i, y in zip(ids, labels)))
    (folder / "m.yaml").write_text("name: zarr\nvectors: {zarr: vectors.zarr}\nids: ids.txt\nmetadata: meta.csv\n")
    return folder / "m.yaml"


def _args(manifest, out, *extra):
    """``embeval-report run`` of the anomaly chapter (it reads the shared graph)."""
    return ["run", str(manifest), "--out", str(out), "--chapters", "anomaly", "--formats", "html", "--device", "cpu",
            *extra]


def _read(out):
    return json.loads((out / "run.json").read_text()), json.loads((out / "metrics.json").read_text())["chapters"]


#: the runs given as JSON, one after another in this process; exit 1 at the first that fails
IN_TURN = """
import json, sys
from embeval_report.cli import main
for argv in json.loads(sys.argv[1]):
    if main(argv) != 0:
        sys.exit(1)
"""


def runs_in_one_process(*runs):
    """The runs (manifest, out, *extra) one after another in a process of their own: the peak resident memory in
    run.json is that process's so far (ru_maxrss), so the first run's is its own and a later run's is at least
    the earlier runs' (a runner that holds a larger set still adds all of it); the package is imported once.
    Returns each run's run.json and metrics.json's chapters."""
    done = subprocess.run([sys.executable, "-c", IN_TURN, json.dumps([_args(*r) for r in runs])],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return [_read(r[1]) for r in runs]


def run(manifest, out, *extra):
    """A run in this process (the reference numbers)."""
    assert main(_args(manifest, out, *extra)) == 0
    return _read(out)


def test_a_zarr_set_larger_than_the_budget_runs_through_dask_without_the_runner_holding_it(tmp_path):
    """A 36 MiB Zarr set under a 16 MiB budget through --dask (a 2-worker LocalCluster; the workers read the
    prepared file's row blocks by path): every number of metrics.json equals a local run's on the set in memory
    (the default budget), and the runner's peak resident memory is within half the set of the same run's on a
    300-row set (a runner holding the set, even through mapped pages, adds all of it)."""
    big, tiny = write_set(tmp_path / "big", BIG), write_set(tmp_path / "tiny", TINY)
    size = BIG * D * 4
    assert size > 2 * BUDGET
    started = time.perf_counter()
    dask = ["--dask", "--memory-budget", str(BUDGET)]
    (small_run, _), (big_run, big_metrics) = runs_in_one_process((tiny, tmp_path / "tiny-dask", *dask),
                                                                 (big, tmp_path / "big-dask", *dask))
    local_run, local_metrics = run(big, tmp_path / "big-local")  # the reference numbers
    seconds = time.perf_counter() - started
    assert big_run["engine"] == {"name": "dask", "scheduler": "LocalCluster", "workers": 2}
    assert big_run["neighbour_graph"]["engine"] == "dask" and big_run["neighbour_graph"]["source"] == "computed"
    assert big_run["memory_budget"] == BUDGET and (big_run["n"], big_run["d"]) == (BIG, D)
    assert local_run["engine"] == {"name": "local"}
    assert big_metrics["anomaly"]["status"] == "ok" and big_metrics["anomaly"]["metrics"]
    assert big_metrics == local_metrics  # every number of every chapter
    peaks = {name: r["runner_peak_rss_bytes"] for name, r in (("tiny", small_run), ("big", big_run))}
    grew = peaks["big"] - peaks["tiny"]
    print(f"3 runs in {seconds:.0f} s; runner peak RSS (MiB): "
          + ", ".join(f"{name} {peak / 2**20:.0f}" for name, peak in peaks.items())
          + f"; big - tiny {grew / 2**20:.1f} for a set of {size / 2**20:.0f}")
    assert min(peaks.values()) > 0
    assert grew < size / 2, grew  # ids, metadata and the allocator's pools grow with the rows; the set is not held


# ------------------------------------------------------------------------- rows the workers cannot read


@pytest.fixture(scope="module")
def client():
    c = de.connect(None, workers=2)
    yield c
    c.close()


def test_rows_the_workers_cannot_read_are_sent_one_block_at_a_time(client, tmp_path, monkeypatch):
    """When a worker cannot open the prepared file, the runner sends its rows one block at a time (never a copy of
    the whole set), the graph is the local kernel's, and the blocks are released after."""
    from embeval_report.report.shared_graph import _dask_graph

    X = np.random.default_rng(4).standard_normal((9000, 16)).astype(np.float32)
    np.save(tmp_path / "vectors.npy", X)
    M = np.load(tmp_path / "vectors.npy", mmap_mode="r")
    sent = []
    scatter = client.scatter
    monkeypatch.setattr(client, "scatter", lambda data, **kw: (sent.append(np.shape(data)), scatter(data, **kw))[1])
    monkeypatch.setattr(de, "readable", lambda source, c: False)
    with ComputeContext(graph_cache=CacheFolder(tmp_path / "graphs")):
        graph_cache.clear_memory()
        _dask_graph(M, 10, client)
        got = graph_cache.cached_graph(np.asarray(M), 10, "cosine", True, compute=None)  # stored: not computed here
    assert sent == [(de.BLOCK_ROWS, 16), (de.BLOCK_ROWS, 16), (9000 - 2 * de.BLOCK_ROWS, 16)]
    assert not de._engine["shared"]
    graph_cache.clear_memory()
    want = knn(X, 10, device="cpu", desc=None)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
